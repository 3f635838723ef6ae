//! Scale tiers (issue #13 item 2-3), clusternet-rs alone on this machine, every parent role in
//! one process (`--role=hub,scheduler,controller`) against the real parent API server:
//!
//! - **Tiers**: `SCALE_TIERS` (10,100,1000) fake Ready ManagedClusters, each in a dedicated
//!   namespace of its own with a heartbeat the harness keeps fresh (every 60 s, as an agent
//!   would), and `SCALE_SUBSCRIPTIONS` (1,000) Replication Subscriptions created at once (32
//!   requests in flight), each selecting a group of about 3 clusters, all with one ConfigMap feed.
//!   Per tier: create -> binding and create -> a Description in every bound cluster (p50/p99),
//!   Subscriptions per second through the whole pipeline, the scheduler's own decision time (p99
//!   from its histogram), the API writes per Subscription per bound cluster (object
//!   amplification) and per idle minute, and the process's memory idle, with the Subscriptions in
//!   place, and after a restart with them in place.
//! - **Cold start**: `SCALE_COLD` (10,000) Subscriptions bound over the largest tier's clusters
//!   (one cluster each); the process is killed and started again: the time until every queue is
//!   drained, and how long a user's new Subscription, created as soon as the restarted process is
//!   ready, takes to its Description meanwhile (the backlog must not hold it up).
//! - **The ceiling**: a bare client creating small ConfigMaps as fast as the server takes them
//!   (64 in flight); the pipeline's writes per second during a tier's drain as a fraction of it.
//!
//! The fake clusters have no agents: nothing applies their Descriptions, and the harness takes the
//! Descriptions' finalizers off when they are deleted, as an agent would. Run with `just bench`
//! (or `cargo bench --bench scale`); `SCALE_COLD=0` skips the cold start, `SCALE_TIERS=none` the
//! tiers, and `SCALE_COLD_CLUSTERS` (the largest tier's) sets the cold start's clusters.

#[path = "../tests/support/mod.rs"]
mod support;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clusternet::apis::{Description, ManagedCluster, Manifest, Subscription, known};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;
use support::{Clusternet, ProcUsage, TestEnv, TestNamespace, percentile, uid};

/// Clusters each Subscription of a tier selects (a group of about this many).
const GROUP: usize = 3;
/// How often the harness renews the fake clusters' heartbeats (their `heartbeatFrequencySeconds`).
const HEARTBEAT: Duration = Duration::from_secs(60);
/// Requests the harness keeps in flight when it creates or deletes in bulk.
const IN_FLIGHT: usize = 32;

/// The fake fleet: clusters in dedicated namespaces, labelled by group.
struct Fleet {
    id: String,
    namespaces: Vec<String>,
    /// Heartbeats the harness wrote, so they are not counted as clusternet's writes.
    heartbeats: Arc<AtomicU64>,
    beating: tokio::task::JoinHandle<()>,
}

fn cluster_namespace(id: &str, i: usize) -> String {
    format!("scale-{id}-c{i:04}")
}

/// The first heartbeat: Ready, healthy, with its cadence.
fn heartbeat_status() -> serde_json::Value {
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    json!({"status": {"lastObservedTime": now, "healthz": true, "livez": true, "readyz": true,
        "heartbeatFrequencySeconds": HEARTBEAT.as_secs(),
        "conditions": [{"type": "Ready", "status": "True", "reason": "ManagedClusterReady",
        "message": "", "lastTransitionTime": now}]}})
}

/// A later heartbeat: the time only, as an agent's status write leaves the conditions the
/// parent added (ClusterInit) alone.
fn heartbeat() -> serde_json::Value {
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    json!({"status": {"lastObservedTime": now}})
}

/// Runs `f` over `items`, [`IN_FLIGHT`] at once.
async fn each<T, F, Fut>(items: impl IntoIterator<Item = T>, f: F)
where
    F: Fn(T) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    futures::stream::iter(items)
        .map(f)
        .buffer_unordered(IN_FLIGHT)
        .collect::<Vec<_>>()
        .await;
}

