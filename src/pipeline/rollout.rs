//! Staged rollouts (beyond upstream, docs/spec/deployer.md §16): for a Subscription that names a
//! RolloutStrategy, this controller decides where the rollout of its newest revision is and
//! writes it to `status.rollout`; the Subscription controller, the one writer of Bases, pins each
//! Base to the revision [`pin_for`] gives its cluster, and the Base controller renders it.
//!
//! A new revision starts a rollout at stage 1; the clusters of a stage are changed up to its
//! `maxConcurrency` at once; the stage passes once every cluster is healthy at the revision
//! (each Description pinned to it, its status written for its current generation, `Success`,
//! every object kstatus-`Current`) for `minSuccessTime` without interruption. A stage not
//! healthy by its `progressDeadline`, or with more than `maxFailures` failed clusters, fails the
//! rollout: `Rollback` pins every cluster back to the stable revision (the last one that
//! completed everywhere), `Pause` holds them where they are. A newer revision supersedes a
//! rollout under way and starts again from stage 1, from the same stable revision.
//!
//! The first revision a Subscription has when it meets a strategy is taken as it is (complete
//! and stable): there is nothing older to protect.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::reflector::{ObjectRef, Store};
use serde_json::json;
use tokio_util::sync::CancellationToken;
use tracing::info;

use super::metricgate::{self, GateResult};
use super::{index, revision};
use crate::apis::CONDITION_ROLLOUT_COMPLETE;
use crate::apis::known;
use crate::apis::{
    Description, DescriptionPhase, ManagedCluster, OnFailure, RolloutApproval, RolloutPhase,
    RolloutStage, RolloutStatus, RolloutStrategy, RolloutUndo, StagePhase, StageStatus,
    Subscription,
};
use crate::config::parse_go_duration;
use crate::kube_ext::health::HealthStatus;
use crate::kube_ext::intstr::CountOrPercent;
use crate::runtime::cache::Index;
use crate::runtime::controller::{
    Action, ApiFailure, Controller, ReconcileError, named_by, recheck,
};
use crate::runtime::events::Events;
use crate::runtime::{Runtime, apply};

/// The field manager of `status.rollout`.
pub const FIELD_MANAGER: &str = "clusternet/controller/rollout";

/// A stage's `progressDeadline` when it does not say.
pub const DEFAULT_PROGRESS_DEADLINE: Duration = Duration::from_secs(600);

/// The stage the clusters no stage selects form.
pub const REMAINING_STAGE: &str = "remaining";

#[derive(Debug, thiserror::Error)]
pub enum RolloutError {
    #[error(transparent)]
    Api(#[from] ApiFailure),
}

impl ReconcileError for RolloutError {
    fn metric_label(&self) -> &'static str {
        match self {
            RolloutError::Api(_) => "api",
        }
    }
}

/// A stage's settings, read and checked.
#[derive(Debug, Clone, PartialEq)]
pub struct StageRules {
    pub name: String,
    pub clusters: Vec<String>,
    /// Clusters changed at once.
    pub max_concurrency: usize,
    pub min_success: Duration,
    pub deadline: Duration,
    pub max_failures: usize,
    pub require_approval: bool,
    pub metric_gates: Vec<crate::apis::MetricGate>,
}

/// `n` or `n%` of `total` (a percentage rounded up).
fn count_of(v: &IntOrString, total: usize, what: &str) -> Result<usize, String> {
    let parsed = match v {
        IntOrString::Int(n) => {
            let n = u64::try_from(*n).map_err(|_| format!("{what} {n} is negative"))?;
            CountOrPercent::Count(n)
        }
        IntOrString::String(s) => CountOrPercent::parse(s)
            .ok_or_else(|| format!("{what} {s:?} is neither a number nor a percentage"))?,
    };
    Ok(usize::try_from(parsed.of(total as u64)).unwrap_or(usize::MAX))
}

fn duration(v: Option<&String>, default: Duration, what: &str) -> Result<Duration, String> {
    match v {
        None => Ok(default),
        Some(s) => parse_go_duration(s).map_err(|e| format!("{what} {s:?}: {e}")),
    }
}

/// The stages of a strategy over the bound clusters (`bound` in bindingClusters order;
/// `labels` gives a cluster's ManagedCluster labels): each stage takes from the clusters no
/// earlier stage took; what none takes forms a last stage, [`REMAINING_STAGE`]. An invalid
/// strategy is an error that says what is wrong.
pub fn stages(
    stages: &[RolloutStage],
    bound: &[String],
    labels: &dyn Fn(&str) -> BTreeMap<String, String>,
) -> Result<Vec<StageRules>, String> {
    if stages.is_empty() {
        return Err("the strategy has no stages".into());
    }
    let mut left: Vec<&String> = bound.iter().collect();
    let mut out = Vec::new();
    for (i, s) in stages.iter().enumerate() {
        let what = |f: &str| format!("stage {} ({}): {f}", i + 1, s.name);
        let mut picked: Vec<&String> = match &s.cluster_selector {
            Some(sel) => {
                let sel = crate::kube_ext::labels::Selector::from_label_selector(sel)
                    .map_err(|e| format!("{}: {e}", what("clusterSelector")))?;
                left.iter()
                    .copied()
                    .filter(|c| sel.matches(&labels(c)))
                    .collect()
            }
            None => left.clone(),
        };
        if let Some(n) = &s.clusters {
            let n = count_of(n, picked.len(), &what("clusters"))?;
            picked.truncate(n);
        }
        left.retain(|c| !picked.contains(c));
        let size = picked.len();
        out.push(StageRules {
            name: s.name.clone(),
            clusters: picked.into_iter().cloned().collect(),
            max_concurrency: match &s.max_concurrency {
                Some(m) => count_of(m, size, &what("maxConcurrency"))?.max(1),
                None => size.max(1),
            },
            min_success: duration(
                s.min_success_time.as_ref(),
                Duration::ZERO,
                &what("minSuccessTime"),
            )?,
            deadline: duration(
                s.progress_deadline.as_ref(),
                DEFAULT_PROGRESS_DEADLINE,
                &what("progressDeadline"),
            )?,
            max_failures: usize::try_from(s.max_failures.unwrap_or(0)).unwrap_or(0),
            require_approval: s.require_approval.unwrap_or(false),
            metric_gates: s.metric_gates.clone(),
        });
    }
    if !left.is_empty() {
        out.push(StageRules {
            name: REMAINING_STAGE.into(),
            clusters: left.into_iter().cloned().collect(),
            max_concurrency: usize::MAX,
            min_success: Duration::ZERO,
            deadline: DEFAULT_PROGRESS_DEADLINE,
            max_failures: 0,
            require_approval: false,
            metric_gates: Vec::new(),
        });
    }
    Ok(out)
}

/// Where one cluster is with the revision being rolled out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClusterState {
    /// Its Descriptions do not carry the revision yet (or their status speaks of an older
    /// generation): why.
    Changing(String),
    /// Every Description carries it, deployed, every object Current.
    Healthy,
    /// A Description failed to deploy or an object is Failed: why.
    Failed(String),
}

