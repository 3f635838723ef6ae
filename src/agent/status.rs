//! Heartbeat: the agent collects the child's state every collect period and writes it into its
//! ManagedCluster's status (docs/spec/status.md §2-§5): versions, health endpoints, node
//! statistics, capacity, CIDRs, gates, predictor fields and the `Ready` condition. It writes at
//! the update frequency it advertises (from the last state collected, as upstream's reporter),
//! and at once when something changed, never in between. A child API server that stops
//! answering is reported (`Ready=False`, `ChildAPIServerUnreachable`) within the renew deadline,
//! and the heartbeat goes on meanwhile. Node labels with the configured prefixes are aggregated
//! onto the ManagedCluster's labels.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::reflector::Store;
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio::sync::watch;

use crate::apis::clusters::ClusterPropertyValue;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::registration::Registration;
use crate::apis::clusters::{
    CONDITION_READY, MESSAGE_MANAGED_CLUSTER_READY, REASON_CHILD_APISERVER_UNREACHABLE,
    REASON_MANAGED_CLUSTER_NOT_READY, REASON_MANAGED_CLUSTER_READY, merge_conditions,
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
    #[error("the stored parent credentials (Secret parent-cluster) were rotated")]
    CredentialsRotated,
    #[error(
        "ManagedCluster of cluster {cluster_id} is gone from namespace {namespace} in the parent: the cluster was deregistered"
    )]
    ClusterDeleted {
        cluster_id: String,
        namespace: String,
    },
}

/// Whether the child's API server answers (any HTTP answer counts, a failing health check too).
#[derive(Debug, Clone, PartialEq)]
pub enum Reach {
    Answering,
    /// No answer since `since` (the last one), for at least the renew deadline.
    Silent {
        since: Timestamp,
        error: String,
    },
}

/// What the reachability probe publishes.
#[derive(Debug, Clone, PartialEq)]
pub struct Reachability {
    pub reach: Reach,
    /// How many times the child answered again after a silence: a collection started before the
    /// latest return saw the stall (see [`SilenceMemory`]).
    pub recoveries: u64,
}

/// Runs until `stop` (Ok) or until the parent side is gone (Err: the caller registers again).
///
/// Three loops, so that the child never holds up the heartbeat: the child's state is collected
/// every `--cluster-status-collect-frequency`; whether its API server answers at all is probed
/// every second; the heartbeat writes the last collected state every
/// `--cluster-status-update-frequency` (the period it advertises in `heartbeatFrequencySeconds`,
/// whatever the collect frequency: upstream's reporter works the same way), and at once when
/// the state changes. A child API server that does not answer for the renew deadline makes the
/// heartbeat say `Ready=False` (`ChildAPIServerUnreachable`) instead of going silent.
pub async fn run(
    rt: &Runtime,
    reg: &Registration,
    nodes: Store<Node>,
    predictor: Option<std::net::SocketAddr>,
    properties: &watch::Receiver<Vec<ClusterPropertyValue>>,
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
    let looking = stop.child_token();
    let _stop_looking = looking.clone().drop_guard();
    let (reach_tx, mut reach) = watch::channel(Reachability {
        reach: Reach::Answering,
        recoveries: 0,
    });
    let (collected_tx, mut collected) = watch::channel(None::<Collected>);
    tokio::spawn(probe_reachability(
        rt.client.clone(),
        rt.cluster_url.clone(),
        cfg.leader_elect_renew_deadline,
        collect_every.min(PROBE_EVERY),
        reach_tx,
        looking.clone(),
    ));
    tokio::spawn(collect_loop(
        rt.clone(),
        nodes.clone(),
        predictor,
        collect_every,
        collected_tx,
        reach.clone(),
        looking,
    ));
    let mut last_written: Option<(ManagedClusterStatus, Instant)> = None;
    let mut retry_at: Option<Instant> = None;
    let mut missing_since: Option<Instant> = None;
    let mut silence = SilenceMemory::default();
    loop {
        let now_reach = reach.borrow_and_update().clone();
        let snapshot = collected.borrow_and_update().clone().map(|c| {
            let reach = silence.as_reported(&now_reach, c.recoveries);
            let mut status = with_reachability(c.status, &reach);
            // the About API's properties, as the agent's reader last saw them (about.rs)
            status.cluster_properties = properties.borrow().clone();
            status
        });
        if let Some(snapshot) = snapshot {
            let due = match &last_written {
                None => true,
                Some((prev, at)) => at.elapsed() >= heartbeat_every || !same_state(prev, &snapshot),
            } && retry_at.is_none_or(|at| Instant::now() >= at);
            if due {
                match write(rt, reg, &api, &nodes, snapshot.clone()).await {
                    Ok(()) => {
                        missing_since = None;
                        retry_at = None;
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
                        retry_at = Some(Instant::now() + WRITE_RETRY.min(heartbeat_every));
                    }
                    Err(WriteError::Other(e)) => {
                        metrics::counter!("clusternet_agent_heartbeats_total", "outcome" => "error")
                            .increment(1);
                        warn!(error = %e, "writing the cluster status failed; retrying");
                        retry_at = Some(Instant::now() + WRITE_RETRY.min(heartbeat_every));
                    }
                }
            }
        }
        let next = match (&last_written, retry_at) {
            (_, Some(at)) => at,
            (Some((_, at)), None) => *at + heartbeat_every,
            // nothing collected yet: the first collection wakes us
            (None, None) => Instant::now() + heartbeat_every,
        };
        tokio::select! {
            _ = stop.cancelled() => return Ok(()),
            _ = tokio::time::sleep_until(next.into()) => {}
            _ = collected.changed() => {}
            _ = reach.changed() => {}
        }
    }
}

