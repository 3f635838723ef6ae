//! The dashboard's HTML, rendered on the server from plain rows (the pages work without their
//! one script, which only keeps them current; the Content-Security-Policy allows no inline
//! script). Every page is built with maud's `html!`, which escapes by construction whatever is
//! spliced into text or an attribute: text from an object cannot become markup. Pieces of a page
//! pass between functions as [`Markup`] (what `html!` made), never as strings of HTML.

use std::fmt::Write;

use maud::{DOCTYPE, Markup, html};

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
pub fn pager(total: usize, page: usize, base: &str) -> (std::ops::Range<usize>, Markup) {
    let pages = total.div_ceil(PAGE_SIZE).max(1);
    let page = page.clamp(1, pages);
    let range = (page - 1) * PAGE_SIZE..(page * PAGE_SIZE).min(total);
    if pages == 1 {
        return (range, html! {});
    }
    let sep = if base.contains('?') { '&' } else { '?' };
    let link = |n: usize, rel: &str, text: &str| {
        html! { " · " a href={ (base) (sep) "page=" (n) } rel=(rel) { (text) } }
    };
    let nav = html! {
        nav class="pager" {
            (range.start + 1) "-" (range.end) " of " (total) " · page " (page) " of " (pages)
            @if page > 1 { (link(page - 1, "prev", "previous")) }
            @if page < pages { (link(page + 1, "next", "next")) }
        }
        "\n"
    };
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
pub fn filter_summary(page: Page, q: &str, matching: usize, total: usize) -> Markup {
    html! {
        @if !q.is_empty() {
            p class="summary" {
                (matching) " of " (total) " match \u{201c}" (q) "\u{201d} · "
                a href=(page.path()) { "show all" }
            }
            "\n"
        }
    }
}

/// The relative link to the detail page `page` (`cluster`, `subscription`) of `namespace/name`:
/// a URL, its query percent-encoded; `html!` escapes it (the `&`) where it becomes an attribute.
pub fn detail_link(page: &str, namespace: &str, name: &str) -> String {
    use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};
    let q = |v: &str| utf8_percent_encode(v, NON_ALPHANUMERIC).to_string();
    format!("{page}?namespace={}&name={}", q(namespace), q(name))
}

/// The detail link of a `namespace/name` key (a binding cluster, a Description's Subscription).
fn key_link(page: &str, key: &str) -> Markup {
    let (ns, name) = key.split_once('/').unwrap_or(("", key));
    html! { a href=(detail_link(page, ns, name)) { (key) } }
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
pub fn document(doc: &Doc<'_>, main: Markup) -> String {
    html! {
        (DOCTYPE) "\n"
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (doc.title) " · Clusternet" }
                link rel="stylesheet" href="assets/dashboard.css";
                script src="assets/dashboard.js" defer {}
            }
            body {
                header {
                    span class="brand" { "Clusternet" }
                    nav {
                        @for p in Page::ALL {
                            a href=(p.path()) aria-current=[(p == doc.page).then_some("page")] {
                                (p.title())
                            }
                        }
                    }
                    span class="user" { (doc.user) }
                }
                "\n"
                div class="page" {
                    h1 { (doc.title) }
                    "\n"
                    @if let Some(q) = doc.filter {
                        form class="filter" action=(doc.page.path()) method="get" role="search" {
                            input type="search" name="q" value=(q)
                                placeholder="name, namespace, label=value" aria-label="Filter";
                            button type="submit" { "Filter" }
                        }
                        "\n"
                    }
                    main id="main" data-kinds=(doc.kinds.join(",")) { "\n" (main) }
                }
            }
        }
        "\n"
    }
    .into_string()
}

