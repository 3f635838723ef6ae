//! Applying Descriptions to a child cluster (docs/spec/deployer.md §8-§11), shared by the agent
//! (Pull, and Dual without AppPusher) and the parent (Push, and Dual with AppPusher).

pub mod description;
pub mod drift;
pub mod generic;
pub mod helm;
pub mod push;
pub mod watch;
pub mod who;
