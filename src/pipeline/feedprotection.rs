//! Feed-in-use protection (gate `FeedInUseProtection`, docs/spec/deployer.md §6): every Manifest
//! carries the `apps.clusternet.io/feed-protection` finalizer, and deleting a Manifest that a
//! Subscription still uses as a feed is held back: the Manifest says which Subscriptions hold it
//! (annotation `apps.clusternet.io/feed-protection`, also shown by the shadow API, and a Warning
//! event `FeedInUse`) and goes once the last of them is deleted or no longer lists it. Without
//! the gate the finalizer is released, so nothing stays blocked.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use serde_json::json;
use tokio_util::sync::CancellationToken;
use tracing::info;

use super::feeds;
use crate::apis::known;
use crate::apis::{Manifest, Subscription};
use crate::runtime::events::Events;
use crate::runtime::{Runtime, api_code};

#[derive(Debug, thiserror::Error)]
pub enum ProtectionError {
    #[error("Manifest {manifest}: {what}: {source}")]
    Api {
        manifest: String,
        what: &'static str,
        #[source]
        source: kube::Error,
    },
}

struct Ctx {
    rt: Runtime,
    events: Events,
    subscriptions: Store<Subscription>,
}

pub async fn run(rt: Runtime, stop: CancellationToken) {
    let manifests = rt.cache.watch::<Manifest>();
    let subs = rt.cache.watch::<Subscription>();
    if !subs.ready_until(&stop).await {
        return;
    }
    // a Subscription that goes away (or drops a feed) may release a Manifest being deleted
    let deleting = super::index::manifests_deleting(&manifests);
    let also = subs.subscribe().flat_map(move |_| {
        futures::stream::iter(
            deleting
                .get("")
                .iter()
                .map(|m| ObjectRef::from_obj(m.as_ref()))
                .collect::<Vec<_>>(),
        )
    });
    let ctx = Arc::new(Ctx {
        events: Events::new(
            rt.events_client.clone(),
            known::CLUSTERNET_CONTROLLER_MANAGER_NAME,
        ),
        rt,
        subscriptions: subs.store.clone(),
    });
    crate::runtime::controller::run_with("feedprotection", manifests, 4, stop, also, move |m| {
        let ctx = ctx.clone();
        async move { reconcile(&ctx, m).await }
    })
    .await;
}

/// The Subscriptions (`namespace/name`, sorted) that use the Manifest as a feed.
pub fn holders(manifest: &Manifest, subs: &[Arc<Subscription>]) -> Vec<String> {
    let mut out: Vec<String> = subs
        .iter()
        .filter(|s| s.metadata.deletion_timestamp.is_none())
        .filter(|s| {
            s.spec
                .feeds
                .iter()
                .any(|f| feeds::matches(f, manifest.labels()))
        })
        .map(|s| format!("{}/{}", s.namespace().unwrap_or_default(), s.name_any()))
        .collect();
    out.sort();
    out
}

/// Upstream's annotation text for a feed whose deletion is held back.
pub fn blocked_message(manifest: &Manifest, holders: &[String]) -> String {
    let kind = manifest
        .labels()
        .get(known::CONFIG_KIND_LABEL)
        .cloned()
        .unwrap_or_else(|| "Manifest".into());
    format!(
        "block deleting current {kind} until all Subscriptions (including {}) that refer this as a feed get deleted",
        holders.join(", ")
    )
}

fn key(m: &Manifest) -> String {
    format!("{}/{}", m.namespace().unwrap_or_default(), m.name_any())
}

async fn reconcile(ctx: &Ctx, m: Arc<Manifest>) -> Result<Action, ProtectionError> {
    let api: Api<Manifest> =
        Api::namespaced(ctx.rt.client.clone(), &m.namespace().unwrap_or_default());
    let has = m
        .finalizers()
        .iter()
        .any(|f| f == known::FEED_PROTECTION_FINALIZER);
    let gate = ctx.rt.config.gate(known::FEED_IN_USE_PROTECTION);
    let deleting = m.metadata.deletion_timestamp.is_some();
    if !deleting {
        if gate && !has {
            let mut fins = m.finalizers().to_vec();
            fins.push(known::FEED_PROTECTION_FINALIZER.to_string());
            patch_finalizers(&api, &m, fins).await?;
        }
        return Ok(Action::await_change());
    }
    if !has {
        return Ok(Action::await_change());
    }
    let mut holders = if gate {
        holders(&m, &ctx.subscriptions.state())
    } else {
        Vec::new()
    };
    if gate && holders.is_empty() {
        // Releasing the finalizer deletes the user's feed for good, so the cache's "nobody holds
        // it" is confirmed by a fresh read: a Subscription created a moment ago may not have
        // reached the watch yet (the Manifest's deletion can overtake it on its own stream).
        holders = live_holders(ctx, &m).await?;
    }
    if holders.is_empty() {
        let fins = m
            .finalizers()
            .iter()
            .filter(|f| *f != known::FEED_PROTECTION_FINALIZER)
            .cloned()
            .collect();
        patch_finalizers(&api, &m, fins).await?;
        info!(manifest = %key(&m), "no Subscription uses it any more: deletion proceeds");
        return Ok(Action::await_change());
    }
    let message = blocked_message(&m, &holders);
    if m.annotations().get(known::FEED_PROTECTION_ANNOTATION) != Some(&message) {
        let patch =
            json!({"metadata": {"annotations": {known::FEED_PROTECTION_ANNOTATION: message}}});
        api.patch(
            &m.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .map_err(|source| ProtectionError::Api {
            manifest: key(&m),
            what: "writing the feed-protection annotation",
            source,
        })?;
        ctx.events.warn(m.as_ref(), "FeedInUse", &message);
    }
    // the Subscriptions' changes re-trigger this; the requeue is a safety net
    Ok(Action::requeue(Duration::from_secs(60)))
}

/// [`holders`] over a quorum read of every Subscription (rare: only when a held feed is about to go).
async fn live_holders(ctx: &Ctx, m: &Manifest) -> Result<Vec<String>, ProtectionError> {
    let subs = Api::<Subscription>::all(ctx.rt.client.clone())
        .list(&Default::default())
        .await
        .map_err(|source| ProtectionError::Api {
            manifest: key(m),
            what: "listing the Subscriptions that may still use it",
            source,
        })?;
    let subs: Vec<Arc<Subscription>> = subs.items.into_iter().map(Arc::new).collect();
    Ok(holders(m, &subs))
}

async fn patch_finalizers(
    api: &Api<Manifest>,
    m: &Manifest,
    finalizers: Vec<String>,
) -> Result<(), ProtectionError> {
    // the resourceVersion makes it a compare-and-swap: another writer's finalizer is never lost
    let patch =
        json!({"metadata": {"finalizers": finalizers, "resourceVersion": m.resource_version()}});
    match api
        .patch(
            &m.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if api_code(&e) == Some(404) => Ok(()),
        Err(source) => Err(ProtectionError::Api {
            manifest: key(m),
            what: "updating its finalizers",
            source,
        }),
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
