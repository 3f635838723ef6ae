//! §3.5 the `/scale` subresource and the messages for subresource writes the shadow API refuses.
//! Port of upstream `pkg/hub/registry/shadow/template/scale.go`.

use serde_json::{Value, json};

use super::*;

/// Whether an update/patch may target `subresource` (only `scale`; everything else is a
/// template, whose status makes no sense to update).
pub fn subresource_update_allowed(subresource: &str) -> bool {
    subresource == "scale"
}

/// Message of the 405 MethodNotSupported for an update of another subresource.
pub fn subresource_update_message(resource: &str, subresource: &str) -> String {
    format!(
        "{resource} are considered as templates, which make no sense to update templates' {subresource}"
    )
}

/// Plain-text body of the 405 answered on CRD `/status` routes.
pub fn crd_status_message(method: &str, kind: &str) -> String {
    format!("Clusternet does not allow to {method} status of {kind}")
}

/// `apiVersion` of the `Scale` served from a containing group version (upstream
/// `ScaleREST.GroupVersionKind`): the legacy Scale types for their own group versions,
/// `autoscaling/v1` otherwise.
pub fn scale_api_version(containing_group_version: &str) -> &'static str {
    match containing_group_version {
        "extensions/v1beta1" => "extensions/v1beta1",
        "apps/v1beta1" => "apps/v1beta1",
        "apps/v1beta2" => "apps/v1beta2",
        _ => "autoscaling/v1",
    }
}

/// Reads an int64 like `NestedInt64` and truncates it to int32 like upstream `getReplicas`;
/// absent or non-integer values count as 0.
fn replicas_at(obj: &Value, path: &[&str]) -> i32 {
    get_path(obj, path).and_then(Value::as_i64).unwrap_or(0) as i32
}

/// The `Scale` of an object (normally the transformed object, so resource version, UID and
/// creation timestamp are the Manifest's): name, namespace, uid, resourceVersion,
/// creationTimestamp, `spec.replicas` from the object's `spec.replicas`, `status.replicas` from
/// its `status.replicas` (normally absent, hence 0). Empty fields are omitted as the typed
/// Scale's JSON would.
pub fn scale_from_object(obj: &Value, scale_api_version: &str) -> Value {
    let mut metadata = Map::new();
    for field in ["name", "namespace", "uid", "resourceVersion"] {
        if let Some(v) = get_str(obj, &["metadata", field]).filter(|s| !s.is_empty()) {
            metadata.insert(field.into(), v.into());
        }
    }
    let created = get_str(obj, &["metadata", "creationTimestamp"])
        .filter(|s| !s.is_empty())
        .map_or(Value::Null, |s| Value::String(s.into()));
    metadata.insert("creationTimestamp".into(), created);

    let mut spec = Map::new();
    let spec_replicas = replicas_at(obj, &["spec", "replicas"]);
    if spec_replicas != 0 {
        spec.insert("replicas".into(), spec_replicas.into());
    }
    json!({
        "apiVersion": scale_api_version,
        "kind": SCALE_KIND,
        "metadata": metadata,
        "spec": spec,
        "status": { "replicas": replicas_at(obj, &["status", "replicas"]) },
    })
}

/// Writes a client's `Scale` back into the stored template: only `spec.replicas` changes
/// (missing in the Scale means 0, as when decoding into the typed Scale).
pub fn apply_scale(template: &mut Value, scale: &Value) -> Result<(), ModelError> {
    if !scale.is_object() {
        return Err(ModelError::InvalidScale("body is not an object".into()));
    }
    if let Some(kind) = get_str(scale, &["kind"])
        && kind != SCALE_KIND
    {
        return Err(ModelError::InvalidScale(format!(
            "expected input object type to be Scale, but {kind}"
        )));
    }
    let replicas = match get_path(scale, &["spec", "replicas"]) {
        None | Some(Value::Null) => 0,
        Some(v) => v
            .as_i64()
            .and_then(|r| i32::try_from(r).ok())
            .ok_or_else(|| {
                ModelError::InvalidScale(format!("spec.replicas must be an int32, got {v}"))
            })?,
    };
    set_path(template, &["spec", "replicas"], json!(i64::from(replicas)))
        .map_err(ModelError::InvalidObject)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hub::shadow::model::fixtures::stored_manifest;

    #[test]
    fn scale_round_trip() {
        let obj = manifest_to_object(&stored_manifest()).unwrap();
        let scale = scale_from_object(&obj, scale_api_version("apps/v1"));
        assert_eq!(
            scale,
            json!({
                "apiVersion": "autoscaling/v1",
                "kind": "Scale",
                "metadata": {
                    "name": "my-nginx",
                    "namespace": "qux",
                    "uid": "manifest-uid",
                    "resourceVersion": "777",
                    "creationTimestamp": "2024-05-01T10:00:00Z",
                },
                "spec": {"replicas": 6},
                "status": {"replicas": 0},
            })
        );
        assert_eq!(scale_api_version("apps/v1beta2"), "apps/v1beta2");
        assert_eq!(
            scale_api_version("extensions/v1beta1"),
            "extensions/v1beta1"
        );

        let mut template = stored_manifest()["template"].clone();
        apply_scale(
            &mut template,
            &json!({"kind": "Scale", "spec": {"replicas": 2}, "status": {"replicas": 9}}),
        )
        .unwrap();
        assert_eq!(template["spec"], json!({"replicas": 2}));
        assert!(template.get("status").is_none());
        apply_scale(
            &mut template,
            &json!({"apiVersion": "autoscaling/v1", "kind": "Scale", "spec": {}}),
        )
        .unwrap();
        assert_eq!(template["spec"]["replicas"], 0);
        assert!(apply_scale(&mut template, &json!({"kind": "Deployment"})).is_err());
        assert!(apply_scale(&mut template, &json!({"spec": {"replicas": "3"}})).is_err());
        assert!(apply_scale(&mut template, &json!({"spec": {"replicas": 1u64 << 40}})).is_err());
    }

    #[test]
    fn subresource_messages() {
        assert!(subresource_update_allowed("scale"));
        assert!(!subresource_update_allowed("status"));
        assert_eq!(
            subresource_update_message("deployments", "status"),
            "deployments are considered as templates, which make no sense to update templates' status"
        );
        assert_eq!(
            crd_status_message("PUT", "CronTab"),
            "Clusternet does not allow to PUT status of CronTab"
        );
    }
}
