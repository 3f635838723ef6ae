//! The scheduler's loop (docs/spec/scheduler.md §2-§4, §6), read top to bottom like Go's
//! `scheduleOne`: take the next Subscription from the queue, let the [`Cycle`] decide where it
//! goes (it writes nothing), record what the cycle says for people (Events), hand a new binding
//! to the [`Writer`] (the only writer, beside the loop), and put the Subscription back when it
//! must be looked at again. What queues a Subscription is [`super::triggers`].

use std::sync::Arc;
use std::time::Instant;

use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use super::cycle::{Attempt, Cycle, Decided};
use super::failover::{Memory, Settings, Surge};
use super::predictor_client::{self, PredictorRoute};
use super::queue::SchedulingQueue;
use super::reservation::Reservations;
use super::triggers::{self, Caches};
use super::writer::{BIND_PARALLELISM, Writer};
use super::{FilterOffset, PredictorClient, Profiles, Registry};
use crate::apis::known;
use crate::apis::{FeedInventory, ManagedCluster, ReplicaRequirements, Subscription};
use crate::runtime::Runtime;
use crate::runtime::controller::ReconcileError;
use crate::runtime::events::Events;

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
    let mut cycle = Cycle {
        profiles: profiles.clone(),
        subs: caches.subs.store.clone(),
        clusters: caches.clusters.store.clone(),
        inventories: caches.inventories.store.clone(),
        record_decisions: rt.config.record_scheduling_decisions,
        failover: fail_over.then(|| (failover_settings(&rt), Memory::default())),
        offset: FilterOffset::default(),
        reservations: Reservations::default(),
    };
    let triggers = triggers::spawn(&caches, queue.clone(), fail_over, stop.clone());
    let writer = Writer {
        rt: rt.clone(),
        subs: caches.subs.clone(),
        profiles,
        queue: queue.clone(),
        events: Events::new(rt.events_client.clone(), "clusternet-scheduler"),
        permits: Arc::new(tokio::sync::Semaphore::new(BIND_PARALLELISM)),
        in_flight: Arc::default(),
    };
    info!("scheduler ready");
    loop {
        let key = tokio::select! {
            _ = stop.cancelled() => break,
            k = queue.pop() => k,
        };
        if writer.defer_if_busy(&key) {
            continue;
        }
        let start = Instant::now();
        let attempt = cycle.schedule_one(&key).await;
        let outcome = settle(&key, attempt, &queue, &writer);
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

/// What the loop does with a cycle's answer: its notes become Events on the Subscription, a
/// binding goes to the writer, a failure back into the queue with backoff, and the key is
/// looked at again when the cycle asked; the outcome label of the attempt.
fn settle(key: &str, attempt: Attempt, queue: &SchedulingQueue, writer: &Writer) -> &'static str {
    let Attempt {
        decided,
        sub,
        notes,
        recheck,
    } = attempt;
    if let Some(sub) = &sub {
        for note in &notes {
            if note.warning {
                writer.events.warn(sub.as_ref(), note.reason, &note.message);
            } else {
                writer
                    .events
                    .normal(sub.as_ref(), note.reason, &note.message);
            }
        }
    }
    if let Some(after) = recheck {
        // a held cluster's grace ends (or a suppressed failover is looked at again)
        queue.add_after(key, after);
    }
    match decided {
        Ok(Decided::Done(outcome)) => {
            queue.forget(key);
            outcome
        }
        Ok(Decided::Bind(binding)) => {
            queue.forget(key);
            let outcome = binding.outcome;
            writer.spawn(key.to_string(), binding);
            outcome
        }
        Err(e) => {
            let delay = queue.add_backoff(key);
            metrics::counter!("clusternet_scheduler_errors_total", "reason" => e.metric_label())
                .increment(1);
            warn!(subscription = %key, error = %e, retry_in = ?delay, "scheduling failed");
            "error"
        }
    }
}

/// Failover's settings from the configuration (gate FailOver).
fn failover_settings(rt: &Runtime) -> Settings {
    Settings {
        grace: rt.config.cluster_failover_grace,
        stable: rt.config.cluster_failback_stable,
        // validated with the configuration
        surge: Surge::parse(&rt.config.failback_max_surge).unwrap_or(Surge::Percent(25)),
        eviction_rate: rt.config.failover_eviction_rate,
    }
}
