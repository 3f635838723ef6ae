//! Overrides: which Localization/Globalization rules apply to a rendered object, and how they
//! patch it (docs/spec/deployer.md §5.2-§5.5). Pure functions, no API server: the Description
//! renderer hands in informer state and writes the results into `Description.spec.raw` /
//! `chartRaw`.
//!
//! Implements Clusternet's `pkg/hub/localizer`: `getOverrides` (selection and ordering) and
//! `applyOverrides` in `patch.go` (Helm value coalescing, RFC 6902 JSON patches, RFC 7386 merge
//! patches, field patches of documents embedded in string fields), plus the per-Description-type
//! rendering rules of `ApplyOverridesToDescription`.
//!
//! Behaviour kept from upstream on purpose, because users' override objects depend on it:
//!
//! - Three default JSON patches (remove `/metadata/managedFields`, `/metadata/uid`, `/status`) run
//!   after the user's overrides, also on Helm values (so a top-level Helm value named `status` is
//!   dropped, as upstream does).
//! - A blank document is replaced by the first override's value (except JSONPatch, which leaves a
//!   blank document alone); `overrideChart` only routes `Helm` overrides to the chart document
//!   once it is non-blank, every other type patches the generic document.
//! - A JSON patch whose operation fails because its path does not exist leaves the document
//!   unchanged without error (upstream tolerates `ErrMissing` so a Globalization written for
//!   several kinds of objects does not break the ones lacking a field).
//! - `ApplyNow`/`ApplyLater` do not change what is rendered, only when re-rendering is triggered
//!   (that is the override controllers' business, §5.1), so nothing here looks at the policy.
//!
//! Deliberate differences (each only turns an upstream failure or silent corruption into a clear
//! result): merge patches must be JSON objects (upstream rejects null and scalars and would replace
//! the whole object by an array); field paths decode `~1`/`~0` like JSON pointers; override values
//! are read as JSON first and as YAML only if that fails (so tab-indented JSON works). Upstream's
//! "unsupported OverrideType" cannot occur: `OverrideType` is closed, so an unknown type is
//! rejected when the Localization/Globalization is decoded.
//!
//! Modules: `select` (§5.2 which rules apply, in which order), `apply` (§5.3/§5.4 applying rules
//! to a document, §5.5 generic rendering), `helm` (§5.5 Helm rendering and value coalescing).
//! Everything is re-exported here; this file holds the error type and the fixtures the tests
//! share.

mod apply;
mod helm;
mod select;
mod values;

pub use apply::*;
pub use helm::*;
pub use select::*;

use crate::apis::OverrideType;

/// Upstream's limit on operations in one JSON patch (`maxJSONPatchOperations`).
pub const MAX_JSON_PATCH_OPERATIONS: usize = 10_000;

/// What went wrong while selecting or applying overrides. Messages are written for a user reading
/// an object's status: they name the override (or Globalization) and the problem.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OverrideError {
    /// One override rule could not be applied.
    #[error("override {name:?} ({type_}): {reason}")]
    Rule {
        /// The rule's `name`.
        name: String,
        /// The rule's `type`.
        type_: OverrideType,
        /// What is wrong.
        reason: String,
    },
    /// A document handed in to be overridden is not JSON.
    #[error("{what} is not valid JSON: {reason}")]
    Document {
        /// Which document (the object, the chart overrides, ...).
        what: &'static str,
        /// The parser's complaint.
        reason: String,
    },
    /// HelmChart overrides left no HelmChart to install.
    #[error("HelmChart overrides: {0}")]
    Chart(String),
    /// A Globalization's `clusterAffinity` is not a valid label selector.
    #[error("Globalization {name:?}: invalid clusterAffinity: {reason}")]
    ClusterAffinity {
        /// The Globalization's name.
        name: String,
        /// What is wrong with the selector.
        reason: String,
    },
}

