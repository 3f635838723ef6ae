//! The dialing side of the tunnels between hub replicas (remotedialer's `peer.go`, `ClientConnect`
//! for peers): connect to a peer's `/connect`, announce our agent sessions, and serve the peer's
//! `<clusterID>::<proto>` dials through them. See `peer` for the accepting side.

use std::collections::BTreeSet;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use async_tungstenite::WebSocketStream;
use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use super::TunnelError;
use super::peer::{PEER_ID_HEADER, PEER_TOKEN_HEADER};
use super::server::SessionRegistry;
use super::session::{BoxedIo, Dialer, Session, SessionHandle, SessionOptions, SessionRole};

/// Wait between attempts to reach a peer.
pub const PEER_RETRY_PERIOD: Duration = Duration::from_secs(5);

/// TCP, TLS and WebSocket handshake together.
pub const PEER_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Splits a peer `Connect` protocol `<clientKey>::<proto>`.
pub fn split_peer_proto(proto: &str) -> Option<(&str, &str)> {
    proto
        .split_once("::")
        .filter(|(key, proto)| !key.is_empty() && !proto.is_empty())
}

/// The dialer of a hub's outgoing peer sessions: `<clusterID>::<proto>` targets are opened
/// through the local agent session of that cluster; anything else is refused, so a peer cannot
/// use us to reach arbitrary addresses from the hub's own network.
pub fn peer_dialer(local: Arc<SessionRegistry>) -> Dialer {
    Arc::new(move |proto: String, address: String| {
        let local = local.clone();
        Box::pin(async move {
            let Some((cluster_id, inner)) = split_peer_proto(&proto) else {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("invalid clientKey/proto: {proto}"),
                ));
            };
            let session = local.get(cluster_id).ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::NotFound,
                    format!("failed to find Session for client {cluster_id}"),
                )
            })?;
            let stream = session
                .dial(inner, &address)
                .await
                .map_err(|e| io::Error::new(io::ErrorKind::ConnectionAborted, e.to_string()))?;
            Ok(Box::new(stream) as BoxedIo)
        }) as BoxFuture<'static, io::Result<BoxedIo>>
    })
}

/// Who we are to our peers.
#[derive(Clone)]
pub struct PeerIdentity {
    /// Our random peer ID.
    pub id: String,
    /// The shared peer token.
    pub token: String,
}

impl std::fmt::Debug for PeerIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerIdentity")
            .field("id", &self.id)
            .field("token", &"<redacted>")
            .finish()
    }
}

/// One connection attempt to a peer's `/connect`: returns the running (dialing-side) session.
pub async fn connect_peer(
    local: &Arc<SessionRegistry>,
    url: &str,
    me: &PeerIdentity,
    peer_id: &str,
) -> Result<SessionHandle, TunnelError> {
    let headers = [
        (PEER_ID_HEADER, me.id.as_str()),
        (PEER_TOKEN_HEADER, me.token.as_str()),
    ];
    let ws = tokio::time::timeout(
        PEER_HANDSHAKE_TIMEOUT,
        super::client::handshake(url, &headers),
    )
    .await
    .map_err(|_| TunnelError::HandshakeTimeout(PEER_HANDSHAKE_TIMEOUT))??;
    Ok(start_dialing_session(local, ws, peer_id))
}

/// Runs the dialing side of a peer session over `ws`: `Connect`s for `<clusterID>::<proto>` go
/// through our agent sessions, and our agent sessions are announced until the session ends.
pub fn start_dialing_session<S>(
    local: &Arc<SessionRegistry>,
    ws: WebSocketStream<S>,
    peer_id: &str,
) -> SessionHandle
where
    S: futures::io::AsyncRead + futures::io::AsyncWrite + Unpin + Send + 'static,
{
    let options = SessionOptions::new(SessionRole::Client, format!("peer/{peer_id}"))
        .with_dialer(peer_dialer(local.clone()));
    let session = Session::spawn_with(ws, options);
    tokio::spawn(announce(local.clone(), session.clone()));
    session
}

