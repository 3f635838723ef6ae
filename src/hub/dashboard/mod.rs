//! `dashboard.clusternet.io/v1alpha1` (`apis::dashboard`): the fleet's web pages, served by the
//! hub behind the parent's aggregator and by `kubectl clusternet dashboard` on 127.0.0.1.
//!
//! Read-only, from the hub's shared watch cache (never a list against the API server per page
//! view), and as the caller: before a page shows a kind, a SubjectAccessReview asks whether the
//! caller may `list` it in the parent; if not, the page says so and shows none of it. Pages are
//! rendered on the server ([`render`]); the stylesheet and one small script are embedded in the
//! binary. The script keeps an open page current: `pages/events` (server-sent events, fed by the
//! same cache's change streams, never by polling) says which kinds changed, at most once a
//! second, and the script fetches the page again and swaps its content. Every answer carries a
//! Content-Security-Policy that allows no inline script, no other origin and no framing.

pub mod render;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use http::{HeaderValue, Method, StatusCode, header};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

use super::Hub;
use super::authn::UserInfo;
use super::authz::Attributes;
use crate::apis::{ManagedCluster, Subscription};
use crate::kube_ext::quantity;
use render::{BoundCluster, ClusterRow, Page, Resource, SubscriptionRow};

/// The stylesheet, embedded at build time.
const STYLESHEET: &str = include_str!("dashboard.css");
/// The script that keeps an open page current (no framework: a dozen lines).
const SCRIPT: &str = include_str!("dashboard.js");

/// Changes arriving within this long reach an open page as one event (a fleet's heartbeats
/// change its ManagedClusters every few seconds each).
const COALESCE: Duration = Duration::from_secs(1);

/// How long a page waits for a kind's first list after the hub started watching it.
const CACHE_WAIT: Duration = Duration::from_secs(10);

/// The security headers of every dashboard answer: no script at all, styles and images from the
/// hub only, never framed, nothing cached or leaked in referrers.
const CSP: &str = "default-src 'none'; style-src 'self'; script-src 'self'; connect-src 'self'; \
                   img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'";

