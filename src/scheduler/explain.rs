//! Why a Subscription goes where it goes, cluster by cluster: the record behind the placement
//! what-if. [`algorithm::schedule_explained`](crate::scheduler::algorithm::schedule_explained)
//! fills it in while it decides, on the scheduler's own code path, so an explanation can never
//! disagree with the decision it explains (the property tests in `algorithm` check that the
//! recorded binding is the real one).
//!
//! Every ManagedCluster gets one [`ClusterVerdict`], in `namespace/name` order, saying at which
//! step it left (affinity, filter, subgroup) or that it was selected, with the step's own words:
//! the affinity term it missed, the filter plugin that rejected it and the plugin's reasons (the
//! taint it did not tolerate), its prediction and score.

use std::borrow::Borrow;
use std::collections::BTreeMap;
use std::sync::Arc;

use crate::apis::placement::{ClusterVerdict, Explanation, Verdict};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::apis::{
    DroppedClusters, FeedInventory, ManagedCluster, Manifest, SchedulingDecision, SelectedCluster,
    Subscription, SubscriptionStatus,
};
use crate::pipeline::feedinventory::{desired_inventory, plan_inventory};
use crate::scheduler::algorithm::{FilterOffset, schedule_explained};
use crate::scheduler::framework::{CycleState, Framework};

/// The placement what-if for `sub` (which may not exist yet) over the parent's current state:
/// the FeedInventory the controller would write for it (from the same Manifests, by the same
/// planner), then the scheduler's own cycle with profile `fwk`, recording everything and
/// writing nothing. A feed without a Manifest, or one that cannot be parsed, is the
/// explanation's error.
///
/// One difference from the live scheduler, by construction: the live one rotates where
/// filtering starts between cycles; this starts at the first cluster. The two can only differ
/// for Dividing Subscriptions with more candidates than `percentageOfClustersToScore` asks for
/// (filtering stops early there), and the explanation then says which clusters it did not reach.
pub async fn what_if(
    fwk: &Framework,
    sub: &Subscription,
    clusters: &[impl Borrow<ManagedCluster>],
    manifests: &[Arc<Manifest>],
    reserved_ns: &str,
) -> Explanation {
    let mut sub = sub.clone();
    // a Subscription read from a file has not been through the API server's defaulting
    sub.spec.apply_crd_defaults();
    let inventory = match plan_inventory(&sub, reserved_ns, manifests) {
        Ok(spec) => spec.map(|spec| desired_inventory(&sub, spec)),
        Err(e) => {
            return Explanation {
                strategy: format!("{:?}", sub.spec.effective_scheduling_strategy()),
                error: Some(e.to_string()),
                ..Explanation::default()
            };
        }
    };
    let mut explanation = Explanation::default();
    // the result is in the explanation (binding, replicas or error)
    let _decided = schedule_explained(
        fwk,
        &CycleState::new(),
        &mut FilterOffset::default(),
        &sub,
        clusters,
        inventory.as_ref(),
        Some(&mut explanation),
    )
    .await;
    explanation
}

impl Verdict {
    /// One line for a table: `selected`, `filtered by TaintToleration: ...`, ...
    pub fn summary(&self) -> String {
        match self {
            Verdict::Deleting => "dropped: being deleted".into(),
            Verdict::AffinityMissed { terms } => {
                // several subscribers often miss on the same term: say it once
                let mut unique: Vec<&str> = Vec::new();
                for t in terms {
                    if !unique.contains(&t.as_str()) {
                        unique.push(t);
                    }
                }
                format!("dropped by clusterAffinity: {}", unique.join("; "))
            }
            Verdict::Filtered { plugin, reasons } => match plugin {
                Some(p) => format!("dropped by {p}: {}", reasons.join(", ")),
                None => format!("dropped: {}", reasons.join(", ")),
            },
            Verdict::NotEvaluated => "not evaluated: enough feasible clusters found".into(),
            Verdict::NotInSubgroup => "not in a subgroup's first minClusters".into(),
            Verdict::Feasible => "feasible".into(),
            Verdict::Selected { replicas } if replicas.is_empty() => "selected".into(),
            Verdict::Selected { replicas } => {
                let parts: Vec<String> = replicas.iter().map(|(f, r)| format!("{f}={r}")).collect();
                format!("selected: {}", parts.join(", "))
            }
        }
    }
}