/// The state of a cluster from its Descriptions of the Subscription (`revision` is the one
/// being rolled out; `None`: whatever they carry, for a Subscription without a strategy).
pub fn cluster_state(descriptions: &[Arc<Description>], revision: Option<&str>) -> ClusterState {
    let live: Vec<&Arc<Description>> = descriptions
        .iter()
        .filter(|d| d.metadata.deletion_timestamp.is_none())
        .collect();
    if live.is_empty() {
        return ClusterState::Changing("no Description yet".into());
    }
    for d in live {
        let name = d.name_any();
        if revision.is_some()
            && d.annotations()
                .get(known::REVISION_ANNOTATION)
                .map(String::as_str)
                != revision
        {
            return ClusterState::Changing(format!("Description {name} is not rendered yet"));
        }
        let Some(status) = d.status.as_ref() else {
            return ClusterState::Changing(format!("Description {name} is not deployed yet"));
        };
        if status.observed_generation.is_none()
            || status.observed_generation != d.metadata.generation
        {
            return ClusterState::Changing(format!("Description {name} is being deployed"));
        }
        if status.phase == Some(DescriptionPhase::Failure) {
            return ClusterState::Failed(format!("Description {name}: {}", status.reason));
        }
        for m in &status.manifest_statuses {
            if let Some(h) = &m.health
                && h.status == HealthStatus::Failed
            {
                return ClusterState::Failed(format!("{}: {}", m.feed, h.message));
            }
        }
        if status.phase != Some(DescriptionPhase::Success) {
            return ClusterState::Changing(format!("Description {name} is not deployed yet"));
        }
        if let Some(m) = status.manifest_statuses.iter().find(|m| {
            m.health
                .as_ref()
                .is_some_and(|h| h.status != HealthStatus::Current)
        }) {
            let why = m.health.as_ref().map(|h| h.message.as_str()).unwrap_or("");
            return ClusterState::Changing(format!("{} is not healthy yet: {why}", m.feed));
        }
    }
    ClusterState::Healthy
}

/// What the rollout controller knows when it decides.
pub struct Facts<'a> {
    /// The newest revision: name and number.
    pub newest: (String, i64),
    pub current: Option<&'a RolloutStatus>,
    /// The strategy's stages over today's bound clusters, or why there are none.
    pub stages: Result<Vec<StageRules>, String>,
    pub on_failure: OnFailure,
    pub state: &'a dyn Fn(&str) -> ClusterState,
    pub controls: &'a Controls,
    /// The metric gates' results of one stage (its index), evaluated before deciding.
    pub gates: Option<(usize, Vec<(String, GateResult)>)>,
    pub now: Timestamp,
}

/// How often a stage with metric gates is looked at again while it changes and soaks.
pub const GATE_INTERVAL: Duration = Duration::from_secs(5);

/// What users asked of the rollout through `kubectl clusternet rollout` (the Subscription's
/// annotations).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Controls {
    /// `rollout pause` holds it.
    pub paused: bool,
    /// The last `rollout approve`.
    pub approval: Option<RolloutApproval>,
    /// The last `rollout restart` request (empty: none).
    pub restart: String,
    /// `rollout undo` in force: the revision number rolled out instead of the newest.
    pub undo_to: Option<i64>,
}

/// An Event to tell on the Subscription.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Told {
    pub reason: &'static str,
    pub message: String,
    pub warning: bool,
}

/// What the rollout controller decided.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub status: RolloutStatus,
    pub told: Vec<Told>,
    /// When to look again though nothing changes (a soak or a deadline ends).
    pub recheck: Option<Duration>,
}

fn since(t: Option<&Time>, now: Timestamp) -> Duration {
    t.map(|t| now.duration_since(t.0))
        .and_then(|d| Duration::try_from(d).ok())
        .unwrap_or(Duration::ZERO)
}

fn fresh_stages(rules: &[StageRules]) -> Vec<StageStatus> {
    rules
        .iter()
        .map(|r| StageStatus {
            name: r.name.clone(),
            clusters: r.clusters.clone(),
            ..Default::default()
        })
        .collect()
}

/// The rollout's message while stage `i` is under way.
fn stage_line(i: usize, stage: &StageStatus, number: i64) -> String {
    format!(
        "stage {} ({}) of revision {number}: {}",
        i + 1,
        stage.name,
        stage.message
    )
}

