//! `dashboard.clusternet.io/v1alpha1` (`apis::dashboard`): the fleet's web pages, served by the
//! hub behind the parent's aggregator and by `kubectl clusternet dashboard` on 127.0.0.1.
//!
//! Read-only, from the hub's shared watch cache (never a list against the API server per page
//! view), and as the caller: before a page shows a kind, a SubjectAccessReview asks whether the
//! caller may `list` it in the parent; if not, the page says so and shows none of it. Pages are
//! rendered on the server with maud's `html!` ([`render`], and the few messages here), so text
//! from an object reaches a page only through maud's escaping; the stylesheet and one small
//! script are embedded in the binary. The script keeps an open page current: `pages/events`
//! (server-sent events, fed by the same cache's change streams, never by polling) says which
//! kinds changed, at most once a second, and the script fetches the page again and swaps its
//! content. Every answer carries a Content-Security-Policy that allows no inline script, no other
//! origin and no framing.

pub mod render;
pub mod rows;

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::stream::BoxStream;
use http::{HeaderValue, Method, StatusCode, header};
use k8s_openapi::api::core::v1::Event;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use maud::{Markup, html};

use super::Hub;
use super::authn::UserInfo;
use super::authz::Attributes;
use crate::apis::placement::{self as placement_api, PlacementReviewSpec};
use crate::apis::{
    Base, ClusterRegistrationRequest, Description, HelmChart, ManagedCluster, Manifest,
    Subscription, known,
};
use crate::runtime::cache::Shared;
use render::{ClusterRow, DescriptionRow, Doc, Page, pager};

/// The stylesheet, embedded at build time.
const STYLESHEET: &str = include_str!("dashboard.css");
/// The script that keeps an open page current (no framework: a few dozen lines).
const SCRIPT: &str = include_str!("dashboard.js");

/// Changes arriving within this long reach an open page as one event (a fleet's heartbeats
/// change its ManagedClusters every few seconds each).
const COALESCE: Duration = Duration::from_secs(1);

/// How long a page waits for a kind's first list after the hub started watching it.
const CACHE_WAIT: Duration = Duration::from_secs(10);

/// Events a detail page shows, newest first.
const EVENTS_SHOWN: usize = 20;

/// The Events the dashboard caches: those about Clusternet's own kinds (a field-selected watch
/// per API version), not every Event of the parent.
const EVENT_SELECTORS: [&str; 2] = [
    "involvedObject.apiVersion=apps.clusternet.io/v1alpha1",
    "involvedObject.apiVersion=clusters.clusternet.io/v1beta1",
];

/// The security headers of every dashboard answer: the hub's own script, styles, images,
/// connections and forms (the lists' filter) only, never framed, nothing cached or leaked in
/// referrers.
const CSP: &str = "default-src 'none'; style-src 'self'; script-src 'self'; connect-src 'self'; \
                   img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'self'";

/// A kind the pages show: what the SubjectAccessReview asks for, and the name the event stream
/// and the pages' `data-kinds` use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Kind {
    group: &'static str,
    version: &'static str,
    resource: &'static str,
}

const MANAGED_CLUSTERS: Kind = Kind {
    group: crate::apis::clusters::GROUP,
    version: "v1beta1",
    resource: "managedclusters",
};
const REGISTRATIONS: Kind = Kind {
    group: crate::apis::clusters::GROUP,
    version: "v1beta1",
    resource: "clusterregistrationrequests",
};
const SUBSCRIPTIONS: Kind = apps_kind("subscriptions");
const BASES: Kind = apps_kind("bases");
const DESCRIPTIONS: Kind = apps_kind("descriptions");
const MANIFESTS: Kind = apps_kind("manifests");
const HELM_CHARTS: Kind = apps_kind("helmcharts");
const EVENTS: Kind = Kind {
    group: "",
    version: "v1",
    resource: "events",
};

const fn apps_kind(resource: &'static str) -> Kind {
    Kind {
        group: crate::apis::apps::GROUP,
        version: "v1alpha1",
        resource,
    }
}

/// The query of a page: `page` and `q` of a list, `namespace` and `name` of a detail page,
/// `explain`.
type Query = HashMap<String, String>;

