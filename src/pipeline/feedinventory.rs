//! FeedInventory controller (gate `FeedInventory`, docs/spec/deployer.md §12): for every
//! Dividing Subscription, the desired replicas, per-replica requirements and replica JSON path of
//! each feed, written as FeedInventory `<ns>/<name>` for the scheduler to divide replicas with.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::runtime::controller::Action;
use crate::runtime::controller::Controller;
use k8s_openapi::api::core::v1::{PodSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::{Api, ObjectMeta};
use kube::{Resource, ResourceExt};
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tracing::info;

use super::feeds;
use crate::apis::known;
use crate::apis::{
    FeedInventory, FeedInventorySpec, FeedOrder, Manifest, ReplicaRequirements, SchedulingStrategy,
    Subscription,
};
use crate::kube_ext::quantity;
use crate::runtime::controller::{ApiFailure, ReconcileError, recheck, through_index};
use crate::runtime::{Runtime, apply};

/// The field manager of the FeedInventories this controller writes.
pub const FIELD_MANAGER: &str = "clusternet/controller/feedinventory";

#[derive(Debug, thiserror::Error)]
pub enum InventoryError {
    #[error("Subscription {sub}: feed {feed} has no Manifest in {reserved}")]
    NoManifest {
        sub: String,
        feed: String,
        reserved: String,
    },
    #[error("Subscription {sub}: feed {feed}: {message}")]
    Unparseable {
        sub: String,
        feed: String,
        message: String,
    },
    #[error(transparent)]
    Api(#[from] ApiFailure),
}

impl ReconcileError for InventoryError {
    fn metric_label(&self) -> &'static str {
        match self {
            InventoryError::NoManifest { .. } => "no_manifest",
            InventoryError::Unparseable { .. } => "unparseable",
            InventoryError::Api(_) => "api",
        }
    }
}

pub async fn run(rt: Runtime, stop: CancellationToken) {
    let subs = rt.cache.watch::<Subscription>();
    let manifests = rt.cache.watch::<Manifest>();
    // a Manifest change re-inventories every Dividing Subscription that references it
    let subs_by_feed = super::index::subscriptions_by_feed(&subs);
    let reserved = rt.config.reserved_namespace.clone();
    let also = through_index(
        manifests.subscribe(),
        subs_by_feed,
        super::index::manifest_feed_keys,
        move |s: &Subscription, m: &Manifest| {
            s.spec.scheduling_strategy == Some(SchedulingStrategy::Dividing)
                && feeds::uses(s, m, &reserved)
        },
    );
    let ctx = Arc::new((rt, super::index::manifests_by_feed(&manifests)));
    Controller::new("feedinventory", &subs)
        .concurrency(4)
        .triggered_by(also)
        .run(stop, move |sub| {
            let ctx = ctx.clone();
            async move {
                let manifests = super::index::manifests_of(&ctx.1, &sub.spec.feeds);
                reconcile(&ctx.0, &manifests, &sub).await
            }
        })
        .await;
}

fn sum(acc: &mut BTreeMap<String, i128>, m: Option<&BTreeMap<String, Quantity>>) {
    for (k, q) in m.into_iter().flatten() {
        if let Ok(v) = quantity::milli(q) {
            *acc.entry(k.clone()).or_default() += v;
        }
    }
}

fn to_quantities(m: BTreeMap<String, i128>) -> Option<BTreeMap<String, Quantity>> {
    if m.is_empty() {
        return None;
    }
    Some(
        m.into_iter()
            .map(|(k, v)| {
                let q = if k == "cpu" {
                    quantity::format_decimal(v)
                } else if k == "memory" || k == "ephemeral-storage" || k.starts_with("hugepages-") {
                    quantity::format_binary(v)
                } else {
                    quantity::format_decimal(v)
                };
                (k, q)
            })
            .collect(),
    )
}

/// deployer.md §12: node selector, tolerations, affinity; requests and limits summed over app
/// containers (a limit without a request counts as the request), each init container replacing a
/// resource's sum when larger.
pub fn replica_requirements(pod: &PodSpec) -> ReplicaRequirements {
    let mut requests = BTreeMap::new();
    let mut limits = BTreeMap::new();
    for c in &pod.containers {
        let r = c.resources.clone().unwrap_or_default();
        let mut req = r.requests.clone().unwrap_or_default();
        for (k, v) in r.limits.clone().unwrap_or_default() {
            req.entry(k).or_insert(v);
        }
        sum(&mut requests, Some(&req));
        sum(&mut limits, r.limits.as_ref());
    }
    for c in pod.init_containers.iter().flatten() {
        let r = c.resources.clone().unwrap_or_default();
        let (mut ir, mut il) = (BTreeMap::new(), BTreeMap::new());
        sum(&mut ir, r.requests.as_ref());
        sum(&mut il, r.limits.as_ref());
        for (k, v) in ir {
            let e = requests.entry(k).or_default();
            *e = (*e).max(v);
        }
        for (k, v) in il {
            let e = limits.entry(k).or_default();
            *e = (*e).max(v);
        }
    }
    ReplicaRequirements {
        node_selector: pod.node_selector.clone().unwrap_or_default(),
        tolerations: pod.tolerations.clone().unwrap_or_default(),
        affinity: pod.affinity.clone(),
        resources: ResourceRequirements {
            requests: to_quantities(requests),
            limits: to_quantities(limits),
            claims: None,
        },
    }
}

/// The workload facts of one template: (desiredReplicas, requirements, replicaJsonPath).
pub fn parse_template(
    template: &Value,
) -> Result<(Option<i32>, ReplicaRequirements, String), String> {
    let api_version = template
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let kind = template
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let workload = matches!(
        (api_version, kind),
        (
            "apps/v1" | "apps/v1beta1" | "apps/v1beta2" | "extensions/v1beta1",
            "Deployment"
        ) | ("apps/v1" | "extensions/v1beta1", "ReplicaSet")
            | (
                "apps/v1" | "apps/v1beta1" | "apps/v1beta2" | "extensions/v1beta1",
                "StatefulSet"
            )
    );
    if !workload {
        return Ok((None, ReplicaRequirements::default(), String::new()));
    }
    let replicas = match template.pointer("/spec/replicas") {
        None | Some(Value::Null) => None,
        Some(v) => Some(
            v.as_i64()
                .and_then(|n| i32::try_from(n).ok())
                .ok_or_else(|| format!("spec.replicas {v} is not an int32"))?,
        ),
    };
    let pod: PodSpec = match template.pointer("/spec/template/spec") {
        Some(spec) => {
            serde_json::from_value(spec.clone()).map_err(|e| format!("spec.template.spec: {e}"))?
        }
        None => PodSpec::default(),
    };
    Ok((
        replicas,
        replica_requirements(&pod),
        "/spec/replicas".to_string(),
    ))
}

/// What the FeedInventory of `sub` must say: one order per feed, from its first Manifest. `None`
/// for a Subscription that is not Dividing (or is being deleted): it has no inventory to keep.
pub fn plan_inventory(
    sub: &Subscription,
    reserved_ns: &str,
    manifests: &[Arc<Manifest>],
) -> Result<Option<FeedInventorySpec>, InventoryError> {
    if sub.spec.scheduling_strategy != Some(SchedulingStrategy::Dividing)
        || sub.metadata.deletion_timestamp.is_some()
    {
        return Ok(None);
    }
    let key = format!("{}/{}", sub.namespace().unwrap_or_default(), sub.name_any());
    let mut orders = Vec::new();
    for feed in &sub.spec.feeds {
        let found = feeds::find(feed, reserved_ns, manifests);
        let Some(m) = found.first() else {
            // a Manifest may arrive later: retry instead of waiting for a Subscription change
            tracing::warn!(subscription = %key, feed = %feed, "UnParseableFeeds: no Manifest for the feed yet");
            return Err(InventoryError::NoManifest {
                sub: key,
                feed: feed.to_string(),
                reserved: reserved_ns.to_string(),
            });
        };
        let (desired, requirements, path) =
            parse_template(&m.spec.template).map_err(|message| InventoryError::Unparseable {
                sub: key.clone(),
                feed: feed.to_string(),
                message,
            })?;
        orders.push(FeedOrder {
            feed: feed.clone(),
            desired_replicas: desired,
            replica_requirements: requirements,
            replica_json_path: path,
        });
    }
    Ok(Some(FeedInventorySpec { feeds: orders }))
}

/// The FeedInventory we own: named after the Subscription, labelled with it, owned by it.
pub fn desired_inventory(sub: &Subscription, spec: FeedInventorySpec) -> FeedInventory {
    let (ns, name) = (sub.namespace().unwrap_or_default(), sub.name_any());
    let mut inv = FeedInventory::new(&name, spec);
    inv.metadata = ObjectMeta {
        name: Some(name.clone()),
        namespace: Some(ns.clone()),
        labels: Some(BTreeMap::from([
            (
                known::OBJECT_CREATED_BY_LABEL.to_string(),
                known::CLUSTERNET_CONTROLLER_MANAGER_NAME.to_string(),
            ),
            (known::CONFIG_SUBSCRIPTION_NAME_LABEL.to_string(), name),
            (known::CONFIG_SUBSCRIPTION_NAMESPACE_LABEL.to_string(), ns),
            (
                known::CONFIG_SUBSCRIPTION_UID_LABEL.to_string(),
                sub.uid().unwrap_or_default(),
            ),
        ])),
        owner_references: sub.controller_owner_ref(&()).map(|r| vec![r]),
        ..Default::default()
    };
    inv
}

async fn reconcile(
    rt: &Runtime,
    manifests: &[Arc<Manifest>],
    sub: &Subscription,
) -> Result<Action, InventoryError> {
    let Some(spec) = plan_inventory(sub, &rt.config.reserved_namespace, manifests)? else {
        return Ok(Action::await_change());
    };
    let (ns, name) = (sub.namespace().unwrap_or_default(), sub.name_any());
    let fail = || ApiFailure::about(sub, "writing its FeedInventory");
    let api: Api<FeedInventory> = Api::namespaced(rt.client.clone(), &ns);
    let existing = api.get_opt(&name).await.map_err(fail())?;
    if existing.is_some_and(|e| e.spec == spec) {
        return Ok(recheck(Duration::from_secs(300)));
    }
    let body = serde_json::json!(desired_inventory(sub, spec));
    apply::apply(&api, FIELD_MANAGER, &name, &body)
        .await
        .map_err(fail())?;
    info!(subscription = %format!("{ns}/{name}"), "FeedInventorySynced");
    Ok(recheck(Duration::from_secs(300)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_dividing_subscriptions_get_an_inventory_of_every_feed() {
        let sub = |strategy: &str| -> Subscription {
            serde_json::from_value(json!({
                "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Subscription",
                "metadata": {"name": "app", "namespace": "default", "uid": "s-1"},
                "spec": {"schedulingStrategy": strategy, "subscribers": [{"clusterAffinity": {}}],
                    "feeds": [{"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "demo", "name": "web"}]}
            }))
            .expect("a Subscription")
        };
        let manifest = crate::pipeline::feeds::test_manifest(json!({"apiVersion": "apps/v1",
            "kind": "Deployment", "metadata": {"name": "web", "namespace": "demo"},
            "spec": {"replicas": 6}}));
        let reserved = "clusternet-reserved";
        assert!(matches!(
            plan_inventory(
                &sub("Replication"),
                reserved,
                std::slice::from_ref(&manifest)
            ),
            Ok(None)
        ));
        // a feed without its Manifest yet: retried
        assert!(matches!(
            plan_inventory(&sub("Dividing"), reserved, &[]),
            Err(InventoryError::NoManifest { .. })
        ));
        let spec = plan_inventory(&sub("Dividing"), reserved, &[manifest])
            .expect("parses")
            .expect("an inventory");
        assert_eq!(spec.feeds[0].desired_replicas, Some(6));
        let inv = desired_inventory(&sub("Dividing"), spec);
        assert_eq!(inv.name_any(), "app");
        assert_eq!(
            inv.labels()
                .get(known::CONFIG_SUBSCRIPTION_UID_LABEL)
                .map(String::as_str),
            Some("s-1")
        );
        assert_eq!(
            inv.metadata.owner_references.map(|o| o[0].uid.clone()),
            Some("s-1".into())
        );
        assert!(inv.metadata.resource_version.is_none());
    }

    #[test]
    fn deployments_give_replicas_and_summed_requirements() {
        let t = json!({"apiVersion": "apps/v1", "kind": "Deployment", "spec": {"replicas": 6, "template": {"spec": {
            "nodeSelector": {"disk": "ssd"},
            "containers": [
                {"name": "a", "resources": {"requests": {"cpu": "500m", "memory": "128Mi"}}},
                {"name": "b", "resources": {"limits": {"cpu": "250m"}}}],
            "initContainers": [{"name": "i", "resources": {"requests": {"memory": "1Gi"}}}]}}}});
        let (replicas, req, path) = parse_template(&t).expect("parses");
        assert_eq!(replicas, Some(6));
        assert_eq!(path, "/spec/replicas");
        assert_eq!(
            req.node_selector.get("disk").map(String::as_str),
            Some("ssd")
        );
        let requests = req.resources.requests.unwrap_or_default();
        assert_eq!(
            requests.get("cpu").map(|q| q.0.as_str()),
            Some("750m"),
            "a limit without a request counts"
        );
        assert_eq!(
            requests.get("memory").map(|q| q.0.as_str()),
            Some("1Gi"),
            "a larger init container wins"
        );
    }

    #[test]
    fn other_kinds_have_no_replicas() {
        let (r, req, path) =
            parse_template(&json!({"apiVersion": "v1", "kind": "Service"})).expect("parses");
        assert_eq!((r, path.as_str()), (None, ""));
        assert!(req.is_empty());
        let (r, _, _) =
            parse_template(&json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "spec": {}}))
                .expect("parses");
        assert_eq!(r, None);
        assert!(
            parse_template(
                &json!({"apiVersion": "apps/v1", "kind": "Deployment", "spec": {"replicas": "six"}})
            )
            .is_err()
        );
    }
}
