//! Base -> Description (shared/spec/deployer.md §4-§5): the feeds of a Base are resolved to their
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
use tracing::{info, warn};

use super::{feeds, overrides};
use crate::apis::known;
use crate::apis::{
    Base, Description, DescriptionDeployer, DescriptionSpec, Globalization, Localization,
    ManagedCluster, Manifest, OverridePolicy,
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
}

pub async fn run(rt: Runtime, stop: CancellationToken) {
    let bases = rt.cache.watch::<Base>();
    let manifests = rt.cache.watch::<Manifest>();
    let locs = rt.cache.watch::<Localization>();
    let globs = rt.cache.watch::<Globalization>();
    let clusters = rt.cache.watch::<ManagedCluster>();
    let descs = rt.cache.watch::<Description>();
    // an empty cache that has not listed yet would look like "no Description": never decide from it
    for s in [
        manifests.ready().await,
        locs.ready().await,
        descs.ready().await,
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
    });
    crate::clusters::run_controller_with("base", bases, 8, stop, also, move |base| {
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
            problems.push(format!(
                "feed {feed}: Helm charts are not supported by this build yet"
            ));
            continue;
        }
        let found = feeds::find(feed, &reserved, &manifests);
        if found.is_empty() {
            let message = format!("Base {key} is using a nonexistent {feed}");
            ctx.events
                .warn(base, &format!("Nonexistent{}", feed.kind), &message)
                .await;
            return Err(BaseError::Feed { base: key, message });
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
                    ctx.events
                        .warn(base, "FailedRenderingOverrides", &message)
                        .await;
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
            }
        }
        break;
    }
    // other Descriptions of this Base (e.g. a -helm one whose charts are gone)
    let base_uid = base.uid().unwrap_or_default();
    let others = ctx.descriptions.state_filter(|d| {
        d.namespace().as_deref() == Some(ns.as_str())
            && d.labels().get(known::CONFIG_UID_LABEL) == Some(&base_uid)
    });
    for d in others
        .iter()
        .filter(|d| d.name_any() != name && d.metadata.deletion_timestamp.is_none())
    {
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
        Ok(Action::requeue(Duration::from_secs(10)))
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
