//! Generic deployment of a Description's objects into a child (docs/spec/deployer.md §8):
//! each object is prepared (ownership annotation and label, `clusternet.io/last-applied-configuration`)
//! and applied with server-side apply under a `clusternet/...` field manager; Namespaces and CRDs
//! go first. Objects that were applied before but are no longer desired are pruned; deleting a
//! Description deletes its objects. An object whose desired state is what was applied last is not
//! applied again: the child's watch (see [`super::watch`]) shows its live state, and only drift,
//! decided from field ownership ([`super::drift`]), leads to a write, or to a report, by the
//! Description's drift policy. Fields the child's own controllers took over are left to them.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::ByteString;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::discovery::{ApiCapabilities, Scope};
use kube::{Client, ResourceExt};
use serde_json::Value;
use tokio::sync::Mutex;
use tokio::sync::mpsc::UnboundedSender;

use super::drift::{self, Check, Retain, Seg};
use super::watch::{Live, Touched, Watches};
use crate::apis::known;
use crate::apis::{Description, Drift, Feed, ManifestStatus, RetainedField};
use crate::kube_ext::object_ref::ObjectRef;
use crate::runtime::{api_code, api_message};

/// The reference of a Manifest status entry (what was deployed before).
fn ref_of_status(s: &ManifestStatus) -> ObjectRef {
    ObjectRef {
        api_version: s.feed.api_version.clone(),
        kind: s.feed.kind.clone(),
        namespace: s.feed.namespace.clone(),
        name: s.feed.name.clone(),
    }
}

/// An object another Description of the same child wants, and that Description's owner value
/// (`<namespace>.<name>`, as in `apps.clusternet.io/owned-by-description`).
#[derive(Debug, Clone, PartialEq)]
pub struct Wanted {
    pub object: ObjectRef,
    pub owner: String,
}

/// The objects that the other live Generic Descriptions of `desc`'s namespace (the same child)
/// want: pruning or offloading `desc` must leave them in place.
pub fn wanted_elsewhere<'a>(
    desc: &Description,
    siblings: impl IntoIterator<Item = &'a Description>,
) -> Vec<Wanted> {
    let ns = desc.namespace().unwrap_or_default();
    let name = desc.name_any();
    let mut out = Vec::new();
    for d in siblings {
        if d.namespace().as_deref() != Some(ns.as_str())
            || d.name_any() == name
            || d.metadata.deletion_timestamp.is_some()
            || d.spec.deployer != crate::apis::DescriptionDeployer::Generic
        {
            continue;
        }
        let owner = format!("{ns}.{}", d.name_any());
        for raw in &d.spec.raw {
            if let Some(object) = serde_json::from_slice::<Value>(&raw.0)
                .ok()
                .as_ref()
                .and_then(ObjectRef::of)
            {
                out.push(Wanted {
                    object,
                    owner: owner.clone(),
                });
            }
        }
    }
    out
}

/// What applying a Description achieved.
#[derive(Debug, Default)]
pub struct Outcome {
    /// One entry per applied object, with its live status when it could be read.
    pub statuses: Vec<ManifestStatus>,
    /// Per object that failed: what went wrong (the API server's message where there is one).
    pub errors: Vec<String>,
    /// Every applied object reports itself settled (workloads fully available).
    pub settled: bool,
    /// Every object's live state came from a watch that had listed (changes will be heard of).
    pub watched: bool,
    /// Drift seen this time (not seen before): object and what was found and done.
    pub drifts: Vec<(ObjectRef, Drift)>,
    /// Things the user should know that fail nothing (an unknown drift policy).
    pub notes: Vec<String>,
    /// Writes sent to the child (applies of objects), for the idle-writes figure.
    pub writes: usize,
}

/// How many repairs of one object within [`FIGHT_WINDOW`] mean something in the child keeps
/// changing it back: repairs then pause until the window has passed (no write loop).
const FIGHT_REPAIRS: usize = 5;
const FIGHT_WINDOW: Duration = Duration::from_secs(60);

/// A child cluster as a deployer sees it: a client, a discovery cache and its watches.
pub struct ChildCluster {
    client: Client,
    field_manager: String,
    /// The cluster's ID, for metrics.
    cluster: String,
    retain_managers: Vec<String>,
    discovery: Mutex<HashMap<(String, String), (ApiResource, ApiCapabilities)>>,
    watches: Watches,
    /// Recent repair times per object, to notice a fight.
    repairs: std::sync::Mutex<HashMap<String, Vec<Instant>>>,
    /// The API server's answer to our last apply of each object (by `<owner>/<object>`): what
    /// the object is while the watch has not caught up with that write (so a just-applied object
    /// is not "deleted"), and what a Description applied whatever its status says by now.
    applied: std::sync::Mutex<HashMap<String, (ObjectRef, Arc<DynamicObject>)>>,
}

/// What to do with one object, decided from its desired and live states.
#[derive(Debug, PartialEq)]
pub enum ObjectPlan {
    /// Apply it: it is new, its desired state changed, or its live state is not known.
    Apply { leave_out: Vec<Vec<Seg>> },
    /// Nothing to write: every field applied is still ours (or retained).
    InSync { retained: Vec<RetainedField> },
    /// Changed behind our back (or deleted): repair, report or ignore, by policy.
    Drifted { check: Check, deleted: bool },
}

/// What to do with one object once its plan meets the drift policy.
#[derive(Debug, PartialEq)]
pub enum ObjectStep {
    /// Leave it as it is: in sync, or its drift ignored, reported, or its repair paused.
    Keep {
        retained: Vec<RetainedField>,
        drift: Option<Drift>,
    },
    /// Apply it, leaving out these fields; `force` takes back fields someone else changed.
    Write {
        leave_out: Vec<Vec<Seg>>,
        force: bool,
        drift: Option<Drift>,
    },
}

