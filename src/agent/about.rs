//! The About API's two well-known ClusterProperties in the child (KEP-2149; docs/spec/standards.md
//! §2): `cluster.clusterset.k8s.io`, this cluster's ID (the agent Lease's UID, the ID the parent
//! knows it by), and `clusterset.k8s.io`, its ClusterSet (`--cluster-set`, default `clusternet`),
//! which the mcs-api implementations and other multi-cluster tools in the child read.
//!
//! Written once and looked at again every five minutes (put back if deleted). A property another
//! tool already set to another value is left as it is and said so: the KEP makes the cluster's ID
//! immutable while it is a member of its ClusterSet. Without the CRD (`crds/mcs`, which the child
//! overlay installs) the agent says so once and looks again later.

use std::time::Duration;

use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::apis::about::{CLUSTER_ID_PROPERTY, CLUSTER_SET_PROPERTY, ClusterProperty};
use crate::runtime::{Runtime, api_code};

pub const FIELD_MANAGER: &str = "clusternet/agent/about";

/// What to do about one property, given its current value in the child.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// Absent: write it.
    Write,
    /// Already says this.
    Keep,
    /// Another value, someone else's: leave it and say so.
    Conflict(String),
}

/// The step for a property that should say `want` and says `current` (None: absent).
pub fn step(current: Option<&str>, want: &str) -> Step {
    match current {
        None => Step::Write,
        Some(v) if v == want => Step::Keep,
        Some(v) => Step::Conflict(v.to_string()),
    }
}

enum Failure {
    NotInstalled,
    Other(kube::Error),
}

/// Publishes the two properties until `stop`.
pub async fn publish(rt: Runtime, cluster_id: String, stop: CancellationToken) {
    let mut said_missing = false;
    let mut said_conflict = std::collections::BTreeSet::new();
    loop {
        let wait = match once(&rt, &cluster_id, &mut said_conflict).await {
            Ok(()) => Duration::from_secs(300),
            Err(Failure::NotInstalled) => {
                if !said_missing {
                    warn!(
                        "the ClusterProperty CRD (clusterproperties.about.k8s.io, in crds/mcs) is not installed in this cluster: the cluster's ID is not published to multi-cluster tools in it; looking again every minute"
                    );
                    said_missing = true;
                }
                Duration::from_secs(60)
            }
            Err(Failure::Other(e)) => {
                warn!(error = %e, "cannot publish this cluster's ClusterProperties; trying again in 30s");
                Duration::from_secs(30)
            }
        };
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = stop.cancelled() => return,
        }
    }
}

async fn once(
    rt: &Runtime,
    cluster_id: &str,
    said_conflict: &mut std::collections::BTreeSet<String>,
) -> Result<(), Failure> {
    let api: Api<ClusterProperty> = Api::all(rt.client.clone());
    for (name, want) in [
        (CLUSTER_ID_PROPERTY, cluster_id),
        (CLUSTER_SET_PROPERTY, rt.config.cluster_set.as_str()),
    ] {
        let current = api.get_opt(name).await.map_err(|e| match api_code(&e) {
            Some(404) => Failure::NotInstalled,
            _ => Failure::Other(e),
        })?;
        match step(current.as_ref().map(|p| p.spec.value.as_str()), want) {
            Step::Keep => {}
            Step::Write => {
                let body = json!({
                    "apiVersion": "about.k8s.io/v1beta1", "kind": "ClusterProperty",
                    "metadata": {"name": name},
                    "spec": {"value": want},
                });
                // not forced: a value another writer set first stays theirs
                api.patch(
                    name,
                    &PatchParams::apply(FIELD_MANAGER),
                    &Patch::Apply(&body),
                )
                .await
                .map_err(Failure::Other)?;
                info!(property = name, value = want, "published ClusterProperty");
            }
            Step::Conflict(theirs) => {
                if said_conflict.insert(format!("{name}={theirs}")) {
                    warn!(
                        property = name,
                        value = %theirs,
                        ours = want,
                        "ClusterProperty {name} already says {theirs:?}, not {want:?}: left as it is (the About API makes a cluster's ID immutable while it is in a ClusterSet)"
                    );
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_property_is_written_once_and_someone_elses_value_is_left_alone() {
        assert_eq!(step(None, "id-1"), Step::Write);
        assert_eq!(step(Some("id-1"), "id-1"), Step::Keep);
        assert_eq!(
            step(Some("id-0"), "id-1"),
            Step::Conflict("id-0".to_string())
        );
    }
}
