//! Applying a strategic merge patch (and an RFC 7386 merge patch) to a stored template: the
//! *apply* half of upstream `strategicpatch` (`StrategicMergePatch` with `MergeParallelList` and
//! `IgnoreUnmatchedNulls`), with its directives (`$patch`, `$retainKeys`,
//! `$setElementOrder/<field>`, `$deleteFromPrimitiveList/<field>`) and the sanitising of new
//! content that upstream leaves to its typed decoder.

use std::collections::{HashMap, HashSet};
use std::fmt;

use serde_json::{Map, Value};

use super::*;

/// Applies an RFC 7386 JSON merge patch (`application/merge-patch+json`).
pub fn apply_json_merge_patch(original: &Value, patch: &Value) -> Value {
    let mut doc = original.clone();
    json_patch::merge(&mut doc, patch);
    doc
}

/// Applies a strategic merge patch to `original` the way the apiserver does. `schema` is the
/// object's kind (see [`PatchSchemaIndex::for_kind`]); without it every list is replaced
/// unless the patch carries `$setElementOrder` for it. A `null` original counts as `{}`.
pub fn apply_strategic_merge_patch(
    original: &Value,
    patch: &Value,
    schema: Option<&PatchSchema>,
) -> std::result::Result<Value, StrategicMergeError> {
    let Value::Object(patch) = patch else {
        return Err(StrategicMergeError::NotAnObject {
            what: "patch",
            found: type_name(patch),
        });
    };
    let original = match original {
        Value::Object(m) => m.clone(),
        Value::Null => Map::new(),
        other => {
            return Err(StrategicMergeError::NotAnObject {
                what: "original object",
                found: type_name(other),
            });
        }
    };
    merge_map(original, patch.clone(), schema, &Path::root()).map(Value::Object)
}

/// Where in the object we are, rendered only for error messages.
enum Seg<'a> {
    Root,
    Field(&'a str),
    Item(&'a str, &'a Value),
}

struct Path<'a> {
    parent: Option<&'a Path<'a>>,
    seg: Seg<'a>,
    depth: usize,
}

impl<'a> Path<'a> {
    fn root() -> Self {
        Path {
            parent: None,
            seg: Seg::Root,
            depth: 0,
        }
    }

    fn child(&'a self, seg: Seg<'a>) -> Result<Path<'a>> {
        if self.depth >= MAX_DEPTH {
            return Err(StrategicMergeError::TooDeep {
                path: self.to_string(),
            });
        }
        Ok(Path {
            parent: Some(self),
            seg,
            depth: self.depth + 1,
        })
    }
}

impl fmt::Display for Path<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(parent) = self.parent {
            write!(f, "{parent}")?;
        }
        match self.seg {
            Seg::Root => write!(f, "$"),
            Seg::Field(name) => write!(f, ".{name}"),
            Seg::Item(key, value) => write!(f, "[{key}={}]", quote(value)),
        }
    }
}

fn quote(v: &Value) -> String {
    let mut s = v.to_string();
    if s.len() > MAX_QUOTE {
        let mut cut = MAX_QUOTE;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        s.push('…');
    }
    s
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "list",
        Value::Object(_) => "map",
    }
}

/// The Go type a decoded JSON value has upstream; the merge compares these, not values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Null,
    Bool,
    Number,
    String,
    List,
    Map,
}

fn kind_of(v: &Value) -> Kind {
    match v {
        Value::Null => Kind::Null,
        Value::Bool(_) => Kind::Bool,
        Value::Number(_) => Kind::Number,
        Value::String(_) => Kind::String,
        Value::Array(_) => Kind::List,
        Value::Object(_) => Kind::Map,
    }
}

/// Identity of a scalar or merge-key value with Go's `==` on decoded JSON: all numbers are
/// float64 there, so `1` and `1.0` are the same element.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Id {
    Null,
    Bool(bool),
    Number(u64),
    String(String),
    Other(String),
}

