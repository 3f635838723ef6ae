//! The process-wide informer cache: one watch per kind, shared by every subsystem of the process.
//!
//! Subsystems ask for a kind with [`SharedCache::watch`]; the first caller starts the reflector,
//! later callers get the same [`Store`] plus their own subscription to its changes. Changes fan
//! out over a bounded broadcast that never blocks the reflector: a subscriber that falls behind
//! gets every object of the store again instead of the changes it missed, so nothing is lost and
//! one slow consumer cannot stall the cache for everybody. Each cache registers a readiness check,
//! so `/readyz` turns green only after every cache a role needs has listed once.

use std::any::Any;
use std::collections::{HashMap, HashSet};
use std::fmt::Debug;
use std::hash::Hash;
use std::sync::{Arc, Mutex, RwLock};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource};
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::health::Readiness;

/// How many changes a subscriber may lag behind before it is handed the whole store instead.
const SUBSCRIBER_BUFFER: usize = 4096;

/// What the cache drops from every object it holds: `managedFields` and kubectl's
/// `last-applied-configuration` annotation (a copy of the whole object as the user last applied
/// it) are often most of an object, and nothing here reads them from the cache. The cache is never
/// written back whole (writes are server-side applies of our own fields, patches and status
/// updates), so the server's copies stay as they are.
fn slim(meta: &mut ObjectMeta) {
    meta.managed_fields = None;
    if let Some(a) = meta.annotations.as_mut() {
        a.remove(crate::apis::known::KUBECTL_LAST_APPLIED_CONFIG_ANNOTATION);
        if a.is_empty() {
            meta.annotations = None;
        }
    }
}

/// How every watch of the process tries again after it failed: from 0.5 s, doubling, to 5 s
/// (jitter adds up to as much again), back to 0.5 s after a minute without errors. kube's default,
/// client-go's reflector timing, grows to 30 s and with its jitter to 60 s: after a restart of the
/// API server or etcd the caches came back up to a minute after the server did, most of the time a
/// process fault took to converge (#21). A failed attempt is a refused connection or an error
/// answer, cheap for the server, and the jitter keeps a fleet's reconnects apart.
pub fn watch_backoff() -> impl kube::runtime::utils::Backoff + 'static {
    kube::runtime::utils::ResetTimerBackoff::new(
        watcher::ExponentialBackoff::from(
            backon::ExponentialBuilder::default()
                .with_min_delay(std::time::Duration::from_millis(500))
                .with_max_delay(std::time::Duration::from_secs(5))
                .with_factor(2.0)
                .without_max_times()
                .with_jitter(),
        ),
        std::time::Duration::from_secs(60),
    )
}

/// Whether a kind of the shared cache has listed once, whatever the kind.
pub struct Listed(tokio::sync::watch::Receiver<bool>);

/// Waits until each of `kinds` has listed once: false as soon as `stop` is cancelled, or when
/// one never will (shutdown). A controller never decides from a cache that has not listed yet
/// (it would look like "no such object").
pub async fn all_listed(stop: &CancellationToken, kinds: impl IntoIterator<Item = Listed>) -> bool {
    for Listed(mut rx) in kinds {
        let listed = tokio::select! {
            r = rx.wait_for(|r| *r) => r.is_ok() && !stop.is_cancelled(),
            _ = stop.cancelled() => false,
        };
        if !listed {
            return false;
        }
    }
    true
}

/// A kind in the shared cache: the read-only store and a way to follow its changes.
pub struct Shared<K: Resource + Clone + 'static>
where
    K::DynamicType: Eq + Hash + Clone,
{
    pub store: Store<K>,
    changes: tokio::sync::broadcast::Sender<Arc<K>>,
    /// The store's one writer and its indexes, shared by the watch and [`Shared::observe_write`].
    writer: Arc<Mutex<CacheWriter<K>>>,
    /// Set once the first list arrived. kube's `Store::wait_until_ready` wakes only one of several
    /// concurrent waiters (a shared oneshot), so one task waits there and everybody else here.
    ready: tokio::sync::watch::Receiver<bool>,
}

