//! The scheduler against real clusters (docs/spec/scheduler.md): which ManagedClusters a
//! Subscription binds, and how Dividing splits replicas, as written into `Subscription.status`.

mod support;

use std::time::Duration;

use clusternet::apis::{ManagedCluster, Manifest, Subscription};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use support::{Cluster, Clusternet, TestEnv, TestNamespace, register, uid, wait_for};

fn manifest(name: &str, ns: &str, replicas: i32, cpu: &str) -> Manifest {
    serde_json::from_value(json!({
        "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Manifest",
        "metadata": {"name": format!("deployments.{ns}.{name}"), "namespace": "clusternet-reserved", "labels": {
            "apps.clusternet.io/config.group": "apps", "apps.clusternet.io/config.version": "v1",
            "apps.clusternet.io/config.kind": "Deployment", "apps.clusternet.io/config.name": name,
            "apps.clusternet.io/config.namespace": ns}},
        "template": {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": ns},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [{"name": "c", "image": "nginx",
                    "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}}}]}}}}
    }))
    .expect("a Manifest")
}

async fn subscription(
    parent: &kube::Client,
    ns: &str,
    name: &str,
    spec: Value,
) -> Api<Subscription> {
    let api: Api<Subscription> = Api::namespaced(parent.clone(), ns);
    let sub: Subscription =
        serde_json::from_value(json!({"apiVersion": "apps.clusternet.io/v1alpha1",
        "kind": "Subscription", "metadata": {"name": name}, "spec": spec}))
        .expect("a Subscription");
    api.create(&PostParams::default(), &sub)
        .await
        .expect("creating the Subscription");
    api
}

fn binding_of(clusters: &[Cluster], status_binding: &[String]) -> Vec<String> {
    let mut names: Vec<String> = status_binding
        .iter()
        .filter_map(|b| {
            clusters
                .iter()
                .find(|c| b == &format!("{}/{}", c.dedicated, c.name))
                .map(|c| c.name.clone())
        })
        .collect();
    names.sort();
    names
}

async fn wait_binding(
    api: &Api<Subscription>,
    name: &str,
    clusters: &[Cluster],
    want: &[&str],
) -> Subscription {
    let mut want: Vec<String> = want.iter().map(|s| s.to_string()).collect();
    want.sort();
    wait_for(
        &format!("binding {want:?}"),
        Duration::from_secs(30),
        || async {
            let s = api.get(name).await.map_err(|e| e.to_string())?;
            let binding = s.status.clone().unwrap_or_default().binding_clusters;
            if binding_of(clusters, &binding) == want && binding.len() == want.len() {
                Ok(s)
            } else {
                Err(format!("{binding:?}"))
            }
        },
    )
    .await
}

#[tokio::test]
async fn replication_binds_every_match_and_drops_a_cluster_whose_labels_stop_matching() {
    let env = TestEnv::get();
    env.with_controller();
    let parent = env.parent().await;
    let id = uid();
    let clusters = register(env, &id, &[1, 2, 3], "Pull", &[]).await;
    let ns = TestNamespace::create(&parent, &env.parent_kubeconfig(), "sched").await;
    let api = subscription(&parent, &ns.name, "rep", json!({
        "subscribers": [{"clusterAffinity": {"matchLabels": {"e2e": id}}}],
        "feeds": [{"apiVersion": "v1", "kind": "ConfigMap", "namespace": ns.name, "name": "nothing"}]})).await;
    let names: Vec<&str> = clusters.iter().map(|c| c.name.as_str()).collect();
    let s = wait_binding(&api, "rep", &clusters, &names).await;
    let status = s.status.unwrap_or_default();
    assert!(status.replicas.is_empty(), "Replication writes no replicas");
    assert_eq!(status.desired_releases, 3);
    assert_ne!(status.spec_hash, 0);
    // relabel one cluster: it is dropped on the next scheduling
    Api::<ManagedCluster>::namespaced(parent.clone(), &clusters[1].dedicated)
        .patch(
            &clusters[1].name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"e2e": "elsewhere"}}})),
        )
        .await
        .expect("relabelling a cluster");
    wait_binding(&api, "rep", &clusters, &[names[0], names[2]]).await;
}

