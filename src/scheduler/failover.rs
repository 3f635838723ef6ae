//! Failover (#16, gate FailOver): what a Subscription's scheduling cycle does about the bound
//! clusters that are not Ready. Upstream reschedules at once, so a heartbeat hiccup moves
//! workloads; here a not-ready cluster stays in the binding for a grace period
//! (`--cluster-failover-grace`, or the Subscription's `clusterTolerations` `tolerationSeconds` on
//! the not-ready taint, as pods do with node taints), and only then is it failed over: dropped
//! from the binding, its replicas divided among the remaining clusters. When more than half of
//! the clusters a Subscription selects turned not ready at once, nothing fails over (that looks like the parent's own
//! network, not the children): the cycle says so instead. Pure: the scheduler feeds it what its
//! cache holds.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

use crate::apis::known;
use crate::apis::{ManagedCluster, Subscription};

/// What the cycle does with the bound clusters that are not Ready.
#[derive(Debug, Default, PartialEq)]
pub struct Plan {
    /// Bound, not ready, still within their grace (or failover suppressed): scheduled as if they
    /// were ready, so the binding keeps them.
    pub hold: Vec<String>,
    /// Bound, not ready beyond their grace: failed over (the cycle must run even for a Dividing
    /// Subscription whose spec did not change).
    pub lost: Vec<String>,
    /// Ready, schedulable, matching the Subscription and not bound: the cycle must run (a
    /// Dividing Subscription gives it its share, e.g. back after a failover).
    pub returned: Vec<String>,
    /// When to look again (the first held cluster's grace ends).
    pub recheck: Option<Duration>,
    /// Why nothing fails over although clusters are lost.
    pub suppressed: Option<String>,
}

fn ready_since(mc: &ManagedCluster) -> (bool, Option<Timestamp>) {
    let cond = mc.status.as_ref().and_then(|s| s.condition("Ready"));
    (
        cond.is_some_and(|c| c.status == "True"),
        cond.map(|c| c.last_transition_time.0),
    )
}

fn key(mc: &ManagedCluster) -> String {
    format!("{}/{}", mc.namespace().unwrap_or_default(), mc.name_any())
}

/// The grace `sub` gives a not-ready cluster: the smallest `tolerationSeconds` of its cluster
/// tolerations of the not-ready taint, else `default`.
pub fn grace(sub: &Subscription, default: Duration) -> Duration {
    sub.spec
        .cluster_tolerations
        .iter()
        .filter(|t| {
            let key = t.key.as_deref().unwrap_or_default();
            (key.is_empty() && t.operator.as_deref() == Some("Exists"))
                || key == known::TAINT_CLUSTER_UNSCHEDULABLE
        })
        .filter_map(|t| t.toleration_seconds)
        .min()
        .map_or(default, |s| Duration::from_secs(s.max(0) as u64))
}

