//! Cluster API discovery (docs/spec/agent.md §7, controller `clusterdiscovery`): with
//! `--cluster-api-kubeconfig`, every Cluster API `Cluster` that is `Provisioned` gets, in its
//! namespace of the management cluster, the agent bundle (ConfigMaps `clusternet-agent-deploy` and
//! `clusternet-agent-rbac`) and the ClusterResourceSet `clusternet-cluster-api` that makes Cluster
//! API's own controller apply the bundle to the new cluster; its agent then registers with the
//! parent like any other.
//!
//! observe (the Cluster, the settings Secret `capi-system/clusternet-cluster-api`) ->
//! [`plan_bundle`] (pure) -> apply (server-side apply of the three objects). Beyond upstream: the
//! bundle carries the `clusternet-app-deployer` token Secret that Kubernetes >= 1.24 no longer
//! creates by itself, the agent may finalise its own ServiceExports, a missing or incomplete
//! settings Secret is said plainly (and watched, so creating it takes effect at once), and Cluster
//! API v1beta2 is served too.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use crate::apis::known;
use crate::runtime::Runtime;
use crate::runtime::controller::{Action, ApiFailure, Controller, ReconcileError, Source};

pub const FIELD_MANAGER: &str = "clusternet/controller/clusterdiscovery";
/// Cluster API's group.
pub const CAPI_GROUP: &str = "cluster.x-k8s.io";
/// The ClusterResourceSet's group.
pub const ADDONS_GROUP: &str = "addons.cluster.x-k8s.io";
/// Cluster API versions used, in order of preference (upstream's first, then the newer one, then
/// the older one).
pub const CAPI_VERSIONS: &[&str] = &["v1beta1", "v1beta2", "v1alpha4"];
/// Namespace and name of the settings Secret in the management cluster.
pub const SETTINGS_NAMESPACE: &str = "capi-system";
pub const SETTINGS_NAME: &str = "clusternet-cluster-api";
/// Names of the bundle objects (upstream's).
pub const DEPLOY_CONFIGMAP: &str = "clusternet-agent-deploy";
pub const RBAC_CONFIGMAP: &str = "clusternet-agent-rbac";
pub const CLUSTER_RESOURCE_SET: &str = "clusternet-cluster-api";
/// Cluster API's label on the objects of a cluster.
pub const CLUSTER_NAME_LABEL: &str = "cluster.x-k8s.io/cluster-name";
/// Budget of one registration (upstream's 1 minute).
const BUDGET: Duration = Duration::from_secs(60);
/// How often a management cluster that cannot be used is tried again.
const RETRY: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub enum DiscoveryError {
    #[error(
        "Secret {SETTINGS_NAMESPACE}/{SETTINGS_NAME} in the Cluster API management cluster {0}: create it with keys image, parentURL and regToken (deploy/templates/cluster-api-secret.yaml); retrying"
    )]
    Settings(String),
    #[error(transparent)]
    Api(#[from] ApiFailure),
    #[error("Cluster {0}: registering took longer than a minute; retrying")]
    Timeout(String),
}

impl ReconcileError for DiscoveryError {
    fn metric_label(&self) -> &'static str {
        match self {
            DiscoveryError::Settings(_) => "settings",
            DiscoveryError::Api(_) => "api",
            DiscoveryError::Timeout(_) => "timeout",
        }
    }
}

/// The settings Secret's values.
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    pub image: String,
    pub parent_url: String,
    pub reg_token: String,
}

/// The settings from the Secret's data, or what is wrong with them.
pub fn settings_from(secret: Option<&Secret>) -> Result<Settings, String> {
    let Some(secret) = secret else {
        return Err("does not exist".into());
    };
    let data = secret.data.clone().unwrap_or_default();
    let get = |k: &str| {
        data.get(k)
            .map(|v| String::from_utf8_lossy(&v.0).trim().to_string())
            .filter(|v| !v.is_empty())
    };
    let (image, parent_url, reg_token) = (get("image"), get("parentURL"), get("regToken"));
    let missing: Vec<&str> = [
        ("image", &image),
        ("parentURL", &parent_url),
        ("regToken", &reg_token),
    ]
    .iter()
    .filter(|(_, v)| v.is_none())
    .map(|(k, _)| *k)
    .collect();
    match (image, parent_url, reg_token) {
        (Some(image), Some(parent_url), Some(reg_token)) => Ok(Settings {
            image,
            parent_url,
            reg_token,
        }),
        _ => Err(format!("lacks {}", missing.join(", "))),
    }
}

