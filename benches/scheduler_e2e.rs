//! Scheduling end to end through a real parent API server: 100 ManagedClusters, a burst of
//! Replication Subscriptions (`BENCH_SUBSCRIPTIONS`, default 200) created by 32 concurrent
//! requests, one `clusternet --role=scheduler` process at its default client limits; prints
//! bindings per second and p50/p90/p99 from creation to the written binding, seen through a watch
//! (no polling delay).
//!
//! The yardstick runs before and after on the same server (its better run counts): a bare client that watches the burst and writes
//! each binding (one status merge patch, 16 at once, no decision, no Event) as soon as it sees the
//! Subscription. Nothing can bind faster through this API server on this machine; the ratio of the
//! two is what clusternet itself costs.

#[path = "common/scheduling.rs"]
mod scheduling;
#[path = "../tests/support/mod.rs"]
mod support;

use std::time::Duration;

use clusternet::apis::{ManagedCluster, Subscription};
use futures::{StreamExt, TryStreamExt};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use scheduling::{Figures, Strategy, delete_all, ready_clusters};
use serde_json::json;
use support::{Clusternet, TestEnv, TestNamespace, percentile, uid};

const CLUSTERS: usize = 100;
fn subscriptions() -> usize {
    support::env_or("BENCH_SUBSCRIPTIONS", 200)
}

fn ratio(ours: &[Duration], bare: &[Duration], p: f64) -> f64 {
    percentile(ours, p).as_secs_f64() / percentile(bare, p).as_secs_f64().max(1e-9)
}

async fn burst(subs: &Api<Subscription>, id: &str, n: usize, pace: Option<Duration>) -> Figures {
    let limit = Duration::from_secs(600);
    scheduling::burst(subs, id, n, CLUSTERS, Strategy::Replication, pace, limit).await
}

/// The yardstick's binder: every Subscription without a status gets the binding to all clusters
/// in one status merge patch, 16 writes at once (the scheduler's parallelism). It runs on its own
/// threads with its own client, as a separate process would, so it does not queue behind the
/// burst's own requests. Dropping the handle stops it.
struct BareBinder {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for BareBinder {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn bare_binder(kubeconfig: std::path::PathBuf, ns: String, clusters: Vec<String>) -> BareBinder {
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let thread = std::thread::spawn(move || {
        let Ok(rt) = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
        else {
            return;
        };
        rt.block_on(async move {
            let subs: Api<Subscription> =
                Api::namespaced(support::client_from(&kubeconfig).await, &ns);
            let status =
                json!({"status": {"bindingClusters": clusters, "desiredReleases": CLUSTERS}});
            let bind = watcher(subs.clone(), watcher::Config::default())
                .applied_objects()
                .try_filter(|s| std::future::ready(s.status.is_none()))
                .for_each_concurrent(16, |s| {
                    let (subs, status) = (subs.clone(), status.clone());
                    async move {
                        if let Ok(s) = s {
                            let name = s.metadata.name.unwrap_or_default();
                            let _ = subs
                                .patch_status(
                                    &name,
                                    &PatchParams::default(),
                                    &Patch::Merge(&status),
                                )
                                .await;
                        }
                    }
                });
            tokio::select! {
                _ = stopped => {}
                _ = bind => {}
            }
        });
    });
    BareBinder {
        stop: Some(stop),
        thread: Some(thread),
    }
}

#[tokio::main]
async fn main() {
    let env = TestEnv::get();
    env.install_crds();
    let parent = env.parent().await;
    let id = uid();
    let ns = TestNamespace::create(&parent, &env.parent_kubeconfig(), "schedbench").await;
    let mcs: Api<ManagedCluster> = Api::namespaced(parent.clone(), &ns.name);
    let keys = ready_clusters(&mcs, &ns.name, &id, CLUSTERS).await;
    let subs: Api<Subscription> = Api::namespaced(parent.clone(), &ns.name);
    let n = subscriptions();

    // a burst as fast as the server takes it, and a steady stream the server keeps up with
    let paced = Duration::from_millis(25);
    let workloads = [("burst", None), ("40/s", Some(paced))];
    let bare_runs = || async {
        let mut figures = Vec::new();
        for (_, pace) in workloads {
            let binder = bare_binder(env.parent_kubeconfig(), ns.name.clone(), keys.clone());
            figures.push(burst(&subs, &id, n, pace).await);
            drop(binder);
            delete_all(&subs).await;
        }
        figures
    };
    let first_ceiling = bare_runs().await;

    let lease_ns = format!("{}-lease", ns.name);
    let scheduler = Clusternet::start(
        "scheduler-bench",
        &[
            "--role=scheduler",
            &format!("--kubeconfig={}", env.parent_kubeconfig().display()),
            &format!("--leader-elect-resource-namespace={lease_ns}"),
        ],
    );
    // give the scheduler time to win its lease and sync its cache before the burst
    tokio::time::sleep(Duration::from_secs(3)).await;
    let mut ours = Vec::new();
    for (_, pace) in workloads {
        ours.push(burst(&subs, &id, n, pace).await);
        delete_all(&subs).await;
    }
    let usage = scheduler.usage();
    drop(scheduler);
    // the yardstick again after ours, so neither side gains from going first; its better run counts
    let ceiling: Vec<Figures> = first_ceiling
        .into_iter()
        .zip(bare_runs().await)
        .map(|(a, b)| {
            if percentile(&a.latencies, 0.5) <= percentile(&b.latencies, 0.5) {
                a
            } else {
                b
            }
        })
        .collect();

    println!(
        "scheduling through the API server: {n} Subscriptions x {CLUSTERS} ManagedClusters, created at once (burst) or at 40/s"
    );
    println!("| workload | binder | bound | bindings/s | p50 | p90 | p99 |");
    println!("|---|---|---|---|---|---|---|");
    for (((what, _), bare), ours) in workloads.iter().zip(&ceiling).zip(&ours) {
        println!("{}", bare.row(what, "bare client (the ceiling)", n));
        println!("{}", ours.row(what, "clusternet --role=scheduler", n));
        println!(
            "| {what} | ours / ceiling | | {:.2}x | {:.2}x | {:.2}x | {:.2}x |",
            ours.per_second / bare.per_second.max(f64::MIN_POSITIVE),
            ratio(&ours.latencies, &bare.latencies, 0.5),
            ratio(&ours.latencies, &bare.latencies, 0.9),
            ratio(&ours.latencies, &bare.latencies, 0.99),
        );
    }
    println!(
        "scheduler process over both workloads: CPU {:.2} s, RSS {:.0} MiB (peak {:.0} MiB)",
        usage.cpu_seconds, usage.rss_mib, usage.peak_rss_mib,
    );
    let _ = std::process::Command::new(env.bin("kubectl"))
        .arg("--kubeconfig")
        .arg(env.parent_kubeconfig())
        .args(["delete", "namespace", &lease_ns, "--wait=false"])
        .output();
}
