//! Registration approval (`crrapprover`, docs/spec/registration.md §4): for each
//! ClusterRegistrationRequest, the dedicated namespace, the ManagedCluster, a ServiceAccount with a
//! token Secret, RBAC scoped to that namespace, and the token and CA written into the request's
//! status. Idempotent: every object is looked up by the cluster-id label first, so retries,
//! restarts and a new request for a known cluster reuse what exists. Unlike upstream, an approved
//! request whose token no longer exists gets a fresh one (revoked credentials recover).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::runtime::controller::Action;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Namespace, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use kube::api::{Api, ListParams, ObjectMeta, PostParams};
use kube::runtime::reflector::Store;
use kube::{Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;
use tracing::info;

use crate::apis::known;
use crate::apis::{
    ApprovedResult, ClusterRegistrationRequest, ClusterRegistrationRequestStatus, ClusterSyncMode,
    ManagedCluster, ManagedClusterSpec,
};
use crate::runtime::controller::{ApiFailure, Controller, ReconcileError, recheck};
use crate::runtime::{Runtime, api_code};

#[derive(Debug, thiserror::Error)]
pub enum ApproveError {
    #[error(transparent)]
    Api(#[from] ApiFailure),
    #[error(
        "ClusterRegistrationRequest {crr}: the token of ServiceAccount {namespace}/{sa} is not issued yet"
    )]
    TokenPending {
        crr: String,
        namespace: String,
        sa: String,
    },
}

impl ReconcileError for ApproveError {
    fn metric_label(&self) -> &'static str {
        match self {
            ApproveError::Api(_) => "api",
            ApproveError::TokenPending { .. } => "token_pending",
        }
    }

    fn is_wait(&self) -> bool {
        matches!(self, ApproveError::TokenPending { .. })
    }
}

pub async fn run(rt: Runtime, stop: CancellationToken) {
    let requests = rt.cache.watch::<ClusterRegistrationRequest>();
    let clusters = rt.cache.watch::<ManagedCluster>();
    let ctx = Arc::new((rt, clusters.store.clone()));
    Controller::new("crrapprover", &requests)
        // an empty cache that has not listed yet would look like "no ManagedCluster"
        .after([clusters.listed()])
        .run(stop, move |crr| {
            let ctx = ctx.clone();
            async move { reconcile(&ctx.0, &ctx.1, &crr).await }
        })
        .await;
}

fn labels_for(id: &str, name: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (
            known::OBJECT_CREATED_BY_LABEL.to_string(),
            known::CLUSTERNET_AGENT_NAME.to_string(),
        ),
        (known::CLUSTER_ID_LABEL.to_string(), id.to_string()),
        (known::CLUSTER_NAME_LABEL.to_string(), name.to_string()),
    ])
}

fn selector(id: &str) -> ListParams {
    ListParams::default().labels(&format!(
        "{}={},{}={}",
        known::OBJECT_CREATED_BY_LABEL,
        known::CLUSTERNET_AGENT_NAME,
        known::CLUSTER_ID_LABEL,
        id
    ))
}

/// What a request needs, judged from the request alone.
#[derive(Debug, PartialEq)]
pub enum Admission {
    /// Its name is not `clusternet-<spec.clusterId>`: deny it with this status.
    Deny(ClusterRegistrationRequestStatus),
    /// Decided before (denied, or approved credentials to check): nothing to do now.
    Done,
    /// Approved before: still valid credentials? (a deleted token Secret means revoked)
    Verify,
    /// Not decided yet: approve it.
    Approve,
}

pub fn admission(crr: &ClusterRegistrationRequest) -> Admission {
    let name = crr.name_any();
    let id = &crr.spec.cluster_id;
    let status = crr.status.clone().unwrap_or_default();
    // 1. the name must be clusternet-<spec.clusterId>
    if name.strip_prefix("clusternet-") != Some(id.as_str()) {
        if status.result.is_some() {
            return Admission::Done;
        }
        return Admission::Deny(ClusterRegistrationRequestStatus {
            result: Some(ApprovedResult::Denied),
            error_message: format!(
                "ClusterRegistrationRequest name {name:?} is not clusternet-<spec.clusterId> ({id})"
            ),
            ..Default::default()
        });
    }
    match status.result {
        None => Admission::Approve,
        Some(ApprovedResult::Approved) => Admission::Verify,
        Some(_) => Admission::Done,
    }
}

