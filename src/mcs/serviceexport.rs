//! ServiceExport (docs/spec/agent.md §5.1, gate MultiClusterService): the EndpointSlices of every
//! exported Service in this child are copied into the cluster's dedicated namespace in the parent,
//! where the controller-manager's ServiceImport controller merges them across children.
//!
//! observe (the export, its Service and slices from the child's cache, the copies already in the
//! parent) -> [`plan_export`] (pure) -> apply (server-side apply of each changed copy, deletes of
//! stale ones, the export's `Valid` condition). Names and labels are upstream's, so a Go
//! controller-manager imports what this agent exports and the reverse.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::runtime::controller::Action;
use crate::runtime::controller::Controller;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{ObjectRef, Store};
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tracing::info;

use crate::apis::about::CLUSTER_ID_PROPERTY;
use crate::apis::clusters::ClusterPropertyValue;
use crate::apis::known;
use crate::apis::{ServiceExport, ServiceExportStatus};
use crate::runtime::Runtime;
use crate::runtime::apply;
use crate::runtime::controller::{ApiFailure, ReconcileError, labelled, named_by};
use tokio::sync::watch;

pub const FIELD_MANAGER: &str = "clusternet/agent/serviceexport";
/// mcs-api's condition: the export's Service can be exported.
pub const CONDITION_VALID: &str = "Valid";
/// mcs-api's condition: the export conflicts with how the service is imported.
pub const CONDITION_CONFLICT: &str = "Conflict";
/// Copies are compared and repaired this often even when nothing in the child changed (someone
/// deleted one in the parent).
const RESYNC: Duration = Duration::from_secs(300);

#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error("in the parent: {0}")]
    Parent(#[source] ApiFailure),
    #[error("in the child: {0}")]
    Child(#[source] ApiFailure),
}

impl ReconcileError for ExportError {
    fn metric_label(&self) -> &'static str {
        match self {
            ExportError::Parent(_) => "parent",
            ExportError::Child(_) => "child",
        }
    }
}

/// What one reconcile of an export writes.
#[derive(Debug, PartialEq)]
pub struct ExportPlan {
    /// Apply bodies of the copies in the parent that are missing or differ.
    pub upserts: Vec<Value>,
    /// Names of copies in the parent whose source slice is gone.
    pub deletes: Vec<String>,
    /// The export's `Valid` condition.
    pub valid: Condition,
    /// The export's `Conflict` condition.
    pub conflict: Condition,
}

/// The parent's copy of child slice `slice` of `export` (agent.md §5.1), labelled with the
/// cluster it comes from as mcs-api says (`multicluster.kubernetes.io/source-cluster`: the
/// cluster's `cluster.clusterset.k8s.io` ClusterProperty, KEP-2149), which every importing child's
/// slices keep.
pub fn exported_slice(
    export: &ServiceExport,
    slice: &EndpointSlice,
    parent_ns: &str,
    source_cluster: &str,
) -> Value {
    let ns = export.namespace().unwrap_or_default();
    let name = export.name_any();
    let mut labels = BTreeMap::from([
        (known::LABEL_SERVICE_NAME.to_string(), name.clone()),
        (known::LABEL_SERVICE_NAMESPACE.to_string(), ns.clone()),
        (
            known::OBJECT_CREATED_BY_LABEL.to_string(),
            known::CLUSTERNET_AGENT_NAME.to_string(),
        ),
        (
            known::KUBERNETES_SERVICE_NAME_LABEL.to_string(),
            known::derived_service_name(&ns, &name),
        ),
    ]);
    if !source_cluster.is_empty() {
        labels.insert(
            known::MCS_SOURCE_CLUSTER_LABEL.to_string(),
            source_cluster.to_string(),
        );
    }
    if let Some(target) = export
        .labels()
        .get(known::CONFIG_SUBSCRIPTION_NAMESPACE_LABEL)
    {
        labels.insert(
            known::CONFIG_SUBSCRIPTION_NAMESPACE_LABEL.to_string(),
            target.clone(),
        );
    }
    let copy = format!("{ns}-{}", slice.name_any());
    super::serviceimport::copied_slice(slice, &copy, parent_ns, &labels)
}