/// [`ObjectStep`] for a plan under `policy`; `fighting` says (and counts) whether repairs of
/// this object keep being undone, which pauses them; `now` stamps a drift record.
pub fn under_policy(
    plan: ObjectPlan,
    policy: drift::Policy,
    fighting: impl FnOnce() -> bool,
    now: String,
) -> ObjectStep {
    let (check, deleted) = match plan {
        ObjectPlan::InSync { retained } => {
            return ObjectStep::Keep {
                retained,
                drift: None,
            };
        }
        ObjectPlan::Apply { leave_out } => {
            return ObjectStep::Write {
                leave_out,
                force: false,
                drift: None,
            };
        }
        ObjectPlan::Drifted { check, deleted } => (check, deleted),
    };
    let record = |action: &str, fields| Drift {
        action: action.into(),
        detected_at: now,
        deleted,
        fields,
    };
    let kept = match policy {
        drift::Policy::Ignore => None,
        drift::Policy::Report => Some("Reported"),
        drift::Policy::Repair if fighting() => Some("RepairPaused"),
        drift::Policy::Repair => {
            return ObjectStep::Write {
                drift: Some(record("Repaired", check.drifted)),
                leave_out: check.leave_out,
                force: true,
            };
        }
    };
    ObjectStep::Keep {
        drift: kept.map(|action| record(action, check.drifted)),
        retained: check.retained,
    }
}

