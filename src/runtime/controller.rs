//! The one controller runtime every reconciler uses: a kube-runtime controller over a kind of the
//! shared cache, started after leadership (so it first reconciles everything the cache holds, then
//! follows changes), with bounded concurrency, metrics, and per-object exponential backoff on
//! errors (as client-go's default item rate limiter: a broken object is retried soon at first, then
//! less and less often, and its neighbours are not held up), and, as client-go's overall bucket
//! limiter, at most 10 retries per second over all objects beyond a burst of 100.
//!
//! Two lanes: what changes while the controller runs goes before the start-up backlog (every
//! object it holds when it starts or wins leadership). The backlog is let in a few objects at a
//! time, so a user's new Subscription is reconciled at once even while 10,000 existing ones are
//! looked at again after a restart, instead of waiting behind all of them.

use std::collections::HashMap;
use std::future::Future;
use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::Resource;
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::reflector::ObjectRef;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::runtime::backoff::Exponential;
use crate::runtime::cache::Shared;
use crate::runtime::ratelimit::TokenBucket;

/// Retries after an error: from 5 ms, doubled per consecutive failure, up to 5 minutes.
/// client-go's default item limiter starts at 5 ms too: most first failures are a race with
/// another writer (a finalizer patch whose precondition the scheduler's binding just broke), and
/// the retry should not cost the user half a second.
pub const RETRY: Exponential = Exponential::new(Duration::from_millis(5), Duration::from_secs(300));

/// Looks at an object again after `after` and up to a tenth more, at random: objects reconciled
/// in one burst (a start, a restart, a thousand Subscriptions applied at once) do not all come
/// back for their periodic recheck in the same second, five minutes later.
pub fn recheck(after: Duration) -> Action {
    use rand::Rng;
    let spread = after.as_millis() as u64 / 10;
    let extra = if spread == 0 {
        0
    } else {
        rand::rng().random_range(0..=spread)
    };
    Action::requeue(after + Duration::from_millis(extra))
}

/// Retries per second over all objects of one controller, beyond [`RETRY_BURST`] (client-go's
/// `DefaultControllerRateLimiter` takes the larger of the per-object delay and such a bucket):
/// when hundreds of objects fail for one cause (a Push cluster whose agent is gone, an API server
/// restarting), their retries are spread out instead of spinning hundreds of times a second and
/// starving the work that can succeed, while a few failures still retry at their own pace.
pub const RETRY_RATE: f64 = 10.0;
pub const RETRY_BURST: f64 = 100.0;

/// Consecutive failures per object, cleared by a successful reconcile, and the shared bucket of
/// retry slots.
#[derive(Clone)]
pub struct Backoff {
    failures: Arc<Mutex<HashMap<String, u32>>>,
    bucket: Arc<TokenBucket>,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            failures: Arc::default(),
            bucket: Arc::new(TokenBucket::new(RETRY_RATE, RETRY_BURST)),
        }
    }
}

impl Backoff {
    /// Records a failure of `key` and returns how long to wait before the next try.
    pub fn failed(&self, key: &str) -> (Duration, u32) {
        self.failed_at(key, Instant::now())
    }

    fn failed_at(&self, key: &str, now: Instant) -> (Duration, u32) {
        let n = {
            let mut m = self.failures.lock().unwrap_or_else(|p| p.into_inner());
            let n = m.entry(key.to_string()).or_insert(0);
            *n = n.saturating_add(1);
            *n
        };
        let shared = self.bucket.reserve_at(now);
        (RETRY.after(n).max(shared), n)
    }

    pub fn succeeded(&self, key: &str) {
        let mut m = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        m.remove(key);
    }
}

/// What every reconciler's error tells the kit (controller-rs's `Error::metric_label` contract):
/// the `reason` label of `clusternet_controller_reconcile_errors_total`, a fixed word per kind of
/// failure (`api`, `feed`, `waiting`, ...), and whether it is a wait rather than a failure.
pub trait ReconcileError: std::error::Error + Send + Sync + 'static {
    fn metric_label(&self) -> &'static str;
    /// Not a failure: the object waits for another (a Subscription's Bases being deleted). Logged
    /// quietly until it lasts.
    fn is_wait(&self) -> bool {
        false
    }
}

