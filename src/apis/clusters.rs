//! API group `clusters.clusternet.io/v1beta1`: `ClusterRegistrationRequest` (what an agent files to
//! join) and `ManagedCluster` (the parent's record of a child, heartbeated by its agent).
//!
//! Mirrors Clusternet's `pkg/apis/clusters/v1beta1/types.go` and the CRDs
//! `clusters.clusternet.io_*.yaml` (spec/apis.md §1). Field order is Go's struct order, so
//! serialization emits keys in the order Go does.
//!
//! Mapping rules used throughout `apis` (Go -> Rust): a Go pointer is an `Option`; a Go value type is
//! a plain Rust value whose zero is its `Default`; `omitempty` is `skip_serializing_if` "is zero";
//! Go `[]byte` is [`ByteString`] (standard base64 on the wire).

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Taint;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::apis::omitempty::{is_false, is_zero_f32, is_zero_i32};
use crate::apis::string_enum::{closed_string_enum, open_string_enum};

/// API group of this module.
pub const GROUP: &str = "clusters.clusternet.io";
/// API version of this module.
pub const VERSION: &str = "v1beta1";

/// Unanchored UUID pattern the CRDs put on every `clusterId` (upstream's exact regex).
pub const CLUSTER_ID_PATTERN: &str =
    "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}";
/// Unanchored cluster-name pattern of the CRDs (`clusterName`, max 30 chars).
pub const CLUSTER_NAME_PATTERN: &str =
    "[a-z0-9]([-a-z0-9]*[a-z0-9])?([a-z0-9]([-a-z0-9]*[a-z0-9]))*";
/// Unanchored dedicated-namespace pattern of the CRR (`clusterNamespace`, max 63 chars).
pub const CLUSTER_NAMESPACE_PATTERN: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";

open_string_enum! {
    /// Kind of child cluster (`spec.clusterType`). The CRD accepts any string.
    pub enum ClusterType {
        /// An edge cluster.
        EdgeCluster = "EdgeCluster",
        /// A regular cluster; what the agent sends by default.
        StandardCluster = "StandardCluster",
    }
}

closed_string_enum! {
    /// Who deploys workloads into the child (`spec.syncMode`).
    #[derive(Default)]
    pub enum ClusterSyncMode {
        /// The parent (controller-manager) applies objects to the child.
        Push = "Push",
        /// The agent in the child applies objects (the default).
        #[default]
        Pull = "Pull",
        /// The parent pushes if the agent allows it (`status.appPusher`), otherwise the agent pulls.
        Dual = "Dual",
    }
}

open_string_enum! {
    /// Outcome of a registration request (`status.result`). No CRD enum upstream.
    pub enum ApprovedResult {
        /// Rejected.
        Denied = "Denied",
        /// Accepted; the status carries credentials.
        Approved = "Approved",
        /// Processing failed; see `errorMessage`.
        Failed = "Failed",
    }
}

// ---------------------------------------------------------------------------------------------
// ClusterRegistrationRequest
// ---------------------------------------------------------------------------------------------