/// One collection of the child's state, and how many times the child had come back from a
/// silence when it started.
#[derive(Debug, Clone)]
struct Collected {
    recoveries: u64,
    status: ManagedClusterStatus,
}

/// What the heartbeat remembers of the last silence: a collection that started before the child
/// answered again saw the stall, or predates it (its health probes may pass, through the health
/// window's hysteresis, and its `Ready` would date the recovery before the child answered), so it
/// is reported as the silence it was until a collection started after the child answered comes
/// in (the collector starts one at once).
#[derive(Debug, Default)]
pub struct SilenceMemory {
    last: Option<Reach>,
}

impl SilenceMemory {
    /// The reachability to report with a collection started after `recoveries` returns, the
    /// probe saying `now`.
    pub fn as_reported(&mut self, now: &Reachability, recoveries: u64) -> Reach {
        match (&now.reach, &self.last) {
            (Reach::Silent { .. }, _) => {
                self.last = Some(now.reach.clone());
                now.reach.clone()
            }
            (Reach::Answering, Some(silent)) if recoveries < now.recoveries => silent.clone(),
            (Reach::Answering, _) => {
                self.last = None;
                Reach::Answering
            }
        }
    }
}

/// How often the child's API server is asked whether it answers (less often when the collect
/// frequency is longer than this; the tests' is shorter).
const PROBE_EVERY: Duration = Duration::from_secs(1);
/// How long one reachability probe may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// How soon a heartbeat that could not be written is tried again.
const WRITE_RETRY: Duration = Duration::from_secs(2);

/// The snapshot as the heartbeat reports it: with a silent child API server, `Ready=False`
/// (`ChildAPIServerUnreachable`) and failed health probes, whatever the last collection saw.
pub fn with_reachability(mut s: ManagedClusterStatus, reach: &Reach) -> ManagedClusterStatus {
    if let Reach::Silent { since, error } = reach {
        s.healthz = false;
        s.livez = false;
        s.readyz = false;
        let message = format!(
            "the child cluster's API server has not answered since {since} ({error}); the agent keeps heartbeating and reports Ready as soon as it answers"
        );
        s.conditions = vec![Condition {
            type_: CONDITION_READY.into(),
            status: "False".into(),
            reason: REASON_CHILD_APISERVER_UNREACHABLE.into(),
            message,
            last_transition_time: Time(*since),
            observed_generation: None,
        }];
    }
    s
}

