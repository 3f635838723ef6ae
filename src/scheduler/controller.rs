//! The scheduler's I/O shell (docs/spec/scheduler.md §2-§4, §6): the queue, what triggers a
//! scheduling cycle, reading the cache, running the framework, writing the binding into
//! `Subscription.status` (never rewriting an unchanged status) and the events that explain it.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Taint;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::reflector::Store;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use super::algorithm::schedule_explained;
use super::framework::{
    BindOutcome, CycleState, Framework, PluginFailure, TargetClusters, cluster_key,
};
use super::predictor_client::{self, PredictorRoute};
use super::queue::SchedulingQueue;
use super::reservation::{self, Reservations};
use super::{
    FilterOffset, PredictorClient, Profiles, Registry, ScheduleError, ScheduleResult, binder,
    explain,
};
use crate::apis::known;
use crate::apis::placement::Explanation;
use crate::apis::{
    FeedInventory, ManagedCluster, ReplicaRequirements, SchedulingStrategy, Subscription,
    SubscriptionStatus,
};
use crate::kube_ext::labels;
use crate::kube_ext::merge_patch;
use crate::runtime::cache::Shared;
use crate::runtime::controller::ReconcileError;
use crate::runtime::events::Events;
use crate::runtime::{Runtime, api_code};

/// Reaches agents' predictors directly over HTTP, or through the parent's socket proxy and the
/// agent's tunnel with the scheduler's own parent client.
struct HttpPredictor {
    parent: kube::Client,
}

impl PredictorClient for HttpPredictor {
    fn predict<'a>(
        &'a self,
        cluster: &'a ManagedCluster,
        requirements: &'a ReplicaRequirements,
    ) -> BoxFuture<'a, Result<i32, String>> {
        Box::pin(async move {
            let id = &cluster.spec.cluster_id;
            match predictor_client::predictor_base(cluster)? {
                PredictorRoute::Direct(base) => {
                    predictor_client::predict(&base, id, requirements).await
                }
                PredictorRoute::Tunnel(path) => {
                    predictor_client::predict_through_tunnel(&self.parent, &path, id, requirements)
                        .await
                }
            }
        })
    }
}

fn sub_key(sub: &Subscription) -> String {
    format!("{}/{}", sub.namespace().unwrap_or_default(), sub.name_any())
}

fn affinity_matches(sub: &Subscription, cluster_labels: &BTreeMap<String, String>) -> bool {
    labels::any_matches(
        sub.spec.subscribers.iter().map(|s| &s.cluster_affinity),
        cluster_labels,
    )
}

fn ready(mc: &ManagedCluster) -> bool {
    mc.status
        .as_ref()
        .and_then(|s| s.condition("Ready"))
        .is_some_and(|c| c.status == "True")
}

/// Subscription key -> (uid, generation) of the spec last enqueued.
type SeenSpecs = HashMap<String, (Option<String>, Option<i64>)>;

/// Whether a Subscription event asks for scheduling: a new object or a new spec; status writes
/// never do. By uid too: one deleted and created again under its name starts at generation 1
/// again, and its deletion may not have been seen (no finalizer, no deletionTimestamp).
fn spec_is_new(seen: &mut SeenSpecs, key: &str, s: &Subscription) -> bool {
    let now = (s.metadata.uid.clone(), s.metadata.generation);
    seen.insert(key.to_string(), now.clone()) != Some(now)
}

/// What a cluster change is judged by (§3).
#[derive(Clone, PartialEq)]
struct ClusterFacts {
    labels: BTreeMap<String, String>,
    taints: Vec<Taint>,
    ready: bool,
}

/// How a ManagedCluster change reaches the queue (§3): the labels whose matching Subscriptions
/// are enqueued, none when nothing that scheduling looks at changed.
fn cluster_trigger(
    old: Option<&ClusterFacts>,
    now: &ClusterFacts,
    fail_over: bool,
) -> Vec<BTreeMap<String, String>> {
    match old {
        None => vec![now.labels.clone()],
        Some(old) if old.labels != now.labels || old.taints != now.taints => {
            vec![old.labels.clone(), now.labels.clone()]
        }
        // upstream's FailOver: a cluster that stops being Ready reschedules what matched it
        Some(old) if fail_over && !now.ready && old.ready => vec![old.labels.clone()],
        Some(_) => Vec::new(),
    }
}

fn facts_of(c: &ManagedCluster) -> ClusterFacts {
    ClusterFacts {
        labels: c.labels().clone(),
        taints: c.spec.taints.clone(),
        ready: ready(c),
    }
}

/// The scheduler profiles from `--scheduler-config` (or the defaults), with the predictor client
/// the scheduler uses; the error says why they cannot be read. The hub's placement what-if
/// builds the same ones, so it decides with the profiles the scheduler decides with.
pub fn profiles_for(rt: &Runtime) -> Result<Arc<Profiles>, String> {
    let text = match rt.config.scheduler_config.as_deref() {
        Some(path) => Some(
            std::fs::read_to_string(path)
                .map_err(|e| format!("cannot read the scheduler configuration {path}: {e}"))?,
        ),
        None => None,
    };
    let registry = Registry::in_tree(Arc::new(HttpPredictor {
        parent: rt.client.clone(),
    }));
    Profiles::from_yaml(
        text.as_deref(),
        &registry,
        rt.config.gate(known::FEASIBLE_CLUSTERS_TOLERATION),
    )
    .map(|(_, p)| Arc::new(p))
    .map_err(|e| format!("invalid scheduler configuration: {e}"))
}

