//! The dashboard's HTML, rendered on the server from plain rows (the pages work without their
//! one script, which only keeps them current; the Content-Security-Policy allows no inline
//! script). Everything that comes from an object is escaped here, at the one place text becomes
//! HTML.

use std::fmt::Write;

/// Which list a document is (or belongs to, for a detail page), for the navigation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Page {
    Clusters,
    Subscriptions,
    Manifests,
    HelmCharts,
    Registrations,
}

impl Page {
    /// Every list, in the navigation's order.
    pub const ALL: [Page; 5] = [
        Page::Clusters,
        Page::Subscriptions,
        Page::Manifests,
        Page::HelmCharts,
        Page::Registrations,
    ];

    /// The page's path under `pages/` (relative links: see [`document`]).
    pub fn path(self) -> &'static str {
        match self {
            Page::Clusters => "clusters",
            Page::Subscriptions => "subscriptions",
            Page::Manifests => "manifests",
            Page::HelmCharts => "helmcharts",
            Page::Registrations => "registrations",
        }
    }

    pub fn title(self) -> &'static str {
        match self {
            Page::Clusters => "Clusters",
            Page::Subscriptions => "Subscriptions",
            Page::Manifests => "Manifests",
            Page::HelmCharts => "Helm charts",
            Page::Registrations => "Registrations",
        }
    }
}

/// Rows per page of a list: a page of a fleet of thousands renders in milliseconds and stays a
/// few hundred kilobytes (see benches/dashboard.rs).
pub const PAGE_SIZE: usize = 100;

/// The rows of page `page` (1-based; out of range = the last) of `total`, and the navigation
/// between pages (empty when one page holds them all); `base` is the list's path with its
/// filter (`clusters`, `clusters?q=gold`).
pub fn pager(total: usize, page: usize, base: &str) -> (std::ops::Range<usize>, String) {
    let pages = total.div_ceil(PAGE_SIZE).max(1);
    let page = page.clamp(1, pages);
    let range = (page - 1) * PAGE_SIZE..(page * PAGE_SIZE).min(total);
    if pages == 1 {
        return (range, String::new());
    }
    let sep = if base.contains('?') { '&' } else { '?' };
    let link = |n: usize, rel: &str, text: &str| {
        format!(
            " · <a href=\"{}\" rel=\"{rel}\">{text}</a>",
            escape(&format!("{base}{sep}page={n}"))
        )
    };
    let mut nav = format!(
        "<nav class=\"pager\">{}-{} of {total} · page {page} of {pages}",
        range.start + 1,
        range.end
    );
    if page > 1 {
        nav.push_str(&link(page - 1, "prev", "previous"));
    }
    if page < pages {
        nav.push_str(&link(page + 1, "next", "next"));
    }
    nav.push_str("</nav>\n");
    (range, nav)
}

/// The path of list `page` filtered by `q` (the pager's base).
pub fn filtered_path(page: Page, q: &str) -> String {
    use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};
    if q.is_empty() {
        page.path().to_string()
    } else {
        format!(
            "{}?q={}",
            page.path(),
            utf8_percent_encode(q, NON_ALPHANUMERIC)
        )
    }
}

/// What a filtered list says above its rows: how many of all match.
pub fn filter_summary(page: Page, q: &str, matching: usize, total: usize) -> String {
    if q.is_empty() {
        return String::new();
    }
    format!(
        "<p class=\"summary\">{matching} of {total} match \u{201c}{}\u{201d} · \
         <a href=\"{}\">show all</a></p>\n",
        escape(q),
        page.path()
    )
}

/// The relative link to the detail page `page` (`cluster`, `subscription`) of `namespace/name`,
/// escaped for an attribute.
pub fn detail_link(page: &str, namespace: &str, name: &str) -> String {
    use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};
    let q = |v: &str| utf8_percent_encode(v, NON_ALPHANUMERIC).to_string();
    escape(&format!(
        "{page}?namespace={}&name={}",
        q(namespace),
        q(name)
    ))
}

/// The detail link of a `namespace/name` key (a binding cluster, a Description's Subscription).
fn key_link(page: &str, key: &str) -> String {
    let (ns, name) = key.split_once('/').unwrap_or(("", key));
    format!(
        "<a href=\"{}\">{}</a>",
        detail_link(page, ns, name),
        escape(key)
    )
}

/// One resource of a cluster, in milli-units (cpu: millicores, memory: milli-bytes).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Resource {
    pub capacity: Option<i128>,
    pub allocatable: Option<i128>,
    pub used: Option<i128>,
}

