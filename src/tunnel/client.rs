//! Agent side of the tunnel: keep one socket open to the parent hub (hub.md §2.4).
//!
//! The agent connects to `<parent>/apis/proxies.clusternet.io/v1alpha1/sockets/<clusterID>` with
//! its dedicated bearer token, runs a client-role session (which dials whatever the hub asks for
//! from inside the child), and reconnects forever: on any error it waits 5 s with jitter 0.3 (Go's
//! `wait.JitterUntil`) and tries again, until cancelled. TLS server verification is disabled, as
//! in Clusternet, but handshake signatures are still checked so the session keys are sound.

use std::sync::Arc;
use std::time::Duration;

use async_tungstenite::tungstenite::client::IntoClientRequest;
use async_tungstenite::tungstenite::http::{HeaderName, HeaderValue, Uri, header::AUTHORIZATION};
use tokio::sync::watch;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::ServerName;
use tokio_util::sync::CancellationToken;

use super::TunnelError;
use super::session::{
    BoxedIo, DIAL_TIMEOUT, Dialer, Session, SessionHandle, SessionOptions, SessionRole, tcp_dialer,
};

/// Where and as whom the agent connects.
#[derive(Clone)]
pub struct ClientConfig {
    /// Parent API server URL, e.g. `https://parent:6443` or `https://host/prefix`.
    pub url: String,
    /// This child's cluster ID (the session's client key on the hub).
    pub cluster_id: String,
    /// The dedicated service-account token sent as `Authorization: Bearer`.
    pub token: String,
}

impl std::fmt::Debug for ClientConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientConfig")
            .field("url", &self.url)
            .field("cluster_id", &self.cluster_id)
            .field("token", &"<redacted>")
            .finish()
    }
}

/// Tuning knobs of the connect loop; `Default` is Clusternet's behaviour.
#[derive(Clone)]
pub struct ClientOptions {
    /// Wait between attempts (5 s).
    pub retry_period: Duration,
    /// Extra random wait as a fraction of `retry_period` (0.3).
    pub jitter: f64,
    /// Limit for TCP connect, TLS and WebSocket handshake together (10 s).
    pub handshake_timeout: Duration,
    /// Opens targets the hub asks for (plain TCP with a 1 minute timeout).
    pub dialer: Dialer,
}

impl Default for ClientOptions {
    fn default() -> Self {
        Self {
            retry_period: Duration::from_secs(5),
            jitter: 0.3,
            handshake_timeout: Duration::from_secs(10),
            dialer: tcp_dialer(DIAL_TIMEOUT),
        }
    }
}

/// The socket URL for a parent URL: `http`->`ws`, `https`->`wss`, path
/// `<parent path>/apis/proxies.clusternet.io/v1alpha1/sockets/<clusterID>`. Any query or
/// fragment of the parent URL is dropped; other schemes are kept (and fail at connect time).
pub fn socket_url(parent_url: &str, cluster_id: &str) -> String {
    let (scheme, rest) = match parent_url.split_once("://") {
        Some((scheme, rest)) => (scheme, rest),
        None => ("https", parent_url),
    };
    let ws_scheme = match scheme.to_ascii_lowercase().as_str() {
        "https" | "wss" => "wss".to_owned(),
        "http" | "ws" => "ws".to_owned(),
        other => other.to_owned(),
    };
    let rest = rest.split(['?', '#']).next().unwrap_or_default();
    let (authority, path) = match rest.find('/') {
        Some(slash) => rest.split_at(slash),
        None => (rest, ""),
    };
    let path = path.trim_end_matches('/');
    format!(
        "{ws_scheme}://{authority}{path}{}{cluster_id}",
        super::server::SOCKETS_PATH_PREFIX
    )
}

/// Keeps the tunnel up until `cancel` fires, publishing whether a session is live on `connected`.
pub async fn run(config: ClientConfig, cancel: CancellationToken, connected: watch::Sender<bool>) {
    run_with_options(config, ClientOptions::default(), cancel, connected).await;
}

