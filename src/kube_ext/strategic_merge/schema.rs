//! Patch metadata from the parent's OpenAPI v3 document: which fields are lists that merge by a
//! key, which maps are replaced or keep only listed keys (`x-kubernetes-patch-strategy`,
//! `x-kubernetes-patch-merge-key`). The document is compiled once into a [`PatchSchemaIndex`] (a
//! graph of schema nodes, `$ref`s and `allOf`s resolved) and walked with [`PatchSchema`]; the
//! counterpart of upstream's `strategicpatch.PatchMetaFromOpenAPIV3`.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use serde_json::Value;

use super::{MERGE, REPLACE};

/// Bounds `allOf`/`$ref` chains and inline nesting in odd OpenAPI documents.
const MAX_SCHEMA_DEPTH: usize = 64;

/// How a field is patched, from `x-kubernetes-patch-strategy`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum PatchStrategy {
    /// No strategy: maps merge, lists are replaced.
    #[default]
    Unspecified,
    /// Lists merge (by merge key for lists of maps, as a set for primitives).
    Merge,
    /// The whole value is replaced.
    Replace,
}

/// Patch metadata of one field, as [`PatchSchema::field`] finds it.
#[derive(Debug, Clone, Default)]
pub struct FieldPatchMeta<'a> {
    /// The field's own schema (for a list: the list's, see [`PatchSchema::items`]).
    pub schema: Option<PatchSchema>,
    pub strategy: PatchStrategy,
    /// `retainKeys` in the strategy; only patch *generation* acts on it, apply follows the
    /// `$retainKeys` directive, so it is informational here.
    pub retain_keys: bool,
    pub merge_key: Option<&'a str>,
}

type NodeId = usize;

#[derive(Debug, Default)]
struct FieldDef {
    schema: Option<NodeId>,
    strategy: PatchStrategy,
    retain_keys: bool,
    merge_key: Option<String>,
}

#[derive(Debug, Default)]
struct Node {
    name: Option<String>,
    fields: HashMap<String, FieldDef>,
    items: Option<NodeId>,
    additional: Option<NodeId>,
    /// `allOf` members and a `$ref` next to other keywords; looked through on lookup.
    all_of: Vec<NodeId>,
}

#[derive(Debug, Default)]
struct Graph {
    nodes: Vec<Node>,
    by_name: HashMap<String, NodeId>,
    gvks: Vec<(String, String, String, NodeId)>,
}

/// Every schema of one OpenAPI document, compiled once so field lookups are hash lookups.
/// Cheap to clone; build it when the parent's `/openapi/v3/<group-version>` is fetched and hand
/// out [`PatchSchema`]s per kind.
#[derive(Clone, Default)]
pub struct PatchSchemaIndex {
    graph: Arc<Graph>,
}

impl fmt::Debug for PatchSchemaIndex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PatchSchemaIndex")
            .field("schemas", &self.graph.by_name.len())
            .field("kinds", &self.graph.gvks.len())
            .finish()
    }
}

/// A position in a compiled OpenAPI schema: the schema of one object, from which the patch
/// metadata of its fields can be looked up. Cheap to clone.
#[derive(Clone)]
pub struct PatchSchema {
    graph: Arc<Graph>,
    node: NodeId,
}

impl fmt::Debug for PatchSchema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PatchSchema")
            .field("name", &self.name())
            .field("node", &self.node)
            .finish()
    }
}

