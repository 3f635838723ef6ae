//! Base -> Description (docs/spec/deployer.md §4-§5): the feeds of a Base are resolved to their
//! Manifests, each template is rendered with the Globalizations and Localizations that apply to
//! it, and the result is written as Description `<base>-generic`. An unchanged Description is not
//! rewritten. A rendering error (a broken patch, say) is reported as a Warning event on the Base
//! and that object keeps its previously rendered form, so nothing is pruned by mistake.
//!
//! As upstream, a Base is rendered only when every feed can be: a feed that does not exist
//! (`Nonexistent<Kind>`), a HelmChart whose chart or version the repository does not have
//! (`HelmChartNotFound`) or that has not been looked up since its spec changed
//! (`VerifyingHelmChart`) leaves the Descriptions as they are. So an application is never
//! half-deployed, a feed that goes missing later removes nothing that already runs, and a chart
//! version that does not exist never reaches a child (its HelmReleases stay at the last version
//! found).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::runtime::controller::Action;
use crate::runtime::controller::Controller;
use crate::runtime::controller::{Event, finalizer};
use k8s_openapi::ByteString;
use kube::api::{Api, DeleteParams};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::feeds::ChartNotReady;
use super::{feeds, index, overrides, triggers};
use crate::apis::known;
use crate::apis::{
    Base, ChartReference, Description, DescriptionDeployer, DescriptionSpec, Feed, FeedInventory,
    Globalization, HelmChart, Localization, ManagedCluster, Manifest, SchedulingStrategy,
    Subscription, SubscriptionRevision,
};
use crate::runtime::cache::{Index, Shared};
use crate::runtime::controller::{ApiFailure, ReconcileError, recheck, through_index};
use crate::runtime::events::Events;
use crate::runtime::{Runtime, api_code, apply};
use k8s_openapi::api::apps::v1::ControllerRevision;

/// The field manager of the Descriptions this controller renders.
pub const FIELD_MANAGER: &str = "clusternet/controller/base";

#[derive(Debug, thiserror::Error)]
pub enum BaseError {
    #[error(transparent)]
    Api(#[from] ApiFailure),
    #[error("Base {base}: {message}")]
    Feed { base: String, message: String },
    #[error("Base finalizer: {0}")]
    Finalizer(String),
}

impl ReconcileError for BaseError {
    fn metric_label(&self) -> &'static str {
        match self {
            BaseError::Api(_) => "api",
            BaseError::Feed { .. } => "feed",
            BaseError::Finalizer(_) => "finalizer",
        }
    }
}

struct Ctx {
    rt: Runtime,
    events: Events,
    /// By feed.
    manifests: Index<Manifest>,
    charts: Store<HelmChart>,
    /// By namespace.
    localizations: Index<Localization>,
    globalizations: Store<Globalization>,
    /// By namespace.
    clusters: Index<ManagedCluster>,
    /// The shared cache of Descriptions: read, and told of our own writes.
    descriptions: Shared<Description>,
    /// By Base uid.
    descriptions_by_base: Index<Description>,
    subscriptions: Store<Subscription>,
    inventories: Store<FeedInventory>,
    /// The Subscriptions' ControllerRevisions, for Bases pinned to one.
    revisions: Store<ControllerRevision>,
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
    let charts = rt.cache.watch::<HelmChart>();
    let revisions = super::revision::watch_revisions(&rt);
    let ctx = Arc::new(Ctx {
        events: Events::new(
            rt.events_client.clone(),
            known::CLUSTERNET_CONTROLLER_MANAGER_NAME,
        ),
        rt,
        manifests: index::manifests_by_feed(&manifests),
        charts: charts.store.clone(),
        localizations: locs.by_namespace(),
        globalizations: globs.store.clone(),
        clusters: clusters.by_namespace(),
        descriptions_by_base: index::descriptions_by_base(&descs),
        descriptions: descs.clone(),
        subscriptions: subs.store.clone(),
        inventories: inventories.store.clone(),
        revisions: revisions.store.clone(),
    });
    let by_feed = index::bases_by_feed(&bases);
    Controller::new("base", &bases)
        .concurrency(8)
        // an empty cache that has not listed yet would look like "no Description": never
        // decide from it
        .after([
            manifests.listed(),
            charts.listed(),
            locs.listed(),
            descs.listed(),
            subs.listed(),
            inventories.listed(),
            revisions.listed(),
        ])
        .triggered_by(triggers::on_manifests(by_feed.clone(), &manifests))
        .triggered_by(triggers::on_overrides(by_feed.clone(), &locs, &globs))
        .triggered_by(triggers::on_charts(by_feed, &charts))
        .triggered_by(on_pinned_revisions(&bases, &revisions))
        .run(stop, move |base| {
            let ctx = ctx.clone();
            async move { reconcile(&ctx, base).await }
        })
        .await;
}

/// A revision that appears (or changes) re-renders the Bases pinned to it.
fn on_pinned_revisions(
    bases: &Shared<Base>,
    revisions: &Shared<ControllerRevision>,
) -> impl futures::Stream<Item = ObjectRef<Base>> + Send + 'static {
    through_index(
        revisions.subscribe(),
        index::bases_by_subscription(bases),
        |r: &ControllerRevision| {
            r.labels()
                .get(known::CONFIG_SUBSCRIPTION_UID_LABEL)
                .cloned()
                .into_iter()
                .collect()
        },
        |b: &Base, r: &ControllerRevision| {
            b.annotations().get(known::REVISION_ANNOTATION) == Some(&r.name_any())
        },
    )
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

