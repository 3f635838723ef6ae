//! Subscription revisions on real control planes (docs/spec/deployer.md §14): every change to
//! what a Subscription renders is a numbered ControllerRevision, identical content is the same
//! revision, the history keeps `revisionHistoryLimit`, and `kubectl clusternet rollout history`
//! shows it.

mod support;

use std::time::Duration;

use clusternet::apis::SubscriptionRevision;
use clusternet::apis::known::CHANGE_CAUSE_ANNOTATION;
use clusternet::apis::{Base, Description, Localization, Manifest, Subscription};
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use support::{TestEnv, TestNamespace, create_manifests, register, uid, wait_for};

/// `(number, name, change cause)` of each revision of the Subscription, oldest first.
async fn revisions(
    api: &Api<ControllerRevision>,
    sub_uid: &str,
) -> Result<Vec<(i64, String, String)>, String> {
    let sel = format!("apps.clusternet.io/subs.uid={sub_uid}");
    let mut list: Vec<(i64, String, String)> = api
        .list(&ListParams::default().labels(&sel))
        .await
        .map_err(|e| e.to_string())?
        .items
        .iter()
        .map(|r| {
            (
                r.revision,
                r.name_any(),
                r.annotations()
                    .get(CHANGE_CAUSE_ANNOTATION)
                    .cloned()
                    .unwrap_or_default(),
            )
        })
        .collect();
    list.sort();
    Ok(list)
}

async fn wait_numbers(
    what: &str,
    api: &Api<ControllerRevision>,
    sub_uid: &str,
    want: &[i64],
) -> Vec<(i64, String, String)> {
    wait_for(what, Duration::from_secs(30), || async {
        let list = revisions(api, sub_uid).await?;
        let numbers: Vec<i64> = list.iter().map(|r| r.0).collect();
        if numbers == want {
            Ok(list)
        } else {
            Err(format!("{list:?}"))
        }
    })
    .await
}

async fn child_value(child: &kube::Client, ns: &str, want: &str) {
    wait_for(
        &format!("the child's ConfigMap says {want}"),
        Duration::from_secs(60),
        || async {
            let cm = Api::<ConfigMap>::namespaced(child.clone(), ns)
                .get("cfg")
                .await
                .map_err(|e| e.to_string())?;
            let v = cm.data.unwrap_or_default().get("v").cloned();
            if v.as_deref() == Some(want) {
                Ok(())
            } else {
                Err(format!("{v:?}"))
            }
        },
    )
    .await;
}

