//! One scheduling cycle (docs/spec/scheduler.md §4, Go's `scheduleOne` up to the binding): the
//! [`Cycle`] owns what the scheduler keeps between cycles (the filter offset, the Dynamic holds,
//! what failover remembers) and decides where a Subscription goes, writing nothing: what it
//! decides is an [`Attempt`] (a binding for [`super::writer`] to write, the notes for the loop to
//! record as Events, when to look again). The framework's plugins run here, Reserve to Bind.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::reflector::{ObjectRef, Store};
use tracing::{debug, info, warn};

use super::algorithm::schedule_explained;
use super::failover::{self, Memory, Note, Settings};
use super::framework::{BindOutcome, CycleState, Framework, PluginFailure, TargetClusters};
use super::reservation::{self, Reservations};
use super::{FilterOffset, Profiles, ScheduleError, ScheduleResult, binder, explain};
use crate::apis::placement::Explanation;
use crate::apis::{
    FeedInventory, ManagedCluster, SchedulingStrategy, Subscription, SubscriptionStatus,
};
use crate::runtime::controller::ReconcileError;

/// Why a scheduling cycle or its binding failed; retried with the queue's backoff.
#[derive(Debug, thiserror::Error)]
pub enum CycleError {
    /// Scheduling failed in a way worth retrying (the event already says why).
    #[error("{0}")]
    Schedule(String),
    /// A plugin of a later extension point (reserve, permit, pre-bind, bind) refused.
    #[error(transparent)]
    Plugin(#[from] PluginFailure),
    #[error("writing the binding: {0}")]
    Write(#[source] kube::Error),
}

/// The `reason` label of `clusternet_scheduler_errors_total`.
impl ReconcileError for CycleError {
    fn metric_label(&self) -> &'static str {
        match self {
            CycleError::Schedule(_) => "schedule",
            CycleError::Plugin(_) => "plugin",
            CycleError::Write(_) => "write",
        }
    }
}

/// What one scheduling cycle decided.
pub enum Decided {
    /// Nothing to write (unchanged, dropped, ...): the outcome label.
    Done(&'static str),
    /// A new binding to write.
    Bind(Box<Binding>),
}

/// A binding to write, with what its PostBind and its `status.lastDecision` need.
pub struct Binding {
    pub sub: Arc<Subscription>,
    pub status: SubscriptionStatus,
    pub state: CycleState,
    pub target: TargetClusters,
    pub outcome: &'static str,
    /// What `status.lastDecision` is made from (taken when the writer explains it).
    pub record: Option<Record>,
}

/// A cycle's whole answer: the decision (or why there is none), the notes to record on the
/// Subscription (even when it failed: FailedScheduling), and when to look again whatever it
/// decided (a held cluster's grace ends, a fail-back step, holds to be released).
pub struct Attempt {
    pub decided: Result<Decided, CycleError>,
    pub sub: Option<Arc<Subscription>>,
    pub notes: Vec<Note>,
    pub recheck: Option<Duration>,
}

/// What `status.lastDecision` is made of: the inputs of a decision that changes the status, so
/// the writer explains it beside the loop (the next decision does not wait for the record).
pub struct Record {
    /// The candidates the decision saw (failover applied).
    all: Vec<Arc<ManagedCluster>>,
    inventory: Option<FeedInventory>,
    offset_before: FilterOffset,
    /// Recorded on the decision's own run (Dynamic dividing), empty otherwise.
    explanation: Explanation,
    lost: Vec<String>,
    damped: Vec<String>,
}

impl Record {
    /// Sets `status.lastDecision`: a cycle other than Dynamic dividing is explained again, on
    /// the same inputs (see [`Cycle::decide`]), with profile `fwk`.
    pub async fn explain(
        mut self,
        fwk: &Framework,
        sub: &Subscription,
        status: &mut SubscriptionStatus,
    ) {
        let inventory = self.inventory.as_ref();
        if !is_dynamic(sub) {
            let mut offset = self.offset_before;
            let again = CycleState::new();
            let explanation = Some(&mut self.explanation);
            let _same = schedule_explained(
                fwk,
                &again,
                &mut offset,
                sub,
                &self.all,
                inventory,
                explanation,
            )
            .await;
        }
        status.last_decision = Some(Box::new(explain::decision_record(
            &self.explanation,
            status,
            inventory,
            &failover::left_out(&self.lost, &self.damped),
            Time(Timestamp::now()),
        )));
    }
}

/// What a cycle starts from, read from the cache.
struct Input {
    sub: Arc<Subscription>,
    inventory: Option<FeedInventory>,
    failover: failover::Plan,
}

/// What a cycle decided, before the framework's binding points run.
struct Decision {
    input: Input,
    /// The candidates the decision saw (failover applied).
    all: Vec<Arc<ManagedCluster>>,
    state: CycleState,
    target: TargetClusters,
    outcome: &'static str,
    explanation: Explanation,
    offset_before: FilterOffset,
}

/// The scheduler's state between cycles and what it reads.
pub struct Cycle {
    pub profiles: Arc<Profiles>,
    pub subs: Store<Subscription>,
    pub clusters: Store<ManagedCluster>,
    pub inventories: Store<FeedInventory>,
    /// `--record-scheduling-decisions`: whether a binding carries `status.lastDecision`.
    pub record_decisions: bool,
    /// Failover's settings and memory (gate FailOver).
    pub failover: Option<(Settings, Memory)>,
    pub offset: FilterOffset,
    pub reservations: Reservations,
}

impl Cycle {
    /// Schedules the Subscription behind `key` (boxed, so the future's Send-ness is checked
    /// with concrete lifetimes: rustc cannot prove it for the higher-ranked ones the caller
    /// would need).
    pub fn schedule_one<'a>(&'a mut self, key: &'a str) -> BoxFuture<'a, Attempt> {
        Box::pin(async move {
            let mut attempt = Attempt {
                decided: Ok(Decided::Done("dropped")),
                sub: None,
                notes: Vec::new(),
                recheck: None,
            };
            attempt.decided = self.bind_points(key, &mut attempt).await;
            attempt
        })
    }