/// A reconciler that cannot fail.
impl ReconcileError for std::convert::Infallible {
    fn metric_label(&self) -> &'static str {
        match *self {}
    }
}

/// A request to an API server that failed: which object, what it was doing, and the server's own
/// words (not kube's Display, which appends the whole Status as a debug dump). Every reconciler's
/// error enum carries this one variant for its API calls.
#[derive(Debug, thiserror::Error)]
#[error("{object}: {what}: {}", crate::runtime::api_message(source))]
pub struct ApiFailure {
    /// `<Kind> <namespace>/<name>`.
    pub object: String,
    pub what: std::borrow::Cow<'static, str>,
    #[source]
    pub source: kube::Error,
}

impl ApiFailure {
    /// For `map_err`: the failure of a call about `object` (`<Kind> <namespace>/<name>`) doing
    /// `what`.
    pub fn of<W: Into<std::borrow::Cow<'static, str>>>(
        object: String,
        what: W,
    ) -> impl FnOnce(kube::Error) -> ApiFailure + use<W> {
        let what = what.into();
        move |source| ApiFailure {
            object,
            what,
            source,
        }
    }

    /// [`ApiFailure::of`] for a Kubernetes object: its kind and key.
    pub fn about<K: Resource<DynamicType = ()>, W: Into<std::borrow::Cow<'static, str>>>(
        obj: &K,
        what: W,
    ) -> impl FnOnce(kube::Error) -> ApiFailure + use<K, W> {
        let m = obj.meta();
        let name = m.name.as_deref().unwrap_or_default();
        let object = match m.namespace.as_deref() {
            Some(ns) => format!("{} {ns}/{name}", K::kind(&())),
            None => format!("{} {name}", K::kind(&())),
        };
        Self::of(object, what)
    }

    /// The HTTP status of the failed call, if the server answered.
    pub fn code(&self) -> Option<u16> {
        crate::runtime::api_code(&self.source)
    }
}

fn object_key<K: Resource>(obj: &K) -> String {
    let m = obj.meta();
    format!(
        "{}/{}",
        m.namespace.as_deref().unwrap_or_default(),
        m.name.as_deref().unwrap_or_default()
    )
}

/// A controller's workqueue series (`workqueue_*{name}`, client-go's names).
#[derive(Clone)]
struct Queue {
    waiting: Arc<std::sync::Mutex<std::collections::HashMap<String, std::time::Instant>>>,
    adds: metrics::Counter,
    depth: metrics::Gauge,
    latency: metrics::Histogram,
    work: metrics::Histogram,
    retries: metrics::Counter,
}

impl Queue {
    fn new(name: &'static str) -> Self {
        Queue {
            waiting: Arc::default(),
            adds: metrics::counter!("workqueue_adds_total", "name" => name),
            depth: metrics::gauge!("workqueue_depth", "name" => name),
            latency: metrics::histogram!("workqueue_queue_duration_seconds", "name" => name),
            work: metrics::histogram!("workqueue_work_duration_seconds", "name" => name),
            retries: metrics::counter!("workqueue_retries_total", "name" => name),
        }
    }

    fn add(&self, key: String) {
        self.adds.increment(1);
        let mut w = self.waiting.lock().unwrap_or_else(|p| p.into_inner());
        w.entry(key).or_insert_with(std::time::Instant::now);
        // one deleted between its add and its turn is never started: forgotten after an hour
        if w.len() > 1024 {
            w.retain(|_, since| since.elapsed() < std::time::Duration::from_secs(3600));
        }
        self.depth.set(w.len() as f64);
    }

    fn started(&self, key: &str) {
        let mut w = self.waiting.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(since) = w.remove(key) {
            self.latency.record(since.elapsed().as_secs_f64());
        }
        self.depth.set(w.len() as f64);
    }
}