/// Where the rollout goes from here (pure: [`Facts`] in, the status to write out).
pub fn decide(f: &Facts<'_>) -> Decision {
    let (rev, number) = (&f.newest.0, f.newest.1);
    let mut told = Vec::new();
    // what is stored keeps whole seconds (metav1.Time): a time kept rounded down would shorten
    // a soak by up to a second, so it is rounded up
    let now = Time(
        f.now
            .round(
                k8s_openapi::jiff::TimestampRound::new()
                    .smallest(k8s_openapi::jiff::Unit::Second)
                    .mode(k8s_openapi::jiff::RoundMode::Ceil),
            )
            .unwrap_or(f.now),
    );
    let mut st = match f.current {
        // the first look: what the clusters run now is taken as complete
        None => RolloutStatus {
            revision: rev.clone(),
            revision_number: number,
            stable_revision: rev.clone(),
            stable_revision_number: Some(number),
            phase: RolloutPhase::Completed,
            stage: 0,
            message: "the revision the Subscription had when it met its strategy".into(),
            started_at: Some(now.clone()),
            restarted_at: f.controls.restart.clone(),
            undo_to: f.controls.undo_to,
            ..Default::default()
        },
        Some(c)
            if c.revision != *rev
                || (!f.controls.restart.is_empty() && f.controls.restart != c.restarted_at) =>
        {
            // the last revision that completed everywhere stays the one to fall back on
            let (stable, stable_number) = if c.phase == RolloutPhase::Completed {
                (c.revision.clone(), Some(c.revision_number))
            } else {
                (c.stable_revision.clone(), c.stable_revision_number)
            };
            let message = if c.revision == *rev {
                format!("revision {number} restarts from stage 1")
            } else if let Some(to) = f.controls.undo_to {
                format!("undo: revision {to} rolls out again")
            } else if c.phase == RolloutPhase::Progressing {
                format!(
                    "revision {number} supersedes revision {}",
                    c.revision_number
                )
            } else {
                format!("rolling out revision {number}")
            };
            match &f.stages {
                Err(why) => {
                    // nothing can be staged: the change waits, every cluster stays where it is
                    let mut held = c.clone();
                    held.message = format!("revision {number} waits: {why}");
                    if held != *c {
                        told.push(Told {
                            reason: "RolloutBlocked",
                            message: held.message.clone(),
                            warning: true,
                        });
                    }
                    return Decision {
                        status: held,
                        told,
                        recheck: None,
                    };
                }
                Ok(rules) => {
                    told.push(Told {
                        reason: "RolloutStarted",
                        message: message.clone(),
                        warning: false,
                    });
                    RolloutStatus {
                        revision: rev.clone(),
                        revision_number: number,
                        stable_revision: stable,
                        stable_revision_number: stable_number,
                        phase: RolloutPhase::Progressing,
                        stage: 0,
                        message,
                        started_at: Some(now.clone()),
                        stages: fresh_stages(rules),
                        restarted_at: f.controls.restart.clone(),
                        undo_to: f.controls.undo_to,
                        ..Default::default()
                    }
                }
            }
        }
        Some(c) => c.clone(),
    };
    if st.phase != RolloutPhase::Progressing {
        return Decision {
            status: st,
            told,
            recheck: None,
        };
    }
    let rules = match &f.stages {
        Ok(r) => r,
        Err(why) => {
            st.message = format!("held: {why}");
            return Decision {
                status: st,
                told,
                recheck: None,
            };
        }
    };
    if f.controls.paused {
        if st.paused_at.is_none() {
            st.paused_at = Some(now.clone());
            st.message =
                format!("revision {number} is paused (kubectl clusternet rollout resume goes on)");
            told.push(Told {
                reason: "RolloutPausedByUser",
                message: st.message.clone(),
                warning: false,
            });
        }
        return Decision {
            status: st,
            told,
            recheck: None,
        };
    }
    if let Some(paused_at) = st.paused_at.take() {
        // the time paused does not count against the stage's deadline, and a soak starts over
        let paused_for =
            k8s_openapi::jiff::SignedDuration::try_from(since(Some(&paused_at), f.now))
                .unwrap_or_default();
        if let Some(stage) = st.stages.get_mut(usize::try_from(st.stage).unwrap_or(0)) {
            stage.started_at = stage
                .started_at
                .take()
                .map(|t| Time(t.0.checked_add(paused_for).unwrap_or(t.0)));
            stage.healthy_since = None;
        }
        told.push(Told {
            reason: "RolloutResumed",
            message: format!("revision {number} goes on"),
            warning: false,
        });
    }
    // today's clusters per stage: one that joined goes where the strategy puts it now; what a
    // stage already changed stays changed
    let mut stages = fresh_stages(rules);
    for s in stages.iter_mut() {
        if let Some(old) = st.stages.iter().find(|o| o.name == s.name) {
            let clusters = std::mem::take(&mut s.clusters);
            let updated = if old.phase == StagePhase::Succeeded {
                clusters.clone()
            } else {
                clusters
                    .iter()
                    .filter(|c| old.updated.contains(c))
                    .cloned()
                    .collect()
            };
            *s = StageStatus {
                clusters,
                updated,
                ..old.clone()
            };
        }
    }
    st.stages = stages;
    let mut recheck_in = None;
    loop {
        let i = usize::try_from(st.stage).unwrap_or(0);
        let Some(rule) = rules.get(i) else {
            st.phase = RolloutPhase::Completed;
            st.stable_revision = st.revision.clone();
            st.stable_revision_number = Some(st.revision_number);
            st.message = format!(
                "revision {} is rolled out to every stage",
                st.revision_number
            );
            told.push(Told {
                reason: "RolloutCompleted",
                message: st.message.clone(),
                warning: false,
            });
            break;
        };
        let stage = &mut st.stages[i];
        let waiting_approval = matches!(
            stage.phase,
            StagePhase::Pending | StagePhase::WaitingForApproval
        ) && rule.require_approval
            && stage.approved_by.is_empty();
        if waiting_approval {
            match &f.controls.approval {
                Some(a) if a.revision == st.revision_number && a.stage == stage.name => {
                    stage.approved_by = a.user.clone();
                    stage.approved_at = Some(now.clone());
                    stage.phase = StagePhase::Pending;
                    told.push(Told {
                        reason: "StageApproved",
                        message: format!(
                            "stage {} ({}) of revision {number} approved by {}",
                            i + 1,
                            stage.name,
                            a.user
                        ),
                        warning: false,
                    });
                }
                _ => {
                    stage.phase = StagePhase::WaitingForApproval;
                    stage.message =
                        "waiting for approval (kubectl clusternet rollout approve)".into();
                    st.message = stage_line(i, stage, number);
                    break;
                }
            }
        }
        if stage.phase == StagePhase::Pending {
            stage.phase = StagePhase::Progressing;
            stage.started_at = Some(now.clone());
            told.push(Told {
                reason: "StageStarted",
                message: format!(
                    "stage {} ({}) of revision {number}: {}",
                    i + 1,
                    stage.name,
                    stage.clusters.join(", ")
                ),
                warning: false,
            });
        }
        // health first, so a cluster that became healthy frees its place for the next
        let states: Vec<(String, ClusterState)> = stage
            .updated
            .iter()
            .map(|c| (c.clone(), (f.state)(c)))
            .collect();
        let in_flight = states
            .iter()
            .filter(|(_, s)| *s != ClusterState::Healthy)
            .count();
        let room = rule.max_concurrency.saturating_sub(in_flight);
        let next: Vec<String> = stage
            .clusters
            .iter()
            .filter(|c| !stage.updated.contains(c))
            .take(room)
            .cloned()
            .collect();
        stage.updated.extend(next);
        stage.healthy = states
            .iter()
            .filter(|(_, s)| *s == ClusterState::Healthy)
            .map(|(c, _)| c.clone())
            .collect();
        let failed: Vec<String> = states
            .iter()
            .filter_map(|(c, s)| match s {
                ClusterState::Failed(why) => Some(format!("{c}: {why}")),
                _ => None,
            })
            .collect();
        let waiting = states.iter().find_map(|(c, s)| match s {
            ClusterState::Changing(why) => Some(format!("{c}: {why}")),
            _ => None,
        });
        // the metric gates: one failing fails the stage, one waiting (or not looked at yet for
        // this stage) holds it
        let mut gate_failing = None;
        let mut gate_waiting = None;
        if !rule.metric_gates.is_empty() {
            let results = f
                .gates
                .as_ref()
                .filter(|(at, _)| *at == i)
                .map(|(_, r)| r.as_slice())
                .unwrap_or_default();
            stage.gates = Vec::new();
            for g in &rule.metric_gates {
                let r = results
                    .iter()
                    .find(|(n, _)| *n == g.name)
                    .map(|(_, r)| r.clone())
                    .unwrap_or_else(|| GateResult::Waiting("not evaluated yet".into()));
                match &r {
                    GateResult::Failing(m) if gate_failing.is_none() => {
                        gate_failing = Some(format!("metric gate {}: {m}", g.name));
                    }
                    GateResult::Waiting(m) if gate_waiting.is_none() => {
                        gate_waiting = Some(format!("metric gate {}: {m}", g.name));
                    }
                    _ => {}
                }
                stage.gates.push(r.status(&g.name));
            }
            recheck_in = Some(GATE_INTERVAL);
        }
        let elapsed = since(stage.started_at.as_ref(), f.now);
        let failure = if let Some(why) = gate_failing {
            Some(why)
        } else if failed.len() > rule.max_failures {
            Some(format!(
                "{} of its clusters failed (maxFailures {}): {}",
                failed.len(),
                rule.max_failures,
                failed.join("; ")
            ))
        } else if stage.healthy.len() < stage.clusters.len() && elapsed >= rule.deadline {
            Some(format!(
                "not healthy within its progressDeadline ({}s): {}",
                rule.deadline.as_secs(),
                waiting
                    .clone()
                    .or_else(|| failed.first().cloned())
                    .unwrap_or_default()
            ))
        } else {
            gate_waiting
                .as_ref()
                .filter(|_| elapsed >= rule.deadline.max(rule.min_success))
                .map(|why| {
                    format!(
                        "its metric gates did not pass within its progressDeadline ({}s): {why}",
                        rule.deadline.as_secs()
                    )
                })
        };
        if let Some(why) = failure {
            stage.phase = StagePhase::Failed;
            stage.finished_at = Some(now.clone());
            stage.healthy_since = None;
            stage.message = why.clone();
            let name = stage.name.clone();
            let (phase, reason, what) = match f.on_failure {
                OnFailure::Rollback => (
                    RolloutPhase::RolledBack,
                    "RolloutRolledBack",
                    format!(
                        "every cluster is back on revision {}",
                        st.stable_revision_number.unwrap_or_default()
                    ),
                ),
                OnFailure::Pause => (
                    RolloutPhase::Paused,
                    "RolloutPaused",
                    "every cluster stays where it is".to_string(),
                ),
            };
            st.phase = phase;
            st.message = format!("stage {} ({name}) failed: {why}; {what}", i + 1);
            told.push(Told {
                reason,
                message: st.message.clone(),
                warning: true,
            });
            break;
        }
        if stage.healthy.len() == stage.clusters.len() {
            let healthy_since = stage
                .healthy_since
                .get_or_insert_with(|| now.clone())
                .clone();
            let soaked = since(Some(&healthy_since), f.now);
            if gate_waiting.is_none() && (stage.clusters.is_empty() || soaked >= rule.min_success) {
                stage.phase = StagePhase::Succeeded;
                stage.finished_at = Some(now.clone());
                stage.message = String::new();
                told.push(Told {
                    reason: "StageSucceeded",
                    message: format!(
                        "stage {} ({}) of revision {number} is healthy",
                        i + 1,
                        stage.name
                    ),
                    warning: false,
                });
                st.stage += 1;
                continue;
            }
            stage.phase = StagePhase::Soaking;
            let left = rule.min_success.saturating_sub(soaked);
            stage.message = match &gate_waiting {
                Some(w) if left.is_zero() => format!("healthy; waiting for {w}"),
                _ => format!("healthy; soaking for {}s more", left.as_secs()),
            };
            recheck_in = Some(recheck_in.map_or(left, |g| g.min(left.max(Duration::from_secs(1)))));
        } else {
            stage.phase = StagePhase::Progressing;
            stage.healthy_since = None;
            stage.message = waiting
                .map(|w| format!("waiting for {w}"))
                .unwrap_or_else(|| "changing its clusters".into());
            let until_deadline = rule
                .deadline
                .saturating_sub(elapsed)
                .max(Duration::from_secs(1));
            recheck_in = Some(recheck_in.map_or(until_deadline, |g| g.min(until_deadline)));
        }
        st.message = stage_line(i, stage, number);
        break;
    }
    Decision {
        status: st,
        told,
        recheck: recheck_in,
    }
}