impl PatchSchemaIndex {
    /// Compiles `components.schemas` of an OpenAPI v3 document (or `definitions` of a v2
    /// one). Anything malformed is skipped; a document without schemas yields an empty index.
    pub fn from_openapi(doc: &Value) -> Self {
        let schemas = doc
            .pointer("/components/schemas")
            .or_else(|| doc.get("definitions"))
            .and_then(Value::as_object);
        let mut graph = Graph::default();
        if let Some(schemas) = schemas {
            for name in schemas.keys() {
                let id = graph.nodes.len();
                graph.nodes.push(Node {
                    name: Some(name.clone()),
                    ..Node::default()
                });
                graph.by_name.insert(name.clone(), id);
            }
            for (name, body) in schemas {
                let Some(&id) = graph.by_name.get(name) else {
                    continue;
                };
                let mut node = graph.compile_node(body, 0);
                node.name = Some(name.clone());
                graph.nodes[id] = node;
                for gvk in body
                    .get("x-kubernetes-group-version-kind")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    let part = |k: &str| gvk.get(k).and_then(Value::as_str).map(str::to_string);
                    if let (Some(g), Some(v), Some(k)) = (
                        part("group").or(Some(String::new())),
                        part("version"),
                        part("kind"),
                    ) {
                        graph.gvks.push((g, v, k, id));
                    }
                }
            }
        }
        Self {
            graph: Arc::new(graph),
        }
    }

    /// The schema whose `x-kubernetes-group-version-kind` lists `group`/`version`/`kind`
    /// (`group` is `""` for the core group).
    pub fn for_kind(&self, group: &str, version: &str, kind: &str) -> Option<PatchSchema> {
        self.graph
            .gvks
            .iter()
            .find(|(g, v, k, _)| g == group && v == version && k == kind)
            .map(|&(.., node)| self.at(node))
    }

    /// The schema named `name` in the document, e.g. `io.k8s.api.core.v1.PodSpec`.
    pub fn for_schema_name(&self, name: &str) -> Option<PatchSchema> {
        self.graph.by_name.get(name).map(|&node| self.at(node))
    }

    fn at(&self, node: NodeId) -> PatchSchema {
        PatchSchema {
            graph: Arc::clone(&self.graph),
            node,
        }
    }
}

impl Graph {
    /// Resolves a schema to a node: a bare `$ref` or single-member `allOf` wrapper (what
    /// Kubernetes publishes for every struct-typed field) collapses to its target.
    fn resolve(&mut self, schema: &Value, depth: usize) -> Option<NodeId> {
        let obj = schema.as_object()?;
        if depth > MAX_SCHEMA_DEPTH {
            return None;
        }
        let has_shape = ["properties", "items", "additionalProperties"]
            .iter()
            .any(|k| obj.contains_key(*k));
        if !has_shape {
            if let Some(r) = obj.get("$ref").and_then(Value::as_str) {
                return self.by_ref(r);
            }
            if let Some([only]) = obj
                .get("allOf")
                .and_then(Value::as_array)
                .map(Vec::as_slice)
            {
                return self.resolve(only, depth + 1);
            }
        }
        let node = self.compile_node(schema, depth + 1);
        self.nodes.push(node);
        Some(self.nodes.len() - 1)
    }

    fn by_ref(&self, reference: &str) -> Option<NodeId> {
        let name = reference
            .strip_prefix("#/components/schemas/")
            .or_else(|| reference.strip_prefix("#/definitions/"))
            .or_else(|| reference.rsplit('/').next())?;
        let name = name.replace("~1", "/").replace("~0", "~");
        self.by_name.get(&name).copied()
    }

    fn compile_node(&mut self, schema: &Value, depth: usize) -> Node {
        let mut node = Node::default();
        let Some(obj) = schema.as_object() else {
            return node;
        };
        if depth > MAX_SCHEMA_DEPTH {
            return node;
        }
        if let Some(props) = obj.get("properties").and_then(Value::as_object) {
            for (key, prop) in props {
                let mut def = patch_extensions(prop);
                def.schema = self.resolve(prop, depth + 1);
                node.fields.insert(key.clone(), def);
            }
        }
        node.items = obj.get("items").and_then(|i| self.resolve(i, depth + 1));
        node.additional = obj
            .get("additionalProperties")
            .filter(|a| a.is_object())
            .and_then(|a| self.resolve(a, depth + 1));
        if let Some(r) = obj.get("$ref").and_then(Value::as_str)
            && let Some(id) = self.by_ref(r)
        {
            node.all_of.push(id);
        }
        for member in obj
            .get("allOf")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(id) = self.resolve(member, depth + 1) {
                node.all_of.push(id);
            }
        }
        node
    }

    /// The definition of `key` in `node` or, depth-first and in order, in its `allOf`
    /// members. Each node is looked at once: member graphs have cycles and shared members in
    /// documents nobody vetted, and walking every path (as a depth limit alone does) is
    /// exponential, 2^64 lookups for a schema listing itself twice in its own `allOf` (found by
    /// the fuzz harness `random_openapi_schemas_never_hang_the_strategic_merge`).
    fn field(&self, node: NodeId, key: &str) -> Option<&FieldDef> {
        self.walk(node, |n| n.fields.get(key))
    }

    /// The first `get` answer for `node` or its `allOf` members, looked at as [`Graph::field`]
    /// describes.
    fn walk<'g, T: 'g>(&'g self, node: NodeId, get: impl Fn(&'g Node) -> Option<T>) -> Option<T> {
        let mut seen = vec![false; self.nodes.len()];
        let mut pending = vec![node];
        while let Some(id) = pending.pop() {
            match seen.get_mut(id) {
                Some(seen) if !*seen => *seen = true,
                _ => continue,
            }
            let n = self.nodes.get(id)?;
            if let Some(found) = get(n) {
                return Some(found);
            }
            // reversed onto the stack, so members are looked at in their order
            pending.extend(n.all_of.iter().rev());
        }
        None
    }
}

