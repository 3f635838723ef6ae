//! The scheduler's side of the capacity predictor exchange (shared/spec/scheduler.md §5.3):
//! `POST <base>/replicas/predict` with the feed's ReplicaRequirements and header `Cluster-ID`;
//! the answer's `replicas.default` is how many replicas the cluster accepts.

use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use crate::apis::{ManagedCluster, ReplicaRequirements};

const TIMEOUT: Duration = Duration::from_secs(20);

/// Where a cluster's predictor is reached, or why it cannot be.
pub fn predictor_base(cluster: &ManagedCluster) -> Result<String, String> {
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
        return Ok(status.predictor_address.trim_end_matches('/').to_string());
    }
    if !status.use_socket {
        return Err(format!(
            "cluster {id} does not enable feature gate SocketConnection"
        ));
    }
    // upstream reaches it through the hub's tunnel (proxies.clusternet.io), which is not served yet
    Err(format!(
        "the predictor of cluster {id} is only reachable through the hub tunnel, which this build does not serve yet; \
         run its agent with --predictor-direct-access"
    ))
}

/// One prediction over plain HTTP (upstream's built-in predictor serves no TLS).
pub async fn predict(
    base: &str,
    cluster_id: &str,
    req: &ReplicaRequirements,
) -> Result<i32, String> {
    if !base.starts_with("http://") {
        return Err(format!(
            "predictor address {base:?}: only http:// predictors are supported"
        ));
    }
    let body = serde_json::to_vec(req).map_err(|e| e.to_string())?;
    let request = http::Request::post(format!("{base}/replicas/predict"))
        .header("content-type", "application/json")
        .header("cluster-id", cluster_id)
        .body(Full::new(bytes::Bytes::from(body)))
        .map_err(|e| format!("building the predictor request: {e}"))?;
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<bytes::Bytes>>();
    let response = tokio::time::timeout(TIMEOUT, client.request(request))
        .await
        .map_err(|_| format!("predictor {base} did not answer within {TIMEOUT:?}"))?
        .map_err(|e| format!("predictor {base}: {e}"))?;
    let status = response.status();
    let bytes = response
        .into_body()
        .collect()
        .await
        .map_err(|e| format!("predictor {base}: reading the answer: {e}"))?
        .to_bytes();
    let parsed: serde_json::Value = serde_json::from_slice(&bytes).map_err(|_| {
        format!(
            "predictor {base} answered {status}: {}",
            String::from_utf8_lossy(&bytes).trim()
        )
    })?;
    Ok(parsed
        .pointer("/replicas/default")
        .and_then(serde_json::Value::as_i64)
        .and_then(|n| i32::try_from(n).ok())
        .unwrap_or(0))
}