impl<K: Resource + Clone + 'static> Clone for Shared<K>
where
    K::DynamicType: Eq + Hash + Clone,
{
    fn clone(&self) -> Self {
        Shared {
            store: self.store.clone(),
            changes: self.changes.clone(),
            writer: self.writer.clone(),
            ready: self.ready.clone(),
        }
    }
}

impl<K: Resource + Clone + 'static> Shared<K>
where
    K::DynamicType: Eq + Hash + Clone,
{
    /// Waits until the cache has listed once; false if it never will (shutdown).
    pub async fn ready(&self) -> bool {
        let mut rx = self.ready.clone();
        rx.wait_for(|r| *r).await.is_ok()
    }

    /// [`Shared::ready`], or false as soon as `stop` is cancelled: leader work that lost its lease
    /// stops at once even while waiting for a kind that never lists.
    pub async fn ready_until(&self, stop: &CancellationToken) -> bool {
        all_listed(stop, [self.listed()]).await
    }

    /// This kind's [`Listed`], to wait for it beside other kinds ([`all_listed`]).
    pub fn listed(&self) -> Listed {
        Listed(self.ready.clone())
    }

    /// Takes the API server's answer to this process's own write of `obj` into the cache at once,
    /// when it is newer than what the cache holds, and tells the subscribers: the next stage in
    /// this process starts from it instead of waiting for the watch to echo it back (the echo,
    /// same resourceVersion, is then skipped). It is the server's state at that resourceVersion,
    /// exactly what the watch will deliver, so roles in one process and roles in several behave
    /// the same, one only sooner.
    pub fn observe_write(&self, obj: K)
    where
        K::DynamicType: Default,
    {
        let mut obj = obj;
        slim(obj.meta_mut());
        let Some(obj) = reflect(&self.writer, &self.store, watcher::Event::Apply(obj)) else {
            return;
        };
        metrics::counter!("clusternet_cache_writes_observed_total").increment(1);
        let _ = self.changes.send(Arc::new(obj));
    }

    /// The index `name` of this kind (the objects by the keys `keys` gives each), built from the
    /// store on first use and kept by the store's writer from then on: a reconciler that needs
    /// "the Descriptions of this Base" reads one bucket instead of filtering every Description of
    /// the cache (which made each reconcile cost O(objects), and a cold start O(objects²)).
    /// Every user of one `name` must pass the same `keys`.
    pub fn index(&self, name: &'static str, keys: fn(&K) -> Vec<String>) -> Index<K>
    where
        K::DynamicType: Default,
    {
        let mut writer = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, data)) = writer.indexes.iter().find(|(n, _)| *n == name) {
            return Index {
                store: self.store.clone(),
                data: data.clone(),
            };
        }
        let mut data = IndexData {
            keys,
            by_key: HashMap::new(),
        };
        data.rebuild(&self.store.state());
        let data = Arc::new(RwLock::new(data));
        writer.indexes.push((name, data.clone()));
        Index {
            store: self.store.clone(),
            data,
        }
    }

    /// The index of this kind by namespace.
    pub fn by_namespace(&self) -> Index<K>
    where
        K::DynamicType: Default,
    {
        self.index("namespace", |o| {
            o.meta().namespace.iter().cloned().collect()
        })
    }

    /// A new subscription to the objects this cache applies or deletes (deleted ones are gone from
    /// the store by the time they arrive), for the controller kit's triggers
    /// ([`super::controller::Controller::triggered_by`]) and anything else that reacts to writes.
    pub fn subscribe(&self) -> futures::stream::BoxStream<'static, Arc<K>>
    where
        K: Send + Sync,
    {
        use tokio::sync::broadcast::error::RecvError;
        let rx = self.changes.subscribe();
        let store = self.store.clone();
        futures::stream::unfold((rx, Vec::<Arc<K>>::new()), move |(mut rx, mut backlog)| {
            let store = store.clone();
            async move {
                loop {
                    if let Some(next) = backlog.pop() {
                        return Some((next, (rx, backlog)));
                    }
                    match rx.recv().await {
                        Ok(obj) => return Some((obj, (rx, backlog))),
                        // fell behind: everything the store holds now stands in for what was missed
                        Err(RecvError::Lagged(_)) => backlog = store.state(),
                        Err(RecvError::Closed) => return None,
                    }
                }
            }
        })
        .boxed()
    }
}