fn patch_extensions(prop: &Value) -> FieldDef {
    // Kubernetes puts the extensions on the property itself, next to `allOf`/`items`; older
    // generators put them inside the single `allOf` member.
    let ext = |k: &str| {
        prop.get(k).and_then(Value::as_str).or_else(|| {
            prop.get("allOf")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .find_map(|m| m.get(k).and_then(Value::as_str))
        })
    };
    let mut def = FieldDef::default();
    if let Some(strategies) = ext("x-kubernetes-patch-strategy") {
        for s in strategies.split(',').map(str::trim) {
            match s {
                MERGE => def.strategy = PatchStrategy::Merge,
                REPLACE => def.strategy = PatchStrategy::Replace,
                "retainKeys" => def.retain_keys = true,
                _ => {}
            }
        }
    }
    def.merge_key = ext("x-kubernetes-patch-merge-key")
        .filter(|k| !k.is_empty())
        .map(str::to_string);
    def
}

impl PatchSchema {
    /// Compiles `doc` (e.g. `GET /openapi/v3/apis/apps/v1`) and picks the schema of
    /// `group`/`version`/`kind`. Prefer [`PatchSchemaIndex`] when several kinds share a
    /// document: this compiles the whole document each time.
    pub fn from_openapi_v3(doc: &Value, group: &str, version: &str, kind: &str) -> Option<Self> {
        PatchSchemaIndex::from_openapi(doc).for_kind(group, version, kind)
    }

    /// The component name of this schema, when it is a named one.
    pub fn name(&self) -> Option<&str> {
        self.graph.nodes.get(self.node)?.name.as_deref()
    }

