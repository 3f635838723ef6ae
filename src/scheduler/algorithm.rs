//! One scheduling attempt for one Subscription (scheduler.md §5, Go's `algorithm/generic.go`):
//! candidates by cluster affinity -> PreFilter/Filter -> (Dynamic) PrePredict/Predict ->
//! PreScore/Score -> subgroups -> selection and PreAssign/Assign.
//!
//! Pure apart from the predict plugins' I/O: the caller passes every ManagedCluster and the
//! FeedInventory it read from its cache. Deterministic where Go depends on goroutine timing:
//! clusters are considered in `namespace/name` order, filtering is sequential and stops at
//! exactly the number of feasible clusters wanted, equal scores are ordered by
//! `namespace/name`, and prediction failures are examined in cluster order.

use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use crate::apis::placement::{Explanation, Verdict};
use crate::apis::{
    FeedInventory, ManagedCluster, ReplicaDividingType, SchedulingStrategy, Subscription,
};
use crate::kube_ext::labels::{LabelSelectorError, Selector};
use crate::scheduler::framework::{
    ClusterScore, Code, CycleState, Framework, PluginFailure, Status, TargetClusters, cluster_key,
};
use crate::scheduler::record::Recorder;

/// At least this many feasible clusters are looked for (Go's `minFeasibleClustersToFind`).
const MIN_FEASIBLE_CLUSTERS_TO_FIND: usize = 100;
/// Lower bound of the adaptive percentage (Go's `minFeasibleClustersPercentageToFind`).
const MIN_FEASIBLE_CLUSTERS_PERCENTAGE_TO_FIND: i64 = 5;

/// Where the next filter pass starts in the candidate list (Go's `nextStartClusterIndex`), so
/// that every cluster gets the same chance across cycles when filtering stops early. Keep one
/// per scheduler and pass it to every [`schedule`] call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FilterOffset {
    next_start_cluster_index: usize,
}

impl FilterOffset {
    /// The current offset.
    pub fn get(&self) -> usize {
        self.next_start_cluster_index
    }
}

/// A successful scheduling attempt.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ScheduleResult {
    /// The chosen clusters (score order) and, for `Dividing`, replicas per feed.
    pub suggested: TargetClusters,
    /// Clusters that went through filtering.
    pub evaluated_clusters: usize,
    /// Clusters that passed filtering.
    pub feasible_clusters: usize,
}

/// "No cluster fits": message `0/<all ManagedClusters> clusters are available: <n> <reason>, ...`
/// with the reasons histogram sorted as strings (Go's `FitError`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("0/{num_all_clusters} clusters are available: {}.", self.reasons_histogram().join(", "))]
pub struct FitError {
    /// Number of ManagedClusters known (not only candidates).
    pub num_all_clusters: usize,
    /// Why each rejected cluster (`namespace/name`) was rejected.
    pub diagnosis: BTreeMap<String, Status>,
}

impl FitError {
    /// `"<count> <reason>"` per distinct reason, sorted as strings.
    pub fn reasons_histogram(&self) -> Vec<String> {
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        for status in self.diagnosis.values() {
            for reason in status.reasons() {
                *counts.entry(reason.as_str()).or_default() += 1;
            }
        }
        let mut lines: Vec<String> = counts
            .into_iter()
            .map(|(reason, count)| format!("{count} {reason}"))
            .collect();
        lines.sort();
        lines
    }
}

