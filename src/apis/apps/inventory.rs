//! `FeedInventory`: per Subscription (same namespace and name), the workload facts the scheduler
//! needs to divide replicas: desired replicas, per-replica requirements and where the replica count
//! lives in the object.
//!
//! Upstream: `pkg/apis/apps/v1alpha1/feedinventory.go`, spec/apis.md §2.8, deployer.md §12.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Affinity, ResourceRequirements, Toleration};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::Feed;

/// Desired state of a FeedInventory.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "apps.clusternet.io",
    version = "v1alpha1",
    kind = "FeedInventory",
    plural = "feedinventories",
    singular = "feedinventory",
    namespaced,
    shortname = "finv",
    category = "clusternet",
    derive = "PartialEq",
    derive = "Default",
    doc = "FeedInventory describes the replica requirements of a Subscription's feeds."
)]
#[serde(rename_all = "camelCase")]
pub struct FeedInventorySpec {
    /// Feeds are the Subscription's feeds with their replica requirements.
    pub feeds: Vec<FeedOrder>,
}

/// A feed plus what one of its replicas needs.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FeedOrder {
    /// The feed (inlined).
    #[serde(flatten)]
    pub feed: Feed,

    /// DesiredReplicas is the workload's replica count; unset for non-workload feeds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub desired_replicas: Option<i32>,

    /// ReplicaRequirements are the scheduling constraints and resources of one replica.
    // Go always writes this struct; an empty one carries no information, so it is omitted here.
    #[serde(default, skip_serializing_if = "ReplicaRequirements::is_empty")]
    pub replica_requirements: ReplicaRequirements,

    /// ReplicaJsonPath is the JSON pointer of the replica count in the object, e.g. /spec/replicas.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub replica_json_path: String,
}

/// Scheduling constraints and resources of one replica.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaRequirements {
    /// NodeSelector of the pod template.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,

    /// Tolerations of the pod template.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,

    /// Affinity of the pod template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,

    /// Resources are the summed container requests/limits of one replica.
    #[serde(default, skip_serializing_if = "resources_are_empty")]
    pub resources: ResourceRequirements,
}

impl ReplicaRequirements {
    /// Nothing required.
    pub fn is_empty(&self) -> bool {
        self.node_selector.is_empty()
            && self.tolerations.is_empty()
            && self.affinity.is_none()
            && resources_are_empty(&self.resources)
    }
}

fn resources_are_empty(r: &ResourceRequirements) -> bool {
    r.claims.as_ref().is_none_or(Vec::is_empty)
        && r.limits.as_ref().is_none_or(BTreeMap::is_empty)
        && r.requests.as_ref().is_none_or(BTreeMap::is_empty)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apis::test_support::{assert_round_trip, crd_schema};
    use kube::CustomResourceExt;
    use serde_json::json;

    /// cli.md `dynamic-dividing-scheduling`: 6 replicas, 500m CPU / 128Mi each.
    const INVENTORY_YAML: &str = r#"
apiVersion: apps.clusternet.io/v1alpha1
kind: FeedInventory
metadata:
  name: dynamic-dividing-scheduling-demo
  namespace: default
  labels:
    apps.clusternet.io/subs.name: dynamic-dividing-scheduling-demo
    apps.clusternet.io/subs.namespace: default
    apps.clusternet.io/subs.uid: 9f9e4d5c-9c3a-4a5e-8d44-2b0f1c7e6a11
spec:
  feeds:
    - {apiVersion: v1, kind: Namespace, name: qux}
    - apiVersion: apps/v1
      kind: Deployment
      namespace: qux
      name: my-nginx
      desiredReplicas: 6
      replicaJsonPath: /spec/replicas
      replicaRequirements:
        nodeSelector: {disktype: ssd}
        tolerations: [{key: dedicated, operator: Equal, value: web, effect: NoSchedule}]
        affinity:
          nodeAffinity:
            requiredDuringSchedulingIgnoredDuringExecution:
              nodeSelectorTerms: [{matchExpressions: [{key: zone, operator: In, values: [a]}]}]
        resources:
          requests: {cpu: 500m, memory: 128Mi}
"#;

    #[test]
    fn example_round_trips() {
        let inv: FeedInventory = assert_round_trip(INVENTORY_YAML);
        assert_eq!(inv.spec.feeds[1].desired_replicas, Some(6));
        assert!(inv.spec.feeds[0].replica_requirements.is_empty());
        assert!(!inv.spec.feeds[1].replica_requirements.is_empty());
    }

    #[test]
    fn crd_shape() {
        let crd = FeedInventory::crd();
        assert_eq!(crd.spec.names.short_names, Some(vec!["finv".to_owned()]));
        assert!(crd.spec.versions[0].additional_printer_columns.is_none());
        assert!(crd.spec.versions[0].subresources.is_none());
        let schema = crd_schema::<FeedInventory>();
        let item = &schema["properties"]["spec"]["properties"]["feeds"]["items"];
        assert_eq!(item["required"], json!(["apiVersion", "kind", "name"]));
        assert_eq!(
            item["properties"]["desiredReplicas"]["format"],
            json!("int32")
        );
    }
}
