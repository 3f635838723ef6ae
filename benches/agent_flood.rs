//! An agent under a flood of Descriptions (#21 item 4, #13 item 2): `AGENT_FLOOD_DESCRIPTIONS`
//! (default 1,000) Descriptions, one ConfigMap of about 1 KiB each, created at once in a Pull
//! child's dedicated namespace in the parent. The agent's resident memory (VmRSS) is sampled every
//! second while it applies them and afterwards; the table gives it idle before the flood, its peak
//! (VmHWM), settled with every object applied, and after the Descriptions are deleted and their
//! objects removed from the child, with the time to apply and to remove them and the CPU seconds
//! spent. The agent keeps every Description of its namespace in its cache, so the settled figure
//! grows with their count and size; what must not happen is growth without bound (a leak or an
//! unbounded queue). Run with `just bench` (or `cargo bench --bench agent_flood`).

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use clusternet::apis::{Description, known};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;
use support::{Cluster, ProcUsage, TestEnv, register, uid};

/// How many of the flood's ConfigMaps the child holds.
async fn applied(child: &kube::Client, ns: &str) -> usize {
    Api::<ConfigMap>::namespaced(child.clone(), ns)
        .list(&ListParams::default().labels("bench=agent-flood"))
        .await
        .map(|l| l.items.len())
        .unwrap_or(0)
}

/// Samples the agent every second until `done` holds or `limit` passes; the highest VmRSS seen.
async fn sample_until<F, Fut>(cluster: &Cluster, limit: Duration, mut done: F) -> (Duration, f64)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    let mut highest: f64 = 0.0;
    loop {
        highest = highest.max(cluster.agent.usage().rss_mib);
        if done().await {
            return (start.elapsed(), highest);
        }
        assert!(
            start.elapsed() < limit,
            "not done within {} s",
            limit.as_secs()
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// One flood: `count` Descriptions created, applied, settled, deleted and removed.
struct Round {
    created: Duration,
    applied: Duration,
    removed: Duration,
    /// The highest VmRSS sampled while applying, settling and removing.
    highest: f64,
    settled: ProcUsage,
    after: ProcUsage,
}

async fn flood(
    cluster: &Cluster,
    parent: &kube::Client,
    target: &str,
    id: &str,
    count: usize,
) -> Round {
    let descriptions: Api<Description> = Api::namespaced(parent.clone(), &cluster.dedicated);
    let filler = "x".repeat(1024);
    let start = Instant::now();
    for i in 0..count {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("flood-{i}"), "namespace": target,
                "labels": {"bench": "agent-flood"}},
            "data": {"filler": filler, "i": i.to_string()}});
        let raw = serde_json::to_vec(&cm).expect("a ConfigMap's JSON");
        let desc: Description = serde_json::from_value(json!({
            "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Description",
            // as the controller writes them: the finalizer makes deletion remove the objects
            "metadata": {"name": format!("flood-{id}-{i}"), "labels": {"bench": "agent-flood"},
                "finalizers": [known::APP_FINALIZER]},
            "spec": {"deployer": "Generic", "raw": [k8s_openapi::ByteString(raw)]}}))
        .expect("a Description");
        descriptions
            .create(&PostParams::default(), &desc)
            .await
            .expect("creating a Description");
    }
    let created = start.elapsed();
    let child = cluster.child.clone();
    let (_, during) = sample_until(cluster, Duration::from_secs(900), || {
        let (child, target) = (child.clone(), target.to_string());
        async move { applied(&child, &target).await >= count }
    })
    .await;
    let applied_after = start.elapsed();
    // settled: the status writes and watch echoes of the flood are over
    let mut settling: f64 = 0.0;
    for _ in 0..60 {
        settling = settling.max(cluster.agent.usage().rss_mib);
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let settled = cluster.agent.usage();
    let removal = Instant::now();
    descriptions
        .delete_collection(
            &DeleteParams::default(),
            &ListParams::default().labels("bench=agent-flood"),
        )
        .await
        .expect("deleting the Descriptions");
    let (_, removing) = sample_until(cluster, Duration::from_secs(900), || {
        let (child, target) = (child.clone(), target.to_string());
        async move { applied(&child, &target).await == 0 }
    })
    .await;
    let removed = removal.elapsed();
    // the allocator hands freed pages back lazily: look again after a quiet minute
    tokio::time::sleep(Duration::from_secs(60)).await;
    Round {
        created,
        applied: applied_after,
        removed,
        highest: during.max(settling).max(removing),
        settled,
        after: cluster.agent.usage(),
    }
}

#[tokio::main]
async fn main() {
    let count: usize = support::env_or("AGENT_FLOOD_DESCRIPTIONS", 1000);
    // a second flood into the same agent shows whether memory comes back to the same level
    // (bounded) or climbs (a leak)
    let rounds: usize = support::env_or("AGENT_FLOOD_ROUNDS", 2);
    let env = TestEnv::get();
    env.with_controller();
    let id = uid();
    let clusters = register(env, &id, &[1], "Pull", &[]).await;
    let cluster = &clusters[0];
    let parent = env.parent().await;
    let target = format!("flood-{id}");
    support::ensure_namespace(&cluster.child, &target).await;
    // the agent's own start-up (lists, first heartbeats) is over
    tokio::time::sleep(Duration::from_secs(20)).await;
    let idle = cluster.agent.usage();
    println!(
        "| round | Descriptions | agent idle before | highest during | settled, all applied | after deletion | created in | all applied after | removed after | CPU for the round |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    let mut before = idle;
    for round in 1..=rounds {
        let r = flood(cluster, &parent, &target, &id, count).await;
        println!(
            "| {round} | {count} | {:.1} MiB | {:.1} MiB | {:.1} MiB | {:.1} MiB | {:.1} s | {:.1} s | {:.1} s | {:.1} s |",
            before.rss_mib,
            r.highest,
            r.settled.rss_mib,
            r.after.rss_mib,
            r.created.as_secs_f64(),
            r.applied.as_secs_f64(),
            r.removed.as_secs_f64(),
            r.after.cpu_seconds - before.cpu_seconds
        );
        before = r.after;
    }
    println!(
        "agent_flood: peak (VmHWM) {:.1} MiB over {rounds} rounds of {count} Descriptions",
        cluster.agent.usage().peak_rss_mib.max(before.peak_rss_mib)
    );
}
