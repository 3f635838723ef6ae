//! Whether a Subscription is Ready, in the conditions kstatus reads (sigs.k8s.io/cli-utils
//! `pkg/kstatus`, the library behind Flux's health checks, `kubectl wait` and Argo CD's view):
//! `Ready` always, `Reconciling` only while it is true (kstatus: `InProgress`), `Stalled` only
//! while it is true (kstatus: `Failed`), each with the generation it speaks for (docs/spec/
//! deployer.md §17).
//!
//! Ready means what a user means by "it is deployed": the scheduler placed the current spec, every
//! bound cluster is reachable and its Descriptions are rendered, deployed at their current
//! generation and every object in them kstatus-`Current` in the child; with a RolloutStrategy,
//! the rollout of the newest revision completed as well and every cluster carries that revision.
//! The per-cluster judgment is the rollout controller's own ([`rollout::cluster_state`]), so a
//! stage and the Subscription never disagree about a cluster.
//!
//! Pure: the aggregator ([`super::status`]) calls it and writes the result with its own status.

use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

use super::rollout::{self, ClusterState};
use crate::apis::clusters::CONDITION_READY as CLUSTER_READY;
use crate::apis::{
    Description, DescriptionDeployer, ManagedCluster, RolloutPhase, Subscription,
    hash_subscription_spec,
};

pub use crate::kube_ext::condition::Verdict;

/// The verdict on `sub` (`clusters`: its bound ManagedClusters as the cache has them;
/// `feeds_resolved`: the aggregator's FeedsResolved condition, just computed).
pub fn verdict(
    sub: &Subscription,
    clusters: &[Arc<ManagedCluster>],
    descriptions: &[Arc<Description>],
    feeds_resolved: &Condition,
) -> Verdict {
    if feeds_resolved.status == "False" {
        return Verdict::Stalled(
            feeds_resolved.reason.clone(),
            feeds_resolved.message.clone(),
        );
    }
    let status = sub.status.clone().unwrap_or_default();
    if status.spec_hash != hash_subscription_spec(&sub.spec) {
        return Verdict::Progressing(
            "Scheduling",
            "the scheduler has not placed this spec yet (its events say why, if it cannot)".into(),
        );
    }
    if status.binding_clusters.is_empty() {
        return Verdict::Stalled(
            "NoClusters".into(),
            "bound to no cluster: no ManagedCluster matches its subscribers".into(),
        );
    }
    // with a strategy, the rollout says which revision every cluster must carry
    let mut revision = None;
    if sub.spec.rollout_strategy_name.is_some() {
        let Some(r) = status.rollout.as_deref() else {
            return Verdict::Progressing(
                "RolloutPending",
                "the rollout has not started yet".into(),
            );
        };
        let told = rollout::rollout_condition(r, None, Timestamp::UNIX_EPOCH);
        match r.phase {
            RolloutPhase::Completed => revision = Some(r.revision.as_str()),
            RolloutPhase::RolledBack | RolloutPhase::Paused => {
                return Verdict::Stalled(told.reason, told.message);
            }
            RolloutPhase::Progressing => {
                let reason = match told.reason.as_str() {
                    "PausedByUser" => "PausedByUser",
                    "WaitingForApproval" => "WaitingForApproval",
                    _ => "RollingOut",
                };
                return Verdict::Progressing(reason, told.message);
            }
        }
    }
    let deployers = DescriptionDeployer::needed_by(&sub.spec.feeds);
    let mut changing: Vec<String> = Vec::new();
    let mut failed: Vec<String> = Vec::new();
    for bound in &status.binding_clusters {
        let (ns, name) = bound.split_once('/').unwrap_or((bound.as_str(), ""));
        let cluster = clusters
            .iter()
            .find(|c| c.namespace().as_deref() == Some(ns) && c.name_any() == name);
        let reachable = cluster
            .and_then(|c| c.status.as_ref())
            .and_then(|s| s.condition(CLUSTER_READY))
            .is_some_and(|c| c.status == "True");
        if !reachable {
            changing.push(format!("cluster {bound} is not Ready"));
            continue;
        }
        let here: Vec<Arc<Description>> = descriptions
            .iter()
            .filter(|d| d.namespace().as_deref() == Some(ns))
            .cloned()
            .collect();
        if let Some(missing) = deployers
            .iter()
            .find(|k| !here.iter().any(|d| d.spec.deployer == **k))
        {
            changing.push(format!("cluster {bound}: no {missing:?} Description yet"));
            continue;
        }
        match rollout::cluster_state(&here, revision) {
            ClusterState::Healthy => {}
            ClusterState::Changing(why) => changing.push(format!("cluster {bound}: {why}")),
            ClusterState::Failed(why) => failed.push(format!("cluster {bound}: {why}")),
        }
    }
    let n = status.binding_clusters.len();
    if let Some(first) = failed.first() {
        return Verdict::Stalled("ClusterFailed".into(), summary(first, failed.len(), n));
    }
    if let Some(first) = changing.first() {
        return Verdict::Progressing("Deploying", summary(first, changing.len(), n));
    }
    Verdict::Ready(match n {
        1 => "its cluster runs it healthy".into(),
        _ => format!("all {n} clusters run it healthy"),
    })
}

