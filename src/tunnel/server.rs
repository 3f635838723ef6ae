//! Hub side of the tunnel: the registry of agent sessions (hub.md §2.4, §2.7).
//!
//! The HTTP layer authenticates `.../sockets/<clusterID>` requests, answers the WebSocket upgrade
//! itself (see [`websocket_accept_key`]) and hands the upgraded connection to
//! [`SessionRegistry::serve`], which runs a server-role session for as long as the agent stays
//! connected. The proxy then dials child endpoints through [`SessionRegistry::get`]. Like
//! remotedialer's session manager, several sessions per cluster may coexist (an agent that
//! reconnects before the hub noticed the old socket die); dialing uses the oldest one heard from lately.
//! How many may coexist is capped per cluster ([`SessionRegistry::reserve`], issue #21): the HTTP
//! layer reserves a place before it answers the upgrade, so one cluster's credentials cannot pin
//! an unbounded number of sockets on the hub.
//!
//! Metrics: `clusternet_socket_connections_count` (gauge of open agent sockets),
//! `clusternet_socket_connections_duration_seconds` (histogram of socket lifetimes) and
//! `clusternet_socket_connections_refused_total` (upgrades refused over the per-cluster cap).

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use async_tungstenite::WebSocketStream;
use async_tungstenite::tokio::TokioAdapter;
use async_tungstenite::tungstenite::protocol::Role;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::watch;

use super::peer::PeerSessions;

use super::session::{PING_INTERVAL, Session, SessionHandle, SessionOptions, SessionRole};
use super::table::SessionTable;

/// Path prefix of the sockets subresource; the cluster ID follows it.
pub const SOCKETS_PATH_PREFIX: &str = "/apis/proxies.clusternet.io/v1alpha1/sockets/";

/// Gauge of open agent sockets.
pub const METRIC_CONNECTIONS_COUNT: &str = "clusternet_socket_connections_count";
/// Histogram of agent socket lifetimes in seconds.
pub const METRIC_CONNECTIONS_DURATION: &str = "clusternet_socket_connections_duration_seconds";
/// Counter of tunnel upgrades refused because the cluster already had its cap of live sessions.
pub const METRIC_CONNECTIONS_REFUSED: &str = "clusternet_socket_connections_refused_total";

/// Silence after which a session no longer counts against its cluster's cap. Agents ping every
/// [`PING_INTERVAL`] (5 s) and the session closes only after 60 s of silence
/// ([`READ_TIMEOUT`](super::session::READ_TIMEOUT)), so after a network blip the agent's old
/// socket can linger for a minute; three missed pings say its peer is gone, and the agent's
/// reconnect must not be refused because of its own dead sockets.
pub const STALE_AFTER: Duration = Duration::from_secs(3 * PING_INTERVAL.as_secs());

/// A cluster already holds its cap of live sessions.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "cluster {cluster_id} already has {live} live tunnel sessions at this hub, the limit (--max-tunnel-sessions-per-cluster={max})"
)]
pub struct SessionLimitError {
    pub cluster_id: String,
    pub live: usize,
    pub max: usize,
}

/// Why a sockets request path does not name a cluster.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SocketPathError {
    /// Nothing after the prefix (answer 401, as remotedialer's authorizer does).
    #[error("missing cluster id")]
    MissingClusterId,
    /// Not a sockets path at all, or extra segments (answer 400).
    #[error("illegal request {0}")]
    IllegalRequest(String),
}

/// Extracts the client key (= cluster ID) from a sockets request path, trailing slashes trimmed.
pub fn cluster_id_from_path(path: &str) -> Result<&str, SocketPathError> {
    let trimmed = path.trim_end_matches('/');
    let Some(rest) = trimmed
        .strip_prefix(SOCKETS_PATH_PREFIX)
        .or_else(|| (trimmed == SOCKETS_PATH_PREFIX.trim_end_matches('/')).then_some(""))
    else {
        return Err(SocketPathError::IllegalRequest(path.to_owned()));
    };
    if rest.is_empty() {
        return Err(SocketPathError::MissingClusterId);
    }
    if rest.contains('/') {
        return Err(SocketPathError::IllegalRequest(path.to_owned()));
    }
    Ok(rest)
}

