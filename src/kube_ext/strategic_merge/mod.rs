//! Strategic merge patch (`application/strategic-merge-patch+json`) for the hub's shadow APIs.
//!
//! The hub stores every object as an untyped template (`serde_json::Value`) instead of creating
//! it, so a client-side `kubectl apply` on an existing object arrives as a strategic merge patch
//! that the hub has to apply itself. This module owns that: it reimplements the *apply* half of
//! `k8s.io/apimachinery/pkg/util/strategicpatch` (`StrategicMergePatch` with
//! `MergeParallelList` and `IgnoreUnmatchedNulls`, as the apiserver uses it), including the
//! directives kubectl's three-way merge emits: `$patch` (`replace` / `delete` / `merge`),
//! `$retainKeys`, `$setElementOrder/<field>` and `$deleteFromPrimitiveList/<field>`.
//!
//! Which lists merge by which key comes from the parent cluster's OpenAPI v3 document
//! (`x-kubernetes-patch-strategy` / `x-kubernetes-patch-merge-key`), compiled once into a
//! [`PatchSchemaIndex`] and walked with [`PatchSchema`]. Fields the schema does not know get
//! JSON-merge semantics (maps merge, lists are replaced), with one deliberate extension: a
//! `$setElementOrder/<field>` directive proves the client saw a merge list, so its entries'
//! single key is used as the merge key instead of silently dropping the list's other items.
//!
//! Upstream hands the patched map to a typed decoder, which drops leftover directive keys and
//! explicit nulls; the hub has no typed decoder, so new content is sanitised here instead and
//! directive keys never reach the stored template.
//!
//! Modules: [`schema`] (patch metadata from OpenAPI) and [`merge`] (applying patches); both are
//! re-exported here. This file holds the directive names, the limits and the error type.

pub mod merge;
pub mod schema;

pub use merge::*;
pub use schema::*;

const DIRECTIVE_MARKER: &str = "$patch";
const RETAIN_KEYS_DIRECTIVE: &str = "$retainKeys";
const SET_ELEMENT_ORDER_PREFIX: &str = "$setElementOrder";
const DELETE_FROM_PRIMITIVE_LIST_PREFIX: &str = "$deleteFromPrimitiveList";
const REPLACE: &str = "replace";
const DELETE: &str = "delete";
const MERGE: &str = "merge";

/// Deeper patches are rejected rather than risking the stack; real objects nest < 30 levels.
const MAX_DEPTH: usize = 256;
/// Values quoted in error messages are cut so a 3 MiB patch does not become a 3 MiB error.
const MAX_QUOTE: usize = 200;

/// A malformed patch (or a patch that does not fit the stored object); the message is meant
/// for the user, as the HTTP 4xx body.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StrategicMergeError {
    #[error("{what} must be a JSON object, got {found}")]
    NotAnObject {
        what: &'static str,
        found: &'static str,
    },
    #[error("{path}: map {item} does not contain declared merge key: {merge_key}")]
    MissingMergeKey {
        path: String,
        item: String,
        merge_key: String,
    },
    #[error("{path}: unknown patch type {directive} in map {item}")]
    UnknownPatchType {
        path: String,
        directive: String,
        item: String,
    },
    #[error("{path}: merging lists cannot yet be specified in the patch ($patch: merge)")]
    MergeDirectiveInList { path: String },
    #[error("{path}: expected {expected}, got {found}")]
    BadType {
        path: String,
        expected: &'static str,
        found: &'static str,
    },
    #[error("{path}: invalid patch format of setElementOrder list: {reason}")]
    BadSetElementOrder { path: String, reason: String },
    #[error("{path}: the order in patch list {patch} doesn't match $setElementOrder list {order}")]
    SetElementOrderMismatch {
        path: String,
        patch: String,
        order: String,
    },
    #[error("{path}: invalid patch format of retainKeys: {reason}")]
    BadRetainKeys { path: String, reason: String },
    #[error("{path}: invalid patch format of primitive list: {reason}")]
    BadPrimitiveList { path: String, reason: String },
    #[error("{path}: lists of lists are not supported")]
    ListOfLists { path: String },
    #[error("{path}: list element types are not identical")]
    MixedListTypes { path: String },
    #[error("{path}: cannot merge lists of maps without a merge key")]
    NoMergeKey { path: String },
    #[error("{path}: patch nests deeper than {MAX_DEPTH} levels")]
    TooDeep { path: String },
}

type Result<T> = std::result::Result<T, StrategicMergeError>;

/// OpenAPI documents shared by the schema and merge tests.
#[cfg(test)]
mod fixtures {
    use serde_json::{Value, json};

