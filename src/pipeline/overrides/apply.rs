//! §5.3 applying a list of OverrideConfigs to a document, and §5.5 rendering of a generic
//! Description: upstream `pkg/hub/localizer/patch.go` `applyOverrides` (RFC 6902 JSON patches,
//! RFC 7386 merge patches, §5.4 field patches of documents embedded in string fields) with the
//! three default removals, and the generic half of `ApplyOverridesToDescription`.

use json_patch::{PatchErrorKind, PatchOperation};
use serde::Serialize;
use serde_json::Value;

use super::values::coalesce_helm_values;
use super::{MAX_JSON_PATCH_OPERATIONS, OverrideError};
use crate::apis::placement::FieldChange;
use crate::apis::{FieldFormat, OverrideConfig, OverrideType};
use crate::kube_ext::json_type;
use crate::kube_ext::patch_limits::{GrowthBudget, MAX_PATCH_GROWTH};
use crate::kube_ext::yaml;

/// Indentation upstream uses when it re-serializes a patched embedded JSON document.
const FIELD_JSON_INDENT: &[u8] = b"    ";

/// §5.5 Generic: one rendered object (`Description.spec.raw[i]`) with its overrides applied.
pub fn render_generic(
    template: &Value,
    overrides: &[OverrideConfig],
) -> Result<Value, OverrideError> {
    let (g, _) = apply_docs(Doc::Json(template.clone()), Doc::blank(), overrides)?;
    g.into_value("the rendered object")
}

// ---------------------------------------------------------------------------------------------
// §5.3 Applying a list of OverrideConfigs
// ---------------------------------------------------------------------------------------------

/// Applies `overrides` (then the three default removals) to the generic document `g` (an object's
/// JSON or Helm values; blank = none yet) and the chart document `c` (HelmChart overrides; blank =
/// none yet), exactly as upstream's `applyOverrides` (§5.3). Returns the new `(g, c)`; a document
/// never touched is returned as given, a patched one as compact JSON.
pub fn apply_overrides(
    g: &str,
    c: &str,
    overrides: &[OverrideConfig],
) -> Result<(String, String), OverrideError> {
    let (g, c) = apply_docs(Doc::from_text(g), Doc::from_text(c), overrides)?;
    Ok((g.into_string(), c.into_string()))
}

/// A document being overridden. Text is parsed only when an override touches it, so an unused
/// chart document that is not JSON is passed through as upstream does.
pub(super) enum Doc {
    /// Whitespace only: "no document yet". Kept verbatim for the output.
    Blank(String),
    /// Not parsed yet.
    Text(String),
    Json(Value),
}

impl Doc {
    pub(super) fn blank() -> Self {
        Doc::Blank(" ".to_owned())
    }

    fn from_text(text: &str) -> Self {
        if text.trim().is_empty() {
            Doc::Blank(text.to_owned())
        } else {
            Doc::Text(text.to_owned())
        }
    }

    fn is_blank(&self) -> bool {
        matches!(self, Doc::Blank(_))
    }

    /// The document as JSON when it has been parsed (the traced renderer starts from JSON).
    fn as_value(&self) -> Option<&Value> {
        match self {
            Doc::Json(v) => Some(v),
            _ => None,
        }
    }

    /// The parsed document, or `None` when blank.
    fn json_mut(&mut self, what: &'static str) -> Result<Option<&mut Value>, OverrideError> {
        if let Doc::Text(text) = self {
            let value = serde_json::from_str(text).map_err(|e| OverrideError::Document {
                what,
                reason: e.to_string(),
            })?;
            *self = Doc::Json(value);
        }
        match self {
            Doc::Json(value) => Ok(Some(value)),
            _ => Ok(None),
        }
    }

    pub(super) fn into_string(self) -> String {
        match self {
            Doc::Blank(s) | Doc::Text(s) => s,
            Doc::Json(v) => v.to_string(),
        }
    }

    pub(super) fn into_value(self, what: &'static str) -> Result<Value, OverrideError> {
        match self {
            Doc::Json(v) => Ok(v),
            Doc::Text(s) => serde_json::from_str(&s).map_err(|e| OverrideError::Document {
                what,
                reason: e.to_string(),
            }),
            Doc::Blank(_) => Ok(Value::Null),
        }
    }
}

pub(super) fn internal_json_patch(name: &str, value: &str) -> OverrideConfig {
    OverrideConfig {
        name: name.to_owned(),
        value: value.to_owned(),
        type_: OverrideType::JsonPatch,
        override_chart: false,
        field_path: String::new(),
        field_format: None,
    }
}

