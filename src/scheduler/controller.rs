//! The scheduler's I/O shell (docs/spec/scheduler.md §2-§4, §6): the queue, what triggers a
//! scheduling cycle, reading the cache, running the framework, writing the binding into
//! `Subscription.status` (never rewriting an unchanged status) and the events that explain it.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Taint;
use kube::ResourceExt;
use kube::api::{Api, PostParams};
use kube::runtime::reflector::Store;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use super::framework::{BindOutcome, CycleState, TargetClusters};
use super::predictor_client::{self, PredictorRoute};
use super::queue::SchedulingQueue;
use super::{FilterOffset, PredictorClient, Profiles, Registry, binder};
use crate::apis::known;
use crate::apis::{
    FeedInventory, ManagedCluster, ReplicaRequirements, SchedulingStrategy, Subscription,
    SubscriptionStatus,
};
use crate::kube_ext::labels;
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

/// What a cluster change is judged by (§3).
#[derive(Clone, PartialEq)]
struct ClusterFacts {
    labels: BTreeMap<String, String>,
    taints: Vec<Taint>,
    ready: bool,
}

pub async fn run(rt: Runtime, stop: CancellationToken) {
    let text = match rt.config.scheduler_config.as_deref() {
        Some(path) => match std::fs::read_to_string(path) {
            Ok(t) => Some(t),
            Err(e) => {
                error!(path, error = %e, "cannot read the scheduler configuration; not scheduling");
                return;
            }
        },
        None => None,
    };
    let registry = Registry::in_tree(Arc::new(HttpPredictor {
        parent: rt.client.clone(),
    }));
    let profiles = match Profiles::from_yaml(
        text.as_deref(),
        &registry,
        rt.config.gate(known::FEASIBLE_CLUSTERS_TOLERATION),
    ) {
        Ok((_, p)) => Arc::new(p),
        Err(e) => {
            error!(error = %e, "invalid scheduler configuration; not scheduling");
            return;
        }
    };
    let subs = rt.cache.watch::<Subscription>();
    let clusters = rt.cache.watch::<ManagedCluster>();
    let inventories = rt.cache.watch::<FeedInventory>();
    for ready in [
        subs.ready().await,
        clusters.ready().await,
        inventories.ready().await,
    ] {
        if !ready {
            return;
        }
    }
    let queue = Arc::new(SchedulingQueue::default());
    for s in subs.store.state() {
        queue.add(&sub_key(&s), s.spec.priority.unwrap_or(0));
    }
    let fail_over = rt.config.gate(known::FAIL_OVER);
    // triggers
    let triggers = {
        let (queue, stop) = (queue.clone(), stop.clone());
        let sub_store = subs.store.clone();
        let mut sub_events = subs.subscribe().boxed();
        let mut inv_events = inventories.subscribe().boxed();
        let mut cluster_events = clusters.subscribe().boxed();
        let cluster_store = clusters.store.clone();
        tokio::spawn(async move {
            let mut generations: HashMap<String, Option<i64>> = HashMap::new();
            let mut facts: HashMap<String, ClusterFacts> = cluster_store
                .state()
                .iter()
                .map(|c| {
                    (
                        format!("{}/{}", c.namespace().unwrap_or_default(), c.name_any()),
                        ClusterFacts {
                            labels: c.labels().clone(),
                            taints: c.spec.taints.clone(),
                            ready: ready(c),
                        },
                    )
                })
                .collect();
            let mut resync = tokio::time::interval(Duration::from_secs(2));
            let enqueue_matching =
                |sub_store: &Store<Subscription>,
                 queue: &SchedulingQueue,
                 labels: &[&BTreeMap<String, String>]| {
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
                            continue;
                        }
                        // status writes never trigger: only new objects and spec changes
                        let generation = s.metadata.generation;
                        if generations.insert(key.clone(), generation) != Some(generation) {
                            queue.add(&key, s.spec.priority.unwrap_or(0));
                        }
                    }
                    Some(inv) = inv_events.next() => {
                        queue.add(&format!("{}/{}", inv.namespace().unwrap_or_default(), inv.name_any()), 0);
                    }
                    Some(c) = cluster_events.next() => {
                        if c.metadata.deletion_timestamp.is_some() {
                            continue;
                        }
                        let key = format!("{}/{}", c.namespace().unwrap_or_default(), c.name_any());
                        let now = ClusterFacts { labels: c.labels().clone(), taints: c.spec.taints.clone(), ready: ready(&c) };
                        match facts.insert(key, now.clone()) {
                            None => enqueue_matching(&sub_store, &queue, &[&now.labels]),
                            Some(old) if old.labels != now.labels || old.taints != now.taints => enqueue_matching(&sub_store, &queue, &[&old.labels, &now.labels]),
                            Some(old) if fail_over && !now.ready && old.ready => enqueue_matching(&sub_store, &queue, &[&old.labels]),
                            _ => {}
                        }
                    }
                    _ = resync.tick() => {
                        // deletions are not streamed: compare the set of clusters
                        let present: Vec<String> = cluster_store.state().iter().map(|c| format!("{}/{}", c.namespace().unwrap_or_default(), c.name_any())).collect();
                        let gone: Vec<String> = facts.keys().filter(|k| !present.contains(k)).cloned().collect();
                        for k in gone {
                            if let Some(old) = facts.remove(&k) {
                                enqueue_matching(&sub_store, &queue, &[&old.labels]);
                            }
                        }
                    }
                }
            }
        })
    };
    let events = Events::new(rt.client.clone(), "clusternet-scheduler");
    let binder = AsyncBinder {
        rt: rt.clone(),
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
        let result = schedule_one(
            &profiles,
            &subs.store,
            &clusters.store,
            &inventories.store,
            &events,
            &mut offset,
            &key,
        )
        .await;
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
                warn!(subscription = %key, error = %e, retry_in = ?delay, "scheduling failed");
                "error"
            }
        };
        metrics::counter!("clusternet_scheduler_schedule_attempts_total", "result" => outcome, "profile" => "default").increment(1);
        metrics::histogram!("clusternet_scheduler_e2e_scheduling_duration_seconds", "result" => outcome).record(start.elapsed().as_secs_f64());
    }
    triggers.abort();
}

