//! ServiceImport (docs/spec/agent.md §5.2, gate MultiClusterService): a ServiceImport in the
//! parent labelled with the exported Service's name and namespace gets the derived Service
//! `derived-<ns>-<hash>` next to it and a copy of every EndpointSlice the children's agents
//! exported for that Service, so an ordinary Subscription can take both to consumer clusters.
//!
//! observe (the import, its derived Service, the exported and imported slices from the shared
//! cache) -> [`plan_import`] (pure) -> apply (server-side apply of what differs, deletes of stale
//! copies, `status.clusters`). Beyond upstream: `Headless` imports derive a headless Service, an
//! export is imported only into the namespace its `apps.clusternet.io/subs.namespace` label names
//! (the agent's condition says when it is missing), only slices from clusters' dedicated
//! namespaces count, and ports the exporting clusters do not serve are reported as Warnings.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams};
use kube::runtime::reflector::{ObjectRef, Store};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use tracing::info;

use crate::apis::known;
use crate::apis::naming::{self, MANIFEST_API_VERSION};
use crate::apis::{
    ManagedCluster, Manifest, ServiceImport, ServiceImportStatus, ServiceImportType,
};
use crate::runtime::Runtime;
use crate::runtime::apply;
use crate::runtime::cache::{Index, Shared};
use crate::runtime::controller::{Action, ApiFailure, Controller, ReconcileError, through_index};
use crate::runtime::events::Events;

pub const FIELD_MANAGER: &str = "clusternet/controller/serviceimport";
/// Errors are retried sooner than the runtime's backoff reaches (upstream retries after 1 s).
const RESYNC: Duration = Duration::from_secs(300);

#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error(transparent)]
    Api(#[from] ApiFailure),
}

impl ReconcileError for ImportError {
    fn metric_label(&self) -> &'static str {
        match self {
            ImportError::Api(_) => "api",
        }
    }
}

/// The exported Service a ServiceImport names: `(name, namespace)` from its labels.
pub fn exported_service(si: &ServiceImport) -> Result<(String, String), String> {
    let get = |k: &str| si.labels().get(k).filter(|v| !v.is_empty()).cloned();
    match (
        get(known::LABEL_SERVICE_NAME),
        get(known::LABEL_SERVICE_NAMESPACE),
    ) {
        (Some(name), Some(ns)) => Ok((name, ns)),
        _ => Err(format!(
            "labels {} and {} must name the exported Service (its name and its namespace in the children); nothing is imported",
            known::LABEL_SERVICE_NAME,
            known::LABEL_SERVICE_NAMESPACE
        )),
    }
}

/// The exported Service an import took its objects from last (`(name, namespace)` from its
/// [`known::IMPORTED_SERVICE_ANNOTATION`]), when that is not `now`: what was derived for it must go.
pub fn previous_import(
    si: &ServiceImport,
    now: Option<&(String, String)>,
) -> Option<(String, String)> {
    let (ns, name) = si
        .annotations()
        .get(known::IMPORTED_SERVICE_ANNOTATION)?
        .split_once('/')?;
    let previous = (name.to_string(), ns.to_string());
    (Some(&previous) != now && !name.is_empty() && !ns.is_empty()).then_some(previous)
}

/// What one reconcile of an import writes.
#[derive(Debug, Default, PartialEq)]
pub struct ImportPlan {
    /// Apply body of the derived Service when it is missing or differs.
    pub service: Option<Value>,
    /// The derived Service must be deleted first (Headless <-> ClusterSetIP: its clusterIP is
    /// immutable).
    pub recreate_service: bool,
    /// The derived Service's status (the ClusterSet IPs as load-balancer ingress) when it differs.
    pub service_status: Option<Value>,
    /// Apply bodies of the imported slices that are missing or differ.
    pub upserts: Vec<Value>,
    /// Imported slices whose exported source is gone.
    pub deletes: Vec<String>,
    /// Apply bodies of the Manifests (in the reserved namespace) that make the derived Service
    /// and the imported slices feeds of ordinary Subscriptions, when missing or different.
    pub manifests: Vec<Value>,
    /// Manifests of slices no longer imported.
    pub manifest_deletes: Vec<String>,
    /// `status.clusters` when it differs.
    pub status: Option<ServiceImportStatus>,
    /// `(reason, message)` Warnings for the user.
    pub warnings: Vec<(&'static str, String)>,
    /// Exported slices whose conflict annotation must change: `(namespace, name, message)`,
    /// `None` to clear it. The exporting agent turns it into its ServiceExport's `Conflict`.
    pub conflicts: Vec<(String, String, Option<String>)>,
}

/// The derived Service `si` wants (agent.md §5.2 step 1).
pub fn derived_service(si: &ServiceImport, name: &str, ns: &str) -> Value {
    let ports: Vec<Value> = si
        .spec
        .ports
        .iter()
        .map(|p| {
            let mut port = json!({
                "protocol": if p.protocol.is_empty() { "TCP" } else { p.protocol.as_str() },
                "port": p.port,
            });
            if !p.name.is_empty() {
                port["name"] = json!(p.name);
            }
            if let Some(a) = &p.app_protocol {
                port["appProtocol"] = json!(a);
            }
            port
        })
        .collect();
    let mut spec = json!({"type": "ClusterIP", "ports": ports});
    if si.spec.type_ == ServiceImportType::Headless {
        spec["clusterIP"] = json!("None");
    }
    if !si.spec.session_affinity.is_empty() {
        spec["sessionAffinity"] = json!(si.spec.session_affinity);
    }
    if let Some(c) = &si.spec.session_affinity_config {
        spec["sessionAffinityConfig"] = json!(c);
    }
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": known::derived_service_name(ns, name),
            "namespace": si.namespace().unwrap_or_default(),
            "labels": {
                known::LABEL_SERVICE_NAME: name,
                known::LABEL_SERVICE_NAMESPACE: ns,
            },
        },
        "spec": spec,
    })
}

