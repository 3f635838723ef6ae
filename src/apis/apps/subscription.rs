//! `Subscription`: the user's distribution policy (which clusters, which strategy, which feeds),
//! and its status written by the scheduler (binding) and the controller-manager (aggregation).
//!
//! Upstream: `pkg/apis/apps/v1alpha1/subscription.go`, spec/apis.md §2.1. Field declaration order is
//! Go's; [`crate::apis::hash`] hashes the spec in that order.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{PreferredSchedulingTerm, Toleration, TopologySpreadConstraint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::Feed;
use crate::apis::clusters::{CLUSTER_ID_PATTERN, CLUSTER_NAME_PATTERN};
use crate::apis::omitempty::{is_false, is_zero_i32, is_zero_i64, is_zero_u64};
use crate::apis::string_enum::closed_string_enum;

closed_string_enum! {
    /// How replicas are placed (`spec.schedulingStrategy`).
    #[derive(Default)]
    pub enum SchedulingStrategy {
        /// Every matched cluster gets the full set of feeds (the CRD default).
        #[default]
        Replication = "Replication",
        /// Workload replicas are divided among the matched clusters.
        Dividing = "Dividing",
    }
}

closed_string_enum! {
    /// How `Dividing` splits replicas (`spec.dividingScheduling.type`).
    #[derive(Default)]
    pub enum ReplicaDividingType {
        /// By the subscribers' static weights (the CRD default).
        #[default]
        Static = "Static",
        /// By the clusters' predicted capacity.
        Dynamic = "Dynamic",
    }
}

closed_string_enum! {
    /// Strategy of `Dynamic` dividing (`spec.dividingScheduling.dynamicDividing.strategy`).
    #[derive(Default)]
    pub enum DynamicDividingStrategy {
        /// Spread replicas as much as possible (the CRD default; the only one implemented).
        #[default]
        Spread = "Spread",
        /// Pack replicas into as few clusters as possible (accepted, not implemented upstream).
        Binpack = "Binpack",
    }
}

closed_string_enum! {
    /// `spec.preemptionPolicy` (accepted, unused upstream).
    ///
    /// Upstream's Go constant for "never" is the string `Never`, which its own CRD rejects; the
    /// CRD's value `PreemptNever` is what can actually be stored, so that is what this enum uses.
    #[derive(Default)]
    pub enum PreemptionPolicy {
        /// May preempt lower-priority subscriptions (the CRD default).
        #[default]
        PreemptLowerPriority = "PreemptLowerPriority",
        /// Never preempts.
        PreemptNever = "PreemptNever",
    }
}

