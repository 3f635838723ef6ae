//! OpenAPI schema plumbing for the Clusternet CRDs: helpers used by `#[schemars(...)]` attributes
//! on the API types, and [`crd_for`], which turns kube's derived CRDs into what controller-gen
//! produces upstream (`manifests/crds/*.yaml`).
//!
//! Why a final pass exists:
//!
//! - The Rust types mirror Go's zero-value semantics (`#[serde(default)]` on non-pointer fields), and
//!   schemars turns every serde default into a schema `default:`. The apiserver would then apply
//!   defaults Clusternet never declared (e.g. `healthz: false`). So every derived `default` is
//!   dropped, and only defaults declared with the marker [`CRD_DEFAULT`] (the `+kubebuilder:default`
//!   equivalents) are kept.
//! - schemars marks `Option<T>` as `nullable: true`. Upstream CRDs declare no `nullable`, which makes
//!   the apiserver prune explicit `null`s (Go writes `null` for unset non-omitempty pointers, e.g.
//!   `ManagedCluster.spec.clusterInitBaseName`). `nullable` (and `null` in `enum` lists) is removed.
//! - controller-gen lists `apiVersion`, `kind` and `metadata` at the root; kube's derive does not.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, CustomResourceValidation, JSONSchemaProps,
};
use kube::CustomResourceExt;
use kube::core::schema::{OptionalEnum, OptionalIntOrString, StructuralSchemaRewriter};
use schemars::generate::SchemaSettings;
use schemars::transform::AddNullable;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde_json::{Value, json};

/// Schema extension key that marks a CRD default (the `+kubebuilder:default` of upstream).
///
/// Use it as `#[schemars(extend("x-crd-default" = <json>))]` on a field; [`crd_for`] turns it into
/// `default:` and drops every other `default` schemars derived from serde defaults.
pub const CRD_DEFAULT: &str = "x-crd-default";

/// Schema of a Go `runtime.RawExtension` / free-form object.
pub(crate) fn preserve_unknown_fields(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

/// Schema of a Go `[]byte` (k8s-openapi's `ByteString` has no `JsonSchema` impl of its own).
pub(crate) fn go_bytes(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "string", "format": "byte" })
}

/// Schema of a Go `[][]byte`.
pub(crate) fn go_bytes_list(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "array", "items": { "type": "string", "format": "byte" } })
}

/// Schema of a Go `int` (controller-gen emits no `format` for it).
pub(crate) fn go_int(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "integer" })
}

/// Schema of a Go `uint64` (controller-gen emits `format: int64` and no minimum).
pub(crate) fn go_uint64(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "integer", "format": "int64" })
}

/// The CRD of `K`, in upstream's shape. Use this (or [`crate::apis::crds`]) instead of `K::crd()`.
///
/// kube's derive converts the schema into a typed `JSONSchemaProps`, which drops the
/// [`CRD_DEFAULT`] markers; so the schema is generated again here, with the same schemars settings
/// and kube transforms the derive uses, and finalized (see the module docs) before that conversion.
pub fn crd_for<K>() -> CustomResourceDefinition
where
    K: CustomResourceExt + JsonSchema,
{
    let mut crd = K::crd();
    // controller-gen spells out the list kind; the apiserver would default it to the same value.
    crd.spec.names.list_kind = Some(format!("{}List", crd.spec.names.kind));
    let generator = SchemaSettings::openapi3()
        .with(|s| {
            s.inline_subschemas = true;
            s.meta_schema = None;
        })
        .with_transform(AddNullable::default())
        .with_transform(StructuralSchemaRewriter)
        .with_transform(OptionalEnum)
        .with_transform(OptionalIntOrString)
        .into_generator();
    let mut value = generator.into_root_schema_for::<K>().to_value();
    finalize_root(&mut value);
    // Same contract as kube's derive, which panics identically: a schemars schema of an API type
    // that does not fit JSONSchemaProps is a programming error caught by every unit test.
    let schema: JSONSchemaProps =
        serde_json::from_value(value).expect("derived schema is a valid JSONSchemaProps");
    for version in &mut crd.spec.versions {
        version.schema = Some(CustomResourceValidation {
            open_api_v3_schema: Some(schema.clone()),
        });
    }
    crd
}