/// The fields of `svc` the derived Service body sets, to compare with one.
fn service_as_applied(svc: &Service) -> Value {
    let spec = svc.spec.clone().unwrap_or_default();
    let ports: Vec<Value> = spec
        .ports
        .unwrap_or_default()
        .iter()
        .map(|p| {
            let mut port = json!({
                "protocol": p.protocol.as_deref().unwrap_or("TCP"),
                "port": p.port,
            });
            if let Some(n) = p.name.as_deref().filter(|n| !n.is_empty()) {
                port["name"] = json!(n);
            }
            if let Some(a) = &p.app_protocol {
                port["appProtocol"] = json!(a);
            }
            port
        })
        .collect();
    json!({"ports": ports, "headless": spec.cluster_ip.as_deref() == Some("None")})
}

/// Whether an exported slice counts for `si`: the two service labels, made by an agent, labelled
/// for `si`'s namespace, in a cluster's dedicated namespace.
fn is_source(s: &EndpointSlice, name: &str, ns: &str, si_ns: &str) -> bool {
    let l = s.labels();
    l.get(known::LABEL_SERVICE_NAME).map(String::as_str) == Some(name)
        && l.get(known::LABEL_SERVICE_NAMESPACE).map(String::as_str) == Some(ns)
        && l.get(known::OBJECT_CREATED_BY_LABEL).map(String::as_str)
            == Some(known::CLUSTERNET_AGENT_NAME)
        && l.get(known::CONFIG_SUBSCRIPTION_NAMESPACE_LABEL)
            .map(String::as_str)
            == Some(si_ns)
}

/// Whether `s` is one of `si`'s imported copies.
fn is_copy(s: &EndpointSlice, name: &str, ns: &str, si_ns: &str) -> bool {
    let l = s.labels();
    s.namespace().as_deref() == Some(si_ns)
        && l.get(known::LABEL_SERVICE_NAME).map(String::as_str) == Some(name)
        && l.get(known::LABEL_SERVICE_NAMESPACE).map(String::as_str) == Some(ns)
        && !l.contains_key(known::OBJECT_CREATED_BY_LABEL)
}

/// An EndpointSlice named `name` in `namespace` with `labels` and the addressing of `source`:
/// the copies the agent exports and the import makes are both such.
pub fn copied_slice(
    source: &EndpointSlice,
    name: &str,
    namespace: &str,
    labels: &BTreeMap<String, String>,
) -> Value {
    json!({
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "addressType": source.address_type,
        "endpoints": source.endpoints,
        "ports": source.ports,
    })
}

/// Whether `current` has the addressing (address type, endpoints, ports) a [`copied_slice`]
/// body asks for.
pub fn same_addressing(current: &EndpointSlice, body: &Value) -> bool {
    json!(current.address_type) == body["addressType"]
        && json!(current.endpoints) == body["endpoints"]
        && json!(current.ports) == body["ports"]
}

/// The import's copy of exported slice `source` (agent.md §5.2 step 3).
pub fn imported_slice(source: &EndpointSlice, si_ns: &str) -> Value {
    let mut labels = source.labels().clone();
    labels.remove(known::OBJECT_CREATED_BY_LABEL);
    let name = format!(
        "{}-{}",
        source.namespace().unwrap_or_default(),
        source.name_any()
    );
    copied_slice(source, &name, si_ns, &labels)
}

fn same_copy(current: &EndpointSlice, body: &Value) -> bool {
    let wanted: BTreeMap<String, String> =
        serde_json::from_value(body["metadata"]["labels"].clone()).unwrap_or_default();
    current.labels() == &wanted && same_addressing(current, body)
}

/// The Manifests already published for imports: those of the reserved namespace labelled with
/// an exported service.
pub struct Published<'a> {
    pub reserved_ns: &'a str,
    pub manifests: &'a [Arc<Manifest>],
}

/// The Manifest that publishes `object` (an apply body of the derived Service or an imported
/// slice) as a feed, named and labelled as the shadow API would (hub.md §3.2).
pub fn manifest_for(object: &Value, plural: &str, reserved_ns: &str) -> Value {
    let (group, version) =
        crate::pipeline::feeds::group_version(object["apiVersion"].as_str().unwrap_or_default());
    let name = object["metadata"]["name"].as_str().unwrap_or_default();
    let ns = object["metadata"]["namespace"].as_str().unwrap_or_default();
    let labels: BTreeMap<String, String> =
        serde_json::from_value(object["metadata"]["labels"].clone()).unwrap_or_default();
    let labels = naming::manifest_labels(
        &labels,
        group,
        version,
        object["kind"].as_str().unwrap_or_default(),
        name,
        ns,
    );
    naming::build_manifest(
        reserved_ns,
        &naming::manifest_name(plural, Some(ns), name),
        &labels,
        object.clone(),
    )
}

/// Whether Manifest `m` is one `si` published: labelled with its exported service and naming
/// an object in its namespace.
fn is_published_by(m: &Manifest, name: &str, ns: &str, si_ns: &str) -> bool {
    let l = m.labels();
    l.get(known::LABEL_SERVICE_NAME).map(String::as_str) == Some(name)
        && l.get(known::LABEL_SERVICE_NAMESPACE).map(String::as_str) == Some(ns)
        && l.get(known::CONFIG_NAMESPACE_LABEL).map(String::as_str) == Some(si_ns)
        && !l.contains_key(known::OBJECT_CREATED_BY_LABEL)
}

