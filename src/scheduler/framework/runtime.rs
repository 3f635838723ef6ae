//! One profile's plugins, instantiated and ordered per extension point, and the functions that run
//! them (Go's `framework/runtime/framework.go`).
//!
//! The algorithm ([`crate::scheduler::algorithm`]) drives the scheduling cycle through the
//! crate-internal `run_*` functions; the I/O shell drives the binding cycle through the public
//! ones (reserve, permit, pre-bind, bind, post-bind). Every run records
//! `clusternet_scheduler_framework_extension_point_duration_seconds`, and every plugin call of a
//! sampled cycle ([`CycleState::sampled`]) `clusternet_scheduler_plugin_execution_duration_seconds`.

/// What every predict plugin said about one cluster.
type PredictOutcomes = Vec<(String, Result<FeedReplicas, Status>)>;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use std::future::{Future, ready};
use std::ops::ControlFlow;

use futures::{FutureExt, StreamExt};

use super::{
    AssignPlugin, BindOutcome, BindPlugin, ClusterScore, Code, CycleState, ExtensionPoint,
    FeedReplicas, FilterPlugin, MAX_CLUSTER_SCORE, MIN_CLUSTER_SCORE, Permit, PermitPlugin, Plugin,
    PluginFailure, PostBindPlugin, PostFilterPlugin, PreAssignPlugin, PreBindPlugin,
    PreFilterPlugin, PrePredictPlugin, PreScorePlugin, PredictPlugin, Registry, ReservePlugin,
    ScorePlugin, Status, TargetClusters,
};
use crate::apis::{FeedInventory, ManagedCluster, Subscription};
use crate::scheduler::config::{PluginRef, Plugins, SchedulerProfile};

/// Longest a permit plugin may ask to wait.
pub const MAX_PERMIT_TIMEOUT: Duration = Duration::from_secs(15 * 60);

/// Process-wide knobs of every profile (the configuration file's percentages and a feature gate).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FrameworkOptions {
    /// `percentageofclusterstoscore` (<= 0: adaptive).
    pub percentage_of_clusters_to_score: i32,
    /// `percentageofclusterstotolerate`.
    pub percentage_of_clusters_to_tolerate: i32,
    /// Feature gate `FeasibleClustersToleration`.
    pub feasible_clusters_toleration: bool,
    /// How many predictions run at once (Go: 16 workers).
    pub parallelism: usize,
}

impl Default for FrameworkOptions {
    fn default() -> Self {
        Self {
            percentage_of_clusters_to_score: 0,
            percentage_of_clusters_to_tolerate: 10,
            feasible_clusters_toleration: false,
            parallelism: 16,
        }
    }
}

/// Result of the permit plugins.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PermitOutcome {
    /// Every permit plugin allowed (or there are none): bind now.
    Allow,
    /// Some plugins asked to wait (plugin -> timeout, capped at 15 minutes); the shell parks the
    /// Subscription until they allow or reject, or the timeout rejects it.
    Wait(BTreeMap<String, Duration>),
}

/// One profile: its plugins per extension point, in order.
pub struct Framework {
    profile_name: String,
    options: FrameworkOptions,
    pre_filter: Vec<Arc<dyn PreFilterPlugin>>,
    filter: Vec<Arc<dyn FilterPlugin>>,
    // Kept so that a profile enabling one validates, but never invoked (as in Go).
    #[allow(dead_code)]
    post_filter: Vec<Arc<dyn PostFilterPlugin>>,
    pre_predict: Vec<Arc<dyn PrePredictPlugin>>,
    predict: Vec<Arc<dyn PredictPlugin>>,
    pre_score: Vec<Arc<dyn PreScorePlugin>>,
    score: Vec<(Arc<dyn ScorePlugin>, i64)>,
    pre_assign: Vec<Arc<dyn PreAssignPlugin>>,
    assign: Vec<Arc<dyn AssignPlugin>>,
    reserve: Vec<Arc<dyn ReservePlugin>>,
    permit: Vec<Arc<dyn PermitPlugin>>,
    pre_bind: Vec<Arc<dyn PreBindPlugin>>,
    bind: Vec<Arc<dyn BindPlugin>>,
    post_bind: Vec<Arc<dyn PostBindPlugin>>,
}

