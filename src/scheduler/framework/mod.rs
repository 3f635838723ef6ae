//! The scheduling framework: extension points as traits, the per-cycle state, the status every
//! plugin returns, and the result types that flow between the algorithm and the binder.
//!
//! Mirrors Clusternet's `pkg/scheduler/framework/interfaces` (itself kube-scheduler's framework
//! adapted to Subscriptions and ManagedClusters). A plugin is one object (`Arc<dyn Plugin>`) that
//! opts into extension points by overriding the matching `as_*` method of [`Plugin`] to return
//! itself; [`Framework`] (built from a profile and a [`Registry`]) runs them in the configured order.
//!
//! Differences from Go, on purpose:
//! - plugins get the `ManagedCluster` itself instead of a `namespace/name` to look up in an
//!   informer, so nothing here touches the API server;
//! - assign plugins also get the selected clusters (same index as `bindingClusters`), which
//!   Go's StaticAssigner fetched from the cache;
//! - `Predict`, `PreBind`, `Bind`, `PostBind` are async (boxed futures, so the traits stay
//!   dyn-compatible) because that is where I/O happens; the others are plain functions;
//! - PostAssign is not an extension point: Go never wires a plugin list to it.

pub mod registry;
mod runtime;

use std::any::Any;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::apis::{FeedInventory, ManagedCluster, Subscription, SubscriptionStatus};

pub use registry::{PluginFactory, Registry, RegistryError};
pub use runtime::{Framework, FrameworkOptions, PermitOutcome};

/// A boxed, `Send` future: the return type of the async extension points.
pub type BoxFuture<'a, T> = futures::future::BoxFuture<'a, T>;

/// Highest score a score plugin may return after normalization.
pub const MAX_CLUSTER_SCORE: i64 = 100;
/// Lowest score a score plugin may return after normalization.
pub const MIN_CLUSTER_SCORE: i64 = 0;

/// Outcome class of a plugin call (Go's `framework.Code`). Its string form is the `status`
/// label of the framework metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Code {
    /// The plugin ran and is happy.
    Success,
    /// Internal error: the cycle fails and the Subscription is retried with backoff.
    Error,
    /// The cluster does not fit, but might after preemption (unused by in-tree plugins).
    Unschedulable,
    /// The cluster does not fit and nothing will change that within this cycle.
    UnschedulableAndUnresolvable,
    /// Permit only: wait before binding.
    Wait,
    /// The plugin does not apply; the next one (assign, bind) is tried.
    Skip,
}

impl Code {
    /// The Go name of the code.
    pub fn as_str(self) -> &'static str {
        match self {
            Code::Success => "Success",
            Code::Error => "Error",
            Code::Unschedulable => "Unschedulable",
            Code::UnschedulableAndUnresolvable => "UnschedulableAndUnresolvable",
            Code::Wait => "Wait",
            Code::Skip => "Skip",
        }
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A non-trivial plugin result: a code and human-readable reasons. Plugins return
/// `Result<T, Status>`; `Ok` is Go's nil (Success) status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Status {
    code: Code,
    reasons: Vec<String>,
}

impl Status {
    /// A status with one reason (an empty reason adds none, like Go's `NewStatus(code, "")`).
    pub fn new(code: Code, reason: impl Into<String>) -> Self {
        let reason = reason.into();
        Self {
            code,
            reasons: if reason.is_empty() {
                Vec::new()
            } else {
                vec![reason]
            },
        }
    }

    /// An internal error.
    pub fn error(reason: impl Into<String>) -> Self {
        Self::new(Code::Error, reason)
    }

    /// The cluster does not fit (resolvable).
    pub fn unschedulable(reason: impl Into<String>) -> Self {
        Self::new(Code::Unschedulable, reason)
    }

    /// The cluster does not fit and will not within this cycle.
    pub fn unschedulable_and_unresolvable(reason: impl Into<String>) -> Self {
        Self::new(Code::UnschedulableAndUnresolvable, reason)
    }

