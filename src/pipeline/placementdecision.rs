//! PlacementDecisions (KEP-5313, `multicluster.x-k8s.io/v1alpha1`, an alpha API: gate
//! `PlacementDecision`; docs/spec/standards.md §3): where the scheduler bound each Subscription,
//! published in the standard shape other tools read, each chosen cluster named by its
//! ClusterProfile (clusters/profile.rs).
//!
//! observe (the Subscription's `status.bindingClusters`, its decisions from the cache) ->
//! [`slices`] (pure) -> apply each slice that differs (server-side apply), delete the slices no
//! longer needed. A decision of at most 100 clusters is one PlacementDecision named after the
//! Subscription; a larger one is cut into `<name>-0`, `<name>-1`, ... (the KEP's limit per
//! object), tied by the `multicluster.x-k8s.io/decision-key` label (the Subscription's uid) and
//! ordered by `multicluster.x-k8s.io/decision-index`. Each is owned by its Subscription, so the
//! garbage collector removes them with it.

use std::collections::BTreeMap;
use std::sync::Arc;

use kube::api::{Api, DeleteParams};
use kube::{Resource, ResourceExt};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::apis::Subscription;
use crate::apis::inventory::{
    ClusterDecision, ClusterProfileReference, DECISION_INDEX_LABEL, DECISION_KEY_LABEL,
    DECISIONS_PER_SLICE, PLACEMENT_KEY_LABEL, PlacementDecision,
};
use crate::runtime::cache::Index;
use crate::runtime::controller::{Action, ApiFailure, Controller, ReconcileError};
use crate::runtime::{Runtime, api_code, apply};

pub const FIELD_MANAGER: &str = "clusternet/controller/placementdecision";

#[derive(Debug, thiserror::Error)]
pub enum DecisionError {
    #[error(transparent)]
    Api(#[from] ApiFailure),
}

impl ReconcileError for DecisionError {
    fn metric_label(&self) -> &'static str {
        match self {
            DecisionError::Api(_) => "api",
        }
    }
}

/// One PlacementDecision to write: its name, labels and decisions.
#[derive(Debug, Clone, PartialEq)]
pub struct Slice {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub decisions: Vec<ClusterDecision>,
}

/// The slices of `sub`'s decision: its bound clusters (`<namespace>/<name>`, in bindingClusters
/// order), each by the ClusterProfile it is published as in `profile_ns`.
pub fn slices(sub: &Subscription, profile_ns: &str) -> Vec<Slice> {
    let name = sub.name_any();
    let bound: Vec<ClusterDecision> = sub
        .status
        .iter()
        .flat_map(|s| s.binding_clusters.iter())
        .map(|b| ClusterDecision {
            cluster_profile_ref: ClusterProfileReference {
                // a ClusterProfile is named after its ManagedCluster
                name: b.split_once('/').map(|(_, n)| n).unwrap_or(b).to_string(),
                namespace: profile_ns.to_string(),
            },
            reason: String::new(),
        })
        .collect();
    let chunks: Vec<Vec<ClusterDecision>> = if bound.is_empty() {
        // no cluster is a decision too: an empty one
        vec![Vec::new()]
    } else {
        bound
            .chunks(DECISIONS_PER_SLICE)
            .map(<[ClusterDecision]>::to_vec)
            .collect()
    };
    let many = chunks.len() > 1;
    chunks
        .into_iter()
        .enumerate()
        .map(|(i, decisions)| {
            let mut labels = BTreeMap::new();
            labels.insert(PLACEMENT_KEY_LABEL.to_string(), name.clone());
            labels.insert(
                DECISION_KEY_LABEL.to_string(),
                sub.uid().unwrap_or_default(),
            );
            labels.insert(DECISION_INDEX_LABEL.to_string(), i.to_string());
            Slice {
                name: if many {
                    format!("{name}-{i}")
                } else {
                    name.clone()
                },
                labels,
                decisions,
            }
        })
        .collect()
}

struct Ctx {
    rt: Runtime,
    profile_ns: String,
    /// By decision key (the Subscription's uid).
    decisions: Index<PlacementDecision>,
}

/// Publishes PlacementDecisions until `stop` (gate `PlacementDecision`; they name ClusterProfiles,
/// so nothing is published without them either).
pub async fn run(rt: Runtime, stop: CancellationToken) {
    let profile_ns = rt.config.cluster_profile_namespace.clone();
    if profile_ns.is_empty() {
        tracing::warn!(
            "gate PlacementDecision is on but --cluster-profile-namespace is empty: PlacementDecisions name ClusterProfiles, none are published"
        );
        return;
    }
    let subs = rt.cache.watch::<Subscription>();
    let decisions = rt.cache.watch::<PlacementDecision>();
    let ctx = Arc::new(Ctx {
        rt,
        profile_ns,
        decisions: decisions.index("decision-key", |d: &PlacementDecision| {
            d.labels()
                .get(DECISION_KEY_LABEL)
                .cloned()
                .into_iter()
                .collect()
        }),
    });
    // a decision changed or deleted by someone else: its Subscription is looked at again
    let from_decisions =
        crate::runtime::controller::named_by(decisions.subscribe(), |d: &PlacementDecision| {
            let sub = d.labels().get(PLACEMENT_KEY_LABEL)?;
            Some((d.namespace()?, sub.clone()))
        });
    Controller::new("placementdecision", &subs)
        .after([decisions.listed()])
        .triggered_by(from_decisions)
        .run(stop, move |sub| {
            let ctx = ctx.clone();
            async move { reconcile(&ctx, sub).await }
        })
        .await;
}

