//! Resource limits of the hub (issue #21): how many long-running requests (shadow API watches
//! and watches proxied into children) one user may hold open at once ([`WatchLimits`]), and the
//! idle timeout of proxied connections ([`copy_bidirectional_idle`] for exec/attach/port-forward
//! upgrades, [`idle_limited`] for streamed responses). The cap on agent tunnel sessions per cluster
//! lives with the sessions, in `tunnel::server`. Request bodies are bounded in `server.rs`.
//!
//! Metrics: `clusternet_hub_watches_open` (gauge of watches counted against a user's cap) and
//! `clusternet_hub_watches_refused_total` (watches refused over the cap).

use std::collections::HashMap;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use http_body::Frame;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::time::Instant;

use super::authn::ChildIdentity;
use super::authn::UserInfo;
use super::body::{BoxError, HubBody};
use super::status::ApiError;

/// Gauge of open watches counted against their users' caps.
pub const METRIC_WATCHES_OPEN: &str = "clusternet_hub_watches_open";
/// Counter of watches refused because their user had the cap open already.
pub const METRIC_WATCHES_REFUSED: &str = "clusternet_hub_watches_refused_total";
/// What a refusal's `Retry-After` says: long enough for a watch of the same user to end.
pub const RETRY_AFTER_SECONDS: u32 = 5;

/// Open watches per user, capped (`--max-watches-per-user`; 0 is no limit).
#[derive(Debug)]
pub struct WatchLimits {
    max: usize,
    open: Mutex<HashMap<String, usize>>,
}

/// One open watch; the count goes down when it is dropped, however the watch ends (the
/// response body holding it finished, failed, or the caller went away).
#[derive(Debug)]
pub struct WatchGuard {
    limits: Arc<WatchLimits>,
    key: String,
}

impl WatchLimits {
    pub fn new(max: usize) -> Arc<WatchLimits> {
        Arc::new(WatchLimits {
            max,
            open: Mutex::new(HashMap::new()),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, usize>> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts one more watch for `key` (see [`watch_key`]), or refuses it with a 429 naming
    /// `user` when the key has the cap open already.
    pub fn acquire(self: &Arc<Self>, key: &str, user: &str) -> Result<WatchGuard, ApiError> {
        let mut open = self.lock();
        let n = open.get(key).copied().unwrap_or(0);
        if self.max > 0 && n >= self.max {
            drop(open);
            metrics::counter!(METRIC_WATCHES_REFUSED).increment(1);
            tracing::info!(
                user,
                open = n,
                max = self.max,
                "watch refused over the user's cap"
            );
            return Err(ApiError::too_many_requests(
                format!(
                    "too many watches: user {user:?} has {n} open at this hub, the limit (--max-watches-per-user={})",
                    self.max
                ),
                RETRY_AFTER_SECONDS,
            ));
        }
        open.insert(key.to_string(), n + 1);
        drop(open);
        metrics::gauge!(METRIC_WATCHES_OPEN).increment(1.0);
        Ok(WatchGuard {
            limits: self.clone(),
            key: key.to_string(),
        })
    }

    /// Watches open for `key` now.
    pub fn open(&self, key: &str) -> usize {
        self.lock().get(key).copied().unwrap_or(0)
    }
}

impl Drop for WatchGuard {
    fn drop(&mut self) {
        let mut open = self.limits.lock();
        if let Some(n) = open.get_mut(&self.key) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                open.remove(&self.key);
            }
        }
        metrics::gauge!(METRIC_WATCHES_OPEN).decrement(1.0);
    }
}

/// Is this a watch (`?watch=true` or the legacy `/watch/` prefix)? Those are streamed outside warp.
pub fn is_watch(tail: &str, query: Option<&str>) -> bool {
    tail.starts_with("watch/")
        || query.is_some_and(|q| {
            q.split('&')
                .any(|kv| matches!(kv, "watch=true" | "watch=1" | "watch=True"))
        })
}

/// Whom a watch counts against: the authenticated user, and for a watch proxied into a child
/// also whom the child sees (the handed-over credentials and impersonation). Every proxied
/// request impersonates user `clusternet` in the parent (the controller's Push watches, one per
/// kind per child, and every `kubectl clusternet --cluster-id` user alike), so the parent user
/// alone would put them all in one bucket. The credentials enter only as a digest.
pub fn watch_key(user: &UserInfo, child: Option<&ChildIdentity>) -> String {
    let Some(child) =
        child.filter(|c| c.bearer.is_some() || c.client_cert.is_some() || !c.headers.is_empty())
    else {
        return user.name.clone();
    };
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    let mut part = |b: &[u8]| {
        ctx.update(&(b.len() as u64).to_be_bytes());
        ctx.update(b);
    };
    part(child.bearer.as_deref().unwrap_or_default().as_bytes());
    if let Some((cert, key)) = &child.client_cert {
        part(cert);
        part(key);
    }
    for (name, value) in &child.headers {
        part(name.as_bytes());
        part(value.as_bytes());
    }
    let digest = ctx.finish();
    let hex: String = digest.as_ref()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("{}\u{0}{hex}", user.name)
}

/// Whether a request proxied into a child is a watch: `watch=true|1` in the query, or the
/// legacy `/api/v1/watch/...` / `/apis/<group>/<version>/watch/...` paths.
pub fn is_proxied_watch(path: &str, query: Option<&str>) -> bool {
    if is_watch("", query) {
        return true;
    }
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    segments
        .windows(3)
        .any(|w| w[0] == "api" && w[2] == "watch")
        || segments
            .windows(4)
            .any(|w| w[0] == "apis" && w[3] == "watch")
}

/// The body `body`, holding `guard` until the body is dropped.
pub fn holding<G: Send + 'static>(body: HubBody, guard: G) -> HubBody {
    use http_body_util::BodyExt;
    body.map_frame(move |frame| {
        // the closure owns the guard: it goes when the body does
        let _held = &guard;
        frame
    })
    .boxed_unsync()
}

