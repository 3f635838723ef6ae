//! Overrides: which Localization/Globalization rules apply to a rendered object, and how they
//! patch it (docs/spec/deployer.md §5.2-§5.5). Pure functions, no API server: the Description
//! renderer hands in informer state and writes the results into `Description.spec.raw` /
//! `chartRaw`.
//!
//! Implements Clusternet's `pkg/hub/localizer`: `getOverrides` (selection and ordering) and
//! `applyOverrides` in `patch.go` (Helm value coalescing, RFC 6902 JSON patches, RFC 7386 merge
//! patches, field patches of documents embedded in string fields), plus the per-Description-type
//! rendering rules of `ApplyOverridesToDescription`.
//!
//! Behaviour kept from upstream on purpose, because users' override objects depend on it:
//!
//! - Three default JSON patches (remove `/metadata/managedFields`, `/metadata/uid`, `/status`) run
//!   after the user's overrides, also on Helm values (so a top-level Helm value named `status` is
//!   dropped, as upstream does).
//! - A blank document is replaced by the first override's value (except JSONPatch, which leaves a
//!   blank document alone); `overrideChart` only routes `Helm` overrides to the chart document
//!   once it is non-blank, every other type patches the generic document.
//! - A JSON patch whose operation fails because its path does not exist leaves the document
//!   unchanged without error (upstream tolerates `ErrMissing` so a Globalization written for
//!   several kinds of objects does not break the ones lacking a field).
//! - `ApplyNow`/`ApplyLater` do not change what is rendered, only when re-rendering is triggered
//!   (that is the override controllers' business, §5.1), so nothing here looks at the policy.
//!
//! Deliberate differences (each only turns an upstream failure or silent corruption into a clear
//! result): merge patches must be JSON objects (upstream rejects null and scalars and would replace
//! the whole object by an array); field paths decode `~1`/`~0` like JSON pointers; override values
//! are read as JSON first and as YAML only if that fails (so tab-indented JSON works). Upstream's
//! "unsupported OverrideType" cannot occur: `OverrideType` is closed, so an unknown type is
//! rejected when the Localization/Globalization is decoded.

use std::borrow::Borrow;
use std::collections::BTreeMap;

use json_patch::{PatchErrorKind, PatchOperation};
use kube::ResourceExt;
use serde::Serialize;
use serde_json::{Map, Value};

use crate::apis::{Feed, FieldFormat, Globalization, Localization, OverrideConfig, OverrideType};
use crate::kube_ext::labels::Selector;
use crate::kube_ext::yaml;

/// Upstream's limit on operations in one JSON patch (`maxJSONPatchOperations`).
pub const MAX_JSON_PATCH_OPERATIONS: usize = 10_000;

/// Indentation upstream uses when it re-serializes a patched embedded JSON document.
const FIELD_JSON_INDENT: &[u8] = b"    ";

/// What went wrong while selecting or applying overrides. Messages are written for a user reading
/// an object's status: they name the override (or Globalization) and the problem.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OverrideError {
    /// One override rule could not be applied.
    #[error("override {name:?} ({type_}): {reason}")]
    Rule {
        /// The rule's `name`.
        name: String,
        /// The rule's `type`.
        type_: OverrideType,
        /// What is wrong.
        reason: String,
    },
    /// A document handed in to be overridden is not JSON.
    #[error("{what} is not valid JSON: {reason}")]
    Document {
        /// Which document (the object, the chart overrides, ...).
        what: &'static str,
        /// The parser's complaint.
        reason: String,
    },
    /// A Globalization's `clusterAffinity` is not a valid label selector.
    #[error("Globalization {name:?}: invalid clusterAffinity: {reason}")]
    ClusterAffinity {
        /// The Globalization's name.
        name: String,
        /// What is wrong with the selector.
        reason: String,
    },
}

// ---------------------------------------------------------------------------------------------
// §5.2 Which overrides apply
// ---------------------------------------------------------------------------------------------

