//! Aggregated status (docs/spec/deployer.md §13): per feed of a Subscription, the state of its
//! object in every binding cluster (available, replica counters), summed into a summary, written to
//! `status.aggregatedStatuses` only when it changed. Beyond upstream, any kind reporting standard
//! `status.conditions` (Ready/Available True) or replica fields counts as available when it says so.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crate::runtime::controller::Action;
use crate::runtime::controller::Controller;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::reflector::{ObjectRef, Store};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::{feeds, index, readiness};
use crate::apis::known;
use crate::apis::{
    AggregatedStatus, CONDITION_FEEDS_RESOLVED, Description, Feed, FeedStatus,
    FeedStatusPerCluster, HelmChart, HelmChartPhase, ManagedCluster, Manifest, ReplicaStatus,
    Subscription,
};
use crate::runtime::cache::Index;
use crate::runtime::controller::{ApiFailure, ReconcileError, named_by, recheck, through_index};
use crate::runtime::events::Events;
use crate::runtime::{Runtime, apply};

/// The field manager of `status.aggregatedStatuses` and `status.conditions`.
pub const FIELD_MANAGER: &str = "clusternet/controller/aggregatestatus";
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::jiff::Timestamp;

#[derive(Debug, thiserror::Error)]
pub enum AggregateError {
    #[error(transparent)]
    Api(#[from] ApiFailure),
}

impl ReconcileError for AggregateError {
    fn metric_label(&self) -> &'static str {
        match self {
            AggregateError::Api(_) => "api",
        }
    }
}

struct Ctx {
    rt: Runtime,
    events: Events,
    /// Drift records already told on their Subscription (key -> when seen), so each is told once.
    told: std::sync::Mutex<HashMap<String, std::time::Instant>>,
    /// By Subscription uid.
    descriptions: Index<Description>,
    clusters: Store<ManagedCluster>,
    /// By feed.
    manifests: Index<Manifest>,
    charts: Store<HelmChart>,
}

pub async fn run(rt: Runtime, stop: CancellationToken) {
    let subs = rt.cache.watch::<Subscription>();
    let descs = rt.cache.watch::<Description>();
    let clusters = rt.cache.watch::<ManagedCluster>();
    let manifests = rt.cache.watch::<Manifest>();
    let charts = rt.cache.watch::<HelmChart>();
    // a chart found or lost changes what the status says about the Subscriptions using it, and
    // so does a feed created (or deleted) after its Subscription
    let subs_by_feed = index::subscriptions_by_feed(&subs);
    let from_charts = through_index(
        charts.subscribe(),
        subs_by_feed.clone(),
        |c: &HelmChart| vec![index::feed_key("HelmChart", &c.name_any())],
        |s: &Subscription, c: &HelmChart| {
            s.spec.feeds.iter().any(|f| {
                f.kind == "HelmChart"
                    && Some(&f.namespace) == c.namespace().as_ref()
                    && f.name == c.name_any()
            })
        },
    );
    let reserved = rt.config.reserved_namespace.clone();
    let from_manifests = through_index(
        manifests.subscribe(),
        subs_by_feed,
        index::manifest_feed_keys,
        move |s: &Subscription, m: &Manifest| feeds::uses(s, m, &reserved),
    );
    let from_descs = named_by(descs.subscribe(), |d: &Description| {
        index::subscription_named(d.labels())
    });
    let from_clusters = on_readiness(&clusters, &subs);
    let ctx = Arc::new(Ctx {
        events: Events::new(
            rt.events_client.clone(),
            known::CLUSTERNET_CONTROLLER_MANAGER_NAME,
        ),
        rt,
        told: Default::default(),
        descriptions: index::descriptions_by_subscription(&descs),
        clusters: clusters.store.clone(),
        manifests: index::manifests_by_feed(&manifests),
        charts: charts.store.clone(),
    });
    Controller::new("aggregatestatus", &subs)
        .after([manifests.listed(), charts.listed()])
        .triggered_by(from_descs)
        .triggered_by(from_manifests)
        .triggered_by(from_charts)
        .triggered_by(from_clusters)
        .run(stop, move |sub| {
            let ctx = ctx.clone();
            async move { reconcile(&ctx, sub).await }
        })
        .await;
}