/// An approved request keeps its credentials while the token it was given is still the one in
/// the ServiceAccount's Secret, and as long as its namespace is gone (the cluster was deleted).
pub fn credentials_hold(
    status: &ClusterRegistrationRequestStatus,
    token_now: Option<&ByteString>,
    namespace_exists: bool,
) -> bool {
    token_now.is_some() && token_now == status.token.as_ref() || !namespace_exists
}

/// The cluster name of a request: `spec.clusterName`, else its cluster-name label, else its name.
pub fn cluster_name(crr: &ClusterRegistrationRequest) -> String {
    if crr.spec.cluster_name.is_empty() {
        crr.labels()
            .get(known::CLUSTER_NAME_LABEL)
            .cloned()
            .unwrap_or_else(|| crr.name_any())
    } else {
        crr.spec.cluster_name.clone()
    }
}

/// The error of one of a request's API calls, saying what it was doing.
fn api_err(crr: &str, what: &str) -> impl FnOnce(kube::Error) -> ApproveError + use<> {
    let fail = ApiFailure::of(
        format!("ClusterRegistrationRequest {crr}"),
        what.to_string(),
    );
    move |source| fail(source).into()
}

pub async fn reconcile(
    rt: &Runtime,
    clusters: &Store<ManagedCluster>,
    crr: &ClusterRegistrationRequest,
) -> Result<Action, ApproveError> {
    let client = rt.client.clone();
    let name = crr.name_any();
    let err = |what: &str| api_err(&name, what);
    match admission(crr) {
        Admission::Deny(denied) => {
            write_status(&client, crr, denied)
                .await
                .map_err(err("writing the Denied status"))?;
            return Ok(Action::await_change());
        }
        Admission::Done => return Ok(Action::await_change()),
        Admission::Verify => {
            if verify(&client, crr)
                .await
                .map_err(|(what, e)| err(what)(e))?
            {
                return Ok(recheck(Duration::from_secs(300)));
            }
            info!(request = %name, "the issued token is gone: issuing new credentials");
        }
        Admission::Approve => {}
    }
    let approved = provision(rt, clusters, crr).await?;
    let ns_name = approved.dedicated_namespace.clone();
    write_status(&client, crr, approved)
        .await
        .map_err(err("writing the Approved status"))?;
    info!(request = %name, namespace = %ns_name, "approved the cluster registration");
    metrics::counter!("clusternet_registrations_approved_total").increment(1);
    Ok(recheck(Duration::from_secs(300)))
}

/// Steps 3-8 of an approval: the dedicated namespace, the ManagedCluster, the ServiceAccount,
/// RBAC scoped to this cluster and its issued token, made into the Approved status.
async fn provision(
    rt: &Runtime,
    clusters: &Store<ManagedCluster>,
    crr: &ClusterRegistrationRequest,
) -> Result<ClusterRegistrationRequestStatus, ApproveError> {
    let client = rt.client.clone();
    let name = crr.name_any();
    let err = |what: &str| api_err(&name, what);
    let id = crr.spec.cluster_id.clone();
    let labels = labels_for(&id, &cluster_name(crr));
    // 3. the dedicated namespace
    let ns_name = ensure_namespace(&client, crr, &labels)
        .await
        .map_err(err("ensuring the dedicated namespace"))?;
    // 4. the ManagedCluster
    let mc_name = ensure_cluster(rt, clusters, crr, &ns_name, &labels)
        .await
        .map_err(err("creating the ManagedCluster"))?;
    // 5. the ServiceAccount and its token Secret
    let sa_name = ensure_service_account(&client, &id, &ns_name, &labels)
        .await
        .map_err(|(what, e)| err(what)(e))?;
    // 6-7. RBAC scoped to this cluster
    let rbac = desired_rbac(
        &id,
        &sa_name,
        &ns_name,
        rt.config.gate(known::SOCKET_CONNECTION),
    );
    ensure_rbac(&client, &ns_name, rbac)
        .await
        .map_err(|(what, e)| err(what)(e))?;
    // 8. the token, once kube-controller-manager has filled it in
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns_name);
    let Some((token, ca)) = issued_token(&secrets, &sa_name)
        .await
        .map_err(err("reading the token Secret"))?
    else {
        return Err(ApproveError::TokenPending {
            crr: name,
            namespace: ns_name,
            sa: sa_name,
        });
    };
    // 9. approved
    Ok(ClusterRegistrationRequestStatus {
        dedicated_namespace: ns_name,
        token: Some(token),
        ca_certificate: Some(ca),
        result: Some(ApprovedResult::Approved),
        error_message: String::new(),
        managed_cluster_name: mc_name,
    })
}