#[tokio::test]
async fn every_change_to_what_a_subscription_renders_is_a_numbered_revision() {
    let env = TestEnv::get();
    env.with_controller();
    let parent = env.parent().await;
    let id = uid();
    let clusters = register(env, &id, &[1], "Push", &[]).await;
    let appns = format!("rev-{id}");
    let objects = vec![
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": appns}}),
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg", "namespace": appns}, "data": {"v": "1"}}),
    ];
    let manifests = create_manifests(&parent, &objects).await;
    let ns = TestNamespace::create(&parent, &env.parent_kubeconfig(), "revs").await;
    let subs: Api<Subscription> = Api::namespaced(parent.clone(), &ns.name);
    let sub: Subscription = serde_json::from_value(json!({
        "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Subscription", "metadata": {"name": "app"},
        "spec": {"subscribers": [{"clusterAffinity": {"matchLabels": {"e2e": id}}}],
                 "revisionHistoryLimit": 3,
                 "feeds": Value::Array(objects.iter().map(support::feed_of).collect())}}))
    .expect("a Subscription");
    let sub = subs
        .create(&PostParams::default(), &sub)
        .await
        .expect("creating the Subscription");
    let sub_uid = sub.uid().unwrap_or_default();
    let child = &clusters[0].child;
    child_value(child, &appns, "1").await;
    let revs: Api<ControllerRevision> = Api::namespaced(parent.clone(), &ns.name);
    let first = wait_numbers("revision 1", &revs, &sub_uid, &[1]).await;
    assert_eq!(first[0].2, "first revision");
    let r1 = revs.get(&first[0].1).await.expect("revision 1");
    assert!(
        r1.owner_references()
            .iter()
            .any(|o| o.kind == "Subscription" && o.uid == sub_uid && o.controller == Some(true)),
        "{:?}",
        r1.owner_references()
    );

    // a feed's content changes: revision 2, saying which feed
    let manifests_api: Api<Manifest> = Api::namespaced(parent.clone(), "clusternet-reserved");
    let set_value = |v: &str| Patch::Merge(json!({"template": {"data": {"v": v}}}));
    manifests_api
        .patch(&manifests[1], &PatchParams::default(), &set_value("2"))
        .await
        .expect("editing the Manifest");
    child_value(child, &appns, "2").await;
    let two = wait_numbers("revision 2", &revs, &sub_uid, &[1, 2]).await;
    assert_eq!(two[1].2, format!("changed: feed ConfigMap {appns}/cfg"));

    // an override for the bound cluster: revision 3, saying where
    let dedicated = clusters[0].dedicated.clone();
    let locs: Api<Localization> = Api::namespaced(parent.clone(), &dedicated);
    let loc: Localization = serde_json::from_value(json!({
        "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Localization",
        "metadata": {"name": "local-v"},
        "spec": {"feed": {"apiVersion": "v1", "kind": "ConfigMap", "name": "cfg", "namespace": appns},
                 "overridePolicy": "ApplyNow",
                 "overrides": [{"name": "v", "type": "MergePatch", "value": "{\"data\":{\"v\":\"local\"}}"}]}}))
    .expect("a Localization");
    locs.create(&PostParams::default(), &loc)
        .await
        .expect("creating the Localization");
    child_value(child, &appns, "local").await;
    let three = wait_numbers("revision 3", &revs, &sub_uid, &[1, 2, 3]).await;
    assert_eq!(three[2].2, format!("changed: overrides in {dedicated}"));

    // the override goes: the content is revision 2's again, which becomes revision 4
    locs.delete("local-v", &DeleteParams::default())
        .await
        .expect("deleting the Localization");
    child_value(child, &appns, "2").await;
    let four = wait_numbers("revision 2 back as 4", &revs, &sub_uid, &[1, 3, 4]).await;
    assert_eq!(four[2].1, two[1].1, "the same content is the same revision");

    // one more change: the history keeps the newest three
    manifests_api
        .patch(&manifests[1], &PatchParams::default(), &set_value("3"))
        .await
        .expect("editing the Manifest again");
    child_value(child, &appns, "3").await;
    let five = wait_numbers("revision 5, history of 3", &revs, &sub_uid, &[3, 4, 5]).await;

    // what makes no change makes no revision: the same content applied again, metadata-only
    // changes of the Subscription, time
    manifests_api
        .patch(&manifests[1], &PatchParams::default(), &set_value("3"))
        .await
        .expect("applying the same content");
    subs.patch(
        "app",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"touched": "again"}}})),
    )
    .await
    .expect("labelling the Subscription");
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(
        revisions(&revs, &sub_uid).await.expect("revisions"),
        five,
        "no new revision without new content"
    );

    // kubectl clusternet rollout history
    let out = env.plugin(&["rollout", "history", "subscription/app", "-n", &ns.name]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.starts_with("subscription.apps.clusternet.io/app\nREVISION  CHANGE-CAUSE\n"),
        "{text}"
    );
    for (n, _, cause) in &five {
        assert!(
            text.contains(&format!("{n:<9} {cause}\n")),
            "revision {n} in:\n{text}"
        );
    }
    let out = env.plugin(&[
        "rollout",
        "history",
        "subscription/app",
        "-n",
        &ns.name,
        "--revision=5",
        "-o",
        "json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let snap: SubscriptionRevision =
        serde_json::from_slice(&out.stdout).expect("revision 5's content as JSON");
    assert_eq!(snap.feeds[1].objects[0]["data"]["v"], json!("3"));
    let out = env.plugin(&[
        "rollout",
        "history",
        "subscription/app",
        "-n",
        &ns.name,
        "--revision=1",
    ]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("unable to find the specified revision"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // undo is a staged rollout's: without a strategy the command says so and changes nothing
    let out = env.plugin(&["rollout", "undo", "subscription/app", "-n", &ns.name]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("has no rollout strategy"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // a Base pinned to a revision renders that revision (revision 3: the value 2 with the
    // Localization since deleted), and its Description says so; unpinned, the live feeds again
    let bases: Api<Base> = Api::namespaced(parent.clone(), &dedicated);
    let base = bases
        .list(&ListParams::default().labels(&format!("apps.clusternet.io/subs.uid={sub_uid}")))
        .await
        .expect("listing Bases")
        .items
        .into_iter()
        .next()
        .expect("the Base");
    let pin = |to: Value| {
        Patch::Merge(json!({"metadata": {"annotations": {"apps.clusternet.io/revision": to}}}))
    };
    let rev3 = five[0].1.clone();
    bases
        .patch(&base.name_any(), &PatchParams::default(), &pin(json!(rev3)))
        .await
        .expect("pinning the Base");
    child_value(child, &appns, "local").await;
    let descriptions: Api<Description> = Api::namespaced(parent.clone(), &dedicated);
    let d = descriptions
        .get(&format!("{}-generic", base.name_any()))
        .await
        .expect("the Description");
    assert_eq!(
        d.annotations().get("apps.clusternet.io/revision"),
        Some(&rev3)
    );
    bases
        .patch(&base.name_any(), &PatchParams::default(), &pin(Value::Null))
        .await
        .expect("unpinning the Base");
    child_value(child, &appns, "3").await;
    assert_eq!(
        revisions(&revs, &sub_uid).await.expect("revisions"),
        five,
        "pinning makes no revision"
    );

    // the revisions go with the Subscription
    subs.delete("app", &DeleteParams::default())
        .await
        .expect("deleting the Subscription");
    wait_numbers("no revision left", &revs, &sub_uid, &[]).await;
    support::wait_app_removed(child, &appns).await;
    for m in manifests {
        let _ = manifests_api.delete(&m, &DeleteParams::default()).await;
    }
}
