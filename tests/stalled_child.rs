//! A child whose API server stalls (#44), against real control planes: the agent's Lease lives in
//! that API server, yet the agent keeps heartbeating and its tunnel up, and says within a status
//! period why the child is not ready (`ChildAPIServerUnreachable`) instead of going silent; and an
//! agent that reports more often than it collects (`--cluster-status-update-frequency=5s` with
//! the default 20 s collect frequency) heartbeats at the period it advertises, so a cluster back
//! from a stall stays Ready and gets its share back after the stable period, make-before-break.
//!
//! The tests stop a shared child API server (SIGSTOP, resumed however the test ends), so they run
//! one at a time; the controller of this binary waits 40 s of readiness before a fail-back.

mod support;

use std::time::{Duration, Instant};

use clusternet::apis::Subscription;
use k8s_openapi::api::apps::v1::Deployment;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;
use support::{
    Cluster, Resume, TestEnv, TestNamespace, create_manifests, register_with,
    signal_child_apiserver, uid, wait_for,
};

/// One stalled API server at a time.
static STALL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const FAILBACK_STABLE: &str = "--cluster-failback-stable=40s";

/// Status and reason of the cluster's Ready condition, and when its agent last reported.
async fn ready_of(parent: &kube::Client, c: &Cluster) -> (String, String, Option<Instant>) {
    let mc = support::managed_cluster(parent, c).await;
    let status = mc.status.unwrap_or_default();
    let age = status.last_observed_time.as_ref().map(|t| {
        let secs = k8s_openapi::jiff::Timestamp::now()
            .duration_since(t.0)
            .as_secs_f64()
            .max(0.0);
        Instant::now() - Duration::from_secs_f64(secs)
    });
    let (s, r) = status
        .condition("Ready")
        .map(|c| (c.status.clone(), c.reason.clone()))
        .unwrap_or_default();
    (s, r, age)
}

async fn bound(subs: &Api<Subscription>, name: &str) -> Vec<String> {
    subs.get(name)
        .await
        .ok()
        .and_then(|s| s.status)
        .map(|s| s.binding_clusters)
        .unwrap_or_default()
}

async fn deployment(c: &Cluster, ns: &str) -> Result<Deployment, String> {
    Api::<Deployment>::namespaced(c.child.clone(), ns)
        .get("web")
        .await
        .map_err(|e| e.to_string())
}