/// [`run_with`] without related kinds.
pub async fn run<K, R, Fut, E>(
    name: &'static str,
    shared: Shared<K>,
    concurrency: u16,
    stop: CancellationToken,
    reconcile: R,
) where
    K: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Eq + Hash + Clone + Default + std::fmt::Debug + Unpin + Send + Sync,
    R: Fn(Arc<K>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Action, E>> + Send + 'static,
    E: ReconcileError,
{
    run_with(
        name,
        shared,
        concurrency,
        stop,
        futures::stream::empty(),
        reconcile,
    )
    .await
}

/// Runs `reconcile` for every object of `shared` and for the objects `also` names (changes of
/// related kinds), until `stop`.
pub async fn run_with<K, R, Fut, E, S>(
    name: &'static str,
    shared: Shared<K>,
    concurrency: u16,
    stop: CancellationToken,
    also: S,
    reconcile: R,
) where
    S: futures::Stream<Item = ObjectRef<K>> + Send + 'static,
    K: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Eq + Hash + Clone + Default + std::fmt::Debug + Unpin + Send + Sync,
    R: Fn(Arc<K>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Action, E>> + Send + 'static,
    E: ReconcileError,
{
    if !shared.ready_until(&stop).await {
        return;
    }
    let reconcile = Arc::new(reconcile);
    let backoff = Backoff::default();
    let seconds = metrics::histogram!("clusternet_controller_reconcile_duration_seconds", "controller" => name);
    // the same figures under controller-runtime's names, which existing dashboards and alerts use
    let time =
        metrics::histogram!("controller_runtime_reconcile_time_seconds", "controller" => name);
    let active = metrics::gauge!("controller_runtime_active_workers", "controller" => name);
    metrics::gauge!("controller_runtime_max_concurrent_reconciles", "controller" => name)
        .set(f64::from(concurrency));
    let lane = Backlog::new(name, concurrency);
    let on_error = backoff.clone();
    // client-go's workqueue series: every change or related change is an add; the time from the
    // first add of an object to its reconcile is its queue duration (kube's scheduler folds
    // repeated adds of a queued object into one, as a workqueue does)
    let queue = Queue::new(name);
    let (q1, q2) = (queue.clone(), queue.clone());
    let (s1, s2) = (shared.store.clone(), shared.store.clone());
    // a deleted object is not reconciled: not counted as waiting
    let changes = shared.subscribe().inspect(move |obj| {
        if s1.get(&ObjectRef::from_obj(obj.as_ref())).is_some() {
            q1.add(object_key(obj.as_ref()));
        }
    });
    let also = also.inspect(move |r| {
        if s2.get(r).is_some() {
            q2.add(format!(
                "{}/{}",
                r.namespace.as_deref().unwrap_or_default(),
                r.name
            ))
        }
    });
    let backlog = lane.stream(shared.store.state());
    let on_error_queue = queue.clone();
    let (done, found) = (lane.clone(), lane.clone());
    Controller::for_shared_stream(changes, shared.store.clone())
        .with_config(controller::Config::default().concurrency(concurrency))
        .reconcile_on(futures::stream::select(also, backlog))
        .graceful_shutdown_on(async move { stop.cancelled().await })
        .run(
            move |obj, _ctx: Arc<()>| {
                let reconcile = reconcile.clone();
                let (seconds, time, active) = (seconds.clone(), time.clone(), active.clone());
                let backoff = backoff.clone();
                let queue = queue.clone();
                let done = done.clone();
                async move {
                    let start = std::time::Instant::now();
                    let key = object_key(obj.as_ref());
                    queue.started(&key);
                    active.increment(1.0);
                    let r = reconcile(obj).await;
                    active.decrement(1.0);
                    // its backlog turn (if it had one) is over: the next may come in
                    done.release(&key);
                    let elapsed = start.elapsed().as_secs_f64();
                    seconds.record(elapsed);
                    time.record(elapsed);
                    queue.work.record(elapsed);
                    let result = match &r {
                        Ok(_) => {
                            backoff.succeeded(&key);
                            "success"
                        }
                        Err(_) => "error",
                    };
                    metrics::counter!("controller_runtime_reconcile_total", "controller" => name, "result" => result).increment(1);
                    r
                }
            },
            move |obj, err: &E, _ctx| {
                let (wait, failures) = on_error.failed(&object_key(obj.as_ref()));
                let reason = err.metric_label();
                // a first failure is most often a race with another writer (a finalizer patch
                // whose precondition a status write just broke) that its retry 5 ms later
                // resolves; say it loudly only when it fails again, and then at 2, 4, 8, ...
                // An error variant named `Waiting` is a wait, not a failure (a Subscription's
                // Bases being deleted): loudly only once it lasts, from the 16th retry (about
                // 3 minutes of them: a child that does not let go of its objects).
                let loud_from = if err.is_wait() { 16 } else { 2 };
                if failures >= loud_from && failures.is_power_of_two() {
                    warn!(controller = name, object = %object_key(obj.as_ref()), error = %err, failures, retry_in = ?wait, "reconcile failed; retrying");
                } else {
                    debug!(controller = name, object = %object_key(obj.as_ref()), error = %err, failures, retry_in = ?wait, "reconcile failed; retrying");
                }
                metrics::counter!("clusternet_controller_reconcile_errors_total", "controller" => name, "reason" => reason).increment(1);
                metrics::counter!("controller_runtime_reconcile_errors_total", "controller" => name).increment(1);
                on_error_queue.retries.increment(1);
                Action::requeue(wait)
            },
            Arc::new(()),
        )
        .for_each(move |r| {
            // an object deleted before its backlog turn came is never reconciled: free its turn
            if let Err(controller::Error::ObjectNotFound(gone)) = &r {
                let ns = gone.namespace.as_deref().unwrap_or_default();
                found.release(&format!("{ns}/{}", gone.name));
            }
            async move {
                if let Err(e) = r {
                    debug!(controller = name, error = %e, "controller event");
                }
            }
        })
        .await;
}

/// The start-up backlog's lane: at most `slots` of its objects in the controller at once, each
/// let in once the one before it was reconciled, so a change that arrives meanwhile finds a
/// free worker (one is always kept for changes) instead of queueing behind every object.
#[derive(Clone)]
struct Backlog {
    slots: Arc<tokio::sync::Semaphore>,
    /// Objects of the backlog in the controller now, with their turn.
    admitted: Arc<Mutex<HashMap<String, tokio::sync::OwnedSemaphorePermit>>>,
    size: metrics::Gauge,
}

impl Backlog {
    fn new(controller: &'static str, concurrency: u16) -> Backlog {
        Backlog {
            slots: Arc::new(tokio::sync::Semaphore::new(backlog_slots(concurrency))),
            admitted: Arc::default(),
            size: metrics::gauge!("clusternet_controller_backlog_objects", "controller" => controller),
        }
    }

    /// The objects of `all`, each as soon as it has a turn.
    fn stream<K>(
        &self,
        all: Vec<Arc<K>>,
    ) -> impl futures::Stream<Item = ObjectRef<K>> + Send + 'static
    where
        K: Resource + Send + Sync + 'static,
        K::DynamicType: Eq + Hash + Clone + Default,
    {
        let this = self.clone();
        this.size.increment(all.len() as f64);
        futures::stream::iter(all).then(move |obj| {
            let this = this.clone();
            async move {
                let turn = this.slots.clone().acquire_owned().await;
                this.size.decrement(1.0);
                if let Ok(turn) = turn {
                    let mut admitted = this.admitted.lock().unwrap_or_else(|p| p.into_inner());
                    admitted.insert(object_key(obj.as_ref()), turn);
                }
                ObjectRef::from_obj(obj.as_ref())
            }
        })
    }

    fn release(&self, key: &str) {
        let mut admitted = self.admitted.lock().unwrap_or_else(|p| p.into_inner());
        admitted.remove(key);
    }
}

/// Workers the backlog may take: all but one, so a change never waits for a backlog reconcile
/// to end (at least one, or a controller of one worker would never see its backlog).
fn backlog_slots(concurrency: u16) -> usize {
    usize::from(concurrency.saturating_sub(1).max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_api_failure_names_the_object_and_says_what_the_server_said() {
        use k8s_openapi::api::core::v1::ConfigMap;
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some("settings".into());
        cm.metadata.namespace = Some("demo".into());
        let status = kube::core::Status {
            message: "configmaps \"settings\" is forbidden: no".into(),
            reason: "Forbidden".into(),
            code: 403,
            ..Default::default()
        };
        let e = ApiFailure::about(&cm, "writing its data")(kube::Error::Api(Box::new(status)));
        assert_eq!(
            e.to_string(),
            "ConfigMap demo/settings: writing its data: configmaps \"settings\" is forbidden: no"
        );
        assert_eq!(e.code(), Some(403));
    }

    #[test]
    fn retries_back_off_exponentially_up_to_a_cap() {
        let delay = |n| RETRY.after(n);
        assert_eq!(delay(1), Duration::from_millis(5));
        assert_eq!(delay(2), Duration::from_millis(10));
        assert_eq!(delay(3), Duration::from_millis(20));
        assert_eq!(delay(10), Duration::from_millis(2560));
        assert_eq!(delay(16), Duration::from_millis(163_840));
        assert_eq!(delay(17), RETRY.max);
        assert_eq!(delay(u32::MAX), RETRY.max);
    }

    #[test]
    fn a_mass_failure_spreads_its_retries_at_the_shared_rate() {
        let b = Backoff::default();
        let now = Instant::now();
        // the burst retries at each object's own pace
        for i in 0..100 {
            assert_eq!(b.failed_at(&format!("ns/o{i}"), now).0, RETRY.after(1));
        }
        // beyond it, one slot every 100 ms (give or take the microseconds since the bucket began)
        let near = |d: Duration, ms: u64| d.as_millis().abs_diff(u128::from(ms)) <= 1;
        assert!(near(b.failed_at("ns/o100", now).0, 100));
        assert!(near(b.failed_at("ns/o101", now).0, 200));
        // 600 objects failing at once: the last retries a minute later, not at once
        for i in 102..600 {
            b.failed_at(&format!("ns/o{i}"), now);
        }
        let (last, _) = b.failed_at("ns/o600", now);
        assert!(last >= Duration::from_secs(50), "{last:?}");
        // time refills the bucket: ten seconds later slots are due sooner again
        let later = now + Duration::from_secs(70);
        let (wait, _) = b.failed_at("ns/late", later);
        assert!(wait < Duration::from_secs(1), "{wait:?}");
        // an object's own backoff still wins when it is the longer one
        let c = Backoff::default();
        for _ in 0..15 {
            c.failed_at("ns/stuck", now);
        }
        assert_eq!(c.failed_at("ns/stuck", now).0, RETRY.after(16));
    }

    #[tokio::test]
    async fn the_backlog_comes_in_a_few_objects_at_a_time_and_one_worker_stays_free() {
        use k8s_openapi::api::core::v1::ConfigMap;
        assert_eq!(backlog_slots(1), 1);
        assert_eq!(backlog_slots(8), 7);
        let lane = Backlog::new("test", 3);
        let all: Vec<Arc<ConfigMap>> = (0..5)
            .map(|i| {
                let mut cm = ConfigMap::default();
                cm.metadata.name = Some(format!("cm{i}"));
                cm.metadata.namespace = Some("ns".into());
                Arc::new(cm)
            })
            .collect();
        let mut stream = Box::pin(lane.stream(all));
        let next = |s: &mut std::pin::Pin<Box<_>>| {
            futures::FutureExt::now_or_never(futures::StreamExt::next(s)).flatten()
        };
        let first: Option<ObjectRef<ConfigMap>> = next(&mut stream);
        assert_eq!(first.map(|r| r.name), Some("cm0".to_string()));
        assert_eq!(next(&mut stream).map(|r| r.name), Some("cm1".to_string()));
        assert!(
            next(&mut stream).is_none(),
            "two turns taken: the third waits"
        );
        lane.release("ns/cm0");
        assert_eq!(next(&mut stream).map(|r| r.name), Some("cm2".to_string()));
        // an object reconciled without a turn (a change) releases nothing
        lane.release("ns/other");
        assert!(next(&mut stream).is_none());
        lane.release("ns/cm1");
        lane.release("ns/cm2");
        assert_eq!(next(&mut stream).map(|r| r.name), Some("cm3".to_string()));
        assert_eq!(next(&mut stream).map(|r| r.name), Some("cm4".to_string()));
    }

    #[test]
    fn success_resets_an_objects_backoff_and_others_are_independent() {
        let b = Backoff::default();
        assert_eq!(b.failed("a/x").1, 1);
        assert_eq!(b.failed("a/x").1, 2);
        assert_eq!(b.failed("a/y").1, 1);
        b.succeeded("a/x");
        assert_eq!(b.failed("a/x"), (RETRY.first, 1));
        assert_eq!(b.failed("a/y").1, 2);
    }
}