impl std::fmt::Debug for Framework {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        fn names<T: Plugin + ?Sized>(v: &[Arc<T>]) -> Vec<&str> {
            v.iter().map(|p| p.name()).collect()
        }
        f.debug_struct("Framework")
            .field("profile", &self.profile_name)
            .field("options", &self.options)
            .field("filter", &names(&self.filter))
            .field("predict", &names(&self.predict))
            .field(
                "score",
                &self
                    .score
                    .iter()
                    .map(|(p, w)| (p.name(), *w))
                    .collect::<Vec<_>>(),
            )
            .field("assign", &names(&self.assign))
            .field("bind", &names(&self.bind))
            .finish_non_exhaustive()
    }
}

/// A plugin enabled by the profile: built, or its constructor failed (already reported).
type Instances = BTreeMap<String, Option<Arc<dyn Plugin>>>;

/// Builds the typed list of one extension point, reporting unknown plugins, plugins that do not
/// implement the point, and duplicates.
fn plugin_list<T: ?Sized>(
    key: &str,
    kind: &str,
    refs: &[PluginRef],
    instances: &Instances,
    cast: impl Fn(Arc<dyn Plugin>) -> Option<Arc<T>>,
    errs: &mut Vec<String>,
) -> Vec<Arc<T>> {
    let mut list = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for (j, r) in refs.iter().enumerate() {
        let at = format!("plugins.{key}.enabled[{j}]");
        let instance = match instances.get(&r.name) {
            Some(Some(instance)) => instance,
            Some(None) => continue,
            None => {
                errs.push(format!("{at}: plugin {:?} does not exist", r.name));
                continue;
            }
        };
        if !seen.insert(r.name.as_str()) {
            errs.push(format!("{at}: plugin {:?} is enabled twice", r.name));
            continue;
        }
        match cast(Arc::clone(instance)) {
            Some(p) => list.push(p),
            None => errs.push(format!(
                "{at}: plugin {:?} does not extend {kind} plugin",
                r.name
            )),
        }
    }
    list
}

