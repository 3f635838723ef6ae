//! Subscription -> Base (docs/spec/deployer.md §2-§3): one Base per binding cluster in that
//! cluster's dedicated namespace, carrying the Subscription's feeds, plus for Dividing
//! Subscriptions a priority-1000 Localization per workload feed that sets the cluster's share of
//! replicas. Bases of clusters no longer bound are deleted; deleting the Subscription deletes its
//! Bases first (finalizer `apps.clusternet.io/finalizer`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{Event, finalizer};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};
use serde_json::json;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::apis::known;
use crate::apis::{
    Base, BaseSpec, FeedInventory, Localization, LocalizationSpec, ManagedCluster, OverrideConfig,
    OverridePolicy, OverrideType, SchedulingStrategy, Subscription,
};
use crate::kube_ext::random_suffix;
use crate::runtime::cache::Expectations;
use crate::runtime::events::Events;
use crate::runtime::{Runtime, api_code};

#[derive(Debug, thiserror::Error)]
pub enum SubscriptionError {
    #[error("Subscription {sub}: {what}: {source}")]
    Api {
        sub: String,
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error("Subscription {sub}: {message}")]
    Waiting { sub: String, message: String },
    #[error("Subscription finalizer: {0}")]
    Finalizer(String),
}

pub const FIELD_MANAGER: &str = "clusternet/controller/subscription";

/// What the reconciler reads: the shared cache (so a burst of Subscriptions does not spend the
/// client's rate limit on reads), and the writes of its own the cache may not have seen yet.
struct Ctx {
    rt: Runtime,
    events: Events,
    bases: Store<Base>,
    localizations: Store<Localization>,
    namespaces: Store<Namespace>,
    clusters: Store<ManagedCluster>,
    expectations: Expectations,
}

fn bases_group(sub_uid: &str) -> String {
    format!("bases/{sub_uid}")
}

fn localizations_group(sub_uid: &str, ns: &str) -> String {
    format!("localizations/{sub_uid}/{ns}")
}

pub async fn run(rt: Runtime, stop: CancellationToken) {
    let subs = rt.cache.watch::<Subscription>();
    // a deleted Base re-triggers its Subscription (it may still be bound there)
    let bases = rt.cache.watch::<Base>();
    let locs = rt.cache.watch::<Localization>();
    let namespaces = rt.cache.watch::<Namespace>();
    let clusters = rt.cache.watch::<ManagedCluster>();
    // an empty cache that has not listed yet would look like "no Bases": never decide from it
    for ready in [
        bases.ready().await,
        locs.ready().await,
        namespaces.ready().await,
        clusters.ready().await,
    ] {
        if !ready {
            return;
        }
    }
    let also = futures::StreamExt::filter_map(bases.subscribe(), |b| async move {
        let labels = b.labels();
        let ns = labels.get(known::CONFIG_SUBSCRIPTION_NAMESPACE_LABEL)?;
        let name = labels.get(known::CONFIG_SUBSCRIPTION_NAME_LABEL)?;
        Some(kube::runtime::reflector::ObjectRef::new(name).within(ns))
    });
    let ctx = Arc::new(Ctx {
        events: Events::new(rt.client.clone(), known::CLUSTERNET_CONTROLLER_MANAGER_NAME),
        rt,
        bases: bases.store.clone(),
        localizations: locs.store.clone(),
        namespaces: namespaces.store.clone(),
        clusters: clusters.store.clone(),
        expectations: Expectations::default(),
    });
    crate::runtime::controller::run_with("subscription", subs, 8, stop, also, move |sub| {
        let ctx = ctx.clone();
        async move { reconcile(&ctx, sub).await }
    })
    .await;
}

fn key(sub: &Subscription) -> String {
    format!("{}/{}", sub.namespace().unwrap_or_default(), sub.name_any())
}

async fn reconcile(ctx: &Ctx, sub: Arc<Subscription>) -> Result<Action, SubscriptionError> {
    let ns = sub.namespace().unwrap_or_default();
    let api: Api<Subscription> = Api::namespaced(ctx.rt.client.clone(), &ns);
    finalizer(&api, known::APP_FINALIZER, sub, |event| async {
        match event {
            Event::Apply(sub) => populate(ctx, &sub).await,
            Event::Cleanup(sub) => cleanup(ctx, &sub).await,
        }
    })
    .await
    .map_err(|e| SubscriptionError::Finalizer(e.to_string()))
}

