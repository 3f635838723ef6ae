//! Staged rollouts at volume against real control planes (docs/spec/deployer.md §16): 100
//! Subscriptions over three children (one per stage, no soak) all changed at once; the time from
//! the change to each one's rollout Completed (p50/p99), the controller's CPU and memory over it,
//! and the same change without a strategy (every cluster at once, the time until every child has
//! it), so one stage's added latency reads as (staged - plain) / 3. Run with `just bench`.

#[path = "../tests/support/mod.rs"]
mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use clusternet::apis::{Manifest, RolloutPhase, Subscription};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use support::{Cluster, ControllerHandle, TestEnv, TestNamespace, percentile, register, uid};

const SUBSCRIPTIONS: usize = 100;

/// How many of the children have each ConfigMap at value `v`.
async fn at_value(clusters: &[Cluster], ns: &str, v: &str) -> BTreeMap<String, usize> {
    let mut present: BTreeMap<String, usize> = BTreeMap::new();
    for c in clusters {
        if let Ok(list) = Api::<ConfigMap>::namespaced(c.child.clone(), ns)
            .list(&ListParams::default())
            .await
        {
            for cm in list.items {
                if cm.data.unwrap_or_default().get("v").map(String::as_str) == Some(v) {
                    *present
                        .entry(cm.metadata.name.unwrap_or_default())
                        .or_default() += 1;
                }
            }
        }
    }
    present
}

struct Measured {
    times: Vec<Duration>,
    cpu_seconds: f64,
    peak_rss_mib: f64,
}

async fn usage(controller: &ControllerHandle) -> (f64, f64) {
    (
        controller
            .metric("process_cpu_seconds_total")
            .await
            .unwrap_or(0.0),
        controller
            .metric("process_resident_memory_bytes")
            .await
            .unwrap_or(0.0)
            / 1048576.0,
    )
}

