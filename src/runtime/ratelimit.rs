//! The one token bucket of the process (client-go's, golang.org/x/time/rate's): `qps` tokens a
//! second up to `burst`. It limits the requests to the Kubernetes API server (`--kube-api-qps`,
//! `--kube-api-burst`, as a tower layer on the kube client), the retries of a controller over all
//! its objects, and the clusters the scheduler fails over per second.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tower::{Layer, Service};

/// The bucket's arithmetic over a clock the caller gives (seconds since any fixed point), so a
/// pure decision (the scheduler's) can run it on the times it is handed.
#[derive(Debug, Clone, PartialEq)]
pub struct Tokens {
    qps: f64,
    burst: f64,
    /// Below zero when slots were reserved ahead ([`Tokens::reserve`]).
    tokens: f64,
    at: Option<f64>,
}

impl Tokens {
    pub fn new(qps: f64, burst: f64) -> Self {
        let burst = burst.max(1.0);
        Tokens {
            qps: qps.max(1e-6),
            burst,
            tokens: burst,
            at: None,
        }
    }

    fn refill(&mut self, now: f64) {
        let at = *self.at.get_or_insert(now);
        if now > at {
            self.tokens = (self.tokens + (now - at) * self.qps).min(self.burst);
            self.at = Some(now);
        }
    }

    /// Takes a token at `now` if there is one, else says how long until there is (and takes none).
    pub fn try_take(&mut self, now: f64) -> Result<(), Duration> {
        self.refill(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - self.tokens) / self.qps))
        }
    }

    /// Takes a token at `now` only if more than `reserve` would be left, else says how long until
    /// then (and takes none): background work that yields to the rest while the bucket is drawn
    /// down, so a burst of foreground writes never waits behind it.
    pub fn try_take_above(&mut self, now: f64, reserve: f64) -> Result<(), Duration> {
        self.refill(now);
        let need = 1.0 + reserve.min(self.burst - 1.0).max(0.0);
        if self.tokens >= need {
            self.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((need - self.tokens) / self.qps))
        }
    }

    /// Reserves the next slot at `now` and says how long until it is due (zero while the burst
    /// lasts): a slot taken while the bucket is empty is simply further in the future.
    pub fn reserve(&mut self, now: f64) -> Duration {
        self.refill(now);
        self.tokens -= 1.0;
        if self.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-self.tokens / self.qps)
        }
    }
}

/// [`Tokens`] shared between tasks, on the process's monotonic clock.
pub struct TokenBucket {
    epoch: Instant,
    tokens: Mutex<Tokens>,
}

impl TokenBucket {
    pub fn new(qps: f64, burst: f64) -> Self {
        TokenBucket {
            epoch: Instant::now(),
            tokens: Mutex::new(Tokens::new(qps, burst)),
        }
    }

    /// The bucket's size.
    pub fn burst(&self) -> f64 {
        self.with(Instant::now(), |t, _| t.burst)
    }

    fn with<T>(&self, now: Instant, f: impl FnOnce(&mut Tokens, f64) -> T) -> T {
        let mut t = self.tokens.lock().unwrap_or_else(|p| p.into_inner());
        f(
            &mut t,
            now.saturating_duration_since(self.epoch).as_secs_f64(),
        )
    }

    /// Takes a token, or says how long until one is there.
    pub fn try_take(&self) -> Result<(), Duration> {
        self.try_take_at(Instant::now())
    }

    pub fn try_take_at(&self, now: Instant) -> Result<(), Duration> {
        self.with(now, |t, now| t.try_take(now))
    }

    /// [`Tokens::try_take_above`] now.
    pub fn try_take_above(&self, reserve: f64) -> Result<(), Duration> {
        self.with(Instant::now(), |t, now| t.try_take_above(now, reserve))
    }

    /// Reserves the next slot; how long until it is due.
    pub fn reserve_at(&self, now: Instant) -> Duration {
        self.with(now, |t, now| t.reserve(now))
    }
}