/// Which rows of a list: page `number` (from 1) of those matching `q`.
struct List<'a> {
    number: usize,
    /// Words that must all appear (case-insensitive) in an object's name, namespace, labels
    /// (`key=value`) or what its kind adds (a cluster's ID, a Subscription's feeds).
    q: &'a str,
}

impl List<'_> {
    fn matches(&self, meta: &kube::api::ObjectMeta, extra: &str) -> bool {
        if self.q.is_empty() {
            return true;
        }
        let mut text = format!(
            "{} {} {extra}",
            meta.namespace.as_deref().unwrap_or_default(),
            meta.name.as_deref().unwrap_or_default()
        );
        for (k, v) in meta.labels.iter().flatten() {
            text.push_str(&format!(" {k}={v}"));
        }
        let text = text.to_lowercase();
        self.q
            .to_lowercase()
            .split_whitespace()
            .all(|word| text.contains(word))
    }
}

/// One request under `/apis/dashboard.clusternet.io/v1alpha1/pages/`: `page` is what follows,
/// `query` its query string's parameters.
pub async fn handle(
    hub: &Hub,
    user: &UserInfo,
    method: &Method,
    page: &str,
    query: &Query,
) -> warp::reply::Response {
    if method != Method::GET && method != Method::HEAD {
        return answer(
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain; charset=utf-8",
            "the dashboard is read-only: GET its pages\n".into(),
        );
    }
    let list = List {
        number: query
            .get("page")
            .and_then(|p| p.parse::<usize>().ok())
            .unwrap_or(1),
        q: query.get("q").map_or("", |q| q.trim()),
    };
    let key = || {
        (
            query.get("namespace").map_or("", String::as_str),
            query.get("name").map_or("", String::as_str),
        )
    };
    let html = |(code, body): (StatusCode, String)| answer(code, "text/html; charset=utf-8", body);
    let ok = |body: String| html((StatusCode::OK, body));
    match page.trim_end_matches('/') {
        "" | "clusters" => ok(clusters_page(hub, user, &list).await),
        "subscriptions" => ok(subscriptions_page(hub, user, &list).await),
        "registrations" => ok(registrations_page(hub, user, &list).await),
        "manifests" => ok(manifests_page(hub, user, &list).await),
        "helmcharts" => ok(helmcharts_page(hub, user, &list).await),
        "cluster" => {
            let (ns, name) = key();
            html(cluster_page(hub, user, ns, name).await)
        }
        "subscription" => {
            let (ns, name) = key();
            let explain = query.get("explain").is_some_and(|v| v != "0");
            html(subscription_page(hub, user, ns, name, explain).await)
        }
        "assets/dashboard.css" => {
            answer(StatusCode::OK, "text/css; charset=utf-8", STYLESHEET.into())
        }
        "assets/dashboard.js" => answer(
            StatusCode::OK,
            "text/javascript; charset=utf-8",
            SCRIPT.into(),
        ),
        "events" => events(hub, user).await,
        other => html((
            StatusCode::NOT_FOUND,
            render::document(
                &Doc {
                    page: Page::Clusters,
                    title: "Not found",
                    user: &user.name,
                    kinds: &[],
                    filter: None,
                },
                html! { p class="denied" { "No page " (format!("{other:?}")) " here." } "\n" },
            ),
        )),
    }
}

fn answer(code: StatusCode, content_type: &str, body: String) -> warp::reply::Response {
    let mut r = warp::reply::Response::new(body.into());
    *r.status_mut() = code;
    secure(&mut r, content_type);
    r
}

/// The content type and the security headers of every dashboard answer.
fn secure(r: &mut warp::reply::Response, content_type: &str) {
    let h = r.headers_mut();
    let set = |h: &mut http::HeaderMap, k: header::HeaderName, v: &str| {
        if let Ok(v) = HeaderValue::from_str(v) {
            h.insert(k, v);
        }
    };
    set(h, header::CONTENT_TYPE, content_type);
    set(h, header::CONTENT_SECURITY_POLICY, CSP);
    set(h, header::X_FRAME_OPTIONS, "DENY");
    set(h, header::X_CONTENT_TYPE_OPTIONS, "nosniff");
    set(h, header::REFERRER_POLICY, "no-referrer");
    set(h, header::CACHE_CONTROL, "no-store");
}