impl Explanation {
    /// The table `kubectl clusternet placement` prints: one row per cluster (CLUSTER, SCORE,
    /// PREDICTED, VERDICT), then the binding or the error.
    pub fn table(&self) -> String {
        let dash = || "-".to_string();
        let rows: Vec<[String; 4]> = self
            .clusters
            .iter()
            .map(|c| {
                let predicted = c.predicted.as_ref().map_or_else(dash, |p| {
                    p.iter()
                        .map(|r| r.map_or_else(dash, |r| r.to_string()))
                        .collect::<Vec<_>>()
                        .join(",")
                });
                [
                    c.cluster.clone(),
                    c.score.map_or_else(dash, |s| s.to_string()),
                    predicted,
                    c.verdict.summary(),
                ]
            })
            .collect();
        let header = ["CLUSTER", "SCORE", "PREDICTED", "VERDICT"].map(String::from);
        let mut widths = header.clone().map(|h| h.len());
        for row in &rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.len());
            }
        }
        let mut out = String::new();
        for row in std::iter::once(&header).chain(&rows) {
            let line: Vec<String> = row
                .iter()
                .zip(widths)
                .map(|(cell, w)| format!("{cell:<w$}"))
                .collect();
            out.push_str(line.join("   ").trim_end());
            out.push('\n');
        }
        match &self.error {
            Some(e) => out.push_str(&format!("\nnot scheduled ({}): {e}\n", self.strategy)),
            None => out.push_str(&format!(
                "\n{}: bound to {}\n",
                self.strategy,
                if self.binding_clusters.is_empty() {
                    "no cluster".to_string()
                } else {
                    self.binding_clusters.join(", ")
                }
            )),
        }
        out
    }
}

/// What the scheduler keeps of a decision in `status.lastDecision` (see [`SchedulingDecision`]):
/// the clusters `status` binds (its final binding, after fail-back's make-before-break) with
/// their score and prediction, every other cluster of `explanation` grouped by its verdict, and
/// `left_out`, clusters the cycle did not consider at all, with why (failed over, damped).
///
/// Kept with the status write that changes the binding rather than on every cycle, and bounded,
/// because a Replication Subscription is looked at on every cluster change: a record per cycle
/// would be a write per heartbeat-driven change, and a verdict per cluster would grow with the
/// fleet. The grouping keeps what a user asks ("why not cluster X") for fleets of any size.
pub(crate) fn decision_record(
    explanation: &Explanation,
    status: &SubscriptionStatus,
    inventory: Option<&FeedInventory>,
    left_out: &[(&str, &[String])],
    now: Time,
) -> SchedulingDecision {
    let verdicts: BTreeMap<&str, &ClusterVerdict> = explanation
        .clusters
        .iter()
        .map(|c| (c.cluster.as_str(), c))
        .collect();
    let feed_keys: Vec<String> = inventory
        .map(|inv| inv.spec.feeds.iter().map(|f| f.feed.key()).collect())
        .unwrap_or_default();
    let selected: Vec<SelectedCluster> = status
        .binding_clusters
        .iter()
        .take(SchedulingDecision::MAX_SELECTED)
        .map(|cluster| {
            let verdict = verdicts.get(cluster.as_str());
            SelectedCluster {
                cluster: cluster.clone(),
                score: verdict.and_then(|v| v.score),
                predicted: verdict
                    .and_then(|v| v.predicted.as_ref())
                    .map(|p| {
                        feed_keys
                            .iter()
                            .zip(p)
                            .filter_map(|(k, r)| r.map(|r| (k.clone(), r)))
                            .collect()
                    })
                    .unwrap_or_default(),
            }
        })
        .collect();
    let bound: std::collections::HashSet<&str> =
        status.binding_clusters.iter().map(String::as_str).collect();
    let mut groups: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    for c in &explanation.clusters {
        if bound.contains(c.cluster.as_str()) {
            continue;
        }
        let reason = match &c.verdict {
            // the cycle chose it, the fail-back's make-before-break did not bind it yet
            Verdict::Selected { .. } => "selected, not bound yet: a fail-back adds it first".into(),
            v => v.summary(),
        };
        groups
            .entry(truncate(&reason))
            .or_default()
            .push(&c.cluster);
    }
    for (reason, clusters) in left_out.iter().filter(|(_, c)| !c.is_empty()) {
        groups
            .entry(truncate(reason))
            .or_default()
            .extend(clusters.iter().map(String::as_str));
    }
    let mut groups: Vec<(String, Vec<&str>)> = groups.into_iter().collect();
    // most clusters first, then by reason: the record answers "why not" for the bulk first
    groups.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then_with(|| a.0.cmp(&b.0)));
    let mut omitted = status.binding_clusters.len() - selected.len();
    let mut dropped = Vec::new();
    for (i, (reason, mut clusters)) in groups.into_iter().enumerate() {
        if i >= SchedulingDecision::MAX_GROUPS {
            omitted += clusters.len();
            continue;
        }
        clusters.sort_unstable();
        dropped.push(DroppedClusters {
            reason,
            count: i32::try_from(clusters.len()).unwrap_or(i32::MAX),
            clusters: clusters
                .iter()
                .take(SchedulingDecision::MAX_GROUP_CLUSTERS)
                .map(|c| c.to_string())
                .collect(),
        });
    }
    SchedulingDecision {
        decided_at: Some(now),
        strategy: explanation.strategy.clone(),
        selected,
        dropped,
        omitted: i32::try_from(omitted).unwrap_or(i32::MAX),
        error: explanation.error.as_deref().map(truncate),
    }
}

