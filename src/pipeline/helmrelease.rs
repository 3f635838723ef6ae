//! Description(Helm) -> HelmRelease (docs/spec/deployer.md §7.2), the pure half: the HelmReleases
//! a Helm Description asks for, exactly as upstream names and labels them. (WIP for #15: the
//! controller loop that applies them and the Helm deployer that reconciles them are next.)

use std::collections::BTreeMap;

use base64::Engine;
use kube::{Resource, ResourceExt};
use serde_json::{Value, json};

use crate::apis::known;
use crate::apis::{Description, DescriptionDeployer, HelmChart};

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
    let dl = desc.labels();
    let mut out = Vec::new();
    for ((reference, values), raw_chart) in s.charts.iter().zip(&s.raw).zip(&s.chart_raw) {
        let chart: HelmChart = serde_json::from_slice(&raw_chart.0).map_err(|e| {
            format!(
                "chart {}/{} of Description {desc_ns}/{desc_name}: {e}",
                reference.namespace, reference.name
            )
        })?;
        let mut labels: BTreeMap<String, String> = chart.labels().clone();
        labels.insert(
            known::OBJECT_CREATED_BY_LABEL.into(),
            known::CLUSTERNET_CONTROLLER_MANAGER_NAME.into(),
        );
        labels.insert(
            known::CONFIG_KIND_LABEL.into(),
            known::DESCRIPTION_KIND.into(),
        );
        labels.insert(known::CONFIG_NAME_LABEL.into(), desc_name.clone());
        labels.insert(known::CONFIG_NAMESPACE_LABEL.into(), desc_ns.clone());
        labels.insert(
            known::CONFIG_UID_LABEL.into(),
            desc.uid().unwrap_or_default(),
        );
        for k in [
            known::CLUSTER_ID_LABEL,
            known::CLUSTER_NAME_LABEL,
            known::CONFIG_SUBSCRIPTION_NAME_LABEL,
            known::CONFIG_SUBSCRIPTION_NAMESPACE_LABEL,
            known::CONFIG_SUBSCRIPTION_UID_LABEL,
        ] {
            labels.insert(k.into(), dl.get(k).cloned().unwrap_or_default());
        }
        let values = String::from_utf8_lossy(&values.0).trim().to_string();
        let mut spec = serde_json::to_value(&chart.spec.options).unwrap_or_default();
        spec["targetNamespace"] = json!(chart.spec.target_namespace);
        spec["releaseName"] = json!(chart.name_any());
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
        // lengths that disagree
        let mut bad = desc(" ");
        bad.spec.raw.clear();
        assert!(plan_releases(&bad).is_err_and(|e| e.starts_with("UnequalLengths")));
    }
}