/// The override rules for one rendered object in one cluster namespace, in application order
/// (§5.2): matching Globalizations, then matching Localizations of `namespace`, each sorted by
/// priority (unset = 500), then creation time, then name; objects being deleted are skipped.
///
/// An override object matches when either
/// - it carries the reference label `<feed_uid>: <feed_kind>` (upstream's only mode; the override
///   controllers write these labels, §5.1), or
/// - `feed` is given and equals its `spec.feed` (group/version, kind and name equal; the namespace
///   equal when `spec.feed` names one, as Manifest lookup does). Our controllers may render before
///   the override controllers have put reference labels on the override objects (a new override,
///   or a re-created Manifest with a new UID), and the reference itself says the same thing the
///   label is derived from. `feed` must be spelled as users write `spec.feed`, e.g.
///   `apps.clusternet.io/v1alpha1` `HelmChart` for charts.
///
/// A Globalization with `clusterAffinity` applies only if at least one of the ManagedClusters in
/// `namespace` (their labels are `clusters_in_namespace_labels`) matches it. A Globalization whose
/// selector is invalid is skipped with a warning here; [`try_applicable_overrides`] reports it as
/// an error instead, as upstream does (it fails the whole render).
pub fn applicable_overrides<G, L>(
    globalizations: &[G],
    localizations: &[L],
    namespace: &str,
    feed_uid: &str,
    feed_kind: &str,
    feed: Option<&Feed>,
    clusters_in_namespace_labels: &[BTreeMap<String, String>],
) -> Vec<OverrideConfig>
where
    G: Borrow<Globalization>,
    L: Borrow<Localization>,
{
    select_overrides(
        globalizations,
        localizations,
        namespace,
        feed_uid,
        feed_kind,
        feed,
        clusters_in_namespace_labels,
        false,
    )
    .unwrap_or_default()
}

/// [`applicable_overrides`], but a Globalization with an invalid `clusterAffinity` is an error
/// naming it (upstream's behaviour), for callers that surface it in a status.
pub fn try_applicable_overrides<G, L>(
    globalizations: &[G],
    localizations: &[L],
    namespace: &str,
    feed_uid: &str,
    feed_kind: &str,
    feed: Option<&Feed>,
    clusters_in_namespace_labels: &[BTreeMap<String, String>],
) -> Result<Vec<OverrideConfig>, OverrideError>
where
    G: Borrow<Globalization>,
    L: Borrow<Localization>,
{
    select_overrides(
        globalizations,
        localizations,
        namespace,
        feed_uid,
        feed_kind,
        feed,
        clusters_in_namespace_labels,
        true,
    )
}

#[allow(clippy::too_many_arguments)]
fn select_overrides<G, L>(
    globalizations: &[G],
    localizations: &[L],
    namespace: &str,
    feed_uid: &str,
    feed_kind: &str,
    feed: Option<&Feed>,
    clusters_in_namespace_labels: &[BTreeMap<String, String>],
    strict: bool,
) -> Result<Vec<OverrideConfig>, OverrideError>
where
    G: Borrow<Globalization>,
    L: Borrow<Localization>,
{
    let references = |labels: &BTreeMap<String, String>, spec_feed: &Feed| {
        (!feed_uid.is_empty() && labels.get(feed_uid).map(String::as_str) == Some(feed_kind))
            || feed.is_some_and(|f| feed_matches(spec_feed, f))
    };

    let mut globs: Vec<&Globalization> = Vec::new();
    for glob in globalizations.iter().map(Borrow::borrow) {
        if glob.metadata.deletion_timestamp.is_some() || !references(glob.labels(), &glob.spec.feed)
        {
            continue;
        }
        if let Some(affinity) = &glob.spec.cluster_affinity {
            let selector = match Selector::from_label_selector_unvalidated(affinity) {
                Ok(selector) => selector,
                Err(reason) => {
                    let err = OverrideError::ClusterAffinity {
                        name: glob.name_any(),
                        reason: reason.to_string(),
                    };
                    if strict {
                        return Err(err);
                    }
                    tracing::warn!(error = %err, "skipping Globalization");
                    continue;
                }
            };
            if !clusters_in_namespace_labels
                .iter()
                .any(|labels| selector.matches(labels))
            {
                continue;
            }
        }
        globs.push(glob);
    }
    globs.sort_by_key(|g| order_key(g.spec.effective_priority(), &g.metadata));

    let mut locs: Vec<&Localization> = localizations
        .iter()
        .map(Borrow::borrow)
        .filter(|l| {
            l.metadata.namespace.as_deref() == Some(namespace)
                && l.metadata.deletion_timestamp.is_none()
                && references(l.labels(), &l.spec.feed)
        })
        .collect();
    locs.sort_by_key(|l| order_key(l.spec.effective_priority(), &l.metadata));

    // Globalizations first, so any Localization (applied later) wins over any Globalization.
    Ok(globs
        .iter()
        .flat_map(|g| g.spec.overrides.iter())
        .chain(locs.iter().flat_map(|l| l.spec.overrides.iter()))
        .cloned()
        .collect())
}