    /// Patch metadata of `key` in this object; `None` when the schema does not know the key.
    /// Keys of a map-typed object (`additionalProperties`) are known, with no strategy.
    pub fn field(&self, key: &str) -> Option<FieldPatchMeta<'_>> {
        if let Some(def) = self.graph.field(self.node, key) {
            return Some(FieldPatchMeta {
                schema: def.schema.map(|node| self.with_node(node)),
                strategy: def.strategy,
                retain_keys: def.retain_keys,
                merge_key: def.merge_key.as_deref(),
            });
        }
        let additional = self.graph.walk(self.node, |n| n.additional)?;
        Some(FieldPatchMeta {
            schema: Some(self.with_node(additional)),
            ..FieldPatchMeta::default()
        })
    }

    /// The element schema, when this is the schema of a list.
    pub fn items(&self) -> Option<PatchSchema> {
        let node = self.graph.walk(self.node, |n| n.items)?;
        Some(self.with_node(node))
    }

    fn with_node(&self, node: NodeId) -> PatchSchema {
        PatchSchema {
            graph: Arc::clone(&self.graph),
            node,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kube_ext::strategic_merge::fixtures::*;
    use serde_json::json;

    /// Found by `random_openapi_schemas_never_hang_the_strategic_merge`: a schema naming
    /// itself twice in its `allOf` made every lookup of an unknown field walk 2^64 paths (the
    /// depth limit bounded the depth, not the breadth), hanging the hub's patch handler.
    #[test]
    fn cyclic_all_of_lookups_finish() {
        let me = json!({"$ref": "#/components/schemas/a"});
        let doc = json!({"components": {"schemas": {
            "a": {"allOf": [me, me], "properties": {"x": {"x-kubernetes-patch-strategy": "merge"}},
                "x-kubernetes-group-version-kind": [{"group": "g", "version": "v1", "kind": "A"}]},
        }}});
        let schema = PatchSchema::from_openapi_v3(&doc, "g", "v1", "A").expect("kind A");
        let started = std::time::Instant::now();
        assert!(schema.field("missing").is_none());
        assert!(schema.items().is_none());
        assert_eq!(
            schema.field("x").map(|f| f.strategy),
            Some(PatchStrategy::Merge)
        );
        assert!(started.elapsed() < std::time::Duration::from_secs(1));
    }

    #[test]
    fn schema_walks_refs_and_all_of() {
        let index = PatchSchemaIndex::from_openapi(&apps_v1_doc());
        let deploy = index
            .for_kind("apps", "v1", "Deployment")
            .expect("Deployment");
        assert_eq!(deploy.name(), Some("io.k8s.api.apps.v1.Deployment"));
        assert!(index.for_kind("apps", "v1", "StatefulSet").is_none());
        assert!(index.for_kind("", "v1", "Deployment").is_none());

        let pod_spec = deploy
            .field("spec")
            .and_then(|f| f.schema)
            .and_then(|s| s.field("template")?.schema)
            .and_then(|s| s.field("spec")?.schema)
            .expect("PodSpec");
        assert_eq!(pod_spec.name(), Some("io.k8s.api.core.v1.PodSpec"));
        let containers = pod_spec.field("containers").expect("containers");
        assert_eq!(containers.strategy, PatchStrategy::Merge);
        assert_eq!(containers.merge_key, Some("name"));
        let container = containers
            .schema
            .and_then(|s| s.items())
            .expect("Container");
        assert_eq!(container.name(), Some("io.k8s.api.core.v1.Container"));
        let ports = container.field("ports").expect("ports");
        assert_eq!(ports.merge_key, Some("containerPort"));
        let volumes = pod_spec.field("volumes").expect("volumes");
        assert_eq!(
            (volumes.strategy, volumes.retain_keys),
            (PatchStrategy::Merge, true)
        );
        let spec = deploy
            .field("spec")
            .and_then(|f| f.schema)
            .expect("DeploymentSpec");
        let strategy = spec.field("strategy").expect("strategy");
        assert!(strategy.retain_keys && strategy.strategy == PatchStrategy::Unspecified);
        // Map keys are known fields without a strategy; unknown keys are unknown.
        assert!(
            pod_spec
                .field("nodeSelector")
                .and_then(|f| f.schema)
                .is_some_and(|s| s.field("any").is_some())
        );
        assert!(pod_spec.field("noSuchField").is_none());

        let broken = index.for_schema_name("broken").expect("broken");
        assert!(broken.field("x").is_some_and(|f| f.schema.is_none()));
        assert!(broken.field("y").is_some_and(|f| f.schema.is_none()));
    }

    #[test]
    fn odd_documents_do_not_panic() {
        for doc in [
            json!(null),
            json!([]),
            json!({"components": {"schemas": []}}),
            json!({"components": {"schemas": {"a": 1, "b": {"allOf": "x"}, "c": {"$ref": 5}}}}),
            json!({"components": {"schemas": {
                "loop": {"allOf": [{"$ref": "#/components/schemas/loop"}],
                    "x-kubernetes-group-version-kind": [{"group": "g", "version": "v", "kind": "K"}, "junk"]},
                "self": {"properties": {"me": {"$ref": "#/components/schemas/self"}}, "items": {"$ref": "#/components/schemas/self"}}
            }}}),
        ] {
            let index = PatchSchemaIndex::from_openapi(&doc);
            if let Some(s) = index.for_kind("g", "v", "K") {
                assert!(s.field("anything").is_none());
                assert!(s.items().is_none());
            }
            if let Some(s) = index.for_schema_name("self") {
                let me = s.field("me").and_then(|f| f.schema).expect("self ref");
                assert_eq!(me.name(), Some("self"));
                assert!(me.items().is_some());
            }
        }
    }
}
