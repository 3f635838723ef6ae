//! Heartbeat: the agent collects the child's state every collect period and writes it into its
//! ManagedCluster's status (shared/spec/status.md §2-§5): versions, health endpoints, node
//! statistics, capacity, CIDRs, gates, predictor fields and the `Ready` condition. It writes when
//! something changed, or when a heartbeat is due, never in between. Node labels with the
//! configured prefixes are aggregated onto the ManagedCluster's labels.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::reflector::Store;
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::registration::Registration;
use crate::apis::clusters::{
    CONDITION_READY, MESSAGE_MANAGED_CLUSTER_READY, REASON_MANAGED_CLUSTER_NOT_READY,
    REASON_MANAGED_CLUSTER_READY,
};
use crate::apis::known;
use crate::apis::{ManagedCluster, ManagedClusterStatus, NodeStatistics};
use crate::kube_ext::quantity;
use crate::runtime::{Runtime, api_code};

/// Why heartbeating stopped.
#[derive(Debug, thiserror::Error)]
pub enum HeartbeatEnd {
    #[error("the parent no longer accepts this cluster's credentials")]
    CredentialsRejected,
    #[error(
        "ManagedCluster of cluster {cluster_id} is gone from namespace {namespace} in the parent: the cluster was deregistered"
    )]
    ClusterDeleted {
        cluster_id: String,
        namespace: String,
    },
}

/// Runs until `stop` (Ok) or until the parent side is gone (Err: the caller registers again).
pub async fn run(
    rt: &Runtime,
    reg: &Registration,
    nodes: Store<Node>,
    stop: &CancellationToken,
) -> Result<(), HeartbeatEnd> {
    let cfg = &rt.config;
    let collect_every = cfg
        .cluster_status_collect_frequency
        .max(Duration::from_millis(200));
    let heartbeat_every = cfg
        .cluster_status_update_frequency
        .max(Duration::from_secs(1));
    let api: Api<ManagedCluster> = Api::namespaced(reg.parent.clone(), &reg.namespace);
    let mut last_written: Option<(ManagedClusterStatus, Instant)> = None;
    let mut missing_since: Option<Instant> = None;
    loop {
        let snapshot = collect(rt, &nodes).await;
        let due = match &last_written {
            None => true,
            Some((prev, at)) => at.elapsed() >= heartbeat_every || !same_state(prev, &snapshot),
        };
        if due {
            match write(rt, reg, &api, &nodes, snapshot.clone()).await {
                Ok(()) => {
                    missing_since = None;
                    last_written = Some((snapshot, Instant::now()));
                    metrics::counter!("clusternet_agent_heartbeats_total", "outcome" => "written")
                        .increment(1);
                }
                Err(WriteError::Unauthorized) => return Err(HeartbeatEnd::CredentialsRejected),
                Err(WriteError::Missing) => {
                    // the approver may still be creating it right after approval; give it a moment
                    let since = *missing_since.get_or_insert_with(Instant::now);
                    if since.elapsed() > Duration::from_secs(30) {
                        return Err(HeartbeatEnd::ClusterDeleted {
                            cluster_id: reg.cluster_id.clone(),
                            namespace: reg.namespace.clone(),
                        });
                    }
                }
                Err(WriteError::Other(e)) => {
                    metrics::counter!("clusternet_agent_heartbeats_total", "outcome" => "error")
                        .increment(1);
                    warn!(error = %e, "writing the cluster status failed; retrying next period");
                }
            }
        }
        tokio::select! {
            _ = stop.cancelled() => return Ok(()),
            _ = tokio::time::sleep(collect_every) => {}
        }
    }
}

/// Equal apart from the timestamps that change on every collection.
fn same_state(a: &ManagedClusterStatus, b: &ManagedClusterStatus) -> bool {
    let strip = |s: &ManagedClusterStatus| {
        let mut s = s.clone();
        s.last_observed_time = None;
        for c in &mut s.conditions {
            c.last_transition_time = Time(Timestamp::UNIX_EPOCH);
        }
        s
    };
    strip(a) == strip(b)
}

