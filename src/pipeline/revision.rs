//! Subscription revisions (beyond upstream, docs/spec/deployer.md §14): every change to what a
//! Subscription renders (its spec, its feeds' content, the HelmCharts it deploys, the
//! Globalizations and Localizations that apply to it in the clusters it is bound to) becomes a
//! numbered, immutable `apps/v1` `ControllerRevision` in the Subscription's namespace, the kind
//! StatefulSets and DaemonSets keep their history in. Identical content is the same revision: a
//! resync or a no-op apply makes none, and content that goes back to an older revision moves that
//! revision to the front with the next number (as a StatefulSet's rollback does). The newest
//! `spec.revisionHistoryLimit` (default 10) are kept.
//!
//! A revision records the rendering inputs, not the rendered objects: the feeds' templates as
//! their Manifests hold them, each HelmChart's spec, and per cluster namespace the override rules
//! that apply to each object there, in application order. That is what a later render (or a
//! rollback) needs, and it stays one entry per namespace that has overrides, not per cluster.
//!
//! Like the Base controller, nothing is recorded while a feed cannot be rendered (a missing
//! Manifest or HelmChart, a chart not looked up yet or not found): that content never deploys.
//! ApplyLater overrides enter the next revision made for another reason, as they enter the next
//! render.
//!
//! This controller is off the deployment path: Bases and Descriptions do not wait for it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::ControllerRevision;
use kube::api::{Api, DeleteParams};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use tracing::info;

use super::{feeds, index, overrides, triggers};
use crate::apis::known;
use crate::apis::known::CHANGE_CAUSE_ANNOTATION;
use crate::apis::{
    Base, Globalization, HelmChart, Localization, ManagedCluster, Manifest, Subscription,
};
use crate::apis::{FeedContent, ObjectOverrides, SubscriptionRevision};
use crate::runtime::cache::{Index, Shared};
use crate::runtime::controller::{Action, ApiFailure, Controller, ReconcileError, recheck};
use crate::runtime::{Runtime, api_code, apply};

/// The field manager of the ControllerRevisions this controller writes.
pub const FIELD_MANAGER: &str = "clusternet/controller/revision";

/// Revisions kept when the Subscription does not say (`spec.revisionHistoryLimit`), as for
/// Deployments and StatefulSets.
pub const DEFAULT_HISTORY_LIMIT: i32 = 10;

#[derive(Debug, thiserror::Error)]
pub enum RevisionError {
    #[error(transparent)]
    Api(#[from] ApiFailure),
}

impl ReconcileError for RevisionError {
    fn metric_label(&self) -> &'static str {
        match self {
            RevisionError::Api(_) => "api",
        }
    }
}

/// The objects a snapshot is taken from.
#[derive(Clone, Copy)]
pub struct Inputs<'a> {
    pub reserved_ns: &'a str,
    pub manifests: &'a [Arc<Manifest>],
    pub charts: &'a [Arc<HelmChart>],
    pub globalizations: &'a [Arc<Globalization>],
    /// The Localizations of a cluster namespace.
    pub localizations: &'a (dyn Fn(&str) -> Vec<Arc<Localization>> + Sync),
    /// The labels of the ManagedClusters of a cluster namespace.
    pub cluster_labels: &'a (dyn Fn(&str) -> Vec<BTreeMap<String, String>> + Sync),
}

