//! The main job end to end (docs/spec/deployer.md): Manifests + a Subscription in the parent
//! become objects in real children, through the scheduler, Bases, Descriptions and the agents
//! (Pull) or the parent (Push); status flows back; deleting the Subscription removes everything.

mod support;

use std::time::{Duration, Instant};

use clusternet::apis::{Base, Description, Globalization, Localization, Manifest, Subscription};
use k8s_openapi::api::apps::v1::Deployment;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use support::{Cluster, TestEnv, TestNamespace, create_manifests, register, uid, wait_for};

fn app(appns: &str, replicas: i32) -> Vec<Value> {
    vec![
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": appns, "labels": {"clusternet.io/created-by": "clusternet-hub"}}}),
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": appns, "labels": {"clusternet.io/created-by": "clusternet-hub"}},
               "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]}}),
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": appns, "labels": {"clusternet.io/created-by": "clusternet-hub"}},
               "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                        "template": {"metadata": {"labels": {"app": "web"}},
                                     "spec": {"containers": [{"name": "nginx", "image": "nginx:1.27",
                                              "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}}}}),
    ]
}

async fn deployment_replicas(child: &kube::Client, ns: &str) -> Result<(i32, i32), String> {
    let d = Api::<Deployment>::namespaced(child.clone(), ns)
        .get("web")
        .await
        .map_err(|e| e.to_string())?;
    let want = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0);
    let available = d
        .status
        .as_ref()
        .and_then(|s| s.available_replicas)
        .unwrap_or(0);
    Ok((want, available))
}

async fn wait_gone(parent: &kube::Client, clusters: &[Cluster], appns: &str, sub_uid: &str) {
    for c in clusters {
        support::wait_app_removed(&c.child, appns).await;
    }
    let sel = ListParams::default().labels(&format!("apps.clusternet.io/subs.uid={sub_uid}"));
    wait_for(
        "no Base or Description left",
        Duration::from_secs(30),
        || async {
            let b = Api::<Base>::all(parent.clone())
                .list(&sel)
                .await
                .map_err(|e| e.to_string())?
                .items
                .len();
            let d = Api::<Description>::all(parent.clone())
                .list(&sel)
                .await
                .map_err(|e| e.to_string())?
                .items
                .len();
            if b + d == 0 {
                Ok(())
            } else {
                Err(format!("{b} Bases, {d} Descriptions"))
            }
        },
    )
    .await;
}

#[tokio::test]
async fn replication_deploys_to_every_matching_child_follows_edits_and_cleans_up() {
    let env = TestEnv::get();
    let controller = env.with_controller();
    let parent = env.parent().await;
    let id = uid();
    let clusters = register(env, &id, &[1, 2], "Pull", &[]).await;
    let appns = format!("app-{id}");
    let objects = app(&appns, 3);
    let manifests = create_manifests(&parent, &objects).await;
    let ns = TestNamespace::create(&parent, &env.parent_kubeconfig(), "subs").await;
    let subs: Api<Subscription> = Api::namespaced(parent.clone(), &ns.name);
    let sub: Subscription = serde_json::from_value(json!({
        "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Subscription", "metadata": {"name": "app"},
        "spec": {"subscribers": [{"clusterAffinity": {"matchLabels": {"e2e": id}}}], "feeds": Value::Array(objects.iter().map(support::feed_of).collect())}}))
    .expect("a Subscription");
    let started = Instant::now();
    let sub = subs
        .create(&PostParams::default(), &sub)
        .await
        .expect("creating the Subscription");
    for c in &clusters {
        wait_for(
            "3/3 available in the child",
            Duration::from_secs(60),
            || async {
                match deployment_replicas(&c.child, &appns).await? {
                    (3, 3) => Ok(()),
                    other => Err(format!("{other:?}")),
                }
            },
        )
        .await;
    }
    eprintln!(
        "Subscription to 3/3 available in both children: {:?}",
        started.elapsed()
    );
    let status = wait_for(
        "aggregated status: both clusters available",
        Duration::from_secs(30),
        || async {
            let s = subs.get("app").await.map_err(|e| e.to_string())?;
            let st = s.status.clone().unwrap_or_default();
            let deploy = st
                .aggregated_statuses
                .iter()
                .find(|a| a.feed.kind == "Deployment")
                .ok_or("no Deployment entry")?;
            if deploy.feed_status_details.len() == 2
                && deploy.feed_status_summary.available
                && deploy.feed_status_summary.replica_status.available_replicas == 6
            {
                Ok(st)
            } else {
                Err(format!("{deploy:?}"))
            }
        },
    )
    .await;
    assert_eq!(status.binding_clusters.len(), 2);

    // the rollout shows in the metrics existing dashboards use: the agents' applies and API
    // requests, the controller's view of the fleet
    for c in &clusters {
        let applied = format!(
            "clusternet_description_apply_total{{cluster=\"{}\",result=\"success\"}}",
            c.name
        );
        wait_for(&applied, Duration::from_secs(30), || async {
            match c.agent.metric(&applied).await {
                Some(v) if v >= 1.0 => Ok(()),
                other => Err(format!("{other:?}")),
            }
        })
        .await;
        let requests = c
            .agent
            .metric("rest_client_requests_total{code=\"200\",method=\"GET\"")
            .await;
        assert!(requests.is_some_and(|v| v >= 1.0), "{requests:?}");
        let age = format!("clusternet_heartbeat_age_seconds{{cluster=\"{}\"}}", c.name);
        let seconds = controller.metric(&age).await;
        assert!(seconds.is_some_and(|s| s < 60.0), "{age}: {seconds:?}");
    }
    let ready = controller
        .metric("clusternet_clusters{state=\"Ready\"}")
        .await;
    assert!(ready.is_some_and(|n| n >= 2.0), "{ready:?}");
    assert!(status.binding_clusters.iter().all(|b| {
        clusters
            .iter()
            .any(|c| b.starts_with(&format!("{}/", c.dedicated)))
    }));

    // edit the Manifest: every child converges
    let manifests_api: Api<Manifest> = Api::namespaced(parent.clone(), "clusternet-reserved");
    manifests_api
        .patch(
            &manifests[2],
            &PatchParams::default(),
            &Patch::Merge(json!({"template": {"spec": {"replicas": 2}}})),
        )
        .await
        .expect("editing the Manifest");
    for c in &clusters {
        wait_for("2/2 after the edit", Duration::from_secs(60), || async {
            match deployment_replicas(&c.child, &appns).await? {
                (2, 2) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        })
        .await;
    }

    // delete the Subscription: everything goes
    subs.delete("app", &DeleteParams::default())
        .await
        .expect("deleting the Subscription");
    wait_gone(&parent, &clusters, &appns, &sub.uid().unwrap_or_default()).await;
    for m in manifests {
        let _ = manifests_api.delete(&m, &DeleteParams::default()).await;
    }
}

#[tokio::test]
async fn static_dividing_pushes_two_and_four_replicas() {
    let env = TestEnv::get();
    env.with_controller();
    let parent = env.parent().await;
    let id = uid();
    let clusters = register(env, &id, &[1, 3], "Push", &["w=1", "w=2"]).await;
    let appns = format!("div-{id}");
    let objects = app(&appns, 6);
    let manifests = create_manifests(&parent, &objects).await;
    let ns = TestNamespace::create(&parent, &env.parent_kubeconfig(), "subs").await;
    let subs: Api<Subscription> = Api::namespaced(parent.clone(), &ns.name);
    let sub = support::static_dividing_subscription(&id, &objects);
    let sub = subs
        .create(&PostParams::default(), &sub)
        .await
        .expect("creating the Subscription");
    for (c, want) in clusters.iter().zip([2, 4]) {
        wait_for(
            &format!("{want} replicas available"),
            Duration::from_secs(60),
            || async {
                match deployment_replicas(&c.child, &appns).await? {
                    (w, a) if w == want && a == want => Ok(()),
                    other => Err(format!("{other:?}")),
                }
            },
        )
        .await;
    }
    // the parent deployed (Push): the child objects carry the controller's field manager
    let d = Api::<Deployment>::namespaced(clusters[0].child.clone(), &appns)
        .get("web")
        .await
        .expect("the Deployment");
    let managers: Vec<String> = d
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .filter_map(|m| m.manager)
        .collect();
    assert!(
        managers
            .iter()
            .any(|m| m == "clusternet/controller/deployer"),
        "{managers:?}"
    );
    subs.delete("divided", &DeleteParams::default())
        .await
        .expect("deleting the Subscription");
    wait_gone(&parent, &clusters, &appns, &sub.uid().unwrap_or_default()).await;
    let manifests_api: Api<Manifest> = Api::namespaced(parent.clone(), "clusternet-reserved");
    for m in manifests {
        let _ = manifests_api.delete(&m, &DeleteParams::default()).await;
    }
}

#[tokio::test]
async fn overrides_apply_by_priority_and_a_bad_object_fails_only_its_description_entry() {
    let env = TestEnv::get();
    env.with_controller();
    let parent = env.parent().await;
    let id = uid();
    let clusters = register(env, &id, &[2], "Pull", &[]).await;
    let appns = format!("ovr-{id}");
    let mut objects = app(&appns, 2);
    objects.push(json!({"apiVersion": "example.com/v1", "kind": "NoSuchKind", "metadata": {"name": "bogus", "namespace": appns}}));
    let manifests = create_manifests(&parent, &objects).await;
    let dedicated = clusters[0].dedicated.clone();
    // upstream's replication example: 600 (JSONPatch) beats 300 (MergePatch); a Globalization adds a label
    let feed =
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "namespace": appns, "name": "web"});
    let locs: Api<Localization> = Api::namespaced(parent.clone(), &dedicated);
    for (name, priority, type_, value) in [
        ("prio-600", 600, "JSONPatch", json!([{"op": "replace", "path": "/spec/replicas", "value": 3},
                                              {"op": "add", "path": "/metadata/annotations", "value": {"from": "loc-600"}}]).to_string()),
        ("prio-300", 300, "MergePatch", json!({"metadata": {"labels": {"from-300": "yes"}}, "spec": {"replicas": 1}}).to_string()),
    ] {
        let l: Localization = serde_json::from_value(json!({"apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Localization",
            "metadata": {"name": name}, "spec": {"priority": priority, "overridePolicy": "ApplyNow", "feed": feed,
            "overrides": [{"name": name, "type": type_, "value": value}]}}))
        .expect("a Localization");
        locs.create(&PostParams::default(), &l).await.expect("creating a Localization");
    }
    let globs: Api<Globalization> = Api::all(parent.clone());
    let gname = format!("glob-{id}");
    let g: Globalization = serde_json::from_value(json!({"apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Globalization",
        "metadata": {"name": gname}, "spec": {"priority": 900, "overridePolicy": "ApplyNow", "feed": feed,
        "clusterAffinity": {"matchLabels": {"e2e": id}},
        "overrides": [{"name": "glob", "type": "MergePatch", "value": "{\"metadata\":{\"labels\":{\"from-glob\":\"yes\"}}}"}]}}))
    .expect("a Globalization");
    globs
        .create(&PostParams::default(), &g)
        .await
        .expect("creating the Globalization");

    let ns = TestNamespace::create(&parent, &env.parent_kubeconfig(), "subs").await;
    let subs: Api<Subscription> = Api::namespaced(parent.clone(), &ns.name);
    let sub: Subscription = serde_json::from_value(json!({
        "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Subscription", "metadata": {"name": "ovr"},
        "spec": {"subscribers": [{"clusterAffinity": {"matchLabels": {"e2e": id}}}], "feeds": Value::Array(objects.iter().map(support::feed_of).collect())}}))
    .expect("a Subscription");
    let sub = subs
        .create(&PostParams::default(), &sub)
        .await
        .expect("creating the Subscription");
    let child = &clusters[0].child;
    let d = wait_for(
        "the overridden Deployment",
        Duration::from_secs(60),
        || async {
            let d = Api::<Deployment>::namespaced(child.clone(), &appns)
                .get_opt("web")
                .await
                .map_err(|e| e.to_string())?
                .ok_or("not yet")?;
            let labels = d.labels();
            if d.spec.as_ref().and_then(|s| s.replicas) == Some(3)
                && labels.contains_key("from-300")
                && labels.contains_key("from-glob")
            {
                Ok(d)
            } else {
                Err(format!(
                    "replicas {:?}, labels {:?}",
                    d.spec.as_ref().and_then(|s| s.replicas),
                    labels
                ))
            }
        },
    )
    .await;
    assert_eq!(
        d.annotations().get("from").map(String::as_str),
        Some("loc-600")
    );
    assert!(
        d.annotations()
            .contains_key("apps.clusternet.io/owned-by-description")
    );
    assert!(
        d.annotations()
            .contains_key("clusternet.io/last-applied-configuration")
    );
    // deleting the winning Localization re-renders at once: the priority-300 one now decides
    locs.delete("prio-600", &DeleteParams::default())
        .await
        .expect("deleting a Localization");
    wait_for(
        "replicas from the priority-300 Localization",
        Duration::from_secs(30),
        || async {
            let d = Api::<Deployment>::namespaced(child.clone(), &appns)
                .get("web")
                .await
                .map_err(|e| e.to_string())?;
            match d.spec.as_ref().and_then(|s| s.replicas) {
                Some(1) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    // the unknown kind fails the Description with the reason, and the rest still deployed
    let descs: Api<Description> = Api::namespaced(parent.clone(), &dedicated);
    wait_for(
        "the Description to report the bad object",
        Duration::from_secs(30),
        || async {
            let list = descs
                .list(&ListParams::default().labels(&format!(
                    "apps.clusternet.io/subs.uid={}",
                    sub.uid().unwrap_or_default()
                )))
                .await
                .map_err(|e| e.to_string())?;
            let d = list.items.into_iter().next().ok_or("no Description")?;
            let st = d.status.unwrap_or_default();
            let phase = st.phase.map(|p| p.as_str().to_string()).unwrap_or_default();
            if phase == "Failure" && st.reason.contains("NoSuchKind") {
                Ok(())
            } else {
                Err(format!("{phase}: {}", st.reason))
            }
        },
    )
    .await;
    subs.delete("ovr", &DeleteParams::default())
        .await
        .expect("deleting the Subscription");
    wait_gone(&parent, &clusters, &appns, &sub.uid().unwrap_or_default()).await;
    let _ = globs.delete(&gname, &DeleteParams::default()).await;
    let manifests_api: Api<Manifest> = Api::namespaced(parent.clone(), "clusternet-reserved");
    for m in manifests {
        let _ = manifests_api.delete(&m, &DeleteParams::default()).await;
    }
}

#[tokio::test]
async fn an_object_changed_in_a_child_is_repaired() {
    use k8s_openapi::api::core::v1::ConfigMap;
    let env = TestEnv::get();
    env.with_controller();
    let parent = env.parent().await;
    let id = uid();
    let clusters = register(env, &id, &[3], "Pull", &[]).await;
    let appns = format!("drift-{id}");
    let objects = vec![
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": appns}}),
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "conf", "namespace": appns}, "data": {"mode": "desired"}}),
    ];
    let manifests = create_manifests(&parent, &objects).await;
    let ns = TestNamespace::create(&parent, &env.parent_kubeconfig(), "subs").await;
    let subs: Api<Subscription> = Api::namespaced(parent.clone(), &ns.name);
    let sub: Subscription = serde_json::from_value(json!({
        "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Subscription", "metadata": {"name": "drift"},
        "spec": {"subscribers": [{"clusterAffinity": {"matchLabels": {"e2e": id}}}], "feeds": Value::Array(objects.iter().map(support::feed_of).collect())}}))
    .expect("a Subscription");
    subs.create(&PostParams::default(), &sub)
        .await
        .expect("creating the Subscription");
    let cms: Api<ConfigMap> = Api::namespaced(clusters[0].child.clone(), &appns);
    let mode = |cm: ConfigMap| {
        cm.data
            .unwrap_or_default()
            .get("mode")
            .cloned()
            .unwrap_or_default()
    };
    wait_for(
        "the ConfigMap in the child",
        Duration::from_secs(30),
        || async {
            let cm = cms
                .get_opt("conf")
                .await
                .map_err(|e| e.to_string())?
                .ok_or("not yet")?;
            if mode(cm) == "desired" {
                Ok(())
            } else {
                Err("wrong data".to_string())
            }
        },
    )
    .await;
    // someone edits it in the child
    cms.patch(
        "conf",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"mode": "drifted"}})),
    )
    .await
    .expect("editing the child object");
    wait_for(
        "the edit to be repaired",
        Duration::from_secs(45),
        || async {
            let cm = cms.get("conf").await.map_err(|e| e.to_string())?;
            match mode(cm).as_str() {
                "desired" => Ok(()),
                other => Err(other.to_string()),
            }
        },
    )
    .await;
    subs.delete("drift", &DeleteParams::default())
        .await
        .expect("deleting the Subscription");
    wait_for(
        "the ConfigMap to be removed",
        Duration::from_secs(45),
        || async {
            match cms.get_opt("conf").await.map_err(|e| e.to_string())? {
                None => Ok(()),
                Some(_) => Err("still there".to_string()),
            }
        },
    )
    .await;
    let manifests_api: Api<Manifest> = Api::namespaced(parent.clone(), "clusternet-reserved");
    for m in manifests {
        let _ = manifests_api.delete(&m, &DeleteParams::default()).await;
    }
}