/// [`profiles_for`], logged; None when they cannot be read.
fn load_profiles(rt: &Runtime) -> Option<Arc<Profiles>> {
    profiles_for(rt)
        .inspect_err(|e| error!(error = %e, "not scheduling"))
        .ok()
}

/// What the scheduler reads, from the shared cache.
struct Caches {
    subs: Shared<Subscription>,
    clusters: Shared<ManagedCluster>,
    inventories: Shared<FeedInventory>,
}

/// Enqueues what changes (§3): new Subscriptions and new specs, FeedInventories, and
/// ManagedCluster changes as [`cluster_trigger`] decides, until `stop`.
fn spawn_triggers(
    caches: &Caches,
    queue: Arc<SchedulingQueue>,
    fail_over: bool,
    stop: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    let sub_store = caches.subs.store.clone();
    let cluster_store = caches.clusters.store.clone();
    let mut sub_events = caches.subs.subscribe();
    let mut inv_events = caches.inventories.subscribe();
    let mut cluster_events = caches.clusters.subscribe();
    // everything already there is re-checked behind whatever changes from now on, and counts as
    // seen: only a new object or a new spec joins the live lane, not a status write, a relist or
    // a lagging subscriber's replay of a Subscription that is still waiting in the backlog
    let mut generations = SeenSpecs::new();
    for s in sub_store.state() {
        let key = sub_key(&s);
        queue.add_backlog(&key, s.spec.priority.unwrap_or(0));
        spec_is_new(&mut generations, &key, &s);
    }
    tokio::spawn(async move {
        let mut facts: HashMap<String, ClusterFacts> = cluster_store
            .state()
            .iter()
            .map(|c| (cluster_key(c), facts_of(c)))
            .collect();
        let mut resync = tokio::time::interval(Duration::from_secs(2));
        let enqueue_matching = |labels: &[BTreeMap<String, String>]| {
            for s in sub_store.state() {
                if labels.iter().any(|l| affinity_matches(&s, l)) {
                    queue.add(&sub_key(&s), s.spec.priority.unwrap_or(0));
                }
            }
        };
        loop {
            tokio::select! {
                _ = stop.cancelled() => break,
                Some(s) = sub_events.next() => {
                    let key = sub_key(&s);
                    if s.metadata.deletion_timestamp.is_some() {
                        queue.remove(&key);
                        generations.remove(&key);
                    } else if spec_is_new(&mut generations, &key, &s) {
                        queue.add(&key, s.spec.priority.unwrap_or(0));
                    }
                }
                Some(inv) = inv_events.next() => {
                    queue.add(&format!("{}/{}", inv.namespace().unwrap_or_default(), inv.name_any()), 0);
                }
                Some(c) = cluster_events.next() => {
                    if c.metadata.deletion_timestamp.is_none() {
                        let now = facts_of(&c);
                        let old = facts.insert(cluster_key(&c), now.clone());
                        enqueue_matching(&cluster_trigger(old.as_ref(), &now, fail_over));
                    }
                }
                _ = resync.tick() => {
                    // deletions are not streamed: compare the set of clusters
                    let present: std::collections::HashSet<String> =
                        cluster_store.state().iter().map(|c| cluster_key(c)).collect();
                    let gone: Vec<String> = facts.keys().filter(|k| !present.contains(*k)).cloned().collect();
                    for k in gone {
                        if let Some(old) = facts.remove(&k) {
                            enqueue_matching(&[old.labels]);
                        }
                    }
                }
            }
        }
    })
}