/// Priority, then creation time, then name. Upstream compares only the seconds field of the
/// creation time, which makes the order of same-priority objects arbitrary; the full timestamp
/// and the name make it deterministic.
fn order_key(
    priority: i32,
    meta: &kube::api::ObjectMeta,
) -> (i32, Option<k8s_openapi::jiff::Timestamp>, String) {
    (
        priority,
        meta.creation_timestamp.as_ref().map(|t| t.0),
        meta.name.clone().unwrap_or_default(),
    )
}

/// Does the override's `spec.feed` name the rendered object `object`? Same rule as Manifest lookup
/// (`feeds::manifest_selector`): a feed without namespace matches every namespace.
fn feed_matches(spec_feed: &Feed, object: &Feed) -> bool {
    spec_feed.api_version == object.api_version
        && spec_feed.kind == object.kind
        && spec_feed.name == object.name
        && (spec_feed.namespace.is_empty() || spec_feed.namespace == object.namespace)
}

// ---------------------------------------------------------------------------------------------
// §5.5 Rendering per Description type
// ---------------------------------------------------------------------------------------------

/// Result of rendering one chart of a Helm Description (§5.5 Helm).
#[derive(Debug, Clone, PartialEq)]
pub struct HelmRendering {
    /// `Description.spec.raw[i]`: the overridden Helm values as JSON, or a single space when no
    /// value override applies (upstream writes the space explicitly).
    pub values: String,
    /// `Description.spec.chartRaw[i]`: the HelmChart object with the chart overrides merged in.
    pub chart: Value,
}

/// §5.5 Generic: one rendered object (`Description.spec.raw[i]`) with its overrides applied.
pub fn render_generic(
    template: &Value,
    overrides: &[OverrideConfig],
) -> Result<Value, OverrideError> {
    let (g, _) = apply_docs(Doc::Json(template.clone()), Doc::blank(), overrides)?;
    g.into_value("the rendered object")
}

