//! Every well-known name Clusternet puts on or looks for on objects: labels, annotations,
//! finalizers, taints, reserved names and constants (spec/apis.md §6-10), plus the feature gates
//! (hub.md §4). Upstream: `pkg/known/*.go`, `pkg/features/features.go`.
//!
//! Names follow Clusternet's Go identifiers (`known.ObjectCreatedByLabel` -> `OBJECT_CREATED_BY_LABEL`).
//! Mixing this implementation with Go components only works if these strings are identical, so
//! nothing else in the crate should spell them out.

use std::time::Duration;

// ---------------------------------------------------------------------------------------------
// Labels (§6)
// ---------------------------------------------------------------------------------------------

/// Label on a CRR: who filed it (value [`CLUSTERNET_AGENT_NAME`]).
pub const CLUSTER_REGISTERED_BY_LABEL: &str = "clusters.clusternet.io/registered-by";
/// Label carrying the cluster UUID (CRR, ManagedCluster, dedicated namespace/SA/secrets, pipeline objects).
pub const CLUSTER_ID_LABEL: &str = "clusters.clusternet.io/cluster-id";
/// Label carrying the cluster name (same objects as [`CLUSTER_ID_LABEL`]).
pub const CLUSTER_NAME_LABEL: &str = "clusters.clusternet.io/cluster-name";
/// Label marking objects created while bootstrapping a cluster.
pub const CLUSTER_BOOTSTRAPPING_LABEL: &str = "clusters.clusternet.io/bootstrapping";
/// [`CLUSTER_BOOTSTRAPPING_LABEL`] value on generated credential secrets.
pub const CREDENTIALS_AUTO: &str = "credentials-auto";
/// [`CLUSTER_BOOTSTRAPPING_LABEL`] value on generated RBAC objects.
pub const RBAC_DEFAULTS: &str = "rbac-defaults";

/// Label naming the Clusternet component that created an object.
pub const OBJECT_CREATED_BY_LABEL: &str = "clusternet.io/created-by";
/// Component name of the agent ([`OBJECT_CREATED_BY_LABEL`] / [`CLUSTER_REGISTERED_BY_LABEL`] value).
pub const CLUSTERNET_AGENT_NAME: &str = "clusternet-agent";
/// Component name of the hub (also on shadow-created objects and what is applied from them).
pub const CLUSTERNET_HUB_NAME: &str = "clusternet-hub";
/// Component name of the controller-manager.
pub const CLUSTERNET_CONTROLLER_MANAGER_NAME: &str = "clusternet-controller-manager";

/// Label: API group of a Manifest's/HelmChart's template ("" for core).
pub const CONFIG_GROUP_LABEL: &str = "apps.clusternet.io/config.group";
/// Label: API version of the template.
pub const CONFIG_VERSION_LABEL: &str = "apps.clusternet.io/config.version";
/// Label: kind of the template, or `Subscription`/`Base`/`Description` on derived objects.
pub const CONFIG_KIND_LABEL: &str = "apps.clusternet.io/config.kind";
/// Label: name of the template or owner.
pub const CONFIG_NAME_LABEL: &str = "apps.clusternet.io/config.name";
/// Label: namespace of the template or owner ("" for cluster-scoped).
pub const CONFIG_NAMESPACE_LABEL: &str = "apps.clusternet.io/config.namespace";
/// Label: UID of the owner (Subscription for Base, Base for Description, Description for HelmRelease).
pub const CONFIG_UID_LABEL: &str = "apps.clusternet.io/config.uid";
/// Label: UID of the originating Subscription.
pub const CONFIG_SUBSCRIPTION_UID_LABEL: &str = "apps.clusternet.io/subs.uid";
/// Label: name of the originating Subscription (on Bases only if the name is at most 57 chars).
pub const CONFIG_SUBSCRIPTION_NAME_LABEL: &str = "apps.clusternet.io/subs.name";
/// Label: namespace of the originating Subscription (also user-set on ServiceExports).
pub const CONFIG_SUBSCRIPTION_NAMESPACE_LABEL: &str = "apps.clusternet.io/subs.namespace";
/// Longest Subscription name that is still copied into name labels of a Base.
pub const MAX_SUBSCRIPTION_NAME_IN_LABELS: usize = 57;
/// Label (beyond upstream): the content hash of a Subscription's ControllerRevision (the role of
/// apps/v1's `controller-revision-hash`).
pub const REVISION_HASH_LABEL: &str = "apps.clusternet.io/revision-hash";
/// Annotation (beyond upstream): on a Base, the ControllerRevision (in its Subscription's
/// namespace) it is to be rendered from instead of the live feeds (a rollout pins Bases so); on a
/// Description, the revision it was rendered from.
pub const REVISION_ANNOTATION: &str = "apps.clusternet.io/revision";
/// Annotation (beyond upstream): on a Base, `rollout` when the Subscription controller pinned it
/// for a staged rollout (so the pin goes when the strategy goes; a pin set by hand stays).
pub const PINNED_BY_ANNOTATION: &str = "apps.clusternet.io/pinned-by";
/// Annotation (beyond upstream) on a Subscription: `kubectl clusternet rollout approve` approved a
/// stage (JSON: revision, stage, user).
pub const ROLLOUT_APPROVAL_ANNOTATION: &str = "apps.clusternet.io/rollout-approval";
/// Annotation (beyond upstream) on a Subscription: `"true"` while `rollout pause` holds it.
pub const ROLLOUT_PAUSED_ANNOTATION: &str = "apps.clusternet.io/rollout-paused";
/// Annotation (beyond upstream) on a Subscription: when `rollout restart` asked to roll the
/// newest revision out again from stage 1.
pub const ROLLOUT_RESTART_ANNOTATION: &str = "apps.clusternet.io/rollout-restart";
/// Annotation (beyond upstream) on a Subscription: `rollout undo` (JSON: to, newest).
pub const ROLLOUT_UNDO_ANNOTATION: &str = "apps.clusternet.io/rollout-undo";
/// Annotation: kubectl's record of why a revision was made (`kubectl rollout history` shows it).
pub const CHANGE_CAUSE_ANNOTATION: &str = "kubernetes.io/change-cause";

