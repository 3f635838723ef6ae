//! Unit tests of `merge.rs`.

use super::*;
use crate::kube_ext::strategic_merge::fixtures::*;
use serde_json::json;

fn merge_item_schema() -> PatchSchema {
    PatchSchema::from_openapi_v3(&merge_item_doc(), "test", "v1", "MergeItem")
        .expect("MergeItem schema")
}

fn apply(original: Value, patch: Value) -> Result<Value> {
    apply_strategic_merge_patch(&original, &patch, Some(&merge_item_schema()))
}

#[track_caller]
fn check(description: &str, original: Value, patch: Value, expected: Value) {
    match apply(original, patch) {
        Ok(got) => assert_eq!(got, expected, "{description}"),
        Err(e) => panic!("{description}: unexpected error {e}"),
    }
}

#[track_caller]
fn check_err(description: &str, original: Value, patch: Value, needle: &str) {
    match apply(original, patch) {
        Ok(got) => panic!("{description}: expected an error, got {got}"),
        Err(e) => assert!(
            e.to_string().contains(needle),
            "{description}: error {e:?} does not mention {needle:?}"
        ),
    }
}

// Ported from upstream customStrategicMergePatchTestCaseData.
#[test]
fn upstream_custom_cases() {
    check(
        "unique scalars when merging lists",
        json!({"mergingIntList": [1, 2]}),
        json!({"mergingIntList": [2, 3]}),
        json!({"mergingIntList": [1, 2, 3]}),
    );
    check(
        "delete map from nested map",
        json!({"simpleMap": {"key1": 1, "key2": 1}}),
        json!({"simpleMap": {"$patch": "delete"}}),
        json!({"simpleMap": {}}),
    );
    check(
        "delete all items from merging list",
        json!({"mergingList": [{"name": 1}, {"name": 2}]}),
        json!({"mergingList": [{"$patch": "replace"}]}),
        json!({"mergingList": []}),
    );
    check(
        "merge empty merging lists",
        json!({"mergingList": []}),
        json!({"mergingList": []}),
        json!({"mergingList": []}),
    );
    check(
        "delete all keys from map",
        json!({"name": 1, "value": 1}),
        json!({"$patch": "replace"}),
        json!({}),
    );
    check(
        "add key and delete all keys from map",
        json!({"name": 1, "value": 1}),
        json!({"other": "a", "$patch": "replace"}),
        json!({"other": "a"}),
    );
    check(
        "delete all duplicate entries in a merging list",
        json!({"mergingList": [{"name": 1}, {"name": 1}, {"name": 2, "value": "a"}, {"name": 3}, {"name": 3}]}),
        json!({"mergingList": [{"name": 1, "$patch": "delete"}, {"name": 3, "$patch": "delete"}]}),
        json!({"mergingList": [{"name": 2, "value": "a"}]}),
    );
    check(
        "retainKeys map can add a field when no retainKeys directive present",
        json!({"retainKeysMap": {"name": "foo"}}),
        json!({"retainKeysMap": {"value": "bar"}}),
        json!({"retainKeysMap": {"name": "foo", "value": "bar"}}),
    );
    check(
        "retainKeys map can delete a field when no retainKeys directive present",
        json!({"retainKeysMap": {"name": "foo", "value": "a"}}),
        json!({"retainKeysMap": {"value": null}}),
        json!({"retainKeysMap": {"name": "foo"}}),
    );
    check(
        "retainKeys list can change a field when no retainKeys directive present",
        json!({"retainKeysMergingList": [{"name": "bar"}, {"name": "foo", "value": "a"}]}),
        json!({"retainKeysMergingList": [{"name": "foo", "value": "b"}]}),
        json!({"retainKeysMergingList": [{"name": "bar"}, {"name": "foo", "value": "b"}]}),
    );
    check(
        "preserve the order from the patch in a merging list",
        json!({"mergingList": [{"name": 1}, {"name": 2, "value": "b"}, {"name": 3}]}),
        json!({"mergingList": [{"name": 3, "value": "c"}, {"name": 1, "value": "a"}, {"name": 2, "other": "x"}]}),
        json!({"mergingList": [{"name": 3, "value": "c"}, {"name": 1, "value": "a"}, {"name": 2, "value": "b", "other": "x"}]}),
    );
    check(
        "preserve the order from the patch in a merging list 2",
        json!({"mergingList": [{"name": 1}, {"name": 2, "value": "b"}, {"name": 3}]}),
        json!({"mergingList": [{"name": 3, "value": "c"}, {"name": 1, "value": "a"}]}),
        json!({"mergingList": [{"name": 2, "value": "b"}, {"name": 3, "value": "c"}, {"name": 1, "value": "a"}]}),
    );
    check(
        "preserve the order from the patch in a merging int list",
        json!({"mergingIntList": [1, 2, 3]}),
        json!({"mergingIntList": [3, 1, 2]}),
        json!({"mergingIntList": [3, 1, 2]}),
    );
    check(
        "preserve the order from the patch in a merging int list 2",
        json!({"mergingIntList": [1, 2, 3]}),
        json!({"mergingIntList": [3, 1]}),
        json!({"mergingIntList": [2, 3, 1]}),
    );
}

