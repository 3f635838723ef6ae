//! The parent-mode transport of `kubectl clusternet`: a loopback plain-HTTP reverse proxy that the
//! real kubectl talks to. Every request is sent to the parent apiserver with the user's parent
//! credentials (a `kube::Client`), its path rewritten towards the shadow API exactly as upstream's
//! client-go wrapper does inside kubectl (cli.md §2). Responses, watches included, are streamed
//! back unchanged.

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Request, Response, StatusCode};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use crate::plugin::rewrite::rewrite_path;

type BoxError = Box<dyn std::error::Error + Send + Sync>;
/// Response body: the parent's streaming body, or a small generated Status.
pub type ProxyBody = UnsyncBoxBody<Bytes, BoxError>;

/// What every connection handler shares.
pub struct Proxy {
    client: kube::Client,
    /// Secret first path segment of the generated kubeconfig's server URL; requests without it are
    /// refused so the parent credentials are not lent to other local users. A path rather than a
    /// bearer token, because client-go sends no credentials over plain HTTP.
    session_token: String,
}

impl Proxy {
    pub fn new(client: kube::Client, session_token: String) -> Self {
        Self {
            client,
            session_token,
        }
    }
}

/// Accepts connections until the runtime is shut down.
pub async fn serve(listener: TcpListener, proxy: Arc<Proxy>) {
    serve_with(listener, move |req| {
        let proxy = Arc::clone(&proxy);
        async move { handle(&proxy, req).await }
    })
    .await
}

/// Accepts HTTP/1 connections on `listener` until the runtime is shut down, answering each
/// request with `handler` (the kubectl proxy's and the dashboard's loop).
pub async fn serve_with<H, F>(listener: TcpListener, handler: H)
where
    H: Fn(Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: std::future::Future<Output = Response<ProxyBody>> + Send + 'static,
{
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                tracing::warn!(error = %e, "accepting a local connection failed");
                continue;
            }
        };
        let handler = handler.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let answer = handler(req);
                async move { Ok::<_, Infallible>(answer.await) }
            });
            if let Err(e) = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await
            {
                tracing::debug!(error = %e, "a local connection ended with an error");
            }
        });
    }
}

async fn handle(proxy: &Proxy, req: Request<Incoming>) -> Response<ProxyBody> {
    let full = req.uri().path_and_query().map_or("/", |pq| pq.as_str());
    let Some(original) = strip_session(full, &proxy.session_token) else {
        return status_response(
            StatusCode::UNAUTHORIZED,
            "Unauthorized",
            "the kubectl clusternet proxy only serves the kubectl it started",
        );
    };
    let original = match original {
        "" => "/".to_string(),
        q if q.starts_with('?') => format!("/{q}"),
        path => path.to_string(),
    };
    if is_upgrade(req.headers()) {
        return status_response(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            "exec, attach and port-forward are not served through the shadow API: run them \
             against a child cluster with --cluster-id and --child-kubeconfig",
        );
    }

    let (parts, body) = req.into_parts();
    let body = match body.collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) => {
            return status_response(
                StatusCode::BAD_REQUEST,
                "BadRequest",
                &format!("cannot read the request body: {e}"),
            );
        }
    };
    // kube prepends the parent URL's path prefix itself, so the request is rewritten without it
    let rewritten = rewrite_path("", &original);
    tracing::debug!(method = %parts.method, from = %original, to = %rewritten, "forwarding to the parent");
    let uri = match rewritten.parse::<http::Uri>() {
        Ok(uri) => uri,
        Err(e) => {
            return status_response(
                StatusCode::BAD_REQUEST,
                "BadRequest",
                &format!("invalid request path {rewritten:?}: {e}"),
            );
        }
    };

    let mut outgoing = Request::new(kube::client::Body::from(body));
    *outgoing.method_mut() = parts.method;
    *outgoing.uri_mut() = uri;
    *outgoing.headers_mut() = request_headers(&parts.headers);

    match proxy.client.send(outgoing).await {
        Ok(response) => {
            let (mut parts, body) = response.into_parts();
            parts.headers = response_headers(&parts.headers);
            Response::from_parts(parts, body.map_err(BoxError::from).boxed_unsync())
        }
        Err(e) => status_response(
            StatusCode::BAD_GATEWAY,
            "InternalError",
            &format!("kubectl clusternet: cannot reach the parent apiserver: {e}"),
        ),
    }
}

/// Strips the leading `/<session token>` path segment; `None` when the request does not carry it.
/// The segment is compared in constant time.
pub fn strip_session<'a>(path_and_query: &'a str, token: &str) -> Option<&'a str> {
    let rest = path_and_query.strip_prefix('/')?;
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (segment, rest) = rest.split_at(end);
    let (a, b) = (segment.as_bytes(), token.as_bytes());
    let equal = a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0;
    equal.then_some(rest)
}

/// Whether kubectl asks for a protocol upgrade (exec, attach, port-forward over SPDY/WebSocket).
pub fn is_upgrade(headers: &HeaderMap) -> bool {
    headers.contains_key(header::UPGRADE) || connection_tokens(headers).any(|t| t == "upgrade")
}

fn connection_tokens(headers: &HeaderMap) -> impl Iterator<Item = String> + '_ {
    headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|t| t.trim().to_ascii_lowercase())
        .filter(|t| !t.is_empty())
}

