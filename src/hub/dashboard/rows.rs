//! What the pages show of each object, as plain rows ([`render`](super::render) turns them into
//! HTML): pure functions of the objects, unit-tested here.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Event;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use serde_json::Value;

use super::render::{
    BoundCluster, ClusterFacts, ClusterRow, ConditionRow, DescriptionRow, EventRow, HelmChartRow,
    ManifestRow, ObjectRow, RegistrationRow, Resource, SubscriptionRow,
};
use crate::apis::{
    Base, ClusterRegistrationRequest, Description, HelmChart, ManagedCluster, Manifest,
    Subscription, known,
};
use crate::kube_ext::quantity;

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
    let feeds: Vec<String> = s
        .spec
        .feeds
        .iter()
        .map(|f| feed_text(&f.kind, &f.namespace, &f.name))
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

/// A cluster page's facts: where the child is, what its agent reports, its conditions.
pub fn cluster_facts(mc: &ManagedCluster, now: Timestamp) -> ClusterFacts {
    let status = mc.status.clone().unwrap_or_default();
    let yes_no = |b: bool| if b { "ok" } else { "failing" };
    let mut facts = vec![
        ("Cluster ID".to_string(), mc.spec.cluster_id.clone()),
        ("Namespace".to_string(), mc.namespace().unwrap_or_default()),
        ("API server".to_string(), status.apiserver_url.clone()),
        ("Agent".to_string(), status.agent_version.clone()),
        ("Platform".to_string(), status.platform.clone()),
    ];
    if status.last_observed_time.is_some() {
        facts.push((
            "Health".to_string(),
            format!(
                "healthz {}, livez {}, readyz {}",
                yes_no(status.healthz),
                yes_no(status.livez),
                yes_no(status.readyz)
            ),
        ));
    }
    facts.retain(|(_, v)| !v.is_empty());
    ClusterFacts {
        facts,
        conditions: status
            .conditions
            .iter()
            .map(|c| ConditionRow {
                type_: c.type_.clone(),
                status: c.status.clone(),
                reason: c.reason.clone(),
                message: c.message.clone(),
                age: age_of(Some(&c.last_transition_time.0), now),
            })
            .collect(),
    }
}

/// A Subscription page's rows: each Description of its Bases (`descriptions`, already its own),
/// with the Base it comes from, and a row for each Base that has no Description yet.
pub fn deployed_rows<'a>(
    bases: impl IntoIterator<Item = &'a Base>,
    descriptions: &[&Description],
    now: Timestamp,
) -> Vec<DescriptionRow> {
    let mut rows: Vec<DescriptionRow> = descriptions
        .iter()
        .map(|d| description_row(d, now))
        .collect();
    for base in bases {
        let (ns, name) = (base.namespace().unwrap_or_default(), base.name_any());
        if !rows.iter().any(|r| r.namespace == ns && r.base == name) {
            rows.push(DescriptionRow {
                namespace: ns,
                name: "-".into(),
                base: name,
                cluster: base
                    .labels()
                    .get(known::CLUSTER_NAME_LABEL)
                    .cloned()
                    .unwrap_or_default(),
                phase: "no Description yet".into(),
                age: age_of(base.creation_timestamp().as_ref().map(|t| &t.0), now),
                ..DescriptionRow::default()
            });
        }
    }
    rows.sort_by(|a, b| (&a.cluster, &a.name).cmp(&(&b.cluster, &b.name)));
    rows
}

/// Seconds from `t` to `now`.
fn age_of(t: Option<&Timestamp>, now: Timestamp) -> Option<i64> {
    t.map(|t| now.as_second() - t.as_second())
}

/// The Descriptions' rows (the cluster's and the Subscription's pages).
pub fn description_row(d: &Description, now: Timestamp) -> DescriptionRow {
    let labels = d.labels();
    let label = |k: &str| labels.get(k).cloned().unwrap_or_default();
    let status = d.status.clone().unwrap_or_default();
    DescriptionRow {
        namespace: d.namespace().unwrap_or_default(),
        name: d.name_any(),
        subscription: match (
            label(known::CONFIG_SUBSCRIPTION_NAMESPACE_LABEL),
            label(known::CONFIG_SUBSCRIPTION_NAME_LABEL),
        ) {
            (ns, name) if !name.is_empty() => format!("{ns}/{name}"),
            _ => String::new(),
        },
        cluster: label(known::CLUSTER_NAME_LABEL),
        // a Description's owner labels name its Base
        base: if label(known::CONFIG_KIND_LABEL) == known::BASE_KIND {
            label(known::CONFIG_NAME_LABEL)
        } else {
            String::new()
        },
        deployer: d.spec.deployer.to_string(),
        phase: status
            .phase
            .map_or_else(|| "Pending".to_string(), |p| p.to_string()),
        reason: status.reason.clone(),
        age: age_of(d.creation_timestamp().as_ref().map(|t| &t.0), now),
        objects: status
            .manifest_statuses
            .iter()
            .map(|m| ObjectRow {
                object: feed_text(&m.feed.kind, &m.feed.namespace, &m.feed.name),
                status: m
                    .observed_status
                    .as_ref()
                    .map_or_else(|| "applied".to_string(), object_status),
                drift: m.drift.as_ref().map(|d| {
                    let what = if d.deleted {
                        "deleted in the child".to_string()
                    } else {
                        let fields: Vec<&str> = d.fields.iter().map(|f| f.path.as_str()).collect();
                        format!("changed {}", fields.join(", "))
                    };
                    format!("drift {} at {}: {what}", d.action, d.detected_at)
                }),
            })
            .collect(),
    }
}