// Ported from upstream customStrategicMergePatchRawTestCases.
#[test]
fn upstream_custom_raw_cases() {
    check(
        "$setElementOrder contains item that is not present in the list to be merged",
        json!({"mergingList": [{"name": 1}, {"name": 3}]}),
        json!({
            "$setElementOrder/mergingList": [{"name": 3}, {"name": 2}, {"name": 1}],
            "mergingList": [{"name": 3, "value": 3}, {"name": 1, "value": 1}]
        }),
        json!({"mergingList": [{"name": 3, "value": 3}, {"name": 1, "value": 1}]}),
    );
    check(
        "$setElementOrder contains item that is not present in the int list to be merged",
        json!({"mergingIntList": [1, 3]}),
        json!({"$setElementOrder/mergingIntList": [3, 2, 1]}),
        json!({"mergingIntList": [3, 1]}),
    );
    check_err(
        "should check if order in $setElementOrder and patch list match",
        json!({"mergingList": [{"name": 1}, {"name": 3}, {"name": 2}]}),
        json!({
            "$setElementOrder/mergingList": [{"name": 1}, {"name": 2}, {"name": 3}],
            "mergingList": [{"name": 3, "value": 3}, {"name": 1, "value": 1}]
        }),
        "doesn't match",
    );
    check_err(
        "should check if order in $setElementOrder and patch int list match",
        json!({"mergingIntList": [1, 3, 2]}),
        json!({"$setElementOrder/mergingIntList": [1, 2, 3], "mergingIntList": [3, 1]}),
        "doesn't match",
    );
    check_err(
        "missing merge key should error out",
        json!({"mergingList": [{"name": 1, "value": "a"}]}),
        json!({"mergingList": [{"value": "b"}]}),
        "does not contain declared merge key",
    );
    check(
        "$deleteFromPrimitiveList of nonexistent item should not add the item",
        json!({"mergingIntList": [1, 2]}),
        json!({"$deleteFromPrimitiveList/mergingIntList": [3]}),
        json!({"mergingIntList": [1, 2]}),
    );
    check(
        "$deleteFromPrimitiveList on nonexistent primitive list should not add the list",
        json!({"foo": ["bar"]}),
        json!({"$deleteFromPrimitiveList/mergingIntList": [3]}),
        json!({"foo": ["bar"]}),
    );
    check(
        "$deleteFromPrimitiveList should delete item from a list with merge patch strategy",
        json!({"mergingIntList": [1, 2, 3]}),
        json!({"$deleteFromPrimitiveList/mergingIntList": [2]}),
        json!({"mergingIntList": [1, 3]}),
    );
    check(
        "$deleteFromPrimitiveList should delete item from a list without merge patch strategy",
        json!({"nonMergingIntList": [1, 2, 3]}),
        json!({"$deleteFromPrimitiveList/nonMergingIntList": [2]}),
        json!({"nonMergingIntList": [1, 3]}),
    );
}

