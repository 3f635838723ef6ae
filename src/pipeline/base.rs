//! Base -> Description (docs/spec/deployer.md §4-§5): the feeds of a Base are resolved to their
//! Manifests, each template is rendered with the Globalizations and Localizations that apply to
//! it, and the result is written as Description `<base>-generic`. An unchanged Description is not
//! rewritten. A rendering error (a broken patch, say) is reported as a Warning event on the Base
//! and that object keeps its previously rendered form, so nothing is pruned by mistake.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::ByteString;
use kube::api::{Api, DeleteParams, ObjectMeta, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{Event, finalizer};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::{feeds, overrides};
use crate::apis::known;
use crate::apis::{
    Base, Description, DescriptionDeployer, DescriptionSpec, FeedInventory, Globalization,
    Localization, ManagedCluster, Manifest, OverridePolicy, SchedulingStrategy, Subscription,
};
use crate::runtime::events::Events;
use crate::runtime::{Runtime, api_code};

#[derive(Debug, thiserror::Error)]
pub enum BaseError {
    #[error("Base {base}: {what}: {source}")]
    Api {
        base: String,
        what: &'static str,
        #[source]
        source: kube::Error,
    },
    #[error("Base {base}: {message}")]
    Feed { base: String, message: String },
    #[error("Base finalizer: {0}")]
    Finalizer(String),
}

struct Ctx {
    rt: Runtime,
    events: Events,
    manifests: Store<Manifest>,
    localizations: Store<Localization>,
    globalizations: Store<Globalization>,
    clusters: Store<ManagedCluster>,
    descriptions: Store<Description>,
    subscriptions: Store<Subscription>,
    inventories: Store<FeedInventory>,
}

pub async fn run(rt: Runtime, stop: CancellationToken) {
    let bases = rt.cache.watch::<Base>();
    let manifests = rt.cache.watch::<Manifest>();
    let locs = rt.cache.watch::<Localization>();
    let globs = rt.cache.watch::<Globalization>();
    let clusters = rt.cache.watch::<ManagedCluster>();
    let descs = rt.cache.watch::<Description>();
    let subs = rt.cache.watch::<Subscription>();
    let inventories = rt.cache.watch::<FeedInventory>();
    // an empty cache that has not listed yet would look like "no Description": never decide from it
    for s in [
        manifests.ready().await,
        locs.ready().await,
        descs.ready().await,
        subs.ready().await,
        inventories.ready().await,
    ] {
        if !s {
            return;
        }
    }
    // re-render the Bases a changed Manifest or override refers to
    let base_store = bases.store.clone();
    let by_feed = move |matches: Box<dyn Fn(&Base) -> bool + Send>| {
        base_store
            .state()
            .iter()
            .filter(|b| matches(b))
            .map(|b| ObjectRef::from_obj(b.as_ref()))
            .collect::<Vec<_>>()
    };
    let by_feed = Arc::new(by_feed);
    let f1 = by_feed.clone();
    let from_manifests = manifests.subscribe().flat_map(move |m| {
        let labels = m.labels().clone();
        futures::stream::iter(f1(Box::new(move |b: &Base| {
            b.spec.feeds.iter().any(|f| feeds::matches(f, &labels))
        })))
    });
    let f2 = by_feed.clone();
    // only ApplyNow overrides re-render at once; ApplyLater ones wait for the next render (§5.1)
    let apply_now = |p: &Option<OverridePolicy>| *p == Some(OverridePolicy::ApplyNow);
    let from_locs = locs
        .subscribe()
        .filter(move |l| futures::future::ready(apply_now(&l.spec.override_policy)))
        .flat_map(move |l| {
            let (ns, feed) = (l.namespace().unwrap_or_default(), l.spec.feed.clone());
            futures::stream::iter(f2(Box::new(move |b: &Base| {
                b.namespace().as_deref() == Some(ns.as_str())
                    && b.spec.feeds.iter().any(|f| same_feed(f, &feed))
            })))
        });
    let f3 = by_feed.clone();
    let from_globs = globs
        .subscribe()
        .filter(move |g| futures::future::ready(apply_now(&g.spec.override_policy)))
        .flat_map(move |g| {
            let feed = g.spec.feed.clone();
            futures::stream::iter(f3(Box::new(move |b: &Base| {
                b.spec.feeds.iter().any(|f| same_feed(f, &feed))
            })))
        });
    let also = futures::stream::select(
        from_manifests,
        futures::stream::select(from_locs, from_globs),
    );
    let ctx = Arc::new(Ctx {
        events: Events::new(rt.client.clone(), known::CLUSTERNET_CONTROLLER_MANAGER_NAME),
        rt,
        manifests: manifests.store.clone(),
        localizations: locs.store.clone(),
        globalizations: globs.store.clone(),
        clusters: clusters.store.clone(),
        descriptions: descs.store.clone(),
        subscriptions: subs.store.clone(),
        inventories: inventories.store.clone(),
    });
    crate::runtime::controller::run_with("base", bases, 8, stop, also, move |base| {
        let ctx = ctx.clone();
        async move { reconcile(&ctx, base).await }
    })
    .await;
}

fn same_feed(a: &crate::apis::Feed, b: &crate::apis::Feed) -> bool {
    a.kind == b.kind
        && a.api_version == b.api_version
        && a.name == b.name
        && (a.namespace.is_empty() || b.namespace.is_empty() || a.namespace == b.namespace)
}

fn key(b: &Base) -> String {
    format!("{}/{}", b.namespace().unwrap_or_default(), b.name_any())
}

async fn reconcile(ctx: &Ctx, base: Arc<Base>) -> Result<Action, BaseError> {
    let api: Api<Base> =
        Api::namespaced(ctx.rt.client.clone(), &base.namespace().unwrap_or_default());
    finalizer(&api, known::APP_FINALIZER, base, |event| async {
        match event {
            Event::Apply(base) => render(ctx, &base).await,
            // Descriptions follow by owner-reference garbage collection; their finalizers clean the child
            Event::Cleanup(_) => Ok(Action::await_change()),
        }
    })
    .await
    .map_err(|e| BaseError::Finalizer(e.to_string()))
}

fn description_labels(base: &Base) -> BTreeMap<String, String> {
    let bl = base.labels();
    let mut l = BTreeMap::from([
        (
            known::OBJECT_CREATED_BY_LABEL.to_string(),
            known::CLUSTERNET_CONTROLLER_MANAGER_NAME.to_string(),
        ),
        (
            known::CONFIG_KIND_LABEL.to_string(),
            known::BASE_KIND.to_string(),
        ),
        (
            known::CONFIG_NAMESPACE_LABEL.to_string(),
            base.namespace().unwrap_or_default(),
        ),
        (
            known::CONFIG_UID_LABEL.to_string(),
            base.uid().unwrap_or_default(),
        ),
        // recommended by the spec (§13): makes aggregated status work
        (known::CONFIG_NAME_LABEL.to_string(), base.name_any()),
    ]);
    for k in [
        known::CLUSTER_ID_LABEL,
        known::CLUSTER_NAME_LABEL,
        known::CONFIG_SUBSCRIPTION_NAMESPACE_LABEL,
        known::CONFIG_SUBSCRIPTION_UID_LABEL,
        known::CONFIG_SUBSCRIPTION_NAME_LABEL,
    ] {
        if let Some(v) = bl.get(k) {
            l.insert(k.to_string(), v.clone());
        }
    }
    l
}

async fn render(ctx: &Ctx, base: &Base) -> Result<Action, BaseError> {
    let key = key(base);
    let ns = base.namespace().unwrap_or_default();
    let descs: Api<Description> = Api::namespaced(ctx.rt.client.clone(), &ns);
    let name = format!("{}-generic", base.name_any());
    // from the cache: a stale one only makes the write below fail (AlreadyExists or Conflict),
    // which is then retried once against a fresh read
    let mut existing: Option<Description> = ctx
        .descriptions
        .get(&ObjectRef::new(&name).within(&ns))
        .map(|d| (*d).clone());
    let previous: Vec<Value> = existing
        .iter()
        .flat_map(|d| d.spec.raw.iter())
        .filter_map(|r| serde_json::from_slice(&r.0).ok())
        .collect();
    let manifests = ctx.manifests.state();
    let reserved = ctx.rt.config.reserved_namespace.clone();
    let cluster_labels: Vec<BTreeMap<String, String>> = ctx
        .clusters
        .state()
        .iter()
        .filter(|c| c.namespace().as_deref() == Some(ns.as_str()))
        .map(|c| c.labels().clone())
        .collect();
    let locs: Vec<Localization> = ctx
        .localizations
        .state()
        .iter()
        .filter(|l| l.namespace().as_deref() == Some(ns.as_str()))
        .map(|l| (**l).clone())
        .collect();
    if let Some(sub) = subscription_of(ctx, base) {
        let inventory = ctx
            .inventories
            .get(&ObjectRef::new(&sub.name_any()).within(&sub.namespace().unwrap_or_default()));
        if let Err(waiting) = replica_localizations_in_place(&sub, inventory.as_deref(), &locs, &ns)
        {
            // the child must never see more than its share: a Dividing Base is first rendered
            // with its replica Localization (whose creation re-triggers this render)
            debug!(base = %key, waiting = %waiting, "not rendering yet");
            return Ok(Action::requeue(Duration::from_secs(5)));
        }
    }
    let globs: Vec<Globalization> = ctx
        .globalizations
        .state()
        .iter()
        .map(|g| (**g).clone())
        .collect();
    let mut rendered: Vec<Value> = Vec::new();
    let mut problems: Vec<String> = Vec::new();
    for feed in &base.spec.feeds {
        if feed.kind == "HelmChart" {
            let message = format!("feed {feed}: Helm charts are not supported by this build yet");
            ctx.events.warn(base, "NotImplemented", &message);
            problems.push(message);
            continue;
        }
        let found = feeds::find(feed, &reserved, &manifests);
        if found.is_empty() {
            let message = format!("Base {key} is using a nonexistent {feed}");
            // the other feeds still deploy; the Subscription's FeedsResolved condition and
            // aggregated status say this one is missing, and its creation re-renders this Base
            ctx.events
                .warn(base, &format!("Nonexistent{}", feed.kind), &message);
            problems.push(message);
            continue;
        }
        for m in found {
            let template = &m.spec.template;
            let applicable = overrides::applicable_overrides(
                &globs,
                &locs,
                &ns,
                &m.uid().unwrap_or_default(),
                m.labels()
                    .get(known::CONFIG_KIND_LABEL)
                    .map(String::as_str)
                    .unwrap_or(&feed.kind),
                Some(feed),
                &cluster_labels,
            );
            match overrides::render_generic(template, &applicable) {
                Ok(obj) => rendered.push(obj),
                Err(e) => {
                    let message = format!("rendering {feed} for {key}: {e}");
                    warn!(base = %key, error = %e, "override failed");
                    ctx.events.warn(base, "FailedApplyingOverrides", &message);
                    problems.push(message);
                    // keep what was deployed before for this object instead of pruning it
                    let r = super::super::deployer::generic::ObjectRef::of(template);
                    if let Some(prev) = previous.iter().find(|p| {
                        let pr = super::super::deployer::generic::ObjectRef::of(p);
                        matches!((&pr, &r), (Some(a), Some(b)) if a.kind == b.kind && a.name == b.name && a.namespace == b.namespace)
                    }) {
                        rendered.push(prev.clone());
                    }
                }
            }
        }
    }
    let spec = DescriptionSpec {
        deployer: DescriptionDeployer::Generic,
        charts: Vec::new(),
        raw: rendered
            .iter()
            .map(|o| ByteString(o.to_string().into_bytes()))
            .collect(),
        chart_raw: Vec::new(),
    };
    let labels = description_labels(base);
    // a Base of Helm charts only has no Generic Description (not an empty one that says Success)
    let generic_wanted = base.spec.feeds.iter().any(|f| f.kind != "HelmChart");
    if generic_wanted {
        let mut fresh = false;
        loop {
            // a write that fails because the cached Description was stale is redone once with a
            // fresh read (`retry`); anything else fails as before
            let retry = |e: &kube::Error, fresh: bool| !fresh && api_code(e) == Some(409);
            match existing {
                Some(d) if d.metadata.deletion_timestamp.is_some() => {
                    return Err(BaseError::Feed {
                        base: key,
                        message: format!("Description {name} is being deleted; waiting"),
                    });
                }
                Some(d) => {
                    let mut merged = d.labels().clone();
                    merged.extend(labels.clone());
                    if d.spec != spec || &merged != d.labels() {
                        let mut updated = d.clone();
                        updated.spec = spec.clone();
                        updated.metadata.labels = Some(merged);
                        match descs.replace(&name, &PostParams::default(), &updated).await {
                            Ok(_) => {}
                            Err(e) if retry(&e, fresh) => {
                                existing = read_description(&descs, &name, &key).await?;
                                fresh = true;
                                continue;
                            }
                            Err(source) => {
                                return Err(BaseError::Api {
                                    base: key.clone(),
                                    what: "updating the Description",
                                    source,
                                });
                            }
                        }
                        info!(base = %key, description = %name, "DescriptionUpdated");
                        ctx.events.normal(
                            base,
                            "DescriptionUpdated",
                            &format!("Description {ns}/{name} is updated successfully"),
                        );
                    }
                }
                None => {
                    let mut d = Description::new(&name, spec.clone());
                    d.metadata = ObjectMeta {
                        name: Some(name.clone()),
                        namespace: Some(ns.clone()),
                        labels: Some(labels.clone()),
                        finalizers: Some(vec![known::APP_FINALIZER.to_string()]),
                        owner_references: base.controller_owner_ref(&()).map(|r| vec![r]),
                        ..Default::default()
                    };
                    match descs.create(&PostParams::default(), &d).await {
                        Ok(_) => {}
                        Err(e) if retry(&e, fresh) => {
                            existing = read_description(&descs, &name, &key).await?;
                            fresh = true;
                            continue;
                        }
                        Err(source) => {
                            return Err(BaseError::Api {
                                base: key.clone(),
                                what: "creating the Description",
                                source,
                            });
                        }
                    }
                    info!(base = %key, description = %name, "DescriptionCreated");
                    ctx.events.normal(
                        base,
                        "DescriptionCreated",
                        &format!("Description {ns}/{name} is created successfully"),
                    );
                }
            }
            break;
        }
    }
    // other Descriptions of this Base (e.g. a -helm one whose charts are gone)
    let base_uid = base.uid().unwrap_or_default();
    let others = ctx.descriptions.state_filter(|d| {
        d.namespace().as_deref() == Some(ns.as_str())
            && d.labels().get(known::CONFIG_UID_LABEL) == Some(&base_uid)
    });
    for d in others.iter().filter(|d| {
        (d.name_any() != name || !generic_wanted) && d.metadata.deletion_timestamp.is_none()
    }) {
        match descs.delete(&d.name_any(), &DeleteParams::default()).await {
            Ok(_) => {}
            Err(e) if api_code(&e) == Some(404) => {}
            Err(source) => {
                return Err(BaseError::Api {
                    base: key,
                    what: "deleting a stale Description",
                    source,
                });
            }
        }
    }
    if problems.is_empty() {
        Ok(Action::requeue(Duration::from_secs(300)))
    } else {
        Ok(Action::requeue(Duration::from_secs(60)))
    }
}

/// The Subscription a Base belongs to, from the cache.
fn subscription_of(ctx: &Ctx, base: &Base) -> Option<Arc<Subscription>> {
    let labels = base.labels();
    let uid = labels.get(known::CONFIG_SUBSCRIPTION_UID_LABEL)?;
    let ns = labels.get(known::CONFIG_SUBSCRIPTION_NAMESPACE_LABEL)?;
    let by_name = labels
        .get(known::CONFIG_SUBSCRIPTION_NAME_LABEL)
        .and_then(|name| ctx.subscriptions.get(&ObjectRef::new(name).within(ns)));
    by_name
        .or_else(|| ctx.subscriptions.find(|s| s.uid().as_ref() == Some(uid)))
        .filter(|s| s.uid().as_ref() == Some(uid))
}

/// For a Dividing Subscription: `Err(what is missing)` until every workload feed that gets a
/// share of replicas has its dividing Localization (deployer.md §3) in the Base's namespace, so
/// the first rendering already carries the share instead of the feed's full replica count.
pub fn replica_localizations_in_place(
    sub: &Subscription,
    inventory: Option<&FeedInventory>,
    locs: &[Localization],
    ns: &str,
) -> Result<(), String> {
    if sub.spec.scheduling_strategy != Some(SchedulingStrategy::Dividing) {
        return Ok(());
    }
    let Some(inv) = inventory else {
        return Err("no FeedInventory yet".into());
    };
    let sub_uid = sub.uid().unwrap_or_default();
    let replicas = sub
        .status
        .as_ref()
        .map(|s| s.replicas.clone())
        .unwrap_or_default();
    let missing: Vec<String> = inv
        .spec
        .feeds
        .iter()
        .filter(|o| o.desired_replicas.is_some() && !o.replica_json_path.is_empty())
        .filter(|o| replicas.get(&o.feed.key()).is_some_and(|l| !l.is_empty()))
        .filter(|o| {
            !locs.iter().any(|l| {
                l.namespace().as_deref() == Some(ns)
                    && l.metadata.deletion_timestamp.is_none()
                    && l.labels().get(&sub_uid).map(String::as_str)
                        == Some(known::SUBSCRIPTION_KIND)
                    && l.spec.feed == o.feed
            })
        })
        .map(|o| o.feed.to_string())
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "the replica Localization of {} is not in place yet",
            missing.join(", ")
        ))
    }
}

