//! One multiplexed remotedialer session over a WebSocket (hub.md §2.5), used by both ends.
//!
//! A session owns the WebSocket and a table of logical connections. Either end may dial
//! ([`SessionHandle::dial`]); what happens on an incoming `Connect` depends on the role:
//! the agent ([`SessionRole::Client`]) dials the target and pipes bytes both ways, the hub
//! ([`SessionRole::Server`]) refuses. Connection IDs are chosen by the dialing side: server
//! sessions count up from 2 like remotedialer; client sessions count down from -1 so IDs from the
//! two directions can never collide in the shared table.
//!
//! Sessions between hub replicas (§2.6) reuse the two roles: the dialing hub runs a client-role
//! session whose [`Dialer`] forwards `<clusterID>::<proto>` targets through its agent sessions
//! and announces those sessions with [`SessionHandle::announce`]; the accepting hub runs a
//! server-role session with [`SessionOptions::gossip`] on, which records the announcements
//! ([`SessionHandle::has_remote_client`]). Other sessions ignore `AddClient`/`RemoveClient`.
//!
//! Behaviour carried over from remotedialer:
//! - flow control: when a connection's unread buffer passes 2 MiB we send `Pause`, and `Resume`
//!   once the reader drains it below 256 KiB; our writers block while the peer has paused them;
//! - keepalive: the client role pings every 5 s; either side gives up after 60 s of silence;
//! - closing a connection sends `Error` with `EOF` (or the error text); an `Error` from the peer
//!   ends the connection (buffered bytes are still delivered first);
//! - `Data` for an unknown connection is answered with `Error "connection not found <key>/<id>"`.
//!
//! Design: one task drives the session. Its read half never blocks on the write half: stream
//! bytes go to per-connection buffers, and replies it must generate (`Pause`, `Resume`, `Error`)
//! go to a priority control queue with a hard cap. Stream data and `Connect`/close messages share
//! one bounded queue so they stay ordered and writers feel back-pressure from the socket.

use std::collections::{HashMap, HashSet, VecDeque};
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker, ready};
use std::time::{Duration, Instant};

use async_tungstenite::WebSocketStream;
use async_tungstenite::tungstenite::Message as WsMessage;
use bytes::Bytes;
use futures::StreamExt;
use futures::future::BoxFuture;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::mpsc;
use tokio_util::sync::{CancellationToken, PollSender};

use super::TunnelError;
use super::frame::{self, Message, MessageType};

/// Unread bytes on one connection above which we ask the peer to pause.
pub const PAUSE_THRESHOLD: usize = 2 * 1024 * 1024;
/// Unread bytes below which a paused peer is resumed.
pub const RESUME_THRESHOLD: usize = 256 * 1024;
/// How often the client role pings.
pub const PING_INTERVAL: Duration = Duration::from_secs(5);
/// How long either role waits for any message (data, ping, pong) before giving up.
pub const READ_TIMEOUT: Duration = Duration::from_secs(60);
/// Dial timeout for targets of incoming `Connect` requests.
pub const DIAL_TIMEOUT: Duration = Duration::from_secs(60);

/// A well-behaved peer stops within a few messages of our `Pause`; one that keeps going past this
/// is broken or hostile, and its connection is dropped rather than buffered without bound.
const MAX_BUFFERED: usize = 8 * PAUSE_THRESHOLD;
/// Largest `Data` payload we send; keeps one busy connection from hogging the socket.
const MAX_DATA_CHUNK: usize = 64 * 1024;
/// Bounded queue of stream messages: at most ~4 MiB waiting for the socket per session.
const DATA_QUEUE_LEN: usize = 64;
/// Replies the read side may queue before the peer is considered to be flooding us.
const MAX_CONTROL_BACKLOG: usize = 4096;
/// Client keys (and session keys per client) we remember from one peer's gossip.
const MAX_REMOTE_CLIENTS: usize = 100_000;
/// Best-effort time to say goodbye with a WebSocket close frame.
const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// remotedialer's message IDs: a process-wide counter starting at a random value.
static NEXT_MESSAGE_ID: LazyLock<AtomicI64> =
    LazyLock::new(|| AtomicI64::new(rand::random_range(0..i64::MAX / 2)));

fn next_message_id() -> i64 {
    // Atomic adds wrap; the ID is informational, so wrapping is harmless.
    NEXT_MESSAGE_ID
        .fetch_add(1, Ordering::Relaxed)
        .wrapping_add(1)
}

/// Which end of the tunnel a session is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionRole {
    /// The hub: accepts agent sockets, dials through them, refuses incoming `Connect`.
    Server,
    /// The agent: dials incoming `Connect` targets, pings the hub.
    Client,
}

/// Anything that can stand in for a socket.
pub trait TunnelIo: AsyncRead + AsyncWrite + Unpin + Send + 'static {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send + 'static> TunnelIo for T {}

/// A type-erased socket.
pub type BoxedIo = Box<dyn TunnelIo>;

/// Opens the target of an incoming `Connect`: `(proto, address) -> socket`.
pub type Dialer =
    Arc<dyn Fn(String, String) -> BoxFuture<'static, io::Result<BoxedIo>> + Send + Sync>;

/// The agent's default dialer: plain TCP (`tcp`, `tcp4`, `tcp6`) with a timeout, like Go's
/// `net.DialTimeout`.
pub fn tcp_dialer(timeout: Duration) -> Dialer {
    Arc::new(move |proto: String, address: String| {
        Box::pin(async move {
            if !matches!(proto.as_str(), "tcp" | "tcp4" | "tcp6") {
                return Err(io::Error::new(
                    io::ErrorKind::Unsupported,
                    format!("dial {proto} {address}: unknown network {proto}"),
                ));
            }
            let stream = tokio::time::timeout(timeout, tokio::net::TcpStream::connect(&address))
                .await
                .map_err(|_| {
                    io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("dial {proto} {address}: i/o timeout"),
                    )
                })?
                .map_err(|e| io::Error::new(e.kind(), format!("dial {proto} {address}: {e}")))?;
            // Interactive traffic (exec, watch) should not wait for Nagle.
            let _ = stream.set_nodelay(true);
            Ok(Box::new(stream) as BoxedIo)
        }) as BoxFuture<'static, io::Result<BoxedIo>>
    })
}

/// How to run a session.
#[derive(Clone)]
pub struct SessionOptions {
    /// Server (hub) or client (agent).
    pub role: SessionRole,
    /// Names the session in logs and `connection not found` replies.
    pub key: String,
    /// Opens targets of incoming `Connect` (client role only).
    pub dialer: Dialer,
    /// Ping period; pings are only sent by the client role.
    pub ping_interval: Duration,
    /// Silence after which the session is considered dead.
    pub read_timeout: Duration,
    /// Record the peer's `AddClient`/`RemoveClient` gossip (sessions between hub replicas only;
    /// an agent has no business announcing clients).
    pub gossip: bool,
}

impl SessionOptions {
    /// The remotedialer defaults for `role`.
    pub fn new(role: SessionRole, key: impl Into<String>) -> Self {
        Self {
            role,
            key: key.into(),
            dialer: tcp_dialer(DIAL_TIMEOUT),
            ping_interval: PING_INTERVAL,
            read_timeout: READ_TIMEOUT,
            gossip: false,
        }
    }

