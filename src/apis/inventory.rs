//! SIG-Multicluster's Cluster Inventory API (`multicluster.x-k8s.io/v1alpha1`, KEP-4322 and
//! KEP-5313): `ClusterProfile`, one per cluster of the fleet, and `PlacementDecision`, the clusters
//! a scheduler chose. Other tools (Kueue's MultiKueue, Argo CD, multicluster-runtime, Headlamp)
//! read them; the parent publishes them (docs/spec/standards.md).
//!
//! Written from the KEPs and the SIG's published types (sigs.k8s.io/cluster-inventory-api
//! `apis/v1alpha1`, whose Go module the Go module proxy here does not serve): same group, kinds,
//! fields, list types and validation, so a CRD already installed by another manager (OCM,
//! KubeFleet) and ours accept the same objects.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The label naming the cluster manager that owns a ClusterProfile (KEP-4322).
pub const CLUSTER_MANAGER_LABEL: &str = "x-k8s.io/cluster-manager";
/// The label on a ClusterProfile namespace naming its ClusterSet (KEP-4322).
pub const CLUSTER_SET_LABEL: &str = "multicluster.x-k8s.io/clusterset";
/// Our name as a cluster manager (`spec.clusterManager.name` and the label).
pub const CLUSTER_MANAGER: &str = "clusternet";
/// The KEP's condition: the cluster's control plane is healthy.
pub const CONDITION_CONTROL_PLANE_HEALTHY: &str = "ControlPlaneHealthy";
/// Labels of a PlacementDecision (KEP-5313): the slices of one decision, their order, and the
/// workload it places.
pub const DECISION_KEY_LABEL: &str = "multicluster.x-k8s.io/decision-key";
pub const DECISION_INDEX_LABEL: &str = "multicluster.x-k8s.io/decision-index";
pub const PLACEMENT_KEY_LABEL: &str = "multicluster.x-k8s.io/placement-key";
/// Clusters per PlacementDecision slice (the KEP's maximum).
pub const DECISIONS_PER_SLICE: usize = 100;

/// Desired state of a ClusterProfile.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "multicluster.x-k8s.io",
    version = "v1alpha1",
    kind = "ClusterProfile",
    plural = "clusterprofiles",
    singular = "clusterprofile",
    namespaced,
    status = "ClusterProfileStatus",
    derive = "PartialEq",
    doc = "ClusterProfile represents a single cluster in a multi-cluster deployment."
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterProfileSpec {
    /// DisplayName defines a human-readable name of the ClusterProfile
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub display_name: String,

    /// ClusterManager defines which cluster manager owns this ClusterProfile resource
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "self == oldSelf", "message": "ClusterManager is immutable"}]))]
    pub cluster_manager: ClusterManager,
}

/// Which cluster manager owns a ClusterProfile (immutable).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct ClusterManager {
    /// Name defines the name of the cluster manager
    pub name: String,
}

/// Observed state of a ClusterProfile.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterProfileStatus {
    /// Conditions contains the different condition statuses for this cluster.
    #[serde(default)]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,

    /// Version defines the version information of the cluster.
    #[serde(default, skip_serializing_if = "ClusterVersion::is_empty")]
    pub version: ClusterVersion,

    /// Properties defines cluster characteristics through a list of Property objects: a
    /// ClusterProperty of the cluster (KEP-2149) or a cluster manager's own information.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub properties: Vec<Property>,

    /// CredentialProviders (deprecated: AccessProviders) are cluster access providers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub credential_providers: Vec<AccessProvider>,

    /// AccessProviders is a list of cluster access providers that can provide access
    /// information for clusters.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub access_providers: Vec<AccessProvider>,
}

/// The version information of a cluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct ClusterVersion {
    /// Kubernetes is the kubernetes version of the cluster.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kubernetes: String,
}

impl ClusterVersion {
    fn is_empty(&self) -> bool {
        self.kubernetes.is_empty()
    }
}

/// A property of a cluster: a name, a value, and when it was last observed on the cluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Property {
    /// Name is the name of a property resource on cluster (well-known or a manager's own).
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Value is a property-dependent string
    #[schemars(length(min = 1, max = 1024))]
    pub value: String,
    /// LastObservedTime is the last time the property was observed on the corresponding cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_observed_time: Option<Time>,
}

/// How to reach a cluster: a provider name and a kubeconfig `Cluster` (server, CA data,
/// extensions such as the exec plugin's additional arguments, KEP-5339).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct AccessProvider {
    pub name: String,
    #[serde(default)]
    pub cluster: KubeconfigCluster,
}

/// A kubeconfig's `Cluster` (k8s.io/client-go `tools/clientcmd/api/v1`), as kubeconfig files spell
/// its fields.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub struct KubeconfigCluster {
    /// Server is the address of the kubernetes cluster (https://hostname:port).
    pub server: String,
    /// TLSServerName is used to check server certificate.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub tls_server_name: String,
    /// InsecureSkipTLSVerify skips the validity check for the server's certificate.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub insecure_skip_tls_verify: bool,
    /// CertificateAuthority is the path to a cert file for the certificate authority.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub certificate_authority: String,
    /// CertificateAuthorityData contains PEM-encoded certificate authority certificates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::apis::schema::go_bytes")]
    pub certificate_authority_data: Option<k8s_openapi::ByteString>,
    /// ProxyURL is the URL to the proxy to be used for all requests made by this client.
    #[serde(
        default,
        skip_serializing_if = "String::is_empty",
        rename = "proxy-url"
    )]
    pub proxy_url: String,
    /// DisableCompression allows client to opt-out of response compression.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub disable_compression: bool,
    /// Extensions holds additional information (KEP-5339: the exec plugin's additional
    /// arguments and environment).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extensions: Vec<NamedExtension>,
}

/// A named kubeconfig extension.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct NamedExtension {
    pub name: String,
    #[schemars(schema_with = "crate::apis::schema::preserve_unknown_fields")]
    pub extension: Value,
}

/// The clusters a scheduler chose for a workload (KEP-5313): data only, no spec or status; one
/// decision may be cut into slices of at most 100 clusters, tied by a decision-key label.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "multicluster.x-k8s.io",
    version = "v1alpha1",
    kind = "PlacementDecision",
    plural = "placementdecisions",
    singular = "placementdecision",
    namespaced,
    no_spec,
    derive = "PartialEq",
    derive = "Default",
    doc = "PlacementDecision publishes the set of clusters chosen by a scheduler at a point in time."
)]
#[serde(rename_all = "camelCase")]
pub struct PlacementDecisionFields {
    /// Decisions is the list of clusters chosen for this placement decision (at most 100 per
    /// slice).
    #[schemars(length(min = 0, max = 100))]
    pub decisions: Vec<ClusterDecision>,
    /// SchedulerName is the name of the scheduler that created this decision.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub scheduler_name: String,
}

/// A chosen cluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterDecision {
    /// ClusterProfileRef is a reference to the target ClusterProfile.
    pub cluster_profile_ref: ClusterProfileReference,
    /// Reason is an optional explanation of why this cluster was chosen.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
}

/// A ClusterProfile, by name and namespace (empty: the PlacementDecision's).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct ClusterProfileReference {
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
}