async fn reconcile(ctx: &Ctx, sub: Arc<Subscription>) -> Result<Action, DecisionError> {
    if sub.metadata.deletion_timestamp.is_some() {
        // the garbage collector takes the decisions with it
        return Ok(Action::await_change());
    }
    let ns = sub.namespace().unwrap_or_default();
    let uid = sub.uid().unwrap_or_default();
    let api: Api<PlacementDecision> = Api::namespaced(ctx.rt.client.clone(), &ns);
    let mine: Vec<Arc<PlacementDecision>> = ctx
        .decisions
        .get(&uid)
        .into_iter()
        .filter(|d| d.namespace().as_deref() == Some(ns.as_str()))
        .collect();
    let want = slices(&sub, &ctx.profile_ns);
    let owner = sub.controller_owner_ref(&());
    for slice in &want {
        let current = mine.iter().find(|d| d.name_any() == slice.name);
        let same = current.is_some_and(|d| {
            d.spec.decisions == slice.decisions
                && slice
                    .labels
                    .iter()
                    .all(|(k, v)| d.labels().get(k) == Some(v))
        });
        if same {
            continue;
        }
        let body = json!({
            "apiVersion": PlacementDecision::api_version(&()),
            "kind": PlacementDecision::kind(&()),
            "metadata": {"name": slice.name, "namespace": ns, "labels": slice.labels,
                "ownerReferences": owner.iter().collect::<Vec<_>>()},
            "decisions": slice.decisions,
            "schedulerName": sub.spec.effective_scheduler_name(),
        });
        apply::apply(&api, FIELD_MANAGER, &slice.name, &body)
            .await
            .map_err(ApiFailure::about(
                sub.as_ref(),
                "writing its PlacementDecision",
            ))?;
    }
    for stale in mine
        .iter()
        .filter(|d| !want.iter().any(|s| s.name == d.name_any()))
    {
        match api
            .delete(&stale.name_any(), &DeleteParams::default())
            .await
        {
            Ok(_) => {}
            Err(e) if api_code(&e) == Some(404) => {}
            Err(e) => {
                return Err(ApiFailure::about(
                    sub.as_ref(),
                    "deleting a PlacementDecision slice it no longer needs",
                )(e)
                .into());
            }
        }
    }
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sub(bound: usize) -> Subscription {
        let mut s: Subscription = serde_json::from_value(json!({
            "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Subscription",
            "metadata": {"name": "app", "namespace": "demo", "uid": "u-1"},
            "spec": {"subscribers": [{"clusterAffinity": {}}], "feeds": []}
        }))
        .expect("a Subscription");
        s.status
            .get_or_insert_with(Default::default)
            .binding_clusters = (0..bound)
            .map(|i| format!("clusternet-{i:05}/child{i}"))
            .collect();
        s
    }

    #[test]
    fn one_slice_names_every_bound_cluster_by_its_profile() {
        let s = slices(&sub(2), "clusternet-system");
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].name, "app");
        let refs: Vec<(&str, &str)> = s[0]
            .decisions
            .iter()
            .map(|d| {
                (
                    d.cluster_profile_ref.name.as_str(),
                    d.cluster_profile_ref.namespace.as_str(),
                )
            })
            .collect();
        assert_eq!(
            refs,
            [
                ("child0", "clusternet-system"),
                ("child1", "clusternet-system")
            ]
        );
        assert_eq!(s[0].labels[DECISION_KEY_LABEL], "u-1");
        assert_eq!(s[0].labels[PLACEMENT_KEY_LABEL], "app");
    }

    #[test]
    fn more_than_a_hundred_clusters_are_cut_into_ordered_slices() {
        let s = slices(&sub(250), "p");
        let sizes: Vec<usize> = s.iter().map(|x| x.decisions.len()).collect();
        assert_eq!(sizes, [100, 100, 50]);
        let names: Vec<&str> = s.iter().map(|x| x.name.as_str()).collect();
        assert_eq!(names, ["app-0", "app-1", "app-2"]);
        assert_eq!(s[2].labels[DECISION_INDEX_LABEL], "2");
        assert!(s.iter().all(|x| x.labels[DECISION_KEY_LABEL] == "u-1"));
        // unbound: one empty decision
        let none = slices(&sub(0), "p");
        assert_eq!((none.len(), none[0].decisions.len()), (1, 0));
    }
}
