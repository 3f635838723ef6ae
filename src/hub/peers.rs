//! Peer hubs (hub.md §2.6): every hub replica can proxy to every child, wherever its agent's
//! tunnel landed.
//!
//! Only with `--leader-elect`. Each replica
//! - picks a random 5-character peer ID and holds the Lease `clusternet-hub-peer-<id>` whose
//!   `holderIdentity` is a JSON [`PeerRecord`] saying where and with which token to reach it;
//! - serves `/connect` over HTTPS on `<bind-address>:<peer-port>`, accepting a WebSocket only
//!   from a known peer presenting that peer's token;
//! - follows the other peer Leases and keeps a dialing session to each live one (the tunnel
//!   module's [`peer`](crate::tunnel::peer) does the protocol);
//! - deletes peer Leases nobody renews any more (a replica killed without cleanup).
//!
//! Peer Leases are followed by listing them every retry period rather than through a watch:
//! expiry needs a clock check anyway, and a small list per period heals itself after any error.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use http::{HeaderValue, Request, Response, StatusCode, header};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, DeleteParams, ListParams, Preconditions};
use kube::{Client, ResourceExt};
use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;
use tokio_rustls::rustls::ServerConfig;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::body::{HubBody, empty};
use crate::runtime::Runtime;
use crate::runtime::leader::{LeaderElector, LeaseTiming, holder_identity};
use crate::tunnel::peer::{PEER_CONNECT_PATH, PEER_ID_HEADER, PEER_TOKEN_HEADER};
use crate::tunnel::peer_client::{PeerIdentity, run_peer_client};
use crate::tunnel::server::{SessionRegistry, websocket_accept_key};

/// Name prefix of the peer Leases.
pub const PEER_LEASE_PREFIX: &str = "clusternet-hub-peer";

/// What a peer Lease's `holderIdentity` says, as JSON (upstream's field names).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerRecord {
    /// `<hostname>_<uuid>` of the process.
    pub identity: String,
    /// The random peer ID.
    pub id: String,
    /// Address other replicas dial.
    pub host: String,
    /// Port of the peer listener.
    pub port: u16,
    /// Token the replica presents when it dials (and expects from peers).
    pub token: String,
}

impl PeerRecord {
    /// `wss://<host>:<port>/connect`.
    pub fn url(&self) -> String {
        let host = match self.host.parse::<IpAddr>() {
            Ok(IpAddr::V6(v6)) => format!("[{v6}]"),
            _ => self.host.clone(),
        };
        format!("wss://{host}:{}{PEER_CONNECT_PATH}", self.port)
    }
}

/// Upstream's alphabet for random names (no vowels, no confusable characters).
const ID_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// A fresh 5-character peer ID.
pub fn random_peer_id() -> String {
    (0..5)
        .map(|_| char::from(ID_ALPHABET[rand::random_range(0..ID_ALPHABET.len())]))
        .collect()
}

/// `clusternet-hub-peer-<id>`.
pub fn lease_name(id: &str) -> String {
    format!("{PEER_LEASE_PREFIX}-{id}")
}

/// `--peer-advertise-address`, else the bind address unless it is unspecified, else the IP of
/// the interface holding the default route, else loopback.
pub fn advertise_address(flag: Option<&str>, bind_address: &str) -> String {
    if let Some(a) = flag.map(str::trim).filter(|a| !a.is_empty()) {
        return a.to_owned();
    }
    match bind_address.parse::<IpAddr>() {
        Ok(ip) if ip.is_unspecified() => {}
        Ok(ip) => return ip.to_string(),
        Err(_) if !bind_address.is_empty() => return bind_address.to_owned(),
        Err(_) => {}
    }
    default_interface_ip().map_or_else(|| "127.0.0.1".to_owned(), |ip| ip.to_string())
}

/// The local address the kernel would use to reach the internet; a UDP "connect" sends nothing.
fn default_interface_ip() -> Option<IpAddr> {
    let socket = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
    socket.connect("8.8.8.8:53").ok()?;
    let ip = socket.local_addr().ok()?.ip();
    (!ip.is_unspecified()).then_some(ip)
}

/// Whether a Lease nobody renews any more: `renewTime + leaseDurationSeconds` is in the past, or
/// either is missing (upstream's lease GC rule).
pub fn lease_expired(spec: Option<&LeaseSpec>, now: Timestamp) -> bool {
    let Some(spec) = spec else { return true };
    let (Some(renew), Some(secs)) = (&spec.renew_time, spec.lease_duration_seconds) else {
        return true;
    };
    match renew
        .0
        .checked_add(SignedDuration::from_secs(i64::from(secs)))
    {
        Ok(until) => until < now,
        Err(_) => false,
    }
}

