//! Aggregated status (docs/spec/deployer.md §13): per feed of a Subscription, the state of its
//! object in every binding cluster (available, replica counters), summed into a summary, written to
//! `status.aggregatedStatuses` only when it changed. Beyond upstream, any kind reporting standard
//! `status.conditions` (Ready/Available True) or replica fields counts as available when it says so.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::ResourceExt;
use kube::api::{Api, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::feeds;
use crate::apis::known;
use crate::apis::{
    AggregatedStatus, CONDITION_FEEDS_RESOLVED, Description, Feed, FeedStatus,
    FeedStatusPerCluster, ManagedCluster, Manifest, ReplicaStatus, Subscription,
};
use crate::runtime::events::Events;
use crate::runtime::{Runtime, api_code};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

#[derive(Debug, thiserror::Error)]
pub enum AggregateError {
    #[error("Subscription {sub}: writing aggregated status: {source}")]
    Api {
        sub: String,
        #[source]
        source: kube::Error,
    },
}

struct Ctx {
    rt: Runtime,
    events: Events,
    descriptions: Store<Description>,
    clusters: Store<ManagedCluster>,
    manifests: Store<Manifest>,
}

pub async fn run(rt: Runtime, stop: CancellationToken) {
    let subs = rt.cache.watch::<Subscription>();
    let descs = rt.cache.watch::<Description>();
    let clusters = rt.cache.watch::<ManagedCluster>();
    let manifests = rt.cache.watch::<Manifest>();
    if !manifests.ready().await {
        return;
    }
    // a feed created (or deleted) after its Subscription changes what the status says about it
    let sub_store = subs.store.clone();
    let reserved = rt.config.reserved_namespace.clone();
    let from_manifests = manifests.subscribe().flat_map(move |m| {
        let subs = sub_store.state();
        let refs: Vec<ObjectRef<Subscription>> = feeds::subscriptions_using(&m, &reserved, &subs)
            .map(|s| ObjectRef::from_obj(s.as_ref()))
            .collect();
        futures::stream::iter(refs)
    });
    let from_descs = descs.subscribe().filter_map(|d| async move {
        let l = d.labels();
        let ns = l.get(known::CONFIG_SUBSCRIPTION_NAMESPACE_LABEL)?;
        let name = l.get(known::CONFIG_SUBSCRIPTION_NAME_LABEL)?;
        Some(ObjectRef::<Subscription>::new(name).within(ns))
    });
    let also = futures::stream::select(from_descs, from_manifests);
    let ctx = Arc::new(Ctx {
        events: Events::new(rt.client.clone(), known::CLUSTERNET_CONTROLLER_MANAGER_NAME),
        rt,
        descriptions: descs.store.clone(),
        clusters: clusters.store.clone(),
        manifests: manifests.store.clone(),
    });
    crate::runtime::controller::run_with("aggregatestatus", subs, 4, stop, also, move |sub| {
        let ctx = ctx.clone();
        async move { reconcile(&ctx, sub).await }
    })
    .await;
}

/// The replica counters upstream reads from a workload's status.
pub fn replica_status(api_version: &str, kind: &str, observed: &Value) -> ReplicaStatus {
    let n = |k: &str| observed.get(k).and_then(Value::as_i64).unwrap_or(0);
    let i = |k: &str| i32::try_from(n(k)).unwrap_or(i32::MAX);
    let mut r = ReplicaStatus::default();
    match (api_version, kind) {
        ("apps/v1", "Deployment") => {
            r.observed_generation = n("observedGeneration");
            r.replicas = i("replicas");
            r.updated_replicas = i("updatedReplicas");
            r.ready_replicas = i("readyReplicas");
            r.available_replicas = i("availableReplicas");
            r.unavailable_replicas = i("unavailableReplicas");
        }
        ("apps/v1", "StatefulSet") => {
            r.observed_generation = n("observedGeneration");
            r.replicas = i("replicas");
            r.updated_replicas = i("updatedReplicas");
            r.current_replicas = i("currentReplicas");
            r.ready_replicas = i("readyReplicas");
            r.available_replicas = i("availableReplicas");
        }
        ("batch/v1", "Job") => {
            r.active = i("active");
            r.succeeded = i("succeeded");
            r.failed = i("failed");
        }
        _ => {
            r.observed_generation = n("observedGeneration");
            r.replicas = i("replicas");
            r.ready_replicas = i("readyReplicas");
            r.available_replicas = i("availableReplicas");
        }
    }
    r
}

/// Whether a child object is up: workloads by their replica counters, anything with standard
/// conditions by Ready/Available, anything else by having been applied.
pub fn object_available(kind: &str, spec_replicas: Option<i64>, observed: Option<&Value>) -> bool {
    let Some(s) = observed else {
        return !matches!(kind, "Deployment" | "StatefulSet" | "ReplicaSet" | "Job");
    };
    let n = |k: &str| s.get(k).and_then(Value::as_i64).unwrap_or(0);
    match kind {
        "Deployment" => {
            n("availableReplicas") >= spec_replicas.unwrap_or(n("replicas"))
                && n("unavailableReplicas") == 0
        }
        "StatefulSet" | "ReplicaSet" => {
            n("readyReplicas") >= spec_replicas.unwrap_or(n("replicas"))
        }
        "Job" => n("succeeded") >= 1,
        _ => match s.get("conditions").and_then(Value::as_array) {
            Some(cs) => cs.iter().any(|c| {
                matches!(
                    c.get("type").and_then(Value::as_str),
                    Some("Ready" | "Available")
                ) && c.get("status").and_then(Value::as_str) == Some("True")
            }),
            None => true,
        },
    }
}

/// Why a feed cannot be deployed, if it cannot: `(reason, message)`.
pub fn feed_problem(
    feed: &Feed,
    reserved_ns: &str,
    manifests: &[Arc<Manifest>],
) -> Option<(&'static str, String)> {
    if feed.kind == "HelmChart" {
        return Some((
            "NotImplemented",
            format!("feed {feed}: Helm charts are not supported by this build yet"),
        ));
    }
    if feeds::find(feed, reserved_ns, manifests).is_empty() {
        return Some((
            "FeedNotFound",
            format!(
                "feed {feed} ({}) does not exist: no Manifest for it in {reserved_ns} (send the object through the shadow API, e.g. kubectl clusternet apply -f)",
                feed.api_version
            ),
        ));
    }
    None
}

/// The `FeedsResolved` condition from the feed problems (in feed order); the transition time is
/// kept while the status does not change.
pub fn feeds_resolved_condition(
    problems: &[Option<(&'static str, String)>],
    previous: &[Condition],
    now: Timestamp,
) -> Condition {
    let bad: Vec<&(&'static str, String)> = problems.iter().flatten().collect();
    let (status, reason, message) = match bad.first() {
        None => (
            "True",
            "AllFeedsResolved".to_string(),
            "every feed exists".to_string(),
        ),
        Some((reason, _)) => (
            "False",
            reason.to_string(),
            bad.iter()
                .map(|(_, m)| m.as_str())
                .collect::<Vec<_>>()
                .join("; "),
        ),
    };
    let since = previous
        .iter()
        .find(|c| c.type_ == CONDITION_FEEDS_RESOLVED && c.status == status)
        .map(|c| c.last_transition_time.clone())
        .unwrap_or(Time(now));
    Condition {
        type_: CONDITION_FEEDS_RESOLVED.to_string(),
        status: status.to_string(),
        reason,
        message,
        last_transition_time: since,
        observed_generation: None,
    }
}

async fn reconcile(ctx: &Ctx, sub: Arc<Subscription>) -> Result<Action, AggregateError> {
    if sub.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let ns = sub.namespace().unwrap_or_default();
    let uid = sub.uid().unwrap_or_default();
    let status = sub.status.clone().unwrap_or_default();
    // slots per binding cluster, in bindingClusters order
    let clusters = ctx.clusters.state();
    let slots: Vec<FeedStatusPerCluster> = status
        .binding_clusters
        .iter()
        .map(|b| {
            let (cns, cname) = b.split_once('/').unwrap_or(("", b.as_str()));
            let id = clusters
                .iter()
                .find(|c| c.namespace().as_deref() == Some(cns) && c.name_any() == cname)
                .map(|c| c.spec.cluster_id.clone())
                .unwrap_or_default();
            FeedStatusPerCluster {
                cluster_id: id,
                cluster_name: cname.to_string(),
                feed_status: FeedStatus::default(),
            }
        })
        .collect();
    let mut details: Vec<Vec<FeedStatusPerCluster>> =
        sub.spec.feeds.iter().map(|_| slots.clone()).collect();
    for d in ctx.descriptions.state().iter().filter(|d| {
        d.labels().get(known::CONFIG_SUBSCRIPTION_UID_LABEL) == Some(&uid)
            && d.metadata.deletion_timestamp.is_none()
    }) {
        let cid = d
            .labels()
            .get(known::CLUSTER_ID_LABEL)
            .cloned()
            .unwrap_or_default();
        let raws: Vec<Value> = d
            .spec
            .raw
            .iter()
            .filter_map(|r| serde_json::from_slice(&r.0).ok())
            .collect();
        for ms in d.status.iter().flat_map(|s| s.manifest_statuses.iter()) {
            let Some(fi) = sub.spec.feeds.iter().position(|f| {
                f.kind == ms.feed.kind
                    && f.name == ms.feed.name
                    && (f.namespace.is_empty() || f.namespace == ms.feed.namespace)
            }) else {
                continue;
            };
            let spec_replicas = raws
                .iter()
                .find(|r| {
                    r.pointer("/metadata/name").and_then(Value::as_str)
                        == Some(ms.feed.name.as_str())
                        && r.get("kind").and_then(Value::as_str) == Some(ms.feed.kind.as_str())
                })
                .and_then(|r| r.pointer("/spec/replicas"))
                .and_then(Value::as_i64);
            if let Some(slot) = details[fi].iter_mut().find(|s| s.cluster_id == cid) {
                slot.feed_status = FeedStatus {
                    available: object_available(
                        &ms.feed.kind,
                        spec_replicas,
                        ms.observed_status.as_ref(),
                    ),
                    replica_status: ms
                        .observed_status
                        .as_ref()
                        .map(|o| replica_status(&ms.feed.api_version, &ms.feed.kind, o))
                        .unwrap_or_default(),
                };
            }
        }
    }
    let manifests = ctx.manifests.state();
    let problems: Vec<Option<(&'static str, String)>> = sub
        .spec
        .feeds
        .iter()
        .map(|f| feed_problem(f, &ctx.rt.config.reserved_namespace, &manifests))
        .collect();
    let aggregated: Vec<AggregatedStatus> = sub
        .spec
        .feeds
        .iter()
        .zip(details)
        .zip(&problems)
        .map(|((feed, mut details), problem)| {
            if problem.is_some() {
                // nothing of it runs anywhere: never report it available
                for d in &mut details {
                    d.feed_status.available = false;
                }
            }
            let mut summary = FeedStatus {
                available: problem.is_none() && details.iter().all(|d| d.feed_status.available),
                ..Default::default()
            };
            for d in &details {
                let (s, r) = (&mut summary.replica_status, &d.feed_status.replica_status);
                s.observed_generation = s.observed_generation.max(r.observed_generation);
                s.replicas += r.replicas;
                s.updated_replicas += r.updated_replicas;
                s.current_replicas += r.current_replicas;
                s.ready_replicas += r.ready_replicas;
                s.available_replicas += r.available_replicas;
                s.unavailable_replicas += r.unavailable_replicas;
                s.active += r.active;
                s.succeeded += r.succeeded;
                s.failed += r.failed;
            }
            AggregatedStatus {
                feed: feed.clone(),
                feed_status_summary: summary,
                feed_status_details: details,
            }
        })
        .collect();
    let condition = feeds_resolved_condition(&problems, &status.conditions, Timestamp::now());
    let mut conditions: Vec<Condition> = status
        .conditions
        .iter()
        .filter(|c| c.type_ != CONDITION_FEEDS_RESOLVED)
        .cloned()
        .collect();
    let previous = status
        .conditions
        .iter()
        .find(|c| c.type_ == CONDITION_FEEDS_RESOLVED);
    if condition.status == "False"
        && previous.is_none_or(|p| p.status != condition.status || p.message != condition.message)
    {
        ctx.events
            .warn(sub.as_ref(), &condition.reason, &condition.message);
    }
    conditions.push(condition);
    if aggregated == status.aggregated_statuses && conditions == status.conditions {
        return Ok(Action::requeue(Duration::from_secs(300)));
    }
    let mut updated = (*sub).clone();
    let mut st = status;
    st.aggregated_statuses = aggregated;
    st.conditions = conditions;
    updated.status = Some(st);
    let api: Api<Subscription> = Api::namespaced(ctx.rt.client.clone(), &ns);
    match api
        .replace_status(&sub.name_any(), &PostParams::default(), &updated)
        .await
    {
        Ok(_) => Ok(Action::requeue(Duration::from_secs(300))),
        Err(e) if api_code(&e) == Some(409) => Ok(Action::requeue(Duration::from_millis(300))),
        Err(source) => Err(AggregateError::Api {
            sub: format!("{ns}/{}", sub.name_any()),
            source,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn availability_by_kind() {
        let d = json!({"replicas": 3, "availableReplicas": 3, "updatedReplicas": 3, "readyReplicas": 3});
        assert!(object_available("Deployment", Some(3), Some(&d)));
        assert!(!object_available("Deployment", Some(4), Some(&d)));
        assert!(!object_available("Deployment", Some(3), None));
        assert!(object_available(
            "Service",
            None,
            Some(&json!({"loadBalancer": {}}))
        ));
        let cr = json!({"conditions": [{"type": "Ready", "status": "False"}]});
        assert!(!object_available("Widget", None, Some(&cr)));
        let cr = json!({"conditions": [{"type": "Ready", "status": "True"}]});
        assert!(object_available("Widget", None, Some(&cr)));
        let r = replica_status("apps/v1", "Deployment", &d);
        assert_eq!((r.replicas, r.available_replicas), (3, 3));
        let j = replica_status("batch/v1", "Job", &json!({"succeeded": 1}));
        assert_eq!(j.succeeded, 1);
    }
}