/// Desired state of a ClusterRegistrationRequest, filed by the agent with a bootstrap token.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "clusters.clusternet.io",
    version = "v1beta1",
    kind = "ClusterRegistrationRequest",
    plural = "clusterregistrationrequests",
    singular = "clusterregistrationrequest",
    shortname = "clsrr",
    category = "clusternet",
    status = "ClusterRegistrationRequestStatus",
    derive = "PartialEq",
    derive = "Default",
    doc = "ClusterRegistrationRequest is the request a clusternet-agent files to register its child cluster with the parent.",
    printcolumn(
        name = "CLUSTER ID",
        type_ = "string",
        json_path = ".spec.clusterId",
        description = "The unique id for the cluster"
    ),
    printcolumn(
        name = "STATUS",
        type_ = "string",
        json_path = ".status.result",
        description = "The status of current cluster registration request"
    ),
    printcolumn(
        name = "AGE",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterRegistrationRequestSpec {
    /// ClusterID, a random (version 4) UUID, is the UID of the agent's Lease in the child cluster.
    #[schemars(regex(pattern = CLUSTER_ID_PATTERN))]
    pub cluster_id: String,

    /// ClusterType denotes the type of the child cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_type: Option<ClusterType>,

    /// ClusterName is the cluster name: lower case alphanumeric characters or '-', starting and ending
    /// with an alphanumeric character.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 30), regex(pattern = CLUSTER_NAME_PATTERN))]
    pub cluster_name: String,

    /// ClusterNamespace is the dedicated namespace the agent asks for in the parent cluster.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 63), regex(pattern = CLUSTER_NAMESPACE_PATTERN))]
    pub cluster_namespace: String,

    /// ClusterLabels are copied onto the ManagedCluster when it is created.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub cluster_labels: BTreeMap<String, String>,

    /// SyncMode decides how to sync resources from parent cluster to child cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-crd-default" = "Pull"))]
    pub sync_mode: Option<ClusterSyncMode>,
}

/// Observed state of a ClusterRegistrationRequest, written by the controller-manager.
///
/// When `result` is not `Approved`, `token`, `caCertificate`, `dedicatedNamespace` and
/// `managedClusterName` are cleared before the status is written.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterRegistrationRequestStatus {
    /// DedicatedNamespace is the namespace in the parent cluster reserved for the child cluster.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub dedicated_namespace: String,

    /// Token is the bearer token of the dedicated ServiceAccount (base64 on the wire).
    #[serde(default, rename = "token", skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::apis::schema::go_bytes")]
    pub token: Option<ByteString>,

    /// CACertificate is the PEM CA bundle of the parent apiserver (base64 on the wire).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::apis::schema::go_bytes")]
    pub ca_certificate: Option<ByteString>,

    /// Result tells whether the request has been approved. Absent means not processed yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<ApprovedResult>,

    /// ErrorMessage tells why the request was not approved.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub error_message: String,

    /// ManagedClusterName is the name of the ManagedCluster object created for the child cluster.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub managed_cluster_name: String,
}

// ---------------------------------------------------------------------------------------------
// ManagedCluster
// ---------------------------------------------------------------------------------------------

/// Desired state of a ManagedCluster, which lives in the child's dedicated namespace.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "clusters.clusternet.io",
    version = "v1beta1",
    kind = "ManagedCluster",
    plural = "managedclusters",
    singular = "managedcluster",
    namespaced,
    shortname = "mcls",
    category = "clusternet",
    status = "ManagedClusterStatus",
    derive = "PartialEq",
    derive = "Default",
    doc = "ManagedCluster is the parent cluster's record of a registered child cluster.",
    printcolumn(
        name = "CLUSTER ID",
        type_ = "string",
        json_path = ".spec.clusterId",
        description = "The unique id for the cluster"
    ),
    printcolumn(
        name = "CLUSTER TYPE",
        type_ = "string",
        json_path = ".spec.clusterType",
        description = "The type of the cluster",
        priority = 100
    ),
    printcolumn(
        name = "SYNC MODE",
        type_ = "string",
        json_path = ".spec.syncMode",
        description = "The cluster sync mode"
    ),
    printcolumn(
        name = "KUBERNETES",
        type_ = "string",
        json_path = ".status.k8sVersion"
    ),
    printcolumn(
        name = "STATUS",
        type_ = "string",
        json_path = ".status.conditions[?(@.type=='Ready')].status"
    ),
    printcolumn(
        name = "AGE",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    printcolumn(
        name = "AGENT VERSION",
        type_ = "string",
        json_path = ".status.agentVersion",
        priority = 100
    )
)]
#[serde(rename_all = "camelCase")]
// Upstream's spec-level transition rule: once the controller-manager has recorded which Base
// initialized the cluster, nobody may remove that record.
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "!has(oldSelf.clusterInitBaseName) || has(self.clusterInitBaseName)",
    "message": "clusterInitBaseName is required once set",
}]))]
pub struct ManagedClusterSpec {
    /// ClusterID, a random (version 4) UUID, is the UID of the agent's Lease in the child cluster.
    #[schemars(regex(pattern = CLUSTER_ID_PATTERN))]
    pub cluster_id: String,