impl Framework {
    /// Instantiates the plugins a (defaulted) profile enables, with their `pluginConfig` args,
    /// and checks Go's `NewFramework` rules: every plugin exists and implements its extension
    /// point, no duplicates per point, non-zero score weights, at least one bind plugin.
    /// Errors are field paths relative to the profile (`plugins.filter.enabled[1]: ...`).
    pub fn new(
        profile: &SchedulerProfile,
        registry: &Registry,
        options: FrameworkOptions,
    ) -> Result<Self, Vec<String>> {
        let empty = Plugins::default();
        let plugins = profile.plugins.as_ref().unwrap_or(&empty);
        let mut errs = Vec::new();

        let mut args: BTreeMap<&str, &serde_json::Value> = BTreeMap::new();
        for pc in &profile.plugin_config {
            if let Some(value) = &pc.args {
                args.insert(pc.name.as_str(), value);
            }
        }
        // Only enabled plugins are built, once each, whatever the number of extension points.
        let mut instances = Instances::new();
        for name in plugins.names() {
            let value = args.get(name).copied().unwrap_or(&serde_json::Value::Null);
            match registry.instantiate(name, value) {
                None => {}
                Some(Ok(plugin)) => {
                    instances.insert(name.to_owned(), Some(plugin));
                }
                Some(Err(e)) => {
                    errs.push(format!("plugins: initializing plugin {name:?}: {e}"));
                    instances.insert(name.to_owned(), None);
                }
            }
        }

        macro_rules! list {
            ($field:ident, $key:literal, $kind:literal, $cast:ident) => {
                plugin_list(
                    $key,
                    $kind,
                    &plugins.$field.enabled,
                    &instances,
                    |p| p.$cast(),
                    &mut errs,
                )
            };
        }
        let pre_filter = list!(pre_filter, "preFilter", "PreFilter", as_pre_filter);
        let filter = list!(filter, "filter", "Filter", as_filter);
        let post_filter = list!(post_filter, "postFilter", "PostFilter", as_post_filter);
        let pre_predict = list!(pre_predict, "prePredict", "PrePredict", as_pre_predict);
        let predict = list!(predict, "predict", "Predict", as_predict);
        let pre_score = list!(pre_score, "preScore", "PreScore", as_pre_score);
        let score = list!(score, "score", "Score", as_score);
        let pre_assign = list!(pre_assign, "preAssign", "PreAssign", as_pre_assign);
        let assign = list!(assign, "assign", "Assign", as_assign);
        let reserve = list!(reserve, "reserve", "Reserve", as_reserve);
        let permit = list!(permit, "permit", "Permit", as_permit);
        let pre_bind = list!(pre_bind, "preBind", "PreBind", as_pre_bind);
        let bind = list!(bind, "bind", "Bind", as_bind);
        let post_bind = list!(post_bind, "postBind", "PostBind", as_post_bind);

        // A zero weight is refused rather than silently disabling the plugin (Go's rule).
        let mut weights = BTreeMap::new();
        for (j, r) in plugins.score.enabled.iter().enumerate() {
            if r.weight == 0 {
                errs.push(format!(
                    "plugins.score.enabled[{j}]: score plugin {:?} is not configured with weight",
                    r.name
                ));
            }
            weights
                .entry(r.name.as_str())
                .or_insert(i64::from(r.weight));
        }
        if plugins.bind.enabled.is_empty() {
            errs.push(
                "plugins.bind: Required value: at least one bind plugin is needed".to_owned(),
            );
        }
        if !errs.is_empty() {
            return Err(errs);
        }
        let score = score
            .into_iter()
            .map(|p| {
                let weight = weights.get(p.name()).copied().unwrap_or(0);
                (p, weight)
            })
            .collect();
        Ok(Framework {
            profile_name: profile.scheduler_name.clone(),
            options,
            pre_filter,
            filter,
            post_filter,
            pre_predict,
            predict,
            pre_score,
            score,
            pre_assign,
            assign,
            reserve,
            permit,
            pre_bind,
            bind,
            post_bind,
        })
    }

    /// The profile's scheduler name (metrics label `profile`).
    pub fn profile_name(&self) -> &str {
        &self.profile_name
    }

    /// The process-wide options this profile runs with.
    pub fn options(&self) -> &FrameworkOptions {
        &self.options
    }

    /// Are filter plugins configured?
    pub fn has_filter_plugins(&self) -> bool {
        !self.filter.is_empty()
    }

    /// Are predict plugins configured?
    pub fn has_predict_plugins(&self) -> bool {
        !self.predict.is_empty()
    }

    /// Are score plugins configured?
    pub fn has_score_plugins(&self) -> bool {
        !self.score.is_empty()
    }

    fn observe_point(&self, point: ExtensionPoint, code: Code, start: Instant) {
        metrics::histogram!(
            "clusternet_scheduler_framework_extension_point_duration_seconds",
            "extension_point" => point.as_str(),
            "status" => code.as_str(),
            "profile" => self.profile_name.clone(),
        )
        .record(start.elapsed().as_secs_f64());
    }

    /// The loop every extension point shares: time the point, run [`run_plugins`], record the
    /// point's duration under the code of its result (`code` reads it).
    async fn run_point<R>(
        &self,
        point: ExtensionPoint,
        plugins: impl Future<Output = R>,
        code: impl FnOnce(&R) -> Code,
    ) -> R {
        let start = Instant::now();
        let result = plugins.await;
        self.observe_point(point, code(&result), start);
        result
    }