    /// Observe: the Subscription behind `key`, its profile and (Dividing) its FeedInventory; or
    /// why there is nothing to schedule now (dropped: deleted, unknown profile, inventory not
    /// ready; unchanged: a Dividing spec already scheduled).
    fn observe(
        &mut self,
        key: &str,
        all: &[Arc<ManagedCluster>],
        recheck: &mut Option<Duration>,
    ) -> Result<Input, &'static str> {
        let (ns, name) = key.split_once('/').ok_or("dropped")?;
        let Some(sub) = self
            .subs
            .get(&ObjectRef::new(name).within(ns))
            .filter(|s| s.metadata.deletion_timestamp.is_none())
        else {
            if let Some((_, memory)) = self.failover.as_mut() {
                memory.forget_subscription(key);
            }
            return Err("dropped");
        };
        if self.profiles.for_subscription(&sub).is_none() {
            warn!(subscription = %key, scheduler = %sub.spec.effective_scheduler_name(), "no scheduler profile of that name");
            return Err("dropped");
        }
        let inventory = if sub.spec.effective_scheduling_strategy() == SchedulingStrategy::Dividing
        {
            let Some(inv) = self.inventories.get(&ObjectRef::new(name).within(ns)) else {
                debug!(subscription = %key, "waiting for its FeedInventory");
                return Err("dropped");
            };
            if !binder::feeds_match_inventory(&sub, &inv) {
                debug!(subscription = %key, "FeedInventory does not match the feeds yet");
                return Err("dropped");
            }
            Some((*inv).clone())
        } else {
            None
        };
        let stepping = self
            .failover
            .as_ref()
            .is_some_and(|(_, m)| m.is_stepping(key));
        let plan = self.failover.as_mut().map(|(settings, memory)| {
            failover::plan(&sub, all, settings, memory, Timestamp::now())
        });
        // a held cluster's grace ends later (a returning one is stable later): look again then,
        // whatever this cycle decides
        *recheck = plan.as_ref().and_then(|f| f.recheck);
        // a lost cluster must leave even a Dividing binding whose spec did not change, one that
        // is back must get its share back, and a fail-back under way takes its next step
        let moved = stepping
            || plan.as_ref().is_some_and(|f| {
                !f.lost.is_empty() || !f.returned.is_empty() || f.suppressed.is_some()
            });
        if !moved && !binder::needs_scheduling(&sub, inventory.as_ref()) {
            return Err("unchanged");
        }
        Ok(Input {
            sub,
            inventory,
            failover: plan.unwrap_or_default(),
        })
    }

    /// Observes a Subscription and decides where it goes (the filter offset and the Dynamic
    /// holds move with it); `Ok(Err(outcome))` when there is nothing to decide.
    async fn decide(
        &mut self,
        key: &str,
        attempt: &mut Attempt,
    ) -> Result<Result<Decision, &'static str>, CycleError> {
        // the cache's own Arcs: a decision reads the clusters, it never copies them
        let all = self.clusters.state();
        let input = match self.observe(key, &all, &mut attempt.recheck) {
            Ok(input) => input,
            Err(outcome) => return Ok(Err(outcome)),
        };
        let profiles = self.profiles.clone();
        let Some(fwk) = profiles.for_subscription(&input.sub) else {
            return Ok(Err("dropped"));
        };
        let sub = input.sub.clone();
        attempt.sub = Some(sub.clone());
        if let Some(why) = &input.failover.suppressed {
            warn!(subscription = %key, reason = %why, "FailoverSuppressed");
            metrics::counter!("clusternet_scheduler_failover_suppressed_total").increment(1);
            attempt
                .notes
                .push(Note::warning("FailoverSuppressed", why.clone()));
        }
        let all = failover::candidates(all, &input.failover);
        let state = CycleState::sampled();
        let dynamic = is_dynamic(&sub);
        if dynamic {
            reservation::take_reservations(
                &mut self.reservations,
                &self.subs,
                &all,
                input.inventory.as_ref(),
                &state,
            );
        }
        // `status.lastDecision` keeps the explanation of a decision that changes the status.
        // The cycle is explained again, on the same inputs, only when it does (recording every
        // cycle would cost a third of the scheduler's throughput at 1,000 clusters, for cycles
        // that mostly change nothing); Dynamic dividing records on its only run, as its
        // predictions are answers from the children that a second run would ask for again.
        let offset_before = self.offset;
        let mut explanation = Explanation::default();
        let inv = input.inventory.as_ref();
        let recorded = (dynamic && self.record_decisions).then_some(&mut explanation);
        let scheduled =
            schedule_explained(fwk, &state, &mut self.offset, &sub, &all, inv, recorded).await;
        let (target, outcome) = scheduled_or_cleared(scheduled, key, &mut attempt.notes)?;
        let target = match self.failover.as_mut() {
            Some((settings, memory)) if outcome == "scheduled" => failover::make_before_break(
                &sub,
                target,
                &input.failover,
                (settings, memory),
                &all,
                &mut attempt.recheck,
            ),
            _ => target,
        };
        Ok(Ok(Decision {
            input,
            all,
            state,
            target,
            outcome,
            explanation,
            offset_before,
        }))
    }

