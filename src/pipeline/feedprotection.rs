//! Feed-in-use protection (gate `FeedInUseProtection`, docs/spec/deployer.md §6): every feed a
//! Subscription can name, a Manifest (the shadow API's objects) or a HelmChart, carries the
//! `apps.clusternet.io/feed-protection` finalizer, as upstream puts it on both, and deleting one
//! that a Subscription still uses is held back: the object says which Subscriptions hold it
//! (annotation `apps.clusternet.io/feed-protection`, also shown by the shadow API, and a Warning
//! event `FeedInUse`) and goes once the last of them is deleted or no longer lists it. While it is
//! held it still exists, so what runs in the children from it stays as it is (a Helm release is
//! not uninstalled). Without the gate the finalizer is released, so nothing stays blocked.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::runtime::controller::Action;
use crate::runtime::controller::Controller;
use k8s_openapi::NamespaceResourceScope;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::Store;
use kube::{Resource, ResourceExt};
use serde_json::json;
use tokio_util::sync::CancellationToken;
use tracing::info;

use super::feeds;
use crate::apis::known;
use crate::apis::{HelmChart, Manifest, Subscription};
use crate::runtime::cache::Shared;
use crate::runtime::controller::{ApiFailure, ReconcileError, through_index};
use crate::runtime::events::Events;
use crate::runtime::{Runtime, api_code};

#[derive(Debug, thiserror::Error)]
pub enum ProtectionError {
    #[error(transparent)]
    Api(#[from] ApiFailure),
}

impl ReconcileError for ProtectionError {
    fn metric_label(&self) -> &'static str {
        match self {
            ProtectionError::Api(_) => "api",
        }
    }
}

/// A kind a Subscription can name as a feed.
pub trait ProtectedFeed:
    Resource<DynamicType = (), Scope = NamespaceResourceScope>
    + Clone
    + std::fmt::Debug
    + serde::de::DeserializeOwned
    + serde::Serialize
    + Send
    + Sync
    + 'static
{
    /// The controller's name (metrics, logs).
    const CONTROLLER: &'static str;
    /// The kind, in errors and logs.
    const KIND: &'static str;
    /// The labels a Subscription's feed is matched against ([`feeds::matches`]).
    fn feed_labels(&self) -> BTreeMap<String, String>;
}

impl ProtectedFeed for Manifest {
    const CONTROLLER: &'static str = "feedprotection";
    const KIND: &'static str = "Manifest";
    fn feed_labels(&self) -> BTreeMap<String, String> {
        self.labels().clone()
    }
}

impl ProtectedFeed for HelmChart {
    const CONTROLLER: &'static str = "feedprotection-helmchart";
    const KIND: &'static str = "HelmChart";
    /// Computed rather than read: a chart created a moment ago may not carry its labels yet.
    fn feed_labels(&self) -> BTreeMap<String, String> {
        super::helmchart::feed_labels(self)
    }
}

struct Ctx {
    rt: Runtime,
    events: Events,
    subscriptions: Store<Subscription>,
}

pub async fn run(rt: Runtime, stop: CancellationToken) {
    let subs = rt.cache.watch::<Subscription>();
    let ctx = Arc::new(Ctx {
        events: Events::new(
            rt.events_client.clone(),
            known::CLUSTERNET_CONTROLLER_MANAGER_NAME,
        ),
        subscriptions: subs.store.clone(),
        rt,
    });
    tokio::join!(
        protect::<Manifest>(ctx.clone(), &subs, stop.clone()),
        protect::<HelmChart>(ctx, &subs, stop),
    );
}

async fn protect<K: ProtectedFeed>(
    ctx: Arc<Ctx>,
    subs: &Shared<Subscription>,
    stop: CancellationToken,
) {
    let objects = ctx.rt.cache.watch::<K>();
    // a Subscription that goes away (or drops a feed) may release a feed being deleted
    let deleting = through_index(
        subs.subscribe(),
        super::index::deleting(&objects),
        |_: &Subscription| vec![String::new()],
        |_: &K, _: &Subscription| true,
    );
    Controller::new(K::CONTROLLER, &objects)
        .after([subs.listed()])
        .triggered_by(deleting)
        .run(stop, move |o| {
            let ctx = ctx.clone();
            async move { reconcile(&ctx, o).await }
        })
        .await;
}

/// The Subscriptions (`namespace/name`, sorted) that use `feed`.
pub fn holders<K: ProtectedFeed>(feed: &K, subs: &[Arc<Subscription>]) -> Vec<String> {
    let labels = feed.feed_labels();
    let mut out: Vec<String> = subs
        .iter()
        .filter(|s| s.metadata.deletion_timestamp.is_none())
        .filter(|s| s.spec.feeds.iter().any(|f| feeds::matches(f, &labels)))
        .map(|s| format!("{}/{}", s.namespace().unwrap_or_default(), s.name_any()))
        .collect();
    out.sort();
    out
}

/// Upstream's annotation text for a feed whose deletion is held back.
pub fn blocked_message<K: ProtectedFeed>(feed: &K, holders: &[String]) -> String {
    let kind = feed
        .feed_labels()
        .get(known::CONFIG_KIND_LABEL)
        .cloned()
        .unwrap_or_else(|| K::KIND.to_string());
    format!(
        "block deleting current {kind} until all Subscriptions (including {}) that refer this as a feed get deleted",
        holders.join(", ")
    )
}

fn key(o: &impl ResourceExt) -> String {
    format!("{}/{}", o.namespace().unwrap_or_default(), o.name_any())
}