/// Upstream's `defaultOverrideConfigs`: fields the parent's API server owns must not reach a child.
/// Each is its own patch so a missing one does not stop the others.
fn default_overrides() -> [OverrideConfig; 3] {
    [
        internal_json_patch(
            "default: remove managedFields",
            r#"[{"op":"remove","path":"/metadata/managedFields"}]"#,
        ),
        internal_json_patch(
            "default: remove uid",
            r#"[{"op":"remove","path":"/metadata/uid"}]"#,
        ),
        internal_json_patch(
            "default: remove status",
            r#"[{"op":"remove","path":"/status"}]"#,
        ),
    ]
}

const GENERIC_DOC: &str = "the document to override";
const CHART_DOC: &str = "the HelmChart override document";

pub(super) fn apply_docs(
    mut g: Doc,
    mut c: Doc,
    overrides: &[OverrideConfig],
) -> Result<(Doc, Doc), OverrideError> {
    let defaults = default_overrides();
    for rule in overrides.iter().chain(defaults.iter()) {
        apply_rule(&mut g, &mut c, rule)?;
    }
    Ok((g, c))
}

/// [`render_generic`] that also says which override set which field: the rules are applied one
/// at a time, exactly as [`apply_overrides`] applies them (the default removals last), and
/// what each one changed is attributed to it. The rendered object is the one `render_generic`
/// gives for the same rules.
pub fn render_generic_explained(
    template: &Value,
    overrides: &[super::SourcedOverride],
) -> Result<(Value, Vec<FieldChange>), OverrideError> {
    let mut g = Doc::Json(template.clone());
    let mut c = Doc::blank();
    let mut changes: std::collections::BTreeMap<String, FieldChange> = Default::default();
    for sourced in overrides {
        let before = g.as_value().cloned().unwrap_or(Value::Null);
        apply_rule(&mut g, &mut c, &sourced.config)?;
        let mut paths = Vec::new();
        changed_paths(
            &before,
            g.as_value().unwrap_or(&Value::Null),
            String::new(),
            &mut paths,
        );
        for path in paths {
            let change = FieldChange {
                path: path.clone(),
                rule: sourced.config.name.clone(),
                type_: sourced.config.type_,
                source: sourced.source.clone(),
            };
            changes.insert(path, change);
        }
    }
    for rule in &default_overrides() {
        apply_rule(&mut g, &mut c, rule)?;
    }
    let rendered = g.into_value("the rendered object")?;
    // what differs from the template as the child would get it without overrides: a field one
    // override added and another removed again, or one the default removals take out, is no
    // change
    let (baseline, _) = apply_docs(Doc::Json(template.clone()), Doc::blank(), &[])?;
    let baseline = baseline.into_value("the rendered object")?;
    let mut differ = Vec::new();
    changed_paths(&baseline, &rendered, String::new(), &mut differ);
    let changes = differ
        .iter()
        .filter_map(|path| changes.remove(path))
        .collect();
    Ok((rendered, changes))
}

/// JSON pointers of the leaves that differ between `a` and `b` (added, removed or changed);
/// objects and arrays are descended, anything else differing is one leaf.
fn changed_paths(a: &Value, b: &Value, at: String, out: &mut Vec<String>) {
    let escape = |k: &str| k.replace('~', "~0").replace('/', "~1");
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for k in keys {
                let (va, vb) = (x.get(k), y.get(k));
                if va == vb {
                    continue;
                }
                let path = format!("{at}/{}", escape(k));
                // a missing key compares as null: the arms below descend into the other side
                let null = Value::Null;
                match (va.unwrap_or(&null), vb.unwrap_or(&null)) {
                    // an explicit null on one side only
                    (Value::Null, Value::Null) => out.push(path),
                    (va, vb) => changed_paths(va, vb, path, out),
                }
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            for i in 0..x.len().max(y.len()) {
                let null = Value::Null;
                let (va, vb) = (x.get(i).unwrap_or(&null), y.get(i).unwrap_or(&null));
                if va != vb {
                    changed_paths(va, vb, format!("{at}/{i}"), out);
                }
            }
        }
        (Value::Object(x), other) | (other, Value::Object(x))
            if !x.is_empty() && other.is_null() =>
        {
            for (k, v) in x {
                changed_paths(v, &Value::Null, format!("{at}/{}", escape(k)), out);
            }
        }
        (Value::Array(x), other) | (other, Value::Array(x)) if !x.is_empty() && other.is_null() => {
            for (i, v) in x.iter().enumerate() {
                changed_paths(v, &Value::Null, format!("{at}/{i}"), out);
            }
        }
        _ if a != b => out.push(at),
        _ => {}
    }
}

