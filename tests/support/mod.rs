//! The harness every integration-test binary shares: real control planes (one parent, N children:
//! kube-apiserver + etcd + kube-controller-manager + kube-scheduler + kwok), started once per test
//! binary by `tests/env/env-up.sh` or reused from `CLUSTERNET_TEST_ENV`, unique namespaces per
//! test, cleanup, and waits that fail with the object's state instead of sleeping.
#![allow(dead_code)]

pub mod browser;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, PostParams};

/// How many children a self-started environment has (CLUSTERNET_TEST_CHILDREN overrides).
const DEFAULT_CHILDREN: usize = 3;

pub struct TestEnv {
    pub dir: PathBuf,
    pub children: usize,
}

static ENV: OnceLock<TestEnv> = OnceLock::new();

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn count_children(dir: &Path) -> usize {
    (1..)
        .take_while(|i| dir.join(format!("child{i}.kubeconfig")).exists())
        .count()
}

impl TestEnv {
    /// The shared environment, started on first use.
    pub fn get() -> &'static TestEnv {
        ENV.get_or_init(|| {
            let _ = tokio_rustls::rustls::crypto::ring::default_provider().install_default();
            let env = match std::env::var("CLUSTERNET_TEST_ENV") {
                Ok(dir) if !dir.is_empty() => {
                    let dir = PathBuf::from(dir);
                    assert!(
                        dir.join("ready").exists(),
                        "CLUSTERNET_TEST_ENV={} has no running environment (start one with `just env-up {} 3`)",
                        dir.display(),
                        dir.display()
                    );
                    TestEnv {
                        children: count_children(&dir),
                        dir,
                    }
                }
                _ => Self::start(),
            };
            install_failure_hint(&env.dir);
            env
        })
    }

    fn start() -> TestEnv {
        let children = std::env::var("CLUSTERNET_TEST_CHILDREN")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(DEFAULT_CHILDREN);
        let dir = std::env::temp_dir().join(format!("clusternet-test-{}", std::process::id()));
        eprintln!(
            "starting a test environment with {children} children in {}",
            dir.display()
        );
        let status = Command::new("bash")
            .arg(repo_root().join("tests/env/env-up.sh"))
            .arg(&dir)
            .arg(children.to_string())
            .arg("--owner-pid")
            .arg(std::process::id().to_string())
            .status()
            .expect("running tests/env/env-up.sh");
        assert!(
            status.success(),
            "tests/env/env-up.sh failed ({status}); logs are in {}/logs",
            dir.display()
        );
        TestEnv { dir, children }
    }

    pub fn parent_kubeconfig(&self) -> PathBuf {
        self.dir.join("parent.kubeconfig")
    }

    pub fn child_kubeconfig(&self, i: usize) -> PathBuf {
        assert!(
            i >= 1 && i <= self.children,
            "child{i} does not exist (have {})",
            self.children
        );
        self.dir.join(format!("child{i}.kubeconfig"))
    }

    pub fn bootstrap_token(&self) -> String {
        std::fs::read_to_string(self.dir.join("bootstrap-token"))
            .expect("reading the bootstrap token")
            .trim()
            .to_string()
    }

    /// The cached binaries (kubectl, helm, ...) of the environment.
    pub fn bin(&self, name: &str) -> PathBuf {
        cached_bin(name)
    }

    pub async fn parent(&self) -> kube::Client {
        client_from(&self.parent_kubeconfig()).await
    }

    pub async fn child(&self, i: usize) -> kube::Client {
        client_from(&self.child_kubeconfig(i)).await
    }
}

/// A binary tests/env/k8s-bin.sh builds and caches (no test environment needed).
pub fn cached_bin(name: &str) -> PathBuf {
    let out = Command::new("bash")
        .arg(repo_root().join("tests/env/k8s-bin.sh"))
        .output()
        .expect("running tests/env/k8s-bin.sh");
    let dir = String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .unwrap_or_default()
        .to_string();
    PathBuf::from(dir).join(name)
}

/// The image whose pods the test environment's kwok never makes ready (tests/env/k8s-bin.sh's
/// pod-ready stage leaves them Pending on their node, as a pod that cannot start stays): a
/// Deployment of it passes its progress deadline.
pub const NEVER_READY_IMAGE: &str = "registry.clusternet.test/never-ready:v1";

/// A Deployment `web` (label app=web) in `ns` with this image, replica count, optional node
/// selector (`key: value`, which no node matching keeps its pods Pending) and optional
/// `progressDeadlineSeconds`, as YAML.
pub fn web_deployment_yaml(
    ns: &str,
    image: &str,
    node_selector: Option<&str>,
    replicas: i32,
    progress_deadline: Option<u32>,
) -> String {
    let selector = node_selector
        .map(|s| format!("      nodeSelector: {{{s}}}\n"))
        .unwrap_or_default();
    let deadline = progress_deadline
        .map(|d| format!("  progressDeadlineSeconds: {d}\n"))
        .unwrap_or_default();
    format!(
        "apiVersion: apps/v1
kind: Deployment
metadata: {{name: web, namespace: {ns}, labels: {{app: web}}}}
spec:
  replicas: {replicas}
{deadline}  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web}}}}
    spec:
{selector}      containers:
      - {{name: web, image: \"{image}\"}}
"
    )
}

pub async fn client_from(kubeconfig: &Path) -> kube::Client {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig).expect("reading kubeconfig");
    let cfg = kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
        .await
        .expect("kubeconfig is usable");
    kube::Client::try_from(cfg).expect("building a client")
}

fn install_failure_hint(dir: &Path) {
    let logs = dir.join("logs");
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        previous(info);
        eprintln!("control-plane logs: {}", logs.display());
    }));
}

/// A namespace that exists for one test and is deleted (without waiting) when dropped.
pub struct TestNamespace {
    pub name: String,
    kubeconfig: PathBuf,
}

impl TestNamespace {
    pub async fn create(client: &kube::Client, kubeconfig: &Path, prefix: &str) -> TestNamespace {
        let name = format!(
            "{prefix}-{}",
            &uuid::Uuid::new_v4().simple().to_string()[..8]
        );
        let ns = Namespace {
            metadata: kube::api::ObjectMeta {
                name: Some(name.clone()),
                labels: Some([("clusternet.io/test".to_string(), "true".to_string())].into()),
                ..Default::default()
            },
            ..Default::default()
        };
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .unwrap_or_else(|e| panic!("creating namespace {name}: {e}"));
        TestNamespace {
            name,
            kubeconfig: kubeconfig.to_path_buf(),
        }
    }
}

impl Drop for TestNamespace {
    fn drop(&mut self) {
        let _ = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args([
                "delete",
                "namespace",
                &self.name,
                "--wait=false",
                "--ignore-not-found",
            ])
            .output();
    }
}

/// Polls `check` until it returns Ok, or fails after `timeout` with what the last attempt said.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let start = Instant::now();
    let mut last = String::from("never checked");
    while start.elapsed() < timeout {
        match check().await {
            Ok(v) => return v,
            Err(state) => last = state,
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    panic!("timed out after {timeout:?} waiting for {what}; last state: {last}");
}

/// How the tests start `clusternet` processes: the binary under test by default; tests/image.rs
/// switches (once, before anything starts) to the same binary inside the image, started with
/// `buildah run --isolation chroot`, so every role it starts runs from the image.
pub struct Launcher {
    /// the command and its options before the environment flags (empty for the plain binary)
    head: Vec<String>,
    /// what follows them: the program (and for an image the container and `--` before it)
    tail: Vec<String>,
    image: bool,
}

static LAUNCHER: OnceLock<Launcher> = OnceLock::new();

/// The binary under test; `CLUSTERNET_BIN` names another build to run instead (`just bench`: the
/// release binary, while the bench harnesses are built with a lighter profile).
pub fn clusternet_bin() -> String {
    std::env::var("CLUSTERNET_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_clusternet").to_string())
}

impl Launcher {
    /// The launcher in use ([`clusternet_bin`] unless [`Launcher::use_image`] was called).
    pub fn get() -> &'static Launcher {
        LAUNCHER.get_or_init(|| Launcher {
            head: Vec::new(),
            tail: vec![clusternet_bin()],
            image: false,
        })
    }

    /// From now on every role starts inside `container` (a buildah working container of the
    /// image): host network (chroot isolation makes no network namespace) and `mounts` (host
    /// directory, path inside), read-only. Panics when a process was started already.
    pub fn use_image(container: &str, mounts: &[(&Path, &Path)]) {
        let mut head: Vec<String> = ["buildah", "run", "--isolation", "chroot"]
            .map(String::from)
            .to_vec();
        for (host, inside) in mounts {
            head.push("-v".to_string());
            head.push(format!("{}:{}:ro", host.display(), inside.display()));
        }
        let launcher = Launcher {
            head,
            tail: [container, "--", "/usr/local/bin/clusternet"]
                .map(String::from)
                .to_vec(),
            image: true,
        };
        assert!(
            LAUNCHER.set(launcher).is_ok(),
            "Launcher::use_image after a process was started"
        );
    }

    pub fn in_image(&self) -> bool {
        self.image
    }

    /// A command that starts clusternet with `envs` set for it (inside the image too).
    pub fn command(&self, envs: &[(&str, &str)]) -> Command {
        if !self.image {
            let mut cmd = Command::new(&self.tail[0]);
            cmd.envs(envs.iter().copied());
            return cmd;
        }
        // `buildah run` passes SIGTERM on but not SIGKILL, and outlives a test binary that
        // dies: a watchdog ends it with the test binary, and the process group (its own) lets
        // a test's SIGKILL reach the process in the image too. Arguments follow as "$@".
        let script = format!(
            "{} \"$@\" & pid=$!; trap 'kill $pid' TERM; \
             while kill -0 {owner} 2>/dev/null && kill -0 $pid 2>/dev/null; do sleep 0.5; done; \
             kill $pid 2>/dev/null; wait $pid",
            self.shell(envs),
            owner = std::process::id()
        );
        let mut cmd = Command::new("bash");
        cmd.args(["-c", &script, "clusternet"]);
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        cmd
    }

    /// The same as a shell command prefix (for the watchdog scripts), each word quoted.
    pub fn shell(&self, envs: &[(&str, &str)]) -> String {
        let quote = |w: &str| format!("'{}'", w.replace('\'', "'\\''"));
        let words = self
            .words(envs)
            .iter()
            .map(|w| quote(w))
            .collect::<Vec<_>>();
        if self.image {
            words.join(" ")
        } else {
            let assigns = envs.iter().map(|(k, v)| format!("{k}={}", quote(v)));
            assigns.chain(words).collect::<Vec<_>>().join(" ")
        }
    }

    fn words(&self, envs: &[(&str, &str)]) -> Vec<String> {
        let mut words = self.head.clone();
        if self.image {
            for (k, v) in envs {
                words.push("-e".to_string());
                words.push(format!("{k}={v}"));
            }
        }
        words.extend(self.tail.iter().cloned());
        words
    }
}