/// Probes the child's API server every `every` until `stop`, publishing whether it answers: silent
/// once it has not answered for `threshold` (the renew deadline: the agent would have lost a
/// Lease there by then), answering again at its first answer.
async fn probe_reachability(
    client: Client,
    url: String,
    threshold: Duration,
    every: Duration,
    reach: watch::Sender<Reachability>,
    stop: CancellationToken,
) {
    let mut last_answer = (Instant::now(), Timestamp::now());
    loop {
        let outcome = match http::Request::get("/livez").body(Vec::new()) {
            Ok(req) => match tokio::time::timeout(PROBE_TIMEOUT, client.request_text(req)).await {
                // a status code is an answer: unhealthy is the health probes' business
                Ok(Ok(_) | Err(kube::Error::Api(_))) => Ok(()),
                Ok(Err(e)) => Err(e.to_string()),
                Err(_) => Err(format!("no answer within {PROBE_TIMEOUT:?}")),
            },
            Err(e) => Err(e.to_string()),
        };
        match outcome {
            Ok(()) => {
                last_answer = (Instant::now(), Timestamp::now());
                reach.send_if_modified(|r| {
                    if r.reach == Reach::Answering {
                        return false;
                    }
                    info!(url = %url, "the child's API server answers again");
                    r.reach = Reach::Answering;
                    r.recoveries += 1;
                    true
                });
            }
            Err(error) => {
                if last_answer.0.elapsed() >= threshold {
                    reach.send_if_modified(|r| {
                        if r.reach != Reach::Answering {
                            return false;
                        }
                        warn!(url = %url, %error, silent_for = ?last_answer.0.elapsed(), "the child's API server does not answer; reporting it to the parent");
                        r.reach = Reach::Silent {
                            since: last_answer.1,
                            error,
                        };
                        true
                    });
                }
            }
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(every) => {}
        }
    }
}

/// Collects the child's state every `every` until `stop` (at once when its API server answers
/// again, so a recovered child is reported Ready within seconds, not a collect period later).
async fn collect_loop(
    rt: Runtime,
    nodes: Store<Node>,
    predictor: Option<std::net::SocketAddr>,
    every: Duration,
    out: watch::Sender<Option<Collected>>,
    mut reach: watch::Receiver<Reachability>,
    stop: CancellationToken,
) {
    let mut health = HealthWindow::default();
    loop {
        let recoveries = reach.borrow_and_update().recoveries;
        let status = tokio::select! {
            _ = stop.cancelled() => return,
            s = collect(&rt, &nodes, predictor, &mut health) => s,
        };
        out.send_replace(Some(Collected { recoveries, status }));
        let until = tokio::time::Instant::now() + every;
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep_until(until) => break,
                changed = reach.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    if reach.borrow_and_update().reach == Reach::Answering {
                        break;
                    }
                }
            }
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
        // kstatus-style: the agent's Ready speaks for the ManagedCluster as it was read
        for c in status.conditions.iter_mut().filter(|c| c.type_ == "Ready") {
            c.observed_generation = mc.metadata.generation;
        }
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

/// Consecutive failed rounds needed (besides the failure window) before the cluster is reported
/// not ready: one slow round must never be enough.
const MIN_FAILED_ROUNDS: u32 = 3;

/// How long one call to the child may take within a collection round: a stalled child API server
/// must not stop the heartbeat to the parent (which would make the parent think it lost us).
const CHILD_CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// Hysteresis for the `Ready` condition: the child's health probes must fail for the whole
/// `--cluster-health-failure-window` and over at least [`MIN_FAILED_ROUNDS`] rounds in a row before
/// the agent reports not ready; one good round resets it. Upstream evaluates the probes once per
/// round, so a few seconds of etcd stall made a healthy child look lost.
#[derive(Debug, Default)]
pub struct HealthWindow {
    failing_since: Option<Instant>,
    failed_rounds: u32,
}

impl HealthWindow {
    /// Records one round's probe result; returns whether the cluster counts as ready.
    pub fn observe(&mut self, healthy: bool, now: Instant, window: Duration) -> bool {
        if healthy {
            if let Some(since) = self.failing_since.take() {
                info!(failing_for = ?now.duration_since(since), rounds = self.failed_rounds, "the child's health probes pass again");
            }
            self.failed_rounds = 0;
            return true;
        }
        let since = *self.failing_since.get_or_insert(now);
        self.failed_rounds = self.failed_rounds.saturating_add(1);
        let failing_for = now.duration_since(since);
        let ready = self.failed_rounds < MIN_FAILED_ROUNDS || failing_for < window;
        if ready {
            warn!(failing_for = ?failing_for, rounds = self.failed_rounds, window = ?window, "the child's health probes fail; still reporting Ready until they fail for the whole window");
        }
        ready
    }
}