/// One override rule applied to the generic document `g` and the chart document `c`.
fn apply_rule(g: &mut Doc, c: &mut Doc, rule: &OverrideConfig) -> Result<(), OverrideError> {
    if rule.value.trim().is_empty() {
        return Ok(());
    }
    let fail = |reason: String| OverrideError::Rule {
        name: rule.name.clone(),
        type_: rule.type_,
        reason,
    };
    let value = parse_value(&rule.value)
        .map_err(|e| fail(format!("value is neither JSON nor YAML: {e}")))?;

    // The first override of a blank document becomes the document.
    if rule.override_chart {
        if c.is_blank() {
            *c = Doc::Json(value);
            return Ok(());
        }
    } else if g.is_blank() && rule.type_ != OverrideType::JsonPatch {
        *g = Doc::Json(value);
        return Ok(());
    }

    match rule.type_ {
        OverrideType::Helm if rule.override_chart => {
            let chart = c.json_mut(CHART_DOC)?.ok_or_else(|| fail(no_document()))?;
            merge_patch(chart, &value).map_err(fail)?;
        }
        OverrideType::Helm => {
            let values = g
                .json_mut(GENERIC_DOC)?
                .ok_or_else(|| fail(no_document()))?;
            coalesce_helm_values(values, value).map_err(fail)?;
        }
        OverrideType::JsonPatch => {
            // A blank document stays blank; the patch is not even decoded (upstream order).
            if let Some(doc) = g.json_mut(GENERIC_DOC)? {
                json_patch_doc(doc, value).map_err(fail)?;
            }
        }
        OverrideType::MergePatch => {
            let doc = g
                .json_mut(GENERIC_DOC)?
                .ok_or_else(|| fail(no_document()))?;
            merge_patch(doc, &value).map_err(fail)?;
        }
        OverrideType::FieldJsonPatch | OverrideType::FieldMergePatch => {
            let doc = g
                .json_mut(GENERIC_DOC)?
                .ok_or_else(|| fail(no_document()))?;
            field_patch(doc, rule, value).map_err(fail)?;
        } // No "unsupported OverrideType" arm: `OverrideType` is closed, so an unknown type is
          // already rejected when the Localization/Globalization is decoded.
    }
    Ok(())
}

/// Reached only by a non-Helm override with `overrideChart: true` while the generic document is
/// still blank (upstream fails there too, with a bare "Invalid JSON Document").
fn no_document() -> String {
    "there is no document to patch yet (overrideChart only sends Helm overrides to the chart; \
     other types patch the object or values)"
        .to_owned()
}

/// An override value: JSON, or else YAML converted to JSON (`sigs.k8s.io/yaml.YAMLToJSON`).
fn parse_value(text: &str) -> Result<Value, String> {
    if let Ok(value) = serde_json::from_str(text) {
        return Ok(value);
    }
    yaml::to_json(text).map_err(|e| e.to_string())
}

fn json_to_yaml(value: &Value) -> Result<String, String> {
    yaml::to_string(value).map_err(|e| format!("cannot write the result as YAML: {e}"))
}

// --- RFC 7386 merge patch ---

fn merge_patch(doc: &mut Value, patch: &Value) -> Result<(), String> {
    if !patch.is_object() {
        return Err(format!(
            "a merge patch must be a JSON object, got {}",
            json_type(patch)
        ));
    }
    json_patch::merge(doc, patch);
    Ok(())
}

// --- RFC 6902 JSON patch ---

/// Applies a JSON patch to `doc`. Returns `Ok(false)`, leaving `doc` unchanged, when an operation
/// fails because its path does not exist (upstream's `ErrMissing` tolerance).
fn json_patch_doc(doc: &mut Value, patch: Value) -> Result<bool, String> {
    let patch: json_patch::Patch =
        serde_json::from_value(patch).map_err(|e| format!("value is not a JSON patch: {e}"))?;
    if patch.0.len() > MAX_JSON_PATCH_OPERATIONS {
        return Err(format!(
            "the allowed maximum operations in a JSON patch is {MAX_JSON_PATCH_OPERATIONS}, got {}",
            patch.0.len()
        ));
    }
    // One operation at a time on a copy: when one fails, `work` is the state it saw, which tells
    // a missing path apart from a real error. Each is charged for what it adds first: a few
    // `copy`s of the document into itself would otherwise grow it exponentially.
    let mut work = doc.clone();
    let mut budget = GrowthBudget::new(MAX_PATCH_GROWTH);
    for (index, op) in patch.0.iter().enumerate() {
        if !budget.charge(&work, op) {
            let (name, path) = describe_op(op);
            return Err(format!(
                "operation {index} ({name} {path:?}) would grow the document past {MAX_PATCH_GROWTH} bytes"
            ));
        }
        if let Err(e) = json_patch::patch(&mut work, std::slice::from_ref(op)) {
            if fails_on_missing_path(&work, op, &e.kind) {
                return Ok(false);
            }
            let (name, path) = describe_op(op);
            return Err(format!(
                "operation {index} ({name} {path:?}) failed: {}",
                e.kind
            ));
        }
    }
    *doc = work;
    Ok(true)
}

