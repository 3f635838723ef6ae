//! The child's deployer credentials handed to the parent (docs/spec/registration.md §6): the
//! token of the child's `clusternet-app-deployer` ServiceAccount, stored as Secret
//! `child-cluster-deployer` in the cluster's dedicated namespace, so the parent can deploy in
//! Push/Dual mode and prune in every mode.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::{Api, ObjectMeta, PostParams};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::registration::Registration;
use crate::apis::known;
use crate::runtime::Runtime;
use crate::runtime::controller::ApiFailure;

#[derive(Debug, thiserror::Error)]
pub enum CredentialsError {
    #[error(
        "Secret {namespace}/{name} in the child has no token yet (is kube-controller-manager running?)"
    )]
    NoToken { namespace: String, name: String },
    #[error(
        "Secret {namespace}/{name} is missing in the child: create ServiceAccount clusternet-app-deployer and its token Secret (deploy/overlays/child)"
    )]
    Missing { namespace: String, name: String },
    #[error(
        "Secret child-cluster-deployer in the parent exists without the autoupdate annotation; not overwriting it"
    )]
    NotOurs,
    #[error(transparent)]
    Api(#[from] ApiFailure),
}

pub async fn publish_until_done(rt: &Runtime, reg: &Registration, stop: &CancellationToken) {
    let mut warned = false;
    loop {
        match publish(rt, reg).await {
            Ok(()) => {
                info!(namespace = %reg.namespace, "published the child deployer credentials");
                return;
            }
            Err(e) => {
                if !warned {
                    warn!(error = %e, "cannot publish the child deployer credentials yet; retrying every 5s");
                    warned = true;
                }
            }
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_secs(5)) => {}
        }
    }
}

/// The Secret the parent gets (`child-cluster-deployer` in the cluster's namespace) from the
/// child's deployer ServiceAccount Secret `source` (in `ns`): its token and CA, the account's
/// name and uid, and the child's API server URL.
fn deployer_secret(
    source: &Secret,
    ns: &str,
    reg: &Registration,
    cluster_url: &str,
) -> Result<Secret, CredentialsError> {
    let data = source.data.clone().unwrap_or_default();
    let (Some(token), Some(ca)) = (data.get("token").cloned(), data.get("ca.crt").cloned()) else {
        return Err(CredentialsError::NoToken {
            namespace: ns.to_string(),
            name: known::CLUSTERNET_APP_SA.into(),
        });
    };
    let ann = source.annotations();
    let get = |k: &str| ByteString(ann.get(k).cloned().unwrap_or_default().into_bytes());
    Ok(Secret {
        metadata: ObjectMeta {
            name: Some(known::CHILD_CLUSTER_SECRET_NAME.to_string()),
            namespace: Some(reg.namespace.clone()),
            labels: Some(BTreeMap::from([
                (
                    known::OBJECT_CREATED_BY_LABEL.to_string(),
                    known::CLUSTERNET_AGENT_NAME.to_string(),
                ),
                (known::CLUSTER_ID_LABEL.to_string(), reg.cluster_id.clone()),
                (
                    known::CLUSTER_BOOTSTRAPPING_LABEL.to_string(),
                    known::CREDENTIALS_AUTO.to_string(),
                ),
            ])),
            annotations: Some(BTreeMap::from([(
                known::AUTO_UPDATE_ANNOTATION.to_string(),
                "true".to_string(),
            )])),
            finalizers: Some(vec![known::APP_FINALIZER.to_string()]),
            ..Default::default()
        },
        data: Some(BTreeMap::from([
            ("ca.crt".to_string(), ca),
            ("token".to_string(), token),
            (
                known::SERVICE_ACCOUNT_NAME_KEY.to_string(),
                get("kubernetes.io/service-account.name"),
            ),
            (
                known::SERVICE_ACCOUNT_UID_KEY.to_string(),
                get("kubernetes.io/service-account.uid"),
            ),
            (
                known::CLUSTER_API_SERVER_URL_KEY.to_string(),
                ByteString(cluster_url.as_bytes().to_vec()),
            ),
        ])),
        ..Default::default()
    })
}

async fn publish(rt: &Runtime, reg: &Registration) -> Result<(), CredentialsError> {
    let ns = rt.config.system_namespace.clone();
    let child: Api<Secret> = Api::namespaced(rt.client.clone(), &ns);
    let source = child
        .get_opt(known::CLUSTERNET_APP_SA)
        .await
        .map_err(ApiFailure::of(
            "Secret clusternet-app-deployer (child)".to_string(),
            "reading the child deployer Secret",
        ))?
        .ok_or_else(|| CredentialsError::Missing {
            namespace: ns.clone(),
            name: known::CLUSTERNET_APP_SA.into(),
        })?;
    let secret = deployer_secret(&source, &ns, reg, &rt.cluster_url)?;
    let parent: Api<Secret> = Api::namespaced(reg.parent.clone(), &reg.namespace);
    match parent
        .get_opt(known::CHILD_CLUSTER_SECRET_NAME)
        .await
        .map_err(ApiFailure::of(
            "Secret child-cluster-deployer (parent)".to_string(),
            "reading child-cluster-deployer in the parent",
        ))? {
        None => {
            parent
                .create(&PostParams::default(), &secret)
                .await
                .map_err(ApiFailure::of(
                    "Secret child-cluster-deployer (parent)".to_string(),
                    "creating child-cluster-deployer in the parent",
                ))?;
        }
        Some(existing) => {
            if existing
                .annotations()
                .get(known::AUTO_UPDATE_ANNOTATION)
                .map(String::as_str)
                != Some("true")
            {
                return Err(CredentialsError::NotOurs);
            }
            if existing.data == secret.data {
                return Ok(());
            }
            let mut updated = secret;
            updated.metadata.resource_version = existing.resource_version();
            parent
                .replace(
                    known::CHILD_CLUSTER_SECRET_NAME,
                    &PostParams::default(),
                    &updated,
                )
                .await
                .map_err(ApiFailure::of(
                    "Secret child-cluster-deployer (parent)".to_string(),
                    "updating child-cluster-deployer in the parent",
                ))?;
        }
    }
    Ok(())
}
