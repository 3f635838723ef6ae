//! The parent's side of deploying (docs/spec/deployer.md §9, §11): for clusters in Push mode, or
//! Dual with AppPusher, the controller applies Descriptions to the child with the child's
//! `child-cluster-deployer` credentials; for a cluster that no longer exists, a deleted
//! Description's finalizer is released without touching the child (a cluster that is merely
//! down keeps it until it is back, so nothing is left behind in it).
//!
//! How the child is reached (deployer.md §9): a cluster whose agent holds a tunnel
//! (`status.useSocket`) is pushed to through the parent's socket proxy while the parent serves
//! `proxies.clusternet.io` (the hub), so children behind NAT work; otherwise directly at the
//! Secret's `apiserver-advertise-url` with its CA.
//!
//! A push that failed is tried again as soon as its cluster reports in (any change of its
//! ManagedCluster: an agent back after a restart, the next heartbeat after the hub's restart),
//! besides its backoff: the backoff grew while the cluster was away, and waiting it out would keep
//! a returning child without its objects for minutes.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;

use crate::runtime::controller::Action;
use crate::runtime::controller::Controller;
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};
use tokio_util::sync::CancellationToken;
use tracing::info;

use super::description::{self, DeployError};
use super::generic::{ChildCache, ChildCluster};
use super::helm::{HelmDeployError, HelmDeployer, Target};
use super::who;
use crate::apis::known;
use crate::apis::{Description, HelmRelease, ManagedCluster};
use crate::helm::cli::Helm;
use crate::runtime::cache::{Index, Shared};
use crate::runtime::child::ProxyAvailability;
use crate::runtime::controller::ReconcileError;
use crate::runtime::events::Events;
use crate::runtime::{self, Runtime};

pub const FIELD_MANAGER: &str = "clusternet/controller/deployer";

#[derive(Debug, thiserror::Error)]
pub enum PushError {
    #[error(transparent)]
    Deploy(#[from] DeployError),
    #[error(transparent)]
    Helm(#[from] HelmDeployError),
    #[error("Description {desc}: ManagedClusterNotFound: {message}")]
    Cluster { desc: String, message: String },
    #[error("Description {desc}: child credentials: {message}")]
    Credentials { desc: String, message: String },
}

impl ReconcileError for PushError {
    fn metric_label(&self) -> &'static str {
        match self {
            PushError::Deploy(e) => e.metric_label(),
            PushError::Helm(e) => e.metric_label(),
            PushError::Cluster { .. } => "cluster",
            PushError::Credentials { .. } => "credentials",
        }
    }
}

struct Ctx {
    rt: Runtime,
    events: Events,
    /// By namespace.
    clusters: Index<ManagedCluster>,
    /// By namespace.
    descriptions: Index<Description>,
    /// Every cluster's `child-cluster-deployer` Secret (a watch of that name only).
    secrets: Store<Secret>,
    children: ChildCache,
    proxy: ProxyAvailability,
    /// This process's parent connection settings, the base of proxied child clients.
    parent_config: tokio::sync::OnceCell<kube::Config>,
}

pub async fn run(rt: Runtime, stop: CancellationToken) {
    let descs = rt.cache.watch::<Description>();
    let (clusters, secrets) = cluster_watches(&rt);
    let (touched, heard) = tokio::sync::mpsc::unbounded_channel();
    let children = ChildCache::new(Some(touched), rt.config.retain_managers.clone());
    let ctx = Arc::new(Ctx {
        events: Events::new(
            rt.events_client.clone(),
            known::CLUSTERNET_CONTROLLER_MANAGER_NAME,
        ),
        rt,
        clusters: clusters.by_namespace(),
        descriptions: descs.by_namespace(),
        secrets: secrets.store.clone(),
        children,
        proxy: ProxyAvailability::default(),
        parent_config: tokio::sync::OnceCell::new(),
    });
    // a change to an applied object in a child looks at its Description again, and a cluster
    // that reports in gets its failed pushes tried again
    let failed = Failed::default();
    let again = failed.clone();
    let reported_in = clusters
        .subscribe()
        .flat_map(move |mc| futures::stream::iter(again.take(&mc.namespace().unwrap_or_default())));
    Controller::new("description-push", &descs)
        .concurrency(8)
        .after([clusters.listed(), secrets.listed()])
        .triggered_by(super::generic::touched_stream(heard))
        .triggered_by(reported_in)
        .run(stop, move |desc| {
            let ctx = ctx.clone();
            let failed = failed.clone();
            async move {
                let (ns, name) = (desc.namespace().unwrap_or_default(), desc.name_any());
                let r = reconcile(&ctx, desc).await;
                failed.record(&ns, &name, r.is_err());
                r
            }
        })
        .await;
}

/// The Descriptions whose last push failed, per cluster namespace.
#[derive(Default, Clone)]
struct Failed(Arc<Mutex<BTreeMap<String, BTreeSet<String>>>>);

impl Failed {
    fn record(&self, ns: &str, name: &str, failed: bool) {
        let mut m = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if failed {
            m.entry(ns.to_string())
                .or_default()
                .insert(name.to_string());
        } else if let Some(names) = m.get_mut(ns) {
            names.remove(name);
            if names.is_empty() {
                m.remove(ns);
            }
        }
    }

