//! Failover and fail-back (#16) against real control planes: a parent and 3 children, Dividing 6
//! replicas static 1:1:1. Child1's API server is stopped (SIGSTOP, so it can come back): once its
//! Subscription's grace (`tolerationSeconds`) has passed, the other two run 3 and 3, and nothing
//! of child1 is deleted meanwhile. Resumed, and flapped (stopped and resumed again) inside the
//! stable period (`--cluster-failback-stable=20s` for the test controllers), nothing moves; once
//! it has been Ready for the stable period it gets its 2 back, make-before-break: the available
//! replicas across the children never drop below 6. Stopping two of three at once fails nothing
//! over and says why. One test in this binary: it stops shared API servers.

mod support;

use std::time::Duration;

use clusternet::apis::{Base, Subscription};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Event;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use serde_json::json;
use support::{Cluster, Resume, TestEnv, signal_child_apiserver, uid, wait_for};

async fn replicas(c: &Cluster, ns: &str) -> Result<i32, String> {
    Api::<Deployment>::namespaced(c.child.clone(), ns)
        .get("web")
        .await
        .map_err(|e| e.to_string())
        .map(|d| d.spec.and_then(|s| s.replicas).unwrap_or(0))
}

async fn available(c: &Cluster, ns: &str) -> Result<i32, String> {
    Api::<Deployment>::namespaced(c.child.clone(), ns)
        .get("web")
        .await
        .map_err(|e| e.to_string())
        .map(|d| d.status.and_then(|s| s.available_replicas).unwrap_or(0))
}

async fn bound(subs: &Api<Subscription>) -> Vec<String> {
    subs.get("divided")
        .await
        .ok()
        .and_then(|s| s.status)
        .map(|s| s.binding_clusters)
        .unwrap_or_default()
}

async fn events_of(parent: &kube::Client, ns: &str, reason: &str) -> Vec<String> {
    Api::<Event>::namespaced(parent.clone(), ns)
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .map(|e| e.message.unwrap_or_default())
        .collect()
}

async fn wait_split(clusters: &[&Cluster], ns: &str, want: &[i32], what: &str, within: Duration) {
    wait_for(what, within, || async {
        let mut got = Vec::new();
        for c in clusters {
            got.push(replicas(c, ns).await?);
        }
        if got == want {
            Ok(())
        } else {
            Err(format!("{got:?}"))
        }
    })
    .await;
}