pub async fn run(rt: Runtime, stop: CancellationToken) {
    let Some(profiles) = load_profiles(&rt) else {
        return;
    };
    let caches = Caches {
        subs: rt.cache.watch::<Subscription>(),
        clusters: rt.cache.watch::<ManagedCluster>(),
        inventories: rt.cache.watch::<FeedInventory>(),
    };
    let kinds = [
        caches.subs.listed(),
        caches.clusters.listed(),
        caches.inventories.listed(),
    ];
    if !crate::runtime::cache::all_listed(&stop, kinds).await {
        return;
    }
    let queue = Arc::new(SchedulingQueue::default());
    let fail_over = rt.config.gate(known::FAIL_OVER);
    let settings = super::failover::Settings {
        grace: rt.config.cluster_failover_grace,
        stable: rt.config.cluster_failback_stable,
        // validated with the configuration
        surge: super::failover::Surge::parse(&rt.config.failback_max_surge)
            .unwrap_or(super::failover::Surge::Percent(25)),
        eviction_rate: rt.config.failover_eviction_rate,
    };
    let mut memory = super::failover::Memory::default();
    let mut reservations = Reservations::default();
    let triggers = spawn_triggers(&caches, queue.clone(), fail_over, stop.clone());
    let events = Events::new(rt.events_client.clone(), "clusternet-scheduler");
    let binder = AsyncBinder {
        rt: rt.clone(),
        subs: caches.subs.clone(),
        profiles: profiles.clone(),
        queue: queue.clone(),
        events: events.clone(),
        permits: Arc::new(tokio::sync::Semaphore::new(BIND_PARALLELISM)),
        in_flight: Arc::default(),
    };
    let mut offset = FilterOffset::default();
    info!("scheduler ready");
    loop {
        let key = tokio::select! {
            _ = stop.cancelled() => break,
            k = queue.pop() => k,
        };
        if binder.defer_if_busy(&key) {
            continue;
        }
        let start = Instant::now();
        let mut recheck = None;
        let reads = Reads {
            profiles: &profiles,
            subs: &caches.subs.store,
            clusters: &caches.clusters.store,
            inventories: &caches.inventories.store,
            events: &events,
            record_decisions: rt.config.record_scheduling_decisions,
        };
        let result = schedule_one(
            &reads,
            &mut offset,
            &key,
            fail_over.then_some((&settings, &mut memory)),
            &mut reservations,
            &mut recheck,
        )
        .await;
        if let Some(after) = recheck {
            // a held cluster's grace ends (or a suppressed failover is looked at again)
            queue.add_after(&key, after);
        }
        let outcome = match result {
            Ok(Decided::Done(o)) => {
                queue.forget(&key);
                o
            }
            Ok(Decided::Bind(b)) => {
                queue.forget(&key);
                let o = b.outcome;
                binder.spawn(key.clone(), b);
                o
            }
            Err(e) => {
                let delay = queue.add_backoff(&key);
                metrics::counter!("clusternet_scheduler_errors_total", "reason" => e.metric_label()).increment(1);
                warn!(subscription = %key, error = %e, retry_in = ?delay, "scheduling failed");
                "error"
            }
        };
        metrics::counter!("clusternet_scheduler_schedule_attempts_total", "result" => outcome, "profile" => "default").increment(1);
        metrics::histogram!("clusternet_scheduler_e2e_scheduling_duration_seconds", "result" => outcome).record(start.elapsed().as_secs_f64());
        // A decision that needs no write never waits on anything, so without this the loop would
        // keep its worker thread for as long as the queue has keys (10 s for a backlog of 10,000
        // after a restart), and a task woken on that worker (tokio puts it in the worker's LIFO
        // slot, which other workers do not steal) would wait as long: the trigger task that
        // queues a user's new Subscription in the live lane was one (measured: 8.5 s).
        tokio::task::yield_now().await;
    }
    triggers.abort();
}

/// What a scheduling cycle reads: the profiles, the shared cache's stores, the event recorder.
struct Reads<'a> {
    profiles: &'a Profiles,
    subs: &'a Store<Subscription>,
    clusters: &'a Store<ManagedCluster>,
    inventories: &'a Store<FeedInventory>,
    events: &'a Events,
    /// `--record-scheduling-decisions`: whether a binding carries `status.lastDecision`.
    record_decisions: bool,
}

/// The failover settings and what failover remembers, when failover is on.
type FailoverState<'a> = Option<(
    &'a super::failover::Settings,
    &'a mut super::failover::Memory,
)>;

// Boxed so the future's Send-ness is checked with concrete lifetimes (rustc cannot prove it for
// the higher-ranked ones a spawned caller would need).
fn schedule_one<'a>(
    reads: &'a Reads<'a>,
    offset: &'a mut FilterOffset,
    key: &'a str,
    failover: FailoverState<'a>,
    reservations: &'a mut Reservations,
    recheck: &'a mut Option<Duration>,
) -> BoxFuture<'a, Result<Decided, CycleError>> {
    Box::pin(schedule_one_inner(
        reads,
        offset,
        key,
        failover,
        reservations,
        recheck,
    ))
}

/// What a scheduling cycle starts from, read from the cache.
struct CycleInput<'a> {
    sub: Arc<Subscription>,
    fwk: &'a Framework,
    inventory: Option<FeedInventory>,
    failover: super::failover::Plan,
}

/// Observe: the Subscription behind `key`, its profile and (Dividing) its FeedInventory; or why
/// there is nothing to schedule now (dropped: deleted, unknown profile, inventory not ready;
/// unchanged: a Dividing spec already scheduled).
fn observe<'a>(
    profiles: &'a Profiles,
    subs: &Store<Subscription>,
    inventories: &Store<FeedInventory>,
    key: &str,
    failover: Option<(
        &super::failover::Settings,
        &mut super::failover::Memory,
        &[Arc<ManagedCluster>],
    )>,
    recheck: &mut Option<Duration>,
) -> Result<CycleInput<'a>, &'static str> {
    let (ns, name) = key.split_once('/').ok_or("dropped")?;
    let Some(sub) = subs
        .get(&ObjectRef::new(name).within(ns))
        .filter(|s| s.metadata.deletion_timestamp.is_none())
    else {
        if let Some((_, memory, _)) = failover {
            memory.forget_subscription(key);
        }
        return Err("dropped");
    };
    let Some(fwk) = profiles.for_subscription(&sub) else {
        warn!(subscription = %key, scheduler = %sub.spec.effective_scheduler_name(), "no scheduler profile of that name");
        return Err("dropped");
    };
    let inventory = if sub.spec.effective_scheduling_strategy() == SchedulingStrategy::Dividing {
        let Some(inv) = inventories.get(&ObjectRef::new(name).within(ns)) else {
            debug!(subscription = %key, "waiting for its FeedInventory");
            return Err("dropped");
        };
        if !binder::feeds_match_inventory(&sub, &inv) {
            debug!(subscription = %key, "FeedInventory does not match the feeds yet");
            return Err("dropped");
        }
        Some((*inv).clone())
    } else {
        None
    };
    let stepping = failover
        .as_ref()
        .is_some_and(|(_, m, _)| m.is_stepping(key));
    let failover = failover.map(|(settings, memory, all)| {
        super::failover::plan(&sub, all, settings, memory, Timestamp::now())
    });
    // a held cluster's grace ends later (a returning one is stable later): look again then,
    // whatever this cycle decides
    *recheck = failover.as_ref().and_then(|f| f.recheck);
    // a lost cluster must leave even a Dividing binding whose spec did not change, one that is
    // back must get its share back, and a fail-back under way takes its next step
    let moved = stepping
        || failover.as_ref().is_some_and(|f| {
            !f.lost.is_empty() || !f.returned.is_empty() || f.suppressed.is_some()
        });
    if !moved && !binder::needs_scheduling(&sub, inventory.as_ref()) {
        return Err("unchanged");
    }
    Ok(CycleInput {
        sub,
        fwk,
        inventory,
        failover: failover.unwrap_or_default(),
    })
}

