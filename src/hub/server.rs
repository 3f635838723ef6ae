//! The hub's HTTPS front: a tokio-rustls accept loop that verifies the front proxy's client
//! certificate, authenticates every request, and hands it to what the routing table
//! ([`super::routes`]) names. Upgrades (the agents' tunnels and proxied exec/port-forward) and
//! streamed shadow watches get the request as it came; every other request's body is read first,
//! bounded by Kubernetes' own limit.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder;
use serde_json::Value;
use tokio::net::TcpListener;
use tokio_rustls::rustls::ServerConfig;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use super::Hub;
use super::body::{HubBody, boxed, full};
use super::discovery;
use super::routes::{Document, Endpoint, GROUPS, resolve};
use super::status::ApiError;

/// Kubernetes' own limit on request bodies (3 MiB).
pub const MAX_REQUEST_BODY: usize = 3 * 1024 * 1024;

/// What the TLS handshake told us about the caller.
#[derive(Clone, Debug)]
pub struct ConnInfo {
    pub peer: SocketAddr,
    /// Common name of a verified client certificate (the front proxy's).
    pub client_cn: Option<String>,
}

pub fn serve(
    hub: Arc<Hub>,
    listener: TcpListener,
    tls: ServerConfig,
    shutdown: CancellationToken,
) -> std::io::Result<SocketAddr> {
    crate::runtime::serving::accept_tls(listener, tls, shutdown, move |tls, peer| {
        let hub = hub.clone();
        async move {
            let client_cn = tls
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|c| c.first())
                .and_then(super::authn::common_name);
            let conn = ConnInfo { peer, client_cn };
            let svc = hyper::service::service_fn(move |req| {
                let hub = hub.clone();
                let conn = conn.clone();
                async move { Ok::<_, Infallible>(handle(hub, conn, req).await) }
            });
            if let Err(e) = Builder::new(TokioExecutor::new())
                .serve_connection_with_upgrades(TokioIo::new(tls), svc)
                .await
            {
                debug!(%peer, error = %e, "connection ended with an error");
            }
        }
    })
}

async fn handle(hub: Arc<Hub>, conn: ConnInfo, req: Request<Incoming>) -> Response<HubBody> {
    let started = Instant::now();
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let resp = route(&hub, &conn, req).await;
    let code = resp.status().as_u16();
    metrics::counter!("clusternet_hub_requests_total", "code" => code.to_string(), "method" => method.to_string())
        .increment(1);
    metrics::histogram!("clusternet_hub_request_duration_seconds")
        .record(started.elapsed().as_secs_f64());
    debug!(%method, %path, code, peer = %conn.peer, "served");
    resp
}