/// [`ObjectPlan`] for one prepared object; `live` is `None` when the watch cannot tell,
/// `deployed_before` whether a previous status lists it (so its absence is a deletion).
pub fn plan_object(
    prepared: &Value,
    live: Option<Option<&Value>>,
    deployed_before: bool,
    field_manager: &str,
    retain: &Retain,
) -> ObjectPlan {
    let Some(live) = live else {
        return ObjectPlan::Apply {
            leave_out: Vec::new(),
        };
    };
    let Some(live) = live else {
        return if deployed_before {
            ObjectPlan::Drifted {
                check: Check::default(),
                deleted: true,
            }
        } else {
            ObjectPlan::Apply {
                leave_out: Vec::new(),
            }
        };
    };
    let snapshot = |o: &Value| {
        o.pointer("/metadata/annotations")
            .and_then(|a| a.get(known::LAST_APPLIED_CONFIG_ANNOTATION))
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    let c = drift::check(prepared, live, field_manager, retain, &[]);
    if snapshot(prepared) != snapshot(live) {
        // what we want changed (or someone else's object of that name): apply, leaving the
        // retained fields to their owners
        return ObjectPlan::Apply {
            leave_out: c.leave_out,
        };
    }
    if c.drifted.is_empty() {
        ObjectPlan::InSync {
            retained: c.retained,
        }
    } else {
        ObjectPlan::Drifted {
            check: c,
            deleted: false,
        }
    }
}

/// The drift record to keep: the previous one when nothing new was seen (or the same drift is
/// seen again, e.g. under Report), else the new one (then also returned as news).
fn drift_record(previous: Option<&Drift>, seen: Option<Drift>) -> (Option<Drift>, Option<Drift>) {
    match (previous, seen) {
        (prev, None) => (prev.cloned(), None),
        (Some(p), Some(s))
            if p.action == s.action && p.deleted == s.deleted && p.fields == s.fields =>
        {
            (Some(p.clone()), None)
        }
        (_, Some(s)) => (Some(s.clone()), Some(s)),
    }
}

fn kind_rank(kind: &str) -> u8 {
    match kind {
        "Namespace" => 0,
        "CustomResourceDefinition" => 1,
        "ServiceAccount" | "ClusterRole" | "Role" | "ClusterRoleBinding" | "RoleBinding"
        | "ConfigMap" | "Secret" => 2,
        _ => 3,
    }
}

/// §8.1: the object as it is sent to the child.
pub fn prepare(obj: &Value, desc_namespace: &str, desc_name: &str) -> Value {
    let mut o = obj.clone();
    if let Some(meta) = o.get_mut("metadata").and_then(Value::as_object_mut) {
        for k in [
            "creationTimestamp",
            "uid",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "selfLink",
            "resourceVersion",
            "managedFields",
            "generation",
        ] {
            meta.remove(k);
        }
        let ann = meta
            .entry("annotations")
            .or_insert_with(|| Value::Object(Default::default()));
        if !ann.is_object() {
            *ann = Value::Object(Default::default());
        }
        let owner = format!("{desc_namespace}.{desc_name}");
        if let Some(a) = ann.as_object_mut() {
            a.remove(known::KUBECTL_LAST_APPLIED_CONFIG_ANNOTATION);
            a.insert(
                known::OBJECT_OWNED_BY_DESCRIPTION_ANNOTATION.to_string(),
                Value::String(owner.clone()),
            );
        }
        // selectable, so the child's watches see only what Clusternet applied
        let labels = meta
            .entry("labels")
            .or_insert_with(|| Value::Object(Default::default()));
        if !labels.is_object() {
            *labels = Value::Object(Default::default());
        }
        if let Some(l) = labels.as_object_mut() {
            l.insert(
                known::OBJECT_OWNED_BY_DESCRIPTION_LABEL.to_string(),
                Value::String(super::watch::owner_label_value(&owner)),
            );
        }
    }
    o.as_object_mut().map(|m| m.remove("status"));
    let snapshot = o.to_string();
    if let Some(a) = o
        .pointer_mut("/metadata/annotations")
        .and_then(Value::as_object_mut)
    {
        a.insert(
            known::LAST_APPLIED_CONFIG_ANNOTATION.to_string(),
            Value::String(snapshot),
        );
    }
    o
}

/// Workload-style readiness of an object's live status, for deciding how soon to look again.
fn settled_value(kind: &str, obj: &Value) -> bool {
    let status = obj.get("status");
    let get = |p: &str| {
        status
            .and_then(|s| s.pointer(p))
            .and_then(Value::as_i64)
            .unwrap_or(0)
    };
    let want = obj
        .pointer("/spec/replicas")
        .and_then(Value::as_i64)
        .unwrap_or(1);
    match kind {
        "Deployment" => get("/availableReplicas") >= want && get("/updatedReplicas") >= want,
        "StatefulSet" | "ReplicaSet" => get("/readyReplicas") >= want,
        "Job" => get("/succeeded") >= 1,
        _ => true,
    }
}

/// What [`ChildCluster::bring`] found and did for one object.
#[derive(Debug, Default)]
struct Brought {
    settled: bool,
    observed_status: Option<Value>,
    health: Option<crate::kube_ext::health::Health>,
    watched: bool,
    retained: Vec<RetainedField>,
    drift: Option<Drift>,
    wrote: bool,
}

impl ChildCluster {
    /// `notify` hears of changes to the applied objects (see [`Watches`]); `None` watches nothing.
    pub fn new(
        client: Client,
        field_manager: impl Into<String>,
        cluster: impl Into<String>,
        retain_managers: Vec<String>,
        notify: Option<UnboundedSender<Touched>>,
    ) -> Self {
        ChildCluster {
            watches: Watches::new(client.clone(), notify),
            client,
            field_manager: field_manager.into(),
            cluster: cluster.into(),
            retain_managers,
            discovery: Mutex::new(HashMap::new()),
            repairs: Default::default(),
            applied: Default::default(),
        }
    }

    /// Whether repairing `object` now would be one repair too many within the fight window.
    fn fighting(&self, object: &str) -> bool {
        let mut repairs = self.repairs.lock().unwrap_or_else(|p| p.into_inner());
        let times = repairs.entry(object.to_string()).or_default();
        times.retain(|t| t.elapsed() < FIGHT_WINDOW);
        if times.len() >= FIGHT_REPAIRS {
            return true;
        }
        times.push(Instant::now());
        false
    }

    /// The field manager of this deployer's applies (also of the Description status it reports).
    pub fn field_manager(&self) -> &str {
        &self.field_manager
    }

    async fn resolve(
        &self,
        api_version: &str,
        kind: &str,
    ) -> Result<(ApiResource, ApiCapabilities), String> {
        let key = (api_version.to_string(), kind.to_string());
        if let Some(hit) = self.discovery.lock().await.get(&key) {
            return Ok(hit.clone());
        }
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let gvk = GroupVersionKind::gvk(group, version, kind);
        let found = kube::discovery::pinned_kind(&self.client, &gvk)
            .await
            .map_err(|e| match &e {
                kube::Error::Discovery(_) => {
                    format!("the child API server does not serve kind {kind} in {api_version}: {e}")
                }
                kube::Error::Api(s) if s.code == 404 => format!(
                    "the child API server does not serve kind {kind} in {api_version}: {}",
                    s.message
                ),
                _ => format!("discovering {kind} in {api_version}: {}", api_message(&e)),
            })?;
        self.discovery.lock().await.insert(key, found.clone());
        Ok(found)
    }

    async fn api_for(&self, r: &ObjectRef) -> Result<Api<DynamicObject>, String> {
        let (ar, caps) = self.resolve(&r.api_version, &r.kind).await?;
        Ok(match caps.scope {
            Scope::Cluster => Api::all_with(self.client.clone(), &ar),
            Scope::Namespaced => {
                let ns = if r.namespace.is_empty() {
                    "default"
                } else {
                    r.namespace.as_str()
                };
                Api::namespaced_with(self.client.clone(), ns, &ar)
            }
        })
    }

    /// Applies one prepared object; returns the live object.
    async fn apply_one(
        &self,
        r: &ObjectRef,
        obj: &Value,
        owner: &str,
        force: bool,
    ) -> Result<DynamicObject, String> {
        let api = self.api_for(r).await?;
        let params = PatchParams::apply(&self.field_manager);
        let first = if force {
            params.clone().force()
        } else {
            params.clone()
        };
        match api.patch(&r.name, &first, &Patch::Apply(obj)).await {
            Ok(o) => Ok(o),
            Err(kube::Error::Api(s)) if s.code == 409 => {
                // who holds the conflicting fields?
                let live = api.get_opt(&r.name).await.map_err(|e| api_message(&e))?;
                let ours = live
                    .as_ref()
                    .and_then(|l| {
                        l.annotations()
                            .get(known::OBJECT_OWNED_BY_DESCRIPTION_ANNOTATION)
                            .cloned()
                    })
                    .is_some_and(|a| a == owner);
                let mut desired = obj.clone();
                let mut others = Vec::new();
                for cause in s.details.iter().flat_map(|d| d.causes.iter()) {
                    let yielded = self
                        .retain_managers
                        .iter()
                        .any(|m| cause.message.contains(&format!("\"{m}\"")));
                    if yielded {
                        remove_field(&mut desired, &cause.field);
                    } else {
                        others.push(format!("{} ({})", cause.field, cause.message));
                    }
                }
                if !others.is_empty() && !ours {
                    return Err(format!(
                        "{} exists in the child and other field managers own: {}",
                        r.display(),
                        others.join("; ")
                    ));
                }
                let params = if others.is_empty() {
                    params
                } else {
                    params.force()
                };
                api.patch(&r.name, &params, &Patch::Apply(&desired))
                    .await
                    .map_err(|e| api_message(&e))
            }
            Err(e) => Err(api_message(&e)),
        }
    }

    /// Brings every object of the Description (Namespaces and CRDs first) to its desired state,
    /// prunes objects that were applied before (`previous`) and are no longer desired (unless
    /// another Description of this child still wants them: `elsewhere`), and reports per-object
    /// results. An object is written only when it is new, its desired state changed, its live
    /// state is unknown, or it drifted and the policy says Repair.
    pub async fn apply(
        &self,
        desc: &Description,
        previous: &[ManifestStatus],
        elsewhere: &[Wanted],
    ) -> Outcome {
        let ns = desc.namespace().unwrap_or_default();
        let owner = format!("{ns}.{}", desc.name_any());
        let mut out = Outcome {
            settled: true,
            watched: true,
            ..Default::default()
        };
        let policy = drift::Policy::of(desc.annotations()).unwrap_or_else(|note| {
            out.notes.push(note);
            drift::Policy::Repair
        });
        let retain = Retain::new(&self.retain_managers, desc.annotations());
        let mut objects: Vec<(ObjectRef, Value)> = Vec::new();
        for (i, raw) in desc.spec.raw.iter().enumerate() {
            match serde_json::from_slice::<Value>(&raw.0) {
                Ok(v) => match ObjectRef::of(&v) {
                    Some(r) => objects.push((r, v)),
                    None => out
                        .errors
                        .push(format!("raw[{i}] has no apiVersion, kind or metadata.name")),
                },
                Err(e) => out.errors.push(format!("raw[{i}] is not JSON: {e}")),
            }
        }
        objects.sort_by_key(|(r, _)| kind_rank(&r.kind));
        for (r, v) in &objects {
            let prepared = prepare(v, &ns, &desc.name_any());
            let before = previous.iter().find(|p| ref_of_status(p).same_object(r));
            match self
                .bring(r, &prepared, &owner, before, policy, &retain)
                .await
            {
                Ok(done) => {
                    out.settled &= done.settled;
                    out.watched &= done.watched;
                    out.writes += usize::from(done.wrote);
                    let (drift, news) =
                        drift_record(before.and_then(|b| b.drift.as_ref()), done.drift);
                    if let Some(news) = news {
                        metrics::counter!("clusternet_drift_detected_total", "cluster" => self.cluster.clone(), "kind" => r.kind.clone()).increment(1);
                        out.drifts.push((r.clone(), news));
                    }
                    out.statuses.push(ManifestStatus {
                        feed: Feed::new(&r.api_version, &r.kind, &r.namespace, &r.name),
                        observed_status: done.observed_status,
                        health: done.health,
                        drift,
                        retained: done.retained,
                    });
                }
                Err(e) => {
                    out.settled = false;
                    out.watched = false;
                    out.errors.push(format!("{}: {e}", r.display()));
                }
            }
        }
        // prune what this Description applied before and no longer holds: what its status
        // lists, and what this process applied for it (a status written from an older copy of
        // the Description may have lost an object applied meanwhile)
        let applied = self.applied_by(&owner);
        let wanted: Vec<&ObjectRef> = objects.iter().map(|(r, _)| r).collect();
        for (r, old) in prune_refs(previous, applied, &wanted) {
            if let Err(e) = self.delete_one(&r, &owner, elsewhere).await {
                out.errors.push(format!("pruning {}: {e}", r.display()));
                // keep remembering it so the next round prunes again
                out.statuses
                    .push(old.cloned().unwrap_or_else(|| ManifestStatus {
                        feed: Feed::new(&r.api_version, &r.kind, &r.namespace, &r.name),
                        ..Default::default()
                    }));
            }
        }
        out
    }

    /// One object of [`ChildCluster::apply`]: plan from the watch's view, then write if needed.
    async fn bring(
        &self,
        r: &ObjectRef,
        prepared: &Value,
        owner: &str,
        before: Option<&ManifestStatus>,
        policy: drift::Policy,
        retain: &Retain,
    ) -> Result<Brought, String> {
        let (ar, caps) = self.resolve(&r.api_version, &r.kind).await?;
        self.watches.ensure(&ar, &caps);
        let object = format!("{owner}/{}", r.display());
        let live = self.live_state(r, &object)?;
        let watched = live.is_some();
        let plan = plan_object(
            prepared,
            live.as_ref().map(Option::as_ref),
            before.is_some(),
            &self.field_manager,
            retain,
        );
        let now = k8s_openapi::jiff::Timestamp::now().to_string();
        let (leave, force, drift) = match under_policy(plan, policy, || self.fighting(&object), now)
        {
            ObjectStep::Keep { retained, drift } => {
                let l = live.as_ref().and_then(Option::as_ref);
                return Ok(Brought {
                    settled: l.is_some_and(|l| settled_value(&r.kind, l)),
                    observed_status: l.and_then(|l| l.get("status").cloned()),
                    health: l.map(crate::kube_ext::health::of),
                    watched,
                    retained,
                    drift,
                    wrote: false,
                });
            }
            ObjectStep::Write {
                leave_out,
                force,
                drift,
            } => (leave_out, force, drift),
        };
        let mut body = prepared.clone();
        for p in &leave {
            drift::leave_out(&mut body, p);
        }
        let applied = self.apply_one(r, &body, owner, force).await?;
        let value = serde_json::to_value(&applied).map_err(|e| e.to_string())?;
        self.applied
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(object, (r.clone(), Arc::new(applied)));
        let retained = drift::check(prepared, &value, &self.field_manager, retain, &[]).retained;
        Ok(Brought {
            settled: settled_value(&r.kind, &value),
            observed_status: value.get("status").cloned(),
            health: Some(crate::kube_ext::health::of(&value)),
            watched,
            retained,
            drift,
            wrote: true,
        })
    }

    /// The object as it lives in the child: `None` when the watch cannot tell, `Some(None)` when
    /// it is absent. When the watch lags behind our own last write, that write is the live state.
    fn live_state(&self, r: &ObjectRef, object: &str) -> Result<Option<Option<Value>>, String> {
        let ours = self
            .applied
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(object)
            .map(|(_, o)| o.clone());
        let lagging = |o: &DynamicObject| {
            !self
                .watches
                .caught_up(&r.api_version, &r.kind, super::watch::resource_version(o))
        };
        let seen = match self
            .watches
            .live(&r.api_version, &r.kind, &r.namespace, &r.name)
        {
            Live::Unknown => None,
            _ if ours.as_deref().is_some_and(lagging) => ours.map(Some),
            Live::Absent => Some(None),
            Live::Present(o) => Some(Some(o)),
        };
        match seen {
            None => Ok(None),
            Some(None) => Ok(Some(None)),
            Some(Some(o)) => Ok(Some(Some(
                serde_json::to_value(o.as_ref()).map_err(|e| e.to_string())?,
            ))),
        }
    }

    /// Deletes one object if this Description owns it (never someone else's object of the same
    /// name). An object another Description of this child still wants is handed over to it (its
    /// ownership annotation re-pointed) instead: it goes when the last Description lets go.
    async fn delete_one(
        &self,
        r: &ObjectRef,
        owner: &str,
        elsewhere: &[Wanted],
    ) -> Result<Let, String> {
        let api = self.api_for(r).await?;
        self.applied
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&format!("{owner}/{}", r.display()));
        let live = match api.get_opt(&r.name).await {
            Ok(Some(l)) => l,
            Ok(None) => return Ok(Let::Absent),
            Err(e) => return Err(api_message(&e)),
        };
        let ours = live
            .annotations()
            .get(known::OBJECT_OWNED_BY_DESCRIPTION_ANNOTATION)
            .map(String::as_str)
            == Some(owner);
        if !ours {
            return Ok(Let::NotOurs);
        }
        if let Some(heir) = elsewhere.iter().find(|w| w.object.same_object(r)) {
            let patch = serde_json::json!({"metadata": {
                "annotations": {known::OBJECT_OWNED_BY_DESCRIPTION_ANNOTATION: heir.owner},
                "labels": {known::OBJECT_OWNED_BY_DESCRIPTION_LABEL: super::watch::owner_label_value(&heir.owner)}}});
            return match api
                .patch(&r.name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => {
                    tracing::info!(object = %r.display(), from = owner, to = %heir.owner, "kept: another Description still wants it");
                    Ok(Let::HandedOver)
                }
                Err(e) if api_code(&e) == Some(404) => Ok(Let::Absent),
                Err(e) => Err(api_message(&e)),
            };
        }
        match api.delete(&r.name, &DeleteParams::background()).await {
            Ok(_) => Ok(Let::Deleted),
            Err(e) if api_code(&e) == Some(404) => Ok(Let::Absent),
            Err(e) => Err(api_message(&e)),
        }
    }

    /// The objects this process applied for the Description `owner` (`<namespace>.<name>`).
    fn applied_by(&self, owner: &str) -> Vec<ObjectRef> {
        let prefix = format!("{owner}/");
        self.applied
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|(k, _)| k.starts_with(&prefix))
            .map(|(_, (r, _))| r.clone())
            .collect()
    }

    /// Whether the child itself answers discovery (its core API group lists): only then is a
    /// "does not serve kind" the child's own word rather than a proxy in between failing.
    async fn answers_discovery(&self) -> Result<(), String> {
        self.client
            .list_core_api_resources("v1")
            .await
            .map(|_| ())
            .map_err(|e| format!("the child does not answer discovery: {e}"))
    }

    /// §8.3: deletes every object of the Description (and any it applied before), in reverse
    /// order, except what another Description of this child still wants (`elsewhere`).
    pub async fn offload(
        &self,
        desc: &Description,
        elsewhere: &[Wanted],
    ) -> Result<Offloaded, String> {
        let owner = format!(
            "{}.{}",
            desc.namespace().unwrap_or_default(),
            desc.name_any()
        );
        let mut refs = offload_refs(desc);
        // what this process applied for it and what the child's watches hold as its own, which
        // its status may have lost (written from an older copy of the Description)
        for r in self
            .applied_by(&owner)
            .into_iter()
            .chain(self.watches.owned_by(&owner))
        {
            if !refs.iter().any(|x| x.same_object(&r)) {
                refs.push(r);
            }
        }
        refs.sort_by_key(|r| std::cmp::Reverse(kind_rank(&r.kind)));
        let mut done = Offloaded::default();
        let mut errors = Vec::new();
        for r in &refs {
            let outcome = match self.delete_one(r, &owner, elsewhere).await {
                // an unknown kind was never created: nothing to delete, once the child itself
                // says so (a proxy failing on the way must not count as "nothing there")
                Err(e) if e.contains("does not serve kind") => {
                    self.answers_discovery().await.map(|()| Let::NotServed)
                }
                other => other,
            };
            match outcome {
                Ok(l) => {
                    tracing::debug!(object = %r.display(), %owner, outcome = ?l, "offload");
                    done.count(l);
                }
                Err(e) => errors.push(format!("{}: {e}", r.display())),
            }
        }
        if errors.is_empty() {
            Ok(done)
        } else {
            Err(errors.join("; "))
        }
    }
}