/// Fixtures shared by the tests of the override modules: upstream's replication example.
#[cfg(test)]
mod fixtures {
    use std::collections::BTreeMap;

    use serde_json::{Value, json};

    use super::*;
    use crate::apis::{Globalization, Localization, OverrideConfig};
    use crate::kube_ext::yaml;

    pub(super) const MANIFEST_UID: &str = "5b4c1e0e-2f7a-4a1b-9c1d-0a6c5d2e9f10";

    pub(super) fn rule(name: &str, type_: OverrideType, value: &str) -> OverrideConfig {
        OverrideConfig {
            name: name.to_owned(),
            value: value.to_owned(),
            type_,
            override_chart: false,
            field_path: String::new(),
            field_format: None,
        }
    }

    pub(super) fn nginx() -> Value {
        json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {
                "name": "my-nginx",
                "namespace": "foo",
                "uid": "0f0e0d0c-0000-4000-8000-000000000001",
                "resourceVersion": "42",
                "managedFields": [{"manager": "kubectl", "operation": "Update"}],
                "labels": {"app": "nginx"}
            },
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": "nginx"}},
                "template": {
                    "metadata": {"labels": {"app": "nginx"}},
                    "spec": {"containers": [
                        {"name": "nginx", "image": "nginx:1.14.2", "ports": [{"containerPort": 80}]}
                    ]}
                }
            },
            "status": {"replicas": 2, "readyReplicas": 2}
        })
    }

    /// Upstream `examples/replication-scheduling/localization.yaml` (the my-nginx part), labelled
    /// as the Localization controller labels them.
    pub(super) fn localizations() -> Vec<Localization> {
        let yaml = format!(
            r#"
apiVersion: apps.clusternet.io/v1alpha1
kind: Localization
metadata:
  name: nginx-local-overrides-demo-higher-priority
  namespace: clusternet-5l82l
  creationTimestamp: "2024-05-01T10:00:00Z"
  labels: {{"{MANIFEST_UID}": Deployment}}
spec:
  priority: 600
  feed: {{apiVersion: apps/v1, kind: Deployment, name: my-nginx, namespace: foo}}
  overrides:
    - name: scale-and-add-annotations
      type: JSONPatch
      value: |-
        [
          {{"path": "/spec/replicas", "value": 3, "op": "replace"}},
          {{"path": "/metadata/annotations", "value": {{"foo":"bar"}}, "op": "add"}}
        ]
    - name: change-container-image-and-name
      type: JSONPatch
      value: |-
        - path: "/spec/template/spec/containers/0/image"
          value: "nginx:1.14.0-alpine"
          op: replace
        - path: "/spec/template/spec/containers/0/name"
          value: "nginx-container"
          op: replace
    - name: inject-new-container
      type: JSONPatch
      value: |-
        - op: add
          path: "/spec/template/spec/containers/1"
          value:
            name: "redis-container"
            image: "redis:6.2.5"
---
apiVersion: apps.clusternet.io/v1alpha1
kind: Localization
metadata:
  name: nginx-local-overrides-demo-lower-priority
  namespace: clusternet-5l82l
  creationTimestamp: "2024-05-01T09:00:00Z"
  labels: {{"{MANIFEST_UID}": Deployment}}
spec:
  priority: 300
  feed: {{apiVersion: apps/v1, kind: Deployment, name: my-nginx, namespace: foo}}
  overrides:
    - name: add-update-labels
      type: MergePatch
      value: '{{"metadata":{{"labels":{{"deployed-in-cluster":"clusternet-5l82l"}}}}}}'
    - name: scale-replicas
      type: JSONPatch
      value: '[{{"path": "/spec/replicas", "value": 1, "op": "replace"}}]'
"#
        );
        yaml::from_str_documents(&yaml).expect("Localization")
    }

    /// Upstream `examples/replication-scheduling/globalization.yaml` (my-nginx), with the
    /// clusterAffinity of cli.md §3.
    pub(super) fn globalization() -> Globalization {
        let yaml = format!(
            r#"
apiVersion: apps.clusternet.io/v1alpha1
kind: Globalization
metadata:
  name: nginx-global-overrides-demo
  creationTimestamp: "2024-05-01T08:00:00Z"
  labels: {{"{MANIFEST_UID}": Deployment}}
spec:
  priority: 600
  clusterAffinity:
    matchExpressions:
      - {{key: clusters.clusternet.io/cluster-name, operator: In, values: [area1-cluster, area2-cluster]}}
  feed: {{apiVersion: apps/v1, kind: Deployment, name: my-nginx, namespace: foo}}
  overrides:
    - name: add-update-labels
      type: MergePatch
      value: |-
        metadata:
          labels:
            some-label: some-value
            another-label: another-value
    - name: remove-labels
      type: MergePatch
      value: '{{"metadata":{{"labels":{{"another-label":null,"some-other-label":null}}}}}}'
"#
        );
        yaml::from_str(&yaml).expect("Globalization")
    }

    pub(super) fn cluster(name: &str) -> BTreeMap<String, String> {
        BTreeMap::from([(
            "clusters.clusternet.io/cluster-name".to_owned(),
            name.to_owned(),
        )])
    }

    pub(super) fn select(
        globs: &[Globalization],
        locs: &[Localization],
        clusters: &[BTreeMap<String, String>],
    ) -> Vec<OverrideConfig> {
        try_applicable_overrides(
            globs,
            locs,
            "clusternet-5l82l",
            MANIFEST_UID,
            "Deployment",
            None,
            clusters,
        )
        .expect("valid selectors")
    }

    pub(super) fn names(overrides: &[OverrideConfig]) -> Vec<&str> {
        overrides.iter().map(|o| o.name.as_str()).collect()
    }

    pub(super) fn expected_nginx(with_global_label: bool) -> Value {
        let mut labels = json!({"app": "nginx", "deployed-in-cluster": "clusternet-5l82l"});
        if with_global_label {
            labels["some-label"] = json!("some-value");
        }
        json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {
                "name": "my-nginx",
                "namespace": "foo",
                "resourceVersion": "42",
                "labels": labels,
                "annotations": {"foo": "bar"}
            },
            "spec": {
                "replicas": 3,
                "selector": {"matchLabels": {"app": "nginx"}},
                "template": {
                    "metadata": {"labels": {"app": "nginx"}},
                    "spec": {"containers": [
                        {"name": "nginx-container", "image": "nginx:1.14.0-alpine", "ports": [{"containerPort": 80}]},
                        {"name": "redis-container", "image": "redis:6.2.5"}
                    ]}
                }
            }
        })
    }
}