/// The shared caches of the Events the dashboard shows (see [`EVENT_SELECTORS`]).
fn event_caches(hub: &Hub) -> Vec<Shared<Event>> {
    EVENT_SELECTORS
        .iter()
        .map(|fields| hub.rt.cache.watch_fields::<Event>(fields))
        .collect()
}

/// The change stream of `kind` in the shared cache: its resource name once per change.
fn changes(hub: &Hub, kind: Kind) -> BoxStream<'static, &'static str> {
    fn tag<K: Send + Sync + 'static>(
        s: BoxStream<'static, Arc<K>>,
        name: &'static str,
    ) -> BoxStream<'static, &'static str> {
        s.map(move |_| name).boxed()
    }
    let name = kind.resource;
    let cache = &hub.rt.cache;
    match kind {
        MANAGED_CLUSTERS => tag(cache.watch::<ManagedCluster>().subscribe(), name),
        REGISTRATIONS => tag(
            cache.watch::<ClusterRegistrationRequest>().subscribe(),
            name,
        ),
        SUBSCRIPTIONS => tag(cache.watch::<Subscription>().subscribe(), name),
        BASES => tag(cache.watch::<Base>().subscribe(), name),
        DESCRIPTIONS => tag(cache.watch::<Description>().subscribe(), name),
        MANIFESTS => tag(cache.watch::<Manifest>().subscribe(), name),
        HELM_CHARTS => tag(cache.watch::<HelmChart>().subscribe(), name),
        _ => futures::stream::select_all(
            event_caches(hub)
                .into_iter()
                .map(|c| tag(c.subscribe(), name)),
        )
        .boxed(),
    }
}

/// `pages/events`: a server-sent `change` event, its data the kinds that changed
/// (`managedclusters`, `subscriptions`, `descriptions`, ...), whenever the shared cache sees them
/// change; only the kinds the caller may list, so an event never tells of what the caller may
/// not see. A page fetches itself again only for the kinds it shows (its `data-kinds`).
async fn events(hub: &Hub, user: &UserInfo) -> warp::reply::Response {
    use warp::Reply;
    let mut kinds: Vec<BoxStream<'static, &'static str>> = Vec::new();
    for kind in [
        MANAGED_CLUSTERS,
        REGISTRATIONS,
        SUBSCRIPTIONS,
        BASES,
        DESCRIPTIONS,
        MANIFESTS,
        HELM_CHARTS,
        EVENTS,
    ] {
        if may(hub, user, "list", kind, "").await.is_ok() {
            kinds.push(changes(hub, kind));
        }
    }
    if kinds.is_empty() {
        // nothing to tell this caller: the stream stays open (keep-alives only) rather than
        // ending, which would make the page reconnect every few seconds
        kinds.push(futures::stream::pending().boxed());
    }
    let (tx, rx) = tokio::sync::mpsc::channel::<String>(4);
    tokio::spawn(async move {
        let mut changes = futures::stream::select_all(kinds);
        loop {
            // the page went away (its stream was dropped): stop following the cache for it,
            // even when nothing changes
            let first = tokio::select! {
                () = tx.closed() => return,
                next = changes.next() => match next {
                    Some(kind) => kind,
                    None => return,
                },
            };
            let mut changed = BTreeSet::from([first]);
            let window = tokio::time::sleep(COALESCE);
            tokio::pin!(window);
            loop {
                tokio::select! {
                    () = &mut window => break,
                    next = changes.next() => match next {
                        Some(kind) => { changed.insert(kind); }
                        None => break,
                    },
                }
            }
            let data = changed.into_iter().collect::<Vec<_>>().join(",");
            if tx.send(data).await.is_err() {
                return;
            }
        }
    });
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        let data = rx.recv().await?;
        Some((
            Ok::<_, std::convert::Infallible>(
                warp::sse::Event::default().event("change").data(data),
            ),
            rx,
        ))
    });
    let mut r = warp::sse::reply(warp::sse::keep_alive().stream(stream)).into_response();
    secure(&mut r, "text/event-stream");
    r
}

