//! Pure data model of the hub's shadow API (`shadow/v1alpha1`, hub spec §3).
//!
//! This module owns every decision the shadow HTTP handlers make that does not need I/O:
//!
//! * Manifest naming and labels (§3.2) and the full `Manifest` JSON stored in the reserved namespace;
//! * create-time preparation and trimming of the dry-run result (§3.3), a port of upstream
//!   `pkg/hub/registry/shadow/template/{rest.go,trimmer.go}` (`dryRunCreate`, `trimResult`,
//!   `trimCommonMetadata`, `trimBatchJob`, `trimCoreService`, `trimStatus`);
//! * the Manifest -> object transform (§3.4, upstream `transformer.go` `transformManifest`), list
//!   and watch shaping (upstream `REST.List`, `convertListOptionsToLabels`, `wrapper.go`);
//! * update label merging and the `/scale` subresource (§3.5, upstream `REST.Update`, `scale.go`);
//! * which parent resources are served and how they appear in discovery (§3.1, §3.6): a port of
//!   upstream `pkg/hub/apiserver/shadow/{apiserver.go,utils.go,priority.go}`
//!   (`InstallShadowAPIGroups`, `normalizeAPIGroupResources`, `canBeAddedToStorage`) and of the
//!   CRD handler's `addStorage` / `versionDiscoveryHandler.updateCRD`, plus apimachinery's
//!   `version.CompareKubeAwareVersionStrings` and apiserver's `discovery.StorageVersionHash`.
//!
//! User objects are handled as [`serde_json::Value`] throughout and never pass through typed
//! structs, so fields unknown to this crate survive the round trip. Nothing here talks to the
//! network or to other clusternet modules; the caller does the I/O and feeds the results in.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;
use serde_json::{Map, Value, json};

/// `apiVersion` of stored Manifests.
pub const MANIFEST_API_VERSION: &str = "apps.clusternet.io/v1alpha1";
/// `kind` of stored Manifests.
pub const MANIFEST_KIND: &str = "Manifest";
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

/// Label: API group of the original object (`""` for core).
pub const CONFIG_GROUP_LABEL: &str = "apps.clusternet.io/config.group";
/// Label: API version of the original object.
pub const CONFIG_VERSION_LABEL: &str = "apps.clusternet.io/config.version";
/// Label: kind of the original object.
pub const CONFIG_KIND_LABEL: &str = "apps.clusternet.io/config.kind";
/// Label: name of the original object.
pub const CONFIG_NAME_LABEL: &str = "apps.clusternet.io/config.name";
/// Label: namespace of the original object (`""` for cluster-scoped objects).
pub const CONFIG_NAMESPACE_LABEL: &str = "apps.clusternet.io/config.namespace";
/// Label the hub puts on every submitted object.
pub const CREATED_BY_LABEL: &str = "clusternet.io/created-by";
/// Value of [`CREATED_BY_LABEL`].
pub const CLUSTERNET_HUB_NAME: &str = "clusternet-hub";
/// Manifest annotation explaining why a feed is protected from deletion; surfaced on reads.
pub const FEED_PROTECTION_ANNOTATION: &str = "apps.clusternet.io/feed-protection";
/// Object annotation that skips the dry run when set to `"true"`.
pub const SKIP_VALIDATING_ANNOTATION: &str = "apps.clusternet.io/skip-validating";
/// Annotation carried by BOOKMARK objects.
pub const INITIAL_EVENTS_END_ANNOTATION: &str = "k8s.io/initial-events-end";

/// Group suffix of clusternet's own APIs, never mirrored.
pub const CLUSTERNET_GROUP_SUFFIX: &str = ".clusternet.io";
/// Kind whose `/scale` update must not rewrite the `config.kind` label.
pub const SCALE_KIND: &str = "Scale";

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

fn string_list(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
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

// ---------------------------------------------------------------------------------------------
// §3.2 naming, labels and the Manifest object
// ---------------------------------------------------------------------------------------------

/// Strips a subresource (`deployments/scale` -> `deployments`), as upstream `getResourceName`.
pub fn base_resource(plural: &str) -> &str {
    plural.split('/').next().unwrap_or(plural)
}

/// Manifest name `R.N.X` (namespaced, `namespace` is `Some`) or `R.X` (cluster-scoped).
///
/// Dots are safe separators because neither resource plurals nor namespaces may contain one.
pub fn manifest_name(plural: &str, namespace: Option<&str>, name: &str) -> String {
    let resource = base_resource(plural);
    match namespace {
        Some(ns) => format!("{resource}.{ns}.{name}"),
        None => format!("{resource}.{name}"),
    }
}

/// Deprecated Manifest name `R-N-X` / `R-X`. Hyphens can collide (`foos` `bar`/`lovely-panda`
/// vs `bar-lovely`/`panda`), so it is only used when a Manifest with this name already exists.
pub fn legacy_manifest_name(plural: &str, namespace: Option<&str>, name: &str) -> String {
    let resource = base_resource(plural);
    match namespace {
        Some(ns) => format!("{resource}-{ns}-{name}"),
        None => format!("{resource}-{name}"),
    }
}

/// Picks the Manifest name the way upstream `getNormalizedManifestName` does: the legacy name
/// when `legacy_exists(legacy_name)` says such a Manifest exists, otherwise the dotted name.
pub fn normalized_manifest_name(
    plural: &str,
    namespace: Option<&str>,
    name: &str,
    legacy_exists: impl FnOnce(&str) -> bool,
) -> String {
    let legacy = legacy_manifest_name(plural, namespace, name);
    if legacy_exists(&legacy) {
        legacy
    } else {
        manifest_name(plural, namespace, name)
    }
}

fn set_config_labels(
    labels: &mut BTreeMap<String, String>,
    group: &str,
    version: &str,
    kind: Option<&str>,
    name: &str,
    namespace: &str,
) {
    labels.insert(CONFIG_GROUP_LABEL.into(), group.into());
    labels.insert(CONFIG_VERSION_LABEL.into(), version.into());
    if let Some(kind) = kind {
        labels.insert(CONFIG_KIND_LABEL.into(), kind.into());
    }
    labels.insert(CONFIG_NAME_LABEL.into(), name.into());
    labels.insert(CONFIG_NAMESPACE_LABEL.into(), namespace.into());
}

/// Labels of a new Manifest: the object's labels (reused so client label selectors keep
/// working) plus the five `config.*` labels. `namespace` is `""` for cluster-scoped objects.
pub fn manifest_labels(
    object_labels: &BTreeMap<String, String>,
    group: &str,
    version: &str,
    kind: &str,
    name: &str,
    namespace: &str,
) -> BTreeMap<String, String> {
    let mut labels = object_labels.clone();
    set_config_labels(&mut labels, group, version, Some(kind), name, namespace);
    labels
}

/// Labels of an updated Manifest (§3.5): object labels are added to the existing ones (a label
/// removed from the object stays on the Manifest), `config.*` labels are refreshed, except
/// `config.kind` when the update came through `/scale` (`kind == "Scale"`), which would
/// otherwise relabel a Deployment Manifest as a Scale.
pub fn merge_labels_for_update(
    existing_manifest_labels: &BTreeMap<String, String>,
    object_labels: &BTreeMap<String, String>,
    group: &str,
    version: &str,
    kind: &str,
    name: &str,
    namespace: &str,
) -> BTreeMap<String, String> {
    let mut labels = existing_manifest_labels.clone();
    labels.extend(object_labels.iter().map(|(k, v)| (k.clone(), v.clone())));
    let kind = (kind != SCALE_KIND).then_some(kind);
    set_config_labels(&mut labels, group, version, kind, name, namespace);
    labels
}

/// A complete new `Manifest` (apps.clusternet.io/v1alpha1) holding `template`.
pub fn build_manifest(
    reserved_namespace: &str,
    manifest_name: &str,
    labels: &BTreeMap<String, String>,
    template: Value,
) -> Value {
    json!({
        "apiVersion": MANIFEST_API_VERSION,
        "kind": MANIFEST_KIND,
        "metadata": {
            "name": manifest_name,
            "namespace": reserved_namespace,
            "labels": string_map_value(labels),
        },
        "template": template,
    })
}

/// The existing Manifest with its labels and `template` replaced, everything else (resource
/// version for optimistic concurrency, finalizers, annotations) kept, ready for an update.
pub fn updated_manifest(
    existing_manifest: &Value,
    labels: &BTreeMap<String, String>,
    template: Value,
) -> Result<Value, ModelError> {
    let mut manifest = existing_manifest.clone();
    set_path(
        &mut manifest,
        &["metadata", "labels"],
        string_map_value(labels),
    )
    .map_err(ModelError::InvalidManifest)?;
    set_path(&mut manifest, &["template"], template).map_err(ModelError::InvalidManifest)?;
    Ok(manifest)
}

// ---------------------------------------------------------------------------------------------
// §3.3 create preparation
// ---------------------------------------------------------------------------------------------

/// Adds `clusternet.io/created-by: clusternet-hub` to the object's labels.
///
/// Like upstream (`GetLabels` then `SetLabels`), unreadable labels (not a string map) are
/// replaced by a map holding only this label.
pub fn mark_created_by_hub(obj: &mut Value) -> Result<(), ModelError> {
    let mut labels = string_map(get_path(obj, &["metadata", "labels"])).unwrap_or_default();
    labels.insert(CREATED_BY_LABEL.into(), CLUSTERNET_HUB_NAME.into());
    set_path(obj, &["metadata", "labels"], string_map_value(&labels))
        .map_err(ModelError::InvalidObject)
}

/// True when the object asks to skip the dry run (`apps.clusternet.io/skip-validating: "true"`).
pub fn skips_validation(obj: &Value) -> bool {
    get_str(
        obj,
        &["metadata", "annotations", SKIP_VALIDATING_ANNOTATION],
    ) == Some("true")
}

/// Gives an object without `metadata.uid` the UID produced by `fresh_uid` (skip-validating path:
/// children use the UID to recognise their own objects, upstream issue #468).
pub fn ensure_uid(obj: &mut Value, fresh_uid: impl FnOnce() -> String) -> Result<(), ModelError> {
    if get_str(obj, &["metadata", "uid"]).is_some_and(|u| !u.is_empty()) {
        return Ok(());
    }
    set_path(obj, &["metadata", "uid"], Value::String(fresh_uid()))
        .map_err(ModelError::InvalidObject)
}

/// Whether the namespace must be validated before a create, and which field an error names:
/// `metadata.name` for Namespace objects (their own name), `metadata.namespace` for namespaced
/// resources, nothing for other cluster-scoped resources.
pub fn namespace_validation_field(kind: &str, namespaced: bool) -> Option<&'static str> {
    if kind == "Namespace" {
        Some("metadata.name")
    } else if namespaced {
        Some("metadata.namespace")
    } else {
        None
    }
}

/// `apimachinery` `ValidateNamespaceName` (an RFC 1123 label); returns the error strings.
pub fn validate_namespace_name(name: &str) -> Vec<String> {
    const LABEL_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
    let mut errs = Vec::new();
    if name.len() > 63 {
        errs.push("must be no more than 63 characters".to_string());
    }
    let is_alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    let label_ok = |s: &str| {
        !s.is_empty()
            && s.starts_with(is_alnum)
            && s.ends_with(is_alnum)
            && s.chars().all(|c| is_alnum(c) || c == '-')
    };
    if !label_ok(name) {
        if name.split('.').all(label_ok) {
            errs.push("must not contain dots".to_string());
        } else {
            errs.push(format!(
                "a lowercase RFC 1123 label must consist of lower case alphanumeric characters \
                 or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  \
                 or '123-abc', regex used for validation is '{LABEL_FMT}')"
            ));
        }
    }
    errs
}