/// Whether `current` already is what `body` asks for: the same addressing and our labels.
fn same_slice(current: &EndpointSlice, body: &Value) -> bool {
    let labels_ok = body["metadata"]["labels"].as_object().is_some_and(|l| {
        l.iter()
            .all(|(k, v)| current.labels().get(k).map(String::as_str) == v.as_str())
    }) && current
        .labels()
        .get(known::CONFIG_SUBSCRIPTION_NAMESPACE_LABEL)
        .is_none_or(|_| {
            body["metadata"]["labels"][known::CONFIG_SUBSCRIPTION_NAMESPACE_LABEL].is_string()
        });
    labels_ok && super::serviceimport::same_addressing(current, body)
}

/// The export's `Valid` condition: why it will not be imported, or what it exports.
pub fn valid_condition(
    export: &ServiceExport,
    service: Option<&Service>,
    slices: &[Arc<EndpointSlice>],
    parent_ns: &str,
    now: Timestamp,
) -> Condition {
    let key = format!(
        "{}/{}",
        export.namespace().unwrap_or_default(),
        export.name_any()
    );
    let endpoints: usize = slices
        .iter()
        .map(|s| s.endpoints.as_ref().map_or(0, Vec::len))
        .sum();
    let (status, reason, message) = match service {
        None => (
            "False",
            "ServiceNotFound",
            format!("Service {key} does not exist in this cluster: there is nothing to export"),
        ),
        Some(svc) if svc.spec.as_ref().and_then(|s| s.type_.as_deref()) == Some("ExternalName") => {
            (
                "False",
                "ExternalNameService",
                format!("Service {key} is of type ExternalName, which has no endpoints to export"),
            )
        }
        Some(_)
            if !export
                .labels()
                .contains_key(known::CONFIG_SUBSCRIPTION_NAMESPACE_LABEL) =>
        {
            (
                "False",
                "NoImportNamespace",
                format!(
                    "label {} is not set: set it to the namespace of the ServiceImport in the parent, \
                     which imports only exports labelled with its namespace ({} EndpointSlices are \
                     copied to the parent's namespace {parent_ns} meanwhile)",
                    known::CONFIG_SUBSCRIPTION_NAMESPACE_LABEL,
                    slices.len()
                ),
            )
        }
        Some(_) => (
            "True",
            "ServiceExported",
            format!(
                "{} EndpointSlices ({endpoints} endpoints) exported to the parent's namespace {parent_ns}, for a ServiceImport in namespace {}",
                slices.len(),
                export
                    .labels()
                    .get(known::CONFIG_SUBSCRIPTION_NAMESPACE_LABEL)
                    .map(String::as_str)
                    .unwrap_or_default()
            ),
        ),
    };
    condition(export, CONDITION_VALID, status, reason, message, now)
}

/// What `export` needs written: copies of `sources` (the child's slices of its Service) that
/// `exported` (the copies in the parent) lacks or has differently, and the stale copies.
pub fn plan_export(
    export: &ServiceExport,
    service: Option<&Service>,
    sources: &[Arc<EndpointSlice>],
    exported: &[EndpointSlice],
    parent_ns: &str,
    source_cluster: &str,
    now: Timestamp,
) -> ExportPlan {
    let wanted: Vec<Value> = sources
        .iter()
        .map(|s| exported_slice(export, s, parent_ns, source_cluster))
        .collect();
    let existing: Vec<&EndpointSlice> = exported.iter().collect();
    let (upserts, deletes) = apply::changes_by_name(wanted, &existing, same_slice);
    ExportPlan {
        upserts,
        deletes,
        valid: valid_condition(export, service, sources, parent_ns, now),
        conflict: conflict_condition(export, exported, now),
    }
}

/// The export's `Conflict` condition, from what the parent's ServiceImport controller wrote on
/// the copies (annotation [`super::serviceimport::CONFLICT_ANNOTATION`]).
pub fn conflict_condition(
    export: &ServiceExport,
    exported: &[EndpointSlice],
    now: Timestamp,
) -> Condition {
    let mut messages: Vec<&str> = exported
        .iter()
        .filter_map(|e| {
            e.annotations()
                .get(super::serviceimport::CONFLICT_ANNOTATION)
                .map(String::as_str)
        })
        .collect();
    messages.sort();
    messages.dedup();
    let (status, reason, message) = if messages.is_empty() {
        (
            "False",
            "NoConflict",
            "no ServiceImport in the parent reports a conflict with this export".to_string(),
        )
    } else {
        ("True", "PortConflict", messages.join("; "))
    };
    condition(export, CONDITION_CONFLICT, status, reason, message, now)
}

