//! The shared runtime of one `clusternet` process: the client, the informer cache (whose fan-out,
//! fed by the watches and by the process's own writes, is the channel bus between its roles),
//! leader election, the controller runtime, events, health/metrics serving and shutdown. Every
//! role gets the same [`Runtime`].

pub mod apply;
pub mod backoff;
pub mod cache;
pub mod certs;
pub mod child;
pub mod clientmetrics;
pub mod controller;
pub mod events;
pub mod health;
pub mod leader;
pub mod memory;
pub mod plainhttp;
pub mod queue;
pub mod ratelimit;
pub mod serving;
pub mod telemetry;
pub mod transport;

use tokio_util::sync::CancellationToken;

use crate::config::Config;

/// What every subsystem of the process shares.
#[derive(Clone)]
pub struct Runtime {
    pub config: std::sync::Arc<Config>,
    pub client: kube::Client,
    /// A client of its own for Events, with its own token bucket of `--kube-api-qps`/`-burst`
    /// (upstream's components record events through a clientset of their own): a burst of events
    /// never takes the tokens of the writes that do the work.
    pub events_client: kube::Client,
    /// A client for work nobody waits on (recording revisions), on `client`'s token bucket but
    /// taking only what `client` leaves over.
    pub background_client: kube::Client,
    /// The API server URL `client` talks to (reported as a child's `apiserverURL`).
    pub cluster_url: String,
    pub cache: cache::SharedCache,
    pub readiness: health::Readiness,
    pub shutdown: CancellationToken,
}

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("reading kubeconfig {path}: {source}")]
    Kubeconfig {
        path: String,
        #[source]
        source: kube::config::KubeconfigError,
    },
    #[error("no kubeconfig given and no in-cluster configuration: {0}")]
    Infer(#[from] kube::config::InferConfigError),
    #[error("building the Kubernetes client: {0}")]
    Build(#[from] kube::Error),
}

/// A client for the cluster the config points at (`--kubeconfig`, else KUBECONFIG/in-cluster),
/// with the URL it talks to.
pub async fn client_for(config: &Config) -> Result<(kube::Client, String), ClientError> {
    let (client, _, url) = clients_for(config).await?;
    Ok((client, url))
}

/// [`client_for`], plus a client for background work on the same token bucket that takes only
/// what the first leaves over ([`ratelimit::RateLimitLayer::background`]).
pub async fn clients_for(
    config: &Config,
) -> Result<(kube::Client, kube::Client, String), ClientError> {
    let kcfg = kube_config_for(config).await?;
    let url = kcfg
        .cluster_url
        .to_string()
        .trim_end_matches('/')
        .to_string();
    let host = kcfg
        .cluster_url
        .authority()
        .map(|a| a.to_string())
        .unwrap_or_default();
    let limit = ratelimit::RateLimitLayer::new(config.kube_api_qps, config.kube_api_burst);
    let measure = clientmetrics::RequestMetricsLayer::new(host);
    let build = |limit: &ratelimit::RateLimitLayer| -> Result<kube::Client, ClientError> {
        Ok(
            match transport::client_builder(&kcfg, config.kube_api_http2)? {
                Some(builder) => builder.with_layer(limit).with_layer(&measure).build(),
                None => kube::client::ClientBuilder::try_from(kcfg.clone())?
                    .with_layer(limit)
                    .with_layer(&measure)
                    .build(),
            },
        )
    };
    let client = build(&limit)?;
    let background = build(&limit.background())?;
    Ok((client, background, url))
}

/// The connection settings of the cluster the config points at (`--kubeconfig`, else
/// KUBECONFIG/in-cluster): what [`client_for`] builds on, and what clients that reach a child
/// through the parent's socket proxy ([`child`]) start from.
pub async fn kube_config_for(config: &Config) -> Result<kube::Config, ClientError> {
    Ok(match &config.kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path).map_err(|source| {
                ClientError::Kubeconfig {
                    path: path.clone(),
                    source,
                }
            })?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(|source| ClientError::Kubeconfig {
                    path: path.clone(),
                    source,
                })?
        }
        None => kube::Config::infer().await?,
    })
}

/// A client for an API server reached with a bearer token: the agent's bootstrap client (no CA
/// known yet, so TLS is not verified, as upstream) and its dedicated client (CA from the approval).
pub fn token_client(
    url: &str,
    token: &str,
    ca_pem: Option<&[u8]>,
) -> Result<kube::Client, TokenClientError> {
    Ok(kube::Client::try_from(token_config(url, token, ca_pem)?)?)
}

/// The connection settings [`token_client`] builds its client from (also what helm is given).
pub fn token_config(
    url: &str,
    token: &str,
    ca_pem: Option<&[u8]>,
) -> Result<kube::Config, TokenClientError> {
    let uri: http::Uri = url
        .parse()
        .map_err(|_| TokenClientError::Url(url.to_string()))?;
    if uri.scheme().is_none() || uri.host().is_none() {
        return Err(TokenClientError::Url(url.to_string()));
    }
    let mut cfg = kube::Config::new(uri);
    cfg.auth_info.token = Some(secrecy::SecretString::from(token.to_string()));
    cfg.connect_timeout = Some(std::time::Duration::from_secs(10));
    cfg.read_timeout = Some(std::time::Duration::from_secs(60));
    match ca_pem {
        Some(pem) => {
            let ders: Vec<Vec<u8>> = rustls_pemfile::certs(&mut &pem[..])
                .filter_map(Result::ok)
                .map(|c| c.to_vec())
                .collect();
            if ders.is_empty() {
                return Err(TokenClientError::Ca);
            }
            cfg.root_cert = Some(ders);
        }
        None => cfg.accept_invalid_certs = true,
    }
    Ok(cfg)
}

#[derive(Debug, thiserror::Error)]
pub enum TokenClientError {
    #[error("{0:?} is not an https://host[:port] URL")]
    Url(String),
    #[error("the CA certificate holds no PEM certificate")]
    Ca,
    #[error("building the client: {0}")]
    Build(#[from] kube::Error),
}

/// True for API errors that mean "these credentials are not (or no longer) accepted".
pub fn is_unauthorized(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 401)
}

/// An error as a sentence for people (events, status messages): the API server's own message
/// for an API error, instead of kube's Display, which appends the whole Status as a debug dump.
pub fn api_message(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => s.message.clone(),
        other => other.to_string(),
    }
}

/// The HTTP status of an API error, if it is one.
pub fn api_code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

/// Creates a namespace the process needs (its Lease or Secret namespace) when the operator has
/// not; no rights to create namespaces is fine, the later access will say what is missing.
pub async fn ensure_namespace(client: &kube::Client, name: &str) {
    use k8s_openapi::api::core::v1::Namespace;
    let api: kube::Api<Namespace> = kube::Api::all(client.clone());
    let ns = Namespace {
        metadata: kube::api::ObjectMeta {
            name: Some(name.to_string()),
            ..Default::default()
        },
        ..Default::default()
    };
    match api.create(&kube::api::PostParams::default(), &ns).await {
        Ok(_) => tracing::info!(namespace = name, "created namespace"),
        Err(e) if matches!(api_code(&e), Some(409 | 403)) => {}
        Err(e) => tracing::warn!(namespace = name, error = %e, "could not ensure namespace"),
    }
}