    /// [`Cycle::decide`], then the framework's Reserve, Permit, PreBind and Bind points: the
    /// binding to write, if it changes the status.
    async fn bind_points(
        &mut self,
        key: &str,
        attempt: &mut Attempt,
    ) -> Result<Decided, CycleError> {
        let record_decisions = self.record_decisions;
        let d = match self.decide(key, attempt).await? {
            Ok(decision) => decision,
            Err(outcome) => return Ok(Decided::Done(outcome)),
        };
        let sub = d.input.sub.clone();
        let profiles = self.profiles.clone();
        let Some(fwk) = profiles.for_subscription(&sub) else {
            return Ok(Decided::Done("dropped"));
        };
        let Some(status) = framework_bind(fwk, &d.state, &sub, &d.target).await? else {
            return Ok(Decided::Done(d.outcome));
        };
        let Decision {
            input,
            all,
            state,
            target,
            outcome,
            explanation,
            offset_before,
        } = d;
        let Input {
            inventory,
            failover: plan,
            ..
        } = input;
        if is_dynamic(&sub)
            && let Some(inv) = inventory.as_ref()
        {
            reservation::keep_holds(
                &mut self.reservations,
                key,
                &sub,
                &status,
                inv,
                &mut attempt.recheck,
            );
        }
        if sub.status.as_ref() == Some(&status) {
            return Ok(Decided::Done(outcome));
        }
        if let Some((settings, memory)) = self.failover.as_mut() {
            failover::record_moves(key, &status, &plan, settings, memory, &mut attempt.notes);
        }
        // the record, the write, its event and PostBind run beside the loop (the writer): the
        // next decision does not wait for them
        let record = record_decisions.then_some(Record {
            all,
            inventory,
            offset_before,
            explanation,
            lost: plan.lost,
            damped: plan.damped,
        });
        Ok(Decided::Bind(Box::new(Binding {
            sub,
            status,
            state,
            target,
            outcome,
            record,
        })))
    }
}

/// A scheduling failure: requeued when trying again may help (FailedScheduling either way),
/// otherwise no cluster fits and the binding is cleared.
fn scheduled_or_cleared(
    scheduled: Result<ScheduleResult, ScheduleError>,
    key: &str,
    notes: &mut Vec<Note>,
) -> Result<(TargetClusters, &'static str), CycleError> {
    match scheduled {
        Ok(r) => Ok((r.suggested, "scheduled")),
        Err(e) => {
            let message = binder::truncate_event_message(&e.to_string());
            notes.push(Note::warning("FailedScheduling", message.clone()));
            if e.should_requeue() {
                return Err(CycleError::Schedule(message));
            }
            info!(subscription = %key, reason = %message, "no cluster fits: clearing the binding");
            Ok((TargetClusters::default(), "unschedulable"))
        }
    }
}

/// The framework's Reserve, Permit, PreBind and Bind points for a decision: the status to
/// write, or `None` when a Bind plugin bound it itself.
async fn framework_bind(
    fwk: &Framework,
    state: &CycleState,
    sub: &Subscription,
    target: &TargetClusters,
) -> Result<Option<SubscriptionStatus>, CycleError> {
    if let Err(e) = fwk.run_reserve(state, sub, target) {
        fwk.run_unreserve(state, sub, target);
        return Err(e.into());
    }
    fwk.run_permit(state, sub, target)?;
    fwk.run_pre_bind(state, sub, target).await?;
    Ok(match fwk.run_bind(state, sub, target).await? {
        BindOutcome::PatchStatus(status) => Some(status),
        BindOutcome::Bound => None,
    })
}

/// Dynamic dividing (the only one that divides by predicted capacity).
pub fn is_dynamic(sub: &Subscription) -> bool {
    sub.spec.effective_scheduling_strategy() == SchedulingStrategy::Dividing
        && sub
            .spec
            .dividing_scheduling
            .as_ref()
            .is_some_and(|d| d.type_ == crate::apis::ReplicaDividingType::Dynamic)
}