/// The objects a Description no longer holds (`wanted`) but applied before: those its status
/// lists (`previous`, with their entry) and those this process applied for it (`applied`), each
/// once.
fn prune_refs<'a>(
    previous: &'a [ManifestStatus],
    applied: Vec<ObjectRef>,
    wanted: &[&ObjectRef],
) -> Vec<(ObjectRef, Option<&'a ManifestStatus>)> {
    let mut gone: Vec<(ObjectRef, Option<&ManifestStatus>)> = Vec::new();
    let listed = previous.iter().map(|old| (ref_of_status(old), Some(old)));
    for (r, old) in listed.chain(applied.into_iter().map(|r| (r, None))) {
        let held = wanted.iter().any(|w| w.same_object(&r));
        if !held && !gone.iter().any(|(g, _)| g.same_object(&r)) {
            gone.push((r, old));
        }
    }
    gone
}

/// Every object an offload of `desc` looks at: what it holds and what its status says was
/// deployed before, namespaces and CRDs last.
fn offload_refs(desc: &Description) -> Vec<ObjectRef> {
    let mut refs: Vec<ObjectRef> = desc
        .spec
        .raw
        .iter()
        .filter_map(|raw| serde_json::from_slice::<Value>(&raw.0).ok())
        .filter_map(|v| ObjectRef::of(&v))
        .collect();
    for s in desc.status.iter().flat_map(|s| s.manifest_statuses.iter()) {
        let r = ref_of_status(s);
        if !refs.iter().any(|x| x.same_object(&r)) {
            refs.push(r);
        }
    }
    refs.sort_by_key(|r| std::cmp::Reverse(kind_rank(&r.kind)));
    refs
}

