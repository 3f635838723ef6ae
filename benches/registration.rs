//! Registration latency: from starting an agent with a bootstrap token to its ManagedCluster being
//! Ready in the parent, for 10 children at once, against real control planes.
//! Run with `just bench` (reuses CLUSTERNET_TEST_ENV when set, else starts its own environment).

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use clusternet::apis::ManagedCluster;
use k8s_openapi::api::coordination::v1::Lease;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use support::{Clusternet, TestEnv, TestNamespace, agent_args};

const AGENTS: usize = 10;

#[tokio::main]
async fn main() {
    let env = TestEnv::get();
    env.with_controller();
    let parent = env.parent().await;
    let mut started = Vec::new();
    let mut keep = Vec::new();
    for n in 0..AGENTS {
        let i = n % env.children + 1;
        let child = env.child(i).await;
        let ns = TestNamespace::create(&child, &env.child_kubeconfig(i), "bench").await;
        let args = agent_args(
            env,
            i,
            &ns.name,
            &format!("bench-{n}-{}", &ns.name[6..]),
            &[],
        );
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let t0 = Instant::now();
        let agent = Clusternet::start(&format!("bench-agent-{n}"), &args);
        started.push((child, ns.name.clone(), t0, None::<Duration>));
        keep.push((agent, ns));
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    while started.iter().any(|s| s.3.is_none()) && Instant::now() < deadline {
        for (child, ns, t0, done) in started.iter_mut().filter(|s| s.3.is_none()) {
            let Ok(lease) = Api::<Lease>::namespaced(child.clone(), ns)
                .get("clusternet-agent")
                .await
            else {
                continue;
            };
            let id = lease.uid().unwrap_or_default();
            let list = Api::<ManagedCluster>::all(parent.clone())
                .list(
                    &ListParams::default()
                        .labels(&format!("clusters.clusternet.io/cluster-id={id}")),
                )
                .await;
            let ready = list
                .ok()
                .and_then(|l| l.items.into_iter().next())
                .is_some_and(|mc| {
                    mc.status
                        .and_then(|s| s.condition("Ready").map(|c| c.status == "True"))
                        .unwrap_or(false)
                });
            if ready {
                *done = Some(t0.elapsed());
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut times: Vec<Duration> = started.iter().filter_map(|s| s.3).collect();
    times.sort();
    let pct = |p: f64| {
        times
            .get(((times.len() as f64 * p).ceil() as usize).saturating_sub(1))
            .copied()
            .unwrap_or_default()
    };
    println!(
        "registration latency: bootstrap token -> Ready ManagedCluster ({} agents started together)",
        AGENTS
    );
    println!("| agents Ready | p50 | p99 | max |");
    println!("|---|---|---|---|");
    println!(
        "| {}/{} | {:.2} s | {:.2} s | {:.2} s |",
        times.len(),
        AGENTS,
        pct(0.5).as_secs_f64(),
        pct(0.99).as_secs_f64(),
        times.last().copied().unwrap_or_default().as_secs_f64()
    );
    assert_eq!(times.len(), AGENTS, "some agents never became Ready");
}
