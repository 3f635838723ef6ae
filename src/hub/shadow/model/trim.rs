//! §3.3 create-time preparation of a submitted object and trimming of the parent's dry-run
//! result before it becomes a template. Port of upstream
//! `pkg/hub/registry/shadow/template/{rest.go,trimmer.go}` (`dryRunCreate`, `trimResult`,
//! `trimCommonMetadata`, `trimBatchJob`, `trimCoreService`, `trimStatus`).

use serde_json::Value;

use super::*;

/// Adds `clusternet.io/created-by: clusternet-hub` to the object's labels.
///
/// Like upstream (`GetLabels` then `SetLabels`), unreadable labels (not a string map) are
/// replaced by a map holding only this label.
pub fn mark_created_by_hub(obj: &mut Value) -> Result<(), ModelError> {
    let mut labels = string_map(get_path(obj, &["metadata", "labels"])).unwrap_or_default();
    labels.insert(CREATED_BY_LABEL.into(), CLUSTERNET_HUB_NAME.into());
    set_path(obj, &["metadata", "labels"], string_map_value(&labels))
        .map_err(ModelError::InvalidObject)
}

/// True when the object asks to skip the dry run (`apps.clusternet.io/skip-validating: "true"`).
pub fn skips_validation(obj: &Value) -> bool {
    get_str(
        obj,
        &["metadata", "annotations", SKIP_VALIDATING_ANNOTATION],
    ) == Some("true")
}

/// Gives an object without `metadata.uid` the UID produced by `fresh_uid` (skip-validating path:
/// children use the UID to recognise their own objects, upstream issue #468).
pub fn ensure_uid(obj: &mut Value, fresh_uid: impl FnOnce() -> String) -> Result<(), ModelError> {
    if get_str(obj, &["metadata", "uid"]).is_some_and(|u| !u.is_empty()) {
        return Ok(());
    }
    set_path(obj, &["metadata", "uid"], Value::String(fresh_uid()))
        .map_err(ModelError::InvalidObject)
}

/// Whether the namespace must be validated before a create, and which field an error names:
/// `metadata.name` for Namespace objects (their own name), `metadata.namespace` for namespaced
/// resources, nothing for other cluster-scoped resources.
pub fn namespace_validation_field(kind: &str, namespaced: bool) -> Option<&'static str> {
    if kind == "Namespace" {
        Some("metadata.name")
    } else if namespaced {
        Some("metadata.namespace")
    } else {
        None
    }
}

/// `apimachinery` `ValidateNamespaceName` (an RFC 1123 label); returns the error strings.
pub fn validate_namespace_name(name: &str) -> Vec<String> {
    const LABEL_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
    let mut errs = Vec::new();
    if name.len() > 63 {
        errs.push("must be no more than 63 characters".to_string());
    }
    let is_alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    let label_ok = |s: &str| {
        !s.is_empty()
            && s.starts_with(is_alnum)
            && s.ends_with(is_alnum)
            && s.chars().all(|c| is_alnum(c) || c == '-')
    };
    if !label_ok(name) {
        if name.split('.').all(label_ok) {
            errs.push("must not contain dots".to_string());
        } else {
            errs.push(format!(
                "a lowercase RFC 1123 label must consist of lower case alphanumeric characters \
                 or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  \
                 or '123-abc', regex used for validation is '{LABEL_FMT}')"
            ));
        }
    }
    errs
}

/// Namespace of the dry-run request: Namespaces are created cluster-level, other namespaced
/// resources in the reserved namespace (so the user's namespace need not exist in the parent),
/// cluster-scoped ones without namespace. When `Some`, the object's own `metadata.namespace`
/// must be swapped for it during the dry run and restored afterwards.
pub fn dry_run_namespace<'a>(
    kind: &str,
    namespaced: bool,
    reserved_namespace: &'a str,
) -> Option<&'a str> {
    (kind != "Namespace" && namespaced).then_some(reserved_namespace)
}

/// Whether an AlreadyExists from the dry run means "store the live object instead" (CRDs).
pub fn is_crd_kind(group: &str, kind: &str) -> bool {
    group == "apiextensions.k8s.io" && kind == "CustomResourceDefinition"
}

// ---------------------------------------------------------------------------------------------
// §3.3 step 5: trimming
// ---------------------------------------------------------------------------------------------

/// Removes what the parent apiserver generated during the dry run and must not be replayed into
/// child clusters. Port of upstream `trimResult`; see the module docs for the upstream names.
///
/// `metadata.uid` is kept: it is used to check ownership when patching, and is cleared only when
/// deploying to children.
pub fn trim_template(obj: &mut Value, group: &str, kind: &str) {
    for field in [
        "creationTimestamp",
        "managedFields",
        "resourceVersion",
        "selfLink",
    ] {
        remove_path(obj, &["metadata", field]);
    }
    match (group, kind) {
        ("batch", "Job") => trim_batch_job(obj),
        ("", "Service") => trim_core_service(obj),
        _ => {}
    }
    remove_path(obj, &["status"]);
}

