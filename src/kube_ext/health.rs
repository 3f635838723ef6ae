//! Whether an object in a cluster has become what its spec asks for, in kstatus's terms
//! (sigs.k8s.io/cli-utils/pkg/kstatus, the status Flux, Argo CD and `kubectl wait` users know):
//! `Current` (reconciled and healthy), `InProgress`, `Failed`, `Terminating`. The rules are
//! kstatus's: an `observedGeneration` behind `metadata.generation` is in progress; Deployments,
//! ReplicaSets, StatefulSets and DaemonSets count their updated, ready and available replicas;
//! a Job is current once complete; a Pod once running and ready (or succeeded); any other kind
//! by its `Stalled`/`Reconciling` conditions and, beyond kstatus, by `Ready`/`Available`
//! conditions that say False. A kind without a status is current as soon as it exists.
//!
//! Rollouts (docs/spec/deployer.md §16) take a stage as healthy only when all its objects are
//! `Current`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// An object's health, kstatus's statuses.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, schemars::JsonSchema)]
pub enum HealthStatus {
    Current,
    InProgress,
    Failed,
    Terminating,
}

/// An object's health and why.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, schemars::JsonSchema)]
pub struct Health {
    pub status: HealthStatus,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

impl Health {
    fn current(message: impl Into<String>) -> Self {
        Health {
            status: HealthStatus::Current,
            message: message.into(),
        }
    }
    fn in_progress(message: impl Into<String>) -> Self {
        Health {
            status: HealthStatus::InProgress,
            message: message.into(),
        }
    }
    fn failed(message: impl Into<String>) -> Self {
        Health {
            status: HealthStatus::Failed,
            message: message.into(),
        }
    }
}

fn int(v: &Value, pointer: &str) -> Option<i64> {
    v.pointer(pointer).and_then(Value::as_i64)
}

/// The condition of `obj` of this type: (status, reason, message).
fn condition<'a>(obj: &'a Value, type_: &str) -> Option<(&'a str, &'a str, &'a str)> {
    obj.pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"].as_str() == Some(type_))
        .map(|c| {
            (
                c["status"].as_str().unwrap_or_default(),
                c["reason"].as_str().unwrap_or_default(),
                c["message"].as_str().unwrap_or_default(),
            )
        })
}

/// The health of `obj` (a whole object as the API server returns it).
pub fn of(obj: &Value) -> Health {
    if obj.pointer("/metadata/deletionTimestamp").is_some() {
        return Health {
            status: HealthStatus::Terminating,
            message: "being deleted".into(),
        };
    }
    if let (Some(generation), Some(observed)) = (
        int(obj, "/metadata/generation"),
        int(obj, "/status/observedGeneration"),
    ) && observed < generation
    {
        return Health::in_progress(format!(
            "generation {generation} is not observed yet (at {observed})"
        ));
    }
    // kstatus's standard conditions come first for every kind
    if let Some(("True", reason, message)) = condition(obj, "Stalled") {
        return Health::failed(format!("Stalled: {reason} {message}").trim().to_string());
    }
    if let Some(("True", reason, message)) = condition(obj, "Reconciling") {
        return Health::in_progress(
            format!("Reconciling: {reason} {message}")
                .trim()
                .to_string(),
        );
    }
    let group = obj["apiVersion"]
        .as_str()
        .and_then(|v| v.split_once('/').map(|(g, _)| g))
        .unwrap_or("");
    match (group, obj["kind"].as_str().unwrap_or_default()) {
        ("apps", "Deployment") => deployment(obj),
        ("apps", "ReplicaSet") | ("apps", "StatefulSet") => replicated(obj),
        ("apps", "DaemonSet") => daemon_set(obj),
        ("batch", "Job") => job(obj),
        ("", "Pod") => pod(obj),
        ("", "PersistentVolumeClaim") => match obj.pointer("/status/phase").and_then(Value::as_str)
        {
            Some("Bound") => Health::current("bound"),
            phase => Health::in_progress(format!("phase {}", phase.unwrap_or("unknown"))),
        },
        _ => generic(obj),
    }
}

