//! Layered configuration: built-in defaults < config file (`--config`) < `CLUSTERNET_*` environment
//! < command-line flags, merged with figment into one validated [`Config`].
//!
//! Keys are the flag names in snake_case (`--kube-api-qps` is `kube_api_qps`, env
//! `CLUSTERNET_KUBE_API_QPS`), so one vocabulary serves all three layers. Durations are written
//! the Go way (`15s`, `3m`, `1m30s`) because that is what Clusternet's flags take.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use figment::providers::{Env, Format, Serialized, Yaml};
use figment::{Figment, Provider};
use serde::{Deserialize, Serialize};

use crate::apis::known;
use crate::kube_ext::yaml::{self, YamlError};

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("invalid configuration: {0}")]
    Figment(#[from] Box<figment::Error>),
    #[error("config file {path}: {source}")]
    File {
        path: String,
        source: std::io::Error,
    },
    #[error("{0}")]
    Invalid(String),
}

/// A subsystem a process can run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Hub,
    Scheduler,
    #[serde(alias = "controller-manager")]
    Controller,
    Agent,
}

impl Role {
    pub const ALL: [Role; 4] = [Role::Hub, Role::Scheduler, Role::Controller, Role::Agent];

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Hub => "hub",
            Role::Scheduler => "scheduler",
            Role::Controller => "controller",
            Role::Agent => "agent",
        }
    }

    /// Upstream's leader-election Lease name for this role (the agent's Lease UID is the cluster ID).
    pub fn default_lease_name(self) -> &'static str {
        match self {
            Role::Hub => "clusternet-hub",
            Role::Scheduler => "clusternet-scheduler",
            Role::Controller => "clusternet-controller-manager",
            Role::Agent => "clusternet-agent",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Role {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "hub" => Ok(Role::Hub),
            "scheduler" => Ok(Role::Scheduler),
            "controller" | "controller-manager" => Ok(Role::Controller),
            "agent" => Ok(Role::Agent),
            other => Err(format!(
                "unknown role {other:?}: valid roles are hub, scheduler, controller (alias controller-manager), agent"
            )),
        }
    }
}

