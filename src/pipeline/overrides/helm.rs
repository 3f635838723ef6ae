//! §5.5 rendering of a Helm Description: the values and the HelmChart object of one chart, and
//! Helm's value coalescing used by `Helm` overrides (upstream `patch.go` with Helm's
//! `chartutil.CoalesceTables`, and the Helm half of `ApplyOverridesToDescription`).

use serde_json::Value;

use super::OverrideError;
use super::apply::{Doc, apply_docs, internal_json_patch};
use crate::apis::{OverrideConfig, OverrideType};
use crate::kube_ext::json_type;

/// Result of rendering one chart of a Helm Description (§5.5 Helm).
#[derive(Debug, Clone, PartialEq)]
pub struct HelmRendering {
    /// `Description.spec.raw[i]`: the overridden Helm values as JSON, or a single space when no
    /// value override applies (upstream writes the space explicitly).
    pub values: String,
    /// `Description.spec.chartRaw[i]`: the HelmChart object with the chart overrides merged in.
    pub chart: Value,
}

/// §5.5 Helm: the values and chart object for one HelmChart, given its overrides (those selected
/// with the HelmChart's UID/feed). Chart overrides can never change `spec.chart` or
/// `spec.targetNamespace`: those decide which release is installed where.
pub fn render_helm(
    chart: &Value,
    overrides: &[OverrideConfig],
) -> Result<HelmRendering, OverrideError> {
    let chart_rules: Vec<&str> = overrides
        .iter()
        .filter(|o| o.override_chart)
        .map(|o| o.name.as_str())
        .collect();
    // JSONPatch/MergePatch with `overrideChart: true` patch the HelmChart object itself (upstream
    // #454; upstream applies them to the values): after the Helm chart merges, in their order
    let (chart_patches, overrides): (Vec<OverrideConfig>, Vec<OverrideConfig>) =
        overrides.iter().cloned().partition(|o| {
            o.override_chart
                && matches!(o.type_, OverrideType::JsonPatch | OverrideType::MergePatch)
        });
    let (values, chart_overrides) = apply_docs(Doc::blank(), Doc::blank(), &overrides)?;

    // Two separate patches: in one patch a missing /spec/chart would make the whole patch a no-op
    // and let a targetNamespace override through.
    let protect = [
        internal_json_patch(
            "keep the chart name",
            r#"[{"op":"remove","path":"/spec/chart"}]"#,
        ),
        internal_json_patch(
            "keep the target namespace",
            r#"[{"op":"remove","path":"/spec/targetNamespace"}]"#,
        ),
    ];
    let (chart_overrides, _) = apply_docs(chart_overrides, Doc::blank(), &protect)?;

    let merge = [OverrideConfig {
        name: "chart overrides".to_owned(),
        value: chart_overrides.into_string(),
        type_: OverrideType::MergePatch,
        override_chart: false,
        field_path: String::new(),
        field_format: None,
    }];
    let (merged, _) = apply_docs(Doc::Json(chart.clone()), Doc::blank(), &merge)?;
    let mut out = merged.into_value("the HelmChart")?;
    if !chart_patches.is_empty() {
        let patches: Vec<OverrideConfig> = chart_patches
            .into_iter()
            .map(|mut o| {
                o.override_chart = false;
                o
            })
            .collect();
        let (patched, _) = apply_docs(Doc::Json(out), Doc::blank(), &patches)?;
        out = patched.into_value("the HelmChart")?;
    }
    // Which chart is installed where stays the HelmChart's, whatever the overrides did: put
    // back after the patches above. `spec` itself must survive as a map for that; a merge
    // patch `{"spec": []}` or `{"spec": null}` used to drop both fields silently (found by the
    // fuzz harnesses).
    if let Some(original) = chart.get("spec").and_then(Value::as_object) {
        let found = json_type(out.get("spec").unwrap_or(&Value::Null));
        let Some(spec) = out.get_mut("spec").and_then(Value::as_object_mut) else {
            return Err(OverrideError::Chart(format!(
                "overrides {chart_rules:?} must leave spec a map (it names the chart and its target namespace), got {found}"
            )));
        };
        for field in ["chart", "targetNamespace"] {
            match original.get(field) {
                Some(v) => spec.insert(field.to_string(), v.clone()),
                None => spec.remove(field),
            };
        }
    }
    Ok(HelmRendering {
        values: values.into_string(),
        chart: out,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apis::OverrideType;
    use crate::pipeline::overrides::fixtures::*;
    use crate::pipeline::overrides::*;
    use serde_json::json;

    #[test]
    fn helm_values_coalescing() {
        let helm = |name: &str, value: &str| rule(name, OverrideType::Helm, value);
        let base = helm(
            "base",
            r#"
image: {repository: mysql, tag: "8.0", pullPolicy: IfNotPresent}
auth: {database: db, username: u}
primary: {persistence: {enabled: true, size: 8Gi}}
replicas: 1
resources: {limits: {cpu: 1}}
"#,
        );
        let cases: &[(&str, Value)] = &[
            // nested maps merge recursively, override wins
            (
                "image: {tag: 8.0.27-debian-10-r8}\nprimary: {persistence: {enabled: false}}",
                json!({
                    "image": {"repository": "mysql", "tag": "8.0.27-debian-10-r8", "pullPolicy": "IfNotPresent"},
                    "auth": {"database": "db", "username": "u"},
                    "primary": {"persistence": {"enabled": false, "size": "8Gi"}},
                    "replicas": 1,
                    "resources": {"limits": {"cpu": 1}}
                }),
            ),
            // null deletes an existing key (nested too); a null for an absent key stays for Helm
            (
                r#"{"auth":{"username":null},"replicas":null,"extra":null}"#,
                json!({
                    "image": {"repository": "mysql", "tag": "8.0", "pullPolicy": "IfNotPresent"},
                    "auth": {"database": "db"},
                    "primary": {"persistence": {"enabled": true, "size": "8Gi"}},
                    "resources": {"limits": {"cpu": 1}},
                    "extra": null
                }),
            ),
            // scalar over a table and table over a scalar: the override's side is kept
            (
                "resources: none\nreplicas: {count: 3}",
                json!({
                    "image": {"repository": "mysql", "tag": "8.0", "pullPolicy": "IfNotPresent"},
                    "auth": {"database": "db", "username": "u"},
                    "primary": {"persistence": {"enabled": true, "size": "8Gi"}},
                    "replicas": {"count": 3},
                    "resources": "none"
                }),
            ),
        ];
        for (value, expected) in cases {
            let (g, c) =
                apply_overrides(" ", " ", &[base.clone(), helm("over", value)]).expect("applies");
            assert_eq!(c, " ");
            assert_eq!(
                serde_json::from_str::<Value>(&g).expect("JSON"),
                *expected,
                "{value}"
            );
        }

        let err =
            apply_overrides(" ", " ", &[base, helm("list", "[1, 2]")]).expect_err("not a map");
        assert_eq!(
            err.to_string(),
            "override \"list\" (Helm): Helm values must be a map, got array"
        );
    }

    #[test]
    fn json_and_merge_patches_with_override_chart_patch_the_helm_chart() {
        let chart = json!({"apiVersion": "apps.clusternet.io/v1alpha1", "kind": "HelmChart",
            "metadata": {"name": "mysql", "namespace": "default"},
            "spec": {"repo": "https://charts.example", "chart": "mysql", "version": "9.2.0",
                "targetNamespace": "abc"}});
        let on_chart = |name: &str, t: OverrideType, value: &str| {
            let mut r = rule(name, t, value);
            r.override_chart = true;
            r
        };
        let overrides = vec![
            rule("values", OverrideType::Helm, "image: {tag: x}"),
            on_chart(
                "pin",
                OverrideType::JsonPatch,
                r#"[{"op":"replace","path":"/spec/version","value":"9.1.0"},{"op":"replace","path":"/spec/chart","value":"evil"}]"#,
            ),
            on_chart(
                "wait",
                OverrideType::MergePatch,
                r#"{"spec":{"wait":true,"targetNamespace":"kube-system"}}"#,
            ),
        ];
        let r = render_helm(&chart, &overrides).expect("renders");
        assert_eq!(r.chart["spec"]["version"], "9.1.0");
        assert_eq!(r.chart["spec"]["wait"], true);
        assert_eq!(r.chart["spec"]["chart"], "mysql", "the chart stays");
        assert_eq!(
            r.chart["spec"]["targetNamespace"], "abc",
            "and where it goes"
        );
        assert_eq!(
            serde_json::from_str::<Value>(&r.values).expect("JSON"),
            json!({"image": {"tag": "x"}}),
            "the values are not patched"
        );
    }

    #[test]
    fn helm_rendering() {
        let chart = json!({
            "apiVersion": "apps.clusternet.io/v1alpha1",
            "kind": "HelmChart",
            "metadata": {"name": "mysql", "namespace": "default", "uid": "c0ffee00-0000-4000-8000-000000000000",
                         "labels": {"app": "mysql"}},
            "spec": {"repo": "https://charts.bitnami.com/bitnami", "chart": "mysql", "version": "9.2.0",
                     "targetNamespace": "abc"},
            "status": {"phase": "Found"}
        });
        let chart_rule = |name: &str, value: &str| {
            let mut r = rule(name, OverrideType::Helm, value);
            r.override_chart = true;
            r
        };
        let overrides = vec![
            // Globalization (priority 600)
            rule(
                "override-commonLabels",
                OverrideType::Helm,
                "commonLabels: {some-label: some-value}",
            ),
            rule(
                "disable-pvc-usage",
                OverrideType::Helm,
                r#"{"primary":{"persistence":{"enabled":false}}}"#,
            ),
            chart_rule("update-helm-chart-version", "spec:\n  version: 9.1.0"),
            chart_rule(
                "add-helm-chart-labels",
                "metadata: {labels: {some-label: some-value}}",
            ),
            // Localization
            rule(
                "update-image",
                OverrideType::Helm,
                "image:\n  tag: 8.0.26-debian-10-r39",
            ),
            chart_rule("update-helm-chart-version", "spec: {version: 9.1.8}"),
            chart_rule(
                "sneaky",
                "spec: {chart: wordpress, targetNamespace: kube-system}",
            ),
        ];
        let rendered = render_helm(&chart, &overrides).expect("renders");
        assert_eq!(
            serde_json::from_str::<Value>(&rendered.values).expect("JSON"),
            json!({
                "commonLabels": {"some-label": "some-value"},
                "primary": {"persistence": {"enabled": false}},
                "image": {"tag": "8.0.26-debian-10-r39"}
            })
        );
        assert_eq!(
            rendered.chart,
            json!({
                "apiVersion": "apps.clusternet.io/v1alpha1",
                "kind": "HelmChart",
                "metadata": {"name": "mysql", "namespace": "default",
                             "labels": {"app": "mysql", "some-label": "some-value"}},
                "spec": {"repo": "https://charts.bitnami.com/bitnami", "chart": "mysql", "version": "9.1.8",
                         "targetNamespace": "abc"}
            })
        );

        // no overrides: values are a single space, the chart only loses server-owned fields
        let plain = render_helm(&chart, &[]).expect("renders");
        assert_eq!(plain.values, " ");
        assert_eq!(plain.chart["spec"], chart["spec"]);
        assert!(plain.chart.get("status").is_none());
    }
}
