//! Leader election on `coordination.k8s.io/v1` Leases, one Lease per role, with client-go's
//! semantics (upstream ops.md §3): holder identity `<hostname>_<uuid>`, expiry judged by the time
//! *this* process last saw the record change (so clock skew between replicas does not matter),
//! optimistic concurrency through resourceVersion, and release on shutdown so a successor does not
//! wait out the lease.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, PostParams};
use kube::{Client, ResourceExt};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    #[error("lease {namespace}/{name}: {source}")]
    Api {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
}

/// Timing of an election, client-go's three knobs.
#[derive(Debug, Clone, Copy)]
pub struct LeaseTiming {
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
}

pub struct LeaderElector {
    api: Api<Lease>,
    namespace: String,
    name: String,
    identity: String,
    timing: LeaseTiming,
    /// The record as last seen and when this process saw it change.
    observed: Option<(LeaseSpec, Instant)>,
}

/// Why a leader stopped renewing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lost {
    /// Another holder has the Lease: stop leader work at once.
    TakenOver,
    /// The Lease's API server did not answer for the whole renew deadline: it is unknown whether
    /// anyone else can reach it (see [`LeaderElector::renew_when_reachable`]).
    Unreachable,
}

/// What the elector knows once it leads.
#[derive(Debug, Clone)]
pub struct Leadership {
    /// UID of the Lease object: the agent's cluster ID (registration.md §2).
    pub lease_uid: String,
}

pub fn holder_identity() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|h| h.trim().to_string())
        })
        .unwrap_or_else(|| "clusternet".to_string());
    format!("{host}_{}", uuid::Uuid::new_v4())
}

impl LeaderElector {
    pub fn new(
        client: Client,
        namespace: &str,
        name: &str,
        identity: String,
        timing: LeaseTiming,
    ) -> Self {
        LeaderElector {
            api: Api::namespaced(client, namespace),
            namespace: namespace.to_string(),
            name: name.to_string(),
            identity,
            timing,
            observed: None,
        }
    }

    pub fn identity(&self) -> &str {
        &self.identity
    }

    fn err(&self, source: kube::Error) -> LeaderError {
        LeaderError::Api {
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            source,
        }
    }

    fn our_spec(&self, previous: Option<&LeaseSpec>) -> LeaseSpec {
        let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
        let secs = i32::try_from(self.timing.lease_duration.as_secs())
            .unwrap_or(i32::MAX)
            .max(1);
        match previous {
            Some(prev) if prev.holder_identity.as_deref() == Some(self.identity.as_str()) => {
                LeaseSpec {
                    holder_identity: Some(self.identity.clone()),
                    lease_duration_seconds: Some(secs),
                    renew_time: Some(now),
                    ..prev.clone()
                }
            }
            _ => LeaseSpec {
                holder_identity: Some(self.identity.clone()),
                lease_duration_seconds: Some(secs),
                acquire_time: Some(now.clone()),
                renew_time: Some(now),
                lease_transitions: Some(
                    previous.and_then(|p| p.lease_transitions).unwrap_or(0) + 1,
                ),
                ..Default::default()
            },
        }
    }

