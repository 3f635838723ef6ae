//! Description(Helm) -> HelmRelease (docs/spec/deployer.md §7.2): the HelmReleases a Helm
//! Description asks for, exactly as upstream names and labels them ([`plan_releases`], pure),
//! applied with server-side apply; the ones it no longer asks for are deleted, and a Description
//! being deleted keeps its finalizer until its HelmReleases are gone (their own finalizer is the
//! Helm deployer's, [`crate::deployer::helm`]: it uninstalls the release first).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::runtime::controller::Action;
use crate::runtime::controller::Controller;
use base64::Engine;
use kube::api::Api;
use kube::{Resource, ResourceExt};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use tracing::info;

use crate::apis::known;
use crate::apis::{Description, DescriptionDeployer, HelmChart, HelmRelease};
use crate::runtime::cache::Index;
use crate::runtime::controller::{ApiFailure, ReconcileError, named_by};
use crate::runtime::events::Events;
use crate::runtime::{Runtime, apply};
use k8s_openapi::api::core::v1::Secret;

/// The field manager of the HelmReleases we write.
pub const FIELD_MANAGER: &str = "clusternet/controller/helmrelease";

#[derive(Debug, thiserror::Error)]
pub enum HelmReleaseError {
    #[error(transparent)]
    Api(#[from] ApiFailure),
}

impl ReconcileError for HelmReleaseError {
    fn metric_label(&self) -> &'static str {
        match self {
            HelmReleaseError::Api(_) => "api",
        }
    }
}

struct Ctx {
    rt: Runtime,
    events: Events,
    /// By the uid of their Description.
    releases: Index<HelmRelease>,
}

pub async fn run(rt: Runtime, stop: CancellationToken) {
    let descs = rt.cache.watch::<Description>();
    let releases = rt.cache.watch::<HelmRelease>();
    // a HelmRelease that goes (its release uninstalled) may let its Description go
    let from_releases = named_by(releases.subscribe(), |r: &HelmRelease| {
        Some((
            r.namespace()?,
            r.labels().get(known::CONFIG_NAME_LABEL)?.clone(),
        ))
    });
    let ctx = Arc::new(Ctx {
        events: Events::new(
            rt.events_client.clone(),
            known::CLUSTERNET_CONTROLLER_MANAGER_NAME,
        ),
        rt,
        releases: releases.index("description-uid", |r| {
            r.labels()
                .get(known::CONFIG_UID_LABEL)
                .cloned()
                .into_iter()
                .collect()
        }),
    });
    Controller::new("helmrelease", &descs)
        .after([releases.listed()])
        .triggered_by(from_releases)
        .run(stop, move |d| {
            let ctx = ctx.clone();
            async move { reconcile(&ctx, d).await }
        })
        .await;
}

/// The HelmReleases of `desc` in the cache (by its uid label).
fn releases_of(ctx: &Ctx, desc: &Description) -> Vec<Arc<HelmRelease>> {
    let uid = desc.uid().unwrap_or_default();
    let ns = desc.namespace();
    ctx.releases
        .get(&uid)
        .into_iter()
        .filter(|r| r.namespace() == ns)
        .collect()
}

