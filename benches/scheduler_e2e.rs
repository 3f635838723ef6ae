//! Scheduling end to end through a real parent API server: 100 ManagedClusters, 1,000
//! Replication Subscriptions created back to back, one `clusternet --role=scheduler` process;
//! prints decisions per second and p50/p99 from creation to a written binding.

#[path = "../tests/support/mod.rs"]
mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use clusternet::apis::{ManagedCluster, Subscription};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;
use support::{Clusternet, TestEnv, TestNamespace, uid};

const CLUSTERS: usize = 100;
const SUBSCRIPTIONS: usize = 1000;

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
    let mut created: BTreeMap<String, Instant> = BTreeMap::new();
    let start = Instant::now();
    for i in 0..SUBSCRIPTIONS {
        let name = format!("s{i:04}");
        let sub: Subscription = serde_json::from_value(json!({"apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Subscription",
            "metadata": {"name": name}, "spec": {"subscribers": [{"clusterAffinity": {"matchLabels": {"schedbench": id}}}],
            "feeds": [{"apiVersion": "v1", "kind": "ConfigMap", "namespace": "x", "name": "y"}]}}))
        .expect("a Subscription");
        created.insert(name, Instant::now());
        subs.create(&PostParams::default(), &sub)
            .await
            .expect("creating a Subscription");
    }
    let mut bound: BTreeMap<String, Duration> = BTreeMap::new();
    while bound.len() < SUBSCRIPTIONS && start.elapsed() < Duration::from_secs(600) {
        if let Ok(list) = subs.list(&ListParams::default()).await {
            for s in list.items {
                let name = s.metadata.name.clone().unwrap_or_default();
                if bound.contains_key(&name) {
                    continue;
                }
                if s.status.map(|st| st.binding_clusters.len()).unwrap_or(0) == CLUSTERS
                    && let Some(t) = created.get(&name)
                {
                    bound.insert(name, t.elapsed());
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let total = start.elapsed();
    let mut lat: Vec<Duration> = bound.values().copied().collect();
    lat.sort();
    println!(
        "scheduling through the API server: {SUBSCRIPTIONS} Subscriptions x {CLUSTERS} ManagedClusters"
    );
    println!("| bound | decisions/s (creation included) | p50 | p99 |");
    println!("|---|---|---|---|");
    println!(
        "| {}/{SUBSCRIPTIONS} | {:.0} | {:.2} s | {:.2} s |",
        bound.len(),
        bound.len() as f64 / total.as_secs_f64(),
        pct(&lat, 0.5).as_secs_f64(),
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
