//! `TaintToleration` (scheduler.md §5.2): filter out clusters with a `NoSchedule`/`NoExecute` taint
//! the Subscription does not tolerate; score clusters by how few untolerated `PreferNoSchedule`
//! taints they have.
//!
//! Toleration matching is Kubernetes' `Toleration.ToleratesTaint`: a toleration's effect (if
//! set) must equal the taint's; its key (if set) must equal the taint's, an empty key with
//! `Exists` matching every key; operator `Exists` ignores the value, `Equal` or empty compares
//! it; any other operator tolerates nothing.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Taint, Toleration};

use crate::apis::{ManagedCluster, Subscription};
use crate::scheduler::framework::{
    ClusterScore, CycleState, FilterPlugin, MAX_CLUSTER_SCORE, Plugin, ScorePlugin, Status,
};
use crate::scheduler::plugins::names;

const NO_SCHEDULE: &str = "NoSchedule";
const NO_EXECUTE: &str = "NoExecute";
const PREFER_NO_SCHEDULE: &str = "PreferNoSchedule";

/// Does `toleration` tolerate `taint`?
pub fn tolerates(toleration: &Toleration, taint: &Taint) -> bool {
    let effect = toleration.effect.as_deref().unwrap_or_default();
    if !effect.is_empty() && effect != taint.effect {
        return false;
    }
    let key = toleration.key.as_deref().unwrap_or_default();
    if !key.is_empty() && key != taint.key {
        return false;
    }
    match toleration.operator.as_deref().unwrap_or_default() {
        "" | "Equal" => {
            toleration.value.as_deref().unwrap_or_default()
                == taint.value.as_deref().unwrap_or_default()
        }
        "Exists" => true,
        _ => false,
    }
}

/// The first taint accepted by `only` that no toleration tolerates
/// (`v1helper.FindMatchingUntoleratedTaint`).
pub fn find_untolerated_taint<'a>(
    taints: &'a [Taint],
    tolerations: &[Toleration],
    only: impl Fn(&Taint) -> bool,
) -> Option<&'a Taint> {
    taints
        .iter()
        .filter(|t| only(t))
        .find(|t| !tolerations.iter().any(|tol| tolerates(tol, t)))
}

/// The TaintToleration plugin.
#[derive(Debug, Default, Clone, Copy)]
pub struct TaintToleration;

impl Plugin for TaintToleration {
    fn name(&self) -> &str {
        names::TAINT_TOLERATION
    }
    fn as_filter(self: Arc<Self>) -> Option<Arc<dyn FilterPlugin>> {
        Some(self)
    }
    fn as_score(self: Arc<Self>) -> Option<Arc<dyn ScorePlugin>> {
        Some(self)
    }
}

impl FilterPlugin for TaintToleration {
    fn filter(
        &self,
        _state: &CycleState,
        sub: &Subscription,
        cluster: &ManagedCluster,
    ) -> Result<(), Status> {
        let untolerated =
            find_untolerated_taint(&cluster.spec.taints, &sub.spec.cluster_tolerations, |t| {
                t.effect == NO_SCHEDULE || t.effect == NO_EXECUTE
            });
        match untolerated {
            None => Ok(()),
            Some(taint) => Err(Status::unschedulable_and_unresolvable(format!(
                "clusters(s) had taint {{{}: {}}}, that the subscription didn't tolerate",
                taint.key,
                taint.value.as_deref().unwrap_or_default()
            ))),
        }
    }
}

impl ScorePlugin for TaintToleration {
    /// The number of `PreferNoSchedule` taints not tolerated by the tolerations whose effect is
    /// empty or `PreferNoSchedule`.
    fn score(
        &self,
        _state: &CycleState,
        sub: &Subscription,
        cluster: &ManagedCluster,
    ) -> Result<i64, Status> {
        let tolerations: Vec<Toleration> = sub
            .spec
            .cluster_tolerations
            .iter()
            .filter(|t| matches!(t.effect.as_deref(), None | Some("" | PREFER_NO_SCHEDULE)))
            .cloned()
            .collect();
        let count = cluster
            .spec
            .taints
            .iter()
            .filter(|t| t.effect == PREFER_NO_SCHEDULE)
            .filter(|t| !tolerations.iter().any(|tol| tolerates(tol, t)))
            .count();
        Ok(i64::try_from(count).unwrap_or(i64::MAX))
    }

    /// Fewer untolerated taints is better: `100 - 100 * count / max`, or 100 for everyone when
    /// no cluster has any (`helper.DefaultNormalizeScore(100, reverse=true)`).
    fn normalize_scores(
        &self,
        _state: &CycleState,
        _sub: &Subscription,
        scores: &mut [ClusterScore],
    ) -> Result<(), Status> {
        default_normalize_score(MAX_CLUSTER_SCORE, true, scores);
        Ok(())
    }
}