    /// ClusterType denotes the type of the child cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_type: Option<ClusterType>,

    /// ClusterInitBaseName is the name of the Base used to initialize this cluster. Written only by
    /// the controller-manager; immutable once set.
    // Go marshals an unset value as `null` (no omitempty); the CRD is not nullable, so the apiserver
    // prunes it. Omitting it is therefore the same on the wire.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 512))]
    #[schemars(extend("x-kubernetes-validations" = [{
        "rule": "self == oldSelf",
        "message": "clusterInitBaseName is immutable",
    }]))]
    pub cluster_init_base_name: Option<String>,

    /// SyncMode decides how to sync resources from parent cluster to child cluster.
    pub sync_mode: ClusterSyncMode,

    /// Taints on the cluster; Subscriptions must tolerate them (`spec.clusterTolerations`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<Taint>,
}

/// Observed state of a ManagedCluster: written by the agent every heartbeat, `conditions` and
/// taints partly by the controller-manager.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ManagedClusterStatus {
    /// LastObservedTime is when the agent last collected the status.
    // Go writes `null` when zero, which the apiserver prunes; omitting it is the same on the wire.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_observed_time: Option<Time>,

    /// K8sVersion is the child apiserver's gitVersion.
    #[serde(
        default,
        rename = "k8sVersion",
        skip_serializing_if = "String::is_empty"
    )]
    pub k8s_version: String,

    /// AgentVersion is the build gitVersion of the agent.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub agent_version: String,

    /// Platform is the child apiserver's platform, e.g. linux/amd64.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub platform: String,

    /// APIServerURL is the child apiserver URL as seen by the agent.
    #[serde(
        default,
        rename = "apiserverURL",
        skip_serializing_if = "String::is_empty"
    )]
    pub apiserver_url: String,

    /// Healthz is the child's /healthz result (deprecated upstream; kept for compatibility).
    #[serde(default)]
    pub healthz: bool,

    /// Livez is the child's /livez result.
    #[serde(default)]
    pub livez: bool,

    /// Readyz is the child's /readyz result.
    #[serde(default)]
    pub readyz: bool,

    /// AppPusher is the agent's AppPusher feature gate: whether the parent may deploy in Push/Dual mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app_pusher: Option<bool>,

    /// UseSocket is the agent's SocketConnection feature gate: reach the child through the tunnel.
    #[serde(default, skip_serializing_if = "is_false")]
    pub use_socket: bool,

    /// KubeQPS is the agent's --kube-api-qps.
    #[serde(default, rename = "kubeQPS", skip_serializing_if = "is_zero_f32")]
    pub kube_qps: f32,

    /// KubeBurst is the agent's --kube-api-burst.
    #[serde(default, skip_serializing_if = "is_zero_i32")]
    pub kube_burst: i32,

    /// Allocatable is the sum of the nodes' allocatable resources (cpu, memory, nvidia.com/gpu).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub allocatable: BTreeMap<String, Quantity>,

    /// Capacity is the sum of the nodes' capacity.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub capacity: BTreeMap<String, Quantity>,

    /// ClusterCIDR is the pod CIDR of the cluster.
    #[serde(
        default,
        rename = "clusterCIDR",
        skip_serializing_if = "String::is_empty"
    )]
    pub cluster_cidr: String,

    /// ServiceCIDR is the service CIDR of the cluster.
    #[serde(
        default,
        rename = "serviceCIDR",
        skip_serializing_if = "String::is_empty"
    )]
    pub service_cidr: String,

    /// NodeStatistics summarizes node readiness.
    // Always written: a Go value struct, which omitempty does not omit.
    #[serde(default)]
    pub node_statistics: NodeStatistics,

    /// PodStatistics counts pods (only with --use-metrics-server).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_statistics: Option<PodStatistics>,

    /// ResourceUsage is the cluster's cpu/memory usage (only with --use-metrics-server).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_usage: Option<ResourceUsage>,

    /// Conditions of the cluster: types `Ready` and `ClusterInit`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,

    /// HeartbeatFrequencySeconds is the agent's report period.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heartbeat_frequency_seconds: Option<i64>,

    /// PredictorEnabled tells whether the agent serves a capacity predictor.
    #[serde(default, skip_serializing_if = "is_false")]
    pub predictor_enabled: bool,

    /// PredictorAddress is the predictor's URL.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub predictor_address: String,

    /// PredictorDirectAccess tells whether the scheduler can reach the predictor without the tunnel.
    #[serde(default)]
    pub predictor_direct_access: bool,

    /// ClusterProperties (beyond upstream) are the child's About API `ClusterProperty` objects
    /// (KEP-2149), name and value, as its agent last read them; the parent publishes them in
    /// the cluster's ClusterProfile.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub cluster_properties: Vec<ClusterPropertyValue>,
}

