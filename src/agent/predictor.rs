//! The agent's built-in capacity predictor (docs/spec/agent.md §4): how many more replicas of a
//! given shape fit in this child. Served as plain HTTP on `localhost:<--predictor-port>`
//! (`POST /replicas/predict`), read by the scheduler for Dynamic dividing.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use k8s_openapi::api::core::v1::{Node, Pod, Taint, Toleration};
use kube::runtime::reflector::Store;
use serde_json::json;
use tokio_util::sync::CancellationToken;
use warp::Filter;
use warp::http::StatusCode;

use crate::apis::ReplicaRequirements;
use crate::kube_ext::quantity;

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum PredictError {
    #[error("no feasible nodes found")]
    NoFeasibleNodes,
    #[error("node {node}: {resource} is overcommitted")]
    Overcommitted { node: String, resource: String },
    #[error("{0}")]
    Quantity(String),
}

/// A node's free resources in milli-units, keyed by resource name (`pods` counts whole pods x1000).
type Resources = BTreeMap<String, i128>;

fn sum_into(
    acc: &mut Resources,
    m: &BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
) -> Result<(), PredictError> {
    for (k, q) in m {
        let v = quantity::milli(q).map_err(|e| PredictError::Quantity(e.to_string()))?;
        *acc.entry(k.clone()).or_default() += v;
    }
    Ok(())
}

/// A pod's request: app containers summed, raised per resource to a larger init container, plus overhead.
pub fn pod_request(pod: &Pod) -> Result<Resources, PredictError> {
    let mut total = Resources::new();
    let Some(spec) = &pod.spec else {
        return Ok(total);
    };
    for c in &spec.containers {
        if let Some(r) = c.resources.as_ref().and_then(|r| r.requests.as_ref()) {
            sum_into(&mut total, r)?;
        }
    }
    for c in spec.init_containers.iter().flatten() {
        let mut one = Resources::new();
        if let Some(r) = c.resources.as_ref().and_then(|r| r.requests.as_ref()) {
            sum_into(&mut one, r)?;
        }
        for (k, v) in one {
            let e = total.entry(k).or_default();
            *e = (*e).max(v);
        }
    }
    if let Some(o) = &spec.overhead {
        sum_into(&mut total, o)?;
    }
    Ok(total)
}

/// Standard toleration matching (key, operator Exists/Equal, effect; empty key with Exists matches all).
pub fn tolerates(tolerations: &[Toleration], taint: &Taint) -> bool {
    tolerations.iter().any(|t| {
        let effect_ok = t
            .effect
            .as_deref()
            .is_none_or(|e| e.is_empty() || e == taint.effect);
        let key = t.key.as_deref().unwrap_or_default();
        let op = t.operator.as_deref().unwrap_or("Equal");
        let key_ok = if key.is_empty() {
            op == "Exists"
        } else {
            key == taint.key
        };
        let value_ok = op == "Exists"
            || t.value.as_deref().unwrap_or_default() == taint.value.as_deref().unwrap_or_default();
        effect_ok && key_ok && value_ok
    })
}

/// agent.md §4.3: the sum over feasible nodes of how many replicas fit in each.
pub fn predict(
    nodes: &[Node],
    pods: &[Pod],
    req: &ReplicaRequirements,
) -> Result<i32, PredictError> {
    let feasible: Vec<&Node> = nodes
        .iter()
        .filter(|n| {
            let labels = n.metadata.labels.clone().unwrap_or_default();
            req.node_selector
                .iter()
                .all(|(k, v)| labels.get(k) == Some(v))
        })
        .filter(|n| {
            n.spec
                .as_ref()
                .and_then(|s| s.taints.as_ref())
                .is_none_or(|taints| {
                    taints
                        .iter()
                        .filter(|t| t.effect == "NoSchedule" || t.effect == "NoExecute")
                        .all(|t| tolerates(&req.tolerations, t))
                })
        })
        .collect();
    if feasible.is_empty() {
        return Err(PredictError::NoFeasibleNodes);
    }
    let mut wanted = Resources::new();
    if let Some(r) = &req.resources.requests {
        sum_into(&mut wanted, r)?;
    }
    let mut total: i64 = 0;
    for node in feasible {
        let name = node.metadata.name.clone().unwrap_or_default();
        let mut free = Resources::new();
        if let Some(a) = node.status.as_ref().and_then(|s| s.allocatable.as_ref()) {
            sum_into(&mut free, a)?;
        }
        for pod in pods {
            let on_node =
                pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(name.as_str());
            let phase = pod
                .status
                .as_ref()
                .and_then(|s| s.phase.as_deref())
                .unwrap_or_default();
            if !on_node || phase == "Succeeded" || phase == "Failed" {
                continue;
            }
            for (k, v) in pod_request(pod)? {
                let e = free.entry(k.clone()).or_default();
                *e -= v;
                if *e < 0 {
                    return Err(PredictError::Overcommitted {
                        node: name,
                        resource: k,
                    });
                }
            }
            let p = free.entry("pods".into()).or_default();
            *p -= 1000;
            if *p < 0 {
                return Err(PredictError::Overcommitted {
                    node: name,
                    resource: "pods".into(),
                });
            }
        }
        let mut max =
            i64::from(i32::MAX).min((free.get("pods").copied().unwrap_or(0) / 1000) as i64);
        for (k, need) in wanted.iter().filter(|(_, v)| **v > 0) {
            let have = free.get(k).copied().unwrap_or(0);
            max = max.min((have / need) as i64);
        }
        total += max.max(0);
    }
    Ok(i32::try_from(total).unwrap_or(i32::MAX))
}

