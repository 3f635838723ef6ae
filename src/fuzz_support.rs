//! Strategies shared by the bounded fuzz harnesses (issue #21): random JSON values shaped enough
//! like Kubernetes objects and patches to get past the first `match` of the code under test, and
//! the proptest configuration every harness uses.
//!
//! The harnesses are property tests that run inside `cargo test --lib`; each proves "no panic, no
//! hang, and every rejection is a readable error" for one entry point that takes untrusted input.
//! The same entry points are fuzzed for hours with libFuzzer from `fuzz/` (see the `fuzz` just
//! recipe); these bounded runs keep the properties from regressing in CI.

use proptest::prelude::*;
use proptest::test_runner::Config;
use serde_json::{Map, Number, Value};

/// Cases per harness when `PROPTEST_CASES` is not set: enough to find shallow bugs on every CI
/// run while keeping each harness well under two seconds in a debug build.
pub(crate) const DEFAULT_CASES: u32 = 256;

/// A proptest configuration with `cases` cases, unless `PROPTEST_CASES` asks for another number.
///
/// `ProptestConfig::default()` reads `PROPTEST_CASES`, but struct-update syntax with an explicit
/// `cases` would silently override it; so the explicit count only applies when the variable is
/// unset, and `PROPTEST_CASES=100000 cargo test --lib fuzz` turns every harness into a long run.
pub(crate) fn config(cases: u32) -> Config {
    let default = Config::default();
    let cases = if std::env::var_os("PROPTEST_CASES").is_some_and(|v| !v.is_empty()) {
        default.cases
    } else {
        cases
    };
    Config { cases, ..default }
}

/// Object keys: the field names and directives the code under test looks at, so that random
/// documents actually reach its branches, plus arbitrary text.
pub(crate) const KEYS: &[&str] = &[
    "apiVersion",
    "kind",
    "metadata",
    "name",
    "namespace",
    "labels",
    "annotations",
    "finalizers",
    "resourceVersion",
    "uid",
    "managedFields",
    "spec",
    "status",
    "replicas",
    "template",
    "containers",
    "image",
    "env",
    "value",
    "ports",
    "containerPort",
    "protocol",
    "volumes",
    "args",
    "strategy",
    "type",
    "rollingUpdate",
    "items",
    "mergingList",
    "mergingIntList",
    "nonMergingList",
    "retainKeysMap",
    "retainKeysMergingList",
    "simpleMap",
    "replacingItem",
    "mergeItemPtr",
    "other",
    "$patch",
    "$retainKeys",
    "$setElementOrder/containers",
    "$setElementOrder/env",
    "$setElementOrder/mergingList",
    "$setElementOrder/mergingIntList",
    "$setElementOrder/finalizers",
    "$setElementOrder",
    "$deleteFromPrimitiveList/finalizers",
    "$deleteFromPrimitiveList/mergingIntList",
    "$deleteFromPrimitiveList",
    "op",
    "path",
    "from",
];

/// String values the code under test compares against, plus arbitrary text.
pub(crate) const WORDS: &[&str] = &[
    "",
    "replace",
    "delete",
    "merge",
    "add",
    "remove",
    "copy",
    "move",
    "test",
    "/",
    "/spec",
    "/spec/replicas",
    "/metadata/labels",
    "/metadata/labels/app",
    "/spec/template/spec/containers/0",
    "/spec/template/spec/containers/-",
    "~0",
    "~1",
    "a",
    "b",
    "nginx",
    "EOF",
    "v1",
    "apps/v1",
    "Deployment",
    "In",
    "NotIn",
    "Exists",
    "DoesNotExist",
    "JSONPatch",
    "MergePatch",
    "Helm",
    "FieldJSONPatch",
    "FieldMergePatch",
    "json",
    "yaml",
    "Static",
    "Dynamic",
    "Replication",
    "Dividing",
    "Spread",
    "Binpack",
];

/// Numbers around the edges that break arithmetic: zero, signs, `i32`/`i64`/`u64` limits and
/// floats that do not fit an integer.
pub(crate) fn edge_number() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::from(0)),
        Just(Value::from(1)),
        Just(Value::from(-1)),
        Just(Value::from(i32::MAX)),
        Just(Value::from(i32::MIN)),
        Just(Value::from(i64::MAX)),
        Just(Value::from(i64::MIN)),
        Just(Value::from(u64::MAX)),
        Just(Value::from(0.5)),
        Just(Value::from(1e300)),
        Just(Value::from(-0.0)),
    ]
}

/// A JSON number of any kind (integers of either sign, large unsigned, finite floats).
pub(crate) fn json_number() -> impl Strategy<Value = Value> {
    prop_oneof![
        3 => (-1_000_i64..1_000).prop_map(Value::from),
        1 => any::<i64>().prop_map(Value::from),
        1 => any::<u64>().prop_map(Value::from),
        1 => any::<f64>().prop_map(|f| Number::from_f64(f).map_or(Value::Null, Value::Number)),
        2 => edge_number(),
    ]
}

