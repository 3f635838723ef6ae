//! The distribution pipeline in the parent (controller role): Subscription -> Base -> Description.
//! So far: feed resolution (which Manifests a feed names) and the FeedInventory controller that
//! feeds the scheduler's replica division (docs/spec/deployer.md §12).

pub mod base;
pub mod feedinventory;
pub mod feedprotection;
pub mod feeds;
pub mod helmchart;
pub mod helmrelease;
pub mod index;
pub mod metricgate;
pub mod overrides;
pub mod placementdecision;
pub mod preview;
pub mod readiness;
pub mod readystatus;
pub mod revision;
pub mod rollout;
pub mod status;
pub mod subscription;
pub mod triggers;
