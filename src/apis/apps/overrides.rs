//! Override kinds: `Localization` (per cluster, in its dedicated namespace) and `Globalization`
//! (cluster-scoped, optionally limited by a cluster label selector). Both patch a feed's rendered
//! object or Helm values before it becomes a Description; higher `priority` wins, Localizations win
//! over Globalizations (deployer.md).
//!
//! Upstream: `pkg/apis/apps/v1alpha1/{localization,globalization}.go`, spec/apis.md §2.7.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::Feed;
use crate::apis::omitempty::{is_false, is_zero_i32};
use crate::apis::string_enum::closed_string_enum;

/// Priority the CRDs default to.
pub const DEFAULT_OVERRIDE_PRIORITY: i32 = 500;

closed_string_enum! {
    /// When an override takes effect (`spec.overridePolicy`).
    #[derive(Default)]
    pub enum OverridePolicy {
        /// Re-render every matched object immediately, including already deployed ones.
        ApplyNow = "ApplyNow",
        /// Apply on the next change of the Subscription/template, or to new objects (the CRD default).
        #[default]
        ApplyLater = "ApplyLater",
    }
}

closed_string_enum! {
    /// How an override's `value` is applied (`overrides[].type`).
    pub enum OverrideType {
        /// Helm values (YAML or JSON) merged into the chart values.
        Helm = "Helm",
        /// RFC 6902 JSON patch of the object.
        JsonPatch = "JSONPatch",
        /// RFC 7386 merge patch of the object.
        MergePatch = "MergePatch",
        /// JSON patch of a document embedded in a string field (`fieldPath`).
        FieldJsonPatch = "FieldJSONPatch",
        /// Merge patch of a document embedded in a string field (`fieldPath`).
        FieldMergePatch = "FieldMergePatch",
    }
}

closed_string_enum! {
    /// Format of the document embedded at `fieldPath` (`overrides[].fieldFormat`).
    pub enum FieldFormat {
        /// YAML.
        Yaml = "YAML",
        /// JSON.
        Json = "JSON",
    }
}

/// One override rule.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OverrideConfig {
    /// Name of the rule.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,

    /// Value holds the override, as YAML or JSON text.
    pub value: String,

    /// Type says how to apply the value.
    #[serde(rename = "type")]
    pub type_: OverrideType,

    /// OverrideChart makes the value patch the HelmChart object instead of the Helm values.
    #[serde(default, skip_serializing_if = "is_false")]
    pub override_chart: bool,

    /// FieldPath is a JSON-pointer-like path to a string field (Field* types only).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub field_path: String,

    /// FieldFormat is the format of the document at fieldPath.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field_format: Option<FieldFormat>,
}