/// Node readiness counters of a ManagedClusterStatus.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeStatistics {
    /// ReadyNodes is the number of ready nodes.
    #[serde(default, skip_serializing_if = "is_zero_i32")]
    pub ready_nodes: i32,
    /// NotReadyNodes is the number of not-ready nodes.
    #[serde(default, skip_serializing_if = "is_zero_i32")]
    pub not_ready_nodes: i32,
    /// UnknownNodes is the number of nodes in unknown state.
    #[serde(default, skip_serializing_if = "is_zero_i32")]
    pub unknown_nodes: i32,
    /// LostNodes is the number of nodes whose state was lost.
    #[serde(default, skip_serializing_if = "is_zero_i32")]
    pub lost_nodes: i32,
}

/// Pod counters of a ManagedClusterStatus.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodStatistics {
    /// RunningPods is the number of running pods.
    #[serde(default, skip_serializing_if = "is_zero_i32")]
    pub running_pods: i32,
    /// TotalPods is the number of pods.
    #[serde(default, skip_serializing_if = "is_zero_i32")]
    pub total_pods: i32,
}

/// Resource usage of a ManagedClusterStatus.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceUsage {
    /// CpuUsage is the total cpu usage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_usage: Option<Quantity>,
    /// MemoryUsage is the total memory usage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_usage: Option<Quantity>,
}

// ---------------------------------------------------------------------------------------------
// Conditions
// ---------------------------------------------------------------------------------------------

/// Condition type: the agent reports regularly and the child is healthy.
pub const CONDITION_READY: &str = "Ready";
/// Condition type: the cluster-init workload has been deployed (gate `ClusterInit`).
pub const CONDITION_CLUSTER_INIT: &str = "ClusterInit";