/// The effective configuration of one process.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    pub roles: Vec<Role>,
    pub kubeconfig: Option<String>,
    pub kube_api_qps: f32,
    pub kube_api_burst: u32,
    /// HTTP/2 to the process's own API server when offered (`--kube-api-http2`, default true).
    pub kube_api_http2: bool,
    /// Gate name -> enabled, after defaults and `--feature-gates` are merged.
    pub feature_gates: BTreeMap<String, bool>,

    pub leader_elect: bool,
    #[serde(with = "go_duration")]
    pub leader_elect_lease_duration: Duration,
    #[serde(with = "go_duration")]
    pub leader_elect_renew_deadline: Duration,
    #[serde(with = "go_duration")]
    pub leader_elect_retry_period: Duration,
    pub leader_elect_resource_namespace: String,
    /// Lease name per role; defaults are upstream's names.
    pub lease_names: BTreeMap<Role, String>,

    pub health_bind_address: String,
    pub log_format: LogFormat,
    pub log_filter: String,

    pub reserved_namespace: String,
    pub system_namespace: String,
    /// Controller: namespace of the published ClusterProfiles (empty: none).
    pub cluster_profile_namespace: String,
    /// Controller: the fleet's ClusterSet name.
    pub cluster_set: String,
    /// Controller: the parent's address the ClusterProfiles' access providers name (default: the
    /// address this process reaches the parent at).
    pub cluster_profile_server: Option<String>,
    /// Controller: the CA bundle (PEM file) the access providers carry for that address
    /// (default: the CA this process trusts the parent with).
    pub cluster_profile_ca_file: Option<String>,

    pub bind_address: String,
    pub secure_port: u16,
    pub tls_cert_file: Option<String>,
    pub tls_private_key_file: Option<String>,
    /// Address peers dial; `None` derives it from the bind address (hub.md §2.6).
    pub peer_advertise_address: Option<String>,
    pub peer_port: u16,
    pub peer_token: String,
    /// Hub: live agent tunnel sessions one cluster may hold at this hub (0: no limit); more
    /// upgrades are refused with 429 (issue #21).
    pub max_tunnel_sessions_per_cluster: usize,
    /// Hub: watches (shadow API and proxied into children) one user may hold open at this hub
    /// (0: no limit); more are refused with 429.
    pub max_watches_per_user: usize,
    /// Hub: a proxied connection (exec/attach/port-forward, a streamed response) that moves no
    /// byte for this long is closed (0: never).
    #[serde(with = "go_duration")]
    pub proxy_idle_timeout: Duration,
    /// Hub: a proxied request that hands over no child credentials goes into the child as its
    /// own caller, impersonated with the cluster's `child-cluster-deployer` credentials (hub.md
    /// §2.3.1); false: upstream's behaviour (it goes anonymous).
    pub proxy_impersonation: bool,

    pub scheduler_config: Option<String>,

    pub cluster_reg_parent_url: Option<String>,
    pub cluster_reg_token: Option<String>,
    pub cluster_reg_name: Option<String>,
    pub cluster_reg_name_prefix: String,
    pub cluster_reg_namespace: Option<String>,
    pub cluster_reg_type: String,
    pub cluster_sync_mode: String,
    pub cluster_labels: Option<String>,
    #[serde(with = "go_duration")]
    pub cluster_status_update_frequency: Duration,
    #[serde(with = "go_duration")]
    pub cluster_status_collect_frequency: Duration,
    /// How long the child's health probes must keep failing before the agent reports the cluster
    /// not ready (a short stall of the child's storage must not look like a lost cluster).
    #[serde(with = "go_duration")]
    pub cluster_health_failure_window: Duration,
    /// Controller: a cluster that was not ready and is unbound keeps its Bases (and so every object
    /// running there) until it has been Ready again for this long and is still not bound.
    #[serde(with = "go_duration")]
    pub cluster_recovery_grace: Duration,
    /// Scheduler (gate FailOver): how long a bound cluster may be not ready before its
    /// Subscriptions fail over to other clusters (a Subscription's `tolerationSeconds` on the
    /// `clusters.clusternet.io/unschedulable` taint overrides it).
    #[serde(with = "go_duration")]
    pub cluster_failover_grace: Duration,
    /// Scheduler: write `status.lastDecision` with every binding (`--record-scheduling-decisions`).
    pub record_scheduling_decisions: bool,
    /// Scheduler: how long a failed-over cluster must have been Ready before it gets its share
    /// back; also the least time between two fail-backs of one cluster (hysteresis).
    #[serde(with = "go_duration")]
    pub cluster_failback_stable: Duration,
    /// Scheduler: replicas a fail-back may add above a Subscription's count while the returning
    /// cluster is not yet available: "25%" of the replicas (rounded up) or a number.
    pub failback_max_surge: String,
    /// Scheduler: lost clusters per second whose Subscriptions are failed over.
    pub failover_eviction_rate: f64,
    /// The deploying side: the helm v3 executable HelmReleases are installed with (a path, or a
    /// name looked up in PATH).
    pub helm_binary: String,
    /// Controller: kubeconfig of a Cluster API management cluster (empty: no discovery).
    pub cluster_api_kubeconfig: String,
    /// The deploying side (agent in Pull, controller in Push): how often every applied object is
    /// compared with its desired state even when its watch said nothing (a safety net: drift is
    /// seen through watches at once). A comparison writes nothing unless something drifted.
    #[serde(with = "go_duration")]
    pub drift_resync: Duration,
    /// The deploying side: field managers of the child whose take-over of a field Clusternet
    /// applied is left to them (autoscalers, the built-in controllers).
    pub retain_managers: Vec<String>,
    pub labels_aggregate_threshold: f64,
    pub predictor_port: u16,
    pub predictor_addr: Option<String>,
    pub predictor_direct_access: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Text,
    Json,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            roles: Vec::new(),
            kubeconfig: None,
            kube_api_qps: 100.0,
            kube_api_burst: 200,
            kube_api_http2: true,
            feature_gates: BTreeMap::new(),
            leader_elect: true,
            leader_elect_lease_duration: Duration::from_secs(15),
            leader_elect_renew_deadline: Duration::from_secs(10),
            leader_elect_retry_period: Duration::from_secs(2),
            leader_elect_resource_namespace: known::CLUSTERNET_SYSTEM_NAMESPACE.to_string(),
            lease_names: Role::ALL
                .iter()
                .map(|r| (*r, r.default_lease_name().to_string()))
                .collect(),
            health_bind_address: "0.0.0.0:10660".to_string(),
            log_format: LogFormat::Text,
            log_filter: "info".to_string(),
            reserved_namespace: known::CLUSTERNET_RESERVED_NAMESPACE.to_string(),
            system_namespace: known::CLUSTERNET_SYSTEM_NAMESPACE.to_string(),
            cluster_profile_namespace: known::CLUSTERNET_SYSTEM_NAMESPACE.to_string(),
            cluster_set: "clusternet".to_string(),
            cluster_profile_server: None,
            cluster_profile_ca_file: None,
            bind_address: "0.0.0.0".to_string(),
            secure_port: 443,
            tls_cert_file: None,
            tls_private_key_file: None,
            peer_advertise_address: None,
            peer_port: 8123,
            peer_token: "Cheugy".to_string(),
            max_tunnel_sessions_per_cluster: 4,
            max_watches_per_user: 100,
            proxy_idle_timeout: Duration::from_secs(30 * 60),
            proxy_impersonation: true,
            scheduler_config: None,
            cluster_reg_parent_url: None,
            cluster_reg_token: None,
            cluster_reg_name: None,
            cluster_reg_name_prefix: "clusternet-cluster".to_string(),
            cluster_reg_namespace: None,
            cluster_reg_type: "StandardCluster".to_string(),
            cluster_sync_mode: "Pull".to_string(),
            cluster_labels: None,
            cluster_status_update_frequency: Duration::from_secs(180),
            cluster_status_collect_frequency: Duration::from_secs(20),
            cluster_health_failure_window: Duration::from_secs(40),
            cluster_recovery_grace: Duration::from_secs(60),
            drift_resync: Duration::from_secs(600),
            cluster_failover_grace: Duration::from_secs(60),
            record_scheduling_decisions: true,
            cluster_failback_stable: Duration::from_secs(300),
            failback_max_surge: "25%".into(),
            helm_binary: "helm".into(),
            cluster_api_kubeconfig: String::new(),
            failover_eviction_rate: 0.1,
            retain_managers: known::DEFAULT_RETAIN_MANAGERS
                .iter()
                .map(|m| m.to_string())
                .collect(),
            labels_aggregate_threshold: 0.8,
            predictor_port: 8080,
            predictor_addr: None,
            predictor_direct_access: false,
        }
    }
}

