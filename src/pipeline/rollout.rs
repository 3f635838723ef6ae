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
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::reflector::{ObjectRef, Store};
use serde_json::json;
use tokio_util::sync::CancellationToken;
use tracing::info;

use super::{index, revision};
use crate::apis::known;
use crate::apis::{
    Description, DescriptionPhase, ManagedCluster, OnFailure, RolloutPhase, RolloutStage,
    RolloutStatus, RolloutStrategy, StagePhase, StageStatus, Subscription,
};
use crate::config::parse_go_duration;
use crate::kube_ext::health::HealthStatus;
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
}

/// `n` or `n%` of `total` (a percentage rounded up).
fn count_of(v: &IntOrString, total: usize, what: &str) -> Result<usize, String> {
    match v {
        IntOrString::Int(n) => usize::try_from(*n).map_err(|_| format!("{what} {n} is negative")),
        IntOrString::String(s) => {
            let bad = || format!("{what} {s:?} is neither a number nor a percentage");
            let t = s.trim();
            match t.strip_suffix('%') {
                Some(p) => {
                    let p: usize = p.trim().parse().map_err(|_| bad())?;
                    Ok((total * p).div_ceil(100))
                }
                None => t.parse().map_err(|_| bad()),
            }
        }
    }
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
/// being rolled out).
pub fn cluster_state(descriptions: &[Arc<Description>], revision: &str) -> ClusterState {
    let live: Vec<&Arc<Description>> = descriptions
        .iter()
        .filter(|d| d.metadata.deletion_timestamp.is_none())
        .collect();
    if live.is_empty() {
        return ClusterState::Changing("no Description yet".into());
    }
    for d in live {
        let name = d.name_any();
        if d.annotations()
            .get(known::REVISION_ANNOTATION)
            .map(String::as_str)
            != Some(revision)
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
    pub now: Timestamp,
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
            stages: Vec::new(),
        },
        Some(c) if c.revision != *rev => {
            // the last revision that completed everywhere stays the one to fall back on
            let (stable, stable_number) = if c.phase == RolloutPhase::Completed {
                (c.revision.clone(), Some(c.revision_number))
            } else {
                (c.stable_revision.clone(), c.stable_revision_number)
            };
            let message = if c.phase == RolloutPhase::Progressing {
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
    // today's clusters per stage: one that joined goes where the strategy puts it now; what a
    // stage already changed stays changed
    let mut stages = fresh_stages(rules);
    for (i, s) in stages.iter_mut().enumerate() {
        if let Some(old) = st.stages.iter().find(|o| o.name == s.name) {
            s.phase = old.phase;
            s.started_at = old.started_at.clone();
            s.healthy_since = old.healthy_since.clone();
            s.finished_at = old.finished_at.clone();
            s.message = old.message.clone();
            s.updated = if old.phase == StagePhase::Succeeded {
                s.clusters.clone()
            } else {
                s.clusters
                    .iter()
                    .filter(|c| old.updated.contains(c))
                    .cloned()
                    .collect()
            };
        }
        let _ = i;
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
        let failure = if failed.len() > rule.max_failures {
            Some(format!(
                "{} of its clusters failed (maxFailures {}): {}",
                failed.len(),
                rule.max_failures,
                failed.join("; ")
            ))
        } else if stage.healthy.len() < stage.clusters.len()
            && since(stage.started_at.as_ref(), f.now) >= rule.deadline
        {
            Some(format!(
                "not healthy within its progressDeadline ({}s): {}",
                rule.deadline.as_secs(),
                waiting
                    .clone()
                    .or_else(|| failed.first().cloned())
                    .unwrap_or_default()
            ))
        } else {
            None
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
            if stage.clusters.is_empty() || soaked >= rule.min_success {
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
            let left = rule.min_success - soaked;
            stage.message = format!("healthy; soaking for {}s more", left.as_secs());
            recheck_in = Some(left);
        } else {
            stage.phase = StagePhase::Progressing;
            stage.healthy_since = None;
            stage.message = waiting
                .map(|w| format!("waiting for {w}"))
                .unwrap_or_else(|| "changing its clusters".into());
            recheck_in = Some(
                rule.deadline
                    .saturating_sub(since(stage.started_at.as_ref(), f.now))
                    .max(Duration::from_secs(1)),
            );
        }
        st.message = format!(
            "stage {} ({}) of revision {number}: {}",
            i + 1,
            stage.name,
            stage.message
        );
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

async fn write(
    ctx: &Ctx,
    sub: &Subscription,
    rollout: Option<&RolloutStatus>,
) -> Result<(), RolloutError> {
    let api: Api<Subscription> =
        Api::namespaced(ctx.rt.client.clone(), &sub.namespace().unwrap_or_default());
    let body = apply::status_body(sub, json!({ "rollout": rollout }));
    apply::apply_status(&api, FIELD_MANAGER, &sub.name_any(), &body)
        .await
        .map_err(ApiFailure::about(sub, "writing status.rollout"))?;
    Ok(())
}

async fn reconcile(ctx: &Ctx, sub: &Subscription) -> Result<Action, RolloutError> {
    let current = sub.status.as_ref().and_then(|s| s.rollout.as_deref());
    let Some(strategy_name) = &sub.spec.rollout_strategy_name else {
        // the strategy was taken away: its status goes (the Bases' pins go with it)
        if current.is_some() {
            write(ctx, sub, None).await?;
        }
        return Ok(Action::await_change());
    };
    if sub.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let uid = sub.uid().unwrap_or_default();
    let Some(newest) = ctx
        .revisions
        .get(&uid)
        .iter()
        .filter(|r| r.metadata.deletion_timestamp.is_none())
        .max_by_key(|r| r.revision)
        .map(|r| (r.name_any(), r.revision))
    else {
        // the revision controller records the first one; its write triggers this again
        return Ok(Action::await_change());
    };
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
    let target = current
        .filter(|c| c.revision == newest.0)
        .map(|c| c.revision.clone())
        .unwrap_or_else(|| newest.0.clone());
    let state = |c: &str| {
        let cns = c.split_once('/').map(|(n, _)| n).unwrap_or(c);
        let here: Vec<Arc<Description>> = descriptions
            .iter()
            .filter(|d| d.namespace().as_deref() == Some(cns))
            .cloned()
            .collect();
        cluster_state(&here, &target)
    };
    let decision = decide(&Facts {
        newest,
        current,
        stages: stages_now,
        on_failure: strategy
            .as_ref()
            .and_then(|s| s.spec.on_failure)
            .unwrap_or_default(),
        state: &state,
        now: Timestamp::now(),
    });
    for t in &decision.told {
        info!(subscription = %format!("{ns}/{}", sub.name_any()), reason = t.reason, message = %t.message, "rollout");
        if t.warning {
            ctx.events.warn(sub, t.reason, &t.message);
        } else {
            ctx.events.normal(sub, t.reason, &t.message);
        }
    }
    if current != Some(&decision.status) {
        write(ctx, sub, Some(&decision.status)).await?;
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
        decide(&Facts {
            newest: (newest.0.to_string(), newest.1),
            current,
            stages: Ok(r.to_vec()),
            on_failure: OnFailure::Rollback,
            state,
            now: at(secs),
        })
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
            cluster_state(&[desc("s-2", 2, 2, HealthStatus::Current)], "s-2"),
            ClusterState::Healthy
        );
        assert!(matches!(
            cluster_state(&[desc("s-1", 2, 2, HealthStatus::Current)], "s-2"),
            ClusterState::Changing(_)
        ));
        assert!(matches!(
            cluster_state(&[desc("s-2", 3, 2, HealthStatus::Current)], "s-2"),
            ClusterState::Changing(_)
        ));
        assert!(matches!(
            cluster_state(&[desc("s-2", 2, 2, HealthStatus::InProgress)], "s-2"),
            ClusterState::Changing(_)
        ));
        assert!(matches!(
            cluster_state(&[desc("s-2", 2, 2, HealthStatus::Failed)], "s-2"),
            ClusterState::Failed(_)
        ));
        assert!(matches!(
            cluster_state(&[], "s-2"),
            ClusterState::Changing(_)
        ));
    }
}
