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
    let selected = selected_clusters(explanation, status, inventory);
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
    let (dropped, omitted_groups) = dropped_groups(groups);
    let omitted = status.binding_clusters.len() - selected.len() + omitted_groups;
    SchedulingDecision {
        decided_at: Some(now),
        strategy: explanation.strategy.clone(),
        selected,
        dropped,
        omitted: i32::try_from(omitted).unwrap_or(i32::MAX),
        error: explanation.error.as_deref().map(truncate),
    }
}

/// The bound clusters (the first [`SchedulingDecision::MAX_SELECTED`]) with their score and
/// predicted capacity per feed.
fn selected_clusters(
    explanation: &Explanation,
    status: &SubscriptionStatus,
    inventory: Option<&FeedInventory>,
) -> Vec<SelectedCluster> {
    let verdicts: BTreeMap<&str, &ClusterVerdict> = explanation
        .clusters
        .iter()
        .map(|c| (c.cluster.as_str(), c))
        .collect();
    let feed_keys: Vec<String> = inventory
        .map(|inv| inv.spec.feeds.iter().map(|f| f.feed.key()).collect())
        .unwrap_or_default();
    status
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
        .collect()
}

/// The clusters left out, grouped by reason: most clusters first, then by reason (the record
/// answers "why not" for the bulk first), at most [`SchedulingDecision::MAX_GROUPS`] groups;
/// with the number of clusters in the groups beyond that.
fn dropped_groups(groups: BTreeMap<String, Vec<&str>>) -> (Vec<DroppedClusters>, usize) {
    let mut groups: Vec<(String, Vec<&str>)> = groups.into_iter().collect();
    groups.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then_with(|| a.0.cmp(&b.0)));
    let mut omitted = 0;
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
    (dropped, omitted)
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
mod tests;
