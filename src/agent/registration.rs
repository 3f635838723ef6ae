//! The agent's side of registration (docs/spec/registration.md §2-§3, §7): the cluster ID is the
//! UID of the agent's Lease, a `ClusterRegistrationRequest clusternet-<id>` is filed with the
//! bootstrap token, and once approved the dedicated credentials are stored in the child (Secret
//! `parent-cluster`) and used from then on. Stored credentials are reused across restarts; when
//! the parent stops accepting them the agent falls back to the bootstrap token.
//!
//! Rotation: upstream's agent reads `parent-cluster` once, when it starts leading
//! (`registerSelfCluster` in pkg/agent/agent.go), and keeps that client for the life of the
//! process, so rotated or revoked credentials need a restart there. Here the heartbeat ends the
//! round on a 401/403 and the agent registers again (stored credentials first, then the bootstrap
//! token), and a change of the stored Secret ends the round as well
//! ([`stored_credentials_changed`]): credentials an operator puts there (say the parent's reissued
//! token, after the bootstrap token has expired) are used within seconds, without a restart,
//! once the parent accepts them (a mistaken edit leaves the working ones in use).

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::{Client, ResourceExt};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::apis::known;
use crate::apis::{
    ApprovedResult, ClusterRegistrationRequest, ClusterRegistrationRequestSpec, ClusterSyncMode,
    ClusterType,
};
use crate::kube_ext;
use crate::runtime::{self, Runtime, api_code};

/// What a successful registration yields.
#[derive(Clone)]
pub struct Registration {
    pub cluster_id: String,
    pub cluster_name: String,
    /// The dedicated namespace in the parent.
    pub namespace: String,
    /// A client for the parent with the dedicated credentials.
    pub parent: Client,
    /// The parent's URL and the dedicated token behind `parent` (the tunnel dials with them).
    pub parent_url: String,
    pub token: String,
    /// The parent's CA certificate (PEM) `parent` verifies the parent with.
    pub ca: Vec<u8>,
}

/// The `certificate` label of the parent's CA, as the agent holds it, in
/// `clusternet_certificate_expiration_timestamp_seconds`. The agent authenticates with a bearer
/// token and holds no client certificate of its own; the CA is the certificate whose expiry
/// breaks it.
pub const PARENT_CA_CERT: &str = "agent-parent-ca";

#[derive(Debug, thiserror::Error)]
pub enum RegistrationError {
    #[error("--cluster-reg-parent-url is required")]
    NoParentUrl,
    #[error(
        "--cluster-reg-token is not a bootstrap token (<6 chars>.<16 chars>, lower case) or a service-account token (JWT)"
    )]
    BadTokenFormat,
    #[error(
        "--cluster-reg-name {0:?} is invalid: at most 60 lower-case alphanumerics or '-', starting and ending with an alphanumeric"
    )]
    BadClusterName(String),
    #[error(
        "the parent at {url} rejected the bootstrap token (401 Unauthorized): it is wrong, expired or was deleted"
    )]
    TokenRejected { url: String },
    #[error(
        "the bootstrap token is valid but may not create ClusterRegistrationRequests (403): bind the ClusterRole clusternet:system:bootstrapping to its group"
    )]
    TokenForbidden,
    #[error("ClusterRegistrationRequest {name} was denied: {message}")]
    Denied { name: String, message: String },
    #[error("ClusterRegistrationRequest {name} failed in the parent: {message}")]
    Failed { name: String, message: String },
    #[error("ClusterRegistrationRequest {0} is not approved yet")]
    Pending(String),
    #[error("the approval of {0} carries no token or CA certificate")]
    IncompleteApproval(String),
    #[error("parent {what}: {source}")]
    Parent {
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error("child {what}: {source}")]
    Child {
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error("parent client: {0}")]
    Client(#[from] runtime::TokenClientError),
}

impl RegistrationError {
    fn parent(what: impl Into<String>) -> impl FnOnce(kube::Error) -> Self {
        let what = what.into();
        move |source| RegistrationError::Parent { what, source }
    }
    fn child(what: impl Into<String>) -> impl FnOnce(kube::Error) -> Self {
        let what = what.into();
        move |source| RegistrationError::Child { what, source }
    }
}