fn sub_labels(sub: &Subscription) -> BTreeMap<String, String> {
    let ns = sub.namespace().unwrap_or_default();
    let name = sub.name_any();
    let uid = sub.uid().unwrap_or_default();
    let mut l = BTreeMap::from([
        (
            known::OBJECT_CREATED_BY_LABEL.to_string(),
            known::CLUSTERNET_CONTROLLER_MANAGER_NAME.to_string(),
        ),
        (
            known::CONFIG_KIND_LABEL.to_string(),
            known::SUBSCRIPTION_KIND.to_string(),
        ),
        (known::CONFIG_NAMESPACE_LABEL.to_string(), ns.clone()),
        (known::CONFIG_UID_LABEL.to_string(), uid.clone()),
        (known::CONFIG_SUBSCRIPTION_NAMESPACE_LABEL.to_string(), ns),
        (known::CONFIG_SUBSCRIPTION_UID_LABEL.to_string(), uid),
    ]);
    if name.len() <= known::MAX_SUBSCRIPTION_NAME_IN_LABELS {
        l.insert(known::CONFIG_NAME_LABEL.to_string(), name.clone());
        l.insert(known::CONFIG_SUBSCRIPTION_NAME_LABEL.to_string(), name);
    }
    l
}

/// The Bases of a Subscription: from the cache, or from the API server while the cache may still
/// miss one of this reconciler's own writes.
async fn bases_of(ctx: &Ctx, uid: &str) -> Result<Vec<Base>, kube::Error> {
    if ctx.expectations.settled(&bases_group(uid), &ctx.bases) {
        return Ok(ctx
            .bases
            .state()
            .iter()
            .filter(|b| {
                b.labels()
                    .get(known::CONFIG_SUBSCRIPTION_UID_LABEL)
                    .is_some_and(|v| v == uid)
            })
            .map(|b| (**b).clone())
            .collect());
    }
    let all_bases: Api<Base> = Api::all(ctx.rt.client.clone());
    Ok(all_bases
        .list(
            &ListParams::default()
                .labels(&format!("{}={uid}", known::CONFIG_SUBSCRIPTION_UID_LABEL)),
        )
        .await?
        .items)
}