/// A problem with one feed of a Base, reported as a Warning event on it.
#[derive(Debug, Clone, PartialEq)]
pub struct Problem {
    pub reason: String,
    pub message: String,
    /// The Base cannot be rendered until this is resolved: its Descriptions stay as they are.
    pub blocking: bool,
}

/// What the Base's feeds render to: the child objects, the charts, and the feeds that could not
/// be rendered.
#[derive(Debug, Default, PartialEq)]
pub struct Rendered {
    pub objects: Vec<Value>,
    pub charts: Vec<RenderedChart>,
    pub problems: Vec<Problem>,
}

/// One HelmChart feed of a Base, rendered (§5.5 Helm): which chart, its values (JSON, or a
/// single space without value overrides, as upstream) and the HelmChart object with its chart
/// overrides merged in.
#[derive(Debug, Clone, PartialEq)]
pub struct RenderedChart {
    pub reference: ChartReference,
    pub values: String,
    pub chart: Value,
}

/// The overrides in scope of one Base's namespace (deployer.md §5).
pub struct Scope<'a> {
    pub namespace: &'a str,
    pub globalizations: &'a [Globalization],
    pub localizations: &'a [Localization],
    pub cluster_labels: &'a [BTreeMap<String, String>],
}

impl Problem {
    /// A problem that keeps the whole Base from being rendered.
    fn blocking(reason: String, message: String) -> Self {
        Problem {
            reason,
            message,
            blocking: true,
        }
    }
}

impl Rendered {
    /// Whether a feed keeps the whole Base from being rendered (see the module docs).
    pub fn blocked(&self) -> bool {
        self.problems.iter().any(|p| p.blocking)
    }
}

/// Renders every feed of `base` from its Manifests with the overrides that apply. A feed that
/// fails to render keeps its object from `previous` (the Description's current raw objects), so
/// nothing is pruned by mistake; a missing feed, or a Helm chart not found or not verified yet,
/// is a blocking problem (the caller then leaves the Descriptions as they are).
pub fn render_feeds(
    base: &Base,
    reserved_ns: &str,
    manifests: &[Arc<Manifest>],
    charts: &[Arc<HelmChart>],
    scope: &Scope<'_>,
    previous: &[Value],
) -> Rendered {
    let key = key(base);
    let mut out = Rendered::default();
    for feed in &base.spec.feeds {
        if feed.kind == "HelmChart" {
            match render_chart(&key, feed, charts, scope) {
                Ok(chart) => out.charts.push(chart),
                Err(problem) => out.problems.push(problem),
            }
            continue;
        }
        let found = feeds::find(feed, reserved_ns, manifests);
        if found.is_empty() {
            // nothing of the Base deploys until it exists (upstream's semantics: no half-deployed
            // application); the Subscription's FeedsResolved condition names it, and its
            // creation re-renders this Base
            out.problems.push(Problem::blocking(
                format!("Nonexistent{}", feed.kind),
                format!("Base {key} is using a nonexistent {feed}"),
            ));
            continue;
        }
        for m in found {
            render_manifest(&key, feed, m, scope, previous, &mut out);
        }
    }
    out
}

/// One Manifest of a feed with the overrides that apply to it; on failure, what was deployed
/// before for this object (instead of pruning it) and a problem that blocks nothing else.
fn render_manifest(
    key: &str,
    feed: &Feed,
    m: &Manifest,
    scope: &Scope<'_>,
    previous: &[Value],
    out: &mut Rendered,
) {
    let applicable = overrides::applicable_overrides(
        scope.globalizations,
        scope.localizations,
        scope.namespace,
        &m.uid().unwrap_or_default(),
        // `feeds::find` matched the Manifest's config.kind label to the feed's kind
        &feed.kind,
        Some(feed),
        scope.cluster_labels,
    );
    render_object(key, feed, &m.spec.template, &applicable, previous, out);
}

/// One template with its override rules into `out`; on failure, what was deployed before for
/// this object (instead of pruning it) and a problem that blocks nothing else. A live render and
/// a revision's render both end here.
fn render_object(
    key: &str,
    feed: &Feed,
    template: &Value,
    rules: &[crate::apis::OverrideConfig],
    previous: &[Value],
    out: &mut Rendered,
) {
    match overrides::render_generic(template, rules) {
        Ok(obj) => out.objects.push(obj),
        Err(e) => {
            out.problems.push(Problem {
                reason: "FailedApplyingOverrides".into(),
                message: format!("rendering {feed} for {key}: {e}"),
                blocking: false,
            });
            if let Some(prev) = previous.iter().find(|p| same_object(p, template)) {
                out.objects.push(prev.clone());
            }
        }
    }
}

/// A chart with its chart overrides applied, as a Description carries it; a failure blocks the
/// Base (a chart has no previous form to keep apart from its Description).
fn rendered_chart(
    key: &str,
    feed: &Feed,
    chart: &Value,
    rules: &[crate::apis::OverrideConfig],
) -> Result<RenderedChart, Problem> {
    let r = overrides::render_helm(chart, rules).map_err(|e| {
        Problem::blocking(
            "FailedApplyingOverrides".into(),
            format!("rendering {feed} for {key}: {e}"),
        )
    })?;
    Ok(RenderedChart {
        reference: ChartReference {
            namespace: feed.namespace.clone(),
            name: feed.name.clone(),
        },
        values: r.values,
        chart: r.chart,
    })
}

