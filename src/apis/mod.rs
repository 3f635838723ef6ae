//! Clusternet API types, mirroring upstream's API groups, and the CRDs generated from them.
//!
//! Owns: every type that crosses the parent apiserver (spec/apis.md): `clusters.clusternet.io`
//! ([`clusters`]), `apps.clusternet.io` ([`apps`]), the bundled mcs-api kinds ([`mcs`]), the hub's
//! aggregated `proxies.clusternet.io` connect options ([`proxies`]), every well-known label,
//! annotation, finalizer, taint, reserved name and feature gate ([`known`]), and the Subscription
//! spec hash ([`hash`]).
//!
//! The CRDs are derived from the Rust types (kube's `CustomResource`) and brought into upstream's
//! shape by [`schema::crd_for`] (use it, or [`crds`], rather than `T::crd()`, which lacks the CRD
//! defaults); [`crds`] is the single source of truth for `crds/*.yaml`, kept in sync by
//! `tests/crds_in_sync.rs`.
//!
//! Go -> Rust mapping used by every type here: a Go pointer is an `Option`; a Go value type is a
//! plain Rust value whose zero is its `Default` (missing on input means zero, as in Go); `omitempty`
//! is `skip_serializing_if` "is zero"; a Go `[]byte` is [`k8s_openapi::ByteString`]; a
//! `runtime.RawExtension` is a [`serde_json::Value`] with an `x-kubernetes-preserve-unknown-fields`
//! schema; Go string "enums" are Rust enums with upstream's exact strings (closed when the CRD
//! validates them, open with an `Other` variant when it does not). Fields the CRD defaults are kept
//! as read (`Option`/zero) and have `effective_*` accessors, because the spec hash must see exactly
//! what Go sees.

// kube's `printcolumn(name = .., type_ = ..)` repeats the same keys once per column, which clippy
// mistakes for duplicated attributes.
#![allow(clippy::duplicated_attributes)]

pub mod about;
pub mod apps;
pub mod clusters;
pub mod dashboard;
pub mod hash;
pub mod inventory;
pub mod known;
pub mod mcs;
pub mod naming;
mod omitempty;
pub mod placement;
pub mod proxies;
pub mod schema;
pub(crate) mod string_enum;

use std::path::Path;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use thiserror::Error;

use crate::kube_ext::yaml::{self, YamlError};

pub use apps::{
    AggregatedStatus, Base, BaseSpec, CONDITION_FEEDS_RESOLVED, CONDITION_ROLLOUT_COMPLETE,
    ChartPullSecret, ChartReference, Description, DescriptionDeployer, DescriptionPhase,
    DescriptionSpec, DescriptionStatus, DividingScheduling, Drift, DriftField, DroppedClusters,
    DynamicDividing, DynamicDividingStrategy, Feed, FeedContent, FeedInventory, FeedInventorySpec,
    FeedOrder, FeedStatus, FeedStatusPerCluster, FieldFormat, GateStatus, Globalization,
    GlobalizationSpec, HelmChart, HelmChartPhase, HelmChartSpec, HelmChartStatus, HelmOptions,
    HelmRelease, HelmReleaseSpec, HelmReleaseStatus, HelmReleaseStatusPhase, Localization,
    LocalizationSpec, Manifest, ManifestFields, ManifestStatus, MetricComparison, MetricGate,
    NoData, ObjectOverrides, OnFailure, OverrideConfig, OverridePolicy, OverrideType,
    PreemptionPolicy, ReplicaDividingType, ReplicaRequirements, ReplicaStatus, RetainedField,
    RolloutApproval, RolloutPhase, RolloutStage, RolloutStatus, RolloutStrategy,
    RolloutStrategySpec, RolloutUndo, SchedulingDecision, SchedulingStrategy, SelectedCluster,
    StagePhase, StageStatus, SubGroupStrategy, Subscriber, Subscription, SubscriptionRevision,
    SubscriptionSpec, SubscriptionStatus,
};
pub use clusters::{
    ApprovedResult, ClusterRegistrationRequest, ClusterRegistrationRequestSpec,
    ClusterRegistrationRequestStatus, ClusterSyncMode, ClusterType, ManagedCluster,
    ManagedClusterSpec, ManagedClusterStatus, NodeStatistics, PodStatistics, ResourceUsage,
};
pub use hash::hash_subscription_spec;
pub use mcs::{
    ServiceExport, ServiceExportFields, ServiceExportStatus, ServiceImport, ServiceImportSpec,
    ServiceImportStatus, ServiceImportType,
};
pub use proxies::Socket;
pub use schema::crd_for;
pub use string_enum::UnknownEnumValue;

