//! `Predictor` (scheduler.md §5.3): asks each feasible cluster's predictor how many replicas of
//! each workload feed it can take.
//!
//! Upstream: `framework/plugins/predictor/predictor.go`. The plugin decides everything that needs
//! no network (predictor disabled -> `Skip`, no direct access and no socket -> error, which feeds
//! to ask for) and leaves the HTTP call to a [`PredictorClient`], which the I/O shell implements
//! (`POST <endpoint>/replicas/predict` with the requirements as JSON, headers `Content-Type:
//! application/json` and `Cluster-ID`, 20 s timeout, the value under `replicas.default` of the
//! response, missing -> 0). [`predictor_endpoint`] computes where to send it.

use std::sync::Arc;

use crate::apis::{FeedInventory, ManagedCluster, ReplicaRequirements, Subscription};
use crate::scheduler::framework::{
    BoxFuture, CycleState, FeedReplicas, Plugin, PredictPlugin, Status,
};
use crate::scheduler::plugins::names;

/// Asks one cluster's predictor for the max replicas it accepts for one feed.
///
/// Implemented by the I/O shell over HTTP; errors are free text and end up in the
/// `FailedScheduling` event (`running Predict plugins: plugin "Predictor" failed with: <error>`).
pub trait PredictorClient: Send + Sync {
    /// The cluster's max acceptable replicas for `requirements`.
    fn predict<'a>(
        &'a self,
        cluster: &'a ManagedCluster,
        requirements: &'a ReplicaRequirements,
    ) -> BoxFuture<'a, Result<i32, String>>;
}

/// Where a cluster's predictor is reached.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PredictorEndpoint {
    /// `status.predictorAddress` as is; TLS verification is off (Go's `InsecureSkipVerify`).
    Direct(String),
    /// Through the parent API server's socket proxy, with the scheduler's own credentials:
    /// `<host>/apis/proxies.clusternet.io/v1alpha1/sockets/<clusterID>/proxy/<http|https>/<addr>`.
    Proxied(String),
}

impl PredictorEndpoint {
    /// The base URL (append `/replicas/predict`).
    pub fn base_url(&self) -> &str {
        match self {
            PredictorEndpoint::Direct(u) | PredictorEndpoint::Proxied(u) => u,
        }
    }
}

/// The endpoint of `cluster`'s predictor; `apiserver_host` is the scheduler kubeconfig's server
/// URL. Errors when the predictor can only be reached through a tunnel the cluster does not have.
pub fn predictor_endpoint(
    cluster: &ManagedCluster,
    apiserver_host: &str,
) -> Result<PredictorEndpoint, String> {
    let status = cluster.status.clone().unwrap_or_default();
    if status.predictor_direct_access {
        return Ok(PredictorEndpoint::Direct(status.predictor_address));
    }
    if !status.use_socket {
        return Err(socket_error(cluster));
    }
    // Go replaces the first occurrence of each scheme, wherever it is.
    let address = status
        .predictor_address
        .replacen("http://", "http/", 1)
        .replacen("https://", "https/", 1);
    Ok(PredictorEndpoint::Proxied(format!(
        "{}/apis/proxies.clusternet.io/v1alpha1/sockets/{}/proxy/{}",
        apiserver_host.trim_end_matches('/'),
        cluster.spec.cluster_id,
        address
    )))
}

fn socket_error(cluster: &ManagedCluster) -> String {
    format!(
        "cluster {} does not enable feature gate SocketConnection",
        cluster.spec.cluster_id
    )
}

/// The Predictor plugin.
#[derive(Clone)]
pub struct Predictor {
    client: Arc<dyn PredictorClient>,
}

impl std::fmt::Debug for Predictor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Predictor").finish_non_exhaustive()
    }
}

impl Predictor {
    /// A predictor plugin asking `client`.
    pub fn new(client: Arc<dyn PredictorClient>) -> Self {
        Self { client }
    }
}

impl Plugin for Predictor {
    fn name(&self) -> &str {
        names::PREDICTOR
    }
    fn as_predict(self: Arc<Self>) -> Option<Arc<dyn PredictPlugin>> {
        Some(self)
    }
}

