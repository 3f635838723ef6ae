//! Registration approval (`crrapprover`, docs/spec/registration.md §4): for each
//! ClusterRegistrationRequest, the dedicated namespace, the ManagedCluster, a ServiceAccount with a
//! token Secret, RBAC scoped to that namespace, and the token and CA written into the request's
//! status. Idempotent: every object is looked up by the cluster-id label first, so retries,
//! restarts and a new request for a known cluster reuse what exists. Unlike upstream, an approved
//! request whose token no longer exists gets a fresh one (revoked credentials recover).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Namespace, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use kube::api::{Api, ListParams, ObjectMeta, PostParams};
use kube::runtime::controller::Action;
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
use crate::runtime::{Runtime, api_code};

#[derive(Debug, thiserror::Error)]
pub enum ApproveError {
    #[error("ClusterRegistrationRequest {crr}: {what}: {source}")]
    Api {
        crr: String,
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error(
        "ClusterRegistrationRequest {crr}: the token of ServiceAccount {namespace}/{sa} is not issued yet"
    )]
    TokenPending {
        crr: String,
        namespace: String,
        sa: String,
    },
}

pub async fn run(rt: Runtime, stop: CancellationToken) {
    let shared = rt.cache.watch::<ClusterRegistrationRequest>();
    let clusters = rt.cache.watch::<ManagedCluster>();
    // an empty cache that has not listed yet would look like "no ManagedCluster"
    if !clusters.ready().await {
        return;
    }
    let ctx = Arc::new((rt, clusters.store.clone()));
    crate::runtime::controller::run("crrapprover", shared, 4, stop, move |crr| {
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

pub async fn reconcile(
    rt: &Runtime,
    clusters: &Store<ManagedCluster>,
    crr: &ClusterRegistrationRequest,
) -> Result<Action, ApproveError> {
    let client = rt.client.clone();
    let name = crr.name_any();
    let err = |what: &str| {
        let (crr, what) = (name.clone(), what.to_string());
        move |source| ApproveError::Api { crr, what, source }
    };
    let id = crr.spec.cluster_id.clone();
    let status = crr.status.clone().unwrap_or_default();

    // 1. the name must be clusternet-<spec.clusterId>
    if name.strip_prefix("clusternet-") != Some(id.as_str()) {
        if status.result.is_none() {
            let denied = ClusterRegistrationRequestStatus {
                result: Some(ApprovedResult::Denied),
                error_message: format!(
                    "ClusterRegistrationRequest name {name:?} is not clusternet-<spec.clusterId> ({id})"
                ),
                ..Default::default()
            };
            write_status(&client, crr, denied)
                .await
                .map_err(err("writing the Denied status"))?;
        }
        return Ok(Action::await_change());
    }
    match status.result {
        None => {}
        Some(ApprovedResult::Approved) => {
            // credentials still valid? (a deleted token Secret means revoked: issue a new one)
            let secrets: Api<Secret> = Api::namespaced(client.clone(), &status.dedicated_namespace);
            let sas: Api<ServiceAccount> =
                Api::namespaced(client.clone(), &status.dedicated_namespace);
            let sa = sas
                .list(&selector(&id))
                .await
                .map_err(err("listing ServiceAccounts"))?
                .items
                .into_iter()
                .next();
            let current = match &sa {
                Some(sa) => secrets
                    .get_opt(&sa.name_any())
                    .await
                    .map_err(err("reading the token Secret"))?,
                None => None,
            };
            let token_now = current
                .and_then(|s| s.data)
                .and_then(|d| d.get("token").cloned());
            let ns_exists = Api::<Namespace>::all(client.clone())
                .get_opt(&status.dedicated_namespace)
                .await
                .map_err(err("reading the dedicated namespace"))?
                .is_some_and(|n| n.metadata.deletion_timestamp.is_none());
            if token_now.is_some() && token_now == status.token || !ns_exists {
                return Ok(Action::requeue(Duration::from_secs(300)));
            }
            info!(request = %name, "the issued token is gone: issuing new credentials");
        }
        Some(_) => return Ok(Action::await_change()),
    }

    let cluster_name = if crr.spec.cluster_name.is_empty() {
        crr.labels()
            .get(known::CLUSTER_NAME_LABEL)
            .cloned()
            .unwrap_or_else(|| name.clone())
    } else {
        crr.spec.cluster_name.clone()
    };
    let labels = labels_for(&id, &cluster_name);

    // 3. the dedicated namespace
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let existing_ns = namespaces
        .list(&selector(&id))
        .await
        .map_err(err("listing namespaces"))?
        .items;
    let ns_name = match existing_ns
        .into_iter()
        .find(|n| n.metadata.deletion_timestamp.is_none())
    {
        Some(ns) => ns.name_any(),
        None => {
            let mut meta = ObjectMeta {
                labels: Some(labels.clone()),
                ..Default::default()
            };
            if crr.spec.cluster_namespace.is_empty() {
                meta.generate_name = Some("clusternet-".into());
            } else {
                meta.name = Some(crr.spec.cluster_namespace.clone());
            }
            let created = namespaces
                .create(
                    &PostParams::default(),
                    &Namespace {
                        metadata: meta,
                        ..Default::default()
                    },
                )
                .await
                .map_err(err("creating the dedicated namespace"))?;
            info!(request = %name, namespace = %created.name_any(), "created the dedicated namespace");
            created.name_any()
        }
    };

    // 4. the ManagedCluster
    // from the cache: one it has not seen yet is created again and that create's AlreadyExists
    // taken as the answer, as for a concurrent registration
    let mc_name = match clusters.find(|mc| {
        let l = mc.labels();
        l.get(known::OBJECT_CREATED_BY_LABEL).map(String::as_str)
            == Some(known::CLUSTERNET_AGENT_NAME)
            && l.get(known::CLUSTER_ID_LABEL) == Some(&id)
    }) {
        Some(mc) => mc.name_any(),
        None => {
            let mut mc_labels = labels.clone();
            mc_labels.extend(crr.spec.cluster_labels.clone());
            let mut taints = Vec::new();
            if rt.config.gate(known::CLUSTER_INIT) {
                taints.push(k8s_openapi::api::core::v1::Taint {
                    key: known::TAINT_CLUSTER_INITIALIZATION.into(),
                    value: Some(crate::apis::clusters::REASON_CLUSTER_INIT_WAITING.into()),
                    effect: known::TAINT_EFFECT_NO_SCHEDULE.into(),
                    time_added: None,
                });
            }
            let mc = ManagedCluster {
                metadata: ObjectMeta {
                    name: Some(cluster_name.clone()),
                    namespace: Some(ns_name.clone()),
                    labels: Some(mc_labels),
                    // lets the lifecycle controller clean up the namespace, RBAC and request on deletion
                    finalizers: Some(vec![known::APP_FINALIZER.to_string()]),
                    ..Default::default()
                },
                spec: ManagedClusterSpec {
                    cluster_id: id.clone(),
                    cluster_type: crr.spec.cluster_type.clone(),
                    cluster_init_base_name: None,
                    sync_mode: crr.spec.sync_mode.unwrap_or(ClusterSyncMode::Pull),
                    taints,
                },
                status: None,
            };
            let api: Api<ManagedCluster> = Api::namespaced(client.clone(), &ns_name);
            match api.create(&PostParams::default(), &mc).await {
                Ok(c) => c.name_any(),
                Err(e) if api_code(&e) == Some(409) => cluster_name.clone(),
                Err(e) => return Err(err("creating the ManagedCluster")(e)),
            }
        }
    };

    // 5. the ServiceAccount and its token Secret
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), &ns_name);
    let sa_name = match sas
        .list(&selector(&id))
        .await
        .map_err(err("listing ServiceAccounts"))?
        .items
        .into_iter()
        .next()
    {
        Some(sa) => sa.name_any(),
        None => sas
            .create(
                &PostParams::default(),
                &ServiceAccount {
                    metadata: ObjectMeta {
                        generate_name: Some("clusternet-".into()),
                        labels: Some(labels.clone()),
                        ..Default::default()
                    },
                    ..Default::default()
                },
            )
            .await
            .map_err(err("creating the ServiceAccount"))?
            .name_any(),
    };
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns_name);
    if secrets
        .get_opt(&sa_name)
        .await
        .map_err(err("reading the token Secret"))?
        .is_none()
    {
        let secret = Secret {
            metadata: ObjectMeta {
                name: Some(sa_name.clone()),
                annotations: Some(BTreeMap::from([(
                    "kubernetes.io/service-account.name".into(),
                    sa_name.clone(),
                )])),
                labels: Some(labels.clone()),
                ..Default::default()
            },
            type_: Some("kubernetes.io/service-account-token".into()),
            ..Default::default()
        };
        match secrets.create(&PostParams::default(), &secret).await {
            Ok(_) => {}
            Err(e) if api_code(&e) == Some(409) => {}
            Err(e) => return Err(err("creating the token Secret")(e)),
        }
    }

    // 6-7. RBAC scoped to this cluster
    let rbac_labels = BTreeMap::from([
        (
            known::CLUSTER_BOOTSTRAPPING_LABEL.to_string(),
            known::RBAC_DEFAULTS.to_string(),
        ),
        (
            known::OBJECT_CREATED_BY_LABEL.to_string(),
            known::CLUSTERNET_CONTROLLER_MANAGER_NAME.to_string(),
        ),
        (known::CLUSTER_ID_LABEL.to_string(), id.clone()),
    ]);
    let rbac_meta = |n: &str, ns: Option<&str>| ObjectMeta {
        name: Some(n.to_string()),
        namespace: ns.map(str::to_string),
        labels: Some(rbac_labels.clone()),
        annotations: Some(BTreeMap::from([(
            known::AUTO_UPDATE_ANNOTATION.to_string(),
            "true".to_string(),
        )])),
        ..Default::default()
    };
    let rule = |groups: &[&str], resources: &[&str], verbs: &[&str], names: Option<Vec<String>>| {
        PolicyRule {
            api_groups: Some(groups.iter().map(|s| s.to_string()).collect()),
            resources: Some(resources.iter().map(|s| s.to_string()).collect()),
            verbs: verbs.iter().map(|s| s.to_string()).collect(),
            resource_names: names,
            non_resource_urls: None,
        }
    };
    let mut cluster_rules = vec![rule(
        &["clusters.clusternet.io"],
        &["clusterregistrationrequests"],
        &["create", "get"],
        None,
    )];
    // Upstream also grants cluster-wide `get` on Secrets (for Helm pull secrets); that lets one
    // cluster read every other cluster's credentials, so it is left out here.
    if rt.config.gate(known::SOCKET_CONNECTION) {
        cluster_rules.push(rule(
            &["proxies.clusternet.io"],
            &["sockets"],
            &["*"],
            Some(vec![id.clone()]),
        ));
    }
    let subject = Subject {
        kind: "ServiceAccount".into(),
        name: sa_name.clone(),
        namespace: Some(ns_name.clone()),
        api_group: None,
    };
    let cr_name = known::cluster_role_name(&id);
    ensure(
        Api::<ClusterRole>::all(client.clone()),
        ClusterRole {
            metadata: rbac_meta(&cr_name, None),
            rules: Some(cluster_rules),
            aggregation_rule: None,
        },
    )
    .await
    .map_err(err("ensuring the ClusterRole"))?;
    ensure(
        Api::<ClusterRoleBinding>::all(client.clone()),
        ClusterRoleBinding {
            metadata: rbac_meta(&cr_name, None),
            role_ref: RoleRef {
                api_group: Some("rbac.authorization.k8s.io".into()),
                kind: "ClusterRole".into(),
                name: cr_name.clone(),
            },
            subjects: Some(vec![subject.clone()]),
        },
    )
    .await
    .map_err(err("ensuring the ClusterRoleBinding"))?;
    ensure(
        Api::<Role>::namespaced(client.clone(), &ns_name),
        Role {
            metadata: rbac_meta(known::MANAGED_CLUSTER_ROLE, Some(&ns_name)),
            rules: Some(vec![rule(&["*"], &["*"], &["*"], None)]),
        },
    )
    .await
    .map_err(err("ensuring the Role"))?;
    ensure(
        Api::<RoleBinding>::namespaced(client.clone(), &ns_name),
        RoleBinding {
            metadata: rbac_meta(known::MANAGED_CLUSTER_ROLE, Some(&ns_name)),
            role_ref: RoleRef {
                api_group: Some("rbac.authorization.k8s.io".into()),
                kind: "Role".into(),
                name: known::MANAGED_CLUSTER_ROLE.into(),
            },
            subjects: Some(vec![subject]),
        },
    )
    .await
    .map_err(err("ensuring the RoleBinding"))?;

    // 8. the token, once kube-controller-manager has filled it in
    let mut issued = None;
    for _ in 0..20 {
        let s = secrets
            .get_opt(&sa_name)
            .await
            .map_err(err("reading the token Secret"))?;
        let data = s.and_then(|s| s.data).unwrap_or_default();
        if let (Some(t), Some(ca)) = (data.get("token"), data.get("ca.crt"))
            && !t.0.is_empty()
            && !ca.0.is_empty()
        {
            issued = Some((t.clone(), ca.clone()));
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let Some((token, ca)) = issued else {
        return Err(ApproveError::TokenPending {
            crr: name,
            namespace: ns_name,
            sa: sa_name,
        });
    };

    // 9. approve
    let approved = ClusterRegistrationRequestStatus {
        dedicated_namespace: ns_name.clone(),
        token: Some(token),
        ca_certificate: Some(ca),
        result: Some(ApprovedResult::Approved),
        error_message: String::new(),
        managed_cluster_name: mc_name,
    };
    write_status(&client, crr, approved)
        .await
        .map_err(err("writing the Approved status"))?;
    info!(request = %name, namespace = %ns_name, "approved the cluster registration");
    metrics::counter!("clusternet_registrations_approved_total").increment(1);
    Ok(Action::requeue(Duration::from_secs(300)))
}

/// Writes a request's status, retrying on conflicts with a fresh read (upstream silently drops a
/// conflicting write; here it really retries).
pub async fn write_status(
    client: &Client,
    crr: &ClusterRegistrationRequest,
    status: ClusterRegistrationRequestStatus,
) -> Result<(), kube::Error> {
    let api: Api<ClusterRegistrationRequest> = Api::all(client.clone());
    let name = crr.name_any();
    let mut current = crr.clone();
    for attempt in 0..5 {
        current.status = Some(status.clone());
        match api
            .replace_status(&name, &PostParams::default(), &current)
            .await
        {
            Ok(_) => return Ok(()),
            Err(e) if api_code(&e) == Some(409) && attempt < 4 => current = api.get(&name).await?,
            Err(e) => return Err(e),
        }
    }
    Ok(())
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
