//! HelmChart feeds (#15, docs/spec/deployer.md §7) against real control planes, a real chart
//! repository (charts of `tests/charts/` packaged and indexed with the real `helm`, served on
//! loopback, one copy behind basic auth) and a real OCI registry (the CNCF distribution registry,
//! `helm push`ed to). Every HelmChart gets its feed labels and says Found, or NotFound with Helm's
//! reason; a Subscription of charts becomes releases in real children (`helm list` there shows
//! them), upgraded when the chart changes and only then, uninstalled when it goes; Pull and Push.

mod support;

use std::time::Duration;

use clusternet::apis::{
    Base, Description, HelmChart, HelmChartPhase, HelmRelease, Localization, Subscription,
};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use support::{
    Cluster, OciRegistry, TestEnv, TestNamespace, chart_repo, helm_list, register, uid, wait_for,
};

async fn create(api: &Api<HelmChart>, name: &str, spec: Value) {
    let chart: HelmChart = serde_json::from_value(json!({
        "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "HelmChart",
        "metadata": {"name": name}, "spec": spec}))
    .expect("a HelmChart");
    api.create(&PostParams::default(), &chart)
        .await
        .expect("creating a HelmChart");
}

/// Waits until HelmChart `name` has `phase`; its reason.
async fn phase_of(api: &Api<HelmChart>, name: &str, phase: HelmChartPhase) -> String {
    wait_for(
        &format!("HelmChart {name} {phase:?}"),
        Duration::from_secs(60),
        || async {
            let c = api.get(name).await.map_err(|e| e.to_string())?;
            let s = c.status.unwrap_or_default();
            if s.phase == Some(phase) {
                Ok(s.reason)
            } else {
                Err(format!("{:?}: {}", s.phase, s.reason))
            }
        },
    )
    .await
}

#[tokio::test]
async fn helm_charts_are_found_in_repositories_and_registries_or_say_why_not() {
    let env = TestEnv::get();
    env.with_controller();
    let parent = env.parent().await;
    let repo = chart_repo(env, "hello", &["0.1.0", "0.2.0"], None).await;
    let private = chart_repo(env, "hello", &["0.3.0"], Some(("ci", "s3cret"))).await;
    let registry = OciRegistry::start(env).await;
    registry.push(env, "hello", "0.1.0", "charts");
    let ns = TestNamespace::create(&parent, &env.parent_kubeconfig(), "helm").await;
    let charts: Api<HelmChart> = Api::namespaced(parent.clone(), &ns.name);
    let secret: Secret = serde_json::from_value(json!({"metadata": {"name": "repo-auth"},
        "stringData": {"username": "ci", "password": "s3cret"}}))
    .expect("a Secret");
    Api::<Secret>::namespaced(parent.clone(), &ns.name)
        .create(&PostParams::default(), &secret)
        .await
        .expect("creating the pull secret");
    let oci = format!("oci://{}/charts", registry.host);
    for (name, spec) in [
        (
            "pinned",
            json!({"repo": repo.url, "chart": "hello", "version": "0.1.0"}),
        ),
        (
            "latest",
            json!({"repo": repo.url, "chart": "hello", "version": ""}),
        ),
        (
            "ranged",
            json!({"repo": repo.url, "chart": "hello", "version": "^0.1"}),
        ),
        (
            "no-version",
            json!({"repo": repo.url, "chart": "hello", "version": "9.9.9"}),
        ),
        (
            "no-chart",
            json!({"repo": repo.url, "chart": "nope", "version": "0.1.0"}),
        ),
        (
            "oci",
            json!({"repo": oci, "chart": "hello", "version": "0.1.0", "plainHTTP": true}),
        ),
        (
            "oci-no-version",
            json!({"repo": oci, "chart": "hello", "version": "0.9.0", "plainHTTP": true}),
        ),
        (
            "private",
            json!({"repo": private.url, "chart": "hello", "version": "0.3.0",
            "chartPullSecret": {"name": "repo-auth"}}),
        ),
        (
            "private-no-auth",
            json!({"repo": private.url, "chart": "hello", "version": "0.3.0"}),
        ),
    ] {
        let mut spec = spec;
        spec["targetNamespace"] = json!("hello");
        create(&charts, name, spec).await;
    }
    for name in ["pinned", "latest", "ranged", "oci", "private"] {
        phase_of(&charts, name, HelmChartPhase::Found).await;
    }
    assert_eq!(
        phase_of(&charts, "no-version", HelmChartPhase::NotFound).await,
        format!(
            "chart \"hello\" version \"9.9.9\" not found in {} repository",
            repo.url
        )
    );
    assert_eq!(
        phase_of(&charts, "no-chart", HelmChartPhase::NotFound).await,
        format!(
            "chart \"nope\" version \"0.1.0\" not found in {} repository",
            repo.url
        )
    );
    assert_eq!(
        phase_of(&charts, "oci-no-version", HelmChartPhase::NotFound).await,
        format!("not found a version matched 0.9.0 for chart {oci}/hello")
    );
    let denied = phase_of(&charts, "private-no-auth", HelmChartPhase::NotFound).await;
    assert!(denied.contains("401"), "{denied}");
    // found by the feed labels every HelmChart carries
    let labels = charts
        .get("pinned")
        .await
        .expect("a HelmChart")
        .metadata
        .labels
        .unwrap_or_default();
    for (k, v) in [
        ("apps.clusternet.io/config.kind", "HelmChart"),
        ("apps.clusternet.io/config.group", "apps.clusternet.io"),
        ("apps.clusternet.io/config.version", "v1alpha1"),
        ("apps.clusternet.io/config.name", "pinned"),
        ("apps.clusternet.io/config.namespace", ns.name.as_str()),
    ] {
        assert_eq!(labels.get(k).map(String::as_str), Some(v), "label {k}");
    }
    // fixed: found at once (a spec change is looked up again)
    charts
        .patch(
            "no-version",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"version": "0.2.0"}})),
        )
        .await
        .expect("fixing the version");
    phase_of(&charts, "no-version", HelmChartPhase::Found).await;
}