/// `Sec-WebSocket-Accept` for a request's `Sec-WebSocket-Key`, so the HTTP layer can answer
/// `101 Switching Protocols` itself before handing the upgraded connection to
/// [`SessionRegistry::serve`].
pub fn websocket_accept_key(request_key: &[u8]) -> String {
    async_tungstenite::tungstenite::handshake::derive_accept_key(request_key)
}

/// Live agent sessions by cluster ID, plus the sessions other hub replicas opened to us.
pub struct SessionRegistry {
    inner: Mutex<RegistryInner>,
    /// Bumped whenever an agent session comes or goes, so peer announcers can resend.
    changes: watch::Sender<u64>,
    peers: PeerSessions,
    /// See [`STALE_AFTER`]; shorter in tests.
    stale_after: Duration,
}

impl Default for SessionRegistry {
    fn default() -> Self {
        Self {
            inner: Mutex::default(),
            changes: watch::Sender::new(0),
            peers: PeerSessions::default(),
            stale_after: STALE_AFTER,
        }
    }
}

#[derive(Default)]
struct RegistryInner {
    /// Oldest first, so `get` is stable while a reconnecting agent briefly has two sessions.
    sessions: SessionTable,
    /// Places reserved by upgrades that were answered but whose session has not started yet.
    reserved: HashMap<String, usize>,
}

impl std::fmt::Debug for SessionRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionRegistry")
            .field("connected", &self.connected())
            .finish()
    }
}

