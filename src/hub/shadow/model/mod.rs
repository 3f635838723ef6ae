//! Pure data model of the hub's shadow API (`shadow/v1alpha1`, hub spec §3).
//!
//! These modules own every decision the shadow HTTP handlers make that does not need I/O. They
//! mirror upstream's split of `pkg/hub/registry/shadow/template/*.go` and
//! `pkg/hub/apiserver/shadow/*.go`:
//!
//! * [`naming`]: Manifest names and labels (§3.2), the stored `Manifest` JSON, update label merge;
//! * [`trim`]: create-time preparation and trimming of the dry-run result (§3.3);
//! * [`transform`]: Manifest -> object, lists, watches, label and field selectors (§3.4);
//! * [`scale`]: the `/scale` subresource and refused subresource writes (§3.5);
//! * [`discovery`]: which parent resources are served and the discovery document (§3.1, §3.6).
//!
//! This file holds the shared constants, the error type and the JSON path helpers; everything is
//! re-exported here, so callers keep writing `model::manifest_name` and friends.
//!
//! User objects are handled as [`serde_json::Value`] throughout and never pass through typed
//! structs, so fields unknown to this crate survive the round trip. Nothing here talks to the
//! network or to other clusternet modules; the caller does the I/O and feeds the results in.

pub mod discovery;
pub mod scale;
pub mod transform;
pub mod trim;

pub use crate::apis::naming::{self, *};
pub use discovery::*;
pub use scale::*;
pub use transform::*;
pub use trim::*;

use std::collections::BTreeMap;

use serde_json::{Map, Value};

/// Default namespace holding the Manifests (and used for namespaced dry runs).
pub const DEFAULT_RESERVED_NAMESPACE: &str = "clusternet-reserved";

/// API group served by the shadow API.
pub const SHADOW_GROUP: &str = "shadow";
/// The only version of the shadow API.
pub const SHADOW_VERSION: &str = "v1alpha1";
/// `shadow/v1alpha1`.
pub const SHADOW_GROUP_VERSION: &str = "shadow/v1alpha1";
/// Category put on every shadow discovery entry, so `kubectl get clusternet.shadow` works.
pub const SHADOW_CATEGORY: &str = "clusternet.shadow";

/// The labels and annotations the shadow API reads and writes: the config labels of a Manifest,
/// `clusternet.io/created-by: clusternet-hub` on every submitted object, the feed-protection
/// annotation surfaced on reads, and `apps.clusternet.io/skip-validating`.
pub use crate::apis::known::{
    CLUSTERNET_HUB_NAME, CONFIG_GROUP_LABEL, CONFIG_KIND_LABEL, CONFIG_NAME_LABEL,
    CONFIG_NAMESPACE_LABEL, CONFIG_VERSION_LABEL, FEED_PROTECTION_ANNOTATION,
    OBJECT_CREATED_BY_LABEL as CREATED_BY_LABEL, SKIP_VALIDATING_ANNOTATION,
};
/// Annotation carried by BOOKMARK objects.
pub const INITIAL_EVENTS_END_ANNOTATION: &str = "k8s.io/initial-events-end";

/// Group suffix of clusternet's own APIs, never mirrored.
pub const CLUSTERNET_GROUP_SUFFIX: &str = ".clusternet.io";

/// Verbs of every CRD-backed discovery entry (upstream order).
pub const CRD_VERBS: [&str; 8] = [
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "create",
    "update",
    "watch",
];
/// Verbs of a CRD `/scale` discovery entry.
pub const CRD_SCALE_VERBS: [&str; 3] = ["get", "patch", "update"];

/// Errors of the pure shadow-API decisions. Messages are meant to reach the client.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModelError {
    /// A field selector term could not be parsed.
    #[error("invalid selector: '{selector}'; can't understand '{term}'")]
    InvalidFieldSelector { selector: String, term: String },
    /// A field selector value used an escape other than `\\`, `\,` or `\=`.
    #[error("invalid field selector value {value:?}: {reason}")]
    InvalidFieldSelectorValue { value: String, reason: String },
    /// A value that must become a label selector value is not a valid label value.
    #[error("values[0][{key}]: Invalid value: {value:?}: {reason}")]
    InvalidLabelValue {
        key: String,
        value: String,
        reason: String,
    },
    /// The Manifest (or its `template`) cannot be turned back into an object.
    #[error("invalid Manifest: {0}")]
    InvalidManifest(String),
    /// An object handed in is not shaped like a Kubernetes object.
    #[error("invalid object: {0}")]
    InvalidObject(String),
    /// A `Scale` body cannot be applied.
    #[error("invalid Scale: {0}")]
    InvalidScale(String),
}