    /// Records the peer's `AddClient`/`RemoveClient` gossip (see [`SessionHandle::has_remote_client`]).
    pub fn with_gossip(mut self) -> Self {
        self.gossip = true;
        self
    }

    /// Replaces the dialer used for incoming `Connect` requests.
    pub fn with_dialer(mut self, dialer: Dialer) -> Self {
        self.dialer = dialer;
        self
    }
}

impl std::fmt::Debug for SessionOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionOptions")
            .field("role", &self.role)
            .field("key", &self.key)
            .field("ping_interval", &self.ping_interval)
            .field("read_timeout", &self.read_timeout)
            .field("gossip", &self.gossip)
            .finish_non_exhaustive()
    }
}

/// Entry point for starting sessions.
pub struct Session;

impl Session {
    /// Starts a session with default options on the current tokio runtime.
    pub fn spawn<S>(ws: WebSocketStream<S>, role: SessionRole, key: String) -> SessionHandle
    where
        S: futures::io::AsyncRead + futures::io::AsyncWrite + Unpin + Send + 'static,
    {
        Self::spawn_with(ws, SessionOptions::new(role, key))
    }

    /// Starts a session on the current tokio runtime.
    pub fn spawn_with<S>(ws: WebSocketStream<S>, options: SessionOptions) -> SessionHandle
    where
        S: futures::io::AsyncRead + futures::io::AsyncWrite + Unpin + Send + 'static,
    {
        let (shared, data_rx, control_rx) = Shared::new(&options);
        tokio::spawn(drive(ws, shared.clone(), data_rx, control_rx, options));
        SessionHandle { shared }
    }
}

/// A cheap, cloneable handle on a running session.
#[derive(Clone)]
pub struct SessionHandle {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for SessionHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionHandle")
            .field("key", &self.shared.key)
            .field("role", &self.shared.role)
            .field("closed", &self.is_closed())
            .finish()
    }
}

impl SessionHandle {
    /// The session key given at spawn time.
    pub fn key(&self) -> &str {
        &self.shared.key
    }

    /// Which end this session is.
    pub fn role(&self) -> SessionRole {
        self.shared.role
    }

    /// Opens `proto/address` on the far side (e.g. `("tcp", "10.96.0.1:443")`).
    ///
    /// Like remotedialer this returns as soon as `Connect` is queued; if the far side cannot reach
    /// the target, the first read on the stream fails with its error text.
    pub async fn dial(&self, proto: &str, address: &str) -> Result<TunnelStream, TunnelError> {
        let shared = &self.shared;
        let target_len = proto.len() + 1 + address.len();
        if target_len > frame::MAX_TEXT_PAYLOAD {
            return Err(TunnelError::TargetTooLong(format!("{proto}/{address}")));
        }
        if self.is_closed() {
            return Err(TunnelError::SessionClosed);
        }
        let conn_id = shared
            .next_conn_id
            .fetch_add(shared.conn_id_step, Ordering::Relaxed)
            .wrapping_add(shared.conn_id_step);
        let conn = shared.register(conn_id).ok_or(TunnelError::SessionClosed)?;
        let mut stream = TunnelStream::new(shared.clone(), conn);
        let connect = Message::connect(next_message_id(), conn_id, proto, address);
        let sent = tokio::select! {
            sent = shared.data_tx.send(connect) => sent.is_ok(),
            () = shared.done.cancelled() => false,
        };
        if !sent {
            // The peer never heard of this connection: nothing to close on its side.
            shared.remove(conn_id);
            stream.closed = true;
            return Err(TunnelError::SessionClosed);
        }
        Ok(stream)
    }

    /// Tells the peer that this process now has (`added`) or no longer has a session
    /// `session_key` for `client_key` (remotedialer `AddClient`/`RemoveClient`). Queued behind
    /// stream data so announcements stay in order.
    pub async fn announce(
        &self,
        added: bool,
        client_key: &str,
        session_key: &str,
    ) -> Result<(), TunnelError> {
        let msg = if added {
            Message::add_client(next_message_id(), client_key, session_key)
        } else {
            Message::remove_client(next_message_id(), client_key, session_key)
        };
        let shared = &self.shared;
        tokio::select! {
            sent = shared.data_tx.send(msg) => sent.map_err(|_| TunnelError::SessionClosed),
            () = shared.done.cancelled() => Err(TunnelError::SessionClosed),
        }
    }

    /// Whether the peer announced a live session for `client_key` (gossip sessions only).
    pub fn has_remote_client(&self, client_key: &str) -> bool {
        lock(&self.shared.remote_clients).contains_key(client_key)
    }

    /// Client keys the peer announced, sorted.
    pub fn remote_clients(&self) -> Vec<String> {
        let mut keys: Vec<String> = lock(&self.shared.remote_clients).keys().cloned().collect();
        keys.sort();
        keys
    }

    /// Asks the session to end; open connections fail.
    pub fn close(&self) {
        self.shared.stop.cancel();
    }

    /// Whether the session has ended or was asked to.
    pub fn is_closed(&self) -> bool {
        self.shared.stop.is_cancelled() || self.shared.done.is_cancelled()
    }

    /// Resolves once the session has ended and its connections have been failed.
    pub async fn closed(&self) {
        self.shared.done.cancelled().await;
    }

    /// Number of open logical connections.
    pub fn connection_count(&self) -> usize {
        self.shared.table().map.len()
    }

    /// How long since the peer last sent anything (data, ping or pong), or since the session
    /// started if it never did. An agent pings every [`PING_INTERVAL`], so a session silent for
    /// several intervals has a dead peer even while [`READ_TIMEOUT`] has not yet closed it.
    pub fn silent_for(&self) -> Duration {
        let heard = Duration::from_millis(self.shared.last_heard_ms.load(Ordering::Relaxed));
        self.shared.started.elapsed().saturating_sub(heard)
    }
}

struct Shared {
    role: SessionRole,
    key: String,
    /// Whether `AddClient`/`RemoveClient` from the peer are recorded.
    gossip: bool,
    /// What the peer announced: client key -> its session keys.
    remote_clients: Mutex<HashMap<String, HashSet<String>>>,
    data_tx: mpsc::Sender<Message>,
    control_tx: mpsc::UnboundedSender<Message>,
    control_backlog: AtomicUsize,
    /// `Pause` messages sent so far; lets tests (and debugging) see flow control engage.
    pauses_sent: AtomicUsize,
    conns: Mutex<ConnTable>,
    next_conn_id: AtomicI64,
    conn_id_step: i64,
    /// Someone asked the session to end.
    stop: CancellationToken,
    /// The driver has finished and failed every connection.
    done: CancellationToken,
    started: Instant,
    /// When the peer last sent a frame, in milliseconds after `started`.
    last_heard_ms: AtomicU64,
}

#[derive(Default)]
struct ConnTable {
    /// Set once the session has ended, so late dials cannot register orphans.
    closed: bool,
    map: HashMap<i64, Arc<Conn>>,
}

