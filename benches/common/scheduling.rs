//! What the scheduling benches share (`scheduler_e2e.rs`, `peer.rs`): fake Ready ManagedClusters,
//! a burst of Subscriptions timed from each acknowledged creation to the watch event that shows it
//! bound, and the clean-up between runs. Any scheduler that writes `status.bindingClusters`
//! (ours, the Go original, a bare client) is measured the same way.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use clusternet::apis::{FeedInventory, ManagedCluster, Subscription};
use futures::StreamExt;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;

use crate::support::percentile;

/// How a burst went: Subscriptions bound to every cluster, per second of the whole burst, and
/// creation -> binding latencies (ascending); and what bounds the rate from outside the scheduler:
/// how long the API server took to acknowledge the burst's creations, and how long after the last
/// acknowledgement the last binding was seen (the scheduler's own tail).
pub struct Figures {
    pub bound: usize,
    pub per_second: f64,
    pub latencies: Vec<Duration>,
    pub created_in: Duration,
    pub after_last_create: Duration,
}

impl Figures {
    pub fn row(&self, workload: &str, binder: &str, n: usize) -> String {
        format!(
            "| {workload} | {binder} | {}/{n} | {:.0} | {:.3} s | {:.3} s | {:.3} s |",
            self.bound,
            self.per_second,
            self.p(0.5).as_secs_f64(),
            self.p(0.9).as_secs_f64(),
            self.p(0.99).as_secs_f64()
        )
    }

    pub fn p(&self, q: f64) -> Duration {
        percentile(&self.latencies, q)
    }
}

/// Creates `count` Ready ManagedClusters in `ns`, labelled `schedbench=<id>`, with a fresh
/// heartbeat; their keys (`ns/name`) as a binding lists them.
pub async fn ready_clusters(
    mcs: &Api<ManagedCluster>,
    ns: &str,
    id: &str,
    count: usize,
) -> Vec<String> {
    let mut keys = Vec::new();
    for i in 0..count {
        let name = format!("c{i:04}");
        let mc: ManagedCluster = serde_json::from_value(json!({
            "apiVersion": "clusters.clusternet.io/v1beta1", "kind": "ManagedCluster",
            "metadata": {"name": name, "labels": {"schedbench": id}},
            "spec": {"clusterId": format!("00000000-0000-4000-8000-{i:012}"), "syncMode": "Pull"}}))
        .expect("a ManagedCluster");
        let created = mcs
            .create(&PostParams::default(), &mc)
            .await
            .expect("creating a ManagedCluster");
        let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        let mut ready = created.clone();
        ready.status = Some(
            serde_json::from_value(
                json!({"lastObservedTime": now, "healthz": true, "livez": true, "readyz": true,
                "conditions": [{"type": "Ready", "status": "True", "reason": "ManagedClusterReady",
                "message": "", "lastTransitionTime": now}]}),
            )
            .expect("status"),
        );
        mcs.replace_status(&name, &PostParams::default(), &ready)
            .await
            .expect("status");
        keys.push(format!("{ns}/{name}"));
    }
    keys
}

/// The shape of the Subscriptions a burst creates.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    Replication,
    /// Static dividing of `replicas` over the clusters, weight 1 each (a FeedInventory per
    /// Subscription is created before the burst, as the controller would).
    StaticDividing {
        replicas: i32,
    },
}

fn subscription(name: &str, id: &str, strategy: Strategy) -> Subscription {
    let feed = match strategy {
        Strategy::Replication => {
            json!({"apiVersion": "v1", "kind": "ConfigMap", "namespace": "x", "name": "y"})
        }
        Strategy::StaticDividing { .. } => {
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "x", "name": "y"})
        }
    };
    let affinity = json!({"clusterAffinity": {"matchLabels": {"schedbench": id}}});
    let spec = match strategy {
        Strategy::Replication => json!({"subscribers": [affinity], "feeds": [feed]}),
        Strategy::StaticDividing { .. } => {
            let mut subscriber = affinity;
            subscriber["weight"] = json!(1);
            json!({"schedulingStrategy": "Dividing", "dividingScheduling": {"type": "Static"},
                "subscribers": [subscriber], "feeds": [feed]})
        }
    };
    serde_json::from_value(
        json!({"apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Subscription",
        "metadata": {"name": name}, "spec": spec}),
    )
    .expect("a Subscription")
}

/// The FeedInventories a Static-dividing burst needs (what the controller's inventory would write).
pub async fn inventories(finvs: &Api<FeedInventory>, n: usize, replicas: i32) {
    let create = |i: usize| {
        let finvs = finvs.clone();
        async move {
            let finv: FeedInventory = serde_json::from_value(json!({
                "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "FeedInventory",
                "metadata": {"name": format!("s{i:05}")},
                "spec": {"feeds": [{"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "x", "name": "y",
                    "desiredReplicas": replicas, "replicaJsonPath": "/spec/replicas"}]}}))
            .expect("a FeedInventory");
            finvs
                .create(&PostParams::default(), &finv)
                .await
                .expect("creating a FeedInventory");
        }
    };
    futures::stream::iter(0..n)
        .map(create)
        .buffer_unordered(32)
        .collect::<Vec<_>>()
        .await;
}

/// Creates `n` Subscriptions selecting the clusters labelled `id`, 32 requests at once, and
/// waits for nothing: a backlog for a scheduler that is not running yet.
pub async fn create_all(subs: &Api<Subscription>, id: &str, n: usize, strategy: Strategy) {
    futures::stream::iter(0..n)
        .map(|i| {
            let subs = subs.clone();
            let sub = subscription(&format!("s{i:05}"), id, strategy);
            async move {
                subs.create(&PostParams::default(), &sub)
                    .await
                    .expect("creating a Subscription");
            }
        })
        .buffer_unordered(32)
        .collect::<Vec<_>>()
        .await;
}

