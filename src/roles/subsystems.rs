//! The subsystems behind each role, in one table: which run on every replica, which only on the
//! leader, and what each one's gate or flag is.

use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::config::Role;
use crate::runtime::Runtime;
use crate::runtime::leader::Leadership;

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("{0}")]
    Config(String),
}

/// Roles with work that only the leader may do (the hub serves on every replica, as upstream).
pub fn has_leader_work(role: Role) -> bool {
    !matches!(role, Role::Hub)
}

/// Roles whose leader work goes on while the API server holding their Lease does not answer.
/// The agent's Lease lives in the child: when the child's API server stalls, giving the work up
/// would stop the heartbeat and close the tunnel, and the parent would learn of the stall only from
/// silence, a minute later (#44). Going on, the agent reports the child unreachable at once and
/// keeps the tunnel; it stops when the child answers with another holder.
pub fn leads_while_lease_unreachable(role: Role) -> bool {
    matches!(role, Role::Agent)
}

/// Starts what runs on every replica of a role: informers (so a standby takes over warm).
pub async fn start_always_on(rt: &Runtime, role: Role) -> Result<(), StartError> {
    match role {
        Role::Agent => {
            crate::agent::registration::check_settings(rt)
                .map_err(|e| StartError::Config(e.to_string()))?;
            // the Lease (cluster ID) and the stored credentials live in the system namespace
            crate::runtime::ensure_namespace(&rt.client, &rt.config.system_namespace).await;
        }
        Role::Controller => {
            // Manifests live there; users should not have to create it first
            crate::runtime::ensure_namespace(&rt.client, &rt.config.reserved_namespace).await;
            // warm caches on every replica so a new leader starts at once
            rt.cache.watch::<crate::apis::ClusterRegistrationRequest>();
            rt.cache.watch::<crate::apis::ManagedCluster>();
            if rt.config.gate(crate::apis::known::FEED_INVENTORY)
                || rt.config.gate(crate::apis::known::DEPLOYER)
            {
                rt.cache.watch::<crate::apis::Subscription>();
                rt.cache.watch::<crate::apis::Manifest>();
            }
            if rt.config.gate(crate::apis::known::DEPLOYER) {
                rt.cache.watch::<crate::apis::Base>();
                rt.cache.watch::<crate::apis::Description>();
                rt.cache.watch::<crate::apis::Localization>();
                rt.cache.watch::<crate::apis::Globalization>();
                rt.cache.watch::<crate::apis::HelmChart>();
                rt.cache.watch::<crate::apis::HelmRelease>();
                crate::pipeline::revision::watch_revisions(rt);
                rt.cache.watch::<crate::apis::RolloutStrategy>();
            }
        }
        Role::Scheduler => {
            rt.cache.watch::<crate::apis::Subscription>();
            rt.cache.watch::<crate::apis::ManagedCluster>();
            rt.cache.watch::<crate::apis::FeedInventory>();
        }
        Role::Hub => {
            // the hub finds clusters by ID for every proxied request
            rt.cache.watch::<crate::apis::ManagedCluster>();
            crate::hub::start(rt)
                .await
                .map_err(|e| StartError::Config(e.to_string()))?;
        }
    }
    Ok(())
}

/// Leader-only work of a role; returns when `token` is cancelled.
pub async fn lead(rt: &Runtime, role: Role, leadership: Leadership, token: CancellationToken) {
    info!(%role, lease_uid = %leadership.lease_uid, "leading");
    match role {
        Role::Agent => crate::agent::lead(rt, &leadership.lease_uid, token).await,
        Role::Controller => {
            let mut tasks = tokio::task::JoinSet::new();
            type Start = fn(Runtime, CancellationToken) -> futures::future::BoxFuture<'static, ()>;
            let mut spawn = |f: Start| {
                tasks.spawn(f(rt.clone(), token.clone()));
            };
            if rt.config.gate(crate::apis::known::FEED_INVENTORY) {
                spawn(|rt, t| Box::pin(crate::pipeline::feedinventory::run(rt, t)));
            }
            if rt.config.gate(crate::apis::known::DEPLOYER) {
                spawn(|rt, t| Box::pin(crate::pipeline::subscription::run(rt, t)));
                spawn(|rt, t| Box::pin(crate::pipeline::base::run(rt, t)));
                spawn(|rt, t| Box::pin(crate::pipeline::revision::run(rt, t)));
                spawn(|rt, t| Box::pin(crate::pipeline::rollout::run(rt, t)));
                spawn(|rt, t| Box::pin(crate::pipeline::status::run(rt, t)));
                spawn(|rt, t| Box::pin(crate::pipeline::readystatus::run_bases(rt, t)));
                spawn(|rt, t| Box::pin(crate::pipeline::readystatus::run_strategies(rt, t)));
                spawn(|rt, t| Box::pin(crate::deployer::push::run(rt, t)));
                // runs with the gate off too: it then releases the finalizers it added before
                spawn(|rt, t| Box::pin(crate::pipeline::feedprotection::run(rt, t)));
                spawn(|rt, t| Box::pin(crate::pipeline::helmchart::run(rt, t)));
                spawn(|rt, t| Box::pin(crate::pipeline::helmrelease::run(rt, t)));
                spawn(|rt, t| Box::pin(crate::deployer::push::run_helm(rt, t)));
                if rt.config.gate(crate::apis::known::PLACEMENT_DECISION) {
                    spawn(|rt, t| Box::pin(crate::pipeline::placementdecision::run(rt, t)));
                }
            } else {
                warn!("feature gate Deployer is off: no distribution pipeline");
            }
            // runs with the gate off too: it then says so on every ServiceImport
            spawn(|rt, t| Box::pin(crate::mcs::serviceimport::run(rt, t)));
            crate::clusters::run(rt, token).await;
            while tasks.join_next().await.is_some() {}
        }
        Role::Scheduler => crate::scheduler::controller::run(rt.clone(), token).await,
        // the hub serves on every replica and has no leader-only work
        Role::Hub => token.cancelled().await,
    }
}