    /// The plugin does not apply.
    pub fn skip(reason: impl Into<String>) -> Self {
        Self::new(Code::Skip, reason)
    }

    /// Adds a reason.
    pub fn with_reason(mut self, reason: impl Into<String>) -> Self {
        self.reasons.push(reason.into());
        self
    }

    /// The code.
    pub fn code(&self) -> Code {
        self.code
    }

    /// The reasons, in order.
    pub fn reasons(&self) -> &[String] {
        &self.reasons
    }

    /// The reasons joined by `", "` (Go's `Status.Message`).
    pub fn message(&self) -> String {
        self.reasons.join(", ")
    }

    /// `Unschedulable` or `UnschedulableAndUnresolvable`.
    pub fn is_unschedulable(&self) -> bool {
        matches!(
            self.code,
            Code::Unschedulable | Code::UnschedulableAndUnresolvable
        )
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message())
    }
}

/// Extension points, named as in the metrics' `extension_point` label.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ExtensionPoint {
    PreFilter,
    Filter,
    PostFilter,
    PrePredict,
    Predict,
    PreScore,
    Score,
    ScoreExtensionNormalize,
    PreAssign,
    Assign,
    PostAssign,
    Reserve,
    Unreserve,
    Permit,
    PreBind,
    Bind,
    PostBind,
}

impl ExtensionPoint {
    /// The Go name (metrics label value).
    pub fn as_str(self) -> &'static str {
        match self {
            ExtensionPoint::PreFilter => "PreFilter",
            ExtensionPoint::Filter => "Filter",
            ExtensionPoint::PostFilter => "PostFilter",
            ExtensionPoint::PrePredict => "PrePredict",
            ExtensionPoint::Predict => "Predict",
            ExtensionPoint::PreScore => "PreScore",
            ExtensionPoint::Score => "Score",
            ExtensionPoint::ScoreExtensionNormalize => "ScoreExtensionNormalize",
            ExtensionPoint::PreAssign => "PreAssign",
            ExtensionPoint::Assign => "Assign",
            ExtensionPoint::PostAssign => "PostAssign",
            ExtensionPoint::Reserve => "Reserve",
            ExtensionPoint::Unreserve => "Unreserve",
            ExtensionPoint::Permit => "Permit",
            ExtensionPoint::PreBind => "PreBind",
            ExtensionPoint::Bind => "Bind",
            ExtensionPoint::PostBind => "PostBind",
        }
    }
}

impl fmt::Display for ExtensionPoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A plugin failed at an extension point. `Display` is the text Go puts into the
/// `FailedScheduling` event for the same failure.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct PluginFailure {
    /// Where it failed.
    pub point: ExtensionPoint,
    /// Which plugin; `None` when no plugin decided (e.g. every assign plugin skipped).
    pub plugin: Option<String>,
    /// What the plugin returned.
    pub status: Status,
}

impl PluginFailure {
    pub(crate) fn new(point: ExtensionPoint, plugin: &str, status: Status) -> Self {
        Self {
            point,
            plugin: Some(plugin.to_owned()),
            status,
        }
    }
}

impl fmt::Display for PluginFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let msg = self.status.message();
        let Some(plugin) = &self.plugin else {
            // Nobody decided: Go reports the last status' code and message.
            let what = match self.point {
                ExtensionPoint::Bind => "bind",
                _ => "assign",
            };
            return write!(f, "{what} status: {}, {msg}", self.status.code());
        };
        match self.point {
            ExtensionPoint::Filter => write!(f, "running {plugin:?} filter plugin: {msg}"),
            ExtensionPoint::Predict => {
                write!(
                    f,
                    "running Predict plugins: plugin {plugin:?} failed with: {msg}"
                )
            }
            ExtensionPoint::Score => {
                write!(
                    f,
                    "running Score plugins: plugin {plugin:?} failed with: {msg}"
                )
            }
            ExtensionPoint::ScoreExtensionNormalize => write!(
                f,
                "running Normalize on Score plugins: plugin {plugin:?} failed with: {msg}"
            ),
            ExtensionPoint::Permit if self.status.is_unschedulable() => f.write_str(&msg),
            point => write!(f, "running {point} plugin {plugin:?}: {msg}"),
        }
    }
}

