//! The scheduler's side of the capacity predictor exchange (docs/spec/scheduler.md §5.3):
//! `POST <base>/replicas/predict` with the feed's ReplicaRequirements and header `Cluster-ID`;
//! the answer's `replicas.default` is how many replicas the cluster accepts. The predictor is
//! asked directly (`predictorDirectAccess`) or, as upstream, through the parent's socket proxy and
//! the agent's tunnel (`sockets/<id>/proxy/http/<host:port>/replicas/predict`) with the
//! scheduler's own parent credentials.

use std::time::Duration;

use http_body_util::{BodyExt, Full};

use crate::apis::{ManagedCluster, ReplicaRequirements};
use crate::runtime::child::socket_proxy_path;
use crate::runtime::plainhttp;

const TIMEOUT: Duration = Duration::from_secs(20);

/// How a cluster's predictor is reached.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PredictorRoute {
    /// `status.predictorAddress` as is (append `/replicas/predict`).
    Direct(String),
    /// The path, relative to the parent's server URL, of `replicas/predict` through the socket
    /// proxy of the cluster's tunnel.
    Tunnel(String),
}

/// Where a cluster's predictor is reached, or why it cannot be.
pub fn predictor_base(cluster: &ManagedCluster) -> Result<PredictorRoute, String> {
    let status = cluster.status.clone().unwrap_or_default();
    let id = &cluster.spec.cluster_id;
    if !status.predictor_enabled {
        return Err(format!(
            "cluster {id} does not run a capacity predictor (agent feature gate Predictor)"
        ));
    }
    if status.predictor_address.is_empty() {
        return Err(format!("cluster {id} reports no predictor address"));
    }
    if status.predictor_direct_access {
        return Ok(PredictorRoute::Direct(
            status.predictor_address.trim_end_matches('/').to_string(),
        ));
    }
    if !status.use_socket {
        return Err(format!(
            "cluster {id} does not enable feature gate SocketConnection"
        ));
    }
    tunnel_predict_path(id, &status.predictor_address).map(PredictorRoute::Tunnel)
}

/// `sockets/<id>/proxy/<scheme>/<host:port>[/<path>]/replicas/predict` for a predictor at
/// `<scheme>://<host:port>[/<path>]` (upstream replaces `http://` by `http/`).
pub fn tunnel_predict_path(cluster_id: &str, address: &str) -> Result<String, String> {
    let bad = || {
        format!(
            "cluster {cluster_id} reports predictor address {address:?}, which is not http(s)://host:port"
        )
    };
    let (scheme, rest) = address.split_once("://").ok_or_else(bad)?;
    let rest = rest.trim_end_matches('/');
    if !matches!(scheme, "http" | "https") || rest.is_empty() || rest.starts_with('/') {
        return Err(bad());
    }
    socket_proxy_path(cluster_id, &format!("{scheme}/{rest}/replicas/predict"))
        .map_err(|e| e.to_string())
}

/// One prediction through the parent's socket proxy: `path` from [`tunnel_predict_path`],
/// `parent` the scheduler's own client. Unlike the direct path, an error status counts as a
/// failure: it comes from the parent or the hub (no tunnel, no rights), not from the predictor.
pub async fn predict_through_tunnel(
    parent: &kube::Client,
    path: &str,
    cluster_id: &str,
    req: &ReplicaRequirements,
) -> Result<i32, String> {
    let origin = format!("predictor of cluster {cluster_id} (through the hub tunnel)");
    let body = serde_json::to_vec(req).map_err(|e| e.to_string())?;
    let request = http::Request::post(path)
        .header("content-type", "application/json")
        .header("cluster-id", cluster_id)
        .body(kube::client::Body::from(body))
        .map_err(|e| format!("building the request to the {origin}: {e}"))?;
    let response = tokio::time::timeout(TIMEOUT, parent.send(request))
        .await
        .map_err(|_| format!("{origin} did not answer within {TIMEOUT:?}"))?
        .map_err(|e| format!("{origin}: {e}"))?;
    let status = response.status();
    let bytes = tokio::time::timeout(TIMEOUT, response.into_body().collect())
        .await
        .map_err(|_| format!("{origin} did not answer within {TIMEOUT:?}"))?
        .map_err(|e| format!("{origin}: reading the answer: {e}"))?
        .to_bytes();
    if !status.is_success() {
        return Err(format!(
            "{origin} answered {status}: {}",
            failure_message(&bytes)
        ));
    }
    parse_answer(&origin, status, &bytes)
}