async fn probe(client: &Client, path: &str) -> bool {
    let Ok(req) = http::Request::get(path).body(Vec::new()) else {
        return false;
    };
    matches!(
        tokio::time::timeout(CHILD_CALL_TIMEOUT, client.request_text(req)).await,
        Ok(Ok(_))
    )
}

/// One snapshot of the child (status.md §2).
pub async fn collect(
    rt: &Runtime,
    nodes: &Store<Node>,
    predictor: Option<std::net::SocketAddr>,
    health: &mut HealthWindow,
) -> ManagedClusterStatus {
    let cfg = &rt.config;
    let client = &rt.client;
    let (k8s_version, platform) = child_version(client).await;
    let (healthz, livez, readyz) = tokio::join!(
        probe(client, "/healthz"),
        probe(client, "/livez"),
        probe(client, "/readyz")
    );
    let nodes = summarize_nodes(&nodes.state());
    let ready = health.observe(
        (livez && readyz) || healthz,
        Instant::now(),
        cfg.cluster_health_failure_window,
    );
    let (cluster_cidr, service_cidr) =
        tokio::time::timeout(CHILD_CALL_TIMEOUT, discover_cidrs(client))
            .await
            .unwrap_or_default();
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
        allocatable: nodes.allocatable,
        capacity: nodes.capacity,
        cluster_cidr,
        service_cidr,
        node_statistics: nodes.statistics,
        pod_statistics: None,
        resource_usage: None,
        conditions: vec![ready_condition(ready, Time(Timestamp::now()))],
        heartbeat_frequency_seconds: Some(
            cfg.cluster_status_update_frequency.as_secs().max(1) as i64
        ),
        predictor_enabled: !predictor_address(cfg, predictor).is_empty(),
        predictor_address: predictor_address(cfg, predictor),
        predictor_direct_access: cfg.predictor_direct_access,
        // filled in from the About API's reader at each heartbeat (run)
        cluster_properties: Vec::new(),
    }
}

/// The child's git version and platform, empty when it cannot be read in time.
async fn child_version(client: &Client) -> (String, String) {
    match tokio::time::timeout(CHILD_CALL_TIMEOUT, client.apiserver_version()).await {
        Ok(Ok(v)) => (v.git_version, v.platform),
        Ok(Err(e)) => {
            debug!(error = %e, "reading the child's version failed");
            (String::new(), String::new())
        }
        Err(_) => {
            debug!("reading the child's version timed out");
            (String::new(), String::new())
        }
    }
}

/// The `Ready` condition a snapshot reports.
fn ready_condition(ready: bool, now: Time) -> Condition {
    let (status, reason, message) = if ready {
        (
            "True",
            REASON_MANAGED_CLUSTER_READY,
            MESSAGE_MANAGED_CLUSTER_READY,
        )
    } else {
        (
            "False",
            REASON_MANAGED_CLUSTER_NOT_READY,
            "managed cluster is not ready.",
        )
    };
    Condition {
        type_: CONDITION_READY.into(),
        status: status.into(),
        reason: reason.into(),
        message: message.into(),
        last_transition_time: now,
        observed_generation: None,
    }
}

/// The nodes summed up: how many are ready, not ready, unknown or lost (no Ready condition),
/// and the cluster's capacity and allocatable (cpu, memory, and GPUs when a node has them).
#[derive(Debug, Default, PartialEq)]
pub struct NodeSummary {
    pub statistics: NodeStatistics,
    pub capacity: BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
    pub allocatable: BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
}

