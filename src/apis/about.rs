//! SIG-Multicluster's About API (KEP-2149, `about.k8s.io`): `ClusterProperty`, cluster-scoped
//! facts about the cluster it is in, read by multi-cluster tools (the mcs-api implementations take
//! the cluster's ID from `cluster.clusterset.k8s.io`). The agent writes the two the KEP defines in
//! its child (docs/spec/standards.md §2).
//!
//! Written from the KEP and the SIG's published CRD (sigs.k8s.io/about-api
//! `config/crd/about.k8s.io_clusterproperties.yaml`): versions `v1alpha1` (served) and `v1beta1`
//! (served, stored), the same schema, category `multicluster`.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

/// API group of this module.
pub const GROUP: &str = "about.k8s.io";

/// The property naming this cluster inside its ClusterSet (its ID; immutable while it is a
/// member).
pub const CLUSTER_ID_PROPERTY: &str = "cluster.clusterset.k8s.io";
/// The property naming the ClusterSet this cluster belongs to.
pub const CLUSTER_SET_PROPERTY: &str = "clusterset.k8s.io";

macro_rules! cluster_property {
    ($version:literal) => {
        use kube::CustomResource;
        use schemars::JsonSchema;
        use serde::{Deserialize, Serialize};

        /// ClusterProperty is a resource provides a way to store identification related, cluster
        /// scoped information for multi-cluster tools while creating flexibility for
        /// implementations.
        #[derive(
            CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema,
        )]
        #[kube(
                    group = "about.k8s.io",
                    version = $version,
                    kind = "ClusterProperty",
                    plural = "clusterproperties",
                    singular = "clusterproperty",
                    category = "multicluster",
                    status = "ClusterPropertyStatus",
                    derive = "PartialEq",
                    derive = "Default",
                    printcolumn(name = "value", type_ = "string", json_path = ".spec.value"),
                    printcolumn(
                        name = "age",
                        type_ = "date",
                        json_path = ".metadata.creationTimestamp"
                    )
                )]
        pub struct ClusterPropertySpec {
            /// ClusterProperty value
            #[schemars(length(min = 1))]
            pub value: String,
        }

        /// ClusterPropertyStatus defines the observed state of ClusterProperty (empty).
        #[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
        pub struct ClusterPropertyStatus {}
    };
}

/// `about.k8s.io/v1alpha1`, the version KEP-2149 started with (served).
pub mod v1alpha1 {
    cluster_property!("v1alpha1");
}

/// `about.k8s.io/v1beta1` (served and stored; the agent writes this one).
pub mod v1beta1 {
    cluster_property!("v1beta1");
}

pub use v1beta1::{ClusterProperty, ClusterPropertySpec};

/// The ClusterProperty CRD with both versions, `v1beta1` stored.
pub fn crd() -> CustomResourceDefinition {
    let versions = vec![
        super::crd_for::<v1alpha1::ClusterProperty>(),
        super::crd_for::<v1beta1::ClusterProperty>(),
    ];
    // both are the same kind with the same schema: merging cannot fail
    let mut crd =
        kube::core::crd::merge_crds(versions, "v1beta1").expect("two versions of one kind merge");
    crd.spec.names.list_kind = Some("ClusterPropertyList".into());
    // `*.k8s.io` is a protected group: the API server requires the approval of the API, here
    // KEP-2149's (as the SIG's kustomization adds it)
    crd.metadata.annotations = Some(
        [(
            "api-approved.kubernetes.io".to_string(),
            "https://github.com/kubernetes/enhancements/pull/3084".to_string(),
        )]
        .into(),
    );
    // in version order, as the SIG's CRD lists them
    crd.spec.versions.sort_by(|a, b| a.name.cmp(&b.name));
    // `spec` is optional in the SIG's CRD (Go's omitempty): accept what it accepts
    for v in &mut crd.spec.versions {
        if let Some(root) = v
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
        {
            root.required = None;
        }
    }
    crd
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_versions_are_served_and_v1beta1_is_stored() {
        let crd = crd();
        assert_eq!(
            crd.metadata.name.as_deref(),
            Some("clusterproperties.about.k8s.io")
        );
        assert_eq!(crd.spec.scope, "Cluster");
        let versions: Vec<(&str, bool, bool)> = crd
            .spec
            .versions
            .iter()
            .map(|v| (v.name.as_str(), v.served, v.storage))
            .collect();
        assert_eq!(
            versions,
            [("v1alpha1", true, false), ("v1beta1", true, true)]
        );
        assert_eq!(
            crd.spec.names.categories,
            Some(vec!["multicluster".to_string()])
        );
    }
}