/// `Ok` when `user` may `verb` `kind` in `namespace` ("" = every namespace; a SubjectAccessReview),
/// else the reason in RBAC's words.
async fn may(
    hub: &Hub,
    user: &UserInfo,
    verb: &str,
    kind: Kind,
    namespace: &str,
) -> Result<(), String> {
    let attrs = Attributes::resource(verb, kind.group, kind.version, kind.resource, namespace, "");
    hub.authz
        .authorize(user, attrs)
        .await
        .map_err(|e| e.message)
}

/// The objects of `shared` once it has listed (or [`CACHE_WAIT`] passed), sorted by namespace
/// and name.
async fn cached<K>(shared: Shared<K>) -> Vec<Arc<K>>
where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    let _ = tokio::time::timeout(CACHE_WAIT, shared.ready()).await;
    let mut objects = shared.store.state();
    objects.sort_by_key(|o| (o.namespace(), o.name_any()));
    objects
}

/// The objects of kind `K` (the resource `kind`) in `namespace` ("" = all) from the hub's shared
/// cache, once a SubjectAccessReview says `user` may list them there; else the reason in RBAC's
/// words, which the page shows instead.
async fn readable<K>(
    hub: &Hub,
    user: &UserInfo,
    kind: Kind,
    namespace: &str,
) -> Result<Vec<Arc<K>>, String>
where
    K: kube::Resource
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync,
{
    may(hub, user, "list", kind, namespace).await?;
    let mut objects = cached(hub.rt.cache.watch::<K>()).await;
    if !namespace.is_empty() {
        objects.retain(|o| o.namespace().as_deref() == Some(namespace));
    }
    Ok(objects)
}

/// The Events about Clusternet's objects in `namespace` ("" = all) the caller may list.
async fn readable_events(
    hub: &Hub,
    user: &UserInfo,
    namespace: &str,
) -> Result<Vec<Arc<Event>>, String> {
    may(hub, user, "list", EVENTS, namespace).await?;
    let mut all = Vec::new();
    for cache in event_caches(hub) {
        all.extend(cached(cache).await);
    }
    if !namespace.is_empty() {
        all.retain(|e| e.namespace().as_deref() == Some(namespace));
    }
    Ok(all)
}

/// A list page: the objects `K` of `kind` that match the filter (`extra`: what the filter
/// reads besides the metadata), the page of them rendered by `render` (its rows, how many
/// matched, the navigation), or what the caller may not see.
#[allow(clippy::too_many_arguments)]
async fn list_page<K, R>(
    hub: &Hub,
    user: &UserInfo,
    page: Page,
    kind: Kind,
    list: &List<'_>,
    extra: impl Fn(&K) -> String,
    rows: impl Fn(&K, Timestamp) -> R,
    render: impl Fn(&[R], usize, &Markup) -> Markup,
) -> String
where
    K: kube::Resource
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync,
{
    let main = match readable::<K>(hub, user, kind, "").await {
        Err(why) => render::denied(&why),
        Ok(objects) => {
            let now = Timestamp::now();
            let total = objects.len();
            let matching: Vec<&Arc<K>> = objects
                .iter()
                .filter(|o| list.matches(o.meta(), &extra(o)))
                .collect();
            let (range, nav) = pager(
                matching.len(),
                list.number,
                &render::filtered_path(page, list.q),
            );
            let page_rows: Vec<R> = matching[range].iter().map(|o| rows(o, now)).collect();
            html! {
                (render::filter_summary(page, list.q, matching.len(), total))
                @if matching.is_empty() && total > 0 {
                    p class="empty" { "Nothing matches." }
                    "\n"
                } @else {
                    (render(&page_rows, matching.len(), &nav))
                }
            }
        }
    };
    render::document(
        &Doc {
            page,
            title: page.title(),
            user: &user.name,
            kinds: &[kind.resource],
            filter: Some(list.q),
        },
        main,
    )
}

fn is_ready(mc: &ManagedCluster) -> bool {
    mc.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True")
    })
}

