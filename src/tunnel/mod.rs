//! The reverse WebSocket tunnel between agents and the hub (Clusternet's `SocketConnection`
//! feature, hub.md §2.4, §2.5, §2.7).
//!
//! An agent dials *out* to its parent and keeps one WebSocket open; the hub later opens logical TCP
//! connections back through it (to the child's API server, the predictor, cluster services), so
//! children behind NAT stay reachable. The wire format is rancher/remotedialer v0.3.0, so either
//! end interoperates with the Go implementation.
//!
//! This module owns:
//! - [`frame`]: the message encoding (Go signed varints, legacy deadline field);
//! - [`session`]: one multiplexed session over a WebSocket (connection table, flow control,
//!   keepalive) and [`session::TunnelStream`], the socket-like end of one logical connection;
//! - [`server`]: the hub's registry of agent sessions keyed by cluster ID, plus the socket
//!   metrics and WebSocket-upgrade helpers for the HTTP layer;
//! - [`client`]: the agent's connect/reconnect loop;
//! - [`table`]: the sessions the hub holds by ID, shared by the registry and the peers.
//!
//! - [`peer`]: sessions between hub replicas (§2.6): announcing agent sessions with
//!   `AddClient`/`RemoveClient` and dialing `<clusterID>::tcp` through a peer that has the agent.

pub mod client;
pub mod frame;
pub mod peer;
pub mod peer_client;
pub mod server;
pub mod session;
pub mod table;

use std::time::Duration;

use async_tungstenite::tungstenite;

pub use frame::{FrameError, Message, MessageType};
pub use server::SessionRegistry;
pub use session::{Session, SessionHandle, SessionOptions, SessionRole, TunnelStream};

/// Everything that can go wrong in the tunnel.
#[derive(Debug, thiserror::Error)]
pub enum TunnelError {
    /// The peer sent bytes that are not a tunnel message.
    #[error("malformed tunnel message: {0}")]
    Frame(#[from] FrameError),
    /// The WebSocket layer failed (I/O, protocol violation, handshake rejection).
    #[error("websocket: {0}")]
    WebSocket(Box<tungstenite::Error>),
    /// remotedialer terminates a session on any non-binary data message.
    #[error("unexpected text message on the tunnel")]
    UnexpectedText,
    /// Nothing (data, ping or pong) was read within the read deadline.
    #[error("no message from the peer for {0:?}")]
    ReadTimeout(Duration),
    /// The session has ended or is ending.
    #[error("tunnel session closed")]
    SessionClosed,
    /// A `Connect` target longer than the peer will read.
    #[error("connect target {0:?} is longer than {max} bytes", max = frame::MAX_TEXT_PAYLOAD)]
    TargetTooLong(String),
    /// The parent URL could not be turned into a socket URL.
    #[error("invalid tunnel URL {url}: {reason}")]
    InvalidUrl {
        /// The offending URL.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// TCP or TLS connection to the parent failed.
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
    /// TCP, TLS and WebSocket handshake together took too long.
    #[error("tunnel handshake timed out after {0:?}")]
    HandshakeTimeout(Duration),
}

impl From<tungstenite::Error> for TunnelError {
    fn from(err: tungstenite::Error) -> Self {
        Self::WebSocket(Box::new(err))
    }
}

/// Test helpers shared by the tunnel's and the hub's tests.
#[cfg(test)]
pub(crate) mod testing {
    /// A TCP echo server on loopback; returns its address.
    pub(crate) async fn echo_server() -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let (mut r, mut w) = socket.into_split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                });
            }
        });
        addr
    }
}
