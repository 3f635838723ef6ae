//! The deploying side's watches of a child (#14): one shared watch per kind it has applied there,
//! narrowed by label to the objects Clusternet applied. A change to one of them (an edit, a
//! deletion, a status update) names its Description, which is then looked at again: drift is
//! repaired within moments of happening, and nothing is re-applied on a timer.

use std::collections::HashMap;
use std::sync::Arc;

use futures::StreamExt;
use kube::api::{Api, DynamicObject};
use kube::core::ApiResource;
use kube::discovery::{ApiCapabilities, Scope};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use tokio::sync::mpsc::UnboundedSender;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::apis::known;

/// A Description, as `namespace/name`, whose objects changed in the child.
pub type Touched = (String, String);

/// The Description an applied object belongs to, from its owner annotation
/// (`<namespace>.<name>`; namespaces cannot hold dots, names can, so split at the first).
pub fn owner_of(obj: &DynamicObject) -> Option<Touched> {
    let owner = obj
        .annotations()
        .get(known::OBJECT_OWNED_BY_DESCRIPTION_ANNOTATION)?;
    let (ns, name) = owner.split_once('.')?;
    (!ns.is_empty() && !name.is_empty()).then(|| (ns.to_string(), name.to_string()))
}

struct KindWatch {
    store: Store<DynamicObject>,
    /// The newest resourceVersion the watch has delivered: whether it has caught up with a write.
    seen: Arc<std::sync::atomic::AtomicU64>,
    ready: tokio::sync::watch::Receiver<bool>,
    scope: Scope,
    resource: ApiResource,
}

/// The watches of one child; they stop when this is dropped.
pub struct Watches {
    client: Client,
    notify: Option<UnboundedSender<Touched>>,
    kinds: std::sync::Mutex<HashMap<(String, String), Arc<KindWatch>>>,
    stop: CancellationToken,
}

impl Drop for Watches {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// What the watch knows of one object.
pub enum Live {
    /// The watch has not listed yet (or there is none): ask the API server.
    Unknown,
    Absent,
    Present(Arc<DynamicObject>),
}

impl Watches {
    /// `notify` hears of every change; without it nothing is watched (drift is then only seen on
    /// the next reconcile of the Description).
    pub fn new(client: Client, notify: Option<UnboundedSender<Touched>>) -> Watches {
        Watches {
            client,
            notify,
            kinds: Default::default(),
            stop: CancellationToken::new(),
        }
    }