/// SubscriptionSpec defines the desired state of Subscription.
//
// Optional fields with a CRD default (`schedulerName`, `schedulingStrategy`, `preemptionPolicy`) are
// kept exactly as read: the apiserver fills them in, and the spec hash must see what Go sees. Use
// the `effective_*` accessors for the value that applies.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "apps.clusternet.io",
    version = "v1alpha1",
    kind = "Subscription",
    plural = "subscriptions",
    singular = "subscription",
    namespaced,
    shortname = "sub",
    shortname = "subs",
    category = "clusternet",
    status = "SubscriptionStatus",
    derive = "PartialEq",
    derive = "Default",
    doc = "Subscription represents the policy that install a group of resources to one or more clusters.",
    printcolumn(
        name = "AGE",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct SubscriptionSpec {
    /// If specified, the Subscription will be handled by the specified scheduler profile.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(extend("x-crd-default" = "default"))]
    pub scheduler_name: String,

    /// SchedulingBySubGroup makes each subscriber a group from which `subGroupStrategy.minClusters`
    /// clusters are picked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduling_by_sub_group: Option<bool>,

    /// If specified, the Subscription will be handled with the specified SchedulingStrategy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-crd-default" = "Replication"))]
    pub scheduling_strategy: Option<SchedulingStrategy>,

    /// Dividing scheduling config params. Present only if SchedulingStrategy = Dividing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dividing_scheduling: Option<DividingScheduling>,

    /// Priority in the scheduling queue (higher first; unset means 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,

    /// PreemptionPolicy of this Subscription (accepted, unused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-crd-default" = "PreemptLowerPriority"))]
    pub preemption_policy: Option<PreemptionPolicy>,

    /// Subscribers select the clusters to distribute to.
    pub subscribers: Vec<Subscriber>,

    /// ClusterTolerations tolerates matching taints of ManagedClusters.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cluster_tolerations: Vec<Toleration>,

    /// Feeds are the resources to distribute.
    pub feeds: Vec<Feed>,

    /// RevisionHistoryLimit (beyond upstream) is how many revisions of what this Subscription
    /// renders are kept as ControllerRevisions (default 10; the newest is always kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub revision_history_limit: Option<i32>,

    /// RolloutStrategyName (beyond upstream) names a RolloutStrategy in this namespace: a change
    /// then moves through the clusters stage by stage, gated on their health, and rolls back on
    /// failure (docs/spec/deployer.md §16). Unset: every change reaches every cluster at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout_strategy_name: Option<String>,
}

impl SubscriptionSpec {
    /// The scheduler profile name, `default` when unset.
    pub fn effective_scheduler_name(&self) -> &str {
        if self.scheduler_name.is_empty() {
            "default"
        } else {
            &self.scheduler_name
        }
    }

    /// The scheduling strategy, `Replication` when unset.
    pub fn effective_scheduling_strategy(&self) -> SchedulingStrategy {
        self.scheduling_strategy.unwrap_or_default()
    }

    /// Whether subgroup scheduling is on (unset means off).
    pub fn effective_scheduling_by_sub_group(&self) -> bool {
        self.scheduling_by_sub_group.unwrap_or(false)
    }

    /// Applies the CRD defaults the apiserver would apply on create, so that an in-memory spec
    /// hashes like the stored one.
    pub fn apply_crd_defaults(&mut self) {
        if self.scheduler_name.is_empty() {
            "default".clone_into(&mut self.scheduler_name);
        }
        self.scheduling_strategy.get_or_insert_default();
        self.preemption_policy.get_or_insert_default();
    }
}

/// Selects clusters by label, with an optional static weight and subgroup size.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Subscriber {
    /// ClusterAffinity is a label query over managed clusters by labels.
    pub cluster_affinity: LabelSelector,

    /// Static weight of subscriber when dividing replicas. Present only for static divided scheduling.
    #[serde(default, skip_serializing_if = "is_zero_i32")]
    #[schemars(range(min = 0))]
    pub weight: i32,

    /// SubGroupStrategy says how many clusters to pick from this subscriber's group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sub_group_strategy: Option<SubGroupStrategy>,
}

/// Subgroup parameters of a Subscriber.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SubGroupStrategy {
    /// MinClusters is the number of clusters to pick from this group (0 when omitted).
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub min_clusters: i32,
}

/// How to divide replicas among the target clusters.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
// `type` is required and defaulted, like upstream (the apiserver defaults before it validates). serde's
// default keeps Rust lenient, which would make schemars treat it as optional; hence the explicit list.
#[schemars(extend("required" = ["type"]))]
pub struct DividingScheduling {
    /// Type of dividing replica scheduling.
    #[serde(default, rename = "type")]
    #[schemars(extend("x-crd-default" = "Static"))]
    pub type_: ReplicaDividingType,

    /// DynamicDividing describes how to divide replicas dynamically. Required when type is Dynamic.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dynamic_dividing: Option<DynamicDividing>,
}

/// Parameters of `Dynamic` dividing.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
// Required and defaulted like `DividingScheduling.type`.
#[schemars(extend("required" = ["strategy"]))]
pub struct DynamicDividing {
    /// Strategy of dynamic dividing.
    #[serde(default)]
    #[schemars(extend("x-crd-default" = "Spread"))]
    pub strategy: DynamicDividingStrategy,

    /// TopologySpreadConstraints describes how replicas ought to spread across topology domains
    /// (accepted, unused).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub topology_spread_constraints: Vec<TopologySpreadConstraint>,

    /// PreferredClusters describes the assigning preference (accepted, unused).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub preferred_clusters: Vec<PreferredSchedulingTerm>,

    /// MinClusters is the lower bound of target clusters (accepted, unused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_clusters: Option<i32>,

    /// MaxClusters is the upper bound of target clusters (accepted, unused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_clusters: Option<i32>,
}

