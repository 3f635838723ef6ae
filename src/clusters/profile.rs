//! ClusterProfiles (SIG-Multicluster's Cluster Inventory API, KEP-4322; docs/spec/standards.md
//! §1): the parent publishes one `ClusterProfile` per ManagedCluster in the namespace
//! `--cluster-profile-namespace` (default `clusternet-system`; empty: none), so tools that read
//! the standard inventory (Kueue's MultiKueue, Argo CD, multicluster-runtime, Headlamp) see the
//! fleet without knowing Clusternet's own kinds.
//!
//! observe (the ManagedCluster and its profile, from the cache) -> [`desired`] (pure) -> apply
//! (server-side apply of labels and spec, then of the status, each only when it differs). A
//! profile is named after its cluster; one of that name that belongs to another cluster (another
//! manager's, or a second cluster of the same name) is left alone and said so in a Warning event.
//! A cluster being deregistered, or gone, takes its profile with it.
//!
//! A property's `lastObservedTime` moves only when its value does, so a heartbeat (every few
//! seconds per cluster) writes nothing.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};
use serde_json::json;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::apis::clusters::CONDITION_READY;
use crate::apis::inventory::{
    AccessProvider, CLUSTER_MANAGER, CLUSTER_MANAGER_LABEL, CLUSTER_SET_LABEL,
    CONDITION_CONTROL_PLANE_HEALTHY, ClusterManager, ClusterProfile, ClusterProfileSpec,
    ClusterProfileStatus, ClusterVersion, KubeconfigCluster, NamedExtension, Property,
};
use crate::apis::{ManagedCluster, known};
use crate::kube_ext::condition::{Said, condition};
use crate::runtime::controller::{Action, ApiFailure, Controller, ReconcileError, recheck};
use crate::runtime::events::Events;
use crate::runtime::{Runtime, api_code, apply};

pub const FIELD_MANAGER: &str = "clusternet/controller/clusterprofile";

/// The KEP-2149 property naming the cluster inside its ClusterSet (our cluster ID).
pub const PROPERTY_CLUSTER_ID: &str = "cluster.clusterset.k8s.io";
/// The KEP-2149 property naming the ClusterSet.
pub const PROPERTY_CLUSTER_SET: &str = "clusterset.k8s.io";
/// The condition saying the cluster joined the fleet (as OCM and KubeFleet publish it).
pub const CONDITION_JOINED: &str = "Joined";
/// The access provider's name: a consumer's provider file maps it to `kubectl clusternet
/// credentials` (KEP-5339).
pub const ACCESS_PROVIDER: &str = "clusternet";
/// The kubeconfig extension client-go hands to an exec plugin as `spec.cluster.config`
/// (`provideClusterInfo: true`), reserved by SIG Auth.
pub const EXEC_EXTENSION: &str = "client.authentication.k8s.io/exec";

/// Where consumers reach the parent: the base of every access provider's server.
#[derive(Debug, Clone, PartialEq)]
pub struct Access {
    /// The parent's URL (`https://host:port[/prefix]`).
    pub server: String,
    /// The CA bundle (PEM) that server is verified with; `None`: the consumer's system roots.
    pub ca_pem: Option<String>,
}

