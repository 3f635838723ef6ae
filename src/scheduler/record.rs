//! The recorder the scheduling cycle fills an [`Explanation`] through while it decides
//! ([`crate::scheduler::algorithm::schedule_explained`]): one [`ClusterVerdict`] per
//! ManagedCluster, saying at which step it left or that it was selected. The cycle passes none
//! when nobody asks, and pays nothing but a branch per step. [`crate::scheduler::explain`] turns
//! a filled explanation into the what-if's answer and the Subscription's `status.lastDecision`.

use std::collections::BTreeMap;

use crate::apis::placement::{ClusterVerdict, Explanation, Verdict};
use crate::scheduler::framework::PluginFailure;

/// Fills an [`Explanation`] when there is one to fill; the real scheduling cycle passes none and
/// pays nothing but a branch per step (values are copied inside, only when recording).
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

    /// A filter (or pre-filter) plugin turned the cluster down; the verdict is built only when
    /// recording, so the live cycle copies nothing.
    pub(crate) fn rejected(&mut self, cluster: &str, failure: &PluginFailure) {
        if let Some(c) = self.entry(cluster) {
            c.verdict = Verdict::Filtered {
                plugin: failure.plugin.clone(),
                reasons: failure.status.reasons().to_vec(),
            };
        }
    }

    pub(crate) fn predicted(&mut self, cluster: &str, predicted: &[Option<i32>]) {
        if let Some(c) = self.entry(cluster) {
            c.predicted = Some(predicted.to_vec());
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
        // by name, not by a search of the binding per cluster (quadratic: at 1,000 clusters it
        // was a third of an explained cycle); reversed so that a cluster bound twice keeps its
        // first position, as the search did
        let index: std::collections::HashMap<&str, usize> = binding_clusters
            .iter()
            .enumerate()
            .map(|(i, b)| (b.as_str(), i))
            .rev()
            .collect();
        for c in &mut e.clusters {
            if c.verdict != Verdict::Feasible {
                continue;
            }
            c.verdict = match index.get(c.cluster.as_str()).copied() {
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
