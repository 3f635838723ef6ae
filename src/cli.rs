//! Command line: the `--role` list, upstream's flag names, and the subcommands.
//!
//! Flags keep Clusternet's own names (agent, hub, scheduler and controller-manager flags) so
//! existing manifests and scripts keep working; every flag is optional here because its value is
//! layered over the config file and the environment (see `config`).

use clap::{Args, Parser, Subcommand};
use serde::Serialize;

use figment::providers::Serialized;

use crate::config::{Layers, Role};

#[derive(Debug, Parser)]
#[command(
    name = "clusternet",
    version = crate::VERSION,
    about = "Clusternet multi-cluster manager: hub, scheduler, controller and agent in one binary",
    long_about = "Clusternet multi-cluster manager: hub, scheduler, controller and agent in one binary.\n\n\
        Run with --role=hub,scheduler,controller on the parent cluster and --role=agent in each child.\n\
        Roles: hub, scheduler, controller (alias controller-manager), agent.",
    args_conflicts_with_subcommands = true,
    // as Go's flag packages: a flag given twice takes the last value
    args_override_self = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub run: RunFlags,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print every Clusternet CRD as YAML (or write one file per CRD with --out)
    Crds {
        /// Write one file per CRD into this directory instead of printing
        #[arg(long, value_name = "DIR")]
        out: Option<std::path::PathBuf>,
    },
    /// Print the version
    Version {
        /// Output format: short, yaml or json
        #[arg(long, short = 'o', default_value = "short", value_parser = ["short", "yaml", "json"])]
        output: String,
    },
    /// Print a shell completion script: `source <(clusternet completion bash)`
    Completion {
        /// bash, zsh, fish, elvish or powershell
        shell: clap_complete::Shell,
    },
    /// Print the effective configuration (defaults < --config file < CLUSTERNET_* env < flags) as YAML
    Config {
        #[command(flatten)]
        run: RunFlags,
    },
    /// Run the given roles (the default when no subcommand is given)
    Run {
        #[command(flatten)]
        run: RunFlags,
    },
}

/// Flags of a running process. `None` means "not given", so lower config layers show through.
#[derive(Debug, Clone, Default, Args, Serialize)]
pub struct RunFlags {
    /// Roles to run in this process: comma list of hub, scheduler, controller (alias controller-manager), agent
    #[arg(long = "role", value_delimiter = ',', value_parser = parse_role, value_name = "ROLES")]
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub roles: Vec<Role>,

    /// Config file (YAML); see config/ for examples
    #[arg(long, value_name = "FILE")]
    #[serde(skip)]
    pub config: Option<std::path::PathBuf>,

    /// Kubeconfig of the cluster this process runs against (the parent for hub/scheduler/controller, the child for agent)
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kubeconfig: Option<String>,
    /// QPS to the Kubernetes API server
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kube_api_qps: Option<f32>,
    /// Burst to the Kubernetes API server
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kube_api_burst: Option<u32>,
    /// Speak HTTP/2 to the Kubernetes API server when it offers it (one multiplexed connection,
    /// as client-go); false keeps HTTP/1.1 (a connection per request in flight)
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kube_api_http2: Option<bool>,
    /// Feature gates, e.g. SocketConnection=true,Deployer=true (repeatable: the uses add up, as
    /// Kubernetes components' --feature-gates do)
    #[arg(long, value_name = "GATES")]
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub feature_gates: Vec<String>,

    /// Take part in leader election (one Lease per role)
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub leader_elect: Option<bool>,
    /// How long a non-renewed lease stays valid, e.g. 15s
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub leader_elect_lease_duration: Option<String>,
    /// How long the leader keeps trying to renew before it gives up, e.g. 10s
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub leader_elect_renew_deadline: Option<String>,
    /// Wait between election attempts, e.g. 2s
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub leader_elect_retry_period: Option<String>,
    /// Lease name; only with a single role (use lease_names in the config file for several)
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub leader_elect_resource_name: Option<String>,
    /// Namespace of the leader-election Leases
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub leader_elect_resource_namespace: Option<String>,

    /// Address of /healthz, /readyz and /metrics (host:port; port 0 picks a free one)
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub health_bind_address: Option<String>,
    /// Log format: text or json
    #[arg(long, value_parser = ["text", "json"])]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_format: Option<String>,
    /// Log filter in RUST_LOG syntax, e.g. info,clusternet=debug
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_filter: Option<String>,

    /// Namespace holding Manifests (the shadow API's templates)
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reserved_namespace: Option<String>,
    /// Namespace Clusternet itself runs in
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub system_namespace: Option<String>,
    /// Controller: namespace of the ClusterProfiles published for other tools, one per
    /// ManagedCluster (empty: none are published)
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster_profile_namespace: Option<String>,
    /// Controller: the ClusterSet the fleet forms (the ClusterProfile namespace's
    /// multicluster.x-k8s.io/clusterset label and each profile's clusterset.k8s.io property)
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster_set: Option<String>,
    /// Controller: the parent's address the ClusterProfiles' access providers name, as their
    /// consumers reach it (default: the address this process reaches the parent at)
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster_profile_server: Option<String>,
    /// Controller: CA bundle (PEM file) of that address, for the access providers (default: the
    /// CA this process trusts the parent with)
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster_profile_ca_file: Option<String>,

