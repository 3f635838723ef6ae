//! The objects of the placement what-if: what each child of a binding would receive, rendered
//! from the same Manifests and HelmCharts with the same override selection and the same
//! renderer the Base controller uses (`base::render_feeds`), plus the replicas a Dividing
//! decision would give each child (the priority-1000 Localization the Subscription controller
//! writes, built here from the decision instead of read back). Every changed field is attributed
//! to the override that set it last. Pure: the hub hands in what it read from the parent.

use std::collections::BTreeMap;
use std::sync::Arc;

use kube::ResourceExt;

use super::feedinventory::{desired_inventory, plan_inventory};
use super::feeds;
use super::overrides::{self, SourcedOverride};
use super::subscription::replica_localization_spec;
use crate::apis::placement::OverrideSource;
use crate::apis::placement::{ClusterObjects, RenderedObject};
use crate::apis::{
    Feed, Globalization, HelmChart, Localization, ManagedCluster, Manifest, SchedulingStrategy,
    Subscription, known,
};

/// The parent's state the rendering reads.
pub struct PreviewState<'a> {
    pub reserved_ns: &'a str,
    pub manifests: &'a [Arc<Manifest>],
    pub charts: &'a [Arc<HelmChart>],
    pub globalizations: &'a [Globalization],
    pub localizations: &'a [Localization],
    pub clusters: &'a [Arc<ManagedCluster>],
}

/// The objects every cluster of `binding` (`namespace/name`, the decision) would receive, with
/// `replicas` (feed key -> one count per binding cluster) for a Dividing decision.
pub fn preview_objects(
    sub: &Subscription,
    binding: &[String],
    replicas: &BTreeMap<String, Vec<i32>>,
    state: &PreviewState<'_>,
) -> Vec<ClusterObjects> {
    let sub_uid = sub.uid().unwrap_or_default();
    // the replica JSON path of each workload feed, as the FeedInventory has it
    let paths: BTreeMap<String, String> =
        match plan_inventory(sub, state.reserved_ns, state.manifests) {
            Ok(Some(spec)) => desired_inventory(sub, spec)
                .spec
                .feeds
                .into_iter()
                .map(|o| (o.feed.key(), o.replica_json_path))
                .collect(),
            _ => BTreeMap::new(),
        };
    binding
        .iter()
        .enumerate()
        .map(|(index, cluster)| {
            let namespace = cluster.split('/').next().unwrap_or_default();
            let cluster_labels: Vec<BTreeMap<String, String>> = state
                .clusters
                .iter()
                .filter(|c| c.namespace().as_deref() == Some(namespace))
                .map(|c| c.labels().clone())
                .collect();
            // this Subscription's own dividing Localizations are the decision's to make: the
            // what-if's replicas replace them
            let localizations: Vec<&Localization> = state
                .localizations
                .iter()
                .filter(|l| l.namespace().as_deref() == Some(namespace))
                .filter(|l| {
                    sub_uid.is_empty()
                        || l.labels().get(&sub_uid).map(String::as_str)
                            != Some(known::SUBSCRIPTION_KIND)
                })
                .collect();
            let scope = Scope {
                sub,
                namespace,
                index,
                replicas,
                paths: &paths,
                localizations: &localizations,
                cluster_labels: &cluster_labels,
            };
            ClusterObjects {
                cluster: cluster.clone(),
                objects: sub
                    .spec
                    .feeds
                    .iter()
                    .flat_map(|feed| render_feed(feed, &scope, state))
                    .collect(),
            }
        })
        .collect()
}

struct Scope<'a> {
    sub: &'a Subscription,
    namespace: &'a str,
    index: usize,
    replicas: &'a BTreeMap<String, Vec<i32>>,
    paths: &'a BTreeMap<String, String>,
    localizations: &'a [&'a Localization],
    cluster_labels: &'a [BTreeMap<String, String>],
}

impl Scope<'_> {
    fn overrides(
        &self,
        state: &PreviewState<'_>,
        uid: &str,
        kind: &str,
        feed: &Feed,
    ) -> Result<Vec<SourcedOverride>, String> {
        let mut rules = overrides::sourced_overrides(
            state.globalizations,
            self.localizations,
            self.namespace,
            uid,
            kind,
            Some(feed),
            self.cluster_labels,
            false,
        )
        .map_err(|e| e.to_string())?;
        rules.extend(self.dividing_rule(feed));
        Ok(rules)
    }

    /// The replica count the decision gives this child for `feed`, as the Subscription
    /// controller's priority-1000 Localization sets it (the newest Localization, so it applies
    /// last).
    fn dividing_rule(&self, feed: &Feed) -> Option<SourcedOverride> {
        if self.sub.spec.scheduling_strategy != Some(SchedulingStrategy::Dividing) {
            return None;
        }
        let count = *self.replicas.get(&feed.key())?.get(self.index)?;
        let path = self.paths.get(&feed.key()).filter(|p| !p.is_empty())?;
        let spec = replica_localization_spec(feed, path, count);
        let config = spec.overrides.into_iter().next()?;
        Some(SourcedOverride {
            source: OverrideSource {
                kind: known::SUBSCRIPTION_KIND.to_string(),
                namespace: self.sub.namespace(),
                name: self.sub.name_any(),
                priority: spec.priority,
            },
            config,
        })
    }
}