/// A HelmChart feed with its chart overrides, if the chart exists and its lookup found the
/// version it asks for; otherwise the problem, which blocks the Base (a chart has no previous
/// form to keep apart from its Description).
fn render_chart(
    key: &str,
    feed: &Feed,
    charts: &[Arc<HelmChart>],
    scope: &Scope<'_>,
) -> Result<RenderedChart, Problem> {
    let Some(chart) = charts.iter().find(|c| {
        c.namespace().as_deref() == Some(feed.namespace.as_str()) && c.name_any() == feed.name
    }) else {
        return Err(Problem::blocking(
            "NonexistentHelmChart".into(),
            format!("Base {key} is using a nonexistent {feed}"),
        ));
    };
    match feeds::chart_ready(chart) {
        Ok(()) => {}
        Err(ChartNotReady::Verifying) => {
            return Err(Problem::blocking(
                "VerifyingHelmChart".into(),
                format!("HelmChart {}/{} is in verifying", feed.namespace, feed.name),
            ));
        }
        Err(ChartNotReady::NotFound(reason)) => {
            let why = if reason.is_empty() {
                "the repository does not have it"
            } else {
                reason.as_str()
            };
            return Err(Problem::blocking(
                "HelmChartNotFound".into(),
                format!(
                    "helm chart {}/{} is not found: {why}; Base {key} keeps the last version found",
                    feed.namespace, feed.name,
                ),
            ));
        }
    }
    let applicable = overrides::applicable_overrides(
        scope.globalizations,
        scope.localizations,
        scope.namespace,
        &chart.uid().unwrap_or_default(),
        "HelmChart",
        Some(feed),
        scope.cluster_labels,
    );
    rendered_chart(key, feed, &chart_template(chart), &applicable)
}

/// Renders `base` from a recorded revision instead of the live feeds (a rollout pins the Base to
/// it, docs/spec/deployer.md §15): the revision's templates and HelmChart specs with the override
/// rules it recorded for this namespace, then the live replica shares of a Dividing Subscription
/// (`shares`: where the scheduler puts the replicas is not revision content). A template whose
/// overrides fail keeps its object from `previous`, as a live render does.
pub fn render_revision(
    base: &Base,
    revision: &SubscriptionRevision,
    shares: &[Localization],
    previous: &[Value],
) -> Rendered {
    let key = key(base);
    let ns = base.namespace().unwrap_or_default();
    let recorded = revision.overrides.get(&ns);
    let rules = |fi: usize, oi: usize, feed: &Feed| -> Vec<crate::apis::OverrideConfig> {
        let mut r: Vec<_> = recorded
            .iter()
            .flat_map(|list| list.iter())
            .filter(|o| o.feed == fi && o.object == oi)
            .flat_map(|o| o.overrides.iter().cloned())
            .collect();
        let no_globalizations: &[Globalization] = &[];
        r.extend(overrides::applicable_overrides(
            no_globalizations,
            shares,
            &ns,
            "",
            // as a live render matches them: by the feed's kind
            &feed.kind,
            Some(feed),
            &[],
        ));
        r
    };
    let mut out = Rendered::default();
    for (fi, content) in revision.feeds.iter().enumerate() {
        let feed = &content.feed;
        if let Some(spec) = &content.chart {
            let chart = json!({
                "apiVersion": "apps.clusternet.io/v1alpha1",
                "kind": "HelmChart",
                "metadata": {"name": feed.name, "namespace": feed.namespace},
                "spec": spec,
            });
            match rendered_chart(&key, feed, &chart, &rules(fi, 0, feed)) {
                Ok(c) => out.charts.push(c),
                Err(problem) => out.problems.push(problem),
            }
            continue;
        }
        for (oi, template) in content.objects.iter().enumerate() {
            render_object(
                &key,
                feed,
                template,
                &rules(fi, oi, feed),
                previous,
                &mut out,
            );
        }
    }
    out
}

/// A HelmChart as the chart overrides see it: what the API server keeps about the object
/// (managedFields, status) is not the chart's to carry along.
pub(crate) fn chart_template(chart: &HelmChart) -> Value {
    let mut object = serde_json::to_value(chart).unwrap_or_default();
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("managedFields");
    }
    if let Some(o) = object.as_object_mut() {
        o.remove("status");
    }
    object
}

fn same_object(a: &Value, b: &Value) -> bool {
    use crate::kube_ext::object_ref::ObjectRef;
    matches!((ObjectRef::of(a), ObjectRef::of(b)),
        (Some(a), Some(b)) if a.kind == b.kind && a.name == b.name && a.namespace == b.namespace)
}

/// One write the Base reconciler makes to its Descriptions.
#[derive(Debug, Clone, PartialEq)]
pub enum DescriptionChange {
    /// Server-side apply of a Description that does not exist yet (the body carries what we own).
    Create { name: String, body: Value },
    /// Server-side apply of an existing Description whose spec or labels differ.
    Update { name: String, body: Value },
    /// A Description of this Base that is no longer wanted (e.g. a -helm one whose charts are gone).
    Delete { name: String },
}

/// The name of a Base's Generic Description.
pub fn generic_name(base: &Base) -> String {
    format!("{}-generic", base.name_any())
}

/// The name of a Base's Helm Description.
pub fn helm_name(base: &Base) -> String {
    format!("{}-helm", base.name_any())
}

/// The spec of a Helm Description: the charts, their values and chart objects, in one order.
fn helm_spec(charts: &[RenderedChart]) -> DescriptionSpec {
    DescriptionSpec {
        deployer: DescriptionDeployer::Helm,
        charts: charts.iter().map(|c| c.reference.clone()).collect(),
        raw: charts
            .iter()
            .map(|c| ByteString(c.values.clone().into_bytes()))
            .collect(),
        chart_raw: charts
            .iter()
            .map(|c| ByteString(c.chart.to_string().into_bytes()))
            .collect(),
    }
}