/// Sends `AddClient` for every local agent session, then the changes, until the session ends.
async fn announce(local: Arc<SessionRegistry>, session: SessionHandle) {
    // Subscribe before the first snapshot so no change between the two is missed.
    let mut changes = local.subscribe();
    let mut sent: BTreeSet<(String, u64)> = BTreeSet::new();
    loop {
        let now = local.snapshot();
        for (cluster, key) in sent.difference(&now) {
            if session
                .announce(false, cluster, &key.to_string())
                .await
                .is_err()
            {
                return;
            }
        }
        for (cluster, key) in now.difference(&sent) {
            if session
                .announce(true, cluster, &key.to_string())
                .await
                .is_err()
            {
                return;
            }
        }
        sent = now;
        tokio::select! {
            changed = changes.changed() => if changed.is_err() { return },
            () = session.closed() => return,
        }
    }
}

/// Keeps a dialing session to one peer up until `cancel`: connect, serve, and on any failure
/// retry every [`PEER_RETRY_PERIOD`].
pub async fn run_peer_client(
    local: Arc<SessionRegistry>,
    url: String,
    me: PeerIdentity,
    peer_id: String,
    cancel: CancellationToken,
) {
    while !cancel.is_cancelled() {
        let attempt = tokio::select! {
            attempt = connect_peer(&local, &url, &me, &peer_id) => attempt,
            () = cancel.cancelled() => break,
        };
        match attempt {
            Ok(session) => {
                tracing::info!(peer = %peer_id, %url, "connected to peer hub");
                tokio::select! {
                    () = session.closed() => {
                        tracing::warn!(peer = %peer_id, %url, "peer hub session closed");
                    }
                    () = cancel.cancelled() => session.close(),
                }
            }
            Err(err) => {
                tracing::warn!(peer = %peer_id, %url, error = %err, "failed to connect to peer hub");
            }
        }
        tokio::select! {
            () = tokio::time::sleep(PEER_RETRY_PERIOD) => {}
            () = cancel.cancelled() => break,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tunnel::peer::PeerSessions;
    use crate::tunnel::testing::echo_server;
    use async_tungstenite::tokio::TokioAdapter;
    use async_tungstenite::tungstenite::protocol::Role;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    const WAIT: Duration = Duration::from_secs(10);

    /// An agent for `cluster` whose tunnel lands on `hub`.
    async fn agent(hub: &Arc<SessionRegistry>, cluster: &'static str) -> SessionHandle {
        let (hub_io, agent_io) = tokio::io::duplex(256 * 1024);
        let reg = hub.clone();
        tokio::spawn(async move { reg.serve(cluster, hub_io).await });
        let ws =
            WebSocketStream::from_raw_socket(TokioAdapter::new(agent_io), Role::Client, None).await;
        Session::spawn(ws, SessionRole::Client, cluster.into())
    }

    /// Hub `a` dials hub `b` as peer `a-id`: returns a's dialing session.
    async fn peer(a: &Arc<SessionRegistry>, b: &Arc<SessionRegistry>) -> SessionHandle {
        let (a_io, b_io) = tokio::io::duplex(256 * 1024);
        let b = b.clone();
        tokio::spawn(async move { b.peers().serve("a-id", b_io).await });
        let ws =
            WebSocketStream::from_raw_socket(TokioAdapter::new(a_io), Role::Client, None).await;
        start_dialing_session(a, ws, "b-id")
    }

    async fn until(what: &str, mut check: impl FnMut() -> bool) {
        tokio::time::timeout(WAIT, async {
            while !check() {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {what}"));
    }

    #[test]
    fn peer_protocols() {
        assert_eq!(split_peer_proto("c1::tcp"), Some(("c1", "tcp")));
        assert_eq!(split_peer_proto("tcp"), None);
        assert_eq!(split_peer_proto("::tcp"), None);
        assert_eq!(split_peer_proto("c1::"), None);
    }

    #[test]
    fn only_known_peers_with_their_token_are_accepted() {
        let peers = PeerSessions::default();
        assert!(!peers.authorize("abcde", "Cheugy"));
        peers.add_known("abcde", "Cheugy");
        assert!(peers.authorize("abcde", "Cheugy"));
        assert!(!peers.authorize("abcde", "other"));
        assert!(!peers.authorize("fghij", "Cheugy"));
        peers.remove_known("abcde");
        assert!(!peers.authorize("abcde", "Cheugy"));
    }

    #[tokio::test]
    async fn a_peer_reaches_an_agent_connected_to_another_hub() {
        let echo = echo_server().await;
        let hub_a = Arc::new(SessionRegistry::new());
        let hub_b = Arc::new(SessionRegistry::new());

        // An agent that connected before the peer session is announced on connect ...
        let _agent1 = agent(&hub_a, "c1").await;
        until("agent c1 on hub a", || hub_a.is_connected("c1")).await;
        let a_to_b = peer(&hub_a, &hub_b).await;
        until("b learns c1", || hub_b.peers().for_cluster("c1").is_some()).await;
        assert_eq!(hub_b.peers().connected(), vec!["a-id".to_owned()]);
        assert!(hub_b.get("c1").is_none(), "no local session on b");

        // ... and one that connects later as a change.
        let agent2 = agent(&hub_a, "c2").await;
        until("b learns c2", || hub_b.peers().for_cluster("c2").is_some()).await;

        let via = hub_b.peers().for_cluster("c1").expect("peer with c1");
        let mut stream = via.dial("c1::tcp", &echo).await.expect("dial");
        stream.write_all(b"across hubs").await.expect("write");
        let mut buf = [0u8; 11];
        tokio::time::timeout(WAIT, stream.read_exact(&mut buf))
            .await
            .expect("in time")
            .expect("read");
        assert_eq!(&buf, b"across hubs");

        // A cluster a has no agent for fails on read with remotedialer's error text.
        let mut missing = via.dial("c9::tcp", &echo).await.expect("dial queued");
        let err = tokio::time::timeout(WAIT, missing.read(&mut buf))
            .await
            .expect("in time")
            .expect_err("no session for c9");
        assert!(
            err.to_string()
                .contains("failed to find Session for client c9"),
            "{err}"
        );
        // A plain protocol is not forwarded: peers may only reach agents.
        let mut plain = via.dial("tcp", &echo).await.expect("dial queued");
        let err = tokio::time::timeout(WAIT, plain.read(&mut buf))
            .await
            .expect("in time")
            .expect_err("plain tcp refused");
        assert!(err.to_string().contains("invalid clientKey/proto"), "{err}");

        // The agent of c2 goes away: b forgets it.
        agent2.close();
        until("b forgets c2", || hub_b.peers().for_cluster("c2").is_none()).await;
        assert!(hub_b.peers().for_cluster("c1").is_some());

        // The peer session ends: b forgets everything a announced.
        a_to_b.close();
        until("peer session gone", || hub_b.peers().connected().is_empty()).await;
        assert!(hub_b.peers().for_cluster("c1").is_none());
    }

    #[tokio::test]
    async fn forgetting_a_peer_closes_its_sessions() {
        let hub_a = Arc::new(SessionRegistry::new());
        let hub_b = Arc::new(SessionRegistry::new());
        hub_b.peers().add_known("a-id", "t");
        let a_to_b = peer(&hub_a, &hub_b).await;
        until("connected", || !hub_b.peers().connected().is_empty()).await;
        hub_b.peers().remove_known("a-id");
        tokio::time::timeout(WAIT, a_to_b.closed())
            .await
            .expect("the dialing side sees the session end");
    }
}