/// Bounded fuzz harnesses (issue #21): override rules are written by users (Localizations,
/// Globalizations) and rendered by the controller, so no value, type or field path may panic it
/// or hang it, and every rule it refuses must say why in the object's status.
#[cfg(test)]
mod fuzz {
    use proptest::prelude::*;
    use serde_json::{Value, json};

    use super::*;
    use crate::apis::placement::OverrideSource;
    use crate::apis::{FieldFormat, OverrideConfig};
    use crate::fuzz_support::{self, assert_readable};
    use crate::kube_ext::yaml;

    /// Override value text: JSON patches, merge patches and Helm values as JSON or YAML, any JSON
    /// value, or arbitrary text.
    fn value_text() -> impl Strategy<Value = String> {
        prop_oneof![
            3 => fuzz_support::json_patch().prop_map(|v| v.to_string()),
            3 => fuzz_support::json_object().prop_map(|v| v.to_string()),
            2 => fuzz_support::json_object().prop_map(|v| yaml::to_string(&v).unwrap_or_default()),
            1 => fuzz_support::json_value().prop_map(|v| v.to_string()),
            1 => fuzz_support::any_text(),
            1 => Just(String::new()),
        ]
    }

    fn override_type() -> impl Strategy<Value = OverrideType> {
        prop::sample::select(vec![
            OverrideType::Helm,
            OverrideType::JsonPatch,
            OverrideType::MergePatch,
            OverrideType::FieldJsonPatch,
            OverrideType::FieldMergePatch,
        ])
    }