/// Default prefix of node labels aggregated onto ManagedClusters.
pub const NODE_LABELS_PREFIX: &str = "node.clusternet.io/";

/// mcs-api's label on an EndpointSlice naming the cluster its endpoints are in (KEP-1645), the
/// cluster's `cluster.clusterset.k8s.io` ClusterProperty (KEP-2149).
pub const MCS_SOURCE_CLUSTER_LABEL: &str = "multicluster.kubernetes.io/source-cluster";

/// Label on ServiceImports and EndpointSlices: the exported service's name.
pub const LABEL_SERVICE_NAME: &str = "services.clusternet.io/multi-cluster-service-name";
/// Label on ServiceImports and EndpointSlices: the exported service's namespace.
pub const LABEL_SERVICE_NAMESPACE: &str = "services.clusternet.io/multi-cluster-service-namespace";
/// Annotation the controller keeps on a ServiceImport (beyond upstream): the exported Service
/// (`<namespace>/<name>`) it imported last, so that what was derived for it goes when the
/// import's labels name another Service (or none).
pub const IMPORTED_SERVICE_ANNOTATION: &str = "services.clusternet.io/imported-service";
/// Kubernetes' EndpointSlice -> Service label (`derived-<ns>-<hash>` on imported slices).
pub const KUBERNETES_SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// Reference-label value (key = the Subscription UID) on Manifests/HelmCharts it references.
pub const SUBSCRIPTION_KIND: &str = "Subscription";
/// Reference-label value (key = the Base UID) on Manifests/HelmCharts it references.
pub const BASE_KIND: &str = "Base";
/// [`CONFIG_KIND_LABEL`] value on HelmReleases (owner kind).
pub const DESCRIPTION_KIND: &str = "Description";

// ---------------------------------------------------------------------------------------------
// Annotations (§7)
// ---------------------------------------------------------------------------------------------