/// What an offload did with one object.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Let {
    Deleted,
    /// Another Description of the child still wants it: re-pointed to that one.
    HandedOver,
    /// Not in the child (never created, or already gone).
    Absent,
    /// An object of that name that this Description does not own: left alone.
    NotOurs,
    /// The child does not serve its kind: it was never created.
    NotServed,
}

/// What an offload did, object by object, for its log line.
#[derive(Debug, Default, PartialEq)]
pub struct Offloaded {
    pub deleted: usize,
    pub handed_over: usize,
    pub absent: usize,
    pub not_ours: usize,
    pub not_served: usize,
}

impl Offloaded {
    fn count(&mut self, l: Let) {
        *match l {
            Let::Deleted => &mut self.deleted,
            Let::HandedOver => &mut self.handed_over,
            Let::Absent => &mut self.absent,
            Let::NotOurs => &mut self.not_ours,
            Let::NotServed => &mut self.not_served,
        } += 1;
    }
}

/// Removes a field given in server-side-apply conflict notation (`.spec.replicas`).
fn remove_field(obj: &mut Value, path: &str) {
    let parts: Vec<&str> = path
        .trim_start_matches('.')
        .split('.')
        .filter(|p| !p.is_empty())
        .collect();
    let Some((last, parents)) = parts.split_last() else {
        return;
    };
    let mut cur = obj;
    for p in parents {
        match cur.get_mut(*p) {
            Some(next) => cur = next,
            None => return,
        }
    }
    if let Some(m) = cur.as_object_mut() {
        m.remove(*last);
    }
}