pub fn plan(
    sub: &Subscription,
    clusters: &[Arc<ManagedCluster>],
    default_grace: Duration,
    now: Timestamp,
) -> Plan {
    let mut out = Plan::default();
    let grace = grace(sub, default_grace);
    // the fleet is judged per Subscription: the clusters it selects (a partition of the
    // parent's network takes all of them at once)
    let live: Vec<&Arc<ManagedCluster>> = clusters
        .iter()
        .filter(|c| c.metadata.deletion_timestamp.is_none())
        .filter(|c| {
            crate::kube_ext::labels::any_matches(
                sub.spec.subscribers.iter().map(|s| &s.cluster_affinity),
                c.labels(),
            )
        })
        .collect();
    // "at once": clusters long gone (a dead agent never cleaned up) are neither counted as lost
    // now nor as part of the fleet
    let at_once = grace.max(AT_ONCE);
    let recently_lost = |c: &&&Arc<ManagedCluster>| {
        let (ready, since) = ready_since(c);
        !ready && since.is_none_or(|t| now.duration_since(t).as_secs() < at_once.as_secs() as i64)
    };
    let not_ready = live.iter().filter(recently_lost).count();
    let fleet = live.iter().filter(|c| ready_since(c).0).count() + not_ready;
    let bound = sub
        .status
        .as_ref()
        .map(|s| s.binding_clusters.clone())
        .unwrap_or_default();
    let mut lost = Vec::new();
    for c in &live {
        let k = key(c);
        if !bound.contains(&k) {
            if returned(c, now) {
                out.returned.push(k);
            }
            continue;
        }
        let (ready, since) = ready_since(c);
        if ready {
            continue;
        }
        let down_for = since
            .map(|t| Duration::from_secs(now.duration_since(t).as_secs().max(0) as u64))
            .unwrap_or(grace);
        if down_for < grace {
            out.hold.push(k);
            let left = grace - down_for;
            out.recheck = Some(out.recheck.map_or(left, |r: Duration| r.min(left)));
        } else {
            lost.push(k);
        }
    }
    // with fewer than three clusters there is no majority to tell a parent-side problem by
    if !lost.is_empty() && fleet >= 3 && not_ready * 2 > fleet {
        out.suppressed = Some(format!(
            "{not_ready} of {fleet} clusters turned not ready at once (a problem of the parent's \
             network looks like that): not failing over {}",
            lost.join(", ")
        ));
        out.hold.extend(lost);
        // look again now and then: the suppression lifts when enough clusters are back
        out.recheck = Some(
            out.recheck
                .map_or(SUPPRESSED_RECHECK, |r| r.min(SUPPRESSED_RECHECK)),
        );
    } else {
        out.lost = lost;
    }
    out
}

const SUPPRESSED_RECHECK: Duration = Duration::from_secs(30);
/// Losses within this long of each other (or of the grace, when longer) count as "at once".
const AT_ONCE: Duration = Duration::from_secs(300);

/// A cluster a Dividing binding should consider again.
fn returned(mc: &ManagedCluster, _now: Timestamp) -> bool {
    // Ready and schedulable: a Dividing binding that lacks it is re-divided (a cluster back
    // from failover gets its share again before the controller's recovery grace would remove
    // its objects; a new cluster gets one too)
    ready_since(mc).0
        && !mc
            .spec
            .taints
            .iter()
            .any(|t| t.effect == "NoSchedule" || t.effect == "NoExecute")
}