/// Observes an approved request's credentials: true while they still hold.
async fn verify(
    client: &Client,
    crr: &ClusterRegistrationRequest,
) -> Result<bool, (&'static str, kube::Error)> {
    let status = crr.status.clone().unwrap_or_default();
    let id = &crr.spec.cluster_id;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &status.dedicated_namespace);
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), &status.dedicated_namespace);
    let sa = sas
        .list(&selector(id))
        .await
        .map_err(|e| ("listing ServiceAccounts", e))?
        .items
        .into_iter()
        .next();
    let current = match &sa {
        Some(sa) => secrets
            .get_opt(&sa.name_any())
            .await
            .map_err(|e| ("reading the token Secret", e))?,
        None => None,
    };
    let token_now = current
        .and_then(|s| s.data)
        .and_then(|d| d.get("token").cloned());
    let ns_exists = Api::<Namespace>::all(client.clone())
        .get_opt(&status.dedicated_namespace)
        .await
        .map_err(|e| ("reading the dedicated namespace", e))?
        .is_some_and(|n| n.metadata.deletion_timestamp.is_none());
    Ok(credentials_hold(&status, token_now.as_ref(), ns_exists))
}

/// The dedicated namespace to create: `spec.clusterNamespace`, else a generated `clusternet-*`.
pub fn desired_namespace(
    crr: &ClusterRegistrationRequest,
    labels: &BTreeMap<String, String>,
) -> Namespace {
    let mut meta = ObjectMeta {
        labels: Some(labels.clone()),
        ..Default::default()
    };
    if crr.spec.cluster_namespace.is_empty() {
        meta.generate_name = Some("clusternet-".into());
    } else {
        meta.name = Some(crr.spec.cluster_namespace.clone());
    }
    Namespace {
        metadata: meta,
        ..Default::default()
    }
}

/// The cluster's dedicated namespace: the one labelled with its id, else a new one.
async fn ensure_namespace(
    client: &Client,
    crr: &ClusterRegistrationRequest,
    labels: &BTreeMap<String, String>,
) -> Result<String, kube::Error> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let existing = namespaces
        .list(&selector(&crr.spec.cluster_id))
        .await?
        .items;
    if let Some(ns) = existing
        .into_iter()
        .find(|n| n.metadata.deletion_timestamp.is_none())
    {
        return Ok(ns.name_any());
    }
    let created = namespaces
        .create(&PostParams::default(), &desired_namespace(crr, labels))
        .await?;
    info!(request = %crr.name_any(), namespace = %created.name_any(), "created the dedicated namespace");
    Ok(created.name_any())
}