/// The revision a cluster's Base must be pinned to under `rollout`.
pub fn pin_for<'r>(rollout: &'r RolloutStatus, cluster: &str) -> &'r str {
    let stable = if rollout.stable_revision.is_empty() {
        &rollout.revision
    } else {
        &rollout.stable_revision
    };
    match rollout.phase {
        RolloutPhase::Completed => &rollout.revision,
        RolloutPhase::RolledBack => stable,
        RolloutPhase::Progressing | RolloutPhase::Paused => {
            let reached = rollout
                .stages
                .iter()
                .take(usize::try_from(rollout.stage).unwrap_or(0) + 1)
                .any(|s| s.updated.iter().any(|c| c == cluster));
            if reached { &rollout.revision } else { stable }
        }
    }
}

struct Ctx {
    rt: Runtime,
    events: Events,
    strategies: Store<RolloutStrategy>,
    clusters: Index<ManagedCluster>,
    revisions: Index<ControllerRevision>,
    /// By Subscription uid.
    descriptions: Index<Description>,
}

pub async fn run(rt: Runtime, stop: CancellationToken) {
    let subs = rt.cache.watch::<Subscription>();
    let strategies = rt.cache.watch::<RolloutStrategy>();
    let clusters = rt.cache.watch::<ManagedCluster>();
    let descs = rt.cache.watch::<Description>();
    let revisions = revision::watch_revisions(&rt);
    let from_descs = named_by(descs.subscribe(), |d: &Description| {
        index::subscription_named(d.labels())
    });
    let from_revisions = named_by(revisions.subscribe(), |r: &ControllerRevision| {
        r.owner_references()
            .iter()
            .find(|o| o.kind == known::SUBSCRIPTION_KIND)
            .map(|o| (r.namespace().unwrap_or_default(), o.name.clone()))
    });
    // a strategy changed: every Subscription of its namespace that names it
    let subs_store = subs.store.clone();
    let from_strategies = futures::StreamExt::flat_map(strategies.subscribe(), move |s| {
        let (ns, name) = (s.namespace(), s.name_any());
        let hit: Vec<ObjectRef<Subscription>> = subs_store
            .state()
            .iter()
            .filter(|x| {
                x.namespace() == ns && x.spec.rollout_strategy_name.as_deref() == Some(&name)
            })
            .map(|x| ObjectRef::from_obj(x.as_ref()))
            .collect();
        futures::stream::iter(hit)
    });
    let ctx = Arc::new(Ctx {
        events: Events::new(
            rt.events_client.clone(),
            known::CLUSTERNET_CONTROLLER_MANAGER_NAME,
        ),
        strategies: strategies.store.clone(),
        clusters: clusters.by_namespace(),
        revisions: revision::revisions_by_subscription(&revisions),
        descriptions: index::descriptions_by_subscription(&descs),
        rt,
    });
    Controller::new("rollout", &subs)
        .after([
            strategies.listed(),
            clusters.listed(),
            descs.listed(),
            revisions.listed(),
        ])
        .triggered_by(from_descs)
        .triggered_by(from_revisions)
        .triggered_by(from_strategies)
        .run(stop, move |sub| {
            let ctx = ctx.clone();
            async move { reconcile(&ctx, &sub).await }
        })
        .await;
}

/// The `RolloutComplete` condition `rollout` calls for, keeping `previous`'s transition time
/// when its status stays.
pub fn rollout_condition(
    rollout: &RolloutStatus,
    previous: Option<&Condition>,
    now: Timestamp,
) -> Condition {
    let waiting_approval = rollout
        .stages
        .get(usize::try_from(rollout.stage).unwrap_or(0))
        .is_some_and(|s| s.phase == StagePhase::WaitingForApproval);
    let (status, reason) = match rollout.phase {
        RolloutPhase::Completed => ("True", "Completed"),
        RolloutPhase::RolledBack => ("False", "RolledBack"),
        RolloutPhase::Paused => ("False", "Paused"),
        RolloutPhase::Progressing if rollout.paused_at.is_some() => ("False", "PausedByUser"),
        RolloutPhase::Progressing if waiting_approval => ("False", "WaitingForApproval"),
        RolloutPhase::Progressing => ("False", "Progressing"),
    };
    let message = format!("revision {}: {}", rollout.revision_number, rollout.message);
    crate::kube_ext::condition::condition(
        crate::kube_ext::condition::Said {
            type_: CONDITION_ROLLOUT_COMPLETE,
            status,
            reason,
            message: &message,
            observed_generation: None,
        },
        previous.map(std::slice::from_ref).unwrap_or_default(),
        now,
    )
}

