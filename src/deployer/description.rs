//! Reconciling one Generic Description against its child (docs/spec/deployer.md §8, §10, §11):
//! apply, prune, record per-object status (`status.manifestStatuses`, phase, reason), repair drift
//! (seen through the child's watches, repaired or reported by policy), and on deletion remove the objects before releasing the finalizer.

use std::sync::Arc;
use std::time::Duration;

use crate::runtime::controller::Action;
use kube::ResourceExt;
use kube::api::Api;
use serde_json::json;
use tracing::{info, warn};

use super::generic::{ChildCluster, Outcome};
use crate::apis::known;
use crate::apis::{Description, DescriptionDeployer, DescriptionPhase, DescriptionStatus, Drift};
use crate::kube_ext::condition::{Verdict, kstatus_conditions};
use crate::kube_ext::health::HealthStatus;
use crate::kube_ext::object_ref::ObjectRef;
use crate::runtime::controller::{ApiFailure, ReconcileError};
use crate::runtime::events::Events;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::jiff::Timestamp;

#[derive(Debug, thiserror::Error)]
pub enum DeployError {
    #[error(transparent)]
    Api(#[from] ApiFailure),
    #[error("Description {desc}: deleting its objects in the child: {message}")]
    Offload { desc: String, message: String },
}

impl ReconcileError for DeployError {
    fn metric_label(&self) -> &'static str {
        match self {
            DeployError::Api(_) => "api",
            DeployError::Offload { .. } => "offload",
        }
    }
}

/// How often a Description is looked at again when the child's watches cannot tell of changes
/// (a kind whose watch has not listed yet): soon while workloads settle, then for drift.
const UNSETTLED: Duration = Duration::from_secs(2);
const SETTLED: Duration = Duration::from_secs(20);
/// After a failed apply.
const FAILED: Duration = Duration::from_secs(5);
/// Watched, still settling: the watch tells of status changes; this is only a safety net.
const WATCHED_UNSETTLED: Duration = Duration::from_secs(30);

/// When to look at a Description again without being told: writes happen only on drift, so the
/// resync of a watched, settled Description is cheap and rare.
pub fn next_look(outcome: &Outcome, resync: Duration) -> Duration {
    match (outcome.errors.is_empty(), outcome.watched, outcome.settled) {
        (false, _, _) => FAILED,
        (true, false, false) => UNSETTLED,
        (true, false, true) => SETTLED,
        (true, true, false) => WATCHED_UNSETTLED.min(resync),
        (true, true, true) => resync,
    }
}

