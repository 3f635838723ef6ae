//! The scheduler's one writer of bindings (Linkerd's policy-controller cut: the cycle decides,
//! this writes): the binding a cycle decided, merge-patched into `Subscription.status` (only
//! what changed, never an unchanged status), its `status.lastDecision`, the `Scheduled` event
//! and the framework's PostBind, concurrently and beside the loop, as upstream binds.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use tracing::{info, warn};

use super::cycle::{Binding, CycleError};
use super::queue::SchedulingQueue;
use super::{Profiles, binder};
use crate::apis::Subscription;
use crate::kube_ext::merge_patch;
use crate::runtime::cache::Shared;
use crate::runtime::controller::ReconcileError;
use crate::runtime::events::Events;
use crate::runtime::{Runtime, api_code};

/// Writes bindings concurrently (at most [`BIND_PARALLELISM`] at once) while the loop goes on
/// deciding, as upstream's scheduler binds asynchronously. A Subscription has at most one write in
/// flight; when it is enqueued meanwhile, it is scheduled again after that write, so its writes
/// stay in order and each decision starts from the last binding.
#[derive(Clone)]
pub struct Writer {
    pub rt: Runtime,
    pub subs: Shared<Subscription>,
    pub profiles: Arc<Profiles>,
    pub queue: Arc<SchedulingQueue>,
    pub events: Events,
    pub permits: Arc<tokio::sync::Semaphore>,
    /// key -> enqueued again while its write was in flight
    pub in_flight: Arc<std::sync::Mutex<HashMap<String, bool>>>,
}

/// Upstream binds in a goroutine per Subscription, unbounded; 64 writes in flight keeps the API
/// server as busy as that (measured: 16 left a backlog draining at 0.6-0.7x Go's rate with lifted
/// client limits) while a flood of thousands still cannot open thousands of connections.
pub const BIND_PARALLELISM: usize = 64;

impl Writer {
    fn in_flight(&self) -> std::sync::MutexGuard<'_, HashMap<String, bool>> {
        self.in_flight.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether `key` has a write in flight; if so it is scheduled again once that is done.
    pub fn defer_if_busy(&self, key: &str) -> bool {
        match self.in_flight().get_mut(key) {
            Some(again) => {
                *again = true;
                true
            }
            None => false,
        }
    }

    pub fn spawn(&self, key: String, mut b: Box<Binding>) {
        self.in_flight().insert(key.clone(), false);
        let this = self.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            let permit = this.permits.clone().acquire_owned().await;
            let result = this.bind(&key, &mut b).await;
            drop(permit);
            metrics::histogram!("clusternet_scheduler_binding_duration_seconds")
                .record(started.elapsed().as_secs_f64());
            let again = this.in_flight().remove(&key).unwrap_or(false);
            let priority = b.sub.spec.priority.unwrap_or(0);
            match result {
                Ok(()) if again => this.queue.add(&key, priority),
                Ok(()) => {}
                Err(e) => {
                    let delay = this.queue.add_backoff(&key);
                    metrics::counter!("clusternet_scheduler_binding_errors_total").increment(1);
                    metrics::counter!("clusternet_scheduler_errors_total", "reason" => e.metric_label()).increment(1);
                    warn!(subscription = %key, error = %e, retry_in = ?delay, "writing the binding failed");
                }
            }
        });
    }

    async fn bind(&self, key: &str, b: &mut Binding) -> Result<(), CycleError> {
        let ns = b.sub.namespace().unwrap_or_default();
        let name = b.sub.name_any();
        let fwk = self.profiles.for_subscription(&b.sub);
        if !self.rt.config.record_scheduling_decisions {
            // the loop made no record (see `Cycle::record_decisions`); none is left behind from
            // when recording was on either
            b.status.last_decision = None;
        }
        if let (Some(record), Some(fwk)) = (b.record.take(), fwk) {
            record.explain(fwk, &b.sub, &mut b.status).await;
        }
        // upstream's binder: a JSON merge patch of the status the decision started from against
        // the new one, so only what changed travels and fields other writers own are left alone
        let old = serde_json::json!({ "status": b.sub.status });
        let new = serde_json::json!({ "status": b.status });
        if let Some(patch) = merge_patch::create(&old, &new) {
            let api: Api<Subscription> = Api::namespaced(self.rt.client.clone(), &ns);
            match api
                .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                // the pipeline in this process starts from the new binding at once
                Ok(written) => self.subs.observe_write(written),
                Err(e) if api_code(&e) == Some(404) => return Ok(()),
                Err(e) => return Err(CycleError::Write(e)),
            }
        }
        if b.outcome == "scheduled" {
            self.events.normal(
                b.sub.as_ref(),
                "Scheduled",
                &binder::scheduled_event_message(&b.sub, &b.status.binding_clusters),
            );
            // the cluster names are in the event; a log line per binding stays short
            info!(subscription = %key, clusters = b.status.binding_clusters.len(), "scheduled");
        }
        if let Some(fwk) = fwk {
            fwk.run_post_bind(&b.state, &b.sub, &b.target).await;
        }
        Ok(())
    }
}