/// A kind we know nothing special of: current unless a Ready or Available condition says False.
fn generic(obj: &Value) -> Health {
    for type_ in ["Ready", "Available"] {
        if let Some((status, reason, message)) = condition(obj, type_)
            && status != "True"
        {
            return Health::in_progress(
                format!("{type_} is {status}: {reason} {message}")
                    .trim()
                    .to_string(),
            );
        }
    }
    Health::current("")
}

fn deployment(obj: &Value) -> Health {
    if let Some((_, "ProgressDeadlineExceeded", message)) = condition(obj, "Progressing") {
        return Health::failed(format!("progress deadline exceeded: {message}"));
    }
    let want = int(obj, "/spec/replicas").unwrap_or(1);
    let get = |f: &str| int(obj, &format!("/status/{f}")).unwrap_or(0);
    let (replicas, updated, ready, available) = (
        get("replicas"),
        get("updatedReplicas"),
        get("readyReplicas"),
        get("availableReplicas"),
    );
    if updated < want {
        return Health::in_progress(format!("updated: {updated}/{want}"));
    }
    if replicas > updated {
        return Health::in_progress(format!("pending termination: {}", replicas - updated));
    }
    if available < want {
        return Health::in_progress(format!("available: {available}/{want}"));
    }
    if ready < want {
        return Health::in_progress(format!("ready: {ready}/{want}"));
    }
    if let Some(("False", reason, _)) = condition(obj, "Available") {
        return Health::in_progress(format!("Available is False: {reason}"));
    }
    Health::current(format!("{available}/{want} available"))
}

fn replicated(obj: &Value) -> Health {
    let want = int(obj, "/spec/replicas").unwrap_or(1);
    let get = |f: &str| int(obj, &format!("/status/{f}")).unwrap_or(0);
    let ready = get("readyReplicas");
    if ready < want {
        return Health::in_progress(format!("ready: {ready}/{want}"));
    }
    if obj["kind"] == "StatefulSet" {
        let partition = int(obj, "/spec/updateStrategy/rollingUpdate/partition").unwrap_or(0);
        let updated = get("updatedReplicas");
        if updated < want - partition {
            return Health::in_progress(format!("updated: {updated}/{}", want - partition));
        }
        let (current, update) = (
            obj.pointer("/status/currentRevision"),
            obj.pointer("/status/updateRevision"),
        );
        if partition == 0 && current != update {
            return Health::in_progress("the update revision is not current yet");
        }
    } else if get("availableReplicas") < want {
        return Health::in_progress(format!("available: {}/{want}", get("availableReplicas")));
    }
    Health::current(format!("{ready}/{want} ready"))
}

fn daemon_set(obj: &Value) -> Health {
    let get = |f: &str| int(obj, &format!("/status/{f}")).unwrap_or(0);
    let desired = get("desiredNumberScheduled");
    for (field, what) in [
        ("currentNumberScheduled", "scheduled"),
        ("updatedNumberScheduled", "updated"),
        ("numberAvailable", "available"),
        ("numberReady", "ready"),
    ] {
        let n = get(field);
        if n < desired {
            return Health::in_progress(format!("{what}: {n}/{desired}"));
        }
    }
    Health::current(format!("{desired}/{desired} ready"))
}

fn job(obj: &Value) -> Health {
    if let Some(("True", reason, message)) = condition(obj, "Failed") {
        return Health::failed(format!("{reason} {message}").trim().to_string());
    }
    if let Some(("True", _, _)) = condition(obj, "Complete") {
        return Health::current("complete");
    }
    Health::in_progress(format!(
        "succeeded: {}",
        int(obj, "/status/succeeded").unwrap_or(0)
    ))
}