/// Whether `condition` (this controller's only one; `None`: none) differs from what the
/// Subscription shows. `status.conditions` is a map list keyed by type, so each controller's
/// apply owns its own entries and leaves the aggregator's alone.
fn condition_changed(sub: &Subscription, condition: Option<&Condition>) -> bool {
    let mine = sub.status.as_ref().and_then(|s| {
        s.conditions
            .iter()
            .find(|c| c.type_ == CONDITION_ROLLOUT_COMPLETE)
    });
    match (condition, mine) {
        (None, None) => false,
        (Some(c), Some(m)) => {
            c.status != m.status || c.reason != m.reason || c.message != m.message
        }
        _ => true,
    }
}

/// Applies `status.rollout` and this controller's condition: every apply says both, since a
/// server-side apply removes what its manager owned and no longer says.
async fn write(
    ctx: &Ctx,
    sub: &Subscription,
    rollout: Option<&RolloutStatus>,
    condition: Option<&Condition>,
) -> Result<(), RolloutError> {
    let api: Api<Subscription> =
        Api::namespaced(ctx.rt.client.clone(), &sub.namespace().unwrap_or_default());
    let status =
        json!({ "rollout": rollout, "conditions": condition.into_iter().collect::<Vec<_>>() });
    let body = apply::status_body(sub, status);
    apply::apply_status(&api, FIELD_MANAGER, &sub.name_any(), &body)
        .await
        .map_err(ApiFailure::about(sub, "writing status.rollout"))?;
    Ok(())
}

/// What users asked through the Subscription's annotations (`newest`: the newest revision's
/// number, which an undo names to stay in force). An annotation that cannot be read is left out.
pub fn controls(sub: &Subscription, newest: i64) -> Controls {
    let a = sub.annotations();
    fn json<T: serde::de::DeserializeOwned>(a: &BTreeMap<String, String>, k: &str) -> Option<T> {
        a.get(k).and_then(|v| serde_json::from_str(v).ok())
    }
    Controls {
        paused: a.get(known::ROLLOUT_PAUSED_ANNOTATION).map(String::as_str) == Some("true"),
        approval: json(a, known::ROLLOUT_APPROVAL_ANNOTATION),
        restart: a
            .get(known::ROLLOUT_RESTART_ANNOTATION)
            .cloned()
            .unwrap_or_default(),
        undo_to: json(a, known::ROLLOUT_UNDO_ANNOTATION)
            .filter(|u: &RolloutUndo| u.newest == newest)
            .map(|u| u.to),
    }
}

/// `clusternet_rollout_*`: every transition by reason, and how long each stage that ended took.
fn record_metrics(before: Option<&RolloutStatus>, decision: &Decision) {
    for t in &decision.told {
        metrics::counter!("clusternet_rollout_transitions_total", "reason" => t.reason)
            .increment(1);
    }
    for s in &decision.status.stages {
        let was = before.and_then(|b| {
            (b.revision == decision.status.revision)
                .then(|| b.stages.iter().find(|o| o.name == s.name))
                .flatten()
        });
        let ended = matches!(s.phase, StagePhase::Succeeded | StagePhase::Failed)
            && was.is_none_or(|w| w.phase != s.phase);
        if let (true, Some(start), Some(end)) = (ended, &s.started_at, &s.finished_at) {
            let took = end.0.duration_since(start.0).as_secs_f64().max(0.0);
            metrics::histogram!("clusternet_rollout_stage_duration_seconds", "result" => s.phase.as_str())
                .record(took);
        }
    }
}