async fn clusters_page(hub: &Hub, user: &UserInfo, list: &List<'_>) -> String {
    use kube::Resource;
    // the summary counts the ready clusters of every page, not only of the rows shown (called
    // once the cache has listed)
    let ready = || {
        hub.rt
            .cache
            .watch::<ManagedCluster>()
            .store
            .state()
            .iter()
            .filter(|mc| list.matches(mc.meta(), &mc.spec.cluster_id) && is_ready(mc))
            .count()
    };
    list_page::<ManagedCluster, _>(
        hub,
        user,
        Page::Clusters,
        MANAGED_CLUSTERS,
        list,
        |mc| mc.spec.cluster_id.clone(),
        |mc, now| cluster_row(hub, mc, now),
        |rows, total, nav| render::clusters(rows, ready().min(total), total, nav),
    )
    .await
}

fn cluster_row(hub: &Hub, mc: &ManagedCluster, now: Timestamp) -> ClusterRow {
    rows::cluster_row(mc, now, hub.tunnels.is_connected(&mc.spec.cluster_id))
}

async fn subscriptions_page(hub: &Hub, user: &UserInfo, list: &List<'_>) -> String {
    list_page::<Subscription, _>(
        hub,
        user,
        Page::Subscriptions,
        SUBSCRIPTIONS,
        list,
        |s| {
            let feeds: Vec<String> = s.spec.feeds.iter().map(|f| f.key()).collect();
            format!(
                "{} {}",
                feeds.join(" "),
                s.status
                    .as_ref()
                    .map(|st| st.binding_clusters.join(" "))
                    .unwrap_or_default()
            )
        },
        |s, _| rows::subscription_row(s),
        render::subscriptions,
    )
    .await
}

async fn registrations_page(hub: &Hub, user: &UserInfo, list: &List<'_>) -> String {
    list_page::<ClusterRegistrationRequest, _>(
        hub,
        user,
        Page::Registrations,
        REGISTRATIONS,
        list,
        |r| {
            let labels: Vec<String> = r
                .spec
                .cluster_labels
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            format!(
                "{} {} {} {}",
                r.spec.cluster_name,
                r.spec.cluster_id,
                r.spec.cluster_namespace,
                labels.join(" ")
            )
        },
        rows::registration_row,
        render::registrations,
    )
    .await
}

async fn manifests_page(hub: &Hub, user: &UserInfo, list: &List<'_>) -> String {
    // which Subscriptions use each Manifest, from the cache, only for a reader who may list them
    let subs = readable::<Subscription>(hub, user, SUBSCRIPTIONS, "")
        .await
        .ok();
    let reserved = hub.rt.config.reserved_namespace.as_str();
    list_page::<Manifest, _>(
        hub,
        user,
        Page::Manifests,
        MANIFESTS,
        list,
        rows::manifest_object,
        |m, now| rows::manifest_row(m, now, subs.as_deref(), reserved),
        render::manifests,
    )
    .await
}

async fn helmcharts_page(hub: &Hub, user: &UserInfo, list: &List<'_>) -> String {
    list_page::<HelmChart, _>(
        hub,
        user,
        Page::HelmCharts,
        HELM_CHARTS,
        list,
        |c| format!("{} {}", c.spec.options.repo, c.spec.options.chart),
        rows::helmchart_row,
        render::helmcharts,
    )
    .await
}

/// The object `namespace/name` of kind `K` from the cache, once the caller may `get` it; else
/// the page's answer (forbidden, or not found).
async fn one<K>(
    hub: &Hub,
    user: &UserInfo,
    kind: Kind,
    namespace: &str,
    name: &str,
) -> Result<Arc<K>, (StatusCode, Markup)>
where
    K: kube::Resource
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync,
{
    if namespace.is_empty() || name.is_empty() {
        return Err((
            StatusCode::BAD_REQUEST,
            html! {
                p class="denied" {
                    "This page needs a namespace and a name ("
                    code { "?namespace=...&name=..." }
                    ")."
                }
                "\n"
            },
        ));
    }
    may(hub, user, "get", kind, namespace)
        .await
        .map_err(|why| (StatusCode::FORBIDDEN, render::denied(&why)))?;
    let shared = hub.rt.cache.watch::<K>();
    let _ = tokio::time::timeout(CACHE_WAIT, shared.ready()).await;
    shared
        .store
        .state()
        .into_iter()
        .find(|o| o.namespace().as_deref() == Some(namespace) && o.name_any() == name)
        .ok_or_else(|| {
            (
                StatusCode::NOT_FOUND,
                html! {
                    p class="empty" {
                        "There is no " (kind.resource) " " (namespace) "/" (name)
                        " in the parent cluster (it may have been deleted)."
                    }
                    "\n"
                },
            )
        })
}