    /// [`Self::run_point`] for the points whose plugins must all succeed: the first failure stops
    /// the point and names its plugin.
    async fn run_all_pass<'p, P: Plugin + ?Sized, F>(
        &self,
        state: &CycleState,
        point: ExtensionPoint,
        plugins: &'p [Arc<P>],
        call: impl FnMut(&'p P) -> F,
    ) -> Result<(), PluginFailure>
    where
        F: Future<Output = Result<(), Status>>,
    {
        let all = run_plugins(
            state,
            point,
            plugins,
            Ok(()),
            call,
            |result, pl, outcome| match outcome {
                Ok(()) => ControlFlow::Continue(()),
                Err(status) => {
                    *result = Err(PluginFailure::new(point, pl.name(), status));
                    ControlFlow::Break(())
                }
            },
        );
        self.run_point(point, all, code_of).await
    }

    /// [`Self::run_point`] for the points where the first plugin not returning `Skip` decides
    /// (assign, bind); if none decides, the failure has no plugin and the last `Skip` status.
    async fn run_first_decisive<'p, P: Plugin + ?Sized, T, F>(
        &self,
        state: &CycleState,
        point: ExtensionPoint,
        plugins: &'p [Arc<P>],
        no_plugin: Status,
        call: impl FnMut(&'p P) -> F,
    ) -> Result<T, PluginFailure>
    where
        F: Future<Output = Result<T, Status>>,
    {
        let skipped = Err(PluginFailure {
            point,
            plugin: None,
            status: no_plugin,
        });
        let first = run_plugins(
            state,
            point,
            plugins,
            skipped,
            call,
            |result, pl, outcome| match outcome {
                Ok(done) => {
                    *result = Ok(done);
                    ControlFlow::Break(())
                }
                Err(status) if status.code() == Code::Skip => {
                    *result = Err(PluginFailure {
                        point,
                        plugin: None,
                        status,
                    });
                    ControlFlow::Continue(())
                }
                Err(status) => {
                    *result = Err(PluginFailure::new(point, pl.name(), status));
                    ControlFlow::Break(())
                }
            },
        );
        self.run_point(point, first, code_of).await
    }

    // ----- scheduling cycle (driven by the algorithm) -----

    pub(crate) fn run_pre_filter(
        &self,
        state: &CycleState,
        sub: &Subscription,
    ) -> Result<(), PluginFailure> {
        sync(
            self.run_all_pass(state, ExtensionPoint::PreFilter, &self.pre_filter, |pl| {
                ready(pl.pre_filter(state, sub))
            }),
        )
    }

    /// Runs filter plugins on one cluster; the first failure decides (`runAllFilters=false`).
    /// `Ok(Err(failure))` rejects the cluster, `Err` fails the cycle.
    pub(crate) fn run_filter(
        &self,
        state: &CycleState,
        sub: &Subscription,
        cluster: &ManagedCluster,
    ) -> Result<Result<(), PluginFailure>, PluginFailure> {
        // The point is timed across all clusters by the caller ([`Self::observe_filter`]).
        sync(run_plugins(
            state,
            ExtensionPoint::Filter,
            &self.filter,
            Ok(Ok(())),
            |pl| ready(pl.filter(state, sub, cluster)),
            |result, pl, outcome| match outcome {
                Ok(()) => ControlFlow::Continue(()),
                Err(status) => {
                    let failure = PluginFailure::new(ExtensionPoint::Filter, pl.name(), status);
                    *result = if failure.status.is_unschedulable() {
                        Ok(Err(failure))
                    } else {
                        Err(failure)
                    };
                    ControlFlow::Break(())
                }
            },
        ))
    }

    pub(crate) fn observe_filter(&self, code: Code, start: Instant) {
        self.observe_point(ExtensionPoint::Filter, code, start);
    }