/// Observed state of a Subscription.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SubscriptionStatus {
    /// BindingClusters are the `<namespace>/<name>` of the selected ManagedClusters, sorted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub binding_clusters: Vec<String>,

    /// Replicas holds, per feed key, the desired replicas of each binding cluster (same index as
    /// bindingClusters). Dividing only; non-workload feeds map to an empty list.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub replicas: BTreeMap<String, Vec<i32>>,

    /// SpecHash is the hash of the spec at the time of the last binding.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    #[schemars(schema_with = "crate::apis::schema::go_uint64")]
    pub spec_hash: u64,

    /// DesiredReleases is the number of binding clusters.
    #[serde(default, skip_serializing_if = "is_zero_i64")]
    #[schemars(schema_with = "crate::apis::schema::go_int")]
    pub desired_releases: i64,

    /// CompletedReleases is defined upstream but never written.
    #[serde(default, skip_serializing_if = "is_zero_i64")]
    #[schemars(schema_with = "crate::apis::schema::go_int")]
    pub completed_releases: i64,

    /// AggregatedStatuses has one entry per feed, in spec.feeds order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub aggregated_statuses: Vec<AggregatedStatus>,

    /// Conditions (beyond upstream), a map list keyed by type (each controller owns its own):
    /// `FeedsResolved` says whether every feed exists and can be deployed by this build, and if
    /// not which one and why; `Ready` whether every bound cluster runs what it deploys, healthy,
    /// with kstatus's `Reconciling` (still changing) and `Stalled` (failed, needs a hand) beside
    /// it while they are true; `RolloutComplete` where a staged rollout is.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,

    /// ObservedGeneration (beyond upstream) is the generation `Ready`, `Reconciling` and
    /// `Stalled` speak for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// LastDecision (beyond upstream): why the scheduler bound it where it is, as it saw the
    /// fleet when it last changed `bindingClusters` or `replicas` (written with that status
    /// write, never on its own). `kubectl clusternet placement subscription NAME` shows it next
    /// to a fresh what-if.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_decision: Option<Box<SchedulingDecision>>,

    /// Rollout (beyond upstream) is where the staged rollout of the newest revision is, with a
    /// RolloutStrategy: the revision, the stable revision, each stage's clusters and gates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<Box<super::RolloutStatus>>,
}

/// The scheduler's record of one decision, bounded (at most 20 selected clusters listed, 10
/// groups of dropped clusters naming 10 each, reasons of 512 bytes), so that it stays small in
/// etcd and in every cache whatever the size of the fleet.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SchedulingDecision {
    /// When the decision was made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided_at: Option<Time>,

    /// `Replication` or `Dividing`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub strategy: String,

    /// The bound clusters, in bindingClusters order, with their score and, for Dynamic
    /// dividing, the replicas the predictor said each could take.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub selected: Vec<SelectedCluster>,

    /// The clusters left out, grouped by why (the step and its reason), most clusters first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dropped: Vec<DroppedClusters>,

    /// Clusters the bounds left out of this record altogether (selected beyond the first 20,
    /// dropped for reasons beyond the first 10).
    #[serde(default, skip_serializing_if = "is_zero_i32")]
    pub omitted: i32,

    /// Why nothing could be bound (the FailedScheduling message), when that was the decision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl SchedulingDecision {
    /// Selected clusters listed one by one.
    pub const MAX_SELECTED: usize = 20;
    /// Groups of dropped clusters (distinct reasons).
    pub const MAX_GROUPS: usize = 10;
    /// Clusters named per group (the count says how many there are).
    pub const MAX_GROUP_CLUSTERS: usize = 10;
    /// Longest reason or error text kept, in bytes.
    pub const MAX_REASON: usize = 512;
}

/// One bound cluster in a scheduling decision.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SelectedCluster {
    /// `<namespace>/<name>` of the ManagedCluster.
    pub cluster: String,
    /// Its total score, when scored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub score: Option<i64>,
    /// Dynamic dividing: the replicas the predictor said it could take, per feed key.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub predicted: BTreeMap<String, i32>,
}

/// Clusters a scheduling decision left out for the same reason.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DroppedClusters {
    /// The step and its reason, as the placement what-if words it (`dropped by
    /// TaintToleration: ...`).
    pub reason: String,
    /// How many clusters were left out for it.
    pub count: i32,
    /// The first of them, `<namespace>/<name>`, sorted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clusters: Vec<String>,
}

/// Condition type on a Subscription: every feed was found and is of a kind this build deploys.
pub const CONDITION_FEEDS_RESOLVED: &str = "FeedsResolved";