/// The revision content of `sub`, or why there is none now (a feed that cannot be rendered).
pub fn snapshot(sub: &Subscription, inputs: &Inputs<'_>) -> Result<SubscriptionRevision, String> {
    let mut spec = serde_json::to_value(&sub.spec).map_err(|e| e.to_string())?;
    if let Some(o) = spec.as_object_mut() {
        // how many revisions are kept and how they roll out render nothing
        o.remove("revisionHistoryLimit");
        o.remove("rolloutStrategyName");
    }
    // what each object is matched to overrides by: its uid, kind and feed
    let mut keys: Vec<(usize, usize, String, String)> = Vec::new();
    let mut contents = Vec::new();
    for (fi, feed) in sub.spec.feeds.iter().enumerate() {
        if feed.kind == "HelmChart" {
            let chart = inputs
                .charts
                .iter()
                .find(|c| {
                    c.namespace().as_deref() == Some(feed.namespace.as_str())
                        && c.name_any() == feed.name
                })
                .ok_or_else(|| format!("{feed} does not exist"))?;
            if feeds::chart_ready(chart).is_err() {
                return Err(format!("{feed} is not found or not looked up yet"));
            }
            keys.push((fi, 0, chart.uid().unwrap_or_default(), "HelmChart".into()));
            contents.push(FeedContent {
                feed: feed.clone(),
                objects: Vec::new(),
                chart: Some(serde_json::to_value(&chart.spec).map_err(|e| e.to_string())?),
            });
            continue;
        }
        let found = feeds::find(feed, inputs.reserved_ns, inputs.manifests);
        if found.is_empty() {
            return Err(format!("{feed} does not exist"));
        }
        for (oi, m) in found.iter().enumerate() {
            // `feeds::find` matched the Manifest's config.kind label to the feed's kind; the
            // Base controller matches overrides by the same
            keys.push((fi, oi, m.uid().unwrap_or_default(), feed.kind.clone()));
        }
        contents.push(FeedContent {
            feed: feed.clone(),
            objects: found.iter().map(|m| m.spec.template.clone()).collect(),
            chart: None,
        });
    }
    let mut namespaces: Vec<&str> = sub
        .status
        .iter()
        .flat_map(|s| s.binding_clusters.iter())
        .filter_map(|c| c.split_once('/').map(|(ns, _)| ns))
        .collect();
    namespaces.sort_unstable();
    namespaces.dedup();
    let mut by_ns = BTreeMap::new();
    for ns in namespaces {
        let locs: Vec<Arc<Localization>> = (inputs.localizations)(ns)
            .into_iter()
            .filter(|l| !replica_share(l))
            .collect();
        let labels = (inputs.cluster_labels)(ns);
        let mut here = Vec::new();
        for (fi, oi, uid, kind) in &keys {
            let rules = overrides::applicable_overrides(
                inputs.globalizations,
                &locs,
                ns,
                uid,
                kind,
                sub.spec.feeds.get(*fi),
                &labels,
            );
            if !rules.is_empty() {
                here.push(ObjectOverrides {
                    feed: *fi,
                    object: *oi,
                    overrides: rules,
                });
            }
        }
        if !here.is_empty() {
            by_ns.insert(ns.to_string(), here);
        }
    }
    Ok(SubscriptionRevision {
        subscription: spec,
        feeds: contents,
        overrides: by_ns,
    })
}

/// Whether `l` is a Dividing Subscription's replica share for one cluster (deployer.md §3, written
/// by the Subscription controller): that is where the scheduler put the replicas, not what the
/// Subscription deploys, so a rescheduling makes no revision.
pub(crate) fn replica_share(l: &Localization) -> bool {
    let labels = l.labels();
    labels
        .get(known::OBJECT_CREATED_BY_LABEL)
        .map(String::as_str)
        == Some(known::CLUSTERNET_CONTROLLER_MANAGER_NAME)
        && labels.values().any(|v| v == known::SUBSCRIPTION_KIND)
}

/// The content hash of a snapshot: the first 160 bits of the SHA-256 of its JSON in hex
/// (`serde_json` maps are sorted, so equal content gives equal bytes), short enough for a label
/// value.
pub fn content_hash(s: &SubscriptionRevision) -> String {
    let bytes = serde_json::to_vec(s).unwrap_or_default();
    let digest = ring::digest::digest(&ring::digest::SHA256, &bytes);
    digest.as_ref()[..20]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The name of the revision of `sub` with content hash `hash`: `<sub>-<10 hex digits>` (more
/// digits if those are taken by other content).
pub fn revision_name(sub: &str, hash: &str, taken: &[Existing]) -> String {
    let base: String = sub.chars().take(253 - 1 - 20).collect();
    let short = format!("{base}-{}", &hash[..10.min(hash.len())]);
    if taken.iter().any(|e| e.name == short && e.hash != hash) {
        format!("{base}-{}", &hash[..20.min(hash.len())])
    } else {
        short
    }
}

/// A revision as the plan sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Existing {
    pub name: String,
    pub hash: String,
    pub number: i64,
}

/// One write of the plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// A new revision with this name and number.
    Create { name: String, number: i64 },
    /// An existing revision whose content is current again becomes the newest.
    Renumber { name: String, number: i64 },
    /// Beyond the history limit.
    Delete { name: String },
}