/// `"true"` on an existing RBAC object or `child-cluster-deployer` secret lets Clusternet overwrite it.
pub const AUTO_UPDATE_ANNOTATION: &str = "clusternet.io/autoupdate";
/// Message on a Manifest/HelmChart whose deletion is blocked (also surfaced on the shadow object).
pub const FEED_PROTECTION_ANNOTATION: &str = "apps.clusternet.io/feed-protection";
/// `"true"` on an object submitted to the shadow API skips the dry run.
pub const SKIP_VALIDATING_ANNOTATION: &str = "apps.clusternet.io/skip-validating";
/// On every object applied to a child: `<descriptionNamespace>.<descriptionName>`.
pub const OBJECT_OWNED_BY_DESCRIPTION_ANNOTATION: &str = "apps.clusternet.io/owned-by-description";
/// Label on every object applied to a child (clusternet-rs): the owner annotation's value when
/// it is a valid label value, else a digest of it. Selectable, unlike the annotation: the
/// deploying side watches the child's objects that carry it.
pub const OBJECT_OWNED_BY_DESCRIPTION_LABEL: &str = "apps.clusternet.io/owned-by-description";
/// On a Subscription (copied to its Bases and Descriptions): what to do when an object is changed
/// in a child behind Clusternet's back: `Repair` (default), `Report` or `Ignore`.
pub const DRIFT_POLICY_ANNOTATION: &str = "apps.clusternet.io/drift-policy";
/// On a Subscription: `Manual` turns automatic fail-back off (a failed-over cluster is not given
/// its share back when it returns; remove the annotation, or set `Auto`, to let it come back).
pub const FAILBACK_ANNOTATION: &str = "apps.clusternet.io/failback";
/// On a Subscription (copied to its Bases and Descriptions): comma-separated field paths
/// (`spec.replicas`, `metadata.annotations.team`) that Clusternet leaves to whoever changes them.
pub const RETAIN_FIELDS_ANNOTATION: &str = "apps.clusternet.io/retain-fields";
/// On every object applied to a child: the JSON used as "original" in three-way patches.
pub const LAST_APPLIED_CONFIG_ANNOTATION: &str = "clusternet.io/last-applied-configuration";
/// `"true"` on a Subscription (copied to its Bases): the default cluster-init workload.
pub const IS_DEFAULT_CLUSTER_INIT_ANNOTATION: &str = "apps.clusternet.io/is-default-cluster-init";
/// On a ManagedCluster: the Base to use for initialization.
pub const CLUSTER_INIT_BASE_ANNOTATION: &str = "apps.clusternet.io/cluster-init-base";
/// `"true"` on a ManagedCluster: skip initialization.
pub const CLUSTER_INIT_SKIP_ANNOTATION: &str = "clusters.clusternet.io/skip-cluster-init";
/// On the agent Lease in the child: overrides the cluster ID (migration from <= v0.14).
pub const LEGACY_CLUSTER_ID_ANNOTATION: &str = "legacy-cluster-id";
/// kubectl's annotation, removed from objects before they are applied to children.
pub const KUBECTL_LAST_APPLIED_CONFIG_ANNOTATION: &str =
    "kubectl.kubernetes.io/last-applied-configuration";

// ---------------------------------------------------------------------------------------------
// Finalizers (§8)
// ---------------------------------------------------------------------------------------------

/// Finalizer on every pipeline object (and some secrets/MCS objects) so deletions propagate down.
pub const APP_FINALIZER: &str = "apps.clusternet.io/finalizer";
/// Finalizer on Manifests/HelmCharts still referenced, with gate `FeedInUseProtection`.
pub const FEED_PROTECTION_FINALIZER: &str = "apps.clusternet.io/feed-protection";

// ---------------------------------------------------------------------------------------------
// Taints (§9)
// ---------------------------------------------------------------------------------------------

/// NoSchedule taint while `Ready` is False/Unknown; value = the Ready condition reason.
pub const TAINT_CLUSTER_UNSCHEDULABLE: &str = "clusters.clusternet.io/unschedulable";
/// NoSchedule taint until `ClusterInit` is True; value `ClusterInitWaiting`.
pub const TAINT_CLUSTER_INITIALIZATION: &str = "clusters.clusternet.io/initialization";
/// The effect both Clusternet taints use.
pub const TAINT_EFFECT_NO_SCHEDULE: &str = "NoSchedule";

// ---------------------------------------------------------------------------------------------
// Reserved names and constants (§10)
// ---------------------------------------------------------------------------------------------