/// Condition type (beyond upstream, with a RolloutStrategy): `True` once the newest revision is
/// rolled out everywhere; `False` while it rolls out (reason `Progressing`, `WaitingForApproval`,
/// `PausedByUser`) or after a failed stage (`RolledBack`, `Paused`), with the rollout's message.
pub const CONDITION_ROLLOUT_COMPLETE: &str = "RolloutComplete";

/// Condition type (beyond upstream, the kstatus / `kubectl wait` one): `True` when every bound
/// cluster runs what the Subscription deploys (its current revision where a rollout pins one),
/// deployed, every object healthy; `False` with why otherwise.
pub const CONDITION_READY: &str = crate::kube_ext::condition::READY;

/// Condition type, kstatus's: present (`True`) only while the Subscription is still changing
/// towards Ready (scheduling, rendering, deploying, a rollout under way).
pub const CONDITION_RECONCILING: &str = crate::kube_ext::condition::RECONCILING;

/// Condition type, kstatus's: present (`True`) only while it cannot get Ready without a hand (a
/// feed missing, a cluster whose objects failed, a rollout rolled back or paused on failure).
pub const CONDITION_STALLED: &str = crate::kube_ext::condition::STALLED;

/// Aggregated status of one feed across the binding clusters.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AggregatedStatus {
    /// The feed (inlined).
    #[serde(flatten)]
    pub feed: Feed,

    /// FeedStatusSummary aggregates the feed statuses of every child cluster. Always present.
    #[serde(default)]
    pub feed_status_summary: FeedStatus,

    /// FeedStatusDetails are the per-cluster statuses, in bindingClusters order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub feed_status_details: Vec<FeedStatusPerCluster>,
}

/// A feed's status in one child cluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FeedStatusPerCluster {
    /// ClusterID of the child cluster.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(regex(pattern = CLUSTER_ID_PATTERN))]
    pub cluster_id: String,

    /// ClusterName of the child cluster.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 30), regex(pattern = CLUSTER_NAME_PATTERN))]
    pub cluster_name: String,

    /// The feed status (inlined).
    #[serde(flatten)]
    pub feed_status: FeedStatus,
}

/// Brief status of a feed.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FeedStatus {
    /// Available tells whether the feed status was synced to the corresponding Description.
    #[serde(default, skip_serializing_if = "is_false")]
    pub available: bool,

    /// ReplicaStatus of a workload feed (Deployment, StatefulSet, Job...). Always present.
    #[serde(default)]
    pub replica_status: ReplicaStatus,
}

/// Replica counters of a workload feed in a child cluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaStatus {
    /// The generation observed by the workload controller.
    #[serde(default, skip_serializing_if = "is_zero_i64")]
    pub observed_generation: i64,
    /// Total number of non-terminated pods targeted by this workload.
    #[serde(default, skip_serializing_if = "is_zero_i32")]
    pub replicas: i32,
    /// Number of pods with the desired template spec.
    #[serde(default, skip_serializing_if = "is_zero_i32")]
    pub updated_replicas: i32,
    /// Number of pods created from the current revision.
    #[serde(default, skip_serializing_if = "is_zero_i32")]
    pub current_replicas: i32,
    /// Number of pods with a Ready condition.
    #[serde(default, skip_serializing_if = "is_zero_i32")]
    pub ready_replicas: i32,
    /// Number of available pods.
    #[serde(default, skip_serializing_if = "is_zero_i32")]
    pub available_replicas: i32,
    /// Number of unavailable pods.
    #[serde(default, skip_serializing_if = "is_zero_i32")]
    pub unavailable_replicas: i32,
    /// Number of pending and running pods (Jobs).
    #[serde(default, skip_serializing_if = "is_zero_i32")]
    pub active: i32,
    /// Number of succeeded pods (Jobs).
    #[serde(default, skip_serializing_if = "is_zero_i32")]
    pub succeeded: i32,
    /// Number of failed pods (Jobs).
    #[serde(default, skip_serializing_if = "is_zero_i32")]
    pub failed: i32,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apis::test_support::{assert_round_trip, crd_schema};
    use kube::CustomResourceExt;
    use serde_json::json;

    /// spec/apis.md §2.1 example.
    const WEB_YAML: &str = r#"
apiVersion: apps.clusternet.io/v1alpha1
kind: Subscription
metadata: {name: web, namespace: default}
spec:
  schedulingStrategy: Dividing
  dividingScheduling: {type: Static}
  subscribers:
    - clusterAffinity: {matchLabels: {clusters.clusternet.io/cluster-name: east}}
      weight: 1
    - clusterAffinity: {matchLabels: {clusters.clusternet.io/cluster-name: west}}
      weight: 2
  feeds:
    - {apiVersion: v1, kind: Namespace, name: web}
    - {apiVersion: apps/v1, kind: Deployment, namespace: web, name: nginx}