/// The writes that make the content with `hash` the newest revision and keep `limit` revisions
/// (at least the newest) plus those in `pinned` (a Base renders from them): nothing when it
/// already is and the history is within the limit.
pub fn plan(
    sub: &str,
    existing: &[Existing],
    hash: &str,
    limit: i32,
    pinned: &[String],
) -> Vec<Step> {
    let newest = existing.iter().map(|e| e.number).max().unwrap_or(0);
    let mut steps = Vec::new();
    let mut after: Vec<Existing> = existing.to_vec();
    match existing.iter().find(|e| e.hash == hash) {
        // the newest, and alone at that number (two at one number come from a stale read)
        Some(e)
            if e.number == newest
                && existing.iter().filter(|o| o.number == newest).count() == 1 => {}
        Some(e) => {
            steps.push(Step::Renumber {
                name: e.name.clone(),
                number: newest + 1,
            });
            for a in after.iter_mut().filter(|a| a.name == e.name) {
                a.number = newest + 1;
            }
        }
        None => {
            let name = revision_name(sub, hash, existing);
            steps.push(Step::Create {
                name: name.clone(),
                number: newest + 1,
            });
            after.push(Existing {
                name,
                hash: hash.to_string(),
                number: newest + 1,
            });
        }
    }
    after.sort_by(|a, b| b.number.cmp(&a.number).then_with(|| a.name.cmp(&b.name)));
    let keep = usize::try_from(limit.max(1)).unwrap_or(1);
    for old in after
        .iter()
        .skip(keep)
        .filter(|o| !pinned.contains(&o.name))
    {
        steps.push(Step::Delete {
            name: old.name.clone(),
        });
    }
    steps
}

/// What changed between two snapshots, in words (`kubectl clusternet rollout history`'s
/// CHANGE-CAUSE).
pub fn change_cause(before: Option<&SubscriptionRevision>, after: &SubscriptionRevision) -> String {
    let Some(before) = before else {
        return "first revision".into();
    };
    let mut parts = Vec::new();
    if before.subscription != after.subscription {
        parts.push("subscription spec".to_string());
    }
    for f in &after.feeds {
        match before.feeds.iter().find(|b| b.feed == f.feed) {
            Some(b) if b == f => {}
            Some(_) => parts.push(format!("feed {}", f.feed)),
            None => {}
        }
    }
    let mut namespaces: Vec<&String> = before.overrides.keys().collect();
    namespaces.extend(after.overrides.keys());
    namespaces.sort();
    namespaces.dedup();
    let changed: Vec<&str> = namespaces
        .into_iter()
        .filter(|ns| before.overrides.get(*ns) != after.overrides.get(*ns))
        .map(String::as_str)
        .collect();
    if !changed.is_empty() {
        parts.push(format!("overrides in {}", changed.join(", ")));
    }
    if parts.is_empty() {
        "the same content as an earlier revision".into()
    } else {
        format!("changed: {}", parts.join("; "))
    }
}

struct Ctx {
    rt: Runtime,
    manifests: Index<Manifest>,
    charts: Store<HelmChart>,
    globalizations: Store<Globalization>,
    localizations: Index<Localization>,
    clusters: Index<ManagedCluster>,
    revisions: Index<ControllerRevision>,
    revisions_cache: Shared<ControllerRevision>,
    /// By Subscription uid: the revisions they are pinned to are kept.
    bases: Index<Base>,
}

pub(crate) fn revisions_by_subscription(
    s: &Shared<ControllerRevision>,
) -> Index<ControllerRevision> {
    s.index("subscription-uid", |r| {
        r.labels()
            .get(known::CONFIG_SUBSCRIPTION_UID_LABEL)
            .cloned()
            .into_iter()
            .collect()
    })
}

/// The ControllerRevisions of Subscriptions (and no other), in the shared cache.
pub fn watch_revisions(rt: &Runtime) -> Shared<ControllerRevision> {
    rt.cache
        .watch_labelled::<ControllerRevision>(known::CONFIG_SUBSCRIPTION_UID_LABEL)
}