/// A trigger: the Subscriptions bound to a cluster whose `Ready` status changed (only then: the
/// heartbeats in between change nothing Ready depends on), since a cluster coming back or going
/// changes no Description.
fn on_readiness(
    clusters: &crate::runtime::cache::Shared<ManagedCluster>,
    subs: &crate::runtime::cache::Shared<Subscription>,
) -> impl futures::Stream<Item = ObjectRef<Subscription>> + Send + 'static {
    use futures::StreamExt;
    let bound = subs.index("binding-cluster", |s: &Subscription| {
        s.status
            .iter()
            .flat_map(|st| st.binding_clusters.iter().cloned())
            .collect()
    });
    let mut seen: HashMap<String, Option<String>> = HashMap::new();
    clusters
        .subscribe()
        .filter_map(move |mc| {
            let key = format!("{}/{}", mc.namespace().unwrap_or_default(), mc.name_any());
            let ready = mc
                .status
                .as_ref()
                .and_then(|s| s.condition(crate::apis::clusters::CONDITION_READY))
                .map(|c| c.status.clone());
            let changed = seen.insert(key.clone(), ready.clone()) != Some(ready);
            futures::future::ready(changed.then_some(key))
        })
        .flat_map(move |key| {
            futures::stream::iter(
                bound
                    .get(&key)
                    .iter()
                    .map(|s| ObjectRef::from_obj(s.as_ref()))
                    .collect::<Vec<_>>(),
            )
        })
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
        return !matches!(
            kind,
            "Deployment" | "StatefulSet" | "ReplicaSet" | "Job" | "HelmChart"
        );
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
        // a chart's HelmRelease status, as the Helm deployer reports it on the Description
        "HelmChart" => s.get("phase").and_then(Value::as_str) == Some("deployed"),
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
    charts: &[Arc<HelmChart>],
) -> Option<(&'static str, String)> {
    if feed.kind == "HelmChart" {
        let chart = charts.iter().find(|c| {
            c.namespace().as_deref() == Some(feed.namespace.as_str()) && c.name_any() == feed.name
        });
        return match chart {
            None => Some((
                "FeedNotFound",
                format!(
                    "feed {feed}: HelmChart {}/{} does not exist",
                    feed.namespace, feed.name
                ),
            )),
            Some(c) => match c.status.as_ref() {
                Some(st) if st.phase == Some(HelmChartPhase::NotFound) => Some((
                    "HelmChartNotFound",
                    format!(
                        "feed {feed}: {} (what was deployed from it before keeps running)",
                        st.reason
                    ),
                )),
                _ => None,
            },
        };
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
    crate::kube_ext::condition::condition(
        crate::kube_ext::condition::Said {
            type_: CONDITION_FEEDS_RESOLVED,
            status,
            reason: &reason,
            message: &message,
            observed_generation: None,
        },
        previous,
        now,
    )
}

/// Per feed of `sub`, the state of its object in every binding cluster (in `bindingClusters`
/// order), from the Descriptions' `manifestStatuses`.
pub fn feed_details(
    sub: &Subscription,
    clusters: &[Arc<ManagedCluster>],
    descriptions: &[Arc<Description>],
) -> Vec<Vec<FeedStatusPerCluster>> {
    let uid = sub.uid().unwrap_or_default();
    let status = sub.status.clone().unwrap_or_default();
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
    for d in descriptions.iter().filter(|d| {
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
    details
}

/// One feed's aggregated status: its details and their sum. A feed that does not exist
/// (`missing`) is never reported available; a HelmChart whose new version is not found is
/// reported as what runs (its release stays at the last version found).
pub fn summarize(
    feed: &Feed,
    mut details: Vec<FeedStatusPerCluster>,
    missing: bool,
) -> AggregatedStatus {
    if missing {
        for d in &mut details {
            d.feed_status.available = false;
        }
    }
    let mut summary = FeedStatus {
        available: !missing && details.iter().all(|d| d.feed_status.available),
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
}

/// What the aggregated status of a Subscription must become.
#[derive(Debug, Default, PartialEq)]
pub struct StatusPlan {
    /// The fields this controller owns, when they differ from what the Subscription has.
    pub update: Option<OwnedStatus>,
    /// A Warning event to record (FeedsResolved turned False, or its message changed).
    pub warning: Option<(String, String)>,
    /// Whether the Subscription is Ready (one that is not is looked at again sooner).
    pub ready: bool,
}

/// `status.aggregatedStatuses`, `status.observedGeneration` and this controller's conditions
/// (`FeedsResolved`, `Ready`, `Reconciling`, `Stalled`: the list is a map keyed by type, so the
/// rollout controller's `RolloutComplete` is its own).
#[derive(Debug, Default, PartialEq)]
pub struct OwnedStatus {
    pub aggregated_statuses: Vec<AggregatedStatus>,
    pub conditions: Vec<Condition>,
    pub observed_generation: Option<i64>,
}

/// The aggregated status of `sub` from what the cache holds.
pub fn plan_status(
    sub: &Subscription,
    clusters: &[Arc<ManagedCluster>],
    descriptions: &[Arc<Description>],
    reserved_ns: &str,
    manifests: &[Arc<Manifest>],
    charts: &[Arc<HelmChart>],
    now: Timestamp,
) -> StatusPlan {
    let status = sub.status.clone().unwrap_or_default();
    let details = feed_details(sub, clusters, descriptions);
    let problems: Vec<Option<(&'static str, String)>> = sub
        .spec
        .feeds
        .iter()
        .map(|f| feed_problem(f, reserved_ns, manifests, charts))
        .collect();
    let aggregated: Vec<AggregatedStatus> = sub
        .spec
        .feeds
        .iter()
        .zip(details)
        .zip(&problems)
        .map(|((feed, details), problem)| {
            summarize(
                feed,
                details,
                problem.as_ref().is_some_and(|(r, _)| *r == "FeedNotFound"),
            )
        })
        .collect();
    let condition = feeds_resolved_condition(&problems, &status.conditions, now);
    let previous = status
        .conditions
        .iter()
        .find(|c| c.type_ == CONDITION_FEEDS_RESOLVED);
    let warning = (condition.status == "False"
        && previous.is_none_or(|p| p.status != condition.status || p.message != condition.message))
    .then(|| (condition.reason.clone(), condition.message.clone()));
    let verdict = readiness::verdict(sub, clusters, descriptions, &condition);
    let generation = sub.metadata.generation;
    let mut conditions = vec![condition];
    conditions.extend(readiness::conditions(
        &verdict,
        generation,
        &status.conditions,
        now,
    ));
    // the list is a map keyed by type: only this controller's types are compared (and applied)
    let mut had: Vec<&Condition> = status
        .conditions
        .iter()
        .filter(|c| {
            c.type_ == CONDITION_FEEDS_RESOLVED || readiness::TYPES.contains(&c.type_.as_str())
        })
        .collect();
    had.sort_by(|a, b| a.type_.cmp(&b.type_));
    let mut want: Vec<&Condition> = conditions.iter().collect();
    want.sort_by(|a, b| a.type_.cmp(&b.type_));
    let update = (aggregated != status.aggregated_statuses
        || had != want
        || status.observed_generation != generation)
        .then_some(OwnedStatus {
            aggregated_statuses: aggregated,
            conditions,
            observed_generation: generation,
        });
    let ready = matches!(verdict, readiness::Verdict::Ready(_));
    StatusPlan {
        update,
        warning,
        ready,
    }
}

/// The drift records of `sub`'s Descriptions detected in the last [`DRIFT_NEWS`]: key, reason
/// and message of each, for a Warning on the Subscription (the deployer tells the Description).
pub fn drift_news(
    sub: &Subscription,
    descriptions: &[Arc<Description>],
    now: Timestamp,
) -> Vec<(String, &'static str, String)> {
    let uid = sub.uid().unwrap_or_default();
    let mut out = Vec::new();
    for d in descriptions {
        if d.labels().get(known::CONFIG_SUBSCRIPTION_UID_LABEL) != Some(&uid) {
            continue;
        }
        for m in d.status.iter().flat_map(|s| s.manifest_statuses.iter()) {
            let Some(drift) = &m.drift else { continue };
            let recent = drift
                .detected_at
                .parse::<Timestamp>()
                .is_ok_and(|t| now.duration_since(t).as_secs() < DRIFT_NEWS.as_secs() as i64);
            if !recent {
                continue;
            }
            let object = crate::kube_ext::object_ref::ObjectRef {
                api_version: m.feed.api_version.clone(),
                kind: m.feed.kind.clone(),
                namespace: m.feed.namespace.clone(),
                name: m.feed.name.clone(),
            };
            let (reason, note) = crate::deployer::description::drift_note(&object, drift);
            let cluster = d.namespace().unwrap_or_default();
            out.push((
                format!(
                    "{}/{}/{}/{}",
                    d.uid().unwrap_or_default(),
                    object.display(),
                    drift.action,
                    drift.detected_at
                ),
                reason,
                format!("in {cluster}: {note}"),
            ));
        }
    }
    out
}

/// How recent a drift must be to be told on its Subscription (older ones were told before a restart).
const DRIFT_NEWS: Duration = Duration::from_secs(600);

fn tell_drift(ctx: &Ctx, sub: &Subscription, descriptions: &[Arc<Description>]) {
    let news = drift_news(sub, descriptions, Timestamp::now());
    if news.is_empty() {
        return;
    }
    let mut told = ctx.told.lock().unwrap_or_else(|p| p.into_inner());
    told.retain(|_, at| at.elapsed() < DRIFT_NEWS);
    for (key, reason, message) in news {
        if told.insert(key, std::time::Instant::now()).is_none() {
            ctx.events.warn(sub, reason, &message);
        }
    }
}

async fn reconcile(ctx: &Ctx, sub: Arc<Subscription>) -> Result<Action, AggregateError> {
    if sub.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let descriptions = ctx.descriptions.get(&sub.uid().unwrap_or_default());
    // only the binding clusters are looked up (by namespace/name), not the whole fleet
    let clusters: Vec<Arc<ManagedCluster>> = sub
        .status
        .iter()
        .flat_map(|s| s.binding_clusters.iter())
        .filter_map(|b| b.split_once('/'))
        .filter_map(|(ns, name)| ctx.clusters.get(&ObjectRef::new(name).within(ns)))
        .collect();
    let plan = plan_status(
        &sub,
        &clusters,
        &descriptions,
        &ctx.rt.config.reserved_namespace,
        &index::manifests_of(&ctx.manifests, &sub.spec.feeds),
        &ctx.charts.state(),
        Timestamp::now(),
    );
    if let Some((reason, message)) = &plan.warning {
        ctx.events.warn(sub.as_ref(), reason, message);
    }
    tell_drift(ctx, &sub, &descriptions);
    // a Subscription that is not Ready yet is looked at sooner: a child's object becoming
    // healthy changes its Description, but a cluster coming back does not
    let again = recheck(Duration::from_secs(if plan.ready { 300 } else { 30 }));
    let Some(owned) = plan.update else {
        return Ok(again);
    };
    let ns = sub.namespace().unwrap_or_default();
    let api: Api<Subscription> = Api::namespaced(ctx.rt.client.clone(), &ns);
    let body = apply::status_body(
        sub.as_ref(),
        json!({
            "aggregatedStatuses": owned.aggregated_statuses,
            "conditions": owned.conditions,
            "observedGeneration": owned.observed_generation,
        }),
    );
    apply::apply_status(&api, FIELD_MANAGER, &sub.name_any(), &body)
        .await
        .map_err(ApiFailure::about(
            sub.as_ref(),
            "writing its aggregated status",
        ))?;
    Ok(again)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sub(feeds: Value) -> Subscription {
        serde_json::from_value(json!({
            "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Subscription",
            "metadata": {"name": "app", "namespace": "default", "uid": "s-1"},
            "spec": {"subscribers": [{"clusterAffinity": {}}], "feeds": feeds},
            "status": {"bindingClusters": ["clusternet-a/a"],
                "conditions": [{"type": "Other", "status": "True", "reason": "R", "message": "",
                    "lastTransitionTime": "2024-01-01T00:00:00Z"}]}
        }))
        .expect("a Subscription")
    }

    fn cluster() -> Arc<ManagedCluster> {
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "clusters.clusternet.io/v1beta1", "kind": "ManagedCluster",
                "metadata": {"name": "a", "namespace": "clusternet-a"},
                "spec": {"clusterId": "id-a", "syncMode": "Pull"}}))
            .expect("a ManagedCluster"),
        )
    }

    fn manifest() -> Arc<Manifest> {
        crate::pipeline::feeds::test_manifest(json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "demo"}}))
    }

    fn description(available: i64) -> Arc<Description> {
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Description",
                "metadata": {"name": "app-x-generic", "namespace": "clusternet-a",
                    "labels": {known::CONFIG_SUBSCRIPTION_UID_LABEL: "s-1", known::CLUSTER_ID_LABEL: "id-a"}},
                "spec": {"deployer": "Generic"},
                "status": {"phase": "Success", "manifestStatuses": [
                    {"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "demo", "name": "web",
                     "observedStatus": {"replicas": 2, "availableReplicas": available, "readyReplicas": available}}]}
            }))
            .expect("a Description"),
        )
    }

    fn web() -> Value {
        json!([{"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "demo", "name": "web"}])
    }

    fn plan(
        sub: &Subscription,
        descs: &[Arc<Description>],
        manifests: &[Arc<Manifest>],
    ) -> StatusPlan {
        let now = Timestamp::from_second(1_000_000).expect("time");
        plan_status(
            sub,
            &[cluster()],
            descs,
            "clusternet-reserved",
            manifests,
            &[],
            now,
        )
    }

    #[test]
    fn aggregated_status_is_written_only_when_it_changes() {
        let mut s = sub(web());
        let p = plan(&s, &[description(2)], &[manifest()]);
        assert_eq!(p.warning, None);
        let owned = p.update.expect("a first write");
        let summary = &owned.aggregated_statuses[0].feed_status_summary;
        assert!(summary.available);
        assert_eq!(summary.replica_status.available_replicas, 2);
        assert_eq!(
            owned.aggregated_statuses[0].feed_status_details[0].cluster_id,
            "id-a"
        );
        // only its own conditions (the list is a map: "Other" is another controller's)
        let types: Vec<&str> = owned.conditions.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(types, [CONDITION_FEEDS_RESOLVED, "Ready", "Reconciling"]);
        // as written (beside the other one): nothing to do, even at another time
        let st = s.status.get_or_insert_with(Default::default);
        st.aggregated_statuses = owned.aggregated_statuses;
        st.conditions.extend(owned.conditions);
        st.observed_generation = owned.observed_generation;
        assert_eq!(
            plan(&s, &[description(2)], &[manifest()]),
            StatusPlan::default()
        );
        // a child reports less: written again
        let p = plan(&s, &[description(1)], &[manifest()]);
        let owned = p.update.expect("a write");
        assert!(!owned.aggregated_statuses[0].feed_status_summary.available);
    }

    #[test]
    fn a_missing_feed_is_never_available_and_warned_about_once() {
        let mut s = sub(web());
        let p = plan(&s, &[description(2)], &[]);
        let (reason, message) = p.warning.expect("a warning");
        assert_eq!(reason, "FeedNotFound");
        assert!(message.contains("Deployment demo/web"), "{message}");
        let owned = p.update.expect("a write");
        let agg = &owned.aggregated_statuses[0];
        assert!(
            !agg.feed_status_summary.available && !agg.feed_status_details[0].feed_status.available
        );
        let fr = owned.conditions.first().expect("FeedsResolved");
        assert_eq!(fr.status, "False");
        // kstatus: Stalled, for the same reason
        let stalled = owned.conditions.iter().find(|c| c.type_ == "Stalled");
        assert_eq!(stalled.map(|c| c.reason.as_str()), Some("FeedNotFound"));
        let st = s.status.get_or_insert_with(Default::default);
        st.aggregated_statuses = owned.aggregated_statuses;
        st.conditions = owned.conditions;
        st.observed_generation = owned.observed_generation;
        // still missing: no second warning, no write
        assert_eq!(plan(&s, &[description(2)], &[]), StatusPlan::default());
    }

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