/// [`run`] with explicit options.
pub async fn run_with_options(
    config: ClientConfig,
    options: ClientOptions,
    cancel: CancellationToken,
    connected: watch::Sender<bool>,
) {
    let url = socket_url(&config.url, &config.cluster_id);
    // after a lost session the hub is usually back within seconds (a restart, a rollout), so
    // retry soon and back off to the regular period while it stays away
    let first_retry = options.retry_period.min(Duration::from_secs(1));
    let mut backoff = first_retry;
    // a parent that stays away (or refuses us) is said at the first failure and then once a
    // minute with the count, not at every retry
    let mut failures: u64 = 0;
    let mut warned: Option<std::time::Instant> = None;
    while !cancel.is_cancelled() {
        let attempt = tokio::select! {
            attempt = connect(&config, &options) => attempt,
            () = cancel.cancelled() => break,
        };
        match attempt {
            Ok(session) => {
                tracing::info!(url = %url, failures, "connected to parent cluster tunnel");
                connected.send_replace(true);
                backoff = first_retry;
                (failures, warned) = (0, None);
                tokio::select! {
                    () = session.closed() => {
                        tracing::warn!(url = %url, "tunnel to parent cluster closed; reconnecting");
                    }
                    () = cancel.cancelled() => session.close(),
                }
                connected.send_replace(false);
            }
            Err(err) => {
                failures += 1;
                if warned.is_none_or(|at| at.elapsed() >= Duration::from_secs(60)) {
                    tracing::warn!(
                        url = %url,
                        error = %err,
                        failures,
                        "failed to connect to parent cluster tunnel; retrying"
                    );
                    warned = Some(std::time::Instant::now());
                } else {
                    tracing::debug!(url = %url, error = %err, failures, "tunnel connect failed again");
                }
            }
        }
        let wait = jittered(backoff, options.jitter);
        backoff = (backoff * 2).min(options.retry_period);
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = cancel.cancelled() => break,
        }
    }
    connected.send_replace(false);
}

fn jittered(period: Duration, jitter: f64) -> Duration {
    if jitter <= 0.0 {
        return period;
    }
    period.mul_f64(1.0 + rand::random::<f64>() * jitter)
}

/// One connection attempt: TCP, TLS for `wss`, WebSocket handshake, then a running session.
pub async fn connect(
    config: &ClientConfig,
    options: &ClientOptions,
) -> Result<SessionHandle, TunnelError> {
    let url = socket_url(&config.url, &config.cluster_id);
    let timeout = options.handshake_timeout;
    let bearer = format!("Bearer {}", config.token);
    let headers = [(AUTHORIZATION.as_str(), bearer.as_str())];
    let ws = tokio::time::timeout(timeout, handshake(&url, &headers))
        .await
        .map_err(|_| TunnelError::HandshakeTimeout(timeout))??;
    let session_options = SessionOptions::new(SessionRole::Client, config.cluster_id.clone())
        .with_dialer(options.dialer.clone());
    Ok(Session::spawn_with(ws, session_options))
}

pub(crate) type ClientWebSocket =
    async_tungstenite::WebSocketStream<async_tungstenite::tokio::TokioAdapter<BoxedIo>>;