/// Predicted maximum acceptable replicas of one cluster, one entry per FeedInventory feed (same
/// index); `None` for feeds without `desiredReplicas` or when the prediction is unknown.
pub type FeedReplicas = Vec<Option<i32>>;

/// A scheduling result: the clusters (`namespace/name`) and, for `Dividing`, the replicas of each
/// feed key per cluster (same index as `binding_clusters`; non-workload feeds map to `[]`).
/// Go's `framework.TargetClusters`; an empty `replicas` is Go's nil map.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TargetClusters {
    /// `namespace/name` of the ManagedClusters.
    pub binding_clusters: Vec<String>,
    /// Feed key -> replicas per binding cluster.
    pub replicas: BTreeMap<String, Vec<i32>>,
}

impl TargetClusters {
    /// Builds a target from clusters and replicas.
    pub fn new(binding_clusters: Vec<String>, replicas: BTreeMap<String, Vec<i32>>) -> Self {
        Self {
            binding_clusters,
            replicas,
        }
    }

    /// Merges a partial result holding (at most) one feed into `self` (Go's `MergeOneFeed`,
    /// scheduler.md §5.6 "Merge"): replicas of clusters already present are added, new clusters
    /// are appended (with 0 for every other non-empty feed list).
    ///
    /// The sequence of steps is Go's, including its quirk that a stored list whose length differs
    /// from the cluster count is reset to zeros when an existing cluster is touched.
    pub fn merge_one_feed(&mut self, part: &TargetClusters) {
        if part.binding_clusters.is_empty() {
            return;
        }
        for (feed, values) in &part.replicas {
            if !self.replicas.contains_key(feed) {
                let init = if values.is_empty() {
                    Vec::new()
                } else {
                    vec![0; self.binding_clusters.len()]
                };
                self.replicas.insert(feed.clone(), init);
            }
        }
        let mut index: HashMap<String, usize> = HashMap::new();
        for (i, cluster) in self.binding_clusters.iter().enumerate() {
            index.insert(cluster.clone(), i);
        }
        // Go returns after the first feed; a part carries exactly one.
        let Some((feed, values)) = part.replicas.iter().next() else {
            return;
        };
        if values.is_empty() {
            return;
        }
        for (bi, cluster) in part.binding_clusters.iter().enumerate() {
            // A part shorter than its cluster list is malformed; Go would panic, we stop.
            let Some(&value) = values.get(bi) else {
                return;
            };
            if let Some(&ti) = index.get(cluster) {
                let count = self.binding_clusters.len();
                let list = self.replicas.entry(feed.clone()).or_default();
                if list.len() != count {
                    *list = vec![0; count];
                }
                if let Some(slot) = list.get_mut(ti) {
                    // saturating: the current assignment comes from the Subscription's status,
                    // which anyone allowed to write it can set near i32::MAX (found by the fuzz
                    // harnesses; Go wraps here)
                    *slot = slot.saturating_add(value);
                }
            } else {
                // Go's index map is built once, so a cluster repeated in `part` is appended twice.
                self.binding_clusters.push(cluster.clone());
                for (f, list) in self.replicas.iter_mut() {
                    if f == feed {
                        list.push(value);
                    } else if !list.is_empty() {
                        list.push(0);
                    }
                }
            }
        }
    }
}

/// One feasible cluster with its total score and predicted capacity (Go's `ClusterScore`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterScore {
    /// `namespace/name` of the ManagedCluster.
    pub namespaced_name: String,
    /// Score (a single plugin's during normalization, the weighted total afterwards).
    pub score: i64,
    /// Predicted max replicas per FeedInventory feed (Dividing only).
    pub max_available_replicas: FeedReplicas,
}

