//! Generic deployment of a Description's objects into a child (docs/spec/deployer.md §8):
//! each object is prepared (ownership annotations, `clusternet.io/last-applied-configuration`)
//! and applied with server-side apply under a `clusternet/...` field manager; Namespaces and CRDs
//! go first. Objects that were applied before but are no longer desired are pruned; deleting a
//! Description deletes its objects. Conflicts with other field managers are reported, except that
//! fields owned by the child's own autoscalers are left to them, and an object this Description
//! already owns is taken back (drift repair).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::ByteString;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::discovery::{ApiCapabilities, Scope};
use kube::{Client, ResourceExt};
use serde_json::Value;
use tokio::sync::Mutex;

use crate::apis::known;
use crate::apis::{Description, Feed, ManifestStatus};
use crate::kube_ext::object_ref::ObjectRef;
use crate::runtime::api_code;

/// Field managers of the child's own controllers whose fields we never take over (an HPA owns
/// `spec.replicas`, for instance).
const YIELD_TO: &[&str] = &[
    "horizontal-pod-autoscaler",
    "vpa-updater",
    "vpa-recommender",
    "cluster-autoscaler",
    "keda-operator",
];

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
}

/// A child cluster as a deployer sees it: a client and a discovery cache.
pub struct ChildCluster {
    client: Client,
    field_manager: String,
    discovery: Mutex<HashMap<(String, String), (ApiResource, ApiCapabilities)>>,
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
        if let Some(a) = ann.as_object_mut() {
            a.remove(known::KUBECTL_LAST_APPLIED_CONFIG_ANNOTATION);
            a.insert(
                known::OBJECT_OWNED_BY_DESCRIPTION_ANNOTATION.to_string(),
                Value::String(format!("{desc_namespace}.{desc_name}")),
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
fn settled(kind: &str, obj: &DynamicObject) -> bool {
    let status = obj.data.get("status");
    let get = |p: &str| {
        status
            .and_then(|s| s.pointer(p))
            .and_then(Value::as_i64)
            .unwrap_or(0)
    };
    let want = obj
        .data
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

impl ChildCluster {
    pub fn new(client: Client, field_manager: impl Into<String>) -> Self {
        ChildCluster {
            client,
            field_manager: field_manager.into(),
            discovery: Mutex::new(HashMap::new()),
        }
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
                _ => format!("discovering {kind} in {api_version}: {e}"),
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
    ) -> Result<DynamicObject, String> {
        let api = self.api_for(r).await?;
        let params = PatchParams::apply(&self.field_manager);
        match api.patch(&r.name, &params, &Patch::Apply(obj)).await {
            Ok(o) => Ok(o),
            Err(kube::Error::Api(s)) if s.code == 409 => {
                // who holds the conflicting fields?
                let live = api.get_opt(&r.name).await.map_err(|e| e.to_string())?;
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
                    let yielded = YIELD_TO
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

    /// Applies every object of the Description (Namespaces and CRDs first), prunes objects that were
    /// applied before (`previous`) and are no longer desired (unless another Description of this
    /// child still wants them: `elsewhere`), and reports per-object results.
    pub async fn apply(
        &self,
        desc: &Description,
        previous: &[ManifestStatus],
        elsewhere: &[Wanted],
    ) -> Outcome {
        let owner = format!(
            "{}.{}",
            desc.namespace().unwrap_or_default(),
            desc.name_any()
        );
        let mut out = Outcome {
            settled: true,
            ..Default::default()
        };
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
            let prepared = prepare(v, &desc.namespace().unwrap_or_default(), &desc.name_any());
            match self.apply_one(r, &prepared, &owner).await {
                Ok(live) => {
                    out.settled &= settled(&r.kind, &live);
                    out.statuses.push(ManifestStatus {
                        feed: Feed::new(&r.api_version, &r.kind, &r.namespace, &r.name),
                        observed_status: live.data.get("status").cloned(),
                    });
                }
                Err(e) => {
                    out.settled = false;
                    out.errors.push(format!("{}: {e}", r.display()));
                }
            }
        }
        // prune what this Description applied before and no longer holds
        for old in previous {
            let r = ref_of_status(old);
            if objects.iter().any(|(o, _)| o.same_object(&r)) {
                continue;
            }
            if let Err(e) = self.delete_one(&r, &owner, elsewhere).await {
                out.errors.push(format!("pruning {}: {e}", r.display()));
                // keep remembering it so the next round prunes again
                out.statuses.push(old.clone());
            }
        }
        out
    }

    /// Deletes one object if this Description owns it (never someone else's object of the same
    /// name). An object another Description of this child still wants is handed over to it (its
    /// ownership annotation re-pointed) instead: it goes when the last Description lets go.
    async fn delete_one(
        &self,
        r: &ObjectRef,
        owner: &str,
        elsewhere: &[Wanted],
    ) -> Result<(), String> {
        let api = self.api_for(r).await?;
        let live = match api.get_opt(&r.name).await {
            Ok(Some(l)) => l,
            Ok(None) => return Ok(()),
            Err(e) => return Err(api_message(&e)),
        };
        let ours = live
            .annotations()
            .get(known::OBJECT_OWNED_BY_DESCRIPTION_ANNOTATION)
            .map(String::as_str)
            == Some(owner);
        if !ours {
            return Ok(());
        }
        if let Some(heir) = elsewhere.iter().find(|w| w.object.same_object(r)) {
            let patch = serde_json::json!({"metadata": {"annotations": {
                known::OBJECT_OWNED_BY_DESCRIPTION_ANNOTATION: heir.owner}}});
            return match api
                .patch(&r.name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => {
                    tracing::info!(object = %r.display(), from = owner, to = %heir.owner, "kept: another Description still wants it");
                    Ok(())
                }
                Err(e) if api_code(&e) == Some(404) => Ok(()),
                Err(e) => Err(api_message(&e)),
            };
        }
        match api.delete(&r.name, &DeleteParams::background()).await {
            Ok(_) => Ok(()),
            Err(e) if api_code(&e) == Some(404) => Ok(()),
            Err(e) => Err(api_message(&e)),
        }
    }

    /// §8.3: deletes every object of the Description (and any it applied before), in reverse
    /// order, except what another Description of this child still wants (`elsewhere`).
    pub async fn offload(&self, desc: &Description, elsewhere: &[Wanted]) -> Result<(), String> {
        let owner = format!(
            "{}.{}",
            desc.namespace().unwrap_or_default(),
            desc.name_any()
        );
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
        let mut errors = Vec::new();
        for r in &refs {
            if let Err(e) = self.delete_one(r, &owner, elsewhere).await {
                // an unknown kind was never created: nothing to delete
                if !e.contains("does not serve kind") {
                    errors.push(format!("{}: {e}", r.display()));
                }
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors.join("; "))
        }
    }
}

fn api_message(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => s.message.clone(),
        other => other.to_string(),
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

/// Shared child clusters by cluster ID (the parent's Push deployer keeps one per child).
#[derive(Default, Clone)]
pub struct ChildCache {
    inner: Arc<Mutex<BTreeMap<String, Fingerprinted>>>,
}

impl ChildCache {
    /// The child for `cluster_id`, rebuilt when its credentials (`fingerprint`) changed.
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
        let c = Arc::new(ChildCluster::new(build()?, field_manager));
        m.insert(cluster_id.to_string(), (fingerprint.to_string(), c.clone()));
        Ok(c)
    }
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