async fn reconcile(ctx: &Ctx, desc: Arc<Description>) -> Result<Action, HelmReleaseError> {
    if desc.spec.deployer != DescriptionDeployer::Helm {
        return Ok(Action::await_change());
    }
    let key = format!(
        "{}/{}",
        desc.namespace().unwrap_or_default(),
        desc.name_any()
    );
    let ns = desc.namespace().unwrap_or_default();
    let releases: Api<HelmRelease> = Api::namespaced(ctx.rt.client.clone(), &ns);
    let fail = |what: &'static str| ApiFailure::about(desc.as_ref(), what);
    let existing = releases_of(ctx, &desc);
    if desc.metadata.deletion_timestamp.is_some() {
        for r in existing
            .iter()
            .filter(|r| r.metadata.deletion_timestamp.is_none())
        {
            apply::delete(&releases, &r.name_any())
                .await
                .map_err(fail("deleting a HelmRelease"))?;
        }
        if !existing.is_empty() {
            // the Helm deployer uninstalls each release, then lets its HelmRelease go
            return Ok(Action::requeue(Duration::from_secs(10)));
        }
        apply::release_finalizer(
            &Api::<Description>::namespaced(ctx.rt.client.clone(), &ns),
            desc.as_ref(),
            known::APP_FINALIZER,
        )
        .await
        .map_err(fail("releasing the Description's finalizer"))?;
        return Ok(Action::await_change());
    }
    let mut wanted = match plan_releases(&desc) {
        Ok(w) => w,
        Err(e) => {
            let reason = e
                .split(':')
                .next()
                .unwrap_or("InvalidDescription")
                .to_string();
            ctx.events.warn(desc.as_ref(), &reason, &e);
            return Ok(Action::await_change());
        }
    };
    let names: Vec<String> = wanted
        .iter()
        .filter_map(|w| w["metadata"]["name"].as_str().map(str::to_string))
        .collect();
    for (name, body) in names.iter().zip(wanted.iter_mut()) {
        mirror_pull_secret(ctx, &desc, name, body).await?;
        let body = &*body;
        let current = existing.iter().find(|r| r.name_any() == *name);
        if current.is_some_and(|c| same_release(c, body)) {
            continue;
        }
        apply::apply(&releases, FIELD_MANAGER, name, body)
            .await
            .map_err(fail("applying a HelmRelease"))?;
        info!(description = %key, helmrelease = %name, "HelmRelease applied");
    }
    for r in existing.iter().filter(|r| !names.contains(&r.name_any())) {
        apply::delete(&releases, &r.name_any())
            .await
            .map_err(fail("deleting a stale HelmRelease"))?;
    }
    Ok(Action::await_change())
}

/// The name of the copy of a HelmRelease's chart pull secret in the cluster's namespace.
pub fn pull_secret_copy(release: &str) -> String {
    format!("{release}-pull")
}

/// A chart pull secret lives with its HelmChart; the agent may read only its own cluster's
/// namespace (upstream grants it every Secret of the parent instead), so the credentials are
/// copied next to the HelmRelease (owned by the Description, so they go with it) and the
/// HelmRelease points at the copy. A secret that cannot be read is left as it is: the deploying
/// side then says why on the HelmRelease.
async fn mirror_pull_secret(
    ctx: &Ctx,
    desc: &Description,
    name: &str,
    body: &mut Value,
) -> Result<(), HelmReleaseError> {
    let secret = &body["spec"]["chartPullSecret"];
    let (Some(sname), Some(sns)) = (secret["name"].as_str(), secret["namespace"].as_str()) else {
        return Ok(());
    };
    let Ok(Some(source)) = Api::<Secret>::namespaced(ctx.rt.client.clone(), sns)
        .get_opt(sname)
        .await
    else {
        return Ok(());
    };
    let ns = desc.namespace().unwrap_or_default();
    let copy = pull_secret_copy(name);
    let data: BTreeMap<String, String> = source
        .data
        .unwrap_or_default()
        .into_iter()
        .filter(|(k, _)| k == "username" || k == "password")
        .map(|(k, v)| (k, base64::engine::general_purpose::STANDARD.encode(v.0)))
        .collect();
    let mut meta = json!({"name": copy, "namespace": ns,
        "labels": {known::OBJECT_CREATED_BY_LABEL: known::CLUSTERNET_CONTROLLER_MANAGER_NAME}});
    if let Some(owner) = desc.controller_owner_ref(&()) {
        meta["ownerReferences"] = json!([owner]);
    }
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": meta,
        "type": "Opaque", "data": data});
    apply::apply(
        &Api::<Secret>::namespaced(ctx.rt.client.clone(), &ns),
        FIELD_MANAGER,
        &copy,
        &secret,
    )
    .await
    .map_err(ApiFailure::about(desc, "copying the chart pull secret"))?;
    body["spec"]["chartPullSecret"] = json!({"name": copy, "namespace": ns});
    Ok(())
}