/// `Deployment ns/name` (`Namespace name` without a namespace).
pub fn feed_text(kind: &str, namespace: &str, name: &str) -> String {
    if namespace.is_empty() {
        format!("{kind} {name}")
    } else {
        format!("{kind} {namespace}/{name}")
    }
}

/// One line of a child object's observed `.status`: its replicas when it has them (`2/3 ready`),
/// else its phase, else its conditions, else that it was applied (a ConfigMap has no status).
pub fn object_status(status: &Value) -> String {
    let int = |k: &str| status.get(k).and_then(Value::as_i64);
    if let Some(replicas) = int("replicas") {
        let ready = int("readyReplicas").unwrap_or(0);
        let mut text = format!("{ready}/{replicas} ready");
        if let Some(updated) = int("updatedReplicas").filter(|u| *u != replicas) {
            text.push_str(&format!(", {updated} updated"));
        }
        return text;
    }
    if let Some(phase) = status.get("phase").and_then(Value::as_str) {
        return phase.to_string();
    }
    let conditions: Vec<String> = status
        .get("conditions")
        .and_then(Value::as_array)
        .map(|cs| {
            cs.iter()
                .filter_map(|c| {
                    Some(format!(
                        "{}={}",
                        c.get("type")?.as_str()?,
                        c.get("status")?.as_str()?
                    ))
                })
                .collect()
        })
        .unwrap_or_default();
    if conditions.is_empty() {
        "applied".into()
    } else {
        conditions.join(", ")
    }
}

/// The Registrations page's row of `r`.
pub fn registration_row(r: &ClusterRegistrationRequest, now: Timestamp) -> RegistrationRow {
    let status = r.status.clone().unwrap_or_default();
    RegistrationRow {
        name: r.name_any(),
        cluster_name: r.spec.cluster_name.clone(),
        cluster_id: r.spec.cluster_id.clone(),
        cluster_type: r
            .spec
            .cluster_type
            .as_ref()
            .map(|t| t.to_string())
            .unwrap_or_default(),
        sync_mode: r
            .spec
            .sync_mode
            .as_ref()
            .map(|m| m.to_string())
            .unwrap_or_default(),
        result: status
            .result
            .map_or_else(|| "Pending".to_string(), |r| r.to_string()),
        error: status.error_message.clone(),
        namespace: status.dedicated_namespace.clone(),
        managed_cluster: status.managed_cluster_name.clone(),
        age: age_of(r.creation_timestamp().as_ref().map(|t| &t.0), now),
    }
}