impl Access {
    /// The access provider of cluster `id` (named `name`): the hub's socket proxy of that
    /// cluster, `direct` to its API server, through the agent's tunnel (hub.md §2.3.1).
    pub fn provider(&self, id: &str, name: &str) -> Option<AccessProvider> {
        let path = crate::runtime::child::socket_proxy_path(id, "direct").ok()?;
        Some(AccessProvider {
            name: ACCESS_PROVIDER.into(),
            cluster: KubeconfigCluster {
                server: format!("{}{path}", self.server.trim_end_matches('/')),
                certificate_authority_data: self
                    .ca_pem
                    .as_ref()
                    .map(|p| k8s_openapi::ByteString(p.as_bytes().to_vec())),
                extensions: vec![NamedExtension {
                    name: EXEC_EXTENSION.into(),
                    extension: json!({"clusterID": id, "clusterName": name}),
                }],
                ..Default::default()
            },
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    #[error(transparent)]
    Api(#[from] ApiFailure),
}

impl ReconcileError for ProfileError {
    fn metric_label(&self) -> &'static str {
        match self {
            ProfileError::Api(_) => "api",
        }
    }
}

struct Ctx {
    rt: Runtime,
    events: Events,
    namespace: String,
    profiles: Store<ClusterProfile>,
    access: Option<Access>,
}

/// What a ClusterProfile must be: its labels, spec and status.
#[derive(Debug, Clone, PartialEq)]
pub struct Desired {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub spec: ClusterProfileSpec,
    pub status: ClusterProfileStatus,
}

/// The profile `mc` is published as, keeping from `previous` (its current status) the times of
/// what did not change.
pub fn desired(
    mc: &ManagedCluster,
    cluster_set: &str,
    access: Option<&Access>,
    previous: Option<&ClusterProfileStatus>,
    now: Timestamp,
) -> Desired {
    let id = mc.spec.cluster_id.clone();
    let st = mc.status.clone().unwrap_or_default();
    let mut values: BTreeMap<String, String> = BTreeMap::new();
    values.insert(PROPERTY_CLUSTER_ID.into(), id.clone());
    values.insert(PROPERTY_CLUSTER_SET.into(), cluster_set.into());
    values.insert(
        "clusternet.io/sync-mode".into(),
        mc.spec.sync_mode.as_str().into(),
    );
    values.insert("clusternet.io/platform".into(), st.platform.clone());
    for key in [
        "topology.kubernetes.io/region",
        "topology.kubernetes.io/zone",
    ] {
        if let Some(v) = mc.labels().get(key) {
            values.insert(key.into(), v.clone());
        }
    }
    for (kind, resources) in [("capacity", &st.capacity), ("allocatable", &st.allocatable)] {
        for (resource, q) in resources {
            values.insert(
                format!("resources.clusternet.io/{kind}-{resource}"),
                q.0.clone(),
            );
        }
    }
    // every ClusterProperty of the child, as its agent reports them (KEP-4322: a profile's
    // properties include the About API's); ours above say the same or win
    for p in &st.cluster_properties {
        values
            .entry(p.name.clone())
            .or_insert_with(|| p.value.clone());
    }
    let before: &[Property] = previous.map(|p| p.properties.as_slice()).unwrap_or(&[]);
    let properties = values
        .into_iter()
        // the KEP's bounds: a name of 1 to 253 characters, a value of 1 to 1024
        .filter(|(name, value)| name.len() <= 253 && !value.is_empty() && value.len() <= 1024)
        .map(|(name, value)| {
            let seen = before
                .iter()
                .find(|p| p.name == name && p.value == value)
                .and_then(|p| p.last_observed_time.clone())
                .unwrap_or(Time(now));
            Property {
                name,
                value,
                last_observed_time: Some(seen),
            }
        })
        .collect();
    let old_conditions = previous.map(|p| p.conditions.as_slice()).unwrap_or(&[]);
    let ready = st.condition(CONDITION_READY);
    let (status, reason, message) = match ready {
        Some(c) if c.status == "True" || c.status == "False" => {
            (c.status.as_str(), c.reason.as_str(), c.message.as_str())
        }
        Some(c) => ("Unknown", c.reason.as_str(), c.message.as_str()),
        None => (
            "Unknown",
            "ClusterStatusNeverUpdated",
            "the cluster's agent has not reported yet",
        ),
    };
    let conditions = vec![
        condition(
            Said {
                type_: CONDITION_CONTROL_PLANE_HEALTHY,
                status,
                reason: if reason.is_empty() { "Unknown" } else { reason },
                message,
                observed_generation: None,
            },
            old_conditions,
            now,
        ),
        condition(
            Said {
                type_: CONDITION_JOINED,
                status: "True",
                reason: "ClusterRegistered",
                message: "registered with Clusternet; its agent holds the cluster's credentials",
                observed_generation: None,
            },
            old_conditions,
            now,
        ),
    ];
    let name = mc.name_any();
    let mut labels = BTreeMap::new();
    labels.insert(
        CLUSTER_MANAGER_LABEL.to_string(),
        CLUSTER_MANAGER.to_string(),
    );
    labels.insert(known::CLUSTER_ID_LABEL.to_string(), id);
    labels.insert(known::CLUSTER_NAME_LABEL.to_string(), name.clone());
    Desired {
        spec: ClusterProfileSpec {
            display_name: name.clone(),
            cluster_manager: ClusterManager {
                name: CLUSTER_MANAGER.into(),
            },
        },
        status: ClusterProfileStatus {
            conditions,
            version: ClusterVersion {
                kubernetes: st.k8s_version.clone(),
            },
            properties,
            access_providers: access
                .and_then(|a| a.provider(&mc.spec.cluster_id, &name))
                .into_iter()
                .collect(),
            ..Default::default()
        },
        labels,
        name,
    }
}

/// Whether `existing` (a profile of the same name) is this cluster's: ours, for its cluster ID.
pub fn belongs_to(existing: &ClusterProfile, mc: &ManagedCluster) -> bool {
    existing
        .labels()
        .get(CLUSTER_MANAGER_LABEL)
        .map(String::as_str)
        == Some(CLUSTER_MANAGER)
        && existing.labels().get(known::CLUSTER_ID_LABEL) == Some(&mc.spec.cluster_id)
}

/// Publishes ClusterProfiles until `stop` (nothing when `--cluster-profile-namespace` is empty).
pub async fn run(rt: Runtime, stop: CancellationToken) {
    let namespace = rt.config.cluster_profile_namespace.clone();
    if namespace.is_empty() {
        info!("--cluster-profile-namespace is empty: no ClusterProfiles are published");
        return;
    }
    // without the CRD the cache would retry its watch forever: say it once, look again later
    let probe: Api<ClusterProfile> = Api::namespaced(rt.client.clone(), &namespace);
    let mut said = false;
    loop {
        match probe.list(&ListParams::default().limit(1)).await {
            Ok(_) => break,
            Err(e) if api_code(&e) == Some(404) => {
                if !said {
                    warn!(
                        "the ClusterProfile CRD (clusterprofiles.multicluster.x-k8s.io) is not installed: apply crds/ to publish ClusterProfiles; looking again every minute"
                    );
                    said = true;
                }
            }
            Err(e) => warn!(error = %e, "cannot list ClusterProfiles; trying again in a minute"),
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(60)) => {}
            _ = stop.cancelled() => return,
        }
    }
    crate::runtime::ensure_namespace(&rt.client, &namespace).await;
    label_namespace(&rt, &namespace).await;
    let clusters = rt.cache.watch::<ManagedCluster>();
    let profiles = rt.cache.watch::<ClusterProfile>();
    let ctx = Arc::new(Ctx {
        events: Events::new(
            rt.events_client.clone(),
            known::CLUSTERNET_CONTROLLER_MANAGER_NAME,
        ),
        namespace: namespace.clone(),
        profiles: profiles.store.clone(),
        access: access(&rt).await,
        rt: rt.clone(),
    });
    // a profile changed or deleted by someone else: its cluster is looked at again
    // (looked up by name, the profile's: the cache's index, not a scan of the fleet per write)
    let by_name = clusters.index("name", |mc: &ManagedCluster| vec![mc.name_any()]);
    let from_profiles = profiles.subscribe().flat_map(move |p| {
        let refs: Vec<ObjectRef<ManagedCluster>> = by_name
            .get(&p.name_any())
            .iter()
            .map(|mc| ObjectRef::from_obj(mc.as_ref()))
            .collect();
        futures::stream::iter(refs)
    });
    // a cluster that is gone takes its profile with it; the ones gone while no leader ran are
    // swept once both caches have listed
    let sweeper = {
        let (ctx, clusters, stop) = (ctx.clone(), clusters.clone(), stop.clone());
        let listed = [clusters.listed(), profiles.listed()];
        tokio::spawn(async move {
            let store = clusters.store.clone();
            let mut gone = clusters.subscribe();
            if !crate::runtime::cache::all_listed(&stop, listed).await {
                return;
            }
            sweep(&ctx, &store.state()).await;
            loop {
                tokio::select! {
                    Some(mc) = gone.next() => {
                        if store.get(&ObjectRef::from_obj(mc.as_ref())).is_none() {
                            remove(&ctx, &mc).await;
                        }
                    }
                    _ = stop.cancelled() => return,
                }
            }
        })
    };
    Controller::new("clusterprofile", &clusters)
        .after([profiles.listed()])
        .triggered_by(from_profiles)
        .run(stop, move |mc| {
            let ctx = ctx.clone();
            async move { reconcile(&ctx, mc).await }
        })
        .await;
    sweeper.abort();
}

/// Where the profiles' consumers reach the parent: `--cluster-profile-server` and
/// `--cluster-profile-ca-file`, each defaulting to how this process reaches the parent. `None`
/// (no access providers, said in the log) when neither can be known.
async fn access(rt: &Runtime) -> Option<Access> {
    let own = match crate::runtime::kube_config_for(&rt.config).await {
        Ok(c) => Some(c),
        Err(e) => {
            warn!(error = %e, "cannot read this process's parent connection settings");
            None
        }
    };
    let server = match (&rt.config.cluster_profile_server, &own) {
        (Some(s), _) if !s.is_empty() => s.clone(),
        (_, Some(c)) => c.cluster_url.to_string(),
        _ => {
            warn!(
                "the ClusterProfiles carry no access provider: set --cluster-profile-server to the parent's address"
            );
            return None;
        }
    };
    let ca_pem = match &rt.config.cluster_profile_ca_file {
        Some(path) if !path.is_empty() => match std::fs::read_to_string(path) {
            Ok(pem) => Some(pem),
            Err(e) => {
                warn!(path, error = %e, "cannot read --cluster-profile-ca-file: the ClusterProfiles carry no access provider");
                return None;
            }
        },
        _ => own
            .as_ref()
            .and_then(|c| c.root_cert.as_ref())
            .map(|ders| crate::runtime::certs::certificates_pem(ders)),
    };
    info!(
        server,
        ca = ca_pem.is_some(),
        "ClusterProfiles name the parent's socket proxy as their access provider"
    );
    Some(Access { server, ca_pem })
}

/// The ClusterSet label on the profiles' namespace (KEP-4322: the namespace groups a ClusterSet).
async fn label_namespace(rt: &Runtime, namespace: &str) {
    let api: Api<Namespace> = Api::all(rt.client.clone());
    let body = json!({
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": namespace, "labels": {CLUSTER_SET_LABEL: rt.config.cluster_set}}
    });
    if let Err(e) = api
        .patch(
            namespace,
            &PatchParams::apply(FIELD_MANAGER),
            &Patch::Apply(&body),
        )
        .await
    {
        warn!(namespace, error = %e, "cannot label the ClusterProfile namespace with its ClusterSet");
    }
}

async fn reconcile(ctx: &Ctx, mc: Arc<ManagedCluster>) -> Result<Action, ProfileError> {
    if mc.metadata.deletion_timestamp.is_some() {
        remove(ctx, &mc).await;
        return Ok(Action::await_change());
    }
    let name = mc.name_any();
    let existing = ctx
        .profiles
        .get(&ObjectRef::new(&name).within(&ctx.namespace));
    if let Some(p) = &existing
        && !belongs_to(p, &mc)
    {
        ctx.events.warn(
            mc.as_ref(),
            "ClusterProfileNameTaken",
            &format!(
                "ClusterProfile {}/{name} belongs to another cluster (cluster manager {:?}, cluster ID {:?}): this cluster is not published",
                ctx.namespace,
                p.spec.cluster_manager.name,
                p.labels().get(known::CLUSTER_ID_LABEL).cloned().unwrap_or_default()
            ),
        );
        return Ok(recheck(Duration::from_secs(600)));
    }
    let want = desired(
        &mc,
        &ctx.rt.config.cluster_set,
        ctx.access.as_ref(),
        existing.as_ref().and_then(|p| p.status.as_ref()),
        Timestamp::now(),
    );
    let api: Api<ClusterProfile> = Api::namespaced(ctx.rt.client.clone(), &ctx.namespace);
    let same_object = existing.as_ref().is_some_and(|p| {
        p.spec == want.spec
            && want
                .labels
                .iter()
                .all(|(k, v)| p.labels().get(k) == Some(v))
    });
    if !same_object {
        let body = json!({
            "apiVersion": ClusterProfile::api_version(&()),
            "kind": ClusterProfile::kind(&()),
            "metadata": {"name": want.name, "namespace": ctx.namespace, "labels": want.labels},
            "spec": want.spec,
        });
        apply::apply(&api, FIELD_MANAGER, &want.name, &body)
            .await
            .map_err(ApiFailure::about(
                mc.as_ref(),
                "publishing its ClusterProfile",
            ))?;
    }
    if existing.as_ref().and_then(|p| p.status.as_ref()) != Some(&want.status) {
        let body = json!({
            "apiVersion": ClusterProfile::api_version(&()),
            "kind": ClusterProfile::kind(&()),
            "metadata": {"name": want.name, "namespace": ctx.namespace},
            "status": want.status,
        });
        apply::apply_status(&api, FIELD_MANAGER, &want.name, &body)
            .await
            .map_err(ApiFailure::about(
                mc.as_ref(),
                "writing its ClusterProfile's status",
            ))?;
    }
    Ok(recheck(Duration::from_secs(600)))
}

/// Deletes `mc`'s profile, if it is there and is its.
async fn remove(ctx: &Ctx, mc: &ManagedCluster) {
    let name = mc.name_any();
    let Some(p) = ctx
        .profiles
        .get(&ObjectRef::new(&name).within(&ctx.namespace))
    else {
        return;
    };
    if !belongs_to(&p, mc) {
        return;
    }
    delete(ctx, &name).await;
}

async fn delete(ctx: &Ctx, name: &str) {
    let api: Api<ClusterProfile> = Api::namespaced(ctx.rt.client.clone(), &ctx.namespace);
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => {
            info!(namespace = %ctx.namespace, name, "deleted the ClusterProfile of a deregistered cluster")
        }
        Err(e) if api_code(&e) == Some(404) => {}
        Err(e) => {
            warn!(namespace = %ctx.namespace, name, error = %e, "cannot delete the ClusterProfile of a deregistered cluster")
        }
    }
}

/// Deletes our profiles whose cluster is gone.
async fn sweep(ctx: &Ctx, clusters: &[Arc<ManagedCluster>]) {
    for p in ctx.profiles.state() {
        if p.namespace().as_deref() != Some(ctx.namespace.as_str())
            || p.labels().get(CLUSTER_MANAGER_LABEL).map(String::as_str) != Some(CLUSTER_MANAGER)
        {
            continue;
        }
        let live = clusters.iter().any(|mc| belongs_to(&p, mc));
        if !live {
            delete(ctx, &p.name_any()).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn mc(ready: Option<&str>) -> ManagedCluster {
        let mut v = json!({
            "apiVersion": "clusters.clusternet.io/v1beta1", "kind": "ManagedCluster",
            "metadata": {"name": "child1", "namespace": "clusternet-abcde",
                "labels": {"topology.kubernetes.io/region": "eu-west"}},
            "spec": {"clusterId": "id-1", "syncMode": "Pull"},
            "status": {"k8sVersion": "v1.36.3", "platform": "linux/amd64",
                "capacity": {"cpu": "8", "memory": "32Gi"}, "allocatable": {"cpu": "7500m"},
                "clusterProperties": [{"name": "zone.example.com", "value": "eu-1"},
                    {"name": "cluster.clusterset.k8s.io", "value": "someone-elses"}]}
        });
        if let Some(r) = ready {
            v["status"]["conditions"] = json!([{"type": "Ready", "status": r,
                "reason": "ManagedClusterReady", "message": "managed cluster is ready.",
                "lastTransitionTime": "2026-01-01T00:00:00Z"}]);
        }
        serde_json::from_value(v).expect("a ManagedCluster")
    }

    fn prop<'a>(d: &'a Desired, name: &str) -> Option<&'a str> {
        d.status
            .properties
            .iter()
            .find(|p| p.name == name)
            .map(|p| p.value.as_str())
    }

    #[test]
    fn a_cluster_is_published_with_the_keps_names() {
        let t0 = Timestamp::from_second(1_000).expect("time");
        let d = desired(&mc(Some("True")), "fleet", None, None, t0);
        assert_eq!(d.name, "child1");
        assert_eq!(d.spec.cluster_manager.name, "clusternet");
        assert_eq!(d.labels[CLUSTER_MANAGER_LABEL], "clusternet");
        assert_eq!(d.status.version.kubernetes, "v1.36.3");
        assert_eq!(prop(&d, PROPERTY_CLUSTER_ID), Some("id-1"));
        assert_eq!(prop(&d, PROPERTY_CLUSTER_SET), Some("fleet"));
        assert_eq!(prop(&d, "topology.kubernetes.io/region"), Some("eu-west"));
        assert_eq!(prop(&d, "resources.clusternet.io/capacity-cpu"), Some("8"));
        assert_eq!(
            prop(&d, "resources.clusternet.io/allocatable-cpu"),
            Some("7500m")
        );
        assert_eq!(prop(&d, "clusternet.io/sync-mode"), Some("Pull"));
        assert_eq!(
            prop(&d, "zone.example.com"),
            Some("eu-1"),
            "the child's own"
        );
        let healthy = &d.status.conditions[0];
        assert_eq!(
            (healthy.type_.as_str(), healthy.status.as_str()),
            ("ControlPlaneHealthy", "True")
        );
        assert_eq!(d.status.conditions[1].type_, "Joined");
    }

    #[test]
    fn nothing_changes_on_a_heartbeat_and_health_follows_ready() {
        let t0 = Timestamp::from_second(1_000).expect("time");
        let t1 = Timestamp::from_second(2_000).expect("time");
        let first = desired(&mc(Some("True")), "fleet", None, None, t0);
        let again = desired(&mc(Some("True")), "fleet", None, Some(&first.status), t1);
        assert_eq!(first, again, "the same cluster later: the same profile");
        let lost = desired(&mc(Some("Unknown")), "fleet", None, Some(&first.status), t1);
        let c = &lost.status.conditions[0];
        assert_eq!(
            (c.status.as_str(), &c.last_transition_time),
            ("Unknown", &Time(t1))
        );
        // the properties did not change: their times stay
        assert_eq!(lost.status.properties, first.status.properties);
        let never = desired(&mc(None), "fleet", None, None, t0);
        assert_eq!(never.status.conditions[0].status, "Unknown");
    }

    #[test]
    fn the_access_provider_is_the_hubs_proxy_of_the_cluster() {
        let access = Access {
            server: "https://parent.example:6443/".into(),
            ca_pem: Some("-----BEGIN CERTIFICATE-----\n".into()),
        };
        let d = desired(
            &mc(Some("True")),
            "fleet",
            Some(&access),
            None,
            Timestamp::UNIX_EPOCH,
        );
        let [p] = d.status.access_providers.as_slice() else {
            panic!("one access provider: {:?}", d.status.access_providers);
        };
        assert_eq!(p.name, "clusternet");
        assert_eq!(
            p.cluster.server,
            "https://parent.example:6443/apis/proxies.clusternet.io/v1alpha1/sockets/id-1/proxy/direct"
        );
        assert!(p.cluster.certificate_authority_data.is_some());
        assert_eq!(p.cluster.extensions[0].name, EXEC_EXTENSION);
        assert_eq!(p.cluster.extensions[0].extension["clusterID"], "id-1");
        // a cluster ID that cannot be one path segment gets no provider
        let mut odd = mc(None);
        odd.spec.cluster_id = "../x".into();
        let d = desired(&odd, "fleet", Some(&access), None, Timestamp::UNIX_EPOCH);
        assert!(d.status.access_providers.is_empty());
    }

    #[test]
    fn a_profile_of_the_same_name_may_belong_to_another_cluster() {
        let d = desired(
            &mc(Some("True")),
            "fleet",
            None,
            None,
            Timestamp::UNIX_EPOCH,
        );
        let mut p = ClusterProfile::new(&d.name, d.spec.clone());
        p.metadata.labels = Some(d.labels.clone());
        assert!(belongs_to(&p, &mc(None)));
        p.labels_mut()
            .insert(known::CLUSTER_ID_LABEL.into(), "another".into());
        assert!(!belongs_to(&p, &mc(None)));
        p.labels_mut().remove(CLUSTER_MANAGER_LABEL);
        assert!(!belongs_to(&p, &mc(None)));
    }
}
