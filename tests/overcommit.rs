//! No over-commit (#16, upstream #345) against real control planes: Dynamic-dividing Subscriptions
//! of 10 replicas each, created back to back, against two children with room for 60 and 40
//! replicas. The room is an extended resource (`clusternet.test/slots`) advertised on the
//! children's fake nodes, so nothing else running there counts. Twelve Subscriptions, two more
//! than there is room for: each child's predictor, not yet seeing what the ones before were
//! given, offers every one of them the same free room, which without the scheduler's holds puts
//! 72 and 48 replicas on the two. Here no child is ever assigned more than its room, the room is
//! filled (60 and 40 running), and no pod is left Pending for lack of room.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use clusternet::apis::Subscription;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use support::{Cluster, TestEnv, TestNamespace, create_manifests, uid, wait_for};

const SLOTS: &str = "clusternet.test/slots";

/// Sets (or, with `None`, removes) the slots every node of child `i` advertises.
async fn advertise(env: &TestEnv, i: usize, per_node: Option<u32>) {
    let child = env.child(i).await;
    let nodes: Api<Node> = Api::all(child);
    let path = SLOTS.replace('/', "~1");
    for n in nodes
        .list(&ListParams::default())
        .await
        .expect("nodes")
        .items
    {
        let name = n.metadata.name.clone().unwrap_or_default();
        let has = n
            .status
            .as_ref()
            .and_then(|s| s.capacity.as_ref())
            .is_some_and(|c| c.contains_key(SLOTS));
        let ops = match per_node {
            Some(v) => json!([
                {"op": "add", "path": format!("/status/capacity/{path}"), "value": v.to_string()},
                {"op": "add", "path": format!("/status/allocatable/{path}"), "value": v.to_string()}]),
            None if has => json!([
                {"op": "remove", "path": format!("/status/capacity/{path}")},
                {"op": "remove", "path": format!("/status/allocatable/{path}")}]),
            None => continue,
        };
        let patch: json_patch::Patch = serde_json::from_value(ops).expect("a JSON patch");
        nodes
            .patch_status(&name, &PatchParams::default(), &Patch::Json::<()>(patch))
            .await
            .expect("advertising the slots");
    }
}

/// Replicas assigned to each cluster over all Subscriptions in `subs`.
async fn assigned(subs: &Api<Subscription>) -> Result<(BTreeMap<String, i32>, Vec<i32>), String> {
    let mut per_cluster = BTreeMap::new();
    let mut per_sub = Vec::new();
    for s in subs
        .list(&ListParams::default())
        .await
        .map_err(|e| e.to_string())?
        .items
    {
        let st = s.status.unwrap_or_default();
        let mut total = 0;
        for (feed, list) in &st.replicas {
            if !feed.contains("/Deployment/") {
                continue;
            }
            for (c, r) in st.binding_clusters.iter().zip(list) {
                *per_cluster.entry(c.clone()).or_insert(0) += r;
                total += r;
            }
        }
        per_sub.push(total);
    }
    Ok((per_cluster, per_sub))
}

/// (available replicas of every Deployment, pods still Pending) in `appns` of `c`.
async fn running(c: &Cluster, appns: &str) -> Result<(i32, usize), String> {
    let deployments = Api::<Deployment>::namespaced(c.child.clone(), appns)
        .list(&ListParams::default())
        .await
        .map_err(|e| e.to_string())?;
    let available = deployments
        .items
        .iter()
        .filter_map(|d| d.status.as_ref()?.available_replicas)
        .sum();
    let pending = Api::<Pod>::namespaced(c.child.clone(), appns)
        .list(&ListParams::default())
        .await
        .map_err(|e| e.to_string())?
        .items
        .iter()
        .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Pending"))
        .count();
    Ok((available, pending))
}