/// The text of a Manifest's template at JSON pointer `p` ("" when absent).
fn template_text(m: &Manifest, p: &str) -> String {
    m.spec
        .template
        .pointer(p)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// `Kind ns/name` of the object Manifest `m` stores (its row's first column, and what the
/// page's filter searches beside the Manifest's own name).
pub fn manifest_object(m: &Manifest) -> String {
    feed_text(
        &template_text(m, "/kind"),
        &template_text(m, "/metadata/namespace"),
        &template_text(m, "/metadata/name"),
    )
}

/// The Manifests page's row of `m`; `subs` are the Subscriptions the reader may list (`None`:
/// none may be shown), of which those using `m` as a feed are named.
pub fn manifest_row(
    m: &Manifest,
    now: Timestamp,
    subs: Option<&[Arc<Subscription>]>,
    reserved_ns: &str,
) -> ManifestRow {
    ManifestRow {
        name: m.name_any(),
        api_version: template_text(m, "/apiVersion"),
        object: manifest_object(m),
        subscriptions: subs.map(|subs| {
            crate::pipeline::feeds::subscriptions_using(m, reserved_ns, subs)
                .map(|s| format!("{}/{}", s.namespace().unwrap_or_default(), s.name_any()))
                .collect()
        }),
        age: age_of(m.creation_timestamp().as_ref().map(|t| &t.0), now),
    }
}

/// The HelmCharts page's row of `c`.
pub fn helmchart_row(c: &HelmChart, now: Timestamp) -> HelmChartRow {
    let status = c.status.clone().unwrap_or_default();
    HelmChartRow {
        namespace: c.namespace().unwrap_or_default(),
        name: c.name_any(),
        repo: c.spec.options.repo.clone(),
        chart: c.spec.options.chart.clone(),
        version: c.spec.options.version.clone(),
        target_namespace: c.spec.target_namespace.clone(),
        phase: status.phase.map(|p| p.to_string()).unwrap_or_default(),
        reason: status.reason.clone(),
        age: age_of(c.creation_timestamp().as_ref().map(|t| &t.0), now),
    }
}

/// When an Event last happened: the series' last observation, the last timestamp, its time, or
/// when it was stored (events.k8s.io and core Events fill different ones).
fn event_time(e: &Event) -> Option<Timestamp> {
    e.series
        .as_ref()
        .and_then(|s| s.last_observed_time.as_ref().map(|t| t.0))
        .or(e.last_timestamp.as_ref().map(|t| t.0))
        .or(e.event_time.as_ref().map(|t| t.0))
        .or(e.metadata.creation_timestamp.as_ref().map(|t| t.0))
}

/// The newest `limit` of `events` that `pick` keeps, newest first.
pub fn event_rows<'a>(
    events: impl IntoIterator<Item = &'a Event>,
    pick: impl Fn(&Event) -> bool,
    now: Timestamp,
    limit: usize,
) -> Vec<EventRow> {
    let mut picked: Vec<(Option<Timestamp>, &Event)> = events
        .into_iter()
        .filter(|e| pick(e))
        .map(|e| (event_time(e), e))
        .collect();
    picked.sort_by_key(|e| std::cmp::Reverse(e.0));
    picked
        .into_iter()
        .take(limit)
        .map(|(at, e)| {
            let o = &e.involved_object;
            EventRow {
                type_: e.type_.clone().unwrap_or_default(),
                reason: e.reason.clone().unwrap_or_default(),
                object: feed_text(
                    o.kind.as_deref().unwrap_or_default(),
                    o.namespace.as_deref().unwrap_or_default(),
                    o.name.as_deref().unwrap_or_default(),
                ),
                message: e.message.clone().unwrap_or_default(),
                count: e
                    .series
                    .as_ref()
                    .and_then(|s| s.count)
                    .or(e.count)
                    .unwrap_or(1),
                age: age_of(at.as_ref(), now),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_objects_status_reads_as_one_line() {
        assert_eq!(
            object_status(&json!({"replicas": 3, "readyReplicas": 2, "updatedReplicas": 3})),
            "2/3 ready"
        );
        assert_eq!(
            object_status(&json!({"replicas": 3, "updatedReplicas": 1})),
            "0/3 ready, 1 updated"
        );
        assert_eq!(object_status(&json!({"phase": "Active"})), "Active");
        assert_eq!(
            object_status(&json!({"conditions": [
                {"type": "Complete", "status": "True"}, {"type": "Failed", "status": "False"}
            ]})),
            "Complete=True, Failed=False"
        );
        assert_eq!(object_status(&json!({})), "applied");
    }

    #[test]
    fn a_description_row_names_its_subscription_phase_and_objects() {
        let d: Description = serde_json::from_value(json!({
            "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Description",
            "metadata": {"name": "app-generic", "namespace": "clusternet-abc", "labels": {
                "apps.clusternet.io/subs.name": "app", "apps.clusternet.io/subs.namespace": "demo",
                "clusters.clusternet.io/cluster-name": "child1"}},
            "spec": {"deployer": "Generic"},
            "status": {"phase": "Failure", "reason": "quota exceeded", "manifestStatuses": [
                {"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "demo", "name": "web",
                 "observedStatus": {"replicas": 2, "readyReplicas": 2},
                 "drift": {"action": "Repaired", "detectedAt": "2026-12-01T10:00:00Z",
                           "fields": [{"path": ".spec.replicas"}]}}]}
        }))
        .expect("a Description");
        let row = description_row(&d, Timestamp::now());
        assert_eq!(row.subscription, "demo/app");
        assert_eq!(row.cluster, "child1");
        assert_eq!(
            (row.phase.as_str(), row.reason.as_str()),
            ("Failure", "quota exceeded")
        );
        assert_eq!(row.objects.len(), 1);
        assert_eq!(row.objects[0].object, "Deployment demo/web");
        assert_eq!(row.objects[0].status, "2/2 ready");
        assert_eq!(
            row.objects[0].drift.as_deref(),
            Some("drift Repaired at 2026-12-01T10:00:00Z: changed .spec.replicas")
        );
    }

    #[test]
    fn events_come_newest_first_and_bounded() {
        let event = |name: &str, at: &str, count: i32| -> Event {
            serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "ns"},
                "involvedObject": {"kind": "Subscription", "namespace": "demo", "name": "app"},
                "reason": name, "message": "m", "type": "Normal",
                "lastTimestamp": at, "count": count
            }))
            .expect("an Event")
        };
        let events = [
            event("old", "2026-12-01T10:00:00Z", 1),
            event("new", "2026-12-01T12:00:00Z", 3),
            event("mid", "2026-12-01T11:00:00Z", 1),
        ];
        let now: Timestamp = "2026-12-01T12:01:00Z".parse().expect("a time");
        let rows = event_rows(&events, |e| e.reason.as_deref() != Some("mid"), now, 5);
        let reasons: Vec<&str> = rows.iter().map(|r| r.reason.as_str()).collect();
        assert_eq!(reasons, ["new", "old"]);
        assert_eq!((rows[0].count, rows[0].age), (3, Some(60)));
        assert_eq!(rows[0].object, "Subscription demo/app");
        assert_eq!(event_rows(&events, |_| true, now, 1).len(), 1);
    }
}