/// Feature gates a role turns on by default: the set upstream's shipped manifests enable for that
/// component, because that is what a Clusternet user actually runs (upstream's compiled-in defaults
/// are all off). `--feature-gates` overrides each gate individually.
fn default_gates(roles: &[Role]) -> BTreeMap<String, bool> {
    let mut gates: BTreeMap<String, bool> = known::FEATURE_GATES
        .iter()
        .map(|g| (g.to_string(), false))
        .collect();
    for role in roles {
        let on: &[&str] = match role {
            Role::Hub => &["SocketConnection", "ShadowAPI"],
            Role::Controller => &[
                "SocketConnection",
                "Deployer",
                "FeedInUseProtection",
                "FeedInventory",
            ],
            Role::Scheduler => &["FailOver", "FeasibleClustersToleration"],
            Role::Agent => &["SocketConnection", "AppPusher", "Recovery", "Predictor"],
        };
        for g in on {
            gates.insert(g.to_string(), true);
        }
    }
    gates
}

/// Parses `--feature-gates` (`A=true,B=false`), rejecting unknown gates with the list of valid ones.
pub fn parse_feature_gates(spec: &str) -> Result<BTreeMap<String, bool>, ConfigError> {
    let mut out = BTreeMap::new();
    for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (name, value) = item.split_once('=').ok_or_else(|| {
            ConfigError::Invalid(format!(
                "feature gate {item:?} is not of the form Name=true|false"
            ))
        })?;
        let name = name.trim();
        if !known::FEATURE_GATES.contains(&name) {
            return Err(ConfigError::Invalid(format!(
                "unknown feature gate {name:?}; valid gates: {}",
                known::FEATURE_GATES.join(", ")
            )));
        }
        let value = match value.trim() {
            "true" | "True" | "TRUE" | "1" => true,
            "false" | "False" | "FALSE" | "0" => false,
            v => {
                return Err(ConfigError::Invalid(format!(
                    "feature gate {name}: {v:?} is not true or false"
                )));
            }
        };
        out.insert(name.to_string(), value);
    }
    Ok(out)
}

