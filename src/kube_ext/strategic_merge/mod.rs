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

/// Bounded fuzz harnesses (issue #21): strategic merge patches arrive from any user allowed to
/// patch through the shadow API, so no patch, stored object or OpenAPI schema may panic or hang
/// the merge, and every refusal must say what is wrong.
#[cfg(test)]
mod fuzz {
    use proptest::prelude::*;
    use serde_json::{Map, Value, json};

    use super::fixtures::{apps_v1_doc, merge_item_doc};
    use super::*;
    use crate::fuzz_support::{self, assert_readable};

    fn merge_item_schema() -> PatchSchema {
        PatchSchema::from_openapi_v3(&merge_item_doc(), "test", "v1", "MergeItem")
            .expect("fixture has MergeItem")
    }

    fn deployment_schema() -> PatchSchema {
        PatchSchema::from_openapi_v3(&apps_v1_doc(), "apps", "v1", "Deployment")
            .expect("fixture has Deployment")
    }

    /// A list item with a merge key (`name`, sometimes `containerPort`), directives now and
    /// then: what lists of maps in real patches look like.
    fn keyed_item() -> impl Strategy<Value = Value> {
        (
            prop_oneof![
                4 => "[a-c]".prop_map(Value::from),
                1 => fuzz_support::json_leaf(),
            ],
            prop::option::of(prop::sample::select(vec![
                "delete", "replace", "merge", "bogus",
            ])),
            prop::collection::vec((fuzz_support::json_key(), fuzz_support::json_value()), 0..3),
            prop::sample::select(vec!["name", "name", "name", "containerPort"]),
        )
            .prop_map(|(key, directive, rest, key_name)| {
                let mut m: Map<String, Value> = rest.into_iter().collect();
                m.insert(key_name.into(), key);
                if let Some(d) = directive {
                    m.insert("$patch".into(), Value::from(d));
                }
                Value::Object(m)
            })
    }