pub async fn run(rt: Runtime, stop: CancellationToken) {
    let subs = rt.cache.watch::<Subscription>();
    let manifests = rt.cache.watch::<Manifest>();
    let charts = rt.cache.watch::<HelmChart>();
    let locs = rt.cache.watch::<Localization>();
    let globs = rt.cache.watch::<Globalization>();
    let clusters = rt.cache.watch::<ManagedCluster>();
    let revisions = watch_revisions(&rt);
    let bases = rt.cache.watch::<Base>();
    let by_feed = index::subscriptions_by_feed(&subs);
    let from_manifests = triggers::on_manifests(by_feed.clone(), &manifests);
    let from_charts = triggers::on_charts(by_feed.clone(), &charts);
    let from_overrides = triggers::on_overrides(by_feed, &locs, &globs);
    // a revision deleted or changed by someone else: look again (and see our own writes land)
    let from_revisions = revisions.subscribe().filter_map(|r| {
        let owner = r
            .owner_references()
            .iter()
            .find(|o| o.kind == known::SUBSCRIPTION_KIND)
            .map(|o| o.name.clone());
        futures::future::ready(owner.map(|name| {
            ObjectRef::<Subscription>::new(&name).within(&r.namespace().unwrap_or_default())
        }))
    });
    let ctx = Arc::new(Ctx {
        manifests: index::manifests_by_feed(&manifests),
        charts: charts.store.clone(),
        globalizations: globs.store.clone(),
        localizations: locs.by_namespace(),
        clusters: clusters.by_namespace(),
        revisions: revisions_by_subscription(&revisions),
        revisions_cache: revisions.clone(),
        bases: index::bases_by_subscription(&bases),
        rt,
    });
    // a Subscription's own changes matter only when its spec or the namespaces it is bound to
    // change: the scheduler's, the aggregator's and the rollout's status writes are skipped
    let seen: std::sync::Mutex<std::collections::HashMap<String, ContentKey>> = Default::default();
    let own_changes = subs.subscribe().filter_map(move |s| {
        let key = content_key(&s);
        let name = format!("{}/{}", s.namespace().unwrap_or_default(), s.name_any());
        let mut seen = seen.lock().unwrap_or_else(|e| e.into_inner());
        let changed = seen.get(&name) != Some(&key);
        if changed {
            seen.insert(name, key);
        }
        futures::future::ready(changed.then(|| ObjectRef::from_obj(s.as_ref())))
    });
    Controller::on(
        "revision",
        crate::runtime::controller::Source::store(subs.store.clone(), own_changes),
    )
    .concurrency(2)
    // an empty cache that has not listed yet would look like "no revision" or "no feed"
    .after([
        manifests.listed(),
        charts.listed(),
        locs.listed(),
        globs.listed(),
        clusters.listed(),
        revisions.listed(),
        bases.listed(),
    ])
    .triggered_by(from_manifests)
    .triggered_by(from_charts)
    .triggered_by(from_overrides)
    .triggered_by(from_revisions)
    .run(stop, move |sub| {
        let ctx = ctx.clone();
        async move { reconcile(&ctx, &sub).await }
    })
    .await;
}

/// What of a Subscription itself its revision content depends on: which object it is, its spec
/// (by generation) and the cluster namespaces it is bound to; being deleted ends its reconciles.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContentKey {
    uid: String,
    generation: Option<i64>,
    namespaces: Vec<String>,
    deleting: bool,
}

pub fn content_key(s: &Subscription) -> ContentKey {
    let mut namespaces: Vec<String> = s
        .status
        .iter()
        .flat_map(|st| st.binding_clusters.iter())
        .filter_map(|c| c.split_once('/').map(|(ns, _)| ns.to_string()))
        .collect();
    namespaces.sort_unstable();
    namespaces.dedup();
    ContentKey {
        uid: s.uid().unwrap_or_default(),
        generation: s.metadata.generation,
        namespaces,
        deleting: s.metadata.deletion_timestamp.is_some(),
    }
}

fn existing_of(revisions: &[Arc<ControllerRevision>]) -> Vec<Existing> {
    revisions
        .iter()
        .filter(|r| r.metadata.deletion_timestamp.is_none())
        .map(|r| Existing {
            name: r.name_any(),
            hash: r
                .labels()
                .get(known::REVISION_HASH_LABEL)
                .cloned()
                .unwrap_or_default(),
            number: r.revision,
        })
        .collect()
}

