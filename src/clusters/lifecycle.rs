//! Cluster lifecycle (`clusterlifecycle`, docs/spec/status.md §6): a cluster whose agent stops
//! heartbeating for three periods turns `Ready=Unknown` and gets the
//! `clusters.clusternet.io/unschedulable:NoSchedule` taint, which goes away when heartbeats resume.
//! Deleting a ManagedCluster removes its dedicated namespace, RBAC and credentials, and marks its
//! registration request Denied so the agent reports why instead of silently re-registering.

use std::sync::Arc;
use std::time::Duration;

use crate::runtime::controller::Action;
use crate::runtime::controller::{Event, finalizer};
use k8s_openapi::api::core::v1::{Namespace, Taint};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::json;
use tokio_util::sync::CancellationToken;
use tracing::info;

use crate::apis::clusters::{
    CONDITION_CLUSTER_INIT, CONDITION_READY, REASON_CLUSTER_INIT_DISABLED,
    REASON_CLUSTER_INIT_WAITING, REASON_CLUSTER_STATUS_NEVER_UPDATED,
    REASON_CLUSTER_STATUS_UNKNOWN, merge_conditions,
};
use crate::apis::known;
use crate::apis::{ClusterRegistrationRequest, ManagedCluster};
use crate::runtime::controller::{ApiFailure, Controller, ReconcileError};
use crate::runtime::{Runtime, api_code, apply};

/// The field manager of the conditions this controller reports.
pub const FIELD_MANAGER: &str = "clusternet/controller/clusterlifecycle";

#[derive(Debug, thiserror::Error)]
pub enum LifecycleError {
    #[error(transparent)]
    Api(#[from] ApiFailure),
    #[error("ManagedCluster finalizer: {0}")]
    Finalizer(String),
}

impl ReconcileError for LifecycleError {
    fn metric_label(&self) -> &'static str {
        match self {
            LifecycleError::Api(_) => "api",
            LifecycleError::Finalizer(_) => "finalizer",
        }
    }
}

/// Without a reported heartbeat period, upstream waits 9 minutes.
const DEFAULT_THRESHOLD: Duration = Duration::from_secs(9 * 60);

pub async fn run(rt: Runtime, stop: CancellationToken) {
    let shared = rt.cache.watch::<ManagedCluster>();
    let store = shared.store.clone();
    crate::runtime::telemetry::register_collector("fleet", move || {
        fleet_metrics(&store.state(), Timestamp::now())
    });
    let ctx = Arc::new(rt);
    Controller::new("clusterlifecycle", &shared)
        .run(stop, move |mc| {
            let ctx = ctx.clone();
            async move { reconcile(&ctx, mc).await }
        })
        .await;
}

async fn reconcile(rt: &Runtime, mc: Arc<ManagedCluster>) -> Result<Action, LifecycleError> {
    let ns = mc.namespace().unwrap_or_default();
    let api: Api<ManagedCluster> = Api::namespaced(rt.client.clone(), &ns);
    if !mc.finalizers().iter().any(|f| f == known::APP_FINALIZER)
        && mc.metadata.deletion_timestamp.is_none()
    {
        // clusters not made by our approver (or made before it set the finalizer) keep no finalizer:
        // only heartbeat tracking applies to them
        return track(rt, &api, &mc).await;
    }
    finalizer(&api, known::APP_FINALIZER, mc, |event| async {
        match event {
            Event::Apply(mc) => track(rt, &api, &mc).await,
            Event::Cleanup(mc) => cleanup(rt, &mc).await,
        }
    })
    .await
    .map_err(|e| LifecycleError::Finalizer(e.to_string()))
}

/// `clusternet_clusters{state}` (Ready, NotReady, Unknown) and
/// `clusternet_heartbeat_age_seconds{cluster}` (since the agent's last status report), computed
/// from the ManagedClusters at every scrape.
pub fn fleet_metrics(clusters: &[Arc<ManagedCluster>], now: Timestamp) -> String {
    use crate::runtime::telemetry::label_value;
    let mut states =
        std::collections::BTreeMap::from([("NotReady", 0), ("Ready", 0), ("Unknown", 0)]);
    let mut ages = String::new();
    for mc in clusters {
        let ready = mc
            .status
            .as_ref()
            .and_then(|s| s.condition("Ready"))
            .map(|c| c.status.as_str());
        let state = match ready {
            Some("True") => "Ready",
            Some("False") => "NotReady",
            _ => "Unknown",
        };
        *states.entry(state).or_default() += 1;
        let name = mc
            .labels()
            .get(known::CLUSTER_NAME_LABEL)
            .cloned()
            .unwrap_or_else(|| mc.name_any());
        if let Some(seen) = mc
            .status
            .as_ref()
            .and_then(|s| s.last_observed_time.as_ref())
        {
            let age = now.duration_since(seen.0).as_secs_f64().max(0.0);
            ages.push_str(&format!(
                "clusternet_heartbeat_age_seconds{{cluster=\"{}\"}} {age:.3}\n",
                label_value(&name)
            ));
        }
    }
    let mut out = String::from(
        "# HELP clusternet_clusters ManagedClusters by the state of their Ready condition.\n# TYPE clusternet_clusters gauge\n",
    );
    for (state, n) in states {
        out.push_str(&format!("clusternet_clusters{{state=\"{state}\"}} {n}\n"));
    }
    out.push_str("# HELP clusternet_heartbeat_age_seconds Seconds since the cluster's agent last reported its status.\n# TYPE clusternet_heartbeat_age_seconds gauge\n");
    out.push_str(&ages);
    out
}

