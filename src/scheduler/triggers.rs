//! What queues a Subscription for scheduling (docs/spec/scheduler.md §3): a new Subscription or
//! a new spec (never a status write), its FeedInventory, and a ManagedCluster change that
//! scheduling looks at (labels, taints, readiness under FailOver), which queues every
//! Subscription whose affinity matched the cluster before or after. Everything already there
//! when the scheduler starts is queued in the backlog lane.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Taint;
use kube::ResourceExt;
use tokio_util::sync::CancellationToken;

use super::framework::cluster_key;
use super::queue::SchedulingQueue;
use crate::apis::{FeedInventory, ManagedCluster, Subscription};
use crate::kube_ext::labels;
use crate::runtime::cache::Shared;

/// What the scheduler reads, from the shared cache.
pub(crate) struct Caches {
    pub subs: Shared<Subscription>,
    pub clusters: Shared<ManagedCluster>,
    pub inventories: Shared<FeedInventory>,
}

pub(crate) fn sub_key(sub: &Subscription) -> String {
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

/// Enqueues what changes (§3): new Subscriptions and new specs, FeedInventories, and
/// ManagedCluster changes as [`cluster_trigger`] decides, until `stop`.
pub(crate) fn spawn(
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