/// The ManagedCluster of a new registration: the request's labels, type and sync mode, our
/// finalizer (lets the lifecycle controller clean up the namespace, RBAC and request on
/// deletion), and with the ClusterInit gate the initialization taint.
pub fn desired_cluster(
    crr: &ClusterRegistrationRequest,
    namespace: &str,
    labels: &BTreeMap<String, String>,
    cluster_init_gate: bool,
) -> ManagedCluster {
    let mut mc_labels = labels.clone();
    mc_labels.extend(crr.spec.cluster_labels.clone());
    let mut taints = Vec::new();
    if cluster_init_gate {
        taints.push(k8s_openapi::api::core::v1::Taint {
            key: known::TAINT_CLUSTER_INITIALIZATION.into(),
            value: Some(crate::apis::clusters::REASON_CLUSTER_INIT_WAITING.into()),
            effect: known::TAINT_EFFECT_NO_SCHEDULE.into(),
            time_added: None,
        });
    }
    ManagedCluster {
        metadata: ObjectMeta {
            name: Some(cluster_name(crr)),
            namespace: Some(namespace.to_string()),
            labels: Some(mc_labels),
            finalizers: Some(vec![known::APP_FINALIZER.to_string()]),
            ..Default::default()
        },
        spec: ManagedClusterSpec {
            cluster_id: crr.spec.cluster_id.clone(),
            cluster_type: crr.spec.cluster_type.clone(),
            cluster_init_base_name: None,
            sync_mode: crr.spec.sync_mode.unwrap_or(ClusterSyncMode::Pull),
            taints,
        },
        status: None,
    }
}

/// The cluster's ManagedCluster, from the cache: one it has not seen yet is created again and
/// that create's AlreadyExists taken as the answer, as for a concurrent registration.
async fn ensure_cluster(
    rt: &Runtime,
    clusters: &Store<ManagedCluster>,
    crr: &ClusterRegistrationRequest,
    namespace: &str,
    labels: &BTreeMap<String, String>,
) -> Result<String, kube::Error> {
    let id = &crr.spec.cluster_id;
    if let Some(mc) = clusters.find(|mc| {
        let l = mc.labels();
        l.get(known::OBJECT_CREATED_BY_LABEL).map(String::as_str)
            == Some(known::CLUSTERNET_AGENT_NAME)
            && l.get(known::CLUSTER_ID_LABEL) == Some(id)
    }) {
        return Ok(mc.name_any());
    }
    let mc = desired_cluster(crr, namespace, labels, rt.config.gate(known::CLUSTER_INIT));
    let api: Api<ManagedCluster> = Api::namespaced(rt.client.clone(), namespace);
    match api.create(&PostParams::default(), &mc).await {
        Ok(c) => Ok(c.name_any()),
        Err(e) if api_code(&e) == Some(409) => Ok(cluster_name(crr)),
        Err(e) => Err(e),
    }
}

/// The token Secret kube-controller-manager fills in for ServiceAccount `sa`.
pub fn desired_token_secret(sa: &str, labels: &BTreeMap<String, String>) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(sa.to_string()),
            annotations: Some(BTreeMap::from([(
                "kubernetes.io/service-account.name".into(),
                sa.to_string(),
            )])),
            labels: Some(labels.clone()),
            ..Default::default()
        },
        type_: Some("kubernetes.io/service-account-token".into()),
        ..Default::default()
    }
}

/// The cluster's ServiceAccount (the one labelled with its id, else a new one) and its token
/// Secret; the ServiceAccount's name.
async fn ensure_service_account(
    client: &Client,
    id: &str,
    namespace: &str,
    labels: &BTreeMap<String, String>,
) -> Result<String, (&'static str, kube::Error)> {
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
    let found = sas
        .list(&selector(id))
        .await
        .map_err(|e| ("listing ServiceAccounts", e))?
        .items
        .into_iter()
        .next();
    let sa_name = match found {
        Some(sa) => sa.name_any(),
        None => {
            let sa = ServiceAccount {
                metadata: ObjectMeta {
                    generate_name: Some("clusternet-".into()),
                    labels: Some(labels.clone()),
                    ..Default::default()
                },
                ..Default::default()
            };
            sas.create(&PostParams::default(), &sa)
                .await
                .map_err(|e| ("creating the ServiceAccount", e))?
                .name_any()
        }
    };
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let existing = secrets
        .get_opt(&sa_name)
        .await
        .map_err(|e| ("reading the token Secret", e))?;
    if existing.is_none() {
        match secrets
            .create(
                &PostParams::default(),
                &desired_token_secret(&sa_name, labels),
            )
            .await
        {
            Ok(_) => {}
            Err(e) if api_code(&e) == Some(409) => {}
            Err(e) => return Err(("creating the token Secret", e)),
        }
    }
    Ok(sa_name)
}

