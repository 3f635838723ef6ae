//! `kubectl clusternet`: the kubectl plugin of upstream `clusternet/kubectl-clusternet`
//! (`pkg/plugin/clusternet.go`, cli.md §1), built into the `clusternet` binary.
//!
//! Upstream links kubectl's commands and swaps their transport. Here the real `kubectl` (from
//! `KUBECTL` or `PATH`) is run as a child process with the user's arguments, minus the plugin's
//! own flags and the config/credential flags, against a generated kubeconfig:
//! - parent mode (no `--cluster-id`): a loopback proxy ([`proxy`]) that forwards to the parent with
//!   the user's credentials and rewrites paths to the shadow API ([`rewrite`], cli.md §2);
//! - child mode (`--cluster-id` + `--child-kubeconfig`): the hub's socket proxy as the server, the
//!   parent credentials, and impersonation of `clusternet` carrying the child identity as user
//!   extras ([`kubeconfig`], cli.md §1.2, hub.md §2.3). kubectl itself then handles exec, logs,
//!   port-forward and watches. One `GET /version` through that path first makes a refusal (a
//!   wrong cluster ID, a disconnected agent) readable, which kubectl's discovery would not.
//!
//! The exit code is kubectl's; the plugin's own failures print one `error: ...` line and exit 1.

pub mod args;
pub mod credentials;
pub mod dashboard;
pub mod kubeconfig;
pub mod placement;
pub mod proxy;
pub mod rewrite;
pub mod rollout;

use std::ffi::{OsStr, OsString};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use crate::plugin::args::{Invocation, OwnFlags};
use crate::plugin::kubeconfig::{KubeconfigError, Parent, TempDir};

