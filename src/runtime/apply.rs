//! Server-side apply of the pipeline's own objects (Bases, Descriptions, Localizations and the
//! status the controllers report). A body names apiVersion/kind and carries only the fields its
//! field manager owns; applies are forced because these objects are ours (design.md §2), so a
//! stale cache never turns into a 409 to retry by hand. Callers decide beforehand whether a write
//! is needed at all (the planners compare what they own against the cache), so an unchanged object
//! costs no request.

use kube::Resource;
use kube::api::{Api, Patch, PatchParams};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

/// The skeleton of an apply body: apiVersion, kind and `metadata` (name, namespace when given, and
/// the owned `extra` metadata fields such as labels or finalizers).
pub fn body<K>(name: &str, namespace: Option<&str>, extra: Map<String, Value>) -> Value
where
    K: Resource<DynamicType = ()>,
{
    let mut meta = Map::new();
    meta.insert("name".into(), json!(name));
    if let Some(ns) = namespace {
        meta.insert("namespace".into(), json!(ns));
    }
    meta.extend(extra);
    json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "metadata": meta,
    })
}

/// Applies `body` to the object `name` under `manager`, taking over the fields it names.
pub async fn apply<K>(api: &Api<K>, manager: &str, name: &str, body: &Value) -> kube::Result<K>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    api.patch(
        name,
        &PatchParams::apply(manager).force(),
        &Patch::Apply(body),
    )
    .await
}

/// Applies `body` (which carries `status` only) to the status subresource of `name`.
pub async fn apply_status<K>(
    api: &Api<K>,
    manager: &str,
    name: &str,
    body: &Value,
) -> kube::Result<K>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    api.patch_status(
        name,
        &PatchParams::apply(manager).force(),
        &Patch::Apply(body),
    )
    .await
}

/// Applies `status` as the status of `obj` (see [`apply_status`]); `Ok(false)` when `obj` is
/// gone, as there is nothing left to report on.
pub async fn write_status<K>(
    api: &Api<K>,
    manager: &str,
    obj: &K,
    status: Value,
) -> kube::Result<bool>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    let body = status_body(obj, status);
    let name = obj.meta().name.as_deref().unwrap_or_default();
    match apply_status(api, manager, name, &body).await {
        Ok(_) => Ok(true),
        Err(e) if crate::runtime::api_code(&e) == Some(404) => Ok(false),
        Err(e) => Err(e),
    }
}

/// The status body of `obj`: apiVersion, kind, name, namespace and `status`.
pub fn status_body<K>(obj: &K, status: Value) -> Value
where
    K: Resource<DynamicType = ()>,
{
    let meta = obj.meta();
    let mut b = body::<K>(
        meta.name.as_deref().unwrap_or_default(),
        meta.namespace.as_deref(),
        Map::new(),
    );
    b["status"] = status;
    b
}

/// What turns `existing` into `wanted` (apply bodies, named by `metadata.name`): the bodies that
/// are missing or differ (`same` says when an existing object already is as its body asks), and
/// the names of existing objects no body wants.
pub fn changes_by_name<K: Resource>(
    wanted: Vec<Value>,
    existing: &[&K],
    same: impl Fn(&K, &Value) -> bool,
) -> (Vec<Value>, Vec<String>) {
    let name_of = |k: &K| k.meta().name.clone().unwrap_or_default();
    let stale = existing
        .iter()
        .map(|k| name_of(k))
        .filter(|n| {
            !wanted
                .iter()
                .any(|w| w["metadata"]["name"].as_str() == Some(n.as_str()))
        })
        .collect();
    let changed = wanted
        .into_iter()
        .filter(|w| {
            !existing
                .iter()
                .any(|k| w["metadata"]["name"].as_str() == Some(name_of(k).as_str()) && same(k, w))
        })
        .collect();
    (changed, stale)
}

/// Deletes `name`; already gone counts as deleted.
pub async fn delete<K>(api: &Api<K>, name: &str) -> kube::Result<()>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    match api.delete(name, &kube::api::DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(e) if super::api_code(&e) == Some(404) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Adds `finalizer` to `obj` unless it has it, by applying it under `manager` (so the finalizer
/// is that manager's to keep, and other writers' finalizers stay).
pub async fn hold_finalizer<K>(
    api: &Api<K>,
    manager: &str,
    obj: &K,
    finalizer: &str,
) -> kube::Result<()>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    let meta = obj.meta();
    if meta.finalizers.iter().flatten().any(|f| f == finalizer) {
        return Ok(());
    }
    let name = meta.name.as_deref().unwrap_or_default();
    let extra = Map::from_iter([("finalizers".into(), json!([finalizer]))]);
    let body = body::<K>(name, meta.namespace.as_deref(), extra);
    apply(api, manager, name, &body).await.map(|_| ())
}

/// Removes `finalizer` from `obj` (a merge patch guarded by its resourceVersion, so a stale
/// copy never drops a finalizer another writer just added). Gone, or changed meanwhile (the
/// next reconcile sees the new copy), counts as done.
pub async fn release_finalizer<K>(api: &Api<K>, obj: &K, finalizer: &str) -> kube::Result<()>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let meta = obj.meta();
    if !meta.finalizers.iter().flatten().any(|f| f == finalizer) {
        return Ok(());
    }
    let remaining: Vec<&String> = meta
        .finalizers
        .iter()
        .flatten()
        .filter(|f| *f != finalizer)
        .collect();
    let patch = json!({"metadata": {"finalizers": remaining,
        "resourceVersion": meta.resource_version}});
    match api
        .patch(
            meta.name.as_deref().unwrap_or_default(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if matches!(super::api_code(&e), Some(404 | 409)) => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apis::Base;

    #[test]
    fn changes_by_name_writes_what_differs_and_deletes_what_is_unwanted() {
        let base = |name: &str, v: &str| -> Base {
            serde_json::from_value(json!({"apiVersion": "apps.clusternet.io/v1alpha1",
                "kind": "Base", "metadata": {"name": name, "labels": {"v": v}},
                "spec": {"feeds": []}}))
            .expect("a Base")
        };
        let (a, b) = (base("a", "1"), base("b", "1"));
        let wanted = vec![
            json!({"metadata": {"name": "a", "labels": {"v": "1"}}}),
            json!({"metadata": {"name": "c", "labels": {"v": "1"}}}),
        ];
        let same = |k: &Base, w: &Value| {
            k.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("v"))
                .map(String::as_str)
                == w["metadata"]["labels"]["v"].as_str()
        };
        let (changed, stale) = changes_by_name(wanted, &[&a, &b], same);
        assert_eq!(
            changed,
            vec![json!({"metadata": {"name": "c", "labels": {"v": "1"}}})]
        );
        assert_eq!(stale, vec!["b".to_string()]);
        let (changed, _) = changes_by_name(
            vec![json!({"metadata": {"name": "a", "labels": {"v": "2"}}})],
            &[&a],
            same,
        );
        assert_eq!(changed.len(), 1, "a differing object is written again");
    }

    #[test]
    fn bodies_name_the_kind_and_only_what_is_given() {
        let b = body::<Base>(
            "b",
            Some("ns"),
            Map::from_iter([("labels".to_string(), json!({"a": "1"}))]),
        );
        assert_eq!(
            b,
            json!({"apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Base",
                "metadata": {"name": "b", "namespace": "ns", "labels": {"a": "1"}}})
        );
        let s = status_body(&Base::new("b", Default::default()), json!({"x": 1}));
        assert_eq!(s["status"], json!({"x": 1}));
        assert!(s["metadata"].get("resourceVersion").is_none());
    }
}
