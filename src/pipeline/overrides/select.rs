//! §5.2 which Localization and Globalization rules apply to a rendered object in one cluster
//! namespace, and in which order: upstream `pkg/hub/localizer` `getOverrides`.

use std::borrow::Borrow;
use std::collections::BTreeMap;

use kube::ResourceExt;

use super::OverrideError;
use crate::apis::placement::OverrideSource;
use crate::apis::{Feed, Globalization, Localization, OverrideConfig};
use crate::kube_ext::labels::Selector;

/// One override rule with the object it comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourcedOverride {
    pub source: OverrideSource,
    pub config: OverrideConfig,
}

/// The override rules for one rendered object in one cluster namespace, in application order
/// (§5.2): matching Globalizations, then matching Localizations of `namespace`, each sorted by
/// priority (unset = 500), then creation time, then name; objects being deleted are skipped.
///
/// An override object matches when either
/// - it carries the reference label `<feed_uid>: <feed_kind>` (upstream's only mode; the override
///   controllers write these labels, §5.1), or
/// - `feed` is given and equals its `spec.feed` (group/version, kind and name equal; the namespace
///   equal when `spec.feed` names one, as Manifest lookup does). Our controllers may render before
///   the override controllers have put reference labels on the override objects (a new override,
///   or a re-created Manifest with a new UID), and the reference itself says the same thing the
///   label is derived from. `feed` must be spelled as users write `spec.feed`, e.g.
///   `apps.clusternet.io/v1alpha1` `HelmChart` for charts.
///
/// A Globalization with `clusterAffinity` applies only if at least one of the ManagedClusters in
/// `namespace` (their labels are `clusters_in_namespace_labels`) matches it. A Globalization whose
/// selector is invalid is skipped with a warning here; [`try_applicable_overrides`] reports it as
/// an error instead, as upstream does (it fails the whole render).
pub fn applicable_overrides<G, L>(
    globalizations: &[G],
    localizations: &[L],
    namespace: &str,
    feed_uid: &str,
    feed_kind: &str,
    feed: Option<&Feed>,
    clusters_in_namespace_labels: &[BTreeMap<String, String>],
) -> Vec<OverrideConfig>
where
    G: Borrow<Globalization>,
    L: Borrow<Localization>,
{
    select_rules(
        globalizations,
        localizations,
        namespace,
        feed_uid,
        feed_kind,
        feed,
        clusters_in_namespace_labels,
        false,
    )
    .map(configs)
    .unwrap_or_default()
}

fn configs(rules: Vec<Rule<'_>>) -> Vec<OverrideConfig> {
    rules.into_iter().map(|r| r.config.clone()).collect()
}

/// [`applicable_overrides`], but a Globalization with an invalid `clusterAffinity` is an error
/// naming it (upstream's behaviour), for callers that surface it in a status.
pub fn try_applicable_overrides<G, L>(
    globalizations: &[G],
    localizations: &[L],
    namespace: &str,
    feed_uid: &str,
    feed_kind: &str,
    feed: Option<&Feed>,
    clusters_in_namespace_labels: &[BTreeMap<String, String>],
) -> Result<Vec<OverrideConfig>, OverrideError>
where
    G: Borrow<Globalization>,
    L: Borrow<Localization>,
{
    select_rules(
        globalizations,
        localizations,
        namespace,
        feed_uid,
        feed_kind,
        feed,
        clusters_in_namespace_labels,
        true,
    )
    .map(configs)
}

/// The rules with each one's Globalization or Localization, for explaining which override set
/// which field; `strict` as [`try_applicable_overrides`] (an invalid Globalization selector is
/// an error) or as [`applicable_overrides`] (skipped).
#[allow(clippy::too_many_arguments)]
pub fn sourced_overrides<G, L>(
    globalizations: &[G],
    localizations: &[L],
    namespace: &str,
    feed_uid: &str,
    feed_kind: &str,
    feed: Option<&Feed>,
    clusters_in_namespace_labels: &[BTreeMap<String, String>],
    strict: bool,
) -> Result<Vec<SourcedOverride>, OverrideError>
where
    G: Borrow<Globalization>,
    L: Borrow<Localization>,
{
    let rules = select_rules(
        globalizations,
        localizations,
        namespace,
        feed_uid,
        feed_kind,
        feed,
        clusters_in_namespace_labels,
        strict,
    )?;
    Ok(rules
        .into_iter()
        .map(|r| SourcedOverride {
            source: OverrideSource {
                kind: r.kind.to_owned(),
                namespace: r.meta.namespace.clone(),
                name: r.meta.name.clone().unwrap_or_default(),
                priority: r.priority,
            },
            config: r.config.clone(),
        })
        .collect())
}