/// A string: mostly the vocabulary above, sometimes arbitrary Unicode.
pub(crate) fn json_string() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => prop::sample::select(WORDS).prop_map(str::to_owned),
        2 => "[a-z0-9./~-]{0,12}",
        1 => any_text(),
    ]
}

/// Arbitrary short text: any characters, control and non-ASCII ones included.
pub(crate) fn any_text() -> impl Strategy<Value = String> {
    prop::collection::vec(any::<char>(), 0..12).prop_map(|c| c.into_iter().collect())
}

/// An object key: mostly the vocabulary above, sometimes arbitrary Unicode.
pub(crate) fn json_key() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => prop::sample::select(KEYS).prop_map(str::to_owned),
        1 => "[a-z$/]{0,8}",
        1 => any_text(),
    ]
}

/// A scalar JSON value.
pub(crate) fn json_leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        1 => Just(Value::Null),
        1 => any::<bool>().prop_map(Value::Bool),
        2 => json_number(),
        4 => json_string().prop_map(Value::String),
    ]
}

/// Any JSON value, nested a few levels (objects and arrays of up to four entries): small, so
/// that a few hundred cases run in well under a second; libFuzzer goes bigger.
pub(crate) fn json_value() -> impl Strategy<Value = Value> {
    json_leaf().prop_recursive(4, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec((json_key(), inner), 0..4)
                .prop_map(|entries| Value::Object(entries.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// A JSON object (what most entry points insist on first).
pub(crate) fn json_object() -> impl Strategy<Value = Value> {
    prop::collection::vec((json_key(), json_value()), 0..6)
        .prop_map(|entries| Value::Object(entries.into_iter().collect()))
}

/// A JSON pointer built from the vocabulary (array indices and `-` included), sometimes one that
/// is not a pointer at all.
pub(crate) fn json_pointer() -> impl Strategy<Value = String> {
    let token = prop_oneof![
        4 => prop::sample::select(KEYS).prop_map(str::to_owned),
        2 => (0_usize..4).prop_map(|i| i.to_string()),
        1 => Just("-".to_owned()),
        1 => Just("01".to_owned()),
        1 => "[a-z~0-9]{0,4}",
    ];
    prop_oneof![
        8 => prop::collection::vec(token, 0..5).prop_map(|t| {
            t.iter().map(|t| format!("/{t}")).collect::<String>()
        }),
        1 => Just(String::new()),
        1 => any_text(),
    ]
}

/// An RFC 6902 operation, well formed or nearly so.
pub(crate) fn json_patch_op() -> impl Strategy<Value = Value> {
    let op =
        prop::sample::select(&["add", "remove", "replace", "move", "copy", "test", "bogus"][..]);
    (
        op,
        json_pointer(),
        prop::option::of(json_pointer()),
        prop::option::of(json_value()),
    )
        .prop_map(|(op, path, from, value)| {
            let mut m = Map::new();
            m.insert("op".into(), Value::from(op));
            m.insert("path".into(), Value::from(path));
            if let Some(from) = from {
                m.insert("from".into(), Value::from(from));
            }
            if let Some(value) = value {
                m.insert("value".into(), value);
            }
            Value::Object(m)
        })
}

/// An RFC 6902 patch document (a list of operations), or occasionally any JSON.
pub(crate) fn json_patch() -> impl Strategy<Value = Value> {
    prop_oneof![
        6 => prop::collection::vec(json_patch_op(), 0..6).prop_map(Value::Array),
        1 => json_value(),
    ]
}

/// A Deployment-like object: something real to patch, with merge lists and primitive lists.
pub(crate) fn deployment_like() -> impl Strategy<Value = Value> {
    (
        prop::collection::vec(("[a-c]", "[a-c]{0,2}"), 0..3),
        prop::collection::vec(("[a-c]", "[a-c]{0,3}", 0_i64..4), 0..3),
        prop::option::of(json_number()),
        prop::collection::vec(json_string(), 0..3),
        json_object(),
    )
        .prop_map(|(labels, containers, replicas, finalizers, extra)| {
            let labels: Map<String, Value> = labels
                .into_iter()
                .map(|(k, v)| (k, Value::from(v)))
                .collect();
            let containers: Vec<Value> = containers
                .into_iter()
                .map(|(name, image, port)| {
                    serde_json::json!({
                        "name": name,
                        "image": image,
                        "env": [{"name": "A", "value": image}],
                        "ports": [{"containerPort": port}],
                    })
                })
                .collect();
            serde_json::json!({
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": "web", "labels": labels, "finalizers": finalizers},
                "spec": {
                    "replicas": replicas,
                    "template": {"spec": {"containers": containers}},
                },
                "extra": extra,
            })
        })
}

/// Asserts that a rejection can be read: its message is not empty. `what` names the input in
/// the failure.
pub(crate) fn assert_readable(message: &str, what: &str) -> Result<(), TestCaseError> {
    prop_assert!(
        !message.trim().is_empty(),
        "{what} was rejected with an empty message"
    );
    Ok(())
}