/// Whether a Cluster is ready for its agent (`status.phase: Provisioned`).
pub fn is_provisioned(cluster: &DynamicObject) -> bool {
    cluster.data["status"]["phase"].as_str() == Some("Provisioned")
}

/// A YAML stream of `objects`, as the ConfigMaps carry them.
fn yaml_stream(objects: &[Value]) -> String {
    objects
        .iter()
        .map(|o| {
            format!(
                "---\n{}",
                crate::kube_ext::yaml::to_string(o).unwrap_or_default()
            )
        })
        .collect()
}

/// The agent's Namespace, ServiceAccounts, Secrets and Deployment (ConfigMap
/// `clusternet-agent-deploy`).
pub fn agent_objects(settings: &Settings) -> Vec<Value> {
    let ns = known::CLUSTERNET_SYSTEM_NAMESPACE;
    let from_secret = |env: &str, key: &str| {
        json!({"name": env, "valueFrom": {"secretKeyRef": {
            "name": "clusternet-agent-cluster-registration", "key": key}}})
    };
    vec![
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
        json!({"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": "clusternet-agent", "namespace": ns}}),
        json!({"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": known::CLUSTERNET_APP_SA, "namespace": ns}}),
        // Kubernetes >= 1.24 creates no token Secret for a ServiceAccount: the agent publishes
        // this one to the parent for Push/Dual
        json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/service-account-token",
            "metadata": {"name": known::CLUSTERNET_APP_SA, "namespace": ns,
                "annotations": {"kubernetes.io/service-account.name": known::CLUSTERNET_APP_SA}}}),
        json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": "clusternet-agent-cluster-registration", "namespace": ns},
            "stringData": {"parentURL": settings.parent_url, "regToken": settings.reg_token}}),
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "clusternet-agent", "namespace": ns,
                "labels": {"app": "clusternet-agent"}},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "clusternet-agent"}},
                "template": {"metadata": {"labels": {"app": "clusternet-agent"}},
                    "spec": {"serviceAccountName": "clusternet-agent",
                        "tolerations": [
                            {"key": "node-role.kubernetes.io/master", "operator": "Exists"},
                            {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"}],
                        "containers": [{"name": "clusternet-agent", "image": settings.image,
                            "imagePullPolicy": "IfNotPresent",
                            "env": [from_secret("PARENT_URL", "parentURL"),
                                from_secret("REG_TOKEN", "regToken"),
                                {"name": "AGENT_NAMESPACE",
                                    "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}],
                            "command": ["/usr/local/bin/clusternet"],
                            "args": ["--role=agent",
                                "--cluster-reg-token=$(REG_TOKEN)",
                                "--cluster-reg-parent-url=$(PARENT_URL)",
                                "--cluster-sync-mode=Dual",
                                "--feature-gates=SocketConnection=true,AppPusher=true,Recovery=true,Predictor=true",
                                "--leader-elect-resource-namespace=$(AGENT_NAMESPACE)",
                                "--predictor-direct-access=false",
                                "--predictor-port=8080"]}]}}}}),
    ]
}

/// The agent's RBAC (ConfigMap `clusternet-agent-rbac`): upstream's, plus what this agent's
/// ServiceExport controller writes.
pub fn rbac_objects() -> Vec<Value> {
    let ns = known::CLUSTERNET_SYSTEM_NAMESPACE;
    let agent = json!([{"kind": "ServiceAccount", "name": "clusternet-agent", "namespace": ns}]);
    let role = "clusternet:agent:admin";
    vec![
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": role, "namespace": ns},
            "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": role, "namespace": ns},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
            "subjects": agent}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": role},
            "rules": [
                {"apiGroups": [""], "resources": ["pods", "nodes", "services"],
                    "verbs": ["get", "list", "watch"]},
                {"apiGroups": ["metrics.k8s.io"], "resources": ["pods", "nodes"],
                    "verbs": ["get", "list", "watch"]},
                {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"],
                    "verbs": ["get", "list", "watch"]},
                {"apiGroups": ["multicluster.x-k8s.io"],
                    "resources": ["serviceexports", "serviceimports"],
                    "verbs": ["get", "list", "watch", "update", "patch"]},
                {"apiGroups": ["multicluster.x-k8s.io"], "resources": ["serviceexports/status"],
                    "verbs": ["get", "update", "patch"]},
                {"nonResourceURLs": ["*"], "verbs": ["*"]}]}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": role},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": agent}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": "clusternet:app:deployer"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                "name": "cluster-admin"},
            "subjects": [{"kind": "ServiceAccount", "name": known::CLUSTERNET_APP_SA,
                "namespace": ns}]}),
    ]
}