/// Waits until child `i` has release `name` in `ns` at `revision`, deployed, of `chart`.
async fn released(env: &TestEnv, i: usize, ns: &str, name: &str, revision: i64, chart: &str) {
    support::wait_released(env, i, ns, name, revision, Some(chart)).await;
}

async fn greeting(child: &kube::Client, ns: &str, release: &str) -> (String, String) {
    let cm = Api::<ConfigMap>::namespaced(child.clone(), ns)
        .get(&format!("{release}-hello"))
        .await
        .expect("the chart's ConfigMap");
    let data = cm.data.unwrap_or_default();
    (
        data.get("greeting").cloned().unwrap_or_default(),
        data.get("chartVersion").cloned().unwrap_or_default(),
    )
}

fn subscription(id: &str, ns: &str, charts: &[&str]) -> Subscription {
    subscription_named("charts", id, ns, charts)
}

fn subscription_named(name: &str, id: &str, ns: &str, charts: &[&str]) -> Subscription {
    serde_json::from_value(json!({
        "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Subscription",
        "metadata": {"name": name},
        "spec": {"subscribers": [{"clusterAffinity": {"matchLabels": {"e2e": id}}}],
            "feeds": charts.iter().map(|c| json!({"apiVersion": "apps.clusternet.io/v1alpha1",
                "kind": "HelmChart", "namespace": ns, "name": c})).collect::<Vec<_>>()}}))
    .expect("a Subscription")
}

/// Deletes the Subscription and waits until no release, HelmRelease, Description or Base of it
/// is left.
async fn delete_and_wait_clean(
    env: &TestEnv,
    subs: &Api<Subscription>,
    children: &[usize],
    namespaces: &[String],
) {
    delete_and_wait_clean_named(env, subs, "charts", children, namespaces).await
}

async fn delete_and_wait_clean_named(
    env: &TestEnv,
    subs: &Api<Subscription>,
    name: &str,
    children: &[usize],
    namespaces: &[String],
) {
    let parent = env.parent().await;
    let sub = subs.get(name).await.expect("the Subscription");
    let uid = sub.uid().unwrap_or_default();
    subs.delete(name, &DeleteParams::default())
        .await
        .expect("deleting the Subscription");
    for &i in children {
        for ns in namespaces {
            support::wait_no_releases(env, i, ns).await;
        }
    }
    let sel = ListParams::default().labels(&format!("apps.clusternet.io/subs.uid={uid}"));
    wait_for(
        "no HelmRelease, Description or Base left",
        Duration::from_secs(60),
        || async {
            let n = |e: kube::Error| e.to_string();
            let h = Api::<HelmRelease>::all(parent.clone())
                .list(&sel)
                .await
                .map_err(n)?;
            let d = Api::<Description>::all(parent.clone())
                .list(&sel)
                .await
                .map_err(n)?;
            let b = Api::<Base>::all(parent.clone())
                .list(&sel)
                .await
                .map_err(n)?;
            match (h.items.len(), d.items.len(), b.items.len()) {
                (0, 0, 0) => Ok(()),
                other => Err(format!("{other:?} HelmReleases, Descriptions, Bases")),
            }
        },
    )
    .await;
}

/// The HelmReleases of the Subscription in cluster `c`'s namespace, by chart name.
async fn releases_in(parent: &kube::Client, c: &Cluster) -> Vec<HelmRelease> {
    Api::<HelmRelease>::namespaced(parent.clone(), &c.dedicated)
        .list(&ListParams::default())
        .await
        .expect("listing HelmReleases")
        .items
}