/// What the Base's Descriptions must become: its Generic Description carries `objects`, its
/// Helm Description (upstream's `-helm`) the rendered `charts`, each written only when its spec,
/// our labels or the drift settings differ from what exists; every other Description of the
/// Base (`ours`, matched by the Base's uid label) goes. `existing` is the Generic Description as
/// the cache has it. `Err` while a wanted Description is being deleted.
pub fn plan_descriptions(
    base: &Base,
    objects: &[Value],
    charts: &[RenderedChart],
    existing: Option<&Description>,
    ours: &[Arc<Description>],
) -> Result<Vec<DescriptionChange>, String> {
    let mut wanted: Vec<(String, DescriptionSpec, Option<&Description>)> = Vec::new();
    // a Base of Helm charts only has no Generic Description (not an empty one that says Success)
    if base.spec.feeds.iter().any(|f| f.kind != "HelmChart") {
        wanted.push((
            generic_name(base),
            DescriptionSpec {
                deployer: DescriptionDeployer::Generic,
                charts: Vec::new(),
                raw: objects
                    .iter()
                    .map(|o| ByteString(o.to_string().into_bytes()))
                    .collect(),
                chart_raw: Vec::new(),
            },
            existing,
        ));
    }
    if !charts.is_empty() {
        let name = helm_name(base);
        let found = ours
            .iter()
            .find(|d| d.name_any() == name)
            .map(|d| d.as_ref());
        wanted.push((name, helm_spec(charts), found));
    }
    let labels = description_labels(base);
    let mut changes = Vec::new();
    for (name, spec, existing) in &wanted {
        match existing {
            Some(d) if d.metadata.deletion_timestamp.is_some() => {
                return Err(format!("Description {name} is being deleted; waiting"));
            }
            Some(d) => {
                let has_labels = labels.iter().all(|(k, v)| d.labels().get(k) == Some(v));
                let same_settings =
                    carried_annotations(base.annotations()) == carried_annotations(d.annotations());
                if d.spec != *spec || !has_labels || !same_settings {
                    changes.push(DescriptionChange::Update {
                        name: name.clone(),
                        body: description_body(base, name, &labels, spec),
                    });
                }
            }
            None => changes.push(DescriptionChange::Create {
                name: name.clone(),
                body: description_body(base, name, &labels, spec),
            }),
        }
    }
    changes.extend(
        ours.iter()
            .filter(|d| {
                !wanted.iter().any(|(n, _, _)| *n == d.name_any())
                    && d.metadata.deletion_timestamp.is_none()
            })
            .map(|d| DescriptionChange::Delete { name: d.name_any() }),
    );
    Ok(changes)
}

/// The apply body of a Generic Description: our labels, our finalizer, the Base as controlling
/// owner (all resent on every apply, so none of them is dropped from what we own) and the spec.
/// What a Description takes from its Base's annotations: the drift settings and the revision the
/// Base is pinned to (the Description then records the revision it was rendered from).
fn carried_annotations(annotations: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    let mut a = super::subscription::drift_settings(annotations);
    if let Some(pin) = annotations.get(known::REVISION_ANNOTATION) {
        a.insert(known::REVISION_ANNOTATION.to_string(), pin.clone());
    }
    a
}

fn description_body(
    base: &Base,
    name: &str,
    labels: &BTreeMap<String, String>,
    spec: &DescriptionSpec,
) -> Value {
    let mut meta = serde_json::Map::new();
    meta.insert("labels".into(), json!(labels));
    meta.insert("finalizers".into(), json!([known::APP_FINALIZER]));
    let settings = carried_annotations(base.annotations());
    if !settings.is_empty() {
        meta.insert("annotations".into(), json!(settings));
    }
    if let Some(owner) = base.controller_owner_ref(&()) {
        meta.insert("ownerReferences".into(), json!([owner]));
    }
    let mut body = apply::body::<Description>(name, base.namespace().as_deref(), meta);
    body["spec"] = json!(spec);
    body
}

/// The rendering inputs of one Base, from the cache. `Err(what is missing)` while a Dividing Base
/// must wait for its replica Localization (the child must never see more than its share; the
/// Localization's creation re-triggers this render).
struct Observed {
    existing: Option<Description>,
    ours: Vec<Arc<Description>>,
    localizations: Vec<Localization>,
    globalizations: Vec<Globalization>,
    cluster_labels: Vec<BTreeMap<String, String>>,
}

fn observe(ctx: &Ctx, base: &Base) -> Result<Observed, String> {
    let ns = base.namespace().unwrap_or_default();
    let localizations: Vec<Localization> = ctx
        .localizations
        .get(&ns)
        .iter()
        .map(|l| (**l).clone())
        .collect();
    if let Some(sub) = subscription_of(ctx, base) {
        let inventory = ctx
            .inventories
            .get(&ObjectRef::new(&sub.name_any()).within(&sub.namespace().unwrap_or_default()));
        replica_localizations_in_place(&sub, inventory.as_deref(), &localizations, &ns)?;
    }
    let base_uid = base.uid().unwrap_or_default();
    Ok(Observed {
        existing: ctx
            .descriptions
            .store
            .get(&ObjectRef::new(&generic_name(base)).within(&ns))
            .map(|d| (*d).clone()),
        ours: ctx
            .descriptions_by_base
            .get(&base_uid)
            .into_iter()
            .filter(|d| d.namespace().as_deref() == Some(ns.as_str()))
            .collect(),
        localizations,
        globalizations: ctx
            .globalizations
            .state()
            .iter()
            .map(|g| (**g).clone())
            .collect(),
        cluster_labels: ctx
            .clusters
            .get(&ns)
            .iter()
            .map(|c| c.labels().clone())
            .collect(),
    })
}