/// One ManagedCluster, as the Clusters page shows it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterRow {
    pub namespace: String,
    pub name: String,
    pub cluster_id: String,
    /// The Ready condition's status (`True`, `False`, `Unknown`), empty before the first report.
    pub ready: String,
    pub ready_reason: String,
    /// Seconds since the agent's last report (`status.lastObservedTime`).
    pub heartbeat_age: Option<i64>,
    pub sync_mode: String,
    pub k8s_version: String,
    pub cpu: Resource,
    pub memory: Resource,
    pub labels: Vec<(String, String)>,
    pub taints: Vec<String>,
    pub tunnel: bool,
}

/// One binding cluster of a Subscription.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BoundCluster {
    /// `namespace/name` of the ManagedCluster.
    pub cluster: String,
    /// Per feed: the replicas the scheduler gave it (Dividing), if any.
    pub replicas: Vec<(String, i32)>,
    /// Feeds reported available there, of all feeds.
    pub available: usize,
    pub feeds: usize,
}

/// One Subscription, as the Subscriptions page shows it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SubscriptionRow {
    pub namespace: String,
    pub name: String,
    pub strategy: String,
    pub feeds: Vec<String>,
    pub bound: Vec<BoundCluster>,
    /// `type=status (reason): message` of each condition.
    pub conditions: Vec<String>,
}

/// `&`, `<`, `>`, `"` and `'` escaped: text and attribute values alike.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// What a document is: the list it belongs to, its title, who reads it, the kinds whose changes
/// it shows (the script fetches it again when the event stream names one; none keeps the page
/// as it is) and, for a list, its filter.
pub struct Doc<'a> {
    pub page: Page,
    pub title: &'a str,
    pub user: &'a str,
    pub kinds: &'a [&'a str],
    /// The list's filter text (`Some("")` = a filter box, empty).
    pub filter: Option<&'a str>,
}

/// The whole document around `main`. Links are relative to the page (every page sits right
/// under `pages/`, details take a query): the parent's aggregator rewrites absolute paths in
/// HTML to its own address, which the browser of `kubectl clusternet dashboard` cannot use, and
/// leaves relative ones. The filter box sits outside `main`, which the script replaces.
pub fn document(doc: &Doc<'_>, main: &str) -> String {
    let nav: String = Page::ALL
        .iter()
        .map(|p| {
            format!(
                "<a href=\"{}\"{}>{}</a>",
                p.path(),
                if *p == doc.page {
                    " aria-current=\"page\""
                } else {
                    ""
                },
                p.title()
            )
        })
        .collect();
    let filter = doc.filter.map_or_else(String::new, |q| {
        format!(
            "<form class=\"filter\" action=\"{}\" method=\"get\" role=\"search\">\
             <input type=\"search\" name=\"q\" value=\"{}\" \
             placeholder=\"name, namespace, label=value\" aria-label=\"Filter\">\
             <button type=\"submit\">Filter</button></form>\n",
            doc.page.path(),
            escape(q)
        )
    });
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{title} · Clusternet</title>\
         <link rel=\"stylesheet\" href=\"assets/dashboard.css\">\
         <script src=\"assets/dashboard.js\" defer></script></head>\
         <body><header><span class=\"brand\">Clusternet</span><nav>{nav}</nav>\
         <span class=\"user\">{user}</span></header>\n<div class=\"page\"><h1>{title}</h1>\n\
         {filter}<main id=\"main\" data-kinds=\"{kinds}\">\n{main}</main></div></body></html>\n",
        title = escape(doc.title),
        user = escape(doc.user),
        kinds = escape(&doc.kinds.join(",")),
    )
}

/// What a user who may not read a page's objects sees instead of them.
pub fn denied(message: &str) -> String {
    format!(
        "<p class=\"denied\" role=\"alert\">You may not see this page's objects in the parent \
         cluster: {}</p>\n",
        escape(message)
    )
}

/// `3.5` cores from millicores.
fn cores(milli: i128) -> String {
    let c = milli as f64 / 1000.0;
    if c.fract() == 0.0 {
        format!("{c:.0}")
    } else {
        format!("{c:.1}")
    }
}

/// `7.8 GiB` from milli-bytes.
fn gib(milli: i128) -> String {
    let bytes = milli as f64 / 1000.0;
    let gib = bytes / (1024.0 * 1024.0 * 1024.0);
    if gib >= 1.0 {
        format!("{gib:.1} GiB")
    } else {
        format!("{:.0} MiB", bytes / (1024.0 * 1024.0))
    }
}

/// A resource cell: a bar of what is allocatable (or used, when the agent reports usage) of the
/// capacity, and the figures.
fn resource_cell(r: &Resource, unit: fn(i128) -> String, name: &str) -> String {
    let Some(capacity) = r.capacity.filter(|c| *c > 0) else {
        return "<td class=\"num\">-</td>".into();
    };
    let (value, what) = match (r.used, r.allocatable) {
        (Some(u), _) => (u, "used"),
        (None, Some(a)) => (a, "allocatable"),
        (None, None) => (0, "allocatable"),
    };
    let mut text = format!("{} {what} of {}", unit(value), unit(capacity));
    if let (Some(_), Some(a)) = (r.used, r.allocatable) {
        let _ = write!(text, " ({} allocatable)", unit(a));
    }
    format!(
        "<td class=\"num\"><meter min=\"0\" max=\"{capacity}\" value=\"{value}\" \
         title=\"{name}: {t}\"></meter> <span>{t}</span></td>",
        t = escape(&text)
    )
}