/// What `si` needs written, from its derived Service, every exported slice in the parent
/// (`slices`), the Manifests already `published`, and `cluster_of` (the ManagedCluster whose
/// dedicated namespace this is).
pub fn plan_import(
    si: &ServiceImport,
    derived: Option<&Service>,
    slices: &[Arc<EndpointSlice>],
    published: &Published<'_>,
    cluster_of: &dyn Fn(&str) -> Option<String>,
) -> Result<ImportPlan, String> {
    let (name, ns) = exported_service(si)?;
    let si_ns = si.namespace().unwrap_or_default();
    let mut plan = ImportPlan::default();
    let service = derived_service(si, &name, &ns);
    plan_service(si, derived, &service, &mut plan);

    let mut sources: Vec<&Arc<EndpointSlice>> = slices
        .iter()
        .filter(|s| is_source(s, &name, &ns, &si_ns))
        .filter(|s| cluster_of(&s.namespace().unwrap_or_default()).is_some())
        .collect();
    sources.sort_by_key(|s| (s.namespace(), s.name_any()));
    let copies: Vec<&EndpointSlice> = slices
        .iter()
        .filter(|s| is_copy(s, &name, &ns, &si_ns))
        .map(|c| c.as_ref())
        .collect();
    let wanted: Vec<Value> = sources.iter().map(|s| imported_slice(s, &si_ns)).collect();
    let mut manifests = vec![manifest_for(&service, "services", published.reserved_ns)];
    manifests.extend(
        wanted
            .iter()
            .map(|w| manifest_for(w, "endpointslices", published.reserved_ns)),
    );
    (plan.upserts, plan.deletes) = apply::changes_by_name(wanted, &copies, same_copy);
    let exported = (name.as_str(), ns.as_str(), si_ns.as_str());
    (plan.manifests, plan.manifest_deletes) = plan_manifests(manifests, published, exported);

    let mut clusters: Vec<String> = sources
        .iter()
        .filter_map(|s| cluster_of(&s.namespace().unwrap_or_default()))
        .collect();
    clusters.sort();
    clusters.dedup();
    let status = ServiceImportStatus {
        clusters: clusters
            .iter()
            .map(|c| crate::apis::mcs::ClusterStatus { cluster: c.clone() })
            .collect(),
    };
    if si
        .status
        .as_ref()
        .unwrap_or(&ServiceImportStatus::default())
        != &status
    {
        plan.status = Some(status);
    }
    plan_conflicts(si, &sources, cluster_of, &mut plan);
    Ok(plan)
}

/// The derived Service and its status: applied when missing or its shape differs, recreated
/// when it changes between headless and not (its clusterIP is immutable); a ClusterSetIP
/// import's IPs as load-balancer ingress.
fn plan_service(
    si: &ServiceImport,
    derived: Option<&Service>,
    service: &Value,
    plan: &mut ImportPlan,
) {
    let wanted_shape = json!({
        "ports": service["spec"]["ports"],
        "headless": si.spec.type_ == ServiceImportType::Headless,
    });
    match derived {
        Some(svc) => {
            let current = service_as_applied(svc);
            let spec = svc.spec.clone().unwrap_or_default();
            let affinity_differs = !si.spec.session_affinity.is_empty()
                && spec.session_affinity.as_deref() != Some(si.spec.session_affinity.as_str());
            if current["headless"] != wanted_shape["headless"] {
                plan.recreate_service = true;
                plan.service = Some(service.clone());
            } else if current != wanted_shape || affinity_differs {
                plan.service = Some(service.clone());
            }
        }
        None => plan.service = Some(service.clone()),
    }
    if si.spec.type_ == ServiceImportType::ClusterSetIp {
        let ingress: Vec<Value> = si.spec.ips.iter().map(|ip| json!({"ip": ip})).collect();
        let current: Vec<Value> = derived
            .and_then(|s| s.status.as_ref())
            .and_then(|s| s.load_balancer.as_ref())
            .and_then(|l| l.ingress.as_ref())
            .map(|i| {
                i.iter()
                    .map(|x| json!({"ip": x.ip.clone().unwrap_or_default()}))
                    .collect()
            })
            .unwrap_or_default();
        if current != ingress || plan.recreate_service || derived.is_none() {
            plan.service_status = Some(json!({"loadBalancer": {"ingress": ingress}}));
        }
    }
}

/// The Manifests that publish the derived Service and the imported slices (`wanted`), against
/// those already `published` for the exported service `(name, namespace, import namespace)`:
/// the apply bodies of what is missing or differs, and the stale ones to delete.
fn plan_manifests(
    wanted: Vec<Value>,
    published: &Published<'_>,
    (name, ns, si_ns): (&str, &str, &str),
) -> (Vec<Value>, Vec<String>) {
    let mine: Vec<&Manifest> = published
        .manifests
        .iter()
        .filter(|m| m.namespace().as_deref() == Some(published.reserved_ns))
        .filter(|m| is_published_by(m, name, ns, si_ns))
        .map(|m| m.as_ref())
        .collect();
    let (changed, stale) = apply::changes_by_name(wanted, &mine, |m, w| {
        m.spec.template == w["template"] && json!(m.labels()) == w["metadata"]["labels"]
    });
    let stale: Vec<&&Manifest> = mine
        .iter()
        .filter(|m| stale.contains(&m.name_any()))
        .collect();
    // a Subscription still using a stale slice keeps its Manifest (feed protection) and the
    // consumers' copy: empty it first, so no consumer keeps routing to endpoints that are gone
    let emptied = stale
        .iter()
        .filter(|m| {
            m.spec.template["endpoints"]
                .as_array()
                .is_some_and(|e| !e.is_empty())
        })
        .map(|m| {
            let mut template = m.spec.template.clone();
            template["endpoints"] = json!([]);
            json!({
                "apiVersion": MANIFEST_API_VERSION,
                "kind": "Manifest",
                "metadata": {"name": m.name_any(), "namespace": published.reserved_ns,
                    "labels": m.labels()},
                "template": template,
            })
        });
    let deletes = stale
        .iter()
        .filter(|m| m.metadata.deletion_timestamp.is_none())
        .map(|m| m.name_any())
        .collect();
    (changed.into_iter().chain(emptied).collect(), deletes)
}