// Three-way patches applied to "current", from upstream createStrategicMergePatchTestCaseData
// and strategicMergePatchRawTestCases.
#[test]
fn upstream_three_way_results() {
    check(
        "add field and delete field from map",
        json!({"name": 1, "other": "a"}),
        json!({"name": null, "value": 1}),
        json!({"value": 1, "other": "a"}),
    );
    check(
        "delete field from nested map",
        json!({"simpleMap": {"key1": 1, "key2": 1, "other": "a"}}),
        json!({"simpleMap": {"key2": null}}),
        json!({"simpleMap": {"key1": 1, "other": "a"}}),
    );
    check(
        "replace list of scalars with conflict",
        json!({"nonMergingIntList": [1, 4]}),
        json!({"nonMergingIntList": [2, 3]}),
        json!({"nonMergingIntList": [2, 3]}),
    );
    check(
        "delete all maps from merging list with conflict",
        json!({"mergingList": [{"name": 1, "other": "a"}, {"name": 2, "other": "b"}]}),
        json!({"mergingList": [{"name": 1, "$patch": "delete"}, {"name": 2, "$patch": "delete"}]}),
        json!({"mergingList": []}),
    );
    check(
        "delete all maps from empty merging list",
        json!({"mergingList": []}),
        json!({"mergingList": [{"name": 1, "$patch": "delete"}, {"name": 2, "$patch": "delete"}]}),
        json!({"mergingList": []}),
    );
    check(
        "defined null values should not be propagated into the result",
        json!({"name": "a", "other": "a"}),
        json!({"name": 1, "value": 1, "other": null}),
        json!({"name": 1, "value": 1}),
    );
    check(
        "nested patch merge with empty list",
        json!({"name": "hi", "mergingList": [{"name": "hello2"}]}),
        json!({
            "$setElementOrder/mergingList": [{"name": "hello"}, {"name": "doesntexist"}],
            "mergingList": [{"name": "hello"}, {"$patch": "delete", "name": "doesntexist"}]
        }),
        json!({"name": "hi", "mergingList": [{"name": "hello"}, {"name": "hello2"}]}),
    );
    check(
        "nested patch merge with empty list (two-way, list absent from original)",
        json!({"name": "hi"}),
        json!({"mergingList": [{"name": "hello"}, {"$patch": "delete", "name": "doesntexist"}]}),
        json!({"name": "hi", "mergingList": [{"name": "hello"}]}),
    );
    check(
        "delete items in lists of scalars",
        json!({"mergingIntList": [1, 2, 3, 4]}),
        json!({"$setElementOrder/mergingIntList": [1, 2], "$deleteFromPrimitiveList/mergingIntList": [3]}),
        json!({"mergingIntList": [1, 2, 4]}),
    );
    check(
        "delete all duplicate items in lists of scalars",
        json!({"mergingIntList": [1, 2, 3, 3, 4]}),
        json!({"$setElementOrder/mergingIntList": [1, 2], "$deleteFromPrimitiveList/mergingIntList": [3]}),
        json!({"mergingIntList": [1, 2, 4]}),
    );
    check(
        "add and delete items in lists of scalars",
        json!({"mergingIntList": [1, 2, 3]}),
        json!({
            "$setElementOrder/mergingIntList": [1, 2, 4],
            "$deleteFromPrimitiveList/mergingIntList": [3],
            "mergingIntList": [4]
        }),
        json!({"mergingIntList": [1, 2, 4]}),
    );
    check(
        "merge lists of maps",
        json!({"mergingList": [{"name": 1, "other": "a"}, {"name": 2, "value": 2, "other": "b"}]}),
        json!({
            "$setElementOrder/mergingList": [{"name": 4}, {"name": 1}, {"name": 2}, {"name": 3}],
            "mergingList": [{"name": 4, "value": 4}, {"name": 3, "value": 3}]
        }),
        json!({"mergingList": [
            {"name": 4, "value": 4},
            {"name": 1, "other": "a"},
            {"name": 2, "value": 2, "other": "b"},
            {"name": 3, "value": 3}
        ]}),
    );
    check(
        "merge lists of maps with conflict",
        json!({"mergingList": [{"name": 1, "other": "a"}, {"name": 2, "value": 3, "other": "b"}]}),
        json!({
            "$setElementOrder/mergingList": [{"name": 1}, {"name": 2}, {"name": 3}],
            "mergingList": [{"name": 2, "value": 2}, {"name": 3, "value": 3}]
        }),
        json!({"mergingList": [
            {"name": 1, "other": "a"},
            {"name": 2, "value": 2, "other": "b"},
            {"name": 3, "value": 3}
        ]}),
    );
}

