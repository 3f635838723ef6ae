//! The dashboard at fleet scale, against real control planes: 1,000 Ready ManagedClusters (with
//! capacity, labels and a fresh heartbeat) and 1,000 Subscriptions bound to two clusters each,
//! read through the parent's aggregator as a user would. Prints, per page, the server's answer
//! time (p50/p95 over repeated GETs, the parent's aggregator included) and its size, and the
//! time to first render in headless Chromium through `kubectl clusternet dashboard` (each run
//! starts a browser, so the same browser loading an empty page is printed as the floor).
//! Run with `just bench` (reuses CLUSTERNET_TEST_ENV when set, else starts its own environment);
//! `DASHBOARD_BENCH_OBJECTS` sets the fleet size (default 1000).

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use clusternet::apis::{ManagedCluster, Subscription};
use futures::StreamExt;
use http_body_util::BodyExt;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use support::browser::{Dashboard, dom};
use support::{TestEnv, TestNamespace, percentile, uid};

const RUNS: usize = 30;
const BROWSER_RUNS: usize = 5;

fn objects() -> usize {
    support::env_or("DASHBOARD_BENCH_OBJECTS", 1000)
}

/// `GET path` through the parent: the status and the body's size.
async fn get(client: &kube::Client, path: &str) -> (u16, usize) {
    let req = http::Request::get(path)
        .body(kube::client::Body::empty())
        .expect("a request");
    let resp = client.send(req).await.expect("a GET through the parent");
    let code = resp.status().as_u16();
    let len = resp
        .into_body()
        .collect()
        .await
        .map(|c| c.to_bytes().len())
        .unwrap_or(0);
    (code, len)
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

fn timed_browser(url: &str) -> Vec<Duration> {
    let mut out: Vec<Duration> = (0..BROWSER_RUNS)
        .map(|_| {
            let t = Instant::now();
            let page = dom(url);
            assert!(page.contains("</html>"), "the browser rendered {url}");
            t.elapsed()
        })
        .collect();
    out.sort();
    out
}

#[tokio::main]
async fn main() {
    let env = TestEnv::get();
    env.with_hub();
    let parent = env.parent().await;
    let id = uid();
    let n = objects();
    let ns = TestNamespace::create(&parent, &env.parent_kubeconfig(), "dashbench").await;
    let mcs: Api<ManagedCluster> = Api::namespaced(parent.clone(), &ns.name);
    let subs: Api<Subscription> = Api::namespaced(parent.clone(), &ns.name);

    let started = Instant::now();
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    futures::stream::iter(0..n)
        .map(|i| {
            let (mcs, id, now) = (mcs.clone(), id.clone(), now.clone());
            async move {
                let name = format!("c{i:04}");
                let mc: ManagedCluster = serde_json::from_value(json!({
                    "apiVersion": "clusters.clusternet.io/v1beta1", "kind": "ManagedCluster",
                    "metadata": {"name": name, "labels": {"dashbench": id, "zone": format!("z{}", i % 3)}},
                    "spec": {"clusterId": format!("00000000-0000-4000-8000-{i:012}"), "syncMode": "Pull",
                             "taints": if i % 10 == 9 { json!([{"key": "busy", "value": "x", "effect": "NoSchedule"}]) } else { json!([]) }}}))
                .expect("a ManagedCluster");
                mcs.create(&PostParams::default(), &mc)
                    .await
                    .expect("creating a ManagedCluster");
                let status = json!({"status": {
                    "k8sVersion": "v1.36.3", "platform": "linux/amd64", "healthz": true, "readyz": true,
                    "lastObservedTime": now, "heartbeatFrequencySeconds": 180,
                    "capacity": {"cpu": "16", "memory": "64Gi", "pods": "220"},
                    "allocatable": {"cpu": "15", "memory": "60Gi", "pods": "220"},
                    "conditions": [{"type": "Ready", "status": "True", "reason": "ManagedClusterReady",
                                    "message": "", "lastTransitionTime": now}]}});
                mcs.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
                    .await
                    .expect("a ManagedCluster's status");
            }
        })
        .buffer_unordered(16)
        .collect::<()>()
        .await;
    futures::stream::iter(0..n)
        .map(|i| {
            let (subs, id, ns) = (subs.clone(), id.clone(), ns.name.clone());
            async move {
                let name = format!("s{i:04}");
                let sub: Subscription = serde_json::from_value(json!({
                    "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Subscription",
                    "metadata": {"name": name, "labels": {"dashbench": id}},
                    "spec": {"schedulingStrategy": "Replication",
                             "subscribers": [{"clusterAffinity": {"matchLabels": {"dashbench": id}}}],
                             "feeds": [{"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "bench", "name": format!("app{i}")}]}}))
                .expect("a Subscription");
                subs.create(&PostParams::default(), &sub)
                    .await
                    .expect("creating a Subscription");
                let bound = [
                    format!("{ns}/c{:04}", i % n),
                    format!("{ns}/c{:04}", (i + 1) % n),
                ];
                let status = json!({"status": {"bindingClusters": bound, "completions": 2, "desiredReleases": 2}});
                subs.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
                    .await
                    .expect("a Subscription's status");
            }
        })
        .buffer_unordered(16)
        .collect::<()>()
        .await;
    eprintln!(
        "{n} ManagedClusters and {n} Subscriptions written in {:.1} s",
        started.elapsed().as_secs_f64()
    );

    let base = "/apis/dashboard.clusternet.io/v1alpha1/pages";
    let pages = [
        ("Clusters, first page".to_string(), "clusters".to_string()),
        (
            "Clusters, page 5".to_string(),
            "clusters?page=5".to_string(),
        ),
        (
            "Clusters, filtered to one".to_string(),
            format!("clusters?q=c0042+dashbench%3D{id}"),
        ),
        (
            "Subscriptions, first page".to_string(),
            "subscriptions".to_string(),
        ),
        (
            "Subscription detail".to_string(),
            format!("subscription?namespace={}&name=s0042", ns.name),
        ),
        (
            "Cluster detail".to_string(),
            format!("cluster?namespace={}&name=c0042", ns.name),
        ),
    ];
    // the hub's watches start on first use: one read of each page fills its caches
    for (_, page) in &pages {
        let (code, _) = get(&parent, &format!("{base}/{page}")).await;
        assert_eq!(code, 200, "{page}");
    }
    println!(
        "\nDashboard with {n} ManagedClusters and {n} Subscriptions (server answer through the parent's aggregator, {RUNS} GETs each)"
    );
    println!("{:<28} {:>10} {:>10} {:>10}", "page", "p50", "p95", "bytes");
    for (label, page) in &pages {
        let mut times = Vec::with_capacity(RUNS);
        let mut bytes = 0;
        for _ in 0..RUNS {
            let t = Instant::now();
            let (code, len) = get(&parent, &format!("{base}/{page}")).await;
            times.push(t.elapsed());
            assert_eq!(code, 200, "{page}");
            bytes = len;
        }
        times.sort();
        println!(
            "{label:<28} {:>10} {:>10} {bytes:>10}",
            ms(percentile(&times, 0.5)),
            ms(percentile(&times, 0.95))
        );
    }

    let dash = Dashboard::start(env, &[]);
    let floor = timed_browser("about:blank");
    let clusters = timed_browser(&dash.page("clusters"));
    let subscriptions = timed_browser(&dash.page("subscriptions"));
    println!(
        "\nTime to first render in headless Chromium through kubectl clusternet dashboard ({BROWSER_RUNS} runs, browser start included)"
    );
    println!("{:<28} {:>10} {:>10}", "page", "p50", "max");
    for (label, t) in [
        ("empty page (the floor)", &floor),
        ("Clusters", &clusters),
        ("Subscriptions", &subscriptions),
    ] {
        println!(
            "{label:<28} {:>10} {:>10}",
            ms(percentile(t, 0.5)),
            ms(percentile(t, 1.0))
        );
    }
    drop(dash);
    drop(ns);
}
