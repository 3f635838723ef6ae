//! Manifest naming and labels (hub.md §3.2), and the full `Manifest` JSON stored in the reserved
//! namespace, including the label merge of an update (§3.5): what the shadow API stores and what
//! the controller publishes as feeds (a ServiceImport's derived Service and slices) alike. Port
//! of the naming half of upstream `pkg/hub/registry/shadow/template/rest.go`
//! (`getResourceName`, `normalizeManifestName`, `Create`'s label set-up, `Update`'s label merge).

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::known::{
    CONFIG_GROUP_LABEL, CONFIG_KIND_LABEL, CONFIG_NAME_LABEL, CONFIG_NAMESPACE_LABEL,
    CONFIG_VERSION_LABEL,
};

/// `apiVersion` of stored Manifests.
pub const MANIFEST_API_VERSION: &str = "apps.clusternet.io/v1alpha1";
/// `kind` of stored Manifests.
pub const MANIFEST_KIND: &str = "Manifest";
/// Kind whose `/scale` update must not rewrite the `config.kind` label.
pub const SCALE_KIND: &str = "Scale";

/// Strips a subresource (`deployments/scale` -> `deployments`), as upstream `getResourceName`.
pub fn base_resource(plural: &str) -> &str {
    plural.split('/').next().unwrap_or(plural)
}

/// Manifest name `R.N.X` (namespaced, `namespace` is `Some`) or `R.X` (cluster-scoped).
///
/// Dots are safe separators because neither resource plurals nor namespaces may contain one.
pub fn manifest_name(plural: &str, namespace: Option<&str>, name: &str) -> String {
    let resource = base_resource(plural);
    match namespace {
        Some(ns) => format!("{resource}.{ns}.{name}"),
        None => format!("{resource}.{name}"),
    }
}

/// Deprecated Manifest name `R-N-X` / `R-X`. Hyphens can collide (`foos` `bar`/`lovely-panda`
/// vs `bar-lovely`/`panda`), so it is only used when a Manifest with this name already exists.
pub fn legacy_manifest_name(plural: &str, namespace: Option<&str>, name: &str) -> String {
    let resource = base_resource(plural);
    match namespace {
        Some(ns) => format!("{resource}-{ns}-{name}"),
        None => format!("{resource}-{name}"),
    }
}

/// Picks the Manifest name the way upstream `getNormalizedManifestName` does: the legacy name
/// when `legacy_exists(legacy_name)` says such a Manifest exists, otherwise the dotted name.
pub fn normalized_manifest_name(
    plural: &str,
    namespace: Option<&str>,
    name: &str,
    legacy_exists: impl FnOnce(&str) -> bool,
) -> String {
    let legacy = legacy_manifest_name(plural, namespace, name);
    if legacy_exists(&legacy) {
        legacy
    } else {
        manifest_name(plural, namespace, name)
    }
}

fn set_config_labels(
    labels: &mut BTreeMap<String, String>,
    group: &str,
    version: &str,
    kind: Option<&str>,
    name: &str,
    namespace: &str,
) {
    labels.insert(CONFIG_GROUP_LABEL.into(), group.into());
    labels.insert(CONFIG_VERSION_LABEL.into(), version.into());
    if let Some(kind) = kind {
        labels.insert(CONFIG_KIND_LABEL.into(), kind.into());
    }
    labels.insert(CONFIG_NAME_LABEL.into(), name.into());
    labels.insert(CONFIG_NAMESPACE_LABEL.into(), namespace.into());
}

/// Labels of a new Manifest: the object's labels (reused so client label selectors keep
/// working) plus the five `config.*` labels. `namespace` is `""` for cluster-scoped objects.
pub fn manifest_labels(
    object_labels: &BTreeMap<String, String>,
    group: &str,
    version: &str,
    kind: &str,
    name: &str,
    namespace: &str,
) -> BTreeMap<String, String> {
    let mut labels = object_labels.clone();
    set_config_labels(&mut labels, group, version, Some(kind), name, namespace);
    labels
}

/// Labels of an updated Manifest (§3.5): object labels are added to the existing ones (a label
/// removed from the object stays on the Manifest), `config.*` labels are refreshed, except
/// `config.kind` when the update came through `/scale` (`kind == "Scale"`), which would
/// otherwise relabel a Deployment Manifest as a Scale.
pub fn merge_labels_for_update(
    existing_manifest_labels: &BTreeMap<String, String>,
    object_labels: &BTreeMap<String, String>,
    group: &str,
    version: &str,
    kind: &str,
    name: &str,
    namespace: &str,
) -> BTreeMap<String, String> {
    let mut labels = existing_manifest_labels.clone();
    labels.extend(object_labels.iter().map(|(k, v)| (k.clone(), v.clone())));
    let kind = (kind != SCALE_KIND).then_some(kind);
    set_config_labels(&mut labels, group, version, kind, name, namespace);
    labels
}