/// A `clusternet` process started by a test; killed (SIGKILL) when dropped.
pub struct Clusternet {
    pub child: std::process::Child,
    pub log: PathBuf,
    pub health_port: u16,
}

impl Clusternet {
    /// Starts the binary under test with `args`, logging to a file next to the environment's logs.
    pub fn start(name: &str, args: &[&str]) -> Clusternet {
        Self::start_with_env(name, args, &[])
    }

    pub fn start_with_env(name: &str, args: &[&str], envs: &[(&str, &str)]) -> Clusternet {
        Self::spawn(name, args, envs, None)
    }

    /// Like [`start`](Self::start), inside network namespace `netns` (`ip netns exec` execs the
    /// binary, so the pid is its own and [`kill`](Self::kill) reaches it).
    pub fn start_in_netns(name: &str, netns: &str, args: &[&str]) -> Clusternet {
        Self::spawn(name, args, &[], Some(netns))
    }

    fn spawn(name: &str, args: &[&str], envs: &[(&str, &str)], netns: Option<&str>) -> Clusternet {
        let env = TestEnv::get();
        let health_port = free_port();
        let log = env.dir.join("logs").join(format!(
            "{name}-{}.log",
            &uuid::Uuid::new_v4().simple().to_string()[..6]
        ));
        let file = std::fs::File::create(&log).expect("creating a log file");
        let envs: Vec<(&str, &str)> = [("RUST_LOG", "info,clusternet=debug")]
            .into_iter()
            .chain(envs.iter().copied())
            .collect();
        let mut command = match netns {
            None => Launcher::get().command(&envs),
            Some(ns) => {
                assert!(
                    !Launcher::get().in_image(),
                    "no network namespaces for processes in the image"
                );
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, &clusternet_bin()])
                    .envs(envs.iter().copied());
                c
            }
        };
        let child = command
            .args(args)
            .arg(format!("--health-bind-address=127.0.0.1:{health_port}"))
            .stdout(file.try_clone().expect("log file handle"))
            .stderr(file)
            .spawn()
            .expect("starting clusternet");
        Clusternet {
            child,
            log,
            health_port,
        }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// GET a path of the health/metrics port: (status, body).
    pub async fn get(&self, path: &str) -> Result<(u16, String), String> {
        http_get(self.health_port, path).await
    }

    /// The value of a metric line that starts with `prefix` (name plus labels), if present.
    pub async fn metric(&self, prefix: &str) -> Option<f64> {
        let (_, body) = self.get("/metrics").await.ok()?;
        body.lines()
            .find(|l| l.starts_with(prefix))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
    }

    /// SIGKILLs it and its process group (`buildah run` and the process in the image).
    pub fn kill(&mut self) {
        if Launcher::get().in_image() {
            let _ = Command::new("kill")
                .args(["-9", "--", &format!("-{}", self.child.id())])
                .status();
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// CPU seconds and memory of the process so far (Linux /proc).
    pub fn usage(&self) -> ProcUsage {
        ProcUsage::of(self.child.id())
    }
}

/// What a process has used, read from /proc: CPU seconds (user + system), resident memory now
/// and its peak (VmHWM), in MiB. Zeros when the process is gone.
#[derive(Debug, Default, Clone, Copy)]
pub struct ProcUsage {
    pub cpu_seconds: f64,
    pub rss_mib: f64,
    pub peak_rss_mib: f64,
}

impl ProcUsage {
    pub fn of(pid: u32) -> ProcUsage {
        // clock ticks per second: 100 on every Linux this runs on (USER_HZ)
        const TICKS: f64 = 100.0;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // fields after the command name (which may hold spaces) start at field 3 (state)
        let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let ticks = |i: usize| {
            fields
                .get(i)
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let kib = |key: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        ProcUsage {
            // utime and stime are fields 14 and 15 of stat, 11 and 12 after the state
            cpu_seconds: (ticks(11) + ticks(12)) / TICKS,
            rss_mib: kib("VmRSS:") / 1024.0,
            peak_rss_mib: kib("VmHWM:") / 1024.0,
        }
    }
}

impl Drop for Clusternet {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The value of environment variable `name`, or `default` when it is unset or does not parse
/// (the benches' and the chaos suite's size knobs).
pub fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The `p` quantile (0..=1) of ascending `sorted` durations, nearest rank; zero when empty.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted
        .get(((sorted.len() as f64 * p).ceil() as usize).saturating_sub(1))
        .copied()
        .unwrap_or_default()
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

impl TestEnv {
    /// The parent's API server URL as an agent dials it.
    pub fn parent_url(&self) -> String {
        let env = std::fs::read_to_string(self.dir.join("env")).expect("reading DIR/env");
        let port = env
            .lines()
            .find_map(|l| l.strip_prefix("PARENT_PORT="))
            .expect("PARENT_PORT in DIR/env");
        format!("https://127.0.0.1:{port}")
    }

    /// Installs the Clusternet CRDs into the parent (idempotent) and starts, once per test binary,
    /// the controller role against it. The controller is stopped when the test binary exits.
    pub fn with_controller(&self) -> &'static ControllerHandle {
        self.with_controller_args(&[])
    }

    /// [`TestEnv::with_controller`] with extra controller flags: the first call in a test binary
    /// decides them, so a binary whose tests need a flag (`--cluster-api-kubeconfig`) passes the
    /// same everywhere.
    pub fn with_controller_args(&self, extra: &[&str]) -> &'static ControllerHandle {
        static CONTROLLER: OnceLock<ControllerHandle> = OnceLock::new();
        CONTROLLER.get_or_init(|| {
            self.install_crds();
            self.start_controller(extra)
        })
    }

    /// Installs the Clusternet CRDs into the parent (idempotent) and waits until they are served.
    pub fn install_crds(&self) {
        static INSTALLED: OnceLock<()> = OnceLock::new();
        INSTALLED.get_or_init(|| {
            let crds = Command::new(clusternet_bin())
                .arg("crds")
                .output()
                .expect("clusternet crds");
            assert!(crds.status.success(), "clusternet crds failed");
            let mut apply = Command::new(self.bin("kubectl"))
                .arg("--kubeconfig")
                .arg(self.parent_kubeconfig())
                .args(["apply", "--server-side", "--force-conflicts", "-f", "-"])
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::null())
                .spawn()
                .expect("kubectl apply");
            {
                use std::io::Write;
                let mut stdin = apply.stdin.take().expect("kubectl stdin");
                stdin
                    .write_all(&crds.stdout)
                    .expect("writing CRDs to kubectl");
            }
            assert!(
                apply.wait().expect("kubectl apply").success(),
                "installing the CRDs failed"
            );
            for crd in clusternet::apis::crds()
                .iter()
                .filter_map(|c| c.metadata.name.clone())
            {
                let crd = crd.as_str();
                let ok = Command::new(self.bin("kubectl"))
                    .arg("--kubeconfig")
                    .arg(self.parent_kubeconfig())
                    .args([
                        "wait",
                        "--for=condition=Established",
                        &format!("crd/{crd}"),
                        "--timeout=60s",
                    ])
                    .output()
                    .map(|o| o.status.success())
                    .unwrap_or(false);
                assert!(ok, "CRD {crd} not established");
            }
        });
    }

    fn start_controller(&self, extra: &[&str]) -> ControllerHandle {
        let health_port = free_port();
        {
            // One controller per test binary: two leaders-in-waiting would be fine, but two
            // approvers with separate Leases would race. A watchdog ends it with the test binary.
            let log = self
                .dir
                .join("logs")
                .join(format!("controller-{}.log", std::process::id()));
            let script = format!(
                "{bin} --role=controller,scheduler --kubeconfig={kc} --health-bind-address=127.0.0.1:{health_port} \
                 --leader-elect-lease-duration=4s --leader-elect-renew-deadline=3s --leader-elect-retry-period=500ms \
                 --cluster-failover-grace=2s --cluster-failback-stable=20s --helm-binary={helm} \
                 --feature-gates=MultiClusterService=true {extra} \
                 >{log} 2>&1 & pid=$!; while kill -0 {owner} 2>/dev/null && kill -0 $pid 2>/dev/null; do sleep 0.5; done; kill $pid 2>/dev/null",
                bin = Launcher::get().shell(&[]),
                kc = self.parent_kubeconfig().display(),
                log = log.display(),
                helm = self.bin("helm").display(),
                extra = extra.join(" "),
                health_port = health_port,
                owner = std::process::id(),
            );
            let child = Command::new("bash")
                .args(["-c", &script])
                .spawn()
                .expect("starting the controller");
            ControllerHandle {
                _watchdog: std::sync::Mutex::new(child),
                log,
                health_port,
            }
        }
    }
}

