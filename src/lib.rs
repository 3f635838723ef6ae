//! clusternet: Clusternet, the CNCF multi-cluster Kubernetes manager, as one all-in-one operator
//! binary.
//!
//! A parent (hub) cluster holds all APIs and state; every child runs an agent. The pipeline is
//! `Subscription` -> (scheduler) `status.bindingClusters` -> (controller) one `Base` per cluster
//! -> one `Description` per cluster (overrides applied) -> applied in the child by the agent (Pull)
//! or the hub (Push), with status flowing back up. Every hop goes through the parent's API server,
//! so roles behave the same in one process (`--role=hub,scheduler,controller`) or split apart.
//!
//! Where each stage lives, bottom layer first (tests/architecture.rs keeps every import pointing
//! down): `kube_ext` (what kube-rs lacks), `apis` (types, CRDs, well-known names), `config`,
//! `runtime` (the controller kit, shared cache, leader election, serving), `helm` and `tunnel`,
//! `clusters` (registration, health), `deployer` (applying Descriptions, Pull and Push),
//! `pipeline` (Subscription -> Base -> Description), `mcs` (multi-cluster services), `scheduler`,
//! `agent`, `hub` (the aggregated API server), and `roles` (which subsystems a role starts).
// No unsafe code, with one audited exception: `runtime::memory`'s two calls into glibc's
// allocator (mallinfo2, malloc_trim), which have no safe binding.
#![deny(unsafe_code)]

pub mod agent;
pub mod apis;
pub mod cli;
pub mod clusters;
pub mod config;
pub mod deployer;
/// The fuzz targets' entry points: built for the unit tests (their bounded properties) and for
/// the fuzz crate (feature `fuzzing`), never into the product.
#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub mod fuzzing;
pub mod helm;
pub mod hub;
pub mod kube_ext;
pub mod mcs;
pub mod pipeline;
pub mod plugin;
pub mod roles;
pub mod runtime;
pub mod scheduler;
pub mod tunnel;

#[cfg(test)]
pub(crate) mod fuzz_support;

use std::process::ExitCode;

use clap::Parser;

pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// `<GOOS>/<GOARCH>` of this build, as Go programs (upstream clusternet, kubectl, the API server)
/// spell their platform: `clusternet version` and `kubectl clusternet version` must match what
/// users and scripts compare them with, so Rust's own names (`x86_64`, `macos`) never show.
pub fn platform() -> String {
    format!(
        "{}/{}",
        go_os(std::env::consts::OS),
        go_arch(std::env::consts::ARCH, cfg!(target_endian = "little"))
    )
}

/// Go's `GOOS` for a Rust `target_os`.
fn go_os(os: &str) -> &str {
    match os {
        "macos" => "darwin",
        other => other,
    }
}

/// Go's `GOARCH` for a Rust `target_arch`; Go names the little-endian variants apart.
fn go_arch(arch: &str, little_endian: bool) -> &str {
    match (arch, little_endian) {
        ("x86_64", _) => "amd64",
        ("x86", _) => "386",
        ("aarch64", _) => "arm64",
        ("loongarch64", _) => "loong64",
        ("powerpc64", true) => "ppc64le",
        ("powerpc64", false) => "ppc64",
        ("mips", true) => "mipsle",
        ("mips64", true) => "mips64le",
        ("wasm32", _) => "wasm",
        (other, _) => other,
    }
}

/// The kubectl plugin's executable name (`kubectl clusternet` finds it on PATH).
pub const PLUGIN_NAME: &str = "kubectl-clusternet";
/// The executable kubectl runs to complete the plugin's command line (a symlink to this binary).
pub const PLUGIN_COMPLETION_NAME: &str = "kubectl_complete-clusternet";