/// A complete new `Manifest` (apps.clusternet.io/v1alpha1) holding `template`.
pub fn build_manifest(
    reserved_namespace: &str,
    manifest_name: &str,
    labels: &BTreeMap<String, String>,
    template: Value,
) -> Value {
    json!({
        "apiVersion": MANIFEST_API_VERSION,
        "kind": MANIFEST_KIND,
        "metadata": {
            "name": manifest_name,
            "namespace": reserved_namespace,
            "labels": labels,
        },
        "template": template,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    // the end-to-end case stores what the shadow API prepares
    use crate::hub::shadow::model::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    // ---- §3.2 -------------------------------------------------------------------------------

    #[test]
    fn manifest_names() {
        assert_eq!(
            manifest_name("deployments", Some("qux"), "my-nginx"),
            "deployments.qux.my-nginx"
        );
        assert_eq!(manifest_name("namespaces", None, "qux"), "namespaces.qux");
        assert_eq!(
            manifest_name("deployments/scale", Some("qux"), "my-nginx"),
            "deployments.qux.my-nginx"
        );
        assert_eq!(
            legacy_manifest_name("deployments", Some("qux"), "my-nginx"),
            "deployments-qux-my-nginx"
        );
        assert_eq!(
            legacy_manifest_name("namespaces", None, "qux"),
            "namespaces-qux"
        );
        assert_eq!(
            normalized_manifest_name("foos", Some("bar"), "x", |n| n == "foos-bar-x"),
            "foos-bar-x"
        );
        assert_eq!(
            normalized_manifest_name("foos", Some("bar"), "x", |_| false),
            "foos.bar.x"
        );
    }

    #[test]
    fn example_manifest_of_the_spec() {
        let mut deployment = json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "my-nginx", "namespace": "qux", "labels": {"app": "nginx"}},
            "spec": {"replicas": 6, "selector": {"matchLabels": {"app": "nginx"}}, "template": {}},
        });
        mark_created_by_hub(&mut deployment).unwrap();
        // what the dry run adds
        deployment["metadata"]["uid"] = json!("...");
        deployment["metadata"]["generation"] = json!(1);
        deployment["metadata"]["resourceVersion"] = json!("12");
        deployment["metadata"]["creationTimestamp"] = json!("2024-01-01T00:00:00Z");
        deployment["status"] = json!({});
        trim_template(&mut deployment, "apps", "Deployment");

        let res = ShadowResource {
            group: "apps".into(),
            version: "v1".into(),
            name: "deployments".into(),
            singular_name: "deployment".into(),
            namespaced: true,
            kind: "Deployment".into(),
            verbs: vec![],
            storage_version_hash: String::new(),
            origin: ResourceOrigin::BuiltIn,
        };
        let name = res.manifest_name(object_namespace(&deployment), object_name(&deployment));
        let l = manifest_labels(
            &object_labels(&deployment),
            &res.group,
            &res.version,
            &res.kind,
            object_name(&deployment),
            object_namespace(&deployment),
        );
        let manifest = build_manifest(DEFAULT_RESERVED_NAMESPACE, &name, &l, deployment);
        assert_eq!(
            manifest,
            json!({
                "apiVersion": "apps.clusternet.io/v1alpha1",
                "kind": "Manifest",
                "metadata": {
                    "name": "deployments.qux.my-nginx",
                    "namespace": "clusternet-reserved",
                    "labels": {
                        "app": "nginx",
                        "clusternet.io/created-by": "clusternet-hub",
                        "apps.clusternet.io/config.group": "apps",
                        "apps.clusternet.io/config.version": "v1",
                        "apps.clusternet.io/config.kind": "Deployment",
                        "apps.clusternet.io/config.name": "my-nginx",
                        "apps.clusternet.io/config.namespace": "qux",
                    },
                },
                "template": {
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "metadata": {
                        "name": "my-nginx",
                        "namespace": "qux",
                        "labels": {"app": "nginx", "clusternet.io/created-by": "clusternet-hub"},
                        "uid": "...",
                        "generation": 1,
                    },
                    "spec": {"replicas": 6, "selector": {"matchLabels": {"app": "nginx"}}, "template": {}},
                },
            })
        );
    }

    #[test]
    fn cluster_scoped_labels_have_empty_namespace_and_core_group() {
        let l = manifest_labels(&BTreeMap::new(), "", "v1", "Namespace", "qux", "");
        assert_eq!(l[CONFIG_GROUP_LABEL], "");
        assert_eq!(l[CONFIG_NAMESPACE_LABEL], "");
        assert_eq!(l[CONFIG_KIND_LABEL], "Namespace");
    }

    #[test]
    fn update_labels_are_added_never_removed() {
        let existing = labels(&[
            ("app", "nginx"),
            ("old", "kept"),
            (CONFIG_KIND_LABEL, "Deployment"),
            (CONFIG_NAME_LABEL, "my-nginx"),
        ]);
        let merged = merge_labels_for_update(
            &existing,
            &labels(&[("app", "web"), ("new", "1")]),
            "apps",
            "v1",
            "Deployment",
            "my-nginx",
            "qux",
        );
        assert_eq!(merged["app"], "web");
        assert_eq!(merged["old"], "kept");
        assert_eq!(merged["new"], "1");
        assert_eq!(merged[CONFIG_NAMESPACE_LABEL], "qux");
        assert_eq!(merged[CONFIG_GROUP_LABEL], "apps");

        let scaled = merge_labels_for_update(
            &existing,
            &BTreeMap::new(),
            "apps",
            "v1",
            "Scale",
            "my-nginx",
            "qux",
        );
        assert_eq!(scaled[CONFIG_KIND_LABEL], "Deployment");
    }
}