pub struct ControllerHandle {
    _watchdog: std::sync::Mutex<std::process::Child>,
    pub log: PathBuf,
    health_port: u16,
}

impl ControllerHandle {
    /// The controller's whole `/metrics` page (empty if it cannot be read).
    pub async fn metrics_text(&self) -> String {
        http_get(self.health_port, "/metrics")
            .await
            .map(|(_, body)| body)
            .unwrap_or_default()
    }

    /// The value of a line of the controller's `/metrics` that starts with `prefix`.
    pub async fn metric(&self, prefix: &str) -> Option<f64> {
        self.metrics_text()
            .await
            .lines()
            .find(|l| l.starts_with(prefix))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
    }
}

/// The arguments of an agent in child `i`, with its own Lease/system namespace so that several
/// tests can run agents (distinct cluster IDs) in the same child at once.
pub fn agent_args(
    env: &TestEnv,
    i: usize,
    system_ns: &str,
    name: &str,
    extra: &[&str],
) -> Vec<String> {
    let mut args = vec![
        "--role=agent".to_string(),
        format!("--kubeconfig={}", env.child_kubeconfig(i).display()),
        format!("--cluster-reg-parent-url={}", env.parent_url()),
        format!("--cluster-reg-token={}", env.bootstrap_token()),
        format!("--cluster-reg-name={name}"),
        format!("--leader-elect-resource-namespace={system_ns}"),
        format!("--system-namespace={system_ns}"),
        "--leader-elect-lease-duration=4s".to_string(),
        "--leader-elect-renew-deadline=3s".to_string(),
        "--leader-elect-retry-period=500ms".to_string(),
        "--cluster-status-collect-frequency=500ms".to_string(),
        // every agent its own predictor port (several share this host); flags in `extra` win
        "--predictor-port=0".to_string(),
        format!("--helm-binary={}", env.bin("helm").display()),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

/// Waits until the ManagedCluster matching label `selector` is Ready, and returns it.
pub async fn wait_cluster_ready(
    parent: &kube::Client,
    selector: &str,
    timeout: Duration,
) -> ManagedCluster {
    wait_for(
        &format!("the cluster {selector} Ready"),
        timeout,
        || async {
            let list = Api::<ManagedCluster>::all(parent.clone())
                .list(&ListParams::default().labels(selector))
                .await
                .map_err(|e| e.to_string())?;
            let mc = list.items.into_iter().next().ok_or("no ManagedCluster")?;
            let ready = mc
                .status
                .as_ref()
                .and_then(|s| s.condition("Ready"))
                .is_some_and(|c| c.status == "True");
            if ready {
                Ok(mc)
            } else {
                Err("not Ready".to_string())
            }
        },
    )
    .await
}

/// An upstream example kept under tests/scenarios.
pub fn scenario(path: &str) -> String {
    std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/scenarios")
            .join(path),
    )
    .expect("an upstream example")
}

/// Installs the bundled mcs-api and About API CRDs (crds/mcs, as deploy/overlays/child does) into child `i`
/// and waits until they are served.
pub fn install_mcs_crds(env: &TestEnv, i: usize) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("crds/mcs");
    let kubectl = |args: &[&str]| {
        Command::new(env.bin("kubectl"))
            .arg("--kubeconfig")
            .arg(env.child_kubeconfig(i))
            .args(args)
            .output()
            .map(|o| {
                (
                    o.status.success(),
                    String::from_utf8_lossy(&o.stderr).into_owned(),
                )
            })
            .unwrap_or_else(|e| (false, e.to_string()))
    };
    let (ok, err) = kubectl(&[
        "apply",
        "--server-side",
        "--force-conflicts",
        "-k",
        &dir.display().to_string(),
    ]);
    assert!(ok, "installing the mcs CRDs into child {i}: {err}");
    for crd in [
        "serviceexports.multicluster.x-k8s.io",
        "serviceimports.multicluster.x-k8s.io",
        "clusterproperties.about.k8s.io",
    ] {
        let (ok, err) = kubectl(&[
            "wait",
            "--for=condition=Established",
            &format!("crd/{crd}"),
            "--timeout=60s",
        ]);
        assert!(ok, "CRD {crd} not established in child {i}: {err}");
    }
}

/// Creates a namespace the product expects to exist (left in place: other tests share it).
pub async fn ensure_namespace(client: &kube::Client, name: &str) {
    let ns = Namespace {
        metadata: kube::api::ObjectMeta {
            name: Some(name.to_string()),
            ..Default::default()
        },
        ..Default::default()
    };
    match Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => panic!("creating namespace {name}: {e}"),
    }
}

// ---- registered clusters for scenario tests ----

use clusternet::apis::ManagedCluster;
use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::ResourceExt;
use kube::api::ListParams;
use serde_json::json;

pub struct Cluster {
    pub agent: Clusternet,
    pub ns: TestNamespace,
    pub child: kube::Client,
    pub dedicated: String,
    pub name: String,
    /// The agent's command line, to start it again after a kill.
    pub args: Vec<String>,
    /// The logs of the agent's earlier runs (the current one is `agent.log`).
    pub old_logs: Vec<PathBuf>,
    /// The network namespace the agent runs in, if not the test's own.
    pub netns: Option<String>,
}

impl Cluster {
    /// SIGKILLs the agent, as a crash or an OOM kill would.
    pub fn kill_agent(&mut self) {
        self.agent.kill();
    }

    /// Starts the agent again with the same command line (a new log file).
    pub fn start_agent(&mut self) {
        self.agent.kill();
        let args: Vec<&str> = self.args.iter().map(String::as_str).collect();
        let name = format!("agent-{}", self.name);
        let next = match &self.netns {
            None => Clusternet::start(&name, &args),
            Some(ns) => Clusternet::start_in_netns(&name, ns, &args),
        };
        let old = std::mem::replace(&mut self.agent, next);
        self.old_logs.push(old.log.clone());
    }

    /// Everything the agent logged, over all its runs.
    pub fn agent_logs(&self) -> String {
        self.old_logs
            .iter()
            .chain(std::iter::once(&self.agent.log))
            .map(|p| std::fs::read_to_string(p).unwrap_or_default())
            .collect()
    }
}

pub fn uid() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..6].to_string()
}

/// Gives the child's app deployer cluster-admin rights, as deploy/overlays/child does.
pub async fn install_app_deployer(child: &kube::Client, ns: &str) {
    let _ = Api::<ServiceAccount>::namespaced(child.clone(), ns)
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "clusternet-app-deployer"}}))
                .expect("SA"),
        )
        .await;
    let _ = Api::<Secret>::namespaced(child.clone(), ns)
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "clusternet-app-deployer",
                "annotations": {"kubernetes.io/service-account.name": "clusternet-app-deployer"}},
                "type": "kubernetes.io/service-account-token"}))
            .expect("Secret"),
        )
        .await;
    let _ = Api::<ClusterRoleBinding>::all(child.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": format!("clusternet-app-deployer-{ns}")},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
                "subjects": [{"kind": "ServiceAccount", "name": "clusternet-app-deployer", "namespace": ns}]}))
            .expect("binding"),
        )
        .await;
}

/// A registered cluster's ManagedCluster.
pub async fn managed_cluster(parent: &kube::Client, c: &Cluster) -> ManagedCluster {
    Api::<ManagedCluster>::namespaced(parent.clone(), &c.dedicated)
        .list(&ListParams::default())
        .await
        .expect("listing ManagedClusters")
        .items
        .into_iter()
        .next()
        .expect("the ManagedCluster")
}

/// The cluster ID (`spec.clusterId`) of a registered cluster's ManagedCluster.
pub async fn cluster_id(parent: &kube::Client, c: &Cluster) -> String {
    let list = Api::<ManagedCluster>::namespaced(parent.clone(), &c.dedicated)
        .list(&ListParams::default())
        .await
        .expect("ManagedClusters");
    list.items
        .first()
        .map(|m| m.spec.cluster_id.clone())
        .expect("a ManagedCluster")
}

/// Registers one agent per child in `children`, labelled `e2e=<id>` plus `extra_labels[i]`.
pub async fn register(
    env: &TestEnv,
    id: &str,
    children: &[usize],
    mode: &str,
    extra_labels: &[&str],
) -> Vec<Cluster> {
    register_with(env, id, children, mode, extra_labels, &[]).await
}

/// [`register`] with extra agent flags (the same for every agent).
pub async fn register_with(
    env: &TestEnv,
    id: &str,
    children: &[usize],
    mode: &str,
    extra_labels: &[&str],
    extra_args: &[&str],
) -> Vec<Cluster> {
    register_in(env, id, children, mode, extra_labels, extra_args, None).await
}

/// [`register_with`], the agents running in network namespace `netns` (pass the parent URL and
/// the child's kubeconfig as seen from there in `extra_args`).
pub async fn register_in(
    env: &TestEnv,
    id: &str,
    children: &[usize],
    mode: &str,
    extra_labels: &[&str],
    extra_args: &[&str],
    netns: Option<&str>,
) -> Vec<Cluster> {
    let parent = env.parent().await;
    let mut out = Vec::new();
    for (n, &i) in children.iter().enumerate() {
        let child = env.child(i).await;
        let ns = TestNamespace::create(&child, &env.child_kubeconfig(i), "dist").await;
        install_app_deployer(&child, &ns.name).await;
        let labels = format!(
            "--cluster-labels=e2e={id}{}",
            extra_labels
                .get(n)
                .map(|l| format!(",{l}"))
                .unwrap_or_default()
        );
        let args = agent_args(
            env,
            i,
            &ns.name,
            &format!("e2e-{id}-{n}"),
            &[
                &labels,
                &format!("--cluster-sync-mode={mode}"),
                "--cluster-status-update-frequency=10s",
            ]
            .into_iter()
            .chain(extra_args.iter().copied())
            .collect::<Vec<_>>(),
        );
        let arg_refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let agent_name = format!("agent-e2e-{id}-{n}");
        let agent = match netns {
            None => Clusternet::start(&agent_name, &arg_refs),
            Some(ns) => Clusternet::start_in_netns(&agent_name, ns, &arg_refs),
        };
        let name = format!("e2e-{id}-{n}");
        let mc = wait_cluster_ready(
            &parent,
            &format!("clusters.clusternet.io/cluster-name={name}"),
            Duration::from_secs(30),
        )
        .await;
        if mode != "Pull" {
            // the parent pushes with the child's published credentials
            let secrets: Api<Secret> =
                Api::namespaced(parent.clone(), &mc.namespace().unwrap_or_default());
            wait_for(
                "child-cluster-deployer",
                Duration::from_secs(30),
                || async {
                    secrets
                        .get_opt("child-cluster-deployer")
                        .await
                        .map_err(|e| e.to_string())?
                        .map(|_| ())
                        .ok_or("not yet".to_string())
                },
            )
            .await;
        }
        out.push(Cluster {
            agent,
            ns,
            child,
            dedicated: mc.namespace().unwrap_or_default(),
            name,
            args,
            old_logs: Vec::new(),
            netns: netns.map(str::to_string),
        });
    }
    out
}