/// What the command line hands the configuration, highest layer first: the flags as a figment
/// provider (keys as in [`Config`], only the flags given), and the flags that are not plain
/// keys (comma lists and per-role names), which `load` merges itself.
pub struct Layers<P: Provider> {
    /// `--config`: the YAML file layer.
    pub config_file: Option<std::path::PathBuf>,
    pub flags: P,
    /// `--role`, empty when not given.
    pub roles: Vec<Role>,
    /// `--feature-gates`, as written.
    pub feature_gates: Option<String>,
    /// `--leader-elect-resource-name` (one role only).
    pub lease_name: Option<String>,
}

impl Config {
    /// Merges every layer and validates the result.
    pub fn load<P: Provider>(layers: Layers<P>) -> Result<Config, ConfigError> {
        let Layers {
            config_file,
            flags,
            mut roles,
            feature_gates: gates_flag,
            lease_name: lease_name_flag,
        } = layers;
        let mut fig = Figment::from(Serialized::defaults(Config::default()));
        if let Some(path) = &config_file {
            if !path.exists() {
                return Err(ConfigError::File {
                    path: path.display().to_string(),
                    source: std::io::Error::new(std::io::ErrorKind::NotFound, "no such file"),
                });
            }
            fig = fig.merge(Yaml::file_exact(path));
        }
        // `feature_gates` and `roles` come as comma strings from env and flags: handled below.
        // Only keys the config knows: other CLUSTERNET_* variables (the test harness's, say) are not ours.
        let known_keys: Vec<String> = match serde_json::to_value(Config::default()) {
            Ok(serde_json::Value::Object(m)) => m
                .keys()
                .filter(|k| !matches!(k.as_str(), "feature_gates" | "roles" | "lease_names"))
                .cloned()
                .collect(),
            _ => Vec::new(),
        };
        fig = fig.merge(
            Env::prefixed("CLUSTERNET_")
                .filter(move |k| known_keys.iter().any(|known| k == known.as_str()))
                .map(|k| k.as_str().to_ascii_lowercase().into()),
        );
        fig = fig.merge(flags);
        let mut cfg: Config = fig
            .extract()
            .map_err(|e| ConfigError::Figment(Box::new(e)))?;

        if roles.is_empty()
            && let Ok(env_roles) =
                std::env::var("CLUSTERNET_ROLE").or_else(|_| std::env::var("CLUSTERNET_ROLES"))
        {
            roles = env_roles
                .split(',')
                .filter(|s| !s.trim().is_empty())
                .map(str::parse)
                .collect::<Result<_, _>>()
                .map_err(ConfigError::Invalid)?;
        }
        if !roles.is_empty() {
            cfg.roles = roles;
        }
        cfg.roles.sort();
        cfg.roles.dedup();

        let mut gates = default_gates(&cfg.roles);
        // file layer: explicit map entries override the role defaults
        for (k, v) in std::mem::take(&mut cfg.feature_gates) {
            if !known::FEATURE_GATES.contains(&k.as_str()) {
                return Err(ConfigError::Invalid(format!(
                    "unknown feature gate {k:?}; valid gates: {}",
                    known::FEATURE_GATES.join(", ")
                )));
            }
            gates.insert(k, v);
        }
        if let Ok(env_gates) = std::env::var("CLUSTERNET_FEATURE_GATES") {
            gates.extend(parse_feature_gates(&env_gates)?);
        }
        if let Some(g) = gates_flag {
            gates.extend(parse_feature_gates(&g)?);
        }
        cfg.feature_gates = gates;

        if let Some(name) = lease_name_flag {
            match cfg.roles.as_slice() {
                [single] => {
                    cfg.lease_names.insert(*single, name);
                }
                _ => {
                    return Err(ConfigError::Invalid(
                        "--leader-elect-resource-name needs exactly one --role; set lease_names per role in the config file instead".into(),
                    ));
                }
            }
        }
        cfg.validate()?;
        Ok(cfg)
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |m: String| Err(ConfigError::Invalid(m));
        if self.kube_api_qps <= 0.0 {
            return bad(format!(
                "kube_api_qps must be > 0, got {}",
                self.kube_api_qps
            ));
        }
        if self.leader_elect_renew_deadline >= self.leader_elect_lease_duration {
            return bad(
                "leader_elect_renew_deadline must be shorter than leader_elect_lease_duration"
                    .into(),
            );
        }
        if self.leader_elect_retry_period.is_zero()
            || self.leader_elect_retry_period >= self.leader_elect_renew_deadline
        {
            return bad("leader_elect_retry_period must be > 0 and shorter than leader_elect_renew_deadline".into());
        }
        if !["StandardCluster", "EdgeCluster"].contains(&self.cluster_reg_type.as_str()) {
            return bad(format!(
                "cluster_reg_type {:?} is invalid: valid values are StandardCluster, EdgeCluster",
                self.cluster_reg_type
            ));
        }
        if !["Push", "Pull", "Dual"].contains(&self.cluster_sync_mode.as_str()) {
            return bad(format!(
                "cluster_sync_mode {:?} is invalid: valid values are Push, Pull, Dual",
                self.cluster_sync_mode
            ));
        }
        if self.cluster_sync_mode == "Push" && !self.gate("AppPusher") {
            return bad("cluster_sync_mode Push needs the AppPusher feature gate".into());
        }
        if let Err(e) = Surge::parse(&self.failback_max_surge) {
            return bad(format!("failback_max_surge: {e}"));
        }
        if !(self.failover_eviction_rate > 0.0 && self.failover_eviction_rate.is_finite()) {
            return bad(format!(
                "failover_eviction_rate must be a number of clusters per second > 0, got {}",
                self.failover_eviction_rate
            ));
        }
        if !(0.0..=1.0).contains(&self.labels_aggregate_threshold) {
            return bad(format!(
                "labels_aggregate_threshold must be within [0, 1], got {}",
                self.labels_aggregate_threshold
            ));
        }
        if self
            .health_bind_address
            .parse::<std::net::SocketAddr>()
            .is_err()
        {
            return bad(format!(
                "health_bind_address {:?} is not host:port",
                self.health_bind_address
            ));
        }
        Ok(())
    }

