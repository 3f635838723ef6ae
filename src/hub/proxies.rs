//! `proxies.clusternet.io/v1alpha1` `sockets` (hub.md §2): `GET sockets/<cluster-id>` with a
//! WebSocket upgrade is an agent's tunnel; `sockets/<cluster-id>/proxy/<path>` forwards any HTTP
//! request (watches and exec/attach/port-forward upgrades included) into that child through the
//! tunnel, with the caller's `clusternet-*` user extras turned into child credentials and
//! impersonation headers. The hub's limits (issue #21, `limits.rs`) apply here: live tunnel
//! sessions per cluster, proxied watches per user, and the idle timeout of proxied connections.

use std::sync::Arc;

use http::{HeaderMap, HeaderName, HeaderValue, Request, Response, StatusCode, header};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tracing::{debug, info, warn};

use super::Hub;
use super::authn::{ChildIdentity, UserInfo, child_identity, is_identity_header};
use super::authz::{Attributes, verb_for};
use super::body::{HubBody, boxed, empty};
use super::limits::{self, CopyEnd};
use super::status::ApiError;
use crate::apis::{ManagedCluster, known, proxies};

/// Where a proxied request goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub https: bool,
    /// `host:port` (port filled in from the scheme when absent).
    pub authority: String,
    /// The host as the HTTP Host header and TLS name.
    pub host: String,
    /// Path on the target, starting with `/`.
    pub path: String,
    /// The cluster's own API server (`direct/...`): the only target the hub ever sends the
    /// cluster's credentials to (hub.md §2.3.1); `<scheme>/<host:port>/...` reaches any address
    /// the agent can dial, whose listener must never see them.
    pub api_server: bool,
}

/// Parses the `{path}` of `sockets/<id>/proxy/{path}` (upstream `exchanger.ClusterLocation`):
/// `direct/<rest>` goes to the cluster's API server URL, `<scheme>/<host[:port]>/<rest>` to any
/// address reachable from the agent.
pub fn target(proxy_path: &str, apiserver_url: &str) -> Result<Target, ApiError> {
    let trimmed = proxy_path.trim_start_matches('/');
    let (first, rest) = trimmed.split_once('/').unwrap_or((trimmed, ""));
    if first == "direct" {
        if apiserver_url.is_empty() {
            return Err(ApiError::unavailable(
                "the cluster has not reported its apiserverURL yet",
            ));
        }
        let uri: http::Uri = apiserver_url.parse().map_err(|e| {
            ApiError::unavailable(format!("bad apiserverURL {apiserver_url:?}: {e}"))
        })?;
        let https = uri.scheme_str() != Some("http");
        let host = uri.host().unwrap_or_default().to_string();
        let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
        let base = uri.path().trim_end_matches('/');
        return Ok(Target {
            https,
            authority: join_host_port(&host, port),
            host,
            path: format!("{base}/{rest}"),
            api_server: true,
        });
    }
    let https = match first {
        "https" | "wss" => true,
        "http" | "ws" => false,
        "" => {
            return Err(ApiError::bad_request(
                "empty proxy path: use direct/<path> or <scheme>/<host:port>/<path>",
            ));
        }
        other => {
            return Err(ApiError::bad_request(format!(
                "unsupported scheme {other:?} in proxy path: use direct/<path> or http|https/<host:port>/<path>"
            )));
        }
    };
    let (hostport, path) = rest.split_once('/').unwrap_or((rest, ""));
    if hostport.is_empty() {
        return Err(ApiError::bad_request("no host in proxy path"));
    }
    let authority: http::uri::Authority = hostport
        .parse()
        .map_err(|e| ApiError::bad_request(format!("bad host {hostport:?} in proxy path: {e}")))?;
    let host = authority
        .host()
        .trim_matches(|c| c == '[' || c == ']')
        .to_string();
    let port = authority.port_u16().unwrap_or(if https { 443 } else { 80 });
    Ok(Target {
        https,
        authority: join_host_port(&host, port),
        host,
        path: format!("/{path}"),
        api_server: false,
    })
}