/// The first reason, and how many clusters share the state when there are more.
fn summary(first: &str, count: usize, of: usize) -> String {
    match count {
        1 => first.to_string(),
        _ => format!("{first} (and {} more of {of} clusters)", count - 1),
    }
}

pub use crate::kube_ext::condition::{KSTATUS_TYPES as TYPES, kstatus_conditions as conditions};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apis::{DescriptionStatus, ManifestStatus};
    use crate::kube_ext::health::{Health, HealthStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use serde_json::json;

    fn sub(bound: &[&str], strategy: Option<&str>) -> Subscription {
        let mut s: Subscription = serde_json::from_value(json!({
            "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Subscription",
            "metadata": {"name": "app", "namespace": "default", "uid": "s-1", "generation": 3},
            "spec": {"subscribers": [{"clusterAffinity": {}}],
                "feeds": [{"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "demo", "name": "web"}]},
        }))
        .expect("a Subscription");
        s.spec.rollout_strategy_name = strategy.map(String::from);
        let st = s.status.get_or_insert_with(Default::default);
        st.binding_clusters = bound.iter().map(|b| b.to_string()).collect();
        st.spec_hash = hash_subscription_spec(&s.spec);
        s
    }

    fn cluster(ns: &str, ready: &str) -> Arc<ManagedCluster> {
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "clusters.clusternet.io/v1beta1", "kind": "ManagedCluster",
                "metadata": {"name": ns.trim_start_matches("clusternet-"), "namespace": ns},
                "spec": {"clusterId": ns, "syncMode": "Pull"},
                "status": {"conditions": [{"type": "Ready", "status": ready, "reason": "R",
                    "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}))
            .expect("a ManagedCluster"),
        )
    }

    fn desc(ns: &str, health: HealthStatus) -> Arc<Description> {
        let mut d: Description = serde_json::from_value(json!({
            "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Description",
            "metadata": {"name": "app-generic", "namespace": ns, "generation": 2},
            "spec": {"deployer": "Generic"}}))
        .expect("a Description");
        d.status = Some(DescriptionStatus {
            phase: Some(crate::apis::DescriptionPhase::Success),
            observed_generation: Some(2),
            manifest_statuses: vec![ManifestStatus {
                health: Some(Health {
                    status: health,
                    message: "why".into(),
                }),
                ..Default::default()
            }],
            ..Default::default()
        });
        Arc::new(d)
    }

    fn resolved(ok: bool) -> Condition {
        Condition {
            type_: "FeedsResolved".into(),
            status: if ok { "True" } else { "False" }.into(),
            reason: if ok {
                "AllFeedsResolved"
            } else {
                "FeedNotFound"
            }
            .into(),
            message: "m".into(),
            last_transition_time: Time(Timestamp::UNIX_EPOCH),
            observed_generation: None,
        }
    }

    #[test]
    fn ready_only_when_every_bound_cluster_runs_it_healthy() {
        let s = sub(&["clusternet-a/a", "clusternet-b/b"], None);
        let cs = [
            cluster("clusternet-a", "True"),
            cluster("clusternet-b", "True"),
        ];
        let healthy = [
            desc("clusternet-a", HealthStatus::Current),
            desc("clusternet-b", HealthStatus::Current),
        ];
        assert_eq!(
            verdict(&s, &cs, &healthy, &resolved(true)),
            Verdict::Ready("all 2 clusters run it healthy".into())
        );
        // one still rolling its pods: in progress, saying where
        let rolling = [
            desc("clusternet-a", HealthStatus::Current),
            desc("clusternet-b", HealthStatus::InProgress),
        ];
        let v = verdict(&s, &cs, &rolling, &resolved(true));
        assert!(
            matches!(&v, Verdict::Progressing("Deploying", m) if m.contains("clusternet-b/b")),
            "{v:?}"
        );
        // a failed object anywhere wins over a cluster still changing
        let failed = [
            desc("clusternet-a", HealthStatus::Failed),
            desc("clusternet-b", HealthStatus::InProgress),
        ];
        let v = verdict(&s, &cs, &failed, &resolved(true));
        assert!(
            matches!(&v, Verdict::Stalled(r, m) if r == "ClusterFailed" && m.contains("clusternet-a/a")),
            "{v:?}"
        );
        // a Description missing, or a cluster that is not Ready: not Ready yet
        let v = verdict(&s, &cs, &healthy[..1], &resolved(true));
        assert!(matches!(v, Verdict::Progressing("Deploying", _)), "{v:?}");
        let gone = [
            cluster("clusternet-a", "True"),
            cluster("clusternet-b", "Unknown"),
        ];
        let v = verdict(&s, &gone, &healthy, &resolved(true));
        assert!(
            matches!(&v, Verdict::Progressing(_, m) if m.contains("not Ready")),
            "{v:?}"
        );
    }

    #[test]
    fn feeds_scheduling_and_binding_come_first() {
        let s = sub(&["clusternet-a/a"], None);
        let cs = [cluster("clusternet-a", "True")];
        let ok = [desc("clusternet-a", HealthStatus::Current)];
        let v = verdict(&s, &cs, &ok, &resolved(false));
        assert!(
            matches!(&v, Verdict::Stalled(r, _) if r == "FeedNotFound"),
            "{v:?}"
        );
        let mut unplaced = s.clone();
        unplaced.spec.subscribers.clear();
        let v = verdict(&unplaced, &cs, &ok, &resolved(true));
        assert!(matches!(v, Verdict::Progressing("Scheduling", _)), "{v:?}");
        let nowhere = sub(&[], None);
        let v = verdict(&nowhere, &cs, &ok, &resolved(true));
        assert!(
            matches!(&v, Verdict::Stalled(r, _) if r == "NoClusters"),
            "{v:?}"
        );
    }

    #[test]
    fn a_rollout_must_complete_and_every_cluster_carry_its_revision() {
        let mut s = sub(&["clusternet-a/a"], Some("canary"));
        let cs = [cluster("clusternet-a", "True")];
        let ok = [desc("clusternet-a", HealthStatus::Current)];
        let v = verdict(&s, &cs, &ok, &resolved(true));
        assert!(
            matches!(v, Verdict::Progressing("RolloutPending", _)),
            "{v:?}"
        );
        let rollout = |phase: RolloutPhase| {
            Some(Box::new(crate::apis::RolloutStatus {
                revision: "app-1".into(),
                revision_number: 1,
                phase,
                ..Default::default()
            }))
        };
        s.status.as_mut().expect("status").rollout = rollout(RolloutPhase::Progressing);
        let v = verdict(&s, &cs, &ok, &resolved(true));
        assert!(matches!(v, Verdict::Progressing("RollingOut", _)), "{v:?}");
        s.status.as_mut().expect("status").rollout = rollout(RolloutPhase::RolledBack);
        let v = verdict(&s, &cs, &ok, &resolved(true));
        assert!(
            matches!(&v, Verdict::Stalled(r, _) if r == "RolledBack"),
            "{v:?}"
        );
        // completed, but the Description does not carry the revision yet
        s.status.as_mut().expect("status").rollout = rollout(RolloutPhase::Completed);
        let v = verdict(&s, &cs, &ok, &resolved(true));
        assert!(matches!(v, Verdict::Progressing("Deploying", _)), "{v:?}");
        let mut carried = (*ok[0]).clone();
        carried.annotations_mut().insert(
            crate::apis::known::REVISION_ANNOTATION.into(),
            "app-1".into(),
        );
        let v = verdict(&s, &cs, &[Arc::new(carried)], &resolved(true));
        assert!(matches!(v, Verdict::Ready(_)), "{v:?}");
    }

    #[test]
    fn conditions_follow_kstatus_and_keep_their_transition_time() {
        let t0 = Timestamp::from_second(1_000).expect("time");
        let t1 = Timestamp::from_second(2_000).expect("time");
        let p = conditions(
            &Verdict::Progressing("Deploying", "m".into()),
            Some(3),
            &[],
            t0,
        );
        let types: Vec<(&str, &str)> = p
            .iter()
            .map(|c| (c.type_.as_str(), c.status.as_str()))
            .collect();
        assert_eq!(types, [("Ready", "False"), ("Reconciling", "True")]);
        assert!(p.iter().all(|c| c.observed_generation == Some(3)));
        // still not Ready, for another reason: Ready keeps its time
        let s = conditions(&Verdict::Stalled("X".into(), "m".into()), Some(3), &p, t1);
        assert_eq!(s[0].last_transition_time, Time(t0));
        assert_eq!(
            (s[1].type_.as_str(), &s[1].last_transition_time),
            ("Stalled", &Time(t1))
        );
        let r = conditions(&Verdict::Ready("ok".into()), Some(4), &s, t1);
        assert_eq!(r.len(), 1);
        assert_eq!(
            (r[0].status.as_str(), r[0].observed_generation),
            ("True", Some(4))
        );
    }
}
