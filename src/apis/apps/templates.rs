//! The per-cluster pipeline objects and the stored templates: `Base` (a Subscription's feeds for one
//! cluster), `Description` (the rendered objects or charts for one cluster) and `Manifest` (a template
//! object submitted through the shadow API).
//!
//! Upstream: `pkg/apis/apps/v1alpha1/{base,description,manifest}.go`, spec/apis.md §2.2-2.4.

use k8s_openapi::ByteString;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::Feed;
use crate::apis::string_enum::closed_string_enum;

// ---------------------------------------------------------------------------------------------
// Base
// ---------------------------------------------------------------------------------------------

/// Desired state of a Base: the Subscription's feeds, verbatim, for one binding cluster.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "apps.clusternet.io",
    version = "v1alpha1",
    kind = "Base",
    plural = "bases",
    singular = "base",
    namespaced,
    category = "clusternet",
    derive = "PartialEq",
    derive = "Default",
    status = "ReadinessStatus",
    doc = "Base represents the resources of a Subscription to be deployed to one child cluster; it lives in that cluster's dedicated namespace.",
    printcolumn(
        name = "AGE",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct BaseSpec {
    /// Feeds are the resources to deploy.
    pub feeds: Vec<Feed>,
}

impl DescriptionDeployer {
    /// The deployers whose Descriptions `feeds` need in every cluster: Helm for HelmCharts,
    /// Generic for the rest.
    pub fn needed_by(feeds: &[Feed]) -> Vec<DescriptionDeployer> {
        let mut out = Vec::new();
        if feeds.iter().any(|f| f.kind != "HelmChart") {
            out.push(DescriptionDeployer::Generic);
        }
        if feeds.iter().any(|f| f.kind == "HelmChart") {
            out.push(DescriptionDeployer::Helm);
        }
        out
    }
}

/// The status of an object whose only news is whether it is Ready (beyond upstream): Base,
/// RolloutStrategy.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReadinessStatus {
    /// ObservedGeneration is the generation the conditions speak for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// Conditions, as kstatus reads them: `Ready`, with `Reconciling` (on its way) or `Stalled`
    /// (needs a hand) beside it while they are true.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>,
}

// ---------------------------------------------------------------------------------------------
// Description
// ---------------------------------------------------------------------------------------------

closed_string_enum! {
    /// Which deployer renders and applies a Description (`spec.deployer`).
    pub enum DescriptionDeployer {
        /// Helm charts, installed as HelmReleases.
        Helm = "Helm",
        /// Plain objects, applied as they are.
        Generic = "Generic",
    }
}

closed_string_enum! {
    /// Phase of a Description (`status.phase`).
    pub enum DescriptionPhase {
        /// Not deployed yet.
        Pending = "Pending",
        /// Deployed.
        Success = "Success",
        /// Deploying failed; see `reason`.
        Failure = "Failure",
        /// A Helm release is being installed.
        Installing = "Installing",
        /// A Helm release is being upgraded.
        Upgrading = "Upgrading",
        /// A Helm release is being uninstalled.
        Uninstalling = "Uninstalling",
        /// A Helm release was superseded.
        Superseded = "Superseded",
        /// Unknown.
        Unknown = "Unknown",
    }
}

/// Desired state of a Description.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "apps.clusternet.io",
    version = "v1alpha1",
    kind = "Description",
    plural = "descriptions",
    singular = "description",
    namespaced,
    shortname = "desc",
    category = "clusternet",
    status = "DescriptionStatus",
    derive = "PartialEq",
    doc = "Description is the rendered set of resources (or Helm charts) to be installed in one child cluster.",
    printcolumn(name = "DEPLOYER", type_ = "string", json_path = ".spec.deployer"),
    printcolumn(name = "STATUS", type_ = "string", json_path = ".status.phase"),
    printcolumn(
        name = "AGE",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct DescriptionSpec {
    /// Deployer indicates the deployer for this Description.
    pub deployer: DescriptionDeployer,

    /// Charts are the HelmCharts to install (Helm only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub charts: Vec<ChartReference>,

    /// Raw holds one JSON document per item. Generic: the rendered child object. Helm: the rendered
    /// values of the chart at the same index (a single space when there are no overrides).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "crate::apis::schema::go_bytes_list")]
    pub raw: Vec<ByteString>,

    /// ChartRaw holds the rendered HelmChart object JSON, one per chart (Helm only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "crate::apis::schema::go_bytes_list")]
    pub chart_raw: Vec<ByteString>,
}

/// A reference to a HelmChart.
#[derive(
    Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub struct ChartReference {
    /// Namespace of the HelmChart.
    pub namespace: String,
    /// Name of the HelmChart.
    pub name: String,
}

/// Observed state of a Description.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DescriptionStatus {
    /// Phase denotes the phase of the Description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<DescriptionPhase>,

    /// Reason explains the phase.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,

    /// ManifestStatuses are the statuses of the applied objects, copied from the child cluster.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub manifest_statuses: Vec<ManifestStatus>,

    /// ObservedGeneration is the generation of the Description this status speaks for
    /// (clusternet-rs: a rollout takes a cluster's health only from a status of what it carries
    /// now).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// Conditions (beyond upstream), as kstatus reads them: `Ready` (every object applied and
    /// healthy in the child), with `Reconciling` (still deploying) or `Stalled` (failed) beside
    /// it while they are true.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>,
}

