//! What sharing one process buys between the scheduler and the pipeline: Subscriptions created at
//! a steady 10/s, each for 3 real children, timed from creation to its 3 Bases existing (the
//! scheduler's binding, then the controller's Bases), with `--role=scheduler,controller` in one
//! process (the binding enters the shared cache straight from the API server's answer) and with
//! the two roles as separate processes (the controller learns of it from its watch). Run with
//! `just bench`.

#[path = "../tests/support/mod.rs"]
mod support;

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use clusternet::apis::{Base, Manifest, Subscription};
use futures::StreamExt;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;
use support::{Clusternet, TestEnv, TestNamespace, percentile, register, uid};

const SUBSCRIPTIONS: usize = 60;
const CHILDREN: usize = 3;

/// Starts the parent roles for one phase: one process or one per role.
fn parent_roles(env: &TestEnv, split: bool, phase: &str) -> Vec<Clusternet> {
    let kubeconfig = format!("--kubeconfig={}", env.parent_kubeconfig().display());
    // a Lease namespace per phase: the last phase's leader was killed, not released
    let leases = format!("--leader-elect-resource-namespace=bench-leases-{phase}");
    let start = |name: &str, roles: &str| {
        Clusternet::start(
            name,
            &[
                &format!("--role={roles}"),
                &kubeconfig,
                &leases,
                "--predictor-port=0",
            ],
        )
    };
    if split {
        vec![
            start("bench-scheduler", "scheduler"),
            start("bench-controller", "controller"),
        ]
    } else {
        vec![start("bench-parent", "scheduler,controller")]
    }
}

async fn phase(parent: &kube::Client, ns: &str, id: &str, tag: &str) -> Vec<Duration> {
    let subs: Api<Subscription> = Api::namespaced(parent.clone(), ns);
    let (seen_tx, mut seen_rx) = tokio::sync::mpsc::unbounded_channel::<(String, Instant)>();
    let bases: Api<Base> = Api::all(parent.clone());
    let selector = format!("apps.clusternet.io/subs.namespace={ns}");
    let watch = tokio::spawn(async move {
        let mut stream = watcher(bases, watcher::Config::default().labels(&selector))
            .applied_objects()
            .boxed();
        while let Some(Ok(b)) = stream.next().await {
            if let Some(sub) = b
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("apps.clusternet.io/subs.name"))
            {
                let _ = seen_tx.send((sub.clone(), Instant::now()));
            }
        }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    let mut pending = Vec::new();
    for i in 0..SUBSCRIPTIONS {
        tick.tick().await;
        let (subs, id) = (subs.clone(), id.to_string());
        let name = format!("{tag}{i:03}");
        pending.push(tokio::spawn(async move {
            let sub: Subscription = serde_json::from_value(json!({"apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Subscription",
                "metadata": {"name": name}, "spec": {"subscribers": [{"clusterAffinity": {"matchLabels": {"e2e": id}}}],
                "feeds": [{"apiVersion": "v1", "kind": "ConfigMap", "namespace": "bench-hints", "name": "cfg"}]}}))
            .expect("a Subscription");
            subs.create(&PostParams::default(), &sub).await.expect("creating a Subscription");
            (name, Instant::now())
        }));
    }
    let created: BTreeMap<String, Instant> = futures::future::join_all(pending)
        .await
        .into_iter()
        .filter_map(Result::ok)
        .collect();
    let mut counts: HashMap<String, usize> = HashMap::new();
    let mut done: Vec<Duration> = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    while done.len() < SUBSCRIPTIONS {
        let Ok(Some((name, at))) = tokio::time::timeout_at(deadline, seen_rx.recv()).await else {
            break;
        };
        let n = counts.entry(name.clone()).or_default();
        *n += 1;
        if *n == CHILDREN
            && let Some(t) = created.get(&name)
        {
            done.push(at.saturating_duration_since(*t));
        }
    }
    watch.abort();
    let _ = subs
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await;
    done.sort();
    done
}

#[tokio::main]
async fn main() {
    let env = TestEnv::get();
    env.install_crds();
    let parent = env.parent().await;
    let id = uid();
    let ns = TestNamespace::create(&parent, &env.parent_kubeconfig(), "hintbench").await;
    let manifests: Api<Manifest> = Api::namespaced(parent.clone(), "clusternet-reserved");
    let manifest: Manifest = serde_json::from_value(json!({
        "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Manifest",
        "metadata": {"name": format!("configmaps.bench-hints.cfg-{id}"), "labels": {
            "apps.clusternet.io/config.group": "", "apps.clusternet.io/config.version": "v1",
            "apps.clusternet.io/config.kind": "ConfigMap", "apps.clusternet.io/config.name": "cfg",
            "apps.clusternet.io/config.namespace": "bench-hints"}},
        "template": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg", "namespace": "bench-hints"}, "data": {"v": "1"}}
    }))
    .expect("a Manifest");
    let _ = manifests.create(&PostParams::default(), &manifest).await;

    let mut figures = Vec::new();
    let mut _clusters = Vec::new();
    for (n, split) in [false, true, false, true].into_iter().enumerate() {
        let roles = parent_roles(env, split, &format!("{id}-{n}"));
        if _clusters.is_empty() {
            // the agents register once, approved by the first phase's controller
            _clusters = register(env, &id, &[1, 2, 3], "Pull", &[]).await;
        }
        tokio::time::sleep(Duration::from_secs(4)).await;
        let lat = phase(&parent, &ns.name, &id, &format!("p{n}-")).await;
        figures.push((split, lat));
        drop(roles);
    }
    println!(
        "Subscription -> its {CHILDREN} Bases, {SUBSCRIPTIONS} Subscriptions at 10/s per run, runs interleaved"
    );
    println!("| parent roles | run | done | p50 | p90 | p99 |");
    println!("|---|---|---|---|---|---|");
    for (n, (split, lat)) in figures.iter().enumerate() {
        println!(
            "| {} | {} | {}/{SUBSCRIPTIONS} | {:.3} s | {:.3} s | {:.3} s |",
            if *split {
                "scheduler | controller (two processes)"
            } else {
                "scheduler,controller (one process)"
            },
            n + 1,
            lat.len(),
            percentile(lat, 0.5).as_secs_f64(),
            percentile(lat, 0.9).as_secs_f64(),
            percentile(lat, 0.99).as_secs_f64(),
        );
    }
    let _ = manifests
        .delete(
            &manifest.metadata.name.clone().unwrap_or_default(),
            &DeleteParams::default(),
        )
        .await;
}