    /// How long the controller keeps the Bases of a cluster that was not ready and is unbound,
    /// once it is Ready again: `cluster_recovery_grace`, and never shorter than the scheduler's
    /// fail-back stable period (plus a margin for the cycle), so a returning cluster is bound
    /// again before anything of it is deleted and nothing running there is recreated.
    pub fn unbound_keep_window(&self) -> Duration {
        self.cluster_recovery_grace
            .max(self.cluster_failback_stable + Duration::from_secs(30))
    }

    pub fn gate(&self, name: &str) -> bool {
        self.feature_gates.get(name).copied().unwrap_or(false)
    }

    pub fn has_role(&self, role: Role) -> bool {
        self.roles.contains(&role)
    }

    pub fn lease_name(&self, role: Role) -> &str {
        self.lease_names
            .get(&role)
            .map(String::as_str)
            .unwrap_or(role.default_lease_name())
    }

    pub fn to_yaml(&self) -> Result<String, YamlError> {
        yaml::to_string(self)
    }
}

/// Go-style durations (`1h2m3s`, `500ms`, `15s`), the notation Clusternet's flags use.
pub fn parse_go_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    let mut total = 0f64;
    let mut rest = s;
    if rest.is_empty() {
        return Err("empty duration".into());
    }
    while !rest.is_empty() {
        let num_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| format!("duration {s:?} is missing a unit (ns, us, ms, s, m, h)"))?;
        let (num, tail) = rest.split_at(num_end);
        let value: f64 = num
            .parse()
            .map_err(|_| format!("duration {s:?}: {num:?} is not a number"))?;
        let unit_end = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, next) = tail.split_at(unit_end);
        let scale = match unit {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            u => {
                return Err(format!(
                    "duration {s:?}: unknown unit {u:?} (use ns, us, ms, s, m, h)"
                ));
            }
        };
        total += value * scale;
        rest = next;
    }
    Ok(Duration::from_secs_f64(total))
}

