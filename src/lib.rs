//! clusternet: Clusternet, the CNCF multi-cluster Kubernetes manager, as one all-in-one operator
//! binary.
//!
//! A parent (hub) cluster holds all APIs and state; every child runs an agent. The pipeline is
//! `Subscription` -> (scheduler) `status.bindingClusters` -> (controller) one `Base` per cluster
//! -> one `Description` per cluster (overrides applied) -> applied in the child by the agent (Pull)
//! or the hub (Push), with status flowing back up. Every hop goes through the parent's API server,
//! so roles behave the same in one process (`--role=hub,scheduler,controller`) or split apart.
//!
//! Where each stage lives: `apis` (types, CRDs, well-known names), `runtime` (shared cache, leader
//! election, bus, serving), `roles` (which subsystems a role starts), and, as they land,
//! `clusters`, `scheduler`, `pipeline`, `deployer`, `hub`, `tunnel`, `agent`.
#![forbid(unsafe_code)]

pub mod agent;
pub mod apis;
pub mod cli;
pub mod clusters;
pub mod config;
pub mod deployer;
pub mod kube_ext;
pub mod pipeline;
pub mod roles;
pub mod runtime;
pub mod scheduler;

use std::process::ExitCode;

use clap::Parser;

pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The binary's whole life: parse, configure, run; every error ends as one readable line.
pub fn main_entry() -> ExitCode {
    let _ = tokio_rustls::rustls::crypto::ring::default_provider().install_default();
    let cli = cli::Cli::parse();
    match &cli.command {
        Some(cli::Command::Version { output }) => {
            print_version(output);
            return ExitCode::SUCCESS;
        }
        Some(cli::Command::Crds { out }) => return print_crds(out.as_deref()),
        _ => {}
    }
    let config = match config::Config::load(cli.run_flags()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("clusternet: {e}");
            return ExitCode::from(2);
        }
    };
    if let Some(cli::Command::Config { .. }) = &cli.command {
        return match config.to_yaml() {
            Ok(y) => {
                print!("{y}");
                ExitCode::SUCCESS
            }
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

fn print_version(output: &str) {
    let info = serde_json::json!({
        "programName": "clusternet",
        "gitVersion": format!("v{VERSION}"),
        "platform": format!("{}/{}", std::env::consts::OS, std::env::consts::ARCH),
        "compiler": "rustc",
    });
    match output {
        "json" => println!("{info}"),
        "yaml" => print!("{}", serde_yaml::to_string(&info).unwrap_or_default()),
        _ => println!("clusternet version: v{VERSION}"),
    }
}

fn print_crds(out: Option<&std::path::Path>) -> ExitCode {
    let result = match out {
        Some(dir) => {
            apis::write_crds(dir).map_err(|e| format!("writing CRDs into {}: {e}", dir.display()))
        }
        None => apis::crds_yaml()
            .map(|y| print!("{y}"))
            .map_err(|e| e.to_string()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("clusternet: {e}");
            ExitCode::FAILURE
        }
    }
}
