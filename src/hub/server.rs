//! The hub's HTTPS front: a tokio-rustls accept loop that verifies the front proxy's client
//! certificate, authenticates every request, and routes it. Upgrades (the agents' tunnels and
//! proxied exec/port-forward) and streamed shadow watches need the raw hyper request and
//! response, so they are handled here before warp; discovery, OpenAPI and the shadow API's
//! request/response verbs are warp routes.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder;
use serde_json::Value;
use tokio::net::TcpListener;
use tokio_rustls::rustls::ServerConfig;
use tokio_util::sync::CancellationToken;
use tower::Service;
use tracing::debug;
use warp::Filter;
use warp::reply::Reply;

use super::Hub;
use super::authn::UserInfo;
use super::body::{HubBody, boxed, full};
use super::discovery;
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

/// The authenticated caller, handed to warp routes through request extensions.
#[derive(Clone, Debug)]
pub struct Caller(pub UserInfo);

pub fn serve(
    hub: Arc<Hub>,
    listener: TcpListener,
    tls: ServerConfig,
    shutdown: CancellationToken,
) -> std::io::Result<SocketAddr> {
    let routes = routes(hub.clone());
    crate::runtime::serving::accept_tls(listener, tls, shutdown, move |tls, peer| {
        let hub = hub.clone();
        let routes = routes.clone();
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
                let routes = routes.clone();
                async move { Ok::<_, Infallible>(handle(hub, conn, routes, req).await) }
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

type Routes = warp::filters::BoxedFilter<(warp::reply::Response,)>;

async fn handle(
    hub: Arc<Hub>,
    conn: ConnInfo,
    routes: Routes,
    req: Request<Incoming>,
) -> Response<HubBody> {
    let started = Instant::now();
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let resp = route(&hub, &conn, routes, req).await;
    let code = resp.status().as_u16();
    metrics::counter!("clusternet_hub_requests_total", "code" => code.to_string(), "method" => method.to_string())
        .increment(1);
    metrics::histogram!("clusternet_hub_request_duration_seconds")
        .record(started.elapsed().as_secs_f64());
    debug!(%method, %path, code, peer = %conn.peer, "served");
    resp
}

async fn route(
    hub: &Arc<Hub>,
    conn: &ConnInfo,
    routes: Routes,
    req: Request<Incoming>,
) -> Response<HubBody> {
    let path = req.uri().path();
    if matches!(path, "/healthz" | "/livez" | "/readyz") {
        return Response::new(full("ok"));
    }
    let user = match hub.authenticate(conn, req.headers()).await {
        Ok(u) => u,
        Err(e) => return e.into_response(),
    };
    if let Some(rest) = path.strip_prefix(crate::tunnel::server::SOCKETS_PATH_PREFIX) {
        let rest = rest.to_string();
        return super::proxies::handle(hub, &user, req, &rest).await;
    }
    if let Some(tail) = path.strip_prefix("/apis/shadow/v1alpha1/")
        && super::limits::is_watch(tail, req.uri().query())
    {
        let tail = tail.to_string();
        return super::shadow::watch(hub, &user, &tail, req).await;
    }
    // bounded body before warp: a huge body is a 413, not memory
    let (mut parts, body) = req.into_parts();
    let bytes = match Limited::new(body, MAX_REQUEST_BODY).collect().await {
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
    parts.extensions.insert(Caller(user));
    let req = Request::from_parts(parts, Full::new(bytes));
    let mut svc = warp::service(routes);
    match svc.call(req).await {
        Ok(resp) => resp.map(boxed),
        Err(never) => match never {},
    }
}

fn reply(code: StatusCode, value: &Value) -> warp::reply::Response {
    warp::reply::with_status(warp::reply::json(value), code).into_response()
}

fn reply_error(e: ApiError) -> warp::reply::Response {
    let code = StatusCode::from_u16(e.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    reply(code, &e.to_json())
}

/// Discovery and OpenAPI documents describe the API, not data: every authenticated caller may
/// read them (the parent grants the same to `system:authenticated` through `system:discovery`,
/// and its aggregator fetches them with an identity that has no groups).
/// (Every request reaching warp was authenticated before.)
fn discovery_reply(
    hub: &Hub,
    doc: impl FnOnce(&Hub) -> Result<Value, ApiError>,
) -> warp::reply::Response {
    match doc(hub) {
        Ok(v) => reply(StatusCode::OK, &v),
        Err(e) => reply_error(e),
    }
}

fn routes(hub: Arc<Hub>) -> Routes {
    let with_hub = {
        let hub = hub.clone();
        warp::any().map(move || hub.clone())
    };
    let get = || warp::get().or(warp::head()).unify();

    let apis = warp::path!("apis")
        .and(get())
        .and(with_hub.clone())
        .map(|hub: Arc<Hub>| {
            discovery_reply(&hub, |h| Ok(discovery::api_group_list(h.shadow.is_some())))
        });
    let shadow_group = warp::path!("apis" / "shadow")
        .and(get())
        .and(with_hub.clone())
        .map(|hub: Arc<Hub>| {
            discovery_reply(&hub, |h: &Hub| match &h.shadow {
                Some(_) => Ok(discovery::api_group(
                    discovery::SHADOW_GROUP,
                    discovery::SHADOW_VERSION,
                )),
                None => Err(ApiError::not_found_path("/apis/shadow")),
            })
        });
    let shadow_version = warp::path!("apis" / "shadow" / "v1alpha1")
        .and(get())
        .and(with_hub.clone())
        .map(|hub: Arc<Hub>| {
            discovery_reply(&hub, |h: &Hub| match &h.shadow {
                Some(s) => s.discovery(),
                None => Err(ApiError::not_found_path("/apis/shadow/v1alpha1")),
            })
        });
    let openapi_v2 = warp::path!("openapi" / "v2")
        .and(get())
        .and(with_hub.clone())
        .map(|hub: Arc<Hub>| discovery_reply(&hub, |_| Ok(discovery::openapi_v2())));
    let openapi_v3 = warp::path!("openapi" / "v3")
        .and(get())
        .and(with_hub.clone())
        .map(|hub: Arc<Hub>| {
            discovery_reply(&hub, |h: &Hub| {
                Ok(discovery::openapi_v3_index(h.shadow.is_some()))
            })
        });
    let openapi_v3_gv = warp::path!("openapi" / "v3" / "apis" / String / String)
        .and(get())
        .and(with_hub.clone())
        .map(|group: String, version: String, hub: Arc<Hub>| {
            discovery_reply(&hub, move |h: &Hub| {
                match (group.as_str(), version.as_str()) {
                    (crate::apis::proxies::GROUP, crate::apis::proxies::VERSION) => {
                        Ok(discovery::openapi_v3_proxies())
                    }
                    (discovery::SHADOW_GROUP, discovery::SHADOW_VERSION) if h.shadow.is_some() => {
                        Ok(discovery::openapi_v3_shadow())
                    }
                    (crate::apis::placement::GROUP, crate::apis::placement::VERSION) => {
                        Ok(discovery::openapi_v3_placement())
                    }
                    _ => Err(ApiError::not_found_path(&format!(
                        "/openapi/v3/apis/{group}/{version}"
                    ))),
                }
            })
        });
    let shadow_api = warp::path("apis")
        .and(warp::path("shadow"))
        .and(warp::path("v1alpha1"))
        .and(warp::path::tail())
        .and(warp::method())
        .and(warp::query::raw().or(warp::any().map(String::new)).unify())
        .and(warp::header::headers_cloned())
        .and(warp::body::bytes())
        .and(with_hub.clone())
        .and(warp::ext::get::<Caller>())
        .and_then(
            |tail: warp::path::Tail,
             method: Method,
             query: String,
             headers: http::HeaderMap,
             body: Bytes,
             hub: Arc<Hub>,
             caller: Caller| async move {
                let req = super::shadow::ShadowRequest {
                    method,
                    tail: tail.as_str().to_string(),
                    query,
                    headers,
                    body,
                };
                Ok::<_, Infallible>(match super::shadow::handle(&hub, &caller.0, req).await {
                    Ok((code, v)) => reply(code, &v),
                    Err(e) => reply_error(e),
                })
            },
        );
    // the discovery documents of a group the hub alone serves: `/apis/<group>` and
    // `/apis/<group>/<version>`
    let group_discovery = |group: &'static str, version: &'static str, resources: fn() -> Value| {
        let group_doc = warp::path("apis")
            .and(warp::path(group))
            .and(warp::path::end())
            .and(get())
            .and(with_hub.clone())
            .map(move |hub: Arc<Hub>| {
                discovery_reply(&hub, |_| Ok(discovery::api_group(group, version)))
            });
        let version_doc = warp::path("apis")
            .and(warp::path(group))
            .and(warp::path(version))
            .and(warp::path::end())
            .and(get())
            .and(with_hub.clone())
            .map(move |hub: Arc<Hub>| discovery_reply(&hub, |_| Ok(resources())));
        group_doc.or(version_doc).unify().boxed()
    };
    let proxies_discovery = group_discovery(
        crate::apis::proxies::GROUP,
        crate::apis::proxies::VERSION,
        discovery::proxies_resources,
    );
    let placement_discovery = group_discovery(
        crate::apis::placement::GROUP,
        crate::apis::placement::VERSION,
        discovery::placement_resources,
    );
    let dashboard_discovery = group_discovery(
        crate::apis::dashboard::GROUP,
        crate::apis::dashboard::VERSION,
        discovery::dashboard_resources,
    );
    let dashboard = warp::path("apis")
        .and(warp::path(crate::apis::dashboard::GROUP))
        .and(warp::path(crate::apis::dashboard::VERSION))
        .and(warp::path(crate::apis::dashboard::RESOURCE))
        .and(warp::path::tail())
        .and(warp::method())
        // a query string that is not a form (`?%zz`) reads as none rather than a rejection
        .and(
            warp::query::<std::collections::HashMap<String, String>>()
                .or(warp::any().map(std::collections::HashMap::new))
                .unify(),
        )
        .and(with_hub.clone())
        .and(warp::ext::get::<Caller>())
        .then(
            |tail: warp::path::Tail,
             method: Method,
             query: std::collections::HashMap<String, String>,
             hub: Arc<Hub>,
             caller: Caller| async move {
                super::dashboard::handle(&hub, &caller.0, &method, tail.as_str(), &query).await
            },
        );
    let placement_api = warp::path("apis")
        .and(warp::path("placement.clusternet.io"))
        .and(warp::path("v1alpha1"))
        .and(warp::path::tail())
        .and(warp::method())
        .and(warp::header::headers_cloned())
        .and(warp::body::bytes())
        .and(with_hub.clone())
        .and(warp::ext::get::<Caller>())
        .and_then(
            |tail: warp::path::Tail,
             method: Method,
             headers: http::HeaderMap,
             body: Bytes,
             hub: Arc<Hub>,
             caller: Caller| async move {
                let answer = super::placement::handle(
                    &hub,
                    &caller.0,
                    &method,
                    tail.as_str(),
                    &headers,
                    &body,
                )
                .await;
                Ok::<_, Infallible>(match answer {
                    Ok((code, v)) => reply(code, &v),
                    Err(e) => reply_error(e),
                })
            },
        );
    let not_found = warp::path::full()
        .map(|p: warp::path::FullPath| reply_error(ApiError::not_found_path(p.as_str())));
    apis.or(proxies_discovery)
        .unify()
        .or(shadow_group)
        .unify()
        .or(shadow_version)
        .unify()
        .or(openapi_v2)
        .unify()
        .or(openapi_v3)
        .unify()
        .or(openapi_v3_gv)
        .unify()
        .or(shadow_api)
        .unify()
        .or(placement_discovery)
        .unify()
        .or(placement_api)
        .unify()
        .or(dashboard_discovery)
        .unify()
        .or(dashboard)
        .unify()
        .or(not_found)
        .unify()
        .boxed()
}