/// Serves the predictor on `addr` until `stop`; returns the bound address.
pub async fn serve(
    addr: SocketAddr,
    nodes: Store<Node>,
    pods: Store<Pod>,
    stop: CancellationToken,
) -> std::io::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    let predict_route = warp::path!("replicas" / "predict")
        .and(warp::post())
        .and(warp::body::content_length_limit(1 << 20))
        .and(warp::body::bytes())
        .map(move |body: bytes::Bytes| {
            let req: ReplicaRequirements = match serde_json::from_slice(&body) {
                Ok(r) => r,
                Err(e) => {
                    return warp::reply::with_status(
                        format!("malformed ReplicaRequirements: {e}"),
                        StatusCode::BAD_REQUEST,
                    )
                    .into_response_box();
                }
            };
            let n: Vec<Node> = nodes.state().iter().map(|n| (**n).clone()).collect();
            let p: Vec<Pod> = pods.state().iter().map(|p| (**p).clone()).collect();
            match predict(&n, &p, &req) {
                Ok(r) => warp::reply::with_status(
                    json!({"replicas": {"default": r}}).to_string(),
                    StatusCode::OK,
                )
                .into_response_box(),
                Err(e) => {
                    warp::reply::with_status(e.to_string(), StatusCode::INTERNAL_SERVER_ERROR)
                        .into_response_box()
                }
            }
        });
    let unscheduled = warp::path!("replicas" / "unscheduled").map(|| {
        warp::reply::with_status(
            "Not Implemented".to_string(),
            StatusCode::INTERNAL_SERVER_ERROR,
        )
        .into_response_box()
    });
    tokio::spawn(
        warp::serve(predict_route.or(unscheduled).unify())
            .incoming(listener)
            .graceful(async move { stop.cancelled().await })
            .run(),
    );
    Ok(local)
}

trait IntoBox {
    fn into_response_box(self) -> warp::reply::Response;
}

impl<T: warp::Reply> IntoBox for T {
    fn into_response_box(self) -> warp::reply::Response {
        let mut r = self.into_response();
        r.headers_mut().insert(
            "content-type",
            warp::http::HeaderValue::from_static("application/json"),
        );
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node() -> Node {
        serde_json::from_value(json!({"metadata": {"name": "n1", "labels": {"zone": "a"}},
            "status": {"allocatable": {"cpu": "8", "memory": "16Gi", "pods": "4", "ephemeral-storage": "16Gi"}}}))
        .expect("node")
    }

    fn pod(cpu: &str, mem: &str) -> Pod {
        serde_json::from_value(json!({"spec": {"nodeName": "n1", "containers": [{"name": "c",
            "resources": {"requests": {"cpu": cpu, "memory": mem}}}]}, "status": {"phase": "Running"}}))
        .expect("pod")
    }

    fn one_cpu_one_gi() -> ReplicaRequirements {
        serde_json::from_value(json!({"resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}))
            .expect("req")
    }

    #[test]
    fn upstream_vectors() {
        // pod slots: 4 - 2 = 2
        assert_eq!(
            predict(
                &[node()],
                &[pod("1", "4Gi"), pod("1", "4Gi")],
                &one_cpu_one_gi()
            ),
            Ok(2)
        );
        // cpu: 8 - 7 = 1
        assert_eq!(
            predict(
                &[node()],
                &[pod("1", "4Gi"), pod("6", "4Gi")],
                &one_cpu_one_gi()
            ),
            Ok(1)
        );
        // memory: 16 - 15 = 1
        assert_eq!(
            predict(
                &[node()],
                &[pod("1", "4Gi"), pod("1", "11Gi")],
                &one_cpu_one_gi()
            ),
            Ok(1)
        );
    }

    #[test]
    fn selectors_and_taints_filter_nodes() {
        let mut req = one_cpu_one_gi();
        req.node_selector.insert("zone".into(), "b".into());
        assert_eq!(
            predict(&[node()], &[], &req),
            Err(PredictError::NoFeasibleNodes)
        );
        let mut tainted = node();
        tainted.spec = Some(
            serde_json::from_value(
                json!({"taints": [{"key": "k", "value": "v", "effect": "NoSchedule"}]}),
            )
            .expect("spec"),
        );
        assert_eq!(
            predict(&[tainted.clone()], &[], &one_cpu_one_gi()),
            Err(PredictError::NoFeasibleNodes)
        );
        let mut tol = one_cpu_one_gi();
        tol.tolerations = vec![
            serde_json::from_value(json!({"key": "k", "operator": "Exists"})).expect("toleration"),
        ];
        assert_eq!(predict(&[tainted], &[], &tol), Ok(4));
    }

    #[test]
    fn init_containers_raise_the_request() {
        let p: Pod = serde_json::from_value(json!({"spec": {"containers": [
            {"name": "a", "resources": {"requests": {"cpu": "100m"}}},
            {"name": "b", "resources": {"requests": {"cpu": "200m"}}}],
            "initContainers": [{"name": "i", "resources": {"requests": {"cpu": "500m", "memory": "1Mi"}}}]}}))
        .expect("pod");
        let r = pod_request(&p).expect("request");
        assert_eq!(r.get("cpu"), Some(&500));
        assert_eq!(r.get("memory").copied(), Some((1_i128 << 20) * 1000));
    }
}