/// The proxied connection moved no byte for the idle timeout.
#[derive(Debug, thiserror::Error)]
#[error("no data for {0:?}: the proxied connection was idle and is closed")]
pub struct IdleTimeout(pub Duration);

/// A streamed proxied response (a watch, `logs -f`) with the idle timeout `idle` (zero: never) in
/// both directions, holding `guard` (a watch's place under its user's cap) while it runs:
///
/// - the child sends nothing for `idle`: the caller gets an [`IdleTimeout`] error, which makes
///   hyper close its connection;
/// - the caller takes nothing for `idle` (it stopped reading, so hyper stopped asking for the next
///   frame): the response is given up.
///
/// Either way the child's body is dropped (closing the connection into the child and its tunnel
/// stream) and the guard is released, so a caller that stops reading cannot pin a watch place, a
/// tunnel stream and the child's watch forever. The frames are pumped by a task of their own
/// through a channel of one, because a body nobody polls cannot notice its own timeout.
pub fn idle_limited<G: Send + 'static>(
    body: HubBody,
    idle: Duration,
    what: String,
    guard: Option<G>,
) -> HubBody {
    pumped(body, idle, true, what, guard)
}

/// Like [`idle_limited`] for a response whose source may rightly be quiet for long (a shadow API
/// watch: the parent sends nothing while no Manifest changes, and ends the watch itself within
/// its timeout): only a caller that takes nothing for `idle` gives it up.
pub fn caller_limited<G: Send + 'static>(
    body: HubBody,
    idle: Duration,
    what: String,
    guard: Option<G>,
) -> HubBody {
    pumped(body, idle, false, what, guard)
}

/// The pump behind [`idle_limited`] (`source_idle`: a quiet source ends it too) and
/// [`caller_limited`].
fn pumped<G: Send + 'static>(
    body: HubBody,
    idle: Duration,
    source_idle: bool,
    what: String,
    guard: Option<G>,
) -> HubBody {
    use http_body_util::BodyExt;
    if idle.is_zero() {
        return match guard {
            Some(g) => holding(body, g),
            None => body,
        };
    }
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, BoxError>>(1);
    tokio::spawn(async move {
        let _held = guard;
        let mut body = body;
        loop {
            // the caller hanging up ends it at once, not at the child's next frame
            // a source that may rightly be quiet is waited for as long as it takes
            let wait = if source_idle { idle } else { Duration::MAX };
            let next = tokio::select! {
                () = tx.closed() => return,
                next = tokio::time::timeout(wait, body.frame()) => next,
            };
            let frame = match next {
                Ok(Some(frame)) => frame,
                Ok(None) => return,
                Err(_) => {
                    tracing::info!(target = %what, ?idle, "closing an idle proxied response");
                    // a full channel here means the caller is not reading either: nothing to tell
                    let _ = tx.try_send(Err(Box::new(IdleTimeout(idle))));
                    return;
                }
            };
            let failed = frame.is_err();
            match tokio::time::timeout(idle, tx.send(frame)).await {
                Ok(Ok(())) if !failed => {}
                // the response ended (an error passed on) or the caller went away
                Ok(_) => return,
                Err(_) => {
                    tracing::info!(target = %what, ?idle, "closing a proxied response whose caller stopped reading");
                    return;
                }
            }
        }
    });
    http_body_util::StreamBody::new(futures::stream::poll_fn(move |cx| rx.poll_recv(cx)))
        .boxed_unsync()
}