/// Why a scheduling attempt failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    /// There is no ManagedCluster at all (retried with backoff).
    #[error("no clusters available to schedule subscriptions")]
    NoClustersAvailable,
    /// No candidate passed filtering: not retried, and the cycle binds an empty result (which
    /// removes the workloads from every cluster).
    #[error(transparent)]
    Fit(#[from] FitError),
    /// A `Dividing` Subscription was scheduled without its FeedInventory (a caller bug: §4.3
    /// says to drop the cycle and wait for the inventory).
    #[error("FeedInventory {0} is required to schedule a Dividing subscription")]
    MissingFeedInventory(String),
    /// A subscriber's `clusterAffinity` is not a valid label selector.
    #[error("invalid clusterAffinity of subscriber {index}: {source}")]
    InvalidClusterAffinity {
        /// Index in `spec.subscribers`.
        index: usize,
        /// What is wrong.
        #[source]
        source: LabelSelectorError,
    },
    /// `schedulingBySubGroup` with a subscriber lacking `subGroupStrategy` (Go's text, typo
    /// included).
    #[error("subGroupStrategy filed can not be Empty")]
    SubGroupStrategyEmpty,
    /// Subgrouping left no cluster.
    #[error("empty clusterScoreList")]
    EmptyClusterScoreList,
    /// Dynamic dividing without a prediction for a workload feed on a selected cluster.
    #[error("unable to get replicas for feed {feed:?} in cluster {cluster:?}")]
    ReplicasUnavailable {
        /// Feed key.
        feed: String,
        /// Cluster `namespace/name`.
        cluster: String,
    },
    /// A plugin failed (predictor errors, missing `dynamicDividing`, assign skipped...).
    #[error(transparent)]
    Plugin(#[from] PluginFailure),
}

impl ScheduleError {
    /// Is this "no cluster fits" (Go tests the message for `clusters are available`)?
    pub fn is_fit_error(&self) -> bool {
        matches!(self, ScheduleError::Fit(_))
    }

    /// Should the Subscription go back to the queue with backoff? Everything but a fit error.
    pub fn should_requeue(&self) -> bool {
        !self.is_fit_error()
    }
}

/// How many feasible clusters end the filter pass (Go's `numFeasibleClustersToFind`).
pub fn num_feasible_clusters_to_find(
    num_candidates: usize,
    percentage_of_clusters_to_score: i32,
    strategy: SchedulingStrategy,
) -> usize {
    if num_candidates < MIN_FEASIBLE_CLUSTERS_TO_FIND
        || percentage_of_clusters_to_score >= 100
        || strategy == SchedulingStrategy::Replication
    {
        return num_candidates;
    }
    let n = i64::try_from(num_candidates).unwrap_or(i64::MAX);
    let mut percentage = i64::from(percentage_of_clusters_to_score);
    if percentage <= 0 {
        percentage = (50 - n / 125).max(MIN_FEASIBLE_CLUSTERS_PERCENTAGE_TO_FIND);
    }
    let wanted = usize::try_from(n.saturating_mul(percentage) / 100).unwrap_or(num_candidates);
    wanted.max(MIN_FEASIBLE_CLUSTERS_TO_FIND)
}

fn subscription_key(sub: &Subscription) -> String {
    let ns = sub.metadata.namespace.as_deref().unwrap_or_default();
    let name = sub.metadata.name.as_deref().unwrap_or_default();
    if ns.is_empty() {
        name.to_owned()
    } else {
        format!("{ns}/{name}")
    }
}

fn labels_of(cluster: &ManagedCluster) -> &BTreeMap<String, String> {
    static EMPTY: BTreeMap<String, String> = BTreeMap::new();
    cluster.metadata.labels.as_ref().unwrap_or(&EMPTY)
}

/// Union over subscribers of the clusters matching their affinity, in `namespace/name` order
/// within each subscriber, first occurrence kept; clusters being deleted are dropped.
fn candidates<'a>(
    sub: &Subscription,
    sorted: &[(String, &'a ManagedCluster)],
) -> Result<Vec<(String, &'a ManagedCluster)>, ScheduleError> {
    // by position in `sorted` (whose keys are unique), not a set of names
    let mut seen = vec![false; sorted.len()];
    let mut out = Vec::new();
    for (index, subscriber) in sub.spec.subscribers.iter().enumerate() {
        let selector = Selector::from_label_selector(&subscriber.cluster_affinity)
            .map_err(|source| ScheduleError::InvalidClusterAffinity { index, source })?;
        for ((key, cluster), seen) in sorted.iter().zip(seen.iter_mut()) {
            if cluster.metadata.deletion_timestamp.is_some()
                || *seen
                || !selector.matches(labels_of(cluster))
            {
                continue;
            }
            *seen = true;
            out.push((key.clone(), *cluster));
        }
    }
    Ok(out)
}

/// Schedules `sub` onto `clusters` (all ManagedClusters of the cache) with profile `fwk`.
///
/// `inventory` is required for `Dividing`; `state` must be the cycle's state, reused for
/// reserve/permit/bind; `offset` is the scheduler's rotating filter offset.
pub async fn schedule(
    fwk: &Framework,
    state: &CycleState,
    offset: &mut FilterOffset,
    sub: &Subscription,
    clusters: &[impl Borrow<ManagedCluster>],
    inventory: Option<&FeedInventory>,
) -> Result<ScheduleResult, ScheduleError> {
    schedule_explained(fwk, state, offset, sub, clusters, inventory, None).await
}

/// [`schedule`], recording into `explanation` (when given) why each cluster was kept or
/// dropped: the placement what-if runs exactly this, so its answer is the scheduler's.
pub async fn schedule_explained(
    fwk: &Framework,
    state: &CycleState,
    offset: &mut FilterOffset,
    sub: &Subscription,
    clusters: &[impl Borrow<ManagedCluster>],
    inventory: Option<&FeedInventory>,
    explanation: Option<&mut Explanation>,
) -> Result<ScheduleResult, ScheduleError> {
    let mut rec = Recorder(explanation);
    let result = schedule_recorded(fwk, state, offset, sub, clusters, inventory, &mut rec).await;
    match &result {
        Ok(r) => rec.decided(&r.suggested.binding_clusters, &r.suggested.replicas),
        Err(e) => rec.failed(e.to_string()),
    }
    result
}

async fn schedule_recorded(
    fwk: &Framework,
    state: &CycleState,
    offset: &mut FilterOffset,
    sub: &Subscription,
    clusters: &[impl Borrow<ManagedCluster>],
    inventory: Option<&FeedInventory>,
    rec: &mut Recorder<'_>,
) -> Result<ScheduleResult, ScheduleError> {
    let strategy = sub.spec.effective_scheduling_strategy();
    let mut sorted: Vec<(String, &ManagedCluster)> = clusters
        .iter()
        .map(|c| (cluster_key(c.borrow()), c.borrow()))
        .collect();
    sorted.sort_by(|a, b| a.0.cmp(&b.0));
    if rec.on() {
        let keys: Vec<String> = sorted.iter().map(|(k, _)| k.clone()).collect();
        rec.start(format!("{strategy:?}"), &keys);
    }
    if clusters.is_empty() {
        return Err(ScheduleError::NoClustersAvailable);
    }
    let dividing = strategy == SchedulingStrategy::Dividing;
    let inventory = match (dividing, inventory) {
        (true, None) => return Err(ScheduleError::MissingFeedInventory(subscription_key(sub))),
        (true, Some(inv)) => Some(inv),
        (false, _) => None,
    };
    let fit_error = |diagnosis| {
        ScheduleError::Fit(FitError {
            num_all_clusters: clusters.len(),
            diagnosis,
        })
    };

    // Step 1: filter.
    let candidates = candidates(sub, &sorted)?;
    if rec.on() {
        record_affinity(rec, sub, &sorted, &candidates);
    }
    if candidates.is_empty() {
        return Err(fit_error(BTreeMap::new()));
    }
    if let Some(diagnosis) = pre_filter(fwk, state, sub, &candidates, rec)? {
        return Err(fit_error(diagnosis));
    }
    let (feasible, diagnosis) = filter(fwk, state, offset, sub, &candidates, strategy, rec)?;
    if feasible.is_empty() {
        return Err(fit_error(diagnosis));
    }
    let evaluated_clusters = feasible.len() + diagnosis.len();
    let feasible_clusters = feasible.len();
    let dynamic = sub
        .spec
        .dividing_scheduling
        .as_ref()
        .is_some_and(|d| d.type_ == ReplicaDividingType::Dynamic);
    let predictable = inventory.filter(|_| dynamic);
    let scored = predict_and_score(fwk, state, sub, predictable, &feasible, rec).await?;

    // Step 4: subgroups.
    let selected = if sub.spec.effective_scheduling_by_sub_group() {
        subgroup(sub, scored)?
    } else {
        scored
    };

    // Step 5: select and assign.
    let suggested = select(fwk, state, sub, inventory, dynamic, &selected)?;
    Ok(ScheduleResult {
        suggested,
        evaluated_clusters,
        feasible_clusters,
    })
}

/// The PreFilter point: the diagnosis when it finds the Subscription unschedulable (on every
/// candidate), an error when it fails otherwise.
fn pre_filter(
    fwk: &Framework,
    state: &CycleState,
    sub: &Subscription,
    candidates: &Feasible<'_>,
    rec: &mut Recorder<'_>,
) -> Result<Option<BTreeMap<String, Status>>, ScheduleError> {
    let Err(failure) = fwk.run_pre_filter(state, sub) else {
        return Ok(None);
    };
    if !failure.status.is_unschedulable() {
        return Err(failure.into());
    }
    for (key, _) in candidates {
        rec.rejected(key, &failure);
    }
    Ok(Some(
        candidates
            .iter()
            .map(|(key, _)| (key.clone(), failure.status.clone()))
            .collect(),
    ))
}

/// Steps 2 and 3: the feasible clusters' predicted capacity (Dynamic dividing with predict
/// plugins only: `inventory` given) and scores, best first; ties by namespace/name so that
/// truncation is reproducible.
async fn predict_and_score<'c>(
    fwk: &Framework,
    state: &CycleState,
    sub: &Subscription,
    inventory: Option<&FeedInventory>,
    feasible: &Feasible<'c>,
    rec: &mut Recorder<'_>,
) -> Result<Vec<(ClusterScore, &'c ManagedCluster)>, ScheduleError> {
    let feasible_refs: Vec<&ManagedCluster> = feasible.iter().map(|(_, c)| *c).collect();
    let feed_count = inventory.map_or(0, |inv| inv.spec.feeds.len());
    let mut scored: Vec<(ClusterScore, &ManagedCluster)> = feasible
        .iter()
        .map(|(key, cluster)| {
            let score = ClusterScore {
                namespaced_name: key.clone(),
                score: 0,
                max_available_replicas: vec![None; feed_count],
            };
            (score, *cluster)
        })
        .collect();
    if let Some(inv) = inventory
        && fwk.has_predict_plugins()
    {
        fwk.run_pre_predict(state, sub, inv, &feasible_refs)?;
        let predictions = fwk.run_predict(state, sub, inv, &feasible_refs).await?;
        for ((score, _), prediction) in scored.iter_mut().zip(predictions) {
            rec.predicted(&score.namespaced_name, &prediction);
            score.max_available_replicas = prediction;
        }
    }
    if fwk.has_score_plugins() {
        fwk.run_pre_score(state, sub, &feasible_refs)?;
        let keys: Vec<String> = feasible.iter().map(|(k, _)| k.clone()).collect();
        let totals = fwk.run_score(state, sub, &feasible_refs, &keys)?;
        for ((score, _), total) in scored.iter_mut().zip(totals) {
            rec.score(&score.namespaced_name, total);
            score.score = total;
        }
    } else {
        for (score, _) in &mut scored {
            score.score = 1;
        }
    }
    scored.sort_by(|(a, _), (b, _)| {
        b.score
            .cmp(&a.score)
            .then_with(|| a.namespaced_name.cmp(&b.namespaced_name))
    });
    Ok(scored)
}

type Feasible<'a> = Vec<(String, &'a ManagedCluster)>;

