//! Creating JSON merge patches (RFC 7386) from an old and a new document, as client-go's
//! `jsonpatch.CreateMergePatch` does for upstream's status writers: only what changed travels, a
//! removed key becomes `null`, arrays are replaced whole. json-patch applies merge patches but does
//! not create them.

use serde_json::{Map, Value};

/// The merge patch that turns `old` into `new`; `None` when they are equal.
pub fn create(old: &Value, new: &Value) -> Option<Value> {
    match (old, new) {
        (Value::Object(o), Value::Object(n)) => {
            let mut patch = Map::new();
            for (k, nv) in n {
                match o.get(k) {
                    Some(ov) => {
                        if let Some(p) = create(ov, nv) {
                            patch.insert(k.clone(), p);
                        }
                    }
                    None => {
                        patch.insert(k.clone(), nv.clone());
                    }
                }
            }
            for k in o.keys().filter(|k| !n.contains_key(*k)) {
                patch.insert(k.clone(), Value::Null);
            }
            (!patch.is_empty()).then_some(Value::Object(patch))
        }
        // a null in a merge patch means "delete": a key set to null in `new` is deleted too
        _ if old == new => None,
        _ => Some(new.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn round_trip(old: Value, new: Value) {
        let mut doc = old.clone();
        if let Some(p) = create(&old, &new) {
            json_patch::merge(&mut doc, &p);
        }
        // merge patches cannot express a null value: compare with nulls dropped
        assert_eq!(doc, strip_nulls(new));
    }

    fn strip_nulls(v: Value) -> Value {
        match v {
            Value::Object(m) => Value::Object(
                m.into_iter()
                    .filter(|(_, v)| !v.is_null())
                    .map(|(k, v)| (k, strip_nulls(v)))
                    .collect(),
            ),
            other => other,
        }
    }

    #[test]
    fn only_changes_travel() {
        let old = json!({"status": {"bindingClusters": ["a"], "specHash": 1, "keep": {"x": 1}}});
        let new =
            json!({"status": {"bindingClusters": ["a", "b"], "specHash": 1, "keep": {"x": 1}}});
        assert_eq!(
            create(&old, &new),
            Some(json!({"status": {"bindingClusters": ["a", "b"]}}))
        );
        round_trip(old, new);
    }

    #[test]
    fn removed_keys_become_null_and_equal_documents_need_no_patch() {
        let old = json!({"status": {"replicas": {"f": [1]}, "specHash": 1}});
        let new = json!({"status": {"specHash": 2}});
        assert_eq!(
            create(&old, &new),
            Some(json!({"status": {"replicas": null, "specHash": 2}}))
        );
        round_trip(old.clone(), new);
        assert_eq!(create(&old, &old), None);
    }

    #[test]
    fn type_changes_and_new_keys() {
        round_trip(
            json!({"a": [1, 2], "b": "x"}),
            json!({"a": {"k": 1}, "c": [3]}),
        );
        round_trip(json!({}), json!({"status": {"x": {"y": 1}}}));
    }
}
