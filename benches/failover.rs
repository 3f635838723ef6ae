//! Failover and fail-back times (#16) on real control planes: a Dividing Subscription of 6
//! replicas, static 1:1:1 over 3 Pull children; child1's kube-apiserver is stopped (SIGSTOP),
//! then resumed. Measured per round: stop -> child1 reported not ready, stop -> 3 and 3
//! available on the others, resume -> child1 Ready, resume -> 2/2/2 available again (fail-back
//! complete, the stable period included), and the fewest replicas available across the children
//! while they moved back. The scheduler runs with the test controllers' flags
//! (`--cluster-failover-grace=2s --cluster-failback-stable=20s`); the Subscription's grace is
//! `FAILOVER_BENCH_GRACE_SECS` (default 5, as tolerationSeconds); the agents report every 2 s
//! with a 3 s health window. `FAILOVER_BENCH_ROUNDS` (default 3). Run with `just bench`.

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use clusternet::apis::ManagedCluster;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, DeleteParams};
use support::{Cluster, Resume, TestEnv, uid};

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

async fn available(c: &Cluster, ns: &str) -> Option<i32> {
    Api::<Deployment>::namespaced(c.child.clone(), ns)
        .get("web")
        .await
        .ok()
        .map(|d| d.status.and_then(|s| s.available_replicas).unwrap_or(0))
}

async fn ready(parent: &kube::Client, c: &Cluster) -> bool {
    Api::<ManagedCluster>::namespaced(parent.clone(), &c.dedicated)
        .get(&c.name)
        .await
        .ok()
        .and_then(|m| m.status)
        .and_then(|s| s.condition("Ready").map(|c| c.status == "True"))
        .unwrap_or(false)
}

/// Polls `done` every 100 ms for at most `limit`; the time it took.
async fn until<F, Fut>(limit: Duration, mut done: F) -> Option<Duration>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    while start.elapsed() < limit {
        if done().await {
            return Some(start.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}

fn secs(d: Option<Duration>) -> String {
    d.map_or("timeout".into(), |d| format!("{:.1} s", d.as_secs_f64()))
}

#[tokio::main]
async fn main() {
    let rounds = env_u64("FAILOVER_BENCH_ROUNDS", 3);
    let grace = env_u64("FAILOVER_BENCH_GRACE_SECS", 5);
    let env = TestEnv::get();
    env.with_controller();
    let parent = env.parent().await;
    let id = uid();
    let support::Divided {
        clusters,
        appns,
        ns: _ns,
        subs,
    } = support::divided_over_three(env, &id, "fobench", grace).await;
    let split = |want: [i32; 3]| {
        let clusters = &clusters;
        let appns = &appns;
        move || async move {
            let mut got = [0; 3];
            for (g, c) in got.iter_mut().zip(clusters) {
                *g = available(c, appns).await.unwrap_or(-1);
            }
            got == want
        }
    };
    assert!(
        until(Duration::from_secs(120), split([2, 2, 2]))
            .await
            .is_some(),
        "2/2/2 never became available"
    );
    println!(
        "| round | stop -> not ready | stop -> 3/3 available elsewhere | resume -> Ready | resume -> 2/2/2 available (fail-back) | fewest available while moving back |"
    );
    println!("|---|---|---|---|---|---|");
    for round in 1..=rounds {
        let stopped = Instant::now();
        support::signal_child_apiserver(env, 1, "-STOP");
        let resume = Resume(env, vec![1]);
        let not_ready = until(Duration::from_secs(120), || async {
            !ready(&parent, &clusters[0]).await
        })
        .await;
        let elsewhere = until(Duration::from_secs(180), || async {
            available(&clusters[1], &appns).await == Some(3)
                && available(&clusters[2], &appns).await == Some(3)
        })
        .await
        .map(|_| stopped.elapsed());
        drop(resume);
        let resumed = Instant::now();
        let back = until(Duration::from_secs(120), || async {
            ready(&parent, &clusters[0]).await
        })
        .await;
        let lowest = std::cell::Cell::new(i32::MAX);
        let failed_back = until(Duration::from_secs(300), || async {
            let mut got = [0; 3];
            for (g, c) in got.iter_mut().zip(&clusters) {
                *g = available(c, &appns).await.unwrap_or(0);
            }
            lowest.set(lowest.get().min(got.iter().sum()));
            got == [2, 2, 2]
        })
        .await
        .map(|_| resumed.elapsed());
        println!(
            "| {round} | {} | {} | {} | {} | {} |",
            secs(not_ready),
            secs(elsewhere),
            secs(back),
            secs(failed_back),
            lowest.get()
        );
    }
    subs.delete("divided", &DeleteParams::default())
        .await
        .expect("deleting the Subscription");
    for c in &clusters {
        support::wait_app_removed(&c.child, &appns).await;
    }
}