/// Prefix of generated names: dedicated namespaces and SAs, CRR names, per-cluster ClusterRoles.
pub const NAME_PREFIX_FOR_CLUSTERNET_OBJECTS: &str = "clusternet-";
/// Leader-election namespace, and where the agent keeps its secrets in the child.
pub const CLUSTERNET_SYSTEM_NAMESPACE: &str = "clusternet-system";
/// Namespace holding every Manifest, and where shadow dry runs happen.
pub const CLUSTERNET_RESERVED_NAMESPACE: &str = "clusternet-reserved";
/// Namespace created by the hub manifest for MCS (not referenced by code).
pub const CLUSTERNET_MCS_NAMESPACE: &str = "clusternet-mcs";
/// ServiceAccount in the child used by the parent to deploy.
pub const CLUSTERNET_APP_SA: &str = "clusternet-app-deployer";
/// ServiceAccount in the parent used by the hub to proxy.
pub const CLUSTERNET_HUB_PROXY_SA: &str = "clusternet-hub-proxy";
/// Secret in the child (system namespace) holding the parent credentials.
pub const PARENT_CLUSTER_SECRET_NAME: &str = "parent-cluster";
/// Secret in the parent (dedicated namespace) holding the child credentials.
pub const CHILD_CLUSTER_SECRET_NAME: &str = "child-cluster-deployer";
/// Secret data key: the apiserver URL.
pub const CLUSTER_API_SERVER_URL_KEY: &str = "apiserver-advertise-url";
/// Secret data key: the ServiceAccount name.
pub const SERVICE_ACCOUNT_NAME_KEY: &str = "service-account.name";
/// Secret data key: the ServiceAccount UID.
pub const SERVICE_ACCOUNT_UID_KEY: &str = "service-account.uid";
/// Per-cluster Role (and RoleBinding) in the dedicated namespace.
pub const MANAGED_CLUSTER_ROLE: &str = "clusternet-managedcluster-role";
/// Default prefix of generated cluster names (`<prefix>-<5 random chars>`).
pub const DEFAULT_CLUSTER_NAME_PREFIX: &str = "clusternet-cluster";
/// Default name of the agent's leader-election Lease, whose UID is the cluster ID.
pub const CLUSTERNET_AGENT_LEASE_NAME: &str = "clusternet-agent";
/// Length of random name suffixes.
pub const RANDOM_SUFFIX_LENGTH: usize = 5;
/// Alphabet of random name suffixes (Kubernetes' random-string alphabet).
pub const RANDOM_SUFFIX_ALPHABET: &str = "bcdfghjklmnpqrstvwxz2456789";
/// Default informer resync period.
pub const DEFAULT_RESYNC: Duration = Duration::from_secs(12 * 60 * 60);
/// Default retry period of registration/credential loops (with jitter).
pub const DEFAULT_RETRY_PERIOD: Duration = Duration::from_secs(5);
/// Default `--threadiness` (worker count).
pub const DEFAULT_THREADINESS: usize = 10;
/// GPU resource summed into ManagedCluster allocatable/capacity.
pub const GPU_RESOURCE_NAME: &str = "nvidia.com/gpu";
/// Longest event note; longer messages are cut to [`EVENT_NOTE_TRUNCATED_LENGTH`] plus [`EVENT_NOTE_ELLIPSIS`].
pub const EVENT_NOTE_MAX_LENGTH: usize = 1024;
/// Length a too-long event note is cut to.
pub const EVENT_NOTE_TRUNCATED_LENGTH: usize = 1020;
/// Suffix appended to a truncated event note.
pub const EVENT_NOTE_ELLIPSIS: &str = " ...";
/// Discovery category of every Clusternet CRD.
pub const CLUSTERNET_CATEGORY: &str = "clusternet";
/// Discovery category of every shadow API resource.
pub const SHADOW_CATEGORY: &str = "clusternet.shadow";
/// Prefix of the user extras the proxy turns into child credentials/impersonation.
pub const PROXY_EXTRA_HEADER_PREFIX: &str = "Clusternet-";
/// User extra: bearer token for the child.
pub const CLUSTERNET_TOKEN_EXTRA: &str = "Clusternet-Token";
/// User extra: base64 client certificate PEM for the child.
pub const CLUSTERNET_CERTIFICATE_EXTRA: &str = "Clusternet-Certificate";
/// User extra: base64 client key PEM for the child.
pub const CLUSTERNET_PRIVATE_KEY_EXTRA: &str = "Clusternet-PrivateKey";
/// User extra: impersonate this user in the child (cli.md).
pub const CLUSTERNET_IMPERSONATE_USER_EXTRA: &str = "Clusternet-Impersonate-User";
/// User extra: impersonate this UID in the child (cli.md).
pub const CLUSTERNET_IMPERSONATE_UID_EXTRA: &str = "Clusternet-Impersonate-Uid";
/// User extra: impersonate these groups in the child (cli.md).
pub const CLUSTERNET_IMPERSONATE_GROUP_EXTRA: &str = "Clusternet-Impersonate-Group";
/// User the proxy caller impersonates in the parent (cli.md).
pub const CLUSTERNET_IMPERSONATED_USER: &str = "clusternet";
/// Root path of the predictor HTTP API.
pub const PREDICTOR_ROOT: &str = "/replicas";
/// Predictor subpath: predict feasible replicas.
pub const PREDICTOR_PREDICT_PATH: &str = "/predict";
/// Predictor subpath: unscheduled replicas.
pub const PREDICTOR_UNSCHEDULED_PATH: &str = "/unscheduled";
/// Predictor request header carrying the cluster ID.
pub const PREDICTOR_CLUSTER_ID_HEADER: &str = "Cluster-ID";
/// Key of the predictor result.
pub const PREDICTOR_RESULT_KEY: &str = "default";
/// Prefix of derived Service names: `derived-<namespace>-<h>`.
pub const DERIVED_SERVICE_PREFIX: &str = "derived-";
/// Length of `h` in a derived Service name (lowercase unpadded base32hex of sha256(name)).
pub const DERIVED_SERVICE_HASH_LENGTH: usize = 10;

