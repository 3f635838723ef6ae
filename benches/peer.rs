//! clusternet-rs side by side with the Go original (issue #13, `just bench-peer`): the same
//! workloads against the same real parent API server, back to back, alternating which system goes
//! first in each round, at both systems' default client limits and at equal lifted limits.
//!
//! Workload (scheduling): `BENCH_PEER_CLUSTERS` (100) fake Ready ManagedClusters. A backlog of
//! `BENCH_PEER_SUBSCRIPTIONS` (200) Replication Subscriptions created before the scheduler starts,
//! drained (bindings per second from the first binding to the last; process start -> first and
//! -> last binding); then a burst of as many Replication Subscriptions, then one of Static-dividing
//! ones (their FeedInventories written first, as the controller would), each created by 32
//! concurrent requests while the scheduler runs: creation -> `status.bindingClusters` naming every
//! cluster, seen through a watch. The scheduler process's CPU seconds and memory (VmRSS idle after
//! the backlog, VmHWM) over the same work.
//!
//! Workload (end to end): one Pull agent in each of the three children (registered afresh each
//! round, each system its own), each system's whole parent (Go's scheduler, controller-manager and
//! hub; our one process with the three roles), each with the gates its shipped manifest turns on;
//! `BENCH_PEER_E2E_SUBSCRIPTIONS` (100) Subscriptions, each with its own Deployment feed, created
//! at once for all three children: creation -> the Deployment in every child (p50/p99), the drain,
//! and memory (idle once the agents are Ready, after the burst, VmHWM) and CPU of every process.
//!
//! Workload (registration): `BENCH_PEER_AGENTS` (10) agents started together over the three
//! children, each in a namespace of its own there (its Lease's UID is its cluster ID), the
//! system's own controller approving: bootstrap token -> Ready ManagedCluster, the agents' and
//! the controller's memory and CPU.
//!
//! `BENCH_PEER_ROUNDS` (2) rounds per workload and limit setting, each figure the median of the
//! rounds. `BENCH_PEER_ONLY=scheduling|end-to-end|registration` runs one workload,
//! `BENCH_PEER_LIMITS=default|lifted` one limit setting of the scheduling workload, and
//! `BENCH_PEER_RUST_BIN` another build of ours (an earlier commit, to compare; else
//! `CLUSTERNET_BIN`, the release binary `just bench-peer` builds).
//!
//! The Go binaries come from `GO_CLUSTERNET_BIN` (a directory holding `clusternet-scheduler`):
//! the Go module proxy does not serve the `github.com/clusternet/clusternet` module itself, so
//! build it from upstream's source, see README "Performance".

#[path = "common/scheduling.rs"]
mod scheduling;
#[path = "../tests/support/mod.rs"]
mod support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicU16, Ordering::SeqCst};
use std::time::{Duration, Instant};

use clusternet::apis::known::CLUSTER_ID_LABEL;
use clusternet::apis::{ClusterRegistrationRequest, FeedInventory, ManagedCluster, Subscription};
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use scheduling::{
    Drain, Figures, Strategy, burst, create_all, delete_all, drain, inventories, ready_clusters,
};
use support::{ProcUsage, TestEnv, TestNamespace, percentile, uid};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum System {
    Go,
    Rust,
}

/// Client limits: each system's own defaults, or the same lifted limits for both.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Limits {
    Default,
    Lifted,
}

impl Limits {
    fn name(self) -> &'static str {
        match self {
            Limits::Default => "default limits (Go 50 qps/100 burst, ours 100/200)",
            Limits::Lifted => "lifted limits (10000 qps/20000 burst both)",
        }
    }
}