enum WriteError {
    Unauthorized,
    Missing,
    Other(kube::Error),
}

impl From<kube::Error> for WriteError {
    fn from(e: kube::Error) -> Self {
        match api_code(&e) {
            // 403: the cluster's RBAC is gone (deregistered or revoked)
            Some(401 | 403) => WriteError::Unauthorized,
            Some(404) => WriteError::Missing,
            _ => WriteError::Other(e),
        }
    }
}

async fn write(
    rt: &Runtime,
    reg: &Registration,
    api: &Api<ManagedCluster>,
    nodes: &Store<Node>,
    snapshot: ManagedClusterStatus,
) -> Result<(), WriteError> {
    let lp =
        ListParams::default().labels(&format!("{}={}", known::CLUSTER_ID_LABEL, reg.cluster_id));
    let list = api.list(&lp).await?;
    if list.items.len() > 1 {
        warn!(cluster_id = %reg.cluster_id, "several ManagedClusters carry this cluster ID; using the first");
    }
    let Some(mut mc) = list.items.into_iter().next() else {
        return Err(WriteError::Missing);
    };
    let name = mc.name_any();

    // node-label aggregation (status.md §4): merge-patch only the label changes
    let wanted = aggregate_node_labels(
        &nodes
            .state()
            .iter()
            .map(|n| n.labels().clone())
            .collect::<Vec<_>>(),
        &[known::NODE_LABELS_PREFIX],
        rt.config.labels_aggregate_threshold,
    );
    let current = mc.labels().clone();
    let mut patch_labels = serde_json::Map::new();
    for k in current
        .keys()
        .filter(|k| k.starts_with(known::NODE_LABELS_PREFIX))
    {
        if !wanted.contains_key(k) {
            patch_labels.insert(k.clone(), serde_json::Value::Null);
        }
    }
    for (k, v) in &wanted {
        if current.get(k) != Some(v) {
            patch_labels.insert(k.clone(), json!(v));
        }
    }
    if !patch_labels.is_empty() {
        mc = api
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": patch_labels}})),
            )
            .await?;
    }

    for attempt in 0..5 {
        let previous = mc.status.clone().unwrap_or_default();
        let mut status = snapshot.clone();
        status.last_observed_time = Some(Time(Timestamp::now()));
        status.conditions = merge_conditions(&previous.conditions, &snapshot.conditions);
        mc.status = Some(status);
        match api.replace_status(&name, &PostParams::default(), &mc).await {
            Ok(_) => {
                debug!(cluster = %name, "cluster status written");
                return Ok(());
            }
            Err(e) if api_code(&e) == Some(409) && attempt < 4 => {
                mc = api.get(&name).await?;
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Upstream's condition merge (pkg/utils/cluster.go): append new types; on a status, reason or
/// message change update them (transition time only when the status changed); an unchanged
/// `Ready` takes the new transition time, so it doubles as a heartbeat timestamp; other
/// conditions are kept as they are.
pub fn merge_conditions(previous: &[Condition], new: &[Condition]) -> Vec<Condition> {
    let mut out = previous.to_vec();
    for n in new {
        match out.iter_mut().find(|c| c.type_ == n.type_) {
            None => out.push(n.clone()),
            Some(c) => {
                if c.status != n.status || c.reason != n.reason || c.message != n.message {
                    if c.status != n.status {
                        c.last_transition_time = n.last_transition_time.clone();
                    }
                    c.status = n.status.clone();
                    c.reason = n.reason.clone();
                    c.message = n.message.clone();
                } else if c.type_ == CONDITION_READY {
                    c.last_transition_time = n.last_transition_time.clone();
                }
            }
        }
    }
    out
}

/// status.md §4: the most common value of each prefixed key among worker nodes, kept when its
/// share reaches the threshold.
pub fn aggregate_node_labels(
    nodes: &[BTreeMap<String, String>],
    prefixes: &[&str],
    threshold: f64,
) -> BTreeMap<String, String> {
    let workers: Vec<&BTreeMap<String, String>> = nodes
        .iter()
        .filter(|l| {
            !l.contains_key("node-role.kubernetes.io/control-plane")
                && !l.contains_key("node-role.kubernetes.io/master")
        })
        .collect();
    if workers.is_empty() {
        return BTreeMap::new();
    }
    let mut counts: BTreeMap<&str, BTreeMap<&str, usize>> = BTreeMap::new();
    for labels in &workers {
        for (k, v) in labels.iter() {
            if prefixes.iter().any(|p| k.starts_with(p)) {
                *counts
                    .entry(k.as_str())
                    .or_default()
                    .entry(v.as_str())
                    .or_default() += 1;
            }
        }
    }
    let total = workers.len() as f64;
    counts
        .into_iter()
        .filter_map(|(k, values)| {
            let (v, n) = values.into_iter().max_by_key(|(_, n)| *n)?;
            (n as f64 / total >= threshold).then(|| (k.to_string(), v.to_string()))
        })
        .collect()
}

async fn probe(client: &Client, path: &str) -> bool {
    let Ok(req) = http::Request::get(path).body(Vec::new()) else {
        return false;
    };
    client.request_text(req).await.is_ok()
}

/// One snapshot of the child (status.md §2).
pub async fn collect(rt: &Runtime, nodes: &Store<Node>) -> ManagedClusterStatus {
    let cfg = &rt.config;
    let client = &rt.client;
    let (k8s_version, platform) = match client.apiserver_version().await {
        Ok(v) => (v.git_version, v.platform),
        Err(e) => {
            debug!(error = %e, "reading the child's version failed");
            (String::new(), String::new())
        }
    };
    let (healthz, livez, readyz) = tokio::join!(
        probe(client, "/healthz"),
        probe(client, "/livez"),
        probe(client, "/readyz")
    );

    let mut stats = NodeStatistics::default();
    let (mut cpu_cap, mut mem_cap, mut gpu_cap) = (0_i128, 0_i128, 0_i128);
    let (mut cpu_alloc, mut mem_alloc, mut gpu_alloc) = (0_i128, 0_i128, 0_i128);
    let mut has_gpu = false;
    for node in nodes.state() {
        let status = node.status.clone().unwrap_or_default();
        match status
            .conditions
            .as_ref()
            .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
        {
            None => stats.lost_nodes += 1,
            Some(c) if c.status == "True" => stats.ready_nodes += 1,
            Some(c) if c.status == "False" => stats.not_ready_nodes += 1,
            Some(_) => stats.unknown_nodes += 1,
        }
        let cap = status.capacity.unwrap_or_default();
        let alloc = status.allocatable.unwrap_or_default();
        let get =
            |m: &BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
             k: &str| { m.get(k).and_then(|q| quantity::milli(q).ok()).unwrap_or(0) };
        cpu_cap += get(&cap, "cpu");
        mem_cap += get(&cap, "memory");
        cpu_alloc += get(&alloc, "cpu");
        mem_alloc += get(&alloc, "memory");
        if cap.contains_key(known::GPU_RESOURCE_NAME) {
            has_gpu = true;
            gpu_cap += get(&cap, known::GPU_RESOURCE_NAME);
            gpu_alloc += get(&alloc, known::GPU_RESOURCE_NAME);
        }
    }
    let mut capacity = BTreeMap::from([
        ("cpu".to_string(), quantity::format_decimal(cpu_cap)),
        ("memory".to_string(), quantity::format_binary(mem_cap)),
    ]);
    let mut allocatable = BTreeMap::from([
        ("cpu".to_string(), quantity::format_decimal(cpu_alloc)),
        ("memory".to_string(), quantity::format_binary(mem_alloc)),
    ]);
    if has_gpu && gpu_cap != 0 {
        capacity.insert(
            known::GPU_RESOURCE_NAME.to_string(),
            quantity::format_decimal(gpu_cap),
        );
        allocatable.insert(
            known::GPU_RESOURCE_NAME.to_string(),
            quantity::format_decimal(gpu_alloc),
        );
    }
    let ready = (livez && readyz) || healthz;
    let now = Time(Timestamp::now());
    let condition = if ready {
        Condition {
            type_: CONDITION_READY.into(),
            status: "True".into(),
            reason: REASON_MANAGED_CLUSTER_READY.into(),
            message: MESSAGE_MANAGED_CLUSTER_READY.into(),
            last_transition_time: now,
            observed_generation: None,
        }
    } else {
        Condition {
            type_: CONDITION_READY.into(),
            status: "False".into(),
            reason: REASON_MANAGED_CLUSTER_NOT_READY.into(),
            message: "managed cluster is not ready.".into(),
            last_transition_time: now,
            observed_generation: None,
        }
    };
    let (cluster_cidr, service_cidr) = discover_cidrs(client).await;
    ManagedClusterStatus {
        last_observed_time: None,
        k8s_version,
        agent_version: format!("v{}", crate::VERSION),
        platform,
        apiserver_url: rt.cluster_url.clone(),
        healthz,
        livez,
        readyz,
        app_pusher: Some(cfg.gate(known::APP_PUSHER)),
        use_socket: cfg.gate(known::SOCKET_CONNECTION),
        kube_qps: cfg.kube_api_qps,
        kube_burst: i32::try_from(cfg.kube_api_burst).unwrap_or(i32::MAX),
        allocatable,
        capacity,
        cluster_cidr,
        service_cidr,
        node_statistics: stats,
        pod_statistics: None,
        resource_usage: None,
        conditions: vec![condition],
        heartbeat_frequency_seconds: Some(
            cfg.cluster_status_update_frequency.as_secs().max(1) as i64
        ),
        predictor_enabled: cfg.gate(known::PREDICTOR),
        predictor_address: predictor_address(cfg),
        predictor_direct_access: cfg.predictor_direct_access,
    }
}

/// agent.md §4.1: an external predictor's address, else the built-in one on localhost.
pub fn predictor_address(cfg: &crate::config::Config) -> String {
    match cfg.predictor_addr.as_deref().filter(|a| !a.is_empty()) {
        Some(a) => a.to_string(),
        None if cfg.gate(known::PREDICTOR) => format!("http://localhost:{}", cfg.predictor_port),
        None => String::new(),
    }
}

/// status.md §3: the flags of control-plane pods, then the agent's environment.
async fn discover_cidrs(client: &Client) -> (String, String) {
    let pods: Api<Pod> = Api::all(client.clone());
    let find = |flag: &'static str, selectors: &'static [&'static str]| {
        let pods = pods.clone();
        async move {
            for sel in selectors {
                let Ok(list) = pods.list(&ListParams::default().labels(sel)).await else {
                    continue;
                };
                for pod in list.items {
                    for c in pod.spec.map(|s| s.containers).unwrap_or_default() {
                        let words = c
                            .command
                            .unwrap_or_default()
                            .into_iter()
                            .chain(c.args.unwrap_or_default());
                        for w in
                            words.flat_map(|w| w.split(' ').map(str::to_string).collect::<Vec<_>>())
                        {
                            if let Some(v) = w
                                .strip_prefix(flag)
                                .and_then(|r| r.split_once('='))
                                .map(|(_, v)| v)
                            {
                                return Some(v.to_string());
                            }
                        }
                    }
                }
            }
            None
        }
    };
    let service = find(
        "--service-cluster-ip-range",
        &[
            "component=kube-apiserver",
            "app.kubernetes.io/component=kube-apiserver",
            "component=kube-controller-manager",
            "app.kubernetes.io/component=kube-controller-manager",
        ],
    )
    .await
    .or_else(|| std::env::var("SERVICE_CIDR").ok())
    .unwrap_or_default();
    let cluster = find(
        "--cluster-cidr",
        &[
            "component=kube-controller-manager",
            "app.kubernetes.io/component=kube-controller-manager",
            "k8s-app=kube-proxy",
        ],
    )
    .await
    .or_else(|| std::env::var("CLUSTER_CIDR").ok())
    .unwrap_or_default();
    (cluster, service)
}

pub fn log_end(e: &HeartbeatEnd) {
    match e {
        HeartbeatEnd::ClusterDeleted { .. } => warn!(
            error = %e,
            "delete the ClusterRegistrationRequest in the parent (or this agent's Lease) to register this cluster again"
        ),
        HeartbeatEnd::CredentialsRejected => info!(error = %e, "registering again"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(labels: &[(&str, &str)]) -> BTreeMap<String, String> {
        labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn node_labels_aggregate_as_upstream_examples() {
        // nodes {foo:bar}, {foo:bar}, {} at 1.0 -> nothing
        let n = vec![node(&[("foo", "bar")]), node(&[("foo", "bar")]), node(&[])];
        assert!(aggregate_node_labels(&n, &["foo"], 1.0).is_empty());
        // all three {foo:bar} at 1.0 -> foo=bar
        let n = vec![node(&[("foo", "bar")]); 3];
        assert_eq!(
            aggregate_node_labels(&n, &["foo"], 1.0),
            node(&[("foo", "bar")])
        );
        // zones zone0, zone0, zone1 at 0.5 -> zone=zone0
        let n = vec![
            node(&[("zone", "zone0")]),
            node(&[("zone", "zone0")]),
            node(&[("zone", "zone1")]),
        ];
        assert_eq!(
            aggregate_node_labels(&n, &["zone"], 0.5),
            node(&[("zone", "zone0")])
        );
        // foo/abc and foo/def on one node each of three at 0.1 -> both
        let n = vec![
            node(&[("foo/abc", "x")]),
            node(&[("foo/def", "y")]),
            node(&[]),
        ];
        assert_eq!(
            aggregate_node_labels(&n, &["foo/"], 0.1),
            node(&[("foo/abc", "x"), ("foo/def", "y")])
        );
        // control-plane nodes do not count
        let n = vec![
            node(&[("foo", "bar")]),
            node(&[("node-role.kubernetes.io/control-plane", "")]),
        ];
        assert_eq!(
            aggregate_node_labels(&n, &["foo"], 1.0),
            node(&[("foo", "bar")])
        );
    }

    fn cond(type_: &str, status: &str, reason: &str, secs: i64) -> Condition {
        Condition {
            type_: type_.into(),
            status: status.into(),
            reason: reason.into(),
            message: String::new(),
            last_transition_time: Time(
                Timestamp::from_second(secs).unwrap_or(Timestamp::UNIX_EPOCH),
            ),
            observed_generation: None,
        }
    }

    #[test]
    fn conditions_merge_as_upstream() {
        let prev = vec![
            cond("Ready", "True", "A", 10),
            cond("ClusterInit", "True", "Done", 5),
        ];
        // same Ready: takes the new transition time (heartbeat); ClusterInit untouched
        let merged = merge_conditions(&prev, &[cond("Ready", "True", "A", 20)]);
        assert_eq!(
            merged[0].last_transition_time,
            cond("x", "", "", 20).last_transition_time
        );
        assert_eq!(merged[1], prev[1]);
        // reason change only: transition time kept
        let merged = merge_conditions(&prev, &[cond("Ready", "True", "B", 30)]);
        assert_eq!(merged[0].reason, "B");
        assert_eq!(merged[0].last_transition_time, prev[0].last_transition_time);
        // status change: transition time moves
        let merged = merge_conditions(&prev, &[cond("Ready", "False", "B", 40)]);
        assert_eq!(
            merged[0].last_transition_time,
            cond("x", "", "", 40).last_transition_time
        );
        // new type appended
        assert_eq!(
            merge_conditions(&prev, &[cond("Other", "True", "C", 1)]).len(),
            3
        );
    }
}