/// The message of a Kubernetes `Status` body, else the body itself (bounded: it ends up in an
/// event).
fn failure_message(bytes: &[u8]) -> String {
    let status_message = serde_json::from_slice::<serde_json::Value>(bytes)
        .ok()
        .and_then(|v| {
            v.get("message")
                .and_then(|m| m.as_str())
                .map(str::to_string)
        });
    let text = status_message.unwrap_or_else(|| String::from_utf8_lossy(bytes).trim().to_string());
    text.chars().take(512).collect()
}

/// `replicas.default` of a predictor's answer (missing -> 0, as upstream); an unparsable body is
/// an error that quotes it.
fn parse_answer(origin: &str, status: http::StatusCode, bytes: &[u8]) -> Result<i32, String> {
    let parsed: serde_json::Value = serde_json::from_slice(bytes).map_err(|_| {
        format!(
            "{origin} answered {status}: {}",
            String::from_utf8_lossy(bytes).trim()
        )
    })?;
    Ok(parsed
        .pointer("/replicas/default")
        .and_then(serde_json::Value::as_i64)
        .and_then(|n| i32::try_from(n).ok())
        .unwrap_or(0))
}

/// One prediction over plain HTTP (upstream's built-in predictor serves no TLS).
pub async fn predict(
    base: &str,
    cluster_id: &str,
    req: &ReplicaRequirements,
) -> Result<i32, String> {
    let base = plainhttp::http_base(base, "predictor address")?;
    let body = serde_json::to_vec(req).map_err(|e| e.to_string())?;
    let request = http::Request::post(format!("{base}/replicas/predict"))
        .header("content-type", "application/json")
        .header("cluster-id", cluster_id)
        .body(Full::new(bytes::Bytes::from(body)))
        .map_err(|e| format!("building the predictor request: {e}"))?;
    let who = format!("predictor {base}");
    let (status, bytes) = plainhttp::send(&who, request, TIMEOUT).await?;
    parse_answer(&who, status, &bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apis::ManagedClusterStatus;

    const ID: &str = "dc91021d-2361-4f6d-a404-7c33b9e01118";

    fn cluster(status: ManagedClusterStatus) -> ManagedCluster {
        let mut c = ManagedCluster::new("c1", Default::default());
        c.spec.cluster_id = ID.into();
        c.status = Some(status);
        c
    }

    #[test]
    fn routes() {
        let direct = cluster(ManagedClusterStatus {
            predictor_enabled: true,
            predictor_direct_access: true,
            use_socket: true,
            predictor_address: "http://10.0.0.1:8080/".into(),
            ..Default::default()
        });
        assert_eq!(
            predictor_base(&direct),
            Ok(PredictorRoute::Direct("http://10.0.0.1:8080".into()))
        );
        let tunnel = cluster(ManagedClusterStatus {
            predictor_enabled: true,
            use_socket: true,
            predictor_address: "http://localhost:8080".into(),
            ..Default::default()
        });
        assert_eq!(
            predictor_base(&tunnel),
            Ok(PredictorRoute::Tunnel(format!(
                "/apis/proxies.clusternet.io/v1alpha1/sockets/{ID}/proxy/http/localhost:8080/replicas/predict"
            )))
        );
        let neither = cluster(ManagedClusterStatus {
            predictor_enabled: true,
            predictor_address: "http://localhost:8080".into(),
            ..Default::default()
        });
        assert_eq!(
            predictor_base(&neither),
            Err(format!(
                "cluster {ID} does not enable feature gate SocketConnection"
            ))
        );
    }

    #[test]
    fn tunnel_paths() {
        assert_eq!(
            tunnel_predict_path(ID, "https://svc.ns:9443/base/").as_deref(),
            Ok(format!(
                "/apis/proxies.clusternet.io/v1alpha1/sockets/{ID}/proxy/https/svc.ns:9443/base/replicas/predict"
            )
            .as_str())
        );
        for bad in ["localhost:8080", "ftp://h:1", "http://", "http:///x"] {
            assert!(tunnel_predict_path(ID, bad).is_err(), "{bad:?}");
        }
        assert!(tunnel_predict_path("a/b", "http://localhost:8080").is_err());
    }

    #[test]
    fn answers() {
        let ok = http::StatusCode::OK;
        assert_eq!(
            parse_answer("p", ok, br#"{"replicas":{"default":5}}"#),
            Ok(5)
        );
        assert_eq!(parse_answer("p", ok, br#"{"replicas":{}}"#), Ok(0));
        assert_eq!(
            parse_answer("p", ok, b"oops"),
            Err("p answered 200 OK: oops".into())
        );
        assert_eq!(
            failure_message(br#"{"kind":"Status","message":"cannot proxy through cluster x, whose agent is disconnected"}"#),
            "cannot proxy through cluster x, whose agent is disconnected"
        );
        assert_eq!(failure_message(b" plain "), "plain");
    }
}
