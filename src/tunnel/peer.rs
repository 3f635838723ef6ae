//! Tunnels between hub replicas (hub.md §2.6, remotedialer's `peer.go`).
//!
//! Several hub replicas sit behind one Service, so an agent's tunnel lands on one of them while a
//! proxy request may land on any. Replicas therefore connect to each other:
//!
//! - the *dialing* hub (`peer_client::run_peer_client`) connects to `wss://<peer>/connect` with its peer ID
//!   and token, announces every local agent session with `AddClient`/`RemoveClient`, and serves
//!   `Connect` requests whose protocol is `<clusterID>::<proto>` by dialing through its own agent
//!   session for that cluster (`peer_client::peer_dialer`);
//! - the *accepting* hub ([`PeerSessions::serve`]) records those announcements and, when it has
//!   no agent session for a cluster, dials `("<clusterID>::tcp", address)` over the peer session
//!   that announced it ([`PeerSessions::for_cluster`]).
//!
//! Each pair of replicas thus holds two sessions, one per direction, exactly as remotedialer does,
//! so a Go hub and this one can peer with each other.
//!
//! This module is the accepting side and the names both sides share; the dialing side, which
//! needs the hub's own agent sessions, is `peer_client` (so the session registry can hold the
//! peer sessions without the two modules importing each other).

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use async_tungstenite::WebSocketStream;
use async_tungstenite::tokio::TokioAdapter;
use async_tungstenite::tungstenite::protocol::Role;
use tokio::io::{AsyncRead, AsyncWrite};

use super::session::{Session, SessionHandle, SessionOptions, SessionRole};
use super::table::SessionTable;

/// Header carrying the dialing hub's peer ID.
pub const PEER_ID_HEADER: &str = "X-API-Tunnel-ID";
/// Header carrying the dialing hub's peer token.
pub const PEER_TOKEN_HEADER: &str = "X-API-Tunnel-Token";
/// The only route of the peer listener.
pub const PEER_CONNECT_PATH: &str = "/connect";

/// Sessions other hub replicas opened to us, and which peers we accept.
#[derive(Default)]
pub struct PeerSessions {
    inner: Mutex<PeersInner>,
}

#[derive(Default)]
struct PeersInner {
    /// Peer ID -> token, from the peers' Leases.
    known: HashMap<String, String>,
    sessions: SessionTable,
}

impl std::fmt::Debug for PeerSessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let inner = self.lock();
        f.debug_struct("PeerSessions")
            .field("known", &inner.known.keys().collect::<Vec<_>>())
            .field("connected", &inner.sessions.connected())
            .finish()
    }
}

impl PeerSessions {
    fn lock(&self) -> MutexGuard<'_, PeersInner> {
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Records a peer (from its Lease) so its incoming connections are accepted.
    pub fn add_known(&self, id: &str, token: &str) {
        let mut inner = self.lock();
        let changed = inner.known.get(id).is_some_and(|t| t != token);
        inner.known.insert(id.to_owned(), token.to_owned());
        if changed {
            // A new token is a new incarnation: what it told us before is stale.
            inner.sessions.close_all(id);
        }
    }

    /// Forgets a peer (its Lease is gone or expired) and closes its sessions.
    pub fn remove_known(&self, id: &str) {
        let mut inner = self.lock();
        inner.known.remove(id);
        inner.sessions.close_all(id);
    }

    /// Whether a connection claiming peer `id` with `token` may be accepted.
    pub fn authorize(&self, id: &str, token: &str) -> bool {
        self.lock().known.get(id).is_some_and(|t| t == token)
    }

    /// Runs an accepting session for peer `id` over an upgraded connection until it ends.
    pub async fn serve<IO>(&self, id: &str, io: IO)
    where
        IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let ws = WebSocketStream::from_raw_socket(TokioAdapter::new(io), Role::Server, None).await;
        let (key, handle) = {
            self.lock().sessions.open(id, |key| {
                let options =
                    SessionOptions::new(SessionRole::Server, format!("{id}/{key}")).with_gossip();
                Session::spawn_with(ws, options)
            })
        };
        let _guard = PeerRegistration {
            peers: self,
            id: id.to_owned(),
            key,
            handle: handle.clone(),
        };
        tracing::info!(peer = id, "peer hub connected");
        handle.closed().await;
    }

    /// A live peer session whose hub announced an agent session for `cluster_id`.
    pub fn for_cluster(&self, cluster_id: &str) -> Option<SessionHandle> {
        let inner = self.lock();
        let mut ids: Vec<(&String, &[(u64, SessionHandle)])> = inner.sessions.iter().collect();
        // Deterministic choice, so retries of one request go the same way.
        ids.sort_by_key(|(id, _)| *id);
        ids.into_iter()
            .flat_map(|(_, list)| list.iter())
            .map(|(_, handle)| handle)
            .find(|handle| !handle.is_closed() && handle.has_remote_client(cluster_id))
            .cloned()
    }

    /// Peer IDs with a live incoming session, sorted.
    pub fn connected(&self) -> Vec<String> {
        self.lock().sessions.connected()
    }

    fn remove(&self, id: &str, key: u64) {
        self.lock().sessions.remove(id, key);
    }
}

/// Deregisters a peer session however `serve` ends.
struct PeerRegistration<'a> {
    peers: &'a PeerSessions,
    id: String,
    key: u64,
    handle: SessionHandle,
}

impl Drop for PeerRegistration<'_> {
    fn drop(&mut self) {
        self.handle.close();
        self.peers.remove(&self.id, self.key);
        tracing::info!(peer = %self.id, "peer hub disconnected");
    }
}