fn join_host_port(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

pub async fn handle(
    hub: &Arc<Hub>,
    user: &UserInfo,
    req: Request<Incoming>,
    rest: &str,
) -> Response<HubBody> {
    match handle_inner(hub, user, req, rest).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

async fn handle_inner(
    hub: &Arc<Hub>,
    user: &UserInfo,
    req: Request<Incoming>,
    rest: &str,
) -> Result<Response<HubBody>, ApiError> {
    if !hub.socket_connection {
        return Err(ApiError::unavailable(format!(
            "featuregate {} has not been enabled on the server side",
            known::SOCKET_CONNECTION
        )));
    }
    let (cluster_id, sub) = rest.split_once('/').unwrap_or((rest, ""));
    if cluster_id.is_empty() {
        return Err(ApiError::unauthorized("no cluster ID in the socket path"));
    }
    let sub_trimmed = sub.trim_matches('/');
    if sub_trimmed.is_empty() {
        return tunnel(hub, user, req, cluster_id).await;
    }
    let Some(proxy_path) = sub
        .strip_prefix(proxies::PROXY_SUBRESOURCE)
        .filter(|p| p.is_empty() || p.starts_with('/'))
    else {
        return Err(ApiError::not_found_path(req.uri().path()));
    };
    let attrs = Attributes::Resource {
        verb: verb_for(req.method(), true, false).to_string(),
        group: proxies::GROUP.into(),
        version: proxies::VERSION.into(),
        resource: proxies::SOCKETS_RESOURCE.into(),
        subresource: proxies::PROXY_SUBRESOURCE.into(),
        namespace: String::new(),
        name: cluster_id.to_string(),
    };
    hub.authz.authorize(user, attrs).await?;
    let proxy_path = proxy_path.to_string();
    proxy(hub, user, req, cluster_id, &proxy_path).await
}

/// The agent's tunnel: answer the WebSocket handshake ourselves, then hand the upgraded
/// connection to the session registry.
async fn tunnel(
    hub: &Arc<Hub>,
    user: &UserInfo,
    mut req: Request<Incoming>,
    cluster_id: &str,
) -> Result<Response<HubBody>, ApiError> {
    let attrs = Attributes::Resource {
        verb: "get".into(),
        group: proxies::GROUP.into(),
        version: proxies::VERSION.into(),
        resource: proxies::SOCKETS_RESOURCE.into(),
        subresource: String::new(),
        namespace: String::new(),
        name: cluster_id.to_string(),
    };
    hub.authz.authorize(user, attrs).await?;
    let is_ws = req
        .headers()
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"));
    let Some(key) = req
        .headers()
        .get("sec-websocket-key")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
        .filter(|_| is_ws)
    else {
        return Err(ApiError::bad_request(
            "sockets/<cluster-id> is the agents' tunnel: it needs a WebSocket upgrade",
        ));
    };
    // the place is reserved before the 101, so a refusal is a plain answer the agent can read
    // (it retries on its own backoff); an upgrade that never completes gives the place back
    let slot = hub
        .tunnels
        .reserve(cluster_id, hub.rt.config.max_tunnel_sessions_per_cluster)
        .map_err(|e| {
            warn!(cluster_id, agent = %user.name, error = %e, "agent tunnel refused");
            ApiError::too_many_requests(e.to_string(), limits::RETRY_AFTER_SECONDS)
        })?;
    let on_upgrade = hyper::upgrade::on(&mut req);
    let id = cluster_id.to_string();
    let agent = user.name.clone();
    tokio::spawn(async move {
        match on_upgrade.await {
            Ok(upgraded) => {
                info!(cluster_id = %id, %agent, "agent tunnel connected");
                slot.serve(TokioIo::new(upgraded)).await;
                info!(cluster_id = %id, "agent tunnel closed");
            }
            Err(e) => warn!(cluster_id = %id, error = %e, "agent tunnel upgrade failed"),
        }
    });
    let mut resp = Response::new(empty());
    *resp.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let h = resp.headers_mut();
    h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    h.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    if let Ok(v) =
        HeaderValue::from_str(&crate::tunnel::server::websocket_accept_key(key.as_bytes()))
    {
        h.insert("sec-websocket-accept", v);
    }
    Ok(resp)
}

trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Stream for T {}

/// The child's API server as the proxy reaches it: the agent's tunnel when it holds one here,
/// else through a peer hub whose replica holds it (hub.md §2.6); a cluster that does not use
/// sockets may be dialled directly from the hub (upstream always insists on the tunnel). TLS
/// when the target is HTTPS, with the caller's child client certificate when it has one.
async fn dial(
    hub: &Hub,
    cluster_id: &str,
    use_socket: bool,
    target: &Target,
    identity: &ChildIdentity,
) -> Result<Box<dyn Stream>, ApiError> {
    let via = hub
        .tunnels
        .get(cluster_id)
        .map(|session| (session, "tcp".to_string()))
        .or_else(|| {
            hub.tunnels
                .peers()
                .for_cluster(cluster_id)
                .inspect(|session| {
                    debug!(
                        cluster_id,
                        peer = session.key(),
                        "dialing through a peer hub"
                    );
                })
                .map(|session| (session, format!("{cluster_id}::tcp")))
        });
    let stream: Box<dyn Stream> = match via {
        Some((session, proto)) => {
            Box::new(session.dial(&proto, &target.authority).await.map_err(|e| {
                ApiError::unavailable(format!(
                    "dialing {} through the tunnel of cluster {cluster_id}: {e}",
                    target.authority
                ))
            })?)
        }
        None if use_socket => {
            return Err(ApiError::bad_request(format!(
                "cannot proxy through cluster {cluster_id}, whose agent is disconnected"
            )));
        }
        None => {
            let tcp = tokio::net::TcpStream::connect(&target.authority)
                .await
                .map_err(|e| ApiError::unavailable(format!("dialing {}: {e}", target.authority)))?;
            let _ = tcp.set_nodelay(true);
            Box::new(tcp)
        }
    };
    if !target.https {
        return Ok(stream);
    }
    let cert = identity
        .client_cert
        .as_ref()
        .map(|(c, k)| (c.as_slice(), k.as_slice()));
    let tls = crate::runtime::serving::insecure_client_config(cert)
        .map_err(|e| ApiError::internal(format!("TLS client configuration: {e}")))?;
    let name = tokio_rustls::rustls::pki_types::ServerName::try_from(target.host.clone())
        .map_err(|e| ApiError::bad_request(format!("bad host {:?}: {e}", target.host)))?;
    let connector = tokio_rustls::TlsConnector::from(Arc::new(tls));
    Ok(Box::new(connector.connect(name, stream).await.map_err(
        |e| ApiError::unavailable(format!("TLS to {}: {e}", target.authority)),
    )?))
}

/// The request the child receives: the caller's method, the target's path with the caller's
/// query, the caller's headers minus hop-by-hop ones and every identity ([`forwarded_headers`]),
/// then the child identity the caller's extras carry.
fn outgoing<B>(
    hub: &Hub,
    parts: &http::request::Parts,
    body: B,
    target: &Target,
    identity: &ChildIdentity,
    upgrade: bool,
) -> Result<Request<B>, ApiError> {
    let path_and_query = match parts.uri.query() {
        Some(q) => format!("{}?{q}", target.path),
        None => target.path.clone(),
    };
    let mut out = Request::builder()
        .method(parts.method.clone())
        .uri(path_and_query)
        .body(body)
        .map_err(|e| ApiError::bad_request(format!("building the proxied request: {e}")))?;
    *out.headers_mut() = forwarded_headers(&parts.headers, hub.requestheader.as_ref(), upgrade);
    let h = out.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&target.authority) {
        h.insert(header::HOST, v);
    }
    if let Some(token) = &identity.bearer
        && let Ok(v) = HeaderValue::from_str(&format!("Bearer {token}"))
    {
        h.insert(header::AUTHORIZATION, v);
    }
    for (name, value) in &identity.headers {
        if let (Ok(n), Ok(v)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(value),
        ) {
            h.append(n, v);
        }
    }
    Ok(out)
}

/// Both ends of an upgraded proxied connection (exec, attach, port-forward), copied until
/// either closes or nothing moves for `--proxy-idle-timeout`.
fn relay_upgrade(
    client: hyper::upgrade::OnUpgrade,
    child: hyper::upgrade::OnUpgrade,
    cluster_id: String,
    authority: String,
    idle: std::time::Duration,
) {
    tokio::spawn(async move {
        match (client.await, child.await) {
            (Ok(client), Ok(child)) => {
                let mut client = TokioIo::new(client);
                let mut child = TokioIo::new(child);
                match limits::copy_bidirectional_idle(&mut client, &mut child, idle).await {
                    Ok(CopyEnd::Idle) => info!(
                        %cluster_id,
                        target = %authority,
                        ?idle,
                        "closed an idle proxied upgrade (--proxy-idle-timeout)"
                    ),
                    Ok(CopyEnd::Finished(..)) => {}
                    Err(e) => debug!(%cluster_id, error = %e, "proxied upgrade ended"),
                }
            }
            (c, p) => debug!(
                client_ok = c.is_ok(),
                child_ok = p.is_ok(),
                "proxied upgrade did not complete"
            ),
        }
    });
}

/// A proxied request: dial the child, send it the [`outgoing`] request over HTTP/1.1, and
/// relay the answer (an upgrade both ways; a body that ends when idle for
/// `--proxy-idle-timeout`, a watch counted against its caller until its body is gone).
async fn proxy(
    hub: &Arc<Hub>,
    user: &UserInfo,
    mut req: Request<Incoming>,
    cluster_id: &str,
    proxy_path: &str,
) -> Result<Response<HubBody>, ApiError> {
    let cluster = find_cluster(hub, cluster_id)?;
    let status = cluster.status.clone().unwrap_or_default();
    let target = target(proxy_path, &status.apiserver_url)?;
    let identity = match child_identity(&user.extra)? {
        id if id.is_empty() && target.api_server => {
            as_the_caller(hub, &cluster, user).await.unwrap_or(id)
        }
        id => id,
    };
    let upgrade_requested = req.headers().contains_key(header::UPGRADE);
    // a watch counts against its user until its response body is gone
    let watch_guard = (!upgrade_requested
        && limits::is_proxied_watch(&target.path, req.uri().query()))
    .then(|| {
        hub.watches
            .acquire(&limits::watch_key(user, Some(&identity)), &user.name)
    })
    .transpose()?;
    let idle = hub.rt.config.proxy_idle_timeout;
    let stream = dial(hub, cluster_id, status.use_socket, &target, &identity).await?;
    let client_upgrade = upgrade_requested.then(|| hyper::upgrade::on(&mut req));
    let (parts, body) = req.into_parts();
    let out = outgoing(hub, &parts, body, &target, &identity, upgrade_requested)?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| ApiError::unavailable(format!("HTTP to {}: {e}", target.authority)))?;
    tokio::spawn(async move {
        if let Err(e) = conn.with_upgrades().await {
            debug!(error = %e, "proxied connection ended");
        }
    });
    let mut resp = sender
        .send_request(out)
        .await
        .map_err(|e| ApiError::unavailable(format!("proxying to {}: {e}", target.authority)))?;
    if resp.status() == StatusCode::SWITCHING_PROTOCOLS
        && let Some(client_upgrade) = client_upgrade
    {
        let child_upgrade = hyper::upgrade::on(&mut resp);
        let (cluster, authority) = (cluster_id.to_string(), target.authority.clone());
        relay_upgrade(client_upgrade, child_upgrade, cluster, authority, idle);
        let (parts, _) = resp.into_parts();
        return Ok(Response::from_parts(parts, empty()));
    }
    let (mut parts, body) = resp.into_parts();
    strip_hop_by_hop(&mut parts.headers, false);
    let what = format!("{cluster_id} {}", target.authority);
    let body = limits::idle_limited(boxed(body), idle, what, watch_guard);
    Ok(Response::from_parts(parts, body))
}