impl Fleet {
    async fn create(parent: &kube::Client, n: usize) -> Fleet {
        let id = uid();
        let groups = (n / GROUP).max(1);
        let namespaces: Vec<String> = (0..n).map(|i| cluster_namespace(&id, i)).collect();
        each(0..n, |i| {
            let (parent, id) = (parent.clone(), id.clone());
            async move {
                let ns = cluster_namespace(&id, i);
                let namespace: Namespace =
                    serde_json::from_value(json!({"metadata": {"name": ns, "labels": {"scale": id}}}))
                        .expect("a Namespace");
                Api::<Namespace>::all(parent.clone())
                    .create(&PostParams::default(), &namespace)
                    .await
                    .expect("creating a cluster namespace");
                let mc: ManagedCluster = serde_json::from_value(json!({
                    "apiVersion": "clusters.clusternet.io/v1beta1", "kind": "ManagedCluster",
                    "metadata": {"name": format!("c{i:04}"), "labels": {"scale": id,
                        "scale-group": format!("g{}", i % groups), "scale-one": format!("c{i:04}")}},
                    "spec": {"clusterId": format!("00000000-0000-4000-8000-{i:012}"), "syncMode": "Pull"}}))
                .expect("a ManagedCluster");
                let mcs: Api<ManagedCluster> = Api::namespaced(parent.clone(), &ns);
                mcs.create(&PostParams::default(), &mc)
                    .await
                    .expect("creating a ManagedCluster");
                mcs.patch_status(
                    &format!("c{i:04}"),
                    &PatchParams::default(),
                    &Patch::Merge(heartbeat_status()),
                )
                .await
                .expect("its first heartbeat");
            }
        })
        .await;
        let heartbeats = Arc::new(AtomicU64::new(0));
        let beating = {
            let (parent, namespaces, heartbeats) =
                (parent.clone(), namespaces.clone(), heartbeats.clone());
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(HEARTBEAT).await;
                    each(namespaces.clone().into_iter().enumerate(), |(i, ns)| {
                        let mcs: Api<ManagedCluster> = Api::namespaced(parent.clone(), &ns);
                        let heartbeats = heartbeats.clone();
                        async move {
                            let _ = mcs
                                .patch_status(
                                    &format!("c{i:04}"),
                                    &PatchParams::default(),
                                    &Patch::Merge(heartbeat()),
                                )
                                .await;
                            heartbeats.fetch_add(1, Ordering::Relaxed);
                        }
                    })
                    .await;
                }
            })
        };
        Fleet {
            id,
            namespaces,
            heartbeats,
            beating,
        }
    }

    fn groups(&self) -> usize {
        (self.namespaces.len() / GROUP).max(1)
    }

    /// Deletes the fleet's namespaces (its ManagedClusters with them).
    async fn delete(self, parent: &kube::Client) {
        self.beating.abort();
        each(self.namespaces, |ns| {
            let parent = parent.clone();
            async move {
                let _ = Api::<Namespace>::all(parent)
                    .delete(&ns, &DeleteParams::background())
                    .await;
            }
        })
        .await;
    }
}

/// Client limits of the process under test.
#[derive(Clone, Copy, PartialEq)]
enum Limits {
    /// What users run: `--kube-api-qps=100 --kube-api-burst=200`.
    Default,
    /// Out of the way (10,000 qps), so the API server is the only limit.
    Lifted,
}

/// All parent roles in one process, without leader election; its RUST_LOG at info (or
/// `SCALE_LOG`, e.g. `info,clusternet::scheduler=debug`).
fn start_parent(limits: Limits) -> Clusternet {
    let env = TestEnv::get();
    let kubeconfig = format!("--kubeconfig={}", env.parent_kubeconfig().display());
    let port = format!("--secure-port={}", support::free_port());
    let mut args = vec![
        "--role=hub,scheduler,controller",
        &kubeconfig,
        "--leader-elect=false",
        "--bind-address=127.0.0.1",
        &port,
    ];
    if limits == Limits::Lifted {
        args.extend(["--kube-api-qps=10000", "--kube-api-burst=20000"]);
    }
    let log = std::env::var("SCALE_LOG").unwrap_or_else(|_| "info".into());
    Clusternet::start_with_env("scale-parent", &args, &[("RUST_LOG", &log)])
}

