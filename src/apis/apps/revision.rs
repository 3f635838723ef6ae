//! The content of a Subscription revision (beyond upstream, docs/spec/deployer.md §15): what an
//! `apps/v1` `ControllerRevision` of a Subscription holds in `data`. The revision controller
//! (`pipeline::revision`) writes it; `kubectl clusternet rollout history --revision=N` reads it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{Feed, OverrideConfig};

/// What one revision holds: everything the Descriptions of a Subscription are rendered from.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct SubscriptionRevision {
    /// The Subscription's spec (without `revisionHistoryLimit` and `rolloutStrategyName`, which render
    /// nothing).
    pub subscription: Value,
    /// Each feed in `spec.feeds` order with its content.
    pub feeds: Vec<FeedContent>,
    /// Per cluster namespace, the override rules that apply to each object there (namespaces
    /// without any are left out).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub overrides: BTreeMap<String, Vec<ObjectOverrides>>,
}

/// One feed's content: the templates of its Manifests (oldest first, as rendering picks them),
/// or the spec of its HelmChart.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct FeedContent {
    pub feed: Feed,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub objects: Vec<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chart: Option<Value>,
}

/// The override rules that apply to object `object` of feed `feed` (indexes into
/// [`SubscriptionRevision::feeds`]; a chart is object 0), in application order.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ObjectOverrides {
    pub feed: usize,
    pub object: usize,
    pub overrides: Vec<OverrideConfig>,
}