/// A port of the import that no exported slice of a cluster serves reaches nothing there: a
/// Warning for the user, and the exporting clusters hear of it through their slices (mcs-api's
/// Conflict).
fn plan_conflicts(
    si: &ServiceImport,
    sources: &[&Arc<EndpointSlice>],
    cluster_of: &dyn Fn(&str) -> Option<String>,
    plan: &mut ImportPlan,
) {
    let si_ns = si.namespace().unwrap_or_default();
    let mut conflict_of: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for p in &si.spec.ports {
        let protocol = if p.protocol.is_empty() {
            "TCP"
        } else {
            p.protocol.as_str()
        };
        let lacking: Vec<&&Arc<EndpointSlice>> = sources
            .iter()
            .filter(|s| {
                !s.ports.iter().flatten().any(|sp| {
                    sp.name.as_deref().unwrap_or_default() == p.name
                        && sp.protocol.as_deref().unwrap_or("TCP") == protocol
                })
            })
            .collect();
        for s in &lacking {
            conflict_of
                .entry((s.namespace().unwrap_or_default(), s.name_any()))
                .or_default()
                .push(format!(
                    "ServiceImport {si_ns}/{} wants port {}/{protocol} named {:?}, which this export does not serve (its ports: {})",
                    si.name_any(),
                    p.port,
                    p.name,
                    served_ports(s)
                ));
        }
        let mut missing: Vec<String> = lacking
            .iter()
            .filter_map(|s| cluster_of(&s.namespace().unwrap_or_default()))
            .collect();
        missing.sort();
        missing.dedup();
        if !missing.is_empty() {
            plan.warnings.push((
                "PortNotExported",
                format!(
                    "port {}/{protocol} named {:?} is not among the ports of the EndpointSlices exported from cluster(s) {}: name the import's ports as the Service in the children does",
                    p.port,
                    p.name,
                    missing.join(", ")
                ),
            ));
        }
    }
    for s in sources {
        let at = (s.namespace().unwrap_or_default(), s.name_any());
        let wanted = conflict_of.get(&at).map(|m| m.join("; "));
        if s.annotations().get(CONFLICT_ANNOTATION) != wanted.as_ref() {
            plan.conflicts.push((at.0, at.1, wanted));
        }
    }
}