/// When bytes last moved through a [`Tracked`] stream.
struct Activity {
    base: Instant,
    /// Milliseconds after `base`.
    last_ms: AtomicU64,
}

impl Activity {
    fn new() -> Activity {
        Activity {
            base: Instant::now(),
            last_ms: AtomicU64::new(0),
        }
    }

    fn touch(&self) {
        let ms = u64::try_from(self.base.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.store(ms, Ordering::Relaxed);
    }

    /// Resolves once nothing moved for `idle`.
    async fn idle(&self, idle: Duration) {
        loop {
            let last = self.base + Duration::from_millis(self.last_ms.load(Ordering::Relaxed));
            let deadline = last + idle;
            if Instant::now() >= deadline {
                return;
            }
            tokio::time::sleep_until(deadline).await;
        }
    }
}

/// A stream that records every byte read or written in its [`Activity`].
struct Tracked<'a, S> {
    inner: &'a mut S,
    activity: &'a Activity,
}

impl<S: AsyncRead + Unpin> AsyncRead for Tracked<'_, S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = ready!(Pin::new(&mut *self.inner).poll_read(cx, buf));
        if buf.filled().len() > before {
            self.activity.touch();
        }
        Poll::Ready(r)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Tracked<'_, S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let n = ready!(Pin::new(&mut *self.inner).poll_write(cx, buf))?;
        if n > 0 {
            self.activity.touch();
        }
        Poll::Ready(Ok(n))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.inner).poll_shutdown(cx)
    }
}

/// How a [`copy_bidirectional_idle`] ended.
#[derive(Debug, PartialEq, Eq)]
pub enum CopyEnd {
    /// Both directions finished: bytes copied `a -> b` and `b -> a`.
    Finished(u64, u64),
    /// Nothing moved in either direction for the idle timeout; both sides were shut down.
    Idle,
}