/// One request under `/apis/dashboard.clusternet.io/v1alpha1/pages/`: `page` is what follows.
pub async fn handle(
    hub: &Hub,
    user: &UserInfo,
    method: &Method,
    page: &str,
) -> warp::reply::Response {
    if method != Method::GET && method != Method::HEAD {
        return answer(
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain; charset=utf-8",
            "the dashboard is read-only: GET its pages\n".into(),
        );
    }
    let html = "text/html; charset=utf-8";
    match page.trim_end_matches('/') {
        "" | "clusters" => answer(StatusCode::OK, html, clusters_page(hub, user).await),
        "subscriptions" => answer(StatusCode::OK, html, subscriptions_page(hub, user).await),
        "assets/dashboard.css" => {
            answer(StatusCode::OK, "text/css; charset=utf-8", STYLESHEET.into())
        }
        "assets/dashboard.js" => answer(
            StatusCode::OK,
            "text/javascript; charset=utf-8",
            SCRIPT.into(),
        ),
        "events" => events(hub, user).await,
        other => answer(
            StatusCode::NOT_FOUND,
            html,
            render::document(
                Page::Clusters,
                &user.name,
                &format!(
                    "<p class=\"denied\">No page {:?} here.</p>\n",
                    render::escape(other)
                ),
            ),
        ),
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

/// `pages/events`: a server-sent `change` event, its data the kinds that changed
/// (`managedclusters`, `subscriptions`), whenever the shared cache sees them change; only the
/// kinds the caller may list, so an event never tells of what the caller may not see.
async fn events(hub: &Hub, user: &UserInfo) -> warp::reply::Response {
    use futures::StreamExt;
    use warp::Reply;
    let mut kinds: Vec<futures::stream::BoxStream<'static, &'static str>> = Vec::new();
    if may_list(
        hub,
        user,
        crate::apis::clusters::GROUP,
        "v1beta1",
        "managedclusters",
    )
    .await
    .is_ok()
    {
        let changes = hub.rt.cache.watch::<ManagedCluster>().subscribe();
        kinds.push(changes.map(|_| "managedclusters").boxed());
    }
    if may_list(
        hub,
        user,
        crate::apis::apps::GROUP,
        "v1alpha1",
        "subscriptions",
    )
    .await
    .is_ok()
    {
        let changes = hub.rt.cache.watch::<Subscription>().subscribe();
        kinds.push(changes.map(|_| "subscriptions").boxed());
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
            let mut changed = std::collections::BTreeSet::from([first]);
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

/// `Ok` when `user` may list `resource` of `group` in every namespace (a SubjectAccessReview),
/// else the reason in RBAC's words.
async fn may_list(
    hub: &Hub,
    user: &UserInfo,
    group: &str,
    version: &str,
    resource: &str,
) -> Result<(), String> {
    let attrs = Attributes::resource("list", group, version, resource, "", "");
    hub.authz
        .authorize(user, attrs)
        .await
        .map_err(|e| e.message)
}

/// The objects of kind `K` the page shows, from the hub's shared cache, once the SubjectAccessReview
/// says `user` may list `resource` in every namespace; else the reason in RBAC's words, which
/// the page shows instead.
async fn readable<K>(
    hub: &Hub,
    user: &UserInfo,
    version: &str,
    resource: &str,
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
    let group = K::group(&K::DynamicType::default()).into_owned();
    may_list(hub, user, &group, version, resource).await?;
    let shared = hub.rt.cache.watch::<K>();
    let _ = tokio::time::timeout(CACHE_WAIT, shared.ready()).await;
    let mut objects = shared.store.state();
    objects.sort_by_key(|o| (o.namespace(), o.name_any()));
    Ok(objects)
}

async fn clusters_page(hub: &Hub, user: &UserInfo) -> String {
    let main = match readable::<ManagedCluster>(hub, user, "v1beta1", "managedclusters").await {
        Err(why) => render::denied(&why),
        Ok(clusters) => {
            let now = Timestamp::now();
            let rows: Vec<ClusterRow> = clusters
                .iter()
                .map(|mc| cluster_row(mc, now, hub.tunnels.is_connected(&mc.spec.cluster_id)))
                .collect();
            render::clusters(&rows)
        }
    };
    render::document(Page::Clusters, &user.name, &main)
}

async fn subscriptions_page(hub: &Hub, user: &UserInfo) -> String {
    let main = match readable::<Subscription>(hub, user, "v1alpha1", "subscriptions").await {
        Err(why) => render::denied(&why),
        Ok(subs) => {
            let rows: Vec<SubscriptionRow> = subs.iter().map(|s| subscription_row(s)).collect();
            render::subscriptions(&rows)
        }
    };
    render::document(Page::Subscriptions, &user.name, &main)
}

/// The Clusters page's row of `mc` at `now`.
pub fn cluster_row(mc: &ManagedCluster, now: Timestamp, tunnel: bool) -> ClusterRow {
    let status = mc.status.clone().unwrap_or_default();
    let ready = status.conditions.iter().find(|c| c.type_ == "Ready");
    let milli = |m: &BTreeMap<String, Quantity>, key: &str| {
        m.get(key).and_then(|q| quantity::milli(q).ok())
    };
    let usage = status.resource_usage.clone().unwrap_or_default();
    let used = |q: &Option<Quantity>| q.as_ref().and_then(|q| quantity::milli(q).ok());
    ClusterRow {
        namespace: mc.namespace().unwrap_or_default(),
        name: mc.name_any(),
        cluster_id: mc.spec.cluster_id.clone(),
        ready: ready.map(|c| c.status.clone()).unwrap_or_default(),
        ready_reason: ready.map(|c| c.reason.clone()).unwrap_or_default(),
        heartbeat_age: status
            .last_observed_time
            .as_ref()
            .map(|t| now.as_second() - t.0.as_second()),
        sync_mode: mc.spec.sync_mode.to_string(),
        k8s_version: status.k8s_version.clone(),
        cpu: Resource {
            capacity: milli(&status.capacity, "cpu"),
            allocatable: milli(&status.allocatable, "cpu"),
            used: used(&usage.cpu_usage),
        },
        memory: Resource {
            capacity: milli(&status.capacity, "memory"),
            allocatable: milli(&status.allocatable, "memory"),
            used: used(&usage.memory_usage),
        },
        // Clusternet's own labels repeat the name, ID and agent: the user's say something
        labels: mc
            .labels()
            .iter()
            .filter(|(k, _)| {
                !k.starts_with("clusters.clusternet.io/")
                    && k.as_str() != "clusternet.io/created-by"
            })
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        taints: mc
            .spec
            .taints
            .iter()
            .map(|t| {
                format!(
                    "{}={}:{}",
                    t.key,
                    t.value.clone().unwrap_or_default(),
                    t.effect
                )
            })
            .collect(),
        tunnel,
    }
}

/// The Subscriptions page's row of `s`.
pub fn subscription_row(s: &Subscription) -> SubscriptionRow {
    let status = s.status.clone().unwrap_or_default();
    let feed_name = |kind: &str, ns: &str, name: &str| {
        if ns.is_empty() {
            format!("{kind} {name}")
        } else {
            format!("{kind} {ns}/{name}")
        }
    };
    let feeds: Vec<String> = s
        .spec
        .feeds
        .iter()
        .map(|f| feed_name(&f.kind, &f.namespace, &f.name))
        .collect();
    let bound = status
        .binding_clusters
        .iter()
        .enumerate()
        .map(|(i, cluster)| {
            let replicas = s
                .spec
                .feeds
                .iter()
                .zip(&feeds)
                .filter_map(|(f, name)| {
                    let n = *status.replicas.get(&f.key())?.get(i)?;
                    Some((name.clone(), n))
                })
                .collect();
            // the aggregated details are in bindingClusters order; the name check keeps a status
            // that lags a new binding from being counted for another cluster
            let name = cluster.rsplit('/').next().unwrap_or_default();
            let available = status
                .aggregated_statuses
                .iter()
                .filter(|agg| {
                    agg.feed_status_details
                        .get(i)
                        .is_some_and(|d| d.feed_status.available && d.cluster_name == name)
                })
                .count();
            BoundCluster {
                cluster: cluster.clone(),
                replicas,
                available,
                feeds: s.spec.feeds.len(),
            }
        })
        .collect();
    SubscriptionRow {
        namespace: s.namespace().unwrap_or_default(),
        name: s.name_any(),
        strategy: s.spec.effective_scheduling_strategy().to_string(),
        feeds,
        bound,
        conditions: status
            .conditions
            .iter()
            .map(|c| {
                let mut t = format!("{}={} ({})", c.type_, c.status, c.reason);
                if !c.message.is_empty() {
                    t.push_str(": ");
                    t.push_str(&c.message);
                }
                t
            })
            .collect(),
    }
}