/// The events and log line of one drift.
pub fn drift_note(object: &ObjectRef, d: &Drift) -> (&'static str, String) {
    let what = if d.deleted {
        "deleted in the child".to_string()
    } else {
        d.fields
            .iter()
            .map(|f| {
                let by = if f.manager.is_empty() {
                    "removed".to_string()
                } else {
                    format!(
                        "changed by {} ({}) at {}",
                        f.manager, f.operation, f.changed_at
                    )
                };
                format!(
                    "{} {by}: desired {:?}, live {:?}",
                    f.path, f.desired, f.live
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    };
    let (reason, done) = match d.action.as_str() {
        "Repaired" => ("DriftRepaired", "repaired"),
        "RepairPaused" => (
            "DriftRepairPaused",
            "repairs paused: something in the child keeps changing it back",
        ),
        _ => ("DriftDetected", "left as it is (drift policy Report)"),
    };
    (reason, format!("{} {what}; {done}", object.display()))
}

fn key(d: &Description) -> String {
    format!("{}/{}", d.namespace().unwrap_or_default(), d.name_any())
}

pub async fn release_finalizer(
    api: &Api<Description>,
    desc: &Description,
) -> Result<(), DeployError> {
    crate::runtime::apply::release_finalizer(api, desc, known::APP_FINALIZER)
        .await
        .map_err(|source| ApiFailure::about(desc, "releasing the finalizer")(source).into())
}

/// What to do with a Description before anything is applied.
#[derive(Debug, PartialEq)]
pub enum Start {
    /// Not ours to deploy (a Helm Description is the Helm deployer's, [`super::helm`]), or being
    /// deleted after our finalizer is gone: wait for a change.
    Nothing,
    /// Being deleted: remove its objects from the child, then release the finalizer.
    Offload,
    /// Apply it to the child.
    Apply,
}

pub fn start(desc: &Description) -> Start {
    if desc.spec.deployer != DescriptionDeployer::Generic {
        return Start::Nothing;
    }
    if desc.metadata.deletion_timestamp.is_none() {
        return Start::Apply;
    }
    if desc.finalizers().iter().any(|f| f == known::APP_FINALIZER) {
        Start::Offload
    } else {
        Start::Nothing
    }
}

/// What an apply tells about the Description.
#[derive(Debug, PartialEq)]
pub enum Report {
    /// A Warning event `UnSuccessfullyDeployed` with this reason.
    Failed(String),
    /// A Normal event `SuccessfullyDeployed`.
    Deployed,
}

/// What the status must become after an apply: written only when it differs from `previous`,
/// with an event when the failure is new (or its reason changed) or the deployment just succeeded.
pub fn plan_status(
    previous: &DescriptionStatus,
    outcome: Outcome,
    generation: Option<i64>,
    now: Timestamp,
) -> Option<(DescriptionStatus, Option<Report>)> {
    let failed = !outcome.errors.is_empty();
    let status = with_conditions(
        DescriptionStatus {
            phase: Some(if failed {
                DescriptionPhase::Failure
            } else {
                DescriptionPhase::Success
            }),
            reason: outcome.errors.join("; "),
            manifest_statuses: outcome.statuses,
            observed_generation: generation,
            conditions: Vec::new(),
        },
        &previous.conditions,
        now,
    );
    if status == *previous {
        return None;
    }
    let report = if failed && previous.reason != status.reason {
        Some(Report::Failed(status.reason.clone()))
    } else if !failed && previous.phase != Some(DescriptionPhase::Success) {
        Some(Report::Deployed)
    } else {
        None
    };
    Some((status, report))
}

/// Whether a Description is Ready, as kstatus reads it (deployer.md §17.2): a failed deployment
/// or an object kstatus calls Failed in the child is Stalled; a deployment on its way, or an
/// object not Current yet, is Reconciling; every object applied and Current is Ready.
pub fn verdict(status: &DescriptionStatus) -> Verdict {
    let failed_object = status.manifest_statuses.iter().find_map(|m| {
        m.health
            .as_ref()
            .filter(|h| h.status == HealthStatus::Failed)
            .map(|h| format!("{}: {}", m.feed, h.message))
    });
    match &status.phase {
        Some(DescriptionPhase::Failure) => {
            return Verdict::Stalled("DeployFailed".into(), status.reason.clone());
        }
        _ if failed_object.is_some() => {
            return Verdict::Stalled("ObjectFailed".into(), failed_object.unwrap_or_default());
        }
        Some(DescriptionPhase::Success) => {}
        Some(other) => {
            let message = match status.reason.as_str() {
                "" => format!("phase {other}"),
                why => format!("phase {other}: {why}"),
            };
            return Verdict::Progressing("Deploying", message);
        }
        None => return Verdict::Progressing("Deploying", "not deployed yet".into()),
    }
    let unhealthy = status.manifest_statuses.iter().find(|m| {
        m.health
            .as_ref()
            .is_some_and(|h| h.status != HealthStatus::Current)
    });
    if let Some(m) = unhealthy {
        let why = m.health.as_ref().map(|h| h.message.as_str()).unwrap_or("");
        return Verdict::Progressing(
            "Progressing",
            format!("{} is not healthy yet: {why}", m.feed),
        );
    }
    Verdict::Ready(match status.manifest_statuses.len() {
        1 => "its object is applied and healthy".into(),
        n => format!("its {n} objects are applied and healthy"),
    })
}

/// `status` with the conditions of its [`verdict`], for the generation it speaks for, keeping
/// the transition times of `previous`.
pub fn with_conditions(
    mut status: DescriptionStatus,
    previous: &[Condition],
    now: Timestamp,
) -> DescriptionStatus {
    status.conditions =
        kstatus_conditions(&verdict(&status), status.observed_generation, previous, now);
    status
}

/// The status apply body: every field of it, empty ones included, so whichever deployer (agent
/// or parent) reports last owns all of it and nothing another one wrote lingers.
fn status_body(desc: &Description, status: &DescriptionStatus) -> serde_json::Value {
    crate::runtime::apply::status_body(
        desc,
        json!({
            "phase": status.phase,
            "reason": status.reason,
            "manifestStatuses": status.manifest_statuses,
            "observedGeneration": status.observed_generation,
            "conditions": status.conditions,
        }),
    )
}

/// Reconciles `desc` against its child; `siblings` are the other Descriptions the deployer knows
/// of (any namespace: only those of `desc`'s namespace, the same child, are looked at), so objects
/// two Subscriptions share stay until the last one lets go.
pub async fn reconcile(
    child: &ChildCluster,
    api: &Api<Description>,
    desc: Arc<Description>,
    siblings: &[Arc<Description>],
    events: &Events,
    resync: Duration,
) -> Result<Action, DeployError> {
    let elsewhere = super::generic::wanted_elsewhere(&desc, siblings.iter().map(|d| d.as_ref()));
    match start(&desc) {
        Start::Nothing => return Ok(Action::await_change()),
        Start::Offload => {
            offload(child, api, &desc, &elsewhere, events).await?;
            return Ok(Action::await_change());
        }
        Start::Apply => {}
    }
    let previous = desc.status.clone().unwrap_or_default();
    let outcome = child
        .apply(&desc, &previous.manifest_statuses, &elsewhere)
        .await;
    let next = next_look(&outcome, resync);
    tell_outcome(&desc, &outcome, events);
    let Some((status, report)) = plan_status(
        &previous,
        outcome,
        desc.metadata.generation,
        Timestamp::now(),
    ) else {
        return Ok(Action::requeue(next));
    };
    match report {
        Some(Report::Failed(reason)) => {
            warn!(description = %key(&desc), reason = %reason, "UnSuccessfullyDeployed");
            events.warn(desc.as_ref(), "UnSuccessfullyDeployed", &reason);
        }
        Some(Report::Deployed) => {
            info!(description = %key(&desc), "SuccessfullyDeployed");
            let message = format!("Description {} is deployed successfully", key(&desc));
            events.normal(desc.as_ref(), "SuccessfullyDeployed", &message);
        }
        None => {}
    }
    let body = status_body(&desc, &status);
    crate::runtime::apply::apply_status(api, child.field_manager(), &desc.name_any(), &body)
        .await
        .map_err(ApiFailure::about(desc.as_ref(), "writing the status"))?;
    Ok(Action::requeue(next))
}

/// A deleted Description's objects leave the child (those a sibling still wants are handed
/// over), then its finalizer goes; a failure is told as FailedDeletingDescription and retried.
async fn offload(
    child: &ChildCluster,
    api: &Api<Description>,
    desc: &Arc<Description>,
    elsewhere: &[super::generic::Wanted],
    events: &Events,
) -> Result<(), DeployError> {
    let done = match child.offload(desc, elsewhere).await {
        Ok(done) => done,
        Err(message) => {
            events.warn(desc.as_ref(), "FailedDeletingDescription", &message);
            return Err(DeployError::Offload {
                desc: key(desc),
                message,
            });
        }
    };
    info!(
        description = %key(desc),
        deleted = done.deleted,
        handed_over = done.handed_over,
        absent = done.absent,
        not_ours = done.not_ours,
        not_served = done.not_served,
        "deleted its objects from the child"
    );
    release_finalizer(api, desc).await
}

/// What an apply pass did, told as a metric (per cluster and result), drift Warnings (the
/// Subscription hears of them from the controller's status aggregation, which may write events
/// in its namespace: an agent may not) and, when it wrote, bad drift policies.
fn tell_outcome(desc: &Description, outcome: &Outcome, events: &Events) {
    let cluster = desc
        .labels()
        .get(known::CLUSTER_NAME_LABEL)
        .cloned()
        .unwrap_or_else(|| desc.namespace().unwrap_or_default());
    let result = if outcome.errors.is_empty() {
        "success"
    } else {
        "failure"
    };
    metrics::counter!("clusternet_description_apply_total", "cluster" => cluster, "result" => result)
        .increment(1);
    for (object, d) in &outcome.drifts {
        let (reason, note) = drift_note(object, d);
        warn!(description = %key(desc), %note, "{reason}");
        events.warn(desc, reason, &note);
    }
    if outcome.writes > 0 {
        for note in &outcome.notes {
            events.warn(desc, "InvalidDriftPolicy", note);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apis::{Feed, ManifestStatus};

    fn desc(deployer: &str, deleting: bool, finalizer: bool) -> Description {
        let mut d: Description = serde_json::from_value(json!({
            "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Description",
            "metadata": {"name": "app-x-generic", "namespace": "clusternet-a"},
            "spec": {"deployer": deployer}
        }))
        .expect("a Description");
        if deleting {
            d.metadata.deletion_timestamp =
                Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
                ));
        }
        if finalizer {
            d.metadata.finalizers = Some(vec![known::APP_FINALIZER.into()]);
        }
        d
    }

    fn outcome(errors: &[&str]) -> Outcome {
        Outcome {
            statuses: vec![ManifestStatus {
                feed: Feed::new("v1", "ConfigMap", "demo", "a"),
                observed_status: None,
                ..Default::default()
            }],
            errors: errors.iter().map(|e| e.to_string()).collect(),
            settled: true,
            ..Default::default()
        }
    }

    #[test]
    fn what_a_description_needs_first() {
        assert_eq!(start(&desc("Generic", false, true)), Start::Apply);
        assert_eq!(start(&desc("Generic", true, true)), Start::Offload);
        assert_eq!(start(&desc("Generic", true, false)), Start::Nothing);
        assert_eq!(start(&desc("Helm", false, true)), Start::Nothing);
    }

    const T0: Timestamp = Timestamp::UNIX_EPOCH;
    const T1: Timestamp = Timestamp::MAX;

    fn health(status: HealthStatus, message: &str) -> crate::apis::apps::ManifestStatus {
        serde_json::from_value(json!({"kind": "Deployment", "apiVersion": "apps/v1",
            "namespace": "demo", "name": "web",
            "health": {"status": status, "message": message}}))
        .expect("a manifest status")
    }

    #[test]
    fn ready_means_every_object_applied_and_healthy() {
        let ready = |s: &DescriptionStatus| {
            let c = with_conditions(s.clone(), &[], T0).conditions;
            c.iter()
                .map(|c| format!("{}={}:{}", c.type_, c.status, c.reason))
                .collect::<Vec<_>>()
                .join(",")
        };
        let mut s = DescriptionStatus {
            phase: Some(DescriptionPhase::Success),
            observed_generation: Some(3),
            manifest_statuses: vec![health(HealthStatus::Current, "available")],
            ..Default::default()
        };
        assert_eq!(ready(&s), "Ready=True:Ready");
        assert_eq!(
            with_conditions(s.clone(), &[], T0).conditions[0].observed_generation,
            Some(3)
        );
        s.manifest_statuses = vec![health(HealthStatus::InProgress, "1 of 2 updated")];
        assert_eq!(
            ready(&s),
            "Ready=False:Progressing,Reconciling=True:Progressing"
        );
        s.manifest_statuses = vec![health(HealthStatus::Failed, "progress deadline exceeded")];
        assert_eq!(
            ready(&s),
            "Ready=False:ObjectFailed,Stalled=True:ObjectFailed"
        );
        assert!(
            matches!(verdict(&s), Verdict::Stalled(_, m) if m.contains("progress deadline exceeded"))
        );
        s.phase = Some(DescriptionPhase::Failure);
        s.reason = "quota exceeded".into();
        assert_eq!(
            verdict(&s),
            Verdict::Stalled("DeployFailed".into(), "quota exceeded".into())
        );
        s.phase = Some(DescriptionPhase::Installing);
        s.reason.clear();
        s.manifest_statuses.clear();
        assert_eq!(
            ready(&s),
            "Ready=False:Deploying,Reconciling=True:Deploying"
        );
        assert_eq!(
            verdict(&DescriptionStatus::default()),
            Verdict::Progressing("Deploying", "not deployed yet".into())
        );
    }

    #[test]
    fn status_is_written_when_it_changes_with_an_event_on_news() {
        let never = DescriptionStatus::default();
        let (ok, report) = plan_status(&never, outcome(&[]), Some(1), T0).expect("a first status");
        assert_eq!(ok.phase, Some(DescriptionPhase::Success));
        assert_eq!(report, Some(Report::Deployed));
        // the same again: no write
        assert_eq!(plan_status(&ok, outcome(&[]), Some(1), T1), None);
        // a failure: written, with its reason
        let (bad, report) = plan_status(&ok, outcome(&["boom"]), Some(1), T1).expect("a failure");
        assert_eq!(
            (bad.phase, bad.reason.as_str()),
            (Some(DescriptionPhase::Failure), "boom")
        );
        assert_eq!(report, Some(Report::Failed("boom".into())));
        // the same failure with other statuses: written, no second event
        let mut other = outcome(&["boom"]);
        other.statuses.clear();
        let (_, report) = plan_status(&bad, other, Some(1), T1).expect("a change");
        assert_eq!(report, None);
        // the body carries every field, the empty reason too, and nothing the server owns
        let body = status_body(&desc("Generic", false, true), &ok);
        assert_eq!(body["status"]["reason"], "");
        assert_eq!(body["status"]["phase"], "Success");
        assert!(body["metadata"].get("resourceVersion").is_none());
        assert!(body.get("spec").is_none());
    }
}
