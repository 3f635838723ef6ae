//! Which subsystems each role starts, and their supervision: leader election per role (one Lease
//! each, upstream's names), readiness, and orderly shutdown on SIGTERM/SIGINT (leader work is
//! cancelled and awaited, then the Lease is released so a standby takes over at once).

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use crate::config::{Config, Role};
use crate::runtime::leader::{LeaderElector, Leadership, LeaseTiming, Lost, holder_identity};
use crate::runtime::{self, Runtime, cache, health, telemetry};

mod subsystems;

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("no role given: use --role with a comma list of hub, scheduler, controller, agent")]
    NoRole,
    #[error(transparent)]
    Client(#[from] runtime::ClientError),
    #[error("metrics recorder: {0}")]
    Metrics(String),
    #[error("role {role} could not start: {message}")]
    RoleStart { role: Role, message: String },
    /// Only in builds that unwind (tests, debug); the release profile aborts on a panic, as a Go
    /// component crashes, and the kubelet restarts it.
    #[error("a role stopped on a panic ({0}); stopping the process")]
    RolePanicked(String),
    #[error("health/metrics listener on {addr}: {source}")]
    Health {
        addr: String,
        source: std::io::Error,
    },
}

/// How long shutdown waits for in-flight work before it gives up on it.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(20);

pub async fn run(config: Config) -> Result<(), RunError> {
    if config.roles.is_empty() {
        return Err(RunError::NoRole);
    }
    let metrics = telemetry::metrics_handle().map_err(RunError::Metrics)?;
    let shutdown = CancellationToken::new();
    spawn_signal_handler(shutdown.clone());
    runtime::memory::spawn_trimmer(shutdown.clone());

    let (client, background_client, cluster_url) = runtime::clients_for(&config).await?;
    let (events_client, _) = runtime::client_for(&config).await?;
    let readiness = health::Readiness::default();
    let rt = Runtime {
        config: Arc::new(config),
        client: client.clone(),
        events_client,
        background_client,
        cluster_url,
        cache: cache::SharedCache::new(client, readiness.clone(), shutdown.clone()),
        readiness: readiness.clone(),
        shutdown: shutdown.clone(),
    };
    let addr = rt
        .config
        .health_bind_address
        .parse()
        .map_err(|_| RunError::Health {
            addr: rt.config.health_bind_address.clone(),
            source: std::io::Error::new(std::io::ErrorKind::InvalidInput, "not host:port"),
        })?;
    let bound = health::serve(addr, readiness, metrics, shutdown.clone())
        .await
        .map_err(|source| RunError::Health {
            addr: rt.config.health_bind_address.clone(),
            source,
        })?;
    info!(roles = ?rt.config.roles, health = %bound, version = crate::VERSION, "clusternet starting");

    let mut roles = JoinSet::new();
    for role in rt.config.roles.clone() {
        let rt = rt.clone();
        roles.spawn(async move { supervise(rt, role).await });
    }
    // a role that cannot start ends the process with its reason (and stops the other roles cleanly)
    let mut failure = None;
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            done = roles.join_next() => match done {
                Some(Ok(Err(e))) => {
                    failure = Some(e);
                    shutdown.cancel();
                    break;
                }
                // a process whose role died would keep running without it, its Lease held by
                // nobody on this replica and its health still green: end it instead
                Some(Err(e)) if e.is_panic() => {
                    failure = Some(RunError::RolePanicked(e.to_string()));
                    shutdown.cancel();
                    break;
                }
                Some(_) => {}
                None => break,
            },
        }
    }
    info!("shutting down");
    let drained = tokio::time::timeout(SHUTDOWN_GRACE + Duration::from_secs(5), async {
        while roles.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        warn!("some roles did not stop in time");
    }
    match failure {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

fn spawn_signal_handler(shutdown: CancellationToken) {
    tokio::spawn(async move {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(e) => {
                    error!(error = %e, "cannot install the SIGTERM handler");
                    return;
                }
            };
        for n in 0.. {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
            if n > 0 {
                // upstream: a second signal exits at once with code 1
                std::process::exit(1);
            }
            shutdown.cancel();
        }
    });
}

/// Runs one role: its always-on part on every replica, its leader part only while it holds the role's Lease.
async fn supervise(rt: Runtime, role: Role) -> Result<(), RunError> {
    let running = metrics::gauge!("clusternet_role_running", "role" => role.as_str());
    let started = rt.readiness.register(format!("role:{role}"));
    if let Err(e) = subsystems::start_always_on(&rt, role).await {
        error!(%role, error = %e, "role failed to start");
        return Err(RunError::RoleStart {
            role,
            message: e.to_string(),
        });
    }
    running.set(1.0);
    started.set(true);
    if !subsystems::has_leader_work(role) {
        rt.shutdown.cancelled().await;
        running.set(0.0);
        return Ok(());
    }
    if !rt.config.leader_elect {
        let leadership = Leadership {
            lease_uid: String::new(),
        };
        subsystems::lead(&rt, role, leadership, rt.shutdown.clone()).await;
        running.set(0.0);
        return Ok(());
    }
    // the Lease namespace must exist before anyone can lead
    runtime::ensure_namespace(&rt.client, &rt.config.leader_elect_resource_namespace).await;
    let timing = LeaseTiming {
        lease_duration: rt.config.leader_elect_lease_duration,
        renew_deadline: rt.config.leader_elect_renew_deadline,
        retry_period: rt.config.leader_elect_retry_period,
    };
    let mut elector = LeaderElector::new(
        rt.client.clone(),
        &rt.config.leader_elect_resource_namespace,
        rt.config.lease_name(role),
        holder_identity(),
        timing,
    );
    let is_leader =
        metrics::gauge!("clusternet_leader_election_is_leader", "role" => role.as_str());
    while !rt.shutdown.is_cancelled() {
        let Some(leadership) = elector.acquire(&rt.shutdown).await else {
            break;
        };
        is_leader.set(1.0);
        metrics::counter!("clusternet_leader_election_transitions_total", "role" => role.as_str())
            .increment(1);
        let work_token = rt.shutdown.child_token();
        let work = {
            let rt = rt.clone();
            let token = work_token.clone();
            tokio::spawn(async move { subsystems::lead(&rt, role, leadership, token).await })
        };
        let renewed = loop {
            match elector.keep_renewing(&rt.shutdown).await {
                Err(Lost::Unreachable) if subsystems::leads_while_lease_unreachable(role) => {
                    warn!(%role, "the API server holding the role's Lease does not answer; the leader work goes on (it reports that) until the Lease can be renewed");
                    match elector.renew_when_reachable(&rt.shutdown).await {
                        Ok(true) => continue,
                        Ok(false) => break Ok(()),
                        Err(lost) => break Err(lost),
                    }
                }
                other => break other,
            }
        };
        work_token.cancel();
        if tokio::time::timeout(SHUTDOWN_GRACE, work).await.is_err() {
            warn!(%role, "leader work did not stop within the grace period");
        }
        is_leader.set(0.0);
        if renewed.is_ok() {
            // shutdown: hand the lease over at once instead of letting it expire
            if let Err(e) = elector.release().await {
                warn!(%role, error = %e, "could not release the lease");
            } else {
                info!(%role, "released leadership");
            }
        } else {
            warn!(%role, "lost leadership; stopped leader work and standing by");
        }
    }
    running.set(0.0);
    Ok(())
}