/// The Description as the API server has it now (after a write against the cache failed).
async fn read_description(
    descs: &Api<Description>,
    name: &str,
    key: &str,
) -> Result<Option<Description>, BaseError> {
    descs.get_opt(name).await.map_err(|source| BaseError::Api {
        base: key.to_string(),
        what: "reading the Description",
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sub(strategy: &str) -> Subscription {
        serde_json::from_value(json!({
            "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Subscription",
            "metadata": {"name": "app", "namespace": "default", "uid": "u-1"},
            "spec": {"schedulingStrategy": strategy, "subscribers": [{"clusterAffinity": {}}],
                "feeds": [{"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "demo", "name": "web"},
                          {"apiVersion": "v1", "kind": "Service", "namespace": "demo", "name": "web"}]},
            "status": {"bindingClusters": ["clusternet-a/a", "clusternet-b/b"],
                "replicas": {"apps/v1/Deployment/demo/web": [2, 4], "v1/Service/demo/web": []}}
        }))
        .expect("a Subscription")
    }

    fn inventory() -> FeedInventory {
        serde_json::from_value(json!({
            "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "FeedInventory",
            "metadata": {"name": "app", "namespace": "default"},
            "spec": {"feeds": [
                {"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "demo", "name": "web",
                 "desiredReplicas": 6, "replicaJsonPath": "/spec/replicas"},
                {"apiVersion": "v1", "kind": "Service", "namespace": "demo", "name": "web"}]}
        }))
        .expect("a FeedInventory")
    }

    fn replica_loc(ns: &str, sub_uid: &str) -> Localization {
        serde_json::from_value(json!({
            "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Localization",
            "metadata": {"name": "app-abc", "namespace": ns,
                "labels": {sub_uid: "Subscription", "clusternet.io/created-by": "clusternet-controller-manager"}},
            "spec": {"priority": 1000, "overridePolicy": "ApplyNow",
                "feed": {"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "demo", "name": "web"},
                "overrides": [{"name": "dividing scheduling replicas", "type": "JSONPatch",
                    "value": "[{\"path\":\"/spec/replicas\",\"value\":2,\"op\":\"replace\"}]"}]}
        }))
        .expect("a Localization")
    }

    #[test]
    fn a_dividing_base_waits_for_its_replica_localization() {
        let inv = inventory();
        // Replication renders at once
        assert!(
            replica_localizations_in_place(&sub("Replication"), None, &[], "clusternet-a").is_ok()
        );
        // Dividing without an inventory or without the Localization waits
        let d = sub("Dividing");
        assert!(replica_localizations_in_place(&d, None, &[], "clusternet-a").is_err());
        let err =
            replica_localizations_in_place(&d, Some(&inv), &[], "clusternet-a").expect_err("waits");
        assert!(err.contains("Deployment demo/web"), "{err}");
        // a Localization of another namespace or Subscription does not count
        let other_ns = replica_loc("clusternet-b", "u-1");
        let other_sub = replica_loc("clusternet-a", "u-2");
        assert!(
            replica_localizations_in_place(&d, Some(&inv), &[other_ns, other_sub], "clusternet-a")
                .is_err()
        );
        // in place: render (the Service has no replicas and needs none)
        assert!(
            replica_localizations_in_place(
                &d,
                Some(&inv),
                &[replica_loc("clusternet-a", "u-1")],
                "clusternet-a"
            )
            .is_ok()
        );
    }
}
