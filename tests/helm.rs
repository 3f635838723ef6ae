//! HelmChart feeds (#15, part: validation, docs/spec/deployer.md §7.1) against real control
//! planes, a real chart repository (charts of `tests/charts/` packaged and indexed with the real
//! `helm`, served on loopback, one copy behind basic auth) and a real OCI registry (the CNCF
//! distribution registry, `helm push`ed to). Every HelmChart gets its feed labels and says Found,
//! or NotFound with Helm's reason; fixing the version finds it.

mod support;

use std::time::Duration;

use clusternet::apis::{HelmChart, HelmChartPhase};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use support::{OciRegistry, TestEnv, TestNamespace, chart_repo, wait_for};

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