/// Whether `current` already is what `body` asks for (spec and our labels): nothing to write.
fn same_release(current: &HelmRelease, body: &Value) -> bool {
    let spec = serde_json::to_value(&current.spec).unwrap_or_default();
    let labels_ok = body["metadata"]["labels"].as_object().is_some_and(|l| {
        l.iter()
            .all(|(k, v)| current.labels().get(k).map(String::as_str) == v.as_str())
    });
    spec == body["spec"] && labels_ok
}

/// A HelmRelease's labels: its chart's, then who made it, its Description, and the cluster and
/// Subscription labels of the Description.
fn release_labels(desc: &Description, chart: &HelmChart) -> BTreeMap<String, String> {
    let mut labels: BTreeMap<String, String> = chart.labels().clone();
    labels.insert(
        known::OBJECT_CREATED_BY_LABEL.into(),
        known::CLUSTERNET_CONTROLLER_MANAGER_NAME.into(),
    );
    labels.insert(
        known::CONFIG_KIND_LABEL.into(),
        known::DESCRIPTION_KIND.into(),
    );
    labels.insert(known::CONFIG_NAME_LABEL.into(), desc.name_any());
    labels.insert(
        known::CONFIG_NAMESPACE_LABEL.into(),
        desc.namespace().unwrap_or_default(),
    );
    labels.insert(
        known::CONFIG_UID_LABEL.into(),
        desc.uid().unwrap_or_default(),
    );
    let dl = desc.labels();
    for k in [
        known::CLUSTER_ID_LABEL,
        known::CLUSTER_NAME_LABEL,
        known::CONFIG_SUBSCRIPTION_NAME_LABEL,
        known::CONFIG_SUBSCRIPTION_NAMESPACE_LABEL,
        known::CONFIG_SUBSCRIPTION_UID_LABEL,
    ] {
        labels.insert(k.into(), dl.get(k).cloned().unwrap_or_default());
    }
    labels
}

