//! A bound on how much an RFC 6902 JSON patch may grow a document.
//!
//! A JSON patch is small, but what it does need not be: `{"op": "copy", "from": "", "path":
//! "/a"}` copies the whole document into itself, and forty of those make 2^40 copies. The shadow
//! API applies JSON patches from any user allowed to patch, and the Description renderer applies
//! the JSON patches of Localizations and Globalizations; without a bound one short patch takes
//! the hub or the controller down (found while writing the fuzz harnesses of issue #21).
//! Upstream relies on the API server's request limits; here patches are applied in-process, so
//! the patch itself is charged for what it adds, one operation at a time, before it runs.

use json_patch::PatchOperation;
use serde_json::Value;

/// How many bytes of JSON (estimated) one JSON patch may add to a document: above any object
/// the API server stores (etcd refuses values over 1.5 MiB) and any request body the hub reads
/// (3 MiB), far below what hurts.
pub const MAX_PATCH_GROWTH: usize = 4 * 1024 * 1024;

/// What a patch has left to add, in estimated bytes of JSON.
#[derive(Debug, Clone)]
pub struct GrowthBudget {
    left: usize,
}

impl GrowthBudget {
    /// A budget of `limit` bytes.
    pub fn new(limit: usize) -> Self {
        Self { left: limit }
    }

    /// Charges `op`, about to be applied to `doc`, for what it can add (the value it adds or
    /// copies; removals are not credited back). `false` once the budget is spent: the operation
    /// must not run.
    pub fn charge(&mut self, doc: &Value, op: &PatchOperation) -> bool {
        // measuring stops just past what is left, so an enormous copy costs no more than that
        let cap = self.left.saturating_add(1);
        let cost = match op {
            PatchOperation::Add(o) => json_size(&o.value, cap),
            PatchOperation::Replace(o) => json_size(&o.value, cap),
            PatchOperation::Copy(o) => doc
                .pointer(o.from.as_str())
                .map_or(0, |v| json_size(v, cap)),
            PatchOperation::Remove(_) | PatchOperation::Move(_) | PatchOperation::Test(_) => 0,
        };
        match self.left.checked_sub(cost) {
            Some(left) => {
                self.left = left;
                true
            }
            None => {
                self.left = 0;
                false
            }
        }
    }
}

/// The length of `value` serialized as compact JSON, roughly (escapes and number digits are
/// estimated), counted without recursion; counting stops as soon as it passes `cap`.
pub fn json_size(value: &Value, cap: usize) -> usize {
    let mut total = 0usize;
    let mut pending = vec![value];
    while let Some(v) = pending.pop() {
        total = total.saturating_add(match v {
            Value::Null | Value::Bool(_) => 5,
            Value::Number(_) => 8,
            Value::String(s) => s.len() + 2,
            Value::Array(items) => {
                pending.extend(items);
                items.len() + 2
            }
            Value::Object(map) => {
                let mut keys = 0usize;
                for (k, v) in map {
                    keys = keys.saturating_add(k.len() + 4);
                    pending.push(v);
                }
                keys + 2
            }
        });
        if total > cap {
            break;
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn op(value: Value) -> PatchOperation {
        serde_json::from_value(value).expect("an operation")
    }

    #[test]
    fn sizes_follow_the_serialized_length() {
        for v in [
            json!(null),
            json!("abc"),
            json!([1, 2, 3]),
            json!({"a": {"b": ["c", true]}}),
        ] {
            let real = v.to_string().len();
            let estimate = json_size(&v, usize::MAX);
            // never far below (that would loosen the bound), at most a few times above
            assert!(
                estimate >= real / 2 && estimate <= real * 5,
                "{v}: {estimate} vs {real}"
            );
        }
        // measuring stops once past the cap: here after the outer list (about 100 KB of its
        // ~9 MB), not after its million elements
        let big = json!(vec![vec![0; 10]; 100_000]);
        let capped = json_size(&big, 100);
        assert!(capped > 100 && capped < 200_000, "{capped}");
    }

    #[test]
    fn copies_are_charged_for_what_they_copy() {
        let doc = json!({"a": "x".repeat(1000)});
        let mut budget = GrowthBudget::new(2500);
        let copy = op(json!({"op": "copy", "from": "/a", "path": "/b"}));
        assert!(budget.charge(&doc, &copy));
        assert!(budget.charge(&doc, &copy));
        assert!(
            !budget.charge(&doc, &copy),
            "the third copy goes past 2500 bytes"
        );
        assert!(!budget.charge(&doc, &op(json!({"op": "add", "path": "/c", "value": 1}))));
        // removals and tests cost nothing
        let mut budget = GrowthBudget::new(0);
        assert!(budget.charge(&doc, &op(json!({"op": "remove", "path": "/a"}))));
        assert!(budget.charge(&doc, &op(json!({"op": "test", "path": "/a", "value": 1}))));
        // a copy from nowhere fails in the patch itself, not here
        assert!(budget.charge(
            &doc,
            &op(json!({"op": "copy", "from": "/zz", "path": "/b"}))
        ));
    }
}