/// What a cycle decided, before the framework's binding points run.
struct Decision<'a> {
    input: CycleInput<'a>,
    /// The candidates the decision saw (failover applied).
    all: Vec<Arc<ManagedCluster>>,
    state: CycleState,
    target: TargetClusters,
    outcome: &'static str,
    explanation: Explanation,
    offset_before: FilterOffset,
}

/// What `status.lastDecision` is made of: the inputs of a decision that changes the status, so
/// the binder explains it beside the loop (the next decision does not wait for the record).
struct Record {
    /// The candidates the decision saw (failover applied).
    all: Vec<Arc<ManagedCluster>>,
    inventory: Option<FeedInventory>,
    offset_before: FilterOffset,
    /// Recorded on the decision's own run (Dynamic dividing), empty otherwise.
    explanation: Explanation,
    lost: Vec<String>,
    damped: Vec<String>,
}

impl Record {
    fn of(d: Decision<'_>) -> (Record, CycleState, TargetClusters, &'static str) {
        let failover = d.input.failover;
        let record = Record {
            all: d.all,
            inventory: d.input.inventory,
            offset_before: d.offset_before,
            explanation: d.explanation,
            lost: failover.lost,
            damped: failover.damped,
        };
        (record, d.state, d.target, d.outcome)
    }

    /// Sets `status.lastDecision`: a cycle other than Dynamic dividing is explained again, on
    /// the same inputs (see [`decide`]), with profile `fwk`.
    async fn explain(
        mut self,
        fwk: &Framework,
        sub: &Subscription,
        status: &mut SubscriptionStatus,
    ) {
        let inventory = self.inventory.as_ref();
        if !is_dynamic(sub) {
            let mut offset = self.offset_before;
            let again = CycleState::new();
            let explanation = Some(&mut self.explanation);
            let _same = schedule_explained(
                fwk,
                &again,
                &mut offset,
                sub,
                &self.all,
                inventory,
                explanation,
            )
            .await;
        }
        status.last_decision = Some(Box::new(explain::decision_record(
            &self.explanation,
            status,
            inventory,
            &left_out(&self.lost, &self.damped),
            Time(Timestamp::now()),
        )));
    }
}

/// Observes a Subscription and decides where it goes (the filter offset and the Dynamic holds
/// move with it); `Ok(Err(outcome))` when there is nothing to decide.
async fn decide<'a>(
    reads: &Reads<'a>,
    offset: &mut FilterOffset,
    key: &str,
    mut failover_state: FailoverState<'_>,
    reservations: &mut Reservations,
    recheck: &mut Option<Duration>,
) -> Result<Result<Decision<'a>, &'static str>, CycleError> {
    let Reads {
        profiles,
        subs,
        clusters,
        inventories,
        events,
        record_decisions,
    } = *reads;
    // the cache's own Arcs: a decision reads the clusters, it never copies them
    let all = clusters.state();
    let observed = failover_state
        .as_mut()
        .map(|(settings, memory)| (*settings, &mut **memory, all.as_slice()));
    let input = match observe(profiles, subs, inventories, key, observed, recheck) {
        Ok(input) => input,
        Err(outcome) => return Ok(Err(outcome)),
    };
    let (sub, failover) = (&input.sub, &input.failover);
    if let Some(why) = &failover.suppressed {
        warn!(subscription = %key, reason = %why, "FailoverSuppressed");
        metrics::counter!("clusternet_scheduler_failover_suppressed_total").increment(1);
        events.warn(sub.as_ref(), "FailoverSuppressed", why);
    }
    let all = candidates(all, failover);
    let state = CycleState::sampled();
    let dynamic = is_dynamic(sub);
    if dynamic {
        take_reservations(reservations, subs, &all, input.inventory.as_ref(), &state);
    }
    // `status.lastDecision` keeps the explanation of a decision that changes the status. The
    // cycle is explained again, on the same inputs, only when it does (recording every cycle
    // would cost a third of the scheduler's throughput at 1,000 clusters, for cycles that
    // mostly change nothing); Dynamic dividing records on its only run, as its predictions are
    // answers from the children that a second run would ask for again.
    let offset_before = *offset;
    let mut explanation = Explanation::default();
    let inv = input.inventory.as_ref();
    let recorded = (dynamic && record_decisions).then_some(&mut explanation);
    let scheduled = schedule_explained(input.fwk, &state, offset, sub, &all, inv, recorded).await;
    let (target, outcome) = scheduled_or_cleared(scheduled, sub, key, events)?;
    let target = match failover_state.as_mut() {
        Some((settings, memory)) if outcome == "scheduled" => {
            make_before_break(sub, key, target, failover, settings, memory, &all, recheck)
        }
        _ => target,
    };
    Ok(Ok(Decision {
        input,
        all,
        state,
        target,
        outcome,
        explanation,
        offset_before,
    }))
}

