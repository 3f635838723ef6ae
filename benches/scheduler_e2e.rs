//! Scheduling end to end through a real parent API server: 100 ManagedClusters, a burst of
//! Replication Subscriptions (`BENCH_SUBSCRIPTIONS`, default 200) created at once, one
//! `clusternet --role=scheduler` process at its default client limits; prints decisions per second
//! and p50/p90/p99 from creation to the written binding, seen through a watch (no polling delay).

#[path = "../tests/support/mod.rs"]
mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use clusternet::apis::{ManagedCluster, Subscription};
use futures::StreamExt;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;
use support::{Clusternet, TestEnv, TestNamespace, uid};

const CLUSTERS: usize = 100;
fn subscriptions() -> usize {
    std::env::var("BENCH_SUBSCRIPTIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200)
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    sorted
        .get(((sorted.len() as f64 * p).ceil() as usize).saturating_sub(1))
        .copied()
        .unwrap_or_default()
}

#[tokio::main]
async fn main() {
    let env = TestEnv::get();
    env.install_crds();
    let parent = env.parent().await;
    let id = uid();
    let ns = TestNamespace::create(&parent, &env.parent_kubeconfig(), "schedbench").await;
    let mcs: Api<ManagedCluster> = Api::namespaced(parent.clone(), &ns.name);
    for i in 0..CLUSTERS {
        let mc: ManagedCluster = serde_json::from_value(json!({
            "apiVersion": "clusters.clusternet.io/v1beta1", "kind": "ManagedCluster",
            "metadata": {"name": format!("c{i:03}"), "labels": {"schedbench": id}},
            "spec": {"clusterId": format!("00000000-0000-4000-8000-{i:012}"), "syncMode": "Pull"}}))
        .expect("a ManagedCluster");
        let created = mcs
            .create(&PostParams::default(), &mc)
            .await
            .expect("creating a ManagedCluster");
        let mut ready = created.clone();
        ready.status = Some(serde_json::from_value(json!({"conditions": [{"type": "Ready", "status": "True",
            "reason": "ManagedClusterReady", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]})).expect("status"));
        mcs.replace_status(&format!("c{i:03}"), &PostParams::default(), &ready)
            .await
            .expect("status");
    }
    let lease_ns = format!("{}-lease", ns.name);
    let _scheduler = Clusternet::start(
        "scheduler-bench",
        &[
            "--role=scheduler",
            &format!("--kubeconfig={}", env.parent_kubeconfig().display()),
            &format!("--leader-elect-resource-namespace={lease_ns}"),
        ],
    );
    let subs: Api<Subscription> = Api::namespaced(parent.clone(), &ns.name);
    let n = subscriptions();
    // give the scheduler time to win its lease and sync its cache before the burst
    tokio::time::sleep(Duration::from_secs(3)).await;
    // the binding is seen the moment the watch delivers it
    let (seen_tx, mut seen_rx) = tokio::sync::mpsc::unbounded_channel::<(String, Instant)>();
    let watched = subs.clone();
    tokio::spawn(async move {
        let mut stream = watcher(watched, watcher::Config::default())
            .touched_objects()
            .boxed();
        while let Some(Ok(s)) = stream.next().await {
            if s.status.map(|st| st.binding_clusters.len()).unwrap_or(0) == CLUSTERS {
                let _ = seen_tx.send((s.metadata.name.unwrap_or_default(), Instant::now()));
            }
        }
    });
    let start = Instant::now();
    let created: BTreeMap<String, Instant> = futures::stream::iter(0..n)
        .map(|i| {
            let subs = subs.clone();
            let id = id.clone();
            async move {
                let name = format!("s{i:04}");
                let sub: Subscription = serde_json::from_value(json!({"apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Subscription",
                    "metadata": {"name": name}, "spec": {"subscribers": [{"clusterAffinity": {"matchLabels": {"schedbench": id}}}],
                    "feeds": [{"apiVersion": "v1", "kind": "ConfigMap", "namespace": "x", "name": "y"}]}}))
                .expect("a Subscription");
                subs.create(&PostParams::default(), &sub)
                    .await
                    .expect("creating a Subscription");
                // creation is acknowledged: from here the Subscription is the scheduler's
                (name, Instant::now())
            }
        })
        .buffer_unordered(32)
        .collect()
        .await;
    let mut bound: BTreeMap<String, Duration> = BTreeMap::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(600);
    while bound.len() < n {
        let Ok(Some((name, at))) = tokio::time::timeout_at(deadline, seen_rx.recv()).await else {
            break;
        };
        if let Some(t) = created.get(&name) {
            bound
                .entry(name)
                .or_insert_with(|| at.saturating_duration_since(*t));
        }
    }
    let total = start.elapsed();
    let mut lat: Vec<Duration> = bound.values().copied().collect();
    lat.sort();
    println!(
        "scheduling through the API server: a burst of {n} Subscriptions x {CLUSTERS} ManagedClusters"
    );
    println!("| bound | bindings/s (burst included) | p50 | p90 | p99 |");
    println!("|---|---|---|---|---|");
    println!(
        "| {}/{n} | {:.0} | {:.3} s | {:.3} s | {:.3} s |",
        bound.len(),
        bound.len() as f64 / total.as_secs_f64(),
        pct(&lat, 0.5).as_secs_f64(),
        pct(&lat, 0.9).as_secs_f64(),
        pct(&lat, 0.99).as_secs_f64()
    );
    let _ = std::process::Command::new(env.bin("kubectl"))
        .arg("--kubeconfig")
        .arg(env.parent_kubeconfig())
        .args(["delete", "namespace", &lease_ns, "--wait=false"])
        .output();
    let _ = subs
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await;
}