impl Shared {
    /// A session's shared state and the receiving ends of its two outgoing queues.
    fn new(
        options: &SessionOptions,
    ) -> (
        Arc<Self>,
        mpsc::Receiver<Message>,
        mpsc::UnboundedReceiver<Message>,
    ) {
        let (data_tx, data_rx) = mpsc::channel(DATA_QUEUE_LEN);
        let (control_tx, control_rx) = mpsc::unbounded_channel();
        let (first_conn_id, conn_id_step) = match options.role {
            SessionRole::Server => (1, 1),
            SessionRole::Client => (0, -1),
        };
        let shared = Arc::new(Shared {
            role: options.role,
            key: options.key.clone(),
            gossip: options.gossip,
            remote_clients: Mutex::new(HashMap::new()),
            data_tx,
            control_tx,
            control_backlog: AtomicUsize::new(0),
            pauses_sent: AtomicUsize::new(0),
            conns: Mutex::new(ConnTable::default()),
            next_conn_id: AtomicI64::new(first_conn_id),
            conn_id_step,
            stop: CancellationToken::new(),
            done: CancellationToken::new(),
            started: Instant::now(),
            last_heard_ms: AtomicU64::new(0),
        });
        (shared, data_rx, control_rx)
    }

    fn table(&self) -> MutexGuard<'_, ConnTable> {
        lock(&self.conns)
    }

    fn heard(&self) {
        let ms = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_heard_ms.store(ms, Ordering::Relaxed);
    }

    fn register(&self, conn_id: i64) -> Option<Arc<Conn>> {
        let mut table = self.table();
        if table.closed || table.map.contains_key(&conn_id) {
            return None;
        }
        let conn = Arc::new(Conn::new(conn_id));
        table.map.insert(conn_id, conn.clone());
        Some(conn)
    }

    fn get(&self, conn_id: i64) -> Option<Arc<Conn>> {
        self.table().map.get(&conn_id).cloned()
    }

    fn remove(&self, conn_id: i64) -> Option<Arc<Conn>> {
        self.table().map.remove(&conn_id)
    }

    /// Queues a reply generated by the read side. Never blocks; a peer that makes us queue too
    /// many ends the session instead of growing memory.
    fn send_control(&self, msg: Message) {
        if self.control_backlog.fetch_add(1, Ordering::Relaxed) >= MAX_CONTROL_BACKLOG {
            tracing::warn!(session = %self.key, "tunnel control backlog overflow; closing session");
            self.stop.cancel();
            return;
        }
        if self.control_tx.send(msg).is_err() {
            self.control_backlog.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Fails every connection; called once when the driver stops.
    fn fail_all(&self) {
        let conns: Vec<_> = {
            let mut table = self.table();
            table.closed = true;
            table.map.drain().map(|(_, conn)| conn).collect()
        };
        for conn in conns {
            conn.finish(
                ReadEnd::Error(io::ErrorKind::ConnectionAborted, "tunnel disconnect".into()),
                "tunnel disconnect",
            );
        }
    }

    /// Handles one message from the peer. Must not block: it runs on the read half.
    fn dispatch(self: &Arc<Self>, msg: Message, dialer: &Dialer) {
        match msg.kind {
            MessageType::Data => self.on_data(msg),
            MessageType::Connect => self.on_connect(msg, dialer),
            MessageType::Error => {
                if let Some(conn) = self.remove(msg.conn_id) {
                    let text = msg.error_text();
                    let end = if text == "EOF" {
                        ReadEnd::Eof
                    } else {
                        ReadEnd::Error(io::ErrorKind::ConnectionReset, text.clone())
                    };
                    conn.finish(end, &text);
                }
            }
            MessageType::Pause => {
                if let Some(conn) = self.get(msg.conn_id) {
                    conn.set_peer_paused(true);
                }
            }
            MessageType::Resume => {
                if let Some(conn) = self.get(msg.conn_id) {
                    conn.set_peer_paused(false);
                }
            }
            MessageType::AddClient | MessageType::RemoveClient => self.on_gossip(&msg),
        }
    }

    fn on_gossip(&self, msg: &Message) {
        if !self.gossip {
            tracing::debug!(session = %self.key, kind = ?msg.kind, "ignoring peer gossip");
            return;
        }
        let (client, session) = match msg.client_target() {
            Ok(target) => target,
            Err(err) => {
                tracing::debug!(session = %self.key, error = %err, "ignoring malformed peer gossip");
                return;
            }
        };
        let mut remote = lock(&self.remote_clients);
        if msg.kind == MessageType::AddClient {
            // A peer announcing without bound is broken or hostile; stop listening to it
            // rather than grow memory.
            if remote.len() >= MAX_REMOTE_CLIENTS && !remote.contains_key(&client) {
                tracing::warn!(session = %self.key, "too many clients announced by peer; ignoring");
                return;
            }
            let sessions = remote.entry(client).or_default();
            if sessions.len() < MAX_REMOTE_CLIENTS {
                sessions.insert(session);
            }
        } else if let Some(sessions) = remote.get_mut(&client) {
            sessions.remove(&session);
            if sessions.is_empty() {
                remote.remove(&client);
            }
        }
    }

    fn on_data(&self, msg: Message) {
        let Some(conn) = self.get(msg.conn_id) else {
            let text = format!("connection not found {}/{}", self.key, msg.conn_id);
            self.send_control(Message::error(next_message_id(), msg.conn_id, &text));
            return;
        };
        match conn.push(msg.payload) {
            Pushed::Buffered => {}
            Pushed::NeedsPause => {
                self.pauses_sent.fetch_add(1, Ordering::Relaxed);
                self.send_control(Message::pause(next_message_id(), conn.id));
            }
            Pushed::Overflow => {
                tracing::warn!(
                    session = %self.key,
                    conn = conn.id,
                    "peer ignored Pause; dropping connection"
                );
                self.remove(conn.id);
                let text = "receive buffer overflow";
                conn.finish(
                    ReadEnd::Error(io::ErrorKind::OutOfMemory, text.into()),
                    text,
                );
                self.send_control(Message::error(next_message_id(), conn.id, text));
            }
        }
    }

    fn on_connect(self: &Arc<Self>, msg: Message, dialer: &Dialer) {
        let conn_id = msg.conn_id;
        if self.role == SessionRole::Server {
            self.send_control(Message::error(
                next_message_id(),
                conn_id,
                "connect not allowed",
            ));
            return;
        }
        let (proto, address) = match msg.connect_target() {
            Ok(target) => target,
            Err(err) => {
                self.send_control(Message::error(next_message_id(), conn_id, &err.to_string()));
                return;
            }
        };
        let Some(conn) = self.register(conn_id) else {
            let text = format!("connection {}/{conn_id} already exists", self.key);
            self.send_control(Message::error(next_message_id(), conn_id, &text));
            return;
        };
        // Registered before dialing so Data sent right behind the Connect is buffered, not lost.
        let stream = TunnelStream::new(self.clone(), conn);
        let dial = dialer(proto.clone(), address.clone());
        let key = self.key.clone();
        tokio::spawn(async move {
            tracing::debug!(session = %key, conn = conn_id, %proto, %address, "tunnel connect");
            match dial.await {
                Ok(target) => pipe(stream, target).await,
                Err(err) => {
                    tracing::debug!(
                        session = %key,
                        conn = conn_id,
                        error = %err,
                        "tunnel dial failed"
                    );
                    stream.close_with_error(&err.to_string()).await;
                }
            }
        });
    }
}

/// Copies both ways until either direction ends, then closes both (remotedialer `pipe`).
async fn pipe(stream: TunnelStream, target: BoxedIo) {
    let (mut target_read, mut target_write) = tokio::io::split(target);
    let (mut tunnel_read, mut tunnel_write) = tokio::io::split(stream);
    let result = tokio::select! {
        r = tokio::io::copy(&mut tunnel_read, &mut target_write) => r,
        r = tokio::io::copy(&mut target_read, &mut tunnel_write) => r,
    };
    // The tunnel has no half-close: when one direction ends the whole connection goes.
    drop(target_read.unsplit(target_write));
    let stream = tunnel_read.unsplit(tunnel_write);
    let text = match result {
        Ok(_) => "EOF".to_owned(),
        Err(err) => err.to_string(),
    };
    stream.close_with_error(&text).await;
}

async fn drive<S>(
    ws: WebSocketStream<S>,
    shared: Arc<Shared>,
    data_rx: mpsc::Receiver<Message>,
    control_rx: mpsc::UnboundedReceiver<Message>,
    options: SessionOptions,
) where
    S: futures::io::AsyncRead + futures::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, mut receiver) = ws.split();
    let ping = (options.role == SessionRole::Client).then_some(options.ping_interval);
    let result = tokio::select! {
        r = read_loop(&mut receiver, &shared, &options) => r,
        r = write_loop(&mut sender, data_rx, control_rx, &shared, ping) => r,
        () = shared.stop.cancelled() => Ok(()),
    };
    match &result {
        Ok(()) => tracing::debug!(session = %shared.key, "tunnel session ended"),
        Err(err) => tracing::info!(session = %shared.key, error = %err, "tunnel session ended"),
    }
    let _ = tokio::time::timeout(CLOSE_GRACE, sender.close(None)).await;
    shared.stop.cancel();
    shared.fail_all();
    shared.done.cancel();
}