/// The binary's whole life: parse, configure, run; every error ends as one readable line.
pub fn main_entry() -> ExitCode {
    let _ = tokio_rustls::rustls::crypto::ring::default_provider().install_default();
    // `kubectl clusternet ...` runs this binary as `kubectl-clusternet` (a symlink);
    // `clusternet kubectl-clusternet ...` does the same without one
    let mut args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let invoked_as = args
        .first()
        .and_then(|a| std::path::Path::new(a).file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    // kubectl (1.26+) completes `kubectl clusternet ...` by running `kubectl_complete-clusternet`
    if invoked_as.starts_with(PLUGIN_COMPLETION_NAME) {
        return emit(&plugin::complete(&args[1..]));
    }
    if args.get(1).is_some_and(|a| a == PLUGIN_COMPLETION_NAME) {
        return emit(&plugin::complete(&args[2..]));
    }
    if invoked_as.starts_with(PLUGIN_NAME) {
        return plugin::main(args.split_off(1));
    }
    if args.get(1).is_some_and(|a| a == PLUGIN_NAME) {
        return plugin::main(args.split_off(2));
    }
    let cli = cli::Cli::parse();
    match &cli.command {
        Some(cli::Command::Version { output }) => return emit(&version_text(output)),
        Some(cli::Command::Crds { out }) => return print_crds(out.as_deref()),
        Some(cli::Command::Completion { shell }) => {
            // into memory first: clap_complete panics on a write error (a closed pipe)
            let mut script = Vec::new();
            let mut cmd = <cli::Cli as clap::CommandFactory>::command();
            clap_complete::generate(*shell, &mut cmd, "clusternet", &mut script);
            return emit(&String::from_utf8_lossy(&script));
        }
        _ => {}
    }
    let config = match config::Config::load(cli.run_flags().layers()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("clusternet: {e}");
            return ExitCode::from(2);
        }
    };
    if let Some(cli::Command::Config { .. }) = &cli.command {
        return match config.to_yaml() {
            Ok(y) => emit(&y),
            Err(e) => {
                eprintln!("clusternet: {e}");
                ExitCode::FAILURE
            }
        };
    }
    runtime::telemetry::init_logging(config.log_format, &config.log_filter);
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("clusternet: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(roles::run(config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "clusternet stopped");
            eprintln!("clusternet: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Writes command output to stdout. A reader that went away (`clusternet crds | head -n 1`) ends
/// the command quietly, as a closed pipe ends kubectl; any other I/O error is one readable line
/// and a non-zero exit, never a panic.
pub fn emit(text: &str) -> ExitCode {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("clusternet: writing the output: {e}");
            ExitCode::FAILURE
        }
    }
}

fn version_text(output: &str) -> String {
    let info = serde_json::json!({
        "programName": "clusternet",
        "gitVersion": format!("v{VERSION}"),
        "platform": platform(),
        "compiler": "rustc",
    });
    match output {
        "json" => format!("{info}\n"),
        "yaml" => kube_ext::yaml::to_string(&info).unwrap_or_default(),
        _ => format!("clusternet version: v{VERSION}\n"),
    }
}

fn print_crds(out: Option<&std::path::Path>) -> ExitCode {
    let result = match out {
        Some(dir) => apis::write_crds(dir)
            .map(|()| ExitCode::SUCCESS)
            .map_err(|e| format!("writing CRDs into {}: {e}", dir.display())),
        None => apis::crds_yaml()
            .map(|y| emit(&y))
            .map_err(|e| e.to_string()),
    };
    result.unwrap_or_else(|e| {
        eprintln!("clusternet: {e}");
        ExitCode::FAILURE
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn platforms_use_go_names() {
        assert_eq!(go_arch("x86_64", true), "amd64");
        assert_eq!(go_arch("aarch64", true), "arm64");
        assert_eq!(go_arch("x86", true), "386");
        assert_eq!(go_arch("powerpc64", true), "ppc64le");
        assert_eq!(go_arch("powerpc64", false), "ppc64");
        assert_eq!(go_arch("s390x", false), "s390x");
        assert_eq!(go_os("macos"), "darwin");
        assert_eq!(go_os("linux"), "linux");
        let p = platform();
        assert!(!p.contains("x86_64") && !p.contains("aarch64"), "{p}");
    }
}