    pub(crate) fn run_pre_predict(
        &self,
        state: &CycleState,
        sub: &Subscription,
        inventory: &FeedInventory,
        clusters: &[&ManagedCluster],
    ) -> Result<(), PluginFailure> {
        sync(
            self.run_all_pass(state, ExtensionPoint::PrePredict, &self.pre_predict, |pl| {
                ready(pl.pre_predict(state, sub, inventory, clusters))
            }),
        )
    }

    /// Predicts every cluster's capacity, up to `parallelism` clusters at once; several plugins
    /// combine by element-wise minimum. Failures (any non-`Ok`, `Skip` included) fail the call,
    /// unless gate `FeasibleClustersToleration` is on: then up to
    /// `clusters * percentage_of_clusters_to_tolerate` failures are tolerated and the failing
    /// cluster's prediction becomes all-`None`. Results are consumed in cluster order, so which
    /// failure is reported is deterministic (Go reports whichever goroutine fails first).
    pub(crate) async fn run_predict(
        &self,
        state: &CycleState,
        sub: &Subscription,
        inventory: &FeedInventory,
        clusters: &[&ManagedCluster],
    ) -> Result<Vec<FeedReplicas>, PluginFailure> {
        let start = Instant::now();
        let feeds = inventory.spec.feeds.len();
        // Boxed up front: a lazily mapping closure inside the stream would keep the whole
        // scheduling future from being provably Send (rustc's higher-ranked lifetime limits).
        let pending: Vec<futures::future::BoxFuture<'_, PredictOutcomes>> = clusters
            .iter()
            .map(|cluster| {
                Box::pin(self.predict_one(state, sub, inventory, cluster))
                    as futures::future::BoxFuture<'_, PredictOutcomes>
            })
            .collect();
        let mut stream = futures::stream::iter(pending).buffered(self.options.parallelism.max(1));

        let total_tolerations = i64::try_from(clusters.len())
            .unwrap_or(i64::MAX)
            .saturating_mul(i64::from(self.options.percentage_of_clusters_to_tolerate));
        let mut tolerations: i64 = 0;
        let mut result = Vec::with_capacity(clusters.len());
        while let Some(outcomes) = stream.next().await {
            let mut combined: Option<FeedReplicas> = None;
            for (name, outcome) in outcomes {
                let replicas = match outcome {
                    Ok(replicas) => replicas,
                    Err(status) => {
                        if self.options.feasible_clusters_toleration {
                            tolerations += 1;
                        }
                        if !self.options.feasible_clusters_toleration
                            || tolerations > total_tolerations
                        {
                            let failure =
                                PluginFailure::new(ExtensionPoint::Predict, &name, status);
                            self.observe_point(ExtensionPoint::Predict, Code::Error, start);
                            return Err(failure);
                        }
                        vec![None; feeds]
                    }
                };
                combined = Some(match combined {
                    None => replicas,
                    Some(prev) => min_feed_replicas(&prev, &replicas),
                });
            }
            result.push(combined.unwrap_or_else(|| vec![None; feeds]));
        }
        self.observe_point(ExtensionPoint::Predict, Code::Success, start);
        Ok(result)
    }

    /// Every predict plugin's answer for one cluster, in plugin order.
    async fn predict_one(
        &self,
        state: &CycleState,
        sub: &Subscription,
        inventory: &FeedInventory,
        cluster: &ManagedCluster,
    ) -> Vec<(String, Result<FeedReplicas, Status>)> {
        run_plugins(
            state,
            ExtensionPoint::Predict,
            &self.predict,
            Vec::with_capacity(self.predict.len()),
            |pl| pl.predict(state, sub, inventory, cluster),
            |outcomes, pl, outcome| {
                outcomes.push((pl.name().to_owned(), outcome));
                ControlFlow::Continue(())
            },
        )
        .await
    }