/// Errors of this module.
#[derive(Debug, Error)]
pub enum ApisError {
    /// A CRD could not be rendered as YAML.
    #[error("rendering CRD {name} as YAML: {source}")]
    Yaml {
        /// The CRD's name.
        name: String,
        /// What the YAML writer reported.
        #[source]
        source: YamlError,
    },
}

/// Every CRD Clusternet installs in the parent cluster, in upstream's shape, sorted by name.
pub fn crds() -> Vec<CustomResourceDefinition> {
    let mut all = vec![
        crd_for::<ClusterRegistrationRequest>(),
        crd_for::<ManagedCluster>(),
        crd_for::<Subscription>(),
        crd_for::<Base>(),
        crd_for::<Description>(),
        crd_for::<Manifest>(),
        crd_for::<HelmChart>(),
        crd_for::<HelmRelease>(),
        crd_for::<Localization>(),
        crd_for::<Globalization>(),
        crd_for::<FeedInventory>(),
        crd_for::<RolloutStrategy>(),
        crd_for::<ServiceExport>(),
        crd_for::<ServiceImport>(),
        crd_for::<inventory::ClusterProfile>(),
        crd_for::<inventory::PlacementDecision>(),
        about::crd(),
    ];
    all.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    all
}

/// Where the mcs-api CRDs live under `crds/`: a kustomization of their own, because children
/// install them without the Clusternet CRDs (kustomize only reaches outside an overlay through
/// directories that hold a kustomization).
const MCS_DIR: &str = "mcs";

/// File name of a CRD under `crds/`, upstream's convention `<group>_<plural>.yaml`
/// (e.g. `apps.clusternet.io_subscriptions.yaml`; mcs-api CRDs and the About API's ClusterProperty,
/// which children install, under `mcs/`; the Cluster Inventory API's, of mcs-api's group, are the
/// parent's only and stay at the top).
pub fn crd_file_name(crd: &CustomResourceDefinition) -> String {
    let file = format!("{}_{}.yaml", crd.spec.group, crd.spec.names.plural);
    // the children's bundle: mcs-api's two kinds and the About API's ClusterProperty
    let child = crd.spec.group == mcs::GROUP
        && matches!(
            crd.spec.names.kind.as_str(),
            "ServiceExport" | "ServiceImport"
        )
        || crd.spec.group == about::GROUP;
    if child {
        format!("{MCS_DIR}/{file}")
    } else {
        file
    }
}

fn kustomization(resources: &[String]) -> String {
    let mut out = String::from(
        "# Generated by `clusternet crds --out crds/`; do not edit.\napiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n",
    );
    for r in resources {
        out.push_str(&format!("- {r}\n"));
    }
    out
}

/// One YAML document per CRD: `(file name, content)`, in [`crds`] order, followed by the
/// kustomizations of `crds/` and `crds/mcs/` (so `deploy/` overlays can include them).
pub fn crd_files() -> Result<Vec<(String, String)>, ApisError> {
    let mut files = crds()
        .into_iter()
        .map(|crd| {
            let yaml = yaml::to_string(&crd).map_err(|source| ApisError::Yaml {
                name: crd.metadata.name.clone().unwrap_or_default(),
                source,
            })?;
            Ok((crd_file_name(&crd), yaml))
        })
        .collect::<Result<Vec<_>, ApisError>>()?;
    let prefix = format!("{MCS_DIR}/");
    let mcs: Vec<String> = files
        .iter()
        .filter_map(|(n, _)| n.strip_prefix(&prefix).map(str::to_string))
        .collect();
    let mut top: Vec<String> = files
        .iter()
        .filter(|(n, _)| !n.starts_with(&prefix))
        .map(|(n, _)| n.clone())
        .collect();
    top.push(MCS_DIR.to_string());
    files.push(("kustomization.yaml".to_string(), kustomization(&top)));
    files.push((format!("{MCS_DIR}/kustomization.yaml"), kustomization(&mcs)));
    Ok(files)
}

/// Every CRD as one multi-document YAML stream (`---` separated, [`crds`] order).
pub fn crds_yaml() -> Result<String, ApisError> {
    let docs: Vec<String> = crd_files()?
        .into_iter()
        .filter(|(name, _)| !name.ends_with("kustomization.yaml"))
        .map(|(_, yaml)| yaml)
        .collect();
    Ok(docs.join("---\n"))
}