    /// The `MergeItem` test struct of upstream's patch_test.go, as an OpenAPI v3 document.
    pub(super) fn merge_item_doc() -> Value {
        let item = json!({"$ref": "#/components/schemas/mergeItem"});
        json!({"components": {"schemas": {
            "mergeItem": {
                "type": "object",
                "x-kubernetes-group-version-kind": [{"group": "test", "version": "v1", "kind": "MergeItem"}],
                "properties": {
                    "name": {"type": "string"},
                    "value": {"type": "string"},
                    "other": {"type": "string"},
                    "mergingList": {"type": "array", "items": item,
                        "x-kubernetes-patch-strategy": "merge", "x-kubernetes-patch-merge-key": "name"},
                    "nonMergingList": {"type": "array", "items": item},
                    "mergingIntList": {"type": "array", "items": {"type": "integer"},
                        "x-kubernetes-patch-strategy": "merge"},
                    "nonMergingIntList": {"type": "array", "items": {"type": "integer"}},
                    "mergeItemPtr": {"allOf": [item],
                        "x-kubernetes-patch-strategy": "merge", "x-kubernetes-patch-merge-key": "name"},
                    "simpleMap": {"type": "object", "additionalProperties": {"type": "string"}},
                    "replacingItem": {"type": "object", "x-kubernetes-patch-strategy": "replace"},
                    "retainKeysMap": {"allOf": [{"$ref": "#/components/schemas/retainKeysMergeItem"}],
                        "x-kubernetes-patch-strategy": "retainKeys"},
                    "retainKeysMergingList": {"type": "array", "items": item,
                        "x-kubernetes-patch-strategy": "merge,retainKeys",
                        "x-kubernetes-patch-merge-key": "name"}
                }
            },
            "retainKeysMergeItem": {
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "value": {"type": "string"},
                    "other": {"type": "string"},
                    "simpleMap": {"type": "object", "additionalProperties": {"type": "string"}},
                    "mergingIntList": {"type": "array", "items": {"type": "integer"},
                        "x-kubernetes-patch-strategy": "merge"},
                    "mergingList": {"type": "array", "items": item,
                        "x-kubernetes-patch-strategy": "merge", "x-kubernetes-patch-merge-key": "name"},
                    "nonMergingList": {"type": "array", "items": item}
                }
            }
        }}})
    }

    /// A trimmed apps/v1 document shaped like the real one: `allOf` wrappers around `$ref`s,
    /// patch extensions next to `items`.
    pub(super) fn apps_v1_doc() -> Value {
        let r = |name: &str| json!({"allOf": [{"$ref": format!("#/components/schemas/{name}")}], "default": {}});
        json!({"openapi": "3.0.0", "components": {"schemas": {
            "io.k8s.api.apps.v1.Deployment": {
                "type": "object",
                "properties": {
                    "apiVersion": {"type": "string"},
                    "kind": {"type": "string"},
                    "metadata": r("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"),
                    "spec": r("io.k8s.api.apps.v1.DeploymentSpec"),
                },
                "x-kubernetes-group-version-kind": [{"group": "apps", "kind": "Deployment", "version": "v1"}]
            },
            "io.k8s.api.apps.v1.DeploymentSpec": {
                "type": "object",
                "properties": {
                    "replicas": {"type": "integer", "format": "int32"},
                    "selector": r("io.k8s.apimachinery.pkg.apis.meta.v1.LabelSelector"),
                    "strategy": {
                        "allOf": [{"$ref": "#/components/schemas/io.k8s.api.apps.v1.DeploymentStrategy"}],
                        "x-kubernetes-patch-strategy": "retainKeys"
                    },
                    "template": r("io.k8s.api.core.v1.PodTemplateSpec")
                }
            },
            "io.k8s.api.apps.v1.DeploymentStrategy": {
                "type": "object",
                "properties": {"type": {"type": "string"}, "rollingUpdate": {"type": "object"}}
            },
            "io.k8s.apimachinery.pkg.apis.meta.v1.LabelSelector": {
                "type": "object",
                "properties": {"matchLabels": {"type": "object", "additionalProperties": {"type": "string"}}}
            },
            "io.k8s.api.core.v1.PodTemplateSpec": {
                "type": "object",
                "properties": {
                    "metadata": r("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"),
                    "spec": {"$ref": "#/components/schemas/io.k8s.api.core.v1.PodSpec"}
                }
            },
            "io.k8s.api.core.v1.PodSpec": {
                "type": "object",
                "properties": {
                    "containers": {
                        "type": "array",
                        "items": r("io.k8s.api.core.v1.Container"),
                        "x-kubernetes-list-map-keys": ["name"],
                        "x-kubernetes-list-type": "map",
                        "x-kubernetes-patch-merge-key": "name",
                        "x-kubernetes-patch-strategy": "merge"
                    },
                    "volumes": {
                        "type": "array",
                        "items": r("io.k8s.api.core.v1.Volume"),
                        "x-kubernetes-patch-merge-key": "name",
                        "x-kubernetes-patch-strategy": "merge,retainKeys"
                    },
                    "tolerations": {"type": "array", "items": {"type": "object"}},
                    "nodeSelector": {"type": "object", "additionalProperties": {"type": "string"}}
                }
            },
            "io.k8s.api.core.v1.Volume": {
                "type": "object",
                "properties": {"name": {"type": "string"}, "configMap": {"type": "object"}, "emptyDir": {"type": "object"}}
            },
            "io.k8s.api.core.v1.Container": {
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "image": {"type": "string"},
                    "args": {"type": "array", "items": {"type": "string", "default": ""}},
                    "env": {
                        "type": "array",
                        "items": r("io.k8s.api.core.v1.EnvVar"),
                        "x-kubernetes-patch-merge-key": "name",
                        "x-kubernetes-patch-strategy": "merge"
                    },
                    "ports": {
                        "type": "array",
                        "items": r("io.k8s.api.core.v1.ContainerPort"),
                        "x-kubernetes-patch-merge-key": "containerPort",
                        "x-kubernetes-patch-strategy": "merge"
                    }
                }
            },
            "io.k8s.api.core.v1.EnvVar": {
                "type": "object",
                "properties": {"name": {"type": "string"}, "value": {"type": "string"}}
            },
            "io.k8s.api.core.v1.ContainerPort": {
                "type": "object",
                "properties": {"containerPort": {"type": "integer"}, "protocol": {"type": "string"}}
            },
            "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta": {
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                    "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
                    "finalizers": {
                        "type": "array",
                        "items": {"type": "string"},
                        "x-kubernetes-patch-strategy": "merge"
                    }
                }
            },
            "broken": {"properties": {"x": {"$ref": "#/components/schemas/doesNotExist"}, "y": 7}}
        }}})
    }
}