#[derive(Clone)]
pub struct SharedCache {
    client: kube::Client,
    entries: Arc<Mutex<HashMap<String, Box<dyn Any + Send + Sync>>>>,
    readiness: Readiness,
    shutdown: CancellationToken,
}

impl SharedCache {
    pub fn new(client: kube::Client, readiness: Readiness, shutdown: CancellationToken) -> Self {
        SharedCache {
            client,
            entries: Arc::default(),
            readiness,
            shutdown,
        }
    }

    pub fn client(&self) -> kube::Client {
        self.client.clone()
    }

    /// The shared cache of every `K` in all namespaces, started on first use.
    pub fn watch<K>(&self) -> Shared<K>
    where
        K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
        K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
    {
        let dt = K::DynamicType::default();
        let key = format!("{}/{}", K::api_version(&dt), K::kind(&dt));
        self.watch_with(key, watcher::Config::default())
    }

    /// The shared cache of the `K`s called `name` in all namespaces (a field-selected watch, for
    /// kinds too many or too big to cache whole, such as Secrets), started on first use.
    pub fn watch_named<K>(&self, name: &str) -> Shared<K>
    where
        K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
        K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
    {
        self.watch_fields(&format!("metadata.name={name}"))
    }

    /// The shared cache of the `K`s matching field selector `fields` in all namespaces (the
    /// dashboard's Events of Clusternet's own kinds, not every Event of the parent), started on
    /// first use.
    pub fn watch_fields<K>(&self, fields: &str) -> Shared<K>
    where
        K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
        K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
    {
        let dt = K::DynamicType::default();
        let key = format!("{}/{}[fields={fields}]", K::api_version(&dt), K::kind(&dt));
        self.watch_with(key, watcher::Config::default().fields(fields))
    }

    /// The shared cache of the `K`s matching label selector `labels` in all namespaces (for kinds
    /// of which only Clusternet's own are of interest, such as multi-cluster EndpointSlices),
    /// started on first use.
    pub fn watch_labelled<K>(&self, labels: &str) -> Shared<K>
    where
        K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
        K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
    {
        let dt = K::DynamicType::default();
        let key = format!("{}/{}[labels={labels}]", K::api_version(&dt), K::kind(&dt));
        self.watch_with(key, watcher::Config::default().labels(labels))
    }

