//! Distribution latency and cost against real control planes: the time from creating a
//! Subscription to its object existing in every bound child (p50/p99 over 100 Subscriptions, Pull
//! and Push), and the API writes one feed update costs per cluster (from the API servers' own
//! `apiserver_request_total`, counting only Clusternet's pipeline kinds in the parent and the
//! applied kind in the children). Run with `just bench`. With `CLUSTERNET_BENCH_METRICS=1` it
//! also prints, after each mode, the controller's work-queue, reconcile and client-request series
//! (cumulative since it started): where the objects waited, and for what.

#[path = "../tests/support/mod.rs"]
mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use clusternet::apis::{Manifest, Subscription};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use support::{Cluster, TestEnv, TestNamespace, percentile, register, uid};

const SUBSCRIPTIONS: usize = 100;

async fn run(
    env: &TestEnv,
    mode: &str,
    clusters: &[Cluster],
    id: &str,
) -> (Vec<Duration>, f64, f64, Option<Duration>) {
    let parent = env.parent().await;
    support::ensure_namespace(&parent, "clusternet-reserved").await;
    let appns = format!("bench-{mode}-{id}");
    for c in clusters {
        support::ensure_namespace(&c.child, &appns).await;
    }
    let ns = TestNamespace::create(&parent, &env.parent_kubeconfig(), "bench").await;
    let manifests: Api<Manifest> = Api::namespaced(parent.clone(), "clusternet-reserved");
    let subs: Api<Subscription> = Api::namespaced(parent.clone(), &ns.name);
    let mut pending: BTreeMap<String, Instant> = BTreeMap::new();
    for i in 0..SUBSCRIPTIONS {
        let name = format!("cm{i}");
        manifests
            .create(
                &PostParams::default(),
                &support::configmap_manifest(&appns, &name, "1"),
            )
            .await
            .expect("Manifest");
        let sub: Subscription = serde_json::from_value(json!({"apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Subscription",
            "metadata": {"name": name}, "spec": {"subscribers": [{"clusterAffinity": {"matchLabels": {"bench": id, "mode": mode}}}],
            "feeds": [{"apiVersion": "v1", "kind": "ConfigMap", "namespace": appns, "name": name}]}}))
        .expect("Subscription");
        pending.insert(name.clone(), Instant::now());
        subs.create(&PostParams::default(), &sub)
            .await
            .expect("Subscription");
    }
    let mut done: Vec<Duration> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(300);
    while !pending.is_empty() && Instant::now() < deadline {
        let mut present: BTreeMap<String, usize> = BTreeMap::new();
        for c in clusters {
            if let Ok(list) = Api::<ConfigMap>::namespaced(c.child.clone(), &appns)
                .list(&ListParams::default())
                .await
            {
                for cm in list.items {
                    *present
                        .entry(cm.metadata.name.unwrap_or_default())
                        .or_default() += 1;
                }
            }
        }
        let finished: Vec<String> = pending
            .keys()
            .filter(|k| present.get(*k) == Some(&clusters.len()))
            .cloned()
            .collect();
        for k in finished {
            if let Some(t) = pending.remove(&k) {
                done.push(t.elapsed());
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    done.sort();
    // the history is written with what the pipeline leaves of the client's budget: wait until
    // every Subscription has its first revision, so the feed update's count is its own
    let landed = Instant::now();
    let revisions: Api<k8s_openapi::api::apps::v1::ControllerRevision> =
        Api::namespaced(parent.clone(), &ns.name);
    let mut recorded = None;
    while landed.elapsed() < Duration::from_secs(120) {
        let n = revisions
            .list(&ListParams::default())
            .await
            .map(|l| l.items.len())
            .unwrap_or(0);
        if n >= SUBSCRIPTIONS {
            recorded = Some(landed.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // one feed update: writes in the parent's pipeline kinds and in the children
    tokio::time::sleep(Duration::from_secs(3)).await;
    let before_parent = support::api_writes(&parent).await;
    let mut before_children = Vec::new();
    for c in clusters {
        before_children.push(support::api_writes(&c.child).await);
    }
    let target = format!("configmaps.{appns}.cm0");
    manifests
        .patch(
            &target,
            &PatchParams::default(),
            &Patch::Merge(json!({"template": {"data": {"v": "2"}}})),
        )
        .await
        .expect("update");
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(30) {
        let mut ok = 0;
        for c in clusters {
            if let Ok(cm) = Api::<ConfigMap>::namespaced(c.child.clone(), &appns)
                .get("cm0")
                .await
                && cm.data.unwrap_or_default().get("v").map(String::as_str) == Some("2")
            {
                ok += 1;
            }
        }
        if ok == clusters.len() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after_parent = support::api_writes(&parent).await;
    let parent_writes = support::writes_delta(
        &before_parent,
        &after_parent,
        &[
            "bases",
            "descriptions",
            "descriptions/status",
            "subscriptions",
            "subscriptions/status",
            "localizations",
            // one revision per Subscription per change (pipeline::revision)
            "controllerrevisions",
        ],
    );
    let mut child_writes = 0.0;
    for (c, before) in clusters.iter().zip(before_children) {
        child_writes += support::writes_delta(
            &before,
            &support::api_writes(&c.child).await,
            &["configmaps"],
        );
    }
    support::delete_config_workload(&subs, &manifests, &appns, SUBSCRIPTIONS).await;
    let n = clusters.len() as f64;
    (done, parent_writes / n, child_writes / n, recorded)
}

#[tokio::main]
async fn main() {
    let env = TestEnv::get();
    let controller = env.with_controller();
    let id = uid();
    let pull = register(
        env,
        &format!("{id}l"),
        &[1, 2],
        "Pull",
        &[
            &format!("bench={id},mode=pull"),
            &format!("bench={id},mode=pull"),
        ],
    )
    .await;
    let push = register(
        env,
        &format!("{id}p"),
        &[2, 3],
        "Push",
        &[
            &format!("bench={id},mode=push"),
            &format!("bench={id},mode=push"),
        ],
    )
    .await;
    println!(
        "distribution: Subscription created -> its ConfigMap in every bound child ({SUBSCRIPTIONS} Subscriptions, 2 children each)"
    );
    println!(
        "| mode | done | p50 | p99 | parent writes per feed update per cluster | child writes per feed update per cluster | every first revision recorded, after the last object landed |"
    );
    println!("|---|---|---|---|---|---|---|");
    for (mode, clusters) in [("pull", &pull), ("push", &push)] {
        let (times, pw, cw, recorded) = run(env, mode, clusters, &id).await;
        println!(
            "| {mode} | {}/{SUBSCRIPTIONS} | {:.2} s | {:.2} s | {pw:.1} | {cw:.1} | {} |",
            times.len(),
            percentile(&times, 0.5).as_secs_f64(),
            percentile(&times, 0.99).as_secs_f64(),
            recorded.map_or("not within 120 s".to_string(), |d| format!(
                "{:.2} s",
                d.as_secs_f64()
            ))
        );
        if std::env::var_os("CLUSTERNET_BENCH_METRICS").is_some() {
            for l in controller.metrics_text().await.lines() {
                if (l.starts_with("workqueue_")
                    && ["_sum", "_count", "adds", "retries"]
                        .iter()
                        .any(|s| l.contains(s)))
                    || l.starts_with("controller_runtime_reconcile_total")
                    || l.starts_with("clusternet_controller_reconcile_errors_total")
                    || l.starts_with("rest_client_requests_total")
                {
                    println!("  {mode} {l}");
                }
            }
        }
    }
}
