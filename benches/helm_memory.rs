//! Memory with failing Helm releases (#15, upstream #493 saw a 14.7 GiB hub): one Subscription of
//! 40 HelmCharts into a Pull child, 10 that deploy, 15 whose chart version does not exist and 15
//! whose install fails in the child (an object of the chart's already exists there), so 30 are
//! retried for the whole run. The resident memory (VmRSS) of the agent (which runs helm) and of
//! the controller (which renders the Descriptions and HelmReleases) is sampled every 30 s for
//! `HELM_BENCH_MINUTES` (default 30), with the helm runs counted from the agent's log. Run with
//! `just bench` (or `cargo bench --bench helm_memory`).

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use clusternet::apis::{HelmChart, Subscription};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;
use support::{ProcUsage, TestEnv, TestNamespace, chart_repo, helm_list, register, uid, wait_for};

/// The controller of this bench binary, found by its command line (the harness starts it).
fn controller_pid(env: &TestEnv) -> Option<u32> {
    let kc = format!("--kubeconfig={}", env.parent_kubeconfig().display());
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        (cmd.contains("--role=controller,scheduler")
            && cmd.contains(&kc)
            && !cmd.starts_with("bash"))
        .then_some(pid)
    })
}

#[tokio::main]
async fn main() {
    let minutes: u64 = support::env_or("HELM_BENCH_MINUTES", 30);
    let env = TestEnv::get();
    env.with_controller();
    let parent = env.parent().await;
    let id = uid();
    let clusters = register(env, &id, &[1], "Pull", &[]).await;
    let child = clusters[0].child.clone();
    let repo = chart_repo(env, "hello", &["0.1.0"], None).await;
    let ns = TestNamespace::create(&parent, &env.parent_kubeconfig(), "helmbench").await;
    let charts: Api<HelmChart> = Api::namespaced(parent.clone(), &ns.name);
    let target = format!("helm-bench-{id}");
    support::ensure_namespace(&child, &target).await;
    let mut feeds = Vec::new();
    for i in 0..40 {
        let name = format!("r{i:02}");
        let version = if (10..25).contains(&i) {
            "9.9.9"
        } else {
            "0.1.0"
        };
        if i >= 25 {
            // the chart's ConfigMap is there already, not Helm's: the install fails in the child
            let cm: ConfigMap = serde_json::from_value(
                json!({"metadata": {"name": format!("{name}-hello")}, "data": {"mine": "yes"}}),
            )
            .expect("a ConfigMap");
            Api::<ConfigMap>::namespaced(child.clone(), &target)
                .create(&PostParams::default(), &cm)
                .await
                .expect("a conflicting ConfigMap");
        }
        let chart: HelmChart = serde_json::from_value(json!({
            "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "HelmChart",
            "metadata": {"name": name},
            "spec": {"repo": repo.url, "chart": "hello", "version": version,
                "targetNamespace": target, "createNamespace": false}}))
        .expect("a HelmChart");
        charts
            .create(&PostParams::default(), &chart)
            .await
            .expect("creating a HelmChart");
        feeds.push(
            json!({"apiVersion": "apps.clusternet.io/v1alpha1", "kind": "HelmChart",
            "namespace": ns.name, "name": name}),
        );
    }
    let sub: Subscription = serde_json::from_value(json!({
        "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Subscription",
        "metadata": {"name": "forty"},
        "spec": {"subscribers": [{"clusterAffinity": {"matchLabels": {"e2e": id}}}],
            "feeds": feeds}}))
    .expect("a Subscription");
    let subs: Api<Subscription> = Api::namespaced(parent.clone(), &ns.name);
    subs.create(&PostParams::default(), &sub)
        .await
        .expect("creating the Subscription");
    let started = Instant::now();
    wait_for("10 releases deployed", Duration::from_secs(300), || async {
        let deployed = helm_list(env, 1, &target)
            .iter()
            .filter(|r| r.2 == "deployed")
            .count();
        if deployed >= 10 {
            Ok(())
        } else {
            Err(format!("{deployed} deployed"))
        }
    })
    .await;
    println!("10 of 40 releases deployed after {:?}", started.elapsed());
    let controller = controller_pid(env);
    let helm_runs = |log: &str| log.matches("running helm").count();
    let mut samples: Vec<(f64, f64, f64)> = Vec::new();
    let end = Instant::now() + Duration::from_secs(minutes * 60);
    loop {
        let a = clusters[0].agent.usage();
        let c = controller.map(ProcUsage::of).unwrap_or_default();
        let t = started.elapsed().as_secs_f64() / 60.0;
        println!(
            "t={t:5.1} min  agent RSS {:6.1} MiB (peak {:6.1})  controller RSS {:6.1} MiB (peak {:6.1})  helm runs {}",
            a.rss_mib,
            a.peak_rss_mib,
            c.rss_mib,
            c.peak_rss_mib,
            helm_runs(&clusters[0].agent.log_text())
        );
        samples.push((t, a.rss_mib, c.rss_mib));
        if Instant::now() >= end {
            break;
        }
        tokio::time::sleep(Duration::from_secs(30)).await;
    }
    let first = samples.first().copied().unwrap_or_default();
    let last = samples.last().copied().unwrap_or_default();
    let max = |f: fn(&(f64, f64, f64)) -> f64| samples.iter().map(f).fold(0.0, f64::max);
    println!(
        "over {minutes} min: agent RSS {:.1} -> {:.1} MiB (max {:.1}); controller RSS {:.1} -> {:.1} MiB (max {:.1}); {} helm runs",
        first.1,
        last.1,
        max(|s| s.1),
        first.2,
        last.2,
        max(|s| s.2),
        helm_runs(&clusters[0].agent.log_text())
    );
    let _ = subs.delete("forty", &DeleteParams::default()).await;
    let _ = wait_for("releases uninstalled", Duration::from_secs(300), || async {
        let n = helm_list(env, 1, &target).len();
        if n == 0 {
            Ok(())
        } else {
            Err(format!("{n} left"))
        }
    })
    .await;
}