/// Namespace of the dry-run request: Namespaces are created cluster-level, other namespaced
/// resources in the reserved namespace (so the user's namespace need not exist in the parent),
/// cluster-scoped ones without namespace. When `Some`, the object's own `metadata.namespace`
/// must be swapped for it during the dry run and restored afterwards.
pub fn dry_run_namespace<'a>(
    kind: &str,
    namespaced: bool,
    reserved_namespace: &'a str,
) -> Option<&'a str> {
    (kind != "Namespace" && namespaced).then_some(reserved_namespace)
}

/// Whether an AlreadyExists from the dry run means "store the live object instead" (CRDs).
pub fn is_crd_kind(group: &str, kind: &str) -> bool {
    group == "apiextensions.k8s.io" && kind == "CustomResourceDefinition"
}

// ---------------------------------------------------------------------------------------------
// §3.3 step 5: trimming
// ---------------------------------------------------------------------------------------------

/// Removes what the parent apiserver generated during the dry run and must not be replayed into
/// child clusters. Port of upstream `trimResult`; see the module docs for the upstream names.
///
/// `metadata.uid` is kept: it is used to check ownership when patching, and is cleared only when
/// deploying to children.
pub fn trim_template(obj: &mut Value, group: &str, kind: &str) {
    for field in [
        "creationTimestamp",
        "managedFields",
        "resourceVersion",
        "selfLink",
    ] {
        remove_path(obj, &["metadata", field]);
    }
    match (group, kind) {
        ("batch", "Job") => trim_batch_job(obj),
        ("", "Service") => trim_core_service(obj),
        _ => {}
    }
    remove_path(obj, &["status"]);
}

/// A dry-run Job carries a selector and pod labels bound to the dry-run UID; the child's
/// apiserver rejects them (`selector` not auto-generated, upstream issue #168) because its Job
/// gets another UID. Kubernetes >= 1.27 stamps the `batch.kubernetes.io/` variants as well and
/// validates them the same way, so both spellings go. `job-name` stays (same name in children).
fn trim_batch_job(obj: &mut Value) {
    for key in ["controller-uid", "batch.kubernetes.io/controller-uid"] {
        remove_path(obj, &["spec", "selector", "matchLabels", key]);
        remove_path(obj, &["spec", "template", "metadata", "labels", key]);
    }
    remove_path(
        obj,
        &[
            "spec",
            "template",
            "metadata",
            "labels",
            "batch.kubernetes.io/job-name",
        ],
    );
    remove_path(obj, &["spec", "template", "metadata", "creationTimestamp"]);
}

/// Cluster IPs and node ports are allocated per cluster; replaying the parent's would conflict.
fn trim_core_service(obj: &mut Value) {
    // Upstream leaves a Service without a string `spec.type` untouched.
    let Some(service_type) = get_str(obj, &["spec", "type"]).map(str::to_string) else {
        return;
    };
    if get_str(obj, &["spec", "clusterIP"]).is_some_and(|ip| ip != "None") {
        remove_path(obj, &["spec", "clusterIP"]);
        remove_path(obj, &["spec", "clusterIPs"]);
    }
    if service_type != "NodePort" && service_type != "LoadBalancer" {
        return;
    }
    remove_path(obj, &["spec", "healthCheckNodePort"]);
    if let Some(Value::Array(ports)) = get_path_mut(obj, &["spec", "ports"])
        // Upstream edits a copy and abandons it on the first non-object item.
        && ports.iter().all(Value::is_object)
    {
        for port in ports.iter_mut() {
            remove_path(port, &["nodePort"]);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// §3.4 transform, list, watch
// ---------------------------------------------------------------------------------------------

/// Turns a stored Manifest back into the object clients see (upstream `transformManifest`):
/// the `template` with `generation`, `creationTimestamp`, `resourceVersion`, `uid`,
/// `deletionGracePeriodSeconds` and `deletionTimestamp` taken from the Manifest (absent ones are
/// removed, `generation` defaults to 0), and the Manifest's feed-protection annotation copied
/// so pending deletions are explained. Finalizers are not copied.
pub fn manifest_to_object(manifest: &Value) -> Result<Value, ModelError> {
    let mut obj = manifest
        .get("template")
        .cloned()
        .ok_or_else(|| ModelError::InvalidManifest("missing template".into()))?;
    if !obj.is_object() {
        return Err(ModelError::InvalidManifest(
            "template is not an object".into(),
        ));
    }
    // Upstream decodes the template with the unstructured scheme, which rejects a missing kind.
    if get_str(&obj, &["kind"]).is_none_or(str::is_empty) {
        return Err(ModelError::InvalidManifest(
            "Object 'Kind' is missing in template".into(),
        ));
    }
    if obj.get("metadata").is_some_and(|m| !m.is_object()) {
        return Err(ModelError::InvalidManifest(
            "template metadata is not an object".into(),
        ));
    }
    let meta = |field: &str| get_path(manifest, &["metadata", field]);

    let generation = meta("generation").and_then(Value::as_i64).unwrap_or(0);
    set_meta(&mut obj, "generation", Some(json!(generation)));
    for field in [
        "creationTimestamp",
        "resourceVersion",
        "uid",
        "deletionTimestamp",
    ] {
        let value = meta(field)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(|s| Value::String(s.into()));
        set_meta(&mut obj, field, value);
    }
    let grace = meta("deletionGracePeriodSeconds")
        .and_then(Value::as_i64)
        .map(|g| json!(g));
    set_meta(&mut obj, "deletionGracePeriodSeconds", grace);

    let mut annotations = string_map(get_path(&obj, &["metadata", "annotations"]));
    if let Some(protection) = get_str(
        manifest,
        &["metadata", "annotations", FEED_PROTECTION_ANNOTATION],
    ) {
        annotations
            .get_or_insert_default()
            .insert(FEED_PROTECTION_ANNOTATION.into(), protection.into());
    }
    set_meta(
        &mut obj,
        "annotations",
        annotations.as_ref().map(string_map_value),
    );
    Ok(obj)
}

/// Sets or (with `None`) removes `metadata.<field>`; `obj` is known to be an object whose
/// metadata, if present, is an object.
fn set_meta(obj: &mut Value, field: &str, value: Option<Value>) {
    match value {
        Some(v) => {
            let _ = set_path(obj, &["metadata", field], v);
        }
        None => remove_path(obj, &["metadata", field]),
    }
}

/// `apiVersion` string of a group/version (`v1` for core).
pub fn api_version(group: &str, version: &str) -> String {
    if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    }
}

/// List kind of a served resource: `<Kind>List`, or just the kind for a subresource storage
/// (upstream `getListKind`).
pub fn list_kind(resource_name: &str, kind: &str) -> String {
    if resource_name.contains('/') {
        kind.to_string()
    } else {
        format!("{kind}List")
    }
}

/// A list response of transformed objects (`kind: <Kind>List`, original `apiVersion`), carrying
/// the resource version and continue token of the underlying Manifest list.
pub fn list_object(
    api_version: &str,
    list_kind: &str,
    resource_version: &str,
    continue_token: &str,
    items: Vec<Value>,
) -> Value {
    let mut metadata = Map::new();
    metadata.insert("resourceVersion".into(), resource_version.into());
    if !continue_token.is_empty() {
        metadata.insert("continue".into(), continue_token.into());
    }
    json!({
        "apiVersion": api_version,
        "kind": list_kind,
        "metadata": metadata,
        "items": items,
    })
}

/// The object of a BOOKMARK event: the original kind with only `metadata.resourceVersion` and
/// the `k8s.io/initial-events-end: "true"` annotation (upstream `transformBookMarkEvent`).
pub fn bookmark_object(api_version: &str, kind: &str, resource_version: &str) -> Value {
    let mut metadata = Map::new();
    if !resource_version.is_empty() {
        metadata.insert("resourceVersion".into(), resource_version.into());
    }
    metadata.insert(
        "annotations".into(),
        json!({ INITIAL_EVENTS_END_ANNOTATION: "true" }),
    );
    json!({ "apiVersion": api_version, "kind": kind, "metadata": metadata })
}

/// A watch event frame `{"type": ..., "object": ...}`.
pub fn watch_event(event_type: &str, object: Value) -> Value {
    json!({ "type": event_type, "object": object })
}

/// Rewrites one Manifest watch event (`{"type","object"}` as read from the parent) into the
/// event sent to the shadow client (upstream `WatchWrapper.Run` plus the REST fixup):
/// BOOKMARK becomes [`bookmark_object`], ERROR and `Status` objects pass through, other events
/// carry the transformed object. A Manifest that cannot be transformed is passed through
/// unchanged, as upstream does after logging.
pub fn transform_watch_event(event: &Value, api_version: &str, kind: &str) -> Value {
    let event_type = event
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let object = event.get("object").cloned().unwrap_or(Value::Null);
    let object = match event_type {
        "BOOKMARK" => bookmark_object(
            api_version,
            kind,
            get_str(&object, &["metadata", "resourceVersion"]).unwrap_or_default(),
        ),
        "ERROR" => object,
        _ if get_str(&object, &["kind"]) == Some("Status") => object,
        _ => manifest_to_object(&object).unwrap_or(object),
    };
    watch_event(event_type, object)
}

/// What a shadow list or watch selects: the label selector for the Manifests behind it, and the
/// field terms only the transformed objects can answer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListSelectors {
    /// The client's label selector AND the `metadata.name` field terms (as `config.name`) AND
    /// `config.kind=<kind>` AND, for a namespaced request, `config.namespace=<namespace>`.
    pub label_selector: String,
    /// Every other field term, evaluated on each transformed object.
    pub fields: FieldFilter,
}

/// Selectors for listing/watching the Manifests behind a shadow list (upstream
/// `convertListOptionsToLabels` for the label part). `namespace` is the request's namespace
/// (`None` or `""` for all namespaces and cluster-scoped kinds).
pub fn list_selectors(
    label_selector: Option<&str>,
    field_selector: Option<&str>,
    kind: &str,
    namespace: Option<&str>,
) -> Result<ListSelectors, ModelError> {
    let mut parts = Vec::new();
    if let Some(ls) = label_selector.map(str::trim).filter(|s| !s.is_empty()) {
        parts.push(ls.to_string());
    }
    let parsed = parse_field_selector(field_selector.unwrap_or_default())?;
    parts.extend(parsed.name_labels);
    parts.push(label_requirement(CONFIG_KIND_LABEL, "=", kind)?);
    if let Some(ns) = namespace.filter(|ns| !ns.is_empty()) {
        parts.push(label_requirement(CONFIG_NAMESPACE_LABEL, "=", ns)?);
    }
    Ok(ListSelectors {
        label_selector: parts.join(","),
        fields: parsed.filter,
    })
}

/// A field selector split by who can answer it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ParsedFieldSelector {
    /// `metadata.name` terms as label requirements on the Manifests' `config.name` (same
    /// operator), as upstream translates them: the parent then selects, and watches by name stay
    /// cheap.
    pub name_labels: Vec<String>,
    /// The other terms. Upstream answers them with a 500; kubectl needs them (`describe` lists
    /// Events by `involvedObject.*`), and Manifest labels cannot express them.
    pub filter: FieldFilter,
}