fn describe_op(op: &PatchOperation) -> (&'static str, &str) {
    match op {
        PatchOperation::Add(o) => ("add", o.path.as_str()),
        PatchOperation::Remove(o) => ("remove", o.path.as_str()),
        PatchOperation::Replace(o) => ("replace", o.path.as_str()),
        PatchOperation::Move(o) => ("move", o.path.as_str()),
        PatchOperation::Copy(o) => ("copy", o.path.as_str()),
        PatchOperation::Test(o) => ("test", o.path.as_str()),
    }
}

/// Where a JSON pointer lands in a document.
#[derive(PartialEq, Eq)]
enum Location {
    /// The containing object/array does not exist (or is a scalar), or the pointer is the root.
    NoParent,
    /// The container exists but lacks this key / index.
    Absent,
    Present,
}

fn locate(doc: &Value, pointer: &str) -> Location {
    let Some((parent, last)) = pointer.rsplit_once('/') else {
        return Location::NoParent;
    };
    let last = unescape_token(last);
    match doc.pointer(parent) {
        Some(Value::Object(map)) if map.contains_key(&last) => Location::Present,
        Some(Value::Object(_)) => Location::Absent,
        Some(Value::Array(items)) => match parse_index(&last) {
            Some(i) if i < items.len() => Location::Present,
            _ => Location::Absent,
        },
        _ => Location::NoParent,
    }
}

/// Is this failure "the path is missing" (tolerated) rather than a malformed or failing patch?
/// Mirrors evanphx/json-patch's `ErrMissing` cases: a missing container for any operation; a
/// missing key/index for operations that read it (remove, replace, move/copy `from`). Adding at an
/// out-of-range index and failed tests stay errors.
fn fails_on_missing_path(doc: &Value, op: &PatchOperation, kind: &PatchErrorKind) -> bool {
    if !matches!(
        kind,
        PatchErrorKind::InvalidPointer | PatchErrorKind::InvalidFromPointer
    ) {
        return false;
    }
    let reads = |path: &str| locate(doc, path) != Location::Present;
    let writes = |path: &str| locate(doc, path) == Location::NoParent;
    match op {
        PatchOperation::Add(o) => writes(o.path.as_str()),
        PatchOperation::Remove(o) => reads(o.path.as_str()),
        PatchOperation::Replace(o) => reads(o.path.as_str()),
        PatchOperation::Move(o) => reads(o.from.as_str()) || writes(o.path.as_str()),
        PatchOperation::Copy(o) => reads(o.from.as_str()) || writes(o.path.as_str()),
        PatchOperation::Test(o) => writes(o.path.as_str()),
    }
}

fn unescape_token(token: &str) -> String {
    token.replace("~1", "/").replace("~0", "~")
}

/// A JSON-pointer array index: decimal digits, no leading zero.
fn parse_index(token: &str) -> Option<usize> {
    let ok = !token.is_empty()
        && token.bytes().all(|b| b.is_ascii_digit())
        && (token == "0" || !token.starts_with('0'));
    if ok { token.parse().ok() } else { None }
}

// --- §5.4 field patches ---