/// `namespace/name` of a ManagedCluster (`name` alone if it has no namespace), as
/// `klog.KObj(cluster).String()` renders it and `status.bindingClusters` stores it.
pub fn cluster_key(cluster: &ManagedCluster) -> String {
    let name = cluster.metadata.name.as_deref().unwrap_or_default();
    match cluster.metadata.namespace.as_deref() {
        // built by hand, not with format!: every cycle keys every cluster (a seventh of a
        // decision's time at 1,000 clusters went to the formatting machinery)
        Some(ns) if !ns.is_empty() => {
            let mut key = String::with_capacity(ns.len() + 1 + name.len());
            key.push_str(ns);
            key.push('/');
            key.push_str(name);
            key
        }
        _ => name.to_owned(),
    }
}

/// Data plugins share within one scheduling cycle (Go's `CycleState`). Create one per cycle and
/// pass the same one to the algorithm and to the reserve/permit/bind calls.
#[derive(Default)]
pub struct CycleState {
    data: Mutex<HashMap<String, Arc<dyn Any + Send + Sync>>>,
    /// Whether this cycle times each plugin call (see [`CycleState::sampled`]).
    record_plugin_metrics: bool,
}

/// The share of cycles whose plugin calls are timed one by one (kube-scheduler's and
/// Clusternet's `pluginMetricsSamplePercent`).
pub const PLUGIN_METRICS_SAMPLE_PERCENT: u32 = 10;

impl fmt::Debug for CycleState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let keys: Vec<String> = self.lock().keys().cloned().collect();
        f.debug_struct("CycleState").field("keys", &keys).finish()
    }
}

impl CycleState {
    /// An empty state whose plugin calls are not timed one by one (a what-if, an explanation's
    /// second run of a decision, a test).
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty state for a live scheduling cycle: one in [`PLUGIN_METRICS_SAMPLE_PERCENT`]
    /// times its plugin calls (`clusternet_scheduler_plugin_execution_duration_seconds`), as
    /// kube-scheduler and Clusternet sample theirs: timing every plugin on every cluster cost a
    /// clock read and a metrics-registry lookup per call, more than most plugins themselves. The
    /// extension points are timed in every cycle.
    pub fn sampled() -> Self {
        use rand::Rng;
        CycleState {
            record_plugin_metrics: rand::rng().random_range(0..100) < PLUGIN_METRICS_SAMPLE_PERCENT,
            ..Self::default()
        }
    }

    /// Whether this cycle times each plugin call.
    pub fn records_plugin_metrics(&self) -> bool {
        self.record_plugin_metrics
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<dyn Any + Send + Sync>>> {
        // A panicking plugin cannot leave the map half-written (inserts are atomic), so a
        // poisoned lock is still consistent.
        self.data
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Stores `value` under `key` (replacing any previous value).
    pub fn write<T: Any + Send + Sync>(&self, key: impl Into<String>, value: T) {
        self.lock().insert(key.into(), Arc::new(value));
    }

    /// The value under `key`, if present and of type `T`.
    pub fn read<T: Any + Send + Sync>(&self, key: &str) -> Option<Arc<T>> {
        let value = self.lock().get(key).cloned()?;
        value.downcast::<T>().ok()
    }

    /// Removes the value under `key`.
    pub fn delete(&self, key: &str) {
        self.lock().remove(key);
    }
}

/// What a bind plugin did.
#[derive(Clone, Debug, PartialEq)]
pub enum BindOutcome {
    /// Write this status to the Subscription's `status` subresource (JSON merge patch, old
    /// object vs new); the I/O shell does the write.
    PatchStatus(SubscriptionStatus),
    /// The plugin recorded the binding itself; nothing is left to write.
    Bound,
}

/// What a permit plugin decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Permit {
    /// Bind now.
    Allow,
    /// Wait at most this long for an allow/reject (capped at 15 minutes).
    Wait(Duration),
}

/// The base of every plugin: a name plus one `as_*` accessor per extension point.
///
/// A plugin joins an extension point by implementing that point's trait and overriding the
/// accessor to return itself:
///
/// ```
/// use std::sync::Arc;
/// use clusternet::apis::{ManagedCluster, Subscription};
/// use clusternet::scheduler::framework::{CycleState, FilterPlugin, Plugin, Status};
///
/// /// Rejects clusters labelled `maintenance=true`.
/// struct NoMaintenance;
///
/// impl Plugin for NoMaintenance {
///     fn name(&self) -> &str {
///         "NoMaintenance"
///     }
///     fn as_filter(self: Arc<Self>) -> Option<Arc<dyn FilterPlugin>> {
///         Some(self)
///     }
/// }
///
/// impl FilterPlugin for NoMaintenance {
///     fn filter(&self, _: &CycleState, _: &Subscription, cluster: &ManagedCluster) -> Result<(), Status> {
///         let under = cluster.metadata.labels.as_ref()
///             .and_then(|l| l.get("maintenance"))
///             .is_some_and(|v| v == "true");
///         if under {
///             return Err(Status::unschedulable("cluster(s) under maintenance"));
///         }
///         Ok(())
///     }
/// }
/// ```
///
/// Register it with [`Registry::register`] and enable it in a profile
/// (`plugins: {filter: {enabled: [{name: NoMaintenance}]}}`).
pub trait Plugin: Send + Sync + 'static {
    /// The name used in configuration files and the registry.
    fn name(&self) -> &str;

