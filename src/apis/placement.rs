//! API group `placement.clusternet.io/v1alpha1`, served by the hub's aggregated API server (not a
//! CRD, never stored): `POST .../namespaces/<ns>/placementreviews` of a `PlacementReview` asks for
//! the placement what-if of a Subscription (one given whole, which may not exist yet, or one that
//! exists, by name) and answers with the same object, its `status` filled in: which clusters the
//! scheduler's own cycle keeps or drops at each step and why, the binding and replica split it
//! would write, and, when asked, the object each child would receive after every Globalization
//! and Localization, with the override that set each changed field.
//!
//! A review in the style of `authorization.k8s.io`'s SubjectAccessReview: create-only, so
//! `kubectl create -f review.yaml -o yaml` and scripts use it as they use those; `kubectl
//! clusternet placement` is its command line. The group is a new one rather than a version of
//! `apps.clusternet.io`, whose versions the parent serves from CRDs (an APIService for another
//! version of that group would take its discovery document away from the CRDs).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{OverrideType, SchedulingDecision, Subscription};

/// API group of this module.
pub const GROUP: &str = "placement.clusternet.io";
/// API version of this module.
pub const VERSION: &str = "v1alpha1";
/// `apiVersion` of objects in this group.
pub const API_VERSION: &str = "placement.clusternet.io/v1alpha1";
/// Name of the `APIService` that routes this group to the hub.
pub const API_SERVICE_NAME: &str = "v1alpha1.placement.clusternet.io";
/// The review's kind.
pub const KIND: &str = "PlacementReview";
/// Plural resource name (namespaced: the Subscription's namespace).
pub const RESOURCE: &str = "placementreviews";
/// Singular resource name.
pub const SINGULAR: &str = "placementreview";

/// One placement what-if: the question in `spec`, the answer in `status`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PlacementReview {
    #[serde(default)]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: PlacementReviewSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<PlacementReviewStatus>,
}

/// What to explain.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PlacementReviewSpec {
    /// A Subscription as it would be applied (it need not exist); its namespace is the review's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subscription: Option<Box<Subscription>>,
    /// Or the name of an existing Subscription in the review's namespace: the what-if of its
    /// current spec, next to where it is bound now.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub subscription_name: String,
    /// Also render the objects every selected child would receive.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub show_objects: bool,
    /// Objects as they would be applied with the Subscription (the rest of the user's file):
    /// objects of a kind the shadow API serves stand in for the Manifests they would become (a
    /// feed is reviewed before it exists in the parent), Localizations, Globalizations and
    /// HelmCharts for the parent's of the same name. They are not dry-run: the API server's
    /// defaults are not in them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub objects: Vec<Value>,
}

/// The answer.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PlacementReviewStatus {
    /// Cluster by cluster, and the decision.
    #[serde(flatten)]
    pub explanation: Explanation,
    /// For an existing Subscription: where it is bound now (its status).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current: Option<CurrentPlacement>,
    /// For an existing Subscription: whether scheduling it now would bind it differently from
    /// `current` (the state changed since the last decision, or that decision is still to come).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub would_change: Option<bool>,
    /// With `spec.showObjects`: what each selected child would receive, in binding order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub objects: Vec<ClusterObjects>,
}

/// Where an existing Subscription is bound now.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct CurrentPlacement {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub binding_clusters: Vec<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub replicas: BTreeMap<String, Vec<i32>>,
    /// Why it is bound there: the scheduler's record of the decision that put it there
    /// (`status.lastDecision`), as the fleet was then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_decision: Option<SchedulingDecision>,
}

/// The rendered feeds of one child.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ClusterObjects {
    /// `namespace/name` of the ManagedCluster.
    pub cluster: String,
    pub objects: Vec<RenderedObject>,
}

/// One feed object as one child would receive it; an error here (a patch that does not apply,
/// a missing feed) is this child's and this object's only.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RenderedObject {
    /// The feed, as `kind namespace/name` (apiVersion elided).
    pub feed: String,
    /// The feed's object before overrides (the Manifest's template, or the HelmChart).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<Value>,
    /// The object after every override (for a HelmChart, the chart with its chart overrides).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object: Option<Value>,
    /// For a HelmChart: the release values after the value overrides (JSON).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub values: Option<String>,
    /// Each field the overrides changed, with the override that set it last.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changes: Vec<FieldChange>,
    /// For a HelmChart: the overrides applied, in order (values are not attributed per field).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub applied: Vec<OverrideSource>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

// ---- the explanation (the scheduler's record, `scheduler::explain`) ----

/// The explanation of one scheduling attempt.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Explanation {
    /// `Replication` or `Dividing`.
    pub strategy: String,
    /// One entry per ManagedCluster, `namespace/name` order.
    pub clusters: Vec<ClusterVerdict>,
    /// The decision: `status.bindingClusters` as the scheduler writes it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub binding_clusters: Vec<String>,
    /// The decision for `Dividing`: replicas per feed key, one per binding cluster.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub replicas: BTreeMap<String, Vec<i32>>,
    /// Why no binding came out, in the words of the scheduler's FailedScheduling event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What happened to one cluster.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterVerdict {
    /// `namespace/name` of the ManagedCluster.
    pub cluster: String,
    /// Where it left, or that it was selected.
    pub verdict: Verdict,
    /// Predicted maximum replicas per FeedInventory feed (Dynamic dividing), when asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub predicted: Option<Vec<Option<i32>>>,
    /// Its total score, when it was scored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub score: Option<i64>,
}

/// The step a cluster stopped at.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "step", rename_all = "camelCase")]
pub enum Verdict {
    /// The ManagedCluster is being deleted.
    Deleting,
    /// No subscriber's `clusterAffinity` matches: per subscriber, the first term it missed.
    AffinityMissed { terms: Vec<String> },
    /// A filter plugin rejected it (the pre-filter when `plugin` names one and every candidate
    /// shares the verdict).
    Filtered {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        plugin: Option<String>,
        reasons: Vec<String>,
    },
    /// Filtering stopped before reaching it: enough feasible clusters had been found (Dividing
    /// with more candidates than `percentageOfClustersToScore` asks for).
    NotEvaluated,
    /// Feasible, but not among the first `minClusters` of any subgroup.
    NotInSubgroup,
    /// Feasible, but the attempt failed after filtering (see [`Explanation::error`]).
    Feasible,
    /// In the binding.
    Selected {
        /// Replicas per feed key (Dividing).
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        replicas: BTreeMap<String, i32>,
    },
}

// ---- what the overrides did (`pipeline::overrides`) ----

/// One field of a rendered object that an override set, changed or removed, with the override
/// that did it last (a later override of the same field wins, as it does in the object).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FieldChange {
    /// JSON pointer of the field (`/spec/replicas`).
    pub path: String,
    /// The rule's `name` in its Globalization or Localization.
    pub rule: String,
    #[serde(rename = "type")]
    pub type_: OverrideType,
    pub source: OverrideSource,
}

/// Where an override rule comes from: what the placement what-if names next to a field it set.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OverrideSource {
    /// `Globalization` or `Localization`.
    pub kind: String,
    /// The Localization's namespace (Globalizations are cluster-scoped).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub name: String,
    /// The effective priority (unset = 500).
    pub priority: i32,
}