/// A dry-run Job carries a selector and pod labels bound to the dry-run UID; the child's
/// apiserver rejects them (`selector` not auto-generated, upstream issue #168) because its Job
/// gets another UID. Kubernetes >= 1.27 stamps the `batch.kubernetes.io/` variants as well and
/// validates them the same way, so both spellings go. `job-name` stays (same name in children).
fn trim_batch_job(obj: &mut Value) {
    for key in ["controller-uid", "batch.kubernetes.io/controller-uid"] {
        remove_path(obj, &["spec", "selector", "matchLabels", key]);
        remove_path(obj, &["spec", "template", "metadata", "labels", key]);
    }
    remove_path(
        obj,
        &[
            "spec",
            "template",
            "metadata",
            "labels",
            "batch.kubernetes.io/job-name",
        ],
    );
    remove_path(obj, &["spec", "template", "metadata", "creationTimestamp"]);
}

/// Cluster IPs and node ports are allocated per cluster; replaying the parent's would conflict.
fn trim_core_service(obj: &mut Value) {
    // Upstream leaves a Service without a string `spec.type` untouched.
    let Some(service_type) = get_str(obj, &["spec", "type"]).map(str::to_string) else {
        return;
    };
    if get_str(obj, &["spec", "clusterIP"]).is_some_and(|ip| ip != "None") {
        remove_path(obj, &["spec", "clusterIP"]);
        remove_path(obj, &["spec", "clusterIPs"]);
    }
    if service_type != "NodePort" && service_type != "LoadBalancer" {
        return;
    }
    remove_path(obj, &["spec", "healthCheckNodePort"]);
    if let Some(Value::Array(ports)) = get_path_mut(obj, &["spec", "ports"])
        // Upstream edits a copy and abandons it on the first non-object item.
        && ports.iter().all(Value::is_object)
    {
        for port in ports.iter_mut() {
            remove_path(port, &["nodePort"]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn created_by_label_replaces_unreadable_labels() {
        let mut obj = json!({"metadata": {"labels": {"a": 1}}});
        mark_created_by_hub(&mut obj).unwrap();
        assert_eq!(
            obj["metadata"]["labels"],
            json!({"clusternet.io/created-by": "clusternet-hub"})
        );
        let mut bare = json!({"kind": "ConfigMap"});
        mark_created_by_hub(&mut bare).unwrap();
        assert_eq!(object_labels(&bare)[CREATED_BY_LABEL], CLUSTERNET_HUB_NAME);
    }

    #[test]
    fn skip_validating_and_uid() {
        let mut obj = json!({"metadata": {"annotations": {SKIP_VALIDATING_ANNOTATION: "true"}}});
        assert!(skips_validation(&obj));
        ensure_uid(&mut obj, || "fresh".into()).unwrap();
        assert_eq!(obj["metadata"]["uid"], "fresh");
        ensure_uid(&mut obj, || panic!("uid already set")).unwrap();
        assert!(!skips_validation(
            &json!({"metadata": {"annotations": {SKIP_VALIDATING_ANNOTATION: "yes"}}})
        ));
    }

    #[test]
    fn create_namespace_rules() {
        assert_eq!(
            namespace_validation_field("Namespace", false),
            Some("metadata.name")
        );
        assert_eq!(
            namespace_validation_field("Pod", true),
            Some("metadata.namespace")
        );
        assert_eq!(namespace_validation_field("ClusterRole", false), None);
        assert_eq!(
            dry_run_namespace("Pod", true, "clusternet-reserved"),
            Some("clusternet-reserved")
        );
        assert_eq!(
            dry_run_namespace("Namespace", false, "clusternet-reserved"),
            None
        );
        assert!(validate_namespace_name("qux").is_empty());
        assert_eq!(
            validate_namespace_name("a.b"),
            vec!["must not contain dots"]
        );
        assert!(validate_namespace_name("Bad_NS")[0].starts_with("a lowercase RFC 1123 label"));
        assert_eq!(validate_namespace_name(&"a".repeat(64)).len(), 1);
        assert!(is_crd_kind(
            "apiextensions.k8s.io",
            "CustomResourceDefinition"
        ));
    }

    // ---- trimming ---------------------------------------------------------------------------

    #[test]
    fn trim_job() {
        let mut job = json!({
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "creationTimestamp": "2021-11-01T07:01:18Z",
                "generation": 1,
                "labels": {"clusternet.io/created-by": "clusternet-hub"},
                "name": "pi",
                "namespace": "default",
                "resourceVersion": "4450181",
                "selfLink": "x",
                "managedFields": [],
                "uid": "dc8ca8aa-268c-4634-b1f7-6bf67e3af6cb",
            },
            "spec": {
                "backoffLimit": 4,
                "selector": {"matchLabels": {
                    "controller-uid": "a2d9",
                    "batch.kubernetes.io/controller-uid": "a2d9",
                }},
                "template": {
                    "metadata": {
                        "creationTimestamp": null,
                        "labels": {
                            "controller-uid": "a2d9",
                            "batch.kubernetes.io/controller-uid": "a2d9",
                            "batch.kubernetes.io/job-name": "pi",
                            "job-name": "pi",
                        },
                    },
                    "spec": {"restartPolicy": "Never"},
                },
            },
            "status": {},
        });
        trim_template(&mut job, "batch", "Job");
        assert_eq!(
            job,
            json!({
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {
                    "generation": 1,
                    "labels": {"clusternet.io/created-by": "clusternet-hub"},
                    "name": "pi",
                    "namespace": "default",
                    "uid": "dc8ca8aa-268c-4634-b1f7-6bf67e3af6cb",
                },
                "spec": {
                    "backoffLimit": 4,
                    "selector": {"matchLabels": {}},
                    "template": {
                        "metadata": {"labels": {"job-name": "pi"}},
                        "spec": {"restartPolicy": "Never"},
                    },
                },
            })
        );
    }

    fn service(ty: &str, cluster_ip: &str) -> Value {
        json!({
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "svc", "namespace": "ns", "resourceVersion": "1", "uid": "u"},
            "spec": {
                "clusterIP": cluster_ip,
                "clusterIPs": [cluster_ip],
                "healthCheckNodePort": 31000,
                "ports": [
                    {"name": "http", "nodePort": 30597, "port": 80},
                    {"name": "https", "nodePort": 30598, "port": 443},
                ],
                "type": ty,
            },
            "status": {"loadBalancer": {}},
        })
    }

    #[test]
    fn trim_node_port_service() {
        let mut svc = service("NodePort", "10.98.177.115");
        trim_template(&mut svc, "", "Service");
        assert_eq!(
            svc,
            json!({
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": "svc", "namespace": "ns", "uid": "u"},
                "spec": {
                    "ports": [{"name": "http", "port": 80}, {"name": "https", "port": 443}],
                    "type": "NodePort",
                },
            })
        );
        let mut lb = service("LoadBalancer", "10.0.0.1");
        trim_template(&mut lb, "", "Service");
        assert!(lb["spec"].get("healthCheckNodePort").is_none());
        assert!(lb["spec"]["ports"][0].get("nodePort").is_none());
    }

    #[test]
    fn trim_headless_and_cluster_ip_services() {
        let mut headless = service("ClusterIP", "None");
        trim_template(&mut headless, "", "Service");
        assert_eq!(headless["spec"]["clusterIP"], "None");
        assert_eq!(headless["spec"]["clusterIPs"], json!(["None"]));
        // node ports are only trimmed for NodePort/LoadBalancer
        assert_eq!(headless["spec"]["ports"][0]["nodePort"], 30597);
        assert_eq!(headless["spec"]["healthCheckNodePort"], 31000);

        let mut plain = service("ClusterIP", "10.1.2.3");
        trim_template(&mut plain, "", "Service");
        assert!(plain["spec"].get("clusterIP").is_none());
        assert!(plain["spec"].get("clusterIPs").is_none());

        // a Service without spec.type is left alone (upstream)
        let mut untyped = service("ClusterIP", "10.1.2.3");
        untyped["spec"].as_object_mut().unwrap().remove("type");
        trim_template(&mut untyped, "", "Service");
        assert_eq!(untyped["spec"]["clusterIP"], "10.1.2.3");

        // a non-object port aborts the node-port trim (upstream works on a copy)
        let mut odd = service("NodePort", "None");
        odd["spec"]["ports"]
            .as_array_mut()
            .unwrap()
            .push(json!("x"));
        trim_template(&mut odd, "", "Service");
        assert_eq!(odd["spec"]["ports"][0]["nodePort"], 30597);
        assert!(odd["spec"].get("healthCheckNodePort").is_none());
    }

    #[test]
    fn trim_other_kinds_only_common_fields() {
        let mut svc_like = service("NodePort", "10.0.0.1");
        trim_template(&mut svc_like, "example.com", "Service");
        assert_eq!(svc_like["spec"]["clusterIP"], "10.0.0.1");
        assert!(svc_like.get("status").is_none());
        assert!(svc_like["metadata"].get("resourceVersion").is_none());
    }
}
