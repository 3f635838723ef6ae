//! HTTPS serving shared by the hub's aggregated API server and test backends: a tokio-rustls
//! accept loop handing each connection to hyper with a warp filter as the service (warp 0.4 serves
//! no TLS itself), plus self-signed serving certificates for development.

use std::net::SocketAddr;
use std::sync::Arc;

use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_util::sync::CancellationToken;
use tracing::debug;
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
    let certs: Vec<CertificateDer<'static>> = rustls_pemfile::certs(&mut pair.cert_pem.as_bytes())
        .filter_map(Result::ok)
        .collect();
    if certs.is_empty() {
        return Err(ServingError::Pem {
            path: "certificate".into(),
            what: "certificate",
        });
    }
    let key: PrivateKeyDer<'static> = rustls_pemfile::private_key(&mut pair.key_pem.as_bytes())
        .ok()
        .flatten()
        .ok_or(ServingError::Pem {
            path: "key".into(),
            what: "private key",
        })?;
    let builder = ServerConfig::builder();
    let mut cfg = match client_ca {
        None => builder.with_no_client_auth().with_single_cert(certs, key)?,
        Some(roots) => {
            let verifier =
                tokio_rustls::rustls::server::WebPkiClientVerifier::builder(Arc::new(roots))
                    .allow_unauthenticated()
                    .build()
                    .map_err(|e| ServingError::Verifier(e.to_string()))?;
            builder
                .with_client_cert_verifier(verifier)
                .with_single_cert(certs, key)?
        }
    };
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(cfg)
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