async fn populate(ctx: &Ctx, sub: &Subscription) -> Result<Action, SubscriptionError> {
    let rt = &ctx.rt;
    let key = key(sub);
    let err = |what: String| {
        let sub = key.clone();
        move |source| SubscriptionError::Api { sub, what, source }
    };
    let uid = sub.uid().unwrap_or_default();
    let status = sub.status.clone().unwrap_or_default();
    let existing = bases_of(ctx, &uid)
        .await
        .map_err(err("listing Bases".into()))?;
    let namespaces: Api<Namespace> = Api::all(rt.client.clone());
    let mut kept: Vec<(String, String)> = Vec::new();
    let inventory = if sub.spec.scheduling_strategy == Some(SchedulingStrategy::Dividing) {
        Api::<FeedInventory>::namespaced(rt.client.clone(), &sub.namespace().unwrap_or_default())
            .get_opt(&sub.name_any())
            .await
            .map_err(err("reading the FeedInventory".into()))?
    } else {
        None
    };
    for (index, cluster) in status.binding_clusters.iter().enumerate() {
        let Some((cluster_ns, _)) = cluster.split_once('/') else {
            warn!(subscription = %key, entry = %cluster, "binding entry is not <namespace>/<name>");
            continue;
        };
        // the cluster labels of a dedicated namespace are set when it is created; a namespace
        // the cache has not seen yet is looked up at the API server
        let cached = ctx.namespaces.get(&ObjectRef::new(cluster_ns));
        let Some(ns_obj) = (match cached {
            Some(n) => Some((*n).clone()),
            None => namespaces
                .get_opt(cluster_ns)
                .await
                .map_err(err(format!("reading namespace {cluster_ns}")))?,
        }) else {
            continue;
        };
        let ns_labels = ns_obj.labels().clone();
        let mut labels = sub_labels(sub);
        for l in [known::CLUSTER_ID_LABEL, known::CLUSTER_NAME_LABEL] {
            if let Some(v) = ns_labels.get(l) {
                labels.insert(l.to_string(), v.clone());
            }
        }
        let mut mine: Vec<&Base> = existing
            .iter()
            .filter(|b| {
                b.namespace().as_deref() == Some(cluster_ns)
                    && b.metadata.deletion_timestamp.is_none()
            })
            .collect();
        mine.sort_by_key(|b| {
            std::cmp::Reverse((
                b.metadata.creation_timestamp.as_ref().map(|t| t.0),
                b.name_any(),
            ))
        });
        if mine.len() > 1 {
            warn!(subscription = %key, namespace = cluster_ns, "MultipleBases: more than one Base for this cluster; using the newest");
        }
        let bases: Api<Base> = Api::namespaced(rt.client.clone(), cluster_ns);
        let base = match mine.first() {
            Some(b) => {
                let mut merged = b.labels().clone();
                merged.extend(labels.clone());
                let needs = b.spec.feeds != sub.spec.feeds
                    || &merged != b.labels()
                    || !b.finalizers().iter().any(|f| f == known::APP_FINALIZER);
                if needs {
                    let mut updated = (*b).clone();
                    updated.metadata.labels = Some(merged);
                    updated.spec = BaseSpec {
                        feeds: sub.spec.feeds.clone(),
                    };
                    let fins = updated.metadata.finalizers.get_or_insert_with(Vec::new);
                    if !fins.iter().any(|f| f == known::APP_FINALIZER) {
                        fins.push(known::APP_FINALIZER.to_string());
                    }
                    let before = b.resource_version();
                    let b = bases
                        .replace(&b.name_any(), &PostParams::default(), &updated)
                        .await
                        .map_err(err("updating a Base".into()))?;
                    ctx.expectations.written(
                        &bases_group(&uid),
                        Some(cluster_ns),
                        &b.name_any(),
                        before,
                    );
                    info!(subscription = %key, base = %format!("{cluster_ns}/{}", b.name_any()), "BaseUpdated");
                    ctx.events.normal(
                        sub,
                        "BaseUpdated",
                        &format!("Base {cluster_ns}/{} is updated successfully", b.name_any()),
                    );
                    b
                } else {
                    (*b).clone()
                }
            }
            None => {
                let mut annotations = BTreeMap::new();
                if let Some(v) = sub
                    .annotations()
                    .get(known::IS_DEFAULT_CLUSTER_INIT_ANNOTATION)
                {
                    annotations.insert(
                        known::IS_DEFAULT_CLUSTER_INIT_ANNOTATION.to_string(),
                        v.clone(),
                    );
                }
                let mut base = Base::new(
                    &format!("{}-{}", sub.name_any(), random_suffix(5)),
                    BaseSpec {
                        feeds: sub.spec.feeds.clone(),
                    },
                );
                base.metadata.namespace = Some(cluster_ns.to_string());
                base.metadata.labels = Some(labels);
                base.metadata.annotations = (!annotations.is_empty()).then_some(annotations);
                base.metadata.finalizers = Some(vec![known::APP_FINALIZER.to_string()]);
                let b = bases
                    .create(&PostParams::default(), &base)
                    .await
                    .map_err(err("creating a Base".into()))?;
                ctx.expectations
                    .written(&bases_group(&uid), Some(cluster_ns), &b.name_any(), None);
                info!(subscription = %key, base = %format!("{cluster_ns}/{}", b.name_any()), "BaseCreated");
                ctx.events.normal(
                    sub,
                    "BaseCreated",
                    &format!("Base {cluster_ns}/{} is created successfully", b.name_any()),
                );
                b
            }
        };
        kept.push((cluster_ns.to_string(), base.name_any()));
        dividing_localizations(ctx, sub, &base, index, inventory.as_ref()).await?;
    }
    let mut recheck = Duration::from_secs(300);
    for b in &existing {
        let here = (b.namespace().unwrap_or_default(), b.name_any());
        if !kept.contains(&here) && b.metadata.deletion_timestamp.is_none() {
            let cluster = ctx
                .clusters
                .state()
                .into_iter()
                .find(|c| c.namespace().as_deref() == Some(here.0.as_str()));
            if let UnboundBase::Keep { recheck_in, why } = unbound_base_fate(
                cluster.as_deref(),
                Timestamp::now(),
                rt.config.cluster_recovery_grace,
            ) {
                debug!(subscription = %key, base = %format!("{}/{}", here.0, here.1), why, "keeping the Base of an unbound cluster");
                recheck = recheck.min(recheck_in);
                continue;
            }
            let bases: Api<Base> = Api::namespaced(rt.client.clone(), &here.0);
            match bases.delete(&here.1, &DeleteParams::background()).await {
                Ok(_) => {
                    ctx.expectations.deleted(
                        &bases_group(&uid),
                        Some(&here.0),
                        &here.1,
                        b.resource_version(),
                    );
                    info!(subscription = %key, base = %format!("{}/{}", here.0, here.1), "deleted a Base of an unbound cluster")
                }
                Err(e) if api_code(&e) == Some(404) => {}
                Err(e) => return Err(err("deleting a Base".into())(e)),
            }
        }
    }
    Ok(Action::requeue(recheck))
}