    pub(crate) fn run_pre_score(
        &self,
        state: &CycleState,
        sub: &Subscription,
        clusters: &[&ManagedCluster],
    ) -> Result<(), PluginFailure> {
        sync(
            self.run_all_pass(state, ExtensionPoint::PreScore, &self.pre_score, |pl| {
                ready(pl.pre_score(state, sub, clusters))
            }),
        )
    }

    /// Scores, normalizes, range-checks and weights: the weighted total per cluster (same index
    /// as `clusters`).
    pub(crate) fn run_score(
        &self,
        state: &CycleState,
        sub: &Subscription,
        clusters: &[&ManagedCluster],
        keys: &[String],
    ) -> Result<Vec<i64>, PluginFailure> {
        sync(self.run_point(
            ExtensionPoint::Score,
            async { self.score_inner(state, sub, clusters, keys) },
            code_of,
        ))
    }

    fn score_inner(
        &self,
        state: &CycleState,
        sub: &Subscription,
        clusters: &[&ManagedCluster],
        keys: &[String],
    ) -> Result<Vec<i64>, PluginFailure> {
        let mut totals = vec![0_i64; clusters.len()];
        for (pl, weight) in &self.score {
            let mut scores = Vec::with_capacity(clusters.len());
            for (cluster, key) in clusters.iter().zip(keys) {
                let score = timed(state, pl.name(), ExtensionPoint::Score, || {
                    pl.score(state, sub, cluster)
                })
                .map_err(|s| PluginFailure::new(ExtensionPoint::Score, pl.name(), s))?;
                scores.push(ClusterScore {
                    namespaced_name: key.clone(),
                    score,
                    max_available_replicas: Vec::new(),
                });
            }
            timed(
                state,
                pl.name(),
                ExtensionPoint::ScoreExtensionNormalize,
                || pl.normalize_scores(state, sub, &mut scores),
            )
            .map_err(|s| {
                PluginFailure::new(ExtensionPoint::ScoreExtensionNormalize, pl.name(), s)
            })?;
            for (total, s) in totals.iter_mut().zip(&scores) {
                if !(MIN_CLUSTER_SCORE..=MAX_CLUSTER_SCORE).contains(&s.score) {
                    // Go words this "applying score defaultWeights on Score plugins: plugin
                    // %q returns an invalid score ..."; here it reads "running Score plugins:
                    // plugin %q failed with: invalid score ...".
                    return Err(PluginFailure::new(
                        ExtensionPoint::Score,
                        pl.name(),
                        Status::error(format!(
                            "invalid score {}, it should be in the range of [{MIN_CLUSTER_SCORE}, {MAX_CLUSTER_SCORE}] after normalizing",
                            s.score
                        )),
                    ));
                }
                *total = total.saturating_add(s.score.saturating_mul(*weight));
            }
        }
        Ok(totals)
    }

    pub(crate) fn run_pre_assign(
        &self,
        state: &CycleState,
        sub: &Subscription,
        inventory: &FeedInventory,
        available: &TargetClusters,
        clusters: &[&ManagedCluster],
    ) -> Result<(), PluginFailure> {
        sync(
            self.run_all_pass(state, ExtensionPoint::PreAssign, &self.pre_assign, |pl| {
                ready(pl.pre_assign(state, sub, inventory, available, clusters))
            }),
        )
    }

    /// The first assign plugin not returning `Skip` decides; if none decides the failure has no
    /// plugin and the last `Skip` status (Go: `assign status: Skip, <message>`).
    pub(crate) fn run_assign(
        &self,
        state: &CycleState,
        sub: &Subscription,
        inventory: &FeedInventory,
        available: &TargetClusters,
        clusters: &[&ManagedCluster],
    ) -> Result<TargetClusters, PluginFailure> {
        sync(self.run_first_decisive(
            state,
            ExtensionPoint::Assign,
            &self.assign,
            Status::skip("empty assign plugins"),
            |pl| ready(pl.assign(state, sub, inventory, available, clusters)),
        ))
    }