    fn watch_with<K>(&self, key: String, config: watcher::Config) -> Shared<K>
    where
        K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
        K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
    {
        let mut entries = match self.entries.lock() {
            Ok(e) => e,
            Err(poisoned) => poisoned.into_inner(),
        };
        if let Some(existing) = entries
            .get(&key)
            .and_then(|e| e.downcast_ref::<Shared<K>>())
        {
            return existing.clone();
        }
        let (store, writer) = reflector::store::<K>();
        let writer = Arc::new(Mutex::new(CacheWriter {
            store: writer,
            indexes: Vec::new(),
        }));
        let (changes, _) = tokio::sync::broadcast::channel(SUBSCRIBER_BUFFER);
        let api: Api<K> = Api::all(self.client.clone());
        let stream = watcher(api, config.any_semantic())
            .backoff(watch_backoff())
            .map_ok(|ev| ev.modify(|o| slim(o.meta_mut())));
        let sender = changes.clone();
        let watch_writer = writer.clone();
        let watch_store = store.clone();
        let shutdown = self.shutdown.clone();
        let kind = key.clone();
        let objects = metrics::gauge!("clusternet_cache_objects", "kind" => key.clone());
        let counter_store = store.clone();
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            // a failing watch is said once at warn (then at debug until it recovers): a missing
            // CRD must be visible without debug logs, but not once a second
            let mut failing = false;
            loop {
                tokio::select! {
                    _ = shutdown.cancelled() => break,
                    ev = stream.next() => match ev {
                        Some(Ok(ev)) => {
                            failing = false;
                            let touched = reflect(&watch_writer, &watch_store, ev);
                            objects.set(counter_store.state().len() as f64);
                            if let Some(obj) = touched {
                                // no subscriber yet is fine: they start from the store
                                let _ = sender.send(Arc::new(obj));
                            }
                        }
                        Some(Err(e)) if !failing => {
                            failing = true;
                            if watch_error_is_not_found(&e) {
                                warn!(kind = %kind, "the API server does not serve this kind: is its CRD installed (kubectl apply -f crds/)? waiting for it");
                            } else {
                                warn!(kind = %kind, error = %e, "watch failed; retrying with backoff");
                            }
                        }
                        Some(Err(e)) => debug!(kind = %kind, error = %e, "watch error (retrying with backoff)"),
                        None => break,
                    }
                }
            }
        });
        let ready_store = store.clone();
        let check = self.readiness.register(format!("informer-sync:{key}"));
        let (ready_tx, ready) = tokio::sync::watch::channel(false);
        let ready_shutdown = self.shutdown.clone();
        tokio::spawn(async move {
            // the only waiter on this store (see `Shared::ready`); on shutdown the sender goes, so
            // waiters on a kind that never listed (its CRD missing) hear `false` instead of hanging
            let listed = tokio::select! {
                r = ready_store.wait_until_ready() => r.is_ok(),
                _ = ready_shutdown.cancelled() => false,
            };
            if listed {
                check.set(true);
                let _ = ready_tx.send(true);
                // keep the sender alive so late waiters still see `true`
                std::future::pending::<()>().await;
            }
        });
        let shared = Shared {
            store,
            changes,
            writer,
            ready,
        };
        entries.insert(key, Box::new(shared.clone()));
        shared
    }
}

/// A 404 on list or watch: the kind is not served (no CRD, or the API group is absent).
fn watch_error_is_not_found(e: &watcher::Error) -> bool {
    match e {
        watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s))
        | watcher::Error::WatchFailed(kube::Error::Api(s)) => s.code == 404,
        _ => false,
    }
}

