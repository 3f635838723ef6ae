//! `DefaultBinder` (scheduler.md §6): turns the scheduling result into the Subscription's new
//! status. Go's binder also sends the merge patch; here the patch is the I/O shell's job, so the
//! plugin is pure and returns [`BindOutcome::PatchStatus`].

use std::sync::Arc;

use crate::apis::Subscription;
use crate::scheduler::binder::binding_status;
use crate::scheduler::framework::{
    BindOutcome, BindPlugin, BoxFuture, CycleState, Plugin, Status, TargetClusters,
};
use crate::scheduler::plugins::names;

/// The DefaultBinder plugin.
#[derive(Debug, Default, Clone, Copy)]
pub struct DefaultBinder;

impl Plugin for DefaultBinder {
    fn name(&self) -> &str {
        names::DEFAULT_BINDER
    }
    fn as_bind(self: Arc<Self>) -> Option<Arc<dyn BindPlugin>> {
        Some(self)
    }
}

impl BindPlugin for DefaultBinder {
    fn bind<'a>(
        &'a self,
        _state: &'a CycleState,
        sub: &'a Subscription,
        target: &'a TargetClusters,
    ) -> BoxFuture<'a, Result<BindOutcome, Status>> {
        Box::pin(async move { Ok(BindOutcome::PatchStatus(binding_status(sub, target))) })
    }
}