/// A condition of `export`, keeping its transition time while the status stays.
fn condition(
    export: &ServiceExport,
    type_: &str,
    status: &str,
    reason: &str,
    message: String,
    now: Timestamp,
) -> Condition {
    let since = export
        .status
        .iter()
        .flat_map(|s| s.conditions.iter())
        .find(|c| c.type_ == type_ && c.status == status)
        .map(|c| c.last_transition_time.clone())
        .unwrap_or(Time(now));
    Condition {
        type_: type_.to_string(),
        status: status.to_string(),
        reason: reason.to_string(),
        message,
        last_transition_time: since,
        observed_generation: export.metadata.generation,
    }
}

/// The child's slices of `export`'s Service (label `kubernetes.io/service-name`), by name.
pub fn sources_of(store: &Store<EndpointSlice>, export: &ServiceExport) -> Vec<Arc<EndpointSlice>> {
    let ns = export.namespace().unwrap_or_default();
    let name = export.name_any();
    let mut found: Vec<Arc<EndpointSlice>> = store
        .state()
        .into_iter()
        .filter(|s| {
            s.namespace().as_deref() == Some(ns.as_str())
                && s.labels().get(known::KUBERNETES_SERVICE_NAME_LABEL) == Some(&name)
        })
        .collect();
    found.sort_by_key(|s| s.name_any());
    found
}

struct Ctx {
    exports: Api<ServiceExport>,
    services: Store<Service>,
    slices: Store<EndpointSlice>,
    /// The dedicated namespace's EndpointSlices in the parent.
    parent: Api<EndpointSlice>,
    parent_ns: String,
    cluster_id: String,
    /// The child's ClusterProperties, as the agent last read them.
    properties: watch::Receiver<Vec<ClusterPropertyValue>>,
}

impl Ctx {
    /// The cluster's name in its ClusterSet: its `cluster.clusterset.k8s.io` ClusterProperty
    /// (KEP-2149), or the cluster ID the agent writes there while the property is not (yet)
    /// readable.
    fn source_cluster(&self) -> String {
        self.properties
            .borrow()
            .iter()
            .find(|p| p.name == CLUSTER_ID_PROPERTY)
            .map(|p| p.value.clone())
            .unwrap_or_else(|| self.cluster_id.clone())
    }
}

/// Exports until `stop` (one registration round: the parent client is that round's).
/// Exports into `namespace` (the cluster's dedicated namespace) of the parent `parent`, as
/// cluster `cluster_id` (`properties`: the child's ClusterProperties, for its name in the
/// ClusterSet).
pub async fn run(
    rt: &Runtime,
    parent: kube::Client,
    namespace: String,
    cluster_id: String,
    properties: watch::Receiver<Vec<ClusterPropertyValue>>,
    stop: CancellationToken,
) {
    if !rt.config.gate(known::MULTI_CLUSTER_SERVICE) {
        return;
    }
    let exports = rt.cache.watch::<ServiceExport>();
    let services = rt.cache.watch::<Service>();
    let slices = rt.cache.watch::<EndpointSlice>();
    info!(namespace = %namespace, "exporting the EndpointSlices of ServiceExports to the parent");
    let ctx = Arc::new(Ctx {
        exports: Api::all(rt.client.clone()),
        services: services.store.clone(),
        slices: slices.store.clone(),
        parent: Api::namespaced(parent.clone(), &namespace),
        parent_ns: namespace.clone(),
        cluster_id,
        properties,
    });
    // a slice or a Service names its export: same namespace, the Service's name
    let by_slice = named_by(slices.subscribe(), |s: &EndpointSlice| {
        let name = s.labels().get(known::KUBERNETES_SERVICE_NAME_LABEL)?;
        Some((s.namespace()?, name.clone()))
    });
    let by_service = named_by(services.subscribe(), |s: &Service| {
        Some((s.namespace()?, s.name_any()))
    });
    // the parent's ServiceImport controller marks conflicts on the copies
    let copies: Api<EndpointSlice> = Api::namespaced(parent.clone(), &namespace);
    let by_copy = kube::runtime::watcher(
        copies,
        kube::runtime::watcher::Config::default().labels(&format!(
            "{}={}",
            known::OBJECT_CREATED_BY_LABEL,
            known::CLUSTERNET_AGENT_NAME
        )),
    )
    .backoff(crate::runtime::cache::watch_backoff())
    .touched_objects()
    .filter_map(|s| futures::future::ready(s.ok().map(Arc::new)));
    let by_copy = named_by(by_copy, |s: &EndpointSlice| {
        labelled(
            s.labels(),
            known::LABEL_SERVICE_NAMESPACE,
            known::LABEL_SERVICE_NAME,
        )
    });
    Controller::new("serviceexport", &exports)
        .concurrency(2)
        .after([services.listed(), slices.listed()])
        .triggered_by(by_slice)
        .triggered_by(by_service)
        .triggered_by(by_copy)
        .run(stop, move |export| {
            let ctx = ctx.clone();
            async move { reconcile(&ctx, export).await }
        })
        .await;
}