// ---------------------------------------------------------------------------------------------
// JSON path helpers (semantics of apimachinery's unstructured.Nested*/RemoveNestedField)
// ---------------------------------------------------------------------------------------------

fn get_path<'a>(v: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter()
        .try_fold(v, |cur, key| cur.as_object()?.get(*key))
}

fn get_path_mut<'a>(v: &'a mut Value, path: &[&str]) -> Option<&'a mut Value> {
    path.iter()
        .try_fold(v, |cur, key| cur.as_object_mut()?.get_mut(*key))
}

fn get_str<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    get_path(v, path)?.as_str()
}

/// Missing or non-object intermediates make this a no-op, as `RemoveNestedField` does.
fn remove_path(v: &mut Value, path: &[&str]) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    if let Some(Value::Object(m)) = get_path_mut(v, parents) {
        m.remove(*last);
    }
}

/// Creates missing intermediate objects; fails on a non-object intermediate like `SetNestedField`.
fn set_path(v: &mut Value, path: &[&str], value: Value) -> Result<(), String> {
    let Some((last, parents)) = path.split_last() else {
        *v = value;
        return Ok(());
    };
    let mut cur = v;
    for (i, key) in parents.iter().enumerate() {
        let Value::Object(m) = cur else {
            return Err(format!("{} is not an object", path[..i].join(".")));
        };
        cur = m
            .entry((*key).to_string())
            .or_insert_with(|| Value::Object(Map::new()));
    }
    match cur {
        Value::Object(m) => {
            m.insert((*last).to_string(), value);
            Ok(())
        }
        _ => Err(format!("{} is not an object", parents.join("."))),
    }
}

/// `NestedStringMap` as used by `GetLabels`/`GetAnnotations`: any non-string value makes the
/// whole map unreadable (`None`), exactly like the Go accessor returning nil on error.
fn string_map(v: Option<&Value>) -> Option<BTreeMap<String, String>> {
    let m = v?.as_object()?;
    m.iter()
        .map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
        .collect()
}

fn string_map_value(m: &BTreeMap<String, String>) -> Value {
    Value::Object(
        m.iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect(),
    )
}

/// Labels of an object (`metadata.labels`); empty when absent or not a string map.
pub fn object_labels(obj: &Value) -> BTreeMap<String, String> {
    string_map(get_path(obj, &["metadata", "labels"])).unwrap_or_default()
}

/// `metadata.name` of an object, `""` when absent.
pub fn object_name(obj: &Value) -> &str {
    get_str(obj, &["metadata", "name"]).unwrap_or_default()
}

/// `metadata.namespace` of an object, `""` when absent.
pub fn object_namespace(obj: &Value) -> &str {
    get_str(obj, &["metadata", "namespace"]).unwrap_or_default()
}

/// Fixtures shared by the tests of several model modules.
#[cfg(test)]
mod fixtures {
    use serde_json::{Value, json};

    use super::FEED_PROTECTION_ANNOTATION;

    /// A stored Manifest as the parent returns it, with every field the transform touches.
    pub fn stored_manifest() -> Value {
        json!({
            "apiVersion": "apps.clusternet.io/v1alpha1",
            "kind": "Manifest",
            "metadata": {
                "name": "deployments.qux.my-nginx",
                "namespace": "clusternet-reserved",
                "generation": 3,
                "creationTimestamp": "2024-05-01T10:00:00Z",
                "resourceVersion": "777",
                "uid": "manifest-uid",
                "deletionGracePeriodSeconds": 0,
                "deletionTimestamp": "2024-05-02T10:00:00Z",
                "finalizers": ["apps.clusternet.io/feed-protection"],
                "annotations": {FEED_PROTECTION_ANNOTATION: "referred by subscriptions"},
                "labels": {"app": "nginx"},
            },
            "template": {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": "my-nginx", "namespace": "qux", "uid": "dry-run-uid", "generation": 1},
                "spec": {"replicas": 6},
            },
        })
    }
}
