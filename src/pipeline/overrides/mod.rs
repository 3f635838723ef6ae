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
