//! The process-wide informer cache: one watch per kind, shared by every subsystem of the process.
//!
//! Subsystems ask for a kind with [`SharedCache::watch`]; the first caller starts the reflector,
//! later callers get the same [`Store`] plus their own subscription to its change stream
//! (kube's shared reflector streams). Each cache registers a readiness check, so `/readyz` turns
//! green only after every cache a role needs has listed once.

use std::any::Any;
use std::collections::HashMap;
use std::fmt::Debug;
use std::hash::Hash;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use kube::runtime::reflector::{self, ReflectHandle, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource};
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use super::health::Readiness;

/// How many change events a slow subscriber may lag behind before it holds the reflector up.
const SUBSCRIBER_BUFFER: usize = 1024;

/// A kind in the shared cache: the read-only store and a way to follow its changes.
pub struct Shared<K: Resource + Clone + 'static>
where
    K::DynamicType: Eq + Hash + Clone,
{
    pub store: Store<K>,
    handle: ReflectHandle<K>,
}

impl<K: Resource + Clone + 'static> Clone for Shared<K>
where
    K::DynamicType: Eq + Hash + Clone,
{
    fn clone(&self) -> Self {
        Shared {
            store: self.store.clone(),
            handle: self.handle.clone(),
        }
    }
}

impl<K: Resource + Clone + 'static> Shared<K>
where
    K::DynamicType: Eq + Hash + Clone,
{
    /// A new subscription to the objects this cache applies (for `Controller::for_shared_stream`).
    pub fn subscribe(&self) -> ReflectHandle<K> {
        self.handle.clone()
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
        let (store, writer) = reflector::store_shared::<K>(SUBSCRIBER_BUFFER);
        let handle = match writer.subscribe() {
            Some(h) => h,
            // store_shared always makes a dispatching writer; this arm only guards an API change
            None => unreachable_subscribe(),
        };
        let api: Api<K> = Api::all(self.client.clone());
        let stream = watcher(api, watcher::Config::default().any_semantic())
            .default_backoff()
            .reflect_shared(writer);
        let shutdown = self.shutdown.clone();
        let kind = key.clone();
        let objects = metrics::gauge!("clusternet_cache_objects", "kind" => key.clone());
        let counter_store = store.clone();
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            loop {
                tokio::select! {
                    _ = shutdown.cancelled() => break,
                    ev = stream.next() => match ev {
                        Some(Ok(_)) => objects.set(counter_store.state().len() as f64),
                        Some(Err(e)) => debug!(kind = %kind, error = %e, "watch error (retrying with backoff)"),
                        None => break,
                    }
                }
            }
        });
        let ready_store = store.clone();
        let check = self.readiness.register(format!("informer-sync:{key}"));
        tokio::spawn(async move {
            if ready_store.wait_until_ready().await.is_ok() {
                check.set(true);
            }
        });
        let shared = Shared { store, handle };
        entries.insert(key, Box::new(shared.clone()));
        shared
    }
}

fn unreachable_subscribe<K: Resource + Clone + 'static>() -> ReflectHandle<K>
where
    K::DynamicType: Eq + Hash + Clone,
{
    // Documented invariant of kube-runtime: a writer from store_shared is always subscribable.
    panic!("kube-runtime store_shared returned a writer without a dispatcher")
}