#[tokio::test]
async fn a_scheduler_told_not_to_record_decisions_binds_without_last_decision() {
    let env = TestEnv::get();
    env.with_controller();
    let parent = env.parent().await;
    let id = uid();
    let clusters = register(env, &id, &[1], "Pull", &[]).await;
    let ns = TestNamespace::create(&parent, &env.parent_kubeconfig(), "norecord").await;
    // a scheduler of its own, for Subscriptions naming its profile only (the shared one, which
    // records, has no such profile and leaves them alone)
    let dir = tempfile::tempdir().expect("temp dir");
    let profile = format!("norecord-{id}");
    let config = dir.path().join("scheduler.yaml");
    std::fs::write(&config, format!("profiles:\n- schedulerName: {profile}\n"))
        .expect("writing the scheduler config");
    let _scheduler = Clusternet::start(
        "scheduler-norecord",
        &[
            "--role=scheduler",
            &format!("--kubeconfig={}", env.parent_kubeconfig().display()),
            &format!("--scheduler-config={}", config.display()),
            "--leader-elect=false",
            "--record-scheduling-decisions=false",
        ],
    );
    let feeds =
        json!([{"apiVersion": "v1", "kind": "ConfigMap", "namespace": ns.name, "name": "nothing"}]);
    let subscribers = json!([{"clusterAffinity": {"matchLabels": {"e2e": id}}}]);
    let plain = subscription(
        &parent,
        &ns.name,
        "plain",
        json!({
        "schedulerName": profile, "subscribers": subscribers, "feeds": feeds}),
    )
    .await;
    let recorded = subscription(
        &parent,
        &ns.name,
        "recorded",
        json!({
        "subscribers": subscribers, "feeds": feeds}),
    )
    .await;
    let name = [clusters[0].name.as_str()];
    let s = wait_binding(&plain, "plain", &clusters, &name).await;
    let status = s.status.unwrap_or_default();
    assert!(status.last_decision.is_none(), "{:?}", status.last_decision);
    assert_eq!(status.desired_releases, 1);
    // the same Subscription bound by the default (recording) scheduler says why
    let s = wait_binding(&recorded, "recorded", &clusters, &name).await;
    let decided = s
        .status
        .unwrap_or_default()
        .last_decision
        .expect("a decision record");
    assert_eq!(decided.selected.len(), 1, "{decided:?}");
}

#[tokio::test]
async fn a_tainted_cluster_gets_nothing_new() {
    let env = TestEnv::get();
    env.with_controller();
    let parent = env.parent().await;
    let id = uid();
    let clusters = register(env, &id, &[1, 2], "Pull", &[]).await;
    Api::<ManagedCluster>::namespaced(parent.clone(), &clusters[0].dedicated)
        .patch(
            &clusters[0].name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"taints": [{"key": "e2e/blocked", "value": "yes", "effect": "NoSchedule"}]}})),
        )
        .await
        .expect("tainting a cluster");
    let ns = TestNamespace::create(&parent, &env.parent_kubeconfig(), "sched").await;
    let api = subscription(&parent, &ns.name, "taint", json!({
        "subscribers": [{"clusterAffinity": {"matchLabels": {"e2e": id}}}],
        "feeds": [{"apiVersion": "v1", "kind": "ConfigMap", "namespace": ns.name, "name": "nothing"}]})).await;
    wait_binding(&api, "taint", &clusters, &[clusters[1].name.as_str()]).await;
    // and a Subscription that tolerates the taint may use it
    let api2 = subscription(&parent, &ns.name, "tolerant", json!({
        "clusterTolerations": [{"key": "e2e/blocked", "operator": "Exists"}],
        "subscribers": [{"clusterAffinity": {"matchLabels": {"e2e": id}}}],
        "feeds": [{"apiVersion": "v1", "kind": "ConfigMap", "namespace": ns.name, "name": "nothing"}]})).await;
    wait_binding(
        &api2,
        "tolerant",
        &clusters,
        &[clusters[0].name.as_str(), clusters[1].name.as_str()],
    )
    .await;
}