fn id_of(v: &Value) -> Id {
    match v {
        Value::Null => Id::Null,
        Value::Bool(b) => Id::Bool(*b),
        Value::Number(n) => {
            let f = n.as_f64().unwrap_or(f64::NAN);
            Id::Number(if f == 0.0 { 0 } else { f.to_bits() })
        }
        Value::String(s) => Id::String(s.clone()),
        other => Id::Other(other.to_string()),
    }
}

fn is_directive_key(k: &str) -> bool {
    k == DIRECTIVE_MARKER
        || k == RETAIN_KEYS_DIRECTIVE
        || k.starts_with(SET_ELEMENT_ORDER_PREFIX)
        || k.starts_with(DELETE_FROM_PRIMITIVE_LIST_PREFIX)
}

/// Makes patch content that lands in the result as-is look like what a typed decode of
/// upstream's result would hold: maps carrying `$patch` vanish (upstream `removeDirectives`),
/// explicit nulls vanish (`discardNullValuesFromPatch`), other directive keys are dropped.
fn sanitize(v: Value) -> Option<Value> {
    match v {
        Value::Object(m) => {
            if m.contains_key(DIRECTIVE_MARKER) {
                return None;
            }
            Some(Value::Object(sanitize_map(m)))
        }
        Value::Array(items) => Some(Value::Array(sanitize_list(items))),
        other => Some(other),
    }
}

fn sanitize_map(m: Map<String, Value>) -> Map<String, Value> {
    m.into_iter()
        .filter(|(k, v)| !v.is_null() && !is_directive_key(k))
        .filter_map(|(k, v)| sanitize(v).map(|v| (k, v)))
        .collect()
}

fn sanitize_list(items: Vec<Value>) -> Vec<Value> {
    items.into_iter().filter_map(sanitize).collect()
}

/// Splits `<prefix>/<field>`, as upstream `extractKey`.
fn directive_field<'k>(key: &'k str, prefix: &str) -> Option<&'k str> {
    match key.split_once('/') {
        Some((p, field)) if p == prefix => Some(field),
        _ => None,
    }
}

/// Patch metadata of a list field; absent (`None` from [`list_meta`]) when the schema does not
/// know the field.
struct ListMeta {
    strategy: PatchStrategy,
    merge_key: Option<String>,
    items: Option<PatchSchema>,
}

fn list_meta(schema: Option<&PatchSchema>, key: &str) -> Option<ListMeta> {
    let field = schema?.field(key)?;
    Some(ListMeta {
        strategy: field.strategy,
        merge_key: field.merge_key.map(str::to_string),
        items: field.schema.and_then(|s| s.items()),
    })
}