    /// The failed ones of namespace `ns`, forgotten until they fail again.
    fn take(&self, ns: &str) -> Vec<ObjectRef<Description>> {
        let mut m = self.0.lock().unwrap_or_else(|p| p.into_inner());
        m.remove(ns)
            .unwrap_or_default()
            .into_iter()
            .map(|name| ObjectRef::new(&name).within(ns))
            .collect()
    }
}

/// The ManagedClusters and their child-cluster Secrets (the credentials a push uses).
fn cluster_watches(rt: &Runtime) -> (Shared<ManagedCluster>, Shared<Secret>) {
    let clusters = rt.cache.watch::<ManagedCluster>();
    let secrets = rt
        .cache
        .watch_named::<Secret>(known::CHILD_CLUSTER_SECRET_NAME);
    (clusters, secrets)
}

fn cluster_of<K: Resource>(
    clusters: &Index<ManagedCluster>,
    obj: &K,
) -> Option<Arc<ManagedCluster>> {
    let ns = obj.namespace().unwrap_or_default();
    let id = obj.labels().get(known::CLUSTER_ID_LABEL).cloned();
    clusters
        .get(&ns)
        .into_iter()
        .find(|mc| id.as_ref().is_none_or(|id| *id == mc.spec.cluster_id))
}

/// What the parent does with a Description, from its cluster as the cache has it.
#[derive(Debug, PartialEq)]
pub enum Push {
    /// Deleted, and its cluster is gone: release the finalizer without touching the child.
    Release,
    /// Nothing to do now (already released, or the agent deploys it): look again after this
    /// long, or on a change.
    Wait(Option<Duration>),
    /// The parent deploys it to the child.
    Deploy,
}

/// A child that is down keeps a deleted Description's finalizer until it is back (so nothing is
/// left behind); only a cluster that no longer exists releases it without touching the child.
/// `Err` when the Description has no cluster, or the cluster's mode is undecided.
pub fn plan_push<K: Resource>(desc: &K, mc: Option<&ManagedCluster>) -> Result<Push, String> {
    let gone = mc.is_none_or(|mc| mc.metadata.deletion_timestamp.is_some());
    if desc.meta().deletion_timestamp.is_some() && gone {
        return Ok(
            if desc.finalizers().iter().any(|f| f == known::APP_FINALIZER) {
                Push::Release
            } else {
                Push::Wait(None)
            },
        );
    }
    let Some(mc) = mc else {
        return Err(format!(
            "no ManagedCluster in namespace {}",
            desc.namespace().unwrap_or_default()
        ));
    };
    Ok(if who::parent_deploys(mc)? {
        Push::Deploy
    } else {
        Push::Wait(Some(Duration::from_secs(300)))
    })
}

async fn reconcile(ctx: &Ctx, desc: Arc<Description>) -> Result<Action, PushError> {
    let ns = desc.namespace().unwrap_or_default();
    let key = format!("{ns}/{}", desc.name_any());
    let api: Api<Description> = Api::namespaced(ctx.rt.client.clone(), &ns);
    let mc = cluster_of(&ctx.clusters, desc.as_ref());
    let plan = plan_push(desc.as_ref(), mc.as_deref()).map_err(|message| PushError::Cluster {
        desc: key.clone(),
        message,
    })?;
    match (plan, mc) {
        (Push::Release, _) => {
            info!(description = %key, "cluster gone: releasing without touching the child");
            description::release_finalizer(&api, &desc).await?;
            Ok(Action::await_change())
        }
        (Push::Wait(None), _) => Ok(Action::await_change()),
        (Push::Wait(Some(after)), _) => Ok(Action::requeue(after)),
        (Push::Deploy, Some(mc)) => {
            let child = child_client(ctx, &mc, &key).await?;
            let siblings = ctx.descriptions.get(&ns);
            Ok(description::reconcile(
                &child,
                &api,
                desc,
                &siblings,
                &ctx.events,
                ctx.rt.config.drift_resync,
            )
            .await?)
        }
        (Push::Deploy, None) => Ok(Action::await_change()),
    }
}

/// How the parent reaches `mc`'s child with its `child-cluster-deployer` credentials: through
/// the parent's socket proxy when the agent holds a tunnel and the hub serves it, else directly.
/// The fingerprint changes when the credentials or the way change (cached clients are rebuilt).
async fn child_config(
    rt: &Runtime,
    secrets: &Store<Secret>,
    proxy: &ProxyAvailability,
    parent_config: &tokio::sync::OnceCell<kube::Config>,
    mc: &ManagedCluster,
) -> Result<(kube::Config, String), String> {
    let ns = mc.namespace().unwrap_or_default();
    // from the cache; one it has not seen yet is looked up at the API server
    let cached = secrets.get(&ObjectRef::new(known::CHILD_CLUSTER_SECRET_NAME).within(&ns));
    let secret = match cached {
        Some(s) => Some(s),
        None => Api::<Secret>::namespaced(rt.client.clone(), &ns)
            .get_opt(known::CHILD_CLUSTER_SECRET_NAME)
            .await
            .map_err(|e| e.to_string())?
            .map(Arc::new),
    }
    .ok_or_else(|| {
        format!(
            "Secret {ns}/{} is not published yet",
            known::CHILD_CLUSTER_SECRET_NAME
        )
    })?;
    let data = secret.data.clone().unwrap_or_default();
    let get = |k: &str| data.get(k).map(|b| b.0.clone()).unwrap_or_default();
    let (url, token, ca) = (
        String::from_utf8_lossy(&get(known::CLUSTER_API_SERVER_URL_KEY)).to_string(),
        String::from_utf8_lossy(&get("token")).to_string(),
        get("ca.crt"),
    );
    let id = mc.spec.cluster_id.clone();
    let use_socket = mc.status.as_ref().is_some_and(|s| s.use_socket);
    let rv = secret.resource_version().unwrap_or_default();
    if use_socket && proxy.available(&rt.client).await {
        let parent = parent_config
            .get_or_try_init(|| runtime::kube_config_for(&rt.config))
            .await
            .map_err(|e| e.to_string())?;
        let cfg =
            runtime::child::proxied_child_config(parent, &id, &token).map_err(|e| e.to_string())?;
        // the mode is part of the fingerprint: the client is rebuilt when the hub comes or goes
        Ok((cfg, format!("socket-proxy|{rv}")))
    } else {
        let cfg = runtime::token_config(&url, &token, Some(&ca)).map_err(|e| e.to_string())?;
        Ok((cfg, format!("{url}|{rv}")))
    }
}

/// The deployer for `mc`'s child (see [`child_config`]).
async fn child_client(
    ctx: &Ctx,
    mc: &ManagedCluster,
    key: &str,
) -> Result<Arc<ChildCluster>, PushError> {
    let credentials = |message: String| PushError::Credentials {
        desc: key.to_string(),
        message,
    };
    let (cfg, fingerprint) =
        child_config(&ctx.rt, &ctx.secrets, &ctx.proxy, &ctx.parent_config, mc)
            .await
            .map_err(credentials)?;
    let id = mc.spec.cluster_id.clone();
    let build = || {
        info!(cluster_id = %id, apiserver = %cfg.cluster_url, "pushing to the child");
        kube::Client::try_from(cfg.clone()).map_err(|e| e.to_string())
    };
    ctx.children
        .get_or_build(&id, &fingerprint, build, FIELD_MANAGER)
        .await
        .map_err(credentials)
}

/// The Push side of Helm (deployer.md §7.3, §9): the HelmReleases of clusters the parent
/// deploys to, installed into their children with helm; a deleted one of a cluster that no
/// longer exists lets go without touching the child.
pub async fn run_helm(rt: Runtime, stop: CancellationToken) {
    let releases = rt.cache.watch::<HelmRelease>();
    let (clusters, secrets) = cluster_watches(&rt);
    let ctx = Arc::new(HelmCtx {
        deployer: HelmDeployer::new(
            Helm::in_temp_dir(rt.config.helm_binary.clone()),
            rt.client.clone(),
            Events::new(
                rt.events_client.clone(),
                known::CLUSTERNET_CONTROLLER_MANAGER_NAME,
            ),
            FIELD_MANAGER,
        ),
        rt,
        clusters: clusters.by_namespace(),
        secrets: secrets.store.clone(),
        proxy: ProxyAvailability::default(),
        parent_config: tokio::sync::OnceCell::new(),
    });
    Controller::new("helmrelease-push", &releases)
        .after([clusters.listed(), secrets.listed()])
        .run(stop, move |hr| {
            let ctx = ctx.clone();
            async move { reconcile_helm(&ctx, hr).await }
        })
        .await;
}

struct HelmCtx {
    rt: Runtime,
    deployer: HelmDeployer,
    /// By namespace.
    clusters: Index<ManagedCluster>,
    secrets: Store<Secret>,
    proxy: ProxyAvailability,
    parent_config: tokio::sync::OnceCell<kube::Config>,
}

async fn reconcile_helm(ctx: &HelmCtx, hr: Arc<HelmRelease>) -> Result<Action, PushError> {
    let key = format!("{}/{}", hr.namespace().unwrap_or_default(), hr.name_any());
    let mc = cluster_of(&ctx.clusters, hr.as_ref());
    let plan = plan_push(hr.as_ref(), mc.as_deref()).map_err(|message| PushError::Cluster {
        desc: key.clone(),
        message,
    })?;
    match (plan, mc) {
        (Push::Release, _) => {
            info!(helmrelease = %key, "cluster gone: releasing without touching the child");
            let api: Api<HelmRelease> =
                Api::namespaced(ctx.rt.client.clone(), &hr.namespace().unwrap_or_default());
            runtime::apply::release_finalizer(&api, hr.as_ref(), known::APP_FINALIZER)
                .await
                .map_err(|e| PushError::Credentials {
                    desc: key,
                    message: e.to_string(),
                })?;
            Ok(Action::await_change())
        }
        (Push::Wait(None), _) | (Push::Deploy, None) => Ok(Action::await_change()),
        (Push::Wait(Some(after)), _) => Ok(Action::requeue(after)),
        (Push::Deploy, Some(mc)) => {
            let (cfg, _) = child_config(&ctx.rt, &ctx.secrets, &ctx.proxy, &ctx.parent_config, &mc)
                .await
                .map_err(|message| PushError::Credentials {
                    desc: key.clone(),
                    message,
                })?;
            let target = Target::new(cfg).map_err(|message| PushError::Credentials {
                desc: key.clone(),
                message,
            })?;
            Ok(ctx.deployer.reconcile(&target, hr).await?)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_cluster_reporting_in_retries_its_failed_pushes_once() {
        let f = Failed::default();
        f.record("clusternet-a", "d1", true);
        f.record("clusternet-a", "d2", true);
        f.record("clusternet-a", "d2", false);
        f.record("clusternet-b", "d3", true);
        let again = f.take("clusternet-a");
        assert_eq!(again, vec![ObjectRef::new("d1").within("clusternet-a")]);
        // taken: the next report retries nothing until it fails again
        assert!(f.take("clusternet-a").is_empty());
        assert_eq!(f.take("clusternet-b").len(), 1);
    }

    fn desc(deleting: bool) -> Description {
        let mut d: Description = serde_json::from_value(json!({
            "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Description",
            "metadata": {"name": "d", "namespace": "clusternet-a",
                "finalizers": [known::APP_FINALIZER]},
            "spec": {"deployer": "Generic"}
        }))
        .expect("a Description");
        if deleting {
            d.metadata.deletion_timestamp =
                Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
                ));
        }
        d
    }

    fn cluster(mode: &str, pusher: Option<bool>) -> ManagedCluster {
        serde_json::from_value(json!({
            "apiVersion": "clusters.clusternet.io/v1beta1", "kind": "ManagedCluster",
            "metadata": {"name": "a", "namespace": "clusternet-a"},
            "spec": {"clusterId": "id-a", "syncMode": mode},
            "status": pusher.map(|p| json!({"appPusher": p})).unwrap_or(json!({}))
        }))
        .expect("a ManagedCluster")
    }

    #[test]
    fn the_parent_pushes_only_to_clusters_in_push_mode() {
        assert_eq!(
            plan_push(&desc(false), Some(&cluster("Push", Some(true)))),
            Ok(Push::Deploy)
        );
        assert_eq!(
            plan_push(&desc(false), Some(&cluster("Dual", Some(true)))),
            Ok(Push::Deploy)
        );
        assert_eq!(
            plan_push(&desc(false), Some(&cluster("Pull", None))),
            Ok(Push::Wait(Some(Duration::from_secs(300))))
        );
        assert!(plan_push(&desc(false), None).is_err());
    }

    #[test]
    fn a_deleted_description_of_a_gone_cluster_is_released_and_of_a_live_one_offloaded() {
        assert_eq!(plan_push(&desc(true), None), Ok(Push::Release));
        let mut going = cluster("Push", Some(true));
        going.metadata.deletion_timestamp = desc(true).metadata.deletion_timestamp;
        assert_eq!(plan_push(&desc(true), Some(&going)), Ok(Push::Release));
        let mut released = desc(true);
        released.metadata.finalizers = None;
        assert_eq!(plan_push(&released, None), Ok(Push::Wait(None)));
        // the cluster is still there (maybe down): the deployer removes the objects first
        assert_eq!(
            plan_push(&desc(true), Some(&cluster("Push", Some(true)))),
            Ok(Push::Deploy)
        );
    }
}