/// The store's writer with the indexes it keeps beside the store.
struct CacheWriter<K: Resource + Clone + 'static>
where
    K::DynamicType: Eq + Hash + Clone,
{
    store: reflector::store::Writer<K>,
    indexes: Vec<(&'static str, Arc<RwLock<IndexData<K>>>)>,
}

/// One index's buckets: key -> the objects that have it.
struct IndexData<K: Resource + 'static>
where
    K::DynamicType: Eq + Hash + Clone,
{
    keys: fn(&K) -> Vec<String>,
    by_key: HashMap<String, HashSet<ObjectRef<K>>>,
}

/// The object's reference without the resourceVersion and uid `ObjectRef::from_obj` copies in
/// (the index holds one per object and key; equality ignores them anyway).
fn bare_ref<K: Resource>(obj: &K) -> ObjectRef<K>
where
    K::DynamicType: Eq + Hash + Clone + Default,
{
    let r = ObjectRef::new(obj.meta().name.as_deref().unwrap_or_default());
    match obj.meta().namespace.as_deref() {
        Some(ns) => r.within(ns),
        None => r,
    }
}

impl<K: Resource + 'static> IndexData<K>
where
    K::DynamicType: Eq + Hash + Clone + Default,
{
    fn insert(&mut self, obj: &K) {
        for key in (self.keys)(obj) {
            self.by_key.entry(key).or_default().insert(bare_ref(obj));
        }
    }

    fn remove(&mut self, obj: &K) {
        let r = bare_ref(obj);
        for key in (self.keys)(obj) {
            if let Some(bucket) = self.by_key.get_mut(&key) {
                bucket.remove(&r);
                if bucket.is_empty() {
                    self.by_key.remove(&key);
                }
            }
        }
    }

    fn rebuild(&mut self, all: &[Arc<K>]) {
        self.by_key.clear();
        for obj in all {
            self.insert(obj);
        }
    }
}

/// A secondary index of a kind in the shared cache ([`Shared::index`]).
pub struct Index<K: Resource + 'static>
where
    K::DynamicType: Eq + Hash + Clone,
{
    store: Store<K>,
    data: Arc<RwLock<IndexData<K>>>,
}

impl<K: Resource + 'static> Clone for Index<K>
where
    K::DynamicType: Eq + Hash + Clone,
{
    fn clone(&self) -> Self {
        Index {
            store: self.store.clone(),
            data: self.data.clone(),
        }
    }
}

impl<K: Resource + Clone + 'static> Index<K>
where
    K::DynamicType: Eq + Hash + Clone + Default,
{
    /// The cached objects with `key`, as the store holds them now.
    pub fn get(&self, key: &str) -> Vec<Arc<K>> {
        let (refs, keys): (Vec<ObjectRef<K>>, _) = {
            let data = self.data.read().unwrap_or_else(|p| p.into_inner());
            let refs = data
                .by_key
                .get(key)
                .map(|b| b.iter().cloned().collect())
                .unwrap_or_default();
            (refs, data.keys)
        };
        // the store may be a step ahead of the index (it is written first): an object that no
        // longer has the key, or is gone, is not returned
        refs.iter()
            .filter_map(|r| self.store.get(r))
            .filter(|o| keys(o).iter().any(|k| k == key))
            .collect()
    }
}

/// Applies one watch event to the store and its indexes, as kube's reflector does, except that
/// an object older than the one [`Shared::observe_write`] already put there is not applied (the
/// watch lags behind our own write) and the echo of that write is not announced again. Returns
/// the object to announce to subscribers.
fn reflect<K>(writer: &Mutex<CacheWriter<K>>, store: &Store<K>, ev: watcher::Event<K>) -> Option<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone + Default,
{
    // the whole step under the writer's lock: the watch and our own writes take turns
    let mut writer = writer.lock().unwrap_or_else(|p| p.into_inner());
    let held = match &ev {
        watcher::Event::Apply(o) | watcher::Event::Delete(o) => store.get(&ObjectRef::from_obj(o)),
        _ => None,
    };
    if let watcher::Event::Apply(obj) = &ev
        && held.is_some()
        && !is_newer(obj.meta().resource_version.as_deref(), held.as_deref())
    {
        return None;
    }
    writer.store.apply_watcher_event(&ev);
    if !writer.indexes.is_empty() {
        // during a relist kube's writer fills a buffer and swaps it in at InitDone: the indexes
        // follow the store, so they are rebuilt then
        let all = matches!(ev, watcher::Event::InitDone).then(|| store.state());
        for (_, data) in &writer.indexes {
            let mut data = data.write().unwrap_or_else(|p| p.into_inner());
            match &ev {
                watcher::Event::Apply(o) => {
                    if let Some(h) = &held {
                        data.remove(h);
                    }
                    data.insert(o);
                }
                watcher::Event::Delete(o) => {
                    if let Some(h) = &held {
                        data.remove(h);
                    }
                    data.remove(o);
                }
                watcher::Event::InitDone => data.rebuild(all.as_deref().unwrap_or_default()),
                watcher::Event::Init | watcher::Event::InitApply(_) => {}
            }
        }
    }
    match ev {
        watcher::Event::Apply(o) | watcher::Event::Delete(o) | watcher::Event::InitApply(o) => {
            Some(o)
        }
        watcher::Event::Init | watcher::Event::InitDone => None,
    }
}

/// Whether resourceVersion `new` is later than that of `held`. resourceVersions are opaque, but
/// every API server backed by etcd issues increasing integers; anything else counts as newer, so
/// the watch always wins when they cannot be compared.
fn is_newer<K: Resource>(new: Option<&str>, held: Option<&K>) -> bool {
    let Some(held) = held else { return true };
    let parse = |v: Option<&str>| v.and_then(|v| v.parse::<u64>().ok());
    match (parse(new), parse(held.meta().resource_version.as_deref())) {
        (Some(n), Some(h)) => n > h,
        _ => true,
    }
}

/// How long a write may stay unseen by the cache before it is forgotten (the object may have
/// come and gone between two watch events); until then readers fall back to the API server.
const EXPECTATION_TTL: std::time::Duration = std::time::Duration::from_secs(30);

/// Writes of this process the shared cache may not have seen yet, grouped by whatever a reconciler
/// reads together (e.g. "the Bases of Subscription <uid>"). A reconciler that decides what to write
/// from the cache asks [`Expectations::settled`] first and reads through the API server while a
/// group still waits, so it never acts on a cache that misses its own last create (which would
/// create a second object under a new random name) or its own last update or delete.
#[derive(Default)]
pub struct Expectations {
    pending: Mutex<HashMap<String, Vec<Expected>>>,
}

struct Expected {
    namespace: Option<String>,
    name: String,
    /// The resourceVersion the cache held before the write (None: created, so absent before).
    before: Option<String>,
    deleted: bool,
    since: std::time::Instant,
}

impl Expectations {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Vec<Expected>>> {
        match self.pending.lock() {
            Ok(p) => p,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// Records a create (`before` None) or an update (`before` the replaced resourceVersion).
    pub fn written(
        &self,
        group: &str,
        namespace: Option<&str>,
        name: &str,
        before: Option<String>,
    ) {
        self.push(group, namespace, name, before, false);
    }

    /// Records a delete of the object whose resourceVersion was `before`.
    pub fn deleted(
        &self,
        group: &str,
        namespace: Option<&str>,
        name: &str,
        before: Option<String>,
    ) {
        self.push(group, namespace, name, before, true);
    }

    fn push(
        &self,
        group: &str,
        namespace: Option<&str>,
        name: &str,
        before: Option<String>,
        deleted: bool,
    ) {
        let mut pending = self.lock();
        // groups nobody asks about again (a deleted Subscription, say) must not pile up
        pending.retain(|_, list| {
            list.retain(|e| e.since.elapsed() <= EXPECTATION_TTL);
            !list.is_empty()
        });
        pending
            .entry(group.to_string())
            .or_default()
            .push(Expected {
                namespace: namespace.map(str::to_string),
                name: name.to_string(),
                before,
                deleted,
                since: std::time::Instant::now(),
            });
    }

    /// True when `store` reflects every write recorded for `group` (forgetting those it does).
    pub fn settled<K>(&self, group: &str, store: &Store<K>) -> bool
    where
        K: Resource + Clone + 'static,
        K::DynamicType: Default + Eq + Hash + Clone,
    {
        let mut pending = self.lock();
        let Some(list) = pending.get_mut(group) else {
            return true;
        };
        list.retain(|e| {
            if e.since.elapsed() > EXPECTATION_TTL {
                return false;
            }
            let mut key = reflector::ObjectRef::<K>::new(&e.name);
            if let Some(ns) = &e.namespace {
                key = key.within(ns);
            }
            let seen = match store.get(&key) {
                None => e.deleted,
                Some(obj) => {
                    let rv = obj.meta().resource_version.clone();
                    e.before.is_some() && rv != e.before || e.before.is_none() && !e.deleted
                }
            };
            !seen
        });
        let done = list.is_empty();
        if done {
            pending.remove(group);
        }
        done
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::ResourceExt;
    use kube::api::ObjectMeta;

    #[tokio::test]
    async fn a_failing_watch_retries_within_ten_seconds_and_starts_soon() {
        let delays: Vec<std::time::Duration> = watch_backoff().take(30).collect();
        assert_eq!(delays.len(), 30, "it never gives up");
        assert!(delays[0] >= std::time::Duration::from_millis(500));
        assert!(delays[0] < std::time::Duration::from_secs(1));
        assert!(
            delays
                .iter()
                .all(|d| *d <= std::time::Duration::from_secs(10)),
            "{delays:?}"
        );
        assert!(
            delays[10..]
                .iter()
                .all(|d| *d >= std::time::Duration::from_secs(5)),
            "grown to the cap: {delays:?}"
        );
    }

    #[test]
    fn the_cache_keeps_neither_managed_fields_nor_kubectls_copy_of_the_object() {
        let ann = |pairs: &[(&str, &str)]| {
            Some(
                pairs
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            )
        };
        let last = crate::apis::known::KUBECTL_LAST_APPLIED_CONFIG_ANNOTATION;
        let mut meta = ObjectMeta {
            managed_fields: Some(vec![Default::default()]),
            annotations: ann(&[(last, "{\"big\":true}"), ("team", "a")]),
            ..Default::default()
        };
        slim(&mut meta);
        assert_eq!(meta.managed_fields, None);
        assert_eq!(meta.annotations, ann(&[("team", "a")]));
        let mut only_kubectls = ObjectMeta {
            annotations: ann(&[(last, "{}")]),
            ..Default::default()
        };
        slim(&mut only_kubectls);
        assert_eq!(only_kubectls.annotations, None);
    }

    fn cm(name: &str, rv: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                resource_version: Some(rv.into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    /// A kind's cache that has listed, without a watch (the tests play the watch with `reflect`),
    /// and a subscription to what it announces.
    fn listed_shared() -> (
        Shared<ConfigMap>,
        tokio::sync::broadcast::Receiver<Arc<ConfigMap>>,
    ) {
        let (store, writer) = reflector::store::<ConfigMap>();
        let (changes, rx) = tokio::sync::broadcast::channel(16);
        let (_ready_tx, ready) = tokio::sync::watch::channel(true);
        let shared = Shared {
            store,
            changes,
            writer: Arc::new(Mutex::new(CacheWriter {
                store: writer,
                indexes: Vec::new(),
            })),
            ready,
        };
        (shared, rx)
    }

    #[tokio::test]
    async fn an_observed_write_is_seen_at_once_and_its_late_echo_is_not_announced_again() {
        let (shared, mut rx) = listed_shared();
        let (store, w) = (shared.store.clone(), shared.writer.clone());
        assert_eq!(
            reflect(&w, &store, watcher::Event::Apply(cm("a", "4")))
                .map(|o| o.metadata.resource_version),
            Some(Some("4".into()))
        );
        // our own write answered with rv 5: in the store and announced at once
        shared.observe_write(cm("a", "5"));
        let rv = |s: &Store<ConfigMap>| {
            s.get(&ObjectRef::new("a").within("ns"))
                .and_then(|o| o.metadata.resource_version.clone())
        };
        assert_eq!(rv(&store).as_deref(), Some("5"));
        assert_eq!(
            rx.try_recv()
                .ok()
                .and_then(|o| o.metadata.resource_version.clone())
                .as_deref(),
            Some("5")
        );
        // an older or equal answer changes nothing
        shared.observe_write(cm("a", "3"));
        assert!(rx.try_recv().is_err());
        // the watch lagging behind: older events are not applied, the echo is not announced
        assert!(reflect(&w, &store, watcher::Event::Apply(cm("a", "4"))).is_none());
        assert!(reflect(&w, &store, watcher::Event::Apply(cm("a", "5"))).is_none());
        assert_eq!(rv(&store).as_deref(), Some("5"));
        // newer changes and deletions flow as before
        assert!(reflect(&w, &store, watcher::Event::Apply(cm("a", "6"))).is_some());
        assert!(reflect(&w, &store, watcher::Event::Delete(cm("a", "7"))).is_some());
        assert!(rv(&store).is_none());
        // resourceVersions that are not integers cannot be compared: the watch wins
        assert!(is_newer(Some("x"), Some(&cm("a", "9"))));
    }

    fn labelled(name: &str, rv: &str, owner: Option<&str>) -> ConfigMap {
        let mut o = cm(name, rv);
        o.metadata.labels = owner.map(|v| [("owner".to_string(), v.to_string())].into());
        o
    }

    fn names(objs: Vec<Arc<ConfigMap>>) -> Vec<String> {
        let mut n: Vec<String> = objs.iter().map(|o| o.name_any()).collect();
        n.sort();
        n
    }

    #[tokio::test]
    async fn an_index_follows_applies_relabels_deletes_relists_and_our_own_writes() {
        let (shared, _rx) = listed_shared();
        let (store, w) = (shared.store.clone(), shared.writer.clone());
        let owner = |o: &ConfigMap| o.labels().get("owner").cloned().into_iter().collect();
        reflect(
            &w,
            &store,
            watcher::Event::Apply(labelled("a", "1", Some("x"))),
        );
        // built from what the store holds when first asked for, shared under one name
        let by_owner = shared.index("owner", owner);
        assert_eq!(names(by_owner.get("x")), ["a"]);
        reflect(
            &w,
            &store,
            watcher::Event::Apply(labelled("b", "2", Some("x"))),
        );
        reflect(
            &w,
            &store,
            watcher::Event::Apply(labelled("c", "3", Some("y"))),
        );
        assert_eq!(names(shared.index("owner", owner).get("x")), ["a", "b"]);
        // relabelled: out of the old bucket, into the new one
        reflect(
            &w,
            &store,
            watcher::Event::Apply(labelled("b", "4", Some("y"))),
        );
        assert_eq!(names(by_owner.get("x")), ["a"]);
        assert_eq!(names(by_owner.get("y")), ["b", "c"]);
        // the label dropped, then deleted
        reflect(&w, &store, watcher::Event::Apply(labelled("c", "5", None)));
        assert_eq!(names(by_owner.get("y")), ["b"]);
        reflect(
            &w,
            &store,
            watcher::Event::Delete(labelled("b", "6", Some("y"))),
        );
        assert!(by_owner.get("y").is_empty());
        // our own write is indexed at once; a stale echo changes nothing
        shared.observe_write(labelled("d", "7", Some("y")));
        assert!(
            reflect(
                &w,
                &store,
                watcher::Event::Apply(labelled("d", "7", Some("y")))
            )
            .is_none()
        );
        assert_eq!(names(by_owner.get("y")), ["d"]);
        // a relist: the store (and the index) keep the old state until InitDone swaps in the new
        reflect(&w, &store, watcher::Event::Init);
        reflect(
            &w,
            &store,
            watcher::Event::InitApply(labelled("e", "8", Some("x"))),
        );
        assert_eq!(names(by_owner.get("x")), ["a"]);
        reflect(&w, &store, watcher::Event::InitDone);
        assert_eq!(names(by_owner.get("x")), ["e"]);
        assert!(by_owner.get("y").is_empty());
        assert_eq!(names(shared.by_namespace().get("ns")), ["e"]);
    }

    #[test]
    fn expectations_wait_for_the_cache_to_see_creates_updates_and_deletes() {
        let (store, mut writer) = reflector::store::<ConfigMap>();
        let e = Expectations::default();
        assert!(e.settled("g", &store));
        e.written("g", Some("ns"), "a", None);
        assert!(!e.settled("g", &store));
        writer.apply_watcher_event(&watcher::Event::Apply(cm("a", "1")));
        assert!(e.settled("g", &store));
        e.written("g", Some("ns"), "a", Some("1".into()));
        assert!(!e.settled("g", &store));
        writer.apply_watcher_event(&watcher::Event::Apply(cm("a", "2")));
        assert!(e.settled("g", &store));
        e.deleted("g", Some("ns"), "a", Some("2".into()));
        assert!(!e.settled("g", &store));
        assert!(e.settled("other", &store));
        writer.apply_watcher_event(&watcher::Event::Delete(cm("a", "2")));
        assert!(e.settled("g", &store));
    }
}
