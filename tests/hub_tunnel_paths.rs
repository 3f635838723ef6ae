//! The parent reaching children through the hub's socket proxy and the agents' tunnels
//! (docs/spec/hub.md §2.2-§2.3, deployer.md §9, scheduler.md §5.3): Push mode applies and
//! removes a child's objects through `sockets/<id>/proxy/direct` when the child's advertised API
//! server address is useless to the parent (as behind NAT), and Dynamic dividing asks predictors
//! that only listen inside their child through `sockets/<id>/proxy/http/<host:port>`.

mod support;

use std::time::Duration;

use clusternet::apis::{Description, ManagedCluster, Manifest, Subscription};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use support::{Cluster, TestEnv, TestNamespace, create_manifests, register, uid, wait_for};

const FIELD_MANAGER: &str = "clusternet/controller/deployer";

async fn delete_manifests(parent: &kube::Client, names: &[String]) {
    let api: Api<Manifest> = Api::namespaced(parent.clone(), "clusternet-reserved");
    for m in names {
        let _ = api.delete(m, &DeleteParams::default()).await;
    }
}

async fn create_subscription(
    parent: &kube::Client,
    ns: &str,
    name: &str,
    spec: Value,
) -> Api<Subscription> {
    let api: Api<Subscription> = Api::namespaced(parent.clone(), ns);
    let sub: Subscription = serde_json::from_value(json!({
        "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Subscription",
        "metadata": {"name": name}, "spec": spec}))
    .expect("a Subscription");
    api.create(&PostParams::default(), &sub)
        .await
        .expect("creating the Subscription");
    api
}

/// The ManagedCluster of a registered cluster, once its agent reports the tunnel in use.
async fn socket_cluster(parent: &kube::Client, c: &Cluster) -> ManagedCluster {
    let api: Api<ManagedCluster> = Api::namespaced(parent.clone(), &c.dedicated);
    wait_for(
        &format!("{} to report useSocket", c.name),
        Duration::from_secs(30),
        || async {
            let mc = api
                .list(&ListParams::default())
                .await
                .map_err(|e| e.to_string())?
                .items
                .into_iter()
                .next()
                .ok_or("no ManagedCluster")?;
            if mc.status.as_ref().is_some_and(|s| s.use_socket) {
                Ok(mc)
            } else {
                Err(format!("status {:?}", mc.status))
            }
        },
    )
    .await
}

/// The hub's log without colour codes, so fields can be matched as text.
fn plain_log(hub: &support::HubHandle) -> String {
    let text = hub.log_text();
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(ch) = chars.next() {
        if ch == '\u{1b}' && chars.peek() == Some(&'[') {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(ch);
        }
    }
    out
}

/// The hub's "served" lines for requests whose path contains `needle`.
fn served(hub: &support::HubHandle, needle: &str) -> Vec<String> {
    plain_log(hub)
        .lines()
        .filter(|l| l.contains("served") && l.contains(needle))
        .map(str::to_string)
        .collect()
}