/// `tokio::io::copy_bidirectional`, except that when no byte moves in either direction for
/// `idle` (zero: never) both sides are shut down and it returns [`CopyEnd::Idle`].
pub async fn copy_bidirectional_idle<A, B>(
    a: &mut A,
    b: &mut B,
    idle: Duration,
) -> io::Result<CopyEnd>
where
    A: AsyncRead + AsyncWrite + Unpin,
    B: AsyncRead + AsyncWrite + Unpin,
{
    if idle.is_zero() {
        let (ab, ba) = tokio::io::copy_bidirectional(a, b).await?;
        return Ok(CopyEnd::Finished(ab, ba));
    }
    let activity = Activity::new();
    let copied = {
        let mut ta = Tracked {
            inner: &mut *a,
            activity: &activity,
        };
        let mut tb = Tracked {
            inner: &mut *b,
            activity: &activity,
        };
        tokio::select! {
            r = tokio::io::copy_bidirectional(&mut ta, &mut tb) => Some(r),
            () = activity.idle(idle) => None,
        }
    };
    match copied {
        Some(r) => r.map(|(ab, ba)| CopyEnd::Finished(ab, ba)),
        None => {
            // best effort: a clean close (TLS close_notify, FIN) within a second, else the
            // caller's drop closes them
            let grace = Duration::from_secs(1);
            let _ = tokio::time::timeout(grace, a.shutdown()).await;
            let _ = tokio::time::timeout(grace, b.shutdown()).await;
            Ok(CopyEnd::Idle)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;
    use tokio::io::AsyncReadExt;

    fn user(name: &str) -> UserInfo {
        UserInfo {
            name: name.into(),
            ..Default::default()
        }
    }

    #[test]
    fn watches_are_capped_per_user_and_released_on_drop() {
        let limits = WatchLimits::new(2);
        let a1 = limits.acquire("alice", "alice").expect("first");
        let _a2 = limits.acquire("alice", "alice").expect("second");
        let refused = limits.acquire("alice", "alice").expect_err("third");
        assert_eq!(refused.code, 429);
        assert_eq!(
            refused.message,
            "too many watches: user \"alice\" has 2 open at this hub, the limit (--max-watches-per-user=2)"
        );
        assert!(limits.acquire("bob", "bob").is_ok(), "per user");
        drop(a1);
        assert_eq!(limits.open("alice"), 1);
        let _a3 = limits.acquire("alice", "alice").expect("a place again");

        let unlimited = WatchLimits::new(0);
        let guards: Vec<_> = (0..500)
            .map(|_| unlimited.acquire("u", "u").expect("no limit"))
            .collect();
        assert_eq!(unlimited.open("u"), 500);
        drop(guards);
        assert_eq!(unlimited.open("u"), 0);
        assert!(unlimited.lock().is_empty(), "no entry left behind");
    }

    #[test]
    fn proxied_watches_count_per_user_and_child_credentials() {
        let clusternet = user("clusternet");
        let none = watch_key(&clusternet, None);
        assert_eq!(none, "clusternet");
        assert_eq!(
            watch_key(&clusternet, Some(&ChildIdentity::default())),
            none
        );
        let with = |token: &str| ChildIdentity {
            bearer: Some(token.into()),
            ..Default::default()
        };
        let one = watch_key(&clusternet, Some(&with("child1-token")));
        let two = watch_key(&clusternet, Some(&with("child2-token")));
        assert_ne!(one, none);
        assert_ne!(one, two);
        assert_eq!(one, watch_key(&clusternet, Some(&with("child1-token"))));
        assert!(!one.contains("child1-token"), "no credential in the key");
        assert_ne!(one, watch_key(&user("other"), Some(&with("child1-token"))));
    }

    #[test]
    fn watch_queries_and_legacy_watch_paths() {
        assert!(is_proxied_watch("/api/v1/pods", Some("watch=true")));
        assert!(is_proxied_watch(
            "/api/v1/pods",
            Some("labelSelector=a&watch=1")
        ));
        assert!(is_proxied_watch("/api/v1/watch/namespaces/x/pods", None));
        assert!(is_proxied_watch(
            "/prefix/apis/apps/v1/watch/deployments",
            None
        ));
        assert!(!is_proxied_watch("/api/v1/pods", Some("watch=false")));
        assert!(!is_proxied_watch("/api/v1/namespaces/watch/pods", None));
        assert!(!is_proxied_watch("/version", None));
    }

    #[tokio::test]
    async fn a_held_guard_goes_with_the_body() {
        let limits = WatchLimits::new(1);
        let guard = limits.acquire("u", "u").expect("place");
        let body = holding(super::super::body::full("x"), guard);
        assert_eq!(limits.open("u"), 1);
        let bytes = body.collect().await.expect("body").to_bytes();
        assert_eq!(&bytes[..], b"x");
        assert_eq!(limits.open("u"), 0, "released once the body is gone");
    }

    #[tokio::test]
    async fn copying_stops_when_nothing_moves() {
        let idle = Duration::from_millis(400);
        let (mut client, mut hub_client_side) = tokio::io::duplex(1024);
        let (mut hub_child_side, mut child) = tokio::io::duplex(1024);
        let copy = tokio::spawn(async move {
            copy_bidirectional_idle(&mut hub_client_side, &mut hub_child_side, idle).await
        });
        // traffic in either direction keeps it open well past the idle timeout
        let mut buf = [0u8; 2];
        for i in 0..12 {
            tokio::time::sleep(Duration::from_millis(80)).await;
            if i % 2 == 0 {
                client.write_all(b"up").await.expect("write");
                child.read_exact(&mut buf).await.expect("read");
                assert_eq!(&buf, b"up");
            } else {
                child.write_all(b"dn").await.expect("write");
                client.read_exact(&mut buf).await.expect("read");
                assert_eq!(&buf, b"dn");
            }
        }
        assert!(!copy.is_finished(), "traffic kept the copy going");
        // then silence: both sides are closed
        let end = tokio::time::timeout(Duration::from_secs(5), copy)
            .await
            .expect("the idle timeout ends the copy")
            .expect("task")
            .expect("copy");
        assert_eq!(end, CopyEnd::Idle);
        assert_eq!(client.read(&mut buf).await.expect("EOF"), 0);
        assert_eq!(child.read(&mut buf).await.expect("EOF"), 0);
    }

    #[tokio::test]
    async fn copying_ends_normally_and_zero_never_times_out() {
        for idle in [Duration::ZERO, Duration::from_secs(60)] {
            let (mut client, mut a) = tokio::io::duplex(1024);
            let (mut b, mut child) = tokio::io::duplex(1024);
            let copy =
                tokio::spawn(async move { copy_bidirectional_idle(&mut a, &mut b, idle).await });
            client.write_all(b"hello").await.expect("write");
            let mut buf = [0u8; 5];
            child.read_exact(&mut buf).await.expect("read");
            client.shutdown().await.expect("shutdown");
            drop(client);
            child.shutdown().await.expect("shutdown");
            let end = tokio::time::timeout(Duration::from_secs(5), copy)
                .await
                .expect("ends")
                .expect("task")
                .expect("copy");
            assert_eq!(end, CopyEnd::Finished(5, 0));
        }
    }

    #[tokio::test]
    async fn a_quiet_streamed_body_fails_after_the_idle_timeout() {
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, BoxError>>(4);
        let stream = tokio_stream_from(rx);
        let body = super::super::body::boxed(http_body_util::StreamBody::new(stream));
        let (guard, released) = tokio::sync::oneshot::channel::<()>();
        let mut body = idle_limited(body, Duration::from_millis(300), "test".into(), Some(guard));
        for _ in 0..5 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            tx.send(Ok(Frame::data(Bytes::from_static(b"event\n"))))
                .await
                .expect("send");
            let frame = body.frame().await.expect("a frame").expect("data");
            assert_eq!(frame.into_data().ok().as_deref(), Some(&b"event\n"[..]));
        }
        let err = tokio::time::timeout(Duration::from_secs(5), body.frame())
            .await
            .expect("the idle timeout fires")
            .expect("an item")
            .expect_err("an error");
        assert!(err.to_string().contains("idle"), "{err}");
        assert!(body.frame().await.is_none(), "and the body is over");
        assert!(released.await.is_err(), "the guard is released");
        assert!(tx.is_closed(), "the child's body is dropped");
    }

    #[tokio::test]
    async fn a_caller_that_stops_reading_gives_the_response_up() {
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, BoxError>>(4);
        let body =
            super::super::body::boxed(http_body_util::StreamBody::new(tokio_stream_from(rx)));
        let (guard, released) = tokio::sync::oneshot::channel::<()>();
        let mut body = idle_limited(body, Duration::from_millis(300), "test".into(), Some(guard));
        tx.send(Ok(Frame::data(Bytes::from_static(b"first\n"))))
            .await
            .expect("send");
        assert!(body.frame().await.is_some(), "read once");
        // the child keeps sending, the caller reads no more (its body is never polled again)
        let child = tokio::spawn(async move {
            while tx
                .send(Ok(Frame::data(Bytes::from_static(b"event\n"))))
                .await
                .is_ok()
            {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        });
        tokio::time::timeout(Duration::from_secs(5), released)
            .await
            .expect("the guard is released within the idle timeout")
            .expect_err("dropped, not sent");
        tokio::time::timeout(Duration::from_secs(5), child)
            .await
            .expect("the child's body is dropped, its sender fails")
            .expect("the child task");
        drop(body);
    }

    #[tokio::test]
    async fn a_quiet_source_keeps_a_caller_limited_response_but_a_stalled_caller_ends_it() {
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, BoxError>>(4);
        let body =
            super::super::body::boxed(http_body_util::StreamBody::new(tokio_stream_from(rx)));
        let (guard, mut released) = tokio::sync::oneshot::channel::<()>();
        let idle = Duration::from_millis(200);
        let mut body = caller_limited(body, idle, "test".into(), Some(guard));
        // the source says nothing for three idle timeouts: the response stays
        tokio::time::sleep(idle * 3).await;
        assert!(
            released
                .try_recv()
                .is_err_and(|e| e == tokio::sync::oneshot::error::TryRecvError::Empty)
        );
        tx.send(Ok(Frame::data(Bytes::from_static(b"late\n"))))
            .await
            .expect("send");
        let frame = body.frame().await.expect("a frame").expect("data");
        assert_eq!(frame.into_data().ok().as_deref(), Some(&b"late\n"[..]));
        // now the caller stops reading while the source goes on
        let source = tokio::spawn(async move {
            while tx
                .send(Ok(Frame::data(Bytes::from_static(b"event\n"))))
                .await
                .is_ok()
            {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        });
        tokio::time::timeout(Duration::from_secs(5), released)
            .await
            .expect("the guard is released within the idle timeout")
            .expect_err("dropped, not sent");
        tokio::time::timeout(Duration::from_secs(5), source)
            .await
            .expect("the source is dropped")
            .expect("the source task");
        drop(body);
    }

    fn tokio_stream_from<T: Send + 'static>(
        mut rx: tokio::sync::mpsc::Receiver<T>,
    ) -> impl futures::Stream<Item = T> {
        futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
    }
}