async fn schedule_one_inner(
    reads: &Reads<'_>,
    offset: &mut FilterOffset,
    key: &str,
    mut failover_state: FailoverState<'_>,
    reservations: &mut Reservations,
    recheck: &mut Option<Duration>,
) -> Result<Decided, CycleError> {
    let reborrowed = failover_state.as_mut().map(|(s, m)| (*s, &mut **m));
    let decision = decide(reads, offset, key, reborrowed, reservations, recheck).await?;
    let d = match decision {
        Ok(decision) => decision,
        Err(outcome) => return Ok(Decided::Done(outcome)),
    };
    let (fwk, sub) = (d.input.fwk, d.input.sub.clone());
    let Some(status) = framework_bind(fwk, &d.state, &sub, &d.target).await? else {
        return Ok(Decided::Done(d.outcome));
    };
    if is_dynamic(&sub)
        && let Some(inv) = d.input.inventory.as_ref()
    {
        keep_holds(reservations, key, &sub, &status, inv, recheck);
    }
    if sub.status.as_ref() == Some(&status) {
        return Ok(Decided::Done(d.outcome));
    }
    if let Some((settings, memory)) = failover_state.as_mut() {
        let failover = &d.input.failover;
        record_failover_moves(&sub, key, &status, failover, settings, memory, reads.events);
    }
    // the record, the write, its event and PostBind run beside the loop (AsyncBinder): the next
    // decision does not wait for them
    let (record, state, target, outcome) = Record::of(d);
    Ok(Decided::Bind(Box::new(Binding {
        sub,
        status,
        state,
        target,
        outcome,
        record: reads.record_decisions.then_some(record),
    })))
}

/// A Dynamic cycle's view of the holds: those the children now reflect (or that no longer
/// stand) are released, the rest are taken from the clusters' predicted room.
fn take_reservations(
    reservations: &mut Reservations,
    subs: &Store<Subscription>,
    all: &[Arc<ManagedCluster>],
    inventory: Option<&FeedInventory>,
    state: &CycleState,
) {
    if reservations.is_empty() {
        return;
    }
    reservations.release(Timestamp::now(), |cluster, held_by, feed, assigned| {
        reflected(subs, all, cluster, held_by, feed, assigned)
    });
    if let Some(inv) = inventory {
        state.write(reservation::TAKEN, taken_from(reservations, inv, all));
    }
}

/// Holds what a Dynamic decision assigned until the children reflect it. Short of its replicas
/// while holds take room (even when the binding is unchanged), the Subscription is looked at
/// again as they are released.
fn keep_holds(
    reservations: &mut Reservations,
    key: &str,
    sub: &Subscription,
    status: &SubscriptionStatus,
    inv: &FeedInventory,
    recheck: &mut Option<Duration>,
) {
    hold_assigned(reservations, key, sub.status.as_ref(), status, inv);
    if !reservations.is_empty() && binder::feeds_changed_with(status, sub, inv) {
        *recheck = Some(recheck.map_or(SHORT_RECHECK, |r| r.min(SHORT_RECHECK)));
    }
}

/// A scheduling failure: requeued when trying again may help (FailedScheduling either way),
/// otherwise no cluster fits and the binding is cleared.
fn scheduled_or_cleared(
    scheduled: Result<ScheduleResult, ScheduleError>,
    sub: &Subscription,
    key: &str,
    events: &Events,
) -> Result<(TargetClusters, &'static str), CycleError> {
    match scheduled {
        Ok(r) => Ok((r.suggested, "scheduled")),
        Err(e) => {
            let message = binder::truncate_event_message(&e.to_string());
            events.warn(sub, "FailedScheduling", &message);
            if e.should_requeue() {
                return Err(CycleError::Schedule(message));
            }
            info!(subscription = %key, reason = %message, "no cluster fits: clearing the binding");
            Ok((TargetClusters::default(), "unschedulable"))
        }
    }
}

/// The framework's Reserve, Permit, PreBind and Bind points for a decision: the status to
/// write, or `None` when a Bind plugin bound it itself.
async fn framework_bind(
    fwk: &Framework,
    state: &CycleState,
    sub: &Subscription,
    target: &TargetClusters,
) -> Result<Option<SubscriptionStatus>, CycleError> {
    if let Err(e) = fwk.run_reserve(state, sub, target) {
        fwk.run_unreserve(state, sub, target);
        return Err(e.into());
    }
    fwk.run_permit(state, sub, target)?;
    fwk.run_pre_bind(state, sub, target).await?;
    Ok(match fwk.run_bind(state, sub, target).await? {
        BindOutcome::PatchStatus(status) => Some(status),
        BindOutcome::Bound => None,
    })
}