    // --- hub ---
    /// Hub: address the aggregated API server binds to
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bind_address: Option<String>,
    /// Hub: port of the aggregated API server
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secure_port: Option<u16>,
    /// Hub: serving certificate (PEM); a self-signed one is generated when absent
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_cert_file: Option<String>,
    /// Hub: serving key (PEM)
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_private_key_file: Option<String>,
    /// Hub: address other hub replicas dial for peer tunnels (default: the bind address, else the
    /// host's default-interface IP)
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peer_advertise_address: Option<String>,
    /// Hub: port of the peer tunnel listener (only with --leader-elect)
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peer_port: Option<u16>,
    /// Hub: shared secret hub replicas present to each other
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peer_token: Option<String>,
    /// Hub: live agent tunnel sessions one cluster may hold at this hub; more are refused with
    /// 429 (0: no limit)
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tunnel_sessions_per_cluster: Option<usize>,
    /// Hub: watches (shadow API and proxied into children) one user may hold open at this hub;
    /// more are refused with 429 (0: no limit)
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_watches_per_user: Option<usize>,
    /// Hub: close a proxied exec/attach/port-forward or streamed response after it moved no byte
    /// for this long, e.g. 30m (0: never)
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub proxy_idle_timeout: Option<String>,
    /// Hub: a proxied request that hands over no child credentials reaches the child as its own
    /// caller, impersonated with the cluster's child-cluster-deployer credentials (false:
    /// upstream's behaviour, it goes anonymous)
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub proxy_impersonation: Option<bool>,

    // --- scheduler ---
    /// Scheduler: scheduler profile file (upstream's scheduler --config)
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scheduler_config: Option<String>,

    // --- agent ---
    /// Agent: URL of the parent cluster's API server
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster_reg_parent_url: Option<String>,
    /// Agent: bootstrap token (or service-account token) to register with
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster_reg_token: Option<String>,
    /// Agent: cluster name (default: <prefix>-<5 random chars>)
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster_reg_name: Option<String>,
    /// Agent: prefix of generated cluster names
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster_reg_name_prefix: Option<String>,
    /// Agent: requested dedicated namespace in the parent
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster_reg_namespace: Option<String>,
    /// Agent: StandardCluster or EdgeCluster
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster_reg_type: Option<String>,
    /// Agent: Push, Pull or Dual
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster_sync_mode: Option<String>,
    /// Agent: labels for the ManagedCluster, k1=v1,k2=v2
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster_labels: Option<String>,
    /// Agent: how often the cluster status is written to the parent, e.g. 3m
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster_status_update_frequency: Option<String>,
    /// Agent: how often the cluster status is collected, e.g. 20s
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster_status_collect_frequency: Option<String>,
    /// Agent: how long the child's health probes must keep failing (over at least three rounds)
    /// before the cluster is reported not ready, e.g. 40s
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster_health_failure_window: Option<String>,
    /// Controller: how long a cluster that was not ready must be Ready again, and still unbound,
    /// before its Bases (and its objects) are removed, e.g. 60s
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster_recovery_grace: Option<String>,
    /// Agent (Pull) and controller (Push): how often applied objects are compared with their
    /// desired state besides what the child's watches report, e.g. 10m
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub drift_resync: Option<String>,
    /// Scheduler: write `status.lastDecision` (why each cluster was bound or left out) with every
    /// binding; false binds as upstream does, without it (fewer bytes per write at the server)
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub record_scheduling_decisions: Option<bool>,
    /// Scheduler: how long a bound cluster may be not ready before its Subscriptions fail over
    /// (gate FailOver; a Subscription's tolerationSeconds overrides it), e.g. 60s
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster_failover_grace: Option<String>,
    /// Scheduler: how long a failed-over cluster must be Ready again before it gets its share
    /// back (also the least time between two fail-backs of one cluster), e.g. 5m
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster_failback_stable: Option<String>,
    /// Scheduler: how many replicas a fail-back adds above a Subscription's replicas before the
    /// returning cluster reports them available: a percentage ("25%") or a number
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failback_max_surge: Option<String>,
    /// Scheduler: how many lost clusters per second have their Subscriptions failed over
    /// (as kube-controller-manager's --node-eviction-rate), e.g. 0.1
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failover_eviction_rate: Option<f64>,
    /// Agent (Pull) and controller (Push): the helm v3 executable that installs HelmReleases
    /// (a path, or a name looked up in PATH)
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub helm_binary: Option<String>,
    /// Controller: kubeconfig of a Cluster API management cluster; its provisioned Clusters get
    /// the agent bundle (ConfigMaps and a ClusterResourceSet). Empty: no Cluster API discovery
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster_api_kubeconfig: Option<String>,
    /// Agent (Pull) and controller (Push): field managers whose take-over of a field is left to
    /// them, comma-separated (default: the autoscalers and kube-controller-manager)
    #[arg(long, value_delimiter = ',')]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retain_managers: Option<Vec<String>>,
    /// Agent: node label share above which a label is aggregated onto the cluster
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub labels_aggregate_threshold: Option<f64>,
    /// Agent: port of the built-in capacity predictor
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub predictor_port: Option<u16>,
    /// Agent: address of an external predictor (nothing is served locally then)
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub predictor_addr: Option<String>,
    /// Agent: the scheduler reaches the predictor directly instead of through the tunnel
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub predictor_direct_access: Option<bool>,
}

