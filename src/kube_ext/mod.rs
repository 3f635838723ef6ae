//! Small helpers kube does not have: resource quantities, label strings, label selectors, random
//! name suffixes, untyped object references, strategic and JSON merge patches, a growth bound for
//! JSON patches, YAML I/O, and the metadata of Kubernetes protobuf bodies.

pub mod condition;
pub mod health;
pub mod intstr;
pub mod labels;
pub mod merge_patch;
pub mod object_ref;
pub mod patch_limits;
pub mod protobuf;
pub mod quantity;
pub mod strategic_merge;
pub mod yaml;

use std::collections::BTreeMap;

/// Parses `k1=v1,k2=v2` (upstream's `--cluster-labels`); entries not of the form `a=b` are
/// skipped and returned separately so the caller can warn about them.
pub fn parse_labels(spec: &str) -> (BTreeMap<String, String>, Vec<String>) {
    let mut labels = BTreeMap::new();
    let mut skipped = Vec::new();
    for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        match item.split_once('=') {
            Some((k, v)) if !k.trim().is_empty() && !v.contains('=') => {
                labels.insert(k.trim().to_string(), v.trim().to_string());
            }
            _ => skipped.push(item.to_string()),
        }
    }
    (labels, skipped)
}

/// The JSON type of `value` in words, for messages: `null`, `boolean`, `number`, `string`,
/// `array` or `object`.
pub fn json_type(value: &serde_json::Value) -> &'static str {
    use serde_json::Value;
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// [`json_type`] with its article, for "must be an object, got a string".
pub fn a_json_type(value: &serde_json::Value) -> &'static str {
    use serde_json::Value;
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Kubernetes' random-suffix alphabet (no vowels, no confusable digits), as `generateName` uses.
pub fn random_suffix(len: usize) -> String {
    use rand::Rng;
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut rng = rand::rng();
    (0..len)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_parse_and_bad_entries_are_reported() {
        let (labels, skipped) = parse_labels("env=dev, region=eu,broken,=x,a=b=c");
        assert_eq!(labels.get("env").map(String::as_str), Some("dev"));
        assert_eq!(labels.get("region").map(String::as_str), Some("eu"));
        assert_eq!(labels.len(), 2);
        assert_eq!(skipped, vec!["broken", "=x", "a=b=c"]);
    }

    #[test]
    fn suffixes_use_the_kubernetes_alphabet() {
        let s = random_suffix(5);
        assert_eq!(s.len(), 5);
        assert!(
            s.chars().all(|c| "bcdfghjklmnpqrstvwxz2456789".contains(c)),
            "{s}"
        );
    }
}