async fn route(hub: &Arc<Hub>, conn: &ConnInfo, req: Request<Incoming>) -> Response<HubBody> {
    // the request line kept apart, so what it resolves to outlives the request's body
    let (path, query) = (
        req.uri().path().to_string(),
        req.uri().query().map(str::to_string),
    );
    let endpoint = resolve(req.method(), &path, query.as_deref());
    if endpoint == Endpoint::Health {
        return Response::new(full("ok"));
    }
    let user = match hub.authenticate(conn, req.headers()).await {
        Ok(u) => u,
        Err(e) => return e.into_response(),
    };
    // streamed both ways: the handler gets the request as it came
    match endpoint {
        Endpoint::Sockets(rest) => {
            let rest = rest.to_string();
            return super::proxies::handle(hub, &user, req, &rest).await;
        }
        Endpoint::ShadowWatch(tail) => {
            let tail = tail.to_string();
            return super::shadow::watch(hub, &user, &tail, req).await;
        }
        _ => {}
    }
    // bounded body: a huge body is a 413, not memory
    let (parts, body) = req.into_parts();
    let body = match Limited::new(body, MAX_REQUEST_BODY).collect().await {
        Ok(c) => c.to_bytes(),
        Err(e) => {
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some()
            {
                return ApiError::too_large(MAX_REQUEST_BODY).into_response();
            }
            return ApiError::bad_request(format!("reading the request body: {e}")).into_response();
        }
    };
    let answer = match endpoint {
        Endpoint::Shadow(tail) => {
            let req = super::shadow::ShadowRequest {
                method: parts.method,
                tail: tail.to_string(),
                query: query.unwrap_or_default(),
                headers: parts.headers,
                body,
            };
            super::shadow::handle(hub, &user, req).await
        }
        Endpoint::Placement(tail) => {
            super::placement::handle(hub, &user, &parts.method, tail, &parts.headers, &body).await
        }
        Endpoint::Dashboard(page) => {
            let query = form_urlencoded::parse(query.unwrap_or_default().as_bytes())
                .into_owned()
                .collect();
            let page = super::dashboard::handle(hub, &user, &parts.method, page, &query).await;
            return page.map(boxed);
        }
        Endpoint::Document(doc) => document(hub, &doc).map(|v| (StatusCode::OK, v)),
        Endpoint::DocumentMethod => Err(ApiError::method_not_supported(format!(
            "{} is not supported on {path}: discovery documents are read with GET",
            parts.method
        ))),
        // answered above
        Endpoint::Health | Endpoint::Sockets(_) | Endpoint::ShadowWatch(_) | Endpoint::NotFound => {
            Err(ApiError::not_found_path(&path))
        }
    };
    match answer {
        Ok((code, value)) => json(code, &value),
        Err(e) => e.into_response(),
    }
}

fn json(code: StatusCode, value: &Value) -> Response<HubBody> {
    let body = serde_json::to_vec(value).unwrap_or_default();
    let mut resp = Response::new(full(body));
    *resp.status_mut() = code;
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    resp
}

/// Discovery and OpenAPI documents describe the API, not data: every authenticated caller may
/// read them (the parent grants the same to `system:authenticated` through `system:discovery`,
/// and its aggregator fetches them with an identity that has no groups). The shadow group's
/// are there only when the shadow API is.
fn document(hub: &Hub, doc: &Document<'_>) -> Result<Value, ApiError> {
    let shadow = hub.shadow.is_some();
    let resources = |group: &str| match group {
        discovery::SHADOW_GROUP => hub.shadow.as_ref().map(|s| s.discovery()),
        crate::apis::proxies::GROUP => Some(Ok(discovery::proxies_resources())),
        crate::apis::placement::GROUP => Some(Ok(discovery::placement_resources())),
        crate::apis::dashboard::GROUP => Some(Ok(discovery::dashboard_resources())),
        _ => None,
    };
    match doc {
        Document::GroupList => Ok(discovery::api_group_list(shadow)),
        Document::Group(g) if *g == discovery::SHADOW_GROUP && !shadow => {
            Err(ApiError::not_found_path("/apis/shadow"))
        }
        Document::Group(g) => {
            let version = GROUPS.iter().find(|(group, _)| group == g).map(|(_, v)| *v);
            Ok(discovery::api_group(g, version.unwrap_or_default()))
        }
        Document::Resources(g) => {
            resources(g).unwrap_or_else(|| Err(ApiError::not_found_path(&format!("/apis/{g}"))))
        }
        Document::OpenApiV2 => Ok(discovery::openapi_v2()),
        Document::OpenApiV3 => Ok(discovery::openapi_v3_index(shadow)),
        Document::OpenApiV3Group(group, version) => match (*group, *version) {
            (crate::apis::proxies::GROUP, crate::apis::proxies::VERSION) => {
                Ok(discovery::openapi_v3_proxies())
            }
            (discovery::SHADOW_GROUP, discovery::SHADOW_VERSION) if shadow => {
                Ok(discovery::openapi_v3_shadow())
            }
            (crate::apis::placement::GROUP, crate::apis::placement::VERSION) => {
                Ok(discovery::openapi_v3_placement())
            }
            _ => Err(ApiError::not_found_path(&format!(
                "/openapi/v3/apis/{group}/{version}"
            ))),
        },
    }
}
