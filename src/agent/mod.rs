//! The agent: the only Clusternet process in a child cluster (docs/spec/agent.md). On the
//! elected replica it registers the cluster with the parent, publishes the child's deployer
//! credentials, and heartbeats the ManagedCluster status; when the parent stops accepting it
//! (credentials revoked, cluster deleted) or the stored credentials are rotated, it says so and
//! registers again.

pub mod about;
pub mod credentials;
pub mod deployer;
pub mod predictor;
pub mod registration;
pub mod status;

use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use crate::runtime::Runtime;
use crate::runtime::backoff::Exponential;

/// A round (registration, then heartbeats) that the parent ends this soon after it began is a
/// failure in a row: a parent that rejects credentials it has just issued (RBAC not in place yet,
/// a registration deleted under a running agent) is asked again after a pause that doubles, not
/// every few milliseconds.
const SHORT_ROUND: Duration = Duration::from_secs(60);
const ROUND_RETRY: Exponential = Exponential::new(Duration::from_secs(1), Duration::from_secs(60));

/// The short rounds in a row after a round that lasted `lasted`, and the pause before the next.
fn after_round(lasted: Duration, short_rounds: u32) -> (u32, Option<Duration>) {
    if lasted < SHORT_ROUND {
        let n = short_rounds.saturating_add(1);
        (n, Some(ROUND_RETRY.after(n)))
    } else {
        (0, None)
    }
}

/// The agent's leader work: register, then heartbeat, until `stop`.
pub async fn lead(rt: &Runtime, lease_uid: &str, stop: CancellationToken) {
    if let Err(e) = registration::check_settings(rt) {
        error!(error = %e, "the agent cannot register this cluster");
    }
    let cluster_id = loop {
        match registration::cluster_id(rt, lease_uid).await {
            Ok(id) => break id,
            Err(e) => {
                warn!(error = %e, "reading the agent Lease for the cluster ID failed; retrying")
            }
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_secs(5)) => {}
        }
    };
    info!(cluster_id = %cluster_id, "cluster ID (UID of the agent Lease)");
    // the About API's ClusterProperties in this cluster, for as long as this agent leads
    let about = stop.child_token();
    let (properties_tx, properties) = tokio::sync::watch::channel(Vec::new());
    tokio::spawn(about::publish(
        rt.clone(),
        cluster_id.clone(),
        properties_tx,
        about.clone(),
    ));
    let _about = about.drop_guard();
    let nodes = rt.cache.watch::<Node>();
    let mut predictor = None;
    if rt.config.gate(crate::apis::known::PREDICTOR)
        && rt
            .config
            .predictor_addr
            .as_deref()
            .is_none_or(str::is_empty)
    {
        let pods = rt.cache.watch::<k8s_openapi::api::core::v1::Pod>();
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], rt.config.predictor_port));
        match predictor::serve(addr, nodes.store.clone(), pods.store.clone(), stop.clone()).await {
            Ok(a) => {
                info!(address = %a, "serving the capacity predictor");
                predictor = Some(a);
            }
            Err(e) => {
                error!(error = %e, port = rt.config.predictor_port, "cannot serve the capacity predictor; it is not advertised to the scheduler (choose another --predictor-port, 0 for any free one)")
            }
        }
    }
    let (mut short_rounds, mut rejected) = (0, None::<String>);
    while !stop.is_cancelled() {
        let Some(reg) = registration::register(rt, &cluster_id, rejected.as_deref(), &stop).await
        else {
            return;
        };
        let began = std::time::Instant::now();
        let round = stop.child_token();
        let publisher = {
            let (rt, reg, round) = (rt.clone(), reg.clone(), round.clone());
            tokio::spawn(async move { credentials::publish_until_done(&rt, &reg, &round).await })
        };
        let pull = {
            let (rt, reg, round) = (rt.clone(), reg.clone(), round.clone());
            tokio::spawn(async move { deployer::run(&rt, &reg, round).await })
        };
        let exports = {
            let (rt, reg, round) = (rt.clone(), reg.clone(), round.clone());
            let properties = properties.clone();
            tokio::spawn(async move {
                crate::mcs::serviceexport::run(
                    &rt,
                    reg.parent.clone(),
                    reg.namespace.clone(),
                    reg.cluster_id.clone(),
                    properties,
                    round,
                )
                .await
            })
        };
        // the reverse tunnel lets the parent reach this cluster behind NAT (hub.md §2.4)
        let tunnel = rt
            .config
            .gate(crate::apis::known::SOCKET_CONNECTION)
            .then(|| {
                let config = crate::tunnel::client::ClientConfig {
                    url: reg.parent_url.clone(),
                    cluster_id: reg.cluster_id.clone(),
                    token: reg.token.clone(),
                };
                let (connected, _) = tokio::sync::watch::channel(false);
                let round = round.clone();
                tokio::spawn(
                    async move { crate::tunnel::client::run(config, round, connected).await },
                )
            });
        if !nodes.ready_until(&stop).await {
            return;
        }
        // rotated credentials end the round like rejected ones: the next one uses them
        let ended = tokio::select! {
            ended = status::run(rt, &reg, nodes.store.clone(), predictor, &properties, &stop) => ended,
            () = registration::stored_credentials_changed(rt, &reg) => {
                Err(status::HeartbeatEnd::CredentialsRotated)
            }
        };
        round.cancel();
        let _ = publisher.await;
        let _ = pull.await;
        let _ = exports.await;
        if let Some(t) = tunnel {
            let _ = t.await;
        }
        // credentials the parent rejected are not taken up again from the Secret next round
        rejected = match ended {
            Ok(()) => return,
            Err(e) => {
                status::log_end(&e);
                matches!(e, status::HeartbeatEnd::CredentialsRejected).then(|| reg.token.clone())
            }
        };
        let pause;
        (short_rounds, pause) = after_round(began.elapsed(), short_rounds);
        if let Some(pause) = pause {
            warn!(rounds = short_rounds, pause = ?pause, "the parent ended this round soon after it began; pausing before registering again");
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(pause) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_rounds_in_a_row_pause_longer_and_a_long_round_resets() {
        let s = Duration::from_secs;
        assert_eq!(after_round(Duration::from_millis(70), 0), (1, Some(s(1))));
        assert_eq!(after_round(s(5), 1), (2, Some(s(2))));
        assert_eq!(after_round(s(5), 2), (3, Some(s(4))));
        assert_eq!(after_round(s(5), 30), (31, Some(s(60))));
        assert_eq!(after_round(s(3600), 31), (0, None));
    }
}
