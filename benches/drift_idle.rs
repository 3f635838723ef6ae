//! What an idle fleet costs the children (#14): about 1,000 Descriptions settled over 3 Pull
//! children, then the children's writes to the applied kind over an idle window, from the child
//! API servers' own `apiserver_request_total`. A deployer that re-applies on a timer (ours before
//! #14: every Description every 20 s) writes `Descriptions x window / 20 s`; watching writes
//! nothing. Also the time from an edit in a child to its repair. Run with `just bench`;
//! `DRIFT_BENCH_SUBSCRIPTIONS` (default 334, one ConfigMap each, 3 children) and
//! `DRIFT_BENCH_IDLE_SECS` (default 300) scale it.

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use clusternet::apis::{Manifest, Subscription};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use support::{TestEnv, TestNamespace, register, uid};

#[tokio::main]
async fn main() {
    let subscriptions: usize = support::env_or("DRIFT_BENCH_SUBSCRIPTIONS", 334);
    let idle = Duration::from_secs(support::env_or("DRIFT_BENCH_IDLE_SECS", 300u64));
    let env = TestEnv::get();
    env.with_controller();
    let id = uid();
    let clusters = register(env, &id, &[1, 2, 3], "Pull", &[]).await;
    let parent = env.parent().await;
    support::ensure_namespace(&parent, "clusternet-reserved").await;
    let appns = format!("idle-{id}");
    for c in &clusters {
        support::ensure_namespace(&c.child, &appns).await;
    }
    let ns = TestNamespace::create(&parent, &env.parent_kubeconfig(), "idle").await;
    let manifests: Api<Manifest> = Api::namespaced(parent.clone(), "clusternet-reserved");
    let subs: Api<Subscription> = Api::namespaced(parent.clone(), &ns.name);
    let start = Instant::now();
    for i in 0..subscriptions {
        let name = format!("cm{i}");
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": appns}, "data": {"v": "1"}});
        manifests
            .create(&PostParams::default(), &support::manifest_of(&cm))
            .await
            .expect("Manifest");
        let sub: Subscription = serde_json::from_value(json!({"apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Subscription",
            "metadata": {"name": name}, "spec": {"subscribers": [{"clusterAffinity": {"matchLabels": {"e2e": id}}}],
            "feeds": [support::feed_of(&cm)]}}))
        .expect("Subscription");
        subs.create(&PostParams::default(), &sub)
            .await
            .expect("Subscription");
    }
    let descriptions = subscriptions * clusters.len();
    loop {
        let mut present = 0;
        for c in &clusters {
            if let Ok(list) = Api::<ConfigMap>::namespaced(c.child.clone(), &appns)
                .list(&ListParams::default())
                .await
            {
                // the namespace's own kube-root-ca.crt does not count
                present += list
                    .items
                    .iter()
                    .filter(|c| {
                        c.metadata
                            .name
                            .as_deref()
                            .is_some_and(|n| n.starts_with("cm"))
                    })
                    .count();
            }
        }
        if present >= descriptions {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(900),
            "only {present}/{descriptions} objects deployed after 15 minutes"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    println!(
        "drift_idle: {descriptions} Descriptions created and settled over {} children in {:.0} s",
        clusters.len(),
        start.elapsed().as_secs_f64()
    );
    // let the last status writes and watch echoes pass
    tokio::time::sleep(Duration::from_secs(20)).await;
    let mut before = Vec::new();
    for c in &clusters {
        before.push(support::api_writes(&c.child).await);
    }
    tokio::time::sleep(idle).await;
    let mut idle_writes = 0.0;
    for (c, b) in clusters.iter().zip(&before) {
        idle_writes +=
            support::writes_delta(b, &support::api_writes(&c.child).await, &["configmaps"]);
    }
    let timer = descriptions as f64 * idle.as_secs_f64() / 20.0;
    // one edit in a child: how long until it is put back
    let cms: Api<ConfigMap> = Api::namespaced(clusters[0].child.clone(), &appns);
    cms.patch(
        "cm0",
        &PatchParams {
            field_manager: Some("bench-intruder".into()),
            ..Default::default()
        },
        &Patch::Merge(json!({"data": {"v": "drifted"}})),
    )
    .await
    .expect("editing in the child");
    let edited = Instant::now();
    let repaired = loop {
        let v = cms
            .get("cm0")
            .await
            .ok()
            .and_then(|c| c.data)
            .and_then(|d| d.get("v").cloned());
        if v.as_deref() == Some("1") {
            break Some(edited.elapsed());
        }
        if edited.elapsed() > Duration::from_secs(60) {
            break None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    println!(
        "| Descriptions | idle window | child writes (applied kind) | a 20 s re-apply timer | edit -> repaired |"
    );
    println!("|---|---|---|---|---|");
    println!(
        "| {descriptions} | {} s | {idle_writes:.0} | {timer:.0} | {} |",
        idle.as_secs(),
        repaired.map_or("not within 60 s".to_string(), |d| format!(
            "{:.2} s",
            d.as_secs_f64()
        ))
    );
    support::delete_config_workload(&subs, &manifests, &appns, subscriptions).await;
}