/// `Ready=True` reason, set by the agent.
pub const REASON_MANAGED_CLUSTER_READY: &str = "ManagedClusterReady";
/// Message that goes with [`REASON_MANAGED_CLUSTER_READY`].
pub const MESSAGE_MANAGED_CLUSTER_READY: &str = "managed cluster is ready.";
/// `Ready=False` reason, set by the agent.
pub const REASON_MANAGED_CLUSTER_NOT_READY: &str = "ManagedClusterNotReady";
/// `Ready=False` reason (beyond upstream), set by the agent: the child's API server has not
/// answered for the agent's renew deadline; the agent keeps heartbeating and its tunnel up.
pub const REASON_CHILD_APISERVER_UNREACHABLE: &str = "ChildAPIServerUnreachable";
/// `Ready=Unknown` reason: the agent never reported (controller-manager).
pub const REASON_CLUSTER_STATUS_NEVER_UPDATED: &str = "ClusterStatusNeverUpdated";
/// `Ready=Unknown` reason: the agent stopped reporting (controller-manager).
pub const REASON_CLUSTER_STATUS_UNKNOWN: &str = "ClusterStatusUnknown";
/// `ClusterInit=True` reason: gate off or skip annotation.
pub const REASON_CLUSTER_INIT_DISABLED: &str = "ClusterInitDisabled";
/// `ClusterInit=True` reason: initialization finished.
pub const REASON_CLUSTER_INIT_DONE: &str = "ClusterInitDone";
/// `ClusterInit=False` reason (also the value of the initialization taint).
pub const REASON_CLUSTER_INIT_WAITING: &str = "ClusterInitWaiting";

/// One ClusterProperty of a child: its name and value.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct ClusterPropertyValue {
    pub name: String,
    pub value: String,
}

impl ManagedClusterStatus {
    /// The condition of the given type, if any.
    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        self.conditions.iter().find(|c| c.type_ == type_)
    }
}

