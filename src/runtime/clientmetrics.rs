//! Metrics of the requests to the Kubernetes API server under client-go's names, which existing
//! dashboards and alerts use: `rest_client_requests_total{code,method,host}` and
//! `rest_client_request_duration_seconds{verb,host}`, as a tower layer on the kube client.

use std::task::{Context, Poll};
use std::time::Instant;

use futures::future::BoxFuture;
use tower::{Layer, Service};

#[derive(Clone)]
pub struct RequestMetricsLayer {
    host: String,
}

impl RequestMetricsLayer {
    /// `host` is the API server's `host:port`, the label the series carry.
    pub fn new(host: impl Into<String>) -> Self {
        RequestMetricsLayer { host: host.into() }
    }
}

impl<S> Layer<S> for RequestMetricsLayer {
    type Service = RequestMetrics<S>;
    fn layer(&self, inner: S) -> Self::Service {
        RequestMetrics {
            inner,
            host: self.host.clone(),
        }
    }
}

#[derive(Clone)]
pub struct RequestMetrics<S> {
    inner: S,
    host: String,
}

impl<S, B, RB> Service<http::Request<B>> for RequestMetrics<S>
where
    S: Service<http::Request<B>, Response = http::Response<RB>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let method = req.method().as_str().to_string();
        let host = self.host.clone();
        let started = Instant::now();
        let fut = self.inner.call(req);
        Box::pin(async move {
            let r = fut.await;
            // a watch's response arrives at once and streams on: its duration is the wait for
            // the headers, as client-go measures it
            let code = match &r {
                Ok(resp) => resp.status().as_u16().to_string(),
                Err(_) => "<error>".to_string(),
            };
            metrics::counter!("rest_client_requests_total", "code" => code, "method" => method.clone(), "host" => host.clone()).increment(1);
            metrics::histogram!("rest_client_request_duration_seconds", "verb" => method, "host" => host)
                .record(started.elapsed().as_secs_f64());
            r
        })
    }
}