/// §5.5 Helm: the values and chart object for one HelmChart, given its overrides (those selected
/// with the HelmChart's UID/feed). Chart overrides can never change `spec.chart` or
/// `spec.targetNamespace`: those decide which release is installed where.
pub fn render_helm(
    chart: &Value,
    overrides: &[OverrideConfig],
) -> Result<HelmRendering, OverrideError> {
    let (values, chart_overrides) = apply_docs(Doc::blank(), Doc::blank(), overrides)?;

    // Two separate patches: in one patch a missing /spec/chart would make the whole patch a no-op
    // and let a targetNamespace override through.
    let protect = [
        internal_json_patch(
            "keep the chart name",
            r#"[{"op":"remove","path":"/spec/chart"}]"#,
        ),
        internal_json_patch(
            "keep the target namespace",
            r#"[{"op":"remove","path":"/spec/targetNamespace"}]"#,
        ),
    ];
    let (chart_overrides, _) = apply_docs(chart_overrides, Doc::blank(), &protect)?;

    let merge = [OverrideConfig {
        name: "chart overrides".to_owned(),
        value: chart_overrides.into_string(),
        type_: OverrideType::MergePatch,
        override_chart: false,
        field_path: String::new(),
        field_format: None,
    }];
    let (chart, _) = apply_docs(Doc::Json(chart.clone()), Doc::blank(), &merge)?;
    Ok(HelmRendering {
        values: values.into_string(),
        chart: chart.into_value("the HelmChart")?,
    })
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
enum Doc {
    /// Whitespace only: "no document yet". Kept verbatim for the output.
    Blank(String),
    /// Not parsed yet.
    Text(String),
    Json(Value),
}

impl Doc {
    fn blank() -> Self {
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

    fn into_string(self) -> String {
        match self {
            Doc::Blank(s) | Doc::Text(s) => s,
            Doc::Json(v) => v.to_string(),
        }
    }

    fn into_value(self, what: &'static str) -> Result<Value, OverrideError> {
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

fn internal_json_patch(name: &str, value: &str) -> OverrideConfig {
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

fn apply_docs(
    mut g: Doc,
    mut c: Doc,
    overrides: &[OverrideConfig],
) -> Result<(Doc, Doc), OverrideError> {
    let defaults = default_overrides();
    for rule in overrides.iter().chain(defaults.iter()) {
        if rule.value.trim().is_empty() {
            continue;
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
                c = Doc::Json(value);
                continue;
            }
        } else if g.is_blank() && rule.type_ != OverrideType::JsonPatch {
            g = Doc::Json(value);
            continue;
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
    }
    Ok((g, c))
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

// --- Helm ---

/// `G = coalesce(value over G)`: Helm's `chartutil.CoalesceTables(override, current)`.
fn coalesce_helm_values(current: &mut Value, override_: Value) -> Result<(), String> {
    let override_ = match override_ {
        // Helm's CoalesceTables(nil, src) returns src: nothing changes.
        Value::Null => return Ok(()),
        Value::Object(map) => map,
        other => {
            return Err(format!(
                "Helm values must be a map, got {}",
                json_type(&other)
            ));
        }
    };
    let current_map = match std::mem::take(current) {
        Value::Null => Map::new(),
        Value::Object(map) => map,
        other => {
            let kind = json_type(&other);
            *current = other;
            return Err(format!(
                "the values being overridden are a {kind}, not a map"
            ));
        }
    };
    let mut result = override_;
    coalesce_tables(&mut result, current_map);
    *current = Value::Object(result);
    Ok(())
}

/// Helm's table coalescing with `dst` authoritative (`coalesceTablesFullKey`, merge=false):
/// - a key only in `src` is copied;
/// - a `null` in `dst` deletes a key `src` has (a `null` for a key `src` lacks stays, so Helm can
///   still use it to delete a chart default later);
/// - two tables merge recursively;
/// - otherwise `dst` wins, including a scalar over a table and a table over a scalar.
fn coalesce_tables(dst: &mut Map<String, Value>, src: Map<String, Value>) {
    for (key, src_value) in src {
        match dst.get_mut(&key) {
            None => {
                dst.insert(key, src_value);
            }
            Some(Value::Null) => {
                dst.remove(&key);
            }
            Some(Value::Object(dst_table)) => {
                if let Value::Object(src_table) = src_value {
                    coalesce_tables(dst_table, src_table);
                }
            }
            Some(_) => {}
        }
    }
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
    // a missing path apart from a real error.
    let mut work = doc.clone();
    for (index, op) in patch.0.iter().enumerate() {
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

fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
    use serde_json::json;

    const MANIFEST_UID: &str = "5b4c1e0e-2f7a-4a1b-9c1d-0a6c5d2e9f10";

    fn rule(name: &str, type_: OverrideType, value: &str) -> OverrideConfig {
        OverrideConfig {
            name: name.to_owned(),
            value: value.to_owned(),
            type_,
            override_chart: false,
            field_path: String::new(),
            field_format: None,
        }
    }

    fn nginx() -> Value {
        json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {
                "name": "my-nginx",
                "namespace": "foo",
                "uid": "0f0e0d0c-0000-4000-8000-000000000001",
                "resourceVersion": "42",
                "managedFields": [{"manager": "kubectl", "operation": "Update"}],
                "labels": {"app": "nginx"}
            },
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": "nginx"}},
                "template": {
                    "metadata": {"labels": {"app": "nginx"}},
                    "spec": {"containers": [
                        {"name": "nginx", "image": "nginx:1.14.2", "ports": [{"containerPort": 80}]}
                    ]}
                }
            },
            "status": {"replicas": 2, "readyReplicas": 2}
        })
    }

    /// Upstream `examples/replication-scheduling/localization.yaml` (the my-nginx part), labelled
    /// as the Localization controller labels them.
    fn localizations() -> Vec<Localization> {
        let yaml = format!(
            r#"
apiVersion: apps.clusternet.io/v1alpha1
kind: Localization
metadata:
  name: nginx-local-overrides-demo-higher-priority
  namespace: clusternet-5l82l
  creationTimestamp: "2024-05-01T10:00:00Z"
  labels: {{"{MANIFEST_UID}": Deployment}}
spec:
  priority: 600
  feed: {{apiVersion: apps/v1, kind: Deployment, name: my-nginx, namespace: foo}}
  overrides:
    - name: scale-and-add-annotations
      type: JSONPatch
      value: |-
        [
          {{"path": "/spec/replicas", "value": 3, "op": "replace"}},
          {{"path": "/metadata/annotations", "value": {{"foo":"bar"}}, "op": "add"}}
        ]
    - name: change-container-image-and-name
      type: JSONPatch
      value: |-
        - path: "/spec/template/spec/containers/0/image"
          value: "nginx:1.14.0-alpine"
          op: replace
        - path: "/spec/template/spec/containers/0/name"
          value: "nginx-container"
          op: replace
    - name: inject-new-container
      type: JSONPatch
      value: |-
        - op: add
          path: "/spec/template/spec/containers/1"
          value:
            name: "redis-container"
            image: "redis:6.2.5"
---
apiVersion: apps.clusternet.io/v1alpha1
kind: Localization
metadata:
  name: nginx-local-overrides-demo-lower-priority
  namespace: clusternet-5l82l
  creationTimestamp: "2024-05-01T09:00:00Z"
  labels: {{"{MANIFEST_UID}": Deployment}}
spec:
  priority: 300
  feed: {{apiVersion: apps/v1, kind: Deployment, name: my-nginx, namespace: foo}}
  overrides:
    - name: add-update-labels
      type: MergePatch
      value: '{{"metadata":{{"labels":{{"deployed-in-cluster":"clusternet-5l82l"}}}}}}'
    - name: scale-replicas
      type: JSONPatch
      value: '[{{"path": "/spec/replicas", "value": 1, "op": "replace"}}]'
"#
        );
        yaml::from_str_documents(&yaml).expect("Localization")
    }

    /// Upstream `examples/replication-scheduling/globalization.yaml` (my-nginx), with the
    /// clusterAffinity of cli.md §3.
    fn globalization() -> Globalization {
        let yaml = format!(
            r#"
apiVersion: apps.clusternet.io/v1alpha1
kind: Globalization
metadata:
  name: nginx-global-overrides-demo
  creationTimestamp: "2024-05-01T08:00:00Z"
  labels: {{"{MANIFEST_UID}": Deployment}}
spec:
  priority: 600
  clusterAffinity:
    matchExpressions:
      - {{key: clusters.clusternet.io/cluster-name, operator: In, values: [area1-cluster, area2-cluster]}}
  feed: {{apiVersion: apps/v1, kind: Deployment, name: my-nginx, namespace: foo}}
  overrides:
    - name: add-update-labels
      type: MergePatch
      value: |-
        metadata:
          labels:
            some-label: some-value
            another-label: another-value
    - name: remove-labels
      type: MergePatch
      value: '{{"metadata":{{"labels":{{"another-label":null,"some-other-label":null}}}}}}'
"#
        );
        yaml::from_str(&yaml).expect("Globalization")
    }

    fn cluster(name: &str) -> BTreeMap<String, String> {
        BTreeMap::from([(
            "clusters.clusternet.io/cluster-name".to_owned(),
            name.to_owned(),
        )])
    }

    fn select(
        globs: &[Globalization],
        locs: &[Localization],
        clusters: &[BTreeMap<String, String>],
    ) -> Vec<OverrideConfig> {
        try_applicable_overrides(
            globs,
            locs,
            "clusternet-5l82l",
            MANIFEST_UID,
            "Deployment",
            None,
            clusters,
        )
        .expect("valid selectors")
    }

    fn names(overrides: &[OverrideConfig]) -> Vec<&str> {
        overrides.iter().map(|o| o.name.as_str()).collect()
    }

    fn expected_nginx(with_global_label: bool) -> Value {
        let mut labels = json!({"app": "nginx", "deployed-in-cluster": "clusternet-5l82l"});
        if with_global_label {
            labels["some-label"] = json!("some-value");
        }
        json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {
                "name": "my-nginx",
                "namespace": "foo",
                "resourceVersion": "42",
                "labels": labels,
                "annotations": {"foo": "bar"}
            },
            "spec": {
                "replicas": 3,
                "selector": {"matchLabels": {"app": "nginx"}},
                "template": {
                    "metadata": {"labels": {"app": "nginx"}},
                    "spec": {"containers": [
                        {"name": "nginx-container", "image": "nginx:1.14.0-alpine", "ports": [{"containerPort": 80}]},
                        {"name": "redis-container", "image": "redis:6.2.5"}
                    ]}
                }
            }
        })
    }

    #[test]
    fn replication_example_with_matching_cluster() {
        let overrides = select(
            &[globalization()],
            &localizations(),
            &[cluster("area1-cluster")],
        );
        assert_eq!(
            names(&overrides),
            [
                "add-update-labels",
                "remove-labels",
                "add-update-labels",
                "scale-replicas",
                "scale-and-add-annotations",
                "change-container-image-and-name",
                "inject-new-container"
            ]
        );
        let rendered = render_generic(&nginx(), &overrides).expect("renders");
        assert_eq!(rendered, expected_nginx(true));
    }

    #[test]
    fn globalization_affinity_needs_a_matching_cluster_in_the_namespace() {
        for clusters in [vec![], vec![cluster("area3-cluster")]] {
            let overrides = select(&[globalization()], &localizations(), &clusters);
            assert_eq!(overrides.len(), 5, "only the Localizations' rules");
            let rendered = render_generic(&nginx(), &overrides).expect("renders");
            assert_eq!(rendered, expected_nginx(false));
        }
        let overrides = select(
            &[globalization()],
            &[],
            &[cluster("area3-cluster"), cluster("area2-cluster")],
        );
        assert_eq!(names(&overrides), ["add-update-labels", "remove-labels"]);
    }

    #[test]
    fn no_affinity_applies_everywhere_and_invalid_affinity_is_an_error() {
        let mut glob = globalization();
        glob.spec.cluster_affinity = None;
        assert_eq!(select(&[glob.clone()], &[], &[]).len(), 2);

        glob.spec.cluster_affinity = Some(LabelSelector {
            match_expressions: Some(vec![
                k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement {
                    key: "clusters.clusternet.io/cluster-name".to_owned(),
                    operator: "in".to_owned(),
                    values: Some(vec!["a".to_owned()]),
                },
            ]),
            match_labels: None,
        });
        let run = |strict: bool| {
            let args = (
                std::slice::from_ref(&glob),
                &[] as &[Localization],
                "clusternet-5l82l",
            );
            if strict {
                try_applicable_overrides(
                    args.0,
                    args.1,
                    args.2,
                    MANIFEST_UID,
                    "Deployment",
                    None,
                    &[cluster("a")],
                )
            } else {
                Ok(applicable_overrides(
                    args.0,
                    args.1,
                    args.2,
                    MANIFEST_UID,
                    "Deployment",
                    None,
                    &[cluster("a")],
                ))
            }
        };
        assert_eq!(run(false), Ok(vec![]), "lenient: skipped");
        let err = run(true).expect_err("invalid operator");
        assert_eq!(
            err.to_string(),
            "Globalization \"nginx-global-overrides-demo\": invalid clusterAffinity: \"in\" is not a valid label selector operator"
        );
    }

    #[test]
    fn localizations_beat_globalizations_whatever_the_priority() {
        let mut glob = globalization();
        glob.spec.priority = 1000;
        glob.spec.cluster_affinity = None;
        glob.spec.overrides = vec![rule(
            "global-replicas",
            OverrideType::MergePatch,
            r#"{"spec":{"replicas":9}}"#,
        )];
        let mut loc = localizations().remove(1);
        loc.spec.priority = 100;
        loc.spec.overrides = vec![rule(
            "local-replicas",
            OverrideType::MergePatch,
            r#"{"spec":{"replicas":4}}"#,
        )];
        let overrides = select(&[glob], &[loc], &[]);
        assert_eq!(names(&overrides), ["global-replicas", "local-replicas"]);
        let rendered = render_generic(&nginx(), &overrides).expect("renders");
        assert_eq!(rendered["spec"]["replicas"], json!(4));
    }

    #[test]
    fn selection_order_skips_and_other_namespaces() {
        let base = localizations().remove(1);
        let mk = |name: &str, priority: i32, created: &str| {
            let mut l = base.clone();
            l.metadata.name = Some(name.to_owned());
            l.spec.priority = priority;
            l.metadata.creation_timestamp =
                Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    created.parse().expect("timestamp"),
                ));
            l.spec.overrides = vec![rule(name, OverrideType::MergePatch, "{}")];
            l
        };
        let mut deleting = mk("deleting", 100, "2024-01-01T00:00:00Z");
        deleting.metadata.deletion_timestamp = deleting.metadata.creation_timestamp.clone();
        let mut elsewhere = mk("elsewhere", 100, "2024-01-01T00:00:00Z");
        elsewhere.metadata.namespace = Some("clusternet-other".to_owned());
        let mut unlabelled = mk("unlabelled", 100, "2024-01-01T00:00:00Z");
        unlabelled.metadata.labels = None;
        let locs = vec![
            mk("b-same-time", 500, "2024-01-01T00:00:05Z"),
            mk("late", 500, "2024-01-01T00:00:05.500Z"),
            mk("a-same-time", 500, "2024-01-01T00:00:05Z"),
            mk("default-priority", 0, "2023-01-01T00:00:00Z"),
            mk("low", 10, "2025-01-01T00:00:00Z"),
            deleting,
            elsewhere,
            unlabelled,
        ];
        let overrides = select(&[], &locs, &[]);
        assert_eq!(
            names(&overrides),
            [
                "low",
                "default-priority",
                "a-same-time",
                "b-same-time",
                "late"
            ]
        );
    }

    #[test]
    fn feed_reference_matches_without_reference_labels() {
        let mut locs = localizations();
        for l in &mut locs {
            l.metadata.labels = None;
        }
        let mut glob = globalization();
        glob.metadata.labels = None;
        glob.spec.feed.namespace = String::new(); // a feed without namespace matches any namespace
        let run = |feed: Option<&Feed>| {
            applicable_overrides(
                std::slice::from_ref(&glob),
                &locs,
                "clusternet-5l82l",
                MANIFEST_UID,
                "Deployment",
                feed,
                &[cluster("area1-cluster")],
            )
            .len()
        };
        assert_eq!(run(None), 0, "labels only");
        assert_eq!(
            run(Some(&Feed::new("apps/v1", "Deployment", "foo", "my-nginx"))),
            7
        );
        assert_eq!(
            run(Some(&Feed::new("apps/v1", "Deployment", "bar", "my-nginx"))),
            2,
            "only the namespace-less Globalization feed"
        );
        assert_eq!(
            run(Some(&Feed::new(
                "apps/v1",
                "StatefulSet",
                "foo",
                "my-nginx"
            ))),
            0
        );
    }

    #[test]
    fn override_policy_does_not_change_rendering() {
        let render = |policy: crate::apis::OverridePolicy| {
            let mut locs = localizations();
            for l in &mut locs {
                l.spec.override_policy = Some(policy);
            }
            let overrides = select(&[], &locs, &[]);
            render_generic(&nginx(), &overrides).expect("renders")
        };
        assert_eq!(
            render(crate::apis::OverridePolicy::ApplyNow),
            render(crate::apis::OverridePolicy::ApplyLater)
        );
        assert_eq!(
            render(crate::apis::OverridePolicy::ApplyNow),
            expected_nginx(false)
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

    #[test]
    fn helm_values_coalescing() {
        let helm = |name: &str, value: &str| rule(name, OverrideType::Helm, value);
        let base = helm(
            "base",
            r#"
image: {repository: mysql, tag: "8.0", pullPolicy: IfNotPresent}
auth: {database: db, username: u}
primary: {persistence: {enabled: true, size: 8Gi}}
replicas: 1
resources: {limits: {cpu: 1}}
"#,
        );
        let cases: &[(&str, Value)] = &[
            // nested maps merge recursively, override wins
            (
                "image: {tag: 8.0.27-debian-10-r8}\nprimary: {persistence: {enabled: false}}",
                json!({
                    "image": {"repository": "mysql", "tag": "8.0.27-debian-10-r8", "pullPolicy": "IfNotPresent"},
                    "auth": {"database": "db", "username": "u"},
                    "primary": {"persistence": {"enabled": false, "size": "8Gi"}},
                    "replicas": 1,
                    "resources": {"limits": {"cpu": 1}}
                }),
            ),
            // null deletes an existing key (nested too); a null for an absent key stays for Helm
            (
                r#"{"auth":{"username":null},"replicas":null,"extra":null}"#,
                json!({
                    "image": {"repository": "mysql", "tag": "8.0", "pullPolicy": "IfNotPresent"},
                    "auth": {"database": "db"},
                    "primary": {"persistence": {"enabled": true, "size": "8Gi"}},
                    "resources": {"limits": {"cpu": 1}},
                    "extra": null
                }),
            ),
            // scalar over a table and table over a scalar: the override's side is kept
            (
                "resources: none\nreplicas: {count: 3}",
                json!({
                    "image": {"repository": "mysql", "tag": "8.0", "pullPolicy": "IfNotPresent"},
                    "auth": {"database": "db", "username": "u"},
                    "primary": {"persistence": {"enabled": true, "size": "8Gi"}},
                    "replicas": {"count": 3},
                    "resources": "none"
                }),
            ),
        ];
        for (value, expected) in cases {
            let (g, c) =
                apply_overrides(" ", " ", &[base.clone(), helm("over", value)]).expect("applies");
            assert_eq!(c, " ");
            assert_eq!(
                serde_json::from_str::<Value>(&g).expect("JSON"),
                *expected,
                "{value}"
            );
        }

        let err =
            apply_overrides(" ", " ", &[base, helm("list", "[1, 2]")]).expect_err("not a map");
        assert_eq!(
            err.to_string(),
            "override \"list\" (Helm): Helm values must be a map, got array"
        );
    }

    #[test]
    fn helm_rendering() {
        let chart = json!({
            "apiVersion": "apps.clusternet.io/v1alpha1",
            "kind": "HelmChart",
            "metadata": {"name": "mysql", "namespace": "default", "uid": "c0ffee00-0000-4000-8000-000000000000",
                         "labels": {"app": "mysql"}},
            "spec": {"repo": "https://charts.bitnami.com/bitnami", "chart": "mysql", "version": "9.2.0",
                     "targetNamespace": "abc"},
            "status": {"phase": "Found"}
        });
        let chart_rule = |name: &str, value: &str| {
            let mut r = rule(name, OverrideType::Helm, value);
            r.override_chart = true;
            r
        };
        let overrides = vec![
            // Globalization (priority 600)
            rule(
                "override-commonLabels",
                OverrideType::Helm,
                "commonLabels: {some-label: some-value}",
            ),
            rule(
                "disable-pvc-usage",
                OverrideType::Helm,
                r#"{"primary":{"persistence":{"enabled":false}}}"#,
            ),
            chart_rule("update-helm-chart-version", "spec:\n  version: 9.1.0"),
            chart_rule(
                "add-helm-chart-labels",
                "metadata: {labels: {some-label: some-value}}",
            ),
            // Localization
            rule(
                "update-image",
                OverrideType::Helm,
                "image:\n  tag: 8.0.26-debian-10-r39",
            ),
            chart_rule("update-helm-chart-version", "spec: {version: 9.1.8}"),
            chart_rule(
                "sneaky",
                "spec: {chart: wordpress, targetNamespace: kube-system}",
            ),
        ];
        let rendered = render_helm(&chart, &overrides).expect("renders");
        assert_eq!(
            serde_json::from_str::<Value>(&rendered.values).expect("JSON"),
            json!({
                "commonLabels": {"some-label": "some-value"},
                "primary": {"persistence": {"enabled": false}},
                "image": {"tag": "8.0.26-debian-10-r39"}
            })
        );
        assert_eq!(
            rendered.chart,
            json!({
                "apiVersion": "apps.clusternet.io/v1alpha1",
                "kind": "HelmChart",
                "metadata": {"name": "mysql", "namespace": "default",
                             "labels": {"app": "mysql", "some-label": "some-value"}},
                "spec": {"repo": "https://charts.bitnami.com/bitnami", "chart": "mysql", "version": "9.1.8",
                         "targetNamespace": "abc"}
            })
        );

        // no overrides: values are a single space, the chart only loses server-owned fields
        let plain = render_helm(&chart, &[]).expect("renders");
        assert_eq!(plain.values, " ");
        assert_eq!(plain.chart["spec"], chart["spec"]);
        assert!(plain.chart.get("status").is_none());
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
