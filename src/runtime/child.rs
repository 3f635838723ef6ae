//! Reaching a child cluster through the parent's socket proxy (hub.md §2.2-§2.3, deployer.md §9):
//! requests go to `<parent>/apis/proxies.clusternet.io/v1alpha1/sockets/<clusterID>/proxy/<path>`
//! with this process's own parent credentials, impersonating user `clusternet` with the child's
//! token as user extra `clusternet-token`. The hub turns that extra into `Authorization: Bearer`
//! towards the child and dials it through the agent's reverse tunnel, so children behind NAT (whose
//! API server the parent cannot dial) are reachable. Also owns the question "does the parent serve
//! that proxy at all", answered from the `v1alpha1.proxies.clusternet.io` APIService's status.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;
use kube::api::Api;
use tokio::sync::Mutex;
use tracing::{debug, info};

use super::{ClientError, Runtime};
use crate::apis::proxies;

/// The user a proxied request impersonates in the parent; `clusternet:system:socketsproxy` lets
/// every authenticated user use `sockets/proxy`, and the hub only reads the extras.
pub const PROXY_USER: &str = "clusternet";
/// The user extra the hub turns into the child's bearer token.
pub const TOKEN_EXTRA: &str = "clusternet-token";

/// How long an answer about the APIService's availability is trusted: short enough to notice a
/// hub that comes or goes, long enough not to GET it on every reconcile.
const AVAILABILITY_TTL: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum ChildClientError {
    #[error("cluster ID {0:?} cannot be part of a socket proxy path")]
    ClusterId(String),
    #[error("socket proxy URL {0:?} is not a valid URL")]
    Url(String),
    #[error("the parent's connection settings: {0}")]
    Parent(#[from] ClientError),
    #[error("building the proxied child client: {0}")]
    Build(#[from] kube::Error),
}

/// `/apis/proxies.clusternet.io/v1alpha1/sockets/<clusterID>/proxy/<rest>`, relative to the
/// parent's server URL. `rest` is a proxy path form (`direct`, `http/<host:port>/...`).
pub fn socket_proxy_path(cluster_id: &str, rest: &str) -> Result<String, ChildClientError> {
    // the ID comes from a ManagedCluster (network data): it must stay one path segment
    let safe = !cluster_id.is_empty()
        && cluster_id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'))
        && cluster_id != "."
        && cluster_id != "..";
    if !safe {
        return Err(ChildClientError::ClusterId(cluster_id.to_string()));
    }
    Ok(format!(
        "/apis/{}/{}/{}/{cluster_id}/{}/{}",
        proxies::GROUP,
        proxies::VERSION,
        proxies::SOCKETS_RESOURCE,
        proxies::PROXY_SUBRESOURCE,
        rest.trim_start_matches('/')
    ))
}

/// The connection settings of a child reached through the socket proxy: the parent's settings
/// (server, CA, own credentials) with the server moved to `sockets/<id>/proxy/direct` and the
/// impersonation of user `clusternet` carrying `child_token`.
pub fn proxied_child_config(
    parent: &kube::Config,
    cluster_id: &str,
    child_token: &str,
) -> Result<kube::Config, ChildClientError> {
    let url = format!(
        "{}{}",
        parent.cluster_url.to_string().trim_end_matches('/'),
        socket_proxy_path(cluster_id, "direct")?
    );
    let mut cfg = parent.clone();
    cfg.cluster_url = url
        .parse()
        .map_err(|_| ChildClientError::Url(url.clone()))?;
    // whatever the parent kubeconfig impersonates, the hub needs exactly this identity
    cfg.auth_info.impersonate = Some(PROXY_USER.to_string());
    cfg.auth_info.impersonate_uid = None;
    cfg.auth_info.impersonate_groups = None;
    cfg.auth_info.impersonate_user_extra = Some(HashMap::from([(
        TOKEN_EXTRA.to_string(),
        vec![child_token.to_string()],
    )]));
    // the parent kubeconfig's namespace means nothing in the child
    cfg.default_namespace = "default".to_string();
    // as the direct child clients: a child that hangs must not stall a reconcile for minutes
    cfg.connect_timeout = Some(Duration::from_secs(10));
    cfg.read_timeout = Some(Duration::from_secs(60));
    Ok(cfg)
}

/// A client for the child `cluster_id` through the parent's socket proxy, authenticated in the
/// child with `child_token`.
pub async fn proxied_child_client(
    rt: &Runtime,
    cluster_id: &str,
    child_token: &str,
) -> Result<kube::Client, ChildClientError> {
    let parent = super::kube_config_for(&rt.config).await?;
    Ok(kube::Client::try_from(proxied_child_config(
        &parent,
        cluster_id,
        child_token,
    )?)?)
}

/// True when the APIService reports condition `Available=True` (the aggregator reaches the hub).
pub fn apiservice_available(svc: &APIService) -> bool {
    svc.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c.type_ == "Available" && c.status == "True")
        })
}