#[tokio::test]
async fn a_stalled_child_is_reported_at_once_while_heartbeat_and_tunnel_go_on() {
    let _one = STALL.lock().await;
    let env = TestEnv::get();
    let hub = env.with_hub();
    env.with_controller_args(&[FAILBACK_STABLE]);
    let parent = env.parent().await;
    let id = uid();
    // the default collect frequency: the report must not wait for a collection
    let clusters = register_with(
        env,
        &id,
        &[1],
        "Pull",
        &[],
        &[
            "--cluster-status-update-frequency=5s",
            "--cluster-status-collect-frequency=20s",
        ],
    )
    .await;
    let c = &clusters[0];
    let appns = format!("stall-{id}");
    let objects = vec![
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": appns}}),
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": appns},
               "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                        "template": {"metadata": {"labels": {"app": "web"}},
                                     "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]}}}}),
    ];
    let manifests = create_manifests(&parent, &objects).await;
    let ns = TestNamespace::create(&parent, &env.parent_kubeconfig(), "stall").await;
    let subs: Api<Subscription> = Api::namespaced(parent.clone(), &ns.name);
    let sub: Subscription = serde_json::from_value(json!({
        "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Subscription", "metadata": {"name": "web"},
        "spec": {"subscribers": [{"clusterAffinity": {"matchLabels": {"e2e": id}}}],
            "clusterTolerations": [{"key": "clusters.clusternet.io/unschedulable", "operator": "Exists",
                "effect": "NoSchedule", "tolerationSeconds": 120}],
            "feeds": objects.iter().map(support::feed_of).collect::<Vec<_>>()}}))
    .expect("a Subscription");
    subs.create(&PostParams::default(), &sub)
        .await
        .expect("creating the Subscription");
    let before = wait_for("web in the child", Duration::from_secs(60), || {
        deployment(c, &appns)
    })
    .await;
    let binding = bound(&subs, "web").await;
    assert_eq!(binding.len(), 1, "{binding:?}");
    let closed = || async {
        hub.metric("clusternet_socket_connections_duration_seconds_count")
            .await
            .unwrap_or(0.0)
    };
    // only this test's agent connected (the other test's agents are gone), so the closed count
    // below is this tunnel's
    wait_for(
        "the agent's tunnel alone",
        Duration::from_secs(30),
        || async {
            match hub.metric("clusternet_socket_connections_count").await {
                Some(1.0) => Ok(()),
                other => Err(format!("{other:?} tunnels")),
            }
        },
    )
    .await;
    let closed_before = closed().await;

    // stalled for longer than the agent's Lease (4 s): the reason within a status period
    signal_child_apiserver(env, 1, "-STOP");
    let resume = Resume(env, vec![1]);
    let stopped = Instant::now();
    wait_for(
        "Ready=False ChildAPIServerUnreachable",
        Duration::from_secs(30),
        || async {
            match ready_of(&parent, c).await {
                (s, r, _) if s == "False" && r == "ChildAPIServerUnreachable" => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    let reported_after = stopped.elapsed();
    // the agent's renew deadline (3 s), a probe, and the write; a status period is 5 s
    assert!(
        reported_after < Duration::from_secs(5 + 3 + 2),
        "the stall was reported only after {reported_after:?}"
    );
    // twenty seconds of stall: heartbeats go on every period, the cluster never turns Unknown,
    // the tunnel stays and nothing moves within the grace
    let until = Instant::now() + Duration::from_secs(20);
    while Instant::now() < until {
        let (s, r, seen) = ready_of(&parent, c).await;
        assert_eq!(
            (s.as_str(), r.as_str()),
            ("False", "ChildAPIServerUnreachable"),
            "while the child's API server is stopped"
        );
        let age = seen.map(|t| t.elapsed()).unwrap_or(Duration::MAX);
        assert!(
            age < Duration::from_secs(5 + 4),
            "no heartbeat for {age:?} while the child's API server is stopped"
        );
        assert_eq!(bound(&subs, "web").await, binding, "moved within the grace");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    assert_eq!(
        closed().await,
        closed_before,
        "a tunnel closed during the stall"
    );

    // back: Ready within seconds, the same Deployment, leadership kept throughout
    drop(resume);
    let resumed = Instant::now();
    wait_for("Ready again", Duration::from_secs(30), || async {
        match ready_of(&parent, c).await {
            (s, _, _) if s == "True" => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let back_after = resumed.elapsed();
    assert!(
        back_after < Duration::from_secs(10),
        "Ready only {back_after:?} after the child's API server resumed"
    );
    let after = deployment(c, &appns).await.expect("web in the child");
    assert_eq!(
        (after.uid(), after.metadata.generation),
        (before.uid(), before.metadata.generation),
        "the workload was touched"
    );
    let logs = c.agent_logs();
    assert!(
        logs.contains("ChildAPIServerUnreachable") || logs.contains("does not answer"),
        "the agent did not say why"
    );
    assert!(
        !logs.contains("stopped leader work") && !logs.contains("tunnel to parent cluster closed"),
        "the agent gave up its work during the stall"
    );
    subs.delete("web", &DeleteParams::default())
        .await
        .expect("deleting the Subscription");
    support::wait_app_removed(&c.child, &appns).await;
    let reserved: Api<clusternet::apis::Manifest> =
        Api::namespaced(parent.clone(), "clusternet-reserved");
    for m in manifests {
        let _ = reserved.delete(&m, &DeleteParams::default()).await;
    }
}

/// Issue #44's fail-back case: Static 1:1:1 over 10 replicas, a 10 s grace, fail-back after 40 s
/// of readiness, agents reporting every 5 s and collecting every 20 s (the defaults' collect
/// frequency). Child1 is stopped until its share fails over, then resumed: its Ready condition
/// never flaps afterwards, and after the stable period the split is back to 1:1:1 without the
/// available replicas ever falling below 10.
#[tokio::test]
async fn a_recovered_cluster_stays_ready_and_gets_its_share_back_after_the_stable_period() {
    let _one = STALL.lock().await;
    let env = TestEnv::get();
    env.with_controller_args(&[FAILBACK_STABLE]);
    let parent = env.parent().await;
    let id = uid();
    let support::Divided {
        clusters,
        appns,
        ns: _ns,
        subs,
    } = support::divided_over_three_with(
        env,
        &id,
        "failback",
        10,
        10,
        &[
            "--cluster-status-update-frequency=5s",
            "--cluster-status-collect-frequency=20s",
        ],
    )
    .await;
    let replicas = |c: &Cluster| {
        let ns = appns.clone();
        let child = c.child.clone();
        async move {
            Api::<Deployment>::namespaced(child, &ns)
                .get("web")
                .await
                .map(|d| {
                    (
                        d.spec.and_then(|s| s.replicas).unwrap_or(0),
                        d.status.and_then(|s| s.available_replicas).unwrap_or(0),
                    )
                })
                .map_err(|e| e.to_string())
        }
    };
    let split = || async {
        let mut spec = Vec::new();
        let mut available = 0;
        for c in &clusters {
            let (s, a) = replicas(c).await.unwrap_or((0, 0));
            spec.push(s);
            available += a;
        }
        (spec, available)
    };
    let one_to_one = |spec: &[i32]| {
        let mut sorted = spec.to_vec();
        sorted.sort_unstable();
        sorted == [3, 3, 4]
    };
    wait_for(
        "1:1:1 over 10, all available",
        Duration::from_secs(120),
        || async {
            let (spec, available) = split().await;
            (one_to_one(&spec) && available == 10)
                .then_some(())
                .ok_or(format!("{spec:?}, {available} available"))
        },
    )
    .await;
    let child1 = format!("{}/{}", clusters[0].dedicated, clusters[0].name);

    // child1 stopped until its share has moved to the others
    signal_child_apiserver(env, 1, "-STOP");
    let resume = Resume(env, vec![1]);
    wait_for(
        "5/5 available on the others",
        Duration::from_secs(120),
        || async {
            let mut got = Vec::new();
            for c in &clusters[1..] {
                got.push(replicas(c).await?);
            }
            (got == [(5, 5), (5, 5)])
                .then_some(())
                .ok_or(format!("{got:?}"))
        },
    )
    .await;
    assert!(
        !bound(&subs, "divided").await.contains(&child1),
        "child1 still bound after its share moved"
    );
    drop(resume);
    let resumed = Instant::now();

    // from its first Ready on, child1 stays Ready: no Unknown and no False, heartbeats every
    // period; the fleet never has fewer than 10 available; after the stable period, 1:1:1 again
    wait_for("child1 Ready again", Duration::from_secs(30), || async {
        match ready_of(&parent, &clusters[0]).await {
            (s, _, _) if s == "True" => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let mut lowest = i32::MAX;
    let mut back_at = None;
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let (s, r, seen) = ready_of(&parent, &clusters[0]).await;
        assert_eq!(
            s,
            "True",
            "child1 flapped to {s} ({r}) {:?} after it resumed",
            resumed.elapsed()
        );
        let age = seen.map(|t| t.elapsed()).unwrap_or(Duration::MAX);
        assert!(
            age < Duration::from_secs(5 + 5),
            "child1's heartbeat is {age:?} old: it does not report every 5 s"
        );
        let (spec, available) = split().await;
        lowest = lowest.min(available);
        if one_to_one(&spec) && available == 10 && back_at.is_none() {
            back_at = Some(resumed.elapsed());
        }
        // ten more seconds of watching once it is back: nothing moves again
        if back_at.is_some_and(|t| resumed.elapsed() > t + Duration::from_secs(10)) {
            assert!(
                one_to_one(&spec),
                "moved again after the fail-back: {spec:?}"
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not back to 1:1:1 within 180 s of the resume: {spec:?}, {available} available"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    assert!(
        lowest >= 10,
        "the fleet was short during the fail-back: {lowest} available"
    );
    let back_at = back_at.unwrap_or_default();
    assert!(
        back_at >= Duration::from_secs(40),
        "child1 got its share back {back_at:?} after it resumed, before the stable period"
    );
    assert!(
        bound(&subs, "divided").await.contains(&child1),
        "child1 not bound again"
    );
    subs.delete("divided", &DeleteParams::default())
        .await
        .expect("deleting the Subscription");
    for c in &clusters {
        support::wait_app_removed(&c.child, &appns).await;
    }
}