/// `text` cut to [`SchedulingDecision::MAX_REASON`] bytes (on a character boundary).
fn truncate(text: &str) -> String {
    if text.len() <= SchedulingDecision::MAX_REASON {
        return text.to_string();
    }
    let mut end = SchedulingDecision::MAX_REASON - " ...".len();
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{} ...", &text[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summaries_name_the_step_and_its_reason() {
        let filtered = Verdict::Filtered {
            plugin: Some("TaintToleration".into()),
            reasons: vec!["cluster(s) had untolerated taint {tier: bronze}".into()],
        };
        assert_eq!(
            filtered.summary(),
            "dropped by TaintToleration: cluster(s) had untolerated taint {tier: bronze}"
        );
        let missed = Verdict::AffinityMissed {
            terms: vec![
                "tier in (bronze,gold)".into(),
                "tier in (bronze,gold)".into(),
            ],
        };
        assert_eq!(
            missed.summary(),
            "dropped by clusterAffinity: tier in (bronze,gold)"
        );
        let selected = Verdict::Selected {
            replicas: BTreeMap::from([("apps/v1/Deployment/demo/web".into(), 6)]),
        };
        assert_eq!(
            selected.summary(),
            "selected: apps/v1/Deployment/demo/web=6"
        );
    }

    fn verdict(cluster: &str, verdict: Verdict) -> ClusterVerdict {
        ClusterVerdict {
            cluster: cluster.into(),
            verdict,
            predicted: None,
            score: None,
        }
    }

    fn at() -> Time {
        Time("2026-12-02T15:00:00Z".parse().expect("a time"))
    }

    /// A fleet of 40: two bound (with score and prediction), 30 missing the same affinity term,
    /// 8 tainted; one failed over outside the cycle. Grouped by reason, the bulk first, names
    /// bounded, nothing counted twice.
    #[test]
    fn the_kept_decision_groups_dropped_clusters_by_reason() {
        let feed = "apps/v1/Deployment/demo/web";
        let mut clusters = Vec::new();
        for i in 0..40 {
            let name = format!("ns/c{i:02}");
            clusters.push(match i {
                0 | 1 => ClusterVerdict {
                    predicted: Some(vec![Some(4 + i), None]),
                    score: Some(100 - i64::from(i)),
                    ..verdict(
                        &name,
                        Verdict::Selected {
                            replicas: BTreeMap::new(),
                        },
                    )
                },
                2..32 => verdict(
                    &name,
                    Verdict::AffinityMissed {
                        terms: vec!["tier in (gold)".into()],
                    },
                ),
                _ => verdict(
                    &name,
                    Verdict::Filtered {
                        plugin: Some("TaintToleration".into()),
                        reasons: vec!["cluster(s) had untolerated taint {x: y}".into()],
                    },
                ),
            });
        }
        let explanation = Explanation {
            strategy: "Dividing".into(),
            clusters,
            ..Explanation::default()
        };
        let status = SubscriptionStatus {
            binding_clusters: vec!["ns/c00".into(), "ns/c01".into()],
            ..SubscriptionStatus::default()
        };
        let inventory: FeedInventory = serde_json::from_value(serde_json::json!({
            "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "FeedInventory",
            "metadata": {"name": "web", "namespace": "demo"},
            "spec": {"feeds": [
                {"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "demo", "name": "web",
                 "desiredReplicas": 6, "replicaJsonPath": "/spec/replicas"},
                {"apiVersion": "v1", "kind": "Namespace", "name": "demo"}]}
        }))
        .expect("an inventory");
        let lost = vec!["ns/gone".to_string()];
        let d = decision_record(
            &explanation,
            &status,
            Some(&inventory),
            &[("failed over", &lost), ("damped", &[])],
            at(),
        );
        assert_eq!(d.decided_at, Some(at()));
        assert_eq!(d.strategy, "Dividing");
        let selected: Vec<(&str, Option<i64>, Option<i32>)> = d
            .selected
            .iter()
            .map(|s| (s.cluster.as_str(), s.score, s.predicted.get(feed).copied()))
            .collect();
        assert_eq!(
            selected,
            [
                ("ns/c00", Some(100), Some(4)),
                ("ns/c01", Some(99), Some(5))
            ]
        );
        assert_eq!(d.selected[0].predicted.len(), 1, "no prediction, no entry");
        let groups: Vec<(&str, i32, usize)> = d
            .dropped
            .iter()
            .map(|g| (g.reason.as_str(), g.count, g.clusters.len()))
            .collect();
        assert_eq!(
            groups,
            [
                ("dropped by clusterAffinity: tier in (gold)", 30, 10),
                (
                    "dropped by TaintToleration: cluster(s) had untolerated taint {x: y}",
                    8,
                    8
                ),
                ("failed over", 1, 1),
            ]
        );
        assert_eq!(d.dropped[0].clusters[0], "ns/c02", "sorted names");
        assert_eq!(d.omitted, 0);
        assert_eq!(d.error, None);
    }

    /// Past the bounds: selected beyond 20 and reasons beyond 10 are counted in `omitted`, long
    /// reasons are cut, a cluster the cycle selected but fail-back has not bound yet says so.
    #[test]
    fn the_kept_decision_stays_bounded() {
        let mut clusters: Vec<ClusterVerdict> = (0..25)
            .map(|i| {
                verdict(
                    &format!("a/{i:02}"),
                    Verdict::Selected {
                        replicas: BTreeMap::new(),
                    },
                )
            })
            .collect();
        for i in 0..12 {
            clusters.push(verdict(
                &format!("b/{i:02}"),
                Verdict::Filtered {
                    plugin: None,
                    reasons: vec![format!("reason {i} {}", "é".repeat(400))],
                },
            ));
        }
        let status = SubscriptionStatus {
            binding_clusters: (0..23).map(|i| format!("a/{i:02}")).collect(),
            ..SubscriptionStatus::default()
        };
        let explanation = Explanation {
            clusters,
            error: Some("x".repeat(2000)),
            ..Explanation::default()
        };
        let d = decision_record(&explanation, &status, None, &[], at());
        assert_eq!(d.selected.len(), SchedulingDecision::MAX_SELECTED);
        assert_eq!(d.dropped.len(), SchedulingDecision::MAX_GROUPS);
        // 3 bound beyond 20; 13 groups (the two selected, unbound ones first, then 12 reasons
        // of one cluster each): 3 beyond 10
        assert_eq!(d.omitted, 3 + 3);
        assert!(
            d.dropped
                .iter()
                .all(|g| g.reason.len() <= SchedulingDecision::MAX_REASON)
        );
        assert!(d.dropped.iter().any(|g| g.reason.ends_with(" ...")));
        assert!(
            d.dropped
                .iter()
                .any(|g| g.reason.starts_with("selected, not bound yet")
                    && g.clusters == ["a/23", "a/24"])
        );
        assert_eq!(
            d.error.as_deref().map(str::len),
            Some(SchedulingDecision::MAX_REASON)
        );
    }

    fn cluster(ns: &str, name: &str, tier: &str) -> ManagedCluster {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "clusters.clusternet.io/v1beta1", "kind": "ManagedCluster",
            "metadata": {"name": name, "namespace": ns, "labels": {"tier": tier}},
            "spec": {"clusterId": format!("id-{name}"), "clusterType": "EdgeCluster", "syncMode": "Pull"}
        }))
        .expect("a ManagedCluster")
    }

    fn web_manifest(replicas: i32) -> Arc<Manifest> {
        crate::pipeline::feeds::test_manifest(serde_json::json!({"apiVersion": "apps/v1",
            "kind": "Deployment", "metadata": {"name": "web", "namespace": "demo"},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "web", "image": "nginx"}]}}}}))
    }

    fn fwk() -> Arc<Framework> {
        let registry = crate::scheduler::plugins::testing::fake_registry();
        let (_, profiles) = crate::scheduler::config::Profiles::from_yaml(None, &registry, false)
            .expect("default profile");
        Arc::clone(profiles.get("default").expect("the default profile"))
    }

    /// The Static 3:2 over 10 replicas, from YAML as a user writes it (no defaults, no
    /// FeedInventory yet): 6 and 4.
    #[tokio::test]
    async fn what_if_divides_a_subscription_that_does_not_exist_yet() {
        let sub: Subscription = crate::kube_ext::yaml::from_str(
            "apiVersion: apps.clusternet.io/v1alpha1\nkind: Subscription\n\
             metadata: {name: web, namespace: default}\n\
             spec:\n  schedulingStrategy: Dividing\n  dividingScheduling: {type: Static}\n  \
             subscribers:\n  - {clusterAffinity: {matchLabels: {tier: gold}}, weight: 3}\n  \
             - {clusterAffinity: {matchLabels: {tier: silver}}, weight: 2}\n  \
             feeds:\n  - {apiVersion: apps/v1, kind: Deployment, name: web, namespace: demo}\n",
        )
        .expect("a Subscription");
        let clusters = [
            cluster("c-gold", "gold", "gold"),
            cluster("c-silver", "silver", "silver"),
        ];
        let e = what_if(
            &fwk(),
            &sub,
            &clusters,
            &[web_manifest(10)],
            "clusternet-reserved",
        )
        .await;
        assert_eq!(e.error, None, "{e:?}");
        assert_eq!(e.strategy, "Dividing");
        assert_eq!(e.binding_clusters, ["c-gold/gold", "c-silver/silver"]);
        assert_eq!(
            e.replicas.values().next().cloned(),
            Some(vec![6, 4]),
            "{:?}",
            e.replicas
        );

        // without the Manifest the what-if says so instead of guessing
        let e = what_if(&fwk(), &sub, &clusters, &[], "clusternet-reserved").await;
        assert!(
            e.error
                .as_deref()
                .is_some_and(|m| m.contains("has no Manifest")),
            "{e:?}"
        );
    }

    #[test]
    fn the_table_has_a_row_per_cluster_and_the_decision() {
        let e = Explanation {
            strategy: "Dividing".into(),
            clusters: vec![
                ClusterVerdict {
                    cluster: "c-gold/gold".into(),
                    verdict: Verdict::Selected {
                        replicas: BTreeMap::from([("web".into(), 6)]),
                    },
                    predicted: Some(vec![None, Some(8)]),
                    score: Some(100),
                },
                ClusterVerdict {
                    cluster: "c-silver/silver".into(),
                    verdict: Verdict::AffinityMissed {
                        terms: vec!["tier in (bronze,gold)".into()],
                    },
                    predicted: None,
                    score: None,
                },
            ],
            binding_clusters: vec!["c-gold/gold".into()],
            replicas: BTreeMap::from([("web".into(), vec![6])]),
            error: None,
        };
        assert_eq!(
            e.table(),
            "CLUSTER           SCORE   PREDICTED   VERDICT\n\
             c-gold/gold       100     -,8         selected: web=6\n\
             c-silver/silver   -       -           dropped by clusterAffinity: tier in (bronze,gold)\n\
             \n\
             Dividing: bound to c-gold/gold\n"
        );
        let failed = Explanation {
            strategy: "Replication".into(),
            error: Some("0/1 clusters are available: .".into()),
            ..e
        };
        assert!(
            failed
                .table()
                .ends_with("\nnot scheduled (Replication): 0/1 clusters are available: .\n")
        );
    }

    #[test]
    fn verdicts_serialise_with_their_step() {
        let v = serde_json::to_value(Verdict::AffinityMissed {
            terms: vec!["tier=gold".into()],
        })
        .expect("json");
        assert_eq!(
            v,
            serde_json::json!({"step": "affinityMissed", "terms": ["tier=gold"]})
        );
    }
}
