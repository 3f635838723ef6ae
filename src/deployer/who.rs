//! Who deploys a cluster's Descriptions (docs/spec/deployer.md §9).

use crate::apis::{ClusterSyncMode, ManagedCluster};

/// The parent deploys when the cluster is Push or Dual and its agent allows pushing (AppPusher).
pub fn parent_deploys(mc: &ManagedCluster) -> Result<bool, String> {
    match mc.spec.sync_mode {
        ClusterSyncMode::Pull => Ok(false),
        ClusterSyncMode::Push | ClusterSyncMode::Dual => {
            match mc.status.as_ref().and_then(|s| s.app_pusher) {
                None => Err(format!(
                    "ManagedCluster {} reports no AppPusher yet",
                    mc.spec.cluster_id
                )),
                Some(p) => Ok(p),
            }
        }
    }
}

/// The agent deploys from its own flag and gate only: Pull always, Dual without AppPusher, Push never.
pub fn agent_deploys(sync_mode: &str, app_pusher_gate: bool) -> bool {
    match sync_mode {
        "Pull" => true,
        "Dual" => !app_pusher_gate,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_of_who_deploys() {
        assert!(agent_deploys("Pull", true));
        assert!(!agent_deploys("Dual", true));
        assert!(agent_deploys("Dual", false));
        assert!(!agent_deploys("Push", true));
        let mut mc = ManagedCluster::new("c", Default::default());
        mc.spec.sync_mode = ClusterSyncMode::Dual;
        assert!(parent_deploys(&mc).is_err(), "unknown AppPusher");
        mc.status = Some(crate::apis::ManagedClusterStatus {
            app_pusher: Some(true),
            ..Default::default()
        });
        assert_eq!(parent_deploys(&mc), Ok(true));
        mc.spec.sync_mode = ClusterSyncMode::Pull;
        assert_eq!(parent_deploys(&mc), Ok(false));
    }
}