/// The apply bodies of a provisioned Cluster's bundle in `namespace`: the two ConfigMaps and
/// the ClusterResourceSet (of Cluster API `version`).
pub fn plan_bundle(settings: &Settings, namespace: &str, version: &str) -> [Value; 3] {
    let configmap = |name: &str, objects: &[Value]| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace},
            "data": {name: yaml_stream(objects)}})
    };
    [
        configmap(DEPLOY_CONFIGMAP, &agent_objects(settings)),
        configmap(RBAC_CONFIGMAP, &rbac_objects()),
        json!({"apiVersion": format!("{ADDONS_GROUP}/{version}"), "kind": "ClusterResourceSet",
            "metadata": {"name": CLUSTER_RESOURCE_SET, "namespace": namespace,
                "labels": {known::OBJECT_CREATED_BY_LABEL: known::CLUSTERNET_CONTROLLER_MANAGER_NAME}},
            "spec": {
                "clusterSelector": {"matchExpressions": [
                    {"key": CLUSTER_NAME_LABEL, "operator": "Exists"}]},
                "resources": [{"name": DEPLOY_CONFIGMAP, "kind": "ConfigMap"},
                    {"name": RBAC_CONFIGMAP, "kind": "ConfigMap"}]}}),
    ]
}

/// The Cluster API version the management cluster serves, by [`CAPI_VERSIONS`] preference.
pub fn pick_version(served: &[String]) -> Option<&'static str> {
    CAPI_VERSIONS
        .iter()
        .find(|v| served.iter().any(|s| s == *v))
        .copied()
}

async fn management_client(path: &str) -> Result<Client, String> {
    let kc = kube::config::Kubeconfig::read_from(path).map_err(|e| e.to_string())?;
    let config =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await
            .map_err(|e| e.to_string())?;
    Client::try_from(config).map_err(|e| e.to_string())
}

async fn served_version(client: &Client) -> Result<Option<&'static str>, kube::Error> {
    let groups = client.list_api_groups().await?;
    let served: Vec<String> = groups
        .groups
        .iter()
        .filter(|g| g.name == CAPI_GROUP)
        .flat_map(|g| g.versions.iter().map(|v| v.version.clone()))
        .collect();
    Ok(pick_version(&served))
}

struct Ctx {
    client: Client,
    version: &'static str,
}

/// The management cluster's client and the Cluster API version it serves, retried every
/// [`RETRY`] (said once as an error, then quietly) until it answers with one; None on `stop`.
async fn management_cluster(
    path: &str,
    stop: &CancellationToken,
) -> Option<(kube::Client, &'static str)> {
    let mut said = false;
    loop {
        let attempt = async {
            let client = management_client(path)
                .await
                .map_err(|e| format!("cannot use --cluster-api-kubeconfig {path}: {e}"))?;
            match served_version(&client).await {
                Ok(Some(v)) => Ok((client, v)),
                Ok(None) => Err(format!(
                    "the Cluster API management cluster ({path}) serves no {CAPI_GROUP} {}: are the Cluster API CRDs installed?",
                    CAPI_VERSIONS.join("/")
                )),
                Err(e) => Err(format!(
                    "cannot reach the Cluster API management cluster ({path}): {e}"
                )),
            }
        };
        match attempt.await {
            Ok(found) => return Some(found),
            Err(e) if !said => {
                error!(error = %e, retry_in = ?RETRY, "Cluster API discovery is waiting");
                said = true;
            }
            Err(e) => tracing::debug!(error = %e, "Cluster API discovery is still waiting"),
        }
        tokio::select! {
            _ = stop.cancelled() => return None,
            _ = tokio::time::sleep(RETRY) => {}
        }
    }
}