/// The hub of a test binary: one `clusternet --role=hub` on a fixed loopback port, registered
/// with the parent through an ExternalName Service and the two APIServices. A bash watchdog
/// restarts it when it dies (as a Deployment would), and when the test binary exits it stops the
/// hub and removes the APIServices (an unavailable aggregated API stalls namespace deletion for
/// the test binaries that follow).
pub struct HubHandle {
    _watchdog: std::sync::Mutex<std::process::Child>,
    pub port: u16,
    pub health_port: u16,
    pub log: PathBuf,
    pidfile: PathBuf,
}

impl HubHandle {
    /// The hub's current process ID.
    pub fn pid(&self) -> Option<u32> {
        std::fs::read_to_string(&self.pidfile)
            .ok()
            .and_then(|s| s.trim().parse().ok())
    }

    /// SIGKILLs the hub; the watchdog starts a new one a second later.
    pub fn kill(&self) -> u32 {
        let pid = self.pid().expect("hub pid");
        let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        pid
    }

    /// GET on the hub's health/metrics port.
    pub async fn health_get(&self, path: &str) -> Result<(u16, String), String> {
        http_get(self.health_port, path).await
    }

    /// A metric value from the hub's /metrics.
    pub async fn metric(&self, prefix: &str) -> Option<f64> {
        let (_, body) = self.health_get("/metrics").await.ok()?;
        body.lines()
            .find(|l| l.starts_with(prefix))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// The bearer token of a kubeconfig of the test environment.
pub fn kubeconfig_token(kubeconfig: &Path) -> String {
    std::fs::read_to_string(kubeconfig)
        .ok()
        .and_then(|k| {
            k.lines().find_map(|l| {
                l.trim()
                    .strip_prefix("token:")
                    .map(|t| t.trim().to_string())
            })
        })
        .expect("a token in the kubeconfig")
}

/// A TLS connection straight to a hub on loopback `port` (any certificate accepted: tests check
/// what it serves, not who signed it).
pub async fn tls_to_hub(
    port: u16,
) -> Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>, String> {
    let tls =
        clusternet::runtime::serving::insecure_client_config(None).map_err(|e| e.to_string())?;
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(tls));
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .map_err(|e| format!("connecting to the hub: {e}"))?;
    let name = tokio_rustls::rustls::pki_types::ServerName::try_from("localhost")
        .map_err(|e| e.to_string())?;
    connector
        .connect(name, tcp)
        .await
        .map_err(|e| format!("TLS to the hub: {e}"))
}

/// GET `path` on a hub itself over TLS (skipping the aggregator), with a bearer token or none:
/// (status, body).
pub async fn get_from_hub(
    port: u16,
    token: Option<&str>,
    path: &str,
) -> Result<(u16, String), String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tls_to_hub(port).await?;
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n{auth}Connection: close\r\n\r\n")
            .as_bytes(),
    )
    .await
    .map_err(|e| e.to_string())?;
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(20), s.read_to_end(&mut buf)).await;
    let text = String::from_utf8_lossy(&buf).into_owned();
    let code = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("no HTTP status in {text:?}"))?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Ok((code, body))
}

/// A plain HTTP GET to a loopback port: (status, body).
pub async fn http_get(port: u16, path: &str) -> Result<(u16, String), String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .map_err(|e| format!("connect: {e}"))?;
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await
    .map_err(|e| e.to_string())?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await.map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&buf).to_string();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("no HTTP status in {text:?}"))?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Ok((status, body))
}