#[tokio::test]
async fn dynamic_subscriptions_back_to_back_never_overcommit_a_child() {
    let env = TestEnv::get();
    env.with_controller();
    let parent = env.parent().await;
    let id = uid();
    // room: 2 nodes x 30 slots in child2, 2 x 20 in child3
    advertise(env, 2, Some(30)).await;
    advertise(env, 3, Some(20)).await;
    let (clusters, _) = support::register_with_predictors(env, &id, &[2, 3], "room", true).await;
    let appns = format!("room-{id}");
    let namespace = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": appns}});
    let deployments: Vec<Value> = (0..12)
        .map(|k| {
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": format!("web{k}"), "namespace": appns},
                "spec": {"replicas": 10, "selector": {"matchLabels": {"app": format!("web{k}")}},
                    "template": {"metadata": {"labels": {"app": format!("web{k}")}},
                        "spec": {"containers": [{"name": "c", "image": "nginx:1.27", "resources": {
                            "requests": {SLOTS: "1"}, "limits": {SLOTS: "1"}}}]}}}})
        })
        .collect();
    let mut objects = vec![namespace.clone()];
    objects.extend(deployments.iter().cloned());
    create_manifests(&parent, &objects).await;
    let ns = TestNamespace::create(&parent, &env.parent_kubeconfig(), "room").await;
    let subs: Api<Subscription> = Api::namespaced(parent.clone(), &ns.name);
    // back to back: none waits for the one before to run; 400 ms apart, so that the children's
    // predictors see the first ones' pods while the holds still count them (as on a slow
    // machine), and the last ones must still find the room that is left
    for (k, d) in deployments.iter().enumerate() {
        if k > 0 {
            tokio::time::sleep(Duration::from_millis(400)).await;
        }
        let sub: Subscription = serde_json::from_value(json!({
            "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Subscription",
            "metadata": {"name": format!("web{k}")},
            "spec": {"schedulingStrategy": "Dividing",
                "dividingScheduling": {"type": "Dynamic", "dynamicDividing": {"strategy": "Spread"}},
                "subscribers": [{"clusterAffinity": {"matchLabels": {"room": id}}}],
                "feeds": [support::feed_of(&namespace), support::feed_of(d)]}}))
        .expect("a Subscription");
        subs.create(&PostParams::default(), &sub)
            .await
            .expect("creating a Subscription");
    }
    let room: BTreeMap<String, i32> = [
        (
            format!("{}/{}", clusters[0].dedicated, clusters[0].name),
            60,
        ),
        (
            format!("{}/{}", clusters[1].dedicated, clusters[1].name),
            40,
        ),
    ]
    .into();
    let worst = std::cell::RefCell::new(BTreeMap::<String, i32>::new());
    wait_for("the room filled", Duration::from_secs(180), || async {
        let (per_cluster, per_sub) = assigned(&subs).await?;
        for (c, n) in &per_cluster {
            let mut w = worst.borrow_mut();
            let e = w.entry(c.clone()).or_insert(0);
            *e = (*e).max(*n);
        }
        (per_sub.len() == 12 && per_sub.iter().sum::<i32>() == 100)
            .then_some(())
            .ok_or(format!(
                "assigned {per_cluster:?}, per Subscription {per_sub:?}"
            ))
    })
    .await;
    for (c, want) in clusters.iter().zip([60, 40]) {
        wait_for(
            "every replica running, none Pending",
            Duration::from_secs(120),
            || async {
                // the assignments keep being watched: a late Subscription must not over-place
                let (per_cluster, _) = assigned(&subs).await?;
                for (c, n) in &per_cluster {
                    let mut w = worst.borrow_mut();
                    let e = w.entry(c.clone()).or_insert(0);
                    *e = (*e).max(*n);
                }
                let got = running(c, &appns).await?;
                (got == (want, 0))
                    .then_some(())
                    .ok_or(format!("(available, pending) {got:?}"))
            },
        )
        .await;
    }
    // and a while longer: holds released, the two left over are still given no room
    tokio::time::sleep(Duration::from_secs(12)).await;
    let (per_cluster, per_sub) = assigned(&subs).await.expect("the bindings");
    assert_eq!(
        per_sub.iter().sum::<i32>(),
        100,
        "{per_cluster:?} {per_sub:?}"
    );
    for (c, n) in per_cluster {
        let mut w = worst.borrow_mut();
        let e = w.entry(c).or_insert(0);
        *e = (*e).max(n);
    }
    for (c, most) in worst.borrow().iter() {
        assert!(
            most <= &room[c],
            "{c} was assigned {most} replicas, it has room for {}",
            room[c]
        );
    }
    for k in 0..12 {
        subs.delete(&format!("web{k}"), &DeleteParams::default())
            .await
            .expect("deleting a Subscription");
    }
    for c in &clusters {
        wait_for(
            "the apps removed from the child",
            Duration::from_secs(90),
            || async {
                let left = Api::<Deployment>::namespaced(c.child.clone(), &appns)
                    .list(&ListParams::default())
                    .await
                    .map_err(|e| e.to_string())?
                    .items
                    .len();
                (left == 0).then_some(()).ok_or(format!("{left} left"))
            },
        )
        .await;
    }
    advertise(env, 2, None).await;
    advertise(env, 3, None).await;
}
