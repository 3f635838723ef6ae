//! The scheduler: decides, for each Subscription, which ManagedClusters receive its feeds and,
//! for `Dividing`, how many replicas each gets. Its only output is `Subscription.status`
//! (`bindingClusters`, `replicas`, `specHash`, `desiredReleases`). Implements Clusternet's
//! `clusternet-scheduler` (`pkg/scheduler/**`, spec/scheduler.md).
//!
//! This part owns the framework and the pure algorithm; nothing here talks to the API server.
//! The I/O shell (queue, event triggers, cache reads, status patches, events, metrics
//! registration, the HTTP predictor client) drives it as follows:
//!
//! ```text
//! startup:
//!   let registry = Registry::in_tree(Arc::new(HttpPredictor { .. }));   // + out-of-tree plugins
//!   let (config, profiles) = Profiles::from_yaml(config_text.as_deref(), &registry,
//!                                                gates.feasible_clusters_toleration)?;
//!   let mut offset = FilterOffset::default();                           // one per scheduler
//!
//! per queued Subscription (scheduleOne, §4):
//!   let fwk = profiles.for_subscription(&sub)?;                          // None: not ours, drop
//!   if Dividing: read FeedInventory; NotFound -> drop;
//!                if !binder::feeds_match_inventory(&sub, &inv) -> drop
//!   if !binder::needs_scheduling(&sub, inv.as_ref()) -> done
//!   let state = CycleState::new();
//!   let target = match algorithm::schedule(fwk, &state, &mut offset, &sub, &clusters,
//!                                          inv.as_ref()).await {
//!       Ok(r) => r.suggested,
//!       Err(e) => { Warning event FailedScheduling binder::truncate_event_message(&e.to_string());
//!                   if e.should_requeue() { backoff; return } TargetClusters::default() }
//!   };
//!   fwk.run_reserve(&state, &sub, &target)?;     // on error: fwk.run_unreserve(..), backoff
//!   fwk.run_permit(&state, &sub, &target)?;      // Allow, or Wait(plugin -> timeout)
//!   (in a task) fwk.run_pre_bind(..).await?;
//!   match fwk.run_bind(&state, &sub, &target).await? {
//!       BindOutcome::PatchStatus(status) => merge-patch `status` onto the status subresource,
//!       BindOutcome::Bound => {}
//!   }
//!   Normal event Scheduled binder::scheduled_event_message(&sub, &status.binding_clusters);
//!   fwk.run_post_bind(..).await;
//! ```
//!
//! Modules: [`config`] (configuration file, defaulting, validation, [`Profiles`]),
//! [`framework`] (extension-point traits, [`Registry`], [`Framework`], [`CycleState`]),
//! [`plugins`] (the in-tree plugins and [`PredictorClient`]), [`algorithm`] ([`schedule`]),
//! [`binder`] (admission gate, binding status, event texts).
//!
//! Out-of-tree plugins: implement [`framework::Plugin`] plus the extension-point traits (see the
//! example on [`framework::Plugin`]), [`Registry::register`] a constructor, and enable the name
//! in a profile of the configuration file.

pub mod algorithm;
pub mod binder;
pub mod config;
pub mod controller;
pub mod cycle;
pub mod explain;
pub mod failover;
pub mod framework;
pub mod plugins;
pub mod predictor_client;
pub mod queue;
pub mod record;
pub mod reservation;
pub mod triggers;
pub mod writer;

pub use algorithm::{FilterOffset, FitError, ScheduleError, ScheduleResult, schedule};
pub use binder::{binding_status, feeds_match_inventory, needs_scheduling};
pub use config::{ConfigError, Profiles, SchedulerConfiguration};
pub use framework::{
    BindOutcome, CycleState, Framework, PermitOutcome, PluginFailure, Registry, TargetClusters,
};
pub use plugins::PredictorClient;
