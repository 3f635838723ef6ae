//! The agent's Pull deployer (docs/spec/agent.md §3, deployer.md §9): when this agent is the
//! deployer (Pull, or Dual without AppPusher) it watches the Descriptions of its dedicated
//! namespace in the parent and applies them to the child with the child's app-deployer
//! credentials (falling back to its own when those are not installed).

use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::Resource;
use kube::api::Api;
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::reflector::{self, reflector};
use kube::runtime::{WatchStreamExt, watcher};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::registration::Registration;
use crate::apis::known;
use crate::apis::{Description, HelmRelease};
use crate::deployer::description::{self, DeployError};
use crate::deployer::generic::ChildCluster;
use crate::deployer::helm::{HelmDeployError, HelmDeployer, Target};
use crate::deployer::who;
use crate::helm::cli::Helm;
use crate::runtime::controller::Backoff;
use crate::runtime::events::Events;
use crate::runtime::{self, Runtime};

pub const FIELD_MANAGER: &str = "clusternet/agent/deployer";

struct Pull {
    events: Events,
    child: Arc<ChildCluster>,
    api: Api<Description>,
    store: kube::runtime::reflector::Store<Description>,
    backoff: Backoff,
    resync: std::time::Duration,
}

/// The connection settings objects are applied with: the `clusternet-app-deployer` token when
/// present, else the agent's own.
async fn child_config(rt: &Runtime) -> Option<kube::Config> {
    let secrets: Api<Secret> = Api::namespaced(rt.client.clone(), &rt.config.system_namespace);
    if let Ok(Some(s)) = secrets.get_opt(known::CLUSTERNET_APP_SA).await {
        let data = s.data.unwrap_or_default();
        if let (Some(token), Some(ca)) = (data.get("token"), data.get("ca.crt")) {
            match runtime::token_config(
                &rt.cluster_url,
                &String::from_utf8_lossy(&token.0),
                Some(&ca.0),
            ) {
                Ok(c) => return Some(c),
                Err(e) => {
                    warn!(error = %e, "cannot use the clusternet-app-deployer credentials; deploying with the agent's own")
                }
            }
        }
    }
    match runtime::kube_config_for(&rt.config).await {
        Ok(c) => Some(c),
        Err(e) => {
            warn!(error = %e, "cannot read the agent's own connection settings");
            None
        }
    }
}