/// The RBAC of one cluster (registration.md §4 steps 6-7).
pub struct Rbac {
    pub cluster_role: ClusterRole,
    pub cluster_role_binding: ClusterRoleBinding,
    pub role: Role,
    pub role_binding: RoleBinding,
}

/// The metadata of the RBAC objects made for cluster `id`: our labels, and auto-update on.
fn rbac_meta(id: &str, name: &str, ns: Option<&str>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_string()),
        namespace: ns.map(str::to_string),
        labels: Some(BTreeMap::from([
            (
                known::CLUSTER_BOOTSTRAPPING_LABEL.to_string(),
                known::RBAC_DEFAULTS.to_string(),
            ),
            (
                known::OBJECT_CREATED_BY_LABEL.to_string(),
                known::CLUSTERNET_CONTROLLER_MANAGER_NAME.to_string(),
            ),
            (known::CLUSTER_ID_LABEL.to_string(), id.to_string()),
        ])),
        annotations: Some(BTreeMap::from([(
            known::AUTO_UPDATE_ANNOTATION.to_string(),
            "true".to_string(),
        )])),
        ..Default::default()
    }
}

fn policy_rule(
    groups: &[&str],
    resources: &[&str],
    verbs: &[&str],
    names: Option<Vec<String>>,
) -> PolicyRule {
    PolicyRule {
        api_groups: Some(groups.iter().map(|s| s.to_string()).collect()),
        resources: Some(resources.iter().map(|s| s.to_string()).collect()),
        verbs: verbs.iter().map(|s| s.to_string()).collect(),
        resource_names: names,
        non_resource_urls: None,
    }
}

/// What the cluster's ServiceAccount `sa` in `ns` may do: create and read its registration
/// request, use its own socket (SocketConnection gate), and anything in its dedicated namespace.
pub fn desired_rbac(id: &str, sa: &str, ns: &str, socket_gate: bool) -> Rbac {
    let rbac_meta = |n: &str, ns: Option<&str>| rbac_meta(id, n, ns);
    let mut cluster_rules = vec![policy_rule(
        &["clusters.clusternet.io"],
        &["clusterregistrationrequests"],
        &["create", "get"],
        None,
    )];
    // Upstream also grants cluster-wide `get` on Secrets (for Helm pull secrets); that lets one
    // cluster read every other cluster's credentials, so it is left out here.
    if socket_gate {
        cluster_rules.push(policy_rule(
            &["proxies.clusternet.io"],
            &["sockets"],
            &["*"],
            Some(vec![id.to_string()]),
        ));
    }
    let subject = Subject {
        kind: "ServiceAccount".into(),
        name: sa.to_string(),
        namespace: Some(ns.to_string()),
        api_group: None,
    };
    let cr_name = known::cluster_role_name(id);
    let role_ref = |kind: &str, name: &str| RoleRef {
        api_group: Some("rbac.authorization.k8s.io".into()),
        kind: kind.into(),
        name: name.into(),
    };
    Rbac {
        cluster_role: ClusterRole {
            metadata: rbac_meta(&cr_name, None),
            rules: Some(cluster_rules),
            aggregation_rule: None,
        },
        cluster_role_binding: ClusterRoleBinding {
            metadata: rbac_meta(&cr_name, None),
            role_ref: role_ref("ClusterRole", &cr_name),
            subjects: Some(vec![subject.clone()]),
        },
        role: Role {
            metadata: rbac_meta(known::MANAGED_CLUSTER_ROLE, Some(ns)),
            rules: Some(vec![policy_rule(&["*"], &["*"], &["*"], None)]),
        },
        role_binding: RoleBinding {
            metadata: rbac_meta(known::MANAGED_CLUSTER_ROLE, Some(ns)),
            role_ref: role_ref("Role", known::MANAGED_CLUSTER_ROLE),
            subjects: Some(vec![subject]),
        },
    }
}

