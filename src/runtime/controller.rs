//! The controller kit every reconciler runs on: a [`Controller`] declares what it reconciles (a
//! kind of the shared cache, or a store of its own), which other kinds must have listed before it
//! decides anything, what else triggers it, and how many objects it works on at once; the kit
//! does the rest: the two-lane [`WorkQueue`] (changes before the start-up backlog), per-object
//! exponential backoff on errors (as client-go's default item rate limiter: a broken object is
//! retried soon at first, then less and less often, and its neighbours are not held up) under a
//! bucket of at most 10 retries per second over all objects beyond a burst of 100, the metrics
//! (ours and controller-runtime's names), quiet logging of first failures and of waits
//! ([`ReconcileError`]), and graceful shutdown. A reconcile returns an [`Action`]; one that holds
//! a finalizer goes through [`finalizer`].

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::stream::BoxStream;
use kube::Resource;
use kube::runtime::reflector::{ObjectRef, Store};
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::runtime::backoff::Exponential;
use crate::runtime::cache::{Index, Listed, Shared, all_listed};
use crate::runtime::queue::{Lane, WorkQueue};
use crate::runtime::ratelimit::TokenBucket;

pub use kube::runtime::finalizer::Event;

/// What a reconcile asks for next: to be looked at again after a while, or only on a change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Action {
    requeue_after: Option<Duration>,
}

impl Action {
    /// Look again after `after`, even if nothing changes.
    pub fn requeue(after: Duration) -> Action {
        Action {
            requeue_after: Some(after),
        }
    }

    /// Look again only when the object (or what triggers it) changes.
    pub fn await_change() -> Action {
        Action {
            requeue_after: None,
        }
    }

    pub fn requeue_after(&self) -> Option<Duration> {
        self.requeue_after
    }
}

/// kube's finalizer helper (its add, Apply, Cleanup and remove, with the JSON-patch tests that
/// keep other writers' finalizers) for a reconcile that answers with the kit's [`Action`].
pub async fn finalizer<K, F, Fut, E>(
    api: &kube::Api<K>,
    name: &str,
    obj: Arc<K>,
    reconcile: F,
) -> Result<Action, kube::runtime::finalizer::Error<E>>
where
    K: Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
    F: FnOnce(Event<K>) -> Fut,
    Fut: Future<Output = Result<Action, E>>,
    E: std::error::Error + 'static,
{
    // kube's helper takes kube's Action, whose wait it does not let out: the reconcile's own
    // answer is kept aside and returned; the helper's own (after adding the finalizer) waits
    let decided = Mutex::new(None);
    kube::runtime::finalizer::finalizer(api, name, obj, |event| {
        let decided = &decided;
        async move {
            let action = reconcile(event).await?;
            *decided.lock().unwrap_or_else(|p| p.into_inner()) = Some(action);
            Ok(kube::runtime::controller::Action::await_change())
        }
    })
    .await?;
    Ok(decided
        .into_inner()
        .unwrap_or_else(|p| p.into_inner())
        .unwrap_or_else(Action::await_change))
}

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

/// What a controller reconciles: the objects of a store, the changes it sees (as references),
/// and when the store has listed once.
pub struct Source<K: Resource + 'static>
where
    K::DynamicType: std::hash::Hash + Eq + Clone,
{
    store: Store<K>,
    changes: BoxStream<'static, ObjectRef<K>>,
    listed: futures::future::BoxFuture<'static, bool>,
    dyntype: K::DynamicType,
}

impl<K> Source<K>
where
    K: Resource + Clone + Send + Sync + 'static,
    K::DynamicType: std::hash::Hash + Eq + Clone + Send + Sync,
{
    /// A store of the caller's own whose kind is known at run time (a Cluster API `Cluster`).
    pub fn store_with(
        store: Store<K>,
        changes: impl futures::Stream<Item = ObjectRef<K>> + Send + 'static,
        dyntype: K::DynamicType,
    ) -> Self {
        let ready = store.clone();
        Source {
            store,
            changes: changes.boxed(),
            listed: Box::pin(async move { ready.wait_until_ready().await.is_ok() }),
            dyntype,
        }
    }
}