/// The status of one applied object in a child cluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ManifestStatus {
    /// The object (inlined).
    #[serde(flatten)]
    pub feed: Feed,

    /// ObservedStatus is the child object's `.status`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::apis::schema::preserve_unknown_fields")]
    pub observed_status: Option<Value>,

    /// Drift is the last change made to the object in the child behind Clusternet's back, and
    /// what was done about it (clusternet-rs; absent when none was seen).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drift: Option<Drift>,

    /// Retained are the fields another field manager of the child took over and that Clusternet
    /// leaves to it (an autoscaler's `spec.replicas`, a path in `apps.clusternet.io/retain-fields`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub retained: Vec<RetainedField>,

    /// Health is the object's kstatus status in the child (`Current`, `InProgress`, `Failed`,
    /// `Terminating`) and why (clusternet-rs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<crate::kube_ext::health::Health>,
}

/// A drift of one object in a child cluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Drift {
    /// Action is what was done: `Repaired`, `Reported` (policy Report) or `RepairPaused`
    /// (something in the child keeps changing it back).
    pub action: String,

    /// DetectedAt is when Clusternet saw it (RFC 3339).
    pub detected_at: String,

    /// Deleted is true when the whole object was deleted in the child.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub deleted: bool,

    /// Fields are the fields Clusternet applied that were changed or removed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fields: Vec<DriftField>,
}

/// One drifted field.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DriftField {
    /// Path of the field (`.data.color`, `.spec.template.spec.containers[name=web].image`).
    pub path: String,

    /// Desired is the value Clusternet applied (summarised).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub desired: String,

    /// Live is the value found in the child (summarised; empty when the field was removed).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub live: String,

    /// Manager is the field manager that changed it, from the object's managedFields (empty when
    /// the field was removed and nobody owns it now).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub manager: String,

    /// Operation is that manager's operation (`Update` or `Apply`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub operation: String,

    /// ChangedAt is the time of that manager's last change (RFC 3339, from managedFields).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub changed_at: String,
}

/// A field left to another field manager of the child.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RetainedField {
    /// Path of the field.
    pub path: String,

    /// Manager is the field manager that owns it in the child.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub manager: String,
}

// ---------------------------------------------------------------------------------------------
// Manifest
// ---------------------------------------------------------------------------------------------