async fn reconcile(ctx: &Ctx, sub: &Subscription) -> Result<Action, RolloutError> {
    let current = sub.status.as_ref().and_then(|s| s.rollout.as_deref());
    let Some(strategy_name) = &sub.spec.rollout_strategy_name else {
        // the strategy was taken away: its status goes (the Bases' pins go with it)
        if current.is_some() || condition_changed(sub, None) {
            write(ctx, sub, None, None).await?;
        }
        return Ok(Action::await_change());
    };
    if sub.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let uid = sub.uid().unwrap_or_default();
    let revisions: Vec<(String, i64)> = ctx
        .revisions
        .get(&uid)
        .iter()
        .filter(|r| r.metadata.deletion_timestamp.is_none())
        .map(|r| (r.name_any(), r.revision))
        .collect();
    let Some(newest) = revisions.iter().max_by_key(|r| r.1).cloned() else {
        // the revision controller records the first one; its write triggers this again
        return Ok(Action::await_change());
    };
    let controls = controls(sub, newest.1);
    // an undo in force rolls an older revision out instead of the newest
    let newest = controls
        .undo_to
        .and_then(|to| revisions.iter().find(|r| r.1 == to).cloned())
        .unwrap_or(newest);
    let ns = sub.namespace().unwrap_or_default();
    let strategy = ctx
        .strategies
        .get(&ObjectRef::new(strategy_name).within(&ns));
    let bound: Vec<String> = sub
        .status
        .as_ref()
        .map(|s| s.binding_clusters.clone())
        .unwrap_or_default();
    let labels = |c: &str| -> BTreeMap<String, String> {
        let (cns, name) = c.split_once('/').unwrap_or((c, ""));
        ctx.clusters
            .get(cns)
            .iter()
            .find(|m| m.name_any() == name)
            .map(|m| m.labels().clone())
            .unwrap_or_default()
    };
    let stages_now = match &strategy {
        None => Err(format!(
            "RolloutStrategy {ns}/{strategy_name} does not exist"
        )),
        Some(s) => stages(&s.spec.stages, &bound, &labels),
    };
    let descriptions = ctx.descriptions.get(&uid);
    let target = newest.0.clone();
    let state = |c: &str| {
        let cns = c.split_once('/').map(|(n, _)| n).unwrap_or(c);
        let here: Vec<Arc<Description>> = descriptions
            .iter()
            .filter(|d| d.namespace().as_deref() == Some(cns))
            .cloned()
            .collect();
        cluster_state(&here, Some(&target))
    };
    // the metric gates of the stage under way are asked now; a stage just started is asked on
    // the next look (GATE_INTERVAL)
    let mut gates = None;
    if let (Some(c), Ok(rules)) = (current, &stages_now)
        && c.phase == RolloutPhase::Progressing
        && c.revision == target
        && c.paused_at.is_none()
        && !controls.paused
    {
        let at = usize::try_from(c.stage).unwrap_or(0);
        if let Some(rule) = rules.get(at).filter(|r| !r.metric_gates.is_empty()) {
            let mut results = Vec::new();
            for g in &rule.metric_gates {
                let r = metricgate::evaluate(g, &rule.name, &rule.clusters).await;
                metrics::counter!("clusternet_rollout_gate_evaluations_total", "result" => match &r {
                    GateResult::Passing(_) => "passing",
                    GateResult::Failing(_) => "failing",
                    GateResult::Waiting(_) => "waiting",
                })
                .increment(1);
                results.push((g.name.clone(), r));
            }
            gates = Some((at, results));
        }
    }
    let decision = decide(&Facts {
        newest,
        current,
        stages: stages_now,
        on_failure: strategy
            .as_ref()
            .and_then(|s| s.spec.on_failure)
            .unwrap_or_default(),
        state: &state,
        controls: &controls,
        gates,
        now: Timestamp::now(),
    });
    record_metrics(current, &decision);
    for t in &decision.told {
        info!(subscription = %format!("{ns}/{}", sub.name_any()), reason = t.reason, message = %t.message, "rollout");
        if t.warning {
            ctx.events.warn(sub, t.reason, &t.message);
        } else {
            ctx.events.normal(sub, t.reason, &t.message);
        }
    }
    let previous = sub.status.as_ref().and_then(|s| {
        s.conditions
            .iter()
            .find(|c| c.type_ == CONDITION_ROLLOUT_COMPLETE)
    });
    let condition = rollout_condition(&decision.status, previous, Timestamp::now());
    if current != Some(&decision.status) || condition_changed(sub, Some(&condition)) {
        write(ctx, sub, Some(&decision.status), Some(&condition)).await?;
    }
    Ok(match decision.recheck {
        Some(d) => Action::requeue(d),
        None => recheck(Duration::from_secs(600)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apis::{DescriptionStatus, ManifestStatus};
    use crate::kube_ext::health::Health;

    fn rules(names: &[(&str, &[&str])], min_success: u64, deadline: u64) -> Vec<StageRules> {
        names
            .iter()
            .map(|(n, cs)| StageRules {
                name: n.to_string(),
                clusters: cs.iter().map(|c| c.to_string()).collect(),
                max_concurrency: usize::MAX,
                min_success: Duration::from_secs(min_success),
                deadline: Duration::from_secs(deadline),
                max_failures: 0,
                require_approval: false,
                metric_gates: Vec::new(),
            })
            .collect()
    }

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + secs).expect("a time")
    }

    fn decide_at(
        current: Option<&RolloutStatus>,
        newest: (&str, i64),
        r: &[StageRules],
        state: &dyn Fn(&str) -> ClusterState,
        secs: i64,
    ) -> Decision {
        decide_with(current, newest, r, state, &Controls::default(), secs)
    }

    #[test]
    fn a_new_revision_moves_stage_by_stage_after_each_soak_and_completes() {
        let r = rules(
            &[("one", &["c1/a"]), ("two", &["c2/b"]), ("three", &["c3/c"])],
            10,
            300,
        );
        let changing = |_: &str| ClusterState::Changing("rendering".into());
        let first = decide_at(None, ("s-1", 1), &r, &changing, 0).status;
        assert_eq!(first.phase, RolloutPhase::Completed);
        assert_eq!(pin_for(&first, "c3/c"), "s-1");
        // revision 2: only stage one's cluster is released
        let d = decide_at(Some(&first), ("s-2", 2), &r, &changing, 1);
        assert_eq!(d.status.phase, RolloutPhase::Progressing);
        assert_eq!(d.status.stable_revision, "s-1");
        assert_eq!(pin_for(&d.status, "c1/a"), "s-2");
        assert_eq!(pin_for(&d.status, "c2/b"), "s-1");
        assert_eq!(d.told[0].reason, "RolloutStarted");
        // healthy at 5 s: soaking until 15 s
        let healthy_one = |c: &str| {
            if c == "c1/a" {
                ClusterState::Healthy
            } else {
                ClusterState::Changing("rendering".into())
            }
        };
        let d = decide_at(Some(&d.status), ("s-2", 2), &r, &healthy_one, 5);
        assert_eq!(d.status.stages[0].phase, StagePhase::Soaking);
        assert_eq!(d.recheck, Some(Duration::from_secs(10)));
        assert_eq!(pin_for(&d.status, "c2/b"), "s-1");
        // an interruption restarts the soak
        let d = decide_at(Some(&d.status), ("s-2", 2), &r, &changing, 8);
        assert_eq!(d.status.stages[0].healthy_since, None);
        let d = decide_at(Some(&d.status), ("s-2", 2), &r, &healthy_one, 9);
        let d = decide_at(Some(&d.status), ("s-2", 2), &r, &healthy_one, 18);
        assert_eq!(
            d.status.stages[0].phase,
            StagePhase::Soaking,
            "9 s soaked of 10"
        );
        let d = decide_at(Some(&d.status), ("s-2", 2), &r, &healthy_one, 19);
        assert_eq!(d.status.stages[0].phase, StagePhase::Succeeded);
        assert_eq!(d.status.stage, 1);
        assert_eq!(pin_for(&d.status, "c2/b"), "s-2");
        assert_eq!(pin_for(&d.status, "c3/c"), "s-1");
        let all = |_: &str| ClusterState::Healthy;
        let d = decide_at(Some(&d.status), ("s-2", 2), &r, &all, 20);
        let d = decide_at(Some(&d.status), ("s-2", 2), &r, &all, 30);
        assert_eq!(d.status.stage, 2);
        let d = decide_at(Some(&d.status), ("s-2", 2), &r, &all, 40);
        assert_eq!(d.status.stages[2].phase, StagePhase::Soaking);
        let d = decide_at(Some(&d.status), ("s-2", 2), &r, &all, 50);
        assert_eq!(d.status.phase, RolloutPhase::Completed);
        assert_eq!(d.status.stable_revision, "s-2");
        assert_eq!(pin_for(&d.status, "c3/c"), "s-2");
    }

    #[test]
    fn a_stage_not_healthy_by_its_deadline_rolls_back_and_a_newer_revision_starts_over() {
        let r = rules(&[("one", &["c1/a"]), ("two", &["c2/b"])], 0, 60);
        let stuck = |_: &str| ClusterState::Changing("available: 0/1".into());
        let first = decide_at(None, ("s-1", 1), &r, &stuck, 0).status;
        let d = decide_at(Some(&first), ("s-2", 2), &r, &stuck, 0);
        let d = decide_at(Some(&d.status), ("s-2", 2), &r, &stuck, 59);
        assert_eq!(d.status.phase, RolloutPhase::Progressing);
        let d = decide_at(Some(&d.status), ("s-2", 2), &r, &stuck, 60);
        assert_eq!(d.status.phase, RolloutPhase::RolledBack);
        assert!(
            d.status.message.contains("available: 0/1"),
            "{}",
            d.status.message
        );
        assert_eq!(d.told.last().map(|t| t.reason), Some("RolloutRolledBack"));
        assert_eq!(pin_for(&d.status, "c1/a"), "s-1");
        // a rolled back rollout stays so
        let again = decide_at(Some(&d.status), ("s-2", 2), &r, &stuck, 90);
        assert_eq!(again.status, d.status);
        // revision 3 starts from stage one with revision 1 still the stable one
        let d3 = decide_at(Some(&d.status), ("s-3", 3), &r, &stuck, 100);
        assert_eq!(d3.status.phase, RolloutPhase::Progressing);
        assert_eq!(d3.status.stable_revision, "s-1");
        // and a failed cluster fails the stage at once
        let failed = |_: &str| ClusterState::Failed("ImagePullBackOff".into());
        let d = decide_at(Some(&d3.status), ("s-3", 3), &r, &failed, 101);
        assert_eq!(d.status.phase, RolloutPhase::RolledBack);
    }

    #[test]
    fn a_newer_revision_supersedes_a_rollout_under_way_and_concurrency_limits_a_stage() {
        let mut r = rules(&[("all", &["c1/a", "c2/b", "c3/c"])], 0, 600);
        r[0].max_concurrency = 1;
        let changing = |_: &str| ClusterState::Changing("rendering".into());
        let first = decide_at(None, ("s-1", 1), &r, &changing, 0).status;
        let d = decide_at(Some(&first), ("s-2", 2), &r, &changing, 1);
        assert_eq!(d.status.stages[0].updated, vec!["c1/a"]);
        let a_ok = |c: &str| {
            if c == "c1/a" {
                ClusterState::Healthy
            } else {
                ClusterState::Changing("rendering".into())
            }
        };
        let d = decide_at(Some(&d.status), ("s-2", 2), &r, &a_ok, 2);
        assert_eq!(d.status.stages[0].updated, vec!["c1/a", "c2/b"]);
        let d3 = decide_at(Some(&d.status), ("s-3", 3), &r, &changing, 3);
        assert_eq!(
            d3.status.stable_revision, "s-1",
            "revision 2 never completed"
        );
        assert_eq!(d3.status.stages[0].updated, vec!["c1/a"]);
        assert!(d3.told[0].message.contains("supersedes"), "{:?}", d3.told);
    }

    fn decide_with(
        current: Option<&RolloutStatus>,
        newest: (&str, i64),
        r: &[StageRules],
        state: &dyn Fn(&str) -> ClusterState,
        controls: &Controls,
        secs: i64,
    ) -> Decision {
        decide(&Facts {
            newest: (newest.0.to_string(), newest.1),
            current,
            stages: Ok(r.to_vec()),
            on_failure: OnFailure::Rollback,
            state,
            controls,
            gates: None,
            now: at(secs),
        })
    }

    #[test]
    fn an_approval_holds_its_stage_and_a_pause_stops_the_clock() {
        let mut r = rules(&[("one", &["c1/a"]), ("two", &["c2/b"])], 0, 60);
        r[1].require_approval = true;
        let all = |_: &str| ClusterState::Healthy;
        let none = Controls::default();
        let first = decide_with(None, ("s-1", 1), &r, &all, &none, 0).status;
        let d = decide_with(Some(&first), ("s-2", 2), &r, &all, &none, 1);
        let d = decide_with(Some(&d.status), ("s-2", 2), &r, &all, &none, 2);
        assert_eq!(d.status.stage, 1);
        assert_eq!(d.status.stages[1].phase, StagePhase::WaitingForApproval);
        assert_eq!(pin_for(&d.status, "c2/b"), "s-1", "held before approval");
        // an approval of another revision's stage does not count
        let approval = |revision: i64, user: &str| Controls {
            approval: Some(RolloutApproval {
                revision,
                stage: "two".into(),
                user: user.into(),
            }),
            ..Default::default()
        };
        let stale = approval(1, "eve");
        let held = decide_with(Some(&d.status), ("s-2", 2), &r, &all, &stale, 100);
        assert_eq!(held.status.stages[1].phase, StagePhase::WaitingForApproval);
        let approved = approval(2, "alice");
        let d = decide_with(Some(&held.status), ("s-2", 2), &r, &all, &approved, 101);
        assert_eq!(d.status.stages[1].approved_by, "alice");
        assert_eq!(d.told[0].reason, "StageApproved");
        assert_eq!(pin_for(&d.status, "c2/b"), "s-2");
        // paused for 100 s: the 60 s deadline counts from the stage's start less the pause
        let stuck = |_: &str| ClusterState::Changing("available: 0/1".into());
        let paused = Controls {
            paused: true,
            ..approved.clone()
        };
        let p = decide_with(Some(&d.status), ("s-2", 2), &r, &stuck, &paused, 110);
        assert!(p.status.paused_at.is_some());
        let p = decide_with(Some(&p.status), ("s-2", 2), &r, &stuck, &paused, 210);
        assert_eq!(
            p.status.phase,
            RolloutPhase::Progressing,
            "nothing moves while paused"
        );
        let resumed = decide_with(Some(&p.status), ("s-2", 2), &r, &stuck, &approved, 211);
        assert_eq!(resumed.status.phase, RolloutPhase::Progressing);
        assert!(resumed.told.iter().any(|t| t.reason == "RolloutResumed"));
        let late = decide_with(
            Some(&resumed.status),
            ("s-2", 2),
            &r,
            &stuck,
            &approved,
            262,
        );
        assert_eq!(
            late.status.phase,
            RolloutPhase::RolledBack,
            "60 s of unpaused time"
        );
    }

    #[test]
    fn a_restart_rolls_the_same_revision_out_again_and_an_undo_rolls_an_older_one() {
        let r = rules(&[("one", &["c1/a"]), ("two", &["c2/b"])], 0, 60);
        let stuck = |_: &str| ClusterState::Changing("available: 0/1".into());
        let none = Controls::default();
        let first = decide_with(None, ("s-1", 1), &r, &stuck, &none, 0).status;
        let d = decide_with(Some(&first), ("s-2", 2), &r, &stuck, &none, 1);
        let back = decide_with(Some(&d.status), ("s-2", 2), &r, &stuck, &none, 70);
        assert_eq!(back.status.phase, RolloutPhase::RolledBack);
        let restart = Controls {
            restart: "2026-12-07T18:00:00Z".into(),
            ..Default::default()
        };
        let again = decide_with(Some(&back.status), ("s-2", 2), &r, &stuck, &restart, 80);
        assert_eq!(again.status.phase, RolloutPhase::Progressing);
        assert_eq!(again.status.stable_revision, "s-1");
        assert_eq!(pin_for(&again.status, "c1/a"), "s-2");
        // the same request does not restart it twice
        let same = decide_with(Some(&again.status), ("s-2", 2), &r, &stuck, &restart, 81);
        assert_eq!(same.status.started_at, again.status.started_at);
        // undo to revision 1 from a completed revision 2: revision 1 goes through the stages
        let all = |_: &str| ClusterState::Healthy;
        let mut done = decide_with(Some(&same.status), ("s-2", 2), &r, &all, &restart, 82);
        for t in 83..90 {
            done = decide_with(Some(&done.status), ("s-2", 2), &r, &all, &restart, t);
        }
        assert_eq!(done.status.phase, RolloutPhase::Completed);
        let undo = Controls {
            undo_to: Some(1),
            ..restart.clone()
        };
        let u = decide_with(Some(&done.status), ("s-1", 1), &r, &stuck, &undo, 100);
        assert_eq!(u.status.phase, RolloutPhase::Progressing);
        assert_eq!(u.status.stable_revision, "s-2");
        assert_eq!(u.status.undo_to, Some(1));
        assert_eq!(pin_for(&u.status, "c1/a"), "s-1");
        assert_eq!(pin_for(&u.status, "c2/b"), "s-2");
        assert!(u.told[0].message.contains("undo"), "{:?}", u.told);
    }

    #[test]
    fn a_metric_gate_holds_a_soaked_stage_and_a_failing_one_rolls_back() {
        let mut r = rules(&[("one", &["c1/a"]), ("two", &["c2/b"])], 10, 60);
        r[0].metric_gates = serde_json::from_value(json!([{"name": "errors",
            "address": "http://127.0.0.1:9", "query": "e", "comparison": "LessThan",
            "threshold": 0.05}]))
        .expect("gates");
        let all = |_: &str| ClusterState::Healthy;
        let none = Controls::default();
        let with = |current: &RolloutStatus, gate: Option<GateResult>, secs: i64| {
            decide(&Facts {
                newest: ("s-2".into(), 2),
                current: Some(current),
                stages: Ok(r.clone()),
                on_failure: OnFailure::Rollback,
                state: &all,
                controls: &none,
                gates: gate.map(|g| (0, vec![("errors".to_string(), g)])),
                now: at(secs),
            })
        };
        let first = decide_with(None, ("s-1", 1), &r, &all, &none, 0).status;
        let d = decide_with(Some(&first), ("s-2", 2), &r, &all, &none, 1);
        assert_eq!(
            d.recheck,
            Some(GATE_INTERVAL),
            "gates are asked every few seconds"
        );
        let passing = GateResult::Passing("0.01 < 0.05".into());
        let d = with(&d.status, Some(passing.clone()), 2);
        let d = with(&d.status, Some(passing.clone()), 13);
        assert_eq!(
            d.status.stage, 1,
            "soaked and passing: {:?}",
            d.status.stages[0]
        );
        // the same stage with no data: soaked, yet held
        let d2 = decide_with(Some(&first), ("s-2", 2), &r, &all, &none, 1);
        let waiting = GateResult::Waiting("the query returns no data yet".into());
        let held = with(&d2.status, Some(waiting.clone()), 30);
        assert_eq!(held.status.stage, 0);
        assert_eq!(held.status.stages[0].gates[0].state, "Waiting");
        let late = with(&held.status, Some(waiting), 62);
        assert_eq!(late.status.phase, RolloutPhase::RolledBack);
        // a failing gate fails the stage at once
        let failing = GateResult::Failing("0.5 is not < 0.05".into());
        let bad = with(&d2.status, Some(failing), 3);
        assert_eq!(bad.status.phase, RolloutPhase::RolledBack);
        assert!(
            bad.status
                .message
                .contains("metric gate errors: 0.5 is not < 0.05"),
            "{}",
            bad.status.message
        );
    }

    #[test]
    fn the_rollout_complete_condition_says_where_it_is_and_keeps_its_transition_time() {
        let r = rules(&[("one", &["c1/a"])], 0, 60);
        let stuck = |_: &str| ClusterState::Changing("available: 0/1".into());
        let first = decide_at(None, ("s-1", 1), &r, &stuck, 0).status;
        let done = rollout_condition(&first, None, at(0));
        assert_eq!(
            (done.status.as_str(), done.reason.as_str()),
            ("True", "Completed")
        );
        let going = decide_at(Some(&first), ("s-2", 2), &r, &stuck, 1).status;
        let c = rollout_condition(&going, Some(&done), at(1));
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("False", "Progressing")
        );
        assert_eq!(c.last_transition_time, Time(at(1)));
        let back = decide_at(Some(&going), ("s-2", 2), &r, &stuck, 70).status;
        let c2 = rollout_condition(&back, Some(&c), at(70));
        assert_eq!(c2.reason, "RolledBack");
        assert!(
            c2.message.starts_with("revision 2: stage 1 (one) failed"),
            "{}",
            c2.message
        );
        assert_eq!(c2.last_transition_time, Time(at(1)), "still False");
    }

    #[test]
    fn stages_take_clusters_by_labels_counts_and_percentages_and_the_rest_goes_last() {
        let bound: Vec<String> = ["n1/a", "n2/b", "n3/c", "n4/d"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let labels = |c: &str| {
            BTreeMap::from([(
                "tier".to_string(),
                if c == "n3/c" { "canary" } else { "prod" }.to_string(),
            )])
        };
        let specs: Vec<RolloutStage> = serde_json::from_value(json!([
            {"name": "canary", "clusterSelector": {"matchLabels": {"tier": "canary"}}},
            {"name": "half", "clusters": "50%", "maxConcurrency": 1, "minSuccessTime": "30s"},
        ]))
        .expect("stages");
        let s = stages(&specs, &bound, &labels).expect("valid");
        assert_eq!(s[0].clusters, vec!["n3/c"]);
        assert_eq!(s[1].clusters, vec!["n1/a", "n2/b"]);
        assert_eq!(s[1].min_success, Duration::from_secs(30));
        assert_eq!(s[2].name, REMAINING_STAGE);
        assert_eq!(s[2].clusters, vec!["n4/d"]);
        let bad: Vec<RolloutStage> =
            serde_json::from_value(json!([{"name": "x", "minSuccessTime": "soon"}]))
                .expect("stages");
        let e = stages(&bad, &bound, &labels).expect_err("invalid");
        assert!(e.contains("stage 1 (x): minSuccessTime"), "{e}");
    }

    #[test]
    fn a_cluster_is_healthy_only_when_every_description_is_deployed_at_the_revision_and_current() {
        let desc = |rev: &str, generation: i64, observed: i64, health: HealthStatus| {
            let mut d: Description = serde_json::from_value(json!({
                "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Description",
                "metadata": {"name": "d", "namespace": "c1", "generation": generation,
                    "annotations": {"apps.clusternet.io/revision": rev}},
                "spec": {"deployer": "Generic"}
            }))
            .expect("a Description");
            d.status = Some(DescriptionStatus {
                phase: Some(DescriptionPhase::Success),
                observed_generation: Some(observed),
                manifest_statuses: vec![ManifestStatus {
                    health: Some(Health {
                        status: health,
                        message: "available: 0/1".into(),
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            });
            Arc::new(d)
        };
        assert_eq!(
            cluster_state(&[desc("s-2", 2, 2, HealthStatus::Current)], Some("s-2")),
            ClusterState::Healthy
        );
        assert!(matches!(
            cluster_state(&[desc("s-1", 2, 2, HealthStatus::Current)], Some("s-2")),
            ClusterState::Changing(_)
        ));
        assert!(matches!(
            cluster_state(&[desc("s-2", 3, 2, HealthStatus::Current)], Some("s-2")),
            ClusterState::Changing(_)
        ));
        assert!(matches!(
            cluster_state(&[desc("s-2", 2, 2, HealthStatus::InProgress)], Some("s-2")),
            ClusterState::Changing(_)
        ));
        assert!(matches!(
            cluster_state(&[desc("s-2", 2, 2, HealthStatus::Failed)], Some("s-2")),
            ClusterState::Failed(_)
        ));
        assert!(matches!(
            cluster_state(&[], Some("s-2")),
            ClusterState::Changing(_)
        ));
    }
}