/// Parses a field selector as `fields.ParseSelector` does (terms split at unescaped commas,
/// `!=`, `==` or `=`, values unescaped). An empty selector selects everything.
pub fn parse_field_selector(field_selector: &str) -> Result<ParsedFieldSelector, ModelError> {
    let mut terms = split_unescaped_commas(field_selector);
    // fields.ParseSelector sorts its terms; keep the same deterministic order.
    terms.sort();
    let mut out = ParsedFieldSelector::default();
    for term in terms.iter().filter(|t| !t.is_empty()) {
        let invalid = || ModelError::InvalidFieldSelector {
            selector: field_selector.to_string(),
            term: term.clone(),
        };
        let (field, op, raw_value) = split_field_term(term).ok_or_else(invalid)?;
        if field.is_empty() {
            return Err(invalid());
        }
        let value = unescape_field_value(raw_value)?;
        if field == "metadata.name" {
            out.name_labels
                .push(label_requirement(CONFIG_NAME_LABEL, op, &value)?);
        } else {
            out.filter.requirements.push(FieldRequirement {
                field: field.to_string(),
                equals: op != "!=",
                value,
            });
        }
    }
    Ok(out)
}

/// Field terms evaluated on objects; all must hold. Empty matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldFilter {
    pub requirements: Vec<FieldRequirement>,
}

/// `<field>=<value>` (also `==`) or `<field>!=<value>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldRequirement {
    /// Dotted path into the object, e.g. `involvedObject.name`.
    pub field: String,
    /// `=`/`==` when true, `!=` when false.
    pub equals: bool,
    pub value: String,
}

impl FieldFilter {
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// Whether `obj` satisfies every term. A missing field reads as `""`, as the API server's
    /// field sets render unset fields, so `status.phase!=Running` matches an object without
    /// status and `spec.nodeName=` selects unscheduled pods.
    pub fn matches(&self, obj: &Value) -> bool {
        self.requirements
            .iter()
            .all(|r| (field_value(obj, &r.field) == r.value) == r.equals)
    }
}

/// The value at a dotted path rendered as a string: strings as they are, numbers and booleans
/// as Go's `fmt` prints them, anything absent or null as `""` (other values as compact JSON).
pub fn field_value(obj: &Value, field: &str) -> String {
    let path: Vec<&str> = field.split('.').collect();
    match get_path(obj, &path) {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

fn split_unescaped_commas(s: &str) -> Vec<String> {
    let mut terms = Vec::new();
    let mut cur = String::new();
    let mut escaped = false;
    for c in s.chars() {
        if escaped {
            cur.push(c);
            escaped = false;
        } else if c == '\\' {
            cur.push(c);
            escaped = true;
        } else if c == ',' {
            terms.push(std::mem::take(&mut cur));
        } else {
            cur.push(c);
        }
    }
    terms.push(cur);
    terms
}

/// First position where `!=`, `==` or `=` starts (checked in that order), as `splitTerm`.
fn split_field_term(term: &str) -> Option<(&str, &'static str, &str)> {
    for (i, _) in term.char_indices() {
        let rest = &term[i..];
        for op in ["!=", "==", "="] {
            if let Some(value) = rest.strip_prefix(op) {
                return Some((&term[..i], op, value));
            }
        }
    }
    None
}

fn unescape_field_value(v: &str) -> Result<String, ModelError> {
    let mut out = String::with_capacity(v.len());
    let mut chars = v.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some(e @ ('\\' | ',' | '=')) => out.push(e),
            Some(e) => {
                return Err(ModelError::InvalidFieldSelectorValue {
                    value: v.to_string(),
                    reason: format!("invalid escape sequence '\\{e}'"),
                });
            }
            None => {
                return Err(ModelError::InvalidFieldSelectorValue {
                    value: v.to_string(),
                    reason: "unterminated escape sequence".into(),
                });
            }
        }
    }
    Ok(out)
}

/// `key<op>value` after the label-value validation `labels.NewRequirement` performs.
fn label_requirement(key: &str, op: &str, value: &str) -> Result<String, ModelError> {
    if let Some(reason) = label_value_error(value) {
        return Err(ModelError::InvalidLabelValue {
            key: key.to_string(),
            value: value.to_string(),
            reason,
        });
    }
    Ok(format!("{key}{op}{value}"))
}

/// `IsValidLabelValue`: empty, or <= 63 chars of `[A-Za-z0-9_.-]` starting and ending alphanumeric.
fn label_value_error(value: &str) -> Option<String> {
    if value.is_empty() {
        return None;
    }
    if value.len() > 63 {
        return Some("must be no more than 63 characters".into());
    }
    let alnum = |c: char| c.is_ascii_alphanumeric();
    let ok = value.starts_with(alnum)
        && value.ends_with(alnum)
        && value
            .chars()
            .all(|c| alnum(c) || matches!(c, '-' | '_' | '.'));
    (!ok).then(|| {
        "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' \
         or '.', and must start and end with an alphanumeric character"
            .into()
    })
}

// ---------------------------------------------------------------------------------------------
// §3.5 update, scale, status
// ---------------------------------------------------------------------------------------------

/// Whether an update/patch may target `subresource` (only `scale`; everything else is a
/// template, whose status makes no sense to update).
pub fn subresource_update_allowed(subresource: &str) -> bool {
    subresource == "scale"
}

/// Message of the 405 MethodNotSupported for an update of another subresource.
pub fn subresource_update_message(resource: &str, subresource: &str) -> String {
    format!(
        "{resource} are considered as templates, which make no sense to update templates' {subresource}"
    )
}

/// Plain-text body of the 405 answered on CRD `/status` routes.
pub fn crd_status_message(method: &str, kind: &str) -> String {
    format!("Clusternet does not allow to {method} status of {kind}")
}

/// `apiVersion` of the `Scale` served from a containing group version (upstream
/// `ScaleREST.GroupVersionKind`): the legacy Scale types for their own group versions,
/// `autoscaling/v1` otherwise.
pub fn scale_api_version(containing_group_version: &str) -> &'static str {
    match containing_group_version {
        "extensions/v1beta1" => "extensions/v1beta1",
        "apps/v1beta1" => "apps/v1beta1",
        "apps/v1beta2" => "apps/v1beta2",
        _ => "autoscaling/v1",
    }
}

/// Reads an int64 like `NestedInt64` and truncates it to int32 like upstream `getReplicas`;
/// absent or non-integer values count as 0.
fn replicas_at(obj: &Value, path: &[&str]) -> i32 {
    get_path(obj, path).and_then(Value::as_i64).unwrap_or(0) as i32
}

/// The `Scale` of an object (normally the transformed object, so resource version, UID and
/// creation timestamp are the Manifest's): name, namespace, uid, resourceVersion,
/// creationTimestamp, `spec.replicas` from the object's `spec.replicas`, `status.replicas` from
/// its `status.replicas` (normally absent, hence 0). Empty fields are omitted as the typed
/// Scale's JSON would.
pub fn scale_from_object(obj: &Value, scale_api_version: &str) -> Value {
    let mut metadata = Map::new();
    for field in ["name", "namespace", "uid", "resourceVersion"] {
        if let Some(v) = get_str(obj, &["metadata", field]).filter(|s| !s.is_empty()) {
            metadata.insert(field.into(), v.into());
        }
    }
    let created = get_str(obj, &["metadata", "creationTimestamp"])
        .filter(|s| !s.is_empty())
        .map_or(Value::Null, |s| Value::String(s.into()));
    metadata.insert("creationTimestamp".into(), created);

    let mut spec = Map::new();
    let spec_replicas = replicas_at(obj, &["spec", "replicas"]);
    if spec_replicas != 0 {
        spec.insert("replicas".into(), spec_replicas.into());
    }
    json!({
        "apiVersion": scale_api_version,
        "kind": SCALE_KIND,
        "metadata": metadata,
        "spec": spec,
        "status": { "replicas": replicas_at(obj, &["status", "replicas"]) },
    })
}

/// Writes a client's `Scale` back into the stored template: only `spec.replicas` changes
/// (missing in the Scale means 0, as when decoding into the typed Scale).
pub fn apply_scale(template: &mut Value, scale: &Value) -> Result<(), ModelError> {
    if !scale.is_object() {
        return Err(ModelError::InvalidScale("body is not an object".into()));
    }
    if let Some(kind) = get_str(scale, &["kind"])
        && kind != SCALE_KIND
    {
        return Err(ModelError::InvalidScale(format!(
            "expected input object type to be Scale, but {kind}"
        )));
    }
    let replicas = match get_path(scale, &["spec", "replicas"]) {
        None | Some(Value::Null) => 0,
        Some(v) => v
            .as_i64()
            .and_then(|r| i32::try_from(r).ok())
            .ok_or_else(|| {
                ModelError::InvalidScale(format!("spec.replicas must be an int32, got {v}"))
            })?,
    };
    set_path(template, &["spec", "replicas"], json!(i64::from(replicas)))
        .map_err(ModelError::InvalidObject)
}

// ---------------------------------------------------------------------------------------------
// §3.1 / §3.6 which resources are served, and discovery
// ---------------------------------------------------------------------------------------------

/// One resource of one group version, as listed by the parent's discovery (`APIResource`;
/// deserializable from an `APIResourceList` entry). `name` may be `plural/subresource`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct DiscoveredResource {
    pub name: String,
    pub singular_name: String,
    pub namespaced: bool,
    pub kind: String,
    pub verbs: Vec<String>,
    pub short_names: Vec<String>,
    pub categories: Vec<String>,
    pub storage_version_hash: String,
}

/// One version of a discovered group with its resources.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DiscoveredVersion {
    pub version: String,
    pub resources: Vec<DiscoveredResource>,
}

/// One API group of the parent (`""` for core) with its preferred version (`""` if none).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DiscoveredGroup {
    pub name: String,
    pub preferred_version: String,
    pub versions: Vec<DiscoveredVersion>,
}

/// Where a served resource comes from; decides its routes and discovery shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResourceOrigin {
    /// Found by discovery at install time (§3.1).
    BuiltIn,
    /// Backed by a CRD's storage version (§3.6), with its subresources.
    Crd { has_status: bool, has_scale: bool },
}

/// A resource served under `shadow/v1alpha1`, keeping the original group, version and kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShadowResource {
    pub group: String,
    pub version: String,
    /// Plural, possibly `plural/subresource` for built-ins (e.g. `deployments/scale`).
    pub name: String,
    pub singular_name: String,
    pub namespaced: bool,
    pub kind: String,
    pub verbs: Vec<String>,
    pub short_names: Vec<String>,
    pub storage_version_hash: String,
    pub origin: ResourceOrigin,
}

impl ShadowResource {
    /// The plural without subresource.
    pub fn resource(&self) -> &str {
        base_resource(&self.name)
    }

    /// The subresource part of `name`, if any.
    pub fn subresource(&self) -> Option<&str> {
        self.name.split_once('/').map(|(_, sub)| sub)
    }

    /// Original `apiVersion` (`v1`, `apps/v1`, ...).
    pub fn api_version(&self) -> String {
        api_version(&self.group, &self.version)
    }

    /// Kind of list responses.
    pub fn list_kind(&self) -> String {
        list_kind(&self.name, &self.kind)
    }

    /// Manifest name for an object of this resource (namespace ignored when cluster-scoped).
    pub fn manifest_name(&self, namespace: &str, name: &str) -> String {
        manifest_name(&self.name, self.namespaced.then_some(namespace), name)
    }

    /// Deprecated Manifest name for an object of this resource.
    pub fn legacy_manifest_name(&self, namespace: &str, name: &str) -> String {
        legacy_manifest_name(&self.name, self.namespaced.then_some(namespace), name)
    }