fn key(export: &ServiceExport) -> String {
    format!(
        "{}/{}",
        export.namespace().unwrap_or_default(),
        export.name_any()
    )
}

fn parent_err(
    export: &ServiceExport,
    what: &'static str,
) -> impl FnOnce(kube::Error) -> ExportError {
    let fail = ApiFailure::about(export, what);
    move |source| ExportError::Parent(fail(source))
}

fn child_err(
    export: &ServiceExport,
    what: &'static str,
) -> impl FnOnce(kube::Error) -> ExportError {
    let fail = ApiFailure::about(export, what);
    move |source| ExportError::Child(fail(source))
}

async fn reconcile(ctx: &Ctx, export: Arc<ServiceExport>) -> Result<Action, ExportError> {
    let ns = export.namespace().unwrap_or_default();
    let name = export.name_any();
    let copies = ListParams::default().labels(&format!(
        "{}={}",
        known::KUBERNETES_SERVICE_NAME_LABEL,
        known::derived_service_name(&ns, &name)
    ));
    let exports: Api<ServiceExport> = Api::namespaced(ctx.exports.clone().into_client(), &ns);
    if export.metadata.deletion_timestamp.is_some() {
        ctx.parent
            .delete_collection(&DeleteParams::default(), &copies)
            .await
            .map_err(parent_err(
                &export,
                "deleting its EndpointSlices in the parent",
            ))?;
        apply::release_finalizer(&exports, export.as_ref(), known::APP_FINALIZER)
            .await
            .map_err(child_err(&export, "releasing the finalizer"))?;
        info!(serviceexport = %key(&export), "export withdrawn from the parent");
        return Ok(Action::await_change());
    }
    apply::hold_finalizer(
        &exports,
        FIELD_MANAGER,
        export.as_ref(),
        known::APP_FINALIZER,
    )
    .await
    .map_err(child_err(&export, "adding the finalizer"))?;
    let service = ctx
        .services
        .get(&ObjectRef::<Service>::new(&name).within(&ns));
    let sources = sources_of(&ctx.slices, &export);
    let exported = ctx
        .parent
        .list(&copies)
        .await
        .map_err(parent_err(
            &export,
            "listing its EndpointSlices in the parent",
        ))?
        .items;
    let plan = plan_export(
        &export,
        service.as_deref(),
        &sources,
        &exported,
        &ctx.parent_ns,
        &ctx.source_cluster(),
        Timestamp::now(),
    );
    for body in &plan.upserts {
        let slice = body["metadata"]["name"].as_str().unwrap_or_default();
        apply::apply(&ctx.parent, FIELD_MANAGER, slice, body)
            .await
            .map_err(parent_err(
                &export,
                "writing an EndpointSlice to the parent",
            ))?;
    }
    for slice in &plan.deletes {
        apply::delete(&ctx.parent, slice).await.map_err(parent_err(
            &export,
            "deleting a stale EndpointSlice in the parent",
        ))?;
    }
    if !plan.upserts.is_empty() || !plan.deletes.is_empty() {
        info!(serviceexport = %key(&export), written = plan.upserts.len(), deleted = plan.deletes.len(), "EndpointSlices exported to the parent");
    }
    let conditions = vec![plan.valid, plan.conflict];
    if export.status.as_ref().map(|s| &s.conditions) != Some(&conditions) {
        let status = serde_json::to_value(ServiceExportStatus { conditions }).unwrap_or_default();
        apply::write_status(&exports, FIELD_MANAGER, export.as_ref(), status)
            .await
            .map_err(child_err(&export, "writing its status"))?;
    }
    Ok(Action::requeue(RESYNC))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::discovery::v1::{Endpoint, EndpointPort};
    use serde_json::json;

    fn export(labels: Value) -> ServiceExport {
        serde_json::from_value(json!({
            "apiVersion": "multicluster.x-k8s.io/v1alpha1", "kind": "ServiceExport",
            "metadata": {"name": "nginx-svc", "namespace": "baz", "labels": labels,
                "generation": 1}
        }))
        .expect("an export")
    }

    fn slice(name: &str, ips: &[&str]) -> Arc<EndpointSlice> {
        Arc::new(EndpointSlice {
            metadata: kube::api::ObjectMeta {
                name: Some(name.into()),
                namespace: Some("baz".into()),
                labels: Some(BTreeMap::from([(
                    known::KUBERNETES_SERVICE_NAME_LABEL.into(),
                    "nginx-svc".into(),
                )])),
                ..Default::default()
            },
            address_type: "IPv4".into(),
            endpoints: Some(
                ips.iter()
                    .map(|ip| Endpoint {
                        addresses: vec![ip.to_string()],
                        ..Default::default()
                    })
                    .collect(),
            ),
            ports: Some(vec![EndpointPort {
                port: Some(80),
                protocol: Some("TCP".into()),
                ..Default::default()
            }]),
        })
    }

    fn service() -> Service {
        Service {
            metadata: kube::api::ObjectMeta {
                name: Some("nginx-svc".into()),
                namespace: Some("baz".into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    /// The copy as upstream names and labels it, read back as the API server would store it.
    fn stored(body: &Value) -> EndpointSlice {
        serde_json::from_value(body.clone()).expect("a slice")
    }

    #[test]
    fn copies_are_named_and_labelled_as_upstream_and_mcs_api() {
        let e = export(json!({"apps.clusternet.io/subs.namespace": "default"}));
        let b = exported_slice(
            &e,
            &slice("nginx-svc-abcde", &["10.0.0.1"]),
            "clusternet-x",
            "id-1",
        );
        assert_eq!(b["metadata"]["name"], "baz-nginx-svc-abcde");
        assert_eq!(b["metadata"]["namespace"], "clusternet-x");
        assert_eq!(
            b["metadata"]["labels"],
            json!({
                "services.clusternet.io/multi-cluster-service-name": "nginx-svc",
                "services.clusternet.io/multi-cluster-service-namespace": "baz",
                "clusternet.io/created-by": "clusternet-agent",
                "kubernetes.io/service-name": known::derived_service_name("baz", "nginx-svc"),
                "apps.clusternet.io/subs.namespace": "default",
                "multicluster.kubernetes.io/source-cluster": "id-1",
            })
        );
        assert_eq!(b["endpoints"][0]["addresses"], json!(["10.0.0.1"]));
        assert_eq!(b["ports"][0]["port"], 80);
    }

    #[test]
    fn only_missing_changed_and_stale_copies_are_written() {
        let e = export(json!({"apps.clusternet.io/subs.namespace": "default"}));
        let sources = vec![slice("a", &["10.0.0.1"]), slice("b", &["10.0.0.2"])];
        let now = Timestamp::now();
        // nothing in the parent yet: both copied
        let plan = plan_export(&e, Some(&service()), &sources, &[], "p", "id-1", now);
        assert_eq!(plan.upserts.len(), 2);
        assert!(plan.deletes.is_empty());
        assert_eq!(plan.valid.status, "True");
        assert!(
            plan.valid
                .message
                .contains("2 EndpointSlices (2 endpoints)")
        );
        // both in place: nothing to write
        let in_parent: Vec<EndpointSlice> = plan.upserts.iter().map(stored).collect();
        let plan = plan_export(&e, Some(&service()), &sources, &in_parent, "p", "id-1", now);
        assert!(
            plan.upserts.is_empty() && plan.deletes.is_empty(),
            "{plan:?}"
        );
        // one scaled, one gone
        let sources = vec![slice("a", &["10.0.0.1", "10.0.0.3"])];
        let plan = plan_export(&e, Some(&service()), &sources, &in_parent, "p", "id-1", now);
        assert_eq!(plan.upserts.len(), 1);
        assert_eq!(plan.upserts[0]["metadata"]["name"], "baz-a");
        assert_eq!(plan.deletes, vec!["baz-b".to_string()]);
    }

    #[test]
    fn the_condition_says_why_an_export_is_not_imported() {
        let now = Timestamp::now();
        let sources = vec![slice("a", &["10.0.0.1"])];
        let unlabelled = export(json!({}));
        let c = valid_condition(&unlabelled, Some(&service()), &sources, "p", now);
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("False", "NoImportNamespace")
        );
        assert!(
            c.message.contains("apps.clusternet.io/subs.namespace"),
            "{}",
            c.message
        );
        // the slices are still copied (upstream does), only not imported
        let plan = plan_export(
            &unlabelled,
            Some(&service()),
            &sources,
            &[],
            "p",
            "id-1",
            now,
        );
        assert_eq!(plan.upserts.len(), 1);
        assert!(
            plan.upserts[0]["metadata"]["labels"]
                .get("apps.clusternet.io/subs.namespace")
                .is_none()
        );

        let labelled = export(json!({"apps.clusternet.io/subs.namespace": "default"}));
        let c = valid_condition(&labelled, None, &[], "p", now);
        assert_eq!(c.reason, "ServiceNotFound");
        let mut external = service();
        external.spec = Some(k8s_openapi::api::core::v1::ServiceSpec {
            type_: Some("ExternalName".into()),
            ..Default::default()
        });
        let c = valid_condition(&labelled, Some(&external), &[], "p", now);
        assert_eq!(c.reason, "ExternalNameService");
    }

    #[test]
    fn a_label_removed_from_the_export_is_removed_from_its_copies() {
        let labelled = export(json!({"apps.clusternet.io/subs.namespace": "default"}));
        let sources = vec![slice("a", &["10.0.0.1"])];
        let now = Timestamp::now();
        let in_parent: Vec<EndpointSlice> =
            plan_export(&labelled, Some(&service()), &sources, &[], "p", "id-1", now)
                .upserts
                .iter()
                .map(stored)
                .collect();
        let unlabelled = export(json!({}));
        let plan = plan_export(
            &unlabelled,
            Some(&service()),
            &sources,
            &in_parent,
            "p",
            "id-1",
            now,
        );
        assert_eq!(
            plan.upserts.len(),
            1,
            "the copy is re-applied without the label"
        );
    }

    #[test]
    fn conflicts_marked_by_the_parent_become_the_conflict_condition() {
        let e = export(json!({"apps.clusternet.io/subs.namespace": "default"}));
        let now = Timestamp::now();
        let mut copy = stored(&exported_slice(&e, &slice("a", &["10.0.0.1"]), "p", "id-1"));
        let c = conflict_condition(&e, std::slice::from_ref(&copy), now);
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("False", "NoConflict")
        );
        copy.metadata.annotations = Some(BTreeMap::from([(
            crate::mcs::serviceimport::CONFLICT_ANNOTATION.to_string(),
            "ServiceImport default/my-svc wants port 80/TCP named \"web\"".to_string(),
        )]));
        let c = conflict_condition(&e, &[copy], now);
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("True", "PortConflict")
        );
        assert!(c.message.contains("\"web\""), "{}", c.message);
    }

    #[test]
    fn the_transition_time_stays_while_the_status_does() {
        let mut e = export(json!({"apps.clusternet.io/subs.namespace": "default"}));
        let first = valid_condition(&e, Some(&service()), &[], "p", Timestamp::UNIX_EPOCH);
        e.status = Some(ServiceExportStatus {
            conditions: vec![first.clone()],
        });
        let again = valid_condition(&e, Some(&service()), &[], "p", Timestamp::now());
        assert_eq!(again.last_transition_time, first.last_transition_time);
    }
}