    /// Runs before filtering.
    fn as_pre_filter(self: Arc<Self>) -> Option<Arc<dyn PreFilterPlugin>> {
        None
    }
    /// Decides per cluster whether the Subscription may go there.
    fn as_filter(self: Arc<Self>) -> Option<Arc<dyn FilterPlugin>> {
        None
    }
    /// Accepted in configuration; never invoked (as in Go).
    fn as_post_filter(self: Arc<Self>) -> Option<Arc<dyn PostFilterPlugin>> {
        None
    }
    /// Runs once before prediction.
    fn as_pre_predict(self: Arc<Self>) -> Option<Arc<dyn PrePredictPlugin>> {
        None
    }
    /// Predicts per cluster the max replicas it accepts (Dynamic dividing).
    fn as_predict(self: Arc<Self>) -> Option<Arc<dyn PredictPlugin>> {
        None
    }
    /// Runs once before scoring.
    fn as_pre_score(self: Arc<Self>) -> Option<Arc<dyn PreScorePlugin>> {
        None
    }
    /// Scores each feasible cluster.
    fn as_score(self: Arc<Self>) -> Option<Arc<dyn ScorePlugin>> {
        None
    }
    /// Runs once before assigning replicas.
    fn as_pre_assign(self: Arc<Self>) -> Option<Arc<dyn PreAssignPlugin>> {
        None
    }
    /// Divides replicas among the selected clusters.
    fn as_assign(self: Arc<Self>) -> Option<Arc<dyn AssignPlugin>> {
        None
    }
    /// Reserves/unreserves resources for the result.
    fn as_reserve(self: Arc<Self>) -> Option<Arc<dyn ReservePlugin>> {
        None
    }
    /// Allows, rejects or delays binding.
    fn as_permit(self: Arc<Self>) -> Option<Arc<dyn PermitPlugin>> {
        None
    }
    /// Runs before binding.
    fn as_pre_bind(self: Arc<Self>) -> Option<Arc<dyn PreBindPlugin>> {
        None
    }
    /// Records the result.
    fn as_bind(self: Arc<Self>) -> Option<Arc<dyn BindPlugin>> {
        None
    }
    /// Runs after a successful binding.
    fn as_post_bind(self: Arc<Self>) -> Option<Arc<dyn PostBindPlugin>> {
        None
    }
}

/// PreFilter: an `Unschedulable*` status marks every candidate as failed (a fit error); any
/// other error fails the cycle.
pub trait PreFilterPlugin: Plugin {
    fn pre_filter(&self, state: &CycleState, sub: &Subscription) -> Result<(), Status>;
}