/// Name of the Service a ServiceImport derives for Service `name` of `namespace` in the children:
/// `derived-<namespace>-<h>`, `h` the first 10 characters of the lowercase base32hex of
/// sha256(`name`) (upstream's `pkg/utils/names.go`).
pub fn derived_service_name(namespace: &str, name: &str) -> String {
    const ALPHABET: &[u8; 32] = b"0123456789abcdefghijklmnopqrstuv";
    let digest = ring::digest::digest(&ring::digest::SHA256, name.as_bytes());
    // 10 characters of 5 bits each come from the first 7 bytes
    let bits = digest.as_ref()[..7]
        .iter()
        .fold(0u64, |acc, b| (acc << 8) | u64::from(*b));
    let h: String = (0..DERIVED_SERVICE_HASH_LENGTH)
        .map(|i| ALPHABET[((bits >> (51 - 5 * i)) & 0x1f) as usize] as char)
        .collect();
    format!("{DERIVED_SERVICE_PREFIX}{namespace}-{h}")
}

/// Name of the per-cluster ClusterRole (and binding) `clusternet-<clusterID>`.
pub fn cluster_role_name(cluster_id: &str) -> String {
    format!("{NAME_PREFIX_FOR_CLUSTERNET_OBJECTS}{cluster_id}")
}

/// Name of a CRR: `clusternet-<clusterID>`.
pub fn cluster_registration_request_name(cluster_id: &str) -> String {
    format!("{NAME_PREFIX_FOR_CLUSTERNET_OBJECTS}{cluster_id}")
}

// ---------------------------------------------------------------------------------------------
// Feature gates (hub.md §4)
// ---------------------------------------------------------------------------------------------

/// Gate: hub serves sockets/proxy; agent opens the tunnel; per-cluster ClusterRoles allow `sockets`.
pub const SOCKET_CONNECTION: &str = "SocketConnection";
/// Gate (agent): the parent may deploy into this child; required for `--cluster-sync-mode=Push`.
pub const APP_PUSHER: &str = "AppPusher";
/// Gate (controller-manager): run the deployer (Subscription -> Base -> Description -> child).
pub const DEPLOYER: &str = "Deployer";
/// Gate (hub): serve `shadow/v1alpha1`.
pub const SHADOW_API: &str = "ShadowAPI";
/// Gate (controller-manager): block deleting feeds that are still referenced.
pub const FEED_IN_USE_PROTECTION: &str = "FeedInUseProtection";
/// Gate (agent): child-side drift repair and `manifestStatuses`.
pub const RECOVERY: &str = "Recovery";
/// Gate (controller-manager): in-tree FeedInventory controller.
pub const FEED_INVENTORY: &str = "FeedInventory";
/// Gate (agent): run/announce a capacity predictor.
pub const PREDICTOR: &str = "Predictor";
/// Gate (agent, controller-manager): ServiceExport/ServiceImport controllers.
pub const MULTI_CLUSTER_SERVICE: &str = "MultiClusterService";
/// Gate (scheduler): reschedule when a matched cluster stops being Ready.
pub const FAIL_OVER: &str = "FailOver";
/// Gate (scheduler): tolerate predictor failures up to the configured percentage.
pub const FEASIBLE_CLUSTERS_TOLERATION: &str = "FeasibleClustersToleration";
/// Gate (controller-manager): initialization taint and `ClusterInit` condition.
pub const CLUSTER_INIT: &str = "ClusterInit";
/// Gate (controller-manager, beyond upstream): a `multicluster.x-k8s.io` PlacementDecision per
/// Subscription (KEP-5313, an alpha API; needs the ClusterProfiles).
pub const PLACEMENT_DECISION: &str = "PlacementDecision";

