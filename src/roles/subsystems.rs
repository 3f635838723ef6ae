//! The subsystems behind each role. Work that is not built yet says so loudly instead of
//! pretending to run.

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
            // warm caches on every replica so a new leader starts at once
            rt.cache.watch::<crate::apis::ClusterRegistrationRequest>();
            rt.cache.watch::<crate::apis::ManagedCluster>();
            if rt.config.gate(crate::apis::known::FEED_INVENTORY) {
                rt.cache.watch::<crate::apis::Subscription>();
                rt.cache.watch::<crate::apis::Manifest>();
            }
        }
        Role::Scheduler => {
            rt.cache.watch::<crate::apis::Subscription>();
            rt.cache.watch::<crate::apis::ManagedCluster>();
            rt.cache.watch::<crate::apis::FeedInventory>();
        }
        Role::Hub => {}
    }
    Ok(())
}

/// Leader-only work of a role; returns when `token` is cancelled.
pub async fn lead(rt: &Runtime, role: Role, leadership: Leadership, token: CancellationToken) {
    info!(%role, lease_uid = %leadership.lease_uid, "leading");
    match role {
        Role::Agent => crate::agent::lead(rt, &leadership.lease_uid, token).await,
        Role::Controller => {
            warn!(
                "the distribution pipeline (Deployer) is not built yet: running registration, cluster lifecycle and FeedInventory only"
            );
            let inventory = rt.config.gate(crate::apis::known::FEED_INVENTORY).then(|| {
                let (rt, token) = (rt.clone(), token.clone());
                tokio::spawn(async move { crate::pipeline::feedinventory::run(rt, token).await })
            });
            crate::clusters::run(rt, token).await;
            if let Some(t) = inventory {
                let _ = t.await;
            }
        }
        Role::Scheduler | Role::Hub => {
            warn!(%role, "this build has no {role} controllers yet: holding the lease only");
            token.cancelled().await;
        }
    }
}
