//! Helm charts as feeds (#15, docs/spec/deployer.md §7): where a chart is (`repo`).
pub mod cli;
pub mod repo;
