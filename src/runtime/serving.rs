//! HTTPS serving shared by the hub's aggregated API server and test backends: a tokio-rustls
//! accept loop handing each connection to hyper with a warp filter as the service (warp 0.4 serves
//! no TLS itself), self-signed serving certificates for development, and serving certificates
//! read from files that are reloaded when the files change (issue #21: a renewed certificate is
//! served without a restart, a broken one never replaces the one that works).

use std::net::SocketAddr;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::server::{ClientHello, ResolvesServerCert};
use tokio_rustls::rustls::sign::CertifiedKey;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::certs;
use warp::Filter;
use warp::reply::Reply;

#[derive(Debug, thiserror::Error)]
pub enum ServingError {
    #[error("generating a self-signed certificate: {0}")]
    SelfSigned(#[from] rcgen::Error),
    #[error("TLS configuration: {0}")]
    Tls(#[from] tokio_rustls::rustls::Error),
    #[error("reading {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("client certificate verifier: {0}")]
    Verifier(String),
    #[error("{path}: no {what} found in PEM")]
    Pem { path: String, what: &'static str },
    #[error("the private key does not belong to the certificate, or cannot sign: {0}")]
    Key(tokio_rustls::rustls::Error),
}

/// A certificate chain and key, PEM-encoded.
#[derive(Clone)]
pub struct PemPair {
    pub cert_pem: String,
    pub key_pem: String,
}

/// A self-signed serving certificate for the given DNS names and IP addresses.
pub fn self_signed(names: &[&str]) -> Result<PemPair, ServingError> {
    let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
    let certified = rcgen::generate_simple_self_signed(names)?;
    Ok(PemPair {
        cert_pem: certified.cert.pem(),
        key_pem: certified.signing_key.serialize_pem(),
    })
}

pub fn read_pem_files(cert: &str, key: &str) -> Result<PemPair, ServingError> {
    let read = |p: &str| {
        std::fs::read_to_string(p).map_err(|source| ServingError::Read {
            path: p.to_string(),
            source,
        })
    };
    Ok(PemPair {
        cert_pem: read(cert)?,
        key_pem: read(key)?,
    })
}

/// A rustls server config from PEM (no client-certificate verification).
pub fn server_config(pair: &PemPair) -> Result<ServerConfig, ServingError> {
    server_config_with_client_ca(pair, None)
}

/// A rustls server config from PEM that verifies client certificates against `client_ca` when a
/// client presents one, and still accepts clients that present none (they must authenticate
/// otherwise), like Go's `VerifyClientCertIfGiven`.
pub fn server_config_with_client_ca(
    pair: &PemPair,
    client_ca: Option<tokio_rustls::rustls::RootCertStore>,
) -> Result<ServerConfig, ServingError> {
    let (ck, _) = certified_key(pair)?;
    server_config_with_resolver(ReloadingCert::new(ck), client_ca)
}

/// The chain and signing key of a PEM pair, checked the way a reload needs: at least one
/// certificate, a key rustls can sign with, the key matching the first certificate; also that
/// certificate's facts (`None`, with a warning, when they cannot be read: what TLS accepts is
/// served, only its expiry goes unreported).
pub fn certified_key(
    pair: &PemPair,
) -> Result<(CertifiedKey, Option<certs::CertInfo>), ServingError> {
    let certs_der: Vec<CertificateDer<'static>> =
        rustls_pemfile::certs(&mut pair.cert_pem.as_bytes())
            .filter_map(Result::ok)
            .collect();
    let Some(leaf) = certs_der.first() else {
        return Err(ServingError::Pem {
            path: "certificate".into(),
            what: "certificate",
        });
    };
    let info = certs::parse_der(leaf.as_ref(), "serving certificate")
        .inspect_err(|e| warn!(error = %e, "cannot read the serving certificate's expiry"))
        .ok();
    let key: PrivateKeyDer<'static> = rustls_pemfile::private_key(&mut pair.key_pem.as_bytes())
        .ok()
        .flatten()
        .ok_or(ServingError::Pem {
            path: "key".into(),
            what: "private key",
        })?;
    let provider = tokio_rustls::rustls::crypto::CryptoProvider::get_default()
        .cloned()
        .unwrap_or_else(|| Arc::new(tokio_rustls::rustls::crypto::ring::default_provider()));
    let signing = provider
        .key_provider
        .load_private_key(key)
        .map_err(ServingError::Key)?;
    let ck = CertifiedKey::new(certs_der, signing);
    // a key rustls cannot compare (no public key) is not refused: rustls' own from_der accepts it
    match ck.keys_match() {
        Ok(())
        | Err(tokio_rustls::rustls::Error::InconsistentKeys(
            tokio_rustls::rustls::InconsistentKeys::Unknown,
        )) => Ok((ck, info)),
        Err(e) => Err(ServingError::Key(e)),
    }
}

/// The serving certificate every handshake gets: the last good pair, swapped in place by
/// [`watch_pem_files`]. A `ServerConfig` built on it (and every clone of that config, such as
/// the peer hubs' listener) serves the new pair from the next handshake on; connections already
/// open keep theirs.
#[derive(Debug)]
pub struct ReloadingCert {
    current: RwLock<Arc<CertifiedKey>>,
}

impl ReloadingCert {
    pub fn new(ck: CertifiedKey) -> Arc<Self> {
        Arc::new(ReloadingCert {
            current: RwLock::new(Arc::new(ck)),
        })
    }

    pub fn set(&self, ck: CertifiedKey) {
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(ck);
    }

    pub fn current(&self) -> Arc<CertifiedKey> {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

impl ResolvesServerCert for ReloadingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

/// [`server_config_with_client_ca`] with the certificate from `resolver`.
pub fn server_config_with_resolver(
    resolver: Arc<dyn ResolvesServerCert>,
    client_ca: Option<tokio_rustls::rustls::RootCertStore>,
) -> Result<ServerConfig, ServingError> {
    let builder = ServerConfig::builder();
    let mut cfg = match client_ca {
        None => builder.with_no_client_auth().with_cert_resolver(resolver),
        Some(roots) => {
            let verifier =
                tokio_rustls::rustls::server::WebPkiClientVerifier::builder(Arc::new(roots))
                    .allow_unauthenticated()
                    .build()
                    .map_err(|e| ServingError::Verifier(e.to_string()))?;
            builder
                .with_client_cert_verifier(verifier)
                .with_cert_resolver(resolver)
        }
    };
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(cfg)
}

/// How often [`watch_pem_files`] looks at the files: two `stat`s, cheap enough to notice a
/// renewal within seconds.
pub const RELOAD_CHECK: Duration = Duration::from_secs(2);

/// A version of the pair on disk, known without reading it: modification time, length and
/// inode of both files (`stat` follows the symlinks a mounted Secret swaps on update, which
/// also changes the inode). Take it before reading the files, so a change in between is not
/// missed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PemVersion([(std::time::SystemTime, u64, u64); 2]);

impl PemVersion {
    pub fn of(cert: &str, key: &str) -> PemVersion {
        // a missing file has a version of its own, so its absence is warned about once
        let one = |p: &str| {
            std::fs::metadata(p)
                .ok()
                .and_then(|m| Some((m.modified().ok()?, m.len(), inode(&m))))
                .unwrap_or((std::time::UNIX_EPOCH, u64::MAX, 0))
        };
        PemVersion([one(cert), one(key)])
    }
}

#[cfg(unix)]
fn inode(m: &std::fs::Metadata) -> u64 {
    std::os::unix::fs::MetadataExt::ino(m)
}

#[cfg(not(unix))]
fn inode(_: &std::fs::Metadata) -> u64 {
    0
}

/// Reloads `resolver` from the PEM files whenever they change, until `shutdown`; `loaded` is
/// the version being served now. A pair is tried once it has stopped changing for one check (a
/// renewal writes the two files one after the other), and swapped in only when both parse and
/// the key matches the certificate; a bad, half-written or missing pair is refused with a
/// warning (once per version of the files) and the old certificate keeps serving, so a botched
/// renewal never stops the hub. `name` labels the expiry gauge.
pub fn watch_pem_files(
    cert: String,
    key: String,
    name: &'static str,
    loaded: PemVersion,
    resolver: Arc<ReloadingCert>,
    shutdown: CancellationToken,
) {
    let mut watcher = PemWatcher {
        cert,
        key,
        name,
        loaded,
        last_seen: loaded,
        refused: None,
    };
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(RELOAD_CHECK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tick.tick() => {}
            }
            watcher.check(&resolver);
        }
    });
}

/// The outcome of looking at the files once.
#[derive(Debug, PartialEq, Eq)]
enum Check {
    Unchanged,
    /// Changed since the last look: wait for the writer to finish.
    Settling,
    Loaded,
    /// The settled pair is unusable; the old one keeps serving.
    Refused,
}

struct PemWatcher {
    cert: String,
    key: String,
    name: &'static str,
    /// The version being served.
    loaded: PemVersion,
    /// The version seen at the last check.
    last_seen: PemVersion,
    /// The last version refused (warned about once).
    refused: Option<PemVersion>,
}

impl PemWatcher {
    fn check(&mut self, resolver: &ReloadingCert) -> Check {
        let now = PemVersion::of(&self.cert, &self.key);
        let settled = now == self.last_seen;
        self.last_seen = now;
        if now == self.loaded || Some(now) == self.refused {
            return Check::Unchanged;
        }
        if !settled {
            return Check::Settling;
        }
        match read_pem_files(&self.cert, &self.key).and_then(|p| certified_key(&p)) {
            Ok((ck, info)) => {
                resolver.set(ck);
                self.loaded = now;
                self.refused = None;
                // logs the new certificate (serial, subject, notAfter) and its expiry
                match info {
                    Some(info) => certs::record(self.name, &info),
                    None => info!(cert = %self.cert, "loaded a new serving certificate"),
                }
                Check::Loaded
            }
            Err(e) => {
                warn!(cert = %self.cert, key = %self.key, error = %e, "the serving certificate files changed but cannot be used; still serving the previous certificate");
                self.refused = Some(now);
                Check::Refused
            }
        }
    }
}

/// Accepts TLS connections on `listener` until `shutdown` and hands each completed handshake to
/// `on_conn` on its own task; returns the bound address.
pub fn accept_tls<F, Fut>(
    listener: TcpListener,
    tls: ServerConfig,
    shutdown: CancellationToken,
    on_conn: F,
) -> std::io::Result<SocketAddr>
where
    F: Fn(tokio_rustls::server::TlsStream<tokio::net::TcpStream>, SocketAddr) -> Fut
        + Clone
        + Send
        + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let local = listener.local_addr()?;
    let acceptor = TlsAcceptor::from(Arc::new(tls));
    tokio::spawn(async move {
        loop {
            let (tcp, peer) = tokio::select! {
                _ = shutdown.cancelled() => break,
                accepted = listener.accept() => match accepted {
                    Ok(a) => a,
                    Err(e) => { debug!(error = %e, "accept failed"); continue; }
                },
            };
            // tunnels and exec sessions ride on these connections: small frames must not wait
            // for Nagle and the peer's delayed ACK
            let _ = tcp.set_nodelay(true);
            let acceptor = acceptor.clone();
            let on_conn = on_conn.clone();
            tokio::spawn(async move {
                match acceptor.accept(tcp).await {
                    Ok(tls) => on_conn(tls, peer).await,
                    Err(e) => debug!(%peer, error = %e, "TLS handshake failed"),
                }
            });
        }
    });
    Ok(local)
}

/// Serves `filter` over TLS on `listener` until `shutdown`; returns the bound address.
pub fn serve_tls<F>(
    listener: TcpListener,
    tls: ServerConfig,
    filter: F,
    shutdown: CancellationToken,
) -> std::io::Result<SocketAddr>
where
    F: Filter + Clone + Send + Sync + 'static,
    F::Extract: Reply,
{
    accept_tls(listener, tls, shutdown, move |tls, peer| {
        let svc = warp::service(filter.clone());
        async move {
            if let Err(e) = Builder::new(TokioExecutor::new())
                .serve_connection_with_upgrades(TokioIo::new(tls), TowerToHyperService::new(svc))
                .await
            {
                debug!(%peer, error = %e, "connection ended with an error");
            }
        }
    })
}

/// Accepts any server certificate (signatures are still checked): the tunnel and the socket
/// proxy reach child API servers by whatever address works, so names and CAs cannot be verified,
/// exactly as upstream disables verification there.
#[derive(Debug)]
struct AcceptAnyServerCert(Arc<tokio_rustls::rustls::crypto::CryptoProvider>);

impl tokio_rustls::rustls::client::danger::ServerCertVerifier for AcceptAnyServerCert {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &tokio_rustls::rustls::pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: tokio_rustls::rustls::pki_types::UnixTime,
    ) -> Result<tokio_rustls::rustls::client::danger::ServerCertVerified, tokio_rustls::rustls::Error>
    {
        Ok(tokio_rustls::rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &tokio_rustls::rustls::DigitallySignedStruct,
    ) -> Result<
        tokio_rustls::rustls::client::danger::HandshakeSignatureValid,
        tokio_rustls::rustls::Error,
    > {
        tokio_rustls::rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &tokio_rustls::rustls::DigitallySignedStruct,
    ) -> Result<
        tokio_rustls::rustls::client::danger::HandshakeSignatureValid,
        tokio_rustls::rustls::Error,
    > {
        tokio_rustls::rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<tokio_rustls::rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// A TLS client config that skips server verification, optionally presenting a client
/// certificate (PEM), for HTTP/1.1 only (upgrades need it).
pub fn insecure_client_config(
    client_cert: Option<(&[u8], &[u8])>,
) -> Result<tokio_rustls::rustls::ClientConfig, ServingError> {
    let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    let builder = tokio_rustls::rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AcceptAnyServerCert(provider)));
    let mut cfg = match client_cert {
        None => builder.with_no_client_auth(),
        Some((cert_pem, key_pem)) => {
            let certs: Vec<CertificateDer<'static>> = rustls_pemfile::certs(&mut &cert_pem[..])
                .filter_map(Result::ok)
                .collect();
            if certs.is_empty() {
                return Err(ServingError::Pem {
                    path: "client certificate".into(),
                    what: "certificate",
                });
            }
            let key = rustls_pemfile::private_key(&mut &key_pem[..])
                .ok()
                .flatten()
                .ok_or(ServingError::Pem {
                    path: "client key".into(),
                    what: "private key",
                })?;
            builder.with_client_auth_cert(certs, key)?
        }
    };
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(cfg)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A self-signed pair for `localhost` with the given serial.
    fn pair(serial: u8) -> PemPair {
        let mut params = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap();
        params.serial_number = Some(rcgen::SerialNumber::from_slice(&[serial]));
        let key = rcgen::KeyPair::generate().unwrap();
        PemPair {
            cert_pem: params.self_signed(&key).unwrap().pem(),
            key_pem: key.serialize_pem(),
        }
    }

    fn serial_of(ck: &CertifiedKey) -> String {
        certs::parse_der(ck.cert[0].as_ref(), "t").unwrap().serial
    }

    #[test]
    fn a_key_that_is_not_the_certificates_is_refused() {
        let (a, b) = (pair(1), pair(2));
        assert!(certified_key(&a).is_ok());
        let mixed = PemPair {
            cert_pem: a.cert_pem.clone(),
            key_pem: b.key_pem.clone(),
        };
        assert!(matches!(certified_key(&mixed), Err(ServingError::Key(_))));
        let garbage = PemPair {
            cert_pem: "garbage".into(),
            key_pem: a.key_pem,
        };
        assert!(matches!(
            certified_key(&garbage),
            Err(ServingError::Pem { .. })
        ));
    }

    /// Writes `text` to `path` and sets its mtime to `at` seconds after the epoch (the kernel's
    /// coarse clock could give two quick writes the same one).
    fn write_at(path: &std::path::Path, text: &str, at: u64) {
        std::fs::write(path, text).unwrap();
        let f = std::fs::File::options().write(true).open(path).unwrap();
        f.set_modified(std::time::UNIX_EPOCH + Duration::from_secs(at))
            .unwrap();
    }

    #[test]
    fn the_watcher_swaps_in_a_good_pair_and_keeps_serving_for_a_bad_one() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
        let (a, b) = (pair(0xA), pair(0xB));
        write_at(&cert, &a.cert_pem, 100);
        write_at(&key, &a.key_pem, 100);
        let (c, k) = (
            cert.to_string_lossy().into_owned(),
            key.to_string_lossy().into_owned(),
        );
        let version = PemVersion::of(&c, &k);
        let resolver = ReloadingCert::new(certified_key(&a).unwrap().0);
        let mut w = PemWatcher {
            cert: c,
            key: k,
            name: "test-serving",
            loaded: version,
            last_seen: version,
            refused: None,
        };
        assert_eq!(w.check(&resolver), Check::Unchanged);

        // a renewal half done: the new certificate, still the old key
        write_at(&cert, &b.cert_pem, 200);
        assert_eq!(w.check(&resolver), Check::Settling);
        assert_eq!(w.check(&resolver), Check::Refused);
        assert_eq!(
            serial_of(&resolver.current()),
            "0A",
            "the old pair still serves"
        );
        assert_eq!(
            w.check(&resolver),
            Check::Unchanged,
            "refused once, not again"
        );

        // ... and finished
        write_at(&key, &b.key_pem, 201);
        assert_eq!(w.check(&resolver), Check::Settling);
        assert_eq!(w.check(&resolver), Check::Loaded);
        assert_eq!(serial_of(&resolver.current()), "0B");

        // garbage, then no files at all: B keeps serving
        write_at(&cert, "garbage", 300);
        write_at(&key, "garbage", 300);
        assert_eq!(w.check(&resolver), Check::Settling);
        assert_eq!(w.check(&resolver), Check::Refused);
        std::fs::remove_file(&cert).unwrap();
        assert_eq!(w.check(&resolver), Check::Settling);
        assert_eq!(w.check(&resolver), Check::Refused);
        assert_eq!(w.check(&resolver), Check::Unchanged);
        assert_eq!(serial_of(&resolver.current()), "0B");
    }

