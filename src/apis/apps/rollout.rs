//! `RolloutStrategy` (beyond upstream, docs/spec/deployer.md §16): how a change to what a
//! Subscription renders moves through its clusters, stage by stage, and what a Subscription's
//! `status.rollout` says of it. A Subscription refers to one by `spec.rolloutStrategyName` (same
//! namespace); without one, every change reaches every cluster at once, as upstream.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::apis::string_enum::closed_string_enum;

/// Desired state of a RolloutStrategy.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "apps.clusternet.io",
    version = "v1alpha1",
    kind = "RolloutStrategy",
    plural = "rolloutstrategies",
    singular = "rolloutstrategy",
    namespaced,
    category = "clusternet",
    derive = "PartialEq",
    derive = "Default",
    status = "crate::apis::apps::ReadinessStatus",
    doc = "RolloutStrategy says how a change to a Subscription moves through its clusters.",
    printcolumn = r#"{"name":"STAGES","type":"string","jsonPath":".spec.stages[*].name"}"#,
    printcolumn = r#"{"name":"ON-FAILURE","type":"string","jsonPath":".spec.onFailure"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct RolloutStrategySpec {
    /// Stages, in order: a change reaches the clusters of a stage only after every earlier stage
    /// passed its gates. Bound clusters no stage selects form a last stage named `remaining`.
    #[schemars(length(min = 1))]
    pub stages: Vec<RolloutStage>,

    /// OnFailure is what happens when a stage fails: `Rollback` (default) puts the clusters
    /// already changed back on the last revision that completed everywhere; `Pause` holds every
    /// cluster where it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_failure: Option<OnFailure>,
}

/// One stage of a rollout.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutStage {
    /// Name of the stage, shown in `status.rollout` and by `kubectl clusternet rollout status`.
    pub name: String,

    /// ClusterSelector takes the bound clusters whose ManagedCluster labels match (and that no
    /// earlier stage took).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_selector: Option<LabelSelector>,

    /// Clusters takes the first N (`2`) or N percent (`25%`, rounded up) of the bound clusters
    /// that no earlier stage took, in `status.bindingClusters` order; with a clusterSelector, of
    /// those it selects. Neither: every cluster left.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clusters: Option<IntOrString>,

    /// MaxConcurrency is how many clusters of the stage change at once (a number or a
    /// percentage of the stage, rounded up; default all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_concurrency: Option<IntOrString>,

    /// MinSuccessTime is how long every cluster of the stage must stay healthy, without
    /// interruption, before the next stage starts (a Go duration, `30s`, `5m`; default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_success_time: Option<String>,

    /// ProgressDeadline is how long the stage may take to become healthy before it fails (a Go
    /// duration; default `10m`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress_deadline: Option<String>,

    /// MaxFailures is how many clusters of the stage may fail (Failure to deploy, or an object
    /// kstatus calls Failed) before the stage fails (default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub max_failures: Option<i32>,

    /// RequireApproval holds the stage before it changes any cluster until someone approves it
    /// (`kubectl clusternet rollout approve subscription/NAME`), for every revision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub require_approval: Option<bool>,

    /// MetricGates are Prometheus queries that must pass, every few seconds while the stage
    /// changes and soaks, for the stage to pass; one that fails fails the stage.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub metric_gates: Vec<MetricGate>,
}

/// A Prometheus instant query and the threshold every sample of its result must meet.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MetricGate {
    /// Name of the gate, shown in the stage's status.
    pub name: String,

    /// Address of the Prometheus server (`http://host:port`, where `/api/v1/query` is served).
    pub address: String,

    /// Query is the PromQL instant query. `$CLUSTERS` is replaced by the stage's cluster names
    /// (ManagedCluster names, regex-escaped and joined by `|`, for `cluster=~"$CLUSTERS"`) and
    /// `$STAGE` by the stage's name.
    pub query: String,

    /// Comparison of each sample with the threshold: `LessThan`, `LessOrEqual`, `GreaterThan`,
    /// `GreaterOrEqual`.
    pub comparison: MetricComparison,

    /// Threshold each sample is compared with.
    pub threshold: f64,

    /// OnNoData is what an empty result means: `Wait` (default: the stage cannot pass yet and
    /// its deadline runs) or `Pass`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_no_data: Option<NoData>,
}

closed_string_enum! {
    /// How a metric sample is compared with a gate's threshold.
    #[derive(Default)]
    pub enum MetricComparison {
        #[default]
        LessThan = "LessThan",
        LessOrEqual = "LessOrEqual",
        GreaterThan = "GreaterThan",
        GreaterOrEqual = "GreaterOrEqual",
    }
}

