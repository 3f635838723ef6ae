//! The agent's Pull deployer (docs/spec/agent.md §3, deployer.md §9): when this agent is the
//! deployer (Pull, or Dual without AppPusher) it watches the Descriptions of its dedicated
//! namespace in the parent and applies them to the child with the child's app-deployer
//! credentials (falling back to its own when those are not installed).

use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::Resource;
use kube::api::Api;
use kube::runtime::reflector::{self, ObjectRef, reflector};
use kube::runtime::{WatchStreamExt, watcher};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::registration::Registration;
use crate::apis::known;
use crate::apis::{Description, HelmRelease};
use crate::deployer::description;
use crate::deployer::generic::ChildCluster;
use crate::deployer::helm::{HelmDeployer, Target};
use crate::deployer::who;
use crate::helm::cli::Helm;
use crate::runtime::controller::{Controller, Source};
use crate::runtime::events::Events;
use crate::runtime::{self, Runtime};

pub const FIELD_MANAGER: &str = "clusternet/agent/deployer";

struct Pull {
    events: Events,
    child: Arc<ChildCluster>,
    api: Api<Description>,
    store: kube::runtime::reflector::Store<Description>,
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
    .applied_objects()
    .filter_map(|d| futures::future::ready(d.ok().map(|d| ObjectRef::from_obj(&d))));
    let ctx = Arc::new(Pull {
        // events about Descriptions go to the parent, as upstream's agent records them
        events: Events::new(reg.parent.clone(), "clusternet-agent"),
        child,
        api,
        store: store.clone(),
        resync: rt.config.drift_resync,
    });
    Controller::on("description-pull", Source::store(store, descriptions))
        // a change to an applied object in the child looks at its Description again
        .triggered_by(crate::deployer::generic::touched_stream(heard))
        .run(stop, move |desc| {
            let ctx = ctx.clone();
            async move {
                description::reconcile(
                    &ctx.child,
                    &ctx.api,
                    desc,
                    &ctx.store.state(),
                    &ctx.events,
                    ctx.resync,
                )
                .await
            }
        })
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
    let (store, writer) = reflector::store::<HelmRelease>();
    let releases = reflector(
        writer,
        watcher(api, watcher::Config::default()).backoff(runtime::cache::watch_backoff()),
    )
    .applied_objects()
    .filter_map(|r| futures::future::ready(r.ok().map(|r| ObjectRef::from_obj(&r))));
    Controller::on("helmrelease-pull", Source::store(store, releases))
        .run(stop, move |hr| {
            let (deployer, target) = (deployer.clone(), target.clone());
            async move { deployer.reconcile(&target, hr).await }
        })
        .await;
}