/// `raw` of a Generic Description from rendered objects.
pub fn to_raw(objects: &[Value]) -> Vec<ByteString> {
    objects
        .iter()
        .map(|o| ByteString(o.to_string().into_bytes()))
        .collect()
}

/// A child client and the credentials fingerprint it was built from.
type Fingerprinted = (String, Arc<ChildCluster>);

/// Shared child clusters by cluster ID (the parent's Push deployer keeps one per child), whose
/// watches all report to one `notify`.
#[derive(Clone)]
pub struct ChildCache {
    inner: Arc<Mutex<BTreeMap<String, Fingerprinted>>>,
    notify: Option<UnboundedSender<Touched>>,
    retain_managers: Vec<String>,
}

impl ChildCache {
    pub fn new(notify: Option<UnboundedSender<Touched>>, retain_managers: Vec<String>) -> Self {
        ChildCache {
            inner: Default::default(),
            notify,
            retain_managers,
        }
    }

    /// The child for `cluster_id`, rebuilt when its credentials (`fingerprint`) changed (the old
    /// one's watches stop when the last user lets go of it).
    pub async fn get_or_build(
        &self,
        cluster_id: &str,
        fingerprint: &str,
        build: impl FnOnce() -> Result<Client, String>,
        field_manager: &str,
    ) -> Result<Arc<ChildCluster>, String> {
        let mut m = self.inner.lock().await;
        if let Some((fp, c)) = m.get(cluster_id)
            && fp == fingerprint
        {
            return Ok(c.clone());
        }
        let c = Arc::new(ChildCluster::new(
            build()?,
            field_manager,
            cluster_id,
            self.retain_managers.clone(),
            self.notify.clone(),
        ));
        m.insert(cluster_id.to_string(), (fingerprint.to_string(), c.clone()));
        Ok(c)
    }
}