fn merge_map(
    mut original: Map<String, Value>,
    mut patch: Map<String, Value>,
    schema: Option<&PatchSchema>,
    path: &Path<'_>,
) -> Result<Map<String, Value>> {
    if let Some(directive) = patch.get(DIRECTIVE_MARKER) {
        return match directive.as_str() {
            Some(REPLACE) => {
                patch.remove(DIRECTIVE_MARKER);
                Ok(sanitize_map(patch))
            }
            // Upstream yields an empty map, not a missing key, when the key already exists.
            Some(DELETE) => Ok(Map::new()),
            _ => Err(StrategicMergeError::UnknownPatchType {
                path: path.to_string(),
                directive: quote(directive),
                item: quote(&Value::Object(patch)),
            }),
        };
    }

    apply_retain_keys(&mut original, &mut patch, path)?;
    merge_set_element_order(&mut original, &mut patch, schema, path)?;

    for (key, patch_v) in patch {
        let (field, is_delete_list) = if key.starts_with(DELETE_FROM_PRIMITIVE_LIST_PREFIX) {
            let Some(field) = directive_field(&key, DELETE_FROM_PRIMITIVE_LIST_PREFIX) else {
                return Err(StrategicMergeError::BadPrimitiveList {
                    path: path.to_string(),
                    reason: format!(
                        "{key:?} is not of the form {DELETE_FROM_PRIMITIVE_LIST_PREFIX}/<field>"
                    ),
                });
            };
            (field.to_string(), true)
        } else {
            (key, false)
        };

        if patch_v.is_null() {
            original.remove(&field);
            continue;
        }
        let Some(orig_v) = original.get_mut(&field) else {
            if !is_delete_list && let Some(v) = sanitize(patch_v) {
                original.insert(field, v);
            }
            continue;
        };
        if kind_of(orig_v) != kind_of(&patch_v) {
            if !is_delete_list {
                match sanitize(patch_v) {
                    Some(v) => *orig_v = v,
                    None => {
                        original.remove(&field);
                    }
                }
            }
            continue;
        }
        let child = path.child(Seg::Field(&field))?;
        match patch_v {
            Value::Object(patch_m) => {
                let meta = schema.and_then(|s| s.field(&field));
                let Value::Object(orig_m) = std::mem::take(orig_v) else {
                    continue;
                };
                let merged = match meta {
                    Some(m) if m.strategy == PatchStrategy::Replace => sanitize_map(patch_m),
                    Some(m) => merge_map(orig_m, patch_m, m.schema.as_ref(), &child)?,
                    None => merge_map(orig_m, patch_m, None, &child)?,
                };
                *orig_v = Value::Object(merged);
            }
            Value::Array(patch_l) => {
                let Value::Array(orig_l) = std::mem::take(orig_v) else {
                    continue;
                };
                let meta = list_meta(schema, &field).or_else(|| infer_list_meta(&[], &patch_l));
                let merged = merge_list_field(orig_l, patch_l, meta, is_delete_list, &child)?;
                *orig_v = Value::Array(merged);
            }
            scalar => *orig_v = scalar,
        }
    }
    Ok(original)
}

/// Upstream `applyRetainKeysDirective`: drops keys of `original` not listed in `$retainKeys`
/// after checking the patch only sets listed keys.
fn apply_retain_keys(
    original: &mut Map<String, Value>,
    patch: &mut Map<String, Value>,
    path: &Path<'_>,
) -> Result<()> {
    let Some(retain) = patch.remove(RETAIN_KEYS_DIRECTIVE) else {
        return Ok(());
    };
    let Value::Array(retain) = retain else {
        return Err(StrategicMergeError::BadRetainKeys {
            path: path.to_string(),
            reason: format!("expected a list, got {}", type_name(&retain)),
        });
    };
    let keep: HashSet<&str> = retain.iter().filter_map(Value::as_str).collect();
    for (k, v) in patch.iter() {
        if v.is_null()
            || k.starts_with(DELETE_FROM_PRIMITIVE_LIST_PREFIX)
            || k.starts_with(SET_ELEMENT_ORDER_PREFIX)
        {
            continue;
        }
        if !keep.contains(k.as_str()) {
            return Err(StrategicMergeError::BadRetainKeys {
                path: path.to_string(),
                reason: format!("{k:?} is set by the patch but not listed in $retainKeys"),
            });
        }
    }
    original.retain(|k, _| keep.contains(k.as_str()));
    Ok(())
}