fn field_patch(doc: &mut Value, rule: &OverrideConfig, patch: Value) -> Result<(), String> {
    let segments = field_segments(&rule.field_path)?;
    let current = find_field(doc, &rule.field_path, &segments)?;
    if current.is_empty() {
        return Ok(());
    }
    let merge = rule.type_ == OverrideType::FieldMergePatch;
    let replaced = match rule.field_format {
        Some(FieldFormat::Json) if current.trim().is_empty() => current.to_owned(),
        Some(FieldFormat::Json) => {
            let mut embedded: Value = serde_json::from_str(current)
                .map_err(|e| format!("fieldPath {:?} does not hold JSON: {e}", rule.field_path))?;
            if merge {
                merge_patch(&mut embedded, &patch)?;
                if !embedded.is_object() {
                    return Err(format!(
                        "the merged document at fieldPath {:?} is not a JSON object",
                        rule.field_path
                    ));
                }
                // serde_json's map is ordered, so keys come out sorted as Go's map marshalling does.
                to_indented_json(&embedded)?
            } else if json_patch_doc(&mut embedded, patch)? {
                to_indented_json(&embedded)?
            } else {
                // Upstream hands back the original text when a path was missing.
                current.to_owned()
            }
        }
        Some(FieldFormat::Yaml) => {
            let mut embedded = yaml::to_json(current)
                .map_err(|e| format!("fieldPath {:?} does not hold YAML: {e}", rule.field_path))?;
            if merge {
                merge_patch(&mut embedded, &patch)?;
            } else {
                json_patch_doc(&mut embedded, patch)?;
            }
            json_to_yaml(&embedded)?
        }
        // Upstream documents YAML as the default but rejects an empty fieldFormat.
        None => return Err("unsupported FieldFormatType \"\"".to_owned()),
    };
    if let Some(slot) = field_mut(doc, &segments) {
        *slot = Value::String(replaced);
    }
    Ok(())
}

/// `/a/b/0/c` -> `[a, b, 0, c]`, with JSON-pointer unescaping.
fn field_segments(path: &str) -> Result<Vec<String>, String> {
    let rest = path
        .strip_prefix('/')
        .ok_or_else(|| format!("invalid fieldPath {path:?}, should start with /"))?;
    Ok(rest.split('/').map(unescape_token).collect())
}

fn find_field<'a>(doc: &'a Value, path: &str, segments: &[String]) -> Result<&'a str, String> {
    let mut node = doc;
    for segment in segments {
        node = match node {
            Value::Object(map) => map.get(segment),
            Value::Array(items) => {
                let index = parse_index(segment).ok_or_else(|| {
                    format!("fieldPath {path:?}: {segment:?} is not an array index")
                })?;
                items.get(index)
            }
            other => {
                return Err(format!(
                    "fieldPath {path:?}: cannot look up {segment:?} in a {}",
                    json_type(other)
                ));
            }
        }
        .ok_or_else(|| format!("fieldPath {path:?}: {segment:?} not found"))?;
    }
    node.as_str().ok_or_else(|| {
        format!(
            "fieldPath {path:?} holds a {}, not a string",
            json_type(node)
        )
    })
}

fn field_mut<'a>(doc: &'a mut Value, segments: &[String]) -> Option<&'a mut Value> {
    segments.iter().try_fold(doc, |node, segment| match node {
        Value::Object(map) => map.get_mut(segment),
        Value::Array(items) => items.get_mut(parse_index(segment)?),
        _ => None,
    })
}