/// `helper.DefaultNormalizeScore`: scale to `[0, max_priority]` by the highest score, optionally
/// reversed.
pub(crate) fn default_normalize_score(
    max_priority: i64,
    reverse: bool,
    scores: &mut [ClusterScore],
) {
    let max_count = scores.iter().map(|s| s.score).max().unwrap_or(0).max(0);
    if max_count == 0 {
        if reverse {
            for s in scores.iter_mut() {
                s.score = max_priority;
            }
        }
        return;
    }
    for s in scores.iter_mut() {
        let mut score = max_priority.saturating_mul(s.score) / max_count;
        if reverse {
            score = max_priority - score;
        }
        s.score = score;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apis::SubscriptionSpec;

    fn taint(key: &str, value: &str, effect: &str) -> Taint {
        Taint {
            key: key.into(),
            value: (!value.is_empty()).then(|| value.into()),
            effect: effect.into(),
            time_added: None,
        }
    }

    fn tol(key: &str, op: &str, value: &str, effect: &str) -> Toleration {
        let opt = |s: &str| (!s.is_empty()).then(|| s.to_owned());
        Toleration {
            key: opt(key),
            operator: opt(op),
            value: opt(value),
            effect: opt(effect),
            toleration_seconds: None,
        }
    }

    fn cluster(taints: Vec<Taint>) -> ManagedCluster {
        let mut c = ManagedCluster::new("c", Default::default());
        c.metadata.namespace = Some("ns".into());
        c.spec.taints = taints;
        c
    }

    fn sub(tolerations: Vec<Toleration>) -> Subscription {
        Subscription::new(
            "s",
            SubscriptionSpec {
                cluster_tolerations: tolerations,
                ..Default::default()
            },
        )
    }

    #[test]
    fn toleration_matching() {
        let t = taint("k", "v", NO_SCHEDULE);
        assert!(tolerates(&tol("k", "Equal", "v", NO_SCHEDULE), &t));
        assert!(
            tolerates(&tol("k", "", "v", ""), &t),
            "empty operator is Equal, empty effect matches all"
        );
        assert!(!tolerates(&tol("k", "Equal", "w", NO_SCHEDULE), &t));
        assert!(tolerates(&tol("k", "Exists", "", NO_SCHEDULE), &t));
        assert!(
            !tolerates(&tol("k", "Exists", "", NO_EXECUTE), &t),
            "effect must match"
        );
        assert!(!tolerates(&tol("other", "Exists", "", ""), &t));
        assert!(
            tolerates(&tol("", "Exists", "", ""), &t),
            "empty key + Exists tolerates everything"
        );
        assert!(tolerates(&tol("", "Exists", "", NO_SCHEDULE), &t));
        assert!(!tolerates(&tol("", "Exists", "", PREFER_NO_SCHEDULE), &t));
        assert!(
            !tolerates(&tol("k", "Lt", "v", ""), &t),
            "unknown operators tolerate nothing"
        );
        let no_value = taint("k", "", NO_SCHEDULE);
        assert!(tolerates(&tol("k", "Equal", "", ""), &no_value));
    }

    #[test]
    fn filter_reason_text() {
        let state = CycleState::new();
        let c = cluster(vec![
            taint("soft", "x", PREFER_NO_SCHEDULE),
            taint("clusters.clusternet.io/unschedulable", "", NO_SCHEDULE),
            taint("node.kubernetes.io/not-ready", "true", NO_EXECUTE),
        ]);
        let err = TaintToleration
            .filter(&state, &sub(vec![]), &c)
            .expect_err("untolerated");
        assert_eq!(
            err.code(),
            crate::scheduler::framework::Code::UnschedulableAndUnresolvable
        );
        assert_eq!(
            err.message(),
            "clusters(s) had taint {clusters.clusternet.io/unschedulable: }, that the subscription didn't tolerate"
        );
        let s = sub(vec![tol(
            "clusters.clusternet.io/unschedulable",
            "Exists",
            "",
            NO_SCHEDULE,
        )]);
        assert_eq!(
            TaintToleration
                .filter(&state, &s, &c)
                .expect_err("second taint")
                .message(),
            "clusters(s) had taint {node.kubernetes.io/not-ready: true}, that the subscription didn't tolerate"
        );
        let s = sub(vec![tol("", "Exists", "", "")]);
        assert!(TaintToleration.filter(&state, &s, &c).is_ok());
        // PreferNoSchedule never filters.
        let c = cluster(vec![taint("soft", "x", PREFER_NO_SCHEDULE)]);
        assert!(TaintToleration.filter(&state, &sub(vec![]), &c).is_ok());
    }

    #[test]
    fn scores_count_prefer_no_schedule_and_normalize_reversed() {
        let state = CycleState::new();
        let s = sub(vec![
            tol("tolerated", "Exists", "", PREFER_NO_SCHEDULE),
            // NoSchedule-only tolerations do not count for scoring.
            tol("hard-tolerated", "Exists", "", NO_SCHEDULE),
        ]);
        let clusters = [
            cluster(vec![]),
            cluster(vec![taint("a", "1", PREFER_NO_SCHEDULE)]),
            cluster(vec![
                taint("a", "1", PREFER_NO_SCHEDULE),
                taint("hard-tolerated", "", PREFER_NO_SCHEDULE),
                taint("tolerated", "", PREFER_NO_SCHEDULE),
                taint("x", "", NO_SCHEDULE),
            ]),
        ];
        let raw: Vec<i64> = clusters
            .iter()
            .map(|c| TaintToleration.score(&state, &s, c).expect("scores"))
            .collect();
        assert_eq!(raw, [0, 1, 2]);
        let mut scores: Vec<ClusterScore> = raw
            .iter()
            .map(|&score| ClusterScore {
                score,
                ..Default::default()
            })
            .collect();
        TaintToleration
            .normalize_scores(&state, &s, &mut scores)
            .expect("normalizes");
        assert_eq!(
            scores.iter().map(|s| s.score).collect::<Vec<_>>(),
            [100, 50, 0]
        );

        let mut scores = vec![ClusterScore::default(); 2];
        default_normalize_score(100, true, &mut scores);
        assert_eq!(
            scores.iter().map(|s| s.score).collect::<Vec<_>>(),
            [100, 100]
        );
        let mut scores: Vec<ClusterScore> = [1, 3]
            .iter()
            .map(|&score| ClusterScore {
                score,
                ..Default::default()
            })
            .collect();
        default_normalize_score(100, true, &mut scores);
        // 100 - 100*1/3 (integer division) = 67.
        assert_eq!(scores.iter().map(|s| s.score).collect::<Vec<_>>(), [67, 0]);
    }
}