impl<K> Source<K>
where
    K: Resource + Clone + Send + Sync + 'static,
    K::DynamicType: std::hash::Hash + Eq + Clone + Default + Send + Sync,
{
    /// A kind of the process's shared cache.
    pub fn shared(shared: &Shared<K>) -> Self {
        let listed = shared.clone();
        Source {
            store: shared.store.clone(),
            changes: shared
                .subscribe()
                .map(|o| ObjectRef::from_obj(o.as_ref()))
                .boxed(),
            listed: Box::pin(async move { listed.ready().await }),
            dyntype: Default::default(),
        }
    }

    /// A store of the caller's own (the agent's watch of its namespace in the parent) and the
    /// stream that fills it; the controller drives the stream.
    pub fn store(
        store: Store<K>,
        changes: impl futures::Stream<Item = ObjectRef<K>> + Send + 'static,
    ) -> Self {
        Self::store_with(store, changes, Default::default())
    }
}

/// A controller, declared: what it reconciles, what it waits for and what triggers it.
pub struct Controller<K: Resource + 'static>
where
    K::DynamicType: std::hash::Hash + Eq + Clone,
{
    name: &'static str,
    source: Source<K>,
    concurrency: u16,
    after: Vec<Listed>,
    triggers: Vec<BoxStream<'static, ObjectRef<K>>>,
}

impl<K> Controller<K>
where
    K: Resource + Clone + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: std::hash::Hash + Eq + Clone + Default + Send + Sync,
{
    /// Controller `name` (its metrics' label) over a kind of the shared cache, four at once.
    pub fn new(name: &'static str, shared: &Shared<K>) -> Self {
        Self::on(name, Source::shared(shared))
    }
}