impl TestEnv {
    /// Starts (once per test binary) the hub against the parent and waits until the parent's
    /// aggregator reports both APIServices Available. Also installs the CRDs and upstream's
    /// bootstrap RBAC (`clusternet:system:socketsproxy`).
    pub fn with_hub(&self) -> &'static HubHandle {
        static HUB: OnceLock<HubHandle> = OnceLock::new();
        HUB.get_or_init(|| {
            self.install_crds();
            self.apply_bootstrap_rbac();
            let port = free_port();
            let health_port = free_port();
            let id = std::process::id();
            let log = self.dir.join("logs").join(format!("hub-{id}.log"));
            let pidfile = self.dir.join(format!("hub-{id}.pid"));
            let register = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/env/hub-register.sh");
            let script = format!(
                "start() {{ {bin} --role=hub --kubeconfig={kc} --bind-address=127.0.0.1 --secure-port={port} \
                 --health-bind-address=127.0.0.1:{health_port} >>{log} 2>&1 & echo $! >{pidfile}; }}; \
                 start; \
                 while kill -0 {owner} 2>/dev/null; do \
                   if ! kill -0 $(cat {pidfile}) 2>/dev/null; then sleep 1; start; fi; sleep 0.2; \
                 done; kill $(cat {pidfile}) 2>/dev/null; K8S_BIN={k8s} bash {register} {kc} --delete",
                bin = Launcher::get().shell(&[("RUST_LOG", "info,clusternet::hub=debug")]),
                kc = self.parent_kubeconfig().display(),
                log = log.display(),
                pidfile = pidfile.display(),
                owner = id,
                k8s = self.bin_dir().display(),
            );
            let child = Command::new("bash")
                .args(["-c", &script])
                .env("RUST_LOG", "info,clusternet::hub=debug")
                .spawn()
                .expect("starting the hub");
            self.register_hub(port);
            for name in [
                "v1alpha1.proxies.clusternet.io",
                "v1alpha1.shadow",
                "v1alpha1.placement.clusternet.io",
                "v1alpha1.dashboard.clusternet.io",
            ] {
                let ok = Command::new(self.bin("kubectl"))
                    .arg("--kubeconfig")
                    .arg(self.parent_kubeconfig())
                    .args([
                        "wait",
                        "--for=condition=Available",
                        &format!("apiservice/{name}"),
                        "--timeout=60s",
                    ])
                    .output()
                    .map(|o| o.status.success())
                    .unwrap_or(false);
                assert!(ok, "APIService {name} not Available; hub log {}", log.display());
            }
            HubHandle {
                _watchdog: std::sync::Mutex::new(child),
                port,
                health_port,
                log,
                pidfile,
            }
        })
    }

    /// Applies upstream's bootstrap RBAC (`clusternet:system:socketsproxy`) to the parent.
    pub fn apply_bootstrap_rbac(&self) {
        let rbac = Command::new(self.bin("kubectl"))
            .arg("--kubeconfig")
            .arg(self.parent_kubeconfig())
            .args([
                "apply",
                "-f",
                concat!(
                    env!("CARGO_MANIFEST_DIR"),
                    "/deploy/overlays/parent/bootstrap-rbac.yaml"
                ),
            ])
            .output()
            .expect("kubectl apply");
        assert!(
            rbac.status.success(),
            "applying the bootstrap RBAC: {}",
            String::from_utf8_lossy(&rbac.stderr)
        );
    }

    /// Points the parent's aggregated APIs at a hub on 127.0.0.1:`port` (tests/env/hub-register.sh).
    pub fn register_hub(&self, port: u16) {
        let reg = Command::new("bash")
            .arg(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/env/hub-register.sh"
            ))
            .arg(self.parent_kubeconfig())
            .arg(port.to_string())
            .env("K8S_BIN", self.bin_dir())
            .output()
            .expect("registering the hub");
        assert!(
            reg.status.success(),
            "registering the hub: {}",
            String::from_utf8_lossy(&reg.stderr)
        );
    }

    /// The directory holding kube-apiserver, kubectl and friends.
    pub fn bin_dir(&self) -> PathBuf {
        self.bin("kubectl")
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default()
    }

    /// `kubectl apply -f -` of `obj` in the parent (RBAC for the tests' users), which must succeed.
    pub fn kubectl_apply(&self, obj: &serde_json::Value) {
        use std::io::Write;
        let mut apply = Command::new(self.bin("kubectl"))
            .arg("--kubeconfig")
            .arg(self.parent_kubeconfig())
            .args(["apply", "-f", "-"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("kubectl apply");
        apply
            .stdin
            .take()
            .expect("kubectl stdin")
            .write_all(obj.to_string().as_bytes())
            .expect("writing to kubectl");
        assert!(
            apply.wait().expect("kubectl apply").success(),
            "applying {obj}"
        );
    }

    /// Runs `kubectl-clusternet` (this binary under its plugin name) against the parent.
    pub fn plugin(&self, args: &[&str]) -> std::process::Output {
        self.plugin_with_stdin(args, None)
    }

    pub fn plugin_with_stdin(&self, args: &[&str], stdin: Option<&str>) -> std::process::Output {
        use std::io::Write;
        let mut child = Command::new(clusternet_bin())
            .arg("kubectl-clusternet")
            .arg(format!(
                "--kubeconfig={}",
                self.parent_kubeconfig().display()
            ))
            .args(args)
            .env("KUBECTL", self.bin("kubectl"))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("starting kubectl-clusternet");
        if let Some(input) = stdin
            && let Some(mut s) = child.stdin.take()
        {
            s.write_all(input.as_bytes()).expect("plugin stdin");
        }
        drop(child.stdin.take());
        child.wait_with_output().expect("kubectl-clusternet")
    }
}

/// The Manifest the shadow API would store for `template` (upstream's name and config labels;
/// plural = lower-case kind + "s", enough for the kinds the tests use).
pub fn manifest_of(template: &serde_json::Value) -> clusternet::apis::Manifest {
    let api_version = template["apiVersion"].as_str().unwrap_or_default();
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let kind = template["kind"].as_str().unwrap_or_default();
    let name = template["metadata"]["name"].as_str().unwrap_or_default();
    let ns = template["metadata"]["namespace"]
        .as_str()
        .unwrap_or_default();
    let plural = format!("{}s", kind.to_lowercase());
    let mname = if ns.is_empty() {
        format!("{plural}.{name}")
    } else {
        format!("{plural}.{ns}.{name}")
    };
    serde_json::from_value(json!({
        "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Manifest",
        "metadata": {"name": mname, "namespace": "clusternet-reserved", "labels": {
            "apps.clusternet.io/config.group": group, "apps.clusternet.io/config.version": version,
            "apps.clusternet.io/config.kind": kind, "apps.clusternet.io/config.name": name,
            "apps.clusternet.io/config.namespace": ns}},
        "template": template
    }))
    .expect("a Manifest")
}

/// The Subscription feed naming `object`.
pub fn feed_of(object: &serde_json::Value) -> serde_json::Value {
    let mut f = json!({"apiVersion": object["apiVersion"], "kind": object["kind"],
                       "name": object["metadata"]["name"]});
    if let Some(ns) = object["metadata"]["namespace"].as_str() {
        f["namespace"] = json!(ns);
    }
    f
}

/// Creates the Manifests of `objects` in the parent; returns their names for cleanup.
pub async fn create_manifests(parent: &kube::Client, objects: &[serde_json::Value]) -> Vec<String> {
    ensure_namespace(parent, "clusternet-reserved").await;
    let api: Api<clusternet::apis::Manifest> =
        Api::namespaced(parent.clone(), "clusternet-reserved");
    let mut names = Vec::new();
    for o in objects {
        let m = manifest_of(o);
        names.push(m.name_any());
        api.create(&PostParams::default(), &m)
            .await
            .expect("creating a Manifest");
    }
    names
}

/// Fills child 1's two fake nodes to 6 of their 8 CPUs with pods bound straight to them, so that
/// capacity predictors see it nearly full. The pods live as long as the returned namespace.
pub async fn fill_child1(env: &TestEnv) -> TestNamespace {
    use k8s_openapi::api::core::v1::Pod;
    let child1 = env.child(1).await;
    let ballast = TestNamespace::create(&child1, &env.child_kubeconfig(1), "ballast").await;
    for n in 0..2 {
        let pod: Pod = serde_json::from_value(json!({"metadata": {"name": format!("ballast-{n}")},
            "spec": {"nodeName": format!("child1-node-{n}"), "containers": [{"name": "c", "image": "pause",
                "resources": {"requests": {"cpu": "6"}}}]}}))
        .expect("a Pod");
        Api::<Pod>::namespaced(child1.clone(), &ballast.name)
            .create(&PostParams::default(), &pod)
            .await
            .expect("ballast pod");
    }
    ballast
}

/// Waits until Deployment `web` in `appns` is gone from `child` and `appns` is gone or going.
pub async fn wait_app_removed(child: &kube::Client, appns: &str) {
    use k8s_openapi::api::apps::v1::Deployment;
    wait_for(
        "the app to be removed from the child",
        Duration::from_secs(60),
        || async {
            let d = Api::<Deployment>::namespaced(child.clone(), appns)
                .get_opt("web")
                .await
                .map_err(|e| e.to_string())?;
            let ns = Api::<Namespace>::all(child.clone())
                .get_opt(appns)
                .await
                .map_err(|e| e.to_string())?;
            let ns_gone = ns.is_none_or(|n| n.metadata.deletion_timestamp.is_some());
            if d.is_none() && ns_gone {
                Ok(())
            } else {
                Err(format!(
                    "deployment present: {}, namespace gone: {ns_gone}",
                    d.is_some()
                ))
            }
        },
    )
    .await;
}

// ---- the environment's own processes, killed and started again ----

/// A process of the test environment (`etcd`, `parent-kube-apiserver`, ...) as it was started:
/// what [`TestEnv::kill_component`] keeps to start it again.
pub struct Component {
    name: String,
    exe: PathBuf,
    argv: Vec<std::ffi::OsString>,
    envs: Vec<(std::ffi::OsString, std::ffi::OsString)>,
    cwd: PathBuf,
}

impl TestEnv {
    /// kill -9 of one of env-up.sh's processes by its pid file's name, keeping its command line,
    /// environment and directory (read from /proc) to start it again.
    pub fn kill_component(&self, name: &str) -> Component {
        use std::os::unix::ffi::OsStrExt;
        let pid_file = self.dir.join("pids").join(format!("{name}.pid"));
        let pid = std::fs::read_to_string(&pid_file)
            .unwrap_or_else(|e| panic!("reading {}: {e}", pid_file.display()));
        let pid = pid.trim();
        let proc = PathBuf::from("/proc").join(pid);
        let split = |bytes: Vec<u8>| -> Vec<std::ffi::OsString> {
            bytes
                .split(|b| *b == 0)
                .filter(|part| !part.is_empty())
                .map(|part| std::ffi::OsStr::from_bytes(part).to_os_string())
                .collect()
        };
        let argv = split(std::fs::read(proc.join("cmdline")).expect("the component's cmdline"));
        let envs = split(std::fs::read(proc.join("environ")).unwrap_or_default())
            .into_iter()
            .filter_map(|kv| {
                let kv = kv.as_bytes();
                let eq = kv.iter().position(|b| *b == b'=')?;
                Some((
                    std::ffi::OsStr::from_bytes(&kv[..eq]).to_os_string(),
                    std::ffi::OsStr::from_bytes(&kv[eq + 1..]).to_os_string(),
                ))
            })
            .collect();
        let cwd = std::fs::read_link(proc.join("cwd")).unwrap_or_else(|_| self.dir.clone());
        let exe = std::fs::read_link(proc.join("exe")).expect("the component's executable");
        assert!(!argv.is_empty(), "{name} (pid {pid}) is not running");
        let _ = Command::new("kill").args(["-9", pid]).status();
        // gone for real before anyone counts on it: its port must be free to bind again
        let deadline = Instant::now() + Duration::from_secs(10);
        while proc.exists() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        Component {
            name: name.to_string(),
            exe,
            argv,
            envs,
            cwd,
        }
    }

    /// Starts a killed component again as it was, logging to its old log; its pid file follows,
    /// so env-down.sh stops the new process.
    pub fn start_component(&self, c: Component) {
        use std::os::unix::process::CommandExt;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("logs").join(format!("{}.log", c.name)))
            .expect("the component's log");
        let mut child = Command::new(&c.exe)
            .args(&c.argv[1..])
            .env_clear()
            .envs(c.envs)
            .current_dir(c.cwd)
            .stdin(std::process::Stdio::null())
            .stdout(log.try_clone().expect("log handle"))
            .stderr(log)
            // its own process group: a test's end does not take it along
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {} again: {e}", c.name));
        std::fs::write(
            self.dir.join("pids").join(format!("{}.pid", c.name)),
            child.id().to_string(),
        )
        .expect("writing the pid file");
        // reaped when it ends (killed again, or by env-down.sh), not left a zombie
        std::thread::spawn(move || {
            let _ = child.wait();
        });
    }
}

// ---- a TCP fault proxy between a process and an API server ----

/// What a [`FaultProxy`] does to the bytes it carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Link {
    /// Bytes pass.
    Up,
    /// Open connections are reset and new ones closed at once: a link that drops loudly.
    Cut,
    /// Connections stay open (and new ones are accepted) but no byte moves until the link is up
    /// again: a silent partition, noticed only by the ends' own timeouts.
    Stall,
    /// Every chunk waits this long before it goes on: a slow, high-latency link.
    Slow(Duration),
}

/// A loopback TCP proxy in front of `target` whose link can be cut, stalled, slowed or reset
/// (issue #21's userspace fault proxy; `tc netem` is not in this kernel), as when a child's
/// network drops or crawls while everything else stays reachable.
pub struct FaultProxy {
    pub port: u16,
    /// Where it listens (`ip:port`).
    pub addr: std::net::SocketAddr,
    /// The link's mode and a reset generation: bumping it resets every open connection.
    link: tokio::sync::watch::Sender<(Link, u64)>,
}

impl FaultProxy {
    pub async fn start(target: std::net::SocketAddr) -> FaultProxy {
        Self::start_on("127.0.0.1", target).await
    }

