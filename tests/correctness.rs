//! Defects found by running upstream's examples (issue #11), each reproduced against real control
//! planes: a stalled child must lose nothing, Dividing children never see more than their share,
//! feeds in use are protected, shared objects stay while wanted, status and events tell the truth,
//! and only a predictor that serves is advertised.

mod support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clusternet::apis::{Base, Description, ManagedCluster, Manifest, Subscription};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Event, Namespace};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::{Value, json};
use support::{
    FaultProxy, TestEnv, TestNamespace, create_manifests, kubeconfig_server, register_with, uid,
    wait_for,
};

const MANAGED: &str = "clusternet.io/created-by";

fn namespace_and_config(appns: &str) -> Vec<Value> {
    vec![
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": appns, "labels": {MANAGED: "clusternet-hub"}}}),
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings", "namespace": appns, "labels": {MANAGED: "clusternet-hub"}},
               "data": {"color": "blue"}}),
    ]
}

fn subscription(name: &str, id: &str, feeds: &[Value]) -> Subscription {
    serde_json::from_value(json!({
        "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Subscription", "metadata": {"name": name},
        "spec": {"subscribers": [{"clusterAffinity": {"matchLabels": {"e2e": id}}}],
                 "feeds": feeds}}))
    .expect("a Subscription")
}

fn feeds(objects: &[Value]) -> Vec<Value> {
    objects.iter().map(support::feed_of).collect()
}

fn ready_of(mc: &ManagedCluster) -> (String, String) {
    mc.status
        .as_ref()
        .and_then(|s| s.condition("Ready"))
        .map(|c| (c.status.clone(), format!("{:?}", c.last_transition_time)))
        .unwrap_or_default()
}

async fn binding(subs: &Api<Subscription>, name: &str) -> Vec<String> {
    subs.get(name)
        .await
        .ok()
        .and_then(|s| s.status)
        .map(|s| s.binding_clusters)
        .unwrap_or_default()
}

async fn config_uid(child: &kube::Client, ns: &str) -> Result<String, String> {
    Api::<ConfigMap>::namespaced(child.clone(), ns)
        .get("settings")
        .await
        .map(|c| c.uid().unwrap_or_default())
        .map_err(|e| e.to_string())
}

async fn bases_of(parent: &kube::Client, sub: &Subscription) -> Vec<Base> {
    Api::<Base>::all(parent.clone())
        .list(&ListParams::default().labels(&format!(
            "apps.clusternet.io/subs.uid={}",
            sub.uid().unwrap_or_default()
        )))
        .await
        .expect("listing Bases")
        .items
}

/// The reasons of the events recorded in `ns` of the parent.
async fn event_reasons(parent: &kube::Client, ns: &str) -> Result<Vec<String>, String> {
    Ok(Api::<Event>::namespaced(parent.clone(), ns)
        .list(&ListParams::default())
        .await
        .map_err(|e| e.to_string())?
        .items
        .into_iter()
        .filter_map(|e| e.reason)
        .collect())
}