closed_string_enum! {
    /// What a metric gate's empty result means.
    #[derive(Default)]
    pub enum NoData {
        #[default]
        Wait = "Wait",
        Pass = "Pass",
    }
}

closed_string_enum! {
    /// What a failed stage does.
    #[derive(Default)]
    pub enum OnFailure {
        #[default]
        Rollback = "Rollback",
        Pause = "Pause",
    }
}

closed_string_enum! {
    /// Where a rollout is.
    #[derive(Default)]
    pub enum RolloutPhase {
        /// Stages are being worked through.
        #[default]
        Progressing = "Progressing",
        /// Every stage passed: every cluster carries the revision.
        Completed = "Completed",
        /// A stage failed and onFailure is Pause: every cluster stays where it is.
        Paused = "Paused",
        /// A stage failed: every cluster carries the stable revision again.
        RolledBack = "RolledBack",
    }
}

closed_string_enum! {
    /// Where one stage is.
    #[derive(Default)]
    pub enum StagePhase {
        #[default]
        Pending = "Pending",
        /// Held until approved (requireApproval).
        WaitingForApproval = "WaitingForApproval",
        /// Its clusters are changing, or not all healthy yet.
        Progressing = "Progressing",
        /// Every cluster is healthy; waiting out minSuccessTime.
        Soaking = "Soaking",
        Succeeded = "Succeeded",
        Failed = "Failed",
    }
}

/// A Subscription's rollout (`status.rollout`), written by the rollout controller; the
/// Subscription controller pins each Base by it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutStatus {
    /// Revision is the ControllerRevision being rolled out (or rolled out, or rolled back).
    pub revision: String,

    /// RevisionNumber is its number.
    pub revision_number: i64,

    /// StableRevision is the last revision that completed everywhere: the clusters a rollout has
    /// not reached carry it, and a rollback returns to it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub stable_revision: String,

    /// StableRevisionNumber is its number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stable_revision_number: Option<i64>,

    /// Phase of the rollout.
    pub phase: RolloutPhase,

    /// Stage is the index of the current stage (the number of stages once completed).
    pub stage: i32,

    /// Message says why the rollout is where it is.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,

    /// StartedAt is when the rollout of this revision began.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Time>,

    /// Stages, in order, with their clusters.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stages: Vec<StageStatus>,

    /// PausedAt is when `kubectl clusternet rollout pause` stopped it (nothing moves until
    /// `resume`; the time paused does not count against a progressDeadline).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused_at: Option<Time>,

    /// RestartedAt is the `rollout restart` request this rollout started from.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub restarted_at: String,

    /// UndoTo is the revision number `rollout undo` asked for while it is what is rolled out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub undo_to: Option<i64>,
}

/// One stage of a rollout.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StageStatus {
    pub name: String,

    /// Phase of the stage.
    pub phase: StagePhase,

    /// Clusters of the stage (`<namespace>/<name>`, as in bindingClusters).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clusters: Vec<String>,

    /// Updated are the clusters of the stage that carry the revision.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub updated: Vec<String>,

    /// Healthy are the updated clusters healthy at the revision now.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub healthy: Vec<String>,

    /// StartedAt is when the stage started changing clusters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Time>,

    /// HealthySince is when every cluster of the stage became healthy (the soak's start).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub healthy_since: Option<Time>,

    /// FinishedAt is when it succeeded or failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<Time>,

    /// Message says what the stage waits for, or why it failed.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,

    /// ApprovedBy is the user who approved the stage (requireApproval), as the API server knew
    /// them.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub approved_by: String,

    /// ApprovedAt is when.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approved_at: Option<Time>,

    /// Gates are the metric gates' last results.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gates: Vec<GateStatus>,
}

/// A metric gate's last evaluation.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GateStatus {
    pub name: String,
    /// `Passing`, `Failing` or `Waiting` (no data, or Prometheus not reached).
    pub state: String,
    /// What the query returned, against what.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

/// What `kubectl clusternet rollout approve` writes to a Subscription's annotation
/// `apps.clusternet.io/rollout-approval`: the stage of the revision approved, and by whom.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct RolloutApproval {
    pub revision: i64,
    pub stage: String,
    pub user: String,
}

/// What `kubectl clusternet rollout undo` writes to annotation `apps.clusternet.io/rollout-undo`:
/// roll revision `to` out (through the stages) while the newest revision is still `newest`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct RolloutUndo {
    pub to: i64,
    pub newest: i64,
}