#[tokio::test]
async fn charts_from_a_repository_and_a_registry_are_released_in_every_pull_child() {
    let env = TestEnv::get();
    env.with_controller();
    let parent = env.parent().await;
    let id = uid();
    let clusters = register(env, &id, &[1, 2], "Pull", &[]).await;
    let repo = chart_repo(env, "hello", &["0.1.0", "0.2.0"], None).await;
    let registry = OciRegistry::start(env).await;
    registry.push(env, "hello", "0.1.0", "charts");
    let ns = TestNamespace::create(&parent, &env.parent_kubeconfig(), "helmrel").await;
    let charts: Api<HelmChart> = Api::namespaced(parent.clone(), &ns.name);
    let (web_ns, oci_ns) = (format!("hr-web-{id}"), format!("hr-oci-{id}"));
    let oci = format!("oci://{}/charts", registry.host);
    for (name, spec) in [
        (
            "web",
            json!({"repo": repo.url, "chart": "hello", "version": "0.1.0", "targetNamespace": web_ns}),
        ),
        (
            "oci",
            json!({"repo": oci, "chart": "hello", "version": "0.1.0", "plainHTTP": true, "targetNamespace": oci_ns}),
        ),
        (
            "no-version",
            json!({"repo": repo.url, "chart": "hello", "version": "9.9.9", "targetNamespace": web_ns}),
        ),
        (
            "no-chart",
            json!({"repo": repo.url, "chart": "nope", "version": "0.1.0", "targetNamespace": web_ns}),
        ),
    ] {
        create(&charts, name, spec).await;
    }
    // a value set for the first child only (upstream's Helm Localization, applied at once)
    let loc: Localization = serde_json::from_value(json!({
        "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Localization",
        "metadata": {"name": format!("greet-{id}")},
        "spec": {"priority": 500, "overridePolicy": "ApplyNow",
            "feed": {"apiVersion": "apps.clusternet.io/v1alpha1", "kind": "HelmChart",
                "namespace": ns.name, "name": "web"},
            "overrides": [{"name": "greeting", "type": "Helm", "value": "greeting: hola\n"}]}}))
    .expect("a Localization");
    Api::<Localization>::namespaced(parent.clone(), &clusters[0].dedicated)
        .create(&PostParams::default(), &loc)
        .await
        .expect("creating the Localization");
    let subs: Api<Subscription> = Api::namespaced(parent.clone(), &ns.name);
    subs.create(
        &PostParams::default(),
        &subscription(&id, &ns.name, &["web", "oci"]),
    )
    .await
    .expect("creating the Subscription");
    // charts that cannot be found are never handed to a child (upstream: the Base is not
    // rendered while a chart is NotFound), whichever Subscription names them
    subs.create(
        &PostParams::default(),
        &subscription_named("missing", &id, &ns.name, &["web", "no-version", "no-chart"]),
    )
    .await
    .expect("creating the Subscription of missing charts");

    // both children: both releases at revision 1, the value overridden in one child only
    for i in [1, 2] {
        released(env, i, &web_ns, "web", 1, "hello-0.1.0").await;
        released(env, i, &oci_ns, "oci", 1, "hello-0.1.0").await;
    }
    assert_eq!(greeting(&clusters[0].child, &web_ns, "web").await.0, "hola");
    assert_eq!(
        greeting(&clusters[1].child, &web_ns, "web").await.0,
        "hello"
    );
    assert_eq!(
        greeting(&clusters[1].child, &oci_ns, "oci").await.0,
        "hello"
    );

    // what is missing says so on the HelmChart, the Bases and the Subscription
    assert_eq!(
        phase_of(&charts, "no-version", HelmChartPhase::NotFound).await,
        format!(
            "chart \"hello\" version \"9.9.9\" not found in {} repository",
            repo.url
        )
    );
    phase_of(&charts, "no-chart", HelmChartPhase::NotFound).await;
    let missing_uid = subs
        .get("missing")
        .await
        .expect("the Subscription")
        .uid()
        .unwrap_or_default();
    let of_missing =
        ListParams::default().labels(&format!("apps.clusternet.io/subs.uid={missing_uid}"));
    for c in &clusters {
        wait_for(
            "HelmChartNotFound on the Base of missing charts",
            Duration::from_secs(60),
            || async {
                let bases = Api::<Base>::namespaced(parent.clone(), &c.dedicated)
                    .list(&of_missing)
                    .await
                    .map_err(|e| e.to_string())?;
                let base = bases.items.first().ok_or("no Base yet")?;
                let events = Api::<k8s_openapi::api::core::v1::Event>::namespaced(
                    parent.clone(),
                    &c.dedicated,
                )
                .list(&ListParams::default().fields(&format!(
                    "involvedObject.name={},reason=HelmChartNotFound",
                    base.name_any()
                )))
                .await
                .map_err(|e| e.to_string())?;
                events
                    .items
                    .iter()
                    .find_map(|e| e.message.clone().filter(|m| m.contains("no-version")))
                    .ok_or_else(|| "no event yet".to_string())
            },
        )
        .await;
    }
    let status = wait_for(
        "FeedsResolved=False on the Subscription of missing charts",
        Duration::from_secs(60),
        || async {
            let s = subs.get("missing").await.map_err(|e| e.to_string())?;
            let st = s.status.unwrap_or_default();
            let cond = st
                .conditions
                .iter()
                .find(|c| c.type_ == "FeedsResolved")
                .ok_or("no FeedsResolved yet")?;
            // kstatus: Failed (Stalled) for the same reason
            let stalled = st
                .conditions
                .iter()
                .any(|c| c.type_ == "Stalled" && c.reason == "HelmChartNotFound");
            if cond.status == "False"
                && cond.reason == "HelmChartNotFound"
                && cond.message.contains("9.9.9")
                && st.aggregated_statuses.len() == 3
                && stalled
            {
                Ok(st)
            } else {
                Err(format!("{cond:?}"))
            }
        },
    )
    .await;
    assert!(
        status
            .aggregated_statuses
            .iter()
            .all(|a| !a.feed_status_summary.available),
        "nothing of it runs: {:?}",
        status.aggregated_statuses
    );
    let descs = Api::<Description>::all(parent.clone())
        .list(&of_missing)
        .await
        .expect("listing Descriptions");
    assert!(
        descs.items.is_empty(),
        "a chart that was not found reached a Description: {:?}",
        descs.items.iter().map(|d| d.name_any()).collect::<Vec<_>>()
    );
    // the Subscription's aggregated status: the two real charts available in both clusters
    wait_for(
        "aggregated status of the charts",
        Duration::from_secs(60),
        || async {
            let s = subs.get("charts").await.map_err(|e| e.to_string())?;
            let st = s.status.unwrap_or_default();
            let ok = |name: &str| {
                st.aggregated_statuses.iter().any(|a| {
                    a.feed.name == name
                        && a.feed_status_summary.available
                        && a.feed_status_details.len() == 2
                })
            };
            // and kstatus's Ready: both releases deployed in both children
            let ready = st
                .conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True");
            if ok("web") && ok("oci") && ready {
                Ok(())
            } else {
                Err(format!("{:?} {:?}", st.aggregated_statuses, st.conditions))
            }
        },
    )
    .await;
    delete_and_wait_clean_named(env, &subs, "missing", &[], &[]).await;

    // a new chart version: every child upgrades to revision 2
    charts
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"version": "0.2.0"}})),
        )
        .await
        .expect("changing the chart version");
    for (i, c) in [1, 2].into_iter().zip(&clusters) {
        released(env, i, &web_ns, "web", 2, "hello-0.2.0").await;
        assert_eq!(greeting(&c.child, &web_ns, "web").await.1, "0.2.0");
    }
    // nothing changes: reconciles (each HelmRelease touched three times) add no revision
    for round in 0..3 {
        for c in &clusters {
            for hr in releases_in(&parent, c).await {
                Api::<HelmRelease>::namespaced(parent.clone(), &c.dedicated)
                    .patch(
                        &hr.name_any(),
                        &PatchParams::default(),
                        &Patch::Merge(json!({"metadata": {"annotations": {"e2e/touched": round.to_string()}}})),
                    )
                    .await
                    .expect("touching a HelmRelease");
            }
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    // each HelmRelease and Description says Ready for its own generation (kstatus: Current)
    for c in &clusters {
        for hr in releases_in(&parent, c).await {
            let st = hr.status.clone().unwrap_or_default();
            assert_eq!(
                st.observed_generation,
                hr.metadata.generation,
                "HelmRelease {}",
                hr.name_any()
            );
            assert!(
                st.conditions.iter().any(|c| c.type_ == "Ready"
                    && c.status == "True"
                    && c.observed_generation == hr.metadata.generation),
                "HelmRelease {}: {:?}",
                hr.name_any(),
                st.conditions
            );
        }
    }
    for i in [1, 2] {
        let list = helm_list(env, i, &web_ns);
        let web = list.iter().find(|r| r.0 == "web").expect("web released");
        assert_eq!((web.1, web.2.as_str()), (2, "deployed"), "{list:?}");
        let list = helm_list(env, i, &oci_ns);
        assert_eq!(
            list.iter().find(|r| r.0 == "oci").map(|r| r.1),
            Some(1),
            "{list:?}"
        );
    }

    delete_and_wait_clean(env, &subs, &[1, 2], &[web_ns, oci_ns]).await;
}

#[tokio::test]
async fn the_parent_releases_charts_in_push_and_dual_children_and_uninstalls_them() {
    let env = TestEnv::get();
    env.with_controller();
    let parent = env.parent().await;
    let (id, dual_id) = (uid(), uid());
    let group = format!("e2e-group={id}");
    let mut clusters = register(env, &id, &[3], "Push", &[group.as_str()]).await;
    // Dual with AppPusher (the agent's default): the parent deploys too
    clusters.extend(register(env, &dual_id, &[1], "Dual", &[group.as_str()]).await);
    let repo = chart_repo(env, "hello", &["0.1.0"], None).await;
    let ns = TestNamespace::create(&parent, &env.parent_kubeconfig(), "helmpush").await;
    let charts: Api<HelmChart> = Api::namespaced(parent.clone(), &ns.name);
    let target = format!("hr-push-{id}");
    create(
        &charts,
        "pushed",
        json!({"repo": repo.url, "chart": "hello", "version": "0.1.0", "targetNamespace": target}),
    )
    .await;
    let subs: Api<Subscription> = Api::namespaced(parent.clone(), &ns.name);
    let mut sub = subscription(&id, &ns.name, &["pushed"]);
    sub.spec.subscribers =
        serde_json::from_value(json!([{"clusterAffinity": {"matchLabels": {"e2e-group": id}}}]))
            .expect("subscribers");
    subs.create(&PostParams::default(), &sub)
        .await
        .expect("creating the Subscription");
    released(env, 3, &target, "pushed", 1, "hello-0.1.0").await;
    released(env, 1, &target, "pushed", 1, "hello-0.1.0").await;
    // the parent's deployer reported both releases, not the agents
    for c in &clusters {
        let managers: Vec<String> = releases_in(&parent, c)
            .await
            .iter()
            .flat_map(|h| h.metadata.managed_fields.clone().unwrap_or_default())
            .filter(|m| m.subresource.as_deref() == Some("status"))
            .filter_map(|m| m.manager)
            .collect();
        assert_eq!(managers, ["clusternet/controller/deployer"], "{}", c.name);
    }
    delete_and_wait_clean(env, &subs, &[3, 1], &[target]).await;
}

/// The failure modes upstream's users report, each survived: a release that failed is installed
/// once its cause is fixed (upstream #476); a release of that name already in the child is
/// upgraded, never installed over ("cannot re-use a name", #318); a chart that cannot be found any
/// more leaves the deployed release alone (#592) and says why.
#[tokio::test]
async fn failed_releases_recover_existing_ones_are_upgraded_and_lost_charts_uninstall_nothing() {
    let env = TestEnv::get();
    env.with_controller();
    let parent = env.parent().await;
    let id = uid();
    let clusters = register(env, &id, &[2], "Pull", &[]).await;
    let child = &clusters[0].child;
    let repo = chart_repo(env, "hello", &["0.1.0", "0.2.0"], None).await;
    let (conflict_ns, adopted_ns, pinned_ns) = (
        format!("hr-conflict-{id}"),
        format!("hr-adopted-{id}"),
        format!("hr-pinned-{id}"),
    );
    // in the child before anything is released: an object the chart would create, and a
    // release of the same name installed by hand
    support::ensure_namespace(child, &conflict_ns).await;
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "conflict-hello"},
        "data": {"greeting": "mine"}}))
    .expect("a ConfigMap");
    let cms: Api<ConfigMap> = Api::namespaced(child.clone(), &conflict_ns);
    cms.create(&PostParams::default(), &cm)
        .await
        .expect("creating the conflicting ConfigMap");
    let dir = tempfile::tempdir().expect("a directory");
    let package = support::package_chart(env, "hello", "0.1.0", dir.path());
    let out = std::process::Command::new(env.bin("helm"))
        .args(["install", "adopted"])
        .arg(&package)
        .args(["-n", &adopted_ns, "--create-namespace"])
        .env("KUBECONFIG", env.child_kubeconfig(2))
        .env("HELM_CACHE_HOME", dir.path().join("cache"))
        .env("HELM_CONFIG_HOME", dir.path().join("config"))
        .env("HELM_DATA_HOME", dir.path().join("data"))
        .output()
        .expect("helm install by hand");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let ns = TestNamespace::create(&parent, &env.parent_kubeconfig(), "helmfail").await;
    let charts: Api<HelmChart> = Api::namespaced(parent.clone(), &ns.name);
    for (name, version, target) in [
        ("conflict", "0.1.0", &conflict_ns),
        ("adopted", "0.2.0", &adopted_ns),
        ("pinned", "0.1.0", &pinned_ns),
    ] {
        create(
            &charts,
            name,
            json!({"repo": repo.url, "chart": "hello", "version": version, "targetNamespace": target}),
        )
        .await;
    }
    // and one behind basic auth: the Pull agent gets the credentials without reading the
    // HelmChart's namespace
    let private = chart_repo(env, "hello", &["0.3.0"], Some(("ci", "s3cret"))).await;
    let private_ns = format!("hr-private-{id}");
    let secret: Secret = serde_json::from_value(json!({"metadata": {"name": "repo-auth"},
        "stringData": {"username": "ci", "password": "s3cret"}}))
    .expect("a Secret");
    Api::<Secret>::namespaced(parent.clone(), &ns.name)
        .create(&PostParams::default(), &secret)
        .await
        .expect("creating the pull secret");
    create(
        &charts,
        "private",
        json!({"repo": private.url, "chart": "hello", "version": "0.3.0",
            "chartPullSecret": {"name": "repo-auth"}, "targetNamespace": private_ns}),
    )
    .await;
    let subs: Api<Subscription> = Api::namespaced(parent.clone(), &ns.name);
    subs.create(
        &PostParams::default(),
        &subscription(&id, &ns.name, &["conflict", "adopted", "pinned", "private"]),
    )
    .await
    .expect("creating the Subscription");
    released(env, 2, &private_ns, "private", 1, "hello-0.3.0").await;
    released(env, 2, &adopted_ns, "adopted", 2, "hello-0.2.0").await;
    released(env, 2, &pinned_ns, "pinned", 1, "hello-0.1.0").await;
    let hr_of = |name: &'static str| {
        let parent = parent.clone();
        let c = &clusters[0];
        async move {
            releases_in(&parent, c)
                .await
                .into_iter()
                .find(|h| h.spec.release_name.as_deref() == Some(name))
        }
    };
    let failed = |name: &'static str| {
        let hr_of = &hr_of;
        async move {
            let hr = hr_of(name).await.ok_or("no HelmRelease yet")?;
            let st = hr.status.unwrap_or_default();
            if st.phase.as_ref().map(|p| p.to_string()).as_deref() == Some("failed") {
                Ok(st.notes)
            } else {
                Err(format!("{st:?}"))
            }
        }
    };
    let notes = wait_for("conflict failed", Duration::from_secs(60), || {
        failed("conflict")
    })
    .await;
    assert!(notes.contains("conflict-hello"), "{notes}");
    // the cause goes: the release is installed, no one touching the HelmRelease
    cms.delete("conflict-hello", &DeleteParams::default())
        .await
        .expect("deleting the conflicting ConfigMap");
    released(env, 2, &conflict_ns, "conflict", 1, "hello-0.1.0").await;
    wait_for("conflict deployed", Duration::from_secs(30), || async {
        let hr = hr_of("conflict").await.ok_or("gone")?;
        let st = hr.status.unwrap_or_default();
        match st.phase.map(|p| p.to_string()).as_deref() {
            Some("deployed") => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;

    // the pinned chart's version disappears: NotFound, and its HelmRelease stays at the last
    // version found (upstream: the Base is not rendered), so the release is never touched
    charts
        .patch(
            "pinned",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"version": "9.9.9"}})),
        )
        .await
        .expect("a version that does not exist");
    phase_of(&charts, "pinned", HelmChartPhase::NotFound).await;
    let until = std::time::Instant::now() + Duration::from_secs(8);
    while std::time::Instant::now() < until {
        let hr = hr_of("pinned").await.expect("the pinned HelmRelease");
        assert_eq!(
            hr.spec.options.version, "0.1.0",
            "a missing version was pushed"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let list = helm_list(env, 2, &pinned_ns);
    assert_eq!(
        list.iter().map(|r| (r.1, r.2.as_str())).collect::<Vec<_>>(),
        [(1, "deployed")],
        "{list:?}"
    );
    // back: deployed again, still revision 1 (nothing to upgrade)
    charts
        .patch(
            "pinned",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"version": "0.1.0"}})),
        )
        .await
        .expect("the version back");
    wait_for("pinned deployed again", Duration::from_secs(60), || async {
        let hr = hr_of("pinned").await.ok_or("gone")?;
        let st = hr.status.unwrap_or_default();
        match (st.phase.map(|p| p.to_string()).as_deref(), st.version) {
            (Some("deployed"), 1) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    delete_and_wait_clean(
        env,
        &subs,
        &[2],
        &[conflict_ns, adopted_ns, pinned_ns, private_ns],
    )
    .await;
}

/// Issue #44 with an OCI chart in two children: a version the registry does not have never
/// reaches a child (the release stays at its revision and deployed for a minute, the Base says
/// `HelmChartNotFound`, the Subscription stays available), a version that exists upgrades; and a
/// HelmChart a Subscription uses is not deleted (nor its release uninstalled) until the
/// Subscription goes.
#[tokio::test]
async fn a_missing_chart_version_never_reaches_a_child_and_an_in_use_chart_is_protected() {
    let env = TestEnv::get();
    env.with_controller();
    let parent = env.parent().await;
    let id = uid();
    let clusters = register(env, &id, &[1, 3], "Pull", &[]).await;
    let registry = OciRegistry::start(env).await;
    registry.push(env, "hello", "0.1.0", "charts");
    registry.push(env, "hello", "0.2.0", "charts");
    let ns = TestNamespace::create(&parent, &env.parent_kubeconfig(), "helmkeep").await;
    let charts: Api<HelmChart> = Api::namespaced(parent.clone(), &ns.name);
    let db_ns = format!("hr-db-{id}");
    create(
        &charts,
        "db",
        json!({"repo": format!("oci://{}/charts", registry.host), "chart": "hello",
            "version": "0.1.0", "plainHTTP": true, "targetNamespace": db_ns}),
    )
    .await;
    let subs: Api<Subscription> = Api::namespaced(parent.clone(), &ns.name);
    subs.create(
        &PostParams::default(),
        &subscription(&id, &ns.name, &["db"]),
    )
    .await
    .expect("creating the Subscription");
    for i in [1, 3] {
        released(env, i, &db_ns, "db", 1, "hello-0.1.0").await;
    }

    charts
        .patch(
            "db",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"version": "9.9.9"}})),
        )
        .await
        .expect("a version the registry does not have");
    let reason = phase_of(&charts, "db", HelmChartPhase::NotFound).await;
    assert!(reason.contains("9.9.9"), "{reason}");
    for c in &clusters {
        wait_for(
            "HelmChartNotFound on the Base",
            Duration::from_secs(60),
            || async {
                let events = Api::<k8s_openapi::api::core::v1::Event>::namespaced(
                    parent.clone(),
                    &c.dedicated,
                )
                .list(&ListParams::default().fields("reason=HelmChartNotFound"))
                .await
                .map_err(|e| e.to_string())?;
                events
                    .items
                    .iter()
                    .find(|e| {
                        e.involved_object.kind.as_deref() == Some("Base")
                            && e.message.as_deref().is_some_and(|m| m.contains("9.9.9"))
                    })
                    .map(|_| ())
                    .ok_or_else(|| format!("{} other events", events.items.len()))
            },
        )
        .await;
    }
    // a minute of it: every child keeps revision 1 deployed, nothing moves to 9.9.9
    let until = std::time::Instant::now() + Duration::from_secs(60);
    while std::time::Instant::now() < until {
        for (i, c) in [1, 3].into_iter().zip(&clusters) {
            let list = helm_list(env, i, &db_ns);
            assert_eq!(
                list.iter()
                    .map(|r| (r.0.as_str(), r.1, r.2.as_str(), r.3.as_str()))
                    .collect::<Vec<_>>(),
                [("db", 1, "deployed", "hello-0.1.0")],
                "child{i}"
            );
            for hr in releases_in(&parent, c).await {
                assert_eq!(
                    hr.spec.options.version, "0.1.0",
                    "a missing version was pushed"
                );
            }
        }
        let st = subs
            .get("charts")
            .await
            .expect("the Subscription")
            .status
            .unwrap_or_default();
        if let Some(a) = st.aggregated_statuses.first() {
            assert!(
                a.feed_status_summary.available,
                "the Subscription lost available while the release runs: {a:?}"
            );
        }
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
    let st = subs
        .get("charts")
        .await
        .expect("the Subscription")
        .status
        .unwrap_or_default();
    let cond = st
        .conditions
        .iter()
        .find(|c| c.type_ == "FeedsResolved")
        .expect("FeedsResolved");
    assert_eq!(
        (cond.status.as_str(), cond.reason.as_str()),
        ("False", "HelmChartNotFound"),
        "{cond:?}"
    );

    // a version that exists: every child upgrades
    charts
        .patch(
            "db",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"version": "0.2.0"}})),
        )
        .await
        .expect("a version the registry has");
    for i in [1, 3] {
        released(env, i, &db_ns, "db", 2, "hello-0.2.0").await;
    }

    // in use: deleting the HelmChart waits for its Subscription, the releases stay
    charts
        .delete("db", &DeleteParams::default())
        .await
        .expect("deleting the HelmChart");
    let held = wait_for(
        "the deletion held back",
        Duration::from_secs(30),
        || async {
            let c = charts.get("db").await.map_err(|e| e.to_string())?;
            c.annotations()
                .get("apps.clusternet.io/feed-protection")
                .cloned()
                .ok_or_else(|| format!("finalizers {:?}", c.finalizers()))
        },
    )
    .await;
    assert!(
        held.contains("HelmChart") && held.contains(&format!("{}/charts", ns.name)),
        "{held}"
    );
    tokio::time::sleep(Duration::from_secs(10)).await;
    for i in [1, 3] {
        let list = helm_list(env, i, &db_ns);
        assert_eq!(
            list.iter().map(|r| (r.1, r.2.as_str())).collect::<Vec<_>>(),
            [(2, "deployed")],
            "child{i}: the release of a held chart was touched"
        );
    }
    assert!(
        charts.get_opt("db").await.expect("reading").is_some(),
        "the chart went while in use"
    );
    delete_and_wait_clean(env, &subs, &[1, 3], &[db_ns]).await;
    wait_for(
        "the HelmChart gone with its Subscription",
        Duration::from_secs(30),
        || async {
            match charts.get_opt("db").await.map_err(|e| e.to_string())? {
                None => Ok(()),
                Some(c) => Err(format!("still there: {:?}", c.finalizers())),
            }
        },
    )
    .await;
}