    /// A proxy listening on `ip` (any free port), for example a veth address.
    pub async fn start_on(ip: &str, target: std::net::SocketAddr) -> FaultProxy {
        let listener = tokio::net::TcpListener::bind((ip, 0))
            .await
            .expect("binding the fault proxy");
        let addr = listener.local_addr().expect("proxy address");
        let port = addr.port();
        let (link, watch) = tokio::sync::watch::channel((Link::Up, 0u64));
        tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                let (mode, generation) = *watch.borrow();
                if mode == Link::Cut {
                    drop(inbound);
                    continue;
                }
                tokio::spawn(Self::carry(inbound, target, watch.clone(), generation));
            }
        });
        FaultProxy { port, addr, link }
    }

    /// One connection, until either end closes, the link is cut or a reset is asked for.
    async fn carry(
        mut inbound: tokio::net::TcpStream,
        target: std::net::SocketAddr,
        mut link: tokio::sync::watch::Receiver<(Link, u64)>,
        generation: u64,
    ) {
        let Ok(mut outbound) = tokio::net::TcpStream::connect(target).await else {
            return;
        };
        let broken = {
            let (ri, wi) = inbound.split();
            let (ro, wo) = outbound.split();
            tokio::select! {
                _ = Self::pump(ri, wo, link.clone()) => false,
                _ = Self::pump(ro, wi, link.clone()) => false,
                _ = link.wait_for(|(mode, g)| *mode == Link::Cut || *g != generation) => true,
            }
        };
        if broken {
            // SO_LINGER 0: the close is a TCP reset, not an orderly FIN
            let _ = inbound.set_zero_linger();
            let _ = outbound.set_zero_linger();
        }
    }

    /// Copies one direction, holding each chunk as long as the link says.
    async fn pump(
        mut from: tokio::net::tcp::ReadHalf<'_>,
        mut to: tokio::net::tcp::WriteHalf<'_>,
        mut link: tokio::sync::watch::Receiver<(Link, u64)>,
    ) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let n = match from.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            loop {
                let mode = link.borrow_and_update().0;
                match mode {
                    Link::Up => break,
                    Link::Slow(delay) => {
                        tokio::time::sleep(delay).await;
                        break;
                    }
                    Link::Stall => {
                        if link.changed().await.is_err() {
                            return;
                        }
                    }
                    Link::Cut => return,
                }
            }
            if to.write_all(&buf[..n]).await.is_err() {
                return;
            }
        }
    }

    pub fn set(&self, mode: Link) {
        self.link.send_modify(|(m, _)| *m = mode);
    }

    pub fn cut(&self) {
        self.set(Link::Cut);
    }

    pub fn restore(&self) {
        self.set(Link::Up);
    }

    /// Resets every open connection (new ones are carried as the link's mode says).
    pub fn reset_all(&self) {
        self.link.send_modify(|(_, g)| *g += 1);
    }

    /// A copy of `kubeconfig` whose server goes through this proxy (the API server's certificate
    /// names 127.0.0.1 and [`NETNS_HOST_IP`], so TLS still verifies).
    pub fn kubeconfig_through(&self, kubeconfig: &Path, out: &Path) {
        let text = std::fs::read_to_string(kubeconfig).expect("reading the kubeconfig");
        let server = kubeconfig_server(kubeconfig);
        let rewritten = text.replace(
            &format!("server: https://{server}"),
            &format!("server: https://{}", self.addr),
        );
        std::fs::write(out, rewritten).expect("writing the proxied kubeconfig");
    }
}

// ---- a child's side of the network in its own namespace, partitioned by nftables ----

/// The root namespace's end of the veth pair; env-up.sh puts it in every API server's
/// certificate, so a process in the namespace verifies the parent and its child at this address.
pub const NETNS_HOST_IP: &str = "10.231.0.1";
const NETNS_CHILD_IP: &str = "10.231.0.2";

/// A network namespace joined to the root one by a veth pair, where a child's agent runs: it
/// reaches the parent and its own child API server through relays on [`NETNS_HOST_IP`], and
/// [`partition`](Self::partition) drops the parent's traffic in the kernel with nftables
/// (silently: no reset, no FIN; the agent only finds out from its own timeouts) while the child's
/// API server stays reachable, as when a child site loses its uplink. Removed on drop.
pub struct Netns {
    pub name: String,
    veth: String,
    /// Relay to the parent API server (the port the partition drops).
    pub parent: FaultProxy,
    /// Relay to the child's API server.
    pub child: FaultProxy,
}

impl Netns {
    /// Needs root, `ip` and `nft`; one at a time (the addresses are fixed).
    pub async fn create(
        tag: &str,
        parent: std::net::SocketAddr,
        child: std::net::SocketAddr,
    ) -> Netns {
        let name = format!("cn-{tag}");
        let veth = "cnveth0".to_string();
        // a run that crashed may have left its namespace and veth behind
        let _ = Command::new("ip")
            .args(["link", "del", &veth])
            .stderr(std::process::Stdio::null())
            .status();
        for ns in std::fs::read_dir("/run/netns")
            .into_iter()
            .flatten()
            .flatten()
        {
            let old = ns.file_name().to_string_lossy().to_string();
            if old.starts_with("cn-") {
                let _ = Command::new("ip").args(["netns", "del", &old]).status();
            }
        }
        let peer = "cnveth1";
        let host_cidr = format!("{NETNS_HOST_IP}/30");
        let child_cidr = format!("{NETNS_CHILD_IP}/30");
        let steps: Vec<Vec<&str>> = vec![
            vec!["ip", "netns", "add", &name],
            vec![
                "ip", "link", "add", &veth, "type", "veth", "peer", "name", peer,
            ],
            vec!["ip", "link", "set", peer, "netns", &name],
            vec!["ip", "addr", "add", &host_cidr, "dev", &veth],
            vec!["ip", "link", "set", &veth, "up"],
            vec![
                "ip",
                "netns",
                "exec",
                &name,
                "ip",
                "addr",
                "add",
                &child_cidr,
                "dev",
                peer,
            ],
            vec![
                "ip", "netns", "exec", &name, "ip", "link", "set", peer, "up",
            ],
            vec![
                "ip", "netns", "exec", &name, "ip", "link", "set", "lo", "up",
            ],
        ];
        for step in steps {
            let out = Command::new(step[0])
                .args(&step[1..])
                .output()
                .unwrap_or_else(|e| panic!("{}: {e} (needs iproute2)", step.join(" ")));
            assert!(
                out.status.success(),
                "{}: {} (network namespaces need root)",
                step.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        let netns = Netns {
            parent: FaultProxy::start_on(NETNS_HOST_IP, parent).await,
            child: FaultProxy::start_on(NETNS_HOST_IP, child).await,
            name,
            veth,
        };
        netns.nft("add table inet clusternet_partition");
        netns
    }

    fn nft(&self, rule: &str) {
        let out = Command::new("ip")
            .args(["netns", "exec", &self.name, "nft"])
            .args(rule.split(' '))
            .output()
            .unwrap_or_else(|e| panic!("nft {rule}: {e}"));
        assert!(
            out.status.success(),
            "nft {rule}: {} (install nftables)",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }

    /// The parent URL as seen from inside the namespace.
    pub fn parent_url(&self) -> String {
        format!("https://{}", self.parent.addr)
    }

    /// Drops every packet between the namespace and the parent's relay, both ways.
    pub fn partition(&self) {
        let port = self.parent.port;
        self.nft(
            "add chain inet clusternet_partition out { type filter hook output priority 0 ; policy accept ; }",
        );
        self.nft(
            "add chain inet clusternet_partition in { type filter hook input priority 0 ; policy accept ; }",
        );
        self.nft(&format!(
            "add rule inet clusternet_partition out ip daddr {NETNS_HOST_IP} tcp dport {port} drop"
        ));
        self.nft(&format!(
            "add rule inet clusternet_partition in ip saddr {NETNS_HOST_IP} tcp sport {port} drop"
        ));
        // the rules hold: a connection from inside the namespace gets no answer at all
        let reached = Command::new("ip")
            .args(["netns", "exec", &self.name, "timeout", "2", "bash", "-c"])
            .arg(format!("exec 3<>/dev/tcp/{NETNS_HOST_IP}/{port}"))
            .stderr(std::process::Stdio::null())
            .status()
            .map(|s| s.success())
            .unwrap_or(true);
        assert!(!reached, "the parent is still reachable from {}", self.name);
    }

    /// Takes the partition's rules away again.
    pub fn heal(&self) {
        self.nft("flush table inet clusternet_partition");
        self.nft("delete chain inet clusternet_partition out");
        self.nft("delete chain inet clusternet_partition in");
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["link", "del", &self.veth])
            .status();
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

/// The API server address (`127.0.0.1:<port>`) a kubeconfig points at.
pub fn kubeconfig_server(kubeconfig: &Path) -> std::net::SocketAddr {
    let text = std::fs::read_to_string(kubeconfig).expect("reading the kubeconfig");
    let port = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("server: https://127.0.0.1:"))
        .expect("a loopback server in the kubeconfig")
        .trim()
        .to_string();
    format!("127.0.0.1:{port}")
        .parse()
        .expect("a socket address")
}

/// Subscription `divided` that splits `objects` Static 1:2 between the clusters labelled
/// `e2e=<id>,w=1` and `e2e=<id>,w=2` (upstream's static dividing example).
pub fn static_dividing_subscription(
    id: &str,
    objects: &[serde_json::Value],
) -> clusternet::apis::Subscription {
    serde_json::from_value(json!({
        "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Subscription", "metadata": {"name": "divided"},
        "spec": {"schedulingStrategy": "Dividing", "dividingScheduling": {"type": "Static"},
            "subscribers": [{"clusterAffinity": {"matchLabels": {"e2e": id, "w": "1"}}, "weight": 1},
                            {"clusterAffinity": {"matchLabels": {"e2e": id, "w": "2"}}, "weight": 2}],
            "feeds": objects.iter().map(feed_of).collect::<Vec<_>>()}}))
    .expect("a Subscription")
}

/// Write requests per resource, from an API server's metrics. Collection deletes (`DELETE` with a
/// `scope` other than `resource`) are left out: the server reports a deletecollection under the
/// verb `DELETE`, and in these environments they are kube-controller-manager's namespace
/// controller emptying a namespace being deleted (one per namespaced resource, so an old test
/// namespace going away looked like clusternet writing every kind once).
pub async fn api_writes(client: &kube::Client) -> std::collections::BTreeMap<String, f64> {
    let req = http::Request::get("/metrics")
        .body(Vec::new())
        .expect("request");
    let text = client.request_text(req).await.unwrap_or_default();
    let mut out = std::collections::BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| l.starts_with("apiserver_request_total{"))
    {
        let verb = line
            .split("verb=\"")
            .nth(1)
            .and_then(|r| r.split('"').next())
            .unwrap_or_default();
        if !matches!(verb, "POST" | "PUT" | "PATCH" | "DELETE" | "APPLY") {
            continue;
        }
        if verb == "DELETE" && !line.contains("scope=\"resource\"") {
            continue;
        }
        let resource = line
            .split("resource=\"")
            .nth(1)
            .and_then(|r| r.split('"').next())
            .unwrap_or_default();
        let subresource = line
            .split("subresource=\"")
            .nth(1)
            .and_then(|r| r.split('"').next())
            .unwrap_or_default();
        let value: f64 = line
            .rsplit(' ')
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0);
        let key = if subresource.is_empty() {
            resource.to_string()
        } else {
            format!("{resource}/{subresource}")
        };
        *out.entry(key).or_default() += value;
    }
    out
}

pub fn writes_delta(
    before: &std::collections::BTreeMap<String, f64>,
    after: &std::collections::BTreeMap<String, f64>,
    keys: &[&str],
) -> f64 {
    keys.iter()
        .map(|k| after.get(*k).copied().unwrap_or(0.0) - before.get(*k).copied().unwrap_or(0.0))
        .sum()
}

/// Deletes the Subscriptions `cm0..cm{n}` and their ConfigMap Manifests `configmaps.<appns>.cm<i>`
/// (the benches' one-ConfigMap-each workloads); errors are ignored, it is cleanup.
pub async fn delete_config_workload(
    subs: &Api<clusternet::apis::Subscription>,
    manifests: &Api<clusternet::apis::Manifest>,
    appns: &str,
    n: usize,
) {
    for i in 0..n {
        let _ = subs
            .delete(&format!("cm{i}"), &kube::api::DeleteParams::default())
            .await;
        let _ = manifests
            .delete(
                &format!("configmaps.{appns}.cm{i}"),
                &kube::api::DeleteParams::default(),
            )
            .await;
    }
}

// ---- stopping a child's API server (SIGSTOP, so it can come back) ----

/// SIGSTOP/SIGCONT child `i`'s kube-apiserver (its pid file from env-up).
pub fn signal_child_apiserver(env: &TestEnv, i: usize, signal: &str) {
    let pid = std::fs::read_to_string(env.dir.join(format!("pids/child{i}-kube-apiserver.pid")))
        .expect("the child's kube-apiserver pid file");
    let ok = Command::new("kill")
        .args([signal, pid.trim()])
        .status()
        .expect("kill")
        .success();
    assert!(ok, "kill {signal} child{i}'s kube-apiserver");
}

/// Resumes the stopped API servers even when a test fails half-way.
pub struct Resume<'a>(pub &'a TestEnv, pub Vec<usize>);