    /// Discovery entries (`APIResource` JSON) under `shadow/v1alpha1`: one for a built-in (with
    /// its original group/version), one or two for a CRD (no group/version, plus
    /// `<plural>/scale` as `autoscaling/v1` Scale when the storage version has a scale
    /// subresource). The category is always `clusternet.shadow`.
    pub fn discovery_entries(&self) -> Vec<Value> {
        match self.origin {
            ResourceOrigin::BuiltIn => vec![api_resource_json(
                &self.name,
                &self.singular_name,
                self.namespaced,
                &self.group,
                &self.version,
                &self.kind,
                &self.verbs,
                &self.short_names,
                &self.storage_version_hash,
            )],
            ResourceOrigin::Crd { has_scale, .. } => {
                let mut entries = vec![api_resource_json(
                    &self.name,
                    &self.singular_name,
                    self.namespaced,
                    "",
                    "",
                    &self.kind,
                    &self.verbs,
                    &self.short_names,
                    &self.storage_version_hash,
                )];
                if has_scale {
                    let verbs: Vec<String> =
                        CRD_SCALE_VERBS.iter().map(|v| v.to_string()).collect();
                    entries.push(api_resource_json(
                        &format!("{}/scale", self.name),
                        &self.singular_name,
                        self.namespaced,
                        "autoscaling",
                        "v1",
                        SCALE_KIND,
                        &verbs,
                        &self.short_names,
                        "",
                    ));
                }
                entries
            }
        }
    }
}

/// `metav1.APIResource` JSON with Go's `omitempty` rules (group, version, shortNames,
/// storageVersionHash omitted when empty; singularName, namespaced, kind, verbs always present).
#[allow(clippy::too_many_arguments)]
fn api_resource_json(
    name: &str,
    singular_name: &str,
    namespaced: bool,
    group: &str,
    version: &str,
    kind: &str,
    verbs: &[String],
    short_names: &[String],
    storage_version_hash: &str,
) -> Value {
    let mut m = Map::new();
    m.insert("name".into(), name.into());
    m.insert("singularName".into(), singular_name.into());
    m.insert("namespaced".into(), namespaced.into());
    if !group.is_empty() {
        m.insert("group".into(), group.into());
    }
    if !version.is_empty() {
        m.insert("version".into(), version.into());
    }
    m.insert("kind".into(), kind.into());
    m.insert("verbs".into(), json!(verbs));
    if !short_names.is_empty() {
        m.insert("shortNames".into(), json!(short_names));
    }
    m.insert("categories".into(), json!([SHADOW_CATEGORY]));
    if !storage_version_hash.is_empty() {
        m.insert("storageVersionHash".into(), storage_version_hash.into());
    }
    Value::Object(m)
}

/// The `APIResourceList` served at `GET /apis/shadow/v1alpha1`. Entries appear in the order
/// given; upstream lists built-ins first, then CRDs in the order they were added.
pub fn discovery_resource_list(resources: &[ShadowResource]) -> Value {
    let entries: Vec<Value> = resources
        .iter()
        .flat_map(ShadowResource::discovery_entries)
        .collect();
    json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": SHADOW_GROUP_VERSION,
        "resources": entries,
    })
}

/// The `APIGroup` served at `GET /apis/shadow`.
pub fn shadow_api_group() -> Value {
    let gv = json!({ "groupVersion": SHADOW_GROUP_VERSION, "version": SHADOW_VERSION });
    json!({
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": SHADOW_GROUP,
        "versions": [gv.clone()],
        "preferredVersion": gv,
    })
}

/// Kubernetes version priority (apimachinery `version.CompareKubeAwareVersionStrings`):
/// `Greater` means `a` has the higher priority. GA > beta > alpha, then higher major, then
/// higher minor (`v2 > v1 > v1beta2 > v1beta1 > v1alpha1`); strings not shaped like
/// `v<N>[(alpha|beta)<M>]` rank below all others and among themselves in reverse
/// lexicographic order (so ascending lexicographic when sorted by priority).
pub fn compare_kube_versions(a: &str, b: &str) -> Ordering {
    if a == b {
        return Ordering::Equal;
    }
    match (parse_kube_version(a), parse_kube_version(b)) {
        (None, None) => b.cmp(a),
        (None, Some(_)) => Ordering::Less,
        (Some(_), None) => Ordering::Greater,
        (Some((a_major, a_type, a_minor)), Some((b_major, b_type, b_minor))) => a_type
            .cmp(&b_type)
            .then(a_major.cmp(&b_major))
            .then(a_minor.cmp(&b_minor)),
    }
}

/// `(major, type, minor)` with type alpha = 0, beta = 1, GA = 2 (GA minor is 0).
fn parse_kube_version(v: &str) -> Option<(i64, u8, i64)> {
    let rest = v.strip_prefix('v')?;
    let digits_end = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    let (major, tail) = rest.split_at(digits_end);
    if major.is_empty() {
        return None;
    }
    // Go's Atoi fails on int64 overflow, which makes the string "not kube-like".
    let major: i64 = major.parse().ok()?;
    if tail.is_empty() {
        return Some((major, 2, 0));
    }
    let (kind, minor) = if let Some(m) = tail.strip_prefix("alpha") {
        (0, m)
    } else if let Some(m) = tail.strip_prefix("beta") {
        (1, m)
    } else {
        return None;
    };
    if minor.is_empty() || !minor.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((major, kind, minor.parse().ok()?))
}

/// Groups never mirrored: clusternet's own, the shadow group itself (no nesting), and the
/// metrics groups whose `pods`/`nodes` would shadow the core resources.
pub fn is_skipped_group(group: &str) -> bool {
    group.ends_with(CLUSTERNET_GROUP_SUFFIX)
        || group == SHADOW_GROUP
        || group == "metrics.k8s.io"
        || group == "custom.metrics.k8s.io"
}

/// Name of the APIService registering a group version (`v1.` for core, `v1.apps`).
pub fn apiservice_name(group: &str, version: &str) -> String {
    format!("{version}.{group}")
}

/// Decides name collisions in the single flattened shadow group version (upstream
/// `canBeAddedToStorage` and its process-wide `resourcePriorityMap`). One tracker must be shared
/// by the install-time selection and the CRD handler, as upstream shares the map.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PriorityTracker {
    /// resource name -> (APIService name, groupPriorityMinimum) of the last admitted holder.
    winners: BTreeMap<String, (String, i32)>,
}

impl PriorityTracker {
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether `group/version` `resource` may (re)place the storage for its name.
    ///
    /// `apiservice_priority` is the `groupPriorityMinimum` of APIService `<version>.<group>`, or
    /// `None` when it cannot be read (upstream treats every lister error, not only NotFound,
    /// as "just add it"). `apiregistration.k8s.io/v1` `apiservices[/status]` are
    /// never admitted. A missing APIService admits without being recorded; otherwise a
    /// recorded holder with a strictly higher priority wins, else the newcomer is recorded and
    /// admitted (so on equal priority the later one replaces the earlier one).
    pub fn admit(
        &mut self,
        group: &str,
        version: &str,
        resource: &str,
        apiservice_priority: Option<i32>,
    ) -> bool {
        if group == "apiregistration.k8s.io"
            && version == "v1"
            && (resource == "apiservices" || resource == "apiservices/status")
        {
            return false;
        }
        let Some(priority) = apiservice_priority else {
            return true;
        };
        if let Some((_, held)) = self.winners.get(resource)
            && *held > priority
        {
            return false;
        }
        self.winners.insert(
            resource.to_string(),
            (apiservice_name(group, version), priority),
        );
        true
    }

    /// The recorded holder (APIService name, priority) of a resource name.
    pub fn holder(&self, resource: &str) -> Option<(&str, i32)> {
        self.winners.get(resource).map(|(n, p)| (n.as_str(), *p))
    }
}

/// One version per resource name of a group (upstream `normalizeAPIGroupResources`): the
/// preferred version's, else the highest by [`compare_kube_versions`]. Output is sorted by that
/// version order, then by name, and carries the group and chosen version on every resource.
pub fn normalize_group_resources(group: &DiscoveredGroup) -> Vec<ShadowResource> {
    let preferred = group.preferred_version.as_str();
    let mut all: Vec<(&str, &DiscoveredResource)> = group
        .versions
        .iter()
        .flat_map(|v| v.resources.iter().map(move |r| (v.version.as_str(), r)))
        .collect();
    all.sort_by(|(va, ra), (vb, rb)| {
        if va == vb {
            return ra.name.cmp(&rb.name);
        }
        if *va == preferred {
            return Ordering::Less;
        }
        if *vb == preferred {
            return Ordering::Greater;
        }
        // Tie-breaks keep the order total (e.g. `v1` vs `v01`), which Rust's sort requires.
        compare_kube_versions(vb, va)
            .then_with(|| va.cmp(vb))
            .then_with(|| ra.name.cmp(&rb.name))
    });
    let mut seen = BTreeSet::new();
    all.into_iter()
        .filter(|(_, r)| seen.insert(r.name.as_str()))
        .map(|(version, r)| ShadowResource {
            group: group.name.clone(),
            version: version.to_string(),
            name: r.name.clone(),
            singular_name: r.singular_name.clone(),
            namespaced: r.namespaced,
            kind: r.kind.clone(),
            verbs: r.verbs.clone(),
            short_names: r.short_names.clone(),
            storage_version_hash: r.storage_version_hash.clone(),
            origin: ResourceOrigin::BuiltIn,
        })
        .collect()
}

/// The built-in resources served by the shadow API (§3.1), in discovery order, one per name.
///
/// Groups are walked in the given (discovery) order; skipped are [`is_skipped_group`] groups and
/// every group in `crd_groups` (the CRD handler serves those). Each group is reduced with
/// [`normalize_group_resources`], then each candidate goes through `tracker`
/// ([`PriorityTracker::admit`], with `apiservice_priority(group, version)`). An admitted
/// resource replaces an earlier one of the same name in place; upstream also keeps the loser's
/// discovery entry, which would advertise a group/version that is not served, so it is dropped.
pub fn select_shadow_resources(
    groups: &[DiscoveredGroup],
    crd_groups: &BTreeSet<String>,
    tracker: &mut PriorityTracker,
    apiservice_priority: impl Fn(&str, &str) -> Option<i32>,
) -> Vec<ShadowResource> {
    let mut selected: Vec<ShadowResource> = Vec::new();
    for group in groups {
        if is_skipped_group(&group.name) || crd_groups.contains(&group.name) {
            continue;
        }
        for resource in normalize_group_resources(group) {
            let priority = apiservice_priority(&resource.group, &resource.version);
            if !tracker.admit(&resource.group, &resource.version, &resource.name, priority) {
                continue;
            }
            match selected.iter_mut().find(|r| r.name == resource.name) {
                Some(slot) => *slot = resource,
                None => selected.push(resource),
            }
        }
    }
    selected
}

/// Groups owning at least one CRD (`spec.group` of each CRD object).
pub fn crd_groups<'a>(crds: impl IntoIterator<Item = &'a Value>) -> BTreeSet<String> {
    crds.into_iter()
        .filter_map(|crd| get_str(crd, &["spec", "group"]))
        .map(str::to_string)
        .collect()
}