/// A loopback port below the ephemeral range (32768 and up here), free when asked: a port the
/// kernel just handed out as free can go to the next outgoing connection before the process
/// binds it, which happened with a dozen processes connecting at once.
fn quiet_port() -> u16 {
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let _ = NEXT.compare_exchange(
        0,
        20000 + (std::process::id() % 1000) as u16 * 10,
        SeqCst,
        SeqCst,
    );
    loop {
        let port = NEXT.fetch_add(1, SeqCst);
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

/// A process of either system; SIGKILLed when dropped.
struct Proc {
    child: Child,
    log: PathBuf,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Proc {
    fn usage(&self) -> ProcUsage {
        ProcUsage::of(self.child.id())
    }
}

/// Starts `role` (scheduler, controller or agent) of `system` with `args` and the client limits.
fn spawn(system: System, role: &str, limits: Limits, go_bin: &Path, args: &[String]) -> Proc {
    let env = TestEnv::get();
    let log = env
        .dir
        .join("logs")
        .join(format!("peer-{system:?}-{role}-{}.log", uid()));
    let file = std::fs::File::create(&log).expect("creating a log file");
    let mut command = match system {
        System::Go => {
            let program = match role {
                "controller" => "clusternet-controller-manager".to_string(),
                other => format!("clusternet-{other}"),
            };
            let mut c = Command::new(go_bin.join(program));
            // a port of its own on loopback: several share this host (`--secure-port=0`, no
            // serving, makes v0.18.1's controller-manager dereference a nil server and panic)
            c.args([
                "--bind-address=127.0.0.1".to_string(),
                format!("--secure-port={}", quiet_port()),
            ]);
            c
        }
        System::Rust => {
            // BENCH_PEER_RUST_BIN: another build of ours (an earlier commit, to compare)
            let program =
                std::env::var("BENCH_PEER_RUST_BIN").unwrap_or_else(|_| support::clusternet_bin());
            let mut c = Command::new(program);
            c.env("RUST_LOG", "info").args([
                format!("--role={role}"),
                format!("--health-bind-address=127.0.0.1:{}", quiet_port()),
            ]);
            if role == "agent" {
                c.arg("--predictor-port=0");
            }
            c
        }
    };
    if limits == Limits::Lifted {
        command.args(["--kube-api-qps=10000", "--kube-api-burst=20000"]);
    }
    // the Go hub writes its self-signed serving certificate under its working directory
    let cwd = env.dir.join(format!("peer-{system:?}-{}", uid()));
    std::fs::create_dir_all(&cwd).expect("a working directory");
    let child = command
        .current_dir(cwd)
        .args(args)
        .stdout(file.try_clone().expect("log file handle"))
        .stderr(file)
        .spawn()
        .unwrap_or_else(|e| panic!("starting the {system:?} {role}: {e}"));
    Proc { child, log }
}

/// A parent role (scheduler, controller) without leader election.
fn parent_role(system: System, role: &str, limits: Limits, go_bin: &Path) -> Proc {
    let kubeconfig = format!(
        "--kubeconfig={}",
        TestEnv::get().parent_kubeconfig().display()
    );
    let mut args = vec![kubeconfig, "--leader-elect=false".to_string()];
    if system == System::Go && role == "controller" {
        // v0.18.1's --controllers has no default: without it every controller is off
        args.push("--controllers=*".to_string());
    }
    spawn(system, role, limits, go_bin, &args)
}

/// What one system did in one round.
struct Run {
    backlog: Drain,
    replication: Figures,
    dividing: Figures,
    idle_rss_mib: f64,
    usage: ProcUsage,
}

struct Bench {
    env: &'static TestEnv,
    go_bin: PathBuf,
    id: String,
    clusters: usize,
    n: usize,
    subs: Api<Subscription>,
    finvs: Api<FeedInventory>,
}

impl Bench {
    async fn run(&self, system: System, limits: Limits) -> Run {
        // a backlog: the Subscriptions are there before the scheduler starts
        create_all(&self.subs, &self.id, self.n, Strategy::Replication).await;
        let (backlog, scheduler) = drain(
            &self.subs,
            self.n,
            self.clusters,
            Duration::from_secs(300),
            || parent_role(system, "scheduler", limits, &self.go_bin),
        )
        .await;
        assert!(
            backlog.bound > 0,
            "the {system:?} scheduler bound nothing within 300 s; its log: {}",
            scheduler.log.display()
        );
        delete_all(&self.subs).await;
        let idle_rss_mib = scheduler.usage().rss_mib;
        let limit = Duration::from_secs(300);
        let replication = burst(
            &self.subs,
            &self.id,
            self.n,
            self.clusters,
            Strategy::Replication,
            None,
            limit,
        )
        .await;
        delete_all(&self.subs).await;
        let replicas = 2 * self.clusters as i32;
        inventories(&self.finvs, self.n, replicas).await;
        let dividing = burst(
            &self.subs,
            &self.id,
            self.n,
            self.clusters,
            Strategy::StaticDividing { replicas },
            None,
            limit,
        )
        .await;
        let usage = scheduler.usage();
        drop(scheduler);
        delete_all(&self.subs).await;
        delete_all(&self.finvs).await;
        Run {
            backlog,
            replication,
            dividing,
            idle_rss_mib,
            usage,
        }
    }
}

/// Registration figures of one system in one round.
struct Registration {
    times: Vec<Duration>,
    agents: usize,
    controller: ProcUsage,
    agent_rss_mib: f64,
}

/// An agent being registered: its process, its namespace in the child, when it started and when
/// its ManagedCluster was first seen Ready.
struct Registering {
    proc: Proc,
    ns: TestNamespace,
    child: kube::Client,
    started: Instant,
    ready: Option<Duration>,
    cluster_id: Option<String>,
}

impl Registering {
    /// Ready yet? Its cluster ID is its Lease's UID (in both systems).
    async fn check(&mut self, parent: &kube::Client) {
        if self.cluster_id.is_none() {
            let leases: Api<Lease> = Api::namespaced(self.child.clone(), &self.ns.name);
            self.cluster_id = leases
                .get("clusternet-agent")
                .await
                .ok()
                .and_then(|l| l.metadata.uid);
        }
        let Some(id) = &self.cluster_id else { return };
        let selector = format!("{CLUSTER_ID_LABEL}={id}");
        let listed = Api::<ManagedCluster>::all(parent.clone())
            .list(&ListParams::default().labels(&selector))
            .await;
        let ready = listed
            .ok()
            .and_then(|l| l.items.into_iter().next())
            .and_then(|mc| mc.status)
            .is_some_and(|s| s.condition("Ready").is_some_and(|c| c.status == "True"));
        if ready {
            self.ready = Some(self.started.elapsed());
        }
    }
}

/// Deletes what registering `cluster_id` left in the parent: its request, its ManagedCluster's
/// namespace (the ManagedCluster, its ServiceAccount and credentials with it).
async fn forget(parent: &kube::Client, cluster_id: &str) {
    let dp = DeleteParams::default();
    let _ = Api::<ClusterRegistrationRequest>::all(parent.clone())
        .delete(&format!("clusternet-{cluster_id}"), &dp)
        .await;
    let selector = format!("{CLUSTER_ID_LABEL}={cluster_id}");
    if let Ok(l) = Api::<ManagedCluster>::all(parent.clone())
        .list(&ListParams::default().labels(&selector))
        .await
    {
        for ns in l
            .items
            .iter()
            .filter_map(|mc| mc.metadata.namespace.clone())
        {
            let _ = Api::<Namespace>::all(parent.clone()).delete(&ns, &dp).await;
        }
    }
}

impl Bench {
    /// `agents` agents started together over the children, each in its own namespace there, with
    /// the system's own controller approving: bootstrap token -> Ready ManagedCluster.
    async fn register(&self, system: System, limits: Limits, agents: usize) -> Registration {
        let env = self.env;
        let parent = env.parent().await;
        let controller = parent_role(system, "controller", limits, &self.go_bin);
        let mut registering = Vec::new();
        for n in 0..agents {
            let i = n % env.children + 1;
            let child = env.child(i).await;
            let ns = TestNamespace::create(&child, &env.child_kubeconfig(i), "peerreg").await;
            let mut args = vec![
                format!("--kubeconfig={}", env.child_kubeconfig(i).display()),
                format!("--cluster-reg-parent-url={}", env.parent_url()),
                format!("--cluster-reg-token={}", env.bootstrap_token()),
                format!("--cluster-reg-name=peer-{n}-{}", &ns.name[8..]),
                format!("--leader-elect-resource-namespace={}", ns.name),
                // the same status cadence for both (Go's default is 20 s)
                "--cluster-status-collect-frequency=1s".to_string(),
            ];
            if system == System::Rust {
                args.push(format!("--system-namespace={}", ns.name));
            }
            let started = Instant::now();
            let proc = spawn(system, "agent", limits, &self.go_bin, &args);
            registering.push(Registering {
                proc,
                ns,
                child,
                started,
                ready: None,
                cluster_id: None,
            });
        }
        let deadline = Instant::now() + Duration::from_secs(180);
        while registering.iter().any(|r| r.ready.is_none()) && Instant::now() < deadline {
            for r in registering.iter_mut().filter(|r| r.ready.is_none()) {
                r.check(&parent).await;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let mut times: Vec<Duration> = registering.iter().filter_map(|r| r.ready).collect();
        times.sort();
        let rss: Vec<f64> = registering.iter().map(|r| r.proc.usage().rss_mib).collect();
        let usage = controller.usage();
        drop(controller);
        for r in registering {
            let Registering {
                proc, cluster_id, ..
            } = r;
            drop(proc);
            if let Some(id) = cluster_id {
                forget(&parent, &id).await;
            }
        }
        Registration {
            times,
            agents,
            controller: usage,
            agent_rss_mib: median(rss),
        }
    }
}

/// The parent of one system for the end-to-end workload: Go's scheduler, controller-manager and
/// hub, or our one process with all three roles; each with the gates its shipped manifest turns on.
fn parent_processes(system: System, limits: Limits, go_bin: &Path) -> Vec<(&'static str, Proc)> {
    let kubeconfig = format!(
        "--kubeconfig={}",
        TestEnv::get().parent_kubeconfig().display()
    );
    let common = vec![kubeconfig.clone(), "--leader-elect=false".to_string()];
    let with = |extra: &[&str]| {
        let mut args = common.clone();
        args.extend(extra.iter().map(|s| s.to_string()));
        args
    };
    match system {
        System::Go => vec![
            (
                "scheduler",
                spawn(
                    system,
                    "scheduler",
                    limits,
                    go_bin,
                    &with(&["--feature-gates=FailOver=true,FeasibleClustersToleration=true"]),
                ),
            ),
            (
                "controller-manager",
                spawn(
                    system,
                    "controller",
                    limits,
                    go_bin,
                    &with(&[
                        "--controllers=*",
                        "--feature-gates=SocketConnection=true,Deployer=true,FeedInUseProtection=true,FeedInventory=true",
                    ]),
                ),
            ),
            (
                "hub",
                spawn(
                    system,
                    "hub",
                    limits,
                    go_bin,
                    &with(&[
                        &kubeconfig.replace("--kubeconfig", "--authentication-kubeconfig"),
                        &kubeconfig.replace("--kubeconfig", "--authorization-kubeconfig"),
                        "--feature-gates=SocketConnection=true,ShadowAPI=true",
                    ]),
                ),
            ),
        ],
        System::Rust => {
            let port = format!("--secure-port={}", quiet_port());
            vec![(
                "hub,scheduler,controller",
                spawn(
                    system,
                    "hub,scheduler,controller",
                    limits,
                    go_bin,
                    &with(&["--bind-address=127.0.0.1", &port]),
                ),
            )]
        }
    }
}

/// An agent of the end-to-end workload: registered, Pull, labelled for the round.
struct E2eAgent {
    proc: Proc,
    _ns: TestNamespace,
    child: kube::Client,
    cluster_id: Option<String>,
}

/// What one system did end to end in one round.
struct EndToEnd {
    subscriptions: usize,
    done: Vec<Duration>,
    drain: Duration,
    /// Sum over the parent's processes: RSS once every agent was Ready, VmHWM, CPU seconds.
    parent_idle: f64,
    parent: ProcUsage,
    /// Median agent: RSS when Ready, VmHWM, CPU seconds.
    agent_idle: f64,
    agent: ProcUsage,
}

fn sum_usage(usages: impl Iterator<Item = ProcUsage>) -> ProcUsage {
    usages.fold(ProcUsage::default(), |a, u| ProcUsage {
        cpu_seconds: a.cpu_seconds + u.cpu_seconds,
        rss_mib: a.rss_mib + u.rss_mib,
        peak_rss_mib: a.peak_rss_mib + u.peak_rss_mib,
    })
}

/// A Manifest holding Deployment `name` of `ns` (one replica of pause).
fn deployment_manifest(ns: &str, name: &str) -> clusternet::apis::Manifest {
    support::manifest_of(&serde_json::json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": ns},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10"}]}}}}))
}