/// Desired state of a Localization.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "apps.clusternet.io",
    version = "v1alpha1",
    kind = "Localization",
    plural = "localizations",
    singular = "localization",
    namespaced,
    shortname = "loc",
    shortname = "local",
    category = "clusternet",
    derive = "PartialEq",
    derive = "Default",
    doc = "Localization represents the override rules of a feed for the one child cluster whose dedicated namespace holds it.",
    printcolumn(
        name = "AGE",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct LocalizationSpec {
    /// OverridePolicy specifies when the overrides take effect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-crd-default" = "ApplyLater"))]
    pub override_policy: Option<OverridePolicy>,

    /// Overrides holds the override rules, applied in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub overrides: Vec<OverrideConfig>,

    /// Priority (0-1000) orders overrides; higher numbers are applied later and win.
    #[serde(default, skip_serializing_if = "is_zero_i32")]
    #[schemars(range(min = 0, max = 1000), extend("x-crd-default" = 500))]
    pub priority: i32,

    /// Feed is the template the overrides apply to.
    // Go always writes this struct; an empty one carries no information, so it is omitted here.
    #[serde(default, skip_serializing_if = "Feed::is_empty")]
    pub feed: Feed,
}

/// Desired state of a Globalization.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "apps.clusternet.io",
    version = "v1alpha1",
    kind = "Globalization",
    plural = "globalizations",
    singular = "globalization",
    shortname = "glob",
    shortname = "global",
    category = "clusternet",
    derive = "PartialEq",
    derive = "Default",
    doc = "Globalization represents the override rules of a feed for every child cluster (or those matching clusterAffinity).",
    printcolumn(
        name = "AGE",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct GlobalizationSpec {
    /// OverridePolicy specifies when the overrides take effect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-crd-default" = "ApplyLater"))]
    pub override_policy: Option<OverridePolicy>,

    /// Overrides holds the override rules, applied in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub overrides: Vec<OverrideConfig>,

    /// Priority (0-1000) orders overrides; higher numbers are applied later and win.
    #[serde(default, skip_serializing_if = "is_zero_i32")]
    #[schemars(range(min = 0, max = 1000), extend("x-crd-default" = 500))]
    pub priority: i32,

    /// Feed is the template the overrides apply to.
    // Go always writes this struct; an empty one carries no information, so it is omitted here.
    #[serde(default, skip_serializing_if = "Feed::is_empty")]
    pub feed: Feed,

    /// ClusterAffinity restricts the overrides to clusters whose labels match; unset means all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_affinity: Option<LabelSelector>,
}

impl LocalizationSpec {
    /// The override policy, `ApplyLater` when unset.
    pub fn effective_override_policy(&self) -> OverridePolicy {
        self.override_policy.unwrap_or_default()
    }

    /// The priority, 500 when unset.
    pub fn effective_priority(&self) -> i32 {
        if self.priority == 0 {
            DEFAULT_OVERRIDE_PRIORITY
        } else {
            self.priority
        }
    }
}

impl GlobalizationSpec {
    /// The override policy, `ApplyLater` when unset.
    pub fn effective_override_policy(&self) -> OverridePolicy {
        self.override_policy.unwrap_or_default()
    }

    /// The priority, 500 when unset.
    pub fn effective_priority(&self) -> i32 {
        if self.priority == 0 {
            DEFAULT_OVERRIDE_PRIORITY
        } else {
            self.priority
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apis::test_support::{assert_round_trip, crd_schema};
    use kube::CustomResourceExt;
    use serde_json::json;

    /// deployer.md §3: the dividing-scheduling Localization, instantiated.
    const DIVIDING_YAML: &str = r#"
apiVersion: apps.clusternet.io/v1alpha1
kind: Localization
metadata:
  name: app-demo-x7k2p-q8z4w
  namespace: clusternet-v7wzf
  labels:
    clusternet.io/created-by: clusternet-controller-manager
    9f9e4d5c-9c3a-4a5e-8d44-2b0f1c7e6a11: Subscription
  ownerReferences:
    - {apiVersion: apps.clusternet.io/v1alpha1, kind: Base, name: app-demo-x7k2p, uid: 0d5b2c61-6f0e-4a52-9d3e-7a8b9c0d1e2f, controller: true, blockOwnerDeletion: true}
spec:
  overridePolicy: ApplyNow
  priority: 1000
  feed: {apiVersion: apps/v1, kind: Deployment, namespace: bar, name: my-nginx}
  overrides:
    - name: dividing scheduling replicas
      type: JSONPatch
      value: '[{"path":"/spec/replicas","value":2,"op":"replace"}]'
"#;

    /// cli.md `replication-scheduling/localization.yaml`: Helm values and chart override.
    const HELM_LOC_YAML: &str = r#"
apiVersion: apps.clusternet.io/v1alpha1
kind: Localization
metadata: {name: mysql-local-overrides, namespace: clusternet-v7wzf}
spec:
  overridePolicy: ApplyLater
  priority: 300
  feed: {apiVersion: apps.clusternet.io/v1alpha1, kind: HelmChart, namespace: default, name: mysql}
  overrides:
    - name: override-values
      type: Helm
      value: |
        image:
          tag: 8.0.27-debian-10-r8
        auth:
          database: my_database
    - name: override-chart
      type: MergePatch
      overrideChart: true
      value: '{"spec":{"version":"9.1.8"},"metadata":{"labels":{"foo":"bar"}}}'
"#;

    /// cli.md `replication-scheduling/localization.yaml`: priority-600 JSON patch for my-nginx.
    const NGINX_LOC_YAML: &str = r#"
apiVersion: apps.clusternet.io/v1alpha1
kind: Localization
metadata: {name: nginx-local-overrides-600, namespace: clusternet-v7wzf}
spec:
  priority: 600
  feed: {apiVersion: apps/v1, kind: Deployment, namespace: foo, name: my-nginx}
  overrides:
    - name: scale-and-sidecar
      type: JSONPatch
      value: |-
        [{"path": "/spec/replicas", "value": 3, "op": "replace"},
         {"path": "/spec/template/spec/containers/1", "value": {"name": "redis", "image": "redis:6.2.5"}, "op": "add"}]
"#;

    /// cli.md `replication-scheduling/globalization.yaml`.
    const GLOB_YAML: &str = r#"
apiVersion: apps.clusternet.io/v1alpha1
kind: Globalization
metadata: {name: nginx-global-overrides}
spec:
  overridePolicy: ApplyLater
  priority: 300
  clusterAffinity:
    matchExpressions:
      - {key: clusters.clusternet.io/cluster-name, operator: In, values: [area1-cluster, area2-cluster]}
  feed: {apiVersion: apps/v1, kind: Deployment, namespace: foo, name: my-nginx}
  overrides:
    - name: add-labels
      type: MergePatch
      value: '{"metadata":{"labels":{"deployed-in-area":"area1-or-area2"}}}'
"#;

    /// cli.md `fieldpatch`.
    const FIELD_PATCH_YAML: &str = r#"
apiVersion: apps.clusternet.io/v1alpha1
kind: Globalization
metadata: {name: server-conf-us-west}
spec:
  clusterAffinity: {matchLabels: {clusters.clusternet.io/cluster-name: us-west}}
  feed: {apiVersion: v1, kind: ConfigMap, namespace: qux, name: server-conf}
  overrides:
    - name: us-west-db
      type: FieldMergePatch
      fieldPath: /data/server.conf
      fieldFormat: JSON
      value: '{"db_address":"10.0.0.8:3306","region_id":"us-west","zone_id":"us-west-1"}'
"#;

    #[test]
    fn examples_round_trip() {
        let dividing: Localization = assert_round_trip(DIVIDING_YAML);
        assert_eq!(
            dividing.spec.effective_override_policy(),
            OverridePolicy::ApplyNow
        );
        assert_eq!(dividing.spec.overrides[0].type_, OverrideType::JsonPatch);

        let helm: Localization = assert_round_trip(HELM_LOC_YAML);
        assert!(helm.spec.overrides[1].override_chart);

        let nginx: Localization = assert_round_trip(NGINX_LOC_YAML);
        assert_eq!(
            nginx.spec.effective_override_policy(),
            OverridePolicy::ApplyLater
        );
        assert_eq!(nginx.spec.effective_priority(), 600);

        let glob: Globalization = assert_round_trip(GLOB_YAML);
        assert!(glob.spec.cluster_affinity.is_some());

        let field: Globalization = assert_round_trip(FIELD_PATCH_YAML);
        let rule = &field.spec.overrides[0];
        assert_eq!(
            (rule.type_, rule.field_format),
            (OverrideType::FieldMergePatch, Some(FieldFormat::Json))
        );
        assert_eq!(field.spec.effective_priority(), 500);
    }

    #[test]
    fn enum_strings_are_upstreams() {
        assert_eq!(OverridePolicy::VALUES, &["ApplyNow", "ApplyLater"]);
        assert_eq!(
            OverrideType::VALUES,
            &[
                "Helm",
                "JSONPatch",
                "MergePatch",
                "FieldJSONPatch",
                "FieldMergePatch"
            ]
        );
        assert_eq!(FieldFormat::VALUES, &["YAML", "JSON"]);
    }

    #[test]
    fn crd_shapes() {
        assert_eq!(Localization::crd().spec.scope, "Namespaced");
        assert_eq!(Globalization::crd().spec.scope, "Cluster");
        assert_eq!(
            Localization::crd().spec.names.short_names,
            Some(vec!["loc".to_owned(), "local".to_owned()])
        );
        assert_eq!(
            Globalization::crd().spec.names.short_names,
            Some(vec!["glob".to_owned(), "global".to_owned()])
        );
        for schema in [crd_schema::<Localization>(), crd_schema::<Globalization>()] {
            let p = &schema["properties"]["spec"]["properties"];
            assert_eq!(p["overridePolicy"]["default"], json!("ApplyLater"));
            assert_eq!(p["priority"]["default"], json!(500));
            assert_eq!(p["priority"]["minimum"], json!(0.0));
            assert_eq!(p["priority"]["maximum"], json!(1000.0));
            assert!(p["feed"].get("default").is_none());
            assert_eq!(
                p["overrides"]["items"]["required"],
                json!(["type", "value"])
            );
        }
        let loc = crd_schema::<Localization>();
        assert!(
            loc["properties"]["spec"]["properties"]
                .get("clusterAffinity")
                .is_none()
        );
    }
}