/// `cluster?namespace=NS&name=NAME`: one ManagedCluster, what is deployed there (its
/// namespace's Descriptions with each object's status) and its recent events.
async fn cluster_page(
    hub: &Hub,
    user: &UserInfo,
    namespace: &str,
    name: &str,
) -> (StatusCode, String) {
    let title = format!("Cluster {name}");
    let kinds = [
        MANAGED_CLUSTERS.resource,
        DESCRIPTIONS.resource,
        EVENTS.resource,
    ];
    let doc = |main: Markup| {
        render::document(
            &Doc {
                page: Page::Clusters,
                title: &title,
                user: &user.name,
                kinds: &kinds,
                filter: None,
            },
            main,
        )
    };
    let mc = match one::<ManagedCluster>(hub, user, MANAGED_CLUSTERS, namespace, name).await {
        Ok(mc) => mc,
        Err((code, main)) => return (code, doc(main)),
    };
    let now = Timestamp::now();
    let row = render::clusters_table(&[cluster_row(hub, &mc, now)]);
    let facts = render::cluster_facts(&rows::cluster_facts(&mc, now));
    let deployed = match readable::<Description>(hub, user, DESCRIPTIONS, namespace).await {
        Err(why) => render::denied(&why),
        Ok(descriptions) => {
            let rows: Vec<DescriptionRow> = descriptions
                .iter()
                .map(|d| rows::description_row(d, now))
                .collect();
            render::descriptions(&rows, false)
        }
    };
    let events = match readable_events(hub, user, namespace).await {
        Err(why) => render::denied(&why),
        Ok(events) => render::events(&rows::event_rows(
            events.iter().map(|e| &**e),
            |_| true,
            now,
            EVENTS_SHOWN,
        )),
    };
    let main = html! {
        (row)
        (facts)
        (render::section("deployed", "Deployed here", deployed))
        (render::section("events", "Recent events", events))
    };
    (StatusCode::OK, doc(main))
}