/// What a user who may not read a page's objects sees instead of them.
pub fn denied(message: &str) -> Markup {
    html! {
        p class="denied" role="alert" {
            "You may not see this page's objects in the parent cluster: " (message)
        }
        "\n"
    }
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
fn resource_cell(r: &Resource, unit: fn(i128) -> String, name: &str) -> Markup {
    let Some(capacity) = r.capacity.filter(|c| *c > 0) else {
        return html! { td class="num" { "-" } };
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
    html! {
        td class="num" {
            meter min="0" max=(capacity) value=(value) title={ (name) ": " (text) } {}
            " "
            span { (text) }
        }
    }
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
pub fn clusters(rows: &[ClusterRow], ready: usize, total: usize, nav: &Markup) -> Markup {
    if total == 0 {
        return html! {
            p class="empty" {
                "No ManagedClusters yet: register a child cluster with its agent and a bootstrap \
                 token."
            }
            "\n"
        };
    }
    list_page(
        &format!("{ready} of {total} clusters ready."),
        nav,
        clusters_table(rows),
    )
}

/// The table of ManagedClusters (the Clusters page's, a cluster page's one row).
pub fn clusters_table(rows: &[ClusterRow]) -> Markup {
    let head = html! {
        th { "Cluster" } th { "State" } th { "Heartbeat" } th { "Sync mode" } th { "Kubernetes" }
        th { "CPU" } th { "Memory" } th { "Labels" } th { "Taints" } th { "Tunnel" }
    };
    let rows: Vec<Markup> = rows.iter().map(cluster_tr).collect();
    rows_table("clusters", head, &rows)
}

fn cluster_tr(r: &ClusterRow) -> Markup {
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
    html! {
        tr data-cluster={ (r.namespace) "/" (r.name) } class=(state_class) {
            td title={ "cluster ID " (r.cluster_id) } {
                a href=(detail_link("cluster", &r.namespace, &r.name)) { strong { (r.name) } }
                br;
                small { (r.namespace) }
            }
            td class="state" { (state) }
            td { (r.heartbeat_age.map_or_else(|| "never".to_string(), age)) }
            td { (r.sync_mode) }
            td { (r.k8s_version) }
            (resource_cell(&r.cpu, cores, "CPU cores"))
            (resource_cell(&r.memory, gib, "memory"))
            td { @for (k, v) in &r.labels { span class="chip" { (k) "=" (v) } } }
            td { @for t in &r.taints { span class="chip taint" { (t) } } }
            td { (if r.tunnel { "connected" } else { "-" }) }
        }
    }
}

/// The Subscriptions page's content: `rows` (one page, `nav` between pages) of `total`.
pub fn subscriptions(rows: &[SubscriptionRow], total: usize, nav: &Markup) -> Markup {
    if total == 0 {
        return html! { p class="empty" { "No Subscriptions yet." } "\n" };
    }
    list_page(
        &format!("{total} Subscriptions."),
        nav,
        subscriptions_table(rows),
    )
}

/// The table of Subscriptions (the Subscriptions page's, a Subscription page's one row).
pub fn subscriptions_table(rows: &[SubscriptionRow]) -> Markup {
    let head = html! {
        th { "Subscription" } th { "Strategy" } th { "Feeds" }
        th { "Clusters (ready feeds, replicas)" } th { "Conditions" }
    };
    let rows: Vec<Markup> = rows.iter().map(subscription_tr).collect();
    rows_table("subscriptions", head, &rows)
}

fn subscription_tr(r: &SubscriptionRow) -> Markup {
    html! {
        tr data-subscription={ (r.namespace) "/" (r.name) } {
            td {
                a href=(detail_link("subscription", &r.namespace, &r.name)) { strong { (r.name) } }
                br;
                small { (r.namespace) }
            }
            td { (r.strategy) }
            td { @for f in &r.feeds { div { (f) } } }
            td {
                @if r.bound.is_empty() { span class="empty" { "not bound" } }
                @for b in &r.bound { (bound_cluster(b)) }
            }
            td { @for c in &r.conditions { div { (c) } } }
        }
    }
}

/// A binding cluster in a Subscription's row: a bar of its ready feeds, and its replicas.
fn bound_cluster(b: &BoundCluster) -> Markup {
    let class = if b.feeds > 0 && b.available == b.feeds {
        "bound ready"
    } else {
        "bound not-ready"
    };
    html! {
        div class=(class) data-cluster=(b.cluster) {
            meter min="0" max=(b.feeds.max(1)) value=(b.available) {}
            " "
            (key_link("cluster", &b.cluster))
            ": "
            span class="count" { (b.available) "/" (b.feeds) " ready" }
            @for (feed, n) in &b.replicas { " · " (n) " of " (feed) }
        }
    }
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
pub fn cluster_facts(f: &ClusterFacts) -> Markup {
    let conditions: Vec<Markup> = f
        .conditions
        .iter()
        .map(|c| {
            html! {
                tr class=(phase_class(&c.status)) {
                    td { (c.type_) }
                    td { (c.status) }
                    td { (c.reason) }
                    td { (c.message) }
                    td { (age_cell(c.age)) }
                }
            }
        })
        .collect();
    let conditions = table(
        "conditions",
        &["Type", "Status", "Reason", "Message", "Since"],
        &conditions,
        "The agent has not reported yet.",
    );
    html! {
        dl class="facts" { @for (k, v) in &f.facts { dt { (k) } dd { (v) } } }
        "\n"
        (section("conditions", "Conditions", conditions))
    }
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
fn table(id: &str, headers: &[&str], rows: &[Markup], empty: &str) -> Markup {
    if rows.is_empty() {
        return html! { p class="empty" { (empty) } "\n" };
    }
    rows_table(id, html! { @for h in headers { th { (h) } } }, rows)
}

/// A table of `rows` (each a `<tr>`) under the header cells `head`, even when there are none.
fn rows_table(id: &str, head: Markup, rows: &[Markup]) -> Markup {
    html! {
        table id=(id) {
            thead { tr { (head) } }
            tbody {
                "\n"
                @for r in rows { (r) "\n" }
            }
        }
        "\n"
    }
}

/// A list page: the summary, the pages' navigation around the table.
fn list_page(summary: &str, nav: &Markup, table: Markup) -> Markup {
    html! {
        p class="summary" { (summary) }
        "\n"
        (nav)
        (table)
        (nav)
    }
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
pub fn descriptions(rows: &[DescriptionRow], by_cluster: bool) -> Markup {
    let body: Vec<Markup> = rows.iter().map(|d| description_tr(d, by_cluster)).collect();
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

fn description_tr(d: &DescriptionRow, by_cluster: bool) -> Markup {
    html! {
        tr data-description={ (d.namespace) "/" (d.name) } class=(phase_class(&d.phase)) {
            @if by_cluster {
                td { (d.cluster) br; small { (d.namespace) "/" (d.base) } }
            } @else if d.subscription.is_empty() {
                td { "-" }
            } @else {
                td { (key_link("subscription", &d.subscription)) }
            }
            td { (d.name) br; small { (d.deployer) ", " (age_cell(d.age)) } }
            td class="state" {
                (d.phase)
                @if !d.reason.is_empty() { br; small { (d.reason) } }
            }
            td {
                @for o in &d.objects {
                    div {
                        (o.object) ": " span class="status" { (o.status) }
                        @if let Some(drift) = &o.drift { " " span class="chip taint" { (drift) } }
                    }
                }
                @if d.objects.is_empty() {
                    span class="empty" { "no status reported yet" }
                }
            }
        }
    }
}

/// A Subscription's staged rollout (`status.rollout`): the revision rolled out and the stable
/// one, where it is and why, and per stage its clusters (each with the revision it is pinned to
/// and whether it is healthy there), its gates and its approval.
pub fn rollout(r: &crate::apis::RolloutStatus) -> Markup {
    let class = match r.phase {
        crate::apis::RolloutPhase::Completed => "ready",
        crate::apis::RolloutPhase::RolledBack | crate::apis::RolloutPhase::Paused => "not-ready",
        crate::apis::RolloutPhase::Progressing => "pending",
    };
    let stable = r
        .stable_revision_number
        .map(|n| n.to_string())
        .unwrap_or_else(|| "-".into());
    let body: Vec<Markup> = r
        .stages
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let current = usize::try_from(r.stage).ok() == Some(i)
                && r.phase == crate::apis::RolloutPhase::Progressing;
            html! {
                tr data-stage=(s.name) class=(phase_class(s.phase.as_str())) {
                    td { (i + 1) ". " (s.name) @if current { " " span class="chip" { "current" } } }
                    td class="state" { (s.phase.as_str()) }
                    td {
                        @for c in &s.clusters {
                            @let pinned = crate::pipeline::rollout::pin_for(r, c);
                            @let number = if pinned == r.revision { r.revision_number.to_string() } else { stable.clone() };
                            div data-cluster=(c) {
                                (c) ": revision " span class="revision" { (number) }
                                @if s.healthy.contains(c) { ", healthy" }
                            }
                        }
                        @if s.clusters.is_empty() { span class="empty" { "no clusters" } }
                    }
                    td {
                        @for g in &s.gates {
                            div class=(phase_class(if g.state == "Passing" { "Success" } else if g.state == "Failing" { "Failed" } else { "" })) {
                                (g.name) ": " (g.state) @if !g.message.is_empty() { " (" (g.message) ")" }
                            }
                        }
                        @if !s.approved_by.is_empty() { div { "approved by " (s.approved_by) } }
                    }
                    td { (s.message) }
                }
            }
        })
        .collect();
    html! {
        p class=(class) data-rollout=(r.phase.as_str()) {
            "Revision " strong { (r.revision_number) } " is " (r.phase.as_str())
            " (stable revision " (stable) ")"
            @if r.paused_at.is_some() { ", paused" }
            @if !r.message.is_empty() { ": " (r.message) }
        }
        "\n"
        (table("stages", &["Stage", "Phase", "Clusters", "Gates", "Message"], &body, "No stages."))
    }
}

/// Recent events, newest first.
pub fn events(rows: &[EventRow]) -> Markup {
    let body: Vec<Markup> = rows
        .iter()
        .map(|e| {
            let class = if e.type_ == "Warning" {
                "not-ready"
            } else {
                "ready"
            };
            html! {
                tr class=(class) {
                    td { (age_cell(e.age)) @if e.count > 1 { " (x" (e.count) ")" } }
                    td { (e.type_) }
                    td { (e.reason) }
                    td { (e.object) }
                    td { (e.message) }
                }
            }
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
pub fn section(id: &str, heading: &str, content: Markup) -> Markup {
    html! {
        section id=(id) { h2 { (heading) } "\n" (content) }
        "\n"
    }
}

/// A block of preformatted text (the scheduler's explanation, in the words the command prints).
pub fn preformatted(text: &str) -> Markup {
    html! { pre { (text) } "\n" }
}

/// The Registrations page's content.
pub fn registrations(rows: &[RegistrationRow], total: usize, nav: &Markup) -> Markup {
    if total == 0 {
        return html! {
            p class="empty" {
                "No ClusterRegistrationRequests: no agent has asked to register yet."
            }
            "\n"
        };
    }
    let approved = rows.iter().filter(|r| r.result == "Approved").count();
    let body: Vec<Markup> = rows.iter().map(registration_tr).collect();
    list_page(
        &format!("{total} registration requests; {approved} approved on this page."),
        nav,
        table(
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

fn registration_tr(r: &RegistrationRow) -> Markup {
    html! {
        tr data-registration=(r.name) class=(phase_class(&r.result)) {
            td { (r.name) }
            td { (r.cluster_name) br; small { (r.cluster_id) } }
            td { (r.cluster_type) }
            td { (r.sync_mode) }
            td class="state" {
                (r.result)
                @if !r.error.is_empty() { br; small { (r.error) } }
            }
            td {
                @if r.managed_cluster.is_empty() {
                    "-"
                } @else {
                    a href=(detail_link("cluster", &r.namespace, &r.managed_cluster)) {
                        (r.namespace) "/" (r.managed_cluster)
                    }
                }
            }
            td { (age_cell(r.age)) }
        }
    }
}

/// How many of the Subscriptions using a Manifest its row links to.
const MANIFEST_USERS_SHOWN: usize = 3;

/// The Manifests page's content.
pub fn manifests(rows: &[ManifestRow], total: usize, nav: &Markup) -> Markup {
    if total == 0 {
        return html! {
            p class="empty" {
                "No Manifests: objects applied through the shadow API are stored as Manifests."
            }
            "\n"
        };
    }
    let body: Vec<Markup> = rows.iter().map(manifest_tr).collect();
    list_page(
        &format!("{total} Manifests."),
        nav,
        table(
            "manifests",
            &["Object", "Manifest", "Referenced by", "Age"],
            &body,
            "",
        ),
    )
}

fn manifest_tr(m: &ManifestRow) -> Markup {
    html! {
        tr data-manifest=(m.name) {
            td { (m.object) br; small { (m.api_version) } }
            td { (m.name) }
            td {
                @match m.subscriptions.as_deref() {
                    None => span class="empty" { "not shown (you may not list Subscriptions)" },
                    Some([]) => span class="empty" { "no Subscription" },
                    Some(subs) => {
                        (plural(subs.len(), "Subscription")) ": "
                        @for (i, key) in subs.iter().take(MANIFEST_USERS_SHOWN).enumerate() {
                            @if i > 0 { ", " }
                            (key_link("subscription", key))
                        }
                        @let more = subs.len().saturating_sub(MANIFEST_USERS_SHOWN);
                        @if more > 0 { " and " (more) " more" }
                    },
                }
            }
            td { (age_cell(m.age)) }
        }
    }
}

/// The HelmCharts page's content.
pub fn helmcharts(rows: &[HelmChartRow], total: usize, nav: &Markup) -> Markup {
    if total == 0 {
        return html! { p class="empty" { "No HelmCharts yet." } "\n" };
    }
    let body: Vec<Markup> = rows.iter().map(helmchart_tr).collect();
    list_page(
        &format!("{total} HelmCharts."),
        nav,
        table(
            "helmcharts",
            &["HelmChart", "Chart", "Target namespace", "Phase", "Age"],
            &body,
            "",
        ),
    )
}

fn helmchart_tr(c: &HelmChartRow) -> Markup {
    html! {
        tr data-helmchart={ (c.namespace) "/" (c.name) } class=(phase_class(&c.phase)) {
            td { strong { (c.name) } br; small { (c.namespace) } }
            td { (c.chart) " " (c.version) br; small { (c.repo) } }
            td { (c.target_namespace) }
            td class="state" {
                @if c.phase.is_empty() {
                    "not checked yet"
                } @else {
                    (c.phase)
                    @if !c.reason.is_empty() { br; small { (c.reason) } }
                }
            }
            td { (age_cell(c.age)) }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rollout_shows_each_stages_clusters_with_their_revision_gates_and_approval() {
        let r: crate::apis::RolloutStatus = serde_json::from_value(serde_json::json!({
        "revision": "app-3", "revisionNumber": 3, "stableRevision": "app-2",
        "stableRevisionNumber": 2, "phase": "Progressing", "stage": 1,
        "message": "stage 2 (two) of revision 3: waiting for approval",
        "stages": [
            {"name": "one", "phase": "Succeeded", "clusters": ["n1/a"], "updated": ["n1/a"],
             "healthy": ["n1/a"], "gates": [{"name": "errors", "state": "Passing",
             "message": "0 < 0.05"}]},
            {"name": "<two>", "phase": "WaitingForApproval", "clusters": ["n2/b"],
             "approvedBy": ""}
        ]}))
        .expect("a rollout");
        let html = rollout(&r).into_string();
        assert!(
            html.contains("Revision <strong>3</strong> is Progressing (stable revision 2)"),
            "{html}"
        );
        assert!(
            html.contains("n1/a: revision <span class=\"revision\">3</span>, healthy"),
            "{html}"
        );
        assert!(
            html.contains("n2/b: revision <span class=\"revision\">2</span>"),
            "{html}"
        );
        assert!(html.contains("errors: Passing (0 &lt; 0.05)"), "{html}");
        assert!(
            html.contains("&lt;two&gt;") && !html.contains("<two>"),
            "{html}"
        );
    }

    #[test]
    fn object_text_cannot_become_markup() {
        let hostile = "<script>alert('x')</script> & \"q\"";
        assert_eq!(
            preformatted(hostile).into_string(),
            "<pre>&lt;script&gt;alert('x')&lt;/script&gt; &amp; &quot;q&quot;</pre>\n"
        );
        let row = ClusterRow {
            namespace: "ns".into(),
            name: "<img src=x>".into(),
            labels: vec![("a\"b".into(), "<v>".into())],
            ..ClusterRow::default()
        };
        let html = clusters(&[row], 0, 1, &html! {}).into_string();
        assert!(!html.contains("<img"), "{html}");
        assert!(html.contains("&lt;img src=x&gt;") && html.contains("a&quot;b=&lt;v&gt;"));
        // in an attribute too: the value cannot end it
        let html = document(
            &Doc {
                page: Page::Clusters,
                title: hostile,
                user: hostile,
                kinds: &[],
                filter: Some(hostile),
            },
            denied(hostile),
        );
        assert!(!html.contains("<script>alert"), "{html}");
        assert!(
            html.contains("value=\"&lt;script&gt;alert('x')&lt;/script&gt; &amp; &quot;q&quot;\"")
        );
    }

    /// A value unlike any other in the row (`field` tells which), that would be markup and end
    /// an attribute if it were not escaped.
    fn hostile(field: &str) -> String {
        format!("<script>{field}('\"&')</script>")
    }

    /// How [`hostile`] reads once escaped.
    fn escaped(field: &str) -> String {
        format!("&lt;script&gt;{field}('&quot;&amp;')&lt;/script&gt;")
    }

    /// Every field, escaped, and nothing of them raw.
    fn only_escaped(html: &str, fields: &[&str]) {
        assert!(!html.contains("<script"), "{html}");
        assert!(!html.contains("('\""), "a quote left raw: {html}");
        for f in fields {
            assert!(html.contains(&escaped(f)), "{f} not shown escaped: {html}");
        }
    }

    #[test]
    fn every_field_of_a_cluster_and_a_subscription_row_is_escaped() {
        let cluster = ClusterRow {
            namespace: hostile("namespace"),
            name: hostile("name"),
            cluster_id: hostile("cluster_id"),
            ready: hostile("ready"),
            ready_reason: hostile("ready_reason"),
            heartbeat_age: Some(5),
            sync_mode: hostile("sync_mode"),
            k8s_version: hostile("k8s_version"),
            cpu: Resource {
                capacity: Some(2000),
                allocatable: Some(1000),
                used: Some(500),
            },
            memory: Resource::default(),
            labels: vec![(hostile("label_key"), hostile("label_value"))],
            taints: vec![hostile("taint")],
            tunnel: false,
        };
        let html = clusters(&[cluster], 0, 1, &html! {}).into_string();
        // `ready` is not shown itself: a value other than True or empty reads NotReady (reason)
        only_escaped(
            &html,
            &[
                "namespace",
                "name",
                "cluster_id",
                "ready_reason",
                "sync_mode",
                "k8s_version",
                "label_key",
                "label_value",
                "taint",
            ],
        );
        let subscription = SubscriptionRow {
            namespace: hostile("namespace"),
            name: hostile("name"),
            strategy: hostile("strategy"),
            feeds: vec![hostile("feed")],
            bound: vec![BoundCluster {
                cluster: hostile("cluster"),
                replicas: vec![(hostile("replica_feed"), 2)],
                available: 1,
                feeds: 1,
            }],
            conditions: vec![hostile("condition")],
        };
        let html = subscriptions(&[subscription], 1, &html! {}).into_string();
        only_escaped(
            &html,
            &[
                "namespace",
                "name",
                "strategy",
                "feed",
                "cluster",
                "replica_feed",
                "condition",
            ],
        );
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
        let html = clusters(&[row], 0, 1, &html! {}).into_string();
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
        assert!(
            clusters(&[], 0, 0, &html! {})
                .into_string()
                .contains("No ManagedClusters yet")
        );
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
        let html = subscriptions(&[row], 1, &html! {}).into_string();
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
            html! { p { "x" } },
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
        assert!(html.contains("<p>x</p></main>"), "{html}");
    }

    #[test]
    fn lists_are_paged_with_relative_links() {
        let (range, nav) = pager(250, 2, "clusters");
        let nav = nav.into_string();
        assert_eq!(range, 100..200);
        assert!(nav.contains("101-200 of 250 · page 2 of 3"), "{nav}");
        assert!(nav.contains("<a href=\"clusters?page=1\" rel=\"prev\">"));
        assert!(nav.contains("<a href=\"clusters?page=3\" rel=\"next\">"));
        // past the end: the last page
        assert_eq!(pager(250, 9, "clusters").0, 200..250);
        let (range, nav) = pager(0, 1, "clusters");
        assert_eq!((range, nav.into_string()), (0..0, String::new()));
        let (range, nav) = pager(100, 1, "clusters");
        assert_eq!((range, nav.into_string()), (0..100, String::new()));
        // a filtered list keeps its filter from page to page
        let base = filtered_path(Page::Clusters, "tier=gold e2e");
        assert_eq!(base, "clusters?q=tier%3Dgold%20e2e");
        let nav = pager(250, 1, &base).1.into_string();
        assert!(
            nav.contains("href=\"clusters?q=tier%3Dgold%20e2e&amp;page=2\""),
            "{nav}"
        );
    }

    #[test]
    fn detail_links_encode_their_query() {
        assert_eq!(
            detail_link("cluster", "clusternet-abc", "child1"),
            "cluster?namespace=clusternet%2Dabc&name=child1"
        );
        let hostile = detail_link("cluster", "a&b", "<x>\"");
        assert!(!hostile.contains(['<', '"']), "{hostile}");
        assert!(hostile.contains("namespace=a%26b&name="), "{hostile}");
        // the `&` between the parameters is escaped where the link becomes an attribute
        let html = key_link("subscription", "demo/app").into_string();
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
        let on_cluster = descriptions(std::slice::from_ref(&row), false).into_string();
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
        let on_subscription = descriptions(&[row], true).into_string();
        assert!(on_subscription.contains("child1<br><small>clusternet-abc/app-base</small>"));
        assert!(
            descriptions(&[], false)
                .into_string()
                .contains("Nothing is deployed here yet.")
        );
        assert!(events(&[]).into_string().contains("No recent events."));
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
        let html = registrations(&rows, 2, &html! {}).into_string();
        assert!(
            html.contains("2 registration requests; 1 approved"),
            "{html}"
        );
        assert!(html.contains("href=\"cluster?namespace=clusternet%2Dabc&amp;name=child1\""));
        assert!(html.contains("class=\"pending\""));
    }
}