/// Everything that makes the plugin itself fail (exit code 1).
#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    #[error(transparent)]
    Args(#[from] args::ArgError),
    #[error("please specify a valid kubeconfig for child cluster through '--child-kubeconfig'")]
    MissingChildKubeconfig,
    #[error("please specify a valid cluster UUID with '--cluster-id'")]
    MissingClusterId,
    #[error("kubectl not found in PATH: install kubectl or set KUBECTL to its path")]
    KubectlNotFound,
    #[error("KUBECTL={0} is not an executable file")]
    KubectlNotExecutable(String),
    #[error("kubectl at {0} is this plugin itself: set KUBECTL to the real kubectl")]
    KubectlIsSelf(String),
    #[error(transparent)]
    Kubeconfig(#[from] KubeconfigError),
    #[error("cannot use the parent credentials: {0}")]
    Client(String),
    #[error("cannot start the local proxy: {0}")]
    Listen(#[source] std::io::Error),
    #[error("{0}")]
    Placement(String),
    #[error("{0}")]
    Dashboard(String),
    #[error("{0}")]
    Rollout(String),
    #[error("{0}")]
    Credentials(String),
    #[error("cannot start the tokio runtime: {0}")]
    Runtime(#[source] std::io::Error),
    #[error("cannot run {path}: {source}")]
    Spawn {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

/// Entry point; `args` excludes the program name.
/// The plugin's own flags, for completion.
pub const FLAGS: &[&str] = &[
    "--cluster-id",
    "--child-kubeconfig",
    "--clusternet-as",
    "--clusternet-as-group",
    "--clusternet-as-uid",
];

/// Candidates for the last word of `args` (the command line after `kubectl clusternet`), in
/// Cobra's `__complete` format as kubectl's plugin completion expects: one per line, then
/// `:<directive>` (4: no file names; 0: the shell's default, file names, for a kubeconfig).
pub fn complete(args: &[OsString]) -> String {
    let words: Vec<String> = args
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let last = words.last().map(String::as_str).unwrap_or_default();
    let before = words
        .len()
        .checked_sub(2)
        .and_then(|i| words.get(i))
        .map(String::as_str);
    if before == Some("--child-kubeconfig") {
        return ":0\n".to_string();
    }
    let mut out = String::new();
    let candidates: Vec<&str> = if last.starts_with('-') {
        FLAGS.to_vec()
    } else if words.iter().rev().skip(1).all(|w| w.starts_with('-')) {
        // the verb: the plugin's own, then kubectl's usual ones
        vec![
            "version",
            "placement",
            "dashboard",
            "credentials",
            "get",
            "describe",
            "apply",
            "create",
            "delete",
            "edit",
            "patch",
            "label",
            "annotate",
            "scale",
            "explain",
            "api-resources",
            "logs",
            "exec",
        ]
    } else {
        Vec::new()
    };
    for c in candidates.iter().filter(|c| c.starts_with(last)) {
        out.push_str(c);
        out.push('\n');
    }
    out.push_str(":4\n");
    out
}

pub fn main(args: Vec<OsString>) -> ExitCode {
    init_tracing();
    match run(&args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}

fn init_tracing() {
    let _ = tokio_rustls::rustls::crypto::ring::default_provider().install_default();
    // kubectl owns stdout; the plugin's own diagnostics are opt-in through RUST_LOG
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

fn run(args: &[OsString]) -> Result<ExitCode, PluginError> {
    let inv = args::split_args(args)?;
    // upstream's `version` sub-command validates nothing and talks to no server
    if args::subcommand(&inv.kubectl_args) == Some(OsStr::new("version")) {
        return Ok(crate::emit(&format!("{}\n", version_json())));
    }
    if args::subcommand(&inv.kubectl_args) == Some(OsStr::new("placement")) {
        return run_placement(&inv);
    }
    if args::subcommand(&inv.kubectl_args) == Some(OsStr::new("dashboard")) {
        return run_dashboard(&inv);
    }
    if args::subcommand(&inv.kubectl_args) == Some(OsStr::new("credentials")) {
        return run_credentials(&inv);
    }
    if args::subcommand(&inv.kubectl_args) == Some(OsStr::new("rollout"))
        && rollout::is_subscription_target(&inv.kubectl_args)
    {
        return run_rollout(&inv);
    }
    if needs_no_cluster(&inv.kubectl_args) {
        // help and completion talk to no server: no kubeconfig is needed (or read)
        let kubectl = find_kubectl()?;
        if inv.kubectl_args.is_empty() || wants_help(&inv.kubectl_args) {
            let code = crate::emit(OWN_HELP);
            if code != ExitCode::SUCCESS {
                return Ok(code);
            }
        }
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(PluginError::Runtime)?;
        return runtime.block_on(run_kubectl(&kubectl, Vec::new(), &inv.kubectl_args));
    }
    let child = validate(&inv.own)?;
    let kubectl = find_kubectl()?;
    let config = kubeconfig::load_kubeconfig(&inv.config)?;
    let parent = kubeconfig::resolve_parent(&config, &inv.config)?;

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(PluginError::Runtime)?;
    let result = match child {
        Some((cluster_id, child_kubeconfig)) => runtime.block_on(child_mode(
            &kubectl,
            parent,
            &cluster_id,
            &child_kubeconfig,
            &inv,
        )),
        None => runtime.block_on(parent_mode(&kubectl, parent, &inv)),
    };
    // the proxy's connection tasks may still hold a finished watch; nothing there needs flushing
    runtime.shutdown_background();
    result
}

/// `kubectl clusternet placement ...`: the plugin's own command, answered by the hub.
fn run_placement(inv: &Invocation) -> Result<ExitCode, PluginError> {
    let rest = match own_command(inv, "placement", placement::USAGE) {
        Ok(rest) => rest,
        Err(done) => return done.map_err(PluginError::Placement),
    };
    let wanted = placement::parse(&rest)
        .map_err(|e| PluginError::Placement(format!("{e}\n\n{}", placement::USAGE)))?;
    with_parent_client(inv, |client, namespace| async move {
        placement::run(client, &wanted, namespace.as_deref())
            .await
            .map_err(PluginError::Placement)
    })
}

/// `kubectl clusternet dashboard ...`: the hub's pages on a local address.
fn run_dashboard(inv: &Invocation) -> Result<ExitCode, PluginError> {
    let rest = match own_command(inv, "dashboard", dashboard::USAGE) {
        Ok(rest) => rest,
        Err(done) => return done.map_err(PluginError::Dashboard),
    };
    let wanted = dashboard::parse(&rest)
        .map_err(|e| PluginError::Dashboard(format!("{e}\n\n{}", dashboard::USAGE)))?;
    with_parent_client(inv, |client, _| async move {
        dashboard::run(client, &wanted)
            .await
            .map_err(PluginError::Dashboard)
    })
}

/// `kubectl clusternet credentials`: an exec credential plugin for ClusterProfile access
/// providers; what it prints is for client-go, not for a person.
fn run_credentials(inv: &Invocation) -> Result<ExitCode, PluginError> {
    let rest = match own_command(inv, "credentials", credentials::USAGE) {
        Ok(rest) => rest,
        Err(done) => return done.map_err(PluginError::Credentials),
    };
    let wanted = credentials::parse(&rest)
        .map_err(|e| PluginError::Credentials(format!("{e}\n\n{}", credentials::USAGE)))?;
    let out = credentials::run(&wanted, &inv.config).map_err(PluginError::Credentials)?;
    Ok(crate::emit(&out))
}

/// `kubectl clusternet rollout VERB subscription/NAME`: a Subscription's revisions.
fn run_rollout(inv: &Invocation) -> Result<ExitCode, PluginError> {
    let rest = match own_command(inv, "rollout", rollout::USAGE) {
        Ok(rest) => rest,
        Err(done) => return done.map_err(PluginError::Rollout),
    };
    let wanted = rollout::parse(&rest)
        .map_err(|e| PluginError::Rollout(format!("{e}\n\n{}", rollout::USAGE)))?;
    with_parent_client(inv, |client, namespace| async move {
        rollout::run(client, &wanted, namespace.as_deref())
            .await
            .map_err(PluginError::Rollout)
    })
}

/// The arguments of the plugin's own command `word` (the word itself removed), or what to end
/// with instead: its help, or the error of child-cluster flags (these commands ask the parent).
fn own_command(
    inv: &Invocation,
    word: &str,
    usage: &str,
) -> Result<Vec<OsString>, Result<ExitCode, String>> {
    let mut rest: Vec<OsString> = inv.kubectl_args.clone();
    if let Some(i) = rest.iter().position(|a| a == word) {
        rest.remove(i);
    }
    if rest.iter().any(|a| a == "-h" || a == "--help") {
        return Err(Ok(crate::emit(usage)));
    }
    if inv.own.cluster_id.is_some() || inv.own.child_kubeconfig.is_some() {
        return Err(Err(format!(
            "{word} asks the parent: --cluster-id and --child-kubeconfig do not apply"
        )));
    }
    Ok(rest)
}

/// Runs `work` with a client for the parent (the kubeconfig's credentials) and the context's
/// namespace, on a runtime of its own.
fn with_parent_client<F, Fut>(inv: &Invocation, work: F) -> Result<ExitCode, PluginError>
where
    F: FnOnce(kube::Client, Option<String>) -> Fut,
    Fut: std::future::Future<Output = Result<ExitCode, PluginError>>,
{
    let config = kubeconfig::load_kubeconfig(&inv.config)?;
    let parent = kubeconfig::resolve_parent(&config, &inv.config)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(PluginError::Runtime)?;
    let result = runtime.block_on(async {
        let config = kube::Config::from_custom_kubeconfig(
            parent.to_kubeconfig(),
            &kube::config::KubeConfigOptions::default(),
        )
        .await
        .map_err(|e| PluginError::Client(e.to_string()))?;
        let client =
            kube::Client::try_from(config).map_err(|e| PluginError::Client(e.to_string()))?;
        work(client, parent.namespace.clone()).await
    });
    runtime.shutdown_background();
    result
}

/// The plugin's own flags, printed above kubectl's help.
const OWN_HELP: &str = "\
kubectl clusternet: kubectl for Clusternet's parent and child clusters.

Without --cluster-id, requests go to the parent's shadow API (objects sent there are stored as
Manifests, to be distributed with Subscriptions); with --cluster-id and --child-kubeconfig, to that
child cluster through the parent's socket proxy and the agent's tunnel.

Clusternet flags:
      --cluster-id string              ID of the child cluster (its ManagedCluster's spec.clusterId)
      --child-kubeconfig string        kubeconfig holding the child cluster's credentials
      --clusternet-as string           user to impersonate inside the child cluster
      --clusternet-as-group strings    groups to impersonate inside the child cluster (repeatable)
      --clusternet-as-uid string       UID to impersonate inside the child cluster

Plugin commands:
  version                              print the plugin's version (no server needed)
  placement -f FILE | subscription NAME
                                       explain where a Subscription goes and why, changing
                                       nothing (see `kubectl clusternet placement --help`)
  dashboard [--port N] [--no-browser]  open the fleet's dashboard, read with your credentials
                                       (see `kubectl clusternet dashboard --help`)
  credentials [--token-file FILE]      exec credential plugin of ClusterProfile access providers
                                       (see `kubectl clusternet credentials --help`)
  rollout history subscription/NAME    a Subscription's revisions and what changed in each
                                       (see `kubectl clusternet rollout subscription --help`)

kubectl's own help follows.

";

/// `-h`/`--help` anywhere before `--`, or the `help` command.
fn wants_help(kubectl_args: &[OsString]) -> bool {
    kubectl_args
        .iter()
        .take_while(|a| a.as_os_str() != "--")
        .any(|a| a == "-h" || a == "--help")
        || args::subcommand(kubectl_args) == Some(OsStr::new("help"))
}

/// Help, completion and a bare `kubectl clusternet` (which prints help) need no cluster.
fn needs_no_cluster(kubectl_args: &[OsString]) -> bool {
    kubectl_args.is_empty()
        || wants_help(kubectl_args)
        || matches!(
            args::subcommand(kubectl_args).and_then(OsStr::to_str),
            Some("completion" | "__complete" | "__completeNoDesc")
        )
}

/// Upstream `ClusternetOptions.Validate`; returns `(cluster id, child kubeconfig)` in child mode.
fn validate(own: &OwnFlags) -> Result<Option<(String, String)>, PluginError> {
    let id = own.cluster_id.clone().filter(|s| !s.is_empty());
    let child = own.child_kubeconfig.clone().filter(|s| !s.is_empty());
    match (id, child) {
        (Some(id), Some(child)) => Ok(Some((id, child))),
        (Some(_), None) => Err(PluginError::MissingChildKubeconfig),
        (None, Some(_)) => Err(PluginError::MissingClusterId),
        (None, None) => Ok(None),
    }
}

/// Upstream prints its build information as indented JSON.
fn version_json() -> String {
    let info = serde_json::json!({
        "gitVersion": format!("v{}", env!("CARGO_PKG_VERSION")),
        "platform": crate::platform(),
    });
    serde_json::to_string_pretty(&info).unwrap_or_default()
}

fn find_kubectl() -> Result<PathBuf, PluginError> {
    let configured = std::env::var_os("KUBECTL").filter(|v| !v.is_empty());
    let found = match &configured {
        Some(value) if Path::new(value).components().count() > 1 => {
            let path = PathBuf::from(value);
            if !is_executable(&path) {
                return Err(PluginError::KubectlNotExecutable(
                    path.display().to_string(),
                ));
            }
            path
        }
        Some(name) => search_path(name)
            .ok_or_else(|| PluginError::KubectlNotExecutable(name.to_string_lossy().into()))?,
        None => search_path(OsStr::new("kubectl")).ok_or(PluginError::KubectlNotFound)?,
    };
    // a `kubectl` that is a link to this binary would run the plugin again, forever
    if let (Ok(me), Ok(it)) = (
        std::env::current_exe().and_then(|p| p.canonicalize()),
        found.canonicalize(),
    ) && me == it
    {
        return Err(PluginError::KubectlIsSelf(found.display().to_string()));
    }
    Ok(found)
}

fn search_path(name: &OsStr) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .filter(|dir| !dir.as_os_str().is_empty())
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

async fn parent_mode(
    kubectl: &Path,
    parent: Parent,
    inv: &Invocation,
) -> Result<ExitCode, PluginError> {
    let mut config = kube::Config::from_custom_kubeconfig(
        parent.to_kubeconfig(),
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .map_err(|e| PluginError::Client(e.to_string()))?;
    // kubectl retries by itself; a second retry layer would also re-send non-idempotent writes
    config.default_retry = false;
    config.read_timeout = None;
    let client = kube::Client::try_from(config).map_err(|e| PluginError::Client(e.to_string()))?;

    let listener = tokio::net::TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0))
        .await
        .map_err(PluginError::Listen)?;
    let port = listener.local_addr().map_err(PluginError::Listen)?.port();
    let token = session_token();
    tokio::spawn(proxy::serve(
        listener,
        Arc::new(proxy::Proxy::new(client, token.clone())),
    ));
    tracing::debug!(port, parent = parent.server(), "shadow proxy listening");

    let dir = TempDir::new()?;
    let generated = kubeconfig::proxy_kubeconfig(port, &token, parent.namespace.clone());
    let path = dir.write_private("kubeconfig", &kubeconfig::render(&generated)?)?;
    let mut leading = vec![flag_with_path("--kubeconfig=", &path)];
    // kubectl keys its discovery cache by host:port; a fresh port per run would litter the
    // user's cache directory, so unless the user chose one the cache lives with the kubeconfig
    if !args::has_flag(&inv.kubectl_args, "--cache-dir") {
        leading.push(flag_with_path("--cache-dir=", &dir.path().join("cache")));
    }
    run_kubectl(kubectl, leading, &inv.kubectl_args).await
}

async fn child_mode(
    kubectl: &Path,
    mut parent: Parent,
    cluster_id: &str,
    child_kubeconfig: &str,
    inv: &Invocation,
) -> Result<ExitCode, PluginError> {
    let identity = kubeconfig::load_child_identity(child_kubeconfig)?;
    kubeconfig::inline_files(&mut parent)?;
    let generated = kubeconfig::child_kubeconfig(&parent, cluster_id, &identity, &inv.own);
    tracing::debug!(
        server = generated.clusters[0]
            .cluster
            .as_ref()
            .and_then(|c| c.server.as_deref()),
        "child mode through the socket proxy"
    );
    if talks_to_server(&inv.kubectl_args)
        && let Some(line) = probe_child(&generated).await
    {
        eprintln!("{line}");
        return Ok(ExitCode::from(1));
    }
    let dir = TempDir::new()?;
    let path = dir.write_private("kubeconfig", &kubeconfig::render(&generated)?)?;
    run_kubectl(
        kubectl,
        vec![flag_with_path("--kubeconfig=", &path)],
        &inv.kubectl_args,
    )
    .await
}

/// kubectl sub-commands that never call the server.
const LOCAL_SUBCOMMANDS: &[&str] = &[
    "help",
    "completion",
    "config",
    "plugin",
    "options",
    "kustomize",
];

/// Whether kubectl will call the server for these arguments (help and local sub-commands
/// do not; they must work even when the cluster cannot be reached).
fn talks_to_server(kubectl_args: &[OsString]) -> bool {
    let help = kubectl_args
        .iter()
        .map_while(|a| (a != "--").then_some(a))
        .any(|a| a == "-h" || a == "--help");
    let local = args::subcommand(kubectl_args)
        .and_then(OsStr::to_str)
        .is_none_or(|c| LOCAL_SUBCOMMANDS.contains(&c));
    !help && !local
}

/// Asks the socket path for the child's `/version` before kubectl runs, and returns the error
/// line to print when the hub (unknown cluster ID, disconnected agent, no rights on
/// `sockets/proxy`) or the child refuses. kubectl cannot tell the user why itself: client-go
/// reads discovery answers raw and replaces a failure's `Status` message with a generic "the
/// server rejected our request for an unknown reason". Anything else (an unreachable parent,
/// a timeout) is left to kubectl, which reports those well.
async fn probe_child(generated: &kube::config::Kubeconfig) -> Option<String> {
    let mut config = kube::Config::from_custom_kubeconfig(
        generated.clone(),
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .ok()?;
    config.default_retry = false;
    let client = kube::Client::try_from(config).ok()?;
    match client.apiserver_version().await {
        Err(kube::Error::Api(status)) => Some(server_error_line(&status.reason, &status.message)),
        Ok(_) | Err(_) => None,
    }
}

/// An API error as kubectl prints it (`cmdutil.StandardErrorMessage`).
fn server_error_line(reason: &str, message: &str) -> String {
    match reason {
        "Unauthorized" => format!("error: You must be logged in to the server ({message})"),
        "" => format!("Error from server: {message}"),
        reason => format!("Error from server ({reason}): {message}"),
    }
}

fn flag_with_path(flag: &str, path: &Path) -> OsString {
    let mut arg = OsString::from(flag);
    arg.push(path.as_os_str());
    arg
}

/// 32 random bytes, hex encoded.
fn session_token() -> String {
    // rand's thread RNG is a CSPRNG seeded from the OS
    let bytes: [u8; 32] = rand::random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Runs kubectl with inherited stdio and returns its exit code. The terminal sends Ctrl-C to
/// kubectl as well, so SIGINT is only absorbed here (the temporary files must still be removed);
/// SIGTERM, which targets the plugin alone, is passed on by killing kubectl.
async fn run_kubectl(
    kubectl: &Path,
    leading: Vec<OsString>,
    rest: &[OsString],
) -> Result<ExitCode, PluginError> {
    use tokio::signal::unix::{SignalKind, signal};
    let spawn_error = |source| PluginError::Spawn {
        path: kubectl.display().to_string(),
        source,
    };
    let mut interrupt = signal(SignalKind::interrupt()).ok();
    let mut terminate = signal(SignalKind::terminate()).ok();
    let mut child = tokio::process::Command::new(kubectl)
        .args(leading)
        .args(rest)
        .spawn()
        .map_err(spawn_error)?;
    let status = loop {
        tokio::select! {
            status = child.wait() => break status.map_err(spawn_error)?,
            Some(()) = next_signal(&mut interrupt) => {}
            Some(()) = next_signal(&mut terminate) => {
                let _ = child.start_kill();
            }
        }
    };
    Ok(exit_code(status))
}

async fn next_signal(signal: &mut Option<tokio::signal::unix::Signal>) -> Option<()> {
    match signal {
        Some(signal) => signal.recv().await,
        None => std::future::pending().await,
    }
}

fn exit_code(status: std::process::ExitStatus) -> ExitCode {
    match (status.code(), status.signal()) {
        (Some(code), _) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
        // the shell convention for a child killed by a signal
        (None, Some(signal)) => ExitCode::from(u8::try_from(128 + signal).unwrap_or(1)),
        (None, None) => ExitCode::from(1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn own(cluster_id: Option<&str>, child: Option<&str>) -> OwnFlags {
        OwnFlags {
            cluster_id: cluster_id.map(String::from),
            child_kubeconfig: child.map(String::from),
            ..OwnFlags::default()
        }
    }

    #[test]
    fn help_and_completion_need_no_cluster() {
        let a = |v: &[&str]| v.iter().map(OsString::from).collect::<Vec<_>>();
        assert!(needs_no_cluster(&a(&[])));
        assert!(needs_no_cluster(&a(&["--help"])));
        assert!(needs_no_cluster(&a(&["get", "pods", "-h"])));
        assert!(needs_no_cluster(&a(&["help", "get"])));
        assert!(needs_no_cluster(&a(&["completion", "bash"])));
        assert!(!needs_no_cluster(&a(&["get", "pods"])));
        // after `--` it is an argument of the command, not a help request
        assert!(!needs_no_cluster(&a(&[
            "exec", "web", "--", "ls", "--help"
        ])));
        assert!(!wants_help(&a(&["completion", "bash"])));
    }

    #[test]
    fn one_of_cluster_id_and_child_kubeconfig_is_an_error_with_upstream_wording() {
        let err = validate(&own(Some("id"), None)).expect_err("child kubeconfig missing");
        assert_eq!(
            err.to_string(),
            "please specify a valid kubeconfig for child cluster through '--child-kubeconfig'"
        );
        let err = validate(&own(None, Some("c.kubeconfig"))).expect_err("cluster id missing");
        assert_eq!(
            err.to_string(),
            "please specify a valid cluster UUID with '--cluster-id'"
        );
        // empty values count as absent, as upstream checks the length
        assert!(matches!(
            validate(&own(Some(""), Some("c"))),
            Err(PluginError::MissingClusterId)
        ));
        assert!(matches!(validate(&own(None, None)), Ok(None)));
        assert!(matches!(
            validate(&own(Some("id"), Some("c"))),
            Ok(Some((id, c))) if id == "id" && c == "c"
        ));
    }

    #[test]
    fn only_commands_that_call_the_server_are_probed() {
        let args = |a: &[&str]| a.iter().map(OsString::from).collect::<Vec<_>>();
        assert!(talks_to_server(&args(&["get", "pods", "-A"])));
        assert!(talks_to_server(&args(&["-n", "x", "logs", "web"])));
        assert!(!talks_to_server(&args(&[])));
        assert!(!talks_to_server(&args(&["get", "--help"])));
        assert!(!talks_to_server(&args(&["-h"])));
        assert!(!talks_to_server(&args(&["config", "view"])));
        assert!(!talks_to_server(&args(&["completion", "bash"])));
        // `--help` after `--` belongs to the command run in the container
        assert!(talks_to_server(&args(&[
            "exec", "web", "--", "ls", "--help"
        ])));
    }

    #[test]
    fn server_errors_are_worded_like_kubectl() {
        assert_eq!(
            server_error_line("BadRequest", "no cluster id is x"),
            "Error from server (BadRequest): no cluster id is x"
        );
        assert_eq!(
            server_error_line("Unauthorized", "Unauthorized"),
            "error: You must be logged in to the server (Unauthorized)"
        );
        assert_eq!(server_error_line("", "boom"), "Error from server: boom");
    }

    #[test]
    fn version_is_json_with_the_crate_version() {
        let value: serde_json::Value = serde_json::from_str(&version_json()).expect("json");
        assert_eq!(
            value["gitVersion"],
            format!("v{}", env!("CARGO_PKG_VERSION"))
        );
    }

    #[test]
    fn bad_flags_fail_before_anything_runs() {
        let err = run(&[OsString::from("get"), OsString::from("--cluster-id")])
            .expect_err("missing value");
        assert_eq!(err.to_string(), "flag needs an argument: --cluster-id");
        let err = run(&[
            OsString::from("--child-kubeconfig=x"),
            OsString::from("get"),
        ])
        .expect_err("missing cluster id");
        assert!(matches!(err, PluginError::MissingClusterId));
    }

    #[test]
    fn exit_codes_follow_kubectl() {
        let code = |raw: i32| exit_code(std::process::ExitStatus::from_raw(raw));
        assert_eq!(code(0), ExitCode::SUCCESS);
        assert_eq!(code(1 << 8), ExitCode::from(1));
        assert_eq!(code(2 << 8), ExitCode::from(2));
        // killed by SIGKILL
        assert_eq!(code(9), ExitCode::from(137));
    }

    #[test]
    fn session_tokens_are_random_hex() {
        let a = session_token();
        let b = session_token();
        assert_eq!(a.len(), 64);
        assert!(a.chars().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }
}