#[test]
fn set_element_order_keeps_server_only_items_in_live_position() {
    check(
        "server-only items interleave by live order",
        json!({"mergingList": [{"name": "a"}, {"name": "x"}, {"name": "b"}, {"name": "y"}]}),
        json!({
            "$setElementOrder/mergingList": [{"name": "b"}, {"name": "a"}],
            "mergingList": [{"name": "b", "value": 1}]
        }),
        json!({"mergingList": [
            {"name": "x"}, {"name": "b", "value": 1}, {"name": "a"}, {"name": "y"}
        ]}),
    );
    check(
        "reorder only",
        json!({"mergingIntList": [1, 2, 3]}),
        json!({"$setElementOrder/mergingIntList": [3, 2, 1]}),
        json!({"mergingIntList": [3, 2, 1]}),
    );
    check(
        "nested lists inside merged items",
        json!({"mergingList": [{"name": 1, "mergingList": [{"name": "a"}, {"name": "b"}]}]}),
        json!({"mergingList": [{
            "name": 1,
            "$setElementOrder/mergingList": [{"name": "b"}, {"name": "c"}, {"name": "a"}],
            "mergingList": [{"name": "c", "value": "new"}]
        }]}),
        json!({"mergingList": [{"name": 1, "mergingList": [
            {"name": "b"}, {"name": "c", "value": "new"}, {"name": "a"}
        ]}]}),
    );
}

#[test]
fn retain_keys_directive() {
    check(
        "retainKeys drops unlisted keys",
        json!({"retainKeysMap": {"name": "foo", "value": "a", "other": "b"}}),
        json!({"retainKeysMap": {"$retainKeys": ["name", "simpleMap"], "simpleMap": {"k": "v"}}}),
        json!({"retainKeysMap": {"name": "foo", "simpleMap": {"k": "v"}}}),
    );
    check(
        "retainKeys inside merging list items",
        json!({"retainKeysMergingList": [{"name": "foo", "value": "a", "other": "b"}]}),
        json!({"retainKeysMergingList": [{"name": "foo", "$retainKeys": ["name", "other"], "other": "c"}]}),
        json!({"retainKeysMergingList": [{"name": "foo", "other": "c"}]}),
    );
    check_err(
        "patch sets a key missing from retainKeys",
        json!({"retainKeysMap": {"name": "foo"}}),
        json!({"retainKeysMap": {"$retainKeys": ["name"], "value": "x"}}),
        "retainKeys",
    );
    check_err(
        "retainKeys not a list",
        json!({"retainKeysMap": {"name": "foo"}}),
        json!({"retainKeysMap": {"$retainKeys": "name"}}),
        "retainKeys",
    );
}

