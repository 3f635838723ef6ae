//! Scheduling throughput in process: 1,000 Subscriptions (half Replication, half Static dividing
//! over 6 replicas) against 10, 100 and 1,000 ManagedClusters, through the real framework with
//! the default profile. Prints decisions per second and p50/p99 latency per decision: decisions
//! that leave the status as it is (one cycle), and decisions that change it, which the live
//! scheduler explains a second time to keep in `status.lastDecision` (two cycles, one recording).

use std::sync::Arc;
use std::time::{Duration, Instant};

use clusternet::apis::placement::Explanation;
use clusternet::apis::{FeedInventory, ManagedCluster, ReplicaRequirements, Subscription};
use clusternet::scheduler::algorithm::schedule_explained;
use clusternet::scheduler::framework::{BindOutcome, CycleState};
use clusternet::scheduler::{FilterOffset, PredictorClient, Profiles, Registry};
use futures::future::BoxFuture;
use serde_json::json;

struct NoPredictor;

impl PredictorClient for NoPredictor {
    fn predict<'a>(
        &'a self,
        _: &'a ManagedCluster,
        _: &'a ReplicaRequirements,
    ) -> BoxFuture<'a, Result<i32, String>> {
        Box::pin(async { Err("not used: this benchmark divides statically".to_string()) })
    }
}

fn cluster(i: usize) -> ManagedCluster {
    serde_json::from_value(json!({
        "apiVersion": "clusters.clusternet.io/v1beta1", "kind": "ManagedCluster",
        "metadata": {"name": format!("c{i}"), "namespace": format!("clusternet-{i:05}"),
                     "labels": {"env": "bench", "zone": format!("z{}", i % 3)}},
        "spec": {"clusterId": format!("00000000-0000-4000-8000-{i:012}"), "syncMode": "Pull",
                 "taints": if i % 10 == 9 { json!([{"key": "busy", "value": "x", "effect": "NoSchedule"}]) } else { json!([]) }},
        "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "r", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
    }))
    .expect("a cluster")
}

fn subscription(i: usize) -> (Subscription, Option<FeedInventory>) {
    let feed = json!({"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "bench", "name": format!("app{i}")});
    if i.is_multiple_of(2) {
        let sub = serde_json::from_value(json!({"apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Subscription",
            "metadata": {"name": format!("s{i}"), "namespace": "bench"},
            "spec": {"schedulerName": "default", "schedulingStrategy": "Replication",
                     "subscribers": [{"clusterAffinity": {"matchLabels": {"env": "bench"}}}], "feeds": [feed]}}))
        .expect("a Subscription");
        (sub, None)
    } else {
        let sub = serde_json::from_value(json!({"apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Subscription",
            "metadata": {"name": format!("s{i}"), "namespace": "bench"},
            "spec": {"schedulerName": "default", "schedulingStrategy": "Dividing", "dividingScheduling": {"type": "Static"},
                     "subscribers": [{"clusterAffinity": {"matchLabels": {"zone": "z0"}}, "weight": 1},
                                     {"clusterAffinity": {"matchLabels": {"zone": "z1"}}, "weight": 2}],
                     "feeds": [feed.clone()]}}))
        .expect("a Subscription");
        let inv = serde_json::from_value(json!({"apiVersion": "apps.clusternet.io/v1alpha1", "kind": "FeedInventory",
            "metadata": {"name": format!("s{i}"), "namespace": "bench"},
            "spec": {"feeds": [{"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "bench", "name": format!("app{i}"),
                                "desiredReplicas": 6, "replicaJsonPath": "/spec/replicas"}]}}))
        .expect("an inventory");
        (sub, Some(inv))
    }
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    sorted
        .get(((sorted.len() as f64 * p).ceil() as usize).saturating_sub(1))
        .copied()
        .unwrap_or_default()
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let registry = Registry::in_tree(Arc::new(NoPredictor));
    let (_, profiles) = Profiles::from_yaml(None, &registry, false).expect("the default profile");
    let subs: Vec<_> = (0..1000).map(subscription).collect();
    println!("| clusters | decision | decisions/s | p50 | p99 |");
    println!("|---|---|---|---|---|");
    for (n, record) in [10, 100, 1000]
        .into_iter()
        .flat_map(|n| [(n, true), (n, false)])
    {
        let clusters: Vec<ManagedCluster> = (0..n).map(cluster).collect();
        let mut offset = FilterOffset::default();
        let mut lat = Vec::with_capacity(subs.len());
        let start = Instant::now();
        for (sub, inv) in &subs {
            let t = Instant::now();
            let fwk = profiles.for_subscription(sub).expect("a profile");
            let state = CycleState::new();
            let before = offset;
            let result =
                schedule_explained(fwk, &state, &mut offset, sub, &clusters, inv.as_ref(), None)
                    .await
                    .expect("schedulable");
            if record {
                let mut explanation = Explanation::default();
                let mut again = before;
                let _ = schedule_explained(
                    fwk,
                    &CycleState::new(),
                    &mut again,
                    sub,
                    &clusters,
                    inv.as_ref(),
                    Some(&mut explanation),
                )
                .await;
            }
            match fwk
                .run_bind(&state, sub, &result.suggested)
                .await
                .expect("bind")
            {
                BindOutcome::PatchStatus(s) => assert!(!s.binding_clusters.is_empty()),
                BindOutcome::Bound => {}
            }
            lat.push(t.elapsed());
        }
        let total = start.elapsed();
        lat.sort();
        println!(
            "| {n} | {} | {:.0} | {:.3} ms | {:.3} ms |",
            if record {
                "changes the status (explained again)"
            } else {
                "unchanged status"
            },
            subs.len() as f64 / total.as_secs_f64(),
            pct(&lat, 0.5).as_secs_f64() * 1e3,
            pct(&lat, 0.99).as_secs_f64() * 1e3
        );
    }
}