/// The threshold after which a silent cluster counts as lost: three heartbeat periods.
pub fn lost_threshold(mc: &ManagedCluster) -> Duration {
    mc.status
        .as_ref()
        .and_then(|s| s.heartbeat_frequency_seconds)
        .filter(|s| *s > 0)
        .map(|s| Duration::from_secs(3 * s as u64))
        .unwrap_or(DEFAULT_THRESHOLD)
}

/// The conditions the controller generates now (status.md §6.1-§6.2), and how long until the
/// cluster would count as lost.
pub fn generated_conditions(
    mc: &ManagedCluster,
    now: Timestamp,
    cluster_init_gate: bool,
) -> (Vec<Condition>, Option<Duration>) {
    let status = mc.status.clone().unwrap_or_default();
    let threshold = lost_threshold(mc);
    let probe = status
        .last_observed_time
        .as_ref()
        .map(|t| t.0)
        .or_else(|| mc.metadata.creation_timestamp.as_ref().map(|t| t.0))
        .unwrap_or(now);
    let age = now.duration_since(probe).unsigned_abs();
    let mut out = Vec::new();
    let mut remaining = None;
    let time = Time(now);
    if age > threshold {
        let (reason, message) = if status.last_observed_time.is_none() {
            (
                REASON_CLUSTER_STATUS_NEVER_UPDATED,
                "Clusternet agent never posted cluster status.",
            )
        } else {
            (
                REASON_CLUSTER_STATUS_UNKNOWN,
                "Clusternet agent stopped posting cluster status.",
            )
        };
        out.push(Condition {
            type_: CONDITION_READY.into(),
            status: "Unknown".into(),
            reason: reason.into(),
            message: message.into(),
            last_transition_time: time.clone(),
            observed_generation: None,
        });
    } else {
        remaining = Some(threshold - age);
    }
    let skip = mc
        .annotations()
        .get(known::CLUSTER_INIT_SKIP_ANNOTATION)
        .map(String::as_str)
        == Some("true");
    let init = if !cluster_init_gate {
        (
            "True",
            REASON_CLUSTER_INIT_DISABLED,
            "feature gate ClusterInit is not enabled",
        )
    } else if skip {
        (
            "True",
            REASON_CLUSTER_INIT_DISABLED,
            "cluster initialization is skipped",
        )
    } else {
        (
            "False",
            REASON_CLUSTER_INIT_WAITING,
            "still waiting for cluster getting initialized",
        )
    };
    out.push(Condition {
        type_: CONDITION_CLUSTER_INIT.into(),
        status: init.0.into(),
        reason: init.1.into(),
        message: init.2.into(),
        last_transition_time: time,
        observed_generation: None,
    });
    (out, remaining)
}