impl Drop for Resume<'_> {
    fn drop(&mut self) {
        for i in &self.1 {
            signal_child_apiserver(self.0, *i, "-CONT");
        }
    }
}

/// [`register_with`] one agent per child in `children`, each with its own predictor port and the
/// label `<label>=<id>` (Dynamic dividing tests); `direct` adds `--predictor-direct-access`.
/// Returns the clusters and their predictor ports.
pub async fn register_with_predictors(
    env: &TestEnv,
    id: &str,
    children: &[usize],
    label: &str,
    direct: bool,
) -> (Vec<Cluster>, Vec<String>) {
    let mut clusters = Vec::new();
    let mut ports = Vec::new();
    for (i, child) in children.iter().enumerate() {
        let port = free_port().to_string();
        let port_flag = format!("--predictor-port={port}");
        let mut flags = vec![port_flag.as_str()];
        if direct {
            flags.push("--predictor-direct-access");
        }
        clusters.extend(
            register_with(
                env,
                &format!("{id}{i}"),
                &[*child],
                "Pull",
                &[&format!("{label}={id}")],
                &flags,
            )
            .await,
        );
        ports.push(port);
    }
    (clusters, ports)
}

/// The failover tests' and benchmark's setup: Pull agents in children 1-3 reporting every 2 s
/// with a 3 s health window, and Subscription `divided` (in a new test namespace named after
/// `prefix`) of Namespace `<prefix>-<id>` and Deployment `web`, 6 replicas, Dividing static
/// 1:1:1, waiting `grace_secs` (tolerationSeconds) for a not-ready cluster.
pub struct Divided {
    pub clusters: Vec<Cluster>,
    pub appns: String,
    pub ns: TestNamespace,
    pub subs: Api<clusternet::apis::Subscription>,
}

pub async fn divided_over_three(env: &TestEnv, id: &str, prefix: &str, grace_secs: u64) -> Divided {
    divided_over_three_with(
        env,
        id,
        prefix,
        grace_secs,
        6,
        &[
            "--cluster-health-failure-window=3s",
            "--cluster-status-update-frequency=2s",
        ],
    )
    .await
}

/// [`divided_over_three`] with `replicas` and the agents' flags `agent_args`.
pub async fn divided_over_three_with(
    env: &TestEnv,
    id: &str,
    prefix: &str,
    grace_secs: u64,
    replicas: i32,
    agent_args: &[&str],
) -> Divided {
    let parent = env.parent().await;
    let clusters = register_with(env, id, &[1, 2, 3], "Pull", &[], agent_args).await;
    let appns = format!("{prefix}-{id}");
    let objects = vec![
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": appns}}),
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": appns},
               "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                        "template": {"metadata": {"labels": {"app": "web"}},
                                     "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]}}}}),
    ];
    create_manifests(&parent, &objects).await;
    let ns = TestNamespace::create(&parent, &env.parent_kubeconfig(), prefix).await;
    let subs: Api<clusternet::apis::Subscription> = Api::namespaced(parent.clone(), &ns.name);
    let sub: clusternet::apis::Subscription = serde_json::from_value(json!({
        "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Subscription", "metadata": {"name": "divided"},
        "spec": {"schedulingStrategy": "Dividing", "dividingScheduling": {"type": "Static"},
            "subscribers": [{"clusterAffinity": {"matchLabels": {"e2e": id}}, "weight": 1}],
            // as pods with node taints: the Subscription's own wait for a not-ready cluster
            "clusterTolerations": [{"key": "clusters.clusternet.io/unschedulable", "operator": "Exists",
                "effect": "NoSchedule", "tolerationSeconds": grace_secs}],
            "feeds": objects.iter().map(feed_of).collect::<Vec<serde_json::Value>>()}}))
    .expect("a Subscription");
    subs.create(&PostParams::default(), &sub)
        .await
        .expect("creating the Subscription");
    Divided {
        clusters,
        appns,
        ns,
        subs,
    }
}

// ---- a Helm chart repository and an OCI registry on loopback ----

/// An HTTP chart repository on loopback: charts of `tests/charts/` packaged with the real `helm
/// package`, indexed with `helm repo index`, served from a temporary directory (with
/// credentials, only to a request that presents them). Stops when dropped.
pub struct ChartRepo {
    pub url: String,
    pub dir: tempfile::TempDir,
    /// Dropping it stops the server.
    _stop: tokio::sync::oneshot::Sender<()>,
}

/// `helm package tests/charts/<chart> --version <v>` into `dir`; the package's path.
pub fn package_chart(env: &TestEnv, chart: &str, version: &str, dir: &Path) -> PathBuf {
    let out = Command::new(env.bin("helm"))
        .arg("package")
        .arg(repo_root().join("tests/charts").join(chart))
        .args(["--version", version, "-d"])
        .arg(dir)
        .output()
        .expect("helm package");
    assert!(
        out.status.success(),
        "helm package: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    dir.join(format!("{chart}-{version}.tgz"))
}

pub async fn chart_repo(
    env: &TestEnv,
    chart: &str,
    versions: &[&str],
    credentials: Option<(&str, &str)>,
) -> ChartRepo {
    use base64::Engine;
    use http_body_util::Full;
    let listener =
        std::net::TcpListener::bind("127.0.0.1:0").expect("binding the chart repository");
    listener
        .set_nonblocking(true)
        .expect("a non-blocking listener");
    let port = listener.local_addr().expect("its address").port();
    let url = format!("http://127.0.0.1:{port}");
    let dir = tempfile::tempdir().expect("a directory for the chart repository");
    for v in versions {
        package_chart(env, chart, v, dir.path());
    }
    let out = Command::new(env.bin("helm"))
        .args(["repo", "index"])
        .arg(dir.path())
        .args(["--url", &url])
        .output()
        .expect("helm repo index");
    assert!(out.status.success(), "helm repo index failed");
    let root = dir.path().to_path_buf();
    let expected = credentials.map(|(u, p)| {
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("{u}:{p}"))
        )
    });
    let serve = async move {
        let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
            return;
        };
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let root = root.clone();
            let expected = expected.clone();
            tokio::spawn(async move {
                let svc =
                    hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
                        let root = root.clone();
                        let expected = expected.clone();
                        async move {
                            let authorized = expected.as_deref().is_none_or(|want| {
                                req.headers()
                                    .get(http::header::AUTHORIZATION)
                                    .and_then(|v| v.to_str().ok())
                                    == Some(want)
                            });
                            let name = req.uri().path().trim_start_matches('/').to_string();
                            let resp = if !authorized {
                                http::Response::builder()
                                    .status(401)
                                    .header("WWW-Authenticate", "Basic realm=\"charts\"")
                                    .body(Full::new(bytes::Bytes::new()))
                            } else if name.contains("..") || name.contains('/') {
                                http::Response::builder()
                                    .status(404)
                                    .body(Full::new(bytes::Bytes::new()))
                            } else {
                                match tokio::fs::read(root.join(&name)).await {
                                    Ok(b) => http::Response::builder()
                                        .status(200)
                                        .body(Full::new(b.into())),
                                    Err(_) => http::Response::builder()
                                        .status(404)
                                        .body(Full::new(bytes::Bytes::new())),
                                }
                            };
                            Ok::<_, std::convert::Infallible>(resp.unwrap_or_default())
                        }
                    });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                    .await;
            });
        }
    };
    // its own thread and runtime: a test whose runtime is busy in a blocking call (a helm or
    // kubectl command) must not stall the repository the controller is downloading from
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    std::thread::spawn(move || {
        let Ok(rt) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        else {
            return;
        };
        rt.block_on(async move {
            tokio::select! {
                _ = serve => {}
                _ = stopped => {}
            }
        });
    });
    ChartRepo {
        url,
        dir,
        _stop: stop,
    }
}