pub async fn run(rt: &Runtime, reg: &Registration, stop: CancellationToken) {
    if !who::agent_deploys(
        &rt.config.cluster_sync_mode,
        rt.config.gate(known::APP_PUSHER),
    ) {
        info!(mode = %rt.config.cluster_sync_mode, "the parent deploys into this cluster (Push/Dual with AppPusher)");
        return;
    }
    info!(namespace = %reg.namespace, "deploying Descriptions into this cluster (Pull)");
    let (touched, heard) = tokio::sync::mpsc::unbounded_channel();
    let config = child_config(rt).await;
    let client = config
        .clone()
        .and_then(|c| kube::Client::try_from(c).ok())
        .unwrap_or_else(|| rt.client.clone());
    // Helm charts: the same child, the same credentials, through helm
    let helm = tokio::spawn(run_helm(
        rt.clone(),
        reg.parent.clone(),
        reg.namespace.clone(),
        config,
        stop.clone(),
    ));
    let child = Arc::new(ChildCluster::new(
        client,
        FIELD_MANAGER,
        reg.cluster_id.clone(),
        rt.config.retain_managers.clone(),
        Some(touched),
    ));
    let api: Api<Description> = Api::namespaced(reg.parent.clone(), &reg.namespace);
    // every Description of this cluster's namespace: objects two of them share stay until both let
    // go. Held without managedFields (often as large as the rest of a Description, and read by
    // nothing here), so a namespace of a thousand costs what their content does (benches/agent_flood.rs)
    let (store, writer) = reflector::store::<Description>();
    let descriptions = reflector(
        writer,
        watcher(api.clone(), watcher::Config::default())
            .backoff(runtime::cache::watch_backoff())
            .modify(|d| d.meta_mut().managed_fields = None),
    )
    .applied_objects();
    let controller = Controller::for_stream(descriptions, store.clone())
        .trigger_backoff(runtime::cache::watch_backoff());
    let backoff = Backoff::default();
    let ctx = Arc::new(Pull {
        // events about Descriptions go to the parent, as upstream's agent records them
        events: Events::new(reg.parent.clone(), "clusternet-agent"),
        child,
        api,
        store,
        backoff: backoff.clone(),
        resync: rt.config.drift_resync,
    });
    controller
        .with_config(controller::Config::default().concurrency(4))
        // a change to an applied object in the child looks at its Description again
        .reconcile_on(crate::deployer::generic::touched_stream(heard))
        .graceful_shutdown_on(async move { stop.cancelled().await })
        .run(
            |desc, ctx: Arc<Pull>| async move {
                let key = kube::ResourceExt::name_any(desc.as_ref());
                let r = description::reconcile(
                    &ctx.child,
                    &ctx.api,
                    desc,
                    &ctx.store.state(),
                    &ctx.events,
                    ctx.resync,
                )
                .await;
                if r.is_ok() {
                    ctx.backoff.succeeded(&key);
                }
                r
            },
            move |desc, err: &DeployError, _| {
                let (wait, failures) = backoff.failed(&kube::ResourceExt::name_any(desc.as_ref()));
                warn!(description = %kube::ResourceExt::name_any(desc.as_ref()), error = %err, failures, retry_in = ?wait, "deploying failed; retrying");
                Action::requeue(wait)
            },
            ctx,
        )
        .for_each(|_| async {})
        .await;
    let _ = helm.await;
}

/// The Pull side of Helm (deployer.md §7.3): every HelmRelease of this cluster's namespace in
/// the parent, installed into the child with helm.
async fn run_helm(
    rt: Runtime,
    parent: kube::Client,
    namespace: String,
    config: Option<kube::Config>,
    stop: CancellationToken,
) {
    let Some(target) = config.and_then(|c| match Target::new(c) {
        Ok(t) => Some(t),
        Err(e) => {
            warn!(error = %e, "no connection settings for helm: HelmReleases are not deployed");
            None
        }
    }) else {
        return;
    };
    let deployer = Arc::new(HelmDeployer::new(
        Helm::in_temp_dir(rt.config.helm_binary.clone()),
        parent.clone(),
        Events::new(parent.clone(), "clusternet-agent"),
        FIELD_MANAGER,
    ));
    let target = Arc::new(target);
    let api: Api<HelmRelease> = Api::namespaced(parent, &namespace);
    let backoff = Backoff::default();
    let on_error = backoff.clone();
    Controller::new(api, watcher::Config::default())
        .trigger_backoff(runtime::cache::watch_backoff())
        .with_config(controller::Config::default().concurrency(4))
        .graceful_shutdown_on(async move { stop.cancelled().await })
        .run(
            move |hr, _: Arc<()>| {
                let (deployer, target, backoff) = (deployer.clone(), target.clone(), backoff.clone());
                async move {
                    let key = kube::ResourceExt::name_any(hr.as_ref());
                    let r = deployer.reconcile(&target, hr).await;
                    if r.is_ok() {
                        backoff.succeeded(&key);
                    }
                    r
                }
            },
            move |hr, err: &HelmDeployError, _| {
                let (wait, failures) = on_error.failed(&kube::ResourceExt::name_any(hr.as_ref()));
                warn!(helmrelease = %kube::ResourceExt::name_any(hr.as_ref()), error = %err, failures, retry_in = ?wait, "helm release failed; retrying");
                Action::requeue(wait)
            },
            Arc::new(()),
        )
        .for_each(|_| async {})
        .await;
}
