//! The About API's two well-known ClusterProperties in the child (KEP-2149; docs/spec/standards.md
//! §2): `cluster.clusterset.k8s.io`, this cluster's ID (the agent Lease's UID, the ID the parent
//! knows it by), and `clusterset.k8s.io`, its ClusterSet (`--cluster-set`, default `clusternet`),
//! which the mcs-api implementations and other multi-cluster tools in the child read.
//!
//! Written once and looked at again every minute (put back if deleted); each look also reads
//! every ClusterProperty of the child (at most [`MAX_REPORTED`]), which the heartbeat reports to
//! the parent (`ManagedCluster.status.clusterProperties`) for the cluster's ClusterProfile. A property another
//! tool already set to another value is left as it is and said so: the KEP makes the cluster's ID
//! immutable while it is a member of its ClusterSet. Without the CRD (`crds/mcs`, which the child
//! overlay installs) the agent says so once and looks again later.

use std::time::Duration;

use kube::ResourceExt;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use serde_json::json;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::apis::about::{CLUSTER_ID_PROPERTY, CLUSTER_SET_PROPERTY, ClusterProperty};
use crate::apis::clusters::ClusterPropertyValue;
use crate::runtime::{Runtime, api_code};

pub const FIELD_MANAGER: &str = "clusternet/agent/about";
/// The most properties reported to the parent (a ManagedCluster's status stays small); more are
/// left out, by name order, and said so once.
pub const MAX_REPORTED: usize = 64;

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

/// The properties the parent is told of: each one's name and value, by name, at most
/// [`MAX_REPORTED`], without the ones the About API would not hold (an empty value) or a
/// ClusterProfile could not carry (a name over 253 or a value over 1024 characters).
pub fn reported(properties: &[DynamicObject]) -> (Vec<ClusterPropertyValue>, usize) {
    let mut all: Vec<ClusterPropertyValue> = properties
        .iter()
        .map(|p| ClusterPropertyValue {
            name: p.name_any(),
            // read loosely: the CRD makes `spec` optional, and another writer's object must not
            // make the whole list unreadable
            value: p
                .data
                .pointer("/spec/value")
                .and_then(|v| v.as_str())
                .unwrap_or_default()
                .to_string(),
        })
        .filter(|p| p.name.len() <= 253 && !p.value.is_empty() && p.value.len() <= 1024)
        .collect();
    all.sort_by(|a, b| a.name.cmp(&b.name));
    let left_out = all.len().saturating_sub(MAX_REPORTED);
    all.truncate(MAX_REPORTED);
    (all, left_out)
}

/// Publishes the two properties and reads all of them into `seen`, until `stop`.
pub async fn publish(
    rt: Runtime,
    cluster_id: String,
    seen: watch::Sender<Vec<ClusterPropertyValue>>,
    stop: CancellationToken,
) {
    let mut said_missing = false;
    let mut said_conflict = std::collections::BTreeSet::new();
    let mut said_too_many = false;
    loop {
        let result = match once(&rt, &cluster_id, &mut said_conflict).await {
            Ok(()) => read_all(&rt).await,
            Err(e) => Err(e),
        };
        let wait = match result {
            Ok((properties, left_out)) => {
                if left_out > 0 && !said_too_many {
                    warn!(
                        left_out,
                        "this cluster has more than {MAX_REPORTED} ClusterProperties: the parent is told of the first {MAX_REPORTED} by name"
                    );
                    said_too_many = true;
                }
                seen.send_if_modified(|old| {
                    let changed = *old != properties;
                    *old = properties;
                    changed
                });
                Duration::from_secs(60)
            }
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

async fn read_all(rt: &Runtime) -> Result<(Vec<ClusterPropertyValue>, usize), Failure> {
    let ar = kube::core::ApiResource::erase::<ClusterProperty>(&());
    let api: Api<DynamicObject> = Api::all_with(rt.client.clone(), &ar);
    let list = api
        .list(&ListParams::default())
        .await
        .map_err(|e| match api_code(&e) {
            Some(404) => Failure::NotInstalled,
            _ => Failure::Other(e),
        })?;
    Ok(reported(&list.items))
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
    fn the_parent_is_told_of_every_property_by_name_within_bounds() {
        let prop = |name: &str, value: &str| -> DynamicObject {
            serde_json::from_value(json!({"apiVersion": "about.k8s.io/v1beta1",
                "kind": "ClusterProperty", "metadata": {"name": name}, "spec": {"value": value}}))
            .expect("a ClusterProperty")
        };
        let (told, left_out) = reported(&[
            prop("zone.example.com", "eu-1"),
            prop("cluster.clusterset.k8s.io", "id-1"),
            prop("empty.example.com", ""),
            prop("huge.example.com", &"x".repeat(1025)),
            serde_json::from_value(json!({"apiVersion": "about.k8s.io/v1beta1",
                "kind": "ClusterProperty", "metadata": {"name": "no-spec.example.com"}}))
            .expect("a ClusterProperty without spec"),
        ]);
        assert_eq!(
            told.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(),
            ["cluster.clusterset.k8s.io", "zone.example.com"]
        );
        assert_eq!(left_out, 0);
        let many: Vec<DynamicObject> = (0..MAX_REPORTED + 3)
            .map(|i| prop(&format!("p{i:03}.example.com"), "v"))
            .collect();
        let (told, left_out) = reported(&many);
        assert_eq!((told.len(), left_out), (MAX_REPORTED, 3));
    }

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