async fn ensure_rbac(
    client: &Client,
    ns: &str,
    rbac: Rbac,
) -> Result<(), (&'static str, kube::Error)> {
    ensure(Api::all(client.clone()), rbac.cluster_role)
        .await
        .map_err(|e| ("ensuring the ClusterRole", e))?;
    ensure(Api::all(client.clone()), rbac.cluster_role_binding)
        .await
        .map_err(|e| ("ensuring the ClusterRoleBinding", e))?;
    ensure(Api::namespaced(client.clone(), ns), rbac.role)
        .await
        .map_err(|e| ("ensuring the Role", e))?;
    ensure(Api::namespaced(client.clone(), ns), rbac.role_binding)
        .await
        .map_err(|e| ("ensuring the RoleBinding", e))
}

/// The token and CA of Secret `name`, waiting up to 5 s for kube-controller-manager to fill them in.
async fn issued_token(
    secrets: &Api<Secret>,
    name: &str,
) -> Result<Option<(ByteString, ByteString)>, kube::Error> {
    for _ in 0..20 {
        let data = secrets
            .get_opt(name)
            .await?
            .and_then(|s| s.data)
            .unwrap_or_default();
        if let (Some(t), Some(ca)) = (data.get("token"), data.get("ca.crt"))
            && !t.0.is_empty()
            && !ca.0.is_empty()
        {
            return Ok(Some((t.clone(), ca.clone())));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Ok(None)
}

/// The field manager of registration requests' status.
pub const FIELD_MANAGER: &str = "clusternet/controller/crrapprover";

/// Writes a request's status by server-side apply (the whole status: every field of it is ours),
/// unless it already says exactly that.
pub async fn write_status(
    client: &Client,
    crr: &ClusterRegistrationRequest,
    status: ClusterRegistrationRequestStatus,
) -> Result<(), kube::Error> {
    if crr.status.as_ref() == Some(&status) {
        return Ok(());
    }
    let api: Api<ClusterRegistrationRequest> = Api::all(client.clone());
    let body = crate::runtime::apply::status_body(crr, serde_json::json!(status));
    crate::runtime::apply::apply_status(&api, FIELD_MANAGER, &crr.name_any(), &body)
        .await
        .map(|_| ())
}

/// Upstream's "ensure" for RBAC: create; if it exists, overwrite only objects annotated
/// `clusternet.io/autoupdate: "true"` (someone else's object is left alone).
async fn ensure<K>(api: Api<K>, obj: K) -> Result<(), kube::Error>
where
    K: Resource + Clone + Serialize + DeserializeOwned + std::fmt::Debug,
{
    let name = obj.meta().name.clone().unwrap_or_default();
    match api.create(&PostParams::default(), &obj).await {
        Ok(_) => Ok(()),
        Err(e) if api_code(&e) == Some(409) => {
            let existing = api.get(&name).await?;
            if existing
                .meta()
                .annotations
                .as_ref()
                .and_then(|a| a.get(known::AUTO_UPDATE_ANNOTATION))
                .map(String::as_str)
                != Some("true")
            {
                return Ok(());
            }
            let mut updated = obj;
            updated.meta_mut().resource_version = existing.meta().resource_version.clone();
            api.replace(&name, &PostParams::default(), &updated)
                .await
                .map(|_| ())
        }
        Err(e) => Err(e),
    }
}

/// The request of a cluster, as the lifecycle controller needs it when the cluster is deleted.
pub fn denied_after_deletion(cluster: &str) -> ClusterRegistrationRequestStatus {
    ClusterRegistrationRequestStatus {
        result: Some(ApprovedResult::Denied),
        error_message: format!(
            "ManagedCluster {cluster} was deleted in the parent; delete this ClusterRegistrationRequest to let the cluster register again"
        ),
        token: None::<ByteString>,
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn crr(name: &str, status: serde_json::Value) -> ClusterRegistrationRequest {
        serde_json::from_value(json!({
            "apiVersion": "clusters.clusternet.io/v1beta1", "kind": "ClusterRegistrationRequest",
            "metadata": {"name": name, "labels": {known::CLUSTER_NAME_LABEL: "from-label"}},
            "spec": {"clusterId": "abc", "clusterLabels": {"env": "dev"}},
            "status": status
        }))
        .expect("a ClusterRegistrationRequest")
    }

    #[test]
    fn requests_are_denied_approved_or_verified_by_name_and_result() {
        let Admission::Deny(denied) = admission(&crr("wrong", json!({}))) else {
            panic!("a misnamed request is denied");
        };
        assert_eq!(denied.result, Some(ApprovedResult::Denied));
        assert!(
            denied
                .error_message
                .contains("clusternet-<spec.clusterId> (abc)")
        );
        // denied once: not written again
        assert_eq!(
            admission(&crr("wrong", json!({"result": "Denied"}))),
            Admission::Done
        );
        assert_eq!(
            admission(&crr("clusternet-abc", json!({}))),
            Admission::Approve
        );
        assert_eq!(
            admission(&crr("clusternet-abc", json!({"result": "Approved"}))),
            Admission::Verify
        );
        assert_eq!(
            admission(&crr("clusternet-abc", json!({"result": "Denied"}))),
            Admission::Done
        );
    }

    #[test]
    fn credentials_hold_while_the_issued_token_is_the_current_one() {
        let status = ClusterRegistrationRequestStatus {
            token: Some(ByteString(b"t1".to_vec())),
            ..Default::default()
        };
        let t1 = ByteString(b"t1".to_vec());
        let t2 = ByteString(b"t2".to_vec());
        assert!(credentials_hold(&status, Some(&t1), true));
        assert!(!credentials_hold(&status, Some(&t2), true));
        assert!(!credentials_hold(&status, None, true));
        // the namespace is gone (cluster deleted): nothing to reissue
        assert!(credentials_hold(&status, None, false));
    }

    #[test]
    fn what_a_new_registration_creates() {
        let r = crr("clusternet-abc", json!({}));
        assert_eq!(cluster_name(&r), "from-label");
        let labels = labels_for("abc", &cluster_name(&r));
        let ns = desired_namespace(&r, &labels);
        assert_eq!(ns.metadata.generate_name.as_deref(), Some("clusternet-"));
        let mc = desired_cluster(&r, "clusternet-x", &labels, true);
        assert_eq!(mc.name_any(), "from-label");
        assert_eq!(mc.spec.sync_mode, ClusterSyncMode::Pull);
        assert_eq!(mc.labels().get("env").map(String::as_str), Some("dev"));
        assert_eq!(mc.finalizers(), [known::APP_FINALIZER]);
        assert_eq!(mc.spec.taints[0].key, known::TAINT_CLUSTER_INITIALIZATION);
        assert!(
            desired_cluster(&r, "clusternet-x", &labels, false)
                .spec
                .taints
                .is_empty()
        );
        let secret = desired_token_secret("sa-1", &labels);
        assert_eq!(
            secret.type_.as_deref(),
            Some("kubernetes.io/service-account-token")
        );
        let rbac = desired_rbac("abc", "sa-1", "clusternet-x", true);
        let rules = rbac.cluster_role.rules.unwrap_or_default();
        assert_eq!(rules.len(), 2);
        assert_eq!(rules[1].resource_names, Some(vec!["abc".to_string()]));
        assert_eq!(
            desired_rbac("abc", "sa-1", "clusternet-x", false)
                .cluster_role
                .rules
                .map(|r| r.len()),
            Some(1)
        );
        let subject = &rbac.role_binding.subjects.unwrap_or_default()[0];
        assert_eq!(
            (subject.name.as_str(), subject.namespace.as_deref()),
            ("sa-1", Some("clusternet-x"))
        );
        assert_eq!(
            rbac.role.metadata.namespace.as_deref(),
            Some("clusternet-x")
        );
    }
}