fn age(seconds: i64) -> String {
    match seconds {
        s if s < 0 => "just now".into(),
        s if s < 120 => format!("{s}s ago"),
        s if s < 7200 => format!("{}m ago", s / 60),
        s if s < 172_800 => format!("{}h ago", s / 3600),
        s => format!("{}d ago", s / 86_400),
    }
}

/// The Clusters page's content: `rows` (one page of them, `nav` between pages) of `total`
/// ManagedClusters, `ready` of which are Ready.
pub fn clusters(rows: &[ClusterRow], ready: usize, total: usize, nav: &str) -> String {
    if total == 0 {
        return "<p class=\"empty\">No ManagedClusters yet: register a child cluster with \
                its agent and a bootstrap token.</p>\n"
            .into();
    }
    let mut out = format!(
        "<p class=\"summary\">{ready} of {total} clusters ready.</p>\n{nav}{}",
        clusters_table(rows)
    );
    out.push_str(nav);
    out
}

/// The table of ManagedClusters (the Clusters page's, a cluster page's one row).
pub fn clusters_table(rows: &[ClusterRow]) -> String {
    let mut out = "<table id=\"clusters\">\
         <thead><tr><th>Cluster</th><th>State</th><th>Heartbeat</th><th>Sync mode</th>\
         <th>Kubernetes</th><th>CPU</th><th>Memory</th><th>Labels</th><th>Taints</th>\
         <th>Tunnel</th></tr></thead><tbody>\n"
        .to_string();
    for r in rows {
        let state = match r.ready.as_str() {
            "True" => "Ready".to_string(),
            "" => "Unknown".to_string(),
            _ if r.ready_reason.is_empty() => "NotReady".to_string(),
            _ => format!("NotReady ({})", r.ready_reason),
        };
        let state_class = if r.ready == "True" {
            "ready"
        } else {
            "not-ready"
        };
        let labels: String = r
            .labels
            .iter()
            .map(|(k, v)| format!("<span class=\"chip\">{}={}</span>", escape(k), escape(v)))
            .collect();
        let taints: String = r
            .taints
            .iter()
            .map(|t| format!("<span class=\"chip taint\">{}</span>", escape(t)))
            .collect();
        let _ = writeln!(
            out,
            "<tr data-cluster=\"{ns}/{name}\" class=\"{state_class}\">\
             <td title=\"cluster ID {id}\"><a href=\"{link}\"><strong>{name}</strong></a><br>\
             <small>{ns}</small></td>\
             <td class=\"state\">{state}</td><td>{hb}</td><td>{mode}</td><td>{version}</td>\
             {cpu}{memory}<td>{labels}</td><td>{taints}</td><td>{tunnel}</td></tr>",
            ns = escape(&r.namespace),
            name = escape(&r.name),
            id = escape(&r.cluster_id),
            link = detail_link("cluster", &r.namespace, &r.name),
            state = escape(&state),
            hb = r.heartbeat_age.map_or_else(|| "never".to_string(), age),
            mode = escape(&r.sync_mode),
            version = escape(&r.k8s_version),
            cpu = resource_cell(&r.cpu, cores, "CPU cores"),
            memory = resource_cell(&r.memory, gib, "memory"),
            tunnel = if r.tunnel { "connected" } else { "-" },
        );
    }
    out.push_str("</tbody></table>\n");
    out
}

/// The Subscriptions page's content: `rows` (one page, `nav` between pages) of `total`.
pub fn subscriptions(rows: &[SubscriptionRow], total: usize, nav: &str) -> String {
    if total == 0 {
        return "<p class=\"empty\">No Subscriptions yet.</p>\n".into();
    }
    let mut out = format!(
        "<p class=\"summary\">{total} Subscriptions.</p>\n{nav}{}",
        subscriptions_table(rows)
    );
    out.push_str(nav);
    out
}