/// A request to the child's API server that hands over no child credentials (hub.md §2.3.1):
/// with `--proxy-impersonation` (the default) it reaches the child as its own caller, sent with
/// the cluster's `child-cluster-deployer` token and impersonating the caller's name and groups,
/// so the child's RBAC decides what the parent's user may do there. This is how a
/// ClusterProfile's access provider reaches a child with nothing but parent credentials
/// (standards.md §1.3). `None`: the request goes on as upstream sends it, anonymous (the
/// impersonation is off, the caller is anonymous itself, or the cluster has published no
/// deployer credentials, which is logged).
async fn as_the_caller(
    hub: &Hub,
    cluster: &ManagedCluster,
    user: &UserInfo,
) -> Option<ChildIdentity> {
    let secrets = hub.deployer_secrets.as_ref()?;
    let headers = impersonation_of(user)?;
    let ns = cluster.metadata.namespace.clone().unwrap_or_default();
    let cached = secrets.get(
        &kube::runtime::reflector::ObjectRef::new(known::CHILD_CLUSTER_SECRET_NAME).within(&ns),
    );
    let secret = match cached {
        Some(s) => Some(s),
        // one the cache has not seen yet (a cluster that just registered)
        None => match kube::Api::<k8s_openapi::api::core::v1::Secret>::namespaced(
            hub.rt.client.clone(),
            &ns,
        )
        .get_opt(known::CHILD_CLUSTER_SECRET_NAME)
        .await
        {
            Ok(s) => s.map(Arc::new),
            Err(e) => {
                warn!(namespace = %ns, error = %e, "cannot read the cluster's child-cluster-deployer Secret: the proxied request goes on anonymous");
                None
            }
        },
    };
    let token = secret
        .as_ref()
        .and_then(|s| s.data.as_ref())
        .and_then(|d| d.get("token"))
        .map(|t| String::from_utf8_lossy(&t.0).trim().to_string())
        .filter(|t| !t.is_empty());
    let Some(token) = token else {
        debug!(
            cluster_id = %cluster.spec.cluster_id,
            user = %user.name,
            "no child-cluster-deployer credentials published for the cluster: the proxied request goes on anonymous"
        );
        return None;
    };
    Some(ChildIdentity {
        bearer: Some(token),
        client_cert: None,
        headers,
    })
}