async fn render(ctx: &Ctx, base: &Base) -> Result<Action, BaseError> {
    let key = key(base);
    let ns = base.namespace().unwrap_or_default();
    let seen = match observe(ctx, base) {
        Ok(seen) => seen,
        Err(waiting) => {
            debug!(base = %key, waiting = %waiting, "not rendering yet");
            return Ok(Action::requeue(Duration::from_secs(5)));
        }
    };
    let previous: Vec<Value> = seen
        .existing
        .iter()
        .flat_map(|d| d.spec.raw.iter())
        .filter_map(|r| serde_json::from_slice(&r.0).ok())
        .collect();
    let scope = Scope {
        namespace: &ns,
        globalizations: &seen.globalizations,
        localizations: &seen.localizations,
        cluster_labels: &seen.cluster_labels,
    };
    let rendered = match base.annotations().get(known::REVISION_ANNOTATION) {
        Some(pin) => match pinned_revision(ctx, base, pin) {
            Ok(revision) => {
                let shares: Vec<Localization> = seen
                    .localizations
                    .iter()
                    .filter(|l| super::revision::replica_share(l))
                    .cloned()
                    .collect();
                render_revision(base, &revision, &shares, &previous)
            }
            Err(problem) => Rendered {
                problems: vec![problem],
                ..Rendered::default()
            },
        },
        None => render_feeds(
            base,
            &ctx.rt.config.reserved_namespace,
            &index::manifests_of(&ctx.manifests, &base.spec.feeds),
            &ctx.charts.state(),
            &scope,
            &previous,
        ),
    };
    for p in &rendered.problems {
        if p.reason == "FailedApplyingOverrides" {
            warn!(base = %key, error = %p.message, "override failed");
        }
        ctx.events.warn(base, &p.reason, &p.message);
    }
    if rendered.blocked() {
        // the feed's creation, the chart's status or the override's fix re-renders this Base;
        // the recheck is a safety net
        debug!(base = %key, "not rendered: a feed cannot be deployed yet");
        return Ok(recheck(Duration::from_secs(60)));
    }
    let changes = plan_descriptions(
        base,
        &rendered.objects,
        &rendered.charts,
        seen.existing.as_ref(),
        &seen.ours,
    )
    .map_err(|message| BaseError::Feed {
        base: key.clone(),
        message,
    })?;
    apply_descriptions(ctx, base, changes).await?;
    Ok(recheck(Duration::from_secs(
        if rendered.problems.is_empty() {
            300
        } else {
            60
        },
    )))
}

/// The I/O of [`plan_descriptions`]: one request per change.
/// The revision `pin` of the Base's own Subscription, or the blocking problem that keeps the
/// Base as it is (the revision's arrival re-renders it).
fn pinned_revision(ctx: &Ctx, base: &Base, pin: &str) -> Result<SubscriptionRevision, Problem> {
    let labels = base.labels();
    let ns = labels
        .get(known::CONFIG_SUBSCRIPTION_NAMESPACE_LABEL)
        .cloned()
        .unwrap_or_default();
    let found = ctx
        .revisions
        .get(&ObjectRef::new(pin).within(&ns))
        .filter(|r| {
            r.labels().get(known::CONFIG_SUBSCRIPTION_UID_LABEL)
                == labels.get(known::CONFIG_SUBSCRIPTION_UID_LABEL)
        })
        .ok_or_else(|| {
            Problem::blocking(
                "RevisionNotFound".into(),
                format!(
                    "Base {} is pinned to revision {ns}/{pin}, which its Subscription does not have",
                    key(base)
                ),
            )
        })?;
    found
        .data
        .as_ref()
        .map(|d| serde_json::from_value(d.0.clone()))
        .transpose()
        .ok()
        .flatten()
        .ok_or_else(|| {
            Problem::blocking(
                "RevisionUnreadable".into(),
                format!("revision {ns}/{pin} holds no readable content"),
            )
        })
}