/// What happens to the Base of a cluster the Subscription is no longer bound to.
#[derive(Debug, PartialEq)]
pub enum UnboundBase {
    Delete,
    Keep {
        recheck_in: Duration,
        why: &'static str,
    },
}

/// A cluster that is not ready, or only recently Ready again, keeps the Bases it was unbound from:
/// losing a cluster (a heartbeat hiccup, a partition) must never delete what runs there; its objects
/// go only once it has been Ready for `grace` and is still unbound (by then the scheduler has had
/// the chance to bind it again). A cluster that is gone, or was unbound while healthy (relabelled,
/// say), loses its Bases at once.
pub fn unbound_base_fate(
    cluster: Option<&ManagedCluster>,
    now: Timestamp,
    grace: Duration,
) -> UnboundBase {
    let Some(cluster) = cluster else {
        return UnboundBase::Delete;
    };
    if cluster.metadata.deletion_timestamp.is_some() {
        return UnboundBase::Delete;
    }
    let ready = cluster
        .status
        .as_ref()
        .and_then(|s| s.condition(crate::apis::clusters::CONDITION_READY));
    match ready {
        Some(c) if c.status == "True" => {
            let ready_for = now.duration_since(c.last_transition_time.0).unsigned_abs();
            if ready_for >= grace {
                UnboundBase::Delete
            } else {
                UnboundBase::Keep {
                    recheck_in: grace - ready_for + Duration::from_millis(100),
                    why: "the cluster is Ready again only recently",
                }
            }
        }
        _ => UnboundBase::Keep {
            recheck_in: grace,
            why: "the cluster is not ready",
        },
    }
}

