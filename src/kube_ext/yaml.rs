//! The one door through which the crate reads and writes YAML: configuration, CRDs, kubeconfigs,
//! request bodies of the shadow API, override values.
//!
//! serde_yaml is frozen upstream; keeping every call behind this small module means swapping it
//! touches one file. Errors keep serde_yaml's own text (users see it in HTTP responses, object
//! conditions and the command line), wrapped in one typed [`YamlError`].

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

/// A YAML document could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum YamlError {
    /// Not valid YAML, not of the expected shape, or not serializable as YAML.
    #[error(transparent)]
    Yaml(#[from] serde_yaml::Error),
    /// Valid YAML that has no JSON equivalent (a NaN-like number, a map key that is not a scalar).
    #[error("{0}")]
    NotJson(String),
}

/// Parses one YAML document.
pub fn from_str<T: DeserializeOwned>(text: &str) -> Result<T, YamlError> {
    Ok(serde_yaml::from_str(text)?)
}

/// Parses one YAML document from bytes (request bodies).
pub fn from_slice<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, YamlError> {
    Ok(serde_yaml::from_slice(bytes)?)
}

/// Parses a stream of `---`-separated YAML documents, each into a `T`.
pub fn from_str_documents<T: DeserializeOwned>(text: &str) -> Result<Vec<T>, YamlError> {
    serde_yaml::Deserializer::from_str(text)
        .map(|doc| T::deserialize(doc).map_err(YamlError::from))
        .collect()
}

/// Writes one YAML document (no leading `---`).
pub fn to_string<T: Serialize + ?Sized>(value: &T) -> Result<String, YamlError> {
    Ok(serde_yaml::to_string(value)?)
}

/// YAML text to the JSON value it stands for, as `sigs.k8s.io/yaml.YAMLToJSON` does it: merge
/// keys (`<<`) are applied, tags dropped, and scalar map keys become their text.
pub fn to_json(text: &str) -> Result<Value, YamlError> {
    let mut yaml: serde_yaml::Value = serde_yaml::from_str(text)?;
    yaml.apply_merge()?;
    value_to_json(yaml)
}

fn value_to_json(yaml: serde_yaml::Value) -> Result<Value, YamlError> {
    Ok(match yaml {
        serde_yaml::Value::Null => Value::Null,
        serde_yaml::Value::Bool(b) => Value::Bool(b),
        serde_yaml::Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                Value::from(i)
            } else if let Some(u) = n.as_u64() {
                Value::from(u)
            } else {
                let f = n.as_f64().unwrap_or(f64::NAN);
                serde_json::Number::from_f64(f)
                    .map(Value::Number)
                    .ok_or_else(|| {
                        YamlError::NotJson(format!("{n} cannot be represented in JSON"))
                    })?
            }
        }
        serde_yaml::Value::String(s) => Value::String(s),
        serde_yaml::Value::Sequence(items) => Value::Array(
            items
                .into_iter()
                .map(value_to_json)
                .collect::<Result<_, _>>()?,
        ),
        serde_yaml::Value::Mapping(mapping) => {
            let mut object = Map::new();
            for (key, value) in mapping {
                // YAML allows non-string keys; like sigs.k8s.io/yaml, scalars become their text.
                let key = match key {
                    serde_yaml::Value::String(s) => s,
                    serde_yaml::Value::Number(n) => n.to_string(),
                    serde_yaml::Value::Bool(b) => b.to_string(),
                    other => {
                        return Err(YamlError::NotJson(format!("unsupported map key {other:?}")));
                    }
                };
                object.insert(key, value_to_json(value)?);
            }
            Value::Object(object)
        }
        serde_yaml::Value::Tagged(tagged) => value_to_json(tagged.value)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn documents_round_trip() {
        let docs: Vec<Value> = from_str_documents("a: 1\n---\nb: [x]\n").unwrap();
        assert_eq!(docs, vec![json!({"a": 1}), json!({"b": ["x"]})]);
        assert_eq!(to_string(&json!({"a": 1})).unwrap(), "a: 1\n");
        let v: Value = from_slice(b"k: v").unwrap();
        assert_eq!(v, json!({"k": "v"}));
    }

    #[test]
    fn to_json_follows_yaml_to_json() {
        let v = to_json("base: &b {x: 1}\nderived:\n  <<: *b\n  y: !tag 2\n1: one\ntrue: yes\n")
            .unwrap();
        assert_eq!(
            v,
            json!({"base": {"x": 1}, "derived": {"x": 1, "y": 2}, "1": "one", "true": "yes"})
        );
        let err = to_json("? [a]\n: b\n").unwrap_err();
        assert!(matches!(err, YamlError::NotJson(_)), "{err}");
        assert!(err.to_string().starts_with("unsupported map key"), "{err}");
    }

    #[test]
    fn errors_keep_serde_yaml_text() {
        let ours = from_str::<Value>("a: [").unwrap_err().to_string();
        let theirs = serde_yaml::from_str::<Value>("a: [")
            .unwrap_err()
            .to_string();
        assert_eq!(ours, theirs);
    }
}