    // ----- binding cycle (driven by the I/O shell) -----

    /// Reserve plugins, in order; on failure call [`Self::run_unreserve`].
    pub fn run_reserve(
        &self,
        state: &CycleState,
        sub: &Subscription,
        target: &TargetClusters,
    ) -> Result<(), PluginFailure> {
        sync(
            self.run_all_pass(state, ExtensionPoint::Reserve, &self.reserve, |pl| {
                ready(pl.reserve(state, sub, target))
            }),
        )
    }

    /// Unreserve plugins, in reverse order (kube-scheduler's order).
    pub fn run_unreserve(&self, state: &CycleState, sub: &Subscription, target: &TargetClusters) {
        let all = run_plugins(
            state,
            ExtensionPoint::Unreserve,
            self.reserve.iter().rev(),
            (),
            |pl| {
                pl.unreserve(state, sub, target);
                ready(Ok(()))
            },
            |_, _, _| ControlFlow::Continue(()),
        );
        sync(self.run_point(ExtensionPoint::Unreserve, all, |_| Code::Success));
    }

    /// Permit plugins: a rejection (`Err`, `Unschedulable*` = unschedulable, else error) stops;
    /// waits are collected.
    pub fn run_permit(
        &self,
        state: &CycleState,
        sub: &Subscription,
        target: &TargetClusters,
    ) -> Result<PermitOutcome, PluginFailure> {
        let all = run_plugins(
            state,
            ExtensionPoint::Permit,
            &self.permit,
            Ok(PermitOutcome::Allow),
            |pl| ready(pl.permit(state, sub, target)),
            |outcome: &mut Result<PermitOutcome, PluginFailure>, pl, permit| match permit {
                Ok(Permit::Allow) => ControlFlow::Continue(()),
                Ok(Permit::Wait(timeout)) => {
                    let timeout = timeout.min(MAX_PERMIT_TIMEOUT);
                    match outcome {
                        Ok(PermitOutcome::Wait(waits)) => {
                            waits.insert(pl.name().to_owned(), timeout);
                        }
                        _ => {
                            let waits = BTreeMap::from([(pl.name().to_owned(), timeout)]);
                            *outcome = Ok(PermitOutcome::Wait(waits));
                        }
                    }
                    ControlFlow::Continue(())
                }
                Err(status) => {
                    *outcome = Err(PluginFailure::new(
                        ExtensionPoint::Permit,
                        pl.name(),
                        status,
                    ));
                    ControlFlow::Break(())
                }
            },
        );
        sync(
            self.run_point(ExtensionPoint::Permit, all, |outcome| match outcome {
                Ok(PermitOutcome::Allow) => Code::Success,
                Ok(PermitOutcome::Wait(_)) => Code::Wait,
                Err(f) => f.status.code(),
            }),
        )
    }

    /// PreBind plugins, in order.
    pub async fn run_pre_bind(
        &self,
        state: &CycleState,
        sub: &Subscription,
        target: &TargetClusters,
    ) -> Result<(), PluginFailure> {
        self.run_all_pass(state, ExtensionPoint::PreBind, &self.pre_bind, |pl| {
            pl.pre_bind(state, sub, target)
        })
        .await
    }

    /// Bind plugins until one does not skip. With the default profile this is DefaultBinder,
    /// whose outcome is [`BindOutcome::PatchStatus`] with the status to write.
    pub async fn run_bind(
        &self,
        state: &CycleState,
        sub: &Subscription,
        target: &TargetClusters,
    ) -> Result<BindOutcome, PluginFailure> {
        self.run_first_decisive(
            state,
            ExtensionPoint::Bind,
            &self.bind,
            Status::skip(""),
            |pl| pl.bind(state, sub, target),
        )
        .await
    }

