//! Multi-cluster Services API (`multicluster.x-k8s.io/v1alpha1`): `ServiceExport` (in a child: export
//! this Service) and `ServiceImport` (in the parent: import it as a derived Service). Clusternet
//! bundles these upstream CRDs unchanged; the agent syncs exported EndpointSlices to the parent and
//! the controller-manager builds the derived Service (agent.md §5).
//!
//! Shapes follow spec/apis.md §5 (the sigs.k8s.io/mcs-api v1alpha1 CRDs). These are not Clusternet
//! CRDs, so they carry no `clusternet` category.
//!
//! The bundled `nodefeaturerules.nfd.k8s-sigs.io` CRD is deliberately not modelled: the spec mentions
//! it only for the NFD example, and Clusternet never reads it.

use k8s_openapi::api::core::v1::SessionAffinityConfig;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::apis::string_enum::closed_string_enum;

/// API group of this module.
pub const GROUP: &str = "multicluster.x-k8s.io";
/// API version of this module.
pub const VERSION: &str = "v1alpha1";

/// The (empty) fields of a ServiceExport: it has no spec, only a status.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "multicluster.x-k8s.io",
    version = "v1alpha1",
    kind = "ServiceExport",
    plural = "serviceexports",
    singular = "serviceexport",
    namespaced,
    no_spec,
    shortname = "svcex",
    status = "ServiceExportStatus",
    derive = "PartialEq",
    derive = "Default",
    doc = "ServiceExport declares that the Service with the same name and namespace as this export should be consumable from other clusters.",
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
pub struct ServiceExportFields {}

/// Observed state of a ServiceExport.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceExportStatus {
    /// Conditions of the export.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

closed_string_enum! {
    /// How an imported service is reached (`spec.type`).
    pub enum ServiceImportType {
        /// Through a cluster-set VIP (`spec.ips`).
        ClusterSetIp = "ClusterSetIP",
        /// Directly through the endpoints.
        Headless = "Headless",
    }
}

/// Desired state of a ServiceImport.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "multicluster.x-k8s.io",
    version = "v1alpha1",
    kind = "ServiceImport",
    plural = "serviceimports",
    singular = "serviceimport",
    namespaced,
    shortname = "svcim",
    status = "ServiceImportStatus",
    derive = "PartialEq",
    doc = "ServiceImport describes a service imported from clusters in a ClusterSet.",
    printcolumn(
        name = "Type",
        type_ = "string",
        json_path = ".spec.type",
        description = "The type of this ServiceImport."
    ),
    printcolumn(
        name = "IP",
        type_ = "string",
        json_path = ".spec.ips",
        description = "The VIP for this ServiceImport."
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ServiceImportSpec {
    /// Ports of the service.
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub ports: Vec<ServicePort>,

    /// IPs is the VIP of the service when type is ClusterSetIP.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 1))]
    pub ips: Vec<String>,

    /// Type defines the type of this service.
    #[serde(rename = "type")]
    pub type_: ServiceImportType,

    /// SessionAffinity is `ClientIP` or `None` (core Service semantics).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub session_affinity: String,

    /// SessionAffinityConfig contains the session affinity configuration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_affinity_config: Option<SessionAffinityConfig>,
}

/// A port of a ServiceImport.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServicePort {
    /// Name of the port; must be unique within the service.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,

    /// Protocol: TCP, UDP or SCTP (TCP when empty).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub protocol: String,

    /// AppProtocol is the application protocol of the port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app_protocol: Option<String>,

    /// Port number exposed by the service.
    pub port: i32,
}

/// Observed state of a ServiceImport.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceImportStatus {
    /// Clusters that export the service.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["cluster"]))]
    pub clusters: Vec<ClusterStatus>,
}

/// A cluster that exports a ServiceImport's service.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterStatus {
    /// Cluster is the name of the exporting cluster.
    pub cluster: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apis::test_support::{assert_round_trip, crd_schema};
    use kube::CustomResourceExt;
    use serde_json::json;

    /// agent.md §5.2 example.
    const IMPORT_YAML: &str = r#"
apiVersion: multicluster.x-k8s.io/v1alpha1
kind: ServiceImport
metadata:
  name: my-svc
  namespace: default
  labels:
    services.clusternet.io/multi-cluster-service-name: nginx-svc
    services.clusternet.io/multi-cluster-service-namespace: baz
spec:
  type: ClusterSetIP
  ips: [42.42.42.42]
  ports: [{protocol: TCP, port: 80}]
"#;

    /// cli.md `scheduling-with-mcs-api`.
    const EXPORT_YAML: &str = r#"
apiVersion: multicluster.x-k8s.io/v1alpha1
kind: ServiceExport
metadata:
  name: nginx-svc
  namespace: baz
  labels:
    apps.clusternet.io/subs.namespace: default
status:
  conditions:
    - type: Valid
      status: "True"
      reason: ServiceExported
      message: exported
      lastTransitionTime: "2024-01-02T15:04:05Z"
"#;

    #[test]
    fn examples_round_trip() {
        let import: ServiceImport = assert_round_trip(IMPORT_YAML);
        assert_eq!(import.spec.type_, ServiceImportType::ClusterSetIp);
        assert_eq!(import.spec.ports[0].port, 80);
        let export: ServiceExport = assert_round_trip(EXPORT_YAML);
        assert_eq!(export.status.map(|s| s.conditions.len()), Some(1));
    }

    #[test]
    fn crd_shapes() {
        let export = ServiceExport::crd();
        assert_eq!(
            export.spec.names.short_names,
            Some(vec!["svcex".to_owned()])
        );
        assert!(export.spec.names.categories.is_none());
        let schema = crd_schema::<ServiceExport>();
        assert!(schema["properties"].get("spec").is_none());
        let conditions = &schema["properties"]["status"]["properties"]["conditions"];
        assert_eq!(conditions["x-kubernetes-list-type"], json!("map"));
        assert_eq!(conditions["x-kubernetes-list-map-keys"], json!(["type"]));

        let import = ServiceImport::crd();
        assert_eq!(
            import.spec.names.short_names,
            Some(vec!["svcim".to_owned()])
        );
        let schema = crd_schema::<ServiceImport>();
        let spec = &schema["properties"]["spec"];
        assert_eq!(spec["required"], json!(["ports", "type"]));
        assert_eq!(
            spec["properties"]["type"]["enum"],
            json!(["ClusterSetIP", "Headless"])
        );
        assert_eq!(spec["properties"]["ips"]["maxItems"], json!(1));
        assert_eq!(
            spec["properties"]["ports"]["x-kubernetes-list-type"],
            json!("atomic")
        );
        assert_eq!(
            spec["properties"]["ports"]["items"]["required"],
            json!(["port"])
        );
        let clusters = &schema["properties"]["status"]["properties"]["clusters"];
        assert_eq!(clusters["x-kubernetes-list-map-keys"], json!(["cluster"]));
        assert_eq!(clusters["items"]["required"], json!(["cluster"]));
    }
}