    /// A patch value for a field: maps, keyed lists, primitive lists, directives, scalars.
    fn patch_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            4 => fuzz_support::json_leaf(),
            2 => prop::collection::vec(keyed_item(), 0..4).prop_map(Value::Array),
            1 => prop::collection::vec(fuzz_support::json_leaf(), 0..4).prop_map(Value::Array),
        ];
        leaf.prop_recursive(4, 48, 5, |inner| {
            prop_oneof![
                prop::collection::vec((fuzz_support::json_key(), inner.clone()), 0..5)
                    .prop_map(|e| Value::Object(e.into_iter().collect())),
                prop::collection::vec(inner, 0..4).prop_map(Value::Array),
            ]
        })
    }

    /// A patch object, with directives at the top level now and then.
    fn patch() -> impl Strategy<Value = Value> {
        (
            prop::collection::vec((fuzz_support::json_key(), patch_value()), 0..6),
            prop::option::of(prop::sample::select(vec![
                "replace", "delete", "merge", "x",
            ])),
            prop::option::of(prop::collection::vec(fuzz_support::json_key(), 0..4)),
        )
            .prop_map(|(entries, directive, retain)| {
                let mut m: Map<String, Value> = entries.into_iter().collect();
                if let Some(d) = directive {
                    m.insert("$patch".into(), Value::from(d));
                }
                if let Some(keys) = retain {
                    m.insert("$retainKeys".into(), json!(keys));
                }
                Value::Object(m)
            })
    }

    fn original() -> impl Strategy<Value = Value> {
        prop_oneof![
            3 => fuzz_support::deployment_like(),
            2 => patch(),
            1 => fuzz_support::json_value(),
        ]
    }

    fn schema_choice() -> impl Strategy<Value = Option<PatchSchema>> {
        prop_oneof![
            Just(None),
            Just(Some(merge_item_schema())),
            Just(Some(deployment_schema())),
        ]
    }

    fn is_directive(k: &str) -> bool {
        k == DIRECTIVE_MARKER
            || k == RETAIN_KEYS_DIRECTIVE
            || k.starts_with(SET_ELEMENT_ORDER_PREFIX)
            || k.starts_with(DELETE_FROM_PRIMITIVE_LIST_PREFIX)
    }

    fn has_directive_key(v: &Value) -> bool {
        match v {
            Value::Object(m) => m
                .iter()
                .any(|(k, v)| is_directive(k) || has_directive_key(v)),
            Value::Array(items) => items.iter().any(has_directive_key),
            _ => false,
        }
    }

    /// `v` without directive keys and without nulls, at any depth.
    fn plain(v: Value) -> Value {
        match v {
            Value::Object(m) => Value::Object(
                m.into_iter()
                    .filter(|(k, v)| !is_directive(k) && !v.is_null())
                    .map(|(k, v)| (k, plain(v)))
                    .collect(),
            ),
            Value::Array(items) => Value::Array(
                items
                    .into_iter()
                    .filter(|v| !v.is_null())
                    .map(plain)
                    .collect(),
            ),
            other => other,
        }
    }

    /// Random `components.schemas` with `$ref`s and `allOf`s among a few names (so cycles are
    /// common), patch extensions on properties, and `x-kubernetes-group-version-kind`.
    fn openapi_doc() -> impl Strategy<Value = Value> {
        let names = || prop::sample::select(vec!["a", "b", "c"]);
        let reference = names().prop_map(|n| json!({"$ref": format!("#/components/schemas/{n}")}));
        let property = (
            prop::option::of(reference.clone()),
            prop::option::of(prop::sample::select(vec![
                "merge",
                "replace",
                "retainKeys",
                "merge,retainKeys",
            ])),
            prop::option::of(prop::sample::select(vec!["name", "containerPort", ""])),
            prop::bool::ANY,
        )
            .prop_map(|(r, strategy, key, list)| {
                let mut p = Map::new();
                if let Some(r) = r {
                    if list {
                        p.insert("items".into(), r);
                    } else {
                        p.insert("allOf".into(), json!([r]));
                    }
                }
                if let Some(s) = strategy {
                    p.insert("x-kubernetes-patch-strategy".into(), json!(s));
                }
                if let Some(k) = key {
                    p.insert("x-kubernetes-patch-merge-key".into(), json!(k));
                }
                Value::Object(p)
            });
        let schema = (
            prop::collection::vec((prop::sample::select(fuzz_support::KEYS), property), 0..4),
            prop::collection::vec(reference.clone(), 0..3),
            prop::option::of(reference),
            prop::option::of(fuzz_support::json_value()),
        )
            .prop_map(|(props, all_of, items, junk)| {
                let mut s = Map::new();
                let props: Map<String, Value> =
                    props.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
                s.insert("properties".into(), Value::Object(props));
                s.insert("allOf".into(), Value::Array(all_of));
                if let Some(i) = items {
                    s.insert("items".into(), i);
                }
                if let Some(j) = junk {
                    s.insert("additionalProperties".into(), j);
                }
                s.insert(
                    "x-kubernetes-group-version-kind".into(),
                    json!([{"group": "apps", "version": "v1", "kind": "Deployment"}]),
                );
                Value::Object(s)
            });
        prop::collection::vec((names(), schema), 1..4).prop_map(|schemas| {
            let schemas: Map<String, Value> = schemas
                .into_iter()
                .map(|(n, s)| (n.to_owned(), s))
                .collect();
            json!({"components": {"schemas": schemas}})
        })
    }

    proptest! {
        #![proptest_config(fuzz_support::config(fuzz_support::DEFAULT_CASES))]

        /// Any patch on any object, with or without a schema: the merge returns, a refusal
        /// says why, a result is an object, and a patch never leaves its directives in it.
        #[test]
        fn random_patches_never_panic_the_strategic_merge(
            original in original(),
            patch in prop_oneof![6 => patch(), 1 => fuzz_support::json_value()],
            schema in schema_choice(),
        ) {
            match apply_strategic_merge_patch(&original, &patch, schema.as_ref()) {
                Ok(merged) => {
                    prop_assert!(merged.is_object());
                    if !has_directive_key(&original) {
                        prop_assert!(!has_directive_key(&merged), "directives leaked: {}", merged);
                    }
                }
                Err(e) => assert_readable(&e.to_string(), "a strategic merge patch")?,
            }
        }

    }

    proptest! {
        #![proptest_config(fuzz_support::config(128))]

        /// Without a schema and without directives (or nulls, which merge patches and the
        /// sanitising treat differently inside lists), a strategic merge patch is an RFC 7386
        /// merge patch: lists are replaced, maps merge.
        #[test]
        fn plain_strategic_merge_without_schema_is_a_json_merge_patch(
            original in fuzz_support::json_object(),
            patch in fuzz_support::json_object().prop_map(plain),
        ) {
            let merged = apply_strategic_merge_patch(&original, &patch, None);
            prop_assert_eq!(merged, Ok(apply_json_merge_patch(&original, &patch)));
        }

    }

    proptest! {
        // each case compiles a schema index: fewer cases, same coverage of the lookups
        #![proptest_config(fuzz_support::config(64))]

        /// Any OpenAPI document, cycles of `$ref`s and `allOf`s included, compiles, and its
        /// schemas can be looked up and merged with, in bounded time.
        #[test]
        fn random_openapi_schemas_never_hang_the_strategic_merge(
            doc in openapi_doc(),
            original in original(),
            patch in patch(),
        ) {
            let index = PatchSchemaIndex::from_openapi(&doc);
            let started = std::time::Instant::now();
            for name in ["a", "b", "c"] {
                if let Some(schema) = index.for_schema_name(name) {
                    let _ = schema.field("missing-field");
                    let _ = schema.items();
                }
            }
            let schema = index.for_kind("apps", "v1", "Deployment");
            if let Err(e) = apply_strategic_merge_patch(&original, &patch, schema.as_ref()) {
                assert_readable(&e.to_string(), "a strategic merge patch")?;
            }
            prop_assert!(
                started.elapsed() < std::time::Duration::from_secs(2),
                "schema lookups took {:?}",
                started.elapsed()
            );
        }
    }
}