/// The shadow resource of a CRD (§3.6), before the priority check: `None` for `.clusternet.io`
/// groups, CRDs being deleted, CRDs without a storage version or whose storage version is not
/// served. Version = storage version; plural/kind/singular/short names/scope from the CRD;
/// status/scale flags from the storage version's subresources.
pub fn crd_shadow_resource(crd: &Value) -> Option<ShadowResource> {
    let group = get_str(crd, &["spec", "group"]).unwrap_or_default();
    if group.ends_with(CLUSTERNET_GROUP_SUFFIX) {
        return None;
    }
    if get_path(crd, &["metadata", "deletionTimestamp"]).is_some_and(|t| !t.is_null()) {
        return None;
    }
    let versions = get_path(crd, &["spec", "versions"])?.as_array()?;
    let flag = |v: &Value, key: &str| v.get(key).and_then(Value::as_bool).unwrap_or(false);
    let storage = versions.iter().find(|v| flag(v, "storage"))?;
    let storage_version = storage.get("name").and_then(Value::as_str)?;
    // Upstream HasServedCRDVersion: some served version carries the storage version's name.
    let served = versions.iter().any(|v| {
        flag(v, "served") && v.get("name").and_then(Value::as_str) == Some(storage_version)
    });
    if !served {
        return None;
    }
    let has_sub =
        |sub: &str| get_path(storage, &["subresources", sub]).is_some_and(|s| !s.is_null());
    let names = get_path(crd, &["spec", "names"]);
    let name_field = |key: &str| {
        names
            .and_then(|n| n.get(key))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let kind = name_field("kind");
    let plural = name_field("plural");
    if plural.is_empty() || kind.is_empty() {
        return None;
    }
    Some(ShadowResource {
        group: group.to_string(),
        version: storage_version.to_string(),
        singular_name: name_field("singular"),
        namespaced: get_str(crd, &["spec", "scope"]) == Some("Namespaced"),
        verbs: CRD_VERBS.iter().map(|v| v.to_string()).collect(),
        short_names: string_list(names.and_then(|n| n.get("shortNames"))),
        storage_version_hash: storage_version_hash(group, storage_version, &kind),
        name: plural,
        kind,
        origin: ResourceOrigin::Crd {
            has_status: has_sub("status"),
            has_scale: has_sub("scale"),
        },
    })
}

/// [`crd_shadow_resource`] followed by the shared priority check (upstream `addStorage`).
pub fn admit_crd(
    crd: &Value,
    tracker: &mut PriorityTracker,
    apiservice_priority: impl Fn(&str, &str) -> Option<i32>,
) -> Option<ShadowResource> {
    let resource = crd_shadow_resource(crd)?;
    let priority = apiservice_priority(&resource.group, &resource.version);
    tracker
        .admit(&resource.group, &resource.version, &resource.name, priority)
        .then_some(resource)
}

/// Whether a CRD update must remove and re-add its routes and discovery (upstream
/// `updateCustomResourceDefinition`): not for a CRD being deleted (the delete event handles
/// it), not when the spec is unchanged, not for `.clusternet.io` groups.
pub fn crd_update_needs_resync(old: &Value, new: &Value) -> bool {
    if get_path(new, &["metadata", "deletionTimestamp"]).is_some_and(|t| !t.is_null()) {
        return false;
    }
    if old.get("spec") == new.get("spec") {
        return false;
    }
    !get_str(new, &["spec", "group"])
        .unwrap_or_default()
        .ends_with(CLUSTERNET_GROUP_SUFFIX)
}

/// apiserver `discovery.StorageVersionHash`: base64 of the first 8 bytes of
/// SHA-256(`group/version/kind`); `""` for an empty kind.
pub fn storage_version_hash(group: &str, version: &str, kind: &str) -> String {
    if kind.is_empty() {
        return String::new();
    }
    let digest = sha256(format!("{group}/{version}/{kind}").as_bytes());
    base64_std(&digest[..8])
}

fn base64_std(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Minimal SHA-256 (FIPS 180-4); only used for the 8-byte discovery hash, so a dependency
/// would be overkill.
fn sha256(data: &[u8]) -> [u8; 32] {
    const K: [u32; 64] = [
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
        0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
        0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
        0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
        0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
        0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
        0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
        0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
        0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
        0xc67178f2,
    ];
    let mut h: [u32; 8] = [
        0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab,
        0x5be0cd19,
    ];
    let mut msg = data.to_vec();
    let bit_len = (data.len() as u64).wrapping_mul(8);
    msg.push(0x80);
    while msg.len() % 64 != 56 {
        msg.push(0);
    }
    msg.extend_from_slice(&bit_len.to_be_bytes());
    for block in msg.chunks(64) {
        let mut w = [0u32; 64];
        for (i, word) in block.chunks(4).enumerate() {
            w[i] = u32::from_be_bytes([word[0], word[1], word[2], word[3]]);
        }
        for i in 16..64 {
            let s0 = w[i - 15].rotate_right(7) ^ w[i - 15].rotate_right(18) ^ (w[i - 15] >> 3);
            let s1 = w[i - 2].rotate_right(17) ^ w[i - 2].rotate_right(19) ^ (w[i - 2] >> 10);
            w[i] = w[i - 16]
                .wrapping_add(s0)
                .wrapping_add(w[i - 7])
                .wrapping_add(s1);
        }
        let [mut a, mut b, mut c, mut d, mut e, mut f, mut g, mut hh] = h;
        for i in 0..64 {
            let s1 = e.rotate_right(6) ^ e.rotate_right(11) ^ e.rotate_right(25);
            let ch = (e & f) ^ (!e & g);
            let t1 = hh
                .wrapping_add(s1)
                .wrapping_add(ch)
                .wrapping_add(K[i])
                .wrapping_add(w[i]);
            let s0 = a.rotate_right(2) ^ a.rotate_right(13) ^ a.rotate_right(22);
            let maj = (a & b) ^ (a & c) ^ (b & c);
            let t2 = s0.wrapping_add(maj);
            hh = g;
            g = f;
            f = e;
            e = d.wrapping_add(t1);
            d = c;
            c = b;
            b = a;
            a = t1.wrapping_add(t2);
        }
        for (slot, v) in h.iter_mut().zip([a, b, c, d, e, f, g, hh]) {
            *slot = slot.wrapping_add(v);
        }
    }
    let mut out = [0u8; 32];
    for (i, v) in h.iter().enumerate() {
        out[i * 4..i * 4 + 4].copy_from_slice(&v.to_be_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    // ---- §3.2 -------------------------------------------------------------------------------

    #[test]
    fn manifest_names() {
        assert_eq!(
            manifest_name("deployments", Some("qux"), "my-nginx"),
            "deployments.qux.my-nginx"
        );
        assert_eq!(manifest_name("namespaces", None, "qux"), "namespaces.qux");
        assert_eq!(
            manifest_name("deployments/scale", Some("qux"), "my-nginx"),
            "deployments.qux.my-nginx"
        );
        assert_eq!(
            legacy_manifest_name("deployments", Some("qux"), "my-nginx"),
            "deployments-qux-my-nginx"
        );
        assert_eq!(
            legacy_manifest_name("namespaces", None, "qux"),
            "namespaces-qux"
        );
        assert_eq!(
            normalized_manifest_name("foos", Some("bar"), "x", |n| n == "foos-bar-x"),
            "foos-bar-x"
        );
        assert_eq!(
            normalized_manifest_name("foos", Some("bar"), "x", |_| false),
            "foos.bar.x"
        );
    }

    #[test]
    fn example_manifest_of_the_spec() {
        let mut deployment = json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "my-nginx", "namespace": "qux", "labels": {"app": "nginx"}},
            "spec": {"replicas": 6, "selector": {"matchLabels": {"app": "nginx"}}, "template": {}},
        });
        mark_created_by_hub(&mut deployment).unwrap();
        // what the dry run adds
        deployment["metadata"]["uid"] = json!("...");
        deployment["metadata"]["generation"] = json!(1);
        deployment["metadata"]["resourceVersion"] = json!("12");
        deployment["metadata"]["creationTimestamp"] = json!("2024-01-01T00:00:00Z");
        deployment["status"] = json!({});
        trim_template(&mut deployment, "apps", "Deployment");

        let res = ShadowResource {
            group: "apps".into(),
            version: "v1".into(),
            name: "deployments".into(),
            singular_name: "deployment".into(),
            namespaced: true,
            kind: "Deployment".into(),
            verbs: vec![],
            short_names: vec![],
            storage_version_hash: String::new(),
            origin: ResourceOrigin::BuiltIn,
        };
        let name = res.manifest_name(object_namespace(&deployment), object_name(&deployment));
        let l = manifest_labels(
            &object_labels(&deployment),
            &res.group,
            &res.version,
            &res.kind,
            object_name(&deployment),
            object_namespace(&deployment),
        );
        let manifest = build_manifest(DEFAULT_RESERVED_NAMESPACE, &name, &l, deployment);
        assert_eq!(
            manifest,
            json!({
                "apiVersion": "apps.clusternet.io/v1alpha1",
                "kind": "Manifest",
                "metadata": {
                    "name": "deployments.qux.my-nginx",
                    "namespace": "clusternet-reserved",
                    "labels": {
                        "app": "nginx",
                        "clusternet.io/created-by": "clusternet-hub",
                        "apps.clusternet.io/config.group": "apps",
                        "apps.clusternet.io/config.version": "v1",
                        "apps.clusternet.io/config.kind": "Deployment",
                        "apps.clusternet.io/config.name": "my-nginx",
                        "apps.clusternet.io/config.namespace": "qux",
                    },
                },
                "template": {
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "metadata": {
                        "name": "my-nginx",
                        "namespace": "qux",
                        "labels": {"app": "nginx", "clusternet.io/created-by": "clusternet-hub"},
                        "uid": "...",
                        "generation": 1,
                    },
                    "spec": {"replicas": 6, "selector": {"matchLabels": {"app": "nginx"}}, "template": {}},
                },
            })
        );
    }

    #[test]
    fn cluster_scoped_labels_have_empty_namespace_and_core_group() {
        let l = manifest_labels(&BTreeMap::new(), "", "v1", "Namespace", "qux", "");
        assert_eq!(l[CONFIG_GROUP_LABEL], "");
        assert_eq!(l[CONFIG_NAMESPACE_LABEL], "");
        assert_eq!(l[CONFIG_KIND_LABEL], "Namespace");
    }

    #[test]
    fn created_by_label_replaces_unreadable_labels() {
        let mut obj = json!({"metadata": {"labels": {"a": 1}}});
        mark_created_by_hub(&mut obj).unwrap();
        assert_eq!(
            obj["metadata"]["labels"],
            json!({"clusternet.io/created-by": "clusternet-hub"})
        );
        let mut bare = json!({"kind": "ConfigMap"});
        mark_created_by_hub(&mut bare).unwrap();
        assert_eq!(object_labels(&bare)[CREATED_BY_LABEL], CLUSTERNET_HUB_NAME);
    }

    #[test]
    fn skip_validating_and_uid() {
        let mut obj = json!({"metadata": {"annotations": {SKIP_VALIDATING_ANNOTATION: "true"}}});
        assert!(skips_validation(&obj));
        ensure_uid(&mut obj, || "fresh".into()).unwrap();
        assert_eq!(obj["metadata"]["uid"], "fresh");
        ensure_uid(&mut obj, || panic!("uid already set")).unwrap();
        assert!(!skips_validation(
            &json!({"metadata": {"annotations": {SKIP_VALIDATING_ANNOTATION: "yes"}}})
        ));
    }

    #[test]
    fn create_namespace_rules() {
        assert_eq!(
            namespace_validation_field("Namespace", false),
            Some("metadata.name")
        );
        assert_eq!(
            namespace_validation_field("Pod", true),
            Some("metadata.namespace")
        );
        assert_eq!(namespace_validation_field("ClusterRole", false), None);
        assert_eq!(
            dry_run_namespace("Pod", true, "clusternet-reserved"),
            Some("clusternet-reserved")
        );
        assert_eq!(
            dry_run_namespace("Namespace", false, "clusternet-reserved"),
            None
        );
        assert!(validate_namespace_name("qux").is_empty());
        assert_eq!(
            validate_namespace_name("a.b"),
            vec!["must not contain dots"]
        );
        assert!(validate_namespace_name("Bad_NS")[0].starts_with("a lowercase RFC 1123 label"));
        assert_eq!(validate_namespace_name(&"a".repeat(64)).len(), 1);
        assert!(is_crd_kind(
            "apiextensions.k8s.io",
            "CustomResourceDefinition"
        ));
    }

    // ---- trimming ---------------------------------------------------------------------------

    #[test]
    fn trim_job() {
        let mut job = json!({
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "creationTimestamp": "2021-11-01T07:01:18Z",
                "generation": 1,
                "labels": {"clusternet.io/created-by": "clusternet-hub"},
                "name": "pi",
                "namespace": "default",
                "resourceVersion": "4450181",
                "selfLink": "x",
                "managedFields": [],
                "uid": "dc8ca8aa-268c-4634-b1f7-6bf67e3af6cb",
            },
            "spec": {
                "backoffLimit": 4,
                "selector": {"matchLabels": {
                    "controller-uid": "a2d9",
                    "batch.kubernetes.io/controller-uid": "a2d9",
                }},
                "template": {
                    "metadata": {
                        "creationTimestamp": null,
                        "labels": {
                            "controller-uid": "a2d9",
                            "batch.kubernetes.io/controller-uid": "a2d9",
                            "batch.kubernetes.io/job-name": "pi",
                            "job-name": "pi",
                        },
                    },
                    "spec": {"restartPolicy": "Never"},
                },
            },
            "status": {},
        });
        trim_template(&mut job, "batch", "Job");
        assert_eq!(
            job,
            json!({
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {
                    "generation": 1,
                    "labels": {"clusternet.io/created-by": "clusternet-hub"},
                    "name": "pi",
                    "namespace": "default",
                    "uid": "dc8ca8aa-268c-4634-b1f7-6bf67e3af6cb",
                },
                "spec": {
                    "backoffLimit": 4,
                    "selector": {"matchLabels": {}},
                    "template": {
                        "metadata": {"labels": {"job-name": "pi"}},
                        "spec": {"restartPolicy": "Never"},
                    },
                },
            })
        );
    }

    fn service(ty: &str, cluster_ip: &str) -> Value {
        json!({
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "svc", "namespace": "ns", "resourceVersion": "1", "uid": "u"},
            "spec": {
                "clusterIP": cluster_ip,
                "clusterIPs": [cluster_ip],
                "healthCheckNodePort": 31000,
                "ports": [
                    {"name": "http", "nodePort": 30597, "port": 80},
                    {"name": "https", "nodePort": 30598, "port": 443},
                ],
                "type": ty,
            },
            "status": {"loadBalancer": {}},
        })
    }

    #[test]
    fn trim_node_port_service() {
        let mut svc = service("NodePort", "10.98.177.115");
        trim_template(&mut svc, "", "Service");
        assert_eq!(
            svc,
            json!({
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": "svc", "namespace": "ns", "uid": "u"},
                "spec": {
                    "ports": [{"name": "http", "port": 80}, {"name": "https", "port": 443}],
                    "type": "NodePort",
                },
            })
        );
        let mut lb = service("LoadBalancer", "10.0.0.1");
        trim_template(&mut lb, "", "Service");
        assert!(lb["spec"].get("healthCheckNodePort").is_none());
        assert!(lb["spec"]["ports"][0].get("nodePort").is_none());
    }

    #[test]
    fn trim_headless_and_cluster_ip_services() {
        let mut headless = service("ClusterIP", "None");
        trim_template(&mut headless, "", "Service");
        assert_eq!(headless["spec"]["clusterIP"], "None");
        assert_eq!(headless["spec"]["clusterIPs"], json!(["None"]));
        // node ports are only trimmed for NodePort/LoadBalancer
        assert_eq!(headless["spec"]["ports"][0]["nodePort"], 30597);
        assert_eq!(headless["spec"]["healthCheckNodePort"], 31000);

        let mut plain = service("ClusterIP", "10.1.2.3");
        trim_template(&mut plain, "", "Service");
        assert!(plain["spec"].get("clusterIP").is_none());
        assert!(plain["spec"].get("clusterIPs").is_none());

        // a Service without spec.type is left alone (upstream)
        let mut untyped = service("ClusterIP", "10.1.2.3");
        untyped["spec"].as_object_mut().unwrap().remove("type");
        trim_template(&mut untyped, "", "Service");
        assert_eq!(untyped["spec"]["clusterIP"], "10.1.2.3");

        // a non-object port aborts the node-port trim (upstream works on a copy)
        let mut odd = service("NodePort", "None");
        odd["spec"]["ports"]
            .as_array_mut()
            .unwrap()
            .push(json!("x"));
        trim_template(&mut odd, "", "Service");
        assert_eq!(odd["spec"]["ports"][0]["nodePort"], 30597);
        assert!(odd["spec"].get("healthCheckNodePort").is_none());
    }

    #[test]
    fn trim_other_kinds_only_common_fields() {
        let mut svc_like = service("NodePort", "10.0.0.1");
        trim_template(&mut svc_like, "example.com", "Service");
        assert_eq!(svc_like["spec"]["clusterIP"], "10.0.0.1");
        assert!(svc_like.get("status").is_none());
        assert!(svc_like["metadata"].get("resourceVersion").is_none());
    }

    // ---- transform ----------------------------------------------------------------------------

    fn stored_manifest() -> Value {
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

    #[test]
    fn transform_manifest() {
        let obj = manifest_to_object(&stored_manifest()).unwrap();
        assert_eq!(
            obj,
            json!({
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {
                    "name": "my-nginx",
                    "namespace": "qux",
                    "uid": "manifest-uid",
                    "generation": 3,
                    "creationTimestamp": "2024-05-01T10:00:00Z",
                    "resourceVersion": "777",
                    "deletionGracePeriodSeconds": 0,
                    "deletionTimestamp": "2024-05-02T10:00:00Z",
                    "annotations": {FEED_PROTECTION_ANNOTATION: "referred by subscriptions"},
                },
                "spec": {"replicas": 6},
            })
        );
    }

    #[test]
    fn transform_removes_what_the_manifest_lacks() {
        let manifest = json!({
            "metadata": {"name": "m", "resourceVersion": "5"},
            "template": {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "c", "uid": "old", "deletionTimestamp": "x", "annotations": {"a": "b"}},
            },
        });
        let obj = manifest_to_object(&manifest).unwrap();
        assert_eq!(
            obj["metadata"],
            json!({"name": "c", "generation": 0, "resourceVersion": "5", "annotations": {"a": "b"}})
        );
        let no_annotations = json!({"metadata": {}, "template": {"kind": "ConfigMap"}});
        let obj = manifest_to_object(&no_annotations).unwrap();
        assert!(obj["metadata"].get("annotations").is_none());
    }

    #[test]
    fn transform_rejects_broken_templates() {
        assert!(manifest_to_object(&json!({"metadata": {}})).is_err());
        assert!(manifest_to_object(&json!({"template": "x"})).is_err());
        let err = manifest_to_object(&json!({"template": {"metadata": {}}})).unwrap_err();
        assert!(err.to_string().contains("Kind"));
    }

    // ---- lists and watches --------------------------------------------------------------------

    fn labels_of_list(
        label: Option<&str>,
        field: Option<&str>,
        kind: &str,
        ns: Option<&str>,
    ) -> String {
        list_selectors(label, field, kind, ns)
            .unwrap()
            .label_selector
    }

    #[test]
    fn list_selectors_translate_names_to_manifest_labels() {
        assert_eq!(
            labels_of_list(None, None, "Deployment", None),
            "apps.clusternet.io/config.kind=Deployment"
        );
        assert_eq!(
            labels_of_list(
                Some("app=nginx"),
                Some("metadata.name=my-nginx"),
                "Deployment",
                Some("qux")
            ),
            "app=nginx,apps.clusternet.io/config.name=my-nginx,\
             apps.clusternet.io/config.kind=Deployment,apps.clusternet.io/config.namespace=qux"
        );
        assert_eq!(
            labels_of_list(Some(""), Some(""), "Pod", Some("")),
            "apps.clusternet.io/config.kind=Pod"
        );
        let names = |fs: &str| parse_field_selector(fs).unwrap().name_labels.join(",");
        assert_eq!(names("metadata.name=a"), "apps.clusternet.io/config.name=a");
        assert_eq!(
            names("metadata.name==a"),
            "apps.clusternet.io/config.name==a"
        );
        assert_eq!(
            names("metadata.name!=a"),
            "apps.clusternet.io/config.name!=a"
        );
        assert_eq!(names(""), "");
        assert_eq!(
            names("metadata.name!=b,metadata.name=a"),
            "apps.clusternet.io/config.name!=b,apps.clusternet.io/config.name=a"
        );
    }

    #[test]
    fn other_field_terms_become_object_filters() {
        // kubectl describe's Event query
        let s = list_selectors(
            None,
            Some(
                "involvedObject.name=web,involvedObject.namespace=demo,\
                 involvedObject.kind=Deployment,involvedObject.uid=u-1",
            ),
            "Event",
            Some("demo"),
        )
        .unwrap();
        assert_eq!(
            s.label_selector,
            "apps.clusternet.io/config.kind=Event,apps.clusternet.io/config.namespace=demo"
        );
        assert_eq!(s.fields.requirements.len(), 4);
        let event = |name: &str, uid: &str| {
            json!({"kind": "Event", "metadata": {"name": "e", "namespace": "demo"},
                   "involvedObject": {"kind": "Deployment", "name": name, "namespace": "demo", "uid": uid}})
        };
        assert!(s.fields.matches(&event("web", "u-1")));
        assert!(!s.fields.matches(&event("web", "u-2")));
        assert!(!s.fields.matches(&event("api", "u-1")));

        // names go to the labels, the rest to the filter, in one selector
        let s = list_selectors(
            None,
            Some("metadata.name=web,metadata.namespace!=kube-system"),
            "Deployment",
            None,
        )
        .unwrap();
        assert!(s.label_selector.contains("config.name=web"));
        assert_eq!(
            s.fields.requirements,
            vec![FieldRequirement {
                field: "metadata.namespace".into(),
                equals: false,
                value: "kube-system".into(),
            }]
        );
    }

    #[test]
    fn field_filters_follow_kubernetes_semantics() {
        let filter = |fs: &str| parse_field_selector(fs).unwrap().filter;
        let running = json!({"metadata": {"name": "p", "namespace": "a"},
                             "spec": {"nodeName": "n1", "replicas": 3, "paused": false},
                             "status": {"phase": "Running"}});
        let bare = json!({"metadata": {"name": "q"}});
        assert!(filter("").matches(&bare), "empty selects everything");
        assert!(filter("status.phase=Running").matches(&running));
        assert!(filter("status.phase==Running").matches(&running));
        assert!(!filter("status.phase!=Running").matches(&running));
        // a missing field is the empty string
        assert!(filter("status.phase!=Running").matches(&bare));
        assert!(!filter("status.phase=Running").matches(&bare));
        assert!(filter("spec.nodeName=").matches(&bare));
        assert!(!filter("spec.nodeName=").matches(&running));
        assert!(
            filter("metadata.namespace=").matches(&bare),
            "cluster-scoped"
        );
        // numbers and booleans as text
        assert!(filter("spec.replicas=3").matches(&running));
        assert!(filter("spec.paused=false").matches(&running));
        // every term must hold
        assert!(filter("metadata.namespace=a,status.phase=Running").matches(&running));
        assert!(!filter("metadata.namespace=b,status.phase=Running").matches(&running));
        // escaped separators are part of the value
        let odd = json!({"metadata": {"annotations": {}}, "spec": {"v": "a,b=c"}});
        assert!(filter("spec.v=a\\,b\\=c").matches(&odd));
        assert_eq!(field_value(&odd, "spec.v.deeper"), "");
        assert_eq!(field_value(&odd, "metadata.annotations"), "{}");
    }

    #[test]
    fn field_selector_syntax_errors() {
        assert!(matches!(
            parse_field_selector("metadata.name").unwrap_err(),
            ModelError::InvalidFieldSelector { .. }
        ));
        assert!(matches!(
            parse_field_selector("status.phase").unwrap_err(),
            ModelError::InvalidFieldSelector { .. }
        ));
        assert!(matches!(
            parse_field_selector("=x").unwrap_err(),
            ModelError::InvalidFieldSelector { .. }
        ));
        assert!(matches!(
            parse_field_selector("metadata.name=a b").unwrap_err(),
            ModelError::InvalidLabelValue { .. }
        ));
        assert!(matches!(
            parse_field_selector("involvedObject.name=a\\x").unwrap_err(),
            ModelError::InvalidFieldSelectorValue { .. }
        ));
        // formerly refused: every field is served now
        assert!(parse_field_selector("metadata.namespace=qux").is_ok());
        assert!(list_selectors(None, Some("status.phase=Running"), "Pod", None).is_ok());
    }

    #[test]
    fn list_and_bookmark_objects() {
        let list = list_object(
            "apps/v1",
            &list_kind("deployments", "Deployment"),
            "42",
            "",
            vec![],
        );
        assert_eq!(
            list,
            json!({"apiVersion": "apps/v1", "kind": "DeploymentList", "metadata": {"resourceVersion": "42"}, "items": []})
        );
        assert_eq!(list_kind("deployments/scale", "Scale"), "Scale");
        let list = list_object("v1", "PodList", "1", "tok", vec![json!({"kind": "Pod"})]);
        assert_eq!(list["metadata"]["continue"], "tok");
        assert_eq!(list["items"][0]["kind"], "Pod");

        assert_eq!(
            bookmark_object("apps/v1", "Deployment", "99"),
            json!({
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"resourceVersion": "99", "annotations": {"k8s.io/initial-events-end": "true"}},
            })
        );
    }

    #[test]
    fn watch_events_are_transformed() {
        let added = transform_watch_event(
            &json!({"type": "ADDED", "object": stored_manifest()}),
            "apps/v1",
            "Deployment",
        );
        assert_eq!(added["type"], "ADDED");
        assert_eq!(added["object"]["kind"], "Deployment");
        assert_eq!(added["object"]["metadata"]["resourceVersion"], "777");

        let bookmark = transform_watch_event(
            &json!({"type": "BOOKMARK", "object": {"kind": "Manifest", "metadata": {"resourceVersion": "8"}}}),
            "apps/v1",
            "Deployment",
        );
        assert_eq!(
            bookmark,
            watch_event("BOOKMARK", bookmark_object("apps/v1", "Deployment", "8"))
        );

        let status = json!({"kind": "Status", "code": 410});
        let err = transform_watch_event(
            &json!({"type": "ERROR", "object": status.clone()}),
            "v1",
            "Pod",
        );
        assert_eq!(err["object"], status);
    }

    // ---- update and scale -------------------------------------------------------------------

    #[test]
    fn update_labels_are_added_never_removed() {
        let existing = labels(&[
            ("app", "nginx"),
            ("old", "kept"),
            (CONFIG_KIND_LABEL, "Deployment"),
            (CONFIG_NAME_LABEL, "my-nginx"),
        ]);
        let merged = merge_labels_for_update(
            &existing,
            &labels(&[("app", "web"), ("new", "1")]),
            "apps",
            "v1",
            "Deployment",
            "my-nginx",
            "qux",
        );
        assert_eq!(merged["app"], "web");
        assert_eq!(merged["old"], "kept");
        assert_eq!(merged["new"], "1");
        assert_eq!(merged[CONFIG_NAMESPACE_LABEL], "qux");
        assert_eq!(merged[CONFIG_GROUP_LABEL], "apps");

        let scaled = merge_labels_for_update(
            &existing,
            &BTreeMap::new(),
            "apps",
            "v1",
            "Scale",
            "my-nginx",
            "qux",
        );
        assert_eq!(scaled[CONFIG_KIND_LABEL], "Deployment");

        let manifest = stored_manifest();
        let updated = updated_manifest(&manifest, &merged, json!({"kind": "Deployment"})).unwrap();
        assert_eq!(updated["metadata"]["resourceVersion"], "777");
        assert_eq!(updated["metadata"]["labels"]["new"], "1");
        assert_eq!(updated["template"], json!({"kind": "Deployment"}));
    }

    #[test]
    fn scale_round_trip() {
        let obj = manifest_to_object(&stored_manifest()).unwrap();
        let scale = scale_from_object(&obj, scale_api_version("apps/v1"));
        assert_eq!(
            scale,
            json!({
                "apiVersion": "autoscaling/v1",
                "kind": "Scale",
                "metadata": {
                    "name": "my-nginx",
                    "namespace": "qux",
                    "uid": "manifest-uid",
                    "resourceVersion": "777",
                    "creationTimestamp": "2024-05-01T10:00:00Z",
                },
                "spec": {"replicas": 6},
                "status": {"replicas": 0},
            })
        );
        assert_eq!(scale_api_version("apps/v1beta2"), "apps/v1beta2");
        assert_eq!(
            scale_api_version("extensions/v1beta1"),
            "extensions/v1beta1"
        );

        let mut template = stored_manifest()["template"].clone();
        apply_scale(
            &mut template,
            &json!({"kind": "Scale", "spec": {"replicas": 2}, "status": {"replicas": 9}}),
        )
        .unwrap();
        assert_eq!(template["spec"], json!({"replicas": 2}));
        assert!(template.get("status").is_none());
        apply_scale(
            &mut template,
            &json!({"apiVersion": "autoscaling/v1", "kind": "Scale", "spec": {}}),
        )
        .unwrap();
        assert_eq!(template["spec"]["replicas"], 0);
        assert!(apply_scale(&mut template, &json!({"kind": "Deployment"})).is_err());
        assert!(apply_scale(&mut template, &json!({"spec": {"replicas": "3"}})).is_err());
        assert!(apply_scale(&mut template, &json!({"spec": {"replicas": 1u64 << 40}})).is_err());
    }

    #[test]
    fn subresource_messages() {
        assert!(subresource_update_allowed("scale"));
        assert!(!subresource_update_allowed("status"));
        assert_eq!(
            subresource_update_message("deployments", "status"),
            "deployments are considered as templates, which make no sense to update templates' status"
        );
        assert_eq!(
            crd_status_message("PUT", "CronTab"),
            "Clusternet does not allow to PUT status of CronTab"
        );
    }

    // ---- versions -----------------------------------------------------------------------------

    #[test]
    fn kube_version_order() {
        let ordered = ["v2", "v1", "v1beta2", "v1beta1", "v1alpha1", "bar", "foo"];
        for (i, a) in ordered.iter().enumerate() {
            for b in &ordered[i + 1..] {
                assert_eq!(compare_kube_versions(a, b), Ordering::Greater, "{a} vs {b}");
                assert_eq!(compare_kube_versions(b, a), Ordering::Less, "{b} vs {a}");
            }
        }
        assert_eq!(compare_kube_versions("v1", "v1"), Ordering::Equal);
        assert_eq!(compare_kube_versions("v10", "v2"), Ordering::Greater);
        assert_eq!(compare_kube_versions("v2alpha1", "v1beta1"), Ordering::Less);
        assert_eq!(
            compare_kube_versions("v1beta10", "v1beta2"),
            Ordering::Greater
        );
        assert_eq!(
            compare_kube_versions("v1gamma1", "v1alpha1"),
            Ordering::Less
        );
        assert_eq!(compare_kube_versions("v1beta", "v1alpha1"), Ordering::Less);
        assert_eq!(
            compare_kube_versions("v99999999999999999999", "v1"),
            Ordering::Less
        );
        let mut versions = vec!["foo", "v1alpha1", "v1", "v1beta1", "v2", "v1beta2", "bar"];
        versions.sort_by(|a, b| compare_kube_versions(b, a));
        assert_eq!(versions, ordered);
    }

    // ---- resource selection -------------------------------------------------------------------

    fn res(name: &str, kind: &str, namespaced: bool) -> DiscoveredResource {
        DiscoveredResource {
            name: name.into(),
            singular_name: String::new(),
            namespaced,
            kind: kind.into(),
            verbs: vec!["get".into(), "list".into()],
            short_names: vec![],
            categories: vec!["all".into()],
            storage_version_hash: String::new(),
        }
    }

    fn group(
        name: &str,
        preferred: &str,
        versions: Vec<(&str, Vec<DiscoveredResource>)>,
    ) -> DiscoveredGroup {
        DiscoveredGroup {
            name: name.into(),
            preferred_version: preferred.into(),
            versions: versions
                .into_iter()
                .map(|(v, resources)| DiscoveredVersion {
                    version: v.into(),
                    resources,
                })
                .collect(),
        }
    }

    fn picked(resources: &[ShadowResource]) -> Vec<(String, String, String)> {
        resources
            .iter()
            .map(|r| (r.name.clone(), r.group.clone(), r.version.clone()))
            .collect()
    }

    fn triple(name: &str, group: &str, version: &str) -> (String, String, String) {
        (name.into(), group.into(), version.into())
    }

    #[test]
    fn normalize_matches_upstream_test() {
        let batch = group(
            "batch",
            "v1",
            vec![
                ("v2alpha1", vec![res("xyz", "Xyz", true)]),
                (
                    "v1",
                    vec![
                        res("xyz", "Xyz", true),
                        res("jobs", "Job", true),
                        res("jobs/status", "Job", true),
                    ],
                ),
                (
                    "v1beta1",
                    vec![
                        res("cronjobs", "CronJob", true),
                        res("cronjobs/status", "CronJob", true),
                        res("scenarios", "Scenario", true),
                    ],
                ),
                ("v1alpha1", vec![res("scenarios", "Scenario", true)]),
            ],
        );
        assert_eq!(
            picked(&normalize_group_resources(&batch)),
            vec![
                triple("jobs", "batch", "v1"),
                triple("jobs/status", "batch", "v1"),
                triple("xyz", "batch", "v1"),
                triple("cronjobs", "batch", "v1beta1"),
                triple("cronjobs/status", "batch", "v1beta1"),
                triple("scenarios", "batch", "v1beta1"),
            ]
        );
        // without a preferred version the highest wins
        let no_pref = group(
            "x.io",
            "",
            vec![
                ("v1beta1", vec![res("a", "A", true)]),
                ("v2", vec![res("a", "A", true)]),
            ],
        );
        assert_eq!(
            picked(&normalize_group_resources(&no_pref)),
            vec![triple("a", "x.io", "v2")]
        );
    }

    fn discovery() -> Vec<DiscoveredGroup> {
        vec![
            group(
                "",
                "v1",
                vec![(
                    "v1",
                    vec![
                        res("pods", "Pod", true),
                        res("events", "Event", true),
                        res("namespaces", "Namespace", false),
                    ],
                )],
            ),
            group(
                "apps",
                "v1",
                vec![(
                    "v1",
                    vec![
                        res("deployments", "Deployment", true),
                        res("deployments/scale", "Scale", true),
                    ],
                )],
            ),
            group(
                "events.k8s.io",
                "v1",
                vec![("v1", vec![res("events", "Event", true)])],
            ),
            group(
                "apiregistration.k8s.io",
                "v1",
                vec![(
                    "v1",
                    vec![
                        res("apiservices", "APIService", false),
                        res("apiservices/status", "APIService", false),
                    ],
                )],
            ),
            group(
                "apps.clusternet.io",
                "v1alpha1",
                vec![("v1alpha1", vec![res("manifests", "Manifest", true)])],
            ),
            group(
                "shadow",
                "v1alpha1",
                vec![("v1alpha1", vec![res("widgets", "Widget", true)])],
            ),
            group(
                "metrics.k8s.io",
                "v1beta1",
                vec![("v1beta1", vec![res("pods", "PodMetrics", true)])],
            ),
            group(
                "custom.metrics.k8s.io",
                "v1beta1",
                vec![("v1beta1", vec![res("gauges", "MetricValueList", true)])],
            ),
            group(
                "stable.example.com",
                "v1",
                vec![("v1", vec![res("crontabs", "CronTab", true)])],
            ),
        ]
    }

    fn real_priorities(group: &str, version: &str) -> Option<i32> {
        match (group, version) {
            ("", "v1") => Some(18000),
            ("apps", "v1") => Some(17800),
            ("events.k8s.io", "v1") => Some(17750),
            ("apiregistration.k8s.io", "v1") => Some(18000),
            _ => None,
        }
    }

    #[test]
    fn selection_skips_and_resolves_collisions() {
        let crds: BTreeSet<String> = ["stable.example.com".to_string()].into();
        let mut tracker = PriorityTracker::new();
        let selected = select_shadow_resources(&discovery(), &crds, &mut tracker, real_priorities);
        assert_eq!(
            picked(&selected),
            vec![
                triple("events", "", "v1"),
                triple("namespaces", "", "v1"),
                triple("pods", "", "v1"),
                triple("deployments", "apps", "v1"),
                triple("deployments/scale", "apps", "v1"),
            ]
        );
        assert_eq!(tracker.holder("events"), Some(("v1.", 18000)));
        assert!(selected.iter().all(|r| r.origin == ResourceOrigin::BuiltIn));
    }

    #[test]
    fn selection_newcomer_replaces_on_equal_or_higher_priority() {
        let crds = BTreeSet::new();
        let mut tracker = PriorityTracker::new();
        let equal = |g: &str, _: &str| (g.is_empty() || g == "events.k8s.io").then_some(100);
        let selected = select_shadow_resources(&discovery(), &crds, &mut tracker, equal);
        let events: Vec<_> = selected.iter().filter(|r| r.name == "events").collect();
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].group, "events.k8s.io");
        // CRD-owned group not excluded here, so its resource is served
        assert!(selected.iter().any(|r| r.name == "crontabs"));
        // apiservices never
        assert!(!selected.iter().any(|r| r.name.starts_with("apiservices")));
    }

    #[test]
    fn missing_apiservice_admits_without_recording() {
        let mut tracker = PriorityTracker::new();
        assert!(tracker.admit("", "v1", "events", Some(18000)));
        // not found: added even though a higher-priority holder exists, holder unchanged
        assert!(tracker.admit("events.k8s.io", "v1", "events", None));
        assert_eq!(tracker.holder("events"), Some(("v1.", 18000)));
        assert!(!tracker.admit("events.k8s.io", "v1", "events", Some(17750)));
        assert!(tracker.admit("events.k8s.io", "v1", "events", Some(18000)));
        assert_eq!(tracker.holder("events"), Some(("v1.events.k8s.io", 18000)));
        assert!(!tracker.admit("apiregistration.k8s.io", "v1", "apiservices", None));
        assert!(!tracker.admit(
            "apiregistration.k8s.io",
            "v1",
            "apiservices/status",
            Some(1)
        ));
        assert!(tracker.admit("apiregistration.k8s.io", "v1beta1", "apiservices", None));
    }

    #[test]
    fn skipped_groups() {
        for g in [
            "apps.clusternet.io",
            "proxies.clusternet.io",
            "shadow",
            "metrics.k8s.io",
            "custom.metrics.k8s.io",
        ] {
            assert!(is_skipped_group(g), "{g}");
        }
        for g in ["", "apps", "clusternet.io", "external.metrics.k8s.io"] {
            assert!(!is_skipped_group(g), "{g}");
        }
        assert_eq!(apiservice_name("", "v1"), "v1.");
        assert_eq!(apiservice_name("apps", "v1"), "v1.apps");
    }

    // ---- CRDs and discovery -------------------------------------------------------------------

    fn crontab_crd() -> Value {
        json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "crontabs.stable.example.com", "resourceVersion": "10"},
            "spec": {
                "group": "stable.example.com",
                "names": {
                    "plural": "crontabs",
                    "singular": "crontab",
                    "kind": "CronTab",
                    "listKind": "CronTabList",
                    "shortNames": ["ct"],
                },
                "scope": "Namespaced",
                "versions": [
                    {"name": "v1beta1", "served": true, "storage": false, "schema": {"openAPIV3Schema": {"type": "object"}}},
                    {
                        "name": "v1",
                        "served": true,
                        "storage": true,
                        "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
                        "subresources": {
                            "status": {},
                            "scale": {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas"},
                        },
                        "additionalPrinterColumns": [{"name": "Spec", "type": "string", "jsonPath": ".spec.cronSpec"}],
                    },
                ],
            },
            "status": {"storedVersions": ["v1"], "acceptedNames": {"plural": "crontabs", "kind": "CronTab"}},
        })
    }

    #[test]
    fn crd_resource_from_realistic_crd() {
        let r = crd_shadow_resource(&crontab_crd()).unwrap();
        assert_eq!(r.group, "stable.example.com");
        assert_eq!(r.version, "v1");
        assert_eq!(r.name, "crontabs");
        assert_eq!(r.singular_name, "crontab");
        assert_eq!(r.kind, "CronTab");
        assert!(r.namespaced);
        assert_eq!(r.short_names, vec!["ct"]);
        assert_eq!(r.verbs, CRD_VERBS.to_vec());
        assert_eq!(
            r.origin,
            ResourceOrigin::Crd {
                has_status: true,
                has_scale: true
            }
        );
        assert_eq!(
            r.storage_version_hash,
            storage_version_hash("stable.example.com", "v1", "CronTab")
        );
        assert_eq!(r.api_version(), "stable.example.com/v1");
        assert_eq!(r.list_kind(), "CronTabList");
        assert_eq!(r.manifest_name("qux", "c1"), "crontabs.qux.c1");
    }

    #[test]
    fn crd_resource_rejections() {
        let mut deleting = crontab_crd();
        deleting["metadata"]["deletionTimestamp"] = json!("2024-01-01T00:00:00Z");
        assert!(crd_shadow_resource(&deleting).is_none());

        let mut unserved = crontab_crd();
        unserved["spec"]["versions"][1]["served"] = json!(false);
        assert!(crd_shadow_resource(&unserved).is_none());

        let mut ours = crontab_crd();
        ours["spec"]["group"] = json!("apps.clusternet.io");
        assert!(crd_shadow_resource(&ours).is_none());

        let mut cluster = crontab_crd();
        cluster["spec"]["scope"] = json!("Cluster");
        cluster["spec"]["versions"][1]
            .as_object_mut()
            .unwrap()
            .remove("subresources");
        let r = crd_shadow_resource(&cluster).unwrap();
        assert!(!r.namespaced);
        assert_eq!(
            r.origin,
            ResourceOrigin::Crd {
                has_status: false,
                has_scale: false
            }
        );
        assert_eq!(r.manifest_name("ignored", "c1"), "crontabs.c1");
    }

    #[test]
    fn crd_priority_and_resync() {
        let mut tracker = PriorityTracker::new();
        assert!(tracker.admit("", "v1", "crontabs", Some(18000)));
        assert!(admit_crd(&crontab_crd(), &mut tracker, |_, _| Some(1000)).is_none());
        let mut fresh = PriorityTracker::new();
        assert!(admit_crd(&crontab_crd(), &mut fresh, |_, _| Some(1000)).is_some());

        let old = crontab_crd();
        let mut new = crontab_crd();
        assert!(!crd_update_needs_resync(&old, &new));
        new["spec"]["names"]["shortNames"] = json!(["ct", "cts"]);
        assert!(crd_update_needs_resync(&old, &new));
        new["metadata"]["deletionTimestamp"] = json!("2024-01-01T00:00:00Z");
        assert!(!crd_update_needs_resync(&old, &new));

        let crds = [crontab_crd()];
        assert_eq!(crd_groups(&crds), ["stable.example.com".to_string()].into());
    }

    #[test]
    fn discovery_document() {
        let crds = BTreeSet::new();
        let mut tracker = PriorityTracker::new();
        let mut discovered = discovery();
        discovered[1].versions[0].resources[0].short_names = vec!["deploy".into()];
        discovered[1].versions[0].resources[0].singular_name = "deployment".into();
        discovered[1].versions[0].resources[0].storage_version_hash = "8aSe+NMegvE=".into();
        let mut resources: Vec<ShadowResource> =
            select_shadow_resources(&discovered, &crds, &mut tracker, real_priorities)
                .into_iter()
                .filter(|r| r.group == "apps")
                .collect();
        resources.push(crd_shadow_resource(&crontab_crd()).unwrap());
        let doc = discovery_resource_list(&resources);
        assert_eq!(doc["kind"], "APIResourceList");
        assert_eq!(doc["groupVersion"], "shadow/v1alpha1");
        assert_eq!(
            doc["resources"],
            json!([
                {
                    "name": "deployments", "singularName": "deployment", "namespaced": true,
                    "group": "apps", "version": "v1", "kind": "Deployment", "verbs": ["get", "list"],
                    "shortNames": ["deploy"], "categories": ["clusternet.shadow"],
                    "storageVersionHash": "8aSe+NMegvE=",
                },
                {
                    "name": "deployments/scale", "singularName": "", "namespaced": true,
                    "group": "apps", "version": "v1", "kind": "Scale", "verbs": ["get", "list"],
                    "categories": ["clusternet.shadow"],
                },
                {
                    "name": "crontabs", "singularName": "crontab", "namespaced": true,
                    "kind": "CronTab", "verbs": CRD_VERBS, "shortNames": ["ct"],
                    "categories": ["clusternet.shadow"],
                    "storageVersionHash": storage_version_hash("stable.example.com", "v1", "CronTab"),
                },
                {
                    "name": "crontabs/scale", "singularName": "crontab", "namespaced": true,
                    "group": "autoscaling", "version": "v1", "kind": "Scale",
                    "verbs": ["get", "patch", "update"], "shortNames": ["ct"],
                    "categories": ["clusternet.shadow"],
                },
            ])
        );
        assert_eq!(
            shadow_api_group()["preferredVersion"]["groupVersion"],
            "shadow/v1alpha1"
        );
    }

    #[test]
    fn discovered_resource_deserializes_from_api_resource_json() {
        let r: DiscoveredResource = serde_json::from_value(json!({
            "name": "deployments", "singularName": "deployment", "namespaced": true, "kind": "Deployment",
            "verbs": ["create", "get"], "shortNames": ["deploy"], "categories": ["all"],
            "storageVersionHash": "8aSe+NMegvE=",
        }))
        .unwrap();
        assert_eq!(r.short_names, vec!["deploy"]);
        let sub: DiscoveredResource = serde_json::from_value(
            json!({"name": "deployments/scale", "group": "autoscaling", "kind": "Scale"}),
        )
        .unwrap();
        assert!(sub.verbs.is_empty());
    }

    #[test]
    fn storage_version_hashes() {
        let hex = |d: [u8; 32]| d.iter().map(|b| format!("{b:02x}")).collect::<String>();
        assert_eq!(
            hex(sha256(b"abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        // two-block message (padding crosses a block boundary)
        assert_eq!(
            hex(sha256(
                b"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"
            )),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"
        );
        assert_eq!(base64_std(b"foob"), "Zm9vYg==");
        assert_eq!(base64_std(b"fooba"), "Zm9vYmE=");
        // values served by real kube-apiservers
        assert_eq!(
            storage_version_hash("apps", "v1", "Deployment"),
            "8aSe+NMegvE="
        );
        assert_eq!(storage_version_hash("", "v1", "Pod"), "xPOwRZ+Yhw8=");
        assert_eq!(storage_version_hash("apps", "v1", ""), "");
    }
}