#[derive(Clone)]
pub struct RateLimitLayer {
    bucket: Arc<TokenBucket>,
    /// Tokens this layer's requests leave to others (see [`RateLimitLayer::background`]).
    reserve: f64,
}

impl RateLimitLayer {
    pub fn new(qps: f32, burst: u32) -> Self {
        RateLimitLayer {
            bucket: Arc::new(TokenBucket::new(f64::from(qps), f64::from(burst))),
            reserve: 0.0,
        }
    }

    /// The same bucket for background requests (recording history, say): they take a token only
    /// while more than half the burst is left, so they use what the work leaves over and never
    /// hold it up. Under a load that keeps the bucket drawn down they wait until it eases.
    pub fn background(&self) -> Self {
        RateLimitLayer {
            bucket: self.bucket.clone(),
            reserve: (self.bucket.burst() / 2.0).floor(),
        }
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimit<S>;
    fn layer(&self, inner: S) -> Self::Service {
        RateLimit {
            inner,
            bucket: self.bucket.clone(),
            reserve: self.reserve,
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
    reserve: f64,
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
            let taken = if self.reserve > 0.0 {
                self.bucket.try_take_above(self.reserve)
            } else {
                self.bucket.try_take()
            };
            match taken {
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
    fn background_takes_only_what_leaves_the_reserve() {
        let mut t = Tokens::new(10.0, 4.0);
        // a full bucket: background may take down to the reserve of two, no further
        assert_eq!(t.try_take_above(0.0, 2.0), Ok(()));
        assert_eq!(t.try_take_above(0.0, 2.0), Ok(()));
        let near = |d: Duration, ms: u64| d.as_millis().abs_diff(u128::from(ms)) <= 1;
        assert!(near(
            t.try_take_above(0.0, 2.0).expect_err("at the reserve"),
            100
        ));
        // the foreground still has its two
        assert_eq!(t.try_take(0.0), Ok(()));
        assert_eq!(t.try_take(0.0), Ok(()));
        // drawn down to nothing: background waits until three are back
        assert!(near(t.try_take_above(0.0, 2.0).expect_err("empty"), 300));
        assert_eq!(t.try_take_above(0.3, 2.0), Ok(()));
        // a reserve as big as the bucket still lets one through when it is full
        let mut small = Tokens::new(1.0, 1.0);
        assert_eq!(small.try_take_above(0.0, 5.0), Ok(()));
    }

    #[test]
    fn reservations_beyond_the_burst_are_spread_at_the_rate_and_time_refills() {
        let mut t = Tokens::new(10.0, 2.0);
        assert_eq!(t.reserve(0.0), Duration::ZERO);
        assert_eq!(t.reserve(0.0), Duration::ZERO);
        let near = |d: Duration, ms: u64| d.as_millis().abs_diff(u128::from(ms)) <= 1;
        assert!(near(t.reserve(0.0), 100));
        assert!(near(t.reserve(0.0), 200));
        // a try while slots are reserved ahead waits behind them, and takes nothing
        assert!(near(t.try_take(0.0).expect_err("empty"), 300));
        assert!(near(t.try_take(0.0).expect_err("still empty"), 300));
        // a second later: the reservations are paid, eight tokens more, capped at the burst
        assert_eq!(t.try_take(1.0), Ok(()));
        assert_eq!(t.try_take(1.0), Ok(()));
        assert!(t.try_take(1.0).is_err());
        // one token a second, burst one: the scheduler's failover pace
        let mut slow = Tokens::new(1.0, 1.0);
        assert_eq!(slow.try_take(5.0), Ok(()));
        assert!(near(slow.try_take(5.5).expect_err("half a token"), 500));
        assert_eq!(slow.try_take(6.0), Ok(()));
    }

    #[test]
    fn burst_then_qps() {
        let b = TokenBucket::new(10.0, 3.0);
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