async fn reconcile(ctx: &Ctx, sub: &Subscription) -> Result<Action, RevisionError> {
    if sub.metadata.deletion_timestamp.is_some() {
        // the revisions go with it (owner references)
        return Ok(Action::await_change());
    }
    let manifests = index::manifests_of(&ctx.manifests, &sub.spec.feeds);
    let charts = ctx.charts.state();
    let globs = ctx.globalizations.state();
    let locs = |ns: &str| ctx.localizations.get(ns);
    let labels = |ns: &str| {
        ctx.clusters
            .get(ns)
            .iter()
            .map(|c| c.labels().clone())
            .collect()
    };
    let inputs = Inputs {
        reserved_ns: &ctx.rt.config.reserved_namespace,
        manifests: &manifests,
        charts: &charts,
        globalizations: &globs,
        localizations: &locs,
        cluster_labels: &labels,
    };
    let snap = match snapshot(sub, &inputs) {
        Ok(s) => s,
        // the feed's arrival triggers this again; the Subscription's FeedsResolved says why
        Err(_) => return Ok(Action::await_change()),
    };
    let hash = content_hash(&snap);
    let uid = sub.uid().unwrap_or_default();
    let revisions = ctx.revisions.get(&uid);
    let existing = existing_of(&revisions);
    let limit = sub
        .spec
        .revision_history_limit
        .unwrap_or(DEFAULT_HISTORY_LIMIT);
    let pinned: Vec<String> = ctx
        .bases
        .get(&uid)
        .iter()
        .filter_map(|b| b.annotations().get(known::REVISION_ANNOTATION).cloned())
        .collect();
    let steps = plan(&sub.name_any(), &existing, &hash, limit, &pinned);
    let ns = sub.namespace().unwrap_or_default();
    // nobody waits on the history: it takes only the API budget the pipeline leaves over
    let api: Api<ControllerRevision> = Api::namespaced(ctx.rt.background_client.clone(), &ns);
    // read only when a revision is written (most looks write nothing)
    let newest = || {
        revisions
            .iter()
            .max_by_key(|r| r.revision)
            .and_then(|r| r.data.as_ref())
            .and_then(|d| serde_json::from_value::<SubscriptionRevision>(d.0.clone()).ok())
    };
    for step in steps {
        match step {
            Step::Create { name, number } | Step::Renumber { name, number } => {
                let cause = change_cause(newest().as_ref(), &snap);
                let body = revision_body(sub, &name, number, &hash, &snap, &cause);
                let written = apply::apply(&api, FIELD_MANAGER, &name, &body)
                    .await
                    .map_err(ApiFailure::about(sub, "writing its ControllerRevision"))?;
                // the next look (a status change of the Subscription comes at once) must see it,
                // or it would write it again
                ctx.revisions_cache.observe_write(written);
                info!(subscription = %format!("{ns}/{}", sub.name_any()), revision = number, %name, %cause, "RevisionRecorded");
            }
            Step::Delete { name } => match api.delete(&name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(e) if api_code(&e) == Some(404) => {}
                Err(e) => Err(ApiFailure::about(sub, "pruning its revision history")(e))?,
            },
        }
    }
    Ok(recheck(Duration::from_secs(600)))
}