/// The fields of a Manifest. A Manifest has no spec: `template` sits at the root of the object.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "apps.clusternet.io",
    version = "v1alpha1",
    kind = "Manifest",
    plural = "manifests",
    singular = "manifest",
    namespaced,
    no_spec,
    category = "clusternet",
    derive = "PartialEq",
    doc = "Manifest stores a template object submitted through the shadow API (in the reserved namespace).",
    printcolumn(
        name = "AGE",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ManifestFields {
    /// Template is the stored object, with its original namespace.
    #[schemars(schema_with = "crate::apis::schema::preserve_unknown_fields")]
    pub template: Value,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apis::test_support::{assert_round_trip, crd_schema};
    use kube::CustomResourceExt;
    use serde_json::json;

    /// spec/deployer.md §2, instantiated.
    const BASE_YAML: &str = r#"
apiVersion: apps.clusternet.io/v1alpha1
kind: Base
metadata:
  name: app-demo-x7k2p
  namespace: clusternet-v7wzf
  labels:
    clusternet.io/created-by: clusternet-controller-manager
    apps.clusternet.io/config.kind: Subscription
    apps.clusternet.io/config.namespace: default
    apps.clusternet.io/config.uid: 9f9e4d5c-9c3a-4a5e-8d44-2b0f1c7e6a11
    apps.clusternet.io/config.name: app-demo
    apps.clusternet.io/subs.namespace: default
    apps.clusternet.io/subs.uid: 9f9e4d5c-9c3a-4a5e-8d44-2b0f1c7e6a11
    apps.clusternet.io/subs.name: app-demo
    clusters.clusternet.io/cluster-id: dc91021d-2361-4f6d-a404-7c33b9e01118
    clusters.clusternet.io/cluster-name: child1
  annotations:
    apps.clusternet.io/is-default-cluster-init: "true"
  finalizers: [apps.clusternet.io/finalizer]
spec:
  feeds:
    - {apiVersion: v1, kind: Namespace, name: foo}
    - {apiVersion: apps/v1, kind: Deployment, namespace: foo, name: my-nginx}
"#;

    const DESCRIPTION_YAML: &str = r#"
apiVersion: apps.clusternet.io/v1alpha1
kind: Description
metadata: {name: app-demo-x7k2p-generic, namespace: clusternet-v7wzf}
spec:
  deployer: Generic
  raw:
    - eyJhcGlWZXJzaW9uIjoidjEiLCJraW5kIjoiTmFtZXNwYWNlIiwibWV0YWRhdGEiOnsibmFtZSI6ImZvbyJ9fQ==
status:
  phase: Success
  manifestStatuses:
    - kind: Deployment
      apiVersion: apps/v1
      namespace: foo
      name: my-nginx
      observedStatus: {replicas: 3, readyReplicas: 3, conditions: [{type: Available, status: "True"}]}
"#;

    const HELM_DESCRIPTION_YAML: &str = r#"
apiVersion: apps.clusternet.io/v1alpha1
kind: Description
metadata: {name: app-demo-x7k2p-helm, namespace: clusternet-v7wzf}
spec:
  deployer: Helm
  charts: [{namespace: default, name: mysql}]
  raw: [IA==]
  chartRaw: [e30=]
status:
  phase: Failure
  reason: chart not found
"#;

    /// spec/hub.md §3.2 example.
    const MANIFEST_YAML: &str = r#"
apiVersion: apps.clusternet.io/v1alpha1
kind: Manifest
metadata:
  name: deployments.qux.my-nginx
  namespace: clusternet-reserved
  labels:
    app: nginx
    clusternet.io/created-by: clusternet-hub
    apps.clusternet.io/config.group: apps
    apps.clusternet.io/config.version: v1
    apps.clusternet.io/config.kind: Deployment
    apps.clusternet.io/config.name: my-nginx
    apps.clusternet.io/config.namespace: qux
template:
  apiVersion: apps/v1
  kind: Deployment
  metadata: {name: my-nginx, namespace: qux, labels: {app: nginx, clusternet.io/created-by: clusternet-hub}, uid: "...", generation: 1}
  spec: {replicas: 6, selector: {matchLabels: {app: nginx}}, template: {...}}
"#;

    #[test]
    fn examples_round_trip() {
        let base: Base = assert_round_trip(BASE_YAML);
        assert_eq!(base.spec.feeds.len(), 2);

        let desc: Description = assert_round_trip(DESCRIPTION_YAML);
        assert_eq!(desc.spec.deployer, DescriptionDeployer::Generic);
        let object: Value = serde_json::from_slice(&desc.spec.raw[0].0).expect("raw is JSON");
        assert_eq!(object["kind"], json!("Namespace"));
        let status = desc.status.expect("status");
        assert_eq!(status.phase, Some(DescriptionPhase::Success));
        assert_eq!(
            status.manifest_statuses[0]
                .observed_status
                .as_ref()
                .map(|s| &s["replicas"]),
            Some(&json!(3))
        );

        let helm: Description = assert_round_trip(HELM_DESCRIPTION_YAML);
        assert_eq!(helm.spec.raw[0].0, b" ");
        assert_eq!(
            helm.spec.charts,
            vec![ChartReference {
                namespace: "default".into(),
                name: "mysql".into()
            }]
        );

        let manifest: Manifest = assert_round_trip(MANIFEST_YAML);
        assert_eq!(manifest.spec.template["spec"]["replicas"], json!(6));
    }

    #[test]
    fn enum_strings_are_upstreams() {
        assert_eq!(DescriptionDeployer::VALUES, &["Helm", "Generic"]);
        assert_eq!(
            DescriptionPhase::VALUES,
            &[
                "Pending",
                "Success",
                "Failure",
                "Installing",
                "Upgrading",
                "Uninstalling",
                "Superseded",
                "Unknown"
            ]
        );
    }

    #[test]
    fn crd_shapes() {
        // beyond upstream: a status subresource for its Ready condition (deployer.md §17.3)
        assert!(
            Base::crd().spec.versions[0]
                .subresources
                .as_ref()
                .is_some_and(|s| s.status.is_some())
        );
        assert!(Base::crd().spec.names.short_names.is_none());
        assert!(Manifest::crd().spec.versions[0].subresources.is_none());
        assert_eq!(
            Description::crd().spec.names.short_names,
            Some(vec!["desc".to_owned()])
        );

        let manifest = crd_schema::<Manifest>();
        assert_eq!(manifest["required"], json!(["template"]));
        assert_eq!(
            manifest["properties"]["template"],
            json!({
                "description": "Template is the stored object, with its original namespace.",
                "type": "object",
                "x-kubernetes-preserve-unknown-fields": true,
            })
        );
        assert!(manifest["properties"].get("spec").is_none());

        let desc = crd_schema::<Description>();
        let spec = &desc["properties"]["spec"];
        assert_eq!(spec["required"], json!(["deployer"]));
        assert_eq!(
            spec["properties"]["raw"]["items"],
            json!({"type": "string", "format": "byte"})
        );
        let status = &desc["properties"]["status"]["properties"];
        assert_eq!(
            status["manifestStatuses"]["items"]["properties"]["observedStatus"]["x-kubernetes-preserve-unknown-fields"],
            json!(true)
        );
    }
}
