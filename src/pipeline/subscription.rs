//! Subscription -> Base (docs/spec/deployer.md §2-§3): one Base per binding cluster in that
//! cluster's dedicated namespace, carrying the Subscription's feeds, plus for Dividing
//! Subscriptions a priority-1000 Localization per workload feed that sets the cluster's share of
//! replicas. Bases of clusters no longer bound are deleted; deleting the Subscription deletes its
//! Bases first (finalizer `apps.clusternet.io/finalizer`).

use futures::StreamExt;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::runtime::controller::Action;
use crate::runtime::controller::Controller;
use crate::runtime::controller::{Event, finalizer};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta};
use kube::runtime::finalizer::Error as FinalizerError;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};
use serde_json::json;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::index;
use crate::apis::known;
use crate::apis::{
    Base, BaseSpec, FeedInventory, Localization, LocalizationSpec, ManagedCluster, OverrideConfig,
    OverridePolicy, OverrideType, SchedulingStrategy, Subscription,
};
use crate::kube_ext::random_suffix;
use crate::runtime::cache::{Expectations, Index, Shared};
use crate::runtime::controller::{ApiFailure, ReconcileError, named_by, recheck};
use crate::runtime::events::Events;
use crate::runtime::{Runtime, api_code, apply};

#[derive(Debug, thiserror::Error)]
pub enum SubscriptionError {
    #[error(transparent)]
    Api(#[from] ApiFailure),
    /// Not a failure: something it needs is not there yet (a FeedInventory), or its Bases are
    /// still being deleted. Logged quietly until it lasts (see `runtime::controller`).
    #[error("Subscription {sub}: {message}")]
    Waiting { sub: String, message: String },
    #[error("Subscription {sub}: encoding a Base: {source}")]
    Encode {
        sub: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("Subscription finalizer: {0}")]
    Finalizer(String),
}

impl ReconcileError for SubscriptionError {
    fn metric_label(&self) -> &'static str {
        match self {
            SubscriptionError::Api(_) => "api",
            SubscriptionError::Waiting { .. } => "waiting",
            SubscriptionError::Encode { .. } => "encode",
            SubscriptionError::Finalizer(_) => "finalizer",
        }
    }

    fn is_wait(&self) -> bool {
        matches!(self, SubscriptionError::Waiting { .. })
    }
}

pub const FIELD_MANAGER: &str = "clusternet/controller/subscription";

