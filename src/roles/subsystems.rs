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
            if rt.config.cluster_reg_parent_url.is_none() || rt.config.cluster_reg_token.is_none() {
                return Err(StartError::Config(
                    "the agent role needs --cluster-reg-parent-url and --cluster-reg-token".into(),
                ));
            }
        }
        Role::Hub | Role::Scheduler | Role::Controller => {}
    }
    Ok(())
}

/// Leader-only work of a role; returns when `token` is cancelled.
pub async fn lead(_rt: &Runtime, role: Role, leadership: Leadership, token: CancellationToken) {
    info!(%role, lease_uid = %leadership.lease_uid, "leading");
    warn!(%role, "this build has no {role} controllers yet: holding the lease only");
    token.cancelled().await;
}