/// The clusters a cycle may bind: a failed-over cluster (or one not given back yet) is no
/// candidate, whatever toleration (with tolerationSeconds) it had; one within its failover
/// grace is scheduled as if still ready (only those are copied).
fn candidates(
    mut all: Vec<Arc<ManagedCluster>>,
    failover: &super::failover::Plan,
) -> Vec<Arc<ManagedCluster>> {
    if !failover.lost.is_empty() || !failover.damped.is_empty() {
        all.retain(|c| {
            let k = cluster_key(c);
            !failover.lost.contains(&k) && !failover.damped.contains(&k)
        });
    }
    if failover.hold.is_empty() {
        return all;
    }
    all.into_iter()
        .map(|c| {
            if failover.hold.contains(&cluster_key(&c)) {
                Arc::new(super::failover::as_if_ready(&c))
            } else {
                c
            }
        })
        .collect()
}

/// The clusters a decision left out for failover (lost, damped), with why, for
/// `status.lastDecision`.
fn left_out<'a>(lost: &'a [String], damped: &'a [String]) -> [(&'static str, &'a [String]); 2] {
    [
        (
            "failed over: not ready for longer than its failover grace",
            lost,
        ),
        (
            "failed over, not given back yet: a fail-back waits until it has been Ready for the stable period",
            damped,
        ),
    ]
}

/// Remembers (and tells, as an Event and a metric) the failovers and fail-backs a new binding
/// carries out: a lost cluster it no longer binds, a returning one it binds again.
fn record_failover_moves(
    sub: &Subscription,
    key: &str,
    status: &SubscriptionStatus,
    failover: &super::failover::Plan,
    settings: &super::failover::Settings,
    memory: &mut super::failover::Memory,
    events: &Events,
) {
    let now = Timestamp::now();
    for lost in &failover.lost {
        if !status.binding_clusters.contains(lost) {
            memory.failed_over(key, lost, now);
            metrics::counter!("clusternet_scheduler_failover_total").increment(1);
            let message = format!(
                "cluster {lost} has not been ready for longer than its failover grace: failed over to {}",
                if status.binding_clusters.is_empty() {
                    "no cluster (none fits)".to_string()
                } else {
                    status.binding_clusters.join(", ")
                }
            );
            info!(subscription = %key, %message, "FailedOver");
            events.warn(sub, "FailedOver", &message);
        }
    }
    for back in &failover.failing_back {
        if status.binding_clusters.contains(back) {
            memory.failed_back(key, back);
            metrics::counter!("clusternet_scheduler_failback_total").increment(1);
            let message = format!(
                "cluster {back} has been Ready for {:?} or longer: it gets its share back, \
                 make-before-break (replicas leave the others only once it reports them \
                 available)",
                settings.stable
            );
            info!(subscription = %key, %message, "FailedBack");
            events.normal(sub, "FailedBack", &message);
        }
    }
}

/// Dynamic dividing (the only one that divides by predicted capacity).
fn is_dynamic(sub: &Subscription) -> bool {
    sub.spec.effective_scheduling_strategy() == SchedulingStrategy::Dividing
        && sub
            .spec
            .dividing_scheduling
            .as_ref()
            .is_some_and(|d| d.type_ == crate::apis::ReplicaDividingType::Dynamic)
}

/// How often a Dynamic Subscription left short while holds take room is looked at again.
const SHORT_RECHECK: Duration = Duration::from_secs(5);

/// Whether `cluster` reports the `assigned` replicas of `feed` of `sub` available (so its
/// predictor counts them), or the hold no longer stands (the Subscription or the cluster is
/// gone). The binding in the cache may lag the one just decided: `assigned` is the decision's.
fn reflected(
    subs: &Store<Subscription>,
    clusters: &[Arc<ManagedCluster>],
    cluster: &str,
    sub: &str,
    feed: &str,
    assigned: i32,
) -> bool {
    let Some((ns, name)) = sub.split_once('/') else {
        return true;
    };
    let Some(found) = subs.get(&ObjectRef::new(name).within(ns)) else {
        return true;
    };
    let Some(status) = found.status.as_ref() else {
        return false;
    };
    let Some(id) = clusters
        .iter()
        .find(|c| cluster_key(c) == cluster)
        .map(|c| c.spec.cluster_id.as_str())
    else {
        return true;
    };
    reported_available(status)
        .any(|(i, f, available)| i == id && f == feed && available >= assigned)
}

/// (cluster ID, feed key, available replicas) as the Subscription's aggregated status reports.
fn reported_available(status: &SubscriptionStatus) -> impl Iterator<Item = (&str, String, i32)> {
    status.aggregated_statuses.iter().flat_map(|agg| {
        let feed = agg.feed.key();
        agg.feed_status_details.iter().map(move |d| {
            (
                d.cluster_id.as_str(),
                feed.clone(),
                d.feed_status.replica_status.available_replicas,
            )
        })
    })
}

/// What the holds take, in replicas of each workload feed of `inventory`, per cluster.
fn taken_from(
    reservations: &Reservations,
    inventory: &FeedInventory,
    clusters: &[Arc<ManagedCluster>],
) -> reservation::Taken {
    let mut taken = reservation::Taken::default();
    for order in inventory
        .spec
        .feeds
        .iter()
        .filter(|o| o.desired_replicas.is_some())
    {
        let request = reservation::request_of(&order.replica_requirements);
        for c in clusters {
            let key = cluster_key(c);
            let n = reservations.taken(&key, &request);
            if n > 0 {
                taken.0.insert((key, order.feed.key()), n);
            }
        }
    }
    taken
}