#[test]
fn patch_directives_on_maps_and_lists() {
    check(
        "$patch: replace on a nested map",
        json!({"simpleMap": {"a": "1", "b": "2"}}),
        json!({"simpleMap": {"$patch": "replace", "c": "3"}}),
        json!({"simpleMap": {"c": "3"}}),
    );
    check(
        "$patch: replace inside a merging list keeps only the patch items",
        json!({"mergingList": [{"name": 1, "value": "a"}, {"name": 2}]}),
        json!({"mergingList": [{"name": 3, "value": "c"}, {"$patch": "replace"}]}),
        json!({"mergingList": [{"name": 3, "value": "c"}]}),
    );
    check(
        "replace strategy from the schema replaces maps",
        json!({"replacingItem": {"a": 1, "b": 2}}),
        json!({"replacingItem": {"c": 3}}),
        json!({"replacingItem": {"c": 3}}),
    );
    check(
        "$patch: delete on a map that is not in the original leaves it out",
        json!({"name": 1}),
        json!({"simpleMap": {"$patch": "delete"}}),
        json!({"name": 1}),
    );
    check(
        "merge key pointer field",
        json!({"mergeItemPtr": [{"name": 1, "value": "a"}]}),
        json!({"mergeItemPtr": [{"name": 2}]}),
        json!({"mergeItemPtr": [{"name": 2}, {"name": 1, "value": "a"}]}),
    );
    check(
        "non-merging list of maps is replaced",
        json!({"nonMergingList": [{"name": 1}, {"name": 2}]}),
        json!({"nonMergingList": [{"name": 3}]}),
        json!({"nonMergingList": [{"name": 3}]}),
    );
    check(
        "type change replaces",
        json!({"simpleMap": {"a": "1"}}),
        json!({"simpleMap": "now a string"}),
        json!({"simpleMap": "now a string"}),
    );
    check(
        "numbers compare as float64, like upstream",
        json!({"mergingList": [{"name": 1, "value": "a"}]}),
        json!({"mergingList": [{"name": 1.0, "other": "b"}]}),
        json!({"mergingList": [{"name": 1.0, "value": "a", "other": "b"}]}),
    );
    check_err(
        "$patch: merge in a list is refused",
        json!({"mergingList": [{"name": 1}]}),
        json!({"mergingList": [{"$patch": "merge"}]}),
        "merging lists cannot yet be specified",
    );
    check_err(
        "unknown $patch on a map",
        json!({"simpleMap": {"a": "1"}}),
        json!({"simpleMap": {"$patch": "frobnicate"}}),
        "unknown patch type",
    );
    check_err(
        "delete directive without merge key",
        json!({"mergingList": [{"name": 1}]}),
        json!({"mergingList": [{"$patch": "delete"}]}),
        "does not contain declared merge key: name",
    );
    check_err(
        "$setElementOrder not a list",
        json!({"mergingList": [{"name": 1}]}),
        json!({"$setElementOrder/mergingList": {"name": 1}}),
        "setElementOrder",
    );
    check_err(
        "mixed element types",
        json!({"mergingIntList": [1, 2]}),
        json!({"mergingIntList": ["3"]}),
        "not identical",
    );
    check_err(
        "lists of lists",
        json!({"mergingIntList": [[1]]}),
        json!({"mergingIntList": [[2]]}),
        "lists of lists",
    );
    check_err(
        "malformed $deleteFromPrimitiveList key",
        json!({"mergingIntList": [1]}),
        json!({"$deleteFromPrimitiveListmergingIntList": [1]}),
        "primitive list",
    );
}

#[test]
fn patch_and_original_must_be_objects() {
    let err = apply_strategic_merge_patch(&json!({}), &json!([1]), None).unwrap_err();
    assert_eq!(
        err,
        StrategicMergeError::NotAnObject {
            what: "patch",
            found: "list"
        }
    );
    assert!(apply_strategic_merge_patch(&json!("x"), &json!({}), None).is_err());
    assert_eq!(
        apply_strategic_merge_patch(&Value::Null, &json!({"a": 1}), None).unwrap(),
        json!({"a": 1})
    );
}

#[test]
fn directives_never_reach_the_result() {
    let got = apply(
        json!({"name": 1}),
        json!({
            "mergingList": [{
                "name": "new",
                "$setElementOrder/mergingList": [{"name": "x"}],
                "mergingList": [{"name": "x", "value": null}],
                "$retainKeys": ["name"],
                "$deleteFromPrimitiveList/mergingIntList": [1],
                "simpleMap": {"$patch": "replace", "a": "1"}
            }],
            "$setElementOrder/nonMergingList": [{"name": "y"}],
            "nonMergingList": [{"name": "y", "$retainKeys": ["name"]}]
        }),
    )
    .unwrap();
    assert_eq!(
        got,
        json!({
            "name": 1,
            "mergingList": [{"name": "new", "mergingList": [{"name": "x"}]}],
            "nonMergingList": [{"name": "y"}]
        })
    );
    // A data key that merely starts with `$` (JSONSchemaProps' `$ref`) is not a directive.
    let got = apply_strategic_merge_patch(
        &json!({"schema": {"type": "object"}}),
        &json!({"schema": {"$ref": "#/x"}}),
        None,
    )
    .unwrap();
    assert_eq!(got, json!({"schema": {"type": "object", "$ref": "#/x"}}));
}