/// Filter: `Err` with an `Unschedulable*` code rejects the cluster (its reasons end up in the fit
/// error message); any other code fails the cycle.
pub trait FilterPlugin: Plugin {
    fn filter(
        &self,
        state: &CycleState,
        sub: &Subscription,
        cluster: &ManagedCluster,
    ) -> Result<(), Status>;
}

/// PostFilter: accepted in configuration, never invoked (as in Go).
pub trait PostFilterPlugin: Plugin {
    fn post_filter(
        &self,
        state: &CycleState,
        sub: &Subscription,
        statuses: &BTreeMap<String, Status>,
    ) -> Result<(), Status>;
}

/// PrePredict: runs once with all feasible clusters before prediction.
pub trait PrePredictPlugin: Plugin {
    fn pre_predict(
        &self,
        state: &CycleState,
        sub: &Subscription,
        inventory: &FeedInventory,
        clusters: &[&ManagedCluster],
    ) -> Result<(), Status>;
}

/// Predict: the max acceptable replicas of one cluster, one entry per inventory feed. Any `Err`
/// (including `Skip`) is a failure; see `FeasibleClustersToleration`.
pub trait PredictPlugin: Plugin {
    fn predict<'a>(
        &'a self,
        state: &'a CycleState,
        sub: &'a Subscription,
        inventory: &'a FeedInventory,
        cluster: &'a ManagedCluster,
    ) -> BoxFuture<'a, Result<FeedReplicas, Status>>;
}

/// PreScore: runs once with all feasible clusters before scoring.
pub trait PreScorePlugin: Plugin {
    fn pre_score(
        &self,
        state: &CycleState,
        sub: &Subscription,
        clusters: &[&ManagedCluster],
    ) -> Result<(), Status>;
}

/// Score: a raw score per cluster, then (optionally) normalization over all clusters. After
/// normalization every score must be within [0, 100]; it is then multiplied by the weight.
pub trait ScorePlugin: Plugin {
    fn score(
        &self,
        state: &CycleState,
        sub: &Subscription,
        cluster: &ManagedCluster,
    ) -> Result<i64, Status>;

    /// Go's `ScoreExtensions().NormalizeScore`; the default keeps the raw scores.
    fn normalize_scores(
        &self,
        _state: &CycleState,
        _sub: &Subscription,
        _scores: &mut [ClusterScore],
    ) -> Result<(), Status> {
        Ok(())
    }
}

/// PreAssign: runs before assign plugins with the selected clusters and, for Dynamic dividing,
/// each feed's available replicas per cluster.
pub trait PreAssignPlugin: Plugin {
    fn pre_assign(
        &self,
        state: &CycleState,
        sub: &Subscription,
        inventory: &FeedInventory,
        available: &TargetClusters,
        clusters: &[&ManagedCluster],
    ) -> Result<(), Status>;
}

/// Assign: the first plugin not returning `Skip` produces the result. `clusters[i]` is the
/// ManagedCluster of `available.binding_clusters[i]`.
pub trait AssignPlugin: Plugin {
    fn assign(
        &self,
        state: &CycleState,
        sub: &Subscription,
        inventory: &FeedInventory,
        available: &TargetClusters,
        clusters: &[&ManagedCluster],
    ) -> Result<TargetClusters, Status>;
}

/// Reserve/Unreserve: runs after the algorithm; unreserve undoes a reserve when a later step fails.
pub trait ReservePlugin: Plugin {
    fn reserve(
        &self,
        state: &CycleState,
        sub: &Subscription,
        target: &TargetClusters,
    ) -> Result<(), Status>;
    fn unreserve(&self, state: &CycleState, sub: &Subscription, target: &TargetClusters);
}

/// Permit: allow, reject (`Err`) or wait.
pub trait PermitPlugin: Plugin {
    fn permit(
        &self,
        state: &CycleState,
        sub: &Subscription,
        target: &TargetClusters,
    ) -> Result<Permit, Status>;
}

/// PreBind: runs before bind; an error aborts binding.
pub trait PreBindPlugin: Plugin {
    fn pre_bind<'a>(
        &'a self,
        state: &'a CycleState,
        sub: &'a Subscription,
        target: &'a TargetClusters,
    ) -> BoxFuture<'a, Result<(), Status>>;
}