/// The ports an exported slice serves, for a message: `"name" port/protocol, ...`.
fn served_ports(s: &EndpointSlice) -> String {
    s.ports
        .iter()
        .flatten()
        .map(|sp| {
            format!(
                "{:?} {}/{}",
                sp.name.as_deref().unwrap_or_default(),
                sp.port.unwrap_or_default(),
                sp.protocol.as_deref().unwrap_or("TCP")
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Annotation on an exported slice (in the cluster's dedicated namespace) saying how it conflicts
/// with the ServiceImport that imports it; the agent reports it as the export's `Conflict`.
pub const CONFLICT_ANNOTATION: &str = "services.clusternet.io/conflict";

struct Ctx {
    client: kube::Client,
    events: Events,
    services: Store<Service>,
    slices: Store<EndpointSlice>,
    manifests: Store<Manifest>,
    clusters: Store<ManagedCluster>,
    reserved_ns: String,
    /// The parent refused the ClusterSet IPs as load-balancer ingress of a ClusterIP Service
    /// (Kubernetes validates this since v1.33): not tried again by this process.
    ingress_refused: std::sync::atomic::AtomicBool,
}

pub async fn run(rt: Runtime, stop: CancellationToken) {
    let imports = rt.cache.watch::<ServiceImport>();
    let events = Events::new(
        rt.events_client.clone(),
        known::CLUSTERNET_CONTROLLER_MANAGER_NAME,
    );
    if !rt.config.gate(known::MULTI_CLUSTER_SERVICE) {
        // say so on every ServiceImport rather than ignore them in silence
        Controller::new("serviceimport", &imports)
            .concurrency(1)
            .run(stop, move |si: Arc<ServiceImport>| {
                let events = events.clone();
                async move {
                    if si.metadata.deletion_timestamp.is_none() {
                        events.warn(si.as_ref(), "FeatureGateOff", GATE_OFF);
                    }
                    Ok::<_, std::convert::Infallible>(Action::await_change())
                }
            })
            .await;
        return;
    }
    let selector = known::LABEL_SERVICE_NAME;
    let services = rt.cache.watch_labelled::<Service>(selector);
    let slices = rt.cache.watch_labelled::<EndpointSlice>(selector);
    let manifests = rt.cache.watch_labelled::<Manifest>(selector);
    let clusters = rt.cache.watch::<ManagedCluster>();
    let ctx = Arc::new(Ctx {
        client: rt.client.clone(),
        events,
        services: services.store.clone(),
        slices: slices.store.clone(),
        manifests: manifests.store.clone(),
        clusters: clusters.store.clone(),
        reserved_ns: rt.config.reserved_namespace.clone(),
        ingress_refused: std::sync::atomic::AtomicBool::new(false),
    });
    // an exported or imported slice, a derived Service or a published Manifest names the imports
    // of its Service
    let by_service = imports_by_service(&imports);
    let service_of =
        |l: &BTreeMap<String, String>| exported_service_key(l).into_iter().collect::<Vec<_>>();
    let same = |si: &ServiceImport, l: &BTreeMap<String, String>| {
        exported_service_key(si.labels()).is_some_and(|k| Some(k) == exported_service_key(l))
    };
    let slice_refs = through_index(
        slices.subscribe(),
        by_service.clone(),
        move |s: &EndpointSlice| service_of(s.labels()),
        move |si: &ServiceImport, s: &EndpointSlice| same(si, s.labels()),
    );
    let service_refs = through_index(
        services.subscribe(),
        by_service.clone(),
        move |s: &Service| service_of(s.labels()),
        move |si: &ServiceImport, s: &Service| same(si, s.labels()),
    );
    let manifest_refs = through_index(
        manifests.subscribe(),
        by_service,
        move |m: &Manifest| service_of(m.labels()),
        move |si: &ServiceImport, m: &Manifest| same(si, m.labels()),
    );
    Controller::new("serviceimport", &imports)
        .concurrency(2)
        .after([
            services.listed(),
            slices.listed(),
            manifests.listed(),
            clusters.listed(),
        ])
        .triggered_by(slice_refs)
        .triggered_by(service_refs)
        .triggered_by(manifest_refs)
        .run(stop, move |si| {
            let ctx = ctx.clone();
            async move { reconcile(&ctx, si).await }
        })
        .await;
}

pub const GATE_OFF: &str = "feature gate MultiClusterService is off on the controller-manager: no Service or EndpointSlices are derived from this ServiceImport (start it with --feature-gates=MultiClusterService=true)";

/// Upstream's ClusterSet IPs as the derived Service's load-balancer ingress. Kubernetes v1.33 and
/// later refuse ingress on a ClusterIP Service: then the IPs stay on the ServiceImport only, the
/// user is told once, and this process does not try again.
async fn write_ingress(
    ctx: &Ctx,
    si: &ServiceImport,
    services: &Api<Service>,
    svc: &Service,
    status: &Value,
) -> kube::Result<()> {
    use std::sync::atomic::Ordering;
    if ctx.ingress_refused.load(Ordering::Relaxed) {
        return Ok(());
    }
    match apply::write_status(services, FIELD_MANAGER, svc, status.clone()).await {
        Ok(_) => Ok(()),
        Err(e) if crate::runtime::api_code(&e) == Some(422) => {
            ctx.ingress_refused.store(true, Ordering::Relaxed);
            ctx.events.warn(
                si,
                "ClusterSetIPNotRecorded",
                &clusterset_ip_not_recorded(&crate::runtime::api_message(&e)),
            );
            Ok(())
        }
        Err(e) => Err(e),
    }
}

/// The note of `ClusterSetIPNotRecorded`: why the ClusterSet IPs are not on the derived Service,
/// with the parent's reason (its words, not a dump of the error).
pub fn clusterset_ip_not_recorded(reason: &str) -> String {
    format!(
        "The parent refuses spec.ips as status.loadBalancer.ingress of the derived ClusterIP Service (Kubernetes v1.33+), so the ClusterSet IPs stay on the ServiceImport only. The parent said: {reason}"
    )
}

fn key(si: &ServiceImport) -> String {
    format!("{}/{}", si.namespace().unwrap_or_default(), si.name_any())
}

/// The error of one of `si`'s API calls, saying what it was doing.
fn api_err(si: &ServiceImport, what: &'static str) -> impl FnOnce(kube::Error) -> ImportError {
    let fail = ApiFailure::about(si, what);
    move |source| fail(source).into()
}

async fn reconcile(ctx: &Ctx, si: Arc<ServiceImport>) -> Result<Action, ImportError> {
    let si_ns = si.namespace().unwrap_or_default();
    let err = |what: &'static str| api_err(&si, what);
    let imports: Api<ServiceImport> = Api::namespaced(ctx.client.clone(), &si_ns);
    let exported = exported_service(&si);
    follow_labels(ctx, &si, &imports, exported.as_ref().ok()).await?;
    if si.metadata.deletion_timestamp.is_some() {
        if let Ok((name, ns)) = &exported {
            withdraw(ctx, &si, name, ns).await?;
        }
        apply::release_finalizer(&imports, si.as_ref(), known::APP_FINALIZER)
            .await
            .map_err(err("releasing the finalizer"))?;
        info!(serviceimport = %key(&si), "import withdrawn");
        return Ok(Action::await_change());
    }
    let (name, ns) = match exported {
        Ok(n) => n,
        Err(message) => {
            ctx.events
                .warn(si.as_ref(), "InvalidServiceImport", &message);
            return Ok(Action::await_change());
        }
    };
    apply::hold_finalizer(&imports, FIELD_MANAGER, si.as_ref(), known::APP_FINALIZER)
        .await
        .map_err(err("adding the finalizer"))?;
    let derived_name = known::derived_service_name(&ns, &name);
    let derived = ctx
        .services
        .get(&ObjectRef::<Service>::new(&derived_name).within(&si_ns));
    let clusters = ctx.clusters.state();
    let cluster_of = |namespace: &str| {
        clusters
            .iter()
            .find(|mc| mc.namespace().as_deref() == Some(namespace))
            .map(|mc| mc.name_any())
    };
    let manifests = ctx.manifests.state();
    let published = Published {
        reserved_ns: &ctx.reserved_ns,
        manifests: &manifests,
    };
    let slices = ctx.slices.state();
    let plan = match plan_import(&si, derived.as_deref(), &slices, &published, &cluster_of) {
        Ok(p) => p,
        Err(message) => {
            ctx.events
                .warn(si.as_ref(), "InvalidServiceImport", &message);
            return Ok(Action::await_change());
        }
    };
    apply_service(ctx, &si, &plan, &derived_name, derived.as_deref()).await?;
    apply_slices(ctx, &si, &plan).await?;
    apply_manifests(ctx, &si, &plan).await?;
    if let Some(status) = &plan.status {
        let status = serde_json::to_value(status).unwrap_or_default();
        apply::write_status(&imports, FIELD_MANAGER, si.as_ref(), status)
            .await
            .map_err(err("writing its status"))?;
    }
    for (reason, message) in &plan.warnings {
        ctx.events.warn(si.as_ref(), reason, message);
    }
    Ok(Action::requeue(RESYNC))
}

/// When the labels named another Service before (or name none now), what was derived for that
/// one goes; then the annotation follows the labels.
async fn follow_labels(
    ctx: &Ctx,
    si: &ServiceImport,
    imports: &Api<ServiceImport>,
    exported: Option<&(String, String)>,
) -> Result<(), ImportError> {
    if let Some((name, ns)) = previous_import(si, exported) {
        withdraw(ctx, si, &name, &ns).await?;
        info!(serviceimport = %key(si), previous = %format!("{ns}/{name}"), "withdrew what was imported for the Service the labels named before");
    }
    let recorded = exported.map(|(name, ns)| format!("{ns}/{name}"));
    if si.metadata.deletion_timestamp.is_none()
        && si.annotations().get(known::IMPORTED_SERVICE_ANNOTATION) != recorded.as_ref()
    {
        let patch =
            json!({"metadata": {"annotations": {known::IMPORTED_SERVICE_ANNOTATION: recorded}}});
        imports
            .patch(
                &si.name_any(),
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(&patch),
            )
            .await
            .map_err(api_err(si, "recording the imported Service"))?;
    }
    Ok(())
}

/// A deleted ServiceImport takes back what it made: the imported EndpointSlices, the derived
/// Service and the Manifests that published them.
async fn withdraw(ctx: &Ctx, si: &ServiceImport, name: &str, ns: &str) -> Result<(), ImportError> {
    let si_ns = si.namespace().unwrap_or_default();
    let services: Api<Service> = Api::namespaced(ctx.client.clone(), &si_ns);
    let slices: Api<EndpointSlice> = Api::namespaced(ctx.client.clone(), &si_ns);
    let copies = ListParams::default().labels(&format!(
        "{}={name},{}={ns},!{}",
        known::LABEL_SERVICE_NAME,
        known::LABEL_SERVICE_NAMESPACE,
        known::OBJECT_CREATED_BY_LABEL
    ));
    slices
        .delete_collection(&DeleteParams::default(), &copies)
        .await
        .map_err(api_err(si, "deleting its EndpointSlices"))?;
    let derived = known::derived_service_name(ns, name);
    apply::delete(&services, &derived)
        .await
        .map_err(api_err(si, "deleting the derived Service"))?;
    let published = ListParams::default().labels(&format!(
        "{}={name},{}={ns},{}={si_ns},!{}",
        known::LABEL_SERVICE_NAME,
        known::LABEL_SERVICE_NAMESPACE,
        known::CONFIG_NAMESPACE_LABEL,
        known::OBJECT_CREATED_BY_LABEL
    ));
    Api::<Manifest>::namespaced(ctx.client.clone(), &ctx.reserved_ns)
        .delete_collection(&DeleteParams::default(), &published)
        .await
        .map_err(api_err(si, "deleting its Manifests"))?;
    Ok(())
}

/// The derived Service as planned: replaced when its type flips, written when it differs, its
/// ingress status written when that differs.
async fn apply_service(
    ctx: &Ctx,
    si: &ServiceImport,
    plan: &ImportPlan,
    derived_name: &str,
    derived: Option<&Service>,
) -> Result<(), ImportError> {
    let services: Api<Service> =
        Api::namespaced(ctx.client.clone(), &si.namespace().unwrap_or_default());
    if plan.recreate_service {
        apply::delete(&services, derived_name)
            .await
            .map_err(api_err(si, "replacing the derived Service"))?;
    }
    let written = match &plan.service {
        Some(body) => {
            let written = apply::apply(&services, FIELD_MANAGER, derived_name, body)
                .await
                .map_err(api_err(si, "writing the derived Service"))?;
            info!(serviceimport = %key(si), service = %derived_name, "derived Service written");
            Some(written)
        }
        None => None,
    };
    if let (Some(status), Some(svc)) = (&plan.service_status, written.as_ref().or(derived)) {
        write_ingress(ctx, si, &services, svc, status)
            .await
            .map_err(api_err(si, "writing the derived Service's status"))?;
    }
    Ok(())
}

/// The Manifests (in the reserved namespace) that publish the derived Service and the imported
/// slices, as planned.
async fn apply_manifests(
    ctx: &Ctx,
    si: &ServiceImport,
    plan: &ImportPlan,
) -> Result<(), ImportError> {
    let manifest_api: Api<Manifest> = Api::namespaced(ctx.client.clone(), &ctx.reserved_ns);
    for body in &plan.manifests {
        let m = body["metadata"]["name"].as_str().unwrap_or_default();
        apply::apply(&manifest_api, FIELD_MANAGER, m, body)
            .await
            .map_err(api_err(si, "publishing a Manifest"))?;
    }
    for m in &plan.manifest_deletes {
        apply::delete(&manifest_api, m)
            .await
            .map_err(api_err(si, "deleting a stale Manifest"))?;
    }
    Ok(())
}

/// The imported EndpointSlices as planned, and the conflict marks on the exported ones.
async fn apply_slices(ctx: &Ctx, si: &ServiceImport, plan: &ImportPlan) -> Result<(), ImportError> {
    let slices: Api<EndpointSlice> =
        Api::namespaced(ctx.client.clone(), &si.namespace().unwrap_or_default());
    for body in &plan.upserts {
        let slice = body["metadata"]["name"].as_str().unwrap_or_default();
        apply::apply(&slices, FIELD_MANAGER, slice, body)
            .await
            .map_err(api_err(si, "writing an EndpointSlice"))?;
    }
    for slice in &plan.deletes {
        apply::delete(&slices, slice)
            .await
            .map_err(api_err(si, "deleting a stale EndpointSlice"))?;
    }
    if !plan.upserts.is_empty() || !plan.deletes.is_empty() {
        info!(serviceimport = %key(si), written = plan.upserts.len(), deleted = plan.deletes.len(), "EndpointSlices imported");
    }
    for (ns, name, message) in &plan.conflicts {
        // only the annotation, under this manager: the agent's apply of the slice is untouched
        let body = json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": name, "namespace": ns,
                "annotations": message.as_ref().map(|m| json!({CONFLICT_ANNOTATION: m}))
                    .unwrap_or_else(|| json!({}))}});
        let api: Api<EndpointSlice> = Api::namespaced(ctx.client.clone(), ns);
        match apply::apply(&api, FIELD_MANAGER, name, &body).await {
            Ok(_) => {}
            // gone meanwhile, or recreated without the fields an apply cannot invent
            Err(e) if matches!(crate::runtime::api_code(&e), Some(404 | 422)) => {}
            Err(e) => {
                return Err(api_err(si, "marking an exported EndpointSlice's conflict")(
                    e,
                ));
            }
        }
    }
    Ok(())
}

/// The key of an exported Service in the MCS labels of an object (`<namespace>/<name>` from
/// `services.clusternet.io/multi-cluster-service-{namespace,name}`), if it carries both.
fn exported_service_key(labels: &std::collections::BTreeMap<String, String>) -> Option<String> {
    Some(format!(
        "{}/{}",
        labels.get(known::LABEL_SERVICE_NAMESPACE)?,
        labels.get(known::LABEL_SERVICE_NAME)?
    ))
}

/// ServiceImports by the exported Service their labels name ([`exported_service_key`]).
fn imports_by_service(s: &Shared<ServiceImport>) -> Index<ServiceImport> {
    s.index("exported-service", |si| {
        exported_service_key(si.labels()).into_iter().collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn import(extra: Value) -> ServiceImport {
        let mut v = json!({
            "apiVersion": "multicluster.x-k8s.io/v1alpha1", "kind": "ServiceImport",
            "metadata": {"name": "my-svc", "namespace": "default", "labels": {
                "services.clusternet.io/multi-cluster-service-name": "nginx-svc",
                "services.clusternet.io/multi-cluster-service-namespace": "baz"}},
            "spec": {"type": "ClusterSetIP", "ips": ["42.42.42.42"],
                "ports": [{"protocol": "TCP", "port": 80}]}
        });
        json_patch::merge(&mut v, &extra);
        serde_json::from_value(v).expect("an import")
    }

    fn exported(
        ns: &str,
        name: &str,
        subs_ns: Option<&str>,
        port_name: &str,
    ) -> Arc<EndpointSlice> {
        let mut labels = json!({
            "services.clusternet.io/multi-cluster-service-name": "nginx-svc",
            "services.clusternet.io/multi-cluster-service-namespace": "baz",
            "clusternet.io/created-by": "clusternet-agent",
            "kubernetes.io/service-name": known::derived_service_name("baz", "nginx-svc"),
        });
        if let Some(s) = subs_ns {
            labels["apps.clusternet.io/subs.namespace"] = json!(s);
        }
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": {"name": name, "namespace": ns, "labels": labels},
                "addressType": "IPv4",
                "endpoints": [{"addresses": ["10.1.0.1"]}],
                "ports": [{"name": port_name, "port": 80, "protocol": "TCP"}]
            }))
            .expect("a slice"),
        )
    }

    fn none() -> Published<'static> {
        Published {
            reserved_ns: "clusternet-reserved",
            manifests: &[],
        }
    }

    fn clusters(ns: &str) -> Option<String> {
        ns.strip_prefix("clusternet-")
            .map(|c| format!("cluster-{c}"))
    }

    fn copy_of(body: &Value) -> Arc<EndpointSlice> {
        Arc::new(serde_json::from_value(body.clone()).expect("a slice"))
    }

    #[test]
    fn the_service_imported_before_is_withdrawn_when_the_labels_change() {
        let si = |annotation: Option<&str>| -> ServiceImport {
            let mut meta = json!({"name": "my-svc", "namespace": "team"});
            if let Some(a) = annotation {
                meta["annotations"] = json!({known::IMPORTED_SERVICE_ANNOTATION: a});
            }
            serde_json::from_value(json!({
                "apiVersion": "multicluster.x-k8s.io/v1alpha1", "kind": "ServiceImport",
                "metadata": meta, "spec": {"type": "ClusterSetIP", "ports": []}}))
            .expect("a ServiceImport")
        };
        let now = ("nginx-svc".to_string(), "app".to_string());
        // nothing imported before, or the same Service: nothing to withdraw
        assert_eq!(previous_import(&si(None), Some(&now)), None);
        assert_eq!(
            previous_import(&si(Some("app/nginx-svc")), Some(&now)),
            None
        );
        // another name (a typo fixed), or no valid labels any more: the old one goes
        let typo = Some(("nginx-svx".to_string(), "app".to_string()));
        assert_eq!(
            previous_import(&si(Some("app/nginx-svx")), Some(&now)),
            typo
        );
        assert_eq!(previous_import(&si(Some("app/nginx-svx")), None), typo);
        // an annotation that names nothing is ignored
        assert_eq!(previous_import(&si(Some("garbage")), None), None);
        assert_eq!(previous_import(&si(Some("/x")), None), None);
        // the event note reads as sentences
        let note = clusterset_ip_not_recorded("Service \"derived-x\" is invalid");
        assert!(
            note.ends_with("The parent said: Service \"derived-x\" is invalid"),
            "{note}"
        );
    }

    #[test]
    fn the_derived_service_is_upstreams() {
        let plan = plan_import(&import(json!({})), None, &[], &none(), &clusters).expect("a plan");
        let svc = plan.service.expect("a Service");
        assert_eq!(
            svc["metadata"]["name"],
            known::derived_service_name("baz", "nginx-svc")
        );
        assert_eq!(svc["metadata"]["namespace"], "default");
        assert_eq!(svc["spec"]["type"], "ClusterIP");
        assert_eq!(
            svc["spec"]["ports"],
            json!([{"protocol": "TCP", "port": 80}])
        );
        assert!(svc["spec"].get("clusterIP").is_none());
        assert_eq!(
            plan.service_status,
            Some(json!({"loadBalancer": {"ingress": [{"ip": "42.42.42.42"}]}}))
        );
        // a Headless import derives a headless Service, without ingress
        let headless = import(json!({"spec": {"type": "Headless", "ips": null}}));
        let plan = plan_import(&headless, None, &[], &none(), &clusters).expect("a plan");
        assert_eq!(
            plan.service.expect("a Service")["spec"]["clusterIP"],
            "None"
        );
        assert_eq!(plan.service_status, None);
    }

    #[test]
    fn an_import_without_its_labels_says_so() {
        let si = import(json!({"metadata": {"labels": {
            "services.clusternet.io/multi-cluster-service-namespace": null}}}));
        let e = plan_import(&si, None, &[], &none(), &clusters).expect_err("invalid");
        assert!(
            e.contains("services.clusternet.io/multi-cluster-service-name"),
            "{e}"
        );
    }

    #[test]
    fn slices_of_every_cluster_labelled_for_this_namespace_are_imported() {
        let si = import(json!({}));
        let slices = vec![
            exported("clusternet-a", "baz-s1", Some("default"), ""),
            exported("clusternet-b", "baz-s2", Some("default"), ""),
            // for another namespace, unlabelled, or outside a cluster's namespace: not imported
            exported("clusternet-c", "baz-s3", Some("other"), ""),
            exported("clusternet-c", "baz-s4", None, ""),
            exported("kube-system", "baz-s5", Some("default"), ""),
        ];
        let plan = plan_import(&si, None, &slices, &none(), &clusters).expect("a plan");
        let names: Vec<&str> = plan
            .upserts
            .iter()
            .filter_map(|b| b["metadata"]["name"].as_str())
            .collect();
        assert_eq!(names, ["clusternet-a-baz-s1", "clusternet-b-baz-s2"]);
        let labels = &plan.upserts[0]["metadata"]["labels"];
        assert!(labels.get("clusternet.io/created-by").is_none());
        assert_eq!(
            labels["kubernetes.io/service-name"],
            known::derived_service_name("baz", "nginx-svc")
        );
        assert_eq!(plan.upserts[0]["metadata"]["namespace"], "default");
        assert_eq!(
            plan.status.expect("a status").clusters,
            vec![
                crate::apis::mcs::ClusterStatus {
                    cluster: "cluster-a".into()
                },
                crate::apis::mcs::ClusterStatus {
                    cluster: "cluster-b".into()
                },
            ]
        );
        assert!(plan.warnings.is_empty(), "{:?}", plan.warnings);

        // in place: nothing to write; a source gone: its copy deleted
        let mut all = slices.clone();
        all.extend(plan.upserts.iter().map(copy_of));
        let svc: Service = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": known::derived_service_name("baz", "nginx-svc"),
                "namespace": "default"},
            "spec": {"type": "ClusterIP", "clusterIP": "10.0.0.9",
                "ports": [{"protocol": "TCP", "port": 80, "targetPort": 80}]},
            "status": {"loadBalancer": {"ingress": [{"ip": "42.42.42.42"}]}}
        }))
        .expect("a Service");
        let mut si = si;
        si.status = Some(ServiceImportStatus {
            clusters: vec![
                crate::apis::mcs::ClusterStatus {
                    cluster: "cluster-a".into(),
                },
                crate::apis::mcs::ClusterStatus {
                    cluster: "cluster-b".into(),
                },
            ],
        });
        let first = plan_import(&si, Some(&svc), &all, &none(), &clusters).expect("a plan");
        // the derived Service and both copies are published as feeds, named as the shadow API
        // names them
        let names: Vec<&str> = first
            .manifests
            .iter()
            .filter_map(|m| m["metadata"]["name"].as_str())
            .collect();
        assert_eq!(
            names,
            [
                format!(
                    "services.default.{}",
                    known::derived_service_name("baz", "nginx-svc")
                )
                .as_str(),
                "endpointslices.default.clusternet-a-baz-s1",
                "endpointslices.default.clusternet-b-baz-s2"
            ]
        );
        assert_eq!(
            first.manifests[0]["metadata"]["namespace"],
            "clusternet-reserved"
        );
        assert_eq!(
            first.manifests[0]["metadata"]["labels"]["apps.clusternet.io/config.kind"],
            "Service"
        );
        assert!(
            first.manifests[0]["template"]["spec"]
                .get("clusterIP")
                .is_none()
        );
        let manifests: Vec<Arc<Manifest>> = first
            .manifests
            .iter()
            .map(|m| Arc::new(serde_json::from_value(m.clone()).expect("a Manifest")))
            .collect();
        let published = Published {
            reserved_ns: "clusternet-reserved",
            manifests: &manifests,
        };
        let plan = plan_import(&si, Some(&svc), &all, &published, &clusters).expect("a plan");
        assert_eq!(plan, ImportPlan::default(), "nothing to write");
        all.retain(|s| s.name_any() != "baz-s2");
        let plan = plan_import(&si, Some(&svc), &all, &published, &clusters).expect("a plan");
        assert_eq!(plan.deletes, vec!["clusternet-b-baz-s2".to_string()]);
        assert_eq!(
            plan.manifest_deletes,
            vec!["endpointslices.default.clusternet-b-baz-s2".to_string()]
        );
        assert!(plan.upserts.is_empty());
        // emptied first: a Subscription still using it holds the Manifest back
        assert_eq!(plan.manifests.len(), 1);
        assert_eq!(plan.manifests[0]["template"]["endpoints"], json!([]));
        assert_eq!(plan.status.expect("a status").clusters.len(), 1);
    }

    #[test]
    fn ports_the_clusters_do_not_export_are_reported() {
        let si = import(json!({}));
        let slices = vec![
            exported("clusternet-a", "baz-s1", Some("default"), ""),
            exported("clusternet-b", "baz-s2", Some("default"), "http"),
        ];
        let plan = plan_import(&si, None, &slices, &none(), &clusters).expect("a plan");
        assert_eq!(plan.warnings.len(), 1);
        assert_eq!(plan.warnings[0].0, "PortNotExported");
        assert!(
            plan.warnings[0].1.contains("cluster-b"),
            "{}",
            plan.warnings[0].1
        );
        // the conflicting export is told through its slice
        assert_eq!(plan.conflicts.len(), 1);
        let (ns, name, message) = &plan.conflicts[0];
        assert_eq!((ns.as_str(), name.as_str()), ("clusternet-b", "baz-s2"));
        assert!(
            message
                .as_deref()
                .is_some_and(|m| m.contains("\"http\" 80/TCP")),
            "{message:?}"
        );
    }

    #[test]
    fn switching_to_headless_recreates_the_service() {
        let svc: Service = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "x", "namespace": "default"},
            "spec": {"clusterIP": "10.0.0.9", "ports": [{"protocol": "TCP", "port": 80}]}
        }))
        .expect("a Service");
        let headless = import(json!({"spec": {"type": "Headless", "ips": null}}));
        let plan = plan_import(&headless, Some(&svc), &[], &none(), &clusters).expect("a plan");
        assert!(plan.recreate_service && plan.service.is_some());
    }
}