async fn apply_descriptions(
    ctx: &Ctx,
    base: &Base,
    changes: Vec<DescriptionChange>,
) -> Result<(), BaseError> {
    let key = key(base);
    let ns = base.namespace().unwrap_or_default();
    let descs: Api<Description> = Api::namespaced(ctx.rt.client.clone(), &ns);
    let fail = |what: &'static str| ApiFailure::about(base, what);
    for change in changes {
        match change {
            DescriptionChange::Create { name, body } => {
                let written = apply::apply(&descs, FIELD_MANAGER, &name, &body)
                    .await
                    .map_err(fail("creating the Description"))?;
                // a Push deployer in this process applies it without waiting for the watch
                ctx.descriptions.observe_write(written);
                info!(base = %key, description = %name, "DescriptionCreated");
                let message = format!("Description {ns}/{name} is created successfully");
                ctx.events.normal(base, "DescriptionCreated", &message);
            }
            DescriptionChange::Update { name, body } => {
                let written = apply::apply(&descs, FIELD_MANAGER, &name, &body)
                    .await
                    .map_err(fail("updating the Description"))?;
                // a Push deployer in this process applies it without waiting for the watch
                ctx.descriptions.observe_write(written);
                info!(base = %key, description = %name, "DescriptionUpdated");
                let message = format!("Description {ns}/{name} is updated successfully");
                ctx.events.normal(base, "DescriptionUpdated", &message);
            }
            DescriptionChange::Delete { name } => {
                match descs.delete(&name, &DeleteParams::default()).await {
                    Ok(_) => {}
                    Err(e) if api_code(&e) == Some(404) => {}
                    Err(e) => return Err(fail("deleting a stale Description")(e).into()),
                }
            }
        }
    }
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

    fn base(feeds: Value) -> Base {
        serde_json::from_value(json!({
            "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Base",
            "metadata": {"name": "app-x1", "namespace": "clusternet-a", "uid": "b-1",
                "labels": {"clusters.clusternet.io/cluster-id": "id-a", "other": "no"}},
            "spec": {"feeds": feeds}
        }))
        .expect("a Base")
    }

    fn manifest(kind: &str, name: &str, template: Value) -> Arc<Manifest> {
        let (group, version) =
            feeds::group_version(template["apiVersion"].as_str().unwrap_or("v1"));
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Manifest",
                "metadata": {"name": format!("{kind}.demo.{name}"), "namespace": "clusternet-reserved",
                    "uid": format!("m-{name}"),
                    "labels": {"apps.clusternet.io/config.group": group,
                        "apps.clusternet.io/config.version": version,
                        "apps.clusternet.io/config.kind": kind,
                        "apps.clusternet.io/config.name": name,
                        "apps.clusternet.io/config.namespace": "demo"}},
                "template": template
            }))
            .expect("a Manifest"),
        )
    }

    fn cm(name: &str, data: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "demo"}, "data": {"k": data}})
    }

    fn feed(kind: &str, name: &str) -> Value {
        json!({"apiVersion": if kind == "HelmChart" { "apps.clusternet.io/v1alpha1" } else { "v1" },
            "kind": kind, "namespace": "demo", "name": name})
    }

    fn no_overrides() -> Scope<'static> {
        Scope {
            namespace: "clusternet-a",
            globalizations: &[],
            localizations: &[],
            cluster_labels: &[],
        }
    }

    fn description(base: &Base, objects: &[Value]) -> Description {
        let plan = plan_descriptions(base, objects, &[], None, &[]).expect("a plan");
        let Some(DescriptionChange::Create { body, .. }) = plan.into_iter().next() else {
            panic!("a create");
        };
        let mut d: Description = serde_json::from_value(body).expect("a Description");
        // what the API server adds
        d.labels_mut().insert("added-by-someone".into(), "x".into());
        d
    }

    #[test]
    fn a_pinned_base_renders_its_revision_with_its_own_namespaces_overrides_and_says_so() {
        let merge = |name: &str, value: Value| -> Value {
            json!({"name": name, "type": "MergePatch", "value": value.to_string()})
        };
        let revision: SubscriptionRevision = serde_json::from_value(json!({
            "subscription": {},
            "feeds": [
                {"feed": feed("ConfigMap", "a"), "objects": [cm("a", "old")]},
                {"feed": feed("HelmChart", "h"), "chart": {"repo": "oci://127.0.0.1:1/charts",
                    "chart": "hello", "version": "0.1.0", "targetNamespace": "hello"}},
            ],
            "overrides": {
                "clusternet-a": [{"feed": 0, "object": 0,
                    "overrides": [merge("here", json!({"data": {"k": "here"}}))]}],
                "clusternet-b": [{"feed": 0, "object": 0,
                    "overrides": [merge("there", json!({"data": {"k": "there"}}))]}],
            },
        }))
        .expect("a revision");
        let mut b = base(json!([feed("ConfigMap", "a"), feed("HelmChart", "h")]));
        let r = render_revision(&b, &revision, &[], &[]);
        assert!(r.problems.is_empty(), "{:?}", r.problems);
        assert_eq!(r.objects, vec![cm("a", "here")]);
        assert_eq!(r.charts.len(), 1);
        assert_eq!(r.charts[0].chart["spec"]["version"], json!("0.1.0"));
        // a Dividing Subscription's live replica share applies on top
        let share: Localization = serde_json::from_value(json!({
            "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Localization",
            "metadata": {"name": "share", "namespace": "clusternet-a",
                "labels": {"clusternet.io/created-by": "clusternet-controller-manager", "s-1": "Subscription"}},
            "spec": {"feed": feed("ConfigMap", "a"), "overridePolicy": "ApplyNow", "priority": 1000,
                "overrides": [merge("share", json!({"data": {"share": "1"}}))]},
        }))
        .expect("a Localization");
        let r = render_revision(&b, &revision, &[share], &[]);
        assert_eq!(r.objects[0]["data"], json!({"k": "here", "share": "1"}));
        // the Description says which revision it was rendered from
        b.annotations_mut()
            .insert(known::REVISION_ANNOTATION.into(), "app-0123456789".into());
        let d = description(&b, &r.objects);
        assert_eq!(
            d.annotations()
                .get(known::REVISION_ANNOTATION)
                .map(String::as_str),
            Some("app-0123456789")
        );
        // and a Description rendered from another revision is rewritten
        b.annotations_mut()
            .insert(known::REVISION_ANNOTATION.into(), "app-abcdefabcd".into());
        let plan = plan_descriptions(&b, &r.objects, &r.charts, Some(&d), &[]).expect("a plan");
        assert!(
            plan.iter().any(
                |c| matches!(c, DescriptionChange::Update { name, .. } if *name == generic_name(&b))
            ),
            "{plan:?}"
        );
    }

    #[test]
    fn feeds_render_from_their_manifests_and_missing_ones_are_problems() {
        let b = base(json!([
            feed("ConfigMap", "a"),
            feed("ConfigMap", "gone"),
            feed("HelmChart", "h")
        ]));
        let manifests = vec![manifest("ConfigMap", "a", cm("a", "1"))];
        let r = render_feeds(
            &b,
            "clusternet-reserved",
            &manifests,
            &[],
            &no_overrides(),
            &[],
        );
        assert_eq!(r.objects, vec![cm("a", "1")]);
        let reasons: Vec<&str> = r.problems.iter().map(|p| p.reason.as_str()).collect();
        assert_eq!(reasons, ["NonexistentConfigMap", "NonexistentHelmChart"]);
    }

    fn chart(generation: i64, status: Value) -> Arc<HelmChart> {
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "HelmChart",
                "metadata": {"name": "h", "namespace": "demo", "uid": "chart-uid",
                    "generation": generation},
                "spec": {"repo": "oci://127.0.0.1:1/charts", "chart": "hello", "version": "0.2.0",
                    "targetNamespace": "hello"},
                "status": status}))
            .expect("a HelmChart"),
        )
    }

    #[test]
    fn a_missing_feed_blocks_the_whole_base_and_overrides_that_fail_do_not() {
        let b = base(json!([feed("ConfigMap", "a"), feed("ConfigMap", "gone")]));
        let manifests = vec![manifest("ConfigMap", "a", cm("a", "1"))];
        let r = render_feeds(
            &b,
            "clusternet-reserved",
            &manifests,
            &[],
            &no_overrides(),
            &[],
        );
        assert!(r.blocked(), "{:?}", r.problems);
        assert_eq!(
            r.problems[0].message,
            "Base clusternet-a/app-x1 is using a nonexistent ConfigMap demo/gone"
        );
        // every feed there: nothing blocks
        let b = base(json!([feed("ConfigMap", "a")]));
        let r = render_feeds(
            &b,
            "clusternet-reserved",
            &manifests,
            &[],
            &no_overrides(),
            &[],
        );
        assert!(!r.blocked() && r.problems.is_empty(), "{:?}", r.problems);
    }

    #[test]
    fn a_chart_not_found_or_not_yet_looked_up_blocks_the_base() {
        let b = base(json!([feed("ConfigMap", "a"), feed("HelmChart", "h")]));
        let manifests = vec![manifest("ConfigMap", "a", cm("a", "1"))];
        let render = |c: Arc<HelmChart>| {
            render_feeds(
                &b,
                "clusternet-reserved",
                &manifests,
                &[c],
                &no_overrides(),
                &[],
            )
        };
        let reasons = |r: &Rendered| {
            r.problems
                .iter()
                .map(|p| (p.reason.clone(), p.blocking))
                .collect::<Vec<_>>()
        };
        // the version the registry does not have: upstream's HelmChartNotFound, with its reason
        let r = render(chart(
            3,
            json!({"phase": "NotFound", "reason": "not found a version matched 0.2.0", "observedGeneration": 3}),
        ));
        assert_eq!(reasons(&r), [("HelmChartNotFound".to_string(), true)]);
        assert!(
            r.problems[0]
                .message
                .contains("not found a version matched 0.2.0"),
            "{}",
            r.problems[0].message
        );
        // not looked up since the spec changed (the status is the previous version's): waits
        let r = render(chart(4, json!({"phase": "Found", "observedGeneration": 3})));
        assert_eq!(reasons(&r), [("VerifyingHelmChart".to_string(), true)]);
        // never looked up: waits
        let r = render(chart(1, json!({})));
        assert_eq!(reasons(&r), [("VerifyingHelmChart".to_string(), true)]);
        // found for this generation, or by a controller that records no generation: renders
        for status in [
            json!({"phase": "Found", "observedGeneration": 4}),
            json!({"phase": "Found"}),
        ] {
            let r = render(chart(4, status));
            assert!(!r.blocked(), "{:?}", r.problems);
            assert_eq!(r.charts.len(), 1);
        }
    }

    #[test]
    fn charts_render_into_a_helm_description_beside_the_generic_one() {
        let b = base(json!([feed("ConfigMap", "a"), feed("HelmChart", "h")]));
        let manifests = vec![manifest("ConfigMap", "a", cm("a", "1"))];
        let chart: Arc<HelmChart> = Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "HelmChart",
                "metadata": {"name": "h", "namespace": "demo", "uid": "chart-uid",
                    "managedFields": [{"manager": "kubectl"}]},
                "spec": {"repo": "http://127.0.0.1:1", "chart": "hello", "version": "0.1.0",
                    "targetNamespace": "hello"},
                "status": {"phase": "Found"}}))
            .expect("a HelmChart"),
        );
        let r = render_feeds(
            &b,
            "clusternet-reserved",
            &manifests,
            &[chart],
            &no_overrides(),
            &[],
        );
        assert!(r.problems.is_empty(), "{:?}", r.problems);
        assert_eq!(r.charts.len(), 1);
        // no value overrides: upstream's single space; the chart object without server state
        assert_eq!(r.charts[0].values, " ");
        assert_eq!(r.charts[0].chart["spec"]["chart"], "hello");
        assert!(r.charts[0].chart.get("status").is_none());
        assert!(r.charts[0].chart["metadata"].get("managedFields").is_none());
        let plan = plan_descriptions(&b, &r.objects, &r.charts, None, &[]).expect("a plan");
        let names: Vec<&str> = plan
            .iter()
            .map(|c| match c {
                DescriptionChange::Create { name, .. } => name.as_str(),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(names, [generic_name(&b), helm_name(&b)]);
        let DescriptionChange::Create { body, .. } = &plan[1] else {
            panic!("a create");
        };
        let d: Description = serde_json::from_value(body.clone()).expect("a Description");
        assert_eq!(d.spec.deployer, DescriptionDeployer::Helm);
        assert_eq!(
            d.spec.charts,
            [ChartReference {
                namespace: "demo".into(),
                name: "h".into()
            }]
        );
        assert_eq!((d.spec.raw.len(), d.spec.chart_raw.len()), (1, 1));
        // charts gone: the Helm Description goes
        let helm = Arc::new(d);
        let plan = plan_descriptions(&b, &r.objects, &[], None, &[helm]).expect("a plan");
        assert!(plan.contains(&DescriptionChange::Delete {
            name: helm_name(&b)
        }));
    }

    #[test]
    fn a_feed_whose_overrides_fail_keeps_what_was_rendered_before() {
        let b = base(json!([feed("ConfigMap", "a")]));
        let manifests = vec![manifest("ConfigMap", "a", cm("a", "new"))];
        let broken: Localization = serde_json::from_value(json!({
            "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Localization",
            "metadata": {"name": "l", "namespace": "clusternet-a"},
            "spec": {"priority": 500, "overridePolicy": "ApplyNow", "feed": feed("ConfigMap", "a"),
                "overrides": [{"name": "bad", "type": "JSONPatch", "value": "not json"}]}
        }))
        .expect("a Localization");
        let locs = [broken];
        let scope = Scope {
            localizations: &locs,
            ..no_overrides()
        };
        let previous = vec![cm("a", "old")];
        let r = render_feeds(
            &b,
            "clusternet-reserved",
            &manifests,
            &[],
            &scope,
            &previous,
        );
        assert_eq!(r.objects, previous);
        assert_eq!(r.problems[0].reason, "FailedApplyingOverrides");
        // nothing rendered before: the object is left out, not rendered without its overrides
        let r = render_feeds(&b, "clusternet-reserved", &manifests, &[], &scope, &[]);
        assert!(r.objects.is_empty());
    }

    #[test]
    fn a_missing_description_is_created_with_our_labels_finalizer_and_owner() {
        let b = base(json!([feed("ConfigMap", "a")]));
        let plan = plan_descriptions(&b, &[cm("a", "1")], &[], None, &[]).expect("a plan");
        let [DescriptionChange::Create { name, body }] = plan.as_slice() else {
            panic!("one create: {plan:?}");
        };
        assert_eq!(name, "app-x1-generic");
        assert_eq!(body["kind"], "Description");
        assert_eq!(body["metadata"]["namespace"], "clusternet-a");
        assert_eq!(
            body["metadata"]["finalizers"],
            json!([known::APP_FINALIZER])
        );
        assert_eq!(body["metadata"]["ownerReferences"][0]["uid"], "b-1");
        let labels = &body["metadata"]["labels"];
        assert_eq!(labels[known::CONFIG_UID_LABEL], "b-1");
        assert_eq!(labels[known::CLUSTER_ID_LABEL], "id-a");
        assert!(labels.get("other").is_none(), "only our labels: {labels}");
        // an apply body never carries what the server owns
        assert!(body["metadata"].get("resourceVersion").is_none());
        assert!(body.get("status").is_none());
    }

    #[test]
    fn an_unchanged_description_is_not_written_and_a_changed_one_is_updated() {
        let b = base(json!([feed("ConfigMap", "a")]));
        let d = description(&b, &[cm("a", "1")]);
        let ours = [Arc::new(d.clone())];
        assert_eq!(
            plan_descriptions(&b, &[cm("a", "1")], &[], Some(&d), &ours),
            Ok(vec![])
        );
        let plan = plan_descriptions(&b, &[cm("a", "2")], &[], Some(&d), &ours).expect("a plan");
        assert!(
            matches!(plan.as_slice(), [DescriptionChange::Update { .. }]),
            "{plan:?}"
        );
        // a label of ours gone: updated
        let mut unlabelled = d.clone();
        unlabelled.labels_mut().remove(known::CONFIG_NAME_LABEL);
        let plan =
            plan_descriptions(&b, &[cm("a", "1")], &[], Some(&unlabelled), &ours).expect("plan");
        assert!(
            matches!(plan.as_slice(), [DescriptionChange::Update { .. }]),
            "{plan:?}"
        );
    }

    #[test]
    fn a_description_being_deleted_waits_and_stale_ones_go() {
        let b = base(json!([feed("ConfigMap", "a")]));
        let mut d = description(&b, &[cm("a", "1")]);
        let mut helm = d.clone();
        helm.metadata.name = Some("app-x1-helm".into());
        let ours = [Arc::new(d.clone()), Arc::new(helm)];
        let plan = plan_descriptions(&b, &[cm("a", "1")], &[], Some(&d), &ours).expect("a plan");
        assert_eq!(
            plan,
            vec![DescriptionChange::Delete {
                name: "app-x1-helm".into()
            }]
        );
        // a Base of Helm charts only: no Generic Description, the old one goes
        let helm_only = base(json!([feed("HelmChart", "h")]));
        let plan = plan_descriptions(&helm_only, &[], &[], Some(&d), &ours[..1]).expect("a plan");
        assert_eq!(
            plan,
            vec![DescriptionChange::Delete {
                name: "app-x1-generic".into()
            }]
        );
        d.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
        ));
        assert!(plan_descriptions(&b, &[cm("a", "1")], &[], Some(&d), &[]).is_err());
    }

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