/// Upstream `mergePatchIntoOriginal`: merges every list that has a `$setElementOrder`
/// together with its directive and puts the result in the requested order. Consumes both the
/// directive and the list from `patch`.
fn merge_set_element_order(
    original: &mut Map<String, Value>,
    patch: &mut Map<String, Value>,
    schema: Option<&PatchSchema>,
    path: &Path<'_>,
) -> Result<()> {
    let keys: Vec<String> = patch
        .keys()
        .filter(|k| k.starts_with(SET_ELEMENT_ORDER_PREFIX))
        .cloned()
        .collect();
    for key in keys {
        let Some(order) = patch.remove(&key) else {
            continue;
        };
        let Some(field) = directive_field(&key, SET_ELEMENT_ORDER_PREFIX) else {
            return Err(StrategicMergeError::BadSetElementOrder {
                path: path.to_string(),
                reason: format!("{key:?} is not of the form {SET_ELEMENT_ORDER_PREFIX}/<field>"),
            });
        };
        let child = path.child(Seg::Field(field))?;
        let Value::Array(order) = order else {
            return Err(StrategicMergeError::BadSetElementOrder {
                path: child.to_string(),
                reason: format!("expected a list, got {}", type_name(&order)),
            });
        };
        let as_list = |v: Option<Value>| -> Result<Option<Vec<Value>>> {
            match v {
                None => Ok(None),
                Some(Value::Array(l)) => Ok(Some(l)),
                Some(other) => Err(StrategicMergeError::BadType {
                    path: child.to_string(),
                    expected: "list",
                    found: type_name(&other),
                }),
            }
        };
        // Both are consumed: on error the whole patch fails, on success the merged list is
        // written back and the patch list must not be merged a second time.
        let orig_list = as_list(original.remove(field))?;
        let patch_list = as_list(patch.remove(field))?;

        let meta = list_meta(schema, field)
            .or_else(|| infer_list_meta(&order, patch_list.as_deref().unwrap_or_default()))
            .unwrap_or(ListMeta {
                strategy: PatchStrategy::Unspecified,
                merge_key: None,
                items: None,
            });
        let merge_key = meta.merge_key.clone();
        let merge_key = merge_key.as_deref();
        validate_patch_with_set_order_list(patch_list.as_deref(), &order, merge_key, &child)?;

        let no_items = orig_list.as_ref().is_none_or(Vec::is_empty)
            && patch_list.as_ref().is_none_or(Vec::is_empty);
        let kind = if no_items {
            None
        } else {
            Some(element_kind(
                [orig_list.as_deref(), patch_list.as_deref()],
                &child,
            )?)
        };
        // A list of maps without a merge key has no identity to order by (upstream panics).
        let order_key = match kind {
            Some(Kind::Map) => merge_key.map(Some),
            Some(_) => Some(None),
            None => None,
        };
        let ids = match order_key {
            Some(key) => Some((
                ids_of(&order, key, &child)?,
                ids_of(orig_list.as_deref().unwrap_or_default(), key, &child)?,
            )),
            None => None,
        };
        let merged = match (orig_list, patch_list) {
            (Some(o), None) => o,
            (None, Some(p)) => sanitize_list(p),
            (Some(o), Some(p)) => merge_list_field(o, p, Some(meta), false, &child)?,
            (None, None) => continue,
        };
        let ordered = match (ids, order_key) {
            (Some((order_ids, server_ids)), Some(key)) => {
                reorder(merged, &order_ids, &server_ids, key, &child)?
            }
            _ => merged,
        };
        original.insert(field.to_string(), Value::Array(ordered));
    }
    Ok(())
}

/// For list fields the schema does not know. kubectl only sends `$setElementOrder` and `$patch`
/// list items for merge lists, writing order entries as `{<mergeKey>: value}` (bare scalars for
/// primitive lists) and deletions as `{"$patch": "delete", <mergeKey>: value}`; so these
/// reveal the merge key. `None` when they reveal nothing (the list is then replaced).
fn infer_list_meta(order: &[Value], patch: &[Value]) -> Option<ListMeta> {
    let mut merge_key: Option<&str> = None;
    let mut scalars = false;
    let directive_items = patch.iter().filter(|v| v.get(DIRECTIVE_MARKER).is_some());
    for entry in order.iter().chain(directive_items) {
        match entry {
            Value::Object(m) => {
                let mut keys = m.keys().filter(|k| !is_directive_key(k));
                match (keys.next(), keys.next()) {
                    (Some(k), None) if merge_key.is_none_or(|mk| mk == k) => {
                        merge_key = Some(k.as_str());
                    }
                    // `{"$patch": "replace"}` carries no key.
                    (None, _) => {}
                    _ => return None,
                }
            }
            Value::Array(_) => return None,
            _ => scalars = true,
        }
    }
    if scalars == merge_key.is_some() {
        return None;
    }
    Some(ListMeta {
        strategy: PatchStrategy::Merge,
        merge_key: merge_key.map(str::to_string),
        items: None,
    })
}