/// Whether the parent serves `proxies.clusternet.io` right now, asked at most every
/// [`AVAILABILITY_TTL`]. Not being allowed to read APIServices counts as "not served": the
/// caller then keeps to the direct path, which is what it did before the hub existed.
#[derive(Default)]
pub struct ProxyAvailability {
    last: Mutex<Option<(Instant, bool)>>,
}

impl ProxyAvailability {
    pub async fn available(&self, parent: &kube::Client) -> bool {
        // held across the GET so that concurrent reconciles share one request
        let mut last = self.last.lock().await;
        if let Some((at, answer)) = *last
            && at.elapsed() < AVAILABILITY_TTL
        {
            return answer;
        }
        let answer = match Api::<APIService>::all(parent.clone())
            .get_opt(proxies::API_SERVICE_NAME)
            .await
        {
            Ok(svc) => svc.as_ref().is_some_and(apiservice_available),
            Err(e) => {
                debug!(apiservice = proxies::API_SERVICE_NAME, error = %e, "cannot read the APIService");
                false
            }
        };
        if last.is_none_or(|(_, before)| before != answer) {
            info!(
                apiservice = proxies::API_SERVICE_NAME,
                available = answer,
                "socket proxy availability"
            );
        }
        *last = Some((Instant::now(), answer));
        answer
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::{
        APIServiceCondition, APIServiceStatus,
    };

    const ID: &str = "cae6feb5-a23f-4354-8ee7-66527aa03f54";

    #[test]
    fn proxy_paths() {
        assert_eq!(
            socket_proxy_path(ID, "direct").ok(),
            Some(format!(
                "/apis/proxies.clusternet.io/v1alpha1/sockets/{ID}/proxy/direct"
            ))
        );
        assert_eq!(
            socket_proxy_path(ID, "/http/127.0.0.1:8080/replicas/predict").ok(),
            Some(format!(
                "/apis/proxies.clusternet.io/v1alpha1/sockets/{ID}/proxy/http/127.0.0.1:8080/replicas/predict"
            ))
        );
        for bad in ["", "..", "a/b", "a?b", "a b"] {
            assert!(
                matches!(
                    socket_proxy_path(bad, "direct"),
                    Err(ChildClientError::ClusterId(_))
                ),
                "{bad:?}"
            );
        }
    }

    #[tokio::test]
    async fn proxied_config_keeps_the_parent_and_impersonates_clusternet() {
        let mut parent = kube::Config::new("https://parent:6443/prefix/".parse().expect("uri"));
        parent.auth_info.token = Some(secrecy::SecretString::from("parent-token".to_string()));
        parent.auth_info.impersonate = Some("someone-else".into());
        parent.auth_info.impersonate_groups = Some(vec!["g".into()]);
        parent.default_namespace = "parent-ns".into();
        let cfg = proxied_child_config(&parent, ID, "child-token").expect("config");
        assert_eq!(
            cfg.cluster_url.to_string(),
            format!(
                "https://parent:6443/prefix/apis/proxies.clusternet.io/v1alpha1/sockets/{ID}/proxy/direct"
            )
        );
        assert!(cfg.auth_info.token.is_some(), "own parent credentials kept");
        assert_eq!(cfg.auth_info.impersonate.as_deref(), Some("clusternet"));
        assert_eq!(cfg.auth_info.impersonate_groups, None);
        assert_eq!(
            cfg.auth_info.impersonate_user_extra,
            Some(HashMap::from([(
                "clusternet-token".to_string(),
                vec!["child-token".to_string()]
            )]))
        );
        assert_eq!(cfg.default_namespace, "default");
        assert!(kube::Client::try_from(cfg).is_ok());
    }

    #[test]
    fn availability_is_the_condition() {
        let svc = |status: Option<&str>| APIService {
            status: Some(APIServiceStatus {
                conditions: status.map(|s| {
                    vec![APIServiceCondition {
                        type_: "Available".into(),
                        status: s.into(),
                        ..Default::default()
                    }]
                }),
            }),
            ..Default::default()
        };
        assert!(apiservice_available(&svc(Some("True"))));
        assert!(!apiservice_available(&svc(Some("False"))));
        assert!(!apiservice_available(&svc(None)));
        assert!(!apiservice_available(&APIService::default()));
    }
}
