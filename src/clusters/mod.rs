//! The parent side of cluster registration and lifecycle (controller role): the registration
//! approver, the cluster-lifecycle controller (heartbeat loss, taints, deregistration), the
//! Cluster API discovery and the ClusterProfiles published for other tools.

pub mod approver;
pub mod discovery;
pub mod lifecycle;
pub mod profile;

use tokio_util::sync::CancellationToken;

use crate::runtime::Runtime;

/// Runs every cluster controller until `stop`.
pub async fn run(rt: &Runtime, stop: CancellationToken) {
    tokio::join!(
        approver::run(rt.clone(), stop.clone()),
        lifecycle::run(rt.clone(), stop.clone()),
        discovery::run(rt.clone(), stop.clone()),
        profile::run(rt.clone(), stop.clone())
    );
}