/// One selected rule, borrowed from its Globalization or Localization: the renderer clones
/// only the rule, the what-if also the object's identity.
struct Rule<'a> {
    kind: &'static str,
    meta: &'a kube::api::ObjectMeta,
    priority: i32,
    config: &'a OverrideConfig,
}

/// Whether a Globalization's `clusterAffinity` (if any) matches one of the clusters of the
/// namespace; an invalid one is an error when `strict`, otherwise skipped with a warning.
fn affinity_matches(
    glob: &Globalization,
    clusters_in_namespace_labels: &[BTreeMap<String, String>],
    strict: bool,
) -> Result<bool, OverrideError> {
    let Some(affinity) = &glob.spec.cluster_affinity else {
        return Ok(true);
    };
    match Selector::from_label_selector_unvalidated(affinity) {
        Ok(selector) => Ok(clusters_in_namespace_labels
            .iter()
            .any(|labels| selector.matches(labels))),
        Err(reason) => {
            let err = OverrideError::ClusterAffinity {
                name: glob.name_any(),
                reason: reason.to_string(),
            };
            if strict {
                return Err(err);
            }
            tracing::warn!(error = %err, "skipping Globalization");
            Ok(false)
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn select_rules<'a, G, L>(
    globalizations: &'a [G],
    localizations: &'a [L],
    namespace: &str,
    feed_uid: &str,
    feed_kind: &str,
    feed: Option<&Feed>,
    clusters_in_namespace_labels: &[BTreeMap<String, String>],
    strict: bool,
) -> Result<Vec<Rule<'a>>, OverrideError>
where
    G: Borrow<Globalization>,
    L: Borrow<Localization>,
{
    let references = |labels: &BTreeMap<String, String>, spec_feed: &Feed| {
        (!feed_uid.is_empty() && labels.get(feed_uid).map(String::as_str) == Some(feed_kind))
            || feed.is_some_and(|f| feed_matches(spec_feed, f))
    };

    let mut globs: Vec<&Globalization> = Vec::new();
    for glob in globalizations.iter().map(Borrow::borrow) {
        if glob.metadata.deletion_timestamp.is_some() || !references(glob.labels(), &glob.spec.feed)
        {
            continue;
        }
        if affinity_matches(glob, clusters_in_namespace_labels, strict)? {
            globs.push(glob);
        }
    }
    globs.sort_by_key(|g| order_key(g.spec.effective_priority(), &g.metadata));

    let mut locs: Vec<&Localization> = localizations
        .iter()
        .map(Borrow::borrow)
        .filter(|l| {
            l.metadata.namespace.as_deref() == Some(namespace)
                && l.metadata.deletion_timestamp.is_none()
                && references(l.labels(), &l.spec.feed)
        })
        .collect();
    locs.sort_by_key(|l| order_key(l.spec.effective_priority(), &l.metadata));

    let rules = |kind, meta, priority, overrides: &'a [OverrideConfig]| {
        overrides.iter().map(move |config| Rule {
            kind,
            meta,
            priority,
            config,
        })
    };
    // Globalizations first, so any Localization (applied later) wins over any Globalization.
    let globs = globs.into_iter().flat_map(|g| {
        rules(
            "Globalization",
            &g.metadata,
            g.spec.effective_priority(),
            &g.spec.overrides,
        )
    });
    let locs = locs.into_iter().flat_map(|l| {
        rules(
            "Localization",
            &l.metadata,
            l.spec.effective_priority(),
            &l.spec.overrides,
        )
    });
    Ok(globs.chain(locs).collect())
}

/// Priority, then creation time, then name. Upstream compares only the seconds field of the
/// creation time, which makes the order of same-priority objects arbitrary; the full timestamp
/// and the name make it deterministic.
fn order_key(
    priority: i32,
    meta: &kube::api::ObjectMeta,
) -> (i32, Option<k8s_openapi::jiff::Timestamp>, String) {
    (
        priority,
        meta.creation_timestamp.as_ref().map(|t| t.0),
        meta.name.clone().unwrap_or_default(),
    )
}

/// Does the override's `spec.feed` name the rendered object `object`? Same rule as Manifest lookup
/// (`feeds::manifest_selector`): a feed without namespace matches every namespace.
fn feed_matches(spec_feed: &Feed, object: &Feed) -> bool {
    spec_feed.api_version == object.api_version
        && spec_feed.kind == object.kind
        && spec_feed.name == object.name
        && (spec_feed.namespace.is_empty() || spec_feed.namespace == object.namespace)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apis::OverrideType;
    use crate::pipeline::overrides::fixtures::*;
    use crate::pipeline::overrides::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
    use serde_json::json;

    #[test]
    fn replication_example_with_matching_cluster() {
        let overrides = select(
            &[globalization()],
            &localizations(),
            &[cluster("area1-cluster")],
        );
        assert_eq!(
            names(&overrides),
            [
                "add-update-labels",
                "remove-labels",
                "add-update-labels",
                "scale-replicas",
                "scale-and-add-annotations",
                "change-container-image-and-name",
                "inject-new-container"
            ]
        );
        let rendered = render_generic(&nginx(), &overrides).expect("renders");
        assert_eq!(rendered, expected_nginx(true));
    }

    #[test]
    fn globalization_affinity_needs_a_matching_cluster_in_the_namespace() {
        for clusters in [vec![], vec![cluster("area3-cluster")]] {
            let overrides = select(&[globalization()], &localizations(), &clusters);
            assert_eq!(overrides.len(), 5, "only the Localizations' rules");
            let rendered = render_generic(&nginx(), &overrides).expect("renders");
            assert_eq!(rendered, expected_nginx(false));
        }
        let overrides = select(
            &[globalization()],
            &[],
            &[cluster("area3-cluster"), cluster("area2-cluster")],
        );
        assert_eq!(names(&overrides), ["add-update-labels", "remove-labels"]);
    }

    #[test]
    fn no_affinity_applies_everywhere_and_invalid_affinity_is_an_error() {
        let mut glob = globalization();
        glob.spec.cluster_affinity = None;
        assert_eq!(select(&[glob.clone()], &[], &[]).len(), 2);

        glob.spec.cluster_affinity = Some(LabelSelector {
            match_expressions: Some(vec![
                k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement {
                    key: "clusters.clusternet.io/cluster-name".to_owned(),
                    operator: "in".to_owned(),
                    values: Some(vec!["a".to_owned()]),
                },
            ]),
            match_labels: None,
        });
        let run = |strict: bool| {
            let args = (
                std::slice::from_ref(&glob),
                &[] as &[Localization],
                "clusternet-5l82l",
            );
            if strict {
                try_applicable_overrides(
                    args.0,
                    args.1,
                    args.2,
                    MANIFEST_UID,
                    "Deployment",
                    None,
                    &[cluster("a")],
                )
            } else {
                Ok(applicable_overrides(
                    args.0,
                    args.1,
                    args.2,
                    MANIFEST_UID,
                    "Deployment",
                    None,
                    &[cluster("a")],
                ))
            }
        };
        assert_eq!(run(false), Ok(vec![]), "lenient: skipped");
        let err = run(true).expect_err("invalid operator");
        assert_eq!(
            err.to_string(),
            "Globalization \"nginx-global-overrides-demo\": invalid clusterAffinity: \"in\" is not a valid label selector operator"
        );
    }

    #[test]
    fn localizations_beat_globalizations_whatever_the_priority() {
        let mut glob = globalization();
        glob.spec.priority = 1000;
        glob.spec.cluster_affinity = None;
        glob.spec.overrides = vec![rule(
            "global-replicas",
            OverrideType::MergePatch,
            r#"{"spec":{"replicas":9}}"#,
        )];
        let mut loc = localizations().remove(1);
        loc.spec.priority = 100;
        loc.spec.overrides = vec![rule(
            "local-replicas",
            OverrideType::MergePatch,
            r#"{"spec":{"replicas":4}}"#,
        )];
        let overrides = select(&[glob], &[loc], &[]);
        assert_eq!(names(&overrides), ["global-replicas", "local-replicas"]);
        let rendered = render_generic(&nginx(), &overrides).expect("renders");
        assert_eq!(rendered["spec"]["replicas"], json!(4));
    }

    #[test]
    fn selection_order_skips_and_other_namespaces() {
        let base = localizations().remove(1);
        let mk = |name: &str, priority: i32, created: &str| {
            let mut l = base.clone();
            l.metadata.name = Some(name.to_owned());
            l.spec.priority = priority;
            l.metadata.creation_timestamp =
                Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    created.parse().expect("timestamp"),
                ));
            l.spec.overrides = vec![rule(name, OverrideType::MergePatch, "{}")];
            l
        };
        let mut deleting = mk("deleting", 100, "2024-01-01T00:00:00Z");
        deleting.metadata.deletion_timestamp = deleting.metadata.creation_timestamp.clone();
        let mut elsewhere = mk("elsewhere", 100, "2024-01-01T00:00:00Z");
        elsewhere.metadata.namespace = Some("clusternet-other".to_owned());
        let mut unlabelled = mk("unlabelled", 100, "2024-01-01T00:00:00Z");
        unlabelled.metadata.labels = None;
        let locs = vec![
            mk("b-same-time", 500, "2024-01-01T00:00:05Z"),
            mk("late", 500, "2024-01-01T00:00:05.500Z"),
            mk("a-same-time", 500, "2024-01-01T00:00:05Z"),
            mk("default-priority", 0, "2023-01-01T00:00:00Z"),
            mk("low", 10, "2025-01-01T00:00:00Z"),
            deleting,
            elsewhere,
            unlabelled,
        ];
        let overrides = select(&[], &locs, &[]);
        assert_eq!(
            names(&overrides),
            [
                "low",
                "default-priority",
                "a-same-time",
                "b-same-time",
                "late"
            ]
        );
    }

    #[test]
    fn feed_reference_matches_without_reference_labels() {
        let mut locs = localizations();
        for l in &mut locs {
            l.metadata.labels = None;
        }
        let mut glob = globalization();
        glob.metadata.labels = None;
        glob.spec.feed.namespace = String::new(); // a feed without namespace matches any namespace
        let run = |feed: Option<&Feed>| {
            applicable_overrides(
                std::slice::from_ref(&glob),
                &locs,
                "clusternet-5l82l",
                MANIFEST_UID,
                "Deployment",
                feed,
                &[cluster("area1-cluster")],
            )
            .len()
        };
        assert_eq!(run(None), 0, "labels only");
        assert_eq!(
            run(Some(&Feed::new("apps/v1", "Deployment", "foo", "my-nginx"))),
            7
        );
        assert_eq!(
            run(Some(&Feed::new("apps/v1", "Deployment", "bar", "my-nginx"))),
            2,
            "only the namespace-less Globalization feed"
        );
        assert_eq!(
            run(Some(&Feed::new(
                "apps/v1",
                "StatefulSet",
                "foo",
                "my-nginx"
            ))),
            0
        );
    }

    #[test]
    fn override_policy_does_not_change_rendering() {
        let render = |policy: crate::apis::OverridePolicy| {
            let mut locs = localizations();
            for l in &mut locs {
                l.spec.override_policy = Some(policy);
            }
            let overrides = select(&[], &locs, &[]);
            render_generic(&nginx(), &overrides).expect("renders")
        };
        assert_eq!(
            render(crate::apis::OverridePolicy::ApplyNow),
            render(crate::apis::OverridePolicy::ApplyLater)
        );
        assert_eq!(
            render(crate::apis::OverridePolicy::ApplyNow),
            expected_nginx(false)
        );
    }
}