#[test]
fn without_schema_lists_are_replaced_unless_ordered() {
    let original =
        json!({"spec": {"items": [{"name": "a", "v": 1}, {"name": "b"}], "tags": ["x", "y"]}});
    let got = apply_strategic_merge_patch(
        &original,
        &json!({"spec": {"items": [{"name": "a", "v": 2}], "tags": ["z"]}}),
        None,
    )
    .unwrap();
    assert_eq!(
        got,
        json!({"spec": {"items": [{"name": "a", "v": 2}], "tags": ["z"]}})
    );

    let got = apply_strategic_merge_patch(
        &original,
        &json!({"spec": {
            "$setElementOrder/items": [{"name": "c"}, {"name": "a"}],
            "items": [{"name": "c"}, {"name": "b", "$patch": "delete"}],
            "$setElementOrder/tags": ["y", "z"],
            "$deleteFromPrimitiveList/tags": ["x"],
            "tags": ["z"]
        }}),
        None,
    )
    .unwrap();
    assert_eq!(
        got,
        json!({"spec": {"items": [{"name": "c"}, {"name": "a", "v": 1}], "tags": ["y", "z"]}})
    );
}

#[test]
fn without_schema_directive_items_reveal_the_merge_key() {
    let original = json!({"items": [{"name": "a", "v": 1}, {"name": "b"}]});
    let got = apply_strategic_merge_patch(
        &original,
        &json!({"$setElementOrder/items": [], "items": [
            {"$patch": "delete", "name": "a"}, {"$patch": "delete", "name": "b"}
        ]}),
        None,
    )
    .unwrap();
    assert_eq!(got, json!({"items": []}));

    let got = apply_strategic_merge_patch(
        &original,
        &json!({"items": [{"$patch": "delete", "name": "a"}, {"name": "c"}]}),
        None,
    )
    .unwrap();
    assert_eq!(got, json!({"items": [{"name": "c"}, {"name": "b"}]}));

    // Entries that do not agree on one key reveal nothing: plain replacement.
    let got = apply_strategic_merge_patch(
        &original,
        &json!({"items": [{"$patch": "delete", "name": "a", "id": 1}, {"name": "c"}]}),
        None,
    )
    .unwrap();
    assert_eq!(got, json!({"items": [{"name": "c"}]}));
}

#[test]
fn json_merge_patch() {
    let got = apply_json_merge_patch(
        &json!({"a": 1, "b": {"c": 2, "d": 3}, "l": [1, 2]}),
        &json!({"a": null, "b": {"c": 4}, "l": [3]}),
    );
    assert_eq!(got, json!({"b": {"c": 4, "d": 3}, "l": [3]}));
}

/// `kubectl apply` after the user bumped replicas, changed the nginx image, removed the
/// sidecar and added env B: the three-way patch kubectl sends.
fn kubectl_deployment_case() -> (Value, Value, Value) {
    let original = json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": "web",
            "namespace": "default",
            "labels": {"app": "web"},
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{\"old\":true}"},
            "finalizers": ["example.com/keep"]
        },
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [
                    {
                        "name": "nginx",
                        "image": "nginx:1.25",
                        "ports": [{"containerPort": 80, "protocol": "TCP"}],
                        "env": [{"name": "A", "value": "1"}]
                    },
                    {"name": "sidecar", "image": "busybox:1.36", "args": ["sleep", "infinity"]}
                ]}
            }
        }
    });
    let patch = json!({
        "metadata": {
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{\"new\":true}"}
        },
        "spec": {
            "replicas": 3,
            "template": {"spec": {
                "$setElementOrder/containers": [{"name": "nginx"}],
                "containers": [
                    {
                        "$setElementOrder/env": [{"name": "A"}, {"name": "B"}],
                        "env": [{"name": "B", "value": "2"}],
                        "image": "nginx:1.27",
                        "name": "nginx"
                    },
                    {"$patch": "delete", "name": "sidecar"}
                ]
            }}
        }
    });
    let expected = json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": "web",
            "namespace": "default",
            "labels": {"app": "web"},
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{\"new\":true}"},
            "finalizers": ["example.com/keep"]
        },
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "web"}},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{
                    "name": "nginx",
                    "image": "nginx:1.27",
                    "ports": [{"containerPort": 80, "protocol": "TCP"}],
                    "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]
                }]}
            }
        }
    });
    (original, patch, expected)
}