// Boxed so the future's Send-ness is checked with concrete lifetimes (rustc cannot prove it for
// the higher-ranked ones a spawned caller would need).
#[allow(clippy::too_many_arguments)]
fn schedule_one<'a>(
    profiles: &'a Profiles,
    subs: &'a Store<Subscription>,
    clusters: &'a Store<ManagedCluster>,
    inventories: &'a Store<FeedInventory>,
    events: &'a Events,
    offset: &'a mut FilterOffset,
    key: &'a str,
) -> BoxFuture<'a, Result<Decided, String>> {
    Box::pin(schedule_one_inner(
        profiles,
        subs,
        clusters,
        inventories,
        events,
        offset,
        key,
    ))
}

#[allow(clippy::too_many_arguments)]
async fn schedule_one_inner(
    profiles: &Profiles,
    subs: &Store<Subscription>,
    clusters: &Store<ManagedCluster>,
    inventories: &Store<FeedInventory>,
    events: &Events,
    offset: &mut FilterOffset,
    key: &str,
) -> Result<Decided, String> {
    let Some((ns, name)) = key.split_once('/') else {
        return Ok(Decided::Done("dropped"));
    };
    let Some(sub) = subs
        .state()
        .into_iter()
        .find(|s| s.namespace().as_deref() == Some(ns) && s.name_any() == name)
    else {
        return Ok(Decided::Done("dropped"));
    };
    if sub.metadata.deletion_timestamp.is_some() {
        return Ok(Decided::Done("dropped"));
    }
    let Some(fwk) = profiles.for_subscription(&sub) else {
        warn!(subscription = %key, scheduler = %sub.spec.effective_scheduler_name(), "no scheduler profile of that name");
        return Ok(Decided::Done("dropped"));
    };
    let inventory = if sub.spec.effective_scheduling_strategy() == SchedulingStrategy::Dividing {
        let inv = inventories
            .state()
            .into_iter()
            .find(|i| i.namespace().as_deref() == Some(ns) && i.name_any() == name);
        let Some(inv) = inv else {
            debug!(subscription = %key, "waiting for its FeedInventory");
            return Ok(Decided::Done("dropped"));
        };
        if !binder::feeds_match_inventory(&sub, &inv) {
            debug!(subscription = %key, "FeedInventory does not match the feeds yet");
            return Ok(Decided::Done("dropped"));
        }
        Some((*inv).clone())
    } else {
        None
    };
    if !binder::needs_scheduling(&sub, inventory.as_ref()) {
        return Ok(Decided::Done("unchanged"));
    }
    let all: Vec<ManagedCluster> = clusters.state().iter().map(|c| (**c).clone()).collect();
    let state = CycleState::new();
    let (target, outcome) = match super::schedule(
        fwk,
        &state,
        offset,
        &sub,
        &all,
        inventory.as_ref(),
    )
    .await
    {
        Ok(r) => (r.suggested, "scheduled"),
        Err(e) => {
            let message = binder::truncate_event_message(&e.to_string());
            events.warn(sub.as_ref(), "FailedScheduling", &message);
            if e.should_requeue() {
                return Err(message);
            }
            info!(subscription = %key, reason = %message, "no cluster fits: clearing the binding");
            (TargetClusters::default(), "unschedulable")
        }
    };
    if let Err(e) = fwk.run_reserve(&state, &sub, &target) {
        fwk.run_unreserve(&state, &sub, &target);
        return Err(e.to_string());
    }
    fwk.run_permit(&state, &sub, &target)
        .map_err(|e| e.to_string())?;
    fwk.run_pre_bind(&state, &sub, &target)
        .await
        .map_err(|e| e.to_string())?;
    let status = match fwk
        .run_bind(&state, &sub, &target)
        .await
        .map_err(|e| e.to_string())?
    {
        BindOutcome::PatchStatus(status) => status,
        BindOutcome::Bound => return Ok(Decided::Done(outcome)),
    };
    if sub.status.as_ref() == Some(&status) {
        return Ok(Decided::Done(outcome));
    }
    // the write, its event and PostBind run beside the loop (AsyncBinder): the next decision
    // does not wait for them
    Ok(Decided::Bind(Box::new(Binding {
        sub,
        status,
        state,
        target,
        outcome,
    })))
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
}