/// The peer a Lease describes, unless it is not a peer Lease, is ours, has expired, or its holder
/// is not a peer record.
pub fn peer_from_lease(lease: &Lease, own_id: &str, now: Timestamp) -> Option<PeerRecord> {
    let name = lease.metadata.name.as_deref()?;
    if !name.starts_with(PEER_LEASE_PREFIX) || name == lease_name(own_id) {
        return None;
    }
    let spec = lease.spec.as_ref();
    if lease_expired(spec, now) {
        return None;
    }
    let holder = spec?.holder_identity.as_deref()?;
    let record: PeerRecord = serde_json::from_str(holder).ok()?;
    (record.id != own_id && !record.id.is_empty()).then_some(record)
}

/// Starts the peer machinery of a hub replica (listener, Lease, discovery, GC) and returns at
/// once; everything stops with the runtime's shutdown.
pub fn start(rt: &Runtime, registry: Arc<SessionRegistry>, tls: ServerConfig) {
    let cfg = &rt.config;
    let me = PeerRecord {
        identity: holder_identity(),
        id: random_peer_id(),
        host: advertise_address(cfg.peer_advertise_address.as_deref(), &cfg.bind_address),
        port: cfg.peer_port,
        token: cfg.peer_token.clone(),
    };
    info!(peer_id = %me.id, host = %me.host, port = me.port, "starting peer hub connections");
    let addr = format!("{}:{}", cfg.bind_address, cfg.peer_port);
    {
        let registry = registry.clone();
        let shutdown = rt.shutdown.clone();
        tokio::spawn(async move {
            // Without our listener the peers cannot announce their agents to us, but we still
            // serve our own agents and announce them: a warning, not a failed hub.
            match TcpListener::bind(&addr).await {
                Ok(listener) => match serve(registry, listener, tls, shutdown) {
                    Ok(bound) => info!(%bound, "serving peer connections"),
                    Err(e) => warn!(%addr, error = %e, "cannot serve peer connections"),
                },
                Err(e) => {
                    warn!(%addr, error = %e, "cannot bind the peer port; other hub replicas cannot reach this one")
                }
            }
        });
    }
    let timing = LeaseTiming {
        lease_duration: cfg.leader_elect_lease_duration,
        renew_deadline: cfg.leader_elect_renew_deadline,
        retry_period: cfg.leader_elect_retry_period,
    };
    let ns = cfg.leader_elect_resource_namespace.clone();
    tokio::spawn(hold_lease(
        rt.client.clone(),
        ns.clone(),
        me.clone(),
        timing,
        rt.shutdown.clone(),
    ));
    tokio::spawn(follow_peers(
        rt.client.clone(),
        ns.clone(),
        me,
        registry,
        timing.retry_period,
        rt.shutdown.clone(),
    ));
    tokio::spawn(collect_garbage(
        rt.client.clone(),
        ns,
        timing.lease_duration,
        rt.shutdown.clone(),
    ));
}

/// Serves `/connect` for other hub replicas; returns the bound address.
pub fn serve(
    registry: Arc<SessionRegistry>,
    listener: TcpListener,
    tls: ServerConfig,
    shutdown: CancellationToken,
) -> std::io::Result<std::net::SocketAddr> {
    crate::runtime::serving::accept_tls(listener, tls, shutdown, move |tls, peer| {
        let registry = registry.clone();
        async move {
            let svc = hyper::service::service_fn(move |req| {
                let registry = registry.clone();
                async move { Ok::<_, Infallible>(connect(registry, req)) }
            });
            if let Err(e) = Builder::new(TokioExecutor::new())
                .serve_connection_with_upgrades(TokioIo::new(tls), svc)
                .await
            {
                debug!(%peer, error = %e, "peer connection ended with an error");
            }
        }
    })
}

/// Errors on the peer port are `Status` objects like every other answer of the hub.
fn status(code: StatusCode, text: &str) -> Response<HubBody> {
    let reason = match code {
        StatusCode::NOT_FOUND => "NotFound",
        StatusCode::UNAUTHORIZED => "Unauthorized",
        _ => "BadRequest",
    };
    super::status::ApiError::new(code.as_u16(), reason, text).into_response()
}