/// The table of Subscriptions (the Subscriptions page's, a Subscription page's one row).
pub fn subscriptions_table(rows: &[SubscriptionRow]) -> String {
    let mut out = "<table id=\"subscriptions\">\
         <thead><tr><th>Subscription</th><th>Strategy</th><th>Feeds</th>\
         <th>Clusters (ready feeds, replicas)</th><th>Conditions</th></tr></thead><tbody>\n"
        .to_string();
    for r in rows {
        let feeds: String = r
            .feeds
            .iter()
            .map(|f| format!("<div>{}</div>", escape(f)))
            .collect();
        let bound: String = if r.bound.is_empty() {
            "<span class=\"empty\">not bound</span>".into()
        } else {
            r.bound
                .iter()
                .map(|b| {
                    let replicas: String = b
                        .replicas
                        .iter()
                        .map(|(feed, n)| format!(" · {n} of {}", escape(feed)))
                        .collect();
                    let class = if b.feeds > 0 && b.available == b.feeds {
                        "ready"
                    } else {
                        "not-ready"
                    };
                    format!(
                        "<div class=\"bound {class}\" data-cluster=\"{c}\"><meter min=\"0\" \
                         max=\"{max}\" value=\"{a}\"></meter> {link}: <span class=\"count\">{a}/{f} \
                         ready</span>{replicas}</div>",
                        c = escape(&b.cluster),
                        link = key_link("cluster", &b.cluster),
                        a = b.available,
                        f = b.feeds,
                        max = b.feeds.max(1),
                    )
                })
                .collect()
        };
        let conditions: String = r
            .conditions
            .iter()
            .map(|c| format!("<div>{}</div>", escape(c)))
            .collect();
        let _ = writeln!(
            out,
            "<tr data-subscription=\"{ns}/{name}\"><td><a href=\"{link}\"><strong>{name}\
             </strong></a><br><small>{ns}</small></td><td>{strategy}</td><td>{feeds}</td>\
             <td>{bound}</td><td>{conditions}</td></tr>",
            ns = escape(&r.namespace),
            name = escape(&r.name),
            link = detail_link("subscription", &r.namespace, &r.name),
            strategy = escape(&r.strategy),
        );
    }
    out.push_str("</tbody></table>\n");
    out
}

/// One applied object of a Description, with its status in the child.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ObjectRow {
    /// `Deployment ns/name`.
    pub object: String,
    /// One line of its observed status (`2/3 ready`, a phase, its conditions, `applied`).
    pub status: String,
    /// The last drift and what was done about it.
    pub drift: Option<String>,
}

/// One Description: what is deployed in a cluster for a Subscription.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DescriptionRow {
    pub namespace: String,
    pub name: String,
    /// `namespace/name` of the Subscription it comes from (its labels), empty if unknown.
    pub subscription: String,
    /// The child cluster's name (its label).
    pub cluster: String,
    /// The Base it was rendered from (its owner labels).
    pub base: String,
    pub deployer: String,
    pub phase: String,
    pub reason: String,
    pub age: Option<i64>,
    pub objects: Vec<ObjectRow>,
}

/// One Event about a Clusternet object.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EventRow {
    /// `Normal` or `Warning`.
    pub type_: String,
    pub reason: String,
    /// `Kind ns/name` of the object it is about.
    pub object: String,
    pub message: String,
    pub count: i32,
    pub age: Option<i64>,
}

/// One ClusterRegistrationRequest.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RegistrationRow {
    pub name: String,
    pub cluster_name: String,
    pub cluster_id: String,
    pub cluster_type: String,
    pub sync_mode: String,
    /// `Approved`, `Denied`, `Failed`, or `Pending` before the controller answered.
    pub result: String,
    pub error: String,
    /// The dedicated namespace and ManagedCluster it was given.
    pub namespace: String,
    pub managed_cluster: String,
    pub age: Option<i64>,
}

/// One Manifest (a feed object stored by the shadow API).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ManifestRow {
    pub name: String,
    pub api_version: String,
    /// `Kind ns/name` of the stored object.
    pub object: String,
    /// The Subscriptions (`ns/name`) that use it as a feed; `None` when the reader may not
    /// list Subscriptions (so the page does not reveal them).
    pub subscriptions: Option<Vec<String>>,
    pub age: Option<i64>,
}

/// One HelmChart.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HelmChartRow {
    pub namespace: String,
    pub name: String,
    pub repo: String,
    pub chart: String,
    pub version: String,
    pub target_namespace: String,
    /// `Found`, `NotFound`, or empty before the controller looked.
    pub phase: String,
    pub reason: String,
    pub age: Option<i64>,
}

/// One condition of an object.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConditionRow {
    pub type_: String,
    pub status: String,
    pub reason: String,
    pub message: String,
    /// Seconds since its last transition.
    pub age: Option<i64>,
}

/// What a cluster's page says beyond its row.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterFacts {
    /// Name and value, in order (empty values left out).
    pub facts: Vec<(String, String)>,
    pub conditions: Vec<ConditionRow>,
}

