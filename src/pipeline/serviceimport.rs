//! ServiceImport (multi-cluster services, gate MultiClusterService): this build derives nothing
//! from ServiceImports yet, so each one gets a Warning event `NotImplemented` saying so, instead
//! of being accepted in silence.

use std::sync::Arc;

use kube::runtime::controller::Action;
use tokio_util::sync::CancellationToken;

use crate::apis::ServiceImport;
use crate::apis::known;
use crate::runtime::Runtime;
use crate::runtime::events::Events;

pub const NOT_IMPLEMENTED: &str = "multi-cluster services are not implemented by this build yet: no Service or EndpointSlices are derived from this ServiceImport";

pub async fn run(rt: Runtime, stop: CancellationToken) {
    let imports = rt.cache.watch::<ServiceImport>();
    let events = Events::new(rt.client.clone(), known::CLUSTERNET_CONTROLLER_MANAGER_NAME);
    crate::runtime::controller::run(
        "serviceimport",
        imports,
        1,
        stop,
        move |si: Arc<ServiceImport>| {
            let events = events.clone();
            async move {
                if si.metadata.deletion_timestamp.is_none() {
                    events.warn(si.as_ref(), "NotImplemented", NOT_IMPLEMENTED);
                }
                Ok::<_, std::convert::Infallible>(Action::await_change())
            }
        },
    )
    .await;
}
