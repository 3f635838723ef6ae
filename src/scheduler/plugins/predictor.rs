//! `Predictor` (scheduler.md §5.3): asks each feasible cluster's predictor how many replicas of
//! each workload feed it can take.
//!
//! Upstream: `framework/plugins/predictor/predictor.go`. The plugin decides everything that needs
//! no network (predictor disabled -> `Skip`, no direct access and no socket -> error, which feeds
//! to ask for) and leaves the HTTP call to a [`PredictorClient`], which the I/O shell implements
//! (`POST <endpoint>/replicas/predict` with the requirements as JSON, headers `Content-Type:
//! application/json` and `Cluster-ID`, 20 s timeout, the value under `replicas.default` of the
//! response, missing -> 0). `scheduler::predictor_client::predictor_base` decides where to send
//! it (directly, or through the hub's socket proxy and the agent's tunnel).

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