/// Writes bindings concurrently (at most [`BIND_PARALLELISM`] at once) while the loop goes on
/// deciding, as upstream's scheduler binds asynchronously. A Subscription has at most one write in
/// flight; when it is enqueued meanwhile, it is scheduled again after that write, so its writes
/// stay in order and each decision starts from the last binding.
#[derive(Clone)]
struct AsyncBinder {
    rt: Runtime,
    profiles: Arc<Profiles>,
    queue: Arc<SchedulingQueue>,
    events: Events,
    permits: Arc<tokio::sync::Semaphore>,
    /// key -> enqueued again while its write was in flight
    in_flight: Arc<std::sync::Mutex<HashMap<String, bool>>>,
}

const BIND_PARALLELISM: usize = 16;

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

    fn spawn(&self, key: String, b: Box<Binding>) {
        self.in_flight().insert(key.clone(), false);
        let this = self.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            let permit = this.permits.clone().acquire_owned().await;
            let result = this.bind(&key, &b).await;
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
                    warn!(subscription = %key, error = %e, retry_in = ?delay, "writing the binding failed");
                }
            }
        });
    }

    async fn bind(&self, key: &str, b: &Binding) -> Result<(), String> {
        let ns = b.sub.namespace().unwrap_or_default();
        let name = b.sub.name_any();
        let mut updated = (*b.sub).clone();
        updated.status = Some(b.status.clone());
        let api: Api<Subscription> = Api::namespaced(self.rt.client.clone(), &ns);
        match api
            .replace_status(&name, &PostParams::default(), &updated)
            .await
        {
            Ok(_) => {}
            Err(e) if api_code(&e) == Some(409) => {
                return Err("the Subscription changed meanwhile".into());
            }
            Err(e) => return Err(format!("writing the binding: {e}")),
        }
        if b.outcome == "scheduled" {
            self.events.normal(
                b.sub.as_ref(),
                "Scheduled",
                &binder::scheduled_event_message(&b.sub, &b.status.binding_clusters),
            );
            info!(subscription = %key, clusters = ?b.status.binding_clusters, "scheduled");
        }
        if let Some(fwk) = self.profiles.for_subscription(&b.sub) {
            fwk.run_post_bind(&b.state, &b.sub, &b.target).await;
        }
        self.rt
            .bus
            .publish(crate::runtime::bus::Hint::SubscriptionBound {
                namespace: ns,
                name,
            });
        Ok(())
    }
}