/// Why each cluster that is not a candidate is not: being deleted, or per subscriber the first
/// term of its `clusterAffinity` the cluster's labels miss (the selectors are valid: building
/// the candidates checked them).
fn record_affinity(
    rec: &mut Recorder<'_>,
    sub: &Subscription,
    sorted: &[(String, &ManagedCluster)],
    candidates: &[(String, &ManagedCluster)],
) {
    let selectors: Vec<Selector> = sub
        .spec
        .subscribers
        .iter()
        .filter_map(|s| Selector::from_label_selector(&s.cluster_affinity).ok())
        .collect();
    let candidate: BTreeSet<&str> = candidates.iter().map(|(k, _)| k.as_str()).collect();
    for (key, cluster) in sorted {
        if candidate.contains(key.as_str()) {
            continue;
        }
        let verdict = if cluster.metadata.deletion_timestamp.is_some() {
            Verdict::Deleting
        } else {
            let labels = labels_of(cluster);
            Verdict::AffinityMissed {
                terms: selectors
                    .iter()
                    .filter_map(|s| s.first_unmatched(labels))
                    .collect(),
            }
        };
        rec.verdict(key, verdict);
    }
}

/// Runs filter plugins from the rotating offset until enough clusters are feasible.
fn filter<'a>(
    fwk: &Framework,
    state: &CycleState,
    offset: &mut FilterOffset,
    sub: &Subscription,
    candidates: &[(String, &'a ManagedCluster)],
    strategy: SchedulingStrategy,
    rec: &mut Recorder<'_>,
) -> Result<(Feasible<'a>, BTreeMap<String, Status>), ScheduleError> {
    let n = candidates.len();
    let wanted =
        num_feasible_clusters_to_find(n, fwk.options().percentage_of_clusters_to_score, strategy);
    let start = offset.next_start_cluster_index % n;
    let at = |i: usize| &candidates[(start + i) % n];
    let mut feasible = Vec::new();
    let mut diagnosis = BTreeMap::new();
    if !fwk.has_filter_plugins() {
        feasible.extend((0..wanted).map(|i| at(i).clone()));
        for (key, _) in &feasible {
            rec.verdict(key, Verdict::Feasible);
        }
        offset.next_start_cluster_index = (start + wanted) % n;
        return Ok((feasible, diagnosis));
    }
    let began = Instant::now();
    let mut processed = 0;
    for i in 0..n {
        if feasible.len() >= wanted {
            break;
        }
        let (key, cluster) = at(i);
        processed += 1;
        match fwk.run_filter(state, sub, cluster) {
            Ok(Ok(())) => {
                rec.verdict(key, Verdict::Feasible);
                feasible.push((key.clone(), *cluster));
            }
            Ok(Err(rejected)) => {
                rec.rejected(key, &rejected);
                diagnosis.insert(key.clone(), rejected.status);
            }
            Err(failure) => {
                offset.next_start_cluster_index = (start + processed) % n;
                fwk.observe_filter(Code::Error, began);
                return Err(failure.into());
            }
        }
    }
    offset.next_start_cluster_index = (start + processed) % n;
    fwk.observe_filter(Code::Success, began);
    Ok((feasible, diagnosis))
}

/// For each subscriber in order, the first `minClusters` scored clusters matching its affinity
/// (a cluster matching two subscribers can appear twice; a subscriber with an invalid selector
/// contributes nothing, as in Go).
fn subgroup<'a>(
    sub: &Subscription,
    scored: Vec<(ClusterScore, &'a ManagedCluster)>,
) -> Result<Vec<(ClusterScore, &'a ManagedCluster)>, ScheduleError> {
    let mut result = Vec::new();
    for subscriber in &sub.spec.subscribers {
        let Ok(selector) = Selector::from_label_selector(&subscriber.cluster_affinity) else {
            continue;
        };
        let strategy = subscriber
            .sub_group_strategy
            .as_ref()
            .ok_or(ScheduleError::SubGroupStrategyEmpty)?;
        let take = usize::try_from(strategy.min_clusters).unwrap_or(0);
        result.extend(
            scored
                .iter()
                .filter(|(_, c)| selector.matches(labels_of(c)))
                .take(take)
                .cloned(),
        );
    }
    Ok(result)
}

/// Selection (§5.6): the clusters in order; for `Dividing`, the available replicas (Dynamic) and
/// the PreAssign/Assign plugins.
fn select(
    fwk: &Framework,
    state: &CycleState,
    sub: &Subscription,
    inventory: Option<&FeedInventory>,
    dynamic: bool,
    selected: &[(ClusterScore, &ManagedCluster)],
) -> Result<TargetClusters, ScheduleError> {
    if selected.is_empty() {
        return Err(ScheduleError::EmptyClusterScoreList);
    }
    let mut available = TargetClusters {
        binding_clusters: selected
            .iter()
            .map(|(s, _)| s.namespaced_name.clone())
            .collect(),
        replicas: BTreeMap::new(),
    };
    let Some(inventory) = inventory else {
        return Ok(available);
    };
    if dynamic {
        // what the scheduler assigned and the clusters do not report yet (no over-commit)
        let taken = state
            .read::<crate::scheduler::reservation::Taken>(crate::scheduler::reservation::TAKEN);
        for (index, order) in inventory.spec.feeds.iter().enumerate() {
            if order.desired_replicas.is_none() {
                continue;
            }
            let feed = order.feed.key();
            let mut per_cluster = Vec::with_capacity(selected.len());
            for (score, _) in selected {
                let value = score
                    .max_available_replicas
                    .get(index)
                    .copied()
                    .flatten()
                    .ok_or_else(|| ScheduleError::ReplicasUnavailable {
                        feed: feed.clone(),
                        cluster: score.namespaced_name.clone(),
                    })?;
                let held = taken.as_ref().map_or(0, |t| {
                    t.0.get(&(score.namespaced_name.clone(), feed.clone()))
                        .copied()
                        .unwrap_or(0)
                });
                // saturating: the prediction is an agent's answer over the network, and
                // `i32::MIN - held` overflowed (found by the fuzz harnesses)
                per_cluster.push(value.saturating_sub(held).max(0));
            }
            available.replicas.insert(feed, per_cluster);
        }
    }
    let clusters: Vec<&ManagedCluster> = selected.iter().map(|(_, c)| *c).collect();
    fwk.run_pre_assign(state, sub, inventory, &available, &clusters)?;
    Ok(fwk.run_assign(state, sub, inventory, &available, &clusters)?)
}

#[cfg(test)]
mod tests;