pub fn summarize_nodes(nodes: &[impl std::borrow::Borrow<Node>]) -> NodeSummary {
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    let mut stats = NodeStatistics::default();
    let (mut cpu_cap, mut mem_cap, mut gpu_cap) = (0_i128, 0_i128, 0_i128);
    let (mut cpu_alloc, mut mem_alloc, mut gpu_alloc) = (0_i128, 0_i128, 0_i128);
    let mut has_gpu = false;
    let get = |m: &BTreeMap<String, Quantity>, k: &str| {
        m.get(k).and_then(|q| quantity::milli(q).ok()).unwrap_or(0)
    };
    for node in nodes {
        let status = node.borrow().status.clone().unwrap_or_default();
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
        let gpu = known::GPU_RESOURCE_NAME.to_string();
        capacity.insert(gpu.clone(), quantity::format_decimal(gpu_cap));
        allocatable.insert(gpu, quantity::format_decimal(gpu_alloc));
    }
    NodeSummary {
        statistics: stats,
        capacity,
        allocatable,
    }
}

/// agent.md §4.1: an external predictor's address, else the built-in one on localhost, but only
/// while it really serves (`served`: the address it is bound to): a predictor that could not bind
/// its port is not advertised, or the scheduler would ask whatever else listens there.
pub fn predictor_address(
    cfg: &crate::config::Config,
    served: Option<std::net::SocketAddr>,
) -> String {
    if !cfg.gate(known::PREDICTOR) {
        return String::new();
    }
    match (
        cfg.predictor_addr.as_deref().filter(|a| !a.is_empty()),
        served,
    ) {
        (Some(a), _) => a.to_string(),
        (None, Some(addr)) => format!("http://localhost:{}", addr.port()),
        (None, None) => String::new(),
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
        HeartbeatEnd::CredentialsRejected | HeartbeatEnd::CredentialsRotated => {
            info!(error = %e, "registering again")
        }
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

    fn cluster_node(ready: Option<&str>, cpu: &str, memory: &str, gpus: Option<&str>) -> Node {
        let mut cap = json!({"cpu": cpu, "memory": memory});
        if let Some(g) = gpus {
            cap[known::GPU_RESOURCE_NAME] = json!(g);
        }
        let conditions = ready
            .map(|s| json!([{"type": "Ready", "status": s}]))
            .unwrap_or(json!([]));
        serde_json::from_value(json!({"metadata": {"name": "n"},
            "status": {"capacity": cap, "allocatable": cap, "conditions": conditions}}))
        .expect("a node")
    }

    #[test]
    fn nodes_are_counted_by_readiness_and_their_capacity_summed() {
        let nodes = [
            cluster_node(Some("True"), "2", "4Gi", None),
            cluster_node(Some("False"), "1500m", "1Gi", Some("2")),
            cluster_node(Some("Unknown"), "1", "512Mi", None),
            cluster_node(None, "500m", "512Mi", None),
        ];
        let s = summarize_nodes(&nodes);
        assert_eq!(
            (
                s.statistics.ready_nodes,
                s.statistics.not_ready_nodes,
                s.statistics.unknown_nodes,
                s.statistics.lost_nodes
            ),
            (1, 1, 1, 1)
        );
        assert_eq!(s.capacity["cpu"].0, "5");
        assert_eq!(s.capacity["memory"].0, "6Gi");
        assert_eq!(s.capacity[known::GPU_RESOURCE_NAME].0, "2");
        assert_eq!(s.allocatable, s.capacity);
        // no GPU on any node: none reported
        let s = summarize_nodes(&nodes[..1]);
        assert!(!s.capacity.contains_key(known::GPU_RESOURCE_NAME));
        assert_eq!(
            ready_condition(false, Time(Timestamp::UNIX_EPOCH)).status,
            "False"
        );
    }

    #[test]
    fn a_silent_child_api_server_is_reported_not_ready_from_its_last_answer() {
        let mut collected = ManagedClusterStatus {
            healthz: true,
            livez: true,
            readyz: true,
            conditions: vec![ready_condition(true, Time(Timestamp::UNIX_EPOCH))],
            ..Default::default()
        };
        collected.k8s_version = "v1.36.3".into();
        // answering: reported as collected
        assert_eq!(
            with_reachability(collected.clone(), &Reach::Answering),
            collected
        );
        let since: Timestamp = "2026-12-07T04:00:00Z".parse().expect("a time");
        let silent = Reach::Silent {
            since,
            error: "no answer within 2s".into(),
        };
        let reported = with_reachability(collected.clone(), &silent);
        let ready = reported.condition("Ready").expect("Ready");
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("False", REASON_CHILD_APISERVER_UNREACHABLE)
        );
        assert_eq!(ready.last_transition_time, Time(since));
        assert!(
            ready.message.contains("2026-12-07T04:00:00Z")
                && ready.message.contains("no answer within 2s"),
            "{}",
            ready.message
        );
        assert!(!reported.healthz && !reported.livez && !reported.readyz);
        // the rest of what was collected still goes up, and the change is a state change (written
        // at once, not at the next period)
        assert_eq!(reported.k8s_version, "v1.36.3");
        assert!(!same_state(&collected, &reported));
        // the same silence reported twice is the same state (no write per probe)
        assert!(same_state(
            &reported,
            &with_reachability(collected, &silent)
        ));
    }

    #[test]
    fn a_collection_from_before_the_child_answered_again_is_reported_as_the_silence() {
        let silent = Reach::Silent {
            since: Timestamp::UNIX_EPOCH,
            error: "no answer".into(),
        };
        let at = |reach: &Reach, recoveries| Reachability {
            reach: reach.clone(),
            recoveries,
        };
        let mut memory = SilenceMemory::default();
        // never silent: as the probe says
        assert_eq!(
            memory.as_reported(&at(&Reach::Answering, 0), 0),
            Reach::Answering
        );
        // silent: reported so whatever the collection
        assert_eq!(memory.as_reported(&at(&silent, 0), 0), silent);
        // answering again: a collection from before (during the stall, or before it began)
        // still reports the silence
        assert_eq!(memory.as_reported(&at(&Reach::Answering, 1), 0), silent);
        assert_eq!(memory.as_reported(&at(&Reach::Answering, 1), 0), silent);
        // the first collection started after the answer: answering, and the silence forgotten
        assert_eq!(
            memory.as_reported(&at(&Reach::Answering, 1), 1),
            Reach::Answering
        );
        assert_eq!(
            memory.as_reported(&at(&Reach::Answering, 1), 0),
            Reach::Answering
        );
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

    #[test]
    fn only_a_serving_predictor_is_advertised() {
        let mut cfg = crate::config::Config::default();
        cfg.feature_gates.insert(known::PREDICTOR.to_string(), true);
        let bound: std::net::SocketAddr = ([127, 0, 0, 1], 41234).into();
        assert_eq!(
            predictor_address(&cfg, Some(bound)),
            "http://localhost:41234"
        );
        // the port could not be bound: nothing is advertised
        assert_eq!(predictor_address(&cfg, None), "");
        cfg.predictor_addr = Some("http://predictor.example:9000".into());
        assert_eq!(
            predictor_address(&cfg, None),
            "http://predictor.example:9000"
        );
        cfg.feature_gates
            .insert(known::PREDICTOR.to_string(), false);
        assert_eq!(predictor_address(&cfg, Some(bound)), "");
    }

    #[test]
    fn one_failed_round_does_not_make_the_cluster_not_ready() {
        let window = Duration::from_secs(40);
        let t0 = Instant::now();
        let mut h = HealthWindow::default();
        assert!(h.observe(true, t0, window));
        // a 4 s stall: many failed rounds, but shorter than the window
        for i in 1..=8 {
            assert!(h.observe(false, t0 + Duration::from_millis(500 * i), window));
        }
        assert!(h.observe(true, t0 + Duration::from_secs(5), window));
        // failing for the whole window, but in fewer than three rounds (slow rounds): still ready
        let mut h = HealthWindow::default();
        assert!(h.observe(false, t0, window));
        assert!(h.observe(false, t0 + Duration::from_secs(60), window));
        // the third consecutive failed round past the window: not ready
        assert!(!h.observe(false, t0 + Duration::from_secs(61), window));
        assert!(!h.observe(false, t0 + Duration::from_secs(62), window));
        // one good round resets it
        assert!(h.observe(true, t0 + Duration::from_secs(63), window));
        assert!(h.observe(false, t0 + Duration::from_secs(64), window));
    }
}
