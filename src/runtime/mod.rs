//! The shared runtime of one `clusternet` process: the client, the informer cache, leader election,
//! the hint bus, health/metrics serving and shutdown. Every role gets the same [`Runtime`].

pub mod bus;
pub mod cache;
pub mod health;
pub mod leader;
pub mod serving;
pub mod telemetry;

use tokio_util::sync::CancellationToken;

use crate::config::Config;

/// What every subsystem of the process shares.
#[derive(Clone)]
pub struct Runtime {
    pub config: std::sync::Arc<Config>,
    pub client: kube::Client,
    pub cache: cache::SharedCache,
    pub bus: bus::Bus,
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

/// A client for the cluster the config points at (`--kubeconfig`, else KUBECONFIG/in-cluster).
pub async fn client_for(config: &Config) -> Result<kube::Client, ClientError> {
    let kcfg = match &config.kubeconfig {
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
    };
    Ok(kube::Client::try_from(kcfg)?)
}