    /// One attempt to acquire or renew (client-go's tryAcquireOrRenew). Ok(Some) when we hold it.
    pub async fn try_acquire_or_renew(&mut self) -> Result<Option<Leadership>, LeaderError> {
        let current = match self
            .api
            .get_opt(&self.name)
            .await
            .map_err(|e| self.err(e))?
        {
            None => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.name.clone()),
                        namespace: Some(self.namespace.clone()),
                        ..Default::default()
                    },
                    spec: Some(LeaseSpec {
                        lease_transitions: Some(0),
                        ..self.our_spec(None)
                    }),
                };
                return match self.api.create(&PostParams::default(), &lease).await {
                    Ok(created) => {
                        self.observed = created.spec.clone().map(|s| (s, Instant::now()));
                        Ok(Some(Leadership {
                            lease_uid: created.uid().unwrap_or_default(),
                        }))
                    }
                    // someone else created it first: not ours this round
                    Err(kube::Error::Api(e)) if e.code == 409 => Ok(None),
                    Err(e) => Err(self.err(e)),
                };
            }
            Some(l) => l,
        };
        let spec = current.spec.clone().unwrap_or_default();
        let changed = match &self.observed {
            Some((seen, _)) => {
                seen.holder_identity != spec.holder_identity || seen.renew_time != spec.renew_time
            }
            None => true,
        };
        if changed {
            self.observed = Some((spec.clone(), Instant::now()));
        }
        let held_by_other = spec
            .holder_identity
            .as_deref()
            .is_some_and(|h| !h.is_empty() && h != self.identity);
        if held_by_other {
            let duration = spec
                .lease_duration_seconds
                .map(|s| Duration::from_secs(s.max(0) as u64))
                .unwrap_or(self.timing.lease_duration);
            let seen_at = self
                .observed
                .as_ref()
                .map(|(_, t)| *t)
                .unwrap_or_else(Instant::now);
            if seen_at.elapsed() < duration {
                return Ok(None);
            }
        }
        let mut next = current.clone();
        next.spec = Some(self.our_spec(Some(&spec)));
        match self
            .api
            .replace(&self.name, &PostParams::default(), &next)
            .await
        {
            Ok(updated) => {
                self.observed = updated.spec.clone().map(|s| (s, Instant::now()));
                Ok(Some(Leadership {
                    lease_uid: updated.uid().unwrap_or_default(),
                }))
            }
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(None),
            Err(e) => Err(self.err(e)),
        }
    }

    /// Gives the lease up so another replica can take over at once (client-go's ReleaseOnCancel).
    pub async fn release(&mut self) -> Result<(), LeaderError> {
        let Some(mut lease) = self
            .api
            .get_opt(&self.name)
            .await
            .map_err(|e| self.err(e))?
        else {
            return Ok(());
        };
        let Some(spec) = lease.spec.as_mut() else {
            return Ok(());
        };
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return Ok(());
        }
        let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
        spec.holder_identity = Some(String::new());
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(now.clone());
        spec.acquire_time = Some(now);
        match self
            .api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
            Err(e) => Err(self.err(e)),
        }
    }

    /// Blocks until this process holds the lease (or shutdown). Retries every retry period.
    pub async fn acquire(&mut self, shutdown: &CancellationToken) -> Option<Leadership> {
        loop {
            match self.try_acquire_or_renew().await {
                Ok(Some(l)) => {
                    info!(lease = %self.name, identity = %self.identity, "acquired leadership");
                    return Some(l);
                }
                Ok(None) => {}
                Err(e) => warn!(error = %e, "leader election attempt failed"),
            }
            tokio::select! {
                _ = shutdown.cancelled() => return None,
                _ = tokio::time::sleep(jitter(self.timing.retry_period)) => {}
            }
        }
    }

    /// Renews every retry period until shutdown (Ok) or until leadership is lost: another holder
    /// took the Lease, or renewing failed for the whole renew deadline (the caller must stop
    /// leader-only work, or, for [`Lost::Unreachable`], may hold on with
    /// [`LeaderElector::renew_when_reachable`]).
    pub async fn keep_renewing(&mut self, shutdown: &CancellationToken) -> Result<(), Lost> {
        let mut last_renew = Instant::now();
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return Ok(()),
                _ = tokio::time::sleep(self.timing.retry_period) => {}
            }
            match self.renew_once().await {
                Ok(true) => last_renew = Instant::now(),
                Ok(false) => {
                    warn!(lease = %self.name, "leadership taken over by another holder");
                    return Err(Lost::TakenOver);
                }
                Err(()) => {}
            }
            if last_renew.elapsed() >= self.timing.renew_deadline {
                warn!(lease = %self.name, "could not renew within the renew deadline: leadership lost");
                return Err(Lost::Unreachable);
            }
        }
    }

    /// One renewal, bounded by the renew deadline: Ok(true) renewed, Ok(false) another holder has
    /// it, Err when the API server did not answer (logged).
    async fn renew_once(&mut self) -> Result<bool, ()> {
        match tokio::time::timeout(self.timing.renew_deadline, self.try_acquire_or_renew()).await {
            Ok(Ok(held)) => Ok(held.is_some()),
            Ok(Err(e)) => {
                warn!(error = %e, "renewing the lease failed");
                Err(())
            }
            Err(_) => {
                warn!(lease = %self.name, "renewing the lease timed out");
                Err(())
            }
        }
    }

    /// After [`Lost::Unreachable`], for a leader whose work must go on while the Lease's API
    /// server does not answer (the agent, whose Lease lives in the child it reports on): tries to
    /// renew every retry period until it can. Ok(true) once renewed (lead on), Ok(false) on
    /// shutdown, Err(TakenOver) when the API server answers with another holder, who could reach
    /// it meanwhile (stop leader work at once). Any holder that took over did so only after
    /// reaching that API server, which this process could not, so the work it shares with this
    /// one is what does not need it (an agent's heartbeat and tunnel to the parent).
    pub async fn renew_when_reachable(
        &mut self,
        shutdown: &CancellationToken,
    ) -> Result<bool, Lost> {
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return Ok(false),
                _ = tokio::time::sleep(self.timing.retry_period) => {}
            }
            match self.renew_once().await {
                Ok(true) => {
                    info!(lease = %self.name, "the lease's API server answers again: lease renewed");
                    return Ok(true);
                }
                Ok(false) => {
                    warn!(lease = %self.name, "the lease's API server answers again, with another holder: leadership lost");
                    return Err(Lost::TakenOver);
                }
                Err(()) => {}
            }
        }
    }
}

/// client-go waits `retry * (1 + rand*1.2)`; a small jitter keeps replicas from retrying in lockstep.
fn jitter(d: Duration) -> Duration {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|t| t.subsec_nanos())
        .unwrap_or(0);
    d + d.mul_f64(f64::from(nanos % 1000) / 1000.0 * 0.2)
}
