//! The dashboard's HTML, rendered on the server from plain rows (the pages work without their
//! one script, which only keeps them current; the Content-Security-Policy allows no inline
//! script). Everything that comes from an object is escaped here, at the one place text becomes
//! HTML.

use std::fmt::Write;

/// Which page a document is, for the navigation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Page {
    Clusters,
    Subscriptions,
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

/// The whole document around `main`. Links are relative to the page (every page sits right
/// under `pages/`): the parent's aggregator rewrites absolute paths in HTML to its own address,
/// which the browser of `kubectl clusternet dashboard` cannot use, and leaves relative ones.
pub fn document(page: Page, user: &str, main: &str) -> String {
    let (title, clusters, subscriptions) = match page {
        Page::Clusters => ("Clusters", " aria-current=\"page\"", ""),
        Page::Subscriptions => ("Subscriptions", "", " aria-current=\"page\""),
    };
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{title} · Clusternet</title>\
         <link rel=\"stylesheet\" href=\"assets/dashboard.css\">\
         <script src=\"assets/dashboard.js\" defer></script></head>\
         <body><header><span class=\"brand\">Clusternet</span><nav>\
         <a href=\"clusters\"{clusters}>Clusters</a>\
         <a href=\"subscriptions\"{subscriptions}>Subscriptions</a></nav>\
         <span class=\"user\">{}</span></header>\n<main id=\"main\">\n<h1>{title}</h1>\n{main}</main></body></html>\n",
        escape(user)
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

/// The Clusters page's content: one row per ManagedCluster.
pub fn clusters(rows: &[ClusterRow]) -> String {
    if rows.is_empty() {
        return "<p class=\"empty\">No ManagedClusters yet: register a child cluster with \
                its agent and a bootstrap token.</p>\n"
            .into();
    }
    let ready = rows.iter().filter(|r| r.ready == "True").count();
    let mut out = format!(
        "<p class=\"summary\">{ready} of {} clusters ready.</p>\n<table id=\"clusters\">\
         <thead><tr><th>Cluster</th><th>State</th><th>Heartbeat</th><th>Sync mode</th>\
         <th>Kubernetes</th><th>CPU</th><th>Memory</th><th>Labels</th><th>Taints</th>\
         <th>Tunnel</th></tr></thead><tbody>\n",
        rows.len()
    );
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
             <td title=\"cluster ID {id}\"><strong>{name}</strong><br><small>{ns}</small></td>\
             <td class=\"state\">{state}</td><td>{hb}</td><td>{mode}</td><td>{version}</td>\
             {cpu}{memory}<td>{labels}</td><td>{taints}</td><td>{tunnel}</td></tr>",
            ns = escape(&r.namespace),
            name = escape(&r.name),
            id = escape(&r.cluster_id),
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

/// The Subscriptions page's content: one row per Subscription.
pub fn subscriptions(rows: &[SubscriptionRow]) -> String {
    if rows.is_empty() {
        return "<p class=\"empty\">No Subscriptions yet.</p>\n".into();
    }
    let mut out = format!(
        "<p class=\"summary\">{} Subscriptions.</p>\n<table id=\"subscriptions\">\
         <thead><tr><th>Subscription</th><th>Strategy</th><th>Feeds</th>\
         <th>Clusters (ready feeds, replicas)</th><th>Conditions</th></tr></thead><tbody>\n",
        rows.len()
    );
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
                         max=\"{max}\" value=\"{a}\"></meter> {c}: <span class=\"count\">{a}/{f} \
                         ready</span>{replicas}</div>",
                        c = escape(&b.cluster),
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
            "<tr data-subscription=\"{ns}/{name}\"><td><strong>{name}</strong><br>\
             <small>{ns}</small></td><td>{strategy}</td><td>{feeds}</td><td>{bound}</td>\
             <td>{conditions}</td></tr>",
            ns = escape(&r.namespace),
            name = escape(&r.name),
            strategy = escape(&r.strategy),
        );
    }
    out.push_str("</tbody></table>\n");
    out
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
        let html = clusters(&[row]);
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
        let html = clusters(&[row]);
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
        assert!(clusters(&[]).contains("No ManagedClusters yet"));
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
        let html = subscriptions(&[row]);
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
        let html = document(Page::Subscriptions, "alice", "<p>x</p>");
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
}