#[tokio::test]
async fn push_goes_through_the_socket_proxy_when_the_child_is_not_directly_reachable() {
    let env = TestEnv::get();
    let hub = env.with_hub();
    env.with_controller();
    let parent = env.parent().await;
    let id = uid();
    let clusters = register(env, &id, &[2], "Push", &[]).await;
    let c = &clusters[0];
    let cluster_id = socket_cluster(&parent, c).await.spec.cluster_id;

    // As behind NAT: the address the child advertises is useless to the parent. The Secret is
    // taken over (autoupdate off) so the agent does not publish the real address again; a push
    // can now only arrive through the hub, which dials the child from inside, via the tunnel.
    Api::<Secret>::namespaced(parent.clone(), &c.dedicated)
        .patch(
            "child-cluster-deployer",
            &PatchParams::default(),
            &Patch::Merge(json!({
                "metadata": {"annotations": {"clusternet.io/autoupdate": "false"}},
                "stringData": {"apiserver-advertise-url": "https://127.0.0.1:1"}})),
        )
        .await
        .expect("pointing child-cluster-deployer at an unreachable address");

    let appns = format!("tunnel-{id}");
    let objects = vec![
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": appns,
            "labels": {"clusternet.io/created-by": "clusternet-hub"}}}),
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": appns,
                "labels": {"clusternet.io/created-by": "clusternet-hub"}},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "c", "image": "pause"}]}}}}),
    ];
    let manifests = create_manifests(&parent, &objects).await;
    let ns = TestNamespace::create(&parent, &env.parent_kubeconfig(), "tunnel").await;
    let subs = create_subscription(
        &parent,
        &ns.name,
        "pushed",
        json!({"subscribers": [{"clusterAffinity": {"matchLabels": {"e2e": id}}}],
            "feeds": objects.iter().map(support::feed_of).collect::<Vec<_>>()}),
    )
    .await;

    let deployments: Api<Deployment> = Api::namespaced(c.child.clone(), &appns);
    let d = wait_for(
        "the Deployment pushed into the child",
        Duration::from_secs(60),
        || async {
            deployments
                .get_opt("web")
                .await
                .map_err(|e| e.to_string())?
                .ok_or_else(|| "not yet".to_string())
        },
    )
    .await;
    let managers: Vec<String> = d
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .filter_map(|m| m.manager)
        .collect();
    assert!(
        managers.iter().any(|m| m == FIELD_MANAGER),
        "the parent deployed it: {managers:?}"
    );
    // and the hub proxied that write into this very child
    let proxied = format!(
        "/apis/proxies.clusternet.io/v1alpha1/sockets/{cluster_id}/proxy/direct/apis/apps/v1/namespaces/{appns}/deployments"
    );
    let lines = served(hub, &proxied);
    assert!(
        lines
            .iter()
            .any(|l| l.contains("code=200") || l.contains("code=201")),
        "no successful proxied request {proxied} in {}: {lines:?}",
        hub.log.display()
    );

    // the parent watches the child through the tunnel too: an edit there is reverted
    deployments
        .patch(
            "web",
            &PatchParams {
                field_manager: Some("intruder".into()),
                ..Default::default()
            },
            &Patch::Merge(json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "evil"}]}}}})),
        )
        .await
        .expect("editing the pushed Deployment in the child");
    wait_for(
        "the edit reverted through the tunnel",
        Duration::from_secs(15),
        || async {
            let d = deployments.get("web").await.map_err(|e| e.to_string())?;
            let image = d
                .spec
                .and_then(|s| s.template.spec)
                .and_then(|p| p.containers.into_iter().next())
                .and_then(|c| c.image)
                .unwrap_or_default();
            if image == "pause" { Ok(()) } else { Err(image) }
        },
    )
    .await;

    // removal goes the same way, down to the last Description's finalizer
    let sub_uid = subs
        .get("pushed")
        .await
        .expect("the Subscription")
        .uid()
        .unwrap_or_default();
    subs.delete("pushed", &DeleteParams::default())
        .await
        .expect("deleting the Subscription");
    support::wait_app_removed(&c.child, &appns).await;
    let descriptions: Api<Description> = Api::namespaced(parent.clone(), &c.dedicated);
    let sel = ListParams::default().labels(&format!("apps.clusternet.io/subs.uid={sub_uid}"));
    wait_for("no Description left", Duration::from_secs(30), || async {
        match descriptions
            .list(&sel)
            .await
            .map_err(|e| e.to_string())?
            .items
            .len()
        {
            0 => Ok(()),
            n => Err(format!("{n} left")),
        }
    })
    .await;
    delete_manifests(&parent, &manifests).await;
}