/// Holds what the new binding assigns beyond the old one (and gives back what it takes away).
fn hold_assigned(
    reservations: &mut Reservations,
    key: &str,
    old: Option<&SubscriptionStatus>,
    new: &SubscriptionStatus,
    inventory: &FeedInventory,
) {
    let now = Timestamp::now();
    for order in inventory
        .spec
        .feeds
        .iter()
        .filter(|o| o.desired_replicas.is_some())
    {
        let feed = order.feed.key();
        let request = reservation::request_of(&order.replica_requirements);
        let old_clusters = old
            .map(|o| o.binding_clusters.as_slice())
            .unwrap_or_default();
        for cluster in new.binding_clusters.iter().chain(
            old_clusters
                .iter()
                .filter(|c| !new.binding_clusters.contains(c)),
        ) {
            let before = old.map_or(0, |o| binder::assigned(o, cluster, &feed));
            let after = binder::assigned(new, cluster, &feed);
            reservations.hold(
                cluster,
                key,
                &feed,
                after - before,
                after,
                request.clone(),
                now,
            );
        }
    }
}

/// How often a fail-back under way looks at the replicas reported available.
const STEP_RECHECK: Duration = Duration::from_secs(2);

/// A Dividing binding that changes because clusters returned (not because its spec changed,
/// not because one was lost: those move at once) moves make-before-break, one
/// [`super::failover::step`] a cycle, looked at again every [`STEP_RECHECK`] until it is done.
#[allow(clippy::too_many_arguments)]
fn make_before_break(
    sub: &Subscription,
    key: &str,
    target: TargetClusters,
    plan: &super::failover::Plan,
    settings: &super::failover::Settings,
    memory: &mut super::failover::Memory,
    clusters: &[Arc<ManagedCluster>],
    recheck: &mut Option<Duration>,
) -> TargetClusters {
    let gradual = sub.spec.effective_scheduling_strategy() == SchedulingStrategy::Dividing
        && plan.lost.is_empty()
        && (!plan.returned.is_empty() || memory.is_stepping(key));
    let status = sub.status.as_ref().filter(|s| {
        gradual
            && !s.binding_clusters.is_empty()
            && s.spec_hash == crate::apis::hash_subscription_spec(&sub.spec)
    });
    let Some(status) = status else {
        memory.set_stepping(key, false);
        return target;
    };
    let available = available_replicas(status, clusters);
    let next = super::failover::step(status, &target, &available, settings.surge);
    let done = binder::sorted_target(&next) == binder::sorted_target(&target);
    memory.set_stepping(key, !done);
    if !done {
        debug!(subscription = %key, ?next, "fail-back: make-before-break step");
        *recheck = Some(recheck.map_or(STEP_RECHECK, |r| r.min(STEP_RECHECK)));
    }
    next
}

/// (cluster key, feed key) -> the replicas the cluster reports available, from the
/// Subscription's aggregated status (clusters matched by cluster ID).
fn available_replicas(
    status: &SubscriptionStatus,
    clusters: &[Arc<ManagedCluster>],
) -> HashMap<(String, String), i32> {
    let by_id: HashMap<&str, String> = clusters
        .iter()
        .map(|c| (c.spec.cluster_id.as_str(), cluster_key(c)))
        .collect();
    reported_available(status)
        .filter_map(|(id, feed, available)| Some(((by_id.get(id)?.clone(), feed), available)))
        .collect()
}

/// Why a scheduling cycle or its binding failed; retried with the queue's backoff.
#[derive(Debug, thiserror::Error)]
enum CycleError {
    /// Scheduling failed in a way worth retrying (the event already says why).
    #[error("{0}")]
    Schedule(String),
    /// A plugin of a later extension point (reserve, permit, pre-bind, bind) refused.
    #[error(transparent)]
    Plugin(#[from] PluginFailure),
    #[error("writing the binding: {0}")]
    Write(#[source] kube::Error),
}

/// The `reason` label of `clusternet_scheduler_errors_total`.
impl ReconcileError for CycleError {
    fn metric_label(&self) -> &'static str {
        match self {
            CycleError::Schedule(_) => "schedule",
            CycleError::Plugin(_) => "plugin",
            CycleError::Write(_) => "write",
        }
    }
}

/// What one scheduling cycle decided.
enum Decided {
    /// Nothing to write (unchanged, dropped, ...): the outcome label.
    Done(&'static str),
    /// A new binding to write.
    Bind(Box<Binding>),
}

struct Binding {
    sub: Arc<Subscription>,
    status: SubscriptionStatus,
    state: CycleState,
    target: TargetClusters,
    outcome: &'static str,
    /// What `status.lastDecision` is made from (taken when the binder explains it).
    record: Option<Record>,
}

/// Writes bindings concurrently (at most [`BIND_PARALLELISM`] at once) while the loop goes on
/// deciding, as upstream's scheduler binds asynchronously. A Subscription has at most one write in
/// flight; when it is enqueued meanwhile, it is scheduled again after that write, so its writes
/// stay in order and each decision starts from the last binding.
#[derive(Clone)]
struct AsyncBinder {
    rt: Runtime,
    subs: Shared<Subscription>,
    profiles: Arc<Profiles>,
    queue: Arc<SchedulingQueue>,
    events: Events,
    permits: Arc<tokio::sync::Semaphore>,
    /// key -> enqueued again while its write was in flight
    in_flight: Arc<std::sync::Mutex<HashMap<String, bool>>>,
}

/// Upstream binds in a goroutine per Subscription, unbounded; 64 writes in flight keeps the API
/// server as busy as that (measured: 16 left a backlog draining at 0.6-0.7x Go's rate with lifted
/// client limits) while a flood of thousands still cannot open thousands of connections.
const BIND_PARALLELISM: usize = 64;

impl AsyncBinder {
    fn in_flight(&self) -> std::sync::MutexGuard<'_, HashMap<String, bool>> {
        self.in_flight.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether `key` has a write in flight; if so it is scheduled again once that is done.
    fn defer_if_busy(&self, key: &str) -> bool {
        match self.in_flight().get_mut(key) {
            Some(again) => {
                *again = true;
                true
            }
            None => false,
        }
    }