/// Upstream `validatePatchWithSetOrderList`: patch items (deletions aside) must appear in the
/// `$setElementOrder` list, in the same relative order.
fn validate_patch_with_set_order_list(
    patch: Option<&[Value]>,
    order: &[Value],
    merge_key: Option<&str>,
    path: &Path<'_>,
) -> Result<()> {
    let patch = patch.unwrap_or_default();
    if order.is_empty() || patch.is_empty() {
        return Ok(());
    }
    // Maps without a merge key have no identity to compare (upstream panics here); the list
    // is replaced wholesale anyway, so there is nothing to check.
    if merge_key.is_none() && patch.iter().chain(order).any(Value::is_object) {
        return Ok(());
    }
    let mut non_delete = Vec::with_capacity(patch.len());
    for item in patch {
        if merge_key.is_some() {
            let Value::Object(m) = item else {
                return Err(bad_type(path, "map", item));
            };
            if m.get(DIRECTIVE_MARKER).and_then(Value::as_str) == Some(DELETE) {
                continue;
            }
        }
        non_delete.push(item);
    }
    let identity = |v: &Value| -> Result<Id> {
        match merge_key {
            Some(mk) => merge_key_id(v, mk, path),
            None => Ok(id_of(v)),
        }
    };
    let (mut pi, mut si) = (0, 0);
    while pi < non_delete.len() && si < order.len() {
        let item = non_delete[pi];
        if item.get(DIRECTIVE_MARKER).is_some() {
            pi += 1;
            continue;
        }
        if identity(item)? == identity(&order[si])? {
            pi += 1;
        }
        si += 1;
    }
    if pi < non_delete.len() {
        return Err(StrategicMergeError::SetElementOrderMismatch {
            path: path.to_string(),
            patch: quote(&Value::Array(patch.to_vec())),
            order: quote(&Value::Array(order.to_vec())),
        });
    }
    Ok(())
}

fn bad_type(path: &Path<'_>, expected: &'static str, found: &Value) -> StrategicMergeError {
    StrategicMergeError::BadType {
        path: path.to_string(),
        expected,
        found: type_name(found),
    }
}

fn merge_key_id(item: &Value, merge_key: &str, path: &Path<'_>) -> Result<Id> {
    let Value::Object(m) = item else {
        return Err(bad_type(path, "map", item));
    };
    m.get(merge_key)
        .map(id_of)
        .ok_or_else(|| StrategicMergeError::MissingMergeKey {
            path: path.to_string(),
            item: quote(item),
            merge_key: merge_key.to_string(),
        })
}

/// Upstream `mergeSliceHandler`: merge strategy (or a `$deleteFromPrimitiveList`) merges,
/// anything else replaces.
fn merge_list_field(
    original: Vec<Value>,
    patch: Vec<Value>,
    meta: Option<ListMeta>,
    is_delete_list: bool,
    path: &Path<'_>,
) -> Result<Vec<Value>> {
    let (strategy, merge_key, items) = match meta {
        Some(m) => (m.strategy, m.merge_key, m.items),
        None => (PatchStrategy::Unspecified, None, None),
    };
    if strategy != PatchStrategy::Merge && !is_delete_list {
        return Ok(sanitize_list(patch));
    }
    if original.is_empty() && patch.is_empty() {
        return Ok(original);
    }
    let kind = element_kind([Some(&original), Some(&patch)], path)?;
    if kind != Kind::Map {
        if is_delete_list {
            let remove: HashSet<Id> = patch.iter().map(id_of).collect();
            return Ok(original
                .into_iter()
                .filter(|v| !remove.contains(&id_of(v)))
                .collect());
        }
        let server_ids = ids_of(&original, None, path)?;
        let order_ids = ids_of(&patch, None, path)?;
        let mut seen = HashSet::new();
        let merged: Vec<Value> = original
            .into_iter()
            .chain(patch)
            .filter(|v| seen.insert(id_of(v)))
            .collect();
        return reorder(merged, &order_ids, &server_ids, None, path);
    }
    let Some(merge_key) = merge_key else {
        return Err(StrategicMergeError::NoMergeKey {
            path: path.to_string(),
        });
    };
    merge_map_list(original, patch, &merge_key, items.as_ref(), path)
}