/// Normalizes the whole tree and adds the root properties controller-gen lists.
fn finalize_root(value: &mut Value) {
    normalize(value);
    if let Some(properties) = value
        .as_object_mut()
        .map(|root| root.entry("properties").or_insert_with(|| json!({})))
        .and_then(Value::as_object_mut)
    {
        properties.entry("apiVersion").or_insert_with(|| {
            json!({
                "description": "APIVersion defines the versioned schema of this representation of an object. Servers should convert recognized schemas to the latest internal value, and may reject unrecognized values. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources",
                "type": "string",
            })
        });
        properties.entry("kind").or_insert_with(|| {
            json!({
                "description": "Kind is a string value representing the REST resource this object represents. Servers may infer this from the endpoint the client submits requests to. Cannot be updated. In CamelCase. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds",
                "type": "string",
            })
        });
        properties
            .entry("metadata")
            .or_insert_with(|| json!({ "type": "object" }));
    }
}

/// Recursively applies the default/nullable rules of the module docs to one schema node.
fn normalize(value: &mut Value) {
    let Some(node) = value.as_object_mut() else {
        return;
    };
    node.remove("nullable");
    // schemars titles the root after the Rust type; controller-gen emits no titles.
    node.remove("title");
    node.remove("default");
    if let Some(default) = node.remove(CRD_DEFAULT) {
        node.insert("default".into(), default);
    }
    if let Some(Value::Array(values)) = node.get_mut("enum") {
        values.retain(|v| !v.is_null());
    }
    for key in ["properties", "patternProperties"] {
        if let Some(Value::Object(children)) = node.get_mut(key) {
            children.values_mut().for_each(normalize);
        }
    }
    for key in ["items", "additionalProperties", "not"] {
        if let Some(child) = node.get_mut(key) {
            normalize(child);
        }
    }
    for key in ["anyOf", "oneOf", "allOf"] {
        if let Some(Value::Array(children)) = node.get_mut(key) {
            children.iter_mut().for_each(normalize);
        }
    }
}

/// Lists the reasons a CRD schema is not structural, or would be rejected by the apiserver's
/// CRD validation, as far as can be checked without one. Empty means "looks fine".
///
/// Checked: every node has a `type` (unless `x-kubernetes-int-or-string` or
/// `x-kubernetes-preserve-unknown-fields` allows none); no `$ref`, `oneOf`, `allOf`, `not`,
/// `nullable` or `$schema`; `anyOf` only under `x-kubernetes-int-or-string`; `properties`
/// and `additionalProperties` are not combined; `required` names exist; `default`s only below the
/// root and never under `metadata`.
pub fn structural_violations(crd: &CustomResourceDefinition) -> Vec<String> {
    let mut out = Vec::new();
    for version in &crd.spec.versions {
        let schema = version
            .schema
            .as_ref()
            .and_then(|s| s.open_api_v3_schema.as_ref());
        let Some(schema) = schema else {
            out.push(format!(
                "{}: version {} has no schema",
                crd_name(crd),
                version.name
            ));
            continue;
        };
        match serde_json::to_value(schema) {
            Ok(value) => check_node(
                &value,
                &format!("{}/{}", crd_name(crd), version.name),
                true,
                &mut out,
            ),
            Err(e) => out.push(format!("{}: schema does not serialize: {e}", crd_name(crd))),
        }
    }
    out
}

fn crd_name(crd: &CustomResourceDefinition) -> &str {
    crd.metadata.name.as_deref().unwrap_or("<unnamed>")
}