/// `GET /connect` from a peer: check its ID and token, answer the WebSocket handshake and run
/// the accepting session.
fn connect(registry: Arc<SessionRegistry>, mut req: Request<Incoming>) -> Response<HubBody> {
    if req.uri().path() != PEER_CONNECT_PATH {
        return status(
            StatusCode::NOT_FOUND,
            &format!(
                "the server could not find the requested resource ({})",
                req.uri().path()
            ),
        );
    }
    let header = |name: &str| {
        req.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
            .filter(|v| !v.is_empty())
    };
    let (Some(id), Some(token)) = (header(PEER_ID_HEADER), header(PEER_TOKEN_HEADER)) else {
        return status(StatusCode::UNAUTHORIZED, "missing peer id or token");
    };
    if !registry.peers().authorize(&id, &token) {
        return status(StatusCode::UNAUTHORIZED, "unknown peer or wrong token");
    }
    let is_ws =
        header(header::UPGRADE.as_str()).is_some_and(|v| v.eq_ignore_ascii_case("websocket"));
    let Some(key) = header("sec-websocket-key").filter(|_| is_ws) else {
        return status(
            StatusCode::BAD_REQUEST,
            "/connect needs a WebSocket upgrade",
        );
    };
    let on_upgrade = hyper::upgrade::on(&mut req);
    tokio::spawn(async move {
        match on_upgrade.await {
            Ok(upgraded) => registry.peers().serve(&id, TokioIo::new(upgraded)).await,
            Err(e) => warn!(peer = %id, error = %e, "peer upgrade failed"),
        }
    });
    let mut resp = Response::new(empty());
    *resp.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let h = resp.headers_mut();
    h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    h.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    if let Ok(v) = HeaderValue::from_str(&websocket_accept_key(key.as_bytes())) {
        h.insert("sec-websocket-accept", v);
    }
    resp
}

/// Holds our peer Lease until shutdown, then deletes it so peers drop us at once.
async fn hold_lease(
    client: Client,
    ns: String,
    me: PeerRecord,
    timing: LeaseTiming,
    shutdown: CancellationToken,
) {
    crate::runtime::ensure_namespace(&client, &ns).await;
    let name = lease_name(&me.id);
    let identity = match serde_json::to_string(&me) {
        Ok(json) => json,
        Err(e) => {
            warn!(error = %e, "cannot encode the peer record; not advertising this hub to peers");
            return;
        }
    };
    let mut elector = LeaderElector::new(client.clone(), &ns, &name, identity, timing);
    while !shutdown.is_cancelled() {
        if elector.acquire(&shutdown).await.is_none() {
            break;
        }
        // Losing it (the API server was unreachable for the renew deadline) just means we go
        // round and take it again: nobody else ever claims our name.
        if elector.keep_renewing(&shutdown).await.is_ok() {
            break;
        }
    }
    let api: Api<Lease> = Api::namespaced(client, &ns);
    let deleted = tokio::time::timeout(
        Duration::from_secs(2),
        api.delete(&name, &DeleteParams::default()),
    )
    .await;
    debug!(lease = %name, ok = matches!(deleted, Ok(Ok(_))), "peer lease removed");
}

/// Keeps one dialing session per live peer Lease, and tells the registry which peers to accept.
async fn follow_peers(
    client: Client,
    ns: String,
    me: PeerRecord,
    registry: Arc<SessionRegistry>,
    period: Duration,
    shutdown: CancellationToken,
) {
    let api: Api<Lease> = Api::namespaced(client, &ns);
    let identity = PeerIdentity {
        id: me.id.clone(),
        token: me.token.clone(),
    };
    let mut running: HashMap<String, (PeerRecord, CancellationToken)> = HashMap::new();
    loop {
        match api.list(&ListParams::default()).await {
            Ok(list) => {
                let now = Timestamp::now();
                let live: HashMap<String, PeerRecord> = list
                    .items
                    .iter()
                    .filter_map(|l| peer_from_lease(l, &me.id, now))
                    .map(|p| (p.id.clone(), p))
                    .collect();
                running.retain(|id, (record, cancel)| {
                    let keep = live.get(id) == Some(record);
                    if !keep {
                        info!(peer = %id, "peer hub gone");
                        cancel.cancel();
                        registry.peers().remove_known(id);
                    }
                    keep
                });
                for (id, record) in live {
                    if running.contains_key(&id) {
                        continue;
                    }
                    info!(peer = %id, url = %record.url(), "found peer hub");
                    registry.peers().add_known(&id, &record.token);
                    let cancel = shutdown.child_token();
                    tokio::spawn(run_peer_client(
                        registry.clone(),
                        record.url(),
                        identity.clone(),
                        id.clone(),
                        cancel.clone(),
                    ));
                    running.insert(id, (record, cancel));
                }
            }
            Err(e) => debug!(namespace = %ns, error = %e, "listing peer leases failed"),
        }
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(period) => {}
        }
    }
}

