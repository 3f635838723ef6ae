//! Helm kinds: `HelmChart` (a chart template users subscribe to) and `HelmRelease` (one chart
//! installed into one child cluster, created by the controller-manager from a Helm Description).
//!
//! Upstream: `pkg/apis/apps/v1alpha1/helm.go`, spec/apis.md §2.5-2.6, deployer.md §7.

use k8s_openapi::ByteString;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::apis::omitempty::{is_zero_i32, is_zero_i64};
use crate::apis::string_enum::{closed_string_enum, open_string_enum};

/// Pattern of `spec.repo` (upstream's exact regex): an http(s) or oci URL.
pub const HELM_REPO_PATTERN: &str =
    r"^(http|https|oci)?://(?:[a-zA-Z]|[0-9]|[$-_@.&+]|[!*\(\),]|(?:%[0-9a-fA-F][0-9a-fA-F]))+$";

/// Default `timeoutSeconds` applied by the CRD.
pub const DEFAULT_HELM_TIMEOUT_SECONDS: i32 = 300;

/// Chart location and install options shared by HelmChartSpec and HelmReleaseSpec (inlined).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HelmOptions {
    /// Repo is a Helm repository URL; OCI registries are supported, e.g.
    /// https://charts.bitnami.com/bitnami or oci://localhost:5000/helm-charts.
    #[schemars(regex(pattern = HELM_REPO_PATTERN))]
    pub repo: String,

    /// ChartPullSecret is the Secret holding `username` and `password` for the repository.
    // Go always writes this struct (omitempty has no effect on structs); an empty one carries no
    // information, so it is omitted here.
    #[serde(default, skip_serializing_if = "ChartPullSecret::is_empty")]
    pub chart_pull_secret: ChartPullSecret,

    /// PlainHTTP uses insecure HTTP connections for OCI registries.
    #[serde(default, rename = "plainHTTP", skip_serializing_if = "Option::is_none")]
    pub plain_http: Option<bool>,

    /// Chart is the name of a Helm chart in the repository.
    pub chart: String,

    /// Version of the chart; empty means the latest.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub version: String,

    /// CreateNamespace creates the release namespace if not present.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-crd-default" = true))]
    pub create_namespace: Option<bool>,

    /// TimeoutSeconds is the time to wait for any individual Kubernetes operation.
    #[serde(default, skip_serializing_if = "is_zero_i32")]
    #[schemars(extend("x-crd-default" = 300))]
    pub timeout_seconds: i32,

    /// Wait for all resources to be ready before marking the release successful.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait: Option<bool>,

    /// WaitForJob waits for all Jobs to complete before marking the release successful.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_for_job: Option<bool>,

    /// Replace re-uses the given name, even if that name is already used (unsafe in production).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replace: Option<bool>,

    /// Atomic deletes the installation on failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub atomic: Option<bool>,

    /// UpgradeAtomic rolls back an upgrade on failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upgrade_atomic: Option<bool>,

    /// SkipCRDs skips installing CRDs.
    #[serde(default, rename = "skipCRDs", skip_serializing_if = "Option::is_none")]
    pub skip_crds: Option<bool>,

    /// ReplaceCRDs replaces CRDs on upgrade.
    #[serde(
        default,
        rename = "replaceCRDs",
        skip_serializing_if = "Option::is_none"
    )]
    pub replace_crds: Option<bool>,

    /// DisableHooks prevents hooks from running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disable_hooks: Option<bool>,

    /// Force resource updates through a replacement strategy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub force: Option<bool>,
}

impl HelmOptions {
    /// `createNamespace`, `true` when unset (the CRD default).
    pub fn effective_create_namespace(&self) -> bool {
        self.create_namespace.unwrap_or(true)
    }

    /// `timeoutSeconds`, 300 when unset (the CRD default).
    pub fn effective_timeout_seconds(&self) -> i32 {
        if self.timeout_seconds == 0 {
            DEFAULT_HELM_TIMEOUT_SECONDS
        } else {
            self.timeout_seconds
        }
    }
}