    /// The serial of the certificate a TLS handshake with `addr` presents.
    async fn served_serial(addr: SocketAddr) -> String {
        let tls = insecure_client_config(None).unwrap();
        let connector = tokio_rustls::TlsConnector::from(Arc::new(tls));
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let name = tokio_rustls::rustls::pki_types::ServerName::try_from("localhost").unwrap();
        let stream = connector.connect(name, tcp).await.unwrap();
        let served = stream.get_ref().1.peer_certificates().unwrap()[0].clone();
        certs::parse_der(served.as_ref(), "served").unwrap().serial
    }

    /// The peer hubs' listener is given a clone of the hub's config: it shares the resolver, so
    /// a reload reaches both.
    #[tokio::test]
    async fn every_clone_of_the_config_serves_the_reloaded_certificate() {
        let _ = tokio_rustls::rustls::crypto::ring::default_provider().install_default();
        let resolver = ReloadingCert::new(certified_key(&pair(1)).unwrap().0);
        let tls = server_config_with_resolver(resolver.clone(), None).unwrap();
        let shutdown = CancellationToken::new();
        let mut addrs = Vec::new();
        for cfg in [tls.clone(), tls] {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            addrs.push(accept_tls(listener, cfg, shutdown.clone(), |_, _| async {}).unwrap());
        }
        for a in &addrs {
            assert_eq!(served_serial(*a).await, "01");
        }
        resolver.set(certified_key(&pair(2)).unwrap().0);
        for a in &addrs {
            assert_eq!(served_serial(*a).await, "02");
        }
        shutdown.cancel();
    }
}