async fn read_loop<S>(
    receiver: &mut async_tungstenite::WebSocketReceiver<S>,
    shared: &Arc<Shared>,
    options: &SessionOptions,
) -> Result<(), TunnelError>
where
    S: futures::io::AsyncRead + futures::io::AsyncWrite + Unpin,
{
    loop {
        // Any frame, including ping/pong, extends the deadline.
        let next = tokio::time::timeout(options.read_timeout, receiver.next())
            .await
            .map_err(|_| TunnelError::ReadTimeout(options.read_timeout))?;
        let msg = match next {
            None => return Ok(()),
            Some(msg) => msg?,
        };
        shared.heard();
        match msg {
            WsMessage::Binary(bytes) => on_binary(shared, bytes, &options.dialer)?,
            WsMessage::Text(_) => return Err(TunnelError::UnexpectedText),
            WsMessage::Close(_) => return Ok(()),
            WsMessage::Ping(_) | WsMessage::Pong(_) | WsMessage::Frame(_) => {}
        }
    }
}

/// One binary WebSocket message from the peer: a tunnel message to act on, a type from a newer
/// protocol version to skip, or garbage that ends the session (the `Err`).
fn on_binary(shared: &Arc<Shared>, bytes: Bytes, dialer: &Dialer) -> Result<(), TunnelError> {
    match Message::decode(bytes) {
        Ok(msg) => shared.dispatch(msg, dialer),
        Err(frame::FrameError::UnknownType(kind)) => {
            tracing::debug!(
                session = %shared.key,
                kind,
                "ignoring unknown tunnel message type"
            );
        }
        Err(err) => return Err(err.into()),
    }
    Ok(())
}

/// Replays `frames` (each the payload of one binary WebSocket message from the peer) through a
/// fresh session's message handling, exactly as its read loop handles them, without a socket,
/// and returns every message the session queued for the peer (replies, dials, closes).
///
/// This is the session state machine's fuzzing entry point (`crate::fuzzing`, the bounded
/// harnesses in the tests): a few connections are dialed first so that `Data`, `Pause`,
/// `Resume` and `Error` frames find live connections; after every frame the open streams are
/// read without waiting (which sends `Resume`s) and spawned dials get to run. Targets of
/// incoming `Connect`s (client role) are in-memory pipes; addresses containing `refuse` fail to
/// dial. A frame that would end the session ends the replay with the session's error.
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) fn replay(
    role: SessionRole,
    gossip: bool,
    frames: &[Bytes],
) -> Result<Vec<Message>, TunnelError> {
    use futures::FutureExt;
    use tokio::io::AsyncReadExt;

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    // the far ends of dialed targets stay open until the replay ends, so connections do too
    let targets: Arc<Mutex<Vec<tokio::io::DuplexStream>>> = Arc::default();
    let held = targets.clone();
    let dialer: Dialer = Arc::new(move |proto: String, address: String| {
        let held = held.clone();
        Box::pin(async move {
            if address.contains("refuse") {
                return Err(io::Error::new(
                    io::ErrorKind::ConnectionRefused,
                    format!("dial {proto} {address}: connection refused"),
                ));
            }
            let (near, far) = tokio::io::duplex(4096);
            lock(&held).push(far);
            Ok(Box::new(near) as BoxedIo)
        }) as BoxFuture<'static, io::Result<BoxedIo>>
    });
    let mut options = SessionOptions::new(role, "fuzz").with_dialer(dialer.clone());
    options.gossip = gossip;
    let (shared, mut data_rx, mut control_rx) = Shared::new(&options);
    let mut out = Vec::new();
    let mut drain = |shared: &Shared, out: &mut Vec<Message>| {
        while let Ok(msg) = control_rx.try_recv() {
            shared.control_backlog.fetch_sub(1, Ordering::Relaxed);
            out.push(msg);
        }
        while let Ok(msg) = data_rx.try_recv() {
            out.push(msg);
        }
    };
    let result = runtime.block_on(async {
        let handle = SessionHandle {
            shared: shared.clone(),
        };
        let mut streams = Vec::new();
        for _ in 0..3 {
            streams.push(handle.dial("tcp", "10.0.0.1:443").await?);
        }
        drain(&shared, &mut out);
        let mut buf = [0u8; 512];
        let mut result = Ok(());
        for frame in frames {
            if let Err(err) = on_binary(&shared, frame.clone(), &dialer) {
                result = Err(err);
                break;
            }
            for stream in &mut streams {
                // only what is buffered already; a read that would wait is dropped
                let _ = stream.read(&mut buf).now_or_never();
            }
            for _ in 0..4 {
                tokio::task::yield_now().await;
            }
            drain(&shared, &mut out);
            if shared.stop.is_cancelled() {
                // the session gives up on a flooding peer; nothing after this is read
                break;
            }
        }
        drop(streams);
        shared.fail_all();
        for _ in 0..4 {
            tokio::task::yield_now().await;
        }
        drain(&shared, &mut out);
        result
    });
    drop(targets);
    result.map(|()| out)
}