/// A cluster page's facts and conditions.
pub fn cluster_facts(f: &ClusterFacts) -> String {
    let facts: String = f
        .facts
        .iter()
        .map(|(k, v)| format!("<dt>{}</dt><dd>{}</dd>", escape(k), escape(v)))
        .collect();
    let conditions: Vec<String> = f
        .conditions
        .iter()
        .map(|c| {
            format!(
                "<tr class=\"{class}\"><td>{type_}</td><td>{status}</td><td>{reason}</td>\
                 <td>{message}</td><td>{age}</td></tr>\n",
                class = phase_class(&c.status),
                type_ = escape(&c.type_),
                status = escape(&c.status),
                reason = escape(&c.reason),
                message = escape(&c.message),
                age = age_cell(c.age),
            )
        })
        .collect();
    format!(
        "<dl class=\"facts\">{facts}</dl>\n{}",
        section(
            "conditions",
            "Conditions",
            &table(
                "conditions",
                &["Type", "Status", "Reason", "Message", "Since"],
                &conditions,
                "The agent has not reported yet.",
            ),
        )
    )
}

/// `1 Base`, `2 Bases`.
fn plural(n: usize, word: &str) -> String {
    if n == 1 {
        format!("1 {word}")
    } else {
        format!("{n} {word}s")
    }
}

fn age_cell(age: Option<i64>) -> String {
    age.map_or_else(|| "-".to_string(), self::age)
}

/// A table: `id`, its header cells, and its rows (each a `<tr>`), or `empty` when there are
/// none.
fn table(id: &str, headers: &[&str], rows: &[String], empty: &str) -> String {
    if rows.is_empty() {
        return format!("<p class=\"empty\">{}</p>\n", escape(empty));
    }
    let head: String = headers
        .iter()
        .map(|h| format!("<th>{}</th>", escape(h)))
        .collect();
    format!(
        "<table id=\"{id}\"><thead><tr>{head}</tr></thead><tbody>\n{}</tbody></table>\n",
        rows.concat()
    )
}

/// A list page: the summary, the pages' navigation around the table.
fn list_page(summary: &str, nav: &str, table: &str) -> String {
    format!(
        "<p class=\"summary\">{}</p>\n{nav}{table}{nav}",
        escape(summary)
    )
}

/// The class of a phase or result: ready (green), failed (red), or pending.
fn phase_class(phase: &str) -> &'static str {
    match phase {
        "Success" | "Found" | "Approved" | "True" => "ready",
        "Failure" | "NotFound" | "Denied" | "Failed" | "False" => "not-ready",
        _ => "pending",
    }
}

/// Descriptions with each object's status; `by_cluster` leads with the cluster (a
/// Subscription's page) rather than the Subscription (a cluster's page).
pub fn descriptions(rows: &[DescriptionRow], by_cluster: bool) -> String {
    let body: Vec<String> = rows
        .iter()
        .map(|d| {
            let objects: String = d
                .objects
                .iter()
                .map(|o| {
                    let drift = o.drift.as_ref().map_or_else(String::new, |d| {
                        format!(" <span class=\"chip taint\">{}</span>", escape(d))
                    });
                    format!(
                        "<div>{}: <span class=\"status\">{}</span>{drift}</div>",
                        escape(&o.object),
                        escape(&o.status)
                    )
                })
                .collect();
            let objects = if objects.is_empty() {
                "<span class=\"empty\">no status reported yet</span>".to_string()
            } else {
                objects
            };
            let first = if by_cluster {
                format!(
                    "<td>{}<br><small>{}/{}</small></td>",
                    escape(&d.cluster),
                    escape(&d.namespace),
                    escape(&d.base)
                )
            } else if d.subscription.is_empty() {
                "<td>-</td>".to_string()
            } else {
                format!("<td>{}</td>", key_link("subscription", &d.subscription))
            };
            let reason = if d.reason.is_empty() {
                String::new()
            } else {
                format!("<br><small>{}</small>", escape(&d.reason))
            };
            format!(
                "<tr data-description=\"{ns}/{name}\" class=\"{class}\">{first}<td>{name}<br>\
                 <small>{deployer}, {age}</small></td><td class=\"state\">{phase}{reason}</td>\
                 <td>{objects}</td></tr>\n",
                ns = escape(&d.namespace),
                name = escape(&d.name),
                class = phase_class(&d.phase),
                deployer = escape(&d.deployer),
                age = age_cell(d.age),
                phase = escape(&d.phase),
            )
        })
        .collect();
    let first = if by_cluster {
        "Cluster (Base)"
    } else {
        "Subscription"
    };
    table(
        "descriptions",
        &[first, "Description", "Phase", "Objects in the child"],
        &body,
        "Nothing is deployed here yet.",
    )
}

/// Recent events, newest first.
pub fn events(rows: &[EventRow]) -> String {
    let body: Vec<String> = rows
        .iter()
        .map(|e| {
            let count = if e.count > 1 {
                format!(" (x{})", e.count)
            } else {
                String::new()
            };
            format!(
                "<tr class=\"{class}\"><td>{age}{count}</td><td>{type_}</td><td>{reason}</td>\
                 <td>{object}</td><td>{message}</td></tr>\n",
                class = if e.type_ == "Warning" {
                    "not-ready"
                } else {
                    "ready"
                },
                age = age_cell(e.age),
                type_ = escape(&e.type_),
                reason = escape(&e.reason),
                object = escape(&e.object),
                message = escape(&e.message),
            )
        })
        .collect();
    table(
        "events",
        &["When", "Type", "Reason", "Object", "Message"],
        &body,
        "No recent events.",
    )
}