/// Every Clusternet feature gate name, in upstream declaration order. All are Alpha and default
/// off; their defaults are in [`FEATURE_GATE_DEFAULTS`].
pub const FEATURE_GATES: &[&str] = &[
    SOCKET_CONNECTION,
    APP_PUSHER,
    DEPLOYER,
    SHADOW_API,
    FEED_IN_USE_PROTECTION,
    RECOVERY,
    FEED_INVENTORY,
    PREDICTOR,
    MULTI_CLUSTER_SERVICE,
    FAIL_OVER,
    FEASIBLE_CLUSTERS_TOLERATION,
    CLUSTER_INIT,
    PLACEMENT_DECISION,
];

/// `(gate, default)` for every gate of [`FEATURE_GATES`], same order.
pub const FEATURE_GATE_DEFAULTS: &[(&str, bool)] = &[
    (SOCKET_CONNECTION, false),
    (APP_PUSHER, false),
    (DEPLOYER, false),
    (SHADOW_API, false),
    (FEED_IN_USE_PROTECTION, false),
    (RECOVERY, false),
    (FEED_INVENTORY, false),
    (PREDICTOR, false),
    (MULTI_CLUSTER_SERVICE, false),
    (FAIL_OVER, false),
    (FEASIBLE_CLUSTERS_TOLERATION, false),
    (CLUSTER_INIT, false),
    (PLACEMENT_DECISION, false),
];

/// Gates the shipped hub manifest turns on.
pub const SHIPPED_HUB_GATES: &[&str] = &[SOCKET_CONNECTION, SHADOW_API];
/// Gates the shipped controller-manager manifest turns on (`ClusterInit` explicitly off).
pub const SHIPPED_CONTROLLER_MANAGER_GATES: &[&str] = &[
    SOCKET_CONNECTION,
    DEPLOYER,
    FEED_IN_USE_PROTECTION,
    FEED_INVENTORY,
];
/// Gates the shipped scheduler manifest turns on.
pub const SHIPPED_SCHEDULER_GATES: &[&str] = &[FAIL_OVER, FEASIBLE_CLUSTERS_TOLERATION];
/// Gates the shipped agent manifest turns on.
pub const SHIPPED_AGENT_GATES: &[&str] = &[SOCKET_CONNECTION, APP_PUSHER, RECOVERY, PREDICTOR];

/// Field managers of the child's own controllers whose fields are theirs to keep: autoscalers and
/// the built-in controllers (an HPA writes `spec.replicas` as `kube-controller-manager` through
/// the scale subresource). The default of the deployer's `retainManagers` setting.
pub const DEFAULT_RETAIN_MANAGERS: &[&str] = &[
    "horizontal-pod-autoscaler",
    "kube-controller-manager",
    "vpa-updater",
    "vpa-recommender",
    "vpa-admission-controller",
    "cluster-autoscaler",
    "keda-operator",
    "karpenter",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gate_lists_agree() {
        let names: Vec<_> = FEATURE_GATE_DEFAULTS.iter().map(|(n, _)| *n).collect();
        assert_eq!(names, FEATURE_GATES);
        assert!(
            FEATURE_GATE_DEFAULTS.iter().all(|(_, on)| !on),
            "all gates default off"
        );
        for shipped in [
            SHIPPED_HUB_GATES,
            SHIPPED_CONTROLLER_MANAGER_GATES,
            SHIPPED_SCHEDULER_GATES,
            SHIPPED_AGENT_GATES,
        ] {
            assert!(shipped.iter().all(|g| FEATURE_GATES.contains(g)));
        }
    }

    #[test]
    fn derived_names() {
        assert_eq!(cluster_role_name("abc"), "clusternet-abc");
        assert_eq!(cluster_registration_request_name("abc"), "clusternet-abc");
        assert_eq!(RANDOM_SUFFIX_ALPHABET.len(), 27);
        // spec/apis.md §10's example
        assert_eq!(
            derived_service_name("test", "my-service"),
            "derived-test-sgvukfmp95"
        );
    }
}
