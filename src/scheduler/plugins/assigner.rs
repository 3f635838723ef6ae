//! `StaticAssigner` and `DynamicAssigner` (scheduler.md §5.6): how `Dividing` Subscriptions split
//! each workload feed's desired replicas among the selected clusters.
//!
//! Upstream: `framework/plugins/defaultassigner/{static,dynamic,algorithm}.go`. The arithmetic is
//! Go's with two deliberate differences:
//! - remainder ordering uses a stable sort (ties keep cluster order). Go's `sort.Slice` is only
//!   stable up to 12 elements (insertion sort), so results agree there and are deterministic
//!   beyond;
//! - Dynamic division multiplies and sums in 64 bits. Go multiplies `capacity * desired` and sums
//!   capacities in `int32`, which wraps (to garbage, even negative replicas) once the product
//!   passes 2^31, e.g. 50 000 replicas on a cluster predicting 50 000.

use std::sync::Arc;

use crate::apis::{
    DynamicDividingStrategy, Feed, FeedInventory, ManagedCluster, ReplicaDividingType, Subscriber,
    Subscription,
};
use crate::kube_ext::labels::Selector;
use crate::scheduler::framework::{
    AssignPlugin, CycleState, Plugin, PreAssignPlugin, Status, TargetClusters,
};
use crate::scheduler::plugins::names;

fn dividing_type(sub: &Subscription) -> Option<ReplicaDividingType> {
    sub.spec.dividing_scheduling.as_ref().map(|d| d.type_)
}

fn clamp_i32(v: i128) -> i32 {
    i32::try_from(v).unwrap_or(if v < 0 { i32::MIN } else { i32::MAX })
}

/// Static weight of each cluster: the sum of `weight` over subscribers with `weight > 0` whose
/// affinity matches the cluster's labels (a subscriber with an invalid selector counts for no
/// cluster, as in Go).
pub fn static_weights(subscribers: &[Subscriber], clusters: &[&ManagedCluster]) -> Vec<i64> {
    let selectors: Vec<(i64, Selector)> = subscribers
        .iter()
        .filter(|s| s.weight > 0)
        .filter_map(|s| {
            Selector::from_label_selector(&s.cluster_affinity)
                .ok()
                .map(|sel| (i64::from(s.weight), sel))
        })
        .collect();
    let empty = Default::default();
    clusters
        .iter()
        .map(|c| {
            let labels = c.metadata.labels.as_ref().unwrap_or(&empty);
            selectors
                .iter()
                .filter(|(_, sel)| sel.matches(labels))
                .map(|(w, _)| *w)
                .sum()
        })
        .collect()
}

/// Divides `desired` replicas by static weights: `floor(w * D / S)` each, then one more for the
/// first `D - sum` clusters by weight descending (ties: lower index first). All zeros when the
/// weights sum to 0 (callers produce no replicas then).
pub fn static_divide_replicas(desired: i32, weights: &[i64]) -> Vec<i32> {
    // 128 bits: a cluster's weight sums the weights of every subscriber matching it, so two of
    // weight i32::MAX make 2^32, and `w * D` then overflowed i64 for D near i32::MAX (a panic in
    // debug builds, garbage shares in release; found by the fuzz harnesses)
    let total: i128 = weights.iter().map(|&w| i128::from(w)).sum();
    if total == 0 {
        return vec![0; weights.len()];
    }
    let d = i128::from(desired);
    let mut result: Vec<i128> = weights.iter().map(|&w| i128::from(w) * d / total).collect();
    let remain = d - result.iter().sum::<i128>();
    if remain > 0 {
        let mut order: Vec<usize> = (0..weights.len()).collect();
        order.sort_by(|&a, &b| weights[b].cmp(&weights[a]));
        for &i in order.iter().take(usize::try_from(remain).unwrap_or(0)) {
            result[i] += 1;
        }
    }
    result.into_iter().map(clamp_i32).collect()
}