/// The Secret with credentials for a chart repository.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ChartPullSecret {
    /// Name of the Secret.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// Namespace of the Secret.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
}

impl ChartPullSecret {
    /// No secret configured.
    pub fn is_empty(&self) -> bool {
        self.name.is_empty() && self.namespace.is_empty()
    }
}

// ---------------------------------------------------------------------------------------------
// HelmChart
// ---------------------------------------------------------------------------------------------

closed_string_enum! {
    /// Whether the chart (and version) exists in the repository (`status.phase`).
    pub enum HelmChartPhase {
        /// Found.
        Found = "Found",
        /// Not found; see `reason`.
        NotFound = "NotFound",
    }
}

/// Desired state of a HelmChart.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "apps.clusternet.io",
    version = "v1alpha1",
    kind = "HelmChart",
    plural = "helmcharts",
    singular = "helmchart",
    namespaced,
    shortname = "chart",
    shortname = "charts",
    category = "clusternet",
    status = "HelmChartStatus",
    derive = "PartialEq",
    derive = "Default",
    doc = "HelmChart is a Helm chart template that Subscriptions can reference as a feed.",
    printcolumn(
        name = "CHART",
        type_ = "string",
        json_path = ".spec.chart",
        description = "The helm chart name"
    ),
    printcolumn(
        name = "VERSION",
        type_ = "string",
        json_path = ".spec.version",
        description = "The helm chart version"
    ),
    printcolumn(
        name = "REPO",
        type_ = "string",
        json_path = ".spec.repo",
        description = "The helm repo url"
    ),
    printcolumn(
        name = "STATUS",
        type_ = "string",
        json_path = ".status.phase",
        description = "The helm chart status"
    ),
    printcolumn(
        name = "AGE",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct HelmChartSpec {
    /// Chart location and install options (inlined).
    #[serde(flatten)]
    pub options: HelmOptions,

    /// TargetNamespace is the namespace to install this chart into.
    pub target_namespace: String,
}

/// Observed state of a HelmChart.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HelmChartStatus {
    /// Phase tells whether the chart was found.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<HelmChartPhase>,

    /// Reason explains the phase.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,

    /// The generation of the spec the phase was found for (beyond upstream): until it is the
    /// current one, a changed chart or version has not been looked up yet and is not deployed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

// ---------------------------------------------------------------------------------------------
// HelmRelease
// ---------------------------------------------------------------------------------------------

open_string_enum! {
    /// Helm release status (`status.phase`), Helm's own strings. No CRD enum upstream.
    pub enum HelmReleaseStatusPhase {
        /// Unknown.
        Unknown = "unknown",
        /// Deployed.
        Deployed = "deployed",
        /// Uninstalled.
        Uninstalled = "uninstalled",
        /// Superseded by a newer revision.
        Superseded = "superseded",
        /// Failed.
        Failed = "failed",
        /// Being uninstalled.
        Uninstalling = "uninstalling",
        /// Install in progress.
        PendingInstall = "pending-install",
        /// Upgrade in progress.
        PendingUpgrade = "pending-upgrade",
        /// Rollback in progress.
        PendingRollback = "pending-rollback",
    }
}

/// Desired state of a HelmRelease.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "apps.clusternet.io",
    version = "v1alpha1",
    kind = "HelmRelease",
    plural = "helmreleases",
    singular = "helmrelease",
    namespaced,
    shortname = "hr",
    category = "clusternet",
    status = "HelmReleaseStatus",
    derive = "PartialEq",
    derive = "Default",
    doc = "HelmRelease is one Helm chart to be installed into one child cluster.",
    printcolumn(
        name = "CHART",
        type_ = "string",
        json_path = ".spec.chart",
        description = "The helm chart name"
    ),
    printcolumn(
        name = "VERSION",
        type_ = "string",
        json_path = ".spec.version",
        description = "The helm chart version"
    ),
    printcolumn(
        name = "REPO",
        type_ = "string",
        json_path = ".spec.repo",
        description = "The helm repo url"
    ),
    printcolumn(
        name = "STATUS",
        type_ = "string",
        json_path = ".status.phase",
        description = "The helm release status"
    ),
    printcolumn(
        name = "AGE",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct HelmReleaseSpec {
    /// Chart location and install options (inlined).
    #[serde(flatten)]
    pub options: HelmOptions,

    /// ReleaseName is the release name in the child cluster; unset means the HelmRelease's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release_name: Option<String>,

    /// TargetNamespace is the namespace to install the chart into.
    pub target_namespace: String,

    /// Overrides are the Helm values, as JSON (base64 on the wire).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::apis::schema::go_bytes")]
    pub overrides: Option<ByteString>,
}

/// Observed state of a HelmRelease.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HelmReleaseStatus {
    /// FirstDeployed is when the release was first deployed, in Go `time.Time.String()` format
    /// (e.g. `2024-01-02 15:04:05.123456789 +0000 UTC`), not RFC 3339.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub first_deployed: String,

    /// LastDeployed is when the release was last deployed (same format as firstDeployed).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub last_deployed: String,

    /// Description is Helm's human-friendly log entry about this release.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,

    /// Phase is the current Helm release status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<HelmReleaseStatusPhase>,

    /// Notes are the rendered NOTES.txt.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub notes: String,

    /// Version is the release revision.
    #[serde(default, skip_serializing_if = "is_zero_i64")]
    #[schemars(schema_with = "crate::apis::schema::go_int")]
    pub version: i64,

    /// ObservedGeneration (beyond upstream) is the generation of the HelmRelease this status
    /// speaks for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// Conditions (beyond upstream), as kstatus reads them: `Ready` (the release is deployed),
    /// with `Reconciling` (installing, upgrading) or `Stalled` (failed) beside it while they are
    /// true.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apis::test_support::{assert_round_trip, crd_schema};
    use kube::CustomResourceExt;
    use serde_json::json;

    /// cli.md `replication-scheduling`: HelmChart `default/mysql`.
    const MYSQL_YAML: &str = r#"
apiVersion: apps.clusternet.io/v1alpha1
kind: HelmChart
metadata: {name: mysql, namespace: default}
spec:
  repo: https://charts.bitnami.com/bitnami
  chart: mysql
  version: 9.2.0
  targetNamespace: abc
status:
  phase: Found
"#;

    /// cli.md `oci`.
    const OCI_YAML: &str = r#"
apiVersion: apps.clusternet.io/v1alpha1
kind: HelmChart
metadata: {name: mysql-oci, namespace: default}
spec:
  repo: oci://myoci.registry.com:5000/helm-charts
  plainHTTP: true
  chart: mysql
  version: 9.2.0
  targetNamespace: abc
status:
  phase: NotFound
  reason: tag 9.2.0 not found
"#;

    /// cli.md `deploy/templates/helm-chart-private-repo.yaml`.
    const PRIVATE_YAML: &str = r#"
apiVersion: apps.clusternet.io/v1alpha1
kind: HelmChart
metadata: {name: private-chart, namespace: default}
spec:
  repo: https://charts.example.com/private
  chartPullSecret: {name: repo-auth, namespace: default}
  chart: app
  createNamespace: false
  timeoutSeconds: 600
  wait: true
  atomic: true
  skipCRDs: true
  targetNamespace: app
"#;

    /// deployer.md §7.2, instantiated.
    const RELEASE_YAML: &str = r#"
apiVersion: apps.clusternet.io/v1alpha1
kind: HelmRelease
metadata:
  name: app-demo-x7k2p-helm-default-mysql
  namespace: clusternet-v7wzf
  labels:
    clusternet.io/created-by: clusternet-controller-manager
    apps.clusternet.io/config.kind: Description
    apps.clusternet.io/config.name: app-demo-x7k2p-helm
    apps.clusternet.io/config.namespace: clusternet-v7wzf
    apps.clusternet.io/config.uid: 2a0b7d35-8b7e-4a57-9c45-0d1e2f3a4b5c
    clusters.clusternet.io/cluster-id: dc91021d-2361-4f6d-a404-7c33b9e01118
    clusters.clusternet.io/cluster-name: child1
    apps.clusternet.io/subs.name: ""
    apps.clusternet.io/subs.namespace: default
    apps.clusternet.io/subs.uid: 9f9e4d5c-9c3a-4a5e-8d44-2b0f1c7e6a11
  finalizers: [apps.clusternet.io/finalizer]
spec:
  repo: https://charts.bitnami.com/bitnami
  chart: mysql
  version: 9.1.8
  createNamespace: true
  timeoutSeconds: 300
  targetNamespace: abc
  releaseName: mysql
  overrides: eyJhdXRoIjp7ImRhdGFiYXNlIjoibXlfZGF0YWJhc2UifX0=
status:
  firstDeployed: 2024-01-02 15:04:05.123456789 +0000 UTC
  lastDeployed: 2024-01-02 15:04:05.123456789 +0000 UTC
  description: Install complete
  phase: deployed
  version: 1
"#;

    #[test]
    fn examples_round_trip() {
        let mysql: HelmChart = assert_round_trip(MYSQL_YAML);
        assert_eq!(mysql.spec.options.version, "9.2.0");
        assert!(mysql.spec.options.effective_create_namespace());
        assert_eq!(mysql.spec.options.effective_timeout_seconds(), 300);

        let oci: HelmChart = assert_round_trip(OCI_YAML);
        assert_eq!(oci.spec.options.plain_http, Some(true));
        assert_eq!(
            oci.status.and_then(|s| s.phase),
            Some(HelmChartPhase::NotFound)
        );

        let private: HelmChart = assert_round_trip(PRIVATE_YAML);
        assert_eq!(private.spec.options.chart_pull_secret.name, "repo-auth");
        assert!(!private.spec.options.effective_create_namespace());

        let release: HelmRelease = assert_round_trip(RELEASE_YAML);
        assert_eq!(release.spec.release_name.as_deref(), Some("mysql"));
        let values: serde_json::Value =
            serde_json::from_slice(&release.spec.overrides.as_ref().expect("overrides").0)
                .expect("JSON values");
        assert_eq!(values, json!({"auth": {"database": "my_database"}}));
        let status = release.status.expect("status");
        assert_eq!(status.phase, Some(HelmReleaseStatusPhase::Deployed));
        assert_eq!(status.version, 1);
    }

    #[test]
    fn release_phases_are_helms() {
        assert_eq!(
            HelmReleaseStatusPhase::KNOWN,
            &[
                "unknown",
                "deployed",
                "uninstalled",
                "superseded",
                "failed",
                "uninstalling",
                "pending-install",
                "pending-upgrade",
                "pending-rollback"
            ]
        );
        assert_eq!(HelmChartPhase::VALUES, &["Found", "NotFound"]);
    }

    #[test]
    fn crd_shapes() {
        assert_eq!(
            HelmChart::crd().spec.names.short_names,
            Some(vec!["chart".to_owned(), "charts".to_owned()])
        );
        assert_eq!(
            HelmRelease::crd().spec.names.short_names,
            Some(vec!["hr".to_owned()])
        );
        let chart = crd_schema::<HelmChart>();
        let spec = &chart["properties"]["spec"];
        assert_eq!(
            spec["required"],
            json!(["chart", "repo", "targetNamespace"])
        );
        assert_eq!(
            spec["properties"]["repo"]["pattern"],
            json!(HELM_REPO_PATTERN)
        );
        assert_eq!(
            spec["properties"]["createNamespace"]["default"],
            json!(true)
        );
        assert_eq!(spec["properties"]["timeoutSeconds"]["default"], json!(300));
        assert!(
            spec["properties"]["chartPullSecret"]
                .get("default")
                .is_none()
        );
        assert_eq!(
            chart["properties"]["status"]["properties"]["phase"]["enum"],
            json!(["Found", "NotFound"])
        );

        let release = crd_schema::<HelmRelease>();
        let spec = &release["properties"]["spec"];
        assert_eq!(
            spec["required"],
            json!(["chart", "repo", "targetNamespace"])
        );
        assert_eq!(spec["properties"]["overrides"]["format"], json!("byte"));
        let phase = &release["properties"]["status"]["properties"]["phase"];
        assert!(phase.get("enum").is_none());
    }
}