fn api_error<K: ProtectedFeed>(
    o: &K,
    what: &'static str,
) -> impl FnOnce(kube::Error) -> ProtectionError {
    let fail = ApiFailure::about(o, what);
    move |source| fail(source).into()
}

async fn reconcile<K: ProtectedFeed>(ctx: &Ctx, o: Arc<K>) -> Result<Action, ProtectionError> {
    let api: Api<K> = Api::namespaced(ctx.rt.client.clone(), &o.namespace().unwrap_or_default());
    let has = o
        .finalizers()
        .iter()
        .any(|f| f == known::FEED_PROTECTION_FINALIZER);
    let gate = ctx.rt.config.gate(known::FEED_IN_USE_PROTECTION);
    let deleting = o.meta().deletion_timestamp.is_some();
    if !deleting {
        if gate && !has {
            let mut fins = o.finalizers().to_vec();
            fins.push(known::FEED_PROTECTION_FINALIZER.to_string());
            patch_finalizers(&api, o.as_ref(), fins).await?;
        }
        return Ok(Action::await_change());
    }
    if !has {
        return Ok(Action::await_change());
    }
    let mut holders = if gate {
        holders(o.as_ref(), &ctx.subscriptions.state())
    } else {
        Vec::new()
    };
    if gate && holders.is_empty() {
        // Releasing the finalizer deletes the user's feed for good, so the cache's "nobody holds
        // it" is confirmed by a fresh read: a Subscription created a moment ago may not have
        // reached the watch yet (the feed's deletion can overtake it on its own stream).
        holders = live_holders(ctx, o.as_ref()).await?;
    }
    if holders.is_empty() {
        let fins = o
            .finalizers()
            .iter()
            .filter(|f| *f != known::FEED_PROTECTION_FINALIZER)
            .cloned()
            .collect();
        patch_finalizers(&api, o.as_ref(), fins).await?;
        info!(kind = K::KIND, object = %key(o.as_ref()), "no Subscription uses it any more: deletion proceeds");
        return Ok(Action::await_change());
    }
    let message = blocked_message(o.as_ref(), &holders);
    if o.annotations().get(known::FEED_PROTECTION_ANNOTATION) != Some(&message) {
        let patch =
            json!({"metadata": {"annotations": {known::FEED_PROTECTION_ANNOTATION: message}}});
        api.patch(
            &o.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .map_err(api_error(
            o.as_ref(),
            "writing the feed-protection annotation",
        ))?;
        ctx.events.warn(o.as_ref(), "FeedInUse", &message);
    }
    // the Subscriptions' changes re-trigger this; the requeue is a safety net
    Ok(Action::requeue(Duration::from_secs(60)))
}

/// [`holders`] over a quorum read of every Subscription (rare: only when a held feed is about to go).
async fn live_holders<K: ProtectedFeed>(ctx: &Ctx, o: &K) -> Result<Vec<String>, ProtectionError> {
    let subs = Api::<Subscription>::all(ctx.rt.client.clone())
        .list(&Default::default())
        .await
        .map_err(api_error(
            o,
            "listing the Subscriptions that may still use it",
        ))?;
    let subs: Vec<Arc<Subscription>> = subs.items.into_iter().map(Arc::new).collect();
    Ok(holders(o, &subs))
}

async fn patch_finalizers<K: ProtectedFeed>(
    api: &Api<K>,
    o: &K,
    finalizers: Vec<String>,
) -> Result<(), ProtectionError> {
    // the resourceVersion makes it a compare-and-swap: another writer's finalizer is never lost
    let patch =
        json!({"metadata": {"finalizers": finalizers, "resourceVersion": o.resource_version()}});
    match api
        .patch(
            &o.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if api_code(&e) == Some(404) => Ok(()),
        Err(source) => Err(api_error(o, "updating its finalizers")(source)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest() -> Manifest {
        serde_json::from_value(json!({
            "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Manifest",
            "metadata": {"name": "deployments.demo.web", "namespace": "clusternet-reserved",
                "labels": {"apps.clusternet.io/config.group": "apps", "apps.clusternet.io/config.version": "v1",
                    "apps.clusternet.io/config.kind": "Deployment", "apps.clusternet.io/config.namespace": "demo",
                    "apps.clusternet.io/config.name": "web"}},
            "template": {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "demo"}}
        }))
        .expect("a Manifest")
    }

    fn sub(ns: &str, name: &str, feed_name: &str, deleting: bool) -> Arc<Subscription> {
        let mut s: Subscription = serde_json::from_value(json!({
            "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Subscription",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"subscribers": [{"clusterAffinity": {}}],
                "feeds": [{"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "demo", "name": feed_name}]}
        }))
        .expect("a Subscription");
        if deleting {
            s.metadata.deletion_timestamp =
                Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
                ));
        }
        Arc::new(s)
    }

    #[test]
    fn a_feed_is_held_by_the_subscriptions_that_use_it() {
        let m = manifest();
        let subs = vec![
            sub("team-b", "web", "web", false),
            sub("team-a", "app", "web", false),
            sub("team-a", "other", "db", false),
            sub("team-c", "going", "web", true),
        ];
        let h = holders(&m, &subs);
        assert_eq!(h, vec!["team-a/app", "team-b/web"]);
        assert_eq!(
            blocked_message(&m, &h),
            "block deleting current Deployment until all Subscriptions (including team-a/app, team-b/web) that refer this as a feed get deleted"
        );
        assert!(holders(&m, &subs[2..]).is_empty());
    }
}