pub fn format_go_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if !ms.is_multiple_of(1000) {
        return format!("{ms}ms");
    }
    let secs = d.as_secs();
    let (h, m, s) = (secs / 3600, (secs % 3600) / 60, secs % 60);
    let mut out = String::new();
    if h > 0 {
        out.push_str(&format!("{h}h"));
    }
    if m > 0 {
        out.push_str(&format!("{m}m"));
    }
    if s > 0 || out.is_empty() {
        out.push_str(&format!("{s}s"));
    }
    out
}

mod go_duration {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&super::format_go_duration(*d))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Text(String),
            Secs(f64),
        }
        match Raw::deserialize(d)? {
            Raw::Text(t) => super::parse_go_duration(&t).map_err(serde::de::Error::custom),
            Raw::Secs(n) if n >= 0.0 => Ok(Duration::from_secs_f64(n)),
            Raw::Secs(n) => Err(serde::de::Error::custom(format!("negative duration {n}"))),
        }
    }
}

/// `--failback-max-surge`: a share of the replicas (rounded up) or a number; never below one.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Surge {
    Percent(u32),
    Replicas(i32),
}

impl Surge {
    pub fn parse(s: &str) -> Result<Surge, String> {
        use crate::kube_ext::intstr::CountOrPercent;
        let bad = || {
            format!("{s:?} is neither a percentage from 1% to 100% nor a number of replicas >= 1")
        };
        match CountOrPercent::parse(s) {
            Some(CountOrPercent::Percent(p)) if (1..=100).contains(&p) => {
                Ok(Surge::Percent(u32::try_from(p).map_err(|_| bad())?))
            }
            Some(CountOrPercent::Count(n)) if n >= 1 => {
                Ok(Surge::Replicas(i32::try_from(n).map_err(|_| bad())?))
            }
            _ => Err(bad()),
        }
    }

    /// The surge for a Subscription of `replicas`.
    pub fn of(self, replicas: i32) -> i32 {
        use crate::kube_ext::intstr::CountOrPercent;
        match self {
            Surge::Percent(p) => {
                let r = u64::try_from(replicas.max(0)).unwrap_or(0);
                i32::try_from(CountOrPercent::Percent(u64::from(p)).of(r)).unwrap_or(i32::MAX)
            }
            Surge::Replicas(n) => n,
        }
        .max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_parse_and_print() {
        assert_eq!(parse_go_duration("15s"), Ok(Duration::from_secs(15)));
        assert_eq!(parse_go_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_go_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_go_duration("3m"), Ok(Duration::from_secs(180)));
        assert!(parse_go_duration("15").is_err());
        assert!(parse_go_duration("5d").is_err());
        assert_eq!(format_go_duration(Duration::from_secs(180)), "3m");
        assert_eq!(format_go_duration(Duration::from_secs(3725)), "1h2m5s");
        assert_eq!(format_go_duration(Duration::from_millis(1500)), "1500ms");
    }

    #[test]
    fn roles_parse_with_alias_and_reject_unknown() {
        assert_eq!("controller-manager".parse::<Role>(), Ok(Role::Controller));
        let err = "bogus".parse::<Role>().unwrap_err();
        assert!(err.contains("hub, scheduler, controller"), "{err}");
    }

    #[test]
    fn feature_gates_reject_unknown_names() {
        let gates = parse_feature_gates("Deployer=true,ShadowAPI=false").expect("valid gates");
        assert_eq!(gates.get("Deployer"), Some(&true));
        assert_eq!(gates.get("ShadowAPI"), Some(&false));
        let err = parse_feature_gates("Nope=true").unwrap_err().to_string();
        assert!(
            err.contains("unknown feature gate") && err.contains("Deployer"),
            "{err}"
        );
        assert!(parse_feature_gates("Deployer=maybe").is_err());
    }
}