/// What the reconciler reads: the shared cache (so a burst of Subscriptions does not spend the
/// client's rate limit on reads), and the writes of its own the cache may not have seen yet.
struct Ctx {
    rt: Runtime,
    events: Events,
    /// The shared cache of Bases: read, and told of our own writes.
    bases: Shared<Base>,
    /// By Subscription uid.
    bases_by_subscription: Index<Base>,
    localizations: Store<Localization>,
    /// By namespace.
    localizations_by_namespace: Index<Localization>,
    namespaces: Store<Namespace>,
    /// By namespace.
    clusters: Index<ManagedCluster>,
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
    let from_bases = named_by(bases.subscribe(), |b: &Base| {
        index::subscription_named(b.labels())
    });
    let ctx = Arc::new(Ctx {
        events: Events::new(
            rt.events_client.clone(),
            known::CLUSTERNET_CONTROLLER_MANAGER_NAME,
        ),
        rt,
        bases_by_subscription: index::bases_by_subscription(&bases),
        bases: bases.clone(),
        localizations: locs.store.clone(),
        localizations_by_namespace: locs.by_namespace(),
        namespaces: namespaces.store.clone(),
        clusters: clusters.by_namespace(),
        expectations: Expectations::default(),
    });
    Controller::new("subscription", &subs)
        .concurrency(8)
        // an empty cache that has not listed yet would look like "no Bases": never decide from it
        .after([
            bases.listed(),
            locs.listed(),
            namespaces.listed(),
            clusters.listed(),
        ])
        .triggered_by(from_bases)
        .run(stop, move |sub| {
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
    .map_err(|e| match e {
        // the reconciler's own error, as it is: a wait for the Bases stays a wait
        FinalizerError::ApplyFailed(e) | FinalizerError::CleanupFailed(e) => e,
        e => SubscriptionError::Finalizer(e.to_string()),
    })
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
    if ctx
        .expectations
        .settled(&bases_group(uid), &ctx.bases.store)
    {
        return Ok(ctx
            .bases_by_subscription
            .get(uid)
            .iter()
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

/// One Base of a Subscription, bound to the cluster at `index` of `status.bindingClusters`.
#[derive(Debug, Clone, PartialEq)]
pub enum BaseChange {
    /// No Base in that cluster's namespace yet: apply this one (named afresh).
    Create(Base),
    /// The Base's feeds, our labels or our finalizer differ: apply what we own of it (`before`
    /// is the cached resourceVersion it replaces).
    Update {
        before: Option<String>,
        desired: Base,
    },
    /// Already as wanted.
    Unchanged(Base),
}

/// What a Subscription's Bases must become.
#[derive(Debug, Default, PartialEq)]
pub struct BasesPlan {
    /// Per binding cluster whose dedicated namespace exists, in `bindingClusters` order.
    pub bound: Vec<(usize, BaseChange)>,
    /// Bases of clusters no longer bound whose time has come.
    pub delete: Vec<Base>,
    /// When to look again at Bases kept for clusters that are unbound but not (long) healthy.
    pub recheck: Duration,
}

/// The Bases of `sub` from what the cache holds: `existing` (the Subscription's Bases),
/// `namespaces` (the labels of the binding clusters' dedicated namespaces that exist), `clusters`.
/// `new_name` names a new object after a prefix (random in production).
pub fn plan_bases(
    sub: &Subscription,
    existing: &[Base],
    namespaces: &BTreeMap<String, BTreeMap<String, String>>,
    clusters: &[Arc<ManagedCluster>],
    now: Timestamp,
    grace: Duration,
    new_name: &mut dyn FnMut(&str) -> String,
) -> BasesPlan {
    let key = key(sub);
    let status = sub.status.clone().unwrap_or_default();
    let mut plan = BasesPlan::default();
    let mut kept: Vec<(String, String)> = Vec::new();
    for (index, cluster) in status.binding_clusters.iter().enumerate() {
        let Some((cluster_ns, _)) = cluster.split_once('/') else {
            warn!(subscription = %key, entry = %cluster, "binding entry is not <namespace>/<name>");
            continue;
        };
        let Some(ns_labels) = namespaces.get(cluster_ns) else {
            continue;
        };
        // the cluster labels of a dedicated namespace are set when it is created
        let mut labels = sub_labels(sub);
        for l in [known::CLUSTER_ID_LABEL, known::CLUSTER_NAME_LABEL] {
            if let Some(v) = ns_labels.get(l) {
                labels.insert(l.to_string(), v.clone());
            }
        }
        let pin = rollout_pin(sub, cluster);
        let change = match newest_base(&key, existing, cluster_ns) {
            Some(b) => base_change(sub, b, cluster_ns, labels, pin),
            None => {
                let name = new_name(&sub.name_any());
                BaseChange::Create(desired_base(
                    sub,
                    cluster_ns,
                    &name,
                    labels,
                    sub.annotations(),
                    pin,
                ))
            }
        };
        let base = match &change {
            BaseChange::Create(b) | BaseChange::Unchanged(b) => b,
            BaseChange::Update { desired, .. } => desired,
        };
        kept.push((cluster_ns.to_string(), base.name_any()));
        plan.bound.push((index, change));
    }
    let (delete, recheck) = plan_unbound(&key, existing, &kept, clusters, now, grace);
    plan.delete = delete;
    plan.recheck = recheck;
    plan
}

/// The Base of the Subscription in `cluster_ns` (the newest, if more than one).
fn newest_base<'b>(key: &str, existing: &'b [Base], cluster_ns: &str) -> Option<&'b Base> {
    let mut mine: Vec<&Base> = existing
        .iter()
        .filter(|b| {
            b.namespace().as_deref() == Some(cluster_ns) && b.metadata.deletion_timestamp.is_none()
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
    mine.first().copied()
}

/// The revision a staged rollout pins the Base of `cluster` (a bindingClusters entry) to: what
/// the rollout controller's `status.rollout` says (docs/spec/deployer.md §16); none without a
/// RolloutStrategy.
fn rollout_pin<'s>(sub: &'s Subscription, cluster: &str) -> Option<&'s str> {
    sub.spec.rollout_strategy_name.as_ref()?;
    let rollout = sub.status.as_ref()?.rollout.as_deref()?;
    Some(super::rollout::pin_for(rollout, cluster))
}

/// Whether `b` carries the pin a rollout wants: `pin`, or none of ours when there is none.
fn pinned_as_wanted(b: &Base, pin: Option<&str>) -> bool {
    let a = b.annotations();
    match pin {
        Some(p) => a.get(known::REVISION_ANNOTATION).map(String::as_str) == Some(p),
        None => !a.contains_key(known::PINNED_BY_ANNOTATION),
    }
}

/// What the existing Base `b` needs: an update when its feeds, labels, finalizer, drift
/// settings or rollout pin differ from what the Subscription wants.
fn base_change(
    sub: &Subscription,
    b: &Base,
    cluster_ns: &str,
    labels: BTreeMap<String, String>,
    pin: Option<&str>,
) -> BaseChange {
    let has_labels = labels.iter().all(|(k, v)| b.labels().get(k) == Some(v));
    let needs = b.spec.feeds != sub.spec.feeds
        || !has_labels
        || !b.finalizers().iter().any(|f| f == known::APP_FINALIZER)
        || !same_drift_settings(sub.annotations(), b.annotations())
        || !pinned_as_wanted(b, pin);
    if !needs {
        return BaseChange::Unchanged(b.clone());
    }
    // an annotation set at creation stays ours (an apply without it would drop it); the drift
    // settings follow the Subscription
    let mut annotations = drift_settings(sub.annotations());
    annotations.extend(
        b.annotations()
            .iter()
            .filter(|(k, _)| *k == known::IS_DEFAULT_CLUSTER_INIT_ANNOTATION)
            .map(|(k, v)| (k.clone(), v.clone())),
    );
    let desired = desired_base(sub, cluster_ns, &b.name_any(), labels, &annotations, pin);
    BaseChange::Update {
        before: b.resource_version(),
        desired,
    }
}

/// The Bases in `existing` that are not `kept` (bound), by [`unbound_base_fate`]: those to
/// delete, and when to look again at the ones kept for now.
fn plan_unbound(
    key: &str,
    existing: &[Base],
    kept: &[(String, String)],
    clusters: &[Arc<ManagedCluster>],
    now: Timestamp,
    grace: Duration,
) -> (Vec<Base>, Duration) {
    let mut delete = Vec::new();
    let mut recheck = Duration::from_secs(300);
    for b in existing {
        let here = (b.namespace().unwrap_or_default(), b.name_any());
        if kept.contains(&here) || b.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let cluster = clusters
            .iter()
            .find(|c| c.namespace().as_deref() == Some(here.0.as_str()));
        match unbound_base_fate(cluster.map(|c| c.as_ref()), now, grace) {
            UnboundBase::Keep { recheck_in, why } => {
                debug!(subscription = %key, base = %format!("{}/{}", here.0, here.1), why, "keeping the Base of an unbound cluster");
                recheck = recheck.min(recheck_in);
            }
            UnboundBase::Delete => delete.push(b.clone()),
        }
    }
    (delete, recheck)
}

/// The drift annotations (policy, retained fields) of a Subscription, which its Bases and their
/// Descriptions carry to the side that deploys (an agent cannot read Subscriptions).
pub fn drift_settings(annotations: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    annotations
        .iter()
        .filter(|(k, _)| {
            *k == known::DRIFT_POLICY_ANNOTATION || *k == known::RETAIN_FIELDS_ANNOTATION
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// Whether two objects carry the same drift annotations.
pub fn same_drift_settings(a: &BTreeMap<String, String>, b: &BTreeMap<String, String>) -> bool {
    drift_settings(a) == drift_settings(b)
}

/// The Base we own in `ns`: our labels and finalizer, the default-cluster-init annotation when
/// `annotations` carry it, the rollout's pin, and the Subscription's feeds. (An apply without a
/// pin we set before removes it; a pin set by hand is not ours and stays.)
fn desired_base(
    sub: &Subscription,
    ns: &str,
    name: &str,
    labels: BTreeMap<String, String>,
    annotations: &BTreeMap<String, String>,
    pin: Option<&str>,
) -> Base {
    let mut annotations: BTreeMap<String, String> = annotations
        .iter()
        .filter(|(k, _)| *k == known::IS_DEFAULT_CLUSTER_INIT_ANNOTATION)
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    annotations.extend(drift_settings(sub.annotations()));
    if let Some(p) = pin {
        annotations.insert(known::REVISION_ANNOTATION.into(), p.into());
        annotations.insert(known::PINNED_BY_ANNOTATION.into(), "rollout".into());
    }
    let mut base = Base::new(
        name,
        BaseSpec {
            feeds: sub.spec.feeds.clone(),
        },
    );
    base.metadata.namespace = Some(ns.to_string());
    base.metadata.labels = Some(labels);
    base.metadata.annotations = (!annotations.is_empty()).then_some(annotations);
    base.metadata.finalizers = Some(vec![known::APP_FINALIZER.to_string()]);
    base
}

/// The labels of every dedicated namespace `sub` is bound to that exists: from the cache, or
/// from the API server for one the cache has not seen yet.
async fn binding_namespaces(
    ctx: &Ctx,
    sub: &Subscription,
) -> Result<BTreeMap<String, BTreeMap<String, String>>, SubscriptionError> {
    let api: Api<Namespace> = Api::all(ctx.rt.client.clone());
    let mut out = BTreeMap::new();
    let status = sub.status.clone().unwrap_or_default();
    for ns in status
        .binding_clusters
        .iter()
        .filter_map(|c| c.split_once('/').map(|(ns, _)| ns))
    {
        let found = match ctx.namespaces.get(&ObjectRef::new(ns)) {
            Some(n) => Some((*n).clone()),
            None => api
                .get_opt(ns)
                .await
                .map_err(ApiFailure::about(sub, format!("reading namespace {ns}")))?,
        };
        if let Some(n) = found {
            out.insert(ns.to_string(), n.labels().clone());
        }
    }
    Ok(out)
}

async fn populate(ctx: &Ctx, sub: &Subscription) -> Result<Action, SubscriptionError> {
    let rt = &ctx.rt;
    let err = |what: &'static str| ApiFailure::about(sub, what);
    let uid = sub.uid().unwrap_or_default();
    let existing = bases_of(ctx, &uid).await.map_err(err("listing Bases"))?;
    let namespaces = binding_namespaces(ctx, sub).await?;
    let inventory = if sub.spec.scheduling_strategy == Some(SchedulingStrategy::Dividing) {
        Api::<FeedInventory>::namespaced(rt.client.clone(), &sub.namespace().unwrap_or_default())
            .get_opt(&sub.name_any())
            .await
            .map_err(err("reading the FeedInventory"))?
    } else {
        None
    };
    // the clusters of the namespaces its Bases are in (an unbound one's fate depends on it)
    let mut base_namespaces: Vec<String> = existing.iter().filter_map(|b| b.namespace()).collect();
    base_namespaces.sort();
    base_namespaces.dedup();
    let clusters: Vec<Arc<ManagedCluster>> = base_namespaces
        .iter()
        .flat_map(|ns| ctx.clusters.get(ns))
        .collect();
    let plan = plan_bases(
        sub,
        &existing,
        &namespaces,
        &clusters,
        Timestamp::now(),
        rt.config.unbound_keep_window(),
        &mut |prefix| format!("{prefix}-{}", random_suffix(5)),
    );
    // one Base per cluster, written side by side: a Subscription for 100 clusters does not wait
    // for 100 round trips in turn (each Base is still written at most once)
    let inventory = inventory.as_ref();
    let written: Vec<Result<(), SubscriptionError>> = futures::stream::iter(plan.bound)
        .map(|(index, change)| async move {
            let base = apply_base(ctx, sub, change).await?;
            dividing_localizations(ctx, sub, &base, index, inventory).await
        })
        .buffer_unordered(BASE_WRITES_AT_ONCE)
        .collect()
        .await;
    written.into_iter().collect::<Result<(), _>>()?;
    for b in &plan.delete {
        delete_base(ctx, sub, b).await?;
    }
    Ok(recheck(plan.recheck))
}

/// How many Bases of one Subscription are written at once.
const BASE_WRITES_AT_ONCE: usize = 16;

/// The I/O of one [`BaseChange`]: the Base as it is after it.
async fn apply_base(
    ctx: &Ctx,
    sub: &Subscription,
    change: BaseChange,
) -> Result<Base, SubscriptionError> {
    let uid = sub.uid().unwrap_or_default();
    let (desired, before, verb, what) = match change {
        BaseChange::Unchanged(b) => return Ok(b),
        BaseChange::Create(desired) => (desired, None, "Created", "creating a Base"),
        BaseChange::Update { before, desired } => (desired, before, "Updated", "updating a Base"),
    };
    let ns = desired.namespace().unwrap_or_default();
    let api: Api<Base> = Api::namespaced(ctx.rt.client.clone(), &ns);
    let body = serde_json::to_value(&desired).map_err(|source| SubscriptionError::Encode {
        sub: key(sub),
        source,
    })?;
    let b = apply::apply(&api, FIELD_MANAGER, &desired.name_any(), &body)
        .await
        .map_err(ApiFailure::about(sub, what))?;
    ctx.expectations
        .written(&bases_group(&uid), Some(&ns), &b.name_any(), before);
    // the Base controller in this process renders it without waiting for the watch
    ctx.bases.observe_write(b.clone());
    let base = format!("{ns}/{}", b.name_any());
    info!(subscription = %key(sub), base = %base, "Base{verb}");
    let message = format!("Base {base} is {} successfully", verb.to_lowercase());
    ctx.events.normal(sub, &format!("Base{verb}"), &message);
    Ok(b)
}

async fn delete_base(ctx: &Ctx, sub: &Subscription, b: &Base) -> Result<(), SubscriptionError> {
    let (ns, name) = (b.namespace().unwrap_or_default(), b.name_any());
    let api: Api<Base> = Api::namespaced(ctx.rt.client.clone(), &ns);
    match api.delete(&name, &DeleteParams::background()).await {
        Ok(_) => {
            let group = bases_group(&sub.uid().unwrap_or_default());
            ctx.expectations
                .deleted(&group, Some(&ns), &name, b.resource_version());
            info!(subscription = %key(sub), base = %format!("{ns}/{name}"), "deleted a Base of an unbound cluster");
            Ok(())
        }
        Err(e) if api_code(&e) == Some(404) => Ok(()),
        Err(source) => Err(ApiFailure::about(sub, "deleting a Base")(source).into()),
    }
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

/// One write to the dividing Localizations of a Base.
#[derive(Debug, Clone, PartialEq)]
pub enum LocalizationChange {
    Create(Localization),
    /// `before` is the cached resourceVersion it replaces.
    Update {
        before: Option<String>,
        desired: Box<Localization>,
    },
    Delete(Localization),
}

/// deployer.md §3: the per-cluster replica count of each workload feed of a Dividing
/// Subscription, as a priority-1000 Localization in the Base's namespace; `existing` are the
/// Subscription's dividing Localizations there. Those of feeds without a share (or of a
/// Subscription that is not Dividing) go. `Err` while a Dividing Subscription has no FeedInventory.
pub fn plan_localizations(
    sub: &Subscription,
    base: &Base,
    index: usize,
    inventory: Option<&FeedInventory>,
    existing: &[Localization],
    new_name: &mut dyn FnMut(&str) -> String,
) -> Result<Vec<LocalizationChange>, String> {
    let key = key(sub);
    let mut changes = Vec::new();
    let mut wanted: Vec<String> = Vec::new();
    if sub.spec.scheduling_strategy == Some(SchedulingStrategy::Dividing) {
        let Some(inv) = inventory else {
            return Err("no FeedInventory yet".into());
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
            let spec = replica_localization_spec(&order.feed, &order.replica_json_path, *count);
            let current = existing
                .iter()
                .find(|l| l.spec.feed == order.feed && l.metadata.deletion_timestamp.is_none());
            match current {
                Some(l) if l.spec == spec => wanted.push(l.name_any()),
                Some(l) => {
                    // the owner stays whatever it is (an apply without it would drop it)
                    let owners = l.metadata.owner_references.clone();
                    let desired = desired_localization(sub, base, &l.name_any(), owners, spec);
                    wanted.push(l.name_any());
                    changes.push(LocalizationChange::Update {
                        before: l.resource_version(),
                        desired: Box::new(desired),
                    });
                }
                None => {
                    let name = new_name(&base.name_any());
                    let owners = base.controller_owner_ref(&()).map(|r| vec![r]);
                    wanted.push(name.clone());
                    changes.push(LocalizationChange::Create(desired_localization(
                        sub, base, &name, owners, spec,
                    )));
                }
            }
        }
    }
    changes.extend(
        existing
            .iter()
            .filter(|l| !wanted.contains(&l.name_any()))
            .map(|l| LocalizationChange::Delete(l.clone())),
    );
    Ok(changes)
}

pub(crate) fn replica_localization_spec(
    feed: &crate::apis::Feed,
    path: &str,
    count: i32,
) -> LocalizationSpec {
    LocalizationSpec {
        override_policy: Some(OverridePolicy::ApplyNow),
        overrides: vec![OverrideConfig {
            name: "dividing scheduling replicas".into(),
            value: json!([{"path": path, "value": count, "op": "replace"}]).to_string(),
            type_: OverrideType::JsonPatch,
            override_chart: false,
            field_path: String::new(),
            field_format: None,
        }],
        priority: 1000,
        feed: feed.clone(),
    }
}

fn desired_localization(
    sub: &Subscription,
    base: &Base,
    name: &str,
    owners: Option<Vec<OwnerReference>>,
    spec: LocalizationSpec,
) -> Localization {
    let mut loc = Localization::new(name, spec);
    loc.metadata = ObjectMeta {
        name: Some(name.to_string()),
        namespace: base.namespace(),
        labels: Some(BTreeMap::from([
            (
                known::OBJECT_CREATED_BY_LABEL.to_string(),
                known::CLUSTERNET_CONTROLLER_MANAGER_NAME.to_string(),
            ),
            (
                sub.uid().unwrap_or_default(),
                known::SUBSCRIPTION_KIND.to_string(),
            ),
        ])),
        owner_references: owners,
        ..Default::default()
    };
    loc
}

/// The dividing Localizations of `sub` in `ns`: from the cache, or from the API server while the
/// cache may still miss one of this reconciler's own writes.
async fn localizations_of(
    ctx: &Ctx,
    sub: &Subscription,
    ns: &str,
) -> Result<Vec<Localization>, kube::Error> {
    let sub_uid = sub.uid().unwrap_or_default();
    if ctx
        .expectations
        .settled(&localizations_group(&sub_uid, ns), &ctx.localizations)
    {
        return Ok(ctx
            .localizations_by_namespace
            .get(ns)
            .iter()
            .filter(|l| {
                let labels = l.labels();
                labels.get(&sub_uid).map(String::as_str) == Some(known::SUBSCRIPTION_KIND)
                    && labels
                        .get(known::OBJECT_CREATED_BY_LABEL)
                        .map(String::as_str)
                        == Some(known::CLUSTERNET_CONTROLLER_MANAGER_NAME)
            })
            .map(|l| (**l).clone())
            .collect());
    }
    let api: Api<Localization> = Api::namespaced(ctx.rt.client.clone(), ns);
    Ok(api
        .list(&ListParams::default().labels(&format!(
            "{sub_uid}={},{}={}",
            known::SUBSCRIPTION_KIND,
            known::OBJECT_CREATED_BY_LABEL,
            known::CLUSTERNET_CONTROLLER_MANAGER_NAME
        )))
        .await?
        .items)
}

/// Observes, plans and applies the dividing Localizations of one Base.
async fn dividing_localizations(
    ctx: &Ctx,
    sub: &Subscription,
    base: &Base,
    index: usize,
    inventory: Option<&FeedInventory>,
) -> Result<(), SubscriptionError> {
    let ns = base.namespace().unwrap_or_default();
    let err = |what: &'static str| ApiFailure::about(sub, what);
    let existing = localizations_of(ctx, sub, &ns)
        .await
        .map_err(err("listing dividing Localizations"))?;
    let changes = plan_localizations(sub, base, index, inventory, &existing, &mut |prefix| {
        format!("{prefix}-{}", random_suffix(5))
    })
    .map_err(|message| SubscriptionError::Waiting {
        sub: key(sub),
        message,
    })?;
    let api: Api<Localization> = Api::namespaced(ctx.rt.client.clone(), &ns);
    let group = localizations_group(&sub.uid().unwrap_or_default(), &ns);
    for change in changes {
        let (desired, before, what) = match change {
            LocalizationChange::Create(d) => (d, None, "creating a dividing Localization"),
            LocalizationChange::Update { before, desired } => {
                (*desired, before, "updating a dividing Localization")
            }
            LocalizationChange::Delete(l) => {
                match api.delete(&l.name_any(), &DeleteParams::default()).await {
                    Ok(_) => ctx.expectations.deleted(
                        &group,
                        Some(&ns),
                        &l.name_any(),
                        l.resource_version(),
                    ),
                    Err(e) if api_code(&e) == Some(404) => {}
                    Err(e) => return Err(err("deleting a dividing Localization")(e).into()),
                }
                continue;
            }
        };
        let body = json!(desired);
        apply::apply(&api, FIELD_MANAGER, &desired.name_any(), &body)
            .await
            .map_err(err(what))?;
        ctx.expectations
            .written(&group, Some(&ns), &desired.name_any(), before);
    }
    Ok(())
}

/// Deleting a Subscription: its Bases go first (their Descriptions and child objects after them).
async fn cleanup(ctx: &Ctx, sub: &Subscription) -> Result<Action, SubscriptionError> {
    let rt = &ctx.rt;
    let key = key(sub);
    let uid = sub.uid().unwrap_or_default();
    let list_err = || ApiFailure::about(sub, "listing Bases");
    let mut bases = bases_of(ctx, &uid).await.map_err(list_err())?;
    if bases.is_empty() {
        // releasing the Subscription is final: "no Bases left" is confirmed at the API server
        let all: Api<Base> = Api::all(rt.client.clone());
        bases = all
            .list(
                &ListParams::default()
                    .labels(&format!("{}={uid}", known::CONFIG_SUBSCRIPTION_UID_LABEL)),
            )
            .await
            .map_err(list_err())?
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
                return Err(ApiFailure::about(sub, "deleting a Base")(source).into());
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

    fn subscription(strategy: &str, bound: &[&str]) -> Subscription {
        serde_json::from_value(json!({
            "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Subscription",
            "metadata": {"name": "app", "namespace": "default", "uid": "s-1",
                "annotations": {known::IS_DEFAULT_CLUSTER_INIT_ANNOTATION: "true", "unrelated": "x"}},
            "spec": {"schedulingStrategy": strategy, "subscribers": [{"clusterAffinity": {}}],
                "feeds": [{"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "demo", "name": "web"}]},
            "status": {"bindingClusters": bound,
                "replicas": {"apps/v1/Deployment/demo/web": [2, 4]}}
        }))
        .expect("a Subscription")
    }

    fn namespaces(names: &[&str]) -> BTreeMap<String, BTreeMap<String, String>> {
        names
            .iter()
            .map(|n| {
                let labels =
                    BTreeMap::from([(known::CLUSTER_ID_LABEL.to_string(), format!("id-{n}"))]);
                (n.to_string(), labels)
            })
            .collect()
    }

    fn counter() -> impl FnMut(&str) -> String {
        let mut n = 0;
        move |prefix| {
            n += 1;
            format!("{prefix}-{n}")
        }
    }

    fn plan(sub: &Subscription, existing: &[Base], clusters: &[Arc<ManagedCluster>]) -> BasesPlan {
        let now = Timestamp::from_second(10_000).expect("time");
        let ns = namespaces(&["clusternet-a", "clusternet-b"]);
        plan_bases(
            sub,
            existing,
            &ns,
            clusters,
            now,
            Duration::from_secs(60),
            &mut counter(),
        )
    }

    /// The Base `plan_bases` would create, as the API server then holds it.
    fn created(sub: &Subscription, ns: &str) -> Base {
        let p = plan(sub, &[], &[]);
        let b = p.bound.into_iter().find_map(|(_, c)| match c {
            BaseChange::Create(b) if b.namespace().as_deref() == Some(ns) => Some(b),
            _ => None,
        });
        let mut b = b.expect("a Base to create");
        b.metadata.uid = Some(format!("uid-{ns}"));
        b.metadata.resource_version = Some("1".into());
        b
    }

    #[test]
    fn every_bound_cluster_with_a_namespace_gets_one_base() {
        let sub = subscription(
            "Replication",
            &["clusternet-a/a", "clusternet-b/b", "clusternet-c/c", "junk"],
        );
        let p = plan(&sub, &[], &[]);
        // clusternet-c has no namespace (yet) and "junk" is no <namespace>/<name>
        let made: Vec<(usize, String, String)> = p
            .bound
            .iter()
            .map(|(i, c)| match c {
                BaseChange::Create(b) => (*i, b.namespace().unwrap_or_default(), b.name_any()),
                other => panic!("a create: {other:?}"),
            })
            .collect();
        assert_eq!(
            made,
            [
                (0, "clusternet-a".into(), "app-1".into()),
                (1, "clusternet-b".into(), "app-2".into())
            ]
        );
        let BaseChange::Create(b) = &p.bound[0].1 else {
            unreachable!()
        };
        assert_eq!(
            b.labels().get(known::CLUSTER_ID_LABEL).map(String::as_str),
            Some("id-clusternet-a")
        );
        assert_eq!(
            b.labels()
                .get(known::CONFIG_SUBSCRIPTION_UID_LABEL)
                .map(String::as_str),
            Some("s-1")
        );
        assert_eq!(b.finalizers(), [known::APP_FINALIZER]);
        // only the default-cluster-init annotation is carried over
        assert_eq!(
            b.annotations().keys().collect::<Vec<_>>(),
            [known::IS_DEFAULT_CLUSTER_INIT_ANNOTATION]
        );
        assert_eq!(b.spec.feeds, sub.spec.feeds);
        // the apply body names the kind and has no status or server fields
        let body = serde_json::to_value(b).expect("json");
        assert_eq!(
            (body["apiVersion"].as_str(), body["kind"].as_str()),
            (Some("apps.clusternet.io/v1alpha1"), Some("Base"))
        );
        assert!(
            body.get("status").is_none() && body["metadata"].get("resourceVersion").is_none(),
            "{body}"
        );
        assert!(p.delete.is_empty());
    }

    #[test]
    fn a_base_as_wanted_is_not_written_and_a_stale_one_is_updated_keeping_its_annotation() {
        let sub = subscription("Replication", &["clusternet-a/a"]);
        let mut b = created(&sub, "clusternet-a");
        b.labels_mut()
            .insert("someone-elses".into(), "label".into());
        let p = plan(&sub, std::slice::from_ref(&b), &[]);
        assert_eq!(p.bound, vec![(0, BaseChange::Unchanged(b.clone()))]);
        // new feeds: an update of that Base; the annotation it was created with stays ours
        let mut edited = sub.clone();
        edited.spec.feeds[0].name = "api".into();
        edited.metadata.annotations = None;
        let p = plan(&edited, std::slice::from_ref(&b), &[]);
        let [(0, BaseChange::Update { desired, .. })] = p.bound.as_slice() else {
            panic!("an update: {:?}", p.bound);
        };
        assert_eq!(desired.name_any(), b.name_any());
        assert_eq!(desired.spec.feeds[0].name, "api");
        assert!(
            desired
                .annotations()
                .contains_key(known::IS_DEFAULT_CLUSTER_INIT_ANNOTATION)
        );
        assert!(
            !desired.labels().contains_key("someone-elses"),
            "only what we own"
        );
        // our finalizer gone: update
        let mut no_fin = b.clone();
        no_fin.metadata.finalizers = None;
        let p = plan(&sub, &[no_fin], &[]);
        assert!(matches!(
            p.bound.as_slice(),
            [(0, BaseChange::Update { .. })]
        ));
    }

    #[test]
    fn the_newest_base_of_a_cluster_is_used_and_unbound_ones_follow_their_fate() {
        let sub = subscription("Replication", &["clusternet-a/a"]);
        let mut old = created(&sub, "clusternet-a");
        old.metadata.name = Some("app-old".into());
        old.metadata.creation_timestamp = Some(Time(Timestamp::from_second(1).expect("time")));
        let mut new = old.clone();
        new.metadata.name = Some("app-new".into());
        new.metadata.creation_timestamp = Some(Time(Timestamp::from_second(2).expect("time")));
        let p = plan(&sub, &[old.clone(), new.clone()], &[]);
        assert_eq!(p.bound, vec![(0, BaseChange::Unchanged(new.clone()))]);
        // the older one is not bound: its cluster is gone, so it goes
        assert_eq!(p.delete, vec![old.clone()]);
        // a Base of an unbound cluster that is not ready stays, looked at again after the grace
        let unbound = subscription("Replication", &[]);
        let mut mc = cluster(Some(("Unknown", 9_000)));
        mc.metadata.namespace = Some("clusternet-a".into());
        let p = plan(&unbound, &[new.clone()], &[Arc::new(mc)]);
        assert!(p.bound.is_empty() && p.delete.is_empty());
        assert_eq!(p.recheck, Duration::from_secs(60));
        // one being deleted is left alone
        let mut going = new;
        going.metadata.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
        assert!(plan(&unbound, &[going], &[]).delete.is_empty());
    }

    fn inventory() -> FeedInventory {
        serde_json::from_value(json!({
            "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "FeedInventory",
            "metadata": {"name": "app", "namespace": "default"},
            "spec": {"feeds": [
                {"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "demo", "name": "web",
                 "desiredReplicas": 6, "replicaJsonPath": "/spec/replicas"}]}
        }))
        .expect("a FeedInventory")
    }

    #[test]
    fn a_dividing_base_gets_its_share_as_a_localization() {
        let sub = subscription("Dividing", &["clusternet-a/a", "clusternet-b/b"]);
        let base = created(&sub, "clusternet-b");
        let inv = inventory();
        assert!(plan_localizations(&sub, &base, 1, None, &[], &mut counter()).is_err());
        let changes =
            plan_localizations(&sub, &base, 1, Some(&inv), &[], &mut counter()).expect("a plan");
        let [LocalizationChange::Create(loc)] = changes.as_slice() else {
            panic!("one create: {changes:?}");
        };
        assert_eq!(loc.namespace().as_deref(), Some("clusternet-b"));
        assert_eq!(loc.spec.priority, 1000);
        assert!(
            loc.spec.overrides[0].value.contains("\"value\":4"),
            "{:?}",
            loc.spec.overrides
        );
        assert_eq!(
            loc.labels().get("s-1").map(String::as_str),
            Some(known::SUBSCRIPTION_KIND)
        );
        assert_eq!(
            loc.metadata
                .owner_references
                .as_ref()
                .map(|o| o[0].uid.as_str()),
            Some("uid-clusternet-b")
        );
        // in place: nothing to write; another share: an update that keeps the owner
        let mut current = loc.clone();
        current.metadata.owner_references = None;
        let none = plan_localizations(
            &sub,
            &base,
            1,
            Some(&inv),
            std::slice::from_ref(&current),
            &mut counter(),
        );
        assert_eq!(none, Ok(vec![]));
        let changes = plan_localizations(
            &sub,
            &base,
            0,
            Some(&inv),
            std::slice::from_ref(&current),
            &mut counter(),
        )
        .expect("a plan");
        let [LocalizationChange::Update { desired, .. }] = changes.as_slice() else {
            panic!("one update: {changes:?}");
        };
        assert!(desired.spec.overrides[0].value.contains("\"value\":2"));
        assert_eq!(desired.name_any(), current.name_any());
        assert_eq!(desired.metadata.owner_references, None);
        // no longer Dividing: it goes
        let replicated = subscription("Replication", &["clusternet-a/a"]);
        let changes = plan_localizations(
            &replicated,
            &base,
            0,
            None,
            std::slice::from_ref(&current),
            &mut counter(),
        );
        assert_eq!(changes, Ok(vec![LocalizationChange::Delete(current)]));
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