/// Waits until the process says it is ready (every cache listed once).
async fn ready(p: &Clusternet, limit: Duration) -> Duration {
    let start = Instant::now();
    loop {
        if matches!(p.get("/readyz").await, Ok((200, _))) {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < limit,
            "clusternet not ready within {limit:?}; log {}",
            p.log.display()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The sum of every series of metric `name` (all labels) in a Prometheus text body.
fn metric_sum(body: &str, name: &str) -> f64 {
    body.lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|r| r.starts_with('{') || r.starts_with(' '))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The upper bound of the histogram bucket holding quantile `q` of `name` (series whose labels
/// contain `filter`), from the cumulative `_bucket` lines.
fn histogram_quantile(body: &str, name: &str, filter: &str, q: f64) -> Option<f64> {
    let prefix = format!("{name}_bucket{{");
    let mut buckets: BTreeMap<u64, f64> = BTreeMap::new();
    for line in body
        .lines()
        .filter(|l| l.starts_with(&prefix) && l.contains(filter))
    {
        let le = line.split("le=\"").nth(1)?.split('"').next()?;
        let le: f64 = if le == "+Inf" {
            f64::MAX
        } else {
            le.parse().ok()?
        };
        let count: f64 = line.rsplit(' ').next()?.parse().ok()?;
        *buckets.entry(le.to_bits()).or_default() += count;
    }
    let mut sorted: Vec<(f64, f64)> = buckets
        .into_iter()
        .map(|(b, c)| (f64::from_bits(b), c))
        .collect();
    sorted.sort_by(|a, b| a.0.total_cmp(&b.0));
    let total = sorted.last()?.1;
    sorted
        .into_iter()
        .find(|(_, c)| *c >= q * total)
        .map(|(le, _)| le)
}

/// Reconciles and scheduling attempts so far, over every controller of the process.
async fn work_done(p: &Clusternet) -> f64 {
    let Ok((_, body)) = p.get("/metrics").await else {
        return 0.0;
    };
    metric_sum(&body, "controller_runtime_reconcile_total")
        + metric_sum(&body, "clusternet_scheduler_schedule_attempts_total")
}

/// Waits until the process is drained: its start-up backlog lanes empty, no Event waiting to be
/// written, and no reconcile or scheduling attempt for `quiet`; or, with thousands of objects
/// whose periodic rechecks (every 5 minutes each) never leave `quiet` seconds without one, the
/// lanes empty for [`SETTLED`]. How long after `since` that came; `None` when still busy `limit`
/// after the call (printed, not a panic: the figure is then "not within").
async fn drained(
    p: &Clusternet,
    since: Instant,
    quiet: Duration,
    limit: Duration,
) -> Option<Duration> {
    let waiting = Instant::now();
    let mut last = (work_done(p).await, Instant::now());
    let mut empty_since: Option<Instant> = None;
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = work_done(p).await;
        let backlog = match p.get("/metrics").await {
            Ok((_, body)) => {
                metric_sum(&body, "clusternet_controller_backlog_objects")
                    + metric_sum(&body, "clusternet_events_pending")
            }
            Err(_) => 0.0,
        };
        if backlog > 0.0 {
            empty_since = None;
        } else if empty_since.is_none() {
            empty_since = Some(Instant::now());
        }
        if now != last.0 || backlog > 0.0 {
            last = (now, Instant::now());
        } else if last.1.elapsed() >= quiet {
            return Some(last.1.saturating_duration_since(since));
        }
        if let Some(e) = empty_since.filter(|e| e.elapsed() >= SETTLED) {
            return Some(e.saturating_duration_since(since));
        }
        if waiting.elapsed() >= limit {
            eprintln!("scale: still busy {limit:?} later; log {}", p.log.display());
            return None;
        }
    }
}

/// How long the backlog lanes stay empty to count as drained while periodic rechecks go on.
const SETTLED: Duration = Duration::from_secs(30);

/// A drain time, or that it did not come within the bench's limit.
fn took(d: Option<Duration>) -> String {
    d.map_or("not within the limit".to_string(), |d| {
        format!("{:.1} s", d.as_secs_f64())
    })
}

/// The Manifest every Subscription of the bench deploys (one small ConfigMap).
async fn feed(parent: &kube::Client, appns: &str) {
    support::ensure_namespace(parent, "clusternet-reserved").await;
    let manifest: Manifest = serde_json::from_value(json!({
        "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Manifest",
        "metadata": {"name": format!("configmaps.{appns}.app"), "namespace": "clusternet-reserved", "labels": {
            "apps.clusternet.io/config.group": "", "apps.clusternet.io/config.version": "v1",
            "apps.clusternet.io/config.kind": "ConfigMap", "apps.clusternet.io/config.name": "app",
            "apps.clusternet.io/config.namespace": appns}},
        "template": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "app", "namespace": appns}, "data": {"v": "1"}}
    }))
    .expect("a Manifest");
    let _ = Api::<Manifest>::namespaced(parent.clone(), "clusternet-reserved")
        .create(&PostParams::default(), &manifest)
        .await;
}

fn subscription(name: &str, appns: &str, fleet: &str, label: &str, value: &str) -> Subscription {
    serde_json::from_value(json!({
        "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Subscription",
        "metadata": {"name": name},
        "spec": {"subscribers": [{"clusterAffinity": {"matchLabels": {"scale": fleet, label: value}}}],
            "feeds": [{"apiVersion": "v1", "kind": "ConfigMap", "namespace": appns, "name": "app"}]}}))
    .expect("a Subscription")
}

/// Follows the pipeline for the Subscriptions of namespace `ns`: when each is bound and when each
/// has a Description in every bound cluster.
struct Progress {
    bound: HashMap<String, (usize, Instant)>,
    described: HashMap<String, Instant>,
}

/// Watches `ns`'s Subscriptions and their Descriptions until dropped; a shared view of progress.
fn follow(
    parent: &kube::Client,
    ns: &str,
) -> (Arc<std::sync::Mutex<Progress>>, tokio::task::JoinHandle<()>) {
    let progress = Arc::new(std::sync::Mutex::new(Progress {
        bound: HashMap::new(),
        described: HashMap::new(),
    }));
    let subs: Api<Subscription> = Api::namespaced(parent.clone(), ns);
    let descs: Api<Description> = Api::all(parent.clone());
    let selector = format!("{}={ns}", known::CONFIG_SUBSCRIPTION_NAMESPACE_LABEL);
    let p = progress.clone();
    let task = tokio::spawn(async move {
        let subs = watcher(subs, watcher::Config::default())
            .touched_objects()
            .boxed();
        let descs = watcher(descs, watcher::Config::default().labels(&selector))
            .touched_objects()
            .boxed();
        let mut per_sub: HashMap<String, std::collections::HashSet<String>> = HashMap::new();
        enum Seen {
            Sub(Box<Subscription>),
            Desc(Box<Description>),
        }
        let mut both = futures::stream::select(
            subs.map(|s| s.map(|s| Seen::Sub(Box::new(s)))),
            descs.map(|d| d.map(|d| Seen::Desc(Box::new(d)))),
        );
        while let Some(ev) = both.next().await {
            let now = Instant::now();
            let mut p = p.lock().unwrap_or_else(|e| e.into_inner());
            match ev {
                Ok(Seen::Sub(s)) => {
                    let n = s.status.map_or(0, |st| st.binding_clusters.len());
                    let name = s.metadata.name.unwrap_or_default();
                    if n > 0 {
                        p.bound.entry(name.clone()).or_insert((n, now));
                    }
                    // its Descriptions may have been seen before its binding was
                    if n > 0 && per_sub.get(&name).is_some_and(|set| set.len() >= n) {
                        p.described.entry(name).or_insert(now);
                    }
                }
                Ok(Seen::Desc(d)) => {
                    if d.metadata.deletion_timestamp.is_some() {
                        continue;
                    }
                    let labels = d.metadata.labels.unwrap_or_default();
                    let Some(sub) = labels.get(known::CONFIG_SUBSCRIPTION_NAME_LABEL) else {
                        continue;
                    };
                    let set = per_sub.entry(sub.clone()).or_default();
                    set.insert(d.metadata.namespace.unwrap_or_default());
                    let want = p.bound.get(sub).map(|b| b.0);
                    if want.is_some_and(|w| set.len() >= w) {
                        p.described.entry(sub.clone()).or_insert(now);
                    }
                }
                Err(_) => {}
            }
        }
    });
    (progress, task)
}

/// Creates `names` as Subscriptions selecting `label=value(i)`, [`IN_FLIGHT`] at once; when each
/// was acknowledged.
async fn create_subscriptions(
    subs: &Api<Subscription>,
    appns: &str,
    fleet: &Fleet,
    names: Vec<String>,
    label: &str,
    value: impl Fn(usize) -> String,
) -> HashMap<String, Instant> {
    futures::stream::iter(names.into_iter().enumerate())
        .map(|(i, name)| {
            let sub = subscription(&name, appns, &fleet.id, label, &value(i));
            let subs = subs.clone();
            async move {
                subs.create(&PostParams::default(), &sub)
                    .await
                    .expect("creating a Subscription");
                (name, Instant::now())
            }
        })
        .buffer_unordered(IN_FLIGHT)
        .collect()
        .await
}

/// Waits until every one of `created` has its Descriptions (or `limit` passes).
async fn wait_described(
    progress: &std::sync::Mutex<Progress>,
    created: &HashMap<String, Instant>,
    limit: Duration,
) {
    let start = Instant::now();
    loop {
        let done = {
            let p = progress.lock().unwrap_or_else(|e| e.into_inner());
            created.keys().all(|k| p.described.contains_key(k))
        };
        if done || start.elapsed() > limit {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Latencies from each acknowledged creation to what `pick` says happened, ascending.
fn latencies(
    created: &HashMap<String, Instant>,
    at: impl Fn(&str) -> Option<Instant>,
) -> Vec<Duration> {
    let mut v: Vec<Duration> = created
        .iter()
        .filter_map(|(k, t)| Some(at(k)?.saturating_duration_since(*t)))
        .collect();
    v.sort();
    v
}

/// Waits (up to `limit`) for the one Subscription of `created` to reach its Descriptions; how long
/// that took from its creation, `None` if it did not.
async fn described_in(
    progress: &std::sync::Mutex<Progress>,
    created: &HashMap<String, Instant>,
    limit: Duration,
) -> Option<Duration> {
    wait_described(progress, created, limit).await;
    let p = progress.lock().unwrap_or_else(|e| e.into_inner());
    latencies(created, |k| p.described.get(k).copied())
        .first()
        .copied()
}

/// Deletes the Subscriptions of `subs`, plays the agents (takes the finalizer off every deleting
/// Description of the bench's Subscriptions) and waits until no Base or Description of them is
/// left.
async fn clean_up(parent: &kube::Client, subs: &Api<Subscription>, ns: &str) {
    let selector = format!("{}={ns}", known::CONFIG_SUBSCRIPTION_NAMESPACE_LABEL);
    let descs: Api<Description> = Api::all(parent.clone());
    let bases: Api<clusternet::apis::Base> = Api::all(parent.clone());
    let start = Instant::now();
    loop {
        // one by one: a deletecollection of thousands can end before it reached them all
        let undeleted: Vec<String> = subs
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default()
            .into_iter()
            .filter(|s| s.metadata.deletion_timestamp.is_none())
            .filter_map(|s| s.metadata.name)
            .collect();
        each(undeleted, |name| {
            let subs = subs.clone();
            async move {
                let _ = subs.delete(&name, &DeleteParams::default()).await;
            }
        })
        .await;
        let left = descs
            .list(&ListParams::default().labels(&selector))
            .await
            .map(|l| l.items)
            .unwrap_or_default();
        let bases_left = bases
            .list(&ListParams::default().labels(&selector).limit(1))
            .await
            .map(|l| l.items.len())
            .unwrap_or(0);
        if left.is_empty()
            && bases_left == 0
            && subs
                .list(&ListParams::default().limit(1))
                .await
                .is_ok_and(|l| l.items.is_empty())
        {
            return;
        }
        each(
            left.into_iter()
                .filter(|d| d.metadata.deletion_timestamp.is_some()),
            |d| {
                let api: Api<Description> = Api::namespaced(
                    parent.clone(),
                    d.metadata.namespace.as_deref().unwrap_or_default(),
                );
                async move {
                    let _ = api
                        .patch(
                            d.metadata.name.as_deref().unwrap_or_default(),
                            &PatchParams::default(),
                            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
                        )
                        .await;
                }
            },
        )
        .await;
        // thousands go at the default client limits' pace (a Subscription's deletion is several
        // writes); what is measured was printed before, so a slow clean-up is said, not fatal
        if start.elapsed() > Duration::from_secs(1800) {
            eprintln!(
                "scale: the bench's Bases and Descriptions in {ns} were not gone within 30 minutes; going on"
            );
            return;
        }
        // every round lists thousands of objects: not so often that the harness loads the server
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// The writes of Clusternet's kinds and Events in the parent (apiserver_request_total) by
/// resource, the harness's own left out (Subscription creations and deletions: `subscriptions`
/// is not counted; its heartbeats: taken off `managedclusters/status`).
async fn writes(parent: &kube::Client, fleet: &Fleet) -> BTreeMap<String, f64> {
    let mut ours: BTreeMap<String, f64> = support::api_writes(parent)
        .await
        .into_iter()
        .filter(|(k, _)| {
            [
                "bases",
                "descriptions",
                "feedinventories",
                "events",
                "managedclusters",
                "subscriptions/status",
                "descriptions/status",
                "bases/status",
                "managedclusters/status",
            ]
            .contains(&k.as_str())
        })
        .collect();
    if let Some(mc) = ours.get_mut("managedclusters/status") {
        *mc -= fleet.heartbeats.load(Ordering::Relaxed) as f64;
    }
    ours
}

/// `after - before` per resource (only those that changed), and their sum.
fn delta(
    before: &BTreeMap<String, f64>,
    after: &BTreeMap<String, f64>,
) -> (BTreeMap<String, f64>, f64) {
    let d: BTreeMap<String, f64> = after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0.0)))
        .filter(|(_, v)| v.abs() > 0.0)
        .collect();
    let sum = d.values().sum();
    (d, sum)
}

/// `resource n.nn, ...`, per unit of `per`.
fn breakdown(d: &BTreeMap<String, f64>, per: f64) -> String {
    d.iter()
        .map(|(k, v)| format!("{k} {:.2}", v / per.max(1.0)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// What one tier measured.
struct Tier {
    clusters: usize,
    subscriptions: usize,
    bindings: usize,
    to_binding: Vec<Duration>,
    to_described: Vec<Duration>,
    drain: Duration,
    decision_p99: Option<f64>,
    writes_per_binding: f64,
    writes_per_second: f64,
    idle_writes: f64,
    burst_writes: BTreeMap<String, f64>,
    idle_breakdown: BTreeMap<String, f64>,
    rss_idle: f64,
    rss_loaded: ProcUsage,
    rss_restarted: f64,
    restart_drain: Option<Duration>,
}

async fn tier(env: &TestEnv, parent: &kube::Client, clusters: usize, n: usize) -> Tier {
    let fleet = Fleet::create(parent, clusters).await;
    let appns = format!("scaleapp-{}", fleet.id);
    feed(parent, &appns).await;
    let ns = TestNamespace::create(parent, &env.parent_kubeconfig(), "scale").await;
    let subs: Api<Subscription> = Api::namespaced(parent.clone(), &ns.name);
    let mut process = start_parent(Limits::Default);
    ready(&process, Duration::from_secs(60)).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss_idle = process.usage().rss_mib;
    let (progress, watching) = follow(parent, &ns.name);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = writes(parent, &fleet).await;
    let start = Instant::now();
    let groups = fleet.groups();
    let created = create_subscriptions(
        &subs,
        &appns,
        &fleet,
        (0..n).map(|i| format!("s{i:05}")).collect(),
        "scale-group",
        |i| format!("g{}", i % groups),
    )
    .await;
    wait_described(&progress, &created, Duration::from_secs(900)).await;
    let (to_binding, to_described, bindings, last) = {
        let p = progress.lock().unwrap_or_else(|e| e.into_inner());
        (
            latencies(&created, |k| p.bound.get(k).map(|b| b.1)),
            latencies(&created, |k| p.described.get(k).copied()),
            p.bound.values().map(|b| b.0).sum::<usize>(),
            p.described.values().max().copied().unwrap_or(start),
        )
    };
    let drain = last.saturating_duration_since(start);
    // settled: everything written that the burst causes (statuses, events)
    drained(
        &process,
        start,
        Duration::from_secs(3),
        Duration::from_secs(600),
    )
    .await;
    let after = writes(parent, &fleet).await;
    let (burst_writes, written) = delta(&before, &after);
    let decision_p99 = match process.get("/metrics").await {
        Ok((_, body)) => histogram_quantile(
            &body,
            "clusternet_scheduler_e2e_scheduling_duration_seconds",
            "result=\"scheduled\"",
            0.99,
        ),
        Err(_) => None,
    };
    tokio::time::sleep(Duration::from_secs(60)).await;
    let (idle_breakdown, idle_writes) = delta(&after, &writes(parent, &fleet).await);
    let rss_loaded = process.usage();
    // a restart with everything in place
    process.kill();
    let restarted_at = Instant::now();
    let process = start_parent(Limits::Default);
    ready(&process, Duration::from_secs(120)).await;
    let restart_drain = drained(
        &process,
        restarted_at,
        Duration::from_secs(3),
        Duration::from_secs(600),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let rss_restarted = process.usage().rss_mib;
    clean_up(parent, &subs, &ns.name).await;
    watching.abort();
    drop(process);
    fleet.delete(parent).await;
    Tier {
        clusters,
        subscriptions: n,
        bindings,
        to_binding,
        to_described,
        drain,
        decision_p99,
        writes_per_binding: written / bindings.max(1) as f64,
        writes_per_second: written / drain.as_secs_f64().max(1e-3),
        idle_writes,
        burst_writes,
        idle_breakdown,
        rss_idle,
        rss_loaded,
        rss_restarted,
        restart_drain,
    }
}

/// CPU seconds so far of the parent's kube-apiserver and of etcd (the environment's pid files).
fn server_cpu(env: &TestEnv) -> f64 {
    ["parent-kube-apiserver", "etcd"]
        .iter()
        .filter_map(|p| std::fs::read_to_string(env.dir.join(format!("pids/{p}.pid"))).ok())
        .filter_map(|pid| pid.trim().parse::<u32>().ok())
        .map(|pid| ProcUsage::of(pid).cpu_seconds)
        .sum()
}

/// What the cold start measured.
struct Cold {
    subscriptions: usize,
    clusters: usize,
    fill: Duration,
    fill_writes: f64,
    /// CPU seconds of (kube-apiserver and etcd, clusternet) while filling.
    fill_cpu: (f64, f64),
    ready: Duration,
    drain: Option<Duration>,
    user_latency: Option<Duration>,
    quiet_latency: Option<Duration>,
    rss_before: f64,
    rss_after: f64,
}

async fn cold_start(
    env: &TestEnv,
    parent: &kube::Client,
    clusters: usize,
    n: usize,
    ceilings: (f64, f64),
) {
    let fleet = Fleet::create(parent, clusters).await;
    let appns = format!("scaleapp-{}", fleet.id);
    feed(parent, &appns).await;
    let ns = TestNamespace::create(parent, &env.parent_kubeconfig(), "scalecold").await;
    let subs: Api<Subscription> = Api::namespaced(parent.clone(), &ns.name);
    let (progress, watching) = follow(parent, &ns.name);
    // filled with the client limits out of the way: its writes per second against the ceiling
    let mut process = start_parent(Limits::Lifted);
    ready(&process, Duration::from_secs(60)).await;
    let before = writes(parent, &fleet).await;
    let (server_before, ours_before) = (server_cpu(env), process.usage().cpu_seconds);
    let start = Instant::now();
    let created = create_subscriptions(
        &subs,
        &appns,
        &fleet,
        (0..n).map(|i| format!("s{i:05}")).collect(),
        "scale-one",
        |i| format!("c{:04}", i % clusters),
    )
    .await;
    wait_described(&progress, &created, Duration::from_secs(1800)).await;
    let fill = start.elapsed();
    let (_, fill_writes) = delta(&before, &writes(parent, &fleet).await);
    let fill_cpu = (
        server_cpu(env) - server_before,
        process.usage().cpu_seconds - ours_before,
    );
    drained(
        &process,
        start,
        Duration::from_secs(3),
        Duration::from_secs(900),
    )
    .await;
    // how long a user's Subscription takes when nothing else is going on
    let quiet = create_subscriptions(
        &subs,
        &appns,
        &fleet,
        vec!["quiet".into()],
        "scale-one",
        |_| "c0000".into(),
    )
    .await;
    let quiet_latency = described_in(&progress, &quiet, Duration::from_secs(60)).await;
    let rss_before = process.usage().rss_mib;
    process.kill();
    // started again as users run it
    let restarted_at = Instant::now();
    let process = start_parent(Limits::Default);
    let ready_after = ready(&process, Duration::from_secs(300)).await;
    // a user's new Subscription while the restarted process works through its backlog
    let user = create_subscriptions(
        &subs,
        &appns,
        &fleet,
        vec!["user".into()],
        "scale-one",
        |_| "c0001".into(),
    )
    .await;
    let drain = drained(
        &process,
        restarted_at,
        Duration::from_secs(3),
        Duration::from_secs(900),
    )
    .await;
    let user_latency = described_in(&progress, &user, Duration::from_secs(120)).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let rss_after = process.usage().rss_mib;
    let cold = Cold {
        subscriptions: n,
        clusters,
        fill,
        fill_writes,
        fill_cpu,
        ready: ready_after,
        drain,
        user_latency,
        quiet_latency,
        rss_before,
        rss_after,
    };
    print_cold(&cold, ceilings);
    clean_up(parent, &subs, &ns.name).await;
    watching.abort();
    drop(process);
    fleet.delete(parent).await;
}

/// Prints what [`cold_start`] measured (before its clean-up, which takes long at 10,000).
fn print_cold(c: &Cold, (ceiling, ceiling_apply): (f64, f64)) {
    let per_second = c.fill_writes / c.fill.as_secs_f64().max(1e-3);
    println!(
        "cold start: {} Subscriptions bound over {} clusters (one each), created and carried to their \
         Descriptions in {:.1} s with the client limits lifted ({:.0} Subscriptions/s, {:.0} writes/s: {:.0}% \
         of the create ceiling, {:.0}% of the apply ceiling); then the process is killed and started again \
         with the default limits; while filling, the parent's kube-apiserver and etcd used {:.2} cores, \
         clusternet {:.2}",
        c.subscriptions,
        c.clusters,
        c.fill.as_secs_f64(),
        c.subscriptions as f64 / c.fill.as_secs_f64().max(1e-3),
        per_second,
        100.0 * per_second / ceiling.max(1e-3),
        100.0 * per_second / ceiling_apply.max(1e-3),
        c.fill_cpu.0 / c.fill.as_secs_f64().max(1e-3),
        c.fill_cpu.1 / c.fill.as_secs_f64().max(1e-3),
    );
    println!("| figure | value |");
    println!("|---|---|");
    println!(
        "| start -> ready (every cache listed) | {:.1} s |",
        c.ready.as_secs_f64()
    );
    println!("| start -> every queue drained | {} |", took(c.drain));
    println!(
        "| a user's new Subscription during the drain: create -> Description | {} |",
        c.user_latency.map_or("not within 120 s".into(), ms)
    );
    println!(
        "| the same before the restart, nothing else going on | {} |",
        c.quiet_latency.map_or("not within 60 s".into(), ms)
    );
    println!(
        "| RSS with them, before / after the restart | {:.1} / {:.1} MiB |",
        c.rss_before, c.rss_after
    );
}

/// How the bare client writes in [`ceiling`].
#[derive(Clone, Copy)]
enum Write {
    /// `POST`, as a create.
    Create,
    /// Server-side apply (`PATCH` of type apply), as the pipeline writes Bases and Descriptions.
    Apply,
    /// Server-side apply of a Description carrying one small ConfigMap: the pipeline's own kind,
    /// which the server validates against its CRD schema and tracks field by field.
    ApplyDescription,
}

/// The parent API server's write ceiling on this machine: a bare client writing small ConfigMaps,
/// 64 in flight, for `secs` seconds, with no decision behind them; writes per second.
async fn ceiling(env: &TestEnv, parent: &kube::Client, secs: u64, how: Write) -> f64 {
    let ns = TestNamespace::create(parent, &env.parent_kubeconfig(), "ceiling").await;
    let api: Api<ConfigMap> = Api::namespaced(parent.clone(), &ns.name);
    let descriptions: Api<Description> = Api::namespaced(parent.clone(), &ns.name);
    let done = Arc::new(AtomicU64::new(0));
    let until = Instant::now() + Duration::from_secs(secs);
    let start = Instant::now();
    futures::stream::iter(0..)
        .take_while(|_| std::future::ready(Instant::now() < until))
        .map(|i: u64| {
            let (api, descriptions, done) = (api.clone(), descriptions.clone(), done.clone());
            async move {
                let name = format!("cm{i}");
                let cm: ConfigMap = serde_json::from_value(json!({
                    "apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": name}, "data": {"v": "x".repeat(256)}}))
                .expect("a ConfigMap");
                let written = match how {
                    Write::Create => api.create(&PostParams::default(), &cm).await.is_ok(),
                    Write::Apply => api
                        .patch(&name, &PatchParams::apply("ceiling"), &Patch::Apply(&cm))
                        .await
                        .is_ok(),
                    Write::ApplyDescription => {
                        let raw = serde_json::to_vec(&cm).expect("a ConfigMap's JSON");
                        let desc: Description = serde_json::from_value(json!({
                            "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Description",
                            "metadata": {"name": name},
                            "spec": {"deployer": "Generic", "raw": [k8s_openapi::ByteString(raw)]}}))
                        .expect("a Description");
                        descriptions
                            .patch(&name, &PatchParams::apply("ceiling"), &Patch::Apply(&desc))
                            .await
                            .is_ok()
                    }
                };
                if written {
                    done.fetch_add(1, Ordering::Relaxed);
                }
            }
        })
        .buffer_unordered(64)
        .collect::<Vec<_>>()
        .await;
    let rate = done.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64();
    // the namespace controller empties it object by object: thousands of deletes that would load
    // the server (and the process's caches) during whatever is measured next
    gone(parent, &ns.name).await;
    rate
}

/// Deletes namespace `name` and waits until the server has emptied and removed it.
async fn gone(parent: &kube::Client, name: &str) {
    let namespaces: Api<Namespace> = Api::all(parent.clone());
    let _ = namespaces.delete(name, &DeleteParams::default()).await;
    let start = Instant::now();
    while matches!(namespaces.get_opt(name).await, Ok(Some(_))) {
        if start.elapsed() > Duration::from_secs(900) {
            eprintln!("scale: namespace {name} still there after 15 minutes; going on");
            return;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    eprintln!(
        "scale: namespace {name} emptied and gone in {:.0} s",
        start.elapsed().as_secs_f64()
    );
}

fn ms(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1e3)
}

#[tokio::main]
async fn main() {
    let env = TestEnv::get();
    env.install_crds();
    let parent = env.parent().await;
    let tiers: Vec<usize> = std::env::var("SCALE_TIERS")
        .unwrap_or_else(|_| "10,100,1000".into())
        .split(',')
        .filter_map(|t| t.trim().parse().ok())
        .collect();
    let n = support::env_or("SCALE_SUBSCRIPTIONS", 1000);
    let cold = support::env_or("SCALE_COLD", 10_000);
    let ceiling_secs = support::env_or("SCALE_CEILING_SECONDS", 15);
    eprintln!("scale: the parent API server's write ceiling ({ceiling_secs} s each)");
    let ceiling_apply = ceiling(env, &parent, ceiling_secs, Write::Apply).await;
    let ceiling_description = ceiling(env, &parent, ceiling_secs, Write::ApplyDescription).await;
    let ceiling = ceiling(env, &parent, ceiling_secs, Write::Create).await;
    println!(
        "the parent API server's write ceiling on this machine (a bare client, small ConfigMaps, 64 in flight): \
         {ceiling:.0} creates/s, {ceiling_apply:.0} server-side applies/s; server-side applies of a \
         Description carrying such a ConfigMap: {ceiling_description:.0}/s"
    );
    let mut results = Vec::new();
    for &clusters in &tiers {
        eprintln!("scale: {clusters} clusters x {n} Subscriptions");
        results.push(tier(env, &parent, clusters, n).await);
    }
    println!(
        "scale tiers: every parent role in one process (--role=hub,scheduler,controller), default client \
         limits, fake Ready clusters, {n} Replication Subscriptions each selecting about {GROUP} clusters"
    );
    println!(
        "| clusters | bindings | create -> binding p50 / p99 | create -> Descriptions p50 / p99 | Subscriptions/s | \
         scheduler decision p99 | writes per Subscription per cluster | writes/s (of ceiling {ceiling:.0}/s) | \
         writes per idle minute | RSS idle / with {n} / after restart | restart drained in |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for t in &results {
        println!(
            "| {} | {} | {} / {} | {} / {} | {:.0} | {} | {:.2} | {:.0} ({:.0}%) | {:.0} | {:.1} / {:.1} / {:.1} MiB | {} |",
            t.clusters,
            t.bindings,
            ms(percentile(&t.to_binding, 0.5)),
            ms(percentile(&t.to_binding, 0.99)),
            ms(percentile(&t.to_described, 0.5)),
            ms(percentile(&t.to_described, 0.99)),
            t.subscriptions as f64 / t.drain.as_secs_f64().max(1e-3),
            t.decision_p99
                .map_or("-".to_string(), |s| format!("<= {:.1} ms", s * 1e3)),
            t.writes_per_binding,
            t.writes_per_second,
            100.0 * t.writes_per_second / ceiling.max(1e-3),
            t.idle_writes.max(0.0),
            t.rss_idle,
            t.rss_loaded.rss_mib,
            t.rss_restarted,
            took(t.restart_drain),
        );
    }
    for t in &results {
        println!(
            "- {} clusters: writes per Subscription per cluster: {}; in an idle minute: {}",
            t.clusters,
            breakdown(&t.burst_writes, t.bindings as f64),
            breakdown(&t.idle_breakdown, 1.0)
        );
        println!(
            "- {} clusters: memory per 1,000 Subscriptions {:.1} MiB (with them {:.1} MiB, idle {:.1} MiB); CPU {:.1} s",
            t.clusters,
            (t.rss_loaded.rss_mib - t.rss_idle) * 1000.0 / t.subscriptions as f64,
            t.rss_loaded.rss_mib,
            t.rss_idle,
            t.rss_loaded.cpu_seconds
        );
    }
    if cold > 0 {
        let clusters = support::env_or(
            "SCALE_COLD_CLUSTERS",
            tiers.iter().copied().max().unwrap_or(1000),
        );
        eprintln!("scale: cold start with {cold} Subscriptions over {clusters} clusters");
        cold_start(env, &parent, clusters, cold, (ceiling, ceiling_apply)).await;
    }
}