/// A real OCI registry (the CNCF distribution registry, built by `tests/env/k8s-bin.sh`) on
/// loopback, plain HTTP, storing in a temporary directory. Stopped when dropped.
pub struct OciRegistry {
    /// `127.0.0.1:<port>`
    pub host: String,
    /// Served over TLS with a self-signed certificate (else plain HTTP).
    pub tls: bool,
    child: std::process::Child,
    _dir: tempfile::TempDir,
}

impl Drop for OciRegistry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl OciRegistry {
    /// A registry over plain HTTP (`plainHTTP: true` in a HelmChart).
    pub async fn start(env: &TestEnv) -> OciRegistry {
        Self::start_with(env, false).await
    }

    /// A registry over HTTPS with a self-signed certificate (as registries usually are; TLS is
    /// not verified, as upstream).
    pub async fn start_tls(env: &TestEnv) -> OciRegistry {
        Self::start_with(env, true).await
    }

    async fn start_with(env: &TestEnv, tls: bool) -> OciRegistry {
        let dir = tempfile::tempdir().expect("a directory for the registry");
        let port = free_port();
        let host = format!("127.0.0.1:{port}");
        let config = dir.path().join("config.yml");
        let tls_config = if tls {
            let cert = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()])
                .expect("a self-signed certificate");
            let (crt, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
            std::fs::write(&crt, cert.cert.pem()).expect("writing the certificate");
            std::fs::write(&key, cert.signing_key.serialize_pem()).expect("writing the key");
            format!(
                ", tls: {{certificate: {}, key: {}}}",
                crt.display(),
                key.display()
            )
        } else {
            String::new()
        };
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog: {{level: warn}}\nstorage: {{filesystem: {{rootdirectory: {}}}}}\nhttp: {{addr: {host}{tls_config}}}\n",
                dir.path().join("data").display()
            ),
        )
        .expect("writing the registry config");
        let child = Command::new(env.bin("registry"))
            .arg("serve")
            .arg(&config)
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("registry.log")).expect("registry log"))
            .spawn()
            .expect("starting the OCI registry (tests/env/k8s-bin.sh builds it)");
        let registry = OciRegistry {
            host,
            tls,
            child,
            _dir: dir,
        };
        wait_for("the OCI registry", Duration::from_secs(20), || async {
            tokio::net::TcpStream::connect(&registry.host)
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
        })
        .await;
        registry
    }

    /// `helm push` of `tests/charts/<chart>` at `version` to `oci://<host>/<path>`.
    pub fn push(&self, env: &TestEnv, chart: &str, version: &str, path: &str) {
        let dir = tempfile::tempdir().expect("a directory for the package");
        let package = package_chart(env, chart, version, dir.path());
        let out = Command::new(env.bin("helm"))
            .arg("push")
            .arg(&package)
            .arg(format!("oci://{}/{path}", self.host))
            .arg(if self.tls {
                "--insecure-skip-tls-verify"
            } else {
                "--plain-http"
            })
            .output()
            .expect("helm push");
        assert!(
            out.status.success(),
            "helm push: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// Waits until child `i` has release `name` in `ns` at `revision`, deployed (of `chart`, a
/// `name-version`, when given).
pub async fn wait_released(
    env: &TestEnv,
    i: usize,
    ns: &str,
    name: &str,
    revision: i64,
    chart: Option<&str>,
) {
    wait_for(
        &format!("release {ns}/{name} revision {revision} deployed in child {i}"),
        Duration::from_secs(90),
        || async {
            let list = helm_list(env, i, ns);
            match list.iter().find(|r| r.0 == name) {
                Some(r)
                    if r.1 == revision && r.2 == "deployed" && chart.is_none_or(|c| r.3 == c) =>
                {
                    Ok(())
                }
                _ => Err(format!("{list:?}")),
            }
        },
    )
    .await;
}

/// Waits until child `i` has no Helm release left in `ns`.
pub async fn wait_no_releases(env: &TestEnv, i: usize, ns: &str) {
    wait_for(
        &format!("no release left in child {i} {ns}"),
        Duration::from_secs(90),
        || async {
            let list = helm_list(env, i, ns);
            if list.is_empty() {
                Ok(())
            } else {
                Err(format!("{list:?}"))
            }
        },
    )
    .await;
}

/// `helm list -a -o json -n <ns>` in child `i`, with the real helm and private Helm homes:
/// `(name, revision, status, chart)` of each release.
pub fn helm_list(env: &TestEnv, i: usize, ns: &str) -> Vec<(String, i64, String, String)> {
    let home = tempfile::tempdir().expect("a Helm home");
    let out = Command::new(env.bin("helm"))
        .args(["list", "-a", "-o", "json", "-n", ns])
        .env("KUBECONFIG", env.child_kubeconfig(i))
        .env("HELM_CACHE_HOME", home.path().join("cache"))
        .env("HELM_CONFIG_HOME", home.path().join("config"))
        .env("HELM_DATA_HOME", home.path().join("data"))
        .output()
        .expect("helm list");
    assert!(
        out.status.success(),
        "helm list: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let list: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap_or_default();
    list.iter()
        .map(|r| {
            let s = |k: &str| r[k].as_str().unwrap_or_default().to_string();
            let revision = r["revision"]
                .as_str()
                .and_then(|v| v.parse().ok())
                .or_else(|| r["revision"].as_i64())
                .unwrap_or(0);
            (s("name"), revision, s("status"), s("chart"))
        })
        .collect()
}

/// A metrics endpoint the test controls: `GET /metrics` serves whatever text was last set.
pub struct Exporter {
    pub port: u16,
    text: std::sync::Arc<std::sync::Mutex<String>>,
    task: tokio::task::JoinHandle<()>,
}

impl Exporter {
    pub async fn start(text: &str) -> Exporter {
        use warp::Filter;
        let shared = std::sync::Arc::new(std::sync::Mutex::new(text.to_string()));
        let served = shared.clone();
        let route = warp::path("metrics")
            .map(move || served.lock().unwrap_or_else(|e| e.into_inner()).clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a port for the exporter");
        let port = listener.local_addr().expect("the exporter's port").port();
        let task = tokio::spawn(warp::serve(route).incoming(listener).run());
        Exporter {
            port,
            text: shared,
            task,
        }
    }

    pub fn set(&self, text: &str) {
        *self.text.lock().unwrap_or_else(|e| e.into_inner()) = text.to_string();
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A real Prometheus server on loopback (built by tests/env/k8s-bin.sh) scraping `targets`
/// every second.
pub struct Prometheus {
    pub address: String,
    child: std::process::Child,
    _dir: tempfile::TempDir,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Prometheus {
    /// Waits until an instant query (URL-encoded) answers `want` as its first sample: a change
    /// of an exporter is seen only after Prometheus scraped it.
    pub async fn wait_value(&self, encoded_query: &str, want: f64) {
        let port: u16 = self
            .address
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .expect("Prometheus' port");
        let path = format!("/api/v1/query?query={encoded_query}");
        wait_for(
            &format!("Prometheus to answer {want} to {encoded_query}"),
            Duration::from_secs(30),
            || async {
                let (_, body) = http_get(port, &path).await?;
                let v: serde_json::Value =
                    serde_json::from_str(&body).map_err(|e| e.to_string())?;
                let got = v["data"]["result"][0]["value"][1]
                    .as_str()
                    .and_then(|s| s.parse::<f64>().ok());
                if got == Some(want) {
                    Ok(())
                } else {
                    Err(format!("{got:?}"))
                }
            },
        )
        .await;
    }

    pub async fn start(env: &TestEnv, targets: &[String]) -> Prometheus {
        let dir = tempfile::tempdir().expect("a directory for Prometheus");
        let config = dir.path().join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global: {{scrape_interval: 1s, evaluation_interval: 1s}}\nscrape_configs:\n- job_name: app\n  static_configs: [{{targets: {targets:?}}}]\n"
            ),
        )
        .expect("writing the Prometheus config");
        let port = free_port();
        let address = format!("http://127.0.0.1:{port}");
        let child = Command::new(env.bin("prometheus"))
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("prometheus.log")).expect("a log"))
            .spawn()
            .expect("starting Prometheus (tests/env/k8s-bin.sh builds it)");
        let p = Prometheus {
            address,
            child,
            _dir: dir,
        };
        let ready = format!("127.0.0.1:{port}");
        wait_for("Prometheus", Duration::from_secs(30), || async {
            tokio::net::TcpStream::connect(&ready)
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
        })
        .await;
        p
    }
}

/// The Manifest the shadow API stores for ConfigMap `ns/name` with `data: {v: value}` (the
/// benches' workload).
pub fn configmap_manifest(ns: &str, name: &str, value: &str) -> clusternet::apis::Manifest {
    serde_json::from_value(json!({
        "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Manifest",
        "metadata": {"name": format!("configmaps.{ns}.{name}"), "namespace": "clusternet-reserved", "labels": {
            "apps.clusternet.io/config.group": "", "apps.clusternet.io/config.version": "v1",
            "apps.clusternet.io/config.kind": "ConfigMap", "apps.clusternet.io/config.name": name,
            "apps.clusternet.io/config.namespace": ns}},
        "template": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": ns}, "data": {"v": value}}
    }))
    .expect("a Manifest")
}