/// Bind: the first plugin not returning `Skip` binds.
pub trait BindPlugin: Plugin {
    fn bind<'a>(
        &'a self,
        state: &'a CycleState,
        sub: &'a Subscription,
        target: &'a TargetClusters,
    ) -> BoxFuture<'a, Result<BindOutcome, Status>>;
}

/// PostBind: informational, after a successful bind.
pub trait PostBindPlugin: Plugin {
    fn post_bind<'a>(
        &'a self,
        state: &'a CycleState,
        sub: &'a Subscription,
        target: &'a TargetClusters,
    ) -> BoxFuture<'a, ()>;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(clusters: &[&str], feeds: &[(&str, &[i32])]) -> TargetClusters {
        TargetClusters::new(
            clusters.iter().map(|c| (*c).to_owned()).collect(),
            feeds
                .iter()
                .map(|(k, v)| ((*k).to_owned(), v.to_vec()))
                .collect(),
        )
    }

    #[test]
    fn merge_adds_and_appends() {
        let mut result = t(
            &["c1", "c2", "c3"],
            &[("f1", &[1, 3, 0]), ("f2", &[]), ("f3", &[1, 1, 1])],
        );
        result.merge_one_feed(&t(&["c1", "c2", "c4"], &[("f1", &[2, 1, 1])]));
        assert_eq!(
            result,
            t(
                &["c1", "c2", "c3", "c4"],
                &[("f1", &[3, 4, 0, 1]), ("f2", &[]), ("f3", &[1, 1, 1, 0])],
            )
        );
    }

    #[test]
    fn merge_of_empty_parts() {
        let base = t(&["c1"], &[("f1", &[1])]);
        let mut r = base.clone();
        r.merge_one_feed(&TargetClusters::default());
        assert_eq!(r, base);
        // An empty list only makes sure the key exists.
        r.merge_one_feed(&t(&["c9"], &[("svc", &[])]));
        assert_eq!(r, t(&["c1"], &[("f1", &[1]), ("svc", &[])]));
        // A new workload feed starts from zeros.
        r.merge_one_feed(&t(&["c1"], &[("f2", &[5])]));
        assert_eq!(r, t(&["c1"], &[("f1", &[1]), ("f2", &[5]), ("svc", &[])]));
    }

    #[test]
    fn merge_resets_a_list_of_the_wrong_length() {
        let mut r = t(&["c1", "c2"], &[("f1", &[7])]);
        r.merge_one_feed(&t(&["c2"], &[("f1", &[3])]));
        assert_eq!(r, t(&["c1", "c2"], &[("f1", &[0, 3])]));
    }

    #[test]
    fn cycle_state_round_trip() {
        let state = CycleState::new();
        state.write("k", 5_i32);
        assert_eq!(state.read::<i32>("k").as_deref(), Some(&5));
        assert!(state.read::<String>("k").is_none());
        state.delete("k");
        assert!(state.read::<i32>("k").is_none());
    }

    #[test]
    fn plugin_failure_messages_are_gos() {
        let f = PluginFailure::new(
            ExtensionPoint::PreAssign,
            "DynamicAssigner",
            Status::error("must specify field DynamicDividing when dividing type is dynamic"),
        );
        assert_eq!(
            f.to_string(),
            "running PreAssign plugin \"DynamicAssigner\": must specify field DynamicDividing when dividing type is dynamic"
        );
        let f = PluginFailure::new(
            ExtensionPoint::Predict,
            "Predictor",
            Status::skip("predictor is disabled"),
        );
        assert_eq!(
            f.to_string(),
            "running Predict plugins: plugin \"Predictor\" failed with: predictor is disabled"
        );
        let f = PluginFailure {
            point: ExtensionPoint::Assign,
            plugin: None,
            status: Status::skip("empty assign plugins"),
        };
        assert_eq!(f.to_string(), "assign status: Skip, empty assign plugins");
    }
}