/// Divides `desired` (negative to scale down) in proportion to `max_available`
/// (Go's `dynamicDivideReplicas`). If capacities sum to 0 or `desired` exceeds their sum, every
/// cluster gets its full capacity (the total may then stay below `desired`). Otherwise each gets
/// `trunc(w * D / S)` and the remainder goes one by one to the largest fractional parts (ties:
/// lower index first), subtracting when the remainder is negative.
pub fn dynamic_divide_replicas(desired: i32, max_available: &[i32]) -> Vec<i32> {
    // 128 bits: capacities of mixed signs (a predictor answering a negative number) can sum to
    // a tiny total, and the shares `w * D / S` then summed past i64 (found by the fuzz harnesses)
    let total: i128 = max_available.iter().map(|&w| i128::from(w)).sum();
    let d = i128::from(desired);
    if total == 0 || d > total {
        return max_available.to_vec();
    }
    let mut result = Vec::with_capacity(max_available.len());
    let mut fractions = Vec::with_capacity(max_available.len());
    for &w in max_available {
        let product = i128::from(w) * d;
        let share = product / total;
        result.push(share);
        // Go computes the fraction in float64 the same way.
        #[allow(clippy::cast_precision_loss)]
        fractions.push((product as f64 / total as f64 - share as f64).abs());
    }
    let remain = d - result.iter().sum::<i128>();
    let mut order: Vec<usize> = (0..max_available.len()).collect();
    order.sort_by(|&a, &b| fractions[b].total_cmp(&fractions[a]));
    let step = remain.signum();
    for &i in order
        .iter()
        .take(usize::try_from(remain.unsigned_abs()).unwrap_or(usize::MAX))
    {
        result[i] += step;
    }
    result.into_iter().map(clamp_i32).collect()
}

/// Divides by subscriber weights (`dividingScheduling.type: Static`).
#[derive(Debug, Default, Clone, Copy)]
pub struct StaticAssigner;

impl Plugin for StaticAssigner {
    fn name(&self) -> &str {
        names::STATIC_ASSIGNER
    }
    fn as_assign(self: Arc<Self>) -> Option<Arc<dyn AssignPlugin>> {
        Some(self)
    }
}

impl AssignPlugin for StaticAssigner {
    fn assign(
        &self,
        _state: &CycleState,
        sub: &Subscription,
        inventory: &FeedInventory,
        available: &TargetClusters,
        clusters: &[&ManagedCluster],
    ) -> Result<TargetClusters, Status> {
        if dividing_type(sub) != Some(ReplicaDividingType::Static) {
            return Err(Status::skip(""));
        }
        let mut result =
            TargetClusters::new(available.binding_clusters.clone(), Default::default());
        let weights = static_weights(&sub.spec.subscribers, clusters);
        if weights.iter().sum::<i64>() == 0 {
            return Ok(result);
        }
        for feed in &sub.spec.feeds {
            let desired = inventory
                .spec
                .feeds
                .iter()
                .find(|order| order.feed == *feed)
                .and_then(|order| order.desired_replicas);
            let replicas = match desired {
                Some(d) => static_divide_replicas(d, &weights),
                None => Vec::new(),
            };
            result.replicas.insert(feed.key(), replicas);
        }
        Ok(result)
    }
}

/// Cycle-state key of the deviations computed at PreAssign.
const PRE_ASSIGN_STATE_KEY: &str = "PreAssignDynamicAssigner";

/// One FeedInventory feed and how many replicas it lacks (negative: has too many); `None` for
/// feeds without `desiredReplicas`.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Deviation {
    feed: Feed,
    replicas: Option<i32>,
}

/// Divides by predicted capacity (`dividingScheduling.type: Dynamic`), moving only the
/// difference between desired and currently assigned replicas.
#[derive(Debug, Default, Clone, Copy)]
pub struct DynamicAssigner;

impl Plugin for DynamicAssigner {
    fn name(&self) -> &str {
        names::DYNAMIC_ASSIGNER
    }
    fn as_pre_assign(self: Arc<Self>) -> Option<Arc<dyn PreAssignPlugin>> {
        Some(self)
    }
    fn as_assign(self: Arc<Self>) -> Option<Arc<dyn AssignPlugin>> {
        Some(self)
    }
}

const MISSING_DYNAMIC_DIVIDING: &str =
    "must specify field DynamicDividing when dividing type is dynamic";