/// Upstream's accepted token shapes: a bootstrap token, or anything JWT-like (unanchored).
pub fn valid_token_format(token: &str) -> bool {
    let bootstrap = token.len() == 23
        && token.as_bytes()[6] == b'.'
        && token
            .chars()
            .enumerate()
            .all(|(i, c)| i == 6 || c.is_ascii_lowercase() || c.is_ascii_digit());
    let jwt_part = |s: &str| {
        s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    };
    let parts: Vec<&str> = token.split('.').collect();
    let jwt = parts.len() >= 3 && parts.iter().all(|p| jwt_part(p));
    bootstrap || jwt
}

pub fn valid_cluster_name(name: &str) -> bool {
    let b = name.as_bytes();
    !name.is_empty()
        && name.len() <= 60
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// The cluster ID: the UID of the agent's Lease, or its `legacy-cluster-id` annotation.
pub async fn cluster_id(rt: &Runtime, lease_uid: &str) -> Result<String, kube::Error> {
    let leases: Api<Lease> = Api::namespaced(
        rt.client.clone(),
        &rt.config.leader_elect_resource_namespace,
    );
    let lease = leases
        .get(rt.config.lease_name(crate::config::Role::Agent))
        .await?;
    if let Some(legacy) = lease.annotations().get(known::LEGACY_CLUSTER_ID_ANNOTATION)
        && !legacy.is_empty()
    {
        return Ok(legacy.clone());
    }
    Ok(lease.uid().unwrap_or_else(|| lease_uid.to_string()))
}

/// Checks the agent's registration settings before anything is sent anywhere.
pub fn check_settings(rt: &Runtime) -> Result<(), RegistrationError> {
    let c = &rt.config;
    c.cluster_reg_parent_url
        .as_deref()
        .filter(|u| !u.is_empty())
        .ok_or(RegistrationError::NoParentUrl)?;
    let token = c.cluster_reg_token.as_deref().unwrap_or_default();
    if !valid_token_format(token) {
        return Err(RegistrationError::BadTokenFormat);
    }
    if let Some(name) = c
        .cluster_reg_name
        .as_deref()
        .map(str::trim)
        .filter(|n| !n.is_empty())
        && !valid_cluster_name(name)
    {
        return Err(RegistrationError::BadClusterName(name.to_string()));
    }
    Ok(())
}

/// Registers (or confirms an earlier registration), retrying until it succeeds or `stop` fires.
/// Errors are logged with what to do about them; a denied or rejected cluster keeps retrying slowly.
/// `rejected`: the token the parent rejected in the round before, if it did; stored credentials
/// carrying it are not tried again (they can still read the request, say, while they are another
/// registration's and forbidden everywhere else).
pub async fn register(
    rt: &Runtime,
    cluster_id: &str,
    rejected: Option<&str>,
    stop: &CancellationToken,
) -> Option<Registration> {
    let mut attempt_no: u32 = 0;
    loop {
        attempt_no += 1;
        let result = attempt(rt, cluster_id, rejected).await;
        let wait = match result {
            Ok(reg) => {
                info!(cluster_id, cluster = %reg.cluster_name, namespace = %reg.namespace, "registered with the parent");
                metrics::counter!("clusternet_agent_registrations_total", "outcome" => "approved")
                    .increment(1);
                return Some(reg);
            }
            Err(RegistrationError::Pending(name)) => {
                if attempt_no % 10 == 1 {
                    info!(request = %name, "waiting for the parent to approve the registration");
                }
                Duration::from_secs(1)
            }
            Err(
                e @ (RegistrationError::TokenRejected { .. }
                | RegistrationError::TokenForbidden
                | RegistrationError::Denied { .. }
                | RegistrationError::BadTokenFormat
                | RegistrationError::NoParentUrl
                | RegistrationError::BadClusterName(_)),
            ) => {
                // needs a human: say so clearly, retry slowly in case it gets fixed
                metrics::counter!("clusternet_agent_registrations_total", "outcome" => "rejected")
                    .increment(1);
                warn!(error = %e, "registration is not possible; retrying in 30s");
                Duration::from_secs(30)
            }
            Err(e) => {
                metrics::counter!("clusternet_agent_registrations_total", "outcome" => "error")
                    .increment(1);
                warn!(error = %e, "registration attempt failed; retrying in 5s");
                Duration::from_secs(5)
            }
        };
        tokio::select! {
            _ = stop.cancelled() => return None,
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

fn crr_name(cluster_id: &str) -> String {
    format!("clusternet-{cluster_id}")
}

async fn attempt(
    rt: &Runtime,
    cluster_id: &str,
    rejected: Option<&str>,
) -> Result<Registration, RegistrationError> {
    check_settings(rt)?;
    let url = rt.config.cluster_reg_parent_url.clone().unwrap_or_default();
    let name = crr_name(cluster_id);
    let secrets: Api<Secret> = Api::namespaced(rt.client.clone(), &rt.config.system_namespace);

    // 1. stored credentials from an earlier registration
    if let Some(stored) = secrets
        .get_opt(known::PARENT_CLUSTER_SECRET_NAME)
        .await
        .map_err(RegistrationError::child("reading Secret parent-cluster"))?
    {
        let data = stored.data.clone().unwrap_or_default();
        let get = |k: &str| data.get(k).map(|b| b.0.clone()).unwrap_or_default();
        let stored_url =
            String::from_utf8_lossy(&get(known::CLUSTER_API_SERVER_URL_KEY)).to_string();
        let token = String::from_utf8_lossy(&get("token")).to_string();
        if stored_url == url && rejected == Some(token.as_str()) {
            info!(
                "the parent rejected the stored credentials in the last round; registering again with the bootstrap token"
            );
        } else if stored_url == url {
            let ca = get("ca.crt");
            let client = runtime::token_client(&url, &token, Some(&ca))?;
            match Api::<ClusterRegistrationRequest>::all(client.clone())
                .get(&name)
                .await
            {
                Ok(crr) if approved(&crr) => {
                    // they work: keep them, even when the request carries others (an operator
                    // put these in the Secret; they are the ones just proven)
                    let proven = Credentials {
                        token: ByteString(token.into_bytes()),
                        ca: ByteString(ca),
                    };
                    return finish(rt, cluster_id, &url, crr, Some(proven), &secrets).await;
                }
                Ok(_) => info!(
                    "stored credentials work but the request is not approved; using the bootstrap token"
                ),
                Err(e) => match api_code(&e) {
                    Some(401 | 403) => {
                        warn!(
                            "the parent no longer accepts the stored credentials; registering again with the bootstrap token"
                        )
                    }
                    // the request was deleted in the parent (deliberately, to register again):
                    // file a new one, instead of asking for the missing one forever
                    Some(404) => {
                        warn!(request = %name, "the ClusterRegistrationRequest is gone from the parent; registering again with the bootstrap token")
                    }
                    _ => {
                        return Err(RegistrationError::Parent {
                            what: format!(
                                "reading ClusterRegistrationRequest {name} with stored credentials"
                            ),
                            source: e,
                        });
                    }
                },
            }
        } else {
            info!(stored = %stored_url, configured = %url, "the parent URL changed; registering again with the bootstrap token");
        }
    }

    // 2. the bootstrap token
    let token = rt.config.cluster_reg_token.clone().unwrap_or_default();
    let bootstrap = runtime::token_client(&url, &token, None)?;
    let crrs: Api<ClusterRegistrationRequest> = Api::all(bootstrap);
    let existing = match crrs.get_opt(&name).await {
        Ok(e) => e,
        Err(e) => return Err(bootstrap_error(&url, e, "reading")),
    };
    let crr = match existing {
        Some(crr) => crr,
        None => {
            let request = new_request(rt, cluster_id, &name);
            match crrs.create(&PostParams::default(), &request).await {
                Ok(created) => {
                    info!(request = %name, "filed a ClusterRegistrationRequest");
                    created
                }
                Err(e) if api_code(&e) == Some(409) => crrs
                    .get(&name)
                    .await
                    .map_err(|e| bootstrap_error(&url, e, "reading"))?,
                Err(e) => return Err(bootstrap_error(&url, e, "creating")),
            }
        }
    };
    match crr.status.as_ref().and_then(|s| s.result.clone()) {
        Some(ApprovedResult::Approved) => finish(rt, cluster_id, &url, crr, None, &secrets).await,
        Some(ApprovedResult::Denied) => Err(RegistrationError::Denied {
            name,
            message: crr.status.map(|s| s.error_message).unwrap_or_default(),
        }),
        Some(other) => Err(RegistrationError::Failed {
            name,
            message: format!(
                "{}: {}",
                other.as_str(),
                crr.status.map(|s| s.error_message).unwrap_or_default()
            ),
        }),
        None => Err(RegistrationError::Pending(name)),
    }
}

fn bootstrap_error(url: &str, e: kube::Error, verb: &str) -> RegistrationError {
    match api_code(&e) {
        Some(401) => RegistrationError::TokenRejected {
            url: url.to_string(),
        },
        Some(403) => RegistrationError::TokenForbidden,
        _ => RegistrationError::Parent {
            what: format!("{verb} the ClusterRegistrationRequest with the bootstrap token"),
            source: e,
        },
    }
}

fn approved(crr: &ClusterRegistrationRequest) -> bool {
    matches!(
        crr.status.as_ref().and_then(|s| s.result.as_ref()),
        Some(ApprovedResult::Approved)
    )
}

fn new_request(rt: &Runtime, cluster_id: &str, name: &str) -> ClusterRegistrationRequest {
    let c = &rt.config;
    let cluster_name = c
        .cluster_reg_name
        .as_deref()
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(str::to_string)
        .unwrap_or_else(|| {
            format!(
                "{}-{}",
                c.cluster_reg_name_prefix,
                kube_ext::random_suffix(5)
            )
        });
    let (cluster_labels, skipped) =
        kube_ext::parse_labels(c.cluster_labels.as_deref().unwrap_or_default());
    for s in skipped {
        warn!(entry = %s, "--cluster-labels entry is not of the form key=value; skipped");
    }
    let labels = BTreeMap::from([
        (
            known::CLUSTER_REGISTERED_BY_LABEL.to_string(),
            known::CLUSTERNET_AGENT_NAME.to_string(),
        ),
        (known::CLUSTER_ID_LABEL.to_string(), cluster_id.to_string()),
        (known::CLUSTER_NAME_LABEL.to_string(), cluster_name.clone()),
    ]);
    let sync_mode: Option<ClusterSyncMode> = c.cluster_sync_mode.parse().ok();
    ClusterRegistrationRequest {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            labels: Some(labels),
            ..Default::default()
        },
        spec: ClusterRegistrationRequestSpec {
            cluster_id: cluster_id.to_string(),
            cluster_type: Some(ClusterType::from(c.cluster_reg_type.as_str())),
            cluster_name,
            cluster_namespace: c.cluster_reg_namespace.clone().unwrap_or_default(),
            cluster_labels,
            sync_mode,
        },
        status: None,
    }
}

/// A token and the parent's CA (PEM).
struct Credentials {
    token: ByteString,
    ca: ByteString,
}

/// Steps 4-6: adopt the approved name, build the dedicated client, store the credentials: the
/// approval's, or `proven` ones (the stored credentials that just read the approved request).
async fn finish(
    rt: &Runtime,
    cluster_id: &str,
    url: &str,
    crr: ClusterRegistrationRequest,
    proven: Option<Credentials>,
    secrets: &Api<Secret>,
) -> Result<Registration, RegistrationError> {
    let name = crr.name_any();
    let status = crr.status.clone().unwrap_or_default();
    let (token, ca) = match proven {
        Some(c) => (c.token, c.ca),
        None => match (status.token.clone(), status.ca_certificate.clone()) {
            (Some(t), Some(ca)) => (t, ca),
            _ => return Err(RegistrationError::IncompleteApproval(name)),
        },
    };
    let cluster_name = crr
        .labels()
        .get(known::CLUSTER_NAME_LABEL)
        .cloned()
        .unwrap_or_else(|| crr.spec.cluster_name.clone());
    let token_text = String::from_utf8_lossy(&token.0).to_string();
    let parent = runtime::token_client(url, &token_text, Some(&ca.0))?;
    // prove the dedicated credentials work before relying on them
    Api::<ClusterRegistrationRequest>::all(parent.clone())
        .get(&name)
        .await
        .map_err(RegistrationError::parent(format!(
            "reading {name} with the dedicated credentials"
        )))?;
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(known::PARENT_CLUSTER_SECRET_NAME.to_string()),
            namespace: Some(rt.config.system_namespace.clone()),
            labels: Some(BTreeMap::from([
                (
                    known::CLUSTER_BOOTSTRAPPING_LABEL.to_string(),
                    known::CREDENTIALS_AUTO.to_string(),
                ),
                (known::CLUSTER_ID_LABEL.to_string(), cluster_id.to_string()),
                (known::CLUSTER_NAME_LABEL.to_string(), cluster_name.clone()),
            ])),
            ..Default::default()
        },
        data: Some(BTreeMap::from([
            ("ca.crt".to_string(), ca.clone()),
            ("token".to_string(), token),
            (
                "namespace".to_string(),
                ByteString(status.dedicated_namespace.clone().into_bytes()),
            ),
            (
                known::CLUSTER_API_SERVER_URL_KEY.to_string(),
                ByteString(url.as_bytes().to_vec()),
            ),
        ])),
        ..Default::default()
    };
    let written = match secrets
        .get_opt(known::PARENT_CLUSTER_SECRET_NAME)
        .await
        .map_err(RegistrationError::child("reading Secret parent-cluster"))?
    {
        Some(existing) if existing.data == secret.data && existing.labels() == secret.labels() => {
            None
        }
        Some(existing) => {
            let mut updated = secret.clone();
            updated.metadata.resource_version = existing.resource_version();
            Some(
                secrets
                    .replace(
                        known::PARENT_CLUSTER_SECRET_NAME,
                        &PostParams::default(),
                        &updated,
                    )
                    .await
                    .map_err(RegistrationError::child("updating Secret parent-cluster"))?,
            )
        }
        None => Some(
            secrets
                .create(&PostParams::default(), &secret)
                .await
                .map_err(RegistrationError::child("creating Secret parent-cluster"))?,
        ),
    };
    // the rotation watch must see this write, not the Secret as it was, or it would take the
    // agent's own write for a rotation
    if let Some(w) = written {
        stored_secret(rt).observe_write(w);
    }
    crate::runtime::certs::record_pem(PARENT_CA_CERT, &ca.0);
    Ok(Registration {
        cluster_id: cluster_id.to_string(),
        cluster_name,
        namespace: status.dedicated_namespace,
        parent,
        parent_url: url.to_string(),
        token: token_text,
        ca: ca.0,
    })
}

/// The shared watch of the stored credentials (Secret `parent-cluster`; selected by name, the
/// child's other Secrets are not cached).
fn stored_secret(rt: &Runtime) -> runtime::cache::Shared<Secret> {
    rt.cache
        .watch_named::<Secret>(known::PARENT_CLUSTER_SECRET_NAME)
}

/// Whether the stored credentials `data` hold a token or CA other than `token` and `ca` (the
/// ones in use).
/// A Secret without a token (being rewritten, emptied) is no reason to drop working
/// credentials.
fn rotated(data: &BTreeMap<String, ByteString>, token_now: &str, ca_now: &[u8]) -> bool {
    let get = |k: &str| data.get(k).map(|b| b.0.as_slice()).unwrap_or_default();
    let (token, ca) = (get("token"), get("ca.crt"));
    !token.is_empty() && (token != token_now.as_bytes() || !ca.is_empty() && ca != ca_now)
}

/// Completes when the stored credentials in the child change to a token or CA other than the
/// ones `reg` uses and the parent accepts them (rotated by someone else: the caller registers
/// again and so uses them); never completes otherwise. Credentials the parent refuses are
/// logged and the working ones stay in use: a mistaken edit of the Secret must not take a
/// working agent off the parent.
pub async fn stored_credentials_changed(rt: &Runtime, reg: &Registration) {
    use futures::StreamExt;
    let shared = stored_secret(rt);
    let mut changes = shared.subscribe();
    if shared.ready().await {
        let ns = rt.config.system_namespace.as_str();
        let mut refused: Option<BTreeMap<String, ByteString>> = None;
        loop {
            let stored = shared
                .store
                .state()
                .into_iter()
                .find(|s| s.namespace().as_deref() == Some(ns))
                .and_then(|s| s.data.clone());
            if let Some(data) = stored
                && rotated(&data, &reg.token, &reg.ca)
                && refused.as_ref() != Some(&data)
            {
                match accepted(reg, &data).await {
                    Ok(()) => {
                        info!(secret = %format!("{ns}/{}", known::PARENT_CLUSTER_SECRET_NAME), "the stored parent credentials changed; switching to them");
                        return;
                    }
                    Err(e) => {
                        warn!(secret = %format!("{ns}/{}", known::PARENT_CLUSTER_SECRET_NAME), error = %e, "the stored parent credentials changed but do not work; going on with the current ones");
                        refused = Some(data);
                    }
                }
            }
            if changes.next().await.is_none() {
                break;
            }
        }
    }
    // shutting down: the caller's stop ends the round
    std::future::pending::<()>().await
}

/// Whether the parent accepts the credentials in `data`: they read this cluster's request, as
/// registration would with them.
async fn accepted(
    reg: &Registration,
    data: &BTreeMap<String, ByteString>,
) -> Result<(), RegistrationError> {
    let get = |k: &str| data.get(k).map(|b| b.0.clone()).unwrap_or_default();
    let token = String::from_utf8_lossy(&get("token")).into_owned();
    let client = runtime::token_client(&reg.parent_url, &token, Some(&get("ca.crt")))?;
    let name = crr_name(&reg.cluster_id);
    Api::<ClusterRegistrationRequest>::all(client)
        .get(&name)
        .await
        .map(|_| ())
        .map_err(RegistrationError::parent(format!(
            "reading {name} with the stored credentials"
        )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_other_credentials_count_as_rotated() {
        let data = |token: &str, ca: &str| {
            BTreeMap::from([
                ("token".to_string(), ByteString(token.as_bytes().to_vec())),
                ("ca.crt".to_string(), ByteString(ca.as_bytes().to_vec())),
            ])
        };
        assert!(
            !rotated(&data("t1", "ca1"), "t1", b"ca1"),
            "what the agent wrote"
        );
        assert!(rotated(&data("t2", "ca1"), "t1", b"ca1"), "a new token");
        assert!(rotated(&data("t1", "ca2"), "t1", b"ca1"), "a new CA");
        assert!(
            !rotated(&data("", "ca2"), "t1", b"ca1"),
            "no token: keep what works"
        );
        assert!(!rotated(&BTreeMap::new(), "t1", b"ca1"));
    }

    #[test]
    fn token_formats_follow_upstream() {
        assert!(valid_token_format("07401b.f395accd246ae52d"));
        assert!(valid_token_format(
            "eyJhbGciOiJSUzI1NiJ9.eyJpc3MiOiJrIn0.c2ln-_x"
        ));
        assert!(!valid_token_format("07401B.F395ACCD246AE52D"));
        assert!(!valid_token_format("not-a-token"));
        assert!(!valid_token_format(""));
    }

    #[test]
    fn cluster_names_follow_upstream() {
        assert!(valid_cluster_name("child1"));
        assert!(valid_cluster_name("edge-cluster-7"));
        assert!(!valid_cluster_name("Child1"));
        assert!(!valid_cluster_name("-child"));
        assert!(!valid_cluster_name(&"a".repeat(61)));
    }
}