/// Upstream's condition merge (pkg/utils/cluster.go): append new types; on a status, reason or
/// message change update them (transition time only when the status changed); other conditions
/// are kept as they are. Unlike upstream, an unchanged `Ready` keeps its transition time
/// (Kubernetes conventions: `lastTransitionTime` moves only when the status does; the heartbeat
/// is `status.lastObservedTime`), so "Ready since" can be read from it.
pub fn merge_conditions(previous: &[Condition], new: &[Condition]) -> Vec<Condition> {
    let mut out = previous.to_vec();
    for n in new {
        match out.iter_mut().find(|c| c.type_ == n.type_) {
            None => out.push(n.clone()),
            Some(c) => {
                if c.status != n.status || c.reason != n.reason || c.message != n.message {
                    if c.status != n.status {
                        c.last_transition_time = n.last_transition_time.clone();
                    }
                    c.status = n.status.clone();
                    c.reason = n.reason.clone();
                    c.message = n.message.clone();
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apis::test_support::{assert_round_trip, crd_schema};
    use kube::CustomResourceExt;
    use serde_json::json;

    const CRR_YAML: &str = r#"
apiVersion: clusters.clusternet.io/v1beta1
kind: ClusterRegistrationRequest
metadata:
  name: clusternet-dc91021d-2361-4f6d-a404-7c33b9e01118
  labels:
    clusters.clusternet.io/registered-by: clusternet-agent
    clusters.clusternet.io/cluster-id: dc91021d-2361-4f6d-a404-7c33b9e01118
    clusters.clusternet.io/cluster-name: clusternet-cluster-bh2kx
spec:
  clusterId: dc91021d-2361-4f6d-a404-7c33b9e01118
  clusterType: StandardCluster
  clusterName: clusternet-cluster-bh2kx
  syncMode: Pull
  clusterLabels:
    region: ap-shanghai
status:
  dedicatedNamespace: clusternet-v7wzf
  token: c2VjcmV0LXRva2Vu
  caCertificate: LS0tLS1CRUdJTi0tLS0t
  result: Approved
  managedClusterName: clusternet-cluster-bh2kx
"#;

    const MCLS_YAML: &str = r#"
apiVersion: clusters.clusternet.io/v1beta1
kind: ManagedCluster
metadata:
  name: clusternet-cluster-bh2kx
  namespace: clusternet-v7wzf
  labels:
    clusters.clusternet.io/cluster-id: dc91021d-2361-4f6d-a404-7c33b9e01118
    clusters.clusternet.io/cluster-name: clusternet-cluster-bh2kx
spec:
  clusterId: dc91021d-2361-4f6d-a404-7c33b9e01118
  clusterType: EdgeCluster
  syncMode: Dual
  taints:
    - key: clusters.clusternet.io/unschedulable
      value: ClusterStatusUnknown
      effect: NoSchedule
status:
  lastObservedTime: "2024-01-02T15:04:05Z"
  k8sVersion: v1.36.3
  agentVersion: v0.18.0
  platform: linux/amd64
  apiserverURL: https://10.0.0.1:6443
  healthz: true
  livez: true
  readyz: false
  appPusher: false
  useSocket: true
  kubeQPS: 5.5
  kubeBurst: 10
  allocatable: {cpu: "4", memory: 8Gi, nvidia.com/gpu: "1"}
  capacity: {cpu: "4", memory: 8Gi}
  clusterCIDR: 10.244.0.0/16
  serviceCIDR: 10.96.0.0/12
  nodeStatistics: {readyNodes: 2, lostNodes: 1}
  podStatistics: {runningPods: 3, totalPods: 4}
  resourceUsage: {cpuUsage: 500m, memoryUsage: 1Gi}
  conditions:
    - type: Ready
      status: "True"
      reason: ManagedClusterReady
      message: managed cluster is ready.
      lastTransitionTime: "2024-01-02T15:04:05Z"
  heartbeatFrequencySeconds: 180
  predictorEnabled: true
  predictorAddress: http://10.0.0.2:8080
  predictorDirectAccess: false
"#;

    #[test]
    fn crr_example_round_trips() {
        let crr: ClusterRegistrationRequest = assert_round_trip(CRR_YAML);
        assert_eq!(crr.spec.sync_mode, Some(ClusterSyncMode::Pull));
        assert_eq!(crr.spec.cluster_type, Some(ClusterType::StandardCluster));
        let status = crr.status.expect("example has a status");
        assert_eq!(status.result, Some(ApprovedResult::Approved));
        assert_eq!(status.token.map(|t| t.0), Some(b"secret-token".to_vec()));
    }

    #[test]
    fn managed_cluster_example_round_trips() {
        let mcls: ManagedCluster = assert_round_trip(MCLS_YAML);
        let status = mcls.status.expect("example has a status");
        assert_eq!(status.node_statistics.ready_nodes, 2);
        assert_eq!(status.app_pusher, Some(false));
        assert_eq!(
            status.condition(CONDITION_READY).map(|c| c.status.as_str()),
            Some("True")
        );
    }

    #[test]
    fn go_zero_values_follow_omitempty() {
        let status = serde_json::to_value(ManagedClusterStatus::default()).expect("serializes");
        // Go always writes these four bools and the nodeStatistics struct; everything else is omitempty.
        assert_eq!(
            status,
            json!({
                "healthz": false, "livez": false, "readyz": false,
                "nodeStatistics": {}, "predictorDirectAccess": false,
            })
        );
        let crr =
            serde_json::to_value(ClusterRegistrationRequestStatus::default()).expect("serializes");
        assert_eq!(crr, json!({}));
    }

    #[test]
    fn unknown_open_enum_values_survive() {
        let status: ClusterRegistrationRequestStatus =
            serde_json::from_value(json!({"result": "Illegal"})).expect("deserializes");
        assert_eq!(status.result, Some(ApprovedResult::Other("Illegal".into())));
    }

    #[test]
    fn crr_crd_matches_upstream_shape() {
        let crd = ClusterRegistrationRequest::crd();
        assert_eq!(crd.spec.scope, "Cluster");
        assert_eq!(crd.spec.names.short_names, Some(vec!["clsrr".to_owned()]));
        let schema = crd_schema::<ClusterRegistrationRequest>();
        let spec = &schema["properties"]["spec"];
        assert_eq!(spec["required"], json!(["clusterId"]));
        assert_eq!(spec["properties"]["syncMode"]["default"], json!("Pull"));
        assert_eq!(
            spec["properties"]["syncMode"]["enum"],
            json!(["Push", "Pull", "Dual"])
        );
        assert_eq!(spec["properties"]["clusterName"]["maxLength"], json!(30));
        assert_eq!(
            spec["properties"]["clusterId"]["pattern"],
            json!(CLUSTER_ID_PATTERN)
        );
        assert_eq!(
            schema["properties"]["status"]["properties"]["token"],
            json!({"description": "Token is the bearer token of the dedicated ServiceAccount (base64 on the wire).", "format": "byte", "type": "string"})
        );
    }

    #[test]
    fn managed_cluster_crd_matches_upstream_shape() {
        let crd = ManagedCluster::crd();
        assert_eq!(crd.spec.scope, "Namespaced");
        let columns: Vec<_> = crd.spec.versions[0]
            .additional_printer_columns
            .iter()
            .flatten()
            .map(|c| (c.name.as_str(), c.json_path.as_str(), c.priority))
            .collect();
        assert_eq!(
            columns,
            vec![
                ("CLUSTER ID", ".spec.clusterId", None),
                ("CLUSTER TYPE", ".spec.clusterType", Some(100)),
                ("SYNC MODE", ".spec.syncMode", None),
                ("KUBERNETES", ".status.k8sVersion", None),
                (
                    "STATUS",
                    ".status.conditions[?(@.type=='Ready')].status",
                    None
                ),
                ("AGE", ".metadata.creationTimestamp", None),
                ("AGENT VERSION", ".status.agentVersion", Some(100)),
            ]
        );
        let schema = crd_schema::<ManagedCluster>();
        let spec = &schema["properties"]["spec"];
        assert_eq!(spec["required"], json!(["clusterId", "syncMode"]));
        assert_eq!(
            spec["x-kubernetes-validations"][0]["message"],
            json!("clusterInitBaseName is required once set")
        );
        let base = &spec["properties"]["clusterInitBaseName"];
        assert_eq!(base["maxLength"], json!(512));
        assert_eq!(
            base["x-kubernetes-validations"][0]["rule"],
            json!("self == oldSelf")
        );
        assert!(base.get("nullable").is_none());
        let status = &schema["properties"]["status"]["properties"];
        assert!(
            status["healthz"].get("default").is_none(),
            "Go zero values must not become CRD defaults"
        );
        assert_eq!(status["kubeQPS"]["type"], json!("number"));
    }

    use k8s_openapi::jiff::Timestamp;

    fn cond(type_: &str, status: &str, reason: &str, secs: i64) -> Condition {
        Condition {
            type_: type_.into(),
            status: status.into(),
            reason: reason.into(),
            message: String::new(),
            last_transition_time: Time(
                Timestamp::from_second(secs).unwrap_or(Timestamp::UNIX_EPOCH),
            ),
            observed_generation: None,
        }
    }

    #[test]
    fn conditions_merge_as_upstream() {
        let prev = vec![
            cond("Ready", "True", "A", 10),
            cond("ClusterInit", "True", "Done", 5),
        ];
        // same Ready: keeps its transition time (only a change moves it); ClusterInit untouched
        let merged = merge_conditions(&prev, &[cond("Ready", "True", "A", 20)]);
        assert_eq!(merged[0].last_transition_time, prev[0].last_transition_time);
        assert_eq!(merged[1], prev[1]);
        // reason change only: transition time kept
        let merged = merge_conditions(&prev, &[cond("Ready", "True", "B", 30)]);
        assert_eq!(merged[0].reason, "B");
        assert_eq!(merged[0].last_transition_time, prev[0].last_transition_time);
        // status change: transition time moves
        let merged = merge_conditions(&prev, &[cond("Ready", "False", "B", 40)]);
        assert_eq!(
            merged[0].last_transition_time,
            cond("x", "", "", 40).last_transition_time
        );
        // new type appended
        assert_eq!(
            merge_conditions(&prev, &[cond("Other", "True", "C", 1)]).len(),
            3
        );
    }
}