async fn write_loop<S>(
    sender: &mut async_tungstenite::WebSocketSender<S>,
    mut data_rx: mpsc::Receiver<Message>,
    mut control_rx: mpsc::UnboundedReceiver<Message>,
    shared: &Shared,
    ping: Option<Duration>,
) -> Result<(), TunnelError>
where
    S: futures::io::AsyncRead + futures::io::AsyncWrite + Unpin,
{
    let mut ticker = ping.map(|period| {
        let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticker
    });
    loop {
        let out = tokio::select! {
            biased;
            Some(msg) = control_rx.recv() => {
                shared.control_backlog.fetch_sub(1, Ordering::Relaxed);
                WsMessage::Binary(msg.encode())
            }
            Some(msg) = data_rx.recv() => WsMessage::Binary(msg.encode()),
            () = tick(&mut ticker) => WsMessage::Ping(Bytes::new()),
            else => return Ok(()),
        };
        sender.send(out).await?;
    }
}

async fn tick(ticker: &mut Option<tokio::time::Interval>) {
    match ticker {
        Some(ticker) => {
            ticker.tick().await;
        }
        None => std::future::pending().await,
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic elsewhere must not take the tunnel down with poisoned-lock panics.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

enum ReadEnd {
    Eof,
    Error(io::ErrorKind, String),
}

enum Pushed {
    Buffered,
    NeedsPause,
    Overflow,
}

/// State of one logical connection, shared by the session's read side and its [`TunnelStream`].
struct Conn {
    id: i64,
    state: Mutex<ConnState>,
}

#[derive(Default)]
struct ConnState {
    buf: VecDeque<Bytes>,
    buffered: usize,
    read_end: Option<ReadEnd>,
    read_waker: Option<Waker>,
    /// We sent `Pause` and owe the peer a `Resume`.
    pause_sent: bool,
    /// The peer sent `Pause`.
    peer_paused: bool,
    write_waker: Option<Waker>,
    /// Set once writes must fail.
    write_error: Option<String>,
}

impl Conn {
    fn new(id: i64) -> Self {
        Self {
            id,
            state: Mutex::new(ConnState::default()),
        }
    }

    fn push(&self, data: Bytes) -> Pushed {
        let mut state = lock(&self.state);
        if state.read_end.is_some() || data.is_empty() {
            return Pushed::Buffered;
        }
        state.buffered += data.len();
        state.buf.push_back(data);
        if let Some(waker) = state.read_waker.take() {
            waker.wake();
        }
        if state.buffered > MAX_BUFFERED {
            Pushed::Overflow
        } else if state.buffered > PAUSE_THRESHOLD && !state.pause_sent {
            state.pause_sent = true;
            Pushed::NeedsPause
        } else {
            Pushed::Buffered
        }
    }

    /// Ends the connection: reads drain what is buffered and then see `read_end`; writes fail.
    fn finish(&self, read_end: ReadEnd, write_error: &str) {
        let mut state = lock(&self.state);
        if state.read_end.is_none() {
            state.read_end = Some(read_end);
        }
        if state.write_error.is_none() {
            state.write_error = Some(write_error.to_owned());
        }
        if let Some(waker) = state.read_waker.take() {
            waker.wake();
        }
        if let Some(waker) = state.write_waker.take() {
            waker.wake();
        }
    }

    fn set_peer_paused(&self, paused: bool) {
        let mut state = lock(&self.state);
        state.peer_paused = paused;
        if !paused && let Some(waker) = state.write_waker.take() {
            waker.wake();
        }
    }
}

/// One logical connection through the tunnel, usable like a TCP socket.
///
/// `poll_shutdown` (and dropping the stream) closes the whole connection with `Error "EOF"`: the
/// protocol has no half-close. Reads deliver everything the peer sent before its `Error`, then
/// `Ok(0)` for `EOF` or an error carrying the peer's text.
pub struct TunnelStream {
    shared: Arc<Shared>,
    conn: Arc<Conn>,
    tx: PollSender<Message>,
    /// This side has already closed (or never announced) the connection.
    closed: bool,
}

impl std::fmt::Debug for TunnelStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TunnelStream")
            .field("session", &self.shared.key)
            .field("conn_id", &self.conn.id)
            .finish()
    }
}

impl TunnelStream {
    fn new(shared: Arc<Shared>, conn: Arc<Conn>) -> Self {
        let tx = PollSender::new(shared.data_tx.clone());
        Self {
            shared,
            conn,
            tx,
            closed: false,
        }
    }

    /// The connection ID on the wire.
    pub fn conn_id(&self) -> i64 {
        self.conn.id
    }

    /// Closes the connection, telling the peer `text` (`EOF` for a normal close).
    pub async fn close_with_error(mut self, text: &str) {
        self.closed = true;
        if self.shared.remove(self.conn.id).is_some() {
            self.conn.finish(ReadEnd::Eof, "use of closed connection");
            let msg = Message::error(next_message_id(), self.conn.id, text);
            let _ = self.shared.data_tx.send(msg).await;
        }
    }

    fn write_error(text: &str) -> io::Error {
        io::Error::new(io::ErrorKind::BrokenPipe, text.to_owned())
    }

    fn session_gone() -> io::Error {
        Self::write_error("tunnel session closed")
    }
}

impl AsyncRead for TunnelStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if out.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        let this = self.get_mut();
        let mut send_resume = false;
        let result = {
            let mut state = lock(&this.conn.state);
            if let Some(front) = state.buf.front_mut() {
                let n = front.len().min(out.remaining());
                out.put_slice(&front.split_to(n));
                if front.is_empty() {
                    state.buf.pop_front();
                }
                state.buffered -= n;
                if state.pause_sent && state.buffered < RESUME_THRESHOLD && state.read_end.is_none()
                {
                    state.pause_sent = false;
                    send_resume = true;
                }
                Poll::Ready(Ok(()))
            } else {
                match &state.read_end {
                    Some(ReadEnd::Eof) => Poll::Ready(Ok(())),
                    Some(ReadEnd::Error(kind, text)) => {
                        Poll::Ready(Err(io::Error::new(*kind, text.clone())))
                    }
                    None => {
                        state.read_waker = Some(cx.waker().clone());
                        Poll::Pending
                    }
                }
            }
        };
        if send_resume {
            this.shared
                .send_control(Message::resume(next_message_id(), this.conn.id));
        }
        result
    }
}