impl PreAssignPlugin for DynamicAssigner {
    fn pre_assign(
        &self,
        state: &CycleState,
        sub: &Subscription,
        inventory: &FeedInventory,
        _available: &TargetClusters,
        _clusters: &[&ManagedCluster],
    ) -> Result<(), Status> {
        let Some(dividing) = &sub.spec.dividing_scheduling else {
            return Ok(());
        };
        if dividing.type_ != ReplicaDividingType::Dynamic {
            return Ok(());
        }
        if dividing.dynamic_dividing.is_none() {
            return Err(Status::error(MISSING_DYNAMIC_DIVIDING));
        }
        let current = sub.status.as_ref().map(|s| &s.replicas);
        let deviations: Vec<Deviation> = inventory
            .spec
            .feeds
            .iter()
            .map(|order| Deviation {
                feed: order.feed.clone(),
                replicas: order.desired_replicas.map(|desired| {
                    // Go sums in int32 (wrapping); replica counts never get near that.
                    let assigned = current
                        .and_then(|r| r.get(&order.feed.key()))
                        .map_or(0, |v| v.iter().fold(0_i32, |a, b| a.wrapping_add(*b)));
                    desired.wrapping_sub(assigned)
                }),
            })
            .collect();
        state.write(PRE_ASSIGN_STATE_KEY, deviations);
        Ok(())
    }
}

impl AssignPlugin for DynamicAssigner {
    fn assign(
        &self,
        state: &CycleState,
        sub: &Subscription,
        _inventory: &FeedInventory,
        available: &TargetClusters,
        _clusters: &[&ManagedCluster],
    ) -> Result<TargetClusters, Status> {
        if dividing_type(sub) != Some(ReplicaDividingType::Dynamic) {
            return Err(Status::skip(""));
        }
        let deviations = state
            .read::<Vec<Deviation>>(PRE_ASSIGN_STATE_KEY)
            .ok_or_else(|| {
                Status::error(format!(
                    "error reading {PRE_ASSIGN_STATE_KEY:?} from cycleState: not found"
                ))
            })?;
        let strategy = sub
            .spec
            .dividing_scheduling
            .as_ref()
            .and_then(|d| d.dynamic_dividing.as_ref())
            .map(|d| d.strategy)
            .ok_or_else(|| Status::error(MISSING_DYNAMIC_DIVIDING))?;
        Ok(dynamic_assign(sub, strategy, &deviations, available))
    }
}

/// Go's `DynamicDivideReplicas`: starting from the current binding, scale each feed up (first
/// schedule, or positive deviation: divide over the available capacity of the selected
/// clusters) or down (negative deviation: divide over the current assignment), merging each
/// feed's result in. `Binpack` changes nothing (not implemented upstream).
fn dynamic_assign(
    sub: &Subscription,
    strategy: DynamicDividingStrategy,
    deviations: &[Deviation],
    available: &TargetClusters,
) -> TargetClusters {
    let (current_clusters, current_replicas) = sub
        .status
        .as_ref()
        .map(|s| (s.binding_clusters.clone(), s.replicas.clone()))
        .unwrap_or_default();
    let mut result = TargetClusters::new(current_clusters.clone(), current_replicas.clone());
    let spread = strategy == DynamicDividingStrategy::Spread;
    for deviation in deviations {
        let key = deviation.feed.key();
        let scheduled = current_replicas.contains_key(&key);
        let d = deviation.replicas;
        let part = if (!scheduled || d.is_some_and(|d| d > 0)) && spread {
            let replicas = match d {
                Some(d) => dynamic_divide_replicas(
                    d,
                    available.replicas.get(&key).map_or(&[][..], Vec::as_slice),
                ),
                None => Vec::new(),
            };
            TargetClusters::new(available.binding_clusters.clone(), [(key, replicas)].into())
        } else if d.is_some_and(|d| d < 0) && spread {
            let replicas = match d {
                Some(d) => dynamic_divide_replicas(
                    d,
                    current_replicas.get(&key).map_or(&[][..], Vec::as_slice),
                ),
                None => Vec::new(),
            };
            TargetClusters::new(current_clusters.clone(), [(key, replicas)].into())
        } else {
            TargetClusters::default()
        };
        result.merge_one_feed(&part);
    }
    result
}

#[cfg(test)]
mod tests;
