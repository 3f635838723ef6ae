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

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The explanation of one scheduling attempt.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Explanation {
    /// `Replication` or `Dividing`.
    pub strategy: String,
    /// One entry per ManagedCluster, `namespace/name` order.
    pub clusters: Vec<ClusterVerdict>,
    /// The decision: `status.bindingClusters` as the scheduler writes it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub binding_clusters: Vec<String>,
    /// The decision for `Dividing`: replicas per feed key, one per binding cluster.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub replicas: BTreeMap<String, Vec<i32>>,
    /// Why no binding came out, in the words of the scheduler's FailedScheduling event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What happened to one cluster.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterVerdict {
    /// `namespace/name` of the ManagedCluster.
    pub cluster: String,
    /// Where it left, or that it was selected.
    pub verdict: Verdict,
    /// Predicted maximum replicas per FeedInventory feed (Dynamic dividing), when asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub predicted: Option<Vec<Option<i32>>>,
    /// Its total score, when it was scored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub score: Option<i64>,
}

/// The step a cluster stopped at.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "step", rename_all = "camelCase")]
pub enum Verdict {
    /// The ManagedCluster is being deleted.
    Deleting,
    /// No subscriber's `clusterAffinity` matches: per subscriber, the first term it missed.
    AffinityMissed { terms: Vec<String> },
    /// A filter plugin rejected it (the pre-filter when `plugin` names one and every candidate
    /// shares the verdict).
    Filtered {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        plugin: Option<String>,
        reasons: Vec<String>,
    },
    /// Filtering stopped before reaching it: enough feasible clusters had been found (Dividing
    /// with more candidates than `percentageOfClustersToScore` asks for).
    NotEvaluated,
    /// Feasible, but not among the first `minClusters` of any subgroup.
    NotInSubgroup,
    /// Feasible, but the attempt failed after filtering (see [`Explanation::error`]).
    Feasible,
    /// In the binding.
    Selected {
        /// Replicas per feed key (Dividing).
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        replicas: BTreeMap<String, i32>,
    },
}

impl Verdict {
    /// One line for a table: `selected`, `filtered by TaintToleration: ...`, ...
    pub fn summary(&self) -> String {
        match self {
            Verdict::Deleting => "dropped: being deleted".into(),
            Verdict::AffinityMissed { terms } => {
                format!("dropped by clusterAffinity: {}", terms.join("; "))
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

/// Fills an [`Explanation`] when there is one to fill; the real scheduling cycle passes none and
/// pays nothing but a branch per step.
pub(crate) struct Recorder<'a>(pub(crate) Option<&'a mut Explanation>);

impl Recorder<'_> {
    pub(crate) fn on(&self) -> bool {
        self.0.is_some()
    }

    pub(crate) fn start(&mut self, strategy: String, clusters: &[String]) {
        if let Some(e) = self.0.as_deref_mut() {
            *e = Explanation {
                strategy,
                clusters: clusters
                    .iter()
                    .map(|c| ClusterVerdict {
                        cluster: c.clone(),
                        // until a later step says otherwise, every cluster is a candidate that
                        // filtering did not reach
                        verdict: Verdict::NotEvaluated,
                        predicted: None,
                        score: None,
                    })
                    .collect(),
                ..Explanation::default()
            };
        }
    }

    fn entry(&mut self, cluster: &str) -> Option<&mut ClusterVerdict> {
        let e = self.0.as_deref_mut()?;
        let i = e
            .clusters
            .binary_search_by(|c| c.cluster.as_str().cmp(cluster))
            .ok()?;
        e.clusters.get_mut(i)
    }

    pub(crate) fn verdict(&mut self, cluster: &str, verdict: Verdict) {
        if let Some(c) = self.entry(cluster) {
            c.verdict = verdict;
        }
    }

    pub(crate) fn predicted(&mut self, cluster: &str, predicted: Vec<Option<i32>>) {
        if let Some(c) = self.entry(cluster) {
            c.predicted = Some(predicted);
        }
    }

    pub(crate) fn score(&mut self, cluster: &str, score: i64) {
        if let Some(c) = self.entry(cluster) {
            c.score = Some(score);
        }
    }

    /// The decision: selected clusters get their replicas, feasible ones that were scored and
    /// not selected were left out by subgrouping.
    pub(crate) fn decided(
        &mut self,
        binding_clusters: &[String],
        replicas: &BTreeMap<String, Vec<i32>>,
    ) {
        let Some(e) = self.0.as_deref_mut() else {
            return;
        };
        e.binding_clusters = binding_clusters.to_vec();
        e.replicas = replicas.clone();
        for c in &mut e.clusters {
            if c.verdict != Verdict::Feasible {
                continue;
            }
            c.verdict = match binding_clusters.iter().position(|b| *b == c.cluster) {
                Some(i) => Verdict::Selected {
                    replicas: replicas
                        .iter()
                        .filter_map(|(feed, per)| per.get(i).map(|r| (feed.clone(), *r)))
                        .collect(),
                },
                None => Verdict::NotInSubgroup,
            };
        }
    }

    pub(crate) fn failed(&mut self, error: String) {
        if let Some(e) = self.0.as_deref_mut() {
            e.error = Some(error);
        }
    }
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
            terms: vec!["tier in (bronze,gold)".into()],
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