impl<K> Controller<K>
where
    K: Resource + Clone + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: std::hash::Hash + Eq + Clone + Send + Sync,
{
    pub fn on(name: &'static str, source: Source<K>) -> Self {
        Controller {
            name,
            source,
            concurrency: 4,
            after: Vec::new(),
            triggers: Vec::new(),
        }
    }

    /// Objects reconciled at once (each object by one worker at a time).
    pub fn concurrency(mut self, n: u16) -> Self {
        self.concurrency = n.max(1);
        self
    }

    /// Kinds that must have listed before the first reconcile: a cache that has not listed yet
    /// looks like "no such object", and nothing may be decided from it.
    pub fn after(mut self, kinds: impl IntoIterator<Item = Listed>) -> Self {
        self.after.extend(kinds);
        self
    }

    /// Objects to reconcile when something else changes (a related kind).
    pub fn triggered_by(
        mut self,
        objects: impl futures::Stream<Item = ObjectRef<K>> + Send + 'static,
    ) -> Self {
        self.triggers.push(objects.boxed());
        self
    }

    /// Runs `reconcile` for every object (the start-up backlog, then what changes and what the
    /// triggers name) until `stop`; the reconciles under way finish first.
    pub async fn run<R, Fut, E>(self, stop: CancellationToken, reconcile: R)
    where
        R: Fn(Arc<K>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Action, E>> + Send + 'static,
        E: ReconcileError,
    {
        let Controller {
            name,
            source,
            concurrency,
            after,
            triggers,
        } = self;
        let queue = Arc::new(
            WorkQueue::new(
                name,
                backlog_slots(concurrency),
                "clusternet_controller_backlog_objects",
            )
            .newest_first(PATIENCE),
        );
        // the changes are followed from the start (a store of our own fills from them)
        let feeder = {
            let (queue, store) = (queue.clone(), source.store.clone());
            let changes =
                futures::stream::select_all(std::iter::once(source.changes).chain(triggers));
            tokio::spawn(changes.for_each(move |r| {
                // a deleted object is not reconciled: not queued
                if store.get(&r).is_some() {
                    queue.add(&ref_key(&r), Lane::Live, 0);
                }
                futures::future::ready(())
            }))
        };
        let listed = tokio::select! {
            l = source.listed => l,
            _ = stop.cancelled() => false,
        };
        if !listed || !all_listed(&stop, after).await {
            feeder.abort();
            return;
        }
        for obj in source.store.state() {
            queue.add(&object_key(obj.as_ref()), Lane::Backlog, 0);
        }
        metrics::gauge!("controller_runtime_max_concurrent_reconciles", "controller" => name)
            .set(f64::from(concurrency));
        let worker = Arc::new(Worker {
            name,
            dyntype: source.dyntype,
            store: source.store,
            queue: queue.clone(),
            backoff: Backoff::default(),
            reconcile,
            seconds: metrics::histogram!("clusternet_controller_reconcile_duration_seconds", "controller" => name),
            time: metrics::histogram!("controller_runtime_reconcile_time_seconds", "controller" => name),
            active: metrics::gauge!("controller_runtime_active_workers", "controller" => name),
        });
        let mut workers = tokio::task::JoinSet::new();
        for _ in 0..concurrency {
            let worker = worker.clone();
            workers.spawn(async move { worker.work().await });
        }
        stop.cancelled().await;
        queue.shut_down();
        feeder.abort();
        while workers.join_next().await.is_some() {}
    }
}

/// A trigger: for every change of a related object `R`, the `K`s that `index` holds under the
/// keys `keys(r)` gives and that `wanted(k, r)` accepts (the Bases that list a changed Manifest as
/// a feed, say: looked up by feed, then checked in full).
pub fn through_index<K, R>(
    changes: impl futures::Stream<Item = Arc<R>> + Send + 'static,
    index: Index<K>,
    keys: impl Fn(&R) -> Vec<String> + Send + 'static,
    wanted: impl Fn(&K, &R) -> bool + Send + 'static,
) -> impl futures::Stream<Item = ObjectRef<K>> + Send + 'static
where
    K: Resource + Clone + Send + Sync + 'static,
    K::DynamicType: std::hash::Hash + Eq + Clone + Default + Send + Sync,
    R: Send + Sync + 'static,
{
    changes.flat_map(move |r| {
        let refs: Vec<ObjectRef<K>> = keys(&r)
            .iter()
            .flat_map(|k| index.get(k))
            .filter(|k| wanted(k, &r))
            .map(|k| ObjectRef::from_obj(k.as_ref()))
            .collect();
        futures::stream::iter(refs)
    })
}

/// A trigger: for every change of a related object `R`, the `K` it names (`(namespace, name)`,
/// often from its labels), if any.
pub fn named_by<K, R>(
    changes: impl futures::Stream<Item = Arc<R>> + Send + 'static,
    name: impl Fn(&R) -> Option<(String, String)> + Send + 'static,
) -> impl futures::Stream<Item = ObjectRef<K>> + Send + 'static
where
    K: Resource + 'static,
    K::DynamicType: Default,
    R: Send + Sync + 'static,
{
    changes.filter_map(move |r| {
        futures::future::ready(name(&r).map(|(ns, name)| ObjectRef::new(&name).within(&ns)))
    })
}

/// The `(namespace, name)` two labels of `labels` name.
pub fn labelled(
    labels: &std::collections::BTreeMap<String, String>,
    namespace: &str,
    name: &str,
) -> Option<(String, String)> {
    Some((labels.get(namespace)?.clone(), labels.get(name)?.clone()))
}

/// One controller's workers' shared part.
struct Worker<K: Resource + 'static, R>
where
    K::DynamicType: std::hash::Hash + Eq + Clone,
{
    name: &'static str,
    dyntype: K::DynamicType,
    store: Store<K>,
    queue: Arc<WorkQueue>,
    backoff: Backoff,
    reconcile: R,
    seconds: metrics::Histogram,
    time: metrics::Histogram,
    active: metrics::Gauge,
}

impl<K, R, Fut, E> Worker<K, R>
where
    K: Resource + Clone + Send + Sync + 'static,
    K::DynamicType: std::hash::Hash + Eq + Clone + Send + Sync,
    R: Fn(Arc<K>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Action, E>> + Send + 'static,
    E: ReconcileError,
{
    /// Takes keys until the queue shuts down: reconciles each object (the latest the store
    /// holds), then schedules its next look (its requeue, or its retry after an error).
    async fn work(&self) {
        while let Some(key) = self.queue.pop().await {
            match self.store.get(&key_ref(&key, &self.dyntype)) {
                // deleted before its turn: forgotten
                None => self.backoff.succeeded(&key),
                Some(obj) => self.once(&key, obj).await,
            }
            self.queue.done(&key);
        }
    }

    async fn once(&self, key: &str, obj: Arc<K>) {
        let start = Instant::now();
        self.active.increment(1.0);
        let r = (self.reconcile)(obj).await;
        self.active.decrement(1.0);
        let elapsed = start.elapsed().as_secs_f64();
        self.seconds.record(elapsed);
        self.time.record(elapsed);
        let name = self.name;
        match r {
            Ok(action) => {
                self.backoff.succeeded(key);
                metrics::counter!("controller_runtime_reconcile_total", "controller" => name, "result" => "success").increment(1);
                if let Some(after) = action.requeue_after() {
                    self.queue.add_after(key, after);
                }
            }
            Err(err) => {
                metrics::counter!("controller_runtime_reconcile_total", "controller" => name, "result" => "error").increment(1);
                let (wait, failures) = self.backoff.failed(key);
                // a first failure is most often a race with another writer (a finalizer patch
                // whose precondition a status write just broke) that its retry 5 ms later
                // resolves; say it loudly only when it fails again, and then at 2, 4, 8, ...
                // A wait is not a failure (a Subscription's Bases being deleted): loudly only once
                // it lasts, from the 16th retry (about 3 minutes of them: a child that does not
                // let go of its objects).
                let loud_from = if err.is_wait() { 16 } else { 2 };
                if failures >= loud_from && failures.is_power_of_two() {
                    warn!(controller = name, object = %key, error = %err, failures, retry_in = ?wait, "reconcile failed; retrying");
                } else {
                    debug!(controller = name, object = %key, error = %err, failures, retry_in = ?wait, "reconcile failed; retrying");
                }
                metrics::counter!("clusternet_controller_reconcile_errors_total", "controller" => name, "reason" => err.metric_label()).increment(1);
                metrics::counter!("controller_runtime_reconcile_errors_total", "controller" => name).increment(1);
                self.queue.retry_after(key, wait);
            }
        }
    }
}

/// The queue key of a reference: `namespace/name`, `/name` for a cluster-scoped object.
fn ref_key<K: Resource>(r: &ObjectRef<K>) -> String {
    format!("{}/{}", r.namespace.as_deref().unwrap_or_default(), r.name)
}

fn key_ref<K: Resource>(key: &str, dyntype: &K::DynamicType) -> ObjectRef<K>
where
    K::DynamicType: Clone,
{
    match key.split_once('/') {
        Some((ns, name)) if !ns.is_empty() => ObjectRef::new_with(name, dyntype.clone()).within(ns),
        Some((_, name)) => ObjectRef::new_with(name, dyntype.clone()),
        None => ObjectRef::new_with(key, dyntype.clone()),
    }
}

/// How long a controller's key may wait before it goes ahead of newer ones (the queue hands out
/// newest first, see [`WorkQueue::newest_first`]): long enough that a burst is taken newest first,
/// short enough that under a sustained stream of changes no object waits much longer than this.
const PATIENCE: Duration = Duration::from_secs(30);

/// Backlog keys out at once: all workers but one, so a change never waits for a backlog reconcile
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

    #[test]
    fn keys_and_references_round_trip() {
        use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
        let r: ObjectRef<ConfigMap> = ObjectRef::new("settings").within("demo");
        assert_eq!(ref_key(&r), "demo/settings");
        assert_eq!(key_ref::<ConfigMap>("demo/settings", &()), r);
        let r: ObjectRef<Namespace> = ObjectRef::new("demo");
        assert_eq!(ref_key(&r), "/demo");
        assert_eq!(key_ref::<Namespace>("/demo", &()), r);
        assert_eq!(backlog_slots(1), 1);
        assert_eq!(backlog_slots(8), 7);
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
