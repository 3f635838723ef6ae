//! Helm's value coalescing (`chartutil.CoalesceTables`), which `Helm` overrides merge values
//! with: upstream `patch.go` calls Helm's own function, so the rules below are Helm's.

use serde_json::{Map, Value};

use crate::kube_ext::json_type;

/// `G = coalesce(value over G)`: Helm's `chartutil.CoalesceTables(override, current)`.
pub(crate) fn coalesce_helm_values(current: &mut Value, override_: Value) -> Result<(), String> {
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