/// A stream of the Descriptions the child watches name, for a controller's `reconcile_on`.
pub fn touched_stream(
    rx: tokio::sync::mpsc::UnboundedReceiver<Touched>,
) -> impl futures::Stream<Item = kube::runtime::reflector::ObjectRef<Description>> + Send + 'static
{
    futures::stream::unfold(rx, |mut rx| async move {
        let (ns, name) = rx.recv().await?;
        Some((
            kube::runtime::reflector::ObjectRef::new(&name).within(&ns),
            rx,
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn objects_are_prepared_like_upstream() {
        let obj = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "namespace": "ns", "uid": "u", "resourceVersion": "7", "creationTimestamp": "x",
                "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}", "keep": "me"}},
            "data": {"a": "b"}, "status": {"x": 1}});
        let p = prepare(&obj, "clusternet-abcde", "app-xyz12-generic");
        let meta = &p["metadata"];
        assert!(
            meta.get("uid").is_none()
                && meta.get("resourceVersion").is_none()
                && meta.get("creationTimestamp").is_none()
        );
        assert!(p.get("status").is_none());
        let ann = &meta["annotations"];
        assert_eq!(
            ann["apps.clusternet.io/owned-by-description"],
            "clusternet-abcde.app-xyz12-generic"
        );
        assert!(
            ann.get("kubectl.kubernetes.io/last-applied-configuration")
                .is_none()
        );
        assert_eq!(ann["keep"], "me");
        let last: Value = serde_json::from_str(
            ann["clusternet.io/last-applied-configuration"]
                .as_str()
                .unwrap_or("null"),
        )
        .expect("the snapshot is JSON");
        assert_eq!(last["data"]["a"], "b");
    }

    fn desc(ns: &str, name: &str, objects: &[Value], deleting: bool) -> Description {
        let mut d: Description = serde_json::from_value(json!({
            "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Description",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"deployer": "Generic"}}))
        .expect("a Description");
        d.spec.raw = to_raw(objects);
        if deleting {
            d.metadata.deletion_timestamp =
                Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
                ));
        }
        d
    }

    #[test]
    fn an_offload_looks_at_held_and_deployed_objects_and_counts_what_it_did() {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "x"}});
        let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x"}});
        let mut d = desc("c1", "d1", &[ns, cm], true);
        d.status = Some(
            serde_json::from_value(json!({"manifestStatuses": [
            {"apiVersion": "v1", "kind": "Secret", "namespace": "x", "name": "old"},
            {"apiVersion": "v1", "kind": "ConfigMap", "namespace": "x", "name": "a"}]}))
            .expect("a status"),
        );
        let kinds: Vec<String> = offload_refs(&d).iter().map(|r| r.display()).collect();
        // no object twice, and the namespace after what lives in it
        assert_eq!(kinds.len(), 3, "{kinds:?}");
        assert!(
            kinds.last().is_some_and(|k| k.contains("Namespace")),
            "{kinds:?}"
        );
        let mut done = Offloaded::default();
        for l in [Let::Deleted, Let::Deleted, Let::Absent, Let::NotServed] {
            done.count(l);
        }
        assert_eq!(
            done,
            Offloaded {
                deleted: 2,
                absent: 1,
                not_served: 1,
                ..Default::default()
            }
        );
    }

    #[test]
    fn objects_another_description_of_the_child_wants_are_kept() {
        let ns_obj =
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shared"}});
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "shared"}});
        let only_a = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "shared"}});
        let a = desc(
            "clusternet-x",
            "a-generic",
            &[ns_obj.clone(), cm.clone(), only_a],
            true,
        );
        let b = desc(
            "clusternet-x",
            "b-generic",
            &[ns_obj.clone(), cm.clone()],
            false,
        );
        // the same objects in another child, and a Description that is going too, do not count
        let other_child = desc(
            "clusternet-y",
            "c-generic",
            std::slice::from_ref(&cm),
            false,
        );
        let going = desc("clusternet-x", "d-generic", std::slice::from_ref(&cm), true);
        let w = wanted_elsewhere(&a, [&a, &b, &other_child, &going]);
        let names: Vec<(&str, &str)> = w
            .iter()
            .map(|w| (w.object.name.as_str(), w.owner.as_str()))
            .collect();
        assert_eq!(
            names,
            vec![
                ("shared", "clusternet-x.b-generic"),
                ("c", "clusternet-x.b-generic")
            ]
        );
        assert!(wanted_elsewhere(&b, [&a, &b, &going]).is_empty());
    }

    #[test]
    fn an_object_is_written_only_when_new_changed_unknown_or_drifted() {
        let us = "clusternet/agent/deployer";
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "ns"}, "data": {"a": "b"}});
        let desired = prepare(&cm, "clusternet-x", "d-generic");
        let retain = Retain::default();
        let apply = ObjectPlan::Apply { leave_out: vec![] };
        // the watch cannot tell, or it is new
        assert_eq!(plan_object(&desired, None, true, us, &retain), apply);
        assert_eq!(plan_object(&desired, Some(None), false, us, &retain), apply);
        // gone although deployed before: deleted by hand
        assert!(matches!(
            plan_object(&desired, Some(None), true, us, &retain),
            ObjectPlan::Drifted { deleted: true, .. }
        ));
        // live as applied, all fields ours: nothing to write
        let mut live = desired.clone();
        live["metadata"]["managedFields"] = json!([{"manager": us, "operation": "Apply", "time": "t",
            "fieldsV1": {"f:data": {"f:a": {}}, "f:metadata": {"f:annotations": {
                "f:apps.clusternet.io/owned-by-description": {}, "f:clusternet.io/last-applied-configuration": {}},
                "f:labels": {"f:apps.clusternet.io/owned-by-description": {}}}}}]);
        assert_eq!(
            plan_object(&desired, Some(Some(&live)), true, us, &retain),
            ObjectPlan::InSync { retained: vec![] }
        );
        // the desired state changed: apply
        let mut changed = cm.clone();
        changed["data"]["a"] = json!("z");
        let changed = prepare(&changed, "clusternet-x", "d-generic");
        assert_eq!(
            plan_object(&changed, Some(Some(&live)), true, us, &retain),
            apply
        );
        // someone took data.a: drift
        live["metadata"]["managedFields"][0]["fieldsV1"]["f:data"] = json!({".": {}});
        live["metadata"]["managedFields"]
            .as_array_mut()
            .expect("entries")
            .push(json!({"manager": "kubectl-edit", "operation": "Update", "time": "t2", "fieldsV1": {"f:data": {"f:a": {}}}}));
        let ObjectPlan::Drifted {
            check,
            deleted: false,
        } = plan_object(&desired, Some(Some(&live)), true, us, &retain)
        else {
            panic!("drift");
        };
        assert_eq!(check.drifted[0].path, ".data.a");
        assert_eq!(check.drifted[0].manager, "kubectl-edit");
    }

    #[test]
    fn a_drift_is_repaired_reported_or_ignored_by_policy_and_a_fight_pauses_repair() {
        let drifted = || ObjectPlan::Drifted {
            check: Check {
                drifted: vec![],
                retained: vec![],
                leave_out: vec![vec![Seg::Field("spec".into())]],
            },
            deleted: true,
        };
        let now = || "t".to_string();
        let never = || -> bool { panic!("only a repair asks whether it fights") };
        let ObjectStep::Write {
            force: true,
            drift: Some(d),
            leave_out,
        } = under_policy(drifted(), drift::Policy::Repair, || false, now())
        else {
            panic!("a repair writes, forced");
        };
        assert_eq!(
            (d.action.as_str(), d.deleted, leave_out.len()),
            ("Repaired", true, 1)
        );
        let action = |step| match step {
            ObjectStep::Keep { drift, .. } => drift.map(|d| d.action),
            ObjectStep::Write { .. } => Some("written".into()),
        };
        assert_eq!(
            action(under_policy(
                drifted(),
                drift::Policy::Repair,
                || true,
                now()
            ))
            .as_deref(),
            Some("RepairPaused")
        );
        assert_eq!(
            action(under_policy(drifted(), drift::Policy::Report, never, now())).as_deref(),
            Some("Reported")
        );
        assert_eq!(
            action(under_policy(drifted(), drift::Policy::Ignore, never, now())),
            None
        );
        // no drift: the plan as it is, no record
        let in_sync = ObjectPlan::InSync { retained: vec![] };
        assert_eq!(
            under_policy(in_sync, drift::Policy::Repair, never, now()),
            ObjectStep::Keep {
                retained: vec![],
                drift: None
            }
        );
        let apply = ObjectPlan::Apply { leave_out: vec![] };
        assert!(matches!(
            under_policy(apply, drift::Policy::Repair, never, now()),
            ObjectStep::Write {
                force: false,
                drift: None,
                ..
            }
        ));
    }

    #[test]
    fn a_prune_takes_what_the_status_lists_and_what_was_applied_unless_still_held() {
        let cm = |name: &str| ObjectRef {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: "ns".into(),
            name: name.into(),
        };
        let status = |name: &str| ManifestStatus {
            feed: Feed::new("v1", "ConfigMap", "ns", name),
            ..Default::default()
        };
        let previous = [status("listed"), status("held"), status("both")];
        // "applied" is what this process applied while the status it read lost it
        let applied = vec![cm("applied"), cm("both"), cm("held")];
        let held = cm("held");
        let gone = prune_refs(&previous, applied, &[&held]);
        let names: Vec<(&str, bool)> = gone
            .iter()
            .map(|(r, old)| (r.name.as_str(), old.is_some()))
            .collect();
        assert_eq!(
            names,
            [("listed", true), ("both", true), ("applied", false)]
        );
        assert!(prune_refs(&[], vec![], &[]).is_empty());
    }

    #[test]
    fn a_drift_seen_again_is_not_news() {
        let d = Drift {
            action: "Reported".into(),
            detected_at: "t1".into(),
            deleted: false,
            fields: vec![],
        };
        let again = Drift {
            detected_at: "t2".into(),
            ..d.clone()
        };
        assert_eq!(drift_record(Some(&d), Some(again)), (Some(d.clone()), None));
        let repaired = Drift {
            action: "Repaired".into(),
            ..d.clone()
        };
        assert_eq!(
            drift_record(Some(&d), Some(repaired.clone())),
            (Some(repaired.clone()), Some(repaired))
        );
        assert_eq!(drift_record(Some(&d), None), (Some(d), None));
    }

    #[test]
    fn conflicting_fields_can_be_dropped() {
        let mut o = json!({"spec": {"replicas": 3, "template": {}}});
        remove_field(&mut o, ".spec.replicas");
        assert_eq!(o, json!({"spec": {"template": {}}}));
        remove_field(&mut o, ".spec.missing.deep");
        assert_eq!(o, json!({"spec": {"template": {}}}));
    }

    #[test]
    fn namespaces_and_crds_go_first() {
        let mut kinds = [
            "Deployment",
            "Namespace",
            "Widget",
            "CustomResourceDefinition",
            "Service",
        ];
        kinds.sort_by_key(|k| kind_rank(k));
        assert_eq!(&kinds[..2], &["Namespace", "CustomResourceDefinition"]);
    }
}
