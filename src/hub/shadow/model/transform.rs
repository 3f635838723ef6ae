//! §3.4 the Manifest -> object transform, and the shaping of lists and watches including label and
//! field selectors. Port of upstream `pkg/hub/registry/shadow/template/{transformer.go,wrapper.go}`
//! (`transformManifest`) and of `REST.List` / `convertListOptionsToLabels`.

use serde_json::{Map, Value, json};

use super::*;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hub::shadow::model::fixtures::stored_manifest;

    // ---- transform ----------------------------------------------------------------------------

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
}