/// RFC 9110 §7.6.1 hop-by-hop fields, which a proxy must not forward.
const HOP_BY_HOP: &[HeaderName] = &[
    header::CONNECTION,
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

fn without_hop_by_hop(headers: &HeaderMap, also: &[HeaderName]) -> HeaderMap {
    let listed: Vec<String> = connection_tokens(headers).collect();
    let mut out = HeaderMap::with_capacity(headers.len());
    for (name, value) in headers {
        let drop = HOP_BY_HOP.contains(name)
            || also.contains(name)
            || name.as_str() == "keep-alive"
            || listed.iter().any(|t| t == name.as_str());
        if !drop {
            out.append(name.clone(), value.clone());
        }
    }
    out
}

/// Headers sent to the parent: kubectl's own, minus hop-by-hop fields, `Host` (the parent's
/// authority is set by the client), `Authorization` (kube adds the parent credentials) and
/// `Content-Length` (recomputed from the buffered body).
pub fn request_headers(headers: &HeaderMap) -> HeaderMap {
    without_hop_by_hop(
        headers,
        &[header::HOST, header::AUTHORIZATION, header::CONTENT_LENGTH],
    )
}

/// Headers sent back to kubectl: the parent's, minus hop-by-hop fields (the framing is redone).
pub fn response_headers(headers: &HeaderMap) -> HeaderMap {
    without_hop_by_hop(headers, &[])
}

/// A `meta/v1 Status` failure, which kubectl prints as `Error from server (<reason>): <message>`.
pub fn status_response(code: StatusCode, reason: &str, message: &str) -> Response<ProxyBody> {
    let status = serde_json::json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code.as_u16(),
    });
    let body = Full::new(Bytes::from(status.to_string()))
        .map_err(|never| match never {})
        .boxed_unsync();
    let mut response = Response::new(body);
    *response.status_mut() = code;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.append(
                HeaderName::from_bytes(k.as_bytes()).expect("name"),
                HeaderValue::from_str(v).expect("value"),
            );
        }
        map
    }

    #[test]
    fn upgrade_requests_are_recognised() {
        assert!(is_upgrade(&headers(&[
            ("connection", "Upgrade"),
            ("upgrade", "SPDY/3.1")
        ])));
        assert!(is_upgrade(&headers(&[(
            "connection",
            "keep-alive, upgrade"
        )])));
        assert!(!is_upgrade(&headers(&[("connection", "keep-alive")])));
        assert!(!is_upgrade(&headers(&[("accept", "application/json")])));
    }

    #[test]
    fn request_headers_keep_content_negotiation_and_drop_hop_by_hop() {
        let out = request_headers(&headers(&[
            ("accept", "application/json;as=Table;v=v1;g=meta.k8s.io"),
            ("content-type", "application/apply-patch+yaml"),
            ("user-agent", "kubectl/v1.36.3"),
            ("kubectl-command", "kubectl get"),
            ("host", "127.0.0.1:4242"),
            ("authorization", "Bearer stray"),
            ("content-length", "12"),
            ("connection", "keep-alive, x-private"),
            ("x-private", "1"),
            ("keep-alive", "timeout=5"),
            ("transfer-encoding", "chunked"),
            ("te", "trailers"),
        ]));
        let names: Vec<&str> = out.keys().map(|k| k.as_str()).collect();
        assert_eq!(
            names,
            ["accept", "content-type", "user-agent", "kubectl-command"]
        );
    }

    #[test]
    fn response_headers_keep_everything_end_to_end() {
        let out = response_headers(&headers(&[
            ("content-type", "application/json"),
            ("content-length", "3"),
            ("audit-id", "x"),
            ("transfer-encoding", "chunked"),
            ("connection", "close"),
        ]));
        let names: Vec<&str> = out.keys().map(|k| k.as_str()).collect();
        assert_eq!(names, ["content-type", "content-length", "audit-id"]);
    }

    #[test]
    fn session_segment_is_required_and_stripped() {
        assert_eq!(
            strip_session("/abc/api/v1/pods?watch=1", "abc"),
            Some("/api/v1/pods?watch=1")
        );
        assert_eq!(strip_session("/abc", "abc"), Some(""));
        assert_eq!(
            strip_session("/abc?timeout=32s", "abc"),
            Some("?timeout=32s")
        );
        assert_eq!(strip_session("/abd/api", "abc"), None);
        assert_eq!(strip_session("/ab/api", "abc"), None);
        assert_eq!(strip_session("/abcd/api", "abc"), None);
        assert_eq!(strip_session("/api/v1/pods", "abc"), None);
        assert_eq!(strip_session("/", "abc"), None);
    }

    #[tokio::test]
    async fn status_body_is_a_kubernetes_status() {
        let response = status_response(StatusCode::BAD_REQUEST, "BadRequest", "nope");
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
        let bytes = response
            .into_body()
            .collect()
            .await
            .expect("body")
            .to_bytes();
        let value: serde_json::Value = serde_json::from_slice(&bytes).expect("json");
        assert_eq!(value["kind"], "Status");
        assert_eq!(value["reason"], "BadRequest");
        assert_eq!(value["message"], "nope");
        assert_eq!(value["code"], 400);
    }
}