impl SessionRegistry {
    /// An empty registry; share it with `Arc`.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, RegistryInner> {
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Runs a server session for `cluster_id` over an already-upgraded HTTP connection until it
    /// ends. Dropping the future closes the session.
    pub async fn serve<IO>(&self, cluster_id: &str, io: IO)
    where
        IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let ws = WebSocketStream::from_raw_socket(TokioAdapter::new(io), Role::Server, None).await;
        self.serve_websocket(cluster_id, ws).await;
    }

    /// Like [`serve`](Self::serve) for a WebSocket whose handshake was done elsewhere.
    pub async fn serve_websocket<S>(&self, cluster_id: &str, ws: WebSocketStream<S>)
    where
        S: futures::io::AsyncRead + futures::io::AsyncWrite + Unpin + Send + 'static,
    {
        self.run_session(cluster_id, ws, None).await;
    }

    /// Reserves a place for one more session of `cluster_id`, unless it already has `max` live
    /// ones (sessions that are not closed and were heard from within [`STALE_AFTER`], plus places
    /// reserved and not yet taken); `max` 0 is no limit. The HTTP layer calls this before it
    /// answers the upgrade, so a refusal is a plain HTTP answer; the place is given back when
    /// the slot is dropped unused.
    pub fn reserve(
        self: &Arc<Self>,
        cluster_id: &str,
        max: usize,
    ) -> Result<SessionSlot, SessionLimitError> {
        let mut inner = self.lock();
        let live = self.live_in(&inner, cluster_id);
        if max > 0 && live >= max {
            metrics::counter!(METRIC_CONNECTIONS_REFUSED).increment(1);
            return Err(SessionLimitError {
                cluster_id: cluster_id.to_owned(),
                live,
                max,
            });
        }
        *inner.reserved.entry(cluster_id.to_owned()).or_default() += 1;
        Ok(SessionSlot {
            registry: self.clone(),
            cluster_id: cluster_id.to_owned(),
            taken: false,
        })
    }

    /// Live sessions of `cluster_id` plus reserved places (what [`reserve`](Self::reserve)
    /// compares with its cap).
    pub fn live_sessions(&self, cluster_id: &str) -> usize {
        self.live_in(&self.lock(), cluster_id)
    }

    fn live_in(&self, inner: &RegistryInner, cluster_id: &str) -> usize {
        let sessions = (inner.sessions.of(cluster_id).iter())
            .filter(|(_, h)| !h.is_closed() && h.silent_for() < self.stale_after)
            .count();
        sessions + inner.reserved.get(cluster_id).copied().unwrap_or(0)
    }

    async fn run_session<S>(
        &self,
        cluster_id: &str,
        ws: WebSocketStream<S>,
        slot: Option<SessionSlot>,
    ) where
        S: futures::io::AsyncRead + futures::io::AsyncWrite + Unpin + Send + 'static,
    {
        let registration = {
            let mut inner = self.lock();
            if let Some(mut slot) = slot {
                // the reserved place becomes the session under the same lock
                release_reserved(&mut inner, cluster_id);
                slot.taken = true;
            }
            let (session_key, handle) = inner.sessions.open(cluster_id, |key| {
                // Key as remotedialer's "<clientKey>/<sessionKey>" so error texts match.
                let name = format!("{cluster_id}/{key}");
                Session::spawn_with(ws, SessionOptions::new(SessionRole::Server, name))
            });
            Registration {
                registry: self,
                cluster_id: cluster_id.to_owned(),
                session_key,
                handle,
                started: Instant::now(),
            }
        };
        self.changes.send_modify(|n| *n = n.wrapping_add(1));
        metrics::gauge!(METRIC_CONNECTIONS_COUNT).increment(1.0);
        tracing::info!(
            cluster = cluster_id,
            session = registration.session_key,
            "agent tunnel connected"
        );
        registration.handle.closed().await;
    }

    /// The oldest live session of `cluster_id`: of those heard from within [`STALE_AFTER`] if
    /// any, else of those still open. An agent that reconnects after a blip leaves its old socket
    /// open on the hub until the read timeout closes it; dialing through that one would fail every
    /// proxied request for that long although the new session works.
    pub fn get(&self, cluster_id: &str) -> Option<SessionHandle> {
        let inner = self.lock();
        let open = || {
            inner
                .sessions
                .of(cluster_id)
                .iter()
                .map(|(_, handle)| handle)
                .filter(|handle| !handle.is_closed())
        };
        open()
            .find(|handle| handle.silent_for() < self.stale_after)
            .or_else(|| open().next())
            .cloned()
    }

    /// Cluster IDs with at least one live session, sorted.
    pub fn connected(&self) -> Vec<String> {
        self.lock().sessions.connected()
    }

    /// Whether `cluster_id` has a live session.
    pub fn is_connected(&self, cluster_id: &str) -> bool {
        self.get(cluster_id).is_some()
    }

    /// Live agent sessions as `(cluster ID, session key)`, what peers are told about.
    pub fn snapshot(&self) -> BTreeSet<(String, u64)> {
        self.lock()
            .sessions
            .iter()
            .flat_map(|(id, list)| {
                list.iter()
                    .filter(|(_, handle)| !handle.is_closed())
                    .map(move |(key, _)| (id.clone(), *key))
            })
            .collect()
    }

    /// Fires whenever an agent session comes or goes (see [`snapshot`](Self::snapshot)).
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// Sessions other hub replicas opened to us (hub.md §2.6).
    pub fn peers(&self) -> &PeerSessions {
        &self.peers
    }

    fn remove(&self, cluster_id: &str, session_key: u64) {
        {
            self.lock().sessions.remove(cluster_id, session_key);
        }
        self.changes.send_modify(|n| *n = n.wrapping_add(1));
    }
}

fn release_reserved(inner: &mut RegistryInner, cluster_id: &str) {
    if let Some(n) = inner.reserved.get_mut(cluster_id) {
        *n = n.saturating_sub(1);
        if *n == 0 {
            inner.reserved.remove(cluster_id);
        }
    }
}

/// A place for one session of a cluster, from [`SessionRegistry::reserve`].
pub struct SessionSlot {
    registry: Arc<SessionRegistry>,
    cluster_id: String,
    taken: bool,
}