/// status.md §6.3: one managed NoSchedule taint per failing condition, matched by key and effect.
pub fn desired_taints(
    current: &[Taint],
    conditions: &[Condition],
    cluster_init_gate: bool,
) -> Vec<Taint> {
    let failing = |t: &str| {
        conditions
            .iter()
            .find(|c| c.type_ == t)
            .filter(|c| c.status == "False" || c.status == "Unknown")
            .map(|c| c.reason.clone())
    };
    let mut wanted: Vec<(&str, String)> = Vec::new();
    if let Some(reason) = failing(CONDITION_READY) {
        wanted.push((known::TAINT_CLUSTER_UNSCHEDULABLE, reason));
    }
    if cluster_init_gate && let Some(reason) = failing(CONDITION_CLUSTER_INIT) {
        wanted.push((known::TAINT_CLUSTER_INITIALIZATION, reason));
    }
    let managed = |t: &Taint| {
        t.effect == known::TAINT_EFFECT_NO_SCHEDULE
            && (t.key == known::TAINT_CLUSTER_UNSCHEDULABLE
                || t.key == known::TAINT_CLUSTER_INITIALIZATION)
    };
    // unmanaged taints stay; managed ones stay only while wanted (all stale ones go, unlike upstream's quirk)
    let mut out: Vec<Taint> = current
        .iter()
        .filter(|t| !managed(t) || wanted.iter().any(|(k, _)| *k == t.key))
        .cloned()
        .collect();
    for (key, reason) in wanted {
        if !out
            .iter()
            .any(|t| t.key == key && t.effect == known::TAINT_EFFECT_NO_SCHEDULE)
        {
            out.push(Taint {
                key: key.into(),
                value: Some(reason),
                effect: known::TAINT_EFFECT_NO_SCHEDULE.into(),
                time_added: None,
            });
        }
    }
    out
}

/// What the lifecycle controller writes to a ManagedCluster now.
#[derive(Debug, PartialEq)]
pub struct HealthPlan {
    /// `status.conditions` (the whole list: atomic in the CRD) when they changed, and whether the
    /// cluster is lost (then its health probes are reported false too).
    pub status: Option<(Vec<Condition>, bool)>,
    /// `spec.taints` when they changed.
    pub taints: Option<Vec<Taint>>,
    /// When to look again: just after the cluster would count as lost.
    pub requeue: Duration,
}

/// status.md §6: the conditions and taints of `mc` at `now`. Identical conditions apart from an
/// already-Unknown Ready's time are not rewritten.
pub fn plan_health(mc: &ManagedCluster, now: Timestamp, cluster_init_gate: bool) -> HealthPlan {
    let (generated, remaining) = generated_conditions(mc, now, cluster_init_gate);
    let status = mc.status.clone().unwrap_or_default();
    let lost = remaining.is_none();
    let merged = merge_conditions(&status.conditions, &generated);
    let strip = |cs: &[Condition]| {
        cs.iter()
            .map(|c| {
                (
                    c.type_.clone(),
                    c.status.clone(),
                    c.reason.clone(),
                    c.message.clone(),
                )
            })
            .collect::<Vec<_>>()
    };
    let changed = strip(&merged) != strip(&status.conditions)
        || (lost && (status.healthz || status.livez || status.readyz));
    let taints = desired_taints(&mc.spec.taints, &merged, cluster_init_gate);
    HealthPlan {
        taints: (taints != mc.spec.taints).then_some(taints),
        status: changed.then_some((merged, lost)),
        requeue: remaining
            .map(|r| r + Duration::from_millis(100))
            .unwrap_or_else(|| lost_threshold(mc)),
    }
}

async fn track(
    rt: &Runtime,
    api: &Api<ManagedCluster>,
    mc: &ManagedCluster,
) -> Result<Action, LifecycleError> {
    let name = mc.name_any();
    let err = |what: &'static str| ApiFailure::about(mc, what);
    let plan = plan_health(mc, Timestamp::now(), rt.config.gate(known::CLUSTER_INIT));
    if let Some((mut conditions, lost)) = plan.status {
        // kstatus-style: Ready speaks for the ManagedCluster as it was read
        for c in conditions.iter_mut().filter(|c| c.type_ == CONDITION_READY) {
            c.observed_generation = mc.metadata.generation;
        }
        let mut status = json!({ "conditions": conditions });
        if lost {
            info!(cluster = %name, "no heartbeat within {:?}: Ready=Unknown", lost_threshold(mc));
            for probe in ["healthz", "livez", "readyz"] {
                status[probe] = json!(false);
            }
        }
        // the conditions are merged with the agent's: the resourceVersion they were read at is
        // a precondition, so a heartbeat written meanwhile is never overwritten with stale ones
        let mut body = apply::status_body(mc, status);
        body["metadata"]["resourceVersion"] = json!(mc.resource_version());
        match apply::apply_status(api, FIELD_MANAGER, &name, &body).await {
            // into the shared cache at once: a scheduler in this process sees the cluster's new
            // readiness without waiting for the watch to bring it back
            Ok(written) => rt.cache.watch::<ManagedCluster>().observe_write(written),
            // the agent wrote in between: try again right away with fresh data
            Err(e) if api_code(&e) == Some(409) => {
                return Ok(Action::requeue(Duration::from_millis(200)));
            }
            Err(e) => return Err(err("writing conditions")(e).into()),
        }
    }
    if let Some(taints) = plan.taints {
        info!(cluster = %name, ?taints, "updating taints");
        let written = api
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"taints": taints}})),
            )
            .await
            .map_err(err("patching taints"))?;
        rt.cache.watch::<ManagedCluster>().observe_write(written);
    }
    Ok(Action::requeue(plan.requeue))
}