    fn rule() -> impl Strategy<Value = OverrideConfig> {
        (
            "[a-z]{0,6}",
            override_type(),
            value_text(),
            prop::bool::weighted(0.2),
            prop_oneof![
                3 => Just("/metadata/annotations/config".to_owned()),
                1 => Just("/spec/template/spec/containers/0/image".to_owned()),
                2 => fuzz_support::json_pointer(),
            ],
            prop::option::of(prop::sample::select(vec![
                FieldFormat::Json,
                FieldFormat::Yaml,
            ])),
        )
            .prop_map(
                |(name, type_, value, override_chart, field_path, field_format)| OverrideConfig {
                    name,
                    value,
                    type_,
                    override_chart,
                    field_path,
                    field_format,
                },
            )
    }

    /// A Deployment-like object with a document embedded in an annotation (JSON, YAML or text),
    /// which the Field* types patch.
    fn document() -> impl Strategy<Value = Value> {
        (
            fuzz_support::deployment_like(),
            prop_oneof![
                fuzz_support::json_object().prop_map(|v| v.to_string()),
                fuzz_support::json_object().prop_map(|v| yaml::to_string(&v).unwrap_or_default()),
                fuzz_support::any_text(),
            ],
        )
            .prop_map(|(mut doc, embedded)| {
                if let Some(meta) = doc.get_mut("metadata").and_then(Value::as_object_mut) {
                    meta.insert("annotations".into(), json!({ "config": embedded }));
                }
                doc
            })
    }

    fn sourced(rules: &[OverrideConfig]) -> Vec<SourcedOverride> {
        rules
            .iter()
            .map(|config| SourcedOverride {
                source: OverrideSource {
                    kind: "Localization".into(),
                    namespace: Some("clusternet-abcde".into()),
                    name: "fuzz".into(),
                    priority: 500,
                },
                config: config.clone(),
            })
            .collect()
    }

    proptest! {
        // every case renders up to five rules, twice for the explained rendering
        #![proptest_config(fuzz_support::config(128))]

        /// Any rules on any object: the generic renderer returns, a refused rule names itself
        /// with a reason, and the explained rendering renders exactly what the plain one does.
        #[test]
        fn random_overrides_never_panic_the_generic_renderer(
            doc in prop_oneof![4 => document(), 1 => fuzz_support::json_value()],
            rules in prop::collection::vec(rule(), 0..5),
        ) {
            let plain = render_generic(&doc, &rules);
            let explained = render_generic_explained(&doc, &sourced(&rules));
            match (&plain, &explained) {
                (Ok(a), Ok((b, _))) => prop_assert_eq!(a, b),
                (Err(a), Err(b)) => {
                    prop_assert_eq!(a, b);
                    assert_readable(&a.to_string(), "an override")?;
                }
                _ => prop_assert!(false, "plain {:?} but explained {:?}", plain, explained),
            }
        }

        /// The text-level entry point (generic and chart documents as stored, possibly blank
        /// or not JSON at all) behaves the same way.
        #[test]
        fn random_override_documents_never_panic_apply_overrides(
            g in prop_oneof![
                3 => document().prop_map(|d| d.to_string()),
                1 => Just(" ".to_owned()),
                1 => fuzz_support::any_text(),
            ],
            c in prop_oneof![
                2 => Just(" ".to_owned()),
                1 => fuzz_support::json_object().prop_map(|v| v.to_string()),
                1 => fuzz_support::any_text(),
            ],
            rules in prop::collection::vec(rule(), 0..5),
        ) {
            match apply_overrides(&g, &c, &rules) {
                Ok((g2, c2)) => {
                    // a document no rule touched is handed back as it came
                    if rules.iter().all(|r| r.value.trim().is_empty()) && g.trim().is_empty() {
                        prop_assert_eq!(&g2, &g);
                    }
                    if rules.iter().all(|r| !r.override_chart) {
                        prop_assert_eq!(&c2, &c);
                    }
                }
                Err(e) => assert_readable(&e.to_string(), "an override")?,
            }
        }

        /// Helm rendering: any values and chart overrides on any HelmChart; which chart is
        /// installed where never changes.
        #[test]
        fn random_helm_overrides_never_panic_the_helm_renderer(
            extra in fuzz_support::json_object(),
            rules in prop::collection::vec(rule(), 0..5),
        ) {
            let mut chart = json!({
                "apiVersion": "apps.clusternet.io/v1alpha1",
                "kind": "HelmChart",
                "metadata": {"name": "mysql", "namespace": "default"},
                "spec": {"repo": "https://charts.example", "chart": "mysql", "targetNamespace": "db"},
            });
            chart["extra"] = extra;
            match render_helm(&chart, &rules) {
                Ok(rendered) => {
                    prop_assert_eq!(&rendered.chart["spec"]["chart"], &json!("mysql"));
                    prop_assert_eq!(&rendered.chart["spec"]["targetNamespace"], &json!("db"));
                }
                Err(e) => assert_readable(&e.to_string(), "a Helm override")?,
            }
        }
    }