/// deployer.md §3: the per-cluster replica count of each workload feed, as a Localization.
async fn dividing_localizations(
    ctx: &Ctx,
    sub: &Subscription,
    base: &Base,
    index: usize,
    inventory: Option<&FeedInventory>,
) -> Result<(), SubscriptionError> {
    let key = key(sub);
    let ns = base.namespace().unwrap_or_default();
    let sub_uid = sub.uid().unwrap_or_default();
    let err = |what: &'static str| {
        let sub = key.clone();
        move |source| SubscriptionError::Api {
            sub,
            what: what.to_string(),
            source,
        }
    };
    let api: Api<Localization> = Api::namespaced(ctx.rt.client.clone(), &ns);
    let group = localizations_group(&sub_uid, &ns);
    let existing = if ctx.expectations.settled(&group, &ctx.localizations) {
        ctx.localizations
            .state()
            .iter()
            .filter(|l| {
                let labels = l.labels();
                l.namespace().as_deref() == Some(ns.as_str())
                    && labels.get(&sub_uid).map(String::as_str) == Some(known::SUBSCRIPTION_KIND)
                    && labels
                        .get(known::OBJECT_CREATED_BY_LABEL)
                        .map(String::as_str)
                        == Some(known::CLUSTERNET_CONTROLLER_MANAGER_NAME)
            })
            .map(|l| (**l).clone())
            .collect()
    } else {
        api.list(&ListParams::default().labels(&format!(
            "{sub_uid}={},{}={}",
            known::SUBSCRIPTION_KIND,
            known::OBJECT_CREATED_BY_LABEL,
            known::CLUSTERNET_CONTROLLER_MANAGER_NAME
        )))
        .await
        .map_err(err("listing dividing Localizations"))?
        .items
    };
    let mut wanted: Vec<String> = Vec::new();
    if sub.spec.scheduling_strategy == Some(SchedulingStrategy::Dividing) {
        let Some(inv) = inventory else {
            return Err(SubscriptionError::Waiting {
                sub: key,
                message: "no FeedInventory yet".into(),
            });
        };
        let replicas = sub.status.clone().unwrap_or_default().replicas;
        for order in &inv.spec.feeds {
            if order.desired_replicas.is_none() {
                continue;
            }
            let Some(list) = replicas.get(&order.feed.key()).filter(|l| !l.is_empty()) else {
                continue;
            };
            if order.replica_json_path.is_empty() {
                warn!(subscription = %key, feed = %order.feed, "ReplicaJsonPathUnset");
                continue;
            }
            let Some(count) = list.get(index) else {
                warn!(subscription = %key, feed = %order.feed, "BadSchedulingResult: fewer replica entries than clusters");
                continue;
            };
            let spec = LocalizationSpec {
                override_policy: Some(OverridePolicy::ApplyNow),
                overrides: vec![OverrideConfig {
                    name: "dividing scheduling replicas".into(),
                    value:
                        json!([{"path": order.replica_json_path, "value": count, "op": "replace"}])
                            .to_string(),
                    type_: OverrideType::JsonPatch,
                    override_chart: false,
                    field_path: String::new(),
                    field_format: None,
                }],
                priority: 1000,
                feed: order.feed.clone(),
            };
            let current = existing
                .iter()
                .find(|l| l.spec.feed == order.feed && l.metadata.deletion_timestamp.is_none());
            match current {
                Some(l) if l.spec == spec => wanted.push(l.name_any()),
                Some(l) => {
                    let mut updated = l.clone();
                    updated.spec = spec;
                    api.replace(&l.name_any(), &PostParams::default(), &updated)
                        .await
                        .map_err(err("updating a dividing Localization"))?;
                    ctx.expectations.written(
                        &group,
                        Some(&ns),
                        &l.name_any(),
                        l.resource_version(),
                    );
                    wanted.push(l.name_any());
                }
                None => {
                    let name = format!("{}-{}", base.name_any(), random_suffix(5));
                    let mut loc = Localization::new(&name, spec);
                    loc.metadata = ObjectMeta {
                        name: Some(name.clone()),
                        namespace: Some(ns.clone()),
                        labels: Some(BTreeMap::from([
                            (
                                known::OBJECT_CREATED_BY_LABEL.to_string(),
                                known::CLUSTERNET_CONTROLLER_MANAGER_NAME.to_string(),
                            ),
                            (sub_uid.clone(), known::SUBSCRIPTION_KIND.to_string()),
                        ])),
                        owner_references: base.controller_owner_ref(&()).map(|r| vec![r]),
                        ..Default::default()
                    };
                    api.create(&PostParams::default(), &loc)
                        .await
                        .map_err(err("creating a dividing Localization"))?;
                    ctx.expectations.written(&group, Some(&ns), &name, None);
                    wanted.push(name);
                }
            }
        }
    }
    for l in existing.iter().filter(|l| !wanted.contains(&l.name_any())) {
        match api.delete(&l.name_any(), &DeleteParams::default()).await {
            Ok(_) => {
                ctx.expectations
                    .deleted(&group, Some(&ns), &l.name_any(), l.resource_version())
            }
            Err(e) if api_code(&e) == Some(404) => {}
            Err(e) => return Err(err("deleting a dividing Localization")(e)),
        }
    }
    Ok(())
}