#[tokio::test]
async fn a_lost_child_fails_over_after_its_grace_and_two_lost_at_once_fail_nothing_over() {
    let env = TestEnv::get();
    env.with_controller();
    let parent = env.parent().await;
    let id = uid();
    let support::Divided {
        clusters,
        appns,
        ns,
        subs,
    } = support::divided_over_three(env, &id, "failover", 5).await;
    let all: Vec<&Cluster> = clusters.iter().collect();
    wait_split(&all, &appns, &[2, 2, 2], "2/2/2", Duration::from_secs(90)).await;
    let bases: Api<Base> = Api::namespaced(parent.clone(), &clusters[0].dedicated);
    let base_uid = bases
        .list(&ListParams::default())
        .await
        .expect("Bases")
        .items
        .first()
        .and_then(|b| b.uid())
        .expect("child1's Base");

    // child1 is lost: after the grace the others carry its share, and child1's Base stays
    signal_child_apiserver(env, 1, "-STOP");
    let resume = Resume(env, vec![1]);
    wait_split(
        &all[1..],
        &appns,
        &[3, 3],
        "3/3 on the others",
        Duration::from_secs(120),
    )
    .await;
    let still: Vec<String> = bases
        .list(&ListParams::default())
        .await
        .expect("Bases")
        .items
        .iter()
        .filter(|b| b.metadata.deletion_timestamp.is_none())
        .filter_map(|b| b.uid())
        .collect();
    assert_eq!(
        still,
        std::slice::from_ref(&base_uid),
        "the lost cluster's Base was kept"
    );
    wait_for("a FailedOver event", Duration::from_secs(15), || async {
        let events = Api::<Event>::namespaced(parent.clone(), &ns.name)
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?;
        events
            .items
            .iter()
            .any(|e| e.reason.as_deref() == Some("FailedOver"))
            .then_some(())
            .ok_or_else(|| "none yet".to_string())
    })
    .await;

    wait_for(
        "3/3 available on the others",
        Duration::from_secs(90),
        || async {
            let got = (
                available(&clusters[1], &appns).await?,
                available(&clusters[2], &appns).await?,
            );
            (got == (3, 3)).then_some(()).ok_or(format!("{got:?}"))
        },
    )
    .await;
    let child1 = format!("{}/{}", clusters[0].dedicated, clusters[0].name);

    // back, then flapping inside the stable period (each stop outlasts the agent's 3 s health
    // window and three 2 s rounds, so child1 turns not ready and Ready again): nothing moves
    let not_bound_for = |secs: u64| {
        let subs = subs.clone();
        let child1 = child1.clone();
        async move {
            let until = tokio::time::Instant::now() + Duration::from_secs(secs);
            while tokio::time::Instant::now() < until {
                assert!(
                    !bound(&subs).await.contains(&child1),
                    "child1 was bound again before it had been Ready for the stable period"
                );
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    };
    drop(resume);
    not_bound_for(8).await;
    for _ in 0..2 {
        signal_child_apiserver(env, 1, "-STOP");
        let resume = Resume(env, vec![1]);
        not_bound_for(12).await;
        drop(resume);
        not_bound_for(8).await;
    }
    // the stable period (20 s) counts from the last return
    not_bound_for(6).await;
    assert_eq!(
        (
            replicas(&clusters[1], &appns).await,
            replicas(&clusters[2], &appns).await
        ),
        (Ok(3), Ok(3)),
        "no bounce while child1 flapped"
    );
    assert!(events_of(&parent, &ns.name, "FailedBack").await.is_empty());

    // stable for 20 s: child1 gets its share back, from the same objects, make-before-break:
    // the replicas available across the children never drop below 6
    let lowest = std::cell::Cell::new(i32::MAX);
    wait_for(
        "2/2/2 available after child1 is back",
        Duration::from_secs(150),
        || async {
            let mut got = Vec::new();
            for c in &all {
                got.push(available(c, &appns).await.unwrap_or(0));
            }
            let sum: i32 = got.iter().sum();
            lowest.set(lowest.get().min(sum));
            let spec = (
                replicas(all[0], &appns).await?,
                replicas(all[1], &appns).await?,
                replicas(all[2], &appns).await?,
            );
            (got == [2, 2, 2] && spec == (2, 2, 2))
                .then_some(())
                .ok_or(format!("available {got:?}, spec {spec:?}"))
        },
    )
    .await;
    assert!(
        lowest.get() >= 6,
        "the fleet was short during fail-back: {} available",
        lowest.get()
    );
    let base_after: Vec<String> = bases
        .list(&ListParams::default())
        .await
        .expect("Bases")
        .items
        .iter()
        .filter_map(|b| b.uid())
        .collect();
    assert_eq!(
        base_after,
        [base_uid],
        "child1's objects were not recreated"
    );
    let back = events_of(&parent, &ns.name, "FailedBack").await;
    assert_eq!(back.len(), 1, "one fail-back: {back:?}");

    // two of three lost at once: nothing fails over, and the Subscription says why. "At once"
    // is within the grace: the two are seen lost up to a heartbeat apart, so the grace is
    // lengthened first (a 5 s grace would fail the first over before the second is seen lost)
    subs.patch(
        "divided",
        &PatchParams::default(),
        &Patch::Merge(
            json!({"spec": {"clusterTolerations": [{"key": "clusters.clusternet.io/unschedulable",
            "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 45}]}}),
        ),
    )
    .await
    .expect("lengthening the grace");
    signal_child_apiserver(env, 1, "-STOP");
    signal_child_apiserver(env, 2, "-STOP");
    let resume = Resume(env, vec![1, 2]);
    wait_for(
        "a FailoverSuppressed event",
        Duration::from_secs(120),
        || async {
            let events = Api::<Event>::namespaced(parent.clone(), &ns.name)
                .list(&ListParams::default())
                .await
                .map_err(|e| e.to_string())?;
            events
                .items
                .iter()
                .find(|e| e.reason.as_deref() == Some("FailoverSuppressed"))
                .and_then(|e| e.message.clone())
                .ok_or_else(|| "none yet".to_string())
        },
    )
    .await;
    assert_eq!(
        replicas(&clusters[2], &appns).await,
        Ok(2),
        "nothing moved to the one left"
    );
    drop(resume);
    wait_split(
        &all,
        &appns,
        &[2, 2, 2],
        "2/2/2 once both are back",
        Duration::from_secs(120),
    )
    .await;
    subs.delete("divided", &DeleteParams::default())
        .await
        .expect("deleting the Subscription");
    for c in &clusters {
        support::wait_app_removed(&c.child, &appns).await;
    }
}