status:
  bindingClusters: [clusternet-abcde/east, clusternet-fghij/west]
  replicas:
    v1/Namespace/web: []
    apps/v1/Deployment/web/nginx: [2, 4]
  specHash: 1234567890
  desiredReleases: 2
"#;

    /// cli.md `scheduling-group` (Replication variant).
    const SUBGROUP_YAML: &str = r#"
apiVersion: apps.clusternet.io/v1alpha1
kind: Subscription
metadata: {name: replication-scheduling-demo, namespace: default}
spec:
  schedulingBySubGroup: true
  subscribers:
    - clusterAffinity: {matchLabels: {region: ap-shanghai}}
      subGroupStrategy: {minClusters: 2}
    - clusterAffinity: {matchLabels: {region: ap-beijing}}
      subGroupStrategy: {minClusters: 1}
  schedulingStrategy: Replication
  feeds:
    - {apiVersion: v1, kind: Namespace, name: qux}
"#;

    /// cli.md `dynamic-dividing-scheduling`.
    const DYNAMIC_YAML: &str = r#"
apiVersion: apps.clusternet.io/v1alpha1
kind: Subscription
metadata: {name: dynamic-dividing-scheduling-demo, namespace: default}
spec:
  subscribers:
    - clusterAffinity:
        matchExpressions:
          - {key: clusters.clusternet.io/cluster-id, operator: Exists}
  schedulingStrategy: Dividing
  dividingScheduling:
    type: Dynamic
    dynamicDividing:
      strategy: Spread
      minClusters: 1
      maxClusters: 3
  clusterTolerations:
    - {key: clusters.clusternet.io/unschedulable, operator: Exists, effect: NoSchedule}
  feeds:
    - {apiVersion: v1, kind: Namespace, name: qux}
    - {apiVersion: v1, kind: Service, namespace: qux, name: my-nginx-svc}
    - {apiVersion: apps/v1, kind: Deployment, namespace: qux, name: my-nginx}
"#;

    /// cli.md `replication-scheduling` (default strategy, one cluster by id, Helm feed).
    const REPLICATION_YAML: &str = r#"
apiVersion: apps.clusternet.io/v1alpha1
kind: Subscription
metadata: {name: app-demo, namespace: default}
spec:
  subscribers:
    - clusterAffinity:
        matchLabels: {clusters.clusternet.io/cluster-id: dc91021d-2361-4f6d-a404-7c33b9e01118}
  feeds:
    - {apiVersion: apps.clusternet.io/v1alpha1, kind: HelmChart, namespace: default, name: mysql}
    - {apiVersion: v1, kind: Namespace, name: foo}
    - {apiVersion: apps/v1, kind: Service, namespace: foo, name: my-nginx-svc}
    - {apiVersion: apps/v1, kind: Deployment, namespace: foo, name: my-nginx}
status:
  aggregatedStatuses:
    - kind: Deployment
      apiVersion: apps/v1
      namespace: foo
      name: my-nginx
      feedStatusSummary:
        available: true
        replicaStatus: {observedGeneration: 1, replicas: 3, readyReplicas: 3}
      feedStatusDetails:
        - clusterId: dc91021d-2361-4f6d-a404-7c33b9e01118
          clusterName: child1
          available: true
          replicaStatus: {replicas: 3, readyReplicas: 3}