/// TCP, TLS for `wss` (verification off), then the WebSocket handshake with extra `headers`.
pub(crate) async fn handshake(
    url: &str,
    headers: &[(&str, &str)],
) -> Result<ClientWebSocket, TunnelError> {
    let invalid = |reason: &str| TunnelError::InvalidUrl {
        url: url.to_owned(),
        reason: reason.to_owned(),
    };
    let uri: Uri = url.parse().map_err(|_| invalid("not a URL"))?;
    let tls = match uri.scheme_str() {
        Some("wss") => true,
        Some("ws") => false,
        _ => return Err(invalid("scheme must be http or https")),
    };
    let host = uri.host().ok_or_else(|| invalid("missing host"))?;
    // IPv6 literals come bracketed in URLs but not in socket addresses or SNI.
    let bare_host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    let port = uri.port_u16().unwrap_or(if tls { 443 } else { 80 });

    let tcp = tokio::net::TcpStream::connect((bare_host.as_str(), port)).await?;
    let _ = tcp.set_nodelay(true);
    let io: BoxedIo = if tls {
        let server_name = ServerName::try_from(bare_host.clone())
            .map_err(|_| invalid("host is not a valid TLS server name"))?;
        let connector = tokio_rustls::TlsConnector::from(insecure_tls_config()?);
        Box::new(connector.connect(server_name, tcp).await?)
    } else {
        Box::new(tcp)
    };

    let mut request = url.into_client_request()?;
    for (name, value) in headers {
        let name = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| invalid("header name is not valid"))?;
        let value = HeaderValue::from_str(value)
            .map_err(|_| invalid("token is not a valid header value"))?;
        request.headers_mut().insert(name, value);
    }
    let (ws, _response) = async_tungstenite::tokio::client_async(request, io).await?;
    Ok(ws)
}