impl AsyncWrite for TunnelStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.closed {
            return Poll::Ready(Err(Self::write_error("use of closed connection")));
        }
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        {
            let mut state = lock(&this.conn.state);
            if let Some(text) = &state.write_error {
                return Poll::Ready(Err(Self::write_error(text)));
            }
            if state.peer_paused {
                state.write_waker = Some(cx.waker().clone());
                return Poll::Pending;
            }
        }
        if ready!(this.tx.poll_reserve(cx)).is_err() {
            return Poll::Ready(Err(Self::session_gone()));
        }
        let n = buf.len().min(MAX_DATA_CHUNK);
        let msg = Message::data(
            next_message_id(),
            this.conn.id,
            Bytes::copy_from_slice(&buf[..n]),
        );
        match this.tx.send_item(msg) {
            Ok(()) => Poll::Ready(Ok(n)),
            Err(_) => Poll::Ready(Err(Self::session_gone())),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // Queued messages are the session's to deliver; there is nothing to flush per stream.
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.closed {
            return Poll::Ready(Ok(()));
        }
        if this.shared.get(this.conn.id).is_none() {
            // Already ended by the peer or the session: nobody to tell.
            this.closed = true;
            return Poll::Ready(Ok(()));
        }
        if ready!(this.tx.poll_reserve(cx)).is_err() {
            this.closed = true;
            return Poll::Ready(Ok(()));
        }
        this.closed = true;
        if this.shared.remove(this.conn.id).is_some() {
            this.conn.finish(ReadEnd::Eof, "use of closed connection");
            let msg = Message::error(next_message_id(), this.conn.id, "EOF");
            let _ = this.tx.send_item(msg);
        } else {
            this.tx.abort_send();
        }
        Poll::Ready(Ok(()))
    }
}