    /// PostBind plugins, in order.
    pub async fn run_post_bind(
        &self,
        state: &CycleState,
        sub: &Subscription,
        target: &TargetClusters,
    ) {
        let all = run_plugins(
            state,
            ExtensionPoint::PostBind,
            &self.post_bind,
            (),
            |pl| pl.post_bind(state, sub, target).map(Ok),
            |_, _, _| ControlFlow::Continue(()),
        );
        self.run_point(ExtensionPoint::PostBind, all, |_| Code::Success)
            .await;
    }
}

/// Calls each plugin in order, timing it under its own name, and lets `decide` fold its answer
/// into the point's result and say whether the next plugin runs. Every extension point goes
/// through here; synchronous plugins are called through an already-ready future.
async fn run_plugins<'p, P, T, R, F>(
    state: &CycleState,
    point: ExtensionPoint,
    plugins: impl IntoIterator<Item = &'p Arc<P>>,
    mut result: R,
    mut call: impl FnMut(&'p P) -> F,
    mut decide: impl FnMut(&mut R, &'p P, Result<T, Status>) -> ControlFlow<()>,
) -> R
where
    P: Plugin + ?Sized,
    F: Future<Output = Result<T, Status>>,
{
    for pl in plugins {
        let start = plugin_timer(state);
        let outcome = call(pl).await;
        observe_plugin(pl.name(), point, code_of(&outcome), start);
        if decide(&mut result, pl, outcome).is_break() {
            break;
        }
    }
    result
}

/// Result of a runner whose plugins are all synchronous: its future never waits, so one poll
/// finishes it (no executor, no blocking).
fn sync<R>(run: impl Future<Output = R>) -> R {
    run.now_or_never()
        .expect("a runner of synchronous plugins completes on its first poll")
}

fn code_of<T, E: AsCode>(result: &Result<T, E>) -> Code {
    match result {
        Ok(_) => Code::Success,
        Err(e) => e.as_code(),
    }
}

trait AsCode {
    fn as_code(&self) -> Code;
}

impl AsCode for Status {
    fn as_code(&self) -> Code {
        self.code()
    }
}

impl AsCode for PluginFailure {
    fn as_code(&self) -> Code {
        self.status.code()
    }
}

/// When a plugin call of this cycle starts, if the cycle times its plugin calls
/// ([`CycleState::sampled`]); [`observe_plugin`] records nothing without it.
fn plugin_timer(state: &CycleState) -> Option<Instant> {
    state.records_plugin_metrics().then(Instant::now)
}

fn observe_plugin(plugin: &str, point: ExtensionPoint, code: Code, start: Option<Instant>) {
    let Some(start) = start else { return };
    metrics::histogram!(
        "clusternet_scheduler_plugin_execution_duration_seconds",
        "plugin" => plugin.to_owned(),
        "extension_point" => point.as_str(),
        "status" => code.as_str(),
    )
    .record(start.elapsed().as_secs_f64());
}

fn timed<T>(
    state: &CycleState,
    plugin: &str,
    point: ExtensionPoint,
    f: impl FnOnce() -> Result<T, Status>,
) -> Result<T, Status> {
    let start = plugin_timer(state);
    let result = f();
    observe_plugin(plugin, point, code_of(&result), start);
    result
}

/// Element-wise minimum of two predictions; unknown (`None`) wins (Go's `mergeFeedReplicas`).
pub(crate) fn min_feed_replicas(a: &FeedReplicas, b: &FeedReplicas) -> FeedReplicas {
    (0..a.len().max(b.len()))
        .map(
            |i| match (a.get(i).copied().flatten(), b.get(i).copied().flatten()) {
                (Some(x), Some(y)) => Some(x.min(y)),
                _ => None,
            },
        )
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn min_of_predictions() {
        assert_eq!(
            min_feed_replicas(
                &vec![Some(3), None, Some(7)],
                &vec![Some(5), Some(1), Some(2)]
            ),
            vec![Some(3), None, Some(2)]
        );
        assert_eq!(min_feed_replicas(&vec![Some(1)], &vec![]), vec![None]);
    }
}