/// Runs the discovery until `stop`, when `--cluster-api-kubeconfig` is set.
pub async fn run(rt: Runtime, stop: CancellationToken) {
    let path = rt.config.cluster_api_kubeconfig.clone();
    if path.is_empty() {
        return;
    }
    warn!(
        "Cluster API discovery: make sure the feature gate ClusterResourceSet is enabled in the Cluster API management cluster's controller manager"
    );
    let Some((client, version)) = management_cluster(&path, &stop).await else {
        return;
    };
    info!(version, "discovering Cluster API clusters");
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(CAPI_GROUP, version, "Cluster"),
        "clusters",
    );
    let clusters: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    // the settings Secret appearing or changing looks at every Cluster again
    let secrets: Api<Secret> = Api::namespaced(client.clone(), SETTINGS_NAMESPACE);
    let settings_changed = watcher(
        secrets,
        watcher::Config::default().fields(&format!("metadata.name={SETTINGS_NAME}")),
    )
    .backoff(crate::runtime::cache::watch_backoff())
    .filter_map(|e| async move {
        matches!(
            e,
            Ok(watcher::Event::Apply(_)) | Ok(watcher::Event::InitDone)
        )
        .then_some(())
    });
    let ctx = Arc::new(Ctx { client, version });
    let writer = kube::runtime::reflector::store::Writer::new(resource.clone());
    let store = writer.as_reader();
    let every = store.clone();
    let changes = kube::runtime::reflector(
        writer,
        watcher(clusters, watcher::Config::default())
            .backoff(crate::runtime::cache::watch_backoff()),
    )
    .applied_objects()
    .filter_map({
        let resource = resource.clone();
        move |c| {
            futures::future::ready(
                c.ok()
                    .map(|c| ObjectRef::from_obj_with(&c, resource.clone())),
            )
        }
    });
    Controller::on(
        "clusterdiscovery",
        Source::store_with(store, changes, resource.clone()),
    )
    .concurrency(2)
    .triggered_by(settings_changed.flat_map(move |()| {
        futures::stream::iter(
            every
                .state()
                .iter()
                .map(|c| ObjectRef::from_obj_with(c.as_ref(), resource.clone()))
                .collect::<Vec<_>>(),
        )
    }))
    .run(stop, move |cluster| {
        let ctx = ctx.clone();
        async move { reconcile(cluster, ctx).await }
    })
    .await;
}

fn key(cluster: &DynamicObject) -> String {
    format!(
        "{}/{}",
        cluster.namespace().unwrap_or_default(),
        cluster.name_any()
    )
}