/// Every lease duration, deletes peer Leases nobody renews (re-checked live before deleting).
async fn collect_garbage(
    client: Client,
    ns: String,
    period: Duration,
    shutdown: CancellationToken,
) {
    let api: Api<Lease> = Api::namespaced(client, &ns);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(period) => {}
        }
        let Ok(list) = api.list(&ListParams::default()).await else {
            continue;
        };
        for lease in list.items {
            let name = lease.name_any();
            if !name.starts_with(PEER_LEASE_PREFIX)
                || !lease_expired(lease.spec.as_ref(), Timestamp::now())
            {
                continue;
            }
            // The list may be stale: only delete what is still expired, and only that version.
            let Ok(Some(current)) = api.get_opt(&name).await else {
                continue;
            };
            if !lease_expired(current.spec.as_ref(), Timestamp::now()) {
                continue;
            }
            let params = DeleteParams {
                preconditions: Some(Preconditions {
                    resource_version: current.resource_version(),
                    uid: current.uid(),
                }),
                ..Default::default()
            };
            match api.delete(&name, &params).await {
                Ok(_) => info!(lease = %name, "deleted expired peer lease"),
                Err(e) => debug!(lease = %name, error = %e, "deleting expired peer lease failed"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};

    fn record(id: &str) -> PeerRecord {
        PeerRecord {
            identity: "host_0f8fad5b-d9cb-469f-a165-70867728950e".into(),
            id: id.into(),
            host: "10.0.0.7".into(),
            port: 8123,
            token: "Cheugy".into(),
        }
    }

    fn lease(name: &str, holder: Option<String>, renewed_secs_ago: i64, duration: i32) -> Lease {
        let renew = Timestamp::now() - SignedDuration::from_secs(renewed_secs_ago);
        Lease {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: holder,
                renew_time: Some(MicroTime(renew)),
                lease_duration_seconds: Some(duration),
                ..Default::default()
            }),
        }
    }

    #[tokio::test]
    async fn peer_port_errors_are_status_objects() {
        use http_body_util::BodyExt;
        let resp = status(StatusCode::UNAUTHORIZED, "unknown peer or wrong token");
        assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(
            resp.headers().get(header::CONTENT_TYPE),
            Some(&HeaderValue::from_static("application/json"))
        );
        let body = resp.into_body().collect().await.expect("body").to_bytes();
        let v: serde_json::Value = serde_json::from_slice(&body).expect("json");
        assert_eq!(v["kind"], "Status");
        assert_eq!(v["reason"], "Unauthorized");
        assert_eq!(v["message"], "unknown peer or wrong token");
    }

    /// The real listener and dialer over TLS: a wrong token is refused, the right one gives a
    /// session through which hub B reaches the agent on hub A.
    #[tokio::test]
    async fn peers_connect_over_tls_with_their_token() {
        use crate::tunnel::peer_client::connect_peer;
        use crate::tunnel::session::{Session, SessionRole};
        use async_tungstenite::WebSocketStream;
        use async_tungstenite::tokio::TokioAdapter;
        use async_tungstenite::tungstenite::protocol::Role;
        use tokio::io::{AsyncReadExt, AsyncWriteExt};

        let wait = Duration::from_secs(10);
        let echo_addr = crate::tunnel::testing::echo_server().await;

        let hub_a = Arc::new(SessionRegistry::new());
        let (hub_io, agent_io) = tokio::io::duplex(64 * 1024);
        let reg = hub_a.clone();
        tokio::spawn(async move { reg.serve("c1", hub_io).await });
        let agent_ws =
            WebSocketStream::from_raw_socket(TokioAdapter::new(agent_io), Role::Client, None).await;
        let _agent = Session::spawn(agent_ws, SessionRole::Client, "c1".into());

        let hub_b = Arc::new(SessionRegistry::new());
        hub_b.peers().add_known("aaaaa", "Cheugy");
        let pair = crate::runtime::serving::self_signed(&["localhost", "127.0.0.1"]).expect("cert");
        let tls = crate::runtime::serving::server_config(&pair).expect("tls");
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let shutdown = CancellationToken::new();
        let bound = serve(hub_b.clone(), listener, tls, shutdown.clone()).expect("serve");
        let url = format!("wss://{bound}/connect");

        let wrong = PeerIdentity {
            id: "aaaaa".into(),
            token: "nope".into(),
        };
        let err = connect_peer(&hub_a, &url, &wrong, "bbbbb")
            .await
            .expect_err("wrong token refused");
        assert!(err.to_string().contains("401"), "{err}");
        let stranger = PeerIdentity {
            id: "zzzzz".into(),
            token: "Cheugy".into(),
        };
        assert!(
            connect_peer(&hub_a, &url, &stranger, "bbbbb")
                .await
                .is_err()
        );

        let me = PeerIdentity {
            id: "aaaaa".into(),
            token: "Cheugy".into(),
        };
        let _session = connect_peer(&hub_a, &url, &me, "bbbbb")
            .await
            .expect("peer accepted");
        let via = tokio::time::timeout(wait, async {
            loop {
                if let Some(s) = hub_b.peers().for_cluster("c1") {
                    return s;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .expect("hub B learns c1 from hub A");
        let mut stream = via.dial("c1::tcp", &echo_addr).await.expect("dial");
        stream.write_all(b"peer tls").await.expect("write");
        let mut buf = [0u8; 8];
        tokio::time::timeout(wait, stream.read_exact(&mut buf))
            .await
            .expect("in time")
            .expect("read");
        assert_eq!(&buf, b"peer tls");
        shutdown.cancel();
    }

    #[test]
    fn holder_identity_is_upstreams_json() {
        let json = serde_json::to_value(record("b2x4z")).expect("json");
        assert_eq!(
            json,
            serde_json::json!({
                "identity": "host_0f8fad5b-d9cb-469f-a165-70867728950e",
                "id": "b2x4z",
                "host": "10.0.0.7",
                "port": 8123,
                "token": "Cheugy",
            })
        );
        let back: PeerRecord = serde_json::from_value(json).expect("parses");
        assert_eq!(back, record("b2x4z"));
        assert_eq!(back.url(), "wss://10.0.0.7:8123/connect");
        let v6 = PeerRecord {
            host: "fd00::1".into(),
            ..record("x")
        };
        assert_eq!(v6.url(), "wss://[fd00::1]:8123/connect");
    }

    #[test]
    fn peer_ids_and_lease_names() {
        let id = random_peer_id();
        assert_eq!(id.len(), 5);
        assert!(id.bytes().all(|b| ID_ALPHABET.contains(&b)), "{id}");
        assert_eq!(lease_name("b2x4z"), "clusternet-hub-peer-b2x4z");
    }

    #[test]
    fn advertise_address_defaults() {
        assert_eq!(advertise_address(Some("1.2.3.4"), "0.0.0.0"), "1.2.3.4");
        assert_eq!(advertise_address(None, "127.0.0.1"), "127.0.0.1");
        assert_eq!(advertise_address(Some(" "), "10.1.1.1"), "10.1.1.1");
        let derived = advertise_address(None, "0.0.0.0");
        let ip: IpAddr = derived.parse().expect("an IP");
        assert!(!ip.is_unspecified());
    }

    #[test]
    fn lease_expiry() {
        let now = Timestamp::now();
        assert!(lease_expired(None, now));
        assert!(lease_expired(Some(&LeaseSpec::default()), now));
        let fresh = lease("x", None, 1, 15);
        assert!(!lease_expired(fresh.spec.as_ref(), now));
        let stale = lease("x", None, 20, 15);
        assert!(lease_expired(stale.spec.as_ref(), now));
        let no_duration = LeaseSpec {
            lease_duration_seconds: None,
            ..fresh.spec.clone().expect("spec")
        };
        assert!(lease_expired(Some(&no_duration), now));
    }

    #[test]
    fn peers_come_from_live_foreign_peer_leases() {
        let now = Timestamp::now();
        let json = |id: &str| Some(serde_json::to_string(&record(id)).expect("json"));
        let other = lease("clusternet-hub-peer-other", json("other"), 1, 15);
        assert_eq!(peer_from_lease(&other, "mine0", now), Some(record("other")));
        // our own, expired, foreign and garbled Leases are not peers
        let own = lease("clusternet-hub-peer-mine0", json("mine0"), 1, 15);
        assert_eq!(peer_from_lease(&own, "mine0", now), None);
        let expired = lease("clusternet-hub-peer-other", json("other"), 30, 15);
        assert_eq!(peer_from_lease(&expired, "mine0", now), None);
        let foreign = lease("clusternet-scheduler", json("other"), 1, 15);
        assert_eq!(peer_from_lease(&foreign, "mine0", now), None);
        let garbled = lease("clusternet-hub-peer-x", Some("host_uuid".into()), 1, 15);
        assert_eq!(peer_from_lease(&garbled, "mine0", now), None);
    }
}