impl Drop for TunnelStream {
    fn drop(&mut self) {
        if self.closed || self.shared.remove(self.conn.id).is_none() {
            return;
        }
        self.conn.finish(ReadEnd::Eof, "use of closed connection");
        let msg = Message::error(next_message_id(), self.conn.id, "EOF");
        match self.shared.data_tx.try_send(msg) {
            Ok(()) | Err(mpsc::error::TrySendError::Closed(_)) => {}
            Err(mpsc::error::TrySendError::Full(msg)) => {
                // Keep the close behind data already queued for this connection.
                if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                    let tx = self.shared.data_tx.clone();
                    runtime.spawn(async move {
                        let _ = tx.send(msg).await;
                    });
                } else {
                    self.shared.send_control(msg);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tunnel::testing::echo_server;
    use async_tungstenite::tokio::TokioAdapter;
    use async_tungstenite::tungstenite::protocol::Role;
    use proptest::prelude::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
    use tokio::net::TcpListener;

    const WAIT: Duration = Duration::from_secs(10);

    async fn ws(io: DuplexStream, role: Role) -> WebSocketStream<TokioAdapter<DuplexStream>> {
        WebSocketStream::from_raw_socket(TokioAdapter::new(io), role, None).await
    }

    /// A hub-side and an agent-side session joined by an in-memory pipe.
    async fn pair_with(
        server: SessionOptions,
        client: SessionOptions,
    ) -> (SessionHandle, SessionHandle) {
        let (a, b) = tokio::io::duplex(256 * 1024);
        let server = Session::spawn_with(ws(a, Role::Server).await, server);
        let client = Session::spawn_with(ws(b, Role::Client).await, client);
        (server, client)
    }

    async fn pair() -> (SessionHandle, SessionHandle) {
        pair_with(
            SessionOptions::new(SessionRole::Server, "c1/1"),
            SessionOptions::new(SessionRole::Client, "c1"),
        )
        .await
    }

    /// A session facing a raw WebSocket we drive by hand.
    async fn raw_peer(
        options: SessionOptions,
    ) -> (SessionHandle, WebSocketStream<TokioAdapter<DuplexStream>>) {
        let (a, b) = tokio::io::duplex(64 * 1024);
        let peer_role = match options.role {
            SessionRole::Server => Role::Client,
            SessionRole::Client => Role::Server,
        };
        let session = Session::spawn_with(ws(a, Role::Server).await, options);
        (session, ws(b, peer_role).await)
    }

    async fn next_tunnel_message(
        peer: &mut WebSocketStream<TokioAdapter<DuplexStream>>,
    ) -> Message {
        loop {
            let msg = tokio::time::timeout(WAIT, peer.next())
                .await
                .expect("message in time")
                .expect("stream open")
                .expect("valid frame");
            if let WsMessage::Binary(bytes) = msg {
                return Message::decode(bytes).expect("decodes");
            }
        }
    }

    #[test]
    fn handles_and_streams_can_cross_tasks() {
        fn socket_like<T: AsyncRead + AsyncWrite + Unpin + Send + 'static>() {}
        fn shareable<T: Clone + Send + Sync + 'static>() {}
        socket_like::<TunnelStream>();
        shareable::<SessionHandle>();
    }

    #[tokio::test]
    async fn dial_round_trips_through_agent() {
        let echo = echo_server().await;
        let (server, client) = pair().await;
        let mut stream = server.dial("tcp", &echo).await.expect("dial");
        assert_eq!(
            stream.conn_id(),
            2,
            "server sessions number from 2 like remotedialer"
        );
        stream.write_all(b"hello tunnel").await.expect("write");
        let mut buf = [0u8; 12];
        tokio::time::timeout(WAIT, stream.read_exact(&mut buf))
            .await
            .expect("in time")
            .expect("read");
        assert_eq!(&buf, b"hello tunnel");
        let second = server.dial("tcp", &echo).await.expect("dial");
        assert_eq!(second.conn_id(), 3);
        drop(second);

        stream.shutdown().await.expect("shutdown");
        let mut rest = Vec::new();
        assert_eq!(stream.read_to_end(&mut rest).await.expect("eof"), 0);
        // The agent tears its side down once it sees our EOF.
        tokio::time::timeout(WAIT, async {
            while client.connection_count() > 0 || server.connection_count() > 0 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .expect("connections released");
    }

    #[tokio::test]
    async fn peer_eof_ends_reads_with_zero() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        tokio::spawn(async move {
            if let Ok((mut socket, _)) = listener.accept().await {
                let _ = socket.write_all(b"bye").await;
            }
        });
        let (server, _client) = pair().await;
        let mut stream = server.dial("tcp", &addr).await.expect("dial");
        let mut got = Vec::new();
        tokio::time::timeout(WAIT, stream.read_to_end(&mut got))
            .await
            .expect("in time")
            .expect("clean eof");
        assert_eq!(got, b"bye");
        assert!(
            stream.write_all(b"late").await.is_err(),
            "writes fail after peer close"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn twenty_mib_both_ways_with_flow_control() {
        const TOTAL: usize = 20 * 1024 * 1024;
        let echo = echo_server().await;
        let (server, client) = pair().await;
        let stream = server.dial("tcp", &echo).await.expect("dial");
        let (mut reader, mut writer) = tokio::io::split(stream);
        let pattern = |i: usize| (i % 251) as u8;
        let write = tokio::spawn(async move {
            let chunk: Vec<u8> = (0..TOTAL).map(pattern).collect();
            writer.write_all(&chunk).await.expect("write all");
            writer
        });
        // Let the echo path back up so both ends have to pause their peers.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let read = async {
            let mut buf = vec![0u8; 256 * 1024];
            let mut seen = 0usize;
            while seen < TOTAL {
                let n = reader.read(&mut buf).await.expect("read");
                assert!(n > 0, "unexpected eof after {seen} bytes");
                for (i, byte) in buf[..n].iter().enumerate() {
                    assert_eq!(*byte, pattern(seen + i), "corruption at {}", seen + i);
                }
                seen += n;
            }
        };
        tokio::time::timeout(Duration::from_secs(60), read)
            .await
            .expect("transfer finished");
        let writer = write.await.expect("writer task");
        drop(reader.unsplit(writer));
        assert!(
            server.shared.pauses_sent.load(Ordering::Relaxed) > 0,
            "hub never paused the agent"
        );
        assert!(
            client.shared.pauses_sent.load(Ordering::Relaxed) > 0,
            "agent never paused the hub"
        );
    }

    #[tokio::test]
    async fn unknown_connection_and_refused_connect_get_errors() {
        let (session, mut peer) = raw_peer(SessionOptions::new(SessionRole::Server, "c1/7")).await;
        let data = Message::data(1, 99, Bytes::from_static(b"x"));
        peer.send(WsMessage::Binary(data.encode()))
            .await
            .expect("send");
        let reply = next_tunnel_message(&mut peer).await;
        assert_eq!(reply.kind, MessageType::Error);
        assert_eq!(reply.conn_id, 99);
        assert_eq!(reply.error_text(), "connection not found c1/7/99");

        let connect = Message::connect(2, 5, "tcp", "127.0.0.1:1");
        peer.send(WsMessage::Binary(connect.encode()))
            .await
            .expect("send");
        let reply = next_tunnel_message(&mut peer).await;
        assert_eq!((reply.kind, reply.conn_id), (MessageType::Error, 5));
        assert_eq!(reply.error_text(), "connect not allowed");

        // A type from a newer protocol version is skipped rather than fatal.
        peer.send(WsMessage::Binary(Bytes::from_static(&[0x02, 0x04, 0x10])))
            .await
            .expect("send");
        assert!(!session.is_closed());
        // remotedialer ends the session on any text message.
        peer.send(WsMessage::text("hello")).await.expect("send");
        tokio::time::timeout(WAIT, session.closed())
            .await
            .expect("text message ends the session");
    }

    #[tokio::test]
    async fn gossip_is_recorded_only_when_asked_for() {
        let options = SessionOptions::new(SessionRole::Server, "peer/1").with_gossip();
        let (session, mut peer) = raw_peer(options).await;
        let send = |msg: Message| WsMessage::Binary(msg.encode());
        peer.send(send(Message::add_client(1, "c1", "7")))
            .await
            .expect("send");
        peer.send(send(Message::add_client(2, "c1", "8")))
            .await
            .expect("send");
        peer.send(send(Message::add_client(3, "c2", "9")))
            .await
            .expect("send");
        // malformed gossip is ignored, not fatal
        peer.send(send(Message::new(
            4,
            0,
            MessageType::AddClient,
            Bytes::from_static(b"no-slash"),
        )))
        .await
        .expect("send");
        peer.send(send(Message::remove_client(5, "c1", "7")))
            .await
            .expect("send");
        peer.send(send(Message::remove_client(6, "c2", "9")))
            .await
            .expect("send");
        tokio::time::timeout(WAIT, async {
            while session.remote_clients() != vec!["c1".to_owned()] {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .expect("c1 still has session 8, c2 none");
        assert!(session.has_remote_client("c1"));
        assert!(!session.has_remote_client("c2"));
        assert!(!session.is_closed());

        // an agent's session does not listen to gossip
        let (plain, mut peer) = raw_peer(SessionOptions::new(SessionRole::Server, "c1/1")).await;
        peer.send(send(Message::add_client(1, "c1", "7")))
            .await
            .expect("send");
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(plain.remote_clients().is_empty());
    }

    #[tokio::test]
    async fn announcements_reach_the_peer_in_order() {
        let (a, b) = tokio::io::duplex(64 * 1024);
        let session = Session::spawn_with(
            ws(a, Role::Client).await,
            SessionOptions::new(SessionRole::Client, "peer"),
        );
        let mut peer = ws(b, Role::Server).await;
        session.announce(true, "c1", "3").await.expect("announce");
        session.announce(false, "c1", "3").await.expect("announce");
        let first = next_tunnel_message(&mut peer).await;
        assert_eq!(first.kind, MessageType::AddClient);
        assert_eq!(
            first.client_target().expect("target"),
            ("c1".into(), "3".into())
        );
        let second = next_tunnel_message(&mut peer).await;
        assert_eq!(second.kind, MessageType::RemoveClient);
    }

    #[tokio::test]
    async fn garbage_frame_ends_session() {
        let (session, mut peer) = raw_peer(SessionOptions::new(SessionRole::Client, "c1")).await;
        peer.send(WsMessage::Binary(Bytes::from_static(&[0xff; 12])))
            .await
            .expect("send");
        tokio::time::timeout(WAIT, session.closed())
            .await
            .expect("malformed frame ends the session");
    }

    #[tokio::test]
    async fn dialing_closed_port_reports_error() {
        let port = {
            let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
            listener.local_addr().expect("addr").port()
        };
        let (server, _client) = pair().await;
        let mut stream = server
            .dial("tcp", &format!("127.0.0.1:{port}"))
            .await
            .expect("dial is queued");
        let mut buf = [0u8; 1];
        let err = tokio::time::timeout(WAIT, stream.read(&mut buf))
            .await
            .expect("in time")
            .expect_err("the agent's dial error surfaces on read");
        assert!(err.to_string().starts_with("dial tcp 127.0.0.1:"), "{err}");
        assert_eq!(server.connection_count(), 0);
    }

    #[tokio::test]
    async fn unsupported_protocol_is_refused_by_agent() {
        let (server, _client) = pair().await;
        let mut stream = server.dial("udp", "127.0.0.1:53").await.expect("dial");
        let mut buf = [0u8; 1];
        let err = stream.read(&mut buf).await.expect_err("udp refused");
        assert!(err.to_string().contains("unknown network udp"), "{err}");
    }

    #[tokio::test]
    async fn injected_dialer_is_used() {
        let dialer: Dialer = Arc::new(|proto: String, address: String| {
            Box::pin(async move {
                let (near, mut far) = tokio::io::duplex(1024);
                tokio::spawn(async move {
                    let _ = far.write_all(format!("{proto}|{address}").as_bytes()).await;
                });
                Ok(Box::new(near) as BoxedIo)
            }) as BoxFuture<'static, io::Result<BoxedIo>>
        });
        let (server, _client) = pair_with(
            SessionOptions::new(SessionRole::Server, "s"),
            SessionOptions::new(SessionRole::Client, "c").with_dialer(dialer),
        )
        .await;
        let mut stream = server.dial("tcp", "anywhere:1").await.expect("dial");
        let mut got = Vec::new();
        tokio::time::timeout(WAIT, stream.read_to_end(&mut got))
            .await
            .expect("in time")
            .expect("eof");
        assert_eq!(got, b"tcp|anywhere:1");
    }

    #[tokio::test]
    async fn closing_session_fails_open_streams() {
        let echo = echo_server().await;
        let (server, client) = pair().await;
        let mut stream = server.dial("tcp", &echo).await.expect("dial");
        stream.write_all(b"ping").await.expect("write");
        let mut buf = [0u8; 4];
        stream.read_exact(&mut buf).await.expect("echo");

        server.close();
        assert!(server.is_closed());
        tokio::time::timeout(WAIT, server.closed())
            .await
            .expect("closed");
        let err = stream.read(&mut buf).await.expect_err("read fails");
        assert_eq!(err.kind(), io::ErrorKind::ConnectionAborted);
        assert!(stream.write_all(b"more").await.is_err());
        assert!(matches!(
            server.dial("tcp", &echo).await,
            Err(TunnelError::SessionClosed)
        ));
        // The agent sees the close frame and ends too.
        tokio::time::timeout(WAIT, client.closed())
            .await
            .expect("peer closed");
    }

    #[tokio::test]
    async fn client_dials_use_negative_ids() {
        let (_server, client) = pair().await;
        let stream = client.dial("tcp", "127.0.0.1:1").await.expect("dial");
        assert_eq!(stream.conn_id(), -1);
    }

    #[tokio::test]
    async fn target_too_long_is_rejected() {
        let (server, _client) = pair().await;
        let long = "a".repeat(120);
        assert!(matches!(
            server.dial("tcp", &long).await,
            Err(TunnelError::TargetTooLong(_))
        ));
    }

    #[tokio::test]
    async fn pings_keep_the_session_alive_and_silence_kills_it() {
        let mut server_opts = SessionOptions::new(SessionRole::Server, "s");
        server_opts.read_timeout = Duration::from_millis(300);
        let mut client_opts = SessionOptions::new(SessionRole::Client, "c");
        client_opts.ping_interval = Duration::from_millis(50);
        client_opts.read_timeout = Duration::from_millis(300);
        let (server, client) = pair_with(server_opts, client_opts).await;
        tokio::time::sleep(Duration::from_millis(1000)).await;
        assert!(
            !server.is_closed() && !client.is_closed(),
            "pings/pongs kept both alive"
        );

        // A peer that never says anything is dropped after the read timeout.
        let mut silent_opts = SessionOptions::new(SessionRole::Server, "quiet");
        silent_opts.read_timeout = Duration::from_millis(200);
        let (silent, _peer) = raw_peer(silent_opts).await;
        tokio::time::timeout(Duration::from_secs(2), silent.closed())
            .await
            .expect("read timeout ends the session");
    }

    #[tokio::test]
    async fn silence_is_measured_from_the_last_frame() {
        let server_opts = SessionOptions::new(SessionRole::Server, "s");
        let mut client_opts = SessionOptions::new(SessionRole::Client, "c");
        client_opts.ping_interval = Duration::from_millis(50);
        let (server, _client) = pair_with(server_opts, client_opts).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(
            server.silent_for() < Duration::from_millis(400),
            "a pinging peer is heard: {:?}",
            server.silent_for()
        );
        let (quiet, _peer) = raw_peer(SessionOptions::new(SessionRole::Server, "q")).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(quiet.silent_for() >= Duration::from_millis(300));
        assert!(!quiet.is_closed(), "silent, yet not timed out");
    }

    /// A frame the session acts on: mostly well-formed messages for the connections a replay
    /// has open (and a few it does not), with payloads that parse or nearly parse; sometimes
    /// raw bytes.
    fn session_frame() -> impl Strategy<Value = Bytes> {
        let payload = prop_oneof![
            Just(Bytes::from_static(b"EOF")),
            Just(Bytes::from_static(b"tcp/127.0.0.1:80")),
            Just(Bytes::from_static(b"tcp/refuse:1")),
            Just(Bytes::from_static(b"udp/10.0.0.1:53")),
            Just(Bytes::from_static(b"c1/s1")),
            Just(Bytes::from_static(b"/s1")),
            Just(Bytes::new()),
            proptest::collection::vec(any::<u8>(), 0..200).prop_map(Bytes::from),
        ];
        prop_oneof![
            8 => (any::<i64>(), -5_i64..6, 1_i64..=7, payload)
                .prop_map(|(id, conn, kind, payload)| {
                    let kind = MessageType::from_i64(kind).unwrap_or(MessageType::Data);
                    Message::new(id, conn, kind, payload).encode()
                }),
            1 => (any::<i64>(), any::<i64>(), 8_i64..20)
                .prop_map(|(id, conn, kind)| {
                    let mut out = bytes::BytesMut::new();
                    frame::put_varint(&mut out, id);
                    frame::put_varint(&mut out, conn);
                    frame::put_varint(&mut out, kind);
                    out.freeze()
                }),
            1 => proptest::collection::vec(any::<u8>(), 0..24).prop_map(Bytes::from),
        ]
    }

    proptest::proptest! {
        #![proptest_config(crate::fuzz_support::config(crate::fuzz_support::DEFAULT_CASES))]

        /// Any sequence of frames from the peer leaves the session state machine standing: no
        /// panic, every message it queues for the peer is well formed, every `Error` it sends
        /// carries a text, and a sequence that ends the session ends it with a readable error.
        #[test]
        fn random_frame_sequences_never_panic_the_session(
            client in proptest::bool::ANY,
            gossip in proptest::bool::ANY,
            frames in proptest::collection::vec(session_frame(), 0..24),
        ) {
            let role = if client { SessionRole::Client } else { SessionRole::Server };
            match replay(role, gossip, &frames) {
                Ok(sent) => {
                    for msg in sent {
                        proptest::prop_assert_eq!(Message::decode(msg.encode()), Ok(msg.clone()));
                        if msg.kind == MessageType::Error {
                            crate::fuzz_support::assert_readable(&msg.error_text(), "a close")?;
                        }
                    }
                }
                Err(e) => crate::fuzz_support::assert_readable(&e.to_string(), "a frame sequence")?,
            }
        }
    }

    proptest::proptest! {
        #![proptest_config(crate::fuzz_support::config(32))]

        /// The whole session over a real WebSocket: whatever messages arrive (binary frames,
        /// text, pings, a close), once the peer goes away the session ends and fails its
        /// connections. A panic in the driver would leave `closed()` pending forever, so a hang
        /// and a panic both fail here.
        #[test]
        fn random_websocket_messages_never_wedge_the_session(
            client in proptest::bool::ANY,
            messages in proptest::collection::vec(
                prop_oneof![
                    8 => session_frame().prop_map(WsMessage::Binary),
                    1 => Just(WsMessage::text("hello")),
                    1 => Just(WsMessage::Ping(Bytes::new())),
                    1 => Just(WsMessage::Close(None)),
                ],
                0..16,
            ),
        ) {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            let ended = runtime.block_on(async {
                let role = if client { SessionRole::Client } else { SessionRole::Server };
                let (session, mut peer) = raw_peer(SessionOptions::new(role, "fuzz")).await;
                for msg in messages {
                    if peer.send(msg).await.is_err() {
                        break;
                    }
                }
                drop(peer);
                tokio::time::timeout(Duration::from_secs(5), session.closed()).await.is_ok()
            });
            proptest::prop_assert!(ended, "the session did not end after its peer went away");
        }
    }
}