/// The impersonation headers that make the child see `user`: its name and its groups, minus the
/// groups that mean something of the parent's own (`system:masters`, `system:nodes`, ...: a
/// parent administrator is not made one in every child) and the ones the child adds itself.
/// Service-account groups are kept: they name a namespace's identities, which RBAC grants to.
/// `None` for an anonymous caller, who stays anonymous.
pub fn impersonation_of(user: &UserInfo) -> Option<Vec<(String, String)>> {
    if user.name.is_empty()
        || user.name == "system:anonymous"
        || user.groups.iter().any(|g| g == "system:unauthenticated")
    {
        return None;
    }
    let mut headers = vec![("Impersonate-User".to_string(), user.name.clone())];
    for g in &user.groups {
        let kept = !g.starts_with("system:")
            || g == "system:serviceaccounts"
            || g.starts_with("system:serviceaccounts:");
        if kept {
            headers.push(("Impersonate-Group".to_string(), g.clone()));
        }
    }
    Some(headers)
}

fn find_cluster(hub: &Hub, cluster_id: &str) -> Result<Arc<ManagedCluster>, ApiError> {
    let store = hub.rt.cache.watch::<ManagedCluster>();
    store
        .store
        .state()
        .into_iter()
        .find(|mc| {
            mc.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(known::CLUSTER_ID_LABEL))
                .is_some_and(|v| v == cluster_id)
        })
        .ok_or_else(|| ApiError::bad_request(format!("no cluster id is {cluster_id}")))
}