fn parse_role(s: &str) -> Result<Role, String> {
    s.parse()
}

impl Cli {
    /// The run flags, wherever they were given (top level, `run` or `config`).
    pub fn run_flags(&self) -> &RunFlags {
        match &self.command {
            Some(Command::Run { run }) | Some(Command::Config { run }) => run,
            _ => &self.run,
        }
    }
}

impl RunFlags {
    /// The flags as configuration layers: the plain ones as a figment provider, the comma lists
    /// and per-role names as they were given.
    pub fn layers(&self) -> Layers<Serialized<RunFlags>> {
        let mut flat = self.clone();
        Layers {
            config_file: flat.config.take(),
            feature_gates: Some(std::mem::take(&mut flat.feature_gates).join(","))
                .filter(|g| !g.is_empty()),
            roles: std::mem::take(&mut flat.roles),
            lease_name: flat.leader_elect_resource_name.take(),
            flags: Serialized::globals(flat),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use std::time::Duration;

    #[test]
    fn flags_override_defaults_and_roles_pick_gates() {
        let flags = RunFlags {
            roles: vec![Role::Scheduler, Role::Hub],
            kube_api_qps: Some(7.0),
            feature_gates: vec!["ShadowAPI=false".into()],
            leader_elect_lease_duration: Some("20s".into()),
            ..Default::default()
        };
        let cfg = Config::load(flags.layers()).expect("config loads");
        assert_eq!(cfg.roles, vec![Role::Hub, Role::Scheduler]);
        assert_eq!(cfg.kube_api_qps, 7.0);
        assert_eq!(cfg.leader_elect_lease_duration, Duration::from_secs(20));
        assert!(
            cfg.gate("SocketConnection"),
            "hub turns SocketConnection on"
        );
        assert!(cfg.gate("FailOver"), "scheduler turns FailOver on");
        assert!(!cfg.gate("ShadowAPI"), "the flag turns ShadowAPI off");
        assert!(!cfg.gate("Deployer"), "no controller role");
    }

    #[test]
    fn hub_limits_have_defaults_and_flags() {
        let cfg = Config::load(RunFlags::default().layers()).expect("config loads");
        assert_eq!(cfg.max_tunnel_sessions_per_cluster, 4);
        assert_eq!(cfg.max_watches_per_user, 100);
        assert_eq!(cfg.proxy_idle_timeout, Duration::from_secs(1800));
        let cli = <Cli as clap::Parser>::try_parse_from([
            "clusternet",
            "--max-tunnel-sessions-per-cluster=2",
            "--max-watches-per-user=0",
            "--proxy-idle-timeout=1m30s",
        ])
        .expect("flags parse");
        let cfg = Config::load(cli.run_flags().layers()).expect("config loads");
        assert_eq!(cfg.max_tunnel_sessions_per_cluster, 2);
        assert_eq!(cfg.max_watches_per_user, 0);
        assert_eq!(cfg.proxy_idle_timeout, Duration::from_secs(90));
    }

    #[test]
    fn repeated_feature_gates_add_up() {
        let cli = <Cli as clap::Parser>::try_parse_from([
            "clusternet",
            "--role=controller",
            "--feature-gates=MultiClusterService=true",
            "--feature-gates=PlacementDecision=true,Deployer=false",
        ])
        .expect("flags parse");
        let cfg = Config::load(cli.run_flags().layers()).expect("config loads");
        assert!(cfg.gate("MultiClusterService") && cfg.gate("PlacementDecision"));
        assert!(!cfg.gate("Deployer"));
    }

    #[test]
    fn bad_values_are_rejected_with_the_valid_choices() {
        let flags = RunFlags {
            cluster_sync_mode: Some("Sideways".into()),
            ..Default::default()
        };
        let err = Config::load(flags.layers()).unwrap_err().to_string();
        assert!(err.contains("Push, Pull, Dual"), "{err}");
        let flags = RunFlags {
            leader_elect_renew_deadline: Some("20s".into()),
            ..Default::default()
        };
        assert!(Config::load(flags.layers()).is_err());
    }
}