fn check_node(value: &Value, path: &str, root: bool, out: &mut Vec<String>) {
    let Some(node) = value.as_object() else {
        out.push(format!("{path}: schema is not an object"));
        return;
    };
    let flag = |key: &str| node.get(key) == Some(&Value::Bool(true));
    let int_or_string = flag("x-kubernetes-int-or-string");
    let preserve = flag("x-kubernetes-preserve-unknown-fields");
    if !node.contains_key("type") && !int_or_string && !preserve {
        out.push(format!("{path}: no type"));
    }
    for forbidden in [
        "$ref",
        "oneOf",
        "allOf",
        "not",
        "nullable",
        "$schema",
        CRD_DEFAULT,
    ] {
        if node.contains_key(forbidden) {
            out.push(format!("{path}: has {forbidden}"));
        }
    }
    if node.contains_key("anyOf") && !int_or_string {
        out.push(format!("{path}: anyOf without x-kubernetes-int-or-string"));
    }
    if node.contains_key("default") && root {
        out.push(format!("{path}: default at the root"));
    }
    if let Some(Value::Array(values)) = node.get("enum")
        && values.iter().any(Value::is_null)
    {
        out.push(format!("{path}: null in enum"));
    }
    let properties = node.get("properties").and_then(Value::as_object);
    if properties.is_some() && node.contains_key("additionalProperties") {
        out.push(format!("{path}: both properties and additionalProperties"));
    }
    if let Some(Value::Array(required)) = node.get("required") {
        for name in required.iter().filter_map(Value::as_str) {
            if !properties.is_some_and(|p| p.contains_key(name)) {
                out.push(format!("{path}: required {name:?} is not a property"));
            }
        }
    }
    if let Some(properties) = properties {
        for (name, child) in properties {
            let child_path = format!("{path}.{name}");
            if root && name == "metadata" {
                check_metadata(child, &child_path, out);
            } else {
                check_node(child, &child_path, false, out);
            }
        }
    }
    if let Some(items) = node.get("items") {
        check_node(items, &format!("{path}[]"), false, out);
    }
    if let Some(additional) = node.get("additionalProperties").filter(|v| v.is_object()) {
        check_node(additional, &format!("{path}{{}}"), false, out);
    }
    if let Some(Value::Array(branches)) = node.get("anyOf") {
        for branch in branches {
            check_branch(branch, &format!("{path}|anyOf"), out);
        }
    }
}

/// `metadata` at the root may only restrict `name`/`generateName`; we use plain `type: object`.
fn check_metadata(value: &Value, path: &str, out: &mut Vec<String>) {
    let expected = json!({ "type": "object" });
    if value != &expected {
        out.push(format!(
            "{path}: root metadata must be exactly {{type: object}}"
        ));
    }
}

/// Branches of an int-or-string `anyOf` may only carry value validations.
fn check_branch(value: &Value, path: &str, out: &mut Vec<String>) {
    if let Some(node) = value.as_object() {
        for key in node.keys() {
            if !matches!(
                key.as_str(),
                "type" | "pattern" | "format" | "minimum" | "maximum"
            ) {
                out.push(format!("{path}: {key} not allowed inside anyOf"));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalize_keeps_only_marked_defaults_and_drops_nullable() {
        let mut v = json!({
            "type": "object",
            "properties": {
                "a": {"type": "boolean", "default": false},
                "b": {"type": "string", "default": "x", CRD_DEFAULT: "default"},
                "c": {"type": "string", "enum": ["A", null], "nullable": true},
                "d": {"type": "array", "items": {"type": "integer", "nullable": true, "default": 0}},
            }
        });
        normalize(&mut v);
        assert_eq!(
            v,
            json!({
                "type": "object",
                "properties": {
                    "a": {"type": "boolean"},
                    "b": {"type": "string", "default": "default"},
                    "c": {"type": "string", "enum": ["A"]},
                    "d": {"type": "array", "items": {"type": "integer"}},
                }
            })
        );
    }
}