    fn spawn(&self, key: String, mut b: Box<Binding>) {
        self.in_flight().insert(key.clone(), false);
        let this = self.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            let permit = this.permits.clone().acquire_owned().await;
            let result = this.bind(&key, &mut b).await;
            drop(permit);
            metrics::histogram!("clusternet_scheduler_binding_duration_seconds")
                .record(started.elapsed().as_secs_f64());
            let again = this.in_flight().remove(&key).unwrap_or(false);
            let priority = b.sub.spec.priority.unwrap_or(0);
            match result {
                Ok(()) if again => this.queue.add(&key, priority),
                Ok(()) => {}
                Err(e) => {
                    let delay = this.queue.add_backoff(&key);
                    metrics::counter!("clusternet_scheduler_binding_errors_total").increment(1);
                    metrics::counter!("clusternet_scheduler_errors_total", "reason" => e.metric_label()).increment(1);
                    warn!(subscription = %key, error = %e, retry_in = ?delay, "writing the binding failed");
                }
            }
        });
    }

    async fn bind(&self, key: &str, b: &mut Binding) -> Result<(), CycleError> {
        let ns = b.sub.namespace().unwrap_or_default();
        let name = b.sub.name_any();
        let fwk = self.profiles.for_subscription(&b.sub);
        if !self.rt.config.record_scheduling_decisions {
            // the loop made no record (see `Reads::record_decisions`); none is left behind from
            // when recording was on either
            b.status.last_decision = None;
        }
        if let (Some(record), Some(fwk)) = (b.record.take(), fwk) {
            record.explain(fwk, &b.sub, &mut b.status).await;
        }
        // upstream's binder: a JSON merge patch of the status the decision started from against
        // the new one, so only what changed travels and fields other writers own are left alone
        let old = serde_json::json!({ "status": b.sub.status });
        let new = serde_json::json!({ "status": b.status });
        if let Some(patch) = merge_patch::create(&old, &new) {
            let api: Api<Subscription> = Api::namespaced(self.rt.client.clone(), &ns);
            match api
                .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                // the pipeline in this process starts from the new binding at once
                Ok(written) => self.subs.observe_write(written),
                Err(e) if api_code(&e) == Some(404) => return Ok(()),
                Err(e) => return Err(CycleError::Write(e)),
            }
        }
        if b.outcome == "scheduled" {
            self.events.normal(
                b.sub.as_ref(),
                "Scheduled",
                &binder::scheduled_event_message(&b.sub, &b.status.binding_clusters),
            );
            // the cluster names are in the event; a log line per binding stays short
            info!(subscription = %key, clusters = b.status.binding_clusters.len(), "scheduled");
        }
        if let Some(fwk) = fwk {
            fwk.run_post_bind(&b.state, &b.sub, &b.target).await;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sub(uid: &str, generation: i64) -> Subscription {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Subscription",
            "metadata": {"name": "s", "namespace": "n", "uid": uid, "generation": generation},
            "spec": {"subscribers": [], "feeds": []}}))
        .expect("a Subscription")
    }

    fn facts(labels: &[(&str, &str)], ready: bool) -> ClusterFacts {
        ClusterFacts {
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            taints: Vec::new(),
            ready,
        }
    }

    #[test]
    fn cluster_changes_enqueue_what_matched_before_and_after() {
        let a = facts(&[("env", "a")], true);
        assert_eq!(
            cluster_trigger(None, &a, true),
            vec![a.labels.clone()],
            "a new cluster"
        );
        let b = facts(&[("env", "b")], true);
        assert_eq!(
            cluster_trigger(Some(&a), &b, true),
            vec![a.labels.clone(), b.labels.clone()],
            "relabelled: the old and the new matches"
        );
        let lost = facts(&[("env", "a")], false);
        assert_eq!(
            cluster_trigger(Some(&a), &lost, true),
            vec![a.labels.clone()],
            "FailOver"
        );
        assert!(
            cluster_trigger(Some(&a), &lost, false).is_empty(),
            "no FailOver gate"
        );
        assert!(
            cluster_trigger(Some(&lost), &a, true).is_empty(),
            "back to Ready: nothing moves"
        );
        assert!(
            cluster_trigger(Some(&a), &a, true).is_empty(),
            "a heartbeat"
        );
    }

    #[test]
    fn new_objects_and_specs_trigger_status_writes_do_not() {
        let mut seen = SeenSpecs::new();
        assert!(spec_is_new(&mut seen, "n/s", &sub("u1", 1)), "a new object");
        assert!(
            !spec_is_new(&mut seen, "n/s", &sub("u1", 1)),
            "a status write"
        );
        assert!(
            spec_is_new(&mut seen, "n/s", &sub("u1", 2)),
            "a spec change"
        );
        assert!(
            spec_is_new(&mut seen, "n/s", &sub("u2", 1)),
            "created again under the same name"
        );
    }
}