/// Deregistration: the request is marked Denied (with the reason) so the agent stops with a clear
/// message, then the cluster's RBAC and dedicated namespace (with its credentials) are removed.
async fn cleanup(rt: &Runtime, mc: &ManagedCluster) -> Result<Action, LifecycleError> {
    let name = mc.name_any();
    let ns = mc.namespace().unwrap_or_default();
    let id = mc.spec.cluster_id.clone();
    let err = |what: &'static str| ApiFailure::about(mc, what);
    let crrs: Api<ClusterRegistrationRequest> = Api::all(rt.client.clone());
    if let Some(crr) = crrs
        .get_opt(&known::cluster_registration_request_name(&id))
        .await
        .map_err(err("reading the registration request"))?
    {
        super::approver::write_status(
            &rt.client,
            &crr,
            super::approver::denied_after_deletion(&name),
        )
        .await
        .map_err(err("marking the registration request denied"))?;
    }
    let role = known::cluster_role_name(&id);
    let gone = |r: Result<_, kube::Error>| match r {
        Ok(_) => Ok(()),
        Err(e) if api_code(&e) == Some(404) => Ok(()),
        Err(e) => Err(e),
    };
    gone(
        Api::<ClusterRoleBinding>::all(rt.client.clone())
            .delete(&role, &DeleteParams::default())
            .await
            .map(|_| ()),
    )
    .map_err(err("deleting the ClusterRoleBinding"))?;
    gone(
        Api::<ClusterRole>::all(rt.client.clone())
            .delete(&role, &DeleteParams::default())
            .await
            .map(|_| ()),
    )
    .map_err(err("deleting the ClusterRole"))?;
    gone(
        Api::<Namespace>::all(rt.client.clone())
            .delete(&ns, &DeleteParams::default())
            .await
            .map(|_| ()),
    )
    .map_err(err("deleting the dedicated namespace"))?;
    info!(cluster = %name, namespace = %ns, "cluster deregistered: namespace, RBAC and credentials removed");
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fleet_metrics_count_states_and_heartbeat_ages() {
        let mc = |name: &str, ready: Option<&str>, seen: Option<&str>| -> Arc<ManagedCluster> {
            let mut status = json!({});
            if let Some(r) = ready {
                status["conditions"] = json!([{"type": "Ready", "status": r, "reason": "x",
                    "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]);
            }
            if let Some(s) = seen {
                status["lastObservedTime"] = json!(s);
            }
            Arc::new(
                serde_json::from_value(json!({
                    "apiVersion": "clusters.clusternet.io/v1beta1", "kind": "ManagedCluster",
                    "metadata": {"name": name, "namespace": "ns",
                        "labels": {"clusters.clusternet.io/cluster-name": format!("{name}-\"q\"")}},
                    "spec": {"clusterId": "00000000-0000-0000-0000-000000000000", "syncMode": "Pull"},
                    "status": status
                }))
                .expect("a ManagedCluster"),
            )
        };
        let now: Timestamp = "2026-01-01T00:01:00Z".parse().expect("a time");
        let text = fleet_metrics(
            &[
                mc("a", Some("True"), Some("2026-01-01T00:00:30Z")),
                mc("b", Some("False"), None),
                mc("c", None, None),
            ],
            now,
        );
        for line in [
            "clusternet_clusters{state=\"Ready\"} 1",
            "clusternet_clusters{state=\"NotReady\"} 1",
            "clusternet_clusters{state=\"Unknown\"} 1",
            "clusternet_heartbeat_age_seconds{cluster=\"a-\\\"q\\\"\"} 30.000",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} not in\n{text}");
        }
        assert_eq!(text.matches("clusternet_heartbeat_age_seconds{").count(), 1);
    }
    use crate::apis::ManagedClusterStatus;

    fn cluster(
        heartbeat: Option<i64>,
        observed_secs_ago: Option<i64>,
        now: Timestamp,
    ) -> ManagedCluster {
        let mut mc = ManagedCluster::new("c", Default::default());
        mc.metadata.creation_timestamp = Some(Time(
            now - k8s_openapi::jiff::SignedDuration::from_secs(3600),
        ));
        mc.status = Some(ManagedClusterStatus {
            heartbeat_frequency_seconds: heartbeat,
            last_observed_time: observed_secs_ago
                .map(|s| Time(now - k8s_openapi::jiff::SignedDuration::from_secs(s))),
            ..Default::default()
        });
        mc
    }

    #[test]
    fn silent_clusters_turn_unknown_after_three_periods() {
        let now = Timestamp::now();
        let (c, remaining) = generated_conditions(&cluster(Some(10), Some(5), now), now, false);
        assert!(
            c.iter().all(|c| c.type_ != "Ready"),
            "fresh heartbeat: no Ready generated"
        );
        assert_eq!(remaining.map(|d| d.as_secs()), Some(25));
        let (c, remaining) = generated_conditions(&cluster(Some(10), Some(31), now), now, false);
        let ready = c
            .iter()
            .find(|c| c.type_ == "Ready")
            .expect("a Ready condition");
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("Unknown", REASON_CLUSTER_STATUS_UNKNOWN)
        );
        assert!(remaining.is_none());
        // never reported: judged from creation, with upstream's 9 minute default
        let (c, _) = generated_conditions(&cluster(None, None, now), now, false);
        let ready = c
            .iter()
            .find(|c| c.type_ == "Ready")
            .expect("a Ready condition");
        assert_eq!(ready.reason, REASON_CLUSTER_STATUS_NEVER_UPDATED);
        let init = c
            .iter()
            .find(|c| c.type_ == "ClusterInit")
            .expect("ClusterInit");
        assert_eq!(
            (init.status.as_str(), init.reason.as_str()),
            ("True", REASON_CLUSTER_INIT_DISABLED)
        );
    }

    #[test]
    fn a_lost_cluster_is_written_once_and_tainted() {
        let now = Timestamp::now();
        let mut mc = cluster(Some(10), Some(31), now);
        mc.status.get_or_insert_with(Default::default).healthz = true;
        let plan = plan_health(&mc, now, false);
        let (conditions, lost) = plan.status.expect("a status write");
        assert!(lost);
        assert!(
            conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "Unknown")
        );
        let taints = plan.taints.expect("a taint");
        assert_eq!(taints[0].key, known::TAINT_CLUSTER_UNSCHEDULABLE);
        assert_eq!(plan.requeue, Duration::from_secs(30));
        // as written: nothing to write again later, even though times moved on
        let st = mc.status.get_or_insert_with(Default::default);
        st.conditions = conditions;
        st.healthz = false;
        mc.spec.taints = taints;
        let later = now + k8s_openapi::jiff::SignedDuration::from_secs(5);
        let again = plan_health(&mc, later, false);
        assert_eq!((again.status, again.taints), (None, None));
    }

    #[test]
    fn a_heartbeating_cluster_is_looked_at_again_when_it_would_be_lost() {
        let now = Timestamp::now();
        let mut mc = cluster(Some(10), Some(5), now);
        let plan = plan_health(&mc, now, false);
        // the first look records ClusterInit; no Ready is generated, no taint
        let (conditions, lost) = plan.status.expect("ClusterInit recorded");
        assert!(!lost && conditions.iter().all(|c| c.type_ != "Ready"));
        assert_eq!(plan.taints, None);
        assert_eq!(plan.requeue, Duration::from_millis(25_100));
        mc.status.get_or_insert_with(Default::default).conditions = conditions;
        assert_eq!(plan_health(&mc, now, false).status, None);
    }

    #[test]
    fn taints_follow_conditions_and_all_stale_ones_go() {
        let unknown = Condition {
            type_: "Ready".into(),
            status: "Unknown".into(),
            reason: "ClusterStatusUnknown".into(),
            message: String::new(),
            last_transition_time: Time(Timestamp::UNIX_EPOCH),
            observed_generation: None,
        };
        let user = Taint {
            key: "team".into(),
            value: Some("a".into()),
            effect: "NoSchedule".into(),
            time_added: None,
        };
        let t = desired_taints(
            std::slice::from_ref(&user),
            std::slice::from_ref(&unknown),
            false,
        );
        assert_eq!(t.len(), 2);
        assert!(t.iter().any(|t| t.key == known::TAINT_CLUSTER_UNSCHEDULABLE
            && t.value.as_deref() == Some("ClusterStatusUnknown")));
        let ready = Condition {
            status: "True".into(),
            ..unknown
        };
        let stale = vec![
            user.clone(),
            Taint {
                key: known::TAINT_CLUSTER_UNSCHEDULABLE.into(),
                value: None,
                effect: "NoSchedule".into(),
                time_added: None,
            },
            Taint {
                key: known::TAINT_CLUSTER_INITIALIZATION.into(),
                value: None,
                effect: "NoSchedule".into(),
                time_added: None,
            },
        ];
        assert_eq!(desired_taints(&stale, &[ready], false), vec![user]);
    }
}
