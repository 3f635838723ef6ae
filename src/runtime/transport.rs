//! The HTTP transport of the process's client to its own API server: kube's stack (TLS and
//! credentials from the kubeconfig, base URI, auth refresh, extra headers, connect/write timeouts,
//! retry of 429/503/504) over a hyper client that speaks HTTP/2 when the API server offers it
//! (ALPN `h2`, then `http/1.1`), as client-go does.
//!
//! Why not kube's own builder: kube-client 5 enables HTTP/1.1 only, so every request in flight at
//! once takes a connection (and a TLS handshake) of its own; under a burst of concurrent writes the
//! API server then serves dozens of connections where client-go's components hold one, and every
//! watch holds one more. Over HTTP/2 the watches and writes share one connection, multiplexed,
//! and a keep-alive ping notices a dead connection (and with it every watch on it) within
//! [`KEEPALIVE_INTERVAL`] + [`KEEPALIVE_TIMEOUT`], where HTTP/1.1 watches wait for their own idle
//! timeout.

use std::time::Duration;

use http::{Request, Response};
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use kube::client::{Body, ConfigExt};
use tower::util::BoxService;
use tower::{BoxError, ServiceBuilder, ServiceExt};

/// How often an HTTP/2 connection is pinged (client-go's `ReadIdleTimeout`, 30 s).
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(30);
/// How long a ping may go unanswered before the connection is closed (client-go's `PingTimeout`).
pub const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(15);

/// The transport as one service, ready for the process's own layers (rate limit, metrics).
pub type Transport = BoxService<Request<Body>, Response<Incoming>, BoxError>;

/// A client builder over the HTTP/2-capable transport for `config`, or `None` when kube's own
/// HTTP/1.1 stack is the one to use: a proxy in the kubeconfig (`proxy-url`, which kube knows how
/// to tunnel through) or `--kube-api-http2=false`.
pub fn client_builder(
    config: &kube::Config,
    http2: bool,
) -> Result<Option<kube::client::ClientBuilder<Transport>>, kube::Error> {
    if config.proxy_url.is_some() || !http2 {
        return Ok(None);
    }
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    let tls = config.rustls_client_config()?;
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http();
    let https = match config.tls_server_name.as_ref() {
        Some(name) => {
            let name = tokio_rustls::rustls::pki_types::ServerName::try_from(name.clone())
                .map_err(|e| {
                    kube::Error::RustlsTls(kube::client::RustlsTlsError::InvalidServerName(e))
                })?;
            https.with_server_name_resolver(hyper_rustls::FixedServerNameResolver::new(name))
        }
        None => https,
    };
    let mut connector =
        hyper_timeout::TimeoutConnector::new(https.enable_all_versions().wrap_connector(http));
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_read_timeout(config.read_timeout);
    connector.set_write_timeout(config.write_timeout);
    connector.set_reset_reader_on_write(config.reset_reader_on_write);
    let client = hyper_util::client::legacy::Builder::new(TokioExecutor::new())
        .timer(TokioTimer::new())
        .http2_keep_alive_interval(KEEPALIVE_INTERVAL)
        .http2_keep_alive_timeout(KEEPALIVE_TIMEOUT)
        .http2_keep_alive_while_idle(true)
        .build::<_, Body>(connector);
    let retry = config
        .default_retry
        .then(|| tower::retry::RetryLayer::new(kube::client::retry::RetryPolicy::server_retry()));
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(retry)
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .service(client.map_err(BoxError::from));
    Ok(Some(kube::client::ClientBuilder::new(
        BoxService::new(service),
        config.default_namespace.clone(),
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> kube::Config {
        kube::Config::new("https://127.0.0.1:6443".parse().expect("a URL"))
    }

    #[test]
    fn http2_unless_turned_off_or_proxied() {
        assert!(matches!(client_builder(&config(), true), Ok(Some(_))));
        assert!(matches!(client_builder(&config(), false), Ok(None)));
        let mut proxied = config();
        proxied.proxy_url = Some("http://127.0.0.1:3128".parse().expect("a URL"));
        assert!(matches!(client_builder(&proxied, true), Ok(None)));
    }

    #[test]
    fn a_bad_tls_server_name_is_an_error_not_a_panic() {
        let mut named = config();
        named.tls_server_name = Some("not a name".into());
        assert!(client_builder(&named, true).is_err());
    }
}