/// How a scheduler drained a backlog of `n` Subscriptions: bound within `limit`, bindings per
/// second from the first binding to the last (the start-up before the first is not counted), and
/// the time from the scheduler's start to the last binding.
pub struct Drain {
    pub bound: usize,
    pub per_second: f64,
    pub to_last: Duration,
    pub to_first: Duration,
}

/// Watches `subs` and sends the name of each Subscription, with when it was seen, whenever it
/// shows up bound to all `clusters`; abort the handle to stop.
fn watch_bound(
    subs: &Api<Subscription>,
    clusters: usize,
) -> (
    tokio::task::JoinHandle<()>,
    tokio::sync::mpsc::UnboundedReceiver<(String, Instant)>,
) {
    let (seen_tx, seen_rx) = tokio::sync::mpsc::unbounded_channel::<(String, Instant)>();
    let watched = subs.clone();
    let watch = tokio::spawn(async move {
        let mut stream = watcher(watched, watcher::Config::default())
            .touched_objects()
            .boxed();
        while let Some(Ok(s)) = stream.next().await {
            if s.status.map(|st| st.binding_clusters.len()).unwrap_or(0) == clusters {
                let _ = seen_tx.send((s.metadata.name.unwrap_or_default(), Instant::now()));
            }
        }
    });
    (watch, seen_rx)
}

/// Watches the backlog in `subs` (all bound to `clusters` clusters counts), runs `start` (which
/// starts the scheduler and hands back its handle), and times the drain.
pub async fn drain<T>(
    subs: &Api<Subscription>,
    n: usize,
    clusters: usize,
    limit: Duration,
    start: impl FnOnce() -> T,
) -> (Drain, T) {
    let (watch, mut seen_rx) = watch_bound(subs, clusters);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let started = Instant::now();
    let handle = start();
    let mut bound: BTreeMap<String, Instant> = BTreeMap::new();
    let deadline = tokio::time::Instant::now() + limit;
    while bound.len() < n {
        let Ok(Some((name, at))) = tokio::time::timeout_at(deadline, seen_rx.recv()).await else {
            break;
        };
        bound.entry(name).or_insert(at);
    }
    watch.abort();
    let first = bound.values().min().copied().unwrap_or(started);
    let last = bound.values().max().copied().unwrap_or(started);
    let span = last.saturating_duration_since(first).as_secs_f64();
    let drained = Drain {
        bound: bound.len(),
        per_second: if span > 0.0 {
            (bound.len().saturating_sub(1)) as f64 / span
        } else {
            0.0
        },
        to_last: last.saturating_duration_since(started),
        to_first: first.saturating_duration_since(started),
    };
    (drained, handle)
}

/// Creates `n` Subscriptions selecting the clusters labelled `id` (all at once by 32 concurrent
/// requests, or one every `pace`) and times each from its acknowledged creation to the watch
/// event that shows it bound to all `clusters`. Gives up on the stragglers after `limit`.
pub async fn burst(
    subs: &Api<Subscription>,
    id: &str,
    n: usize,
    clusters: usize,
    strategy: Strategy,
    pace: Option<Duration>,
    limit: Duration,
) -> Figures {
    let (watch, mut seen_rx) = watch_bound(subs, clusters);
    // let the watch start before the burst
    tokio::time::sleep(Duration::from_millis(500)).await;
    let start = Instant::now();
    let create = |i: usize| {
        let subs = subs.clone();
        let id = id.to_string();
        async move {
            let name = format!("s{i:05}");
            subs.create(&PostParams::default(), &subscription(&name, &id, strategy))
                .await
                .expect("creating a Subscription");
            // creation is acknowledged: from here the Subscription is the binder's
            (name, Instant::now())
        }
    };
    let created: BTreeMap<String, Instant> = match pace {
        None => {
            futures::stream::iter(0..n)
                .map(create)
                .buffer_unordered(32)
                .collect()
                .await
        }
        // one every `every`, whether or not the last was acknowledged
        Some(every) => {
            let mut tick = tokio::time::interval(every);
            let mut pending = Vec::new();
            for i in 0..n {
                tick.tick().await;
                pending.push(tokio::spawn(create(i)));
            }
            futures::future::join_all(pending)
                .await
                .into_iter()
                .filter_map(Result::ok)
                .collect()
        }
    };
    let created_in = start.elapsed();
    let last_created = created.values().max().copied().unwrap_or(start);
    let mut last_bound = last_created;
    let mut bound: BTreeMap<String, Duration> = BTreeMap::new();
    let deadline = tokio::time::Instant::now() + limit;
    while bound.len() < n {
        let Ok(Some((name, at))) = tokio::time::timeout_at(deadline, seen_rx.recv()).await else {
            break;
        };
        if let Some(t) = created.get(&name) {
            last_bound = last_bound.max(at);
            bound
                .entry(name)
                .or_insert_with(|| at.saturating_duration_since(*t));
        }
    }
    let total = start.elapsed();
    watch.abort();
    let mut latencies: Vec<Duration> = bound.values().copied().collect();
    latencies.sort();
    Figures {
        bound: bound.len(),
        per_second: bound.len() as f64 / total.as_secs_f64(),
        latencies,
        created_in,
        after_last_create: last_bound.saturating_duration_since(last_created),
    }
}

/// Deletes every object of `api` and waits until the list is empty (at most 30 s).
pub async fn delete_all<K>(api: &Api<K>)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let _ = api
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await;
    for _ in 0..300 {
        match api.list(&ListParams::default()).await {
            Ok(l) if l.items.is_empty() => return,
            _ => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}