#[tokio::test]
async fn subgroups_pick_one_cluster_per_region() {
    let env = TestEnv::get();
    env.with_controller();
    let parent = env.parent().await;
    let id = uid();
    let clusters = register(
        env,
        &id,
        &[1, 2, 3, 1],
        "Pull",
        &["region=a", "region=a", "region=b", "region=b"],
    )
    .await;
    let ns = TestNamespace::create(&parent, &env.parent_kubeconfig(), "sched").await;
    let api = subscription(&parent, &ns.name, "groups", json!({
        "schedulingBySubGroup": true,
        "subscribers": [
            {"clusterAffinity": {"matchLabels": {"e2e": id, "region": "a"}}, "subGroupStrategy": {"minClusters": 1}},
            {"clusterAffinity": {"matchLabels": {"e2e": id, "region": "b"}}, "subGroupStrategy": {"minClusters": 1}}],
        "feeds": [{"apiVersion": "v1", "kind": "ConfigMap", "namespace": ns.name, "name": "nothing"}]})).await;
    let s = wait_for("two bound clusters", Duration::from_secs(30), || async {
        let s = api.get("groups").await.map_err(|e| e.to_string())?;
        let b = s.status.clone().unwrap_or_default().binding_clusters;
        if b.len() == 2 {
            Ok(b)
        } else {
            Err(format!("{b:?}"))
        }
    })
    .await;
    let regions: Vec<&str> = s
        .iter()
        .filter_map(|b| {
            clusters
                .iter()
                .position(|c| b == &format!("{}/{}", c.dedicated, c.name))
        })
        .map(|i| if i < 2 { "a" } else { "b" })
        .collect();
    assert_eq!(regions.len(), 2, "{s:?}");
    assert_ne!(regions[0], regions[1], "one per region: {s:?}");
}

#[tokio::test]
async fn dynamic_dividing_follows_the_childrens_free_capacity() {
    let env = TestEnv::get();
    env.with_controller();
    let parent = env.parent().await;
    let id = uid();
    // child1's nodes are mostly full: 6 of 8 CPUs requested on each node by ballast pods
    let _ballast = support::fill_child1(env).await;
    let (clusters, _) = support::register_with_predictors(env, &id, &[1, 3], "dyn", true).await;
    let appns = format!("dyn-{id}");
    support::ensure_namespace(&parent, "clusternet-reserved").await;
    let manifests: Api<Manifest> = Api::namespaced(parent.clone(), "clusternet-reserved");
    let m = manifest("web", &appns, 6, "1");
    manifests
        .create(&PostParams::default(), &m)
        .await
        .expect("creating the Manifest");
    let ns = TestNamespace::create(&parent, &env.parent_kubeconfig(), "sched").await;
    let api = subscription(&parent, &ns.name, "dynamic", json!({
        "schedulingStrategy": "Dividing",
        "dividingScheduling": {"type": "Dynamic", "dynamicDividing": {"strategy": "Spread"}},
        "subscribers": [{"clusterAffinity": {"matchLabels": {"dyn": id}}}],
        "feeds": [{"apiVersion": "apps/v1", "kind": "Deployment", "namespace": appns, "name": "web"}]})).await;
    let key = format!("apps/v1/Deployment/{appns}/web");
    let s = wait_for(
        "replicas divided by capacity",
        Duration::from_secs(40),
        || async {
            let s = api.get("dynamic").await.map_err(|e| e.to_string())?;
            let st = s.status.clone().unwrap_or_default();
            match st.replicas.get(&key) {
                Some(r) if r.iter().sum::<i32>() == 6 => Ok(st),
                other => Err(format!("{other:?} bound {:?}", st.binding_clusters)),
            }
        },
    )
    .await;
    let replicas = &s.replicas[&key];
    let pos = |c: &Cluster| {
        s.binding_clusters
            .iter()
            .position(|b| b == &format!("{}/{}", c.dedicated, c.name))
            .expect("bound")
    };
    let (busy, free) = (replicas[pos(&clusters[0])], replicas[pos(&clusters[1])]);
    // capacity 4 (child1: 2 nodes x 2 free CPUs) vs 16 (child3): 6 * 4/20 and 6 * 16/20
    assert_eq!((busy, free), (1, 5), "child1 is mostly full: {replicas:?}");
    let _ = manifests
        .delete(&m.name_any(), &DeleteParams::default())
        .await;
}

fn yaml_docs(text: &str) -> Vec<Value> {
    serde_yaml::Deserializer::from_str(text)
        .filter_map(|d| serde::Deserialize::deserialize(d).ok())
        .filter(|v: &Value| !v.is_null())
        .collect()
}

/// Labels (or unlabels, `value` None) the first `count` nodes of a child, as NFD's master would.
async fn label_nodes(child: &kube::Client, key: &str, value: Option<&str>, count: usize) {
    use k8s_openapi::api::core::v1::Node;
    let nodes = Api::<Node>::all(child.clone());
    let mut names: Vec<String> = nodes
        .list(&Default::default())
        .await
        .expect("listing nodes")
        .items
        .iter()
        .map(|n| n.name_any())
        .collect();
    names.sort();
    assert!(names.len() >= count, "the child has {} nodes", names.len());
    for n in names.iter().take(count) {
        nodes
            .patch(
                n,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": {key: value}}})),
            )
            .await
            .expect("labelling a node");
    }
}

