//! A reference to one user object by `apiVersion`, `kind`, namespace and name, read from its JSON.
//!
//! Owned here, not by a stage, because several stages name user objects the same way: the
//! deployer (what to apply, prune or hand over to another Description) and the Base renderer
//! (which previously deployed object a failed override keeps in place). Unlike kube's
//! `reflector::ObjectRef` it is untyped: user manifests are `serde_json::Value`s.

use serde_json::Value;

#[derive(Debug, Clone, PartialEq)]
pub struct ObjectRef {
    pub api_version: String,
    pub kind: String,
    pub namespace: String,
    pub name: String,
}

impl ObjectRef {
    /// The reference of an object; `None` without `apiVersion`, `kind` or `metadata.name`.
    pub fn of(v: &Value) -> Option<ObjectRef> {
        Some(ObjectRef {
            api_version: v.get("apiVersion")?.as_str()?.to_string(),
            kind: v.get("kind")?.as_str()?.to_string(),
            namespace: v
                .pointer("/metadata/namespace")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            name: v.pointer("/metadata/name")?.as_str()?.to_string(),
        })
    }

    /// Same kind, namespace and name; the API version does not matter (one object, served in
    /// several versions).
    pub fn same_object(&self, other: &ObjectRef) -> bool {
        self.kind == other.kind && self.namespace == other.namespace && self.name == other.name
    }

    /// `Kind name` or `Kind namespace/name`, for messages.
    pub fn display(&self) -> String {
        if self.namespace.is_empty() {
            format!("{} {}", self.kind, self.name)
        } else {
            format!("{} {}/{}", self.kind, self.namespace, self.name)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn references_read_from_json() {
        let r = ObjectRef::of(&json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "namespace": "n"}}))
        .unwrap();
        assert_eq!(r.display(), "ConfigMap n/c");
        let other = ObjectRef {
            api_version: "v2".into(),
            ..r.clone()
        };
        assert!(r.same_object(&other));
        assert!(ObjectRef::of(&json!({"kind": "ConfigMap", "metadata": {"name": "c"}})).is_none());
        let ns = ObjectRef::of(&json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": "n"}}))
        .unwrap();
        assert_eq!(ns.display(), "Namespace n");
    }
}