/// Upstream `mergeSlice` for lists of maps: special (`$patch`) elements first, then merge by
/// key, then order (patch order for patch items, live order for the rest).
fn merge_map_list(
    original: Vec<Value>,
    patch: Vec<Value>,
    merge_key: &str,
    items_schema: Option<&PatchSchema>,
    path: &Path<'_>,
) -> Result<Vec<Value>> {
    let mut replace = false;
    let mut to_delete = HashSet::new();
    let mut plain = Vec::with_capacity(patch.len());
    for item in patch {
        let Value::Object(m) = &item else {
            return Err(bad_type(path, "map", &item));
        };
        match m.get(DIRECTIVE_MARKER) {
            None => plain.push(item),
            Some(d) if d.as_str() == Some(DELETE) => {
                to_delete.insert(merge_key_id(&item, merge_key, path)?);
            }
            Some(d) if d.as_str() == Some(REPLACE) => replace = true,
            Some(d) if d.as_str() == Some(MERGE) => {
                return Err(StrategicMergeError::MergeDirectiveInList {
                    path: path.to_string(),
                });
            }
            Some(d) => {
                return Err(StrategicMergeError::UnknownPatchType {
                    path: path.to_string(),
                    directive: quote(d),
                    item: quote(&item),
                });
            }
        }
    }
    let (mut base, patch) = if replace {
        (sanitize_list(plain), Vec::new())
    } else {
        let kept = original
            .into_iter()
            .filter(|item| {
                item.get(merge_key)
                    .is_none_or(|k| !to_delete.contains(&id_of(k)))
            })
            .collect();
        (kept, plain)
    };

    let server_order = base
        .iter()
        .map(|item| merge_key_id(item, merge_key, path))
        .collect::<Result<Vec<_>>>()?;
    let patch_order = patch
        .iter()
        .map(|item| merge_key_id(item, merge_key, path))
        .collect::<Result<Vec<_>>>()?;

    // First occurrence wins, as upstream's linear `findMapInSliceBasedOnKeyValue`.
    let mut index: HashMap<Id, usize> = HashMap::with_capacity(base.len());
    for (i, item) in base.iter().enumerate() {
        if let Some(k) = item.get(merge_key) {
            index.entry(id_of(k)).or_insert(i);
        }
    }
    for (item, id) in patch.into_iter().zip(patch_order.iter()) {
        match index.get(id) {
            Some(&i) => {
                let Value::Object(patch_m) = item else {
                    continue;
                };
                let orig_m = match std::mem::take(&mut base[i]) {
                    Value::Object(m) => m,
                    other => return Err(bad_type(path, "map", &other)),
                };
                let key_value = patch_m.get(merge_key).cloned().unwrap_or_default();
                let child = path.child(Seg::Item(merge_key, &key_value))?;
                base[i] = Value::Object(merge_map(orig_m, patch_m, items_schema, &child)?);
            }
            None => {
                if let Some(v) = sanitize(item) {
                    index.insert(id.clone(), base.len());
                    base.push(v);
                }
            }
        }
    }
    let patch_set: HashSet<&Id> = patch_order.iter().collect();
    let (patch_items, server_only) = partition(base, merge_key, |id| patch_set.contains(id), path)?;
    Ok(merge_sorted(
        sort_by_order(server_only, &server_order),
        sort_by_order(patch_items, &patch_order),
        &server_order,
    ))
}