/// The HelmRelease objects (apply bodies) `desc` wants, or why it cannot say (upstream's
/// `UnequalLengths`, a chart that does not decode).
pub fn plan_releases(desc: &Description) -> Result<Vec<Value>, String> {
    if desc.spec.deployer != DescriptionDeployer::Helm {
        return Ok(Vec::new());
    }
    let s = &desc.spec;
    if s.raw.len() != s.chart_raw.len() || s.raw.len() != s.charts.len() {
        return Err(format!(
            "UnequalLengths: {} charts, {} values, {} chart objects",
            s.charts.len(),
            s.raw.len(),
            s.chart_raw.len()
        ));
    }
    let desc_name = desc.name_any();
    let desc_ns = desc.namespace().unwrap_or_default();
    let mut out = Vec::new();
    for ((reference, values), raw_chart) in s.charts.iter().zip(&s.raw).zip(&s.chart_raw) {
        let chart: HelmChart = serde_json::from_slice(&raw_chart.0).map_err(|e| {
            format!(
                "chart {}/{} of Description {desc_ns}/{desc_name}: {e}",
                reference.namespace, reference.name
            )
        })?;
        let labels = release_labels(desc, &chart);
        let values = String::from_utf8_lossy(&values.0).trim().to_string();
        let mut spec = serde_json::to_value(&chart.spec.options).unwrap_or_default();
        spec["targetNamespace"] = json!(chart.spec.target_namespace);
        spec["releaseName"] = json!(chart.name_any());
        // the pull secret is the chart's: named with its namespace, the HelmRelease (in the
        // cluster's namespace) still finds it
        if !chart.spec.options.chart_pull_secret.name.is_empty()
            && chart.spec.options.chart_pull_secret.namespace.is_empty()
        {
            spec["chartPullSecret"]["namespace"] = json!(reference.namespace);
        }
        if !values.is_empty() {
            spec["overrides"] =
                json!(base64::engine::general_purpose::STANDARD.encode(values.as_bytes()));
        }
        let mut meta = json!({
            "name": format!("{desc_name}-{}-{}", reference.namespace, reference.name),
            "namespace": desc_ns,
            "labels": labels,
            "finalizers": [known::APP_FINALIZER],
        });
        if !chart.annotations().is_empty() {
            meta["annotations"] = json!(chart.annotations());
        }
        if let Some(owner) = desc.controller_owner_ref(&()) {
            meta["ownerReferences"] = json!([owner]);
        }
        out.push(json!({
            "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "HelmRelease",
            "metadata": meta, "spec": spec,
        }));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn desc(values: &str) -> Description {
        let chart = json!({"apiVersion": "apps.clusternet.io/v1alpha1", "kind": "HelmChart",
            "metadata": {"name": "mysql", "namespace": "default", "labels": {"team": "db"}},
            "spec": {"repo": "https://charts.example", "chart": "mysql", "version": "9.4.1",
                "targetNamespace": "abc", "atomic": true}});
        serde_json::from_value(json!({
            "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Description",
            "metadata": {"name": "sub-helm", "namespace": "clusternet-x", "uid": "d-uid",
                "labels": {"clusters.clusternet.io/cluster-id": "id-1",
                    "clusters.clusternet.io/cluster-name": "c1",
                    "apps.clusternet.io/subs.namespace": "default",
                    "apps.clusternet.io/subs.uid": "s-uid"}},
            "spec": {"deployer": "Helm", "charts": [{"namespace": "default", "name": "mysql"}],
                "raw": [base64::engine::general_purpose::STANDARD.encode(values)],
                "chartRaw": [base64::engine::general_purpose::STANDARD.encode(chart.to_string())]}}))
        .expect("a Description")
    }

    #[test]
    fn a_helm_description_asks_for_one_release_per_chart_named_and_labelled_as_upstream() {
        let r = plan_releases(&desc(r#"{"auth":{"rootPassword":"x"}}"#)).expect("releases");
        assert_eq!(r.len(), 1);
        let m = &r[0]["metadata"];
        assert_eq!(m["name"], "sub-helm-default-mysql");
        assert_eq!(m["namespace"], "clusternet-x");
        assert_eq!(m["labels"]["team"], "db");
        assert_eq!(m["labels"]["apps.clusternet.io/config.kind"], "Description");
        assert_eq!(m["labels"]["apps.clusternet.io/config.uid"], "d-uid");
        assert_eq!(m["labels"]["clusters.clusternet.io/cluster-id"], "id-1");
        assert_eq!(m["labels"]["apps.clusternet.io/subs.name"], "");
        assert_eq!(m["finalizers"], json!(["apps.clusternet.io/finalizer"]));
        let spec = &r[0]["spec"];
        assert_eq!(
            (
                &spec["releaseName"],
                &spec["targetNamespace"],
                &spec["atomic"]
            ),
            (&json!("mysql"), &json!("abc"), &json!(true))
        );
        let values = base64::engine::general_purpose::STANDARD
            .decode(spec["overrides"].as_str().expect("overrides"))
            .expect("base64");
        assert_eq!(values, br#"{"auth":{"rootPassword":"x"}}"#);
        // no value overrides (upstream's single space): no overrides at all
        let r = plan_releases(&desc(" ")).expect("releases");
        assert!(r[0]["spec"].get("overrides").is_none());
        // what exists as planned is not written again; another spec or a missing label is
        let body = &plan_releases(&desc(" ")).expect("releases")[0];
        let mut current: HelmRelease = serde_json::from_value(body.clone()).expect("a HelmRelease");
        assert!(same_release(&current, body));
        current.spec.options.version = "9.5.0".into();
        assert!(!same_release(&current, body));
        // lengths that disagree
        let mut bad = desc(" ");
        bad.spec.raw.clear();
        assert!(plan_releases(&bad).is_err_and(|e| e.starts_with("UnequalLengths")));
    }
}
