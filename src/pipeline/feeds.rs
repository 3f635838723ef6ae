//! Which Manifests a feed refers to (docs/spec/deployer.md §4.1): Manifests in the reserved
//! namespace whose `config.group`, `config.version`, `config.kind`, `config.name` labels match the
//! feed, and `config.namespace` only when the feed names a namespace.

use std::collections::BTreeMap;
use std::sync::Arc;

use kube::ResourceExt;

use crate::apis::known;
use crate::apis::{Feed, HelmChart, Manifest, Subscription};

/// `apps/v1` -> (`apps`, `v1`); `v1` -> (``, `v1`).
pub fn group_version(api_version: &str) -> (&str, &str) {
    match api_version.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", api_version),
    }
}

/// The label selector (as pairs) that finds a feed's Manifests.
pub fn manifest_selector(feed: &Feed) -> BTreeMap<&'static str, String> {
    let (group, version) = group_version(&feed.api_version);
    let mut sel = BTreeMap::from([
        (known::CONFIG_GROUP_LABEL, group.to_string()),
        (known::CONFIG_VERSION_LABEL, version.to_string()),
        (known::CONFIG_KIND_LABEL, feed.kind.clone()),
        (known::CONFIG_NAME_LABEL, feed.name.clone()),
    ]);
    if !feed.namespace.is_empty() {
        sel.insert(known::CONFIG_NAMESPACE_LABEL, feed.namespace.clone());
    }
    sel
}

pub fn matches(feed: &Feed, labels: &BTreeMap<String, String>) -> bool {
    manifest_selector(feed)
        .iter()
        .all(|(k, v)| labels.get(*k) == Some(v))
}

/// Whether Subscription `s` uses Manifest `m` as a feed (never when `m` is not in the reserved
/// namespace, where feeds live).
pub fn uses(s: &Subscription, m: &Manifest, reserved_ns: &str) -> bool {
    m.namespace().as_deref() == Some(reserved_ns)
        && s.spec.feeds.iter().any(|f| matches(f, m.labels()))
}

/// The Subscriptions among `subs` that use Manifest `m` as a feed.
pub fn subscriptions_using<'a>(
    m: &'a Manifest,
    reserved_ns: &'a str,
    subs: &'a [Arc<Subscription>],
) -> impl Iterator<Item = &'a Arc<Subscription>> + 'a {
    subs.iter().filter(move |s| uses(s, m, reserved_ns))
}

/// The Manifests of a feed among `manifests` (the reserved namespace's), oldest first so "the
/// first matching Manifest" is stable.
pub fn find<'a>(
    feed: &Feed,
    reserved_ns: &str,
    manifests: &'a [Arc<Manifest>],
) -> Vec<&'a Arc<Manifest>> {
    let mut found: Vec<&Arc<Manifest>> = manifests
        .iter()
        // a Manifest whose deletion is held back because Subscriptions still use it stays a feed
        .filter(|m| {
            m.namespace().as_deref() == Some(reserved_ns)
                && (m.metadata.deletion_timestamp.is_none()
                    || m.finalizers()
                        .iter()
                        .any(|f| f == known::FEED_PROTECTION_FINALIZER))
        })
        .filter(|m| matches(feed, m.labels()))
        .collect();
    found.sort_by(|a, b| {
        (
            a.metadata.creation_timestamp.as_ref().map(|t| t.0),
            a.name_any(),
        )
            .cmp(&(
                b.metadata.creation_timestamp.as_ref().map(|t| t.0),
                b.name_any(),
            ))
    });
    found
}

/// The Manifest the shadow API stores for `template` (labels from its apiVersion, kind, name and
/// namespace; named `<kind>s.<namespace>.<name>` in clusternet-reserved), for unit tests.
#[cfg(test)]
pub(crate) fn test_manifest(template: serde_json::Value) -> std::sync::Arc<Manifest> {
    let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_owned();
    let api_version = text(&template["apiVersion"]);
    let (group, version) = group_version(&api_version);
    let kind = text(&template["kind"]);
    let name = text(&template["metadata"]["name"]);
    let ns = text(&template["metadata"]["namespace"]);
    std::sync::Arc::new(
        serde_json::from_value(serde_json::json!({
            "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Manifest",
            "metadata": {"name": format!("{}s.{ns}.{name}", kind.to_lowercase()),
                "namespace": "clusternet-reserved",
                "labels": {"apps.clusternet.io/config.group": group,
                    "apps.clusternet.io/config.version": version,
                    "apps.clusternet.io/config.kind": kind,
                    "apps.clusternet.io/config.name": name,
                    "apps.clusternet.io/config.namespace": ns}},
            "template": template
        }))
        .expect("a Manifest"),
    )
}

/// Whether the HelmChart's status speaks for its current spec: the lookup recorded the
/// generation it looked at (a status written without one, by an older controller, is taken as
/// it is).
pub fn chart_verified(chart: &HelmChart) -> bool {
    chart.status.as_ref().is_some_and(|s| {
        s.phase.is_some()
            && s.observed_generation
                .is_none_or(|g| Some(g) == chart.metadata.generation)
    })
}

/// Why a HelmChart feed cannot be rendered yet, when it cannot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChartNotReady {
    /// Its lookup has not looked at its current spec yet.
    Verifying,
    /// Its lookup did not find the version it asks for (the lookup's reason, may be empty).
    NotFound(String),
}

/// Whether a HelmChart can be rendered: its lookup looked at its current spec and found the
/// chart. The Base controller and the revision controller both ask this, so a chart never makes
/// a revision that cannot deploy.
pub fn chart_ready(chart: &HelmChart) -> Result<(), ChartNotReady> {
    if !chart_verified(chart) {
        return Err(ChartNotReady::Verifying);
    }
    match chart.status.as_ref() {
        Some(s) if s.phase == Some(crate::apis::HelmChartPhase::NotFound) => {
            Err(ChartNotReady::NotFound(s.reason.clone()))
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn feeds_match_manifest_labels() {
        let deploy = Feed::new("apps/v1", "Deployment", "qux", "my-nginx");
        let l = labels(&[
            ("apps.clusternet.io/config.group", "apps"),
            ("apps.clusternet.io/config.version", "v1"),
            ("apps.clusternet.io/config.kind", "Deployment"),
            ("apps.clusternet.io/config.name", "my-nginx"),
            ("apps.clusternet.io/config.namespace", "qux"),
        ]);
        assert!(matches(&deploy, &l));
        assert!(!matches(
            &Feed::new("apps/v1", "Deployment", "other", "my-nginx"),
            &l
        ));
        // a namespaced kind referenced without namespace matches that name in every namespace
        assert!(matches(
            &Feed::new("apps/v1", "Deployment", "", "my-nginx"),
            &l
        ));
        let ns = labels(&[
            ("apps.clusternet.io/config.group", ""),
            ("apps.clusternet.io/config.version", "v1"),
            ("apps.clusternet.io/config.kind", "Namespace"),
            ("apps.clusternet.io/config.name", "qux"),
            ("apps.clusternet.io/config.namespace", ""),
        ]);
        assert!(matches(&Feed::new("v1", "Namespace", "", "qux"), &ns));
    }
}