/// One feed's objects (a feed selecting several Manifests gives several).
fn render_feed(feed: &Feed, scope: &Scope<'_>, state: &PreviewState<'_>) -> Vec<RenderedObject> {
    let label = feed.to_string();
    let failed = |error: String| RenderedObject {
        feed: label.clone(),
        error: Some(error),
        ..RenderedObject::default()
    };
    if feed.kind == "HelmChart" {
        let Some(chart) = state.charts.iter().find(|c| {
            c.namespace().as_deref() == Some(feed.namespace.as_str()) && c.name_any() == feed.name
        }) else {
            return vec![failed(format!("nonexistent {feed}"))];
        };
        let template = super::base::chart_template(chart);
        let rules =
            match scope.overrides(state, &chart.uid().unwrap_or_default(), "HelmChart", feed) {
                Ok(r) => r,
                Err(e) => return vec![failed(e)],
            };
        let configs: Vec<_> = rules.iter().map(|r| r.config.clone()).collect();
        return vec![match overrides::render_helm(&template, &configs) {
            Ok(r) => RenderedObject {
                feed: label,
                template: Some(template),
                object: Some(r.chart),
                values: Some(r.values),
                applied: rules.into_iter().map(|r| r.source).collect(),
                ..RenderedObject::default()
            },
            Err(e) => failed(e.to_string()),
        }];
    }
    let found = feeds::find(feed, state.reserved_ns, state.manifests);
    if found.is_empty() {
        return vec![failed(format!("nonexistent {feed}"))];
    }
    found
        .into_iter()
        .map(|m| {
            let template = &m.spec.template;
            let kind = m
                .labels()
                .get(known::CONFIG_KIND_LABEL)
                .map(String::as_str)
                .unwrap_or(&feed.kind);
            let rendered = scope
                .overrides(state, &m.uid().unwrap_or_default(), kind, feed)
                .and_then(|rules| {
                    overrides::render_generic_explained(template, &rules).map_err(|e| e.to_string())
                });
            match rendered {
                Ok((object, changes)) => RenderedObject {
                    feed: label.clone(),
                    template: Some(template.clone()),
                    object: Some(object),
                    changes,
                    ..RenderedObject::default()
                },
                Err(e) => RenderedObject {
                    template: Some(template.clone()),
                    ..failed(e)
                },
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apis::{GlobalizationSpec, LocalizationSpec, OverrideConfig, OverrideType};
    use crate::pipeline::feeds::test_manifest;
    use serde_json::{Value, json};

    fn cluster(ns: &str, name: &str, labels: &[(&str, &str)]) -> Arc<ManagedCluster> {
        let mut c: ManagedCluster = serde_json::from_value(json!({
            "apiVersion": "clusters.clusternet.io/v1beta1",
            "kind": "ManagedCluster",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"clusterId": format!("{name}-id"), "clusterType": "EdgeCluster", "syncMode": "Pull"},
        }))
        .expect("cluster");
        c.metadata.labels = Some(
            labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        Arc::new(c)
    }

    fn merge(name: &str, value: Value) -> OverrideConfig {
        OverrideConfig {
            name: name.into(),
            value: value.to_string(),
            type_: OverrideType::MergePatch,
            override_chart: false,
            field_path: String::new(),
            field_format: None,
        }
    }

    fn sub(strategy: &str) -> Subscription {
        serde_json::from_value(json!({
            "apiVersion": "apps.clusternet.io/v1alpha1",
            "kind": "Subscription",
            "metadata": {"name": "app", "namespace": "default"},
            "spec": {
                "schedulingStrategy": strategy,
                "subscribers": [{"clusterAffinity": {}}],
                "feeds": [{"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "default", "name": "web"}],
            },
        }))
        .expect("subscription")
    }

    fn feed() -> Feed {
        sub("Replication").spec.feeds[0].clone()
    }

    fn deployment() -> Arc<Manifest> {
        test_manifest(json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"replicas": 1, "template": {"spec": {"containers": [{"name": "c", "image": "nginx"}]}}}}))
    }

    #[test]
    fn the_localization_at_700_wins_over_the_globalization_at_400_and_is_named() {
        let mut g = Globalization::new(
            "everywhere",
            GlobalizationSpec {
                overrides: vec![merge("replicas-400", json!({"spec": {"replicas": 400}}))],
                priority: 400,
                feed: feed(),
                ..Default::default()
            },
        );
        g.metadata.name = Some("everywhere".into());
        let mut l = Localization::new(
            "gold-only",
            LocalizationSpec {
                overrides: vec![merge("replicas-700", json!({"spec": {"replicas": 700}}))],
                priority: 700,
                feed: feed(),
                ..Default::default()
            },
        );
        l.metadata.namespace = Some("clusternet-gold".into());
        let clusters = [
            cluster("clusternet-gold", "gold", &[("tier", "gold")]),
            cluster("clusternet-bronze", "bronze", &[("tier", "bronze")]),
        ];
        let manifests = [deployment()];
        let state = PreviewState {
            reserved_ns: "clusternet-reserved",
            manifests: &manifests,
            charts: &[],
            globalizations: &[g],
            localizations: &[l],
            clusters: &clusters,
        };
        let out = preview_objects(
            &sub("Replication"),
            &[
                "clusternet-gold/gold".into(),
                "clusternet-bronze/bronze".into(),
            ],
            &BTreeMap::new(),
            &state,
        );
        let gold = &out[0].objects[0];
        assert_eq!(gold.object.as_ref().unwrap()["spec"]["replicas"], 700);
        assert_eq!(gold.changes.len(), 1);
        assert_eq!(gold.changes[0].path, "/spec/replicas");
        assert_eq!(gold.changes[0].source.kind, "Localization");
        assert_eq!(gold.changes[0].source.name, "gold-only");
        assert_eq!(gold.changes[0].source.priority, 700);
        assert_eq!(gold.template.as_ref().unwrap()["spec"]["replicas"], 1);
        let bronze = &out[1].objects[0];
        assert_eq!(bronze.object.as_ref().unwrap()["spec"]["replicas"], 400);
        assert_eq!(bronze.changes[0].source.kind, "Globalization");
    }

    #[test]
    fn a_dividing_decision_sets_each_childs_replicas_and_a_broken_patch_stays_with_its_cluster() {
        let mut s = sub("Dividing");
        s.spec.dividing_scheduling =
            Some(serde_json::from_value(json!({"type": "Static"})).unwrap());
        let mut broken = Localization::new(
            "broken",
            LocalizationSpec {
                overrides: vec![OverrideConfig {
                    type_: OverrideType::JsonPatch,
                    value: "not a patch".into(),
                    ..merge("bad", json!({}))
                }],
                priority: 500,
                feed: feed(),
                ..Default::default()
            },
        );
        broken.metadata.namespace = Some("clusternet-b".into());
        let clusters = [
            cluster("clusternet-a", "a", &[]),
            cluster("clusternet-b", "b", &[]),
        ];
        let manifests = [deployment()];
        let state = PreviewState {
            reserved_ns: "clusternet-reserved",
            manifests: &manifests,
            charts: &[],
            globalizations: &[],
            localizations: &[broken],
            clusters: &clusters,
        };
        let replicas = BTreeMap::from([(feed().key(), vec![6, 4])]);
        let out = preview_objects(
            &s,
            &["clusternet-a/a".into(), "clusternet-b/b".into()],
            &replicas,
            &state,
        );
        let a = &out[0].objects[0];
        assert_eq!(a.object.as_ref().unwrap()["spec"]["replicas"], 6);
        assert_eq!(a.changes[0].source.kind, "Subscription");
        assert_eq!(a.changes[0].source.priority, 1000);
        let b = &out[1].objects[0];
        assert!(b.object.is_none());
        assert!(
            b.error.as_deref().unwrap_or_default().contains("bad"),
            "{b:?}"
        );
    }

    #[test]
    fn a_missing_feed_is_that_objects_error() {
        let clusters = [cluster("clusternet-a", "a", &[])];
        let state = PreviewState {
            reserved_ns: "clusternet-reserved",
            manifests: &[],
            charts: &[],
            globalizations: &[],
            localizations: &[],
            clusters: &clusters,
        };
        let out = preview_objects(
            &sub("Replication"),
            &["clusternet-a/a".into()],
            &BTreeMap::new(),
            &state,
        );
        assert_eq!(
            out[0].objects[0].error.as_deref(),
            Some("nonexistent Deployment default/web")
        );
    }
}