#[test]
fn kubectl_apply_deployment_with_schema() {
    let schema = PatchSchema::from_openapi_v3(&apps_v1_doc(), "apps", "v1", "Deployment");
    assert!(schema.is_some());
    let (original, patch, expected) = kubectl_deployment_case();
    let got = apply_strategic_merge_patch(&original, &patch, schema.as_ref()).unwrap();
    assert_eq!(got, expected);
}

#[test]
fn kubectl_apply_deployment_without_schema() {
    let (original, patch, expected) = kubectl_deployment_case();
    let got = apply_strategic_merge_patch(&original, &patch, None).unwrap();
    assert_eq!(got, expected);
}

#[test]
fn deployment_schema_details() {
    let schema = PatchSchema::from_openapi_v3(&apps_v1_doc(), "apps", "v1", "Deployment");
    let original = json!({"metadata": {"finalizers": ["a"]}, "spec": {
        "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}},
        "template": {"spec": {
            "tolerations": [{"key": "a"}, {"key": "b"}],
            "volumes": [{"name": "cfg", "configMap": {"name": "c1"}}],
            "containers": [{"name": "app", "ports": [{"containerPort": 80}, {"containerPort": 443}]}]
        }}
    }});
    let patch = json!({"metadata": {"finalizers": ["b"]}, "spec": {
        "strategy": {"$retainKeys": ["type"], "type": "Recreate"},
        "template": {"spec": {
            "tolerations": [{"key": "c"}],
            "volumes": [{"name": "cfg", "$retainKeys": ["emptyDir", "name"], "emptyDir": {}}],
            "containers": [{"name": "app", "ports": [{"containerPort": 443, "protocol": "TCP"}]}]
        }}
    }});
    let got = apply_strategic_merge_patch(&original, &patch, schema.as_ref()).unwrap();
    assert_eq!(
        got,
        // Without `$setElementOrder`, upstream puts items the live list lacks first.
        json!({"metadata": {"finalizers": ["b", "a"]}, "spec": {
            "strategy": {"type": "Recreate"},
            "template": {"spec": {
                "tolerations": [{"key": "c"}],
                "volumes": [{"name": "cfg", "emptyDir": {}}],
                "containers": [{"name": "app", "ports": [
                    {"containerPort": 80}, {"containerPort": 443, "protocol": "TCP"}
                ]}]
            }}
        }})
    );
}

#[test]
fn errors_name_the_field() {
    let schema = PatchSchema::from_openapi_v3(&apps_v1_doc(), "apps", "v1", "Deployment");
    let err = apply_strategic_merge_patch(
            &json!({"spec": {"template": {"spec": {"containers": [{"name": "a", "env": []}]}}}}),
            &json!({"spec": {"template": {"spec": {"containers": [{"name": "a", "env": [{"value": "x"}]}]}}}}),
            schema.as_ref(),
        )
        .unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("$.spec.template.spec.containers[name=\"a\"].env"),
        "{msg}"
    );
    assert!(
        msg.contains("does not contain declared merge key: name"),
        "{msg}"
    );
}

#[test]
fn too_deep_patches_are_refused() {
    let mut original = json!({});
    let mut patch = json!({"leaf": 1});
    for _ in 0..(MAX_DEPTH + 5) {
        original = json!({ "a": original });
        patch = json!({ "a": patch });
    }
    let err = apply_strategic_merge_patch(&original, &patch, None).unwrap_err();
    assert!(matches!(err, StrategicMergeError::TooDeep { .. }));
}

/// Loads a real document (e.g. `kubectl get --raw /openapi/v3/apis/apps/v1 > apps.json`)
/// when `SMP_OPENAPI_FIXTURE` points at one.
#[test]
fn real_openapi_fixture() {
    let Ok(path) = std::env::var("SMP_OPENAPI_FIXTURE") else {
        return;
    };
    let text = std::fs::read_to_string(&path).expect("read SMP_OPENAPI_FIXTURE");
    let doc: Value = serde_json::from_str(&text).expect("parse SMP_OPENAPI_FIXTURE");
    let schema = PatchSchema::from_openapi_v3(&doc, "apps", "v1", "Deployment")
        .expect("fixture must be the apps/v1 document");
    let (original, patch, expected) = kubectl_deployment_case();
    let got = apply_strategic_merge_patch(&original, &patch, Some(&schema)).unwrap();
    assert_eq!(got, expected);
}
