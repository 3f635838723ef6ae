//! The hub: Clusternet's aggregated API server in the parent. It serves
//! `proxies.clusternet.io/v1alpha1` (the agents' reverse WebSocket tunnels and the `sockets/proxy`
//! path into children behind NAT), `shadow/v1alpha1` (plain Kubernetes objects stored as
//! Manifest templates) and `placement.clusternet.io/v1alpha1` (the placement what-if),
//! registered in the parent by three APIServices. It stores nothing itself:
//! identities come from the parent's front proxy, decisions from SubjectAccessReviews, and state
//! lives in the parent (hub.md).

pub mod authn;
pub mod authz;
pub mod body;
pub mod dashboard;
pub mod discovery;
pub mod limits;
pub mod peers;
pub mod placement;
pub mod proxies;
pub mod routes;
pub mod server;
pub mod shadow;
pub mod status;
pub mod ttl;

use std::net::SocketAddr;
use std::sync::Arc;

use http::HeaderMap;
use tokio::net::TcpListener;
use tracing::{info, warn};

use crate::apis::known;
use crate::runtime::Runtime;
use crate::runtime::serving;
use crate::tunnel::server::SessionRegistry;
use authn::{RequestHeaderConfig, TokenAuthenticator, UserInfo};
use authz::Authorizer;
use server::ConnInfo;
use status::ApiError;