/// Creates the Subscriptions (staged or not), waits for value 1 everywhere (and, staged, for
/// every rollout to be recorded), then changes every feed at once and times each one.
async fn run(
    env: &TestEnv,
    controller: &ControllerHandle,
    clusters: &[Cluster],
    id: &str,
    staged: bool,
) -> Measured {
    let parent = env.parent().await;
    support::ensure_namespace(&parent, "clusternet-reserved").await;
    let mode = if staged { "staged" } else { "plain" };
    let appns = format!("bench-{mode}-{id}");
    for c in clusters {
        support::ensure_namespace(&c.child, &appns).await;
    }
    let ns = TestNamespace::create(&parent, &env.parent_kubeconfig(), "bench").await;
    if staged {
        env.kubectl_apply(&json!({
            "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "RolloutStrategy",
            "metadata": {"name": "three", "namespace": ns.name},
            "spec": {"stages": [
                {"name": "one", "clusterSelector": {"matchLabels": {"stage": "one"}}},
                {"name": "two", "clusterSelector": {"matchLabels": {"stage": "two"}}},
                {"name": "three", "clusterSelector": {"matchLabels": {"stage": "three"}}}
            ]}
        }));
    }
    let manifests: Api<Manifest> = Api::namespaced(parent.clone(), "clusternet-reserved");
    let subs: Api<Subscription> = Api::namespaced(parent.clone(), &ns.name);
    for i in 0..SUBSCRIPTIONS {
        let name = format!("cm{i}");
        manifests
            .create(
                &PostParams::default(),
                &support::configmap_manifest(&appns, &name, "1"),
            )
            .await
            .expect("Manifest");
        let mut spec = json!({"subscribers": [{"clusterAffinity": {"matchLabels": {"bench": id}}}],
            "feeds": [{"apiVersion": "v1", "kind": "ConfigMap", "namespace": appns, "name": name}]});
        if staged {
            spec["rolloutStrategyName"] = json!("three");
        }
        let sub: Subscription =
            serde_json::from_value(json!({"apiVersion": "apps.clusternet.io/v1alpha1",
            "kind": "Subscription", "metadata": {"name": name}, "spec": spec}))
            .expect("Subscription");
        subs.create(&PostParams::default(), &sub)
            .await
            .expect("Subscription");
    }
    let ready = Instant::now();
    while ready.elapsed() < Duration::from_secs(300) {
        let everywhere = at_value(clusters, &appns, "1")
            .await
            .values()
            .filter(|n| **n == clusters.len())
            .count();
        let recorded = if staged {
            subs.list(&ListParams::default())
                .await
                .map(|l| {
                    l.items
                        .iter()
                        .filter(|s| {
                            s.status
                                .as_ref()
                                .and_then(|st| st.rollout.as_ref())
                                .is_some_and(|r| r.phase == RolloutPhase::Completed)
                        })
                        .count()
                })
                .unwrap_or(0)
        } else {
            SUBSCRIPTIONS
        };
        if everywhere == SUBSCRIPTIONS && recorded == SUBSCRIPTIONS {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (cpu_before, _) = usage(controller).await;
    let mut peak = 0.0_f64;
    let t0 = Instant::now();
    for i in 0..SUBSCRIPTIONS {
        manifests
            .patch(
                &format!("configmaps.{appns}.cm{i}"),
                &PatchParams::default(),
                &Patch::Merge(json!({"template": {"data": {"v": "2"}}})),
            )
            .await
            .expect("the change");
    }
    let mut pending: Vec<String> = (0..SUBSCRIPTIONS).map(|i| format!("cm{i}")).collect();
    let mut times = Vec::new();
    while !pending.is_empty() && t0.elapsed() < Duration::from_secs(300) {
        let done: Vec<String> = if staged {
            let list = subs
                .list(&ListParams::default())
                .await
                .map(|l| l.items)
                .unwrap_or_default();
            list.iter()
                .filter(|s| {
                    s.status
                        .as_ref()
                        .and_then(|st| st.rollout.as_ref())
                        .is_some_and(|r| {
                            r.phase == RolloutPhase::Completed && r.revision_number == 2
                        })
                })
                .filter_map(|s| s.metadata.name.clone())
                .collect()
        } else {
            at_value(clusters, &appns, "2")
                .await
                .into_iter()
                .filter(|(_, n)| *n == clusters.len())
                .map(|(k, _)| k)
                .collect()
        };
        pending.retain(|p| {
            let finished = done.contains(p);
            if finished {
                times.push(t0.elapsed());
            }
            !finished
        });
        peak = peak.max(usage(controller).await.1);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    times.sort();
    let (cpu_after, rss) = usage(controller).await;
    support::delete_config_workload(&subs, &manifests, &appns, SUBSCRIPTIONS).await;
    Measured {
        times,
        cpu_seconds: cpu_after - cpu_before,
        peak_rss_mib: peak.max(rss),
    }
}

#[tokio::main]
async fn main() {
    let env = TestEnv::get();
    let controller = env.with_controller();
    let id = uid();
    let clusters = register(
        env,
        &id,
        &[1, 2, 3],
        "Push",
        &[
            &format!("bench={id},stage=one"),
            &format!("bench={id},stage=two"),
            &format!("bench={id},stage=three"),
        ],
    )
    .await;
    println!(
        "rollout: {SUBSCRIPTIONS} Subscriptions over 3 children changed at once -> done (staged: rollout Completed through 3 stages, no soak; plain: the change in every child)"
    );
    println!("| mode | done | p50 | p99 | controller CPU over the change | controller RSS peak |");
    println!("|---|---|---|---|---|---|");
    let mut p50 = Vec::new();
    for staged in [false, true] {
        let m = run(env, controller, &clusters, &id, staged).await;
        let mid = percentile(&m.times, 0.5);
        p50.push(mid);
        println!(
            "| {} | {}/{SUBSCRIPTIONS} | {:.2} s | {:.2} s | {:.1} s | {:.0} MiB |",
            if staged { "staged (3 stages)" } else { "plain" },
            m.times.len(),
            mid.as_secs_f64(),
            percentile(&m.times, 0.99).as_secs_f64(),
            m.cpu_seconds,
            m.peak_rss_mib
        );
    }
    if let [plain, staged] = p50[..] {
        println!(
            "added latency per stage (p50): {:.2} s",
            (staged.as_secs_f64() - plain.as_secs_f64()) / 3.0
        );
    }
}