/// `subscription?namespace=NS&name=NAME[&explain=1]`: one Subscription, its Bases and
/// Descriptions per cluster, the scheduler's kept decision and, on request, the placement
/// what-if run now (the `placementreviews` computation, with the caller's rights), and its
/// recent events and its Bases'.
async fn subscription_page(
    hub: &Hub,
    user: &UserInfo,
    namespace: &str,
    name: &str,
    explain: bool,
) -> (StatusCode, String) {
    let title = format!("Subscription {name}");
    // a page with the what-if stays as it is: each refresh would run the what-if again
    let kinds: &[&str] = if explain {
        &[]
    } else {
        &[
            SUBSCRIPTIONS.resource,
            BASES.resource,
            DESCRIPTIONS.resource,
            EVENTS.resource,
        ]
    };
    let doc = |main: Markup| {
        render::document(
            &Doc {
                page: Page::Subscriptions,
                title: &title,
                user: &user.name,
                kinds,
                filter: None,
            },
            main,
        )
    };
    let sub = match one::<Subscription>(hub, user, SUBSCRIPTIONS, namespace, name).await {
        Ok(s) => s,
        Err((code, main)) => return (code, doc(main)),
    };
    let now = Timestamp::now();
    let uid = sub.uid().unwrap_or_default();
    let row = render::subscriptions_table(&[rows::subscription_row(&sub)]);

    // Bases and Descriptions live in the clusters' namespaces: listing them needs every namespace
    let bases = readable::<Base>(hub, user, BASES, "").await.map(|bases| {
        bases
            .into_iter()
            .filter(|b| b.labels().get(known::CONFIG_SUBSCRIPTION_UID_LABEL) == Some(&uid))
            .collect::<Vec<_>>()
    });
    let descriptions = readable::<Description>(hub, user, DESCRIPTIONS, "").await;
    let deployed = match (&bases, &descriptions) {
        (Err(why), _) | (_, Err(why)) => render::denied(why),
        (Ok(bases), Ok(descriptions)) => {
            let mine: Vec<&Description> = descriptions
                .iter()
                .map(|d| &**d)
                .filter(|d| d.labels().get(known::CONFIG_SUBSCRIPTION_UID_LABEL) == Some(&uid))
                .collect();
            let rows = rows::deployed_rows(bases.iter().map(|b| &**b), &mine, now);
            render::descriptions(&rows, true)
        }
    };

    let decision = match sub.status.as_ref().and_then(|s| s.last_decision.as_deref()) {
        Some(d) => render::preformatted(&crate::plugin::placement::render_decision(d)),
        None => html! {
            p class="empty" {
                "The scheduler has kept no decision for it (not scheduled yet, or its CRD \
                 predates status.lastDecision)."
            }
            "\n"
        },
    };
    let what_if = if explain {
        explain_now(hub, user, namespace, name).await
    } else {
        html! {
            p {
                a href={ (render::detail_link("subscription", namespace, name)) "&explain=1" } {
                    "Explain its placement now"
                }
                " (the placement what-if over the parent's current state; the page then stops \
                 updating)."
            }
            "\n"
        }
    };

    let base_uids: BTreeSet<String> = bases.iter().flatten().filter_map(|b| b.uid()).collect();
    let events = match readable_events(hub, user, "").await {
        Err(why) => render::denied(&why),
        Ok(events) => render::events(&rows::event_rows(
            events.iter().map(|e| &**e),
            |e| {
                let o = &e.involved_object;
                o.uid.as_deref() == Some(uid.as_str())
                    || o.uid.as_ref().is_some_and(|u| base_uids.contains(u))
                    || (o.kind.as_deref() == Some(known::SUBSCRIPTION_KIND)
                        && o.namespace.as_deref() == Some(namespace)
                        && o.name.as_deref() == Some(name))
            },
            now,
            EVENTS_SHOWN,
        )),
    };
    let rollout = match (
        &sub.spec.rollout_strategy_name,
        sub.status.as_ref().and_then(|s| s.rollout.as_deref()),
    ) {
        (None, _) => html! {
            p class="empty" {
                "No rollout strategy: every change reaches every cluster at once."
            }
            "\n"
        },
        (Some(strategy), None) => html! {
            p class="empty" { "Rollout strategy " (strategy) ": no rollout recorded yet." }
            "\n"
        },
        (Some(_), Some(r)) => render::rollout(r),
    };
    let main = html! {
        (row)
        (render::section("rollout", "Rollout", rollout))
        (render::section("deployed", "Bases and Descriptions per cluster", deployed))
        (render::section("placement", "Placement", html! { (decision) (what_if) }))
        (render::section("events", "Recent events", events))
    };
    (StatusCode::OK, doc(main))
}

/// The placement what-if of the Subscription `namespace/name`, as the caller: what
/// `kubectl clusternet placement subscription NAME` prints.
async fn explain_now(hub: &Hub, user: &UserInfo, namespace: &str, name: &str) -> Markup {
    let reviews = Kind {
        group: placement_api::GROUP,
        version: placement_api::VERSION,
        resource: placement_api::RESOURCE,
    };
    if let Err(why) = may(hub, user, "create", reviews, namespace).await {
        return render::denied(&why);
    }
    let spec = PlacementReviewSpec {
        subscription_name: name.to_string(),
        ..PlacementReviewSpec::default()
    };
    match super::placement::review_placement(hub, user, namespace, &spec).await {
        Err(e) => html! {
            p class="denied" role="alert" { "The placement what-if failed: " (e.message) }
            "\n"
        },
        Ok(status) => {
            let mut text = format!("Scheduled now:\n\n{}", status.explanation.table());
            if let Some(change) = crate::plugin::placement::would_change_text(status.would_change) {
                text.push('\n');
                text.push_str(change);
            }
            render::preformatted(&text)
        }
    }
}