    /// Found by `random_helm_overrides_never_panic_the_helm_renderer`: a chart merge patch
    /// `{"spec": []}` replaced the HelmChart's spec, and the chart name and target namespace
    /// that overrides may never change were silently gone (`spec: null` in a Helm chart
    /// override, found while fixing it, did the same).
    #[test]
    fn chart_overrides_cannot_drop_the_spec() {
        let chart = json!({"spec": {"chart": "mysql", "targetNamespace": "db"}});
        for (type_, value) in [
            (OverrideType::MergePatch, r#"{"spec": []}"#),
            (OverrideType::MergePatch, r#"{"spec": null}"#),
            (
                OverrideType::JsonPatch,
                r#"[{"op": "replace", "path": "", "value": 1}]"#,
            ),
            // a Helm chart override is merged into the chart: null deletes there too
            (OverrideType::Helm, "spec: null"),
        ] {
            let rule = OverrideConfig {
                name: "flatten".into(),
                value: value.into(),
                type_,
                override_chart: true,
                field_path: String::new(),
                field_format: None,
            };
            let err = render_helm(&chart, &[rule]).expect_err(value);
            assert!(
                err.to_string()
                    .contains("\"flatten\"] must leave spec a map"),
                "{err}"
            );
        }
    }

    /// Found while writing these harnesses: forty `copy`s of the document into itself are a
    /// few hundred bytes of Localization but 2^40 copies of the object; the renderer refused
    /// nothing and ran out of memory. Now the patch is refused, quickly, with the operation.
    #[test]
    fn self_copying_json_patch_is_refused_not_expanded() {
        let ops: Vec<Value> = (0..40)
            .map(|i| json!({"op": "copy", "from": "", "path": format!("/c{i}")}))
            .collect();
        let rule = OverrideConfig {
            name: "bomb".into(),
            value: Value::Array(ops).to_string(),
            type_: OverrideType::JsonPatch,
            override_chart: false,
            field_path: String::new(),
            field_format: None,
        };
        let started = std::time::Instant::now();
        // a 1 MiB object reaches the bound after two copies (a small one after some twenty
        // doublings, the same refusal, only slower in a debug build)
        let big = json!({"spec": {"blob": "x".repeat(1 << 20)}});
        let err = render_generic(&big, &[rule]).expect_err("an exponential patch is refused");
        let text = err.to_string();
        assert!(
            text.contains("\"bomb\"") && text.contains("would grow the document"),
            "{text}"
        );
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
    }
}