#[tokio::test]
async fn dynamic_dividing_asks_predictors_through_the_tunnel() {
    let env = TestEnv::get();
    let hub = env.with_hub();
    env.with_controller();
    let parent = env.parent().await;
    let id = uid();
    // child1's nodes are mostly full: 6 of 8 CPUs requested on each node by ballast pods
    let _ballast = support::fill_child1(env).await;
    // no --predictor-direct-access: the predictors listen on the agents' loopback only
    let (clusters, ports) =
        support::register_with_predictors(env, &id, &[1, 2], "dyn", false).await;
    let mut cluster_ids = Vec::new();
    for c in &clusters {
        let mc = socket_cluster(&parent, c).await;
        let status = mc.status.clone().unwrap_or_default();
        assert!(
            status.predictor_enabled && !status.predictor_direct_access,
            "{status:?}"
        );
        cluster_ids.push(mc.spec.cluster_id);
    }

    // only the Deployment: its namespace is never created in the children, so nothing lands there
    // and takes capacity from other tests
    let appns = format!("dyn-{id}");
    let objects = vec![json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": appns},
        "spec": {"replicas": 6, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c",
                "image": "nginx", "resources": {"requests": {"cpu": "1", "memory": "64Mi"}}}]}}}})];
    let manifests = create_manifests(&parent, &objects).await;
    let ns = TestNamespace::create(&parent, &env.parent_kubeconfig(), "tunnel").await;
    let api = create_subscription(
        &parent,
        &ns.name,
        "dynamic",
        json!({"schedulingStrategy": "Dividing",
            "dividingScheduling": {"type": "Dynamic", "dynamicDividing": {"strategy": "Spread"}},
            "subscribers": [{"clusterAffinity": {"matchLabels": {"dyn": id}}}],
            "feeds": objects.iter().map(support::feed_of).collect::<Vec<_>>()}),
    )
    .await;
    let key = format!("apps/v1/Deployment/{appns}/web");
    let s = wait_for(
        "replicas divided by capacity",
        Duration::from_secs(60),
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
    // capacity 4 (child1: 2 nodes x 2 free CPUs) vs 16 (child2): 6 * 4/20 and 6 * 16/20
    assert_eq!((busy, free), (1, 5), "child1 is mostly full: {replicas:?}");
    for (cid, port) in cluster_ids.iter().zip(&ports) {
        let path = format!(
            "/apis/proxies.clusternet.io/v1alpha1/sockets/{cid}/proxy/http/localhost:{port}/replicas/predict"
        );
        let lines = served(hub, &path);
        assert!(
            lines.iter().any(|l| l.contains("code=200")),
            "no successful prediction {path} through the hub in {}: {lines:?}",
            hub.log.display()
        );
    }
    api.delete("dynamic", &DeleteParams::default())
        .await
        .expect("deleting the Subscription");
    delete_manifests(&parent, &manifests).await;
}

#[tokio::test]
async fn charts_are_released_through_the_socket_proxy_when_the_child_is_not_directly_reachable() {
    let env = TestEnv::get();
    let hub = env.with_hub();
    env.with_controller();
    let parent = env.parent().await;
    let id = uid();
    let clusters = register(env, &id, &[3], "Push", &[]).await;
    let c = &clusters[0];
    let cluster_id = socket_cluster(&parent, c).await.spec.cluster_id;
    // as behind NAT (see above): helm can only reach the child through the hub
    Api::<Secret>::namespaced(parent.clone(), &c.dedicated)
        .patch(
            "child-cluster-deployer",
            &PatchParams::default(),
            &Patch::Merge(json!({
                "metadata": {"annotations": {"clusternet.io/autoupdate": "false"}},
                "stringData": {"apiserver-advertise-url": "https://127.0.0.1:1"}})),
        )
        .await
        .expect("pointing child-cluster-deployer at an unreachable address");
    let repo = support::chart_repo(env, "hello", &["0.1.0"], None).await;
    let ns = TestNamespace::create(&parent, &env.parent_kubeconfig(), "tunnelhelm").await;
    let target = format!("tunnel-helm-{id}");
    let chart: clusternet::apis::HelmChart = serde_json::from_value(json!({
        "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "HelmChart",
        "metadata": {"name": "tunnelled"},
        "spec": {"repo": repo.url, "chart": "hello", "version": "0.1.0", "targetNamespace": target}}))
    .expect("a HelmChart");
    Api::<clusternet::apis::HelmChart>::namespaced(parent.clone(), &ns.name)
        .create(&PostParams::default(), &chart)
        .await
        .expect("creating the HelmChart");
    let subs = create_subscription(
        &parent,
        &ns.name,
        "charted",
        json!({"subscribers": [{"clusterAffinity": {"matchLabels": {"e2e": id}}}],
            "feeds": [{"apiVersion": "apps.clusternet.io/v1alpha1", "kind": "HelmChart",
                "namespace": ns.name, "name": "tunnelled"}]}),
    )
    .await;
    support::wait_released(env, 3, &target, "tunnelled", 1, None).await;
    // helm stored its release through the hub, in this very child
    let proxied = format!(
        "/apis/proxies.clusternet.io/v1alpha1/sockets/{cluster_id}/proxy/direct/api/v1/namespaces/{target}/secrets"
    );
    let lines = served(hub, &proxied);
    assert!(
        lines.iter().any(|l| l.contains("code=201")),
        "no release Secret written through {proxied} in {}: {lines:?}",
        hub.log.display()
    );
    subs.delete("charted", &DeleteParams::default())
        .await
        .expect("deleting the Subscription");
    support::wait_no_releases(env, 3, &target).await;
}
