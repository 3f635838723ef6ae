//! One request to a plain-HTTP endpoint the operator names (a capacity predictor, a Prometheus
//! a rollout's metric gate asks): no TLS (how such endpoints usually serve inside a cluster), a
//! deadline for the answer and for its body, and a bound on the body's size.

use std::time::Duration;

use bytes::Bytes;
use http::StatusCode;
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

/// The largest answer read (a predictor's or Prometheus' answer is a few KiB).
pub const MAX_BODY: usize = 4 << 20;

/// `address` without its trailing `/`, when it is an `http://` address; else why not (`what`
/// names it: "predictor address", ...).
pub fn http_base<'a>(address: &'a str, what: &str) -> Result<&'a str, String> {
    let base = address.trim_end_matches('/');
    if base.starts_with("http://") {
        Ok(base)
    } else {
        Err(format!(
            "{what} {address:?}: only http:// addresses are supported in this build"
        ))
    }
}

/// Sends `req` and reads the answer: its status and body, or why not, each message starting with
/// `who` ("predictor http://...", "Prometheus at http://...").
pub async fn send(
    who: &str,
    req: http::Request<Full<Bytes>>,
    timeout: Duration,
) -> Result<(StatusCode, Bytes), String> {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let resp = tokio::time::timeout(timeout, client.request(req))
        .await
        .map_err(|_| format!("{who} did not answer within {timeout:?}"))?
        .map_err(|e| format!("{who}: {e}"))?;
    let status = resp.status();
    let body = tokio::time::timeout(timeout, Limited::new(resp.into_body(), MAX_BODY).collect())
        .await
        .map_err(|_| format!("{who}: the answer did not arrive within {timeout:?}"))?
        .map_err(|e| format!("{who}: reading the answer: {e}"))?
        .to_bytes();
    Ok((status, body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_http_addresses() {
        assert_eq!(
            http_base("http://10.0.0.1:9090/", "address"),
            Ok("http://10.0.0.1:9090")
        );
        let e = http_base("https://p:9090", "Prometheus address").unwrap_err();
        assert!(e.contains("only http://"), "{e}");
    }

    #[tokio::test]
    async fn an_address_that_does_not_answer_says_so() {
        let req = http::Request::get("http://127.0.0.1:9/x")
            .body(Full::new(Bytes::new()))
            .expect("a request");
        let e = send("predictor http://127.0.0.1:9", req, Duration::from_secs(5))
            .await
            .unwrap_err();
        assert!(e.starts_with("predictor http://127.0.0.1:9"), "{e}");
    }
}
