//! Client-side rate limiting of requests to the Kubernetes API server: `--kube-api-qps` sustained,
//! `--kube-api-burst` at once (client-go's token bucket), as a tower layer on the kube client.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tower::{Layer, Service};

/// Tokens refill at `qps` per second up to `burst`; each request takes one.
pub struct TokenBucket {
    qps: f64,
    burst: f64,
    state: Mutex<(f64, Instant)>,
}

impl TokenBucket {
    pub fn new(qps: f32, burst: u32) -> Self {
        let burst = f64::from(burst.max(1));
        TokenBucket {
            qps: f64::from(qps).max(0.001),
            burst,
            state: Mutex::new((burst, Instant::now())),
        }
    }

    /// Takes a token, or says how long until one is there.
    pub fn try_take(&self) -> Result<(), Duration> {
        let mut s = match self.state.lock() {
            Ok(s) => s,
            Err(p) => p.into_inner(),
        };
        let now = Instant::now();
        let refilled = (s.0 + now.duration_since(s.1).as_secs_f64() * self.qps).min(self.burst);
        *s = (refilled, now);
        if s.0 >= 1.0 {
            s.0 -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - s.0) / self.qps))
        }
    }
}

#[derive(Clone)]
pub struct RateLimitLayer {
    bucket: Arc<TokenBucket>,
}

impl RateLimitLayer {
    pub fn new(qps: f32, burst: u32) -> Self {
        RateLimitLayer {
            bucket: Arc::new(TokenBucket::new(qps, burst)),
        }
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimit<S>;
    fn layer(&self, inner: S) -> Self::Service {
        RateLimit {
            inner,
            bucket: self.bucket.clone(),
            wait: None,
            reserved: false,
            waiting_since: None,
        }
    }
}

/// Waits in `poll_ready` until the bucket grants a token, then defers to the inner service.
pub struct RateLimit<S> {
    inner: S,
    bucket: Arc<TokenBucket>,
    wait: Option<Pin<Box<tokio::time::Sleep>>>,
    reserved: bool,
    waiting_since: Option<Instant>,
}

impl<S, Req> Service<Req> for RateLimit<S>
where
    S: Service<Req>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        while !self.reserved {
            if let Some(w) = self.wait.as_mut() {
                if w.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                self.wait = None;
            }
            let since = *self.waiting_since.get_or_insert_with(Instant::now);
            match self.bucket.try_take() {
                Ok(()) => {
                    self.reserved = true;
                    self.waiting_since = None;
                    // client-go's name for the time a request waited for the rate limiter
                    metrics::histogram!("rest_client_rate_limiter_duration_seconds")
                        .record(since.elapsed().as_secs_f64());
                }
                Err(d) => self.wait = Some(Box::pin(tokio::time::sleep(d))),
            }
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Req) -> Self::Future {
        self.reserved = false;
        self.inner.call(req)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn burst_then_qps() {
        let b = TokenBucket::new(10.0, 3);
        assert!(b.try_take().is_ok());
        assert!(b.try_take().is_ok());
        assert!(b.try_take().is_ok());
        let wait = b.try_take().expect_err("the burst is spent");
        assert!(
            wait <= Duration::from_millis(100) && wait > Duration::ZERO,
            "{wait:?}"
        );
    }
}