    /// Starts the watch of a kind once (a cluster-wide watch of the objects we labelled).
    pub fn ensure(&self, resource: &ApiResource, caps: &ApiCapabilities) {
        let Some(notify) = self.notify.clone() else {
            return;
        };
        let key = (resource.api_version.clone(), resource.kind.clone());
        let mut kinds = self.kinds.lock().unwrap_or_else(|p| p.into_inner());
        if kinds.contains_key(&key) {
            return;
        }
        let writer = reflector::store::Writer::<DynamicObject>::new(resource.clone());
        let store = writer.as_reader();
        let (ready_tx, ready) = tokio::sync::watch::channel(false);
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), resource);
        let config = watcher::Config::default().labels(known::OBJECT_OWNED_BY_DESCRIPTION_LABEL);
        let stream = watcher(api, config).backoff(crate::runtime::cache::watch_backoff());
        let stop = self.stop.clone();
        let kind = format!("{}/{}", resource.api_version, resource.kind);
        let mut writer = writer;
        let seen = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let seen_by_task = seen.clone();
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            let mut failing = false;
            loop {
                let ev = tokio::select! {
                    _ = stop.cancelled() => break,
                    ev = stream.next() => ev,
                };
                match ev {
                    Some(Ok(ev)) => {
                        failing = false;
                        writer.apply_watcher_event(&ev);
                        match &ev {
                            watcher::Event::Apply(o)
                            | watcher::Event::Delete(o)
                            | watcher::Event::InitApply(o) => {
                                seen_by_task.fetch_max(
                                    resource_version(o),
                                    std::sync::atomic::Ordering::Relaxed,
                                );
                                if let Some(owner) = owner_of(o) {
                                    let _ = notify.send(owner);
                                }
                            }
                            watcher::Event::InitDone => {
                                let _ = ready_tx.send(true);
                            }
                            watcher::Event::Init => {}
                        }
                    }
                    Some(Err(e)) if !failing => {
                        failing = true;
                        warn!(kind = %kind, error = %e, "watching the child's objects failed; retrying");
                    }
                    Some(Err(e)) => debug!(kind = %kind, error = %e, "child watch error"),
                    None => break,
                }
            }
        });
        kinds.insert(
            key,
            Arc::new(KindWatch {
                store,
                seen,
                ready,
                scope: caps.scope.clone(),
                resource: resource.clone(),
            }),
        );
    }

    /// The live object as the watch last saw it.
    pub fn live(&self, api_version: &str, kind: &str, namespace: &str, name: &str) -> Live {
        let w = {
            let kinds = self.kinds.lock().unwrap_or_else(|p| p.into_inner());
            match kinds.get(&(api_version.to_string(), kind.to_string())) {
                Some(w) => w.clone(),
                None => return Live::Unknown,
            }
        };
        if !*w.ready.borrow() {
            return Live::Unknown;
        }
        let mut r = reflector::ObjectRef::<DynamicObject>::new_with(name, w.resource.clone());
        if matches!(w.scope, Scope::Namespaced) {
            r = r.within(if namespace.is_empty() {
                "default"
            } else {
                namespace
            });
        }
        match w.store.get(&r) {
            Some(o) => Live::Present(o),
            None => Live::Absent,
        }
    }

    /// The objects the watches hold whose owner annotation names `owner` (`<namespace>.<name>`):
    /// what the child says a Description applied, of the kinds watched so far.
    pub fn owned_by(&self, owner: &str) -> Vec<crate::kube_ext::object_ref::ObjectRef> {
        let kinds: Vec<Arc<KindWatch>> = {
            let kinds = self.kinds.lock().unwrap_or_else(|p| p.into_inner());
            kinds.values().cloned().collect()
        };
        let mut out = Vec::new();
        for w in kinds {
            for o in w.store.state() {
                let ours = o
                    .annotations()
                    .get(known::OBJECT_OWNED_BY_DESCRIPTION_ANNOTATION)
                    .is_some_and(|a| a == owner);
                if ours {
                    out.push(crate::kube_ext::object_ref::ObjectRef {
                        api_version: w.resource.api_version.clone(),
                        kind: w.resource.kind.clone(),
                        namespace: o.namespace().unwrap_or_default(),
                        name: o.name_any(),
                    });
                }
            }
        }
        out
    }

    /// Whether the watch of `kind` has delivered resourceVersion `rv` or later (so its view
    /// includes a write answered with `rv`: an absent object was really deleted).
    pub fn caught_up(&self, api_version: &str, kind: &str, rv: u64) -> bool {
        let kinds = self.kinds.lock().unwrap_or_else(|p| p.into_inner());
        kinds
            .get(&(api_version.to_string(), kind.to_string()))
            .is_some_and(|w| w.seen.load(std::sync::atomic::Ordering::Relaxed) >= rv)
    }
}

/// An object's resourceVersion as the number etcd gives it (0 when it is not one).
pub fn resource_version(o: &DynamicObject) -> u64 {
    o.metadata
        .resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// The owner label's value: the annotation's when it is a valid label value, else a digest.
pub fn owner_label_value(owner: &str) -> String {
    let valid = owner.len() <= 63
        && owner
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && owner
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphanumeric())
        && owner
            .bytes()
            .last()
            .is_some_and(|b| b.is_ascii_alphanumeric());
    if valid {
        return owner.to_string();
    }
    let digest = ring::digest::digest(&ring::digest::SHA256, owner.as_bytes());
    let hex: String = digest.as_ref()[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("sha256-{hex}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_owners_get_a_digest_label_and_owners_split_at_the_first_dot() {
        assert_eq!(
            owner_label_value("clusternet-a.app-x-generic"),
            "clusternet-a.app-x-generic"
        );
        let long = format!("clusternet-a.{}", "x".repeat(80));
        let v = owner_label_value(&long);
        assert!(v.len() <= 63 && v.starts_with("sha256-"), "{v}");
        let mut o = DynamicObject::new(
            "c",
            &ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&()),
        );
        o.annotations_mut().insert(
            known::OBJECT_OWNED_BY_DESCRIPTION_ANNOTATION.into(),
            "clusternet-a.app.v2-generic".into(),
        );
        assert_eq!(
            owner_of(&o),
            Some(("clusternet-a".into(), "app.v2-generic".into()))
        );
    }
}