/// Upstream's examples/scheduling-with-nfd day1 on real clusters: a `node.clusternet.io/` label
/// NFD put on every node of child1 is aggregated onto its ManagedCluster and the example's
/// Subscription lands only there; child2, with the label on one node of two (under the 0.8
/// threshold), gets neither; once child1's nodes lose it, so does its ManagedCluster and the
/// binding.
#[tokio::test]
async fn node_feature_labels_on_most_nodes_select_the_cluster() {
    use k8s_openapi::api::apps::v1::Deployment;
    let env = TestEnv::get();
    env.with_controller();
    let parent = env.parent().await;
    let id = uid();
    // the key is the example's, made unique: the children's nodes are shared with other tests
    let key = format!("node.clusternet.io/sample-key-{id}");
    let clusters = register(env, &id, &[1, 2], "Pull", &[]).await;
    let (child1, child2) = (&clusters[0].child, &clusters[1].child);
    label_nodes(child1, &key, Some("sample-value"), 2).await;
    label_nodes(child2, &key, Some("sample-value"), 1).await;
    let label_of = |c: &Cluster| {
        let api = Api::<ManagedCluster>::namespaced(parent.clone(), &c.dedicated);
        let (name, key) = (c.name.clone(), key.clone());
        async move {
            api.get(&name)
                .await
                .map(|mc| mc.labels().get(&key).cloned())
                .map_err(|e| e.to_string())
        }
    };
    wait_for(
        "the label aggregated onto child1's ManagedCluster",
        Duration::from_secs(40),
        || async {
            match label_of(&clusters[0]).await? {
                Some(v) if v == "sample-value" => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;

    let app_ns = format!("nfd-app-{id}");
    let objects: Vec<Value> = yaml_docs(
        &support::scenario("scheduling-with-nfd/day1/nginx-deployment.yaml")
            .replace("nfd-app-ns", &app_ns),
    );
    support::create_manifests(&parent, &objects).await;
    let ns = TestNamespace::create(&parent, &env.parent_kubeconfig(), "nfd").await;
    let mut sub = yaml_docs(
        &support::scenario("scheduling-with-nfd/day1/subscription.yaml")
            .replace("node.clusternet.io/sample-key", &key)
            .replace("nfd-app-ns", &app_ns),
    )
    .remove(0);
    sub["metadata"]["namespace"] = json!(ns.name);
    // only this test's clusters: others in the same children see the same nodes
    sub["spec"]["subscribers"][0]["clusterAffinity"]["matchLabels"]["e2e"] = json!(id);
    let sub: Subscription = serde_json::from_value(sub).expect("the example's Subscription");
    let api: Api<Subscription> = Api::namespaced(parent.clone(), &ns.name);
    api.create(&PostParams::default(), &sub)
        .await
        .expect("creating the Subscription");
    let name = sub.name_any();
    wait_binding(&api, &name, &clusters, &[clusters[0].name.as_str()]).await;
    wait_for(
        "the example's Deployment in child1",
        Duration::from_secs(60),
        || async {
            Api::<Deployment>::namespaced(child1.clone(), &app_ns)
                .get_opt("my-nginx-nfd")
                .await
                .map_err(|e| e.to_string())?
                .map(|_| ())
                .ok_or("not yet".to_string())
        },
    )
    .await;
    // child2 heartbeated since, and still carries no label (1 node of 2 is under 0.8)
    assert_eq!(
        label_of(&clusters[1]).await.expect("child2's cluster"),
        None
    );
    assert!(
        Api::<Deployment>::namespaced(child2.clone(), &app_ns)
            .get_opt("my-nginx-nfd")
            .await
            .expect("reading child2")
            .is_none(),
        "child2 must get nothing"
    );

    // NFD takes the label off one of child1's nodes: the cluster no longer matches
    label_nodes(child1, &key, None, 1).await;
    wait_for(
        "the label gone from child1's ManagedCluster",
        Duration::from_secs(40),
        || async {
            match label_of(&clusters[0]).await? {
                None => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    wait_binding(&api, &name, &clusters, &[]).await;
    api.delete(&name, &DeleteParams::default())
        .await
        .expect("deleting the Subscription");
    label_nodes(child1, &key, None, 2).await;
    label_nodes(child2, &key, None, 1).await;
}