async fn delete_all(
    parent: &kube::Client,
    subs: &Api<Subscription>,
    names: &[&str],
    manifests: &[String],
) {
    for n in names {
        let _ = subs.delete(n, &DeleteParams::default()).await;
    }
    let api: Api<Manifest> = Api::namespaced(parent.clone(), "clusternet-reserved");
    for m in manifests {
        let _ = api.delete(m, &DeleteParams::default()).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_child_keeps_its_workloads_and_gets_them_back_untouched() {
    let env = TestEnv::get();
    env.with_controller();
    let parent = env.parent().await;
    let id = uid();
    // the agent reaches its child through a proxy that can cut the link (a stall of the child's
    // API server), while the parent stays reachable
    let proxy = FaultProxy::start(kubeconfig_server(&env.child_kubeconfig(2))).await;
    let kc = env
        .dir
        .join(format!("child2-through-proxy-{id}.kubeconfig"));
    proxy.kubeconfig_through(&env.child_kubeconfig(2), &kc);
    let kc_arg = format!("--kubeconfig={}", kc.display());
    let clusters = register_with(
        env,
        &id,
        &[2],
        "Pull",
        &[],
        &[
            &kc_arg,
            "--cluster-health-failure-window=4s",
            // a real agent's leases (15 s / 10 s) ride out a short stall; these do too
            "--leader-elect-lease-duration=40s",
            "--leader-elect-renew-deadline=30s",
        ],
    )
    .await;
    let c = &clusters[0];
    let appns = format!("stall-{id}");
    let objects = namespace_and_config(&appns);
    let manifests = create_manifests(&parent, &objects).await;
    let ns = TestNamespace::create(&parent, &env.parent_kubeconfig(), "subs").await;
    let subs: Api<Subscription> = Api::namespaced(parent.clone(), &ns.name);
    let sub = subs
        .create(
            &PostParams::default(),
            &subscription("app", &id, &feeds(&objects)),
        )
        .await
        .expect("creating the Subscription");
    let cm_uid = wait_for(
        "the ConfigMap in the child",
        Duration::from_secs(60),
        || config_uid(&c.child, &appns),
    )
    .await;
    let bound = binding(&subs, "app").await;
    assert_eq!(bound.len(), 1, "{bound:?}");
    let base = bases_of(&parent, &sub).await;
    assert_eq!(base.len(), 1);
    let base_uid = base[0].uid();
    let (_, ready_since) = ready_of(&support::managed_cluster(&parent, c).await);

    // a stall shorter than the failure window: nothing changes, nothing moves
    proxy.cut();
    let until = Instant::now() + Duration::from_millis(2500);
    while Instant::now() < until {
        let (ready, _) = ready_of(&support::managed_cluster(&parent, c).await);
        assert_eq!(ready, "True", "a 2.5 s stall turned the cluster not ready");
        assert_eq!(binding(&subs, "app").await, bound, "the Subscription moved");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    proxy.restore();
    let until = Instant::now() + Duration::from_secs(4);
    while Instant::now() < until {
        let mc = support::managed_cluster(&parent, c).await;
        assert_eq!(
            ready_of(&mc),
            ("True".to_string(), ready_since.clone()),
            "Ready and its lastTransitionTime must stay as they were"
        );
        assert_eq!(binding(&subs, "app").await, bound);
        assert_eq!(
            config_uid(&c.child, &appns).await.as_deref(),
            Ok(cm_uid.as_str())
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }

    // a stall longer than the window: the cluster turns not ready and the scheduler unbinds it,
    // yet nothing that runs there is deleted
    proxy.cut();
    wait_for(
        "the cluster reported not ready",
        Duration::from_secs(30),
        || async {
            match ready_of(&support::managed_cluster(&parent, c).await) {
                (s, _) if s != "True" => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    wait_for(
        "the lost cluster unbound",
        Duration::from_secs(30),
        || async {
            let b = binding(&subs, "app").await;
            if b.is_empty() {
                Ok(())
            } else {
                Err(format!("{b:?}"))
            }
        },
    )
    .await;
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        assert_eq!(
            config_uid(&c.child, &appns).await.as_deref(),
            Ok(cm_uid.as_str()),
            "an object of the lost cluster was deleted"
        );
        let bases = bases_of(&parent, &sub).await;
        assert!(
            bases.len() == 1
                && bases[0].uid() == base_uid
                && bases[0].metadata.deletion_timestamp.is_none(),
            "the Base of the lost cluster was deleted"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    proxy.restore();
    wait_for(
        "Ready again and bound again",
        Duration::from_secs(60),
        || async {
            let (ready, _) = ready_of(&support::managed_cluster(&parent, c).await);
            let b = binding(&subs, "app").await;
            if ready == "True" && b == bound {
                Ok(())
            } else {
                Err(format!("{ready} {b:?}"))
            }
        },
    )
    .await;
    // back where it was: the same Base, the same objects, nothing re-created
    let bases = bases_of(&parent, &sub).await;
    assert!(bases.len() == 1 && bases[0].uid() == base_uid);
    assert_eq!(
        config_uid(&c.child, &appns).await.as_deref(),
        Ok(cm_uid.as_str())
    );

    delete_all(&parent, &subs, &["app"], &manifests).await;
    support::wait_app_removed(&c.child, &appns).await;
}

fn web(appns: &str, replicas: i32) -> Vec<Value> {
    vec![
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": appns, "labels": {MANAGED: "clusternet-hub"}}}),
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": appns, "labels": {MANAGED: "clusternet-hub"}},
               "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                        "template": {"metadata": {"labels": {"app": "web"}},
                                     "spec": {"containers": [{"name": "nginx", "image": "nginx:1.27",
                                              "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}}}}),
    ]
}

/// Every `spec.replicas` a child's Deployment `web` in `ns` ever had, from a watch.
fn record_replicas(child: kube::Client, ns: &str) -> Arc<Mutex<Vec<i32>>> {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let out = seen.clone();
    let api: Api<Deployment> = Api::namespaced(child, ns);
    tokio::spawn(async move {
        let mut stream = watcher(api, watcher::Config::default())
            .touched_objects()
            .boxed();
        while let Some(ev) = stream.next().await {
            if let Ok(d) = ev
                && let Some(r) = d.spec.and_then(|s| s.replicas)
            {
                out.lock().unwrap_or_else(|p| p.into_inner()).push(r);
            }
        }
    });
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dividing_children_never_see_more_than_their_share() {
    let env = TestEnv::get();
    env.with_controller();
    let parent = env.parent().await;
    let id = uid();
    let clusters = register_with(env, &id, &[1, 3], "Pull", &["w=1", "w=2"], &[]).await;
    let appns = format!("share-{id}");
    let recorded: Vec<Arc<Mutex<Vec<i32>>>> = clusters
        .iter()
        .map(|c| record_replicas(c.child.clone(), &appns))
        .collect();
    let objects = web(&appns, 6);
    let manifests = create_manifests(&parent, &objects).await;
    let ns = TestNamespace::create(&parent, &env.parent_kubeconfig(), "subs").await;
    let subs: Api<Subscription> = Api::namespaced(parent.clone(), &ns.name);
    let sub = support::static_dividing_subscription(&id, &objects);
    subs.create(&PostParams::default(), &sub)
        .await
        .expect("creating the Subscription");
    for (c, share) in clusters.iter().zip([2, 4]) {
        wait_for(
            &format!("{share} replicas in the child"),
            Duration::from_secs(60),
            || async {
                let d = Api::<Deployment>::namespaced(c.child.clone(), &appns)
                    .get("web")
                    .await
                    .map_err(|e| e.to_string())?;
                match d.spec.and_then(|s| s.replicas) {
                    Some(r) if r == share => Ok(()),
                    other => Err(format!("{other:?}")),
                }
            },
        )
        .await;
    }
    // let late renderings show up, if there were any
    tokio::time::sleep(Duration::from_secs(2)).await;
    for (seen, share) in recorded.iter().zip([2, 4]) {
        let seen = seen.lock().unwrap_or_else(|p| p.into_inner()).clone();
        assert!(!seen.is_empty(), "the watch saw the Deployment");
        assert!(
            seen.iter().all(|r| *r <= share),
            "a child saw more than its share of {share}: {seen:?}"
        );
    }
    delete_all(&parent, &subs, &["divided"], &manifests).await;
    for c in &clusters {
        support::wait_app_removed(&c.child, &appns).await;
    }
}

#[tokio::test]
async fn a_feed_in_use_is_not_deleted_until_its_subscriptions_are() {
    let env = TestEnv::get();
    env.with_controller();
    let parent = env.parent().await;
    let id = uid();
    let objects = namespace_and_config(&format!("guarded-{id}"));
    let manifests = create_manifests(&parent, &objects[1..]).await;
    let api: Api<Manifest> = Api::namespaced(parent.clone(), "clusternet-reserved");
    wait_for(
        "the feed-protection finalizer",
        Duration::from_secs(30),
        || async {
            let m = api.get(&manifests[0]).await.map_err(|e| e.to_string())?;
            if m.finalizers()
                .iter()
                .any(|f| f == "apps.clusternet.io/feed-protection")
            {
                Ok(())
            } else {
                Err(format!("{:?}", m.finalizers()))
            }
        },
    )
    .await;
    let ns = TestNamespace::create(&parent, &env.parent_kubeconfig(), "subs").await;
    let subs: Api<Subscription> = Api::namespaced(parent.clone(), &ns.name);
    subs.create(
        &PostParams::default(),
        &subscription("user", &id, &feeds(&objects[1..])),
    )
    .await
    .expect("creating the Subscription");
    api.delete(&manifests[0], &DeleteParams::default())
        .await
        .expect("deleting the Manifest");
    let held = wait_for(
        "the deletion held back, saying by whom",
        Duration::from_secs(30),
        || async {
            let m = api.get(&manifests[0]).await.map_err(|e| e.to_string())?;
            let note = m
                .annotations()
                .get("apps.clusternet.io/feed-protection")
                .cloned()
                .unwrap_or_default();
            if m.metadata.deletion_timestamp.is_some()
                && note.contains(&format!("{}/user", ns.name))
            {
                Ok(note)
            } else {
                Err(format!("annotation {note:?}"))
            }
        },
    )
    .await;
    assert!(
        held.starts_with("block deleting current ConfigMap until all Subscriptions"),
        "{held}"
    );
    // events are recorded in the background: wait for it
    wait_for(
        "a FeedInUse event on the Manifest",
        Duration::from_secs(15),
        || async {
            let events = Api::<Event>::namespaced(parent.clone(), "clusternet-reserved")
                .list(
                    &ListParams::default().fields(&format!("involvedObject.name={}", manifests[0])),
                )
                .await
                .map_err(|e| e.to_string())?;
            if events
                .items
                .iter()
                .any(|e| e.reason.as_deref() == Some("FeedInUse"))
            {
                Ok(())
            } else {
                Err("no FeedInUse event yet".to_string())
            }
        },
    )
    .await;
    // still there a while later
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(api.get_opt(&manifests[0]).await.expect("reading").is_some());
    subs.delete("user", &DeleteParams::default())
        .await
        .expect("deleting the Subscription");
    wait_for("the Manifest gone", Duration::from_secs(30), || async {
        match api
            .get_opt(&manifests[0])
            .await
            .map_err(|e| e.to_string())?
        {
            None => Ok(()),
            Some(m) => Err(format!("still there: {:?}", m.finalizers())),
        }
    })
    .await;
}

#[tokio::test]
async fn objects_two_subscriptions_share_stay_until_both_are_gone() {
    let env = TestEnv::get();
    env.with_controller();
    let parent = env.parent().await;
    let id = uid();
    let clusters = register_with(env, &id, &[1], "Pull", &[], &[]).await;
    let c = &clusters[0];
    let appns = format!("shared-{id}");
    let objects = namespace_and_config(&appns);
    let manifests = create_manifests(&parent, &objects).await;
    let ns = TestNamespace::create(&parent, &env.parent_kubeconfig(), "subs").await;
    let subs: Api<Subscription> = Api::namespaced(parent.clone(), &ns.name);
    let mut created = BTreeMap::new();
    for name in ["first", "second"] {
        let s = subs
            .create(
                &PostParams::default(),
                &subscription(name, &id, &feeds(&objects)),
            )
            .await
            .expect("creating a Subscription");
        created.insert(name, s);
    }
    // both rendered and applied
    wait_for(
        "both Descriptions Success",
        Duration::from_secs(60),
        || async {
            let list = Api::<Description>::namespaced(parent.clone(), &c.dedicated)
                .list(&ListParams::default())
                .await
                .map_err(|e| e.to_string())?;
            let ok = list
                .items
                .iter()
                .filter(|d| {
                    d.status
                        .as_ref()
                        .and_then(|s| s.phase.as_ref())
                        .is_some_and(|p| format!("{p:?}") == "Success")
                })
                .count();
            if ok == 2 {
                Ok(())
            } else {
                Err(format!("{ok} of 2"))
            }
        },
    )
    .await;
    let cm_uid = config_uid(&c.child, &appns).await.expect("the ConfigMap");
    // upstream's Normal events, recorded in the cluster's namespace: on the Base by the
    // controller, on the Description by the agent that deployed it
    wait_for(
        "DescriptionCreated and SuccessfullyDeployed events",
        Duration::from_secs(30),
        || async {
            let reasons = event_reasons(&parent, &c.dedicated).await?;
            if ["DescriptionCreated", "SuccessfullyDeployed"]
                .iter()
                .all(|r| reasons.iter().any(|x| x == r))
            {
                Ok(())
            } else {
                Err(format!("{reasons:?}"))
            }
        },
    )
    .await;
    let ns_uid = Api::<Namespace>::all(c.child.clone())
        .get(&appns)
        .await
        .expect("the namespace")
        .uid();
    subs.delete("first", &DeleteParams::default())
        .await
        .expect("deleting the first Subscription");
    let first_uid = created["first"].uid().unwrap_or_default();
    wait_for(
        "the first Subscription's Bases and Descriptions gone",
        Duration::from_secs(30),
        || async {
            let sel =
                ListParams::default().labels(&format!("apps.clusternet.io/subs.uid={first_uid}"));
            let d = Api::<Description>::all(parent.clone())
                .list(&sel)
                .await
                .map_err(|e| e.to_string())?;
            let b = Api::<Base>::all(parent.clone())
                .list(&sel)
                .await
                .map_err(|e| e.to_string())?;
            if d.items.is_empty() && b.items.is_empty() {
                Ok(())
            } else {
                Err(format!(
                    "{} Descriptions, {} Bases",
                    d.items.len(),
                    b.items.len()
                ))
            }
        },
    )
    .await;
    let until = Instant::now() + Duration::from_secs(4);
    while Instant::now() < until {
        assert_eq!(
            config_uid(&c.child, &appns).await.as_deref(),
            Ok(cm_uid.as_str()),
            "the second Subscription still wants the ConfigMap"
        );
        let live_ns = Api::<Namespace>::all(c.child.clone())
            .get(&appns)
            .await
            .expect("the namespace is still there");
        assert!(live_ns.uid() == ns_uid && live_ns.metadata.deletion_timestamp.is_none());
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    subs.delete("second", &DeleteParams::default())
        .await
        .expect("deleting the second Subscription");
    support::wait_app_removed(&c.child, &appns).await;
    delete_all(&parent, &subs, &[], &manifests).await;
}

/// A config map in `appns` by name: its uid, or why not.
async fn config_map_uid(child: &kube::Client, ns: &str, name: &str) -> Result<String, String> {
    Api::<ConfigMap>::namespaced(child.clone(), ns)
        .get(name)
        .await
        .map(|c| c.uid().unwrap_or_default())
        .map_err(|e| e.to_string())
}

/// The Descriptions of a Subscription, by its uid label.
async fn descriptions_of(
    parent: &kube::Client,
    subs: &Api<Subscription>,
    name: &str,
) -> Vec<String> {
    let uid = subs
        .get(name)
        .await
        .expect("the Subscription")
        .uid()
        .unwrap_or_default();
    Api::<Description>::all(parent.clone())
        .list(&ListParams::default().labels(&format!("apps.clusternet.io/subs.uid={uid}")))
        .await
        .expect("listing Descriptions")
        .items
        .iter()
        .map(|d| d.name_any())
        .collect()
}

/// #44, upstream's semantics: a Subscription with a missing feed deploys nothing (no half-deployed
/// application) and never says so is available, the Base gets `Nonexistent<Kind>` events and the
/// Subscription's `FeedsResolved` names every missing feed; creating the feed deploys everything.
/// A feed that goes missing later (its Manifest deleted past the protection) removes nothing that
/// already runs.
#[tokio::test]
async fn missing_feeds_are_reported_never_available() {
    let env = TestEnv::get();
    env.with_controller();
    let parent = env.parent().await;
    let id = uid();
    let clusters = register_with(env, &id, &[3], "Pull", &[], &[]).await;
    let c = &clusters[0];
    let appns = format!("truth-{id}");
    let mut objects = namespace_and_config(&appns);
    objects.push(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "broken", "namespace": appns, "labels": {MANAGED: "clusternet-hub"}}}));
    let mut manifests = create_manifests(&parent, &objects).await;
    // an override that cannot apply: reported under upstream's event name
    let broken: clusternet::apis::Localization = serde_json::from_value(json!({
        "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Localization", "metadata": {"name": "broken"},
        "spec": {"priority": 500, "overridePolicy": "ApplyNow",
            "feed": {"apiVersion": "v1", "kind": "ConfigMap", "namespace": appns, "name": "broken"},
            "overrides": [{"name": "not-json", "type": "MergePatch", "value": "{not json"}]}}))
    .expect("a Localization");
    Api::<clusternet::apis::Localization>::namespaced(parent.clone(), &c.dedicated)
        .create(&PostParams::default(), &broken)
        .await
        .expect("creating the Localization");
    let missing =
        json!({"apiVersion": "v1", "kind": "ConfigMap", "namespace": appns, "name": "nowhere"});
    let chart = json!({"apiVersion": "apps.clusternet.io/v1alpha1", "kind": "HelmChart", "namespace": "default", "name": format!("nowhere-{id}")});
    let mut all = feeds(&objects);
    all.push(missing);
    all.push(chart.clone());
    let ns = TestNamespace::create(&parent, &env.parent_kubeconfig(), "subs").await;
    let subs: Api<Subscription> = Api::namespaced(parent.clone(), &ns.name);
    subs.create(&PostParams::default(), &subscription("mixed", &id, &all))
        .await
        .expect("creating the Subscription");
    subs.create(
        &PostParams::default(),
        &subscription("charts", &id, &[chart]),
    )
    .await
    .expect("creating the chart-only Subscription");
    let status = wait_for(
        "FeedsResolved=False naming both feeds",
        Duration::from_secs(30),
        || async {
            let s = subs.get("mixed").await.map_err(|e| e.to_string())?;
            let st = s.status.unwrap_or_default();
            let cond = st
                .conditions
                .iter()
                .find(|c| c.type_ == "FeedsResolved")
                .cloned()
                .ok_or("no FeedsResolved condition")?;
            if cond.status == "False"
                && cond.reason == "FeedNotFound"
                && cond.message.contains("ConfigMap")
                && cond.message.contains("nowhere")
                && cond
                    .message
                    .contains(&format!("HelmChart default/nowhere-{id} does not exist"))
                && st.aggregated_statuses.len() == 5
            {
                Ok(st)
            } else {
                Err(format!(
                    "{cond:?} with {} aggregated entries",
                    st.aggregated_statuses.len()
                ))
            }
        },
    )
    .await;
    // upstream's Warning on the Base, naming the feed
    let base = wait_for("the Base", Duration::from_secs(30), || async {
        let s = subs.get("mixed").await.map_err(|e| e.to_string())?;
        bases_of(&parent, &s)
            .await
            .into_iter()
            .next()
            .ok_or_else(|| "no Base yet".to_string())
    })
    .await;
    let expected = format!(
        "Base {}/{} is using a nonexistent ConfigMap {appns}/nowhere",
        c.dedicated,
        base.name_any()
    );
    wait_for(
        "NonexistentConfigMap and FailedApplyingOverrides on the Base",
        Duration::from_secs(30),
        || async {
            let events = Api::<Event>::namespaced(parent.clone(), &c.dedicated)
                .list(
                    &ListParams::default()
                        .fields(&format!("involvedObject.name={}", base.name_any())),
                )
                .await
                .map_err(|e| e.to_string())?;
            let has = |reason: &str, text: &str| {
                events.items.iter().any(|e| {
                    e.reason.as_deref() == Some(reason)
                        && e.message.as_deref().is_some_and(|m| m.contains(text))
                })
            };
            if has("NonexistentConfigMap", &expected) && has("FailedApplyingOverrides", "broken") {
                Ok(())
            } else {
                Err(format!(
                    "{:?}",
                    events
                        .items
                        .iter()
                        .map(|e| (e.reason.clone(), e.message.clone()))
                        .collect::<Vec<_>>()
                ))
            }
        },
    )
    .await;
    // nothing of it deploys, and nothing says it is available
    let until = Instant::now() + Duration::from_secs(5);
    while Instant::now() < until {
        assert!(
            config_uid(&c.child, &appns).await.is_err(),
            "a half-deployed application: the ConfigMap of a Subscription with a missing feed reached the child"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(
        descriptions_of(&parent, &subs, "mixed").await.is_empty(),
        "a Description for a Subscription with missing feeds"
    );
    let available: Vec<bool> = subs
        .get("mixed")
        .await
        .expect("the Subscription")
        .status
        .unwrap_or_default()
        .aggregated_statuses
        .iter()
        .map(|a| a.feed_status_summary.available)
        .collect();
    assert_eq!(available, [false; 5], "{status:?}");
    // events are recorded in the background: wait for them
    wait_for(
        "the Subscriptions' events",
        Duration::from_secs(15),
        || async {
            let reasons: Vec<(String, String)> = Api::<Event>::namespaced(parent.clone(), &ns.name)
                .list(&ListParams::default())
                .await
                .map_err(|e| e.to_string())?
                .items
                .iter()
                .map(|e| {
                    (
                        e.involved_object.name.clone().unwrap_or_default(),
                        e.reason.clone().unwrap_or_default(),
                    )
                })
                .collect();
            let missing: Vec<(&str, &str)> = [
                ("mixed", "FeedNotFound"),
                ("mixed", "BaseCreated"),
                ("charts", "FeedNotFound"),
            ]
            .into_iter()
            .filter(|want| !reasons.iter().any(|(n, r)| n == want.0 && r == want.1))
            .collect();
            if missing.is_empty() {
                Ok(())
            } else {
                Err(format!("missing {missing:?} among {reasons:?}"))
            }
        },
    )
    .await;

    // a present and a missing feed: nothing until the missing one is created, then both
    let pair = vec![
        support::feed_of(&objects[0]),
        support::feed_of(&objects[1]),
        json!({"apiVersion": "v1", "kind": "ConfigMap", "namespace": appns, "name": "later"}),
    ];
    subs.create(&PostParams::default(), &subscription("pair", &id, &pair))
        .await
        .expect("creating the Subscription");
    let later_missing = |what: &'static str| {
        wait_for(what, Duration::from_secs(30), || async {
            let s = subs.get("pair").await.map_err(|e| e.to_string())?;
            s.status
                .unwrap_or_default()
                .conditions
                .iter()
                .find(|c| c.type_ == "FeedsResolved" && c.status == "False")
                .filter(|c| c.message.contains("later"))
                .map(|_| ())
                .ok_or_else(|| "not yet".to_string())
        })
    };
    later_missing("FeedsResolved=False on the pair").await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        config_uid(&c.child, &appns).await.is_err(),
        "the present feed of the pair deployed without the missing one"
    );
    let later = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "later", "namespace": appns, "labels": {MANAGED: "clusternet-hub"}}, "data": {"k": "v"}});
    manifests.extend(create_manifests(&parent, std::slice::from_ref(&later)).await);
    let (settings_uid, later_uid) = wait_for(
        "both ConfigMaps in the child",
        Duration::from_secs(60),
        || async {
            Ok::<_, String>((
                config_uid(&c.child, &appns).await?,
                config_map_uid(&c.child, &appns, "later").await?,
            ))
        },
    )
    .await;
    wait_for(
        "the pair resolved and available",
        Duration::from_secs(60),
        || async {
            let st = subs
                .get("pair")
                .await
                .map_err(|e| e.to_string())?
                .status
                .unwrap_or_default();
            let resolved = st
                .conditions
                .iter()
                .any(|c| c.type_ == "FeedsResolved" && c.status == "True");
            let available = st.aggregated_statuses.len() == 3
                && st
                    .aggregated_statuses
                    .iter()
                    .all(|a| a.feed_status_summary.available);
            (resolved && available)
                .then_some(())
                .ok_or(format!("{:?}", st.conditions))
        },
    )
    .await;

    // the feed goes missing later (deleted past its protection, as with the gate off): what runs
    // stays, and the Subscription says the feed is missing
    let later_manifest = format!("configmaps.{appns}.later");
    let reserved: Api<Manifest> = Api::namespaced(parent.clone(), "clusternet-reserved");
    reserved
        .delete(&later_manifest, &DeleteParams::default())
        .await
        .expect("deleting the Manifest");
    reserved
        .patch(
            &later_manifest,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .expect("releasing its finalizers");
    later_missing("the pair's FeedsResolved=False again").await;
    let until = Instant::now() + Duration::from_secs(8);
    while Instant::now() < until {
        assert_eq!(
            (
                config_uid(&c.child, &appns).await,
                config_map_uid(&c.child, &appns, "later").await
            ),
            (Ok(settings_uid.clone()), Ok(later_uid.clone())),
            "a feed that went missing removed what runs in the child"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // a ServiceImport that does not name the exported Service says so
    let si: clusternet::apis::ServiceImport = serde_json::from_value(json!({
        "apiVersion": "multicluster.x-k8s.io/v1alpha1", "kind": "ServiceImport", "metadata": {"name": "web"},
        "spec": {"type": "ClusterSetIP", "ports": [{"port": 80, "protocol": "TCP"}]}}))
    .expect("a ServiceImport");
    Api::<clusternet::apis::ServiceImport>::namespaced(parent.clone(), &ns.name)
        .create(&PostParams::default(), &si)
        .await
        .expect("creating the ServiceImport");
    wait_for(
        "InvalidServiceImport on the ServiceImport",
        Duration::from_secs(30),
        || async {
            let events = Api::<Event>::namespaced(parent.clone(), &ns.name)
                .list(&ListParams::default().fields("involvedObject.kind=ServiceImport"))
                .await
                .map_err(|e| e.to_string())?;
            match events
                .items
                .iter()
                .find(|e| e.reason.as_deref() == Some("InvalidServiceImport"))
            {
                Some(e)
                    if e.message.as_deref().is_some_and(|m| {
                        m.contains("services.clusternet.io/multi-cluster-service-name")
                    }) =>
                {
                    Ok(())
                }
                _ => Err(format!("{} events", events.items.len())),
            }
        },
    )
    .await;
    // a Base of charts only has no Description that could claim Success
    let sel = ListParams::default().labels(&format!(
        "apps.clusternet.io/subs.uid={}",
        subs.get("charts")
            .await
            .expect("the Subscription")
            .uid()
            .unwrap_or_default()
    ));
    wait_for("the chart-only Base", Duration::from_secs(30), || async {
        let n = Api::<Base>::all(parent.clone())
            .list(&sel)
            .await
            .map_err(|e| e.to_string())?
            .items
            .len();
        if n == 1 {
            Ok(())
        } else {
            Err(format!("{n} Bases"))
        }
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let descs = Api::<Description>::all(parent.clone())
        .list(&sel)
        .await
        .expect("listing")
        .items;
    assert!(
        descs.is_empty(),
        "a Description for Helm charts only: {:?}",
        descs.iter().map(|d| d.name_any()).collect::<Vec<_>>()
    );
    delete_all(&parent, &subs, &["mixed", "charts", "pair"], &manifests).await;
    support::wait_app_removed(&c.child, &appns).await;
}

#[tokio::test]
async fn a_predictor_that_cannot_bind_its_port_is_not_advertised() {
    let env = TestEnv::get();
    env.with_controller();
    let parent = env.parent().await;
    let id = uid();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("a port to occupy");
    let port = taken.local_addr().expect("address").port().to_string();
    let busy = format!("--predictor-port={port}");
    let clusters = register_with(env, &id, &[1], "Pull", &[], &[&busy]).await;
    let free = register_with(env, &format!("{id}f"), &[1], "Pull", &[], &[]).await;
    let status = support::managed_cluster(&parent, &clusters[0])
        .await
        .status
        .unwrap_or_default();
    assert!(
        !status.predictor_enabled && status.predictor_address.is_empty(),
        "advertised a predictor it does not serve: {} {}",
        status.predictor_enabled,
        status.predictor_address
    );
    let status = support::managed_cluster(&parent, &free[0])
        .await
        .status
        .unwrap_or_default();
    assert!(
        status.predictor_enabled,
        "the agent with a free port serves its predictor"
    );
    assert!(
        status.predictor_address.starts_with("http://localhost:")
            && !status.predictor_address.ends_with(":0")
            && !status.predictor_address.ends_with(&format!(":{port}")),
        "{}",
        status.predictor_address
    );
    drop(taken);
}