fn to_indented_json(value: &Value) -> Result<String, String> {
    let mut out = Vec::new();
    let formatter = serde_json::ser::PrettyFormatter::with_indent(FIELD_JSON_INDENT);
    let mut serializer = serde_json::Serializer::with_formatter(&mut out, formatter);
    value
        .serialize(&mut serializer)
        .map_err(|e| format!("cannot write the result as JSON: {e}"))?;
    String::from_utf8(out).map_err(|e| format!("cannot write the result as JSON: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apis::OverrideType;
    use crate::pipeline::overrides::fixtures::*;
    use serde_json::json;

    /// Upstream's replication example: the Globalization (600) and both Localizations (300,
    /// 600) on my-nginx. The explained rendering is the real one, and every changed field names
    /// the override that set it last (the Localization at 600 sets replicas after the one at
    /// 300 did).
    #[test]
    fn explained_rendering_names_the_override_of_each_field() {
        let globs = [globalization()];
        let locs = localizations();
        let clusters = [cluster("area1-cluster")];
        let sourced = crate::pipeline::overrides::sourced_overrides(
            &globs,
            &locs,
            "clusternet-5l82l",
            MANIFEST_UID,
            "Deployment",
            None,
            &clusters,
            true,
        )
        .expect("valid selectors");
        let configs: Vec<OverrideConfig> = sourced.iter().map(|s| s.config.clone()).collect();
        assert_eq!(configs, select(&globs, &locs, &clusters));
        let (rendered, changes) = render_generic_explained(&nginx(), &sourced).expect("renders");
        assert_eq!(
            rendered,
            render_generic(&nginx(), &configs).expect("renders")
        );

        let by_path = |p: &str| {
            changes
                .iter()
                .find(|c| c.path == p)
                .unwrap_or_else(|| panic!("{p} not explained: {changes:?}"))
        };
        let replicas = by_path("/spec/replicas");
        assert_eq!(rendered["spec"]["replicas"], json!(3));
        assert_eq!(replicas.rule, "scale-and-add-annotations");
        assert_eq!(replicas.type_, OverrideType::JsonPatch);
        assert_eq!(replicas.source.kind, "Localization");
        assert_eq!(
            replicas.source.name,
            "nginx-local-overrides-demo-higher-priority"
        );
        assert_eq!(replicas.source.priority, 600);
        let label = by_path("/metadata/labels/some-label");
        assert_eq!(label.source.kind, "Globalization");
        assert_eq!(label.source.namespace, None);
        assert_eq!(
            by_path("/spec/template/spec/containers/1/image").rule,
            "inject-new-container"
        );
        assert_eq!(
            by_path("/metadata/annotations/foo").rule,
            "scale-and-add-annotations"
        );
        // the default removals are not an override's doing
        assert!(changes.iter().all(|c| !c.path.starts_with("/status")));
        // a label the Globalization added and removed again is not a change
        assert!(
            changes
                .iter()
                .all(|c| c.path != "/metadata/labels/another-label")
        );
    }

    #[test]
    fn default_removals() {
        let (g, c) = apply_overrides(&nginx().to_string(), " ", &[]).expect("applies");
        assert_eq!(c, " ");
        let g: Value = serde_json::from_str(&g).expect("JSON");
        assert!(g["metadata"].get("managedFields").is_none());
        assert!(g["metadata"].get("uid").is_none());
        assert!(g.get("status").is_none());
        assert_eq!(g["metadata"]["resourceVersion"], json!("42"));

        // absent fields are no error
        let (g, _) = apply_overrides(r#"{"kind":"ConfigMap","metadata":{"name":"x"}}"#, " ", &[])
            .expect("applies");
        assert_eq!(g, r#"{"kind":"ConfigMap","metadata":{"name":"x"}}"#);
    }

    #[test]
    fn blank_documents() {
        // A blank G stays blank under JSON patches, even ones that are no patch (not decoded).
        let broken = rule("broken", OverrideType::JsonPatch, r#"{"not": "a patch"}"#);
        assert_eq!(
            apply_overrides(" ", " ", &[broken]).expect("untouched"),
            (" ".to_owned(), " ".to_owned())
        );
        // Blank values are skipped; a blank G takes the first non-JSON-patch value.
        let rules = [
            rule("blank", OverrideType::MergePatch, "  \n"),
            rule("first", OverrideType::MergePatch, "a: 1"),
            rule("second", OverrideType::MergePatch, r#"{"b":2}"#),
        ];
        assert_eq!(
            apply_overrides("", "", &rules).expect("applies"),
            (r#"{"a":1,"b":2}"#.to_owned(), String::new())
        );
        // A non-Helm chart override against a blank G is a readable error.
        let mut chart_first = rule("v", OverrideType::Helm, "spec: {version: 1.0.0}");
        chart_first.override_chart = true;
        let mut chart_merge = rule(
            "labels",
            OverrideType::MergePatch,
            "metadata: {labels: {a: b}}",
        );
        chart_merge.override_chart = true;
        let err = apply_overrides(" ", " ", &[chart_first, chart_merge]).expect_err("no G");
        assert!(
            err.to_string()
                .starts_with("override \"labels\" (MergePatch): there is no document to patch yet"),
            "{err}"
        );
    }

    fn config_map(conf: &str) -> Value {
        json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "server-conf", "namespace": "qux"},
            "data": {"server.conf": conf, "other": "x"}
        })
    }

    fn field_rule(
        type_: OverrideType,
        format: Option<FieldFormat>,
        path: &str,
        value: &str,
    ) -> OverrideConfig {
        OverrideConfig {
            field_path: path.to_owned(),
            field_format: format,
            ..rule("us-west-db", type_, value)
        }
    }

    #[test]
    fn field_merge_patch_json_example() {
        let cm = config_map(
            r#"{"zone_id":"ap-1","db_address":"127.0.0.1:3306","region_id":"ap","log":{"level":"info","file":"/var/log/s.log"}}"#,
        );
        let patch = field_rule(
            OverrideType::FieldMergePatch,
            Some(FieldFormat::Json),
            "/data/server.conf",
            r#"{"db_address":"10.0.0.8:3306","region_id":"us-west","zone_id":"us-west-1"}"#,
        );
        let rendered = render_generic(&cm, &[patch]).expect("renders");
        assert_eq!(
            rendered["data"]["server.conf"],
            json!(
                "{\n    \"db_address\": \"10.0.0.8:3306\",\n    \"log\": {\n        \"file\": \"/var/log/s.log\",\n        \"level\": \"info\"\n    },\n    \"region_id\": \"us-west\",\n    \"zone_id\": \"us-west-1\"\n}"
            )
        );
        assert_eq!(rendered["data"]["other"], json!("x"));
    }

    #[test]
    fn field_json_patch_and_yaml_formats() {
        let json_patch = field_rule(
            OverrideType::FieldJsonPatch,
            Some(FieldFormat::Json),
            "/data/server.conf",
            r#"[{"op":"replace","path":"/port","value":8080},{"op":"add","path":"/tags/-","value":"b"}]"#,
        );
        let rendered = render_generic(
            &config_map(r#"{"port":80,"tags":["a"]}"#),
            std::slice::from_ref(&json_patch),
        )
        .expect("renders");
        assert_eq!(
            rendered["data"]["server.conf"],
            json!(
                "{\n    \"port\": 8080,\n    \"tags\": [\n        \"a\",\n        \"b\"\n    ]\n}"
            )
        );
        // a missing path inside the embedded document leaves its text as it was
        let untouched = r#"{"tags":["a"]}"#;
        let rendered = render_generic(&config_map(untouched), &[json_patch]).expect("renders");
        assert_eq!(rendered["data"]["server.conf"], json!(untouched));

        let yaml_merge = field_rule(
            OverrideType::FieldMergePatch,
            Some(FieldFormat::Yaml),
            "/data/server.conf",
            "db: {host: 10.0.0.8}\nregion: us-west",
        );
        let rendered = render_generic(
            &config_map("db:\n  host: localhost\n  port: 3306\nregion: ap\n"),
            &[yaml_merge],
        )
        .expect("renders");
        assert_eq!(
            rendered["data"]["server.conf"],
            json!("db:\n  host: 10.0.0.8\n  port: 3306\nregion: us-west\n")
        );

        let yaml_patch = field_rule(
            OverrideType::FieldJsonPatch,
            Some(FieldFormat::Yaml),
            "/data/server.conf",
            "- {op: add, path: /items/0, value: zero}",
        );
        let rendered =
            render_generic(&config_map("items:\n- one\n"), &[yaml_patch]).expect("renders");
        assert_eq!(
            rendered["data"]["server.conf"],
            json!("items:\n- zero\n- one\n")
        );
    }

    #[test]
    fn field_patch_errors_and_empty_field() {
        let mk = |format, path: &str| {
            field_rule(OverrideType::FieldMergePatch, format, path, r#"{"a":1}"#)
        };
        let msg = |cm: &Value, r: OverrideConfig| {
            render_generic(cm, &[r]).expect_err("fails").to_string()
        };
        let cm = config_map(r#"{"a":0}"#);
        assert_eq!(
            msg(&cm, mk(None, "/data/server.conf")),
            "override \"us-west-db\" (FieldMergePatch): unsupported FieldFormatType \"\""
        );
        assert_eq!(
            msg(&cm, mk(Some(FieldFormat::Json), "data/server.conf")),
            "override \"us-west-db\" (FieldMergePatch): invalid fieldPath \"data/server.conf\", should start with /"
        );
        assert_eq!(
            msg(&cm, mk(Some(FieldFormat::Json), "/metadata")),
            "override \"us-west-db\" (FieldMergePatch): fieldPath \"/metadata\" holds a object, not a string"
        );
        assert_eq!(
            msg(&cm, mk(Some(FieldFormat::Json), "/data/missing")),
            "override \"us-west-db\" (FieldMergePatch): fieldPath \"/data/missing\": \"missing\" not found"
        );
        assert_eq!(
            msg(
                &config_map("not json"),
                mk(Some(FieldFormat::Json), "/data/server.conf")
            ),
            "override \"us-west-db\" (FieldMergePatch): fieldPath \"/data/server.conf\" does not hold JSON: expected ident at line 1 column 2"
        );
        // an empty string is left alone, whatever the format
        let empty = config_map("");
        assert_eq!(
            render_generic(&empty, &[mk(None, "/data/server.conf")]).expect("untouched"),
            empty
        );
    }

    #[test]
    fn json_patch_errors_are_readable() {
        let doc = nginx();
        let err = |value: &str| {
            render_generic(&doc, &[rule("bump", OverrideType::JsonPatch, value)])
                .expect_err("fails")
                .to_string()
        };
        assert_eq!(
            err(r#"{"op":"replace","path":"/spec/replicas","value":3}"#),
            "override \"bump\" (JSONPatch): value is not a JSON patch: invalid type: map, expected a sequence"
        );
        assert!(err(r#"[{"op":"frobnicate","path":"/spec"}]"#).starts_with(
            "override \"bump\" (JSONPatch): value is not a JSON patch: unknown variant `frobnicate`"
        ),);
        assert!(
            err("key: [unclosed")
                .starts_with("override \"bump\" (JSONPatch): value is neither JSON nor YAML: "),
        );
        assert_eq!(
            err(r#"[{"op":"test","path":"/spec/replicas","value":5}]"#),
            "override \"bump\" (JSONPatch): operation 0 (test \"/spec/replicas\") failed: value did not match"
        );
        assert_eq!(
            err(
                r#"[{"op":"replace","path":"/spec/replicas","value":5},{"op":"add","path":"/spec/template/spec/containers/7","value":{}}]"#
            ),
            "override \"bump\" (JSONPatch): operation 1 (add \"/spec/template/spec/containers/7\") failed: path is invalid"
        );
        let many = format!(
            "[{}]",
            vec![r#"{"op":"add","path":"/x","value":1}"#; MAX_JSON_PATCH_OPERATIONS + 1].join(",")
        );
        assert_eq!(
            err(&many),
            "override \"bump\" (JSONPatch): the allowed maximum operations in a JSON patch is 10000, got 10001"
        );
        let not_json = apply_overrides("{oops", " ", &[]).expect_err("bad doc");
        assert_eq!(
            not_json.to_string(),
            "the document to override is not valid JSON: key must be a string at line 1 column 2"
        );
    }

    #[test]
    fn json_patch_with_missing_path_leaves_the_document_unchanged() {
        let doc = json!({"metadata": {"name": "x"}, "spec": {"replicas": 2, "list": [1]}});
        for value in [
            // the first operation succeeds, the second misses: nothing is applied
            r#"[{"op":"replace","path":"/spec/replicas","value":5},{"op":"replace","path":"/spec/missing","value":1}]"#,
            r#"[{"op":"add","path":"/nope/deeper","value":1}]"#,
            r#"[{"op":"remove","path":"/spec/list/3"}]"#,
            r#"[{"op":"move","from":"/spec/gone","path":"/spec/here"}]"#,
            r#"[{"op":"copy","from":"/spec/replicas","path":"/a/b"}]"#,
            r#"[{"op":"add","path":"/metadata/name/x","value":1}]"#,
        ] {
            let rendered = render_generic(&doc, &[rule("miss", OverrideType::JsonPatch, value)])
                .unwrap_or_else(|e| panic!("{value}: {e}"));
            assert_eq!(rendered, doc, "{value}");
        }
    }

    #[test]
    fn merge_patch_and_yaml_values() {
        let doc = json!({"metadata": {"name": "x", "labels": {"a": "1", "b": "2"}}, "spec": {"replicas": 2}});
        let rules = [
            rule(
                "yaml",
                OverrideType::MergePatch,
                "metadata:\n  labels:\n    b: null\n    c: '3'\nspec:\n  replicas: 4\n",
            ),
            rule(
                "yaml-anchors",
                OverrideType::MergePatch,
                "defaults: &d {x: 1}\nspec:\n  <<: *d\n  y: 2\n",
            ),
        ];
        assert_eq!(
            render_generic(&doc, &rules).expect("renders"),
            json!({
                "metadata": {"name": "x", "labels": {"a": "1", "c": "3"}},
                "spec": {"replicas": 4, "x": 1, "y": 2},
                "defaults": {"x": 1}
            })
        );
        let err = render_generic(&doc, &[rule("scalar", OverrideType::MergePatch, "5")])
            .expect_err("not an object");
        assert_eq!(
            err.to_string(),
            "override \"scalar\" (MergePatch): a merge patch must be a JSON object, got number"
        );
    }

    #[test]
    fn apply_overrides_strings_and_untouched_chart_text() {
        let mut chart_rule = rule("v", OverrideType::Helm, "spec: {version: 9.1.8}");
        chart_rule.override_chart = true;
        // C non-blank: chart Helm overrides merge into it
        let (g, c) = apply_overrides(
            r#"{"spec":{"replicas":1}}"#,
            r#"{"spec":{"version":"9.2.0","chart":"mysql"}}"#,
            &[chart_rule],
        )
        .expect("applies");
        assert_eq!(g, r#"{"spec":{"replicas":1}}"#);
        assert_eq!(c, r#"{"spec":{"chart":"mysql","version":"9.1.8"}}"#);
        // an untouched chart document is passed through even when it is not JSON
        let (_, c) = apply_overrides("{}", "not json", &[]).expect("applies");
        assert_eq!(c, "not json");
    }
}