/// `kubectl apply -f -` of `yaml` in the parent.
fn kubectl_apply(env: &TestEnv, yaml: &str) {
    use std::io::Write;
    let mut apply = std::process::Command::new(env.bin("kubectl"))
        .arg("--kubeconfig")
        .arg(env.parent_kubeconfig())
        .args(["apply", "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("kubectl apply");
    apply
        .stdin
        .take()
        .expect("kubectl stdin")
        .write_all(yaml.as_bytes())
        .expect("writing to kubectl");
    assert!(
        apply.wait().expect("kubectl apply").success(),
        "kubectl apply failed:\n{yaml}"
    );
}

/// Upstream's replication-scheduling example with its Helm chart (HelmChart, Subscription,
/// Localization and Globalization as upstream writes them; only the repository URL, the cluster
/// ID and the cluster namespace are filled in, as its comments ask), then its OCI example: the
/// release carries the values and the chart version the overrides pick, per cluster.
#[tokio::test]
async fn upstreams_helm_examples_apply_unchanged_apart_from_the_repository() {
    let env = TestEnv::get();
    env.with_controller();
    let parent = env.parent().await;
    let id = uid();
    let clusters = register(env, &id, &[3], "Pull", &[]).await;
    let c = &clusters[0];
    let mc = Api::<clusternet::apis::ManagedCluster>::namespaced(parent.clone(), &c.dedicated)
        .get(&c.name)
        .await
        .expect("the ManagedCluster");
    // the example's release name and namespace are fixed: a run killed half-way leaves them
    let home = tempfile::tempdir().expect("a Helm home");
    let _ = std::process::Command::new(env.bin("helm"))
        .args(["uninstall", "mysql", "-n", "abc"])
        .env("KUBECONFIG", env.child_kubeconfig(3))
        .env("HELM_CACHE_HOME", home.path().join("cache"))
        .env("HELM_CONFIG_HOME", home.path().join("config"))
        .env("HELM_DATA_HOME", home.path().join("data"))
        .output();
    let repo = chart_repo(env, "mysql", &["9.1.0", "9.1.8", "9.2.0"], None).await;
    // upstream's OCI example has no plainHTTP: a registry with TLS
    let registry = OciRegistry::start_tls(env).await;
    registry.push(env, "mysql", "9.2.0", "helm-charts");
    let fill = |text: String| {
        text.replace("https://charts.bitnami.com/bitnami", &repo.url)
            .replace(
                "oci://myoci.registry.com:5000/helm-charts",
                &format!("oci://{}/helm-charts", registry.host),
            )
            .replace("dc91021d-2361-4f6d-a404-7c33b9e01118", &mc.spec.cluster_id)
            .replace("clusternet-5l82l", &c.dedicated)
    };
    // the example's plain objects, as the shadow API would store them
    let objects: Vec<Value> = ["nginx-deployment.yaml", "nginx-svc.yaml"]
        .iter()
        .flat_map(|f| {
            clusternet::kube_ext::yaml::from_str_documents::<Value>(&support::scenario(&format!(
                "replication-scheduling/{f}"
            )))
            .expect("YAML")
            .into_iter()
            .filter(Value::is_object)
        })
        .collect();
    let manifests_api: Api<clusternet::apis::Manifest> =
        Api::namespaced(parent.clone(), "clusternet-reserved");
    for o in &objects {
        // left by a run killed half-way (the example's names are fixed)
        let _ = manifests_api
            .delete(
                &support::manifest_of(o).name_any(),
                &DeleteParams::default(),
            )
            .await;
    }
    let manifests = support::create_manifests(&parent, &objects).await;
    for f in [
        "helm-chart-mysql.yaml",
        "localization.yaml",
        "globalization.yaml",
        "subscription.yaml",
    ] {
        kubectl_apply(
            env,
            &fill(support::scenario(&format!("replication-scheduling/{f}"))),
        );
    }
    // the Localization's chart version (9.1.8, priority over the Globalization's 9.1.0) and values
    released(env, 3, "abc", "mysql", 1, "mysql-9.1.8").await;
    let cm = Api::<ConfigMap>::namespaced(c.child.clone(), "abc")
        .get("mysql-mysql")
        .await
        .expect("the chart's ConfigMap");
    let data = cm.data.clone().unwrap_or_default();
    assert_eq!(
        data.get("imageTag").map(String::as_str),
        Some("8.0.26-debian-10-r39")
    );
    assert_eq!(
        data.get("database").cloned(),
        Some(format!("database_for_{}", c.dedicated))
    );
    assert_eq!(data.get("persistence").map(String::as_str), Some("false"));
    assert_eq!(
        cm.labels()
            .get("clusternet.io/override-by")
            .map(String::as_str),
        Some("clusternet-hub")
    );
    // the OCI example replaces the HelmChart; without the overrides it is the chart's own 9.2.0
    let subs: Api<Subscription> = Api::namespaced(parent.clone(), "default");
    for (kind, name) in [
        (
            "localization",
            format!("mysql-local-overrides-demo -n {}", c.dedicated),
        ),
        ("globalization", "mysql-global-overrides-demo".to_string()),
    ] {
        let mut args = vec![
            "--kubeconfig".to_string(),
            env.parent_kubeconfig().display().to_string(),
            "delete".into(),
            kind.into(),
        ];
        args.extend(name.split(' ').map(str::to_string));
        let ok = std::process::Command::new(env.bin("kubectl"))
            .args(&args)
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false);
        assert!(ok, "kubectl {args:?}");
    }
    kubectl_apply(env, &fill(support::scenario("oci/oci-chart-mysql.yaml")));
    released(env, 3, "abc", "mysql", 2, "mysql-9.2.0").await;
    delete_and_wait_clean_named(env, &subs, "app-demo", &[3], &["abc".to_string()]).await;
    let _ = Api::<HelmChart>::namespaced(parent.clone(), "default")
        .delete("mysql", &DeleteParams::default())
        .await;
    for m in manifests {
        let _ = manifests_api.delete(&m, &DeleteParams::default()).await;
    }
    for loc in [
        "nginx-local-overrides-demo-higher-priority",
        "nginx-local-overrides-demo-lower-priority",
    ] {
        let _ = Api::<Localization>::namespaced(parent.clone(), &c.dedicated)
            .delete(loc, &DeleteParams::default())
            .await;
    }
    let _ = Api::<clusternet::apis::Globalization>::all(parent.clone())
        .delete("nginx-global-overrides-demo", &DeleteParams::default())
        .await;
}