fn pod(obj: &Value) -> Health {
    match obj.pointer("/status/phase").and_then(Value::as_str) {
        Some("Succeeded") => Health::current("succeeded"),
        Some("Failed") => Health::failed(
            obj.pointer("/status/reason")
                .and_then(Value::as_str)
                .unwrap_or("failed")
                .to_string(),
        ),
        Some("Running") => match condition(obj, "Ready") {
            Some(("True", _, _)) => Health::current("running and ready"),
            _ => Health::in_progress("running, not ready"),
        },
        phase => Health::in_progress(format!("phase {}", phase.unwrap_or("unknown"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deploy(generation: i64, status: Value) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "d", "generation": generation},
            "spec": {"replicas": 2}, "status": status})
    }

    #[test]
    fn a_deployment_is_current_once_its_generation_is_observed_and_every_replica_is_updated_and_available()
     {
        let done = json!({"observedGeneration": 2, "replicas": 2, "updatedReplicas": 2,
            "readyReplicas": 2, "availableReplicas": 2});
        assert_eq!(of(&deploy(2, done.clone())).status, HealthStatus::Current);
        // the status still speaks of the previous template
        let h = of(&deploy(3, done));
        assert_eq!(h.status, HealthStatus::InProgress);
        assert!(h.message.contains("generation 3"), "{}", h.message);
        // the new pods are not available yet (kwok keeps them Pending, say)
        let rolling = json!({"observedGeneration": 3, "replicas": 3, "updatedReplicas": 1,
            "readyReplicas": 2, "availableReplicas": 2});
        assert_eq!(of(&deploy(3, rolling)).status, HealthStatus::InProgress);
        let old_left = json!({"observedGeneration": 3, "replicas": 3, "updatedReplicas": 2,
            "readyReplicas": 2, "availableReplicas": 2});
        assert_eq!(of(&deploy(3, old_left)).status, HealthStatus::InProgress);
        let stuck = json!({"observedGeneration": 3, "replicas": 2, "updatedReplicas": 2,
            "conditions": [{"type": "Progressing", "status": "False",
                "reason": "ProgressDeadlineExceeded", "message": "too slow"}]});
        assert_eq!(of(&deploy(3, stuck)).status, HealthStatus::Failed);
    }

    #[test]
    fn jobs_pods_and_sets_follow_kstatus() {
        let job = |conds: Value| {
            json!({"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"generation": 1}, "status": {"conditions": conds}})
        };
        assert_eq!(
            of(&job(json!([{"type": "Complete", "status": "True"}]))).status,
            HealthStatus::Current
        );
        assert_eq!(
            of(&job(
                json!([{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}])
            ))
            .status,
            HealthStatus::Failed
        );
        assert_eq!(of(&job(json!([]))).status, HealthStatus::InProgress);
        let sts = json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"generation": 4}, "spec": {"replicas": 3},
            "status": {"observedGeneration": 4, "readyReplicas": 3, "updatedReplicas": 3,
                "currentRevision": "a", "updateRevision": "b"}});
        assert_eq!(of(&sts).status, HealthStatus::InProgress);
        let ds = json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {},
            "status": {"desiredNumberScheduled": 2, "currentNumberScheduled": 2,
                "updatedNumberScheduled": 2, "numberAvailable": 1, "numberReady": 2}});
        assert_eq!(of(&ds).message, "available: 1/2");
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {},
            "status": {"phase": "Pending"}});
        assert_eq!(of(&pod).status, HealthStatus::InProgress);
    }

    #[test]
    fn other_kinds_are_current_unless_their_conditions_say_otherwise() {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}});
        assert_eq!(of(&cm).status, HealthStatus::Current);
        let custom = |conds: Value| {
            json!({"apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"generation": 1}, "status": {"conditions": conds}})
        };
        assert_eq!(
            of(&custom(
                json!([{"type": "Ready", "status": "False", "reason": "Waiting"}])
            ))
            .status,
            HealthStatus::InProgress
        );
        assert_eq!(
            of(&custom(
                json!([{"type": "Stalled", "status": "True", "reason": "Bad"}])
            ))
            .status,
            HealthStatus::Failed
        );
        assert_eq!(
            of(&custom(json!([{"type": "Ready", "status": "True"}]))).status,
            HealthStatus::Current
        );
        let gone = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}});
        assert_eq!(of(&gone).status, HealthStatus::Terminating);
    }
}