/// A section of a detail page: a heading and its content (a table, or the reason it is not
/// shown).
pub fn section(id: &str, heading: &str, content: &str) -> String {
    format!(
        "<section id=\"{id}\"><h2>{}</h2>\n{content}</section>\n",
        escape(heading)
    )
}

/// A block of preformatted text (the scheduler's explanation, in the words the command prints).
pub fn preformatted(text: &str) -> String {
    format!("<pre>{}</pre>\n", escape(text))
}

/// The Registrations page's content.
pub fn registrations(rows: &[RegistrationRow], total: usize, nav: &str) -> String {
    if total == 0 {
        return "<p class=\"empty\">No ClusterRegistrationRequests: no agent has asked to \
                register yet.</p>\n"
            .into();
    }
    let approved = rows.iter().filter(|r| r.result == "Approved").count();
    let body: Vec<String> = rows
        .iter()
        .map(|r| {
            let result = if r.error.is_empty() {
                escape(&r.result)
            } else {
                format!(
                    "{}<br><small>{}</small>",
                    escape(&r.result),
                    escape(&r.error)
                )
            };
            let cluster = if r.managed_cluster.is_empty() {
                "-".to_string()
            } else {
                format!(
                    "<a href=\"{}\">{}/{}</a>",
                    detail_link("cluster", &r.namespace, &r.managed_cluster),
                    escape(&r.namespace),
                    escape(&r.managed_cluster)
                )
            };
            format!(
                "<tr data-registration=\"{name}\" class=\"{class}\"><td>{name}</td>\
                 <td>{cluster_name}<br><small>{id}</small></td><td>{type_}</td><td>{mode}</td>\
                 <td class=\"state\">{result}</td><td>{cluster}</td><td>{age}</td></tr>\n",
                name = escape(&r.name),
                class = phase_class(&r.result),
                cluster_name = escape(&r.cluster_name),
                id = escape(&r.cluster_id),
                type_ = escape(&r.cluster_type),
                mode = escape(&r.sync_mode),
                age = age_cell(r.age),
            )
        })
        .collect();
    list_page(
        &format!("{total} registration requests; {approved} approved on this page."),
        nav,
        &table(
            "registrations",
            &[
                "Request",
                "Cluster (ID)",
                "Type",
                "Sync mode",
                "Result",
                "ManagedCluster",
                "Age",
            ],
            &body,
            "",
        ),
    )
}

/// How many of the Subscriptions using a Manifest its row links to.
const MANIFEST_USERS_SHOWN: usize = 3;

/// The Manifests page's content.
pub fn manifests(rows: &[ManifestRow], total: usize, nav: &str) -> String {
    if total == 0 {
        return "<p class=\"empty\">No Manifests: objects applied through the shadow API are \
                stored as Manifests.</p>\n"
            .into();
    }
    let body: Vec<String> = rows
        .iter()
        .map(|m| {
            let used = match m.subscriptions.as_deref() {
                None => "<span class=\"empty\">not shown (you may not list Subscriptions)</span>"
                    .to_string(),
                Some([]) => "<span class=\"empty\">no Subscription</span>".to_string(),
                Some(subs) => {
                    let links: Vec<String> = subs
                        .iter()
                        .take(MANIFEST_USERS_SHOWN)
                        .map(|k| key_link("subscription", k))
                        .collect();
                    let more = subs.len().saturating_sub(MANIFEST_USERS_SHOWN);
                    let more = if more > 0 {
                        format!(" and {more} more")
                    } else {
                        String::new()
                    };
                    format!(
                        "{}: {}{more}",
                        plural(subs.len(), "Subscription"),
                        links.join(", ")
                    )
                }
            };
            format!(
                "<tr data-manifest=\"{name}\"><td>{object}<br><small>{version}</small></td>\
                 <td>{name}</td><td>{used}</td><td>{age}</td></tr>\n",
                name = escape(&m.name),
                object = escape(&m.object),
                version = escape(&m.api_version),
                age = age_cell(m.age),
            )
        })
        .collect();
    list_page(
        &format!("{total} Manifests."),
        nav,
        &table(
            "manifests",
            &["Object", "Manifest", "Referenced by", "Age"],
            &body,
            "",
        ),
    )
}