impl Bench {
    /// Three Pull agents (one per child) and the parent's processes of `system`; a burst of
    /// `n` Subscriptions, each with a Deployment feed, to all three: creation -> the Deployment
    /// in every child.
    async fn end_to_end(&self, system: System, limits: Limits, n: usize) -> EndToEnd {
        let env = self.env;
        let parent = env.parent().await;
        let round = uid();
        let parents = parent_processes(system, limits, &self.go_bin);
        let mut agents = Vec::new();
        for i in 1..=env.children.min(3) {
            let child = env.child(i).await;
            let ns = TestNamespace::create(&child, &env.child_kubeconfig(i), "peere2e").await;
            support::install_app_deployer(&child, &ns.name).await;
            let mut args = vec![
                format!("--kubeconfig={}", env.child_kubeconfig(i).display()),
                format!("--cluster-reg-parent-url={}", env.parent_url()),
                format!("--cluster-reg-token={}", env.bootstrap_token()),
                format!("--cluster-reg-name=peer-e2e-{i}-{round}"),
                format!("--cluster-labels=peer-e2e={round}"),
                "--cluster-sync-mode=Pull".to_string(),
                format!("--leader-elect-resource-namespace={}", ns.name),
                "--cluster-status-collect-frequency=1s".to_string(),
                // no hub is registered with the parent here: no tunnel, for both alike
                "--feature-gates=SocketConnection=false,AppPusher=true,Recovery=true,Predictor=false"
                    .to_string(),
            ];
            if system == System::Rust {
                args.push(format!("--system-namespace={}", ns.name));
            }
            agents.push(E2eAgent {
                proc: spawn(system, "agent", limits, &self.go_bin, &args),
                _ns: ns,
                child,
                cluster_id: None,
            });
        }
        let appns = format!("peere2e-{round}");
        for a in &agents {
            support::ensure_namespace(&a.child, &appns).await;
        }
        // every agent Ready, its cluster ID known
        let mcs: Api<ManagedCluster> = Api::all(parent.clone());
        let selector = format!("peer-e2e={round}");
        let deadline = Instant::now() + Duration::from_secs(180);
        loop {
            let ready: Vec<ManagedCluster> = mcs
                .list(&ListParams::default().labels(&selector))
                .await
                .map(|l| l.items)
                .unwrap_or_default()
                .into_iter()
                .filter(|mc| {
                    mc.status
                        .as_ref()
                        .is_some_and(|s| s.condition("Ready").is_some_and(|c| c.status == "True"))
                })
                .collect();
            if ready.len() == agents.len() {
                for (a, mc) in agents.iter_mut().zip(&ready) {
                    a.cluster_id = Some(mc.spec.cluster_id.clone());
                }
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{system:?}: {} of {} agents Ready within 180 s; logs in {}",
                ready.len(),
                agents.len(),
                env.dir.join("logs").display()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        // settled: caches warm, the agents' first status written
        tokio::time::sleep(Duration::from_secs(3)).await;
        let parent_idle = sum_usage(parents.iter().map(|(_, p)| p.usage())).rss_mib;
        let agent_idle = median(agents.iter().map(|a| a.proc.usage().rss_mib).collect());
        let manifests: Api<clusternet::apis::Manifest> =
            Api::namespaced(parent.clone(), "clusternet-reserved");
        support::ensure_namespace(&parent, "clusternet-reserved").await;
        for i in 0..n {
            let _ = manifests
                .create(
                    &PostParams::default(),
                    &deployment_manifest(&appns, &format!("d{i}")),
                )
                .await;
        }
        let subs_ns = TestNamespace::create(&parent, &env.parent_kubeconfig(), "peere2e").await;
        let subs: Api<Subscription> = Api::namespaced(parent.clone(), &subs_ns.name);
        let start = Instant::now();
        let created: std::collections::BTreeMap<String, Instant> = futures::stream::iter(0..n)
            .map(|i| {
                let subs = subs.clone();
                let sub: Subscription = serde_json::from_value(serde_json::json!({
                    "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Subscription",
                    "metadata": {"name": format!("d{i}")},
                    "spec": {"subscribers": [{"clusterAffinity": {"matchLabels": {"peer-e2e": round}}}],
                        "feeds": [{"apiVersion": "apps/v1", "kind": "Deployment", "namespace": appns, "name": format!("d{i}")}]}}))
                .expect("a Subscription");
                async move {
                    subs.create(&PostParams::default(), &sub)
                        .await
                        .expect("creating a Subscription");
                    (format!("d{i}"), Instant::now())
                }
            })
            .buffer_unordered(32)
            .collect()
            .await;
        let mut pending = created.clone();
        let mut done = Vec::new();
        let mut last = start;
        let deadline = Instant::now() + Duration::from_secs(600);
        while !pending.is_empty() && Instant::now() < deadline {
            let mut present: std::collections::BTreeMap<String, usize> = Default::default();
            for a in &agents {
                let listed = Api::<k8s_openapi::api::apps::v1::Deployment>::namespaced(
                    a.child.clone(),
                    &appns,
                )
                .list(&ListParams::default())
                .await;
                for d in listed.map(|l| l.items).unwrap_or_default() {
                    *present
                        .entry(d.metadata.name.unwrap_or_default())
                        .or_default() += 1;
                }
            }
            let now = Instant::now();
            pending.retain(|name, at| {
                if present.get(name) == Some(&agents.len()) {
                    done.push(now.saturating_duration_since(*at));
                    last = now;
                    false
                } else {
                    true
                }
            });
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        done.sort();
        let parent_usage = sum_usage(parents.iter().map(|(_, p)| p.usage()));
        let agent_usages: Vec<ProcUsage> = agents.iter().map(|a| a.proc.usage()).collect();
        let agent = ProcUsage {
            cpu_seconds: median(agent_usages.iter().map(|u| u.cpu_seconds).collect()),
            rss_mib: median(agent_usages.iter().map(|u| u.rss_mib).collect()),
            peak_rss_mib: median(agent_usages.iter().map(|u| u.peak_rss_mib).collect()),
        };
        // clean up while the system runs (its finalizers), then forget its clusters
        let _ = subs
            .delete_collection(&DeleteParams::default(), &ListParams::default())
            .await;
        for _ in 0..600 {
            if subs
                .list(&ListParams::default().limit(1))
                .await
                .is_ok_and(|l| l.items.is_empty())
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        for i in 0..n {
            let _ = manifests
                .delete(
                    &format!("deployments.{appns}.d{i}"),
                    &DeleteParams::default(),
                )
                .await;
        }
        drop(parents);
        for a in agents {
            let E2eAgent {
                proc,
                child,
                cluster_id,
                ..
            } = a;
            drop(proc);
            let _ = Api::<Namespace>::all(child)
                .delete(&appns, &DeleteParams::background())
                .await;
            if let Some(id) = cluster_id {
                forget(&parent, &id).await;
            }
        }
        EndToEnd {
            subscriptions: n,
            drain: last.saturating_duration_since(start),
            done,
            parent_idle,
            parent: parent_usage,
            agent_idle,
            agent,
        }
    }
}

/// The end-to-end rows.
fn report_end_to_end(label: &str, go: &[EndToEnd], rust: &[EndToEnd]) {
    let of = |runs: &[EndToEnd], f: &dyn Fn(&EndToEnd) -> f64| median(runs.iter().map(f).collect());
    let done = |runs: &[EndToEnd]| {
        let fewest = runs.iter().map(|r| r.done.len()).min().unwrap_or(0);
        format!(
            "{fewest}/{}",
            runs.first().map(|r| r.subscriptions).unwrap_or(0)
        )
    };
    println!(
        "| {label} | end to end: Subscriptions in every child (fewest of the rounds) | {} | {} | |",
        done(go),
        done(rust)
    );
    for (q, name) in [(0.5, "p50"), (0.99, "p99")] {
        let t = |r: &EndToEnd| percentile(&r.done, q).as_secs_f64();
        let figure = format!("end to end: create -> Deployment in all 3 children {name}");
        row(label, &figure, "s", of(go, &t), of(rust, &t), true);
    }
    let drain = |r: &EndToEnd| r.drain.as_secs_f64();
    row(
        label,
        "end to end: drain (first create -> last Deployment)",
        "s",
        of(go, &drain),
        of(rust, &drain),
        true,
    );
    rows(
        label,
        go,
        rust,
        &[
            (
                "parent, all processes: RSS idle (agents Ready)",
                "MiB",
                |r| r.parent_idle,
            ),
            ("parent, all processes: RSS after the burst", "MiB", |r| {
                r.parent.rss_mib
            }),
            (
                "parent, all processes: peak RSS (sum of VmHWM)",
                "MiB",
                |r| r.parent.peak_rss_mib,
            ),
            ("parent, all processes: CPU over the run", "s", |r| {
                r.parent.cpu_seconds
            }),
            ("agent (median of 3): RSS idle (Ready)", "MiB", |r| {
                r.agent_idle
            }),
            ("agent (median of 3): peak RSS (VmHWM)", "MiB", |r| {
                r.agent.peak_rss_mib
            }),
            ("agent (median of 3): CPU over the run", "s", |r| {
                r.agent.cpu_seconds
            }),
        ],
    );
}

/// The median of the rounds' values (the mean of the middle two for an even count).
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// One row: the figure for Go and for us, and how many times better ours is (>1: ours better).
fn row(limits: &str, figure: &str, unit: &str, go: f64, rust: f64, lower_is_better: bool) {
    let ratio = if lower_is_better {
        go / rust.max(f64::MIN_POSITIVE)
    } else {
        rust / go.max(f64::MIN_POSITIVE)
    };
    println!("| {limits} | {figure} | {go:.3} {unit} | {rust:.3} {unit} | {ratio:.2}x |");
}

/// One figure of a burst, read from its [`Figures`].
type BurstFigure = fn(&Figures) -> f64;

fn report(limits: Limits, n: usize, go: &[Run], rust: &[Run]) {
    let of = |runs: &[Run], f: &dyn Fn(&Run) -> f64| median(runs.iter().map(f).collect());
    let l = limits_key(limits);
    let drained = |runs: &[Run]| runs.iter().map(|r| r.backlog.bound).min().unwrap_or(0);
    println!(
        "| {l} | backlog of {n} Replication: bound (fewest of the rounds) | {}/{n} | {}/{n} | |",
        drained(go),
        drained(rust)
    );
    let drain_rate = |r: &Run| r.backlog.per_second;
    let first = |r: &Run| r.backlog.to_first.as_secs_f64();
    let last = |r: &Run| r.backlog.to_last.as_secs_f64();
    row(
        l,
        "backlog: bindings/s (first binding to last)",
        "/s",
        of(go, &drain_rate),
        of(rust, &drain_rate),
        false,
    );
    row(
        l,
        "backlog: process start -> first binding",
        "s",
        of(go, &first),
        of(rust, &first),
        true,
    );
    row(
        l,
        "backlog: process start -> last binding",
        "s",
        of(go, &last),
        of(rust, &last),
        true,
    );
    for (what, pick) in [
        (
            "Replication",
            (|r: &Run| &r.replication) as fn(&Run) -> &Figures,
        ),
        ("Static dividing", |r: &Run| &r.dividing),
    ] {
        let bound = |runs: &[Run]| runs.iter().map(|r| pick(r).bound).min().unwrap_or(0);
        println!(
            "| {l} | {what}: bound (fewest of the rounds) | {}/{n} | {}/{n} | |",
            bound(go),
            bound(rust)
        );
        for (q, name) in [(0.5, "p50"), (0.9, "p90"), (0.99, "p99")] {
            let lat = |r: &Run| pick(r).p(q).as_secs_f64();
            row(
                l,
                &format!("{what}: create -> binding {name}"),
                "s",
                of(go, &lat),
                of(rust, &lat),
                true,
            );
        }
        // the rate, and what bounds it from outside the scheduler: the server acknowledging the
        // burst's creations (the same harness work for both, slowed by what the scheduler costs
        // the server meanwhile) and the scheduler's own tail after the last one
        let figures: [(String, &str, BurstFigure, bool); 3] = [
            ("bindings/s".into(), "/s", |f| f.per_second, false),
            (
                format!("the {n} creations acknowledged in"),
                "s",
                |f| f.created_in.as_secs_f64(),
                true,
            ),
            (
                "last creation acknowledged -> last binding".into(),
                "s",
                |f| f.after_last_create.as_secs_f64(),
                true,
            ),
        ];
        for (name, unit, figure, lower_is_better) in figures {
            let value = |r: &Run| figure(pick(r));
            row(
                l,
                &format!("{what}: {name}"),
                unit,
                of(go, &value),
                of(rust, &value),
                lower_is_better,
            );
        }
    }
    let cpu = format!("scheduler CPU for {} bindings", 3 * n);
    rows(
        l,
        go,
        rust,
        &[
            ("scheduler RSS idle after the backlog", "MiB", |r| {
                r.idle_rss_mib
            }),
            ("scheduler peak RSS (VmHWM)", "MiB", |r| {
                r.usage.peak_rss_mib
            }),
            (&cpu, "s", |r| r.usage.cpu_seconds),
        ],
    );
}

/// A figure where lower is better: its name, its unit and how to read it from one round.
type Lower<'a, R> = (&'a str, &'a str, fn(&R) -> f64);

/// Rows of figures where lower is better (memory, CPU): the median of each system's rounds.
fn rows<R>(l: &str, go: &[R], rust: &[R], figures: &[Lower<'_, R>]) {
    for (figure, unit, f) in figures {
        let of = |runs: &[R]| median(runs.iter().map(f).collect());
        row(l, figure, unit, of(go), of(rust), true);
    }
}

/// The registration rows: `agents` agents started together, each system's own controller.
fn report_registration(go: &[Registration], rust: &[Registration]) {
    let of = |runs: &[Registration], f: &dyn Fn(&Registration) -> f64| {
        median(runs.iter().map(f).collect())
    };
    let ready = |runs: &[Registration]| {
        let fewest = runs.iter().map(|r| r.times.len()).min().unwrap_or(0);
        format!("{fewest}/{}", runs.first().map(|r| r.agents).unwrap_or(0))
    };
    let l = "default";
    println!(
        "| {l} | registration: agents Ready (fewest of the rounds) | {} | {} | |",
        ready(go),
        ready(rust)
    );
    for (q, name) in [(0.5, "p50"), (0.99, "p99")] {
        let t = |r: &Registration| percentile(&r.times, q).as_secs_f64();
        let figure = format!("registration: bootstrap token -> Ready {name}");
        row(l, &figure, "s", of(go, &t), of(rust, &t), true);
    }
    rows(
        l,
        go,
        rust,
        &[
            ("agent RSS when Ready (median agent)", "MiB", |r| {
                r.agent_rss_mib
            }),
            ("controller peak RSS (VmHWM) while approving", "MiB", |r| {
                r.controller.peak_rss_mib
            }),
            ("controller CPU while approving", "s", |r| {
                r.controller.cpu_seconds
            }),
        ],
    );
}

/// Runs `work` for both systems, `rounds` times, alternating which goes first; (Go's, ours).
async fn alternate<T, F, Fut>(rounds: usize, label: &str, mut work: F) -> (Vec<T>, Vec<T>)
where
    F: FnMut(System) -> Fut,
    Fut: std::future::Future<Output = T>,
{
    let (mut go, mut rust) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let order = if round % 2 == 0 {
            [System::Go, System::Rust]
        } else {
            [System::Rust, System::Go]
        };
        for system in order {
            eprintln!("bench-peer: {label}, round {}, {system:?}", round + 1);
            let done = work(system).await;
            match system {
                System::Go => go.push(done),
                System::Rust => rust.push(done),
            }
        }
    }
    (go, rust)
}

/// `GO_CLUSTERNET_BIN`, checked; a readable reason when it is missing.
fn go_bin() -> Result<PathBuf, String> {
    let dir = std::env::var("GO_CLUSTERNET_BIN").map_err(|_| {
        "GO_CLUSTERNET_BIN is not set: point it at a directory holding the Go original's \
         clusternet-scheduler (README \"Performance\" says how to build it)"
            .to_string()
    })?;
    let dir = PathBuf::from(dir);
    let scheduler = dir.join("clusternet-scheduler");
    if !scheduler.is_file() {
        return Err(format!(
            "GO_CLUSTERNET_BIN={}: no clusternet-scheduler there",
            dir.display()
        ));
    }
    Ok(dir)
}

#[tokio::main]
async fn main() {
    // `cargo bench` runs every bench; this one only when asked for (`just bench-peer`)
    if std::env::var_os("BENCH_PEER").is_none() {
        eprintln!("bench-peer: skipped (run `just bench-peer` with GO_CLUSTERNET_BIN set)");
        return;
    }
    let go_bin = match go_bin() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("bench-peer: {e}");
            std::process::exit(2);
        }
    };
    let env = TestEnv::get();
    env.install_crds();
    let parent = env.parent().await;
    let clusters = support::env_or("BENCH_PEER_CLUSTERS", 100);
    let n = support::env_or("BENCH_PEER_SUBSCRIPTIONS", 200);
    let rounds = support::env_or("BENCH_PEER_ROUNDS", 2);
    let id = uid();
    let ns = TestNamespace::create(&parent, &env.parent_kubeconfig(), "peerbench").await;
    let mcs: Api<ManagedCluster> = Api::namespaced(parent.clone(), &ns.name);
    ready_clusters(&mcs, &ns.name, &id, clusters).await;
    let bench = Bench {
        env,
        go_bin,
        id,
        clusters,
        n,
        subs: Api::namespaced(parent.clone(), &ns.name),
        finvs: Api::namespaced(parent.clone(), &ns.name),
    };
    // BENCH_PEER_ONLY=scheduling or =registration runs one workload
    let only = std::env::var("BENCH_PEER_ONLY").unwrap_or_default();
    let mut results = Vec::new();
    // BENCH_PEER_LIMITS=default or =lifted runs one limit setting
    let limits_only = std::env::var("BENCH_PEER_LIMITS").unwrap_or_default();
    let limit_settings: Vec<Limits> = [Limits::Default, Limits::Lifted]
        .into_iter()
        .filter(|_| only.is_empty() || only == "scheduling")
        .filter(|l| limits_only.is_empty() || limits_key(*l) == limits_only)
        .collect();
    for limits in limit_settings {
        let label = limits.name();
        let (go, rust) = alternate(rounds, label, |system| bench.run(system, limits)).await;
        results.push((limits, go, rust));
    }
    if !results.is_empty() {
        println!(
            "clusternet-rs against Go Clusternet, scheduling through one parent API server: {clusters} Ready \
             ManagedClusters, bursts of {n} Subscriptions (32 concurrent creations), {rounds} rounds \
             alternating who goes first, medians; ratio > 1: clusternet-rs better"
        );
        for (limits, _, _) in &results {
            println!("- {}: {}", limits_key(*limits), limits.name());
        }
        println!("| limits | figure | Go | clusternet-rs | ratio |");
        println!("|---|---|---|---|---|");
        for (limits, go, rust) in &results {
            report(*limits, n, go, rust);
        }
    }
    if only.is_empty() || only == "end-to-end" {
        let subs = support::env_or("BENCH_PEER_E2E_SUBSCRIPTIONS", 100);
        let (go_e2e, rust_e2e) = alternate(rounds, "end to end", |system| {
            bench.end_to_end(system, Limits::Default, subs)
        })
        .await;
        println!(
            "end to end: {subs} Subscriptions (each one Deployment feed, 32 concurrent creations) to 3 real \
             children with Pull agents, each system's own parent processes and agents, {rounds} rounds \
             alternating who goes first, medians"
        );
        println!("| limits | figure | Go | clusternet-rs | ratio |");
        println!("|---|---|---|---|---|");
        report_end_to_end("default", &go_e2e, &rust_e2e);
    }
    if only == "scheduling" || only == "end-to-end" {
        return;
    }
    let agents = support::env_or("BENCH_PEER_AGENTS", 10);
    let (go_reg, rust_reg) = alternate(rounds, "registration", |system| {
        bench.register(system, Limits::Default, agents)
    })
    .await;
    println!(
        "registration: {agents} agents started together over {} children, each system's own \
         controller approving, {rounds} rounds alternating who goes first, medians",
        env.children
    );
    println!("| limits | figure | Go | clusternet-rs | ratio |");
    println!("|---|---|---|---|---|");
    report_registration(&go_reg, &rust_reg);
}

fn limits_key(l: Limits) -> &'static str {
    match l {
        Limits::Default => "default",
        Limits::Lifted => "lifted",
    }
}