impl std::fmt::Debug for SessionSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionSlot")
            .field("cluster_id", &self.cluster_id)
            .finish()
    }
}

impl SessionSlot {
    /// Runs the session in this place, as [`SessionRegistry::serve`] does.
    pub async fn serve<IO>(self, io: IO)
    where
        IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let ws = WebSocketStream::from_raw_socket(TokioAdapter::new(io), Role::Server, None).await;
        let (registry, cluster_id) = (self.registry.clone(), self.cluster_id.clone());
        registry.run_session(&cluster_id, ws, Some(self)).await;
    }
}

impl Drop for SessionSlot {
    fn drop(&mut self) {
        if !self.taken {
            release_reserved(&mut self.registry.lock(), &self.cluster_id);
        }
    }
}

/// Deregisters a session however `serve` ends, including when its future is dropped.
struct Registration<'a> {
    registry: &'a SessionRegistry,
    cluster_id: String,
    session_key: u64,
    handle: SessionHandle,
    started: Instant,
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        self.handle.close();
        self.registry.remove(&self.cluster_id, self.session_key);
        metrics::gauge!(METRIC_CONNECTIONS_COUNT).decrement(1.0);
        metrics::histogram!(METRIC_CONNECTIONS_DURATION)
            .record(self.started.elapsed().as_secs_f64());
        tracing::info!(
            cluster = %self.cluster_id,
            session = self.session_key,
            "agent tunnel disconnected"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    const WAIT: Duration = Duration::from_secs(10);

    #[test]
    fn cluster_id_from_sockets_path() {
        let base = "/apis/proxies.clusternet.io/v1alpha1/sockets";
        assert_eq!(cluster_id_from_path(&format!("{base}/abc")), Ok("abc"));
        assert_eq!(cluster_id_from_path(&format!("{base}/abc//")), Ok("abc"));
        assert_eq!(
            cluster_id_from_path(&format!("{base}/")),
            Err(SocketPathError::MissingClusterId)
        );
        assert_eq!(
            cluster_id_from_path(base),
            Err(SocketPathError::MissingClusterId)
        );
        assert_eq!(
            cluster_id_from_path("/apis/other/abc"),
            Err(SocketPathError::IllegalRequest("/apis/other/abc".into()))
        );
        assert!(matches!(
            cluster_id_from_path(&format!("{base}/a/b")),
            Err(SocketPathError::IllegalRequest(_))
        ));
        assert_eq!(
            SocketPathError::IllegalRequest("/x".into()).to_string(),
            "illegal request /x"
        );
    }

    #[test]
    fn accept_key_matches_rfc_6455_example() {
        assert_eq!(
            websocket_accept_key(b"dGhlIHNhbXBsZSBub25jZQ=="),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
    }

    #[tokio::test]
    async fn reserved_places_count_until_used_or_dropped() {
        let registry = Arc::new(SessionRegistry::new());
        let a = registry.reserve("c1", 2).expect("first place");
        let _b = registry.reserve("c1", 2).expect("second place");
        let refused = registry.reserve("c1", 2).expect_err("over the cap");
        assert_eq!(
            refused.to_string(),
            "cluster c1 already has 2 live tunnel sessions at this hub, the limit (--max-tunnel-sessions-per-cluster=2)"
        );
        assert!(registry.reserve("c2", 2).is_ok(), "the cap is per cluster");
        assert!(registry.reserve("c1", 0).is_ok(), "0 is no limit");
        drop(a);
        assert_eq!(registry.live_sessions("c1"), 1);
        assert!(
            registry.reserve("c1", 2).is_ok(),
            "a dropped slot frees its place"
        );
    }

    #[tokio::test]
    async fn only_live_sessions_count_against_the_cap() {
        let registry = Arc::new(SessionRegistry {
            stale_after: Duration::from_millis(300),
            ..SessionRegistry::default()
        });
        // the older session: a socket whose far end went away without a word (a blip): open, silent
        let (hub_io, silent_io) = tokio::io::duplex(64 * 1024);
        let slot = registry.reserve("c1", 2).expect("place");
        tokio::spawn(slot.serve(hub_io));
        tokio::time::timeout(WAIT, async {
            while registry.lock().sessions.of("c1").is_empty() {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .expect("the silent one registered first");
        // the agent's reconnect, pinging as every agent does
        let (hub_io, agent_io) = tokio::io::duplex(64 * 1024);
        let slot = registry.reserve("c1", 2).expect("place");
        tokio::spawn(slot.serve(hub_io));
        let agent_ws =
            WebSocketStream::from_raw_socket(TokioAdapter::new(agent_io), Role::Client, None).await;
        let mut options = SessionOptions::new(SessionRole::Client, "c1");
        options.ping_interval = Duration::from_millis(50);
        let _pinging = Session::spawn_with(agent_ws, options);
        assert!(
            registry.reserve("c1", 2).is_err(),
            "two fresh sessions fill the cap"
        );

        // the silent one stops counting once it missed three pings' worth of time, long before
        // the session's own read timeout closes it
        tokio::time::timeout(WAIT, async {
            while registry.live_sessions("c1") > 1 {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await
        .expect("the silent session goes stale");
        assert_eq!(
            registry.lock().sessions.of("c1").len(),
            2,
            "still registered"
        );
        assert!(
            registry
                .get("c1")
                .is_some_and(|h| h.silent_for() < Duration::from_millis(300)),
            "dialing goes through the session that is heard from"
        );
        let reconnect = registry.reserve("c1", 2).expect("the agent may reconnect");
        drop(reconnect);
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert_eq!(
            registry.live_sessions("c1"),
            1,
            "the pinging one stays live"
        );
        drop(silent_io);
    }

    #[tokio::test]
    async fn registry_tracks_sessions_and_dials_through_them() {
        let echo_addr = crate::tunnel::testing::echo_server().await;

        let registry = Arc::new(SessionRegistry::new());
        let mut agents = Vec::new();
        let mut serves = Vec::new();
        for _ in 0..2 {
            let (hub_io, agent_io) = tokio::io::duplex(64 * 1024);
            let reg = registry.clone();
            serves.push(tokio::spawn(async move { reg.serve("c1", hub_io).await }));
            let agent_ws =
                WebSocketStream::from_raw_socket(TokioAdapter::new(agent_io), Role::Client, None)
                    .await;
            agents.push(Session::spawn(agent_ws, SessionRole::Client, "c1".into()));
        }
        tokio::time::timeout(WAIT, async {
            while registry.lock().sessions.of("c1").len() < 2 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .expect("both registered");
        assert_eq!(registry.connected(), vec!["c1".to_owned()]);
        assert!(registry.is_connected("c1"));
        assert!(!registry.is_connected("c2"));

        let first = registry.get("c1").expect("live session");
        assert_eq!(first.key(), "c1/1", "the oldest session is used");
        let mut stream = first.dial("tcp", &echo_addr).await.expect("dial");
        stream.write_all(b"through the hub").await.expect("write");
        let mut buf = [0u8; 15];
        tokio::time::timeout(WAIT, stream.read_exact(&mut buf))
            .await
            .expect("in time")
            .expect("read");
        assert_eq!(&buf, b"through the hub");

        // The agent of the first session goes away: dialing falls over to the second.
        agents[0].close();
        tokio::time::timeout(WAIT, serves.remove(0))
            .await
            .expect("serve returns")
            .expect("serve task");
        assert_eq!(registry.get("c1").expect("second").key(), "c1/2");

        // Dropping the serve future (e.g. the HTTP task is aborted) deregisters too.
        serves[0].abort();
        tokio::time::timeout(WAIT, async {
            while registry.is_connected("c1") {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .expect("deregistered");
        assert!(registry.connected().is_empty());
        tokio::time::timeout(WAIT, agents[1].closed())
            .await
            .expect("agent session ends when the hub drops it");
    }
}