/// The HelmCharts page's content.
pub fn helmcharts(rows: &[HelmChartRow], total: usize, nav: &str) -> String {
    if total == 0 {
        return "<p class=\"empty\">No HelmCharts yet.</p>\n".into();
    }
    let body: Vec<String> = rows
        .iter()
        .map(|c| {
            let phase = match (c.phase.as_str(), c.reason.is_empty()) {
                ("", _) => "not checked yet".to_string(),
                (p, true) => escape(p),
                (p, false) => format!("{}<br><small>{}</small>", escape(p), escape(&c.reason)),
            };
            format!(
                "<tr data-helmchart=\"{ns}/{name}\" class=\"{class}\"><td><strong>{name}</strong>\
                 <br><small>{ns}</small></td><td>{chart} {version}<br><small>{repo}</small></td>\
                 <td>{target}</td><td class=\"state\">{phase}</td><td>{age}</td></tr>\n",
                ns = escape(&c.namespace),
                name = escape(&c.name),
                class = phase_class(&c.phase),
                chart = escape(&c.chart),
                version = escape(&c.version),
                repo = escape(&c.repo),
                target = escape(&c.target_namespace),
                age = age_cell(c.age),
            )
        })
        .collect();
    list_page(
        &format!("{total} HelmCharts."),
        nav,
        &table(
            "helmcharts",
            &["HelmChart", "Chart", "Target namespace", "Phase", "Age"],
            &body,
            "",
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_text_cannot_become_markup() {
        assert_eq!(
            escape("<script>alert('x')</script> & \"q\""),
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &quot;q&quot;"
        );
        let row = ClusterRow {
            namespace: "ns".into(),
            name: "<img src=x>".into(),
            labels: vec![("a\"b".into(), "<v>".into())],
            ..ClusterRow::default()
        };
        let html = clusters(&[row], 0, 1, "");
        assert!(!html.contains("<img"), "{html}");
        assert!(html.contains("&lt;img src=x&gt;") && html.contains("a&quot;b=&lt;v&gt;"));
    }

    #[test]
    fn a_cluster_row_says_its_state_heartbeat_and_capacity() {
        let row = ClusterRow {
            namespace: "clusternet-abc".into(),
            name: "child1".into(),
            cluster_id: "id-1".into(),
            ready: "False".into(),
            ready_reason: "ClusterStatusUnknown".into(),
            heartbeat_age: Some(75),
            sync_mode: "Pull".into(),
            k8s_version: "v1.36.3".into(),
            cpu: Resource {
                capacity: Some(8000),
                allocatable: Some(7500),
                used: None,
            },
            memory: Resource {
                capacity: Some(16 * 1024 * 1024 * 1024 * 1000),
                allocatable: None,
                used: Some(2 * 1024 * 1024 * 1024 * 1000),
            },
            taints: vec!["e2e/maintenance=yes:NoSchedule".into()],
            tunnel: true,
            ..ClusterRow::default()
        };
        let html = clusters(&[row], 0, 1, "");
        for want in [
            "0 of 1 clusters ready",
            "data-cluster=\"clusternet-abc/child1\" class=\"not-ready\"",
            "NotReady (ClusterStatusUnknown)",
            "75s ago",
            "7.5 allocatable of 8",
            "max=\"8000\" value=\"7500\"",
            "2.0 GiB used of 16.0 GiB",
            "e2e/maintenance=yes:NoSchedule",
            "connected",
        ] {
            assert!(html.contains(want), "{want:?} missing from {html}");
        }
        assert!(clusters(&[], 0, 0, "").contains("No ManagedClusters yet"));
    }

    #[test]
    fn a_subscription_row_shows_each_bound_clusters_ready_count_and_share() {
        let row = SubscriptionRow {
            namespace: "demo".into(),
            name: "app".into(),
            strategy: "Dividing".into(),
            feeds: vec!["Deployment demo/web".into()],
            bound: vec![
                BoundCluster {
                    cluster: "ns1/child1".into(),
                    replicas: vec![("Deployment demo/web".into(), 6)],
                    available: 1,
                    feeds: 1,
                },
                BoundCluster {
                    cluster: "ns2/child2".into(),
                    replicas: vec![("Deployment demo/web".into(), 4)],
                    available: 0,
                    feeds: 1,
                },
            ],
            conditions: vec!["FeedsResolved=True (AllFeedsFound)".into()],
        };
        let html = subscriptions(&[row], 1, "");
        for want in [
            "data-subscription=\"demo/app\"",
            "class=\"bound ready\" data-cluster=\"ns1/child1\"",
            "1/1 ready</span> · 6 of Deployment demo/web",
            "class=\"bound not-ready\" data-cluster=\"ns2/child2\"",
            "0/1 ready",
            "FeedsResolved=True (AllFeedsFound)",
        ] {
            assert!(html.contains(want), "{want:?} missing from {html}");
        }
    }

    #[test]
    fn the_document_links_both_pages_and_has_no_inline_script() {
        let html = document(
            &Doc {
                page: Page::Subscriptions,
                title: "Subscriptions",
                user: "alice",
                kinds: &["subscriptions"],
                filter: Some("tier=gold"),
            },
            "<p>x</p>",
        );
        // the filter box is outside the part the script replaces, and submits to the list
        assert!(html.contains(
            "<form class=\"filter\" action=\"subscriptions\" method=\"get\" role=\"search\">"
        ));
        assert!(html.contains("value=\"tier=gold\""));
        assert!(html.find("<form").unwrap_or(usize::MAX) < html.find("<main").unwrap_or(0));
        assert!(html.contains("<main id=\"main\" data-kinds=\"subscriptions\">"));
        // relative: the aggregator rewrites absolute paths to its own address
        assert!(html.contains("<a href=\"clusters\">Clusters</a>"));
        assert!(html.contains("<a href=\"subscriptions\" aria-current=\"page\">"));
        assert!(!html.contains("href=\"/"));
        assert_eq!(
            html.matches("<script").count(),
            1,
            "one script, the hub's own file: {html}"
        );
        assert!(html.contains("<script src=\"assets/dashboard.js\" defer></script>"));
        assert!(html.contains("<span class=\"user\">alice</span>"));
    }

    #[test]
    fn lists_are_paged_with_relative_links() {
        let (range, nav) = pager(250, 2, "clusters");
        assert_eq!(range, 100..200);
        assert!(nav.contains("101-200 of 250 · page 2 of 3"), "{nav}");
        assert!(nav.contains("<a href=\"clusters?page=1\" rel=\"prev\">"));
        assert!(nav.contains("<a href=\"clusters?page=3\" rel=\"next\">"));
        // past the end: the last page
        assert_eq!(pager(250, 9, "clusters").0, 200..250);
        assert_eq!(pager(0, 1, "clusters"), (0..0, String::new()));
        assert_eq!(pager(100, 1, "clusters"), (0..100, String::new()));
        // a filtered list keeps its filter from page to page
        let base = filtered_path(Page::Clusters, "tier=gold e2e");
        assert_eq!(base, "clusters?q=tier%3Dgold%20e2e");
        let (_, nav) = pager(250, 1, &base);
        assert!(
            nav.contains("href=\"clusters?q=tier%3Dgold%20e2e&amp;page=2\""),
            "{nav}"
        );
    }

    #[test]
    fn detail_links_encode_their_query() {
        assert_eq!(
            detail_link("cluster", "clusternet-abc", "child1"),
            "cluster?namespace=clusternet%2Dabc&amp;name=child1"
        );
        assert!(!detail_link("cluster", "a&b", "<x>").contains('<'));
        let html = key_link("subscription", "demo/app");
        assert_eq!(
            html,
            "<a href=\"subscription?namespace=demo&amp;name=app\">demo/app</a>"
        );
    }

    #[test]
    fn descriptions_show_their_phase_and_each_objects_status() {
        let row = DescriptionRow {
            namespace: "clusternet-abc".into(),
            name: "app-generic".into(),
            subscription: "demo/app".into(),
            cluster: "child1".into(),
            base: "app-base".into(),
            deployer: "Generic".into(),
            phase: "Failure".into(),
            reason: "quota exceeded".into(),
            age: Some(30),
            objects: vec![ObjectRow {
                object: "Deployment demo/web".into(),
                status: "1/2 ready".into(),
                drift: None,
            }],
        };
        let on_cluster = descriptions(std::slice::from_ref(&row), false);
        for want in [
            "class=\"not-ready\"",
            "href=\"subscription?namespace=demo&amp;name=app\"",
            "Failure<br><small>quota exceeded</small>",
            "Deployment demo/web: <span class=\"status\">1/2 ready</span>",
        ] {
            assert!(
                on_cluster.contains(want),
                "{want:?} missing from {on_cluster}"
            );
        }
        let on_subscription = descriptions(&[row], true);
        assert!(on_subscription.contains("child1<br><small>clusternet-abc/app-base</small>"));
        assert!(descriptions(&[], false).contains("Nothing is deployed here yet."));
        assert!(events(&[]).contains("No recent events."));
    }

    #[test]
    fn registrations_say_their_result_and_link_the_cluster() {
        let rows = [
            RegistrationRow {
                name: "clusternet-id1".into(),
                cluster_name: "child1".into(),
                result: "Approved".into(),
                namespace: "clusternet-abc".into(),
                managed_cluster: "child1".into(),
                ..RegistrationRow::default()
            },
            RegistrationRow {
                name: "clusternet-id2".into(),
                result: "Pending".into(),
                ..RegistrationRow::default()
            },
        ];
        let html = registrations(&rows, 2, "");
        assert!(
            html.contains("2 registration requests; 1 approved"),
            "{html}"
        );
        assert!(html.contains("href=\"cluster?namespace=clusternet%2Dabc&amp;name=child1\""));
        assert!(html.contains("class=\"pending\""));
    }
}