const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

fn strip_hop_by_hop(headers: &mut HeaderMap, keep_upgrade: bool) {
    for h in HOP_BY_HOP {
        if keep_upgrade && (*h == "connection" || *h == "upgrade") {
            continue;
        }
        headers.remove(*h);
    }
}

/// The caller's headers minus hop-by-hop ones, its parent credentials and every forwarded
/// identity (the child must only see what the extras say).
fn forwarded_headers(
    incoming: &HeaderMap,
    requestheader: Option<&super::authn::RequestHeaderConfig>,
    upgrade: bool,
) -> HeaderMap {
    let mut h = incoming.clone();
    strip_hop_by_hop(&mut h, upgrade);
    h.remove(header::AUTHORIZATION);
    h.remove(header::HOST);
    let drop: Vec<HeaderName> = h
        .keys()
        .filter(|k| is_identity_header(k.as_str(), requestheader))
        .cloned()
        .collect();
    for k in drop {
        h.remove(k);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_api_server_gets_the_clusters_credentials() {
        let api_server = |path: &str| target(path, "https://10.0.0.1:6443").map(|t| t.api_server);
        assert_eq!(api_server("direct/api/v1/namespaces"), Ok(true));
        assert_eq!(api_server("/direct"), Ok(true));
        assert_eq!(api_server("http/127.0.0.1:8080/api"), Ok(false));
        assert_eq!(api_server("https/direct:443/api"), Ok(false));
        assert!(api_server("directly/x").is_err());
        assert!(api_server("").is_err());
    }

    #[test]
    fn the_caller_is_impersonated_without_the_parents_own_groups() {
        let user = |name: &str, groups: &[&str]| UserInfo {
            name: name.into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            ..Default::default()
        };
        let sa = user(
            "system:serviceaccount:kueue-system:kueue",
            &[
                "system:serviceaccounts",
                "system:serviceaccounts:kueue-system",
                "system:authenticated",
            ],
        );
        assert_eq!(
            impersonation_of(&sa),
            Some(vec![
                ("Impersonate-User".into(), sa.name.clone()),
                ("Impersonate-Group".into(), "system:serviceaccounts".into()),
                (
                    "Impersonate-Group".into(),
                    "system:serviceaccounts:kueue-system".into()
                ),
            ])
        );
        let admin = user(
            "kubernetes-admin",
            &["system:masters", "team-a", "system:authenticated"],
        );
        assert_eq!(
            impersonation_of(&admin),
            Some(vec![
                ("Impersonate-User".into(), "kubernetes-admin".into()),
                ("Impersonate-Group".into(), "team-a".into()),
            ]),
            "a parent administrator is not an administrator of every child"
        );
        assert_eq!(
            impersonation_of(&user("system:anonymous", &["system:unauthenticated"])),
            None
        );
    }

    #[test]
    fn direct_goes_to_the_api_server_url() {
        let t = target("direct/api/v1/pods", "https://10.0.0.1:6443").unwrap();
        assert_eq!(
            t,
            Target {
                https: true,
                authority: "10.0.0.1:6443".into(),
                host: "10.0.0.1".into(),
                path: "/api/v1/pods".into(),
                api_server: true,
            }
        );
        let t = target("/direct/version", "https://k8s.example.com/prefix/").unwrap();
        assert_eq!(t.authority, "k8s.example.com:443");
        assert_eq!(t.path, "/prefix/version");
        assert_eq!(target("direct/x", "").unwrap_err().code, 503);
    }

    #[test]
    fn scheme_and_host_forms() {
        let t = target("https/demo.com:6443/version", "").unwrap();
        assert_eq!(t.authority, "demo.com:6443");
        assert_eq!(t.path, "/version");
        let t = target("http/localhost:8080/replicas/predict", "").unwrap();
        assert!(!t.https);
        assert_eq!(t.authority, "localhost:8080");
        assert_eq!(t.path, "/replicas/predict");
        let t = target("http/10.0.0.2", "").unwrap();
        assert_eq!(t.authority, "10.0.0.2:80");
        assert_eq!(t.path, "/");
        assert_eq!(target("ftp/x/y", "").unwrap_err().code, 400);
        assert_eq!(target("https//y", "").unwrap_err().code, 400);
        assert_eq!(target("", "").unwrap_err().code, 400);
    }

    #[test]
    fn identities_and_parent_credentials_never_reach_the_child() {
        let mut h = HeaderMap::new();
        h.insert("authorization", "Bearer parent".parse().unwrap());
        h.insert("x-remote-user", "admin".parse().unwrap());
        h.insert("impersonate-user", "root".parse().unwrap());
        h.insert("accept", "application/json".parse().unwrap());
        h.insert("connection", "Upgrade".parse().unwrap());
        h.insert("upgrade", "websocket".parse().unwrap());
        let out = forwarded_headers(&h, None, false);
        assert_eq!(out.len(), 1);
        assert!(out.contains_key("accept"));
        let out = forwarded_headers(&h, None, true);
        assert!(out.contains_key("upgrade"));
        assert!(!out.contains_key("authorization"));
    }
}