"#;

    #[test]
    fn examples_round_trip() {
        let web: Subscription = assert_round_trip(WEB_YAML);
        assert_eq!(
            web.spec.effective_scheduling_strategy(),
            SchedulingStrategy::Dividing
        );
        let status = web.status.expect("example has a status");
        assert_eq!(
            status.replicas.get("apps/v1/Deployment/web/nginx"),
            Some(&vec![2, 4])
        );
        assert_eq!(status.replicas.get("v1/Namespace/web"), Some(&vec![]));
        assert_eq!(status.spec_hash, 1_234_567_890);

        let group: Subscription = assert_round_trip(SUBGROUP_YAML);
        assert!(group.spec.effective_scheduling_by_sub_group());
        assert_eq!(
            group.spec.subscribers[0].sub_group_strategy,
            Some(SubGroupStrategy { min_clusters: 2 })
        );

        let dynamic: Subscription = assert_round_trip(DYNAMIC_YAML);
        let dividing = dynamic.spec.dividing_scheduling.expect("dividing");
        assert_eq!(dividing.type_, ReplicaDividingType::Dynamic);
        assert_eq!(
            dividing.dynamic_dividing.map(|d| d.strategy),
            Some(DynamicDividingStrategy::Spread)
        );

        let replication: Subscription = assert_round_trip(REPLICATION_YAML);
        assert_eq!(replication.spec.effective_scheduler_name(), "default");
        assert_eq!(
            replication.spec.effective_scheduling_strategy(),
            SchedulingStrategy::Replication
        );
        let agg = &replication.status.expect("status").aggregated_statuses[0];
        assert_eq!(agg.feed.key(), "apps/v1/Deployment/foo/my-nginx");
        assert!(agg.feed_status_details[0].feed_status.available);
    }

    #[test]
    fn enum_strings_are_upstreams() {
        assert_eq!(SchedulingStrategy::VALUES, &["Replication", "Dividing"]);
        assert_eq!(ReplicaDividingType::VALUES, &["Static", "Dynamic"]);
        assert_eq!(DynamicDividingStrategy::VALUES, &["Spread", "Binpack"]);
        assert_eq!(
            PreemptionPolicy::VALUES,
            &["PreemptLowerPriority", "PreemptNever"]
        );
    }

    #[test]
    fn always_serialized_status_structs() {
        let agg = AggregatedStatus {
            feed: Feed::new("v1", "Namespace", "", "x"),
            ..Default::default()
        };
        assert_eq!(
            serde_json::to_value(&agg).expect("serializes"),
            json!({"kind": "Namespace", "apiVersion": "v1", "name": "x", "feedStatusSummary": {"replicaStatus": {}}})
        );
    }

    #[test]
    fn crd_defaults_and_enums() {
        let crd = Subscription::crd();
        assert_eq!(
            crd.spec.names.short_names,
            Some(vec!["sub".to_owned(), "subs".to_owned()])
        );
        assert_eq!(
            crd.spec.names.categories,
            Some(vec!["clusternet".to_owned()])
        );
        let schema = crd_schema::<Subscription>();
        assert_eq!(schema["required"], json!(["spec"]));
        let spec = &schema["properties"]["spec"];
        assert_eq!(spec["required"], json!(["feeds", "subscribers"]));
        let p = &spec["properties"];
        assert_eq!(p["schedulerName"]["default"], json!("default"));
        assert_eq!(p["schedulingStrategy"]["default"], json!("Replication"));
        assert_eq!(
            p["schedulingStrategy"]["enum"],
            json!(["Replication", "Dividing"])
        );
        assert_eq!(
            p["preemptionPolicy"]["default"],
            json!("PreemptLowerPriority")
        );
        assert_eq!(
            p["preemptionPolicy"]["enum"],
            json!(["PreemptLowerPriority", "PreemptNever"])
        );
        let dividing = &p["dividingScheduling"];
        assert_eq!(dividing["required"], json!(["type"]));
        assert_eq!(dividing["properties"]["type"]["default"], json!("Static"));
        let dynamic = &dividing["properties"]["dynamicDividing"];
        assert_eq!(dynamic["required"], json!(["strategy"]));
        assert_eq!(
            dynamic["properties"]["strategy"]["default"],
            json!("Spread")
        );
        let subscriber = &p["subscribers"]["items"];
        assert_eq!(subscriber["required"], json!(["clusterAffinity"]));
        assert_eq!(subscriber["properties"]["weight"]["minimum"], json!(0.0));
        let feed = &p["feeds"]["items"];
        assert_eq!(feed["required"], json!(["apiVersion", "kind", "name"]));
        let status = &schema["properties"]["status"]["properties"];
        assert_eq!(
            status["specHash"],
            json!({"description": "SpecHash is the hash of the spec at the time of the last binding.", "type": "integer", "format": "int64"})
        );
        assert_eq!(status["desiredReleases"]["type"], json!("integer"));
        assert!(status["desiredReleases"].get("format").is_none());
        let agg = &status["aggregatedStatuses"]["items"];
        assert_eq!(agg["required"], json!(["apiVersion", "kind", "name"]));
        assert!(
            agg["properties"]["feedStatusSummary"]
                .get("default")
                .is_none()
        );
    }
}