/// Deleting a Subscription: its Bases go first (their Descriptions and child objects after them).
async fn cleanup(ctx: &Ctx, sub: &Subscription) -> Result<Action, SubscriptionError> {
    let rt = &ctx.rt;
    let key = key(sub);
    let uid = sub.uid().unwrap_or_default();
    let list_err = |source| SubscriptionError::Api {
        sub: key.clone(),
        what: "listing Bases".into(),
        source,
    };
    let mut bases = bases_of(ctx, &uid).await.map_err(list_err)?;
    if bases.is_empty() {
        // releasing the Subscription is final: "no Bases left" is confirmed at the API server
        let all: Api<Base> = Api::all(rt.client.clone());
        bases = all
            .list(
                &ListParams::default()
                    .labels(&format!("{}={uid}", known::CONFIG_SUBSCRIPTION_UID_LABEL)),
            )
            .await
            .map_err(list_err)?
            .items;
    }
    if bases.is_empty() {
        info!(subscription = %key, "all Bases gone: releasing the Subscription");
        return Ok(Action::await_change());
    }
    for b in bases
        .iter()
        .filter(|b| b.metadata.deletion_timestamp.is_none())
    {
        let api: Api<Base> = Api::namespaced(rt.client.clone(), &b.namespace().unwrap_or_default());
        match api.delete(&b.name_any(), &DeleteParams::background()).await {
            Ok(_) => ctx.expectations.deleted(
                &bases_group(&uid),
                b.namespace().as_deref(),
                &b.name_any(),
                b.resource_version(),
            ),
            Err(e) if api_code(&e) == Some(404) => {}
            Err(source) => {
                return Err(SubscriptionError::Api {
                    sub: key,
                    what: "deleting a Base".into(),
                    source,
                });
            }
        }
    }
    Err(SubscriptionError::Waiting {
        sub: key,
        message: format!("waiting for {} Base(s) to be deleted", bases.len()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

    fn cluster(ready: Option<(&str, i64)>) -> ManagedCluster {
        let mut mc: ManagedCluster = serde_json::from_value(json!({
            "apiVersion": "clusters.clusternet.io/v1beta1", "kind": "ManagedCluster",
            "metadata": {"name": "c", "namespace": "clusternet-abc"},
            "spec": {"clusterId": "x", "syncMode": "Pull"}}))
        .expect("a ManagedCluster");
        if let Some((status, secs)) = ready {
            mc.status = Some(crate::apis::ManagedClusterStatus {
                conditions: vec![Condition {
                    type_: "Ready".into(),
                    status: status.into(),
                    reason: String::new(),
                    message: String::new(),
                    last_transition_time: Time(
                        Timestamp::from_second(secs).unwrap_or(Timestamp::UNIX_EPOCH),
                    ),
                    observed_generation: None,
                }],
                ..Default::default()
            });
        }
        mc
    }

    #[test]
    fn a_lost_cluster_keeps_its_bases_until_it_is_ready_again_for_the_grace() {
        let grace = Duration::from_secs(60);
        let now = Timestamp::from_second(10_000).expect("time");
        // gone: delete
        assert_eq!(unbound_base_fate(None, now, grace), UnboundBase::Delete);
        // not ready (Unknown or False): keep, look again after the grace
        for s in ["Unknown", "False"] {
            assert!(matches!(
                unbound_base_fate(Some(&cluster(Some((s, 9_000)))), now, grace),
                UnboundBase::Keep { recheck_in, .. } if recheck_in == grace
            ));
        }
        // never reported: keep
        assert!(matches!(
            unbound_base_fate(Some(&cluster(None)), now, grace),
            UnboundBase::Keep { .. }
        ));
        // Ready again 20 s ago: keep for the remaining 40 s
        assert!(matches!(
            unbound_base_fate(Some(&cluster(Some(("True", 9_980)))), now, grace),
            UnboundBase::Keep { recheck_in, .. }
                if recheck_in > Duration::from_secs(40) && recheck_in < Duration::from_secs(41)
        ));
        // Ready for longer than the grace (unbound while healthy, e.g. relabelled): delete
        assert_eq!(
            unbound_base_fate(Some(&cluster(Some(("True", 9_000)))), now, grace),
            UnboundBase::Delete
        );
    }
}