#[derive(Debug, thiserror::Error)]
pub enum HubError {
    #[error("serving certificate: {0}")]
    Serving(#[from] serving::ServingError),
    #[error("request-header authentication settings: {0}")]
    Authn(#[from] authn::AuthnError),
    #[error("binding {addr}: {source}")]
    Bind {
        addr: String,
        #[source]
        source: std::io::Error,
    },
}

/// Everything a request handler needs, shared by all connections.
pub struct Hub {
    pub rt: Runtime,
    pub tunnels: Arc<SessionRegistry>,
    pub requestheader: Option<RequestHeaderConfig>,
    pub tokens: TokenAuthenticator,
    pub authz: Authorizer,
    /// `None` when the ShadowAPI gate is off.
    pub shadow: Option<Arc<shadow::ShadowApi>>,
    /// `placement.clusternet.io`: the placement what-if.
    pub placement: placement::PlacementApi,
    pub socket_connection: bool,
    /// Open watches per user, capped by `--max-watches-per-user`.
    pub watches: Arc<limits::WatchLimits>,
    /// Every cluster's `child-cluster-deployer` Secret, for proxied requests that hand over no
    /// child credentials (`None` with `--proxy-impersonation=false`).
    pub deployer_secrets:
        Option<kube::runtime::reflector::Store<k8s_openapi::api::core::v1::Secret>>,
}

impl Hub {
    /// Front-proxy headers from a connection with an allowed client certificate, else a bearer
    /// token checked by the parent; nothing else gets in.
    pub async fn authenticate(
        &self,
        conn: &ConnInfo,
        headers: &HeaderMap,
    ) -> Result<UserInfo, ApiError> {
        if let (Some(cn), Some(cfg)) = (&conn.client_cn, &self.requestheader) {
            return cfg.identity(headers, cn);
        }
        let bearer = headers
            .get(http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim)
            .filter(|t| !t.is_empty());
        match bearer {
            Some(token) => self.tokens.authenticate(token).await,
            None => Err(ApiError::unauthorized(
                "Unauthorized: present the front proxy's client certificate or a bearer token",
            )),
        }
    }
}

/// The `certificate` label of the hub's serving certificate in
/// `clusternet_certificate_expiration_timestamp_seconds`.
pub const SERVING_CERT: &str = "hub-serving";
/// ... and of the parent's request-header (front-proxy) client CA (the certificate of the bundle
/// that expires first).
pub const REQUESTHEADER_CA: &str = "requestheader-client-ca";

/// Starts the aggregated API server on every hub replica; returns the bound address.
pub async fn start(rt: &Runtime) -> Result<(Arc<Hub>, SocketAddr), HubError> {
    let cfg = &rt.config;
    // files given: reloaded when they change (the version is taken before the first read);
    // the self-signed fallback lives as long as the process and needs no reload
    let files = match (&cfg.tls_cert_file, &cfg.tls_private_key_file) {
        (Some(c), Some(k)) => Some((c.clone(), k.clone(), serving::PemVersion::of(c, k))),
        _ => None,
    };
    let pair = match &files {
        Some((c, k, _)) => serving::read_pem_files(c, k)?,
        None => serving::self_signed(&["localhost", "127.0.0.1", "clusternet-hub"])?,
    };
    let (served, served_info) = serving::certified_key(&pair)?;
    if let Some(info) = &served_info {
        crate::runtime::certs::record(SERVING_CERT, info);
    }
    let resolver = serving::ReloadingCert::new(served);
    if let Some((c, k, version)) = files {
        serving::watch_pem_files(
            c,
            k,
            SERVING_CERT,
            version,
            resolver.clone(),
            rt.shutdown.clone(),
        );
    }
    let requestheader = match RequestHeaderConfig::from_parent(&rt.client).await {
        Ok(Some(c)) => Some(c),
        Ok(None) => {
            warn!(
                "the parent publishes no request-header client CA: only bearer tokens authenticate at the hub"
            );
            None
        }
        Err(e) => {
            warn!(error = %e, "cannot read the parent's front-proxy settings: only bearer tokens authenticate at the hub");
            None
        }
    };
    if let Some(c) = &requestheader {
        crate::runtime::certs::record_pem(REQUESTHEADER_CA, c.client_ca_pem.as_bytes());
    }
    let roots = requestheader.as_ref().map(|c| c.roots()).transpose()?;
    let tls = serving::server_config_with_resolver(resolver, roots)?;
    let addr = format!("{}:{}", cfg.bind_address, cfg.secure_port);
    let listener = TcpListener::bind(&addr)
        .await
        .map_err(|source| HubError::Bind {
            addr: addr.clone(),
            source,
        })?;
    let shadow = cfg
        .gate(known::SHADOW_API)
        .then(|| shadow::ShadowApi::start(rt.clone()));
    let hub = Arc::new(Hub {
        rt: rt.clone(),
        tunnels: Arc::new(SessionRegistry::new()),
        requestheader,
        tokens: TokenAuthenticator::new(rt.client.clone()),
        authz: Authorizer::new(rt.client.clone()),
        shadow,
        placement: placement::PlacementApi::new(rt),
        socket_connection: cfg.gate(known::SOCKET_CONNECTION),
        watches: limits::WatchLimits::new(cfg.max_watches_per_user),
        deployer_secrets: cfg.proxy_impersonation.then(|| {
            rt.cache
                .watch_named::<k8s_openapi::api::core::v1::Secret>(known::CHILD_CLUSTER_SECRET_NAME)
                .store
        }),
    });
    {
        // clusternet_tunnel_connected{cluster}: 1 while the cluster's agent holds a tunnel here
        let (tunnels, clusters) = (
            hub.tunnels.clone(),
            rt.cache.watch::<crate::apis::ManagedCluster>().store,
        );
        crate::runtime::telemetry::register_collector("tunnels", move || {
            tunnel_metrics(&clusters.state(), |id| tunnels.is_connected(id))
        });
    }
    // peers dial with server verification off and no client certificate, so the hub's own TLS
    // settings serve them as well; the clone shares the resolver, so they get a reloaded
    // certificate too
    let peer_tls = tls.clone();
    let bound =
        server::serve(hub.clone(), listener, tls, rt.shutdown.clone()).map_err(|source| {
            HubError::Bind {
                addr: addr.clone(),
                source,
            }
        })?;
    info!(%bound, shadow = hub.shadow.is_some(), sockets = hub.socket_connection, "hub serving");
    if cfg.leader_elect {
        peers::start(rt, hub.tunnels.clone(), peer_tls);
    }
    Ok((hub, bound))
}

/// `clusternet_tunnel_connected{cluster}`: 1 for every ManagedCluster whose agent holds a tunnel
/// to this hub, 0 for the others.
pub fn tunnel_metrics(
    clusters: &[std::sync::Arc<crate::apis::ManagedCluster>],
    connected: impl Fn(&str) -> bool,
) -> String {
    use crate::runtime::telemetry::label_value;
    let mut out = String::from(
        "# HELP clusternet_tunnel_connected Whether the cluster's agent holds a tunnel to this hub.\n# TYPE clusternet_tunnel_connected gauge\n",
    );
    for mc in clusters {
        let name = mc
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(known::CLUSTER_NAME_LABEL).cloned())
            .unwrap_or_else(|| mc.metadata.name.clone().unwrap_or_default());
        let up = u8::from(connected(&mc.spec.cluster_id));
        out.push_str(&format!(
            "clusternet_tunnel_connected{{cluster=\"{}\"}} {up}\n",
            label_value(&name)
        ));
    }
    out
}