impl PredictPlugin for Predictor {
    fn predict<'a>(
        &'a self,
        _state: &'a CycleState,
        _sub: &'a Subscription,
        inventory: &'a FeedInventory,
        cluster: &'a ManagedCluster,
    ) -> BoxFuture<'a, Result<FeedReplicas, Status>> {
        Box::pin(async move {
            let status = cluster.status.as_ref();
            if !status.is_some_and(|s| s.predictor_enabled) {
                return Err(Status::skip("predictor is disabled"));
            }
            if !status.is_some_and(|s| s.predictor_direct_access || s.use_socket) {
                return Err(Status::error(socket_error(cluster)));
            }
            let mut replicas = Vec::with_capacity(inventory.spec.feeds.len());
            for order in &inventory.spec.feeds {
                if order.desired_replicas.is_none() {
                    replicas.push(None);
                    continue;
                }
                let max = self
                    .client
                    .predict(cluster, &order.replica_requirements)
                    .await
                    .map_err(Status::error)?;
                replicas.push(Some(max));
            }
            Ok(replicas)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apis::{FeedInventorySpec, FeedOrder, ManagedClusterStatus};
    use crate::scheduler::framework::Code;
    use crate::scheduler::plugins::testing::FakePredictor;

    fn cluster(status: ManagedClusterStatus) -> ManagedCluster {
        let mut c = ManagedCluster::new("c1", Default::default());
        c.metadata.namespace = Some("clusternet-abc".into());
        c.spec.cluster_id = "dc91021d-2361-4f6d-a404-7c33b9e01118".into();
        c.status = Some(status);
        c
    }

    #[test]
    fn endpoints() {
        let direct = cluster(ManagedClusterStatus {
            predictor_enabled: true,
            predictor_direct_access: true,
            predictor_address: "https://10.0.0.1:8080".into(),
            ..Default::default()
        });
        assert_eq!(
            predictor_endpoint(&direct, "https://parent:6443/"),
            Ok(PredictorEndpoint::Direct("https://10.0.0.1:8080".into()))
        );
        let tunnel = cluster(ManagedClusterStatus {
            predictor_enabled: true,
            use_socket: true,
            predictor_address: "http://localhost:8080".into(),
            ..Default::default()
        });
        assert_eq!(
            predictor_endpoint(&tunnel, "https://parent:6443/").map(|e| e.base_url().to_owned()),
            Ok("https://parent:6443/apis/proxies.clusternet.io/v1alpha1/sockets/dc91021d-2361-4f6d-a404-7c33b9e01118/proxy/http/localhost:8080".into())
        );
        let neither = cluster(ManagedClusterStatus {
            predictor_enabled: true,
            ..Default::default()
        });
        assert_eq!(
            predictor_endpoint(&neither, "h"),
            Err("cluster dc91021d-2361-4f6d-a404-7c33b9e01118 does not enable feature gate SocketConnection".into())
        );
    }

    #[tokio::test]
    async fn predicts_only_workload_feeds() {
        let fake = FakePredictor::with(&[("clusternet-abc/c1", Ok(7))]);
        let plugin = Predictor::new(fake.clone());
        let inv = FeedInventory::new(
            "s",
            FeedInventorySpec {
                feeds: vec![
                    FeedOrder::default(),
                    FeedOrder {
                        desired_replicas: Some(3),
                        ..Default::default()
                    },
                ],
            },
        );
        let sub = Subscription::new("s", Default::default());
        let state = CycleState::new();
        let enabled = cluster(ManagedClusterStatus {
            predictor_enabled: true,
            use_socket: true,
            ..Default::default()
        });
        assert_eq!(
            plugin.predict(&state, &sub, &inv, &enabled).await,
            Ok(vec![None, Some(7)])
        );
        assert_eq!(fake.calls.lock().map(|c| c.len()).unwrap_or(0), 1);

        let disabled = cluster(ManagedClusterStatus::default());
        let err = plugin
            .predict(&state, &sub, &inv, &disabled)
            .await
            .expect_err("disabled");
        assert_eq!(
            (err.code(), err.message().as_str()),
            (Code::Skip, "predictor is disabled")
        );

        let no_socket = cluster(ManagedClusterStatus {
            predictor_enabled: true,
            ..Default::default()
        });
        let err = plugin
            .predict(&state, &sub, &inv, &no_socket)
            .await
            .expect_err("no socket");
        assert_eq!(err.code(), Code::Error);
    }
}