/// `mc` as a held cluster is scheduled: without the not-ready taint.
pub fn as_if_ready(mc: &ManagedCluster) -> ManagedCluster {
    let mut c = mc.clone();
    c.spec
        .taints
        .retain(|t| t.key != known::TAINT_CLUSTER_UNSCHEDULABLE);
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cluster(name: &str, ready: bool, since: &str) -> Arc<ManagedCluster> {
        let taints = if ready {
            json!([])
        } else {
            json!([{"key": known::TAINT_CLUSTER_UNSCHEDULABLE, "effect": "NoSchedule"}])
        };
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "clusters.clusternet.io/v1beta1", "kind": "ManagedCluster",
                "metadata": {"name": name, "namespace": format!("clusternet-{name}")},
                "spec": {"clusterId": name, "syncMode": "Pull", "taints": taints},
                "status": {"conditions": [{"type": "Ready", "status": if ready { "True" } else { "Unknown" },
                    "reason": "R", "message": "", "lastTransitionTime": since}]}}))
            .expect("a ManagedCluster"),
        )
    }

    fn sub(tolerations: serde_json::Value) -> Subscription {
        serde_json::from_value(json!({
            "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Subscription",
            "metadata": {"name": "s", "namespace": "default"},
            "spec": {"subscribers": [{"clusterAffinity": {}}], "feeds": [], "clusterTolerations": tolerations},
            "status": {"bindingClusters": ["clusternet-a/a", "clusternet-b/b", "clusternet-c/c"]}}))
        .expect("a Subscription")
    }

    fn at(s: &str) -> Timestamp {
        s.parse().expect("a time")
    }

    #[test]
    fn a_lost_cluster_is_held_for_the_grace_then_failed_over() {
        let clusters = vec![
            cluster("a", false, "2026-12-01T10:00:00Z"),
            cluster("b", true, "2026-12-01T09:00:00Z"),
            cluster("c", true, "2026-12-01T09:00:00Z"),
        ];
        let s = sub(json!([]));
        let p = plan(
            &s,
            &clusters,
            Duration::from_secs(60),
            at("2026-12-01T10:00:20Z"),
        );
        assert_eq!(p.hold, ["clusternet-a/a"]);
        assert!(p.lost.is_empty());
        assert_eq!(p.recheck, Some(Duration::from_secs(40)));
        let p = plan(
            &s,
            &clusters,
            Duration::from_secs(60),
            at("2026-12-01T10:01:00Z"),
        );
        assert_eq!(
            (p.hold.len(), p.lost.as_slice()),
            (0, &["clusternet-a/a".to_string()][..])
        );
        assert_eq!(p.suppressed, None);
        // as pods: tolerationSeconds on the not-ready taint shortens (or lengthens) the grace
        let quick = sub(
            json!([{"key": known::TAINT_CLUSTER_UNSCHEDULABLE, "operator": "Exists", "tolerationSeconds": 5}]),
        );
        let p = plan(
            &quick,
            &clusters,
            Duration::from_secs(60),
            at("2026-12-01T10:00:06Z"),
        );
        assert_eq!(p.lost, ["clusternet-a/a"]);
        // a held cluster is scheduled without its not-ready taint
        assert!(as_if_ready(&clusters[0]).spec.taints.is_empty());
    }

    #[test]
    fn losing_more_than_half_at_once_fails_nothing_over() {
        let clusters = vec![
            cluster("a", false, "2026-12-01T10:00:00Z"),
            cluster("b", false, "2026-12-01T10:00:00Z"),
            cluster("c", true, "2026-12-01T09:00:00Z"),
        ];
        let p = plan(
            &sub(json!([])),
            &clusters,
            Duration::from_secs(60),
            at("2026-12-01T10:02:00Z"),
        );
        assert!(p.lost.is_empty());
        assert_eq!(p.hold, ["clusternet-a/a", "clusternet-b/b"]);
        assert!(
            p.suppressed
                .as_deref()
                .is_some_and(|r| r.contains("2 of 3")),
            "{p:?}"
        );
        assert_eq!(p.recheck, Some(SUPPRESSED_RECHECK));
    }

    #[test]
    fn clusters_lost_long_ago_do_not_make_a_new_loss_look_like_a_partition() {
        let clusters = vec![
            cluster("a", false, "2026-12-01T10:00:00Z"),
            cluster("old1", false, "2026-11-01T10:00:00Z"),
            cluster("old2", false, "2026-11-01T10:00:00Z"),
            cluster("b", true, "2026-12-01T09:00:00Z"),
            cluster("c", true, "2026-12-01T09:00:00Z"),
        ];
        let p = plan(
            &sub(json!([])),
            &clusters,
            Duration::from_secs(60),
            at("2026-12-01T10:02:00Z"),
        );
        assert_eq!(
            (p.lost.as_slice(), p.suppressed),
            (&["clusternet-a/a".to_string()][..], None)
        );
        // and with fewer than three clusters there is no majority to judge by
        let two = vec![
            cluster("a", false, "2026-12-01T10:00:00Z"),
            cluster("b", true, "2026-12-01T09:00:00Z"),
        ];
        assert_eq!(
            plan(
                &sub(json!([])),
                &two,
                Duration::from_secs(60),
                at("2026-12-01T10:02:00Z")
            )
            .lost,
            ["clusternet-a/a"]
        );
    }

    #[test]
    fn unbound_or_ready_clusters_are_not_its_business() {
        let clusters = vec![
            cluster("a", true, "2026-12-01T10:00:00Z"),
            cluster("z", false, "2026-12-01T10:00:00Z"),
        ];
        assert_eq!(
            plan(
                &sub(json!([])),
                &clusters,
                Duration::from_secs(60),
                at("2026-12-01T11:00:00Z")
            ),
            Plan::default()
        );
    }
}