/// Upstream `normalizeElementOrder` for an already merged list: items named in `order` go
/// in that order, the others keep their live order, and the two are interleaved by live order.
fn reorder(
    merged: Vec<Value>,
    order_ids: &[Id],
    server_ids: &[Id],
    merge_key: Option<&str>,
    path: &Path<'_>,
) -> Result<Vec<Value>> {
    let order_set: HashSet<&Id> = order_ids.iter().collect();
    let (patch_items, server_only) = match merge_key {
        Some(mk) => partition(merged, mk, |id| order_set.contains(id), path)?,
        None => merged
            .into_iter()
            .map(|v| (id_of(&v), v))
            .partition(|(id, _)| order_set.contains(id)),
    };
    Ok(merge_sorted(
        sort_by_order(server_only, server_ids),
        sort_by_order(patch_items, order_ids),
        server_ids,
    ))
}

/// Identities of list items: the merge key's value for maps, the item itself for scalars.
fn ids_of(list: &[Value], merge_key: Option<&str>, path: &Path<'_>) -> Result<Vec<Id>> {
    list.iter()
        .map(|v| match merge_key {
            Some(mk) => merge_key_id(v, mk, path),
            None => Ok(id_of(v)),
        })
        .collect()
}

type Keyed = Vec<(Id, Value)>;

fn partition(
    merged: Vec<Value>,
    merge_key: &str,
    in_patch: impl Fn(&Id) -> bool,
    path: &Path<'_>,
) -> Result<(Keyed, Keyed)> {
    let mut patch_items = Vec::new();
    let mut server_only = Vec::new();
    for item in merged {
        let id = merge_key_id(&item, merge_key, path)?;
        if in_patch(&id) {
            patch_items.push((id, item));
        } else {
            server_only.push((id, item));
        }
    }
    Ok((patch_items, server_only))
}

fn first_positions(order: &[Id]) -> HashMap<&Id, usize> {
    let mut pos = HashMap::with_capacity(order.len());
    for (i, id) in order.iter().enumerate() {
        pos.entry(id).or_insert(i);
    }
    pos
}

/// Upstream `normalizeSliceOrder`. Items missing from `order` cannot happen for the lists
/// this is called with; should one appear it stays after the ordered ones (upstream's
/// comparator is not a strict order there, so its placement is unspecified).
fn sort_by_order(mut items: Keyed, order: &[Id]) -> Keyed {
    let pos = first_positions(order);
    items.sort_by_key(|(id, _)| pos.get(id).copied().unwrap_or(usize::MAX));
    items
}

/// Upstream `mergeSortedSlice`: inserts live-only items (`left`) among patch items (`right`)
/// where the live order puts them; a patch item unknown to the live list goes first.
fn merge_sorted(left: Keyed, right: Keyed, server_order: &[Id]) -> Vec<Value> {
    let pos = first_positions(server_order);
    let mut out = Vec::with_capacity(left.len() + right.len());
    let mut left = left.into_iter().peekable();
    let mut right = right.into_iter().peekable();
    loop {
        let take_left = match (left.peek(), right.peek()) {
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (None, None) => break,
            (Some((l, _)), Some((r, _))) => match (pos.get(l), pos.get(r)) {
                (Some(li), Some(ri)) => li < ri,
                _ => false,
            },
        };
        let next = if take_left { left.next() } else { right.next() };
        if let Some((_, v)) = next {
            out.push(v);
        }
    }
    out
}

/// Upstream `sliceElementType`: every element of the given lists must have the same kind,
/// and lists of lists are refused.
fn element_kind(lists: [Option<&[Value]>; 2], path: &Path<'_>) -> Result<Kind> {
    let mut kind = None;
    for v in lists.into_iter().flatten().flatten() {
        let k = kind_of(v);
        match kind {
            None if k == Kind::List => {
                return Err(StrategicMergeError::ListOfLists {
                    path: path.to_string(),
                });
            }
            None => kind = Some(k),
            Some(prev) if prev != k => {
                return Err(StrategicMergeError::MixedListTypes {
                    path: path.to_string(),
                });
            }
            Some(_) => {}
        }
    }
    Ok(kind.unwrap_or(Kind::Null))
}

#[cfg(test)]
mod tests;