/// Client TLS config that accepts any server certificate (Clusternet sets `Insecure: true` for
/// the tunnel) but still verifies handshake signatures; HTTP/1.1 only, for the WebSocket upgrade.
fn insecure_tls_config() -> Result<Arc<rustls::ClientConfig>, TunnelError> {
    crate::runtime::serving::insecure_client_config(None)
        .map(Arc::new)
        .map_err(|e| TunnelError::Io(std::io::Error::other(e)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tunnel::server::{SessionRegistry, cluster_id_from_path};
    use async_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response};
    use async_tungstenite::tungstenite::http::StatusCode;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    const WAIT: Duration = Duration::from_secs(10);

    #[test]
    fn socket_urls() {
        let suffix = "/apis/proxies.clusternet.io/v1alpha1/sockets/c1";
        assert_eq!(
            socket_url("https://parent:6443", "c1"),
            format!("wss://parent:6443{suffix}")
        );
        assert_eq!(
            socket_url("https://parent:6443/", "c1"),
            format!("wss://parent:6443{suffix}")
        );
        assert_eq!(
            socket_url("http://10.0.0.1/k8s/clusters/x/", "c1"),
            format!("ws://10.0.0.1/k8s/clusters/x{suffix}")
        );
        assert_eq!(
            socket_url("HTTPS://[::1]:6443/p?x=1", "c1"),
            format!("wss://[::1]:6443/p{suffix}")
        );
    }

    #[test]
    fn tls_config_builds() {
        let config = insecure_tls_config().expect("ring provider supports safe defaults");
        assert_eq!(config.alpn_protocols, vec![b"http/1.1".to_vec()]);
    }

    // Throwaway self-signed test identity (CN=test-hub, P-256); never used outside these tests.
    // The agent must accept it even though it is self-signed and names a different host.
    const TEST_CERT: &str = "-----BEGIN CERTIFICATE-----
MIIBkTCCATigAwIBAgIUBz8XMFMH8wdRcXaX3AgcA+za8YgwCgYIKoZIzj0EAwIw
EzERMA8GA1UEAwwIdGVzdC1odWIwIBcNMjYxMTMwMTIwODAxWhgPMjEyNjExMDYx
MjA4MDFaMBMxETAPBgNVBAMMCHRlc3QtaHViMFkwEwYHKoZIzj0CAQYIKoZIzj0D
AQcDQgAEMKbXAEB6alwzLer/+SHwKip/398GruRUJR6GazpxKp6XOw0k6ely2MiT
pqha7jTmpf3AAxyz7E3ni+kv1oyg6KNoMGYwHQYDVR0OBBYEFFIbqcjGDSnxDx0X
eI/mZATYQYykMB8GA1UdIwQYMBaAFFIbqcjGDSnxDx0XeI/mZATYQYykMA8GA1Ud
EwEB/wQFMAMBAf8wEwYDVR0RBAwwCoIIdGVzdC1odWIwCgYIKoZIzj0EAwIDRwAw
RAIgdvWNv8qfLRMS9IUpiDH63x8QHlOI2B5K+ZcRFk6OD6cCIEye6K56/aP9fjDA
JTWbwr0/RiwVw+BpKVihAfNFAdqr
-----END CERTIFICATE-----
";
    const TEST_KEY: &str = "-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgO568z1AdXNNGzURm
COelBZOT67VU1Eqv9slMKR1WQTehRANCAAQwptcAQHpqXDMt6v/5IfAqKn/f3wau
5FQlHoZrOnEqnpc7DSTp6XLYyJOmqFruNOal/cADHLPsTeeL6S/WjKDo
-----END PRIVATE KEY-----
";

    fn tls_acceptor() -> tokio_rustls::TlsAcceptor {
        use tokio_rustls::rustls::pki_types::PrivateKeyDer;
        use tokio_rustls::rustls::pki_types::pem::PemObject;
        let cert =
            tokio_rustls::rustls::pki_types::CertificateDer::from_pem_slice(TEST_CERT.as_bytes())
                .expect("cert");
        let key = PrivateKeyDer::from_pem_slice(TEST_KEY.as_bytes()).expect("key");
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_no_client_auth()
            .with_single_cert(vec![cert], key)
            .expect("server config");
        tokio_rustls::TlsAcceptor::from(Arc::new(config))
    }

    /// A tiny hub: TCP (optionally TLS), a WebSocket accept that checks the bearer token and
    /// path the way the HTTP layer will, then `SessionRegistry::serve_websocket`.
    async fn hub(registry: Arc<SessionRegistry>, tls: Option<tokio_rustls::TlsAcceptor>) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let scheme = if tls.is_some() { "https" } else { "http" };
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                let registry = registry.clone();
                let tls = tls.clone();
                tokio::spawn(async move {
                    let io: BoxedIo = match tls {
                        Some(acceptor) => match acceptor.accept(socket).await {
                            Ok(stream) => Box::new(stream),
                            Err(_) => return,
                        },
                        None => Box::new(socket),
                    };
                    let (id_tx, id_rx) = std::sync::mpsc::channel();
                    // The callback's signature (and its large error type) is tungstenite's.
                    #[allow(clippy::result_large_err)]
                    let callback = move |req: &Request, resp: Response| {
                        let authorized = req
                            .headers()
                            .get(AUTHORIZATION)
                            .is_some_and(|v| v == "Bearer s3cret");
                        match cluster_id_from_path(req.uri().path()) {
                            Ok(id) if authorized => {
                                let _ = id_tx.send(id.to_owned());
                                Ok(resp)
                            }
                            _ => {
                                let mut denied = ErrorResponse::new(None);
                                *denied.status_mut() = StatusCode::UNAUTHORIZED;
                                Err(denied)
                            }
                        }
                    };
                    let Ok(ws) = async_tungstenite::tokio::accept_hdr_async(io, callback).await
                    else {
                        return;
                    };
                    if let Ok(id) = id_rx.recv() {
                        registry.serve_websocket(&id, ws).await;
                    }
                });
            }
        });
        format!("{scheme}://{addr}")
    }

    fn fast_options() -> ClientOptions {
        ClientOptions {
            retry_period: Duration::from_millis(50),
            jitter: 0.3,
            ..ClientOptions::default()
        }
    }

    #[tokio::test]
    async fn run_connects_and_reconnects() {
        let registry = Arc::new(SessionRegistry::new());
        let url = hub(registry.clone(), None).await;
        let config = ClientConfig {
            url,
            cluster_id: "c1".into(),
            token: "s3cret".into(),
        };
        let cancel = CancellationToken::new();
        let (connected_tx, mut connected) = watch::channel(false);
        let agent = tokio::spawn(run_with_options(
            config,
            fast_options(),
            cancel.clone(),
            connected_tx,
        ));

        tokio::time::timeout(WAIT, connected.wait_for(|up| *up))
            .await
            .expect("in time")
            .expect("watch open");
        let first = tokio::time::timeout(WAIT, async {
            loop {
                if let Some(session) = registry.get("c1") {
                    return session;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .expect("registered");
        assert_eq!(registry.connected(), vec!["c1".to_owned()]);

        // The hub can reach agent-side targets through the tunnel.
        let echo_addr = crate::tunnel::testing::echo_server().await;
        let mut stream = first.dial("tcp", &echo_addr).await.expect("dial");
        stream.write_all(b"abc").await.expect("write");
        let mut buf = [0u8; 3];
        tokio::time::timeout(WAIT, stream.read_exact(&mut buf))
            .await
            .expect("in time")
            .expect("read");
        assert_eq!(&buf, b"abc");

        // The hub drops the session; the agent comes back with a new one.
        first.close();
        let second = tokio::time::timeout(WAIT, async {
            loop {
                if let Some(session) = registry.get("c1")
                    && session.key() != first.key()
                {
                    return session;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .expect("reconnected");
        assert!(!second.is_closed());
        tokio::time::timeout(WAIT, connected.wait_for(|up| *up))
            .await
            .expect("in time")
            .expect("watch open");

        cancel.cancel();
        tokio::time::timeout(WAIT, agent)
            .await
            .expect("run stops when cancelled")
            .expect("task");
        assert!(!*connected.borrow());
        tokio::time::timeout(WAIT, async {
            while registry.is_connected("c1") {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .expect("hub notices the agent left");
    }

    #[tokio::test]
    async fn wss_accepts_self_signed_hub_certificate() {
        let registry = Arc::new(SessionRegistry::new());
        let url = hub(registry.clone(), Some(tls_acceptor())).await;
        assert!(url.starts_with("https://"));
        let config = ClientConfig {
            url,
            cluster_id: "c-tls".into(),
            token: "s3cret".into(),
        };
        let session = connect(&config, &fast_options())
            .await
            .expect("wss connect");
        tokio::time::timeout(WAIT, async {
            while !registry.is_connected("c-tls") {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .expect("registered over TLS");
        session.close();
        tokio::time::timeout(WAIT, async {
            while registry.is_connected("c-tls") {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .expect("deregistered");
    }

    #[tokio::test]
    async fn wrong_token_is_an_error_not_a_session() {
        let registry = Arc::new(SessionRegistry::new());
        let url = hub(registry.clone(), None).await;
        let config = ClientConfig {
            url,
            cluster_id: "c1".into(),
            token: "wrong".into(),
        };
        let err = connect(&config, &fast_options())
            .await
            .expect_err("401 from the hub");
        assert!(matches!(err, TunnelError::WebSocket(_)), "{err}");
        assert!(registry.connected().is_empty());
    }

    #[tokio::test]
    async fn unreachable_parent_is_retried_until_cancelled() {
        let port = {
            let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
            listener.local_addr().expect("addr").port()
        };
        let config = ClientConfig {
            url: format!("https://127.0.0.1:{port}"),
            cluster_id: "c1".into(),
            token: "t".into(),
        };
        let cancel = CancellationToken::new();
        let (connected_tx, connected) = watch::channel(false);
        let agent = tokio::spawn(run_with_options(
            config,
            fast_options(),
            cancel.clone(),
            connected_tx,
        ));
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!agent.is_finished(), "keeps retrying");
        assert!(!*connected.borrow());
        cancel.cancel();
        tokio::time::timeout(WAIT, agent)
            .await
            .expect("stops")
            .expect("task");
    }
}