/// Writes one file per CRD into `dir` (created if missing), named by [`crd_file_name`].
/// Files in `dir` that are not Clusternet CRDs are left alone.
pub fn write_crds(dir: &Path) -> std::io::Result<()> {
    for (name, yaml) in crd_files().map_err(std::io::Error::other)? {
        let path = dir.join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(path, yaml)?;
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod test_support {
    //! Helpers shared by the API unit tests.

    use kube::CustomResourceExt;
    use serde::Serialize;
    use serde::de::DeserializeOwned;
    use serde_json::Value;

    use crate::kube_ext::yaml;

    /// Parses an example, deserializes it into `T`, serializes it back and checks nothing was lost,
    /// added or changed. Returns the typed object.
    pub(crate) fn assert_round_trip<T: DeserializeOwned + Serialize>(yaml: &str) -> T {
        let original: Value = yaml::from_str(yaml).expect("example is YAML");
        let typed: T = serde_json::from_value(original.clone())
            .expect("example deserializes into the typed struct");
        let back = serde_json::to_value(&typed).expect("typed struct serializes");
        assert_eq!(back, original, "round trip changed the object");
        typed
    }

    /// The finalized `openAPIV3Schema` of `T`'s CRD, as JSON.
    pub(crate) fn crd_schema<T: CustomResourceExt + schemars::JsonSchema>() -> Value {
        let crd = crate::apis::schema::crd_for::<T>();
        let schema = crd.spec.versions[0]
            .schema
            .as_ref()
            .and_then(|s| s.open_api_v3_schema.as_ref())
            .expect("CRD has a schema");
        serde_json::to_value(schema).expect("schema serializes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_crd_is_structural() {
        let crds = crds();
        let violations: Vec<String> = crds
            .iter()
            .flat_map(schema::structural_violations)
            .collect();
        assert!(
            violations.is_empty(),
            "non-structural CRDs:\n{}",
            violations.join("\n")
        );
    }

    #[test]
    fn crds_are_sorted_named_and_shaped_like_upstream() {
        let crds = crds();
        let names: Vec<_> = crds
            .iter()
            .filter_map(|c| c.metadata.name.as_deref())
            .collect();
        assert_eq!(
            names,
            vec![
                "bases.apps.clusternet.io",
                "clusterprofiles.multicluster.x-k8s.io",
                "clusterproperties.about.k8s.io",
                "clusterregistrationrequests.clusters.clusternet.io",
                "descriptions.apps.clusternet.io",
                "feedinventories.apps.clusternet.io",
                "globalizations.apps.clusternet.io",
                "helmcharts.apps.clusternet.io",
                "helmreleases.apps.clusternet.io",
                "localizations.apps.clusternet.io",
                "managedclusters.clusters.clusternet.io",
                "manifests.apps.clusternet.io",
                "placementdecisions.multicluster.x-k8s.io",
                "rolloutstrategies.apps.clusternet.io",
                "serviceexports.multicluster.x-k8s.io",
                "serviceimports.multicluster.x-k8s.io",
                "subscriptions.apps.clusternet.io",
            ]
        );
        for crd in &crds {
            let name = crd.metadata.name.as_deref().unwrap_or_default();
            // one version each, but the About API's two (about::tests)
            if crd.spec.group == "about.k8s.io" {
                continue;
            }
            assert_eq!(crd.spec.versions.len(), 1, "{name}");
            let version = &crd.spec.versions[0];
            assert!(version.served && version.storage, "{name}");
            let clusternet = crd.spec.group.ends_with(".clusternet.io");
            assert_eq!(
                crd.spec.names.categories.as_deref() == Some(&["clusternet".to_owned()][..]),
                clusternet,
                "{name}: category"
            );
            assert_eq!(
                crd.spec.names.list_kind,
                Some(format!("{}List", crd.spec.names.kind))
            );
            let root = version
                .schema
                .as_ref()
                .and_then(|s| s.open_api_v3_schema.as_ref());
            let props = root.and_then(|r| r.properties.as_ref());
            for key in ["apiVersion", "kind", "metadata"] {
                assert!(
                    props.is_some_and(|p| p.contains_key(key)),
                    "{name}: root lacks {key}"
                );
            }
        }
        let files: Vec<_> = crds.iter().map(crd_file_name).collect();
        assert!(files.contains(&"apps.clusternet.io_subscriptions.yaml".to_owned()));
        assert!(files.contains(&"clusters.clusternet.io_managedclusters.yaml".to_owned()));
    }

    #[test]
    fn crd_yaml_is_stable_and_parses_back() {
        let first = crds_yaml().expect("renders");
        assert_eq!(first, crds_yaml().expect("renders"));
        let docs: Vec<CustomResourceDefinition> =
            yaml::from_str_documents(&first).expect("each document is a CRD");
        assert_eq!(docs, crds());
    }

    #[test]
    fn write_crds_writes_one_file_per_crd() {
        let dir = tempfile::tempdir().expect("tempdir");
        write_crds(dir.path()).expect("writes");
        for (name, yaml) in crd_files().expect("renders") {
            assert_eq!(
                std::fs::read_to_string(dir.path().join(&name)).ok(),
                Some(yaml),
                "{name}"
            );
        }
    }
}