async fn reconcile(cluster: Arc<DynamicObject>, ctx: Arc<Ctx>) -> Result<Action, DiscoveryError> {
    // deleting Clusters are left alone: nothing is deregistered (upstream)
    if cluster.metadata.deletion_timestamp.is_some() || !is_provisioned(&cluster) {
        return Ok(Action::await_change());
    }
    let name = key(&cluster);
    let secret = Api::<Secret>::namespaced(ctx.client.clone(), SETTINGS_NAMESPACE)
        .get_opt(SETTINGS_NAME)
        .await
        .map_err(|e| DiscoveryError::Settings(format!("cannot be read ({e})")))?;
    let settings = settings_from(secret.as_ref()).map_err(DiscoveryError::Settings)?;
    let ns = cluster.namespace().unwrap_or_default();
    let [deploy, rbac, crs] = plan_bundle(&settings, &ns, ctx.version);
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    let apply = async {
        let configmaps: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &ns);
        for (cm, body) in [(DEPLOY_CONFIGMAP, &deploy), (RBAC_CONFIGMAP, &rbac)] {
            configmaps
                .patch(cm, &pp, &Patch::Apply(body))
                .await
                .map_err(ApiFailure::of(
                    format!("Cluster {name}"),
                    "writing the agent bundle ConfigMaps",
                ))?;
        }
        let crs_resource = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(ADDONS_GROUP, ctx.version, "ClusterResourceSet"),
            "clusterresourcesets",
        );
        Api::<DynamicObject>::namespaced_with(ctx.client.clone(), &ns, &crs_resource)
            .patch(CLUSTER_RESOURCE_SET, &pp, &Patch::Apply(&crs))
            .await
            .map_err(ApiFailure::of(
                format!("Cluster {name}"),
                "writing the ClusterResourceSet",
            ))?;
        Ok::<_, DiscoveryError>(())
    };
    tokio::time::timeout(BUDGET, apply)
        .await
        .map_err(|_| DiscoveryError::Timeout(name.clone()))??;
    info!(cluster = %name, "agent bundle and ClusterResourceSet in place; Cluster API applies them to the cluster");
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;
    use std::collections::BTreeMap;

    fn settings() -> Settings {
        Settings {
            image: "ghcr.io/clusternet/clusternet:v1".into(),
            parent_url: "https://parent:6443".into(),
            reg_token: "abcdef.0123456789abcdef".into(),
        }
    }

    #[test]
    fn the_settings_secret_names_what_it_lacks() {
        assert_eq!(settings_from(None).unwrap_err(), "does not exist");
        let secret = Secret {
            data: Some(BTreeMap::from([
                ("image".to_string(), ByteString(b"img".to_vec())),
                ("regToken".to_string(), ByteString(b" ".to_vec())),
            ])),
            ..Default::default()
        };
        assert_eq!(
            settings_from(Some(&secret)).unwrap_err(),
            "lacks parentURL, regToken"
        );
    }

    #[test]
    fn the_bundle_is_upstreams_with_the_app_deployer_token() {
        let [deploy, rbac, crs] = plan_bundle(&settings(), "capi-ns", "v1beta1");
        assert_eq!(deploy["metadata"]["namespace"], "capi-ns");
        let stream = deploy["data"][DEPLOY_CONFIGMAP]
            .as_str()
            .expect("a YAML stream");
        let objects: Vec<Value> = crate::kube_ext::yaml::from_str_documents(stream).expect("YAML");
        let kinds: Vec<String> = objects
            .iter()
            .map(|o| {
                format!(
                    "{}/{}",
                    o["kind"].as_str().unwrap_or_default(),
                    o["metadata"]["name"].as_str().unwrap_or_default()
                )
            })
            .collect();
        assert_eq!(
            kinds,
            [
                "Namespace/clusternet-system",
                "ServiceAccount/clusternet-agent",
                "ServiceAccount/clusternet-app-deployer",
                "Secret/clusternet-app-deployer",
                "Secret/clusternet-agent-cluster-registration",
                "Deployment/clusternet-agent"
            ]
        );
        let d = &objects[5]["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(d["image"], "ghcr.io/clusternet/clusternet:v1");
        let args: Vec<&str> = d["args"]
            .as_array()
            .expect("args")
            .iter()
            .filter_map(Value::as_str)
            .collect();
        assert!(args.contains(&"--cluster-reg-token=$(REG_TOKEN)"));
        assert!(args.contains(&"--cluster-sync-mode=Dual"));
        assert_eq!(
            objects[4]["stringData"]["regToken"],
            "abcdef.0123456789abcdef"
        );
        assert!(
            rbac["data"][RBAC_CONFIGMAP]
                .as_str()
                .is_some_and(|s| s.contains("clusternet:app:deployer"))
        );
        assert_eq!(crs["apiVersion"], "addons.cluster.x-k8s.io/v1beta1");
        assert_eq!(
            crs["metadata"]["labels"]["clusternet.io/created-by"],
            "clusternet-controller-manager"
        );
        assert_eq!(
            crs["spec"]["clusterSelector"]["matchExpressions"][0],
            json!({"key": "cluster.x-k8s.io/cluster-name", "operator": "Exists"})
        );
        assert_eq!(crs["spec"]["resources"].as_array().map(Vec::len), Some(2));
    }

    #[test]
    fn versions_are_picked_by_preference() {
        let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(pick_version(&v(&["v1beta2", "v1beta1"])), Some("v1beta1"));
        assert_eq!(pick_version(&v(&["v1beta2"])), Some("v1beta2"));
        assert_eq!(pick_version(&v(&["v1alpha4"])), Some("v1alpha4"));
        assert_eq!(pick_version(&v(&["v1alpha3"])), None);
    }

    #[test]
    fn only_provisioned_clusters_count() {
        let c = |phase: Value| -> DynamicObject {
            serde_json::from_value(
                json!({"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster",
                "metadata": {"name": "c", "namespace": "n"}, "status": {"phase": phase}}),
            )
            .expect("a Cluster")
        };
        assert!(is_provisioned(&c(json!("Provisioned"))));
        assert!(!is_provisioned(&c(json!("Provisioning"))));
        assert!(!is_provisioned(&c(Value::Null)));
    }
}
