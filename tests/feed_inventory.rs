//! The FeedInventory controller turns a Dividing Subscription's workload Manifests into the
//! replica facts the scheduler divides (docs/spec/deployer.md §12).

mod support;

use std::time::Duration;

use clusternet::apis::{FeedInventory, Manifest, Subscription};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use support::{TestEnv, TestNamespace, wait_for};

fn manifest(name: &str, ns: &str, replicas: i32) -> Manifest {
    serde_json::from_value(json!({
        "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Manifest",
        "metadata": {"name": format!("deployments.{ns}.{name}"), "namespace": "clusternet-reserved",
            "labels": {"apps.clusternet.io/config.group": "apps", "apps.clusternet.io/config.version": "v1",
                       "apps.clusternet.io/config.kind": "Deployment", "apps.clusternet.io/config.name": name,
                       "apps.clusternet.io/config.namespace": ns}},
        "template": {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": ns},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [{"name": "nginx", "image": "nginx",
                    "resources": {"requests": {"cpu": "500m", "memory": "128Mi"}}}]}}}}
    }))
    .expect("a Manifest")
}

#[tokio::test]
async fn dividing_subscriptions_get_an_inventory_that_follows_their_manifests() {
    let env = TestEnv::get();
    env.with_controller();
    let parent = env.parent().await;
    support::ensure_namespace(&parent, "clusternet-reserved").await;
    let ns = TestNamespace::create(&parent, &env.parent_kubeconfig(), "finv").await;
    let app = format!("web-{}", &ns.name[5..]);
    let manifests: Api<Manifest> = Api::namespaced(parent.clone(), "clusternet-reserved");
    manifests
        .create(&PostParams::default(), &manifest(&app, &ns.name, 6))
        .await
        .expect("creating the Manifest");
    let sub: Subscription = serde_json::from_value(json!({
        "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Subscription",
        "metadata": {"name": "dividing", "namespace": ns.name},
        "spec": {"schedulingStrategy": "Dividing", "dividingScheduling": {"type": "Static"},
            "subscribers": [{"clusterAffinity": {"matchLabels": {"x": "y"}}, "weight": 1}],
            "feeds": [{"apiVersion": "apps/v1", "kind": "Deployment", "namespace": ns.name, "name": app}]}
    }))
    .expect("a Subscription");
    Api::<Subscription>::namespaced(parent.clone(), &ns.name)
        .create(&PostParams::default(), &sub)
        .await
        .expect("creating the Subscription");
    let inventories: Api<FeedInventory> = Api::namespaced(parent.clone(), &ns.name);
    let inv = wait_for("the FeedInventory", Duration::from_secs(20), || async {
        inventories
            .get_opt("dividing")
            .await
            .map_err(|e| e.to_string())?
            .ok_or_else(|| "none yet".to_string())
    })
    .await;
    let feed = &inv.spec.feeds[0];
    assert_eq!(feed.desired_replicas, Some(6));
    assert_eq!(feed.replica_json_path, "/spec/replicas");
    let requests = feed
        .replica_requirements
        .resources
        .requests
        .clone()
        .unwrap_or_default();
    assert_eq!(requests.get("cpu").map(|q| q.0.as_str()), Some("500m"));
    assert_eq!(requests.get("memory").map(|q| q.0.as_str()), Some("128Mi"));
    assert_eq!(
        inv.metadata
            .owner_references
            .as_ref()
            .and_then(|o| o.first())
            .map(|o| o.kind.as_str()),
        Some("Subscription")
    );

    // editing the Manifest updates the inventory
    manifests
        .patch(
            &format!("deployments.{}.{app}", ns.name),
            &PatchParams::default(),
            &Patch::Merge(json!({"template": {"spec": {"replicas": 9}}})),
        )
        .await
        .expect("patching the Manifest");
    wait_for("desiredReplicas 9", Duration::from_secs(20), || async {
        let inv = inventories
            .get("dividing")
            .await
            .map_err(|e| e.to_string())?;
        match inv.spec.feeds[0].desired_replicas {
            Some(9) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let _ = manifests
        .delete(
            &format!("deployments.{}.{app}", ns.name),
            &Default::default(),
        )
        .await;
}