/// The ControllerRevision of `sub` holding `snap` as revision `number`.
pub fn revision_body(
    sub: &Subscription,
    name: &str,
    number: i64,
    hash: &str,
    snap: &SubscriptionRevision,
    cause: &str,
) -> Value {
    let mut labels = BTreeMap::from([
        (
            known::OBJECT_CREATED_BY_LABEL.to_string(),
            known::CLUSTERNET_CONTROLLER_MANAGER_NAME.to_string(),
        ),
        (
            known::CONFIG_SUBSCRIPTION_UID_LABEL.to_string(),
            sub.uid().unwrap_or_default(),
        ),
        (known::REVISION_HASH_LABEL.to_string(), hash.to_string()),
    ]);
    if sub.name_any().len() <= 63 {
        labels.insert(
            known::CONFIG_SUBSCRIPTION_NAME_LABEL.to_string(),
            sub.name_any(),
        );
    }
    json!({
        "apiVersion": "apps/v1",
        "kind": "ControllerRevision",
        "metadata": {
            "name": name,
            "namespace": sub.namespace(),
            "labels": labels,
            "annotations": { CHANGE_CAUSE_ANNOTATION: cause },
            "ownerReferences": sub.controller_owner_ref(&()).map(|r| vec![r]),
        },
        "data": snap,
        "revision": number,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(name: &str, hash: &str, number: i64) -> Existing {
        Existing {
            name: name.into(),
            hash: hash.into(),
            number,
        }
    }

    #[test]
    fn only_a_spec_or_binding_change_of_the_subscription_itself_is_looked_at() {
        let sub = |generation: i64, status: Value| -> Subscription {
            serde_json::from_value(json!({
                "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Subscription",
                "metadata": {"name": "app", "namespace": "ns", "uid": "u1",
                    "generation": generation},
                "spec": {"subscribers": [], "feeds": []}, "status": status}))
            .expect("a Subscription")
        };
        let bound = json!({"bindingClusters": ["c1/a", "c2/b"]});
        let base = content_key(&sub(1, bound.clone()));
        let mut rolled = bound.clone();
        rolled["rollout"] = json!({"revision": "app-1", "revisionNumber": 1,
            "phase": "Completed", "stage": 0});
        rolled["desiredReleases"] = json!(2);
        assert_eq!(
            content_key(&sub(1, rolled)),
            base,
            "status writes of others"
        );
        assert_ne!(content_key(&sub(2, bound)), base, "a spec change");
        assert_ne!(
            content_key(&sub(1, json!({"bindingClusters": ["c1/a"]}))),
            base,
            "a binding change"
        );
    }

    #[test]
    fn new_content_is_the_next_number_and_the_same_content_makes_nothing() {
        let h = "a".repeat(64);
        assert_eq!(
            plan("app", &[], &h, 10, &[]),
            vec![Step::Create {
                name: format!("app-{}", &h[..10]),
                number: 1
            }]
        );
        let existing = [e("app-aaaaaaaaaa", &h, 1)];
        assert!(plan("app", &existing, &h, 10, &[]).is_empty());
        let h2 = "b".repeat(64);
        assert_eq!(
            plan("app", &existing, &h2, 10, &[]),
            vec![Step::Create {
                name: "app-bbbbbbbbbb".into(),
                number: 2
            }]
        );
    }

    #[test]
    fn content_that_comes_back_moves_its_revision_to_the_front() {
        let existing = [e("app-1", "h1", 1), e("app-2", "h2", 2)];
        assert_eq!(
            plan("app", &existing, "h1", 10, &[]),
            vec![Step::Renumber {
                name: "app-1".into(),
                number: 3
            }]
        );
        // two at the newest number (a stale read wrote one): the current one goes ahead
        let tied = [e("app-1", "h1", 2), e("app-2", "h2", 2)];
        assert_eq!(
            plan("app", &tied, "h2", 10, &[]),
            vec![Step::Renumber {
                name: "app-2".into(),
                number: 3
            }]
        );
    }

    #[test]
    fn the_history_keeps_the_newest_up_to_the_limit_and_never_the_current_one_out() {
        let existing: Vec<Existing> = (1..=3)
            .map(|i| e(&format!("r{i}"), &format!("h{i}"), i))
            .collect();
        let steps = plan("app", &existing, "h4", 2, &[]);
        assert_eq!(
            steps,
            vec![
                Step::Create {
                    name: "app-h4".into(),
                    number: 4
                },
                Step::Delete { name: "r2".into() },
                Step::Delete { name: "r1".into() },
            ]
        );
        // a revision a Base is pinned to stays beyond the limit
        assert_eq!(
            plan("app", &existing, "h4", 2, &["r1".to_string()]),
            vec![
                Step::Create {
                    name: "app-h4".into(),
                    number: 4
                },
                Step::Delete { name: "r2".into() },
            ]
        );
        // a limit of zero still keeps the current revision
        assert_eq!(
            plan("app", &existing, "h3", 0, &[]),
            vec![
                Step::Delete { name: "r2".into() },
                Step::Delete { name: "r1".into() }
            ]
        );
    }

    #[test]
    fn a_name_taken_by_other_content_gets_more_digits() {
        let h = format!("{}{}", "c".repeat(10), "d".repeat(54));
        let taken = [e(&format!("app-{}", "c".repeat(10)), "other", 1)];
        assert_eq!(
            revision_name("app", &h, &taken),
            format!("app-{}", &h[..20])
        );
    }

    fn sub(feeds: Value, bound: &[&str]) -> Subscription {
        serde_json::from_value(json!({
            "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Subscription",
            "metadata": {"name": "app", "namespace": "default", "uid": "u1"},
            "spec": {"subscribers": [{"clusterAffinity": {}}], "feeds": feeds},
            "status": {"bindingClusters": bound},
        }))
        .expect("subscription")
    }

    fn manifest(name: &str, image: &str) -> Arc<Manifest> {
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Manifest",
                "metadata": {"name": format!("deployments.apps.default.{name}"),
                    "namespace": "clusternet-reserved", "uid": format!("m-{name}"),
                    "labels": {
                        "apps.clusternet.io/config.group": "apps",
                        "apps.clusternet.io/config.version": "v1",
                        "apps.clusternet.io/config.kind": "Deployment",
                        "apps.clusternet.io/config.name": name,
                        "apps.clusternet.io/config.namespace": "default"}},
                "template": {"apiVersion": "apps/v1", "kind": "Deployment",
                    "metadata": {"name": name, "namespace": "default"},
                    "spec": {"template": {"spec": {"containers": [{"name": "c", "image": image}]}}}},
            }))
            .expect("manifest"),
        )
    }

    fn localization(ns: &str, value: &str) -> Arc<Localization> {
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Localization",
                "metadata": {"name": "loc", "namespace": ns},
                "spec": {
                    "feed": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "namespace": "default"},
                    "overridePolicy": "ApplyNow",
                    "overrides": [{"name": "img", "type": "JSONPatch",
                        "value": format!("[{{\"op\":\"replace\",\"path\":\"/spec/template/spec/containers/0/image\",\"value\":\"{value}\"}}]")}]
                },
            }))
            .expect("localization"),
        )
    }

    #[test]
    fn a_snapshot_holds_the_templates_and_the_overrides_of_each_bound_namespace() {
        let feeds = json!([{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "namespace": "default"}]);
        let s = sub(feeds.clone(), &["ns-a/a", "ns-b/b"]);
        let manifests = [manifest("web", "nginx:1")];
        let locs_a = [localization("ns-a", "nginx:canary")];
        // a Dividing Subscription's replica share is where replicas go, not content
        let mut share = (*localization("ns-b", "nginx:share")).clone();
        share.metadata.labels = Some(BTreeMap::from([
            (
                known::OBJECT_CREATED_BY_LABEL.to_string(),
                known::CLUSTERNET_CONTROLLER_MANAGER_NAME.to_string(),
            ),
            ("u1".to_string(), known::SUBSCRIPTION_KIND.to_string()),
        ]));
        let locs_b = [Arc::new(share)];
        let no_labels = |_: &str| Vec::new();
        let locs = |ns: &str| {
            if ns == "ns-a" {
                locs_a.to_vec()
            } else {
                locs_b.to_vec()
            }
        };
        let inputs = Inputs {
            reserved_ns: "clusternet-reserved",
            manifests: &manifests,
            charts: &[],
            globalizations: &[],
            localizations: &locs,
            cluster_labels: &no_labels,
        };
        let snap = snapshot(&s, &inputs).expect("snapshot");
        assert_eq!(snap.feeds.len(), 1);
        assert_eq!(
            snap.feeds[0].objects[0].pointer("/spec/template/spec/containers/0/image"),
            Some(&json!("nginx:1"))
        );
        assert_eq!(snap.overrides.keys().collect::<Vec<_>>(), vec!["ns-a"]);
        assert_eq!(snap.overrides["ns-a"][0].overrides[0].name, "img");
        // the same inputs: the same hash; another image: another hash, and the cause names the feed
        assert_eq!(
            content_hash(&snap),
            content_hash(&snapshot(&s, &inputs).expect("again"))
        );
        let manifests2 = [manifest("web", "nginx:2")];
        let changed = snapshot(
            &s,
            &Inputs {
                manifests: &manifests2,
                ..inputs
            },
        )
        .expect("changed");
        assert_ne!(content_hash(&snap), content_hash(&changed));
        // the label holds the whole hash, so the next look finds this revision by it
        let hash = content_hash(&snap);
        let body = revision_body(&s, "app-x", 1, &hash, &snap, "first revision");
        assert!(hash.len() <= 63);
        assert_eq!(
            body["metadata"]["labels"][known::REVISION_HASH_LABEL],
            json!(hash)
        );
        assert_eq!(
            change_cause(Some(&snap), &changed),
            "changed: feed Deployment default/web"
        );
        // a Subscription bound nowhere yet has no overrides; one whose feed is missing, no revision
        let unbound = sub(feeds, &[]);
        assert!(
            snapshot(&unbound, &inputs)
                .expect("unbound")
                .overrides
                .is_empty()
        );
        let missing = sub(
            json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "nope", "namespace": "default"}]),
            &[],
        );
        assert!(snapshot(&missing, &inputs).is_err());
    }
}
