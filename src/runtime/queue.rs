//! The one work queue of the process, as client-go's workqueue with two lanes: keys
//! (`namespace/name`), each queued at most once, handed out by lane (what changed while the
//! process runs before the backlog it found when it started or won leadership), then priority
//! (higher first), then arrival (oldest first; newest first in a controller's live lane, below).
//! A key can wait out a delay before it joins (a retry's backoff, a
//! periodic recheck); a direct add makes it active at once. A key being worked on is never handed
//! out twice: added meanwhile, it comes back once it is done. At most `backlog_limit` backlog keys
//! are out at once, so a change always finds a free worker instead of waiting behind 10,000
//! objects looked at again after a restart. The controllers ([`super::controller`]) and the
//! scheduler both run on it; it keeps client-go's `workqueue_*{name}` series.
//!
//! A controller's queue hands out its live keys newest first ([`WorkQueue::newest_first`]): under
//! a burst, the object that just changed (most often its own write coming back: a finalizer
//! added, a Base created, a status written) goes on through the pipeline's stages instead of
//! waiting for every stage of every object queued before it, which is what client-go's FIFO does
//! and what the median object pays for when the API server's rate limit is the bottleneck.
//! kube-runtime's scheduler, which our controllers ran on before, also hands out what is due
//! mostly newest first (its delay queue's slots are stacks). A key that has waited longer than
//! the queue's patience goes ahead of the newest, oldest first, so nothing starves.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio::sync::Notify;

/// Which lane a key waits in: live changes go first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Lane {
    Live,
    Backlog,
}

/// Within a lane and priority: the keys that waited past the queue's patience first (oldest
/// first), then the others (newest first in a newest-first queue's live lane, else oldest first).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Turn {
    Overdue,
    Waiting,
}

/// Where a key is, for those that are anywhere.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Queued {
    lane: Lane,
    /// Negated priority, so the set's first element is the highest.
    rank: i64,
    turn: Turn,
    /// When it joined, as the queue counts: its order within its turn.
    arrival: u64,
    since: Instant,
}

/// (lane, -priority, turn, place, key): the order keys are handed out in.
type Slot = (Lane, i64, Turn, u64, String);

#[derive(Default)]
struct State {
    /// The first element is handed out next.
    active: BTreeSet<Slot>,
    queued: HashMap<String, Queued>,
    /// Backlog keys among the queued ones.
    queued_backlog: usize,
    /// Keys waiting out a delay, and when they are due.
    delayed: HashMap<String, Instant>,
    /// Keys handed out and not done yet, with their lane and when they were handed out.
    processing: HashMap<String, (Lane, Instant)>,
    /// Keys added while being worked on: queued again (lane, priority) once done.
    dirty: HashMap<String, (Lane, i64)>,
    /// Newest first: how long a key may wait before it goes ahead of the newer ones (set once,
    /// before the first key).
    patience: Option<Duration>,
    /// The live keys handed out newest first, by arrival: the oldest is the next to be overdue.
    arrivals: BTreeMap<u64, String>,
    backlog_out: usize,
    seq: u64,
    closed: bool,
}

/// The queue's series, client-go's names with the queue's name.
struct Series {
    adds: metrics::Counter,
    depth: metrics::Gauge,
    backlog: metrics::Gauge,
    latency: metrics::Histogram,
    work: metrics::Histogram,
    retries: metrics::Counter,
}

pub struct WorkQueue {
    state: Mutex<State>,
    notify: Notify,
    backlog_limit: usize,
    series: Series,
}

impl WorkQueue {
    /// A queue named `name` (its metrics' label) handing out at most `backlog_limit` backlog
    /// keys at once (at least one). `backlog_metric` names the gauge of backlog keys waiting.
    pub fn new(name: &'static str, backlog_limit: usize, backlog_metric: &'static str) -> Self {
        WorkQueue {
            state: Mutex::default(),
            notify: Notify::new(),
            backlog_limit: backlog_limit.max(1),
            series: Series {
                adds: metrics::counter!("workqueue_adds_total", "name" => name),
                depth: metrics::gauge!("workqueue_depth", "name" => name),
                backlog: metrics::gauge!(backlog_metric, "controller" => name),
                latency: metrics::histogram!("workqueue_queue_duration_seconds", "name" => name),
                work: metrics::histogram!("workqueue_work_duration_seconds", "name" => name),
                retries: metrics::counter!("workqueue_retries_total", "name" => name),
            },
        }
    }

    /// Live keys newest first, except those that have waited `patience` or longer: they go
    /// first, oldest first.
    pub fn newest_first(self, patience: Duration) -> Self {
        self.lock().patience = Some(patience);
        self
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues `key` in `lane` with `priority` (higher first), or moves it up if it waits in a
    /// worse place; a delay it was waiting out is over.
    pub fn add(&self, key: &str, lane: Lane, priority: i64) {
        self.series.adds.increment(1);
        let mut s = self.lock();
        s.delayed.remove(key);
        insert(&mut s, key, lane, -priority, Instant::now());
        self.gauge(&s);
        drop(s);
        self.notify.notify_one();
    }

    /// Queues `key` once `delay` has passed (in the live lane), unless it is queued already or
    /// due sooner.
    pub fn add_after(&self, key: &str, delay: Duration) {
        let mut s = self.lock();
        if s.queued.contains_key(key) {
            return;
        }
        let due = Instant::now() + delay;
        let entry = s.delayed.entry(key.to_string()).or_insert(due);
        if due < *entry {
            *entry = due;
        }
        drop(s);
        // a waiting `pop` must learn of an earlier due time
        self.notify.notify_one();
    }

    /// [`WorkQueue::add_after`] for a retry after a failure (counted as one).
    pub fn retry_after(&self, key: &str, delay: Duration) {
        self.series.retries.increment(1);
        self.add_after(key, delay);
    }

    /// Forgets `key` wherever it waits (it is gone for good).
    pub fn remove(&self, key: &str) {
        let mut s = self.lock();
        unqueue(&mut s, key);
        s.delayed.remove(key);
        s.dirty.remove(key);
        self.gauge(&s);
    }

    /// The next key without waiting: due delays join first; a backlog key only while fewer than
    /// the limit are out.
    pub fn try_pop(&self) -> Option<String> {
        let mut s = self.lock();
        let now = Instant::now();
        promote_due(&mut s, now);
        rescue_overdue(&mut s, now);
        let (lane, key) = {
            let first = s.active.first()?;
            (first.0, first.4.clone())
        };
        if lane == Lane::Backlog && s.backlog_out >= self.backlog_limit {
            return None;
        }
        if let Some(q) = unqueue(&mut s, &key) {
            self.series
                .latency
                .record(now.saturating_duration_since(q.since).as_secs_f64());
        }
        if lane == Lane::Backlog {
            s.backlog_out += 1;
        }
        s.processing.insert(key.clone(), (lane, now));
        self.gauge(&s);
        Some(key)
    }

    /// Waits for the next key; `None` once the queue is shut down.
    pub async fn pop(&self) -> Option<String> {
        loop {
            // registered before looking, so an add between the look and the wait wakes this
            // worker (an unregistered one would leave a second add of a burst to a single permit)
            let notified = self.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.lock().closed {
                return None;
            }
            if let Some(k) = self.try_pop() {
                return Some(k);
            }
            // sleep until the next delay is due (or something is added, or a backlog turn frees)
            let next = self.lock().delayed.values().min().copied();
            match next {
                Some(due) => {
                    tokio::select! {
                        _ = notified => {}
                        _ = tokio::time::sleep_until(due.into()) => {}
                    }
                }
                None => notified.await,
            }
        }
    }

    /// `key` (handed out by a pop) is done: a key added meanwhile is queued again.
    pub fn done(&self, key: &str) {
        let mut s = self.lock();
        let now = Instant::now();
        if let Some((lane, since)) = s.processing.remove(key) {
            self.series
                .work
                .record(now.saturating_duration_since(since).as_secs_f64());
            if lane == Lane::Backlog {
                s.backlog_out = s.backlog_out.saturating_sub(1);
            }
        }
        if let Some((lane, rank)) = s.dirty.remove(key) {
            insert(&mut s, key, lane, rank, now);
        }
        self.gauge(&s);
        drop(s);
        // a freed backlog turn or a requeued key may let a waiting worker go on
        self.notify.notify_waiters();
        self.notify.notify_one();
    }

    /// Keys waiting (queued or delayed).
    pub fn len(&self) -> usize {
        let s = self.lock();
        s.queued.len() + s.delayed.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every waiting pop returns `None`, and every later one.
    pub fn shut_down(&self) {
        self.lock().closed = true;
        self.notify.notify_waiters();
    }

    fn gauge(&self, s: &State) {
        self.series.depth.set(s.queued.len() as f64);
        self.series.backlog.set(s.queued_backlog as f64);
    }
}

/// Moves the keys that have waited past the patience ahead of the newer ones.
fn rescue_overdue(s: &mut State, now: Instant) {
    let Some(patience) = s.patience else { return };
    while let Some((&arrival, key)) = s.arrivals.first_key_value() {
        let key = key.clone();
        let Some(q) = s.queued.get(&key).copied() else {
            s.arrivals.remove(&arrival);
            continue;
        };
        if now.saturating_duration_since(q.since) < patience {
            break;
        }
        unqueue(s, &key);
        enqueue(
            s,
            &key,
            Queued {
                turn: Turn::Overdue,
                ..q
            },
        );
    }
}

impl State {
    /// Whether `q` is handed out newest first.
    fn newest_first(&self, q: &Queued) -> bool {
        self.patience.is_some() && q.lane == Lane::Live && q.turn == Turn::Waiting
    }

    /// `q`'s place in `active`: within its turn by arrival, the newest first when it goes so.
    fn slot(&self, key: &str, q: &Queued) -> Slot {
        let place = if self.newest_first(q) {
            u64::MAX - q.arrival
        } else {
            q.arrival
        };
        (q.lane, q.rank, q.turn, place, key.to_string())
    }
}

/// Takes `key` out of the queued keys, if it is one.
fn unqueue(s: &mut State, key: &str) -> Option<Queued> {
    let q = s.queued.remove(key)?;
    let slot = s.slot(key, &q);
    s.active.remove(&slot);
    s.arrivals.remove(&q.arrival);
    if q.lane == Lane::Backlog {
        s.queued_backlog -= 1;
    }
    Some(q)
}

/// Queues `key` at its place.
fn enqueue(s: &mut State, key: &str, q: Queued) {
    if s.newest_first(&q) {
        s.arrivals.insert(q.arrival, key.to_string());
    }
    let slot = s.slot(key, &q);
    s.active.insert(slot);
    if q.lane == Lane::Backlog {
        s.queued_backlog += 1;
    }
    s.queued.insert(key.to_string(), q);
}

/// Queues `key`, or keeps the better of its place and the new one; a key being worked on is
/// marked to come back instead.
fn insert(s: &mut State, key: &str, lane: Lane, rank: i64, now: Instant) {
    if s.processing.contains_key(key) {
        let entry = s.dirty.entry(key.to_string()).or_insert((lane, rank));
        *entry = (entry.0.min(lane), entry.1.min(rank));
        return;
    }
    match s.queued.get(key).copied() {
        // as good or better where it is: keeps its place
        Some(q) if q.lane <= lane && q.rank <= rank => {}
        Some(q) => {
            unqueue(s, key);
            let (lane, rank) = (q.lane.min(lane), q.rank.min(rank));
            // promoted from the backlog: it joins the live lane as its newest
            let arrival = if lane < q.lane {
                s.seq += 1;
                s.seq
            } else {
                q.arrival
            };
            enqueue(
                s,
                key,
                Queued {
                    lane,
                    rank,
                    arrival,
                    ..q
                },
            );
        }
        None => {
            s.seq += 1;
            let q = Queued {
                lane,
                rank,
                turn: Turn::Waiting,
                arrival: s.seq,
                since: now,
            };
            enqueue(s, key, q);
        }
    }
}

/// Moves the delayed keys that are due into the live lane (a key being worked on is marked to
/// come back).
fn promote_due(s: &mut State, now: Instant) {
    if s.delayed.is_empty() {
        return;
    }
    let due: Vec<String> = s
        .delayed
        .iter()
        .filter(|(_, t)| **t <= now)
        .map(|(k, _)| k.clone())
        .collect();
    for key in due {
        s.delayed.remove(&key);
        if !s.queued.contains_key(&key) {
            insert(s, &key, Lane::Live, 0, now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue(backlog_limit: usize) -> WorkQueue {
        WorkQueue::new("test", backlog_limit, "test_backlog_objects")
    }

    #[test]
    fn higher_priority_first_then_fifo() {
        let q = queue(1);
        q.add("ns/a", Lane::Live, 0);
        q.add("ns/b", Lane::Live, 10);
        q.add("ns/c", Lane::Live, 0);
        q.add("ns/a", Lane::Live, 0); // already queued: keeps its place
        assert_eq!(q.try_pop().as_deref(), Some("ns/b"));
        assert_eq!(q.try_pop().as_deref(), Some("ns/a"));
        assert_eq!(q.try_pop().as_deref(), Some("ns/c"));
        assert_eq!(q.try_pop(), None);
    }

    #[test]
    fn live_changes_overtake_the_backlog_and_a_live_key_never_drops_back() {
        let q = queue(10);
        q.add("ns/old1", Lane::Backlog, 0);
        q.add("ns/old2", Lane::Backlog, 100);
        q.add("ns/old3", Lane::Backlog, 0);
        q.add("ns/new", Lane::Live, 0);
        q.add("ns/old3", Lane::Live, 0); // changed meanwhile: promoted, not queued twice
        q.add("ns/new", Lane::Backlog, 0);
        assert_eq!(q.try_pop().as_deref(), Some("ns/new"));
        assert_eq!(q.try_pop().as_deref(), Some("ns/old3"));
        assert_eq!(
            q.try_pop().as_deref(),
            Some("ns/old2"),
            "priority within the backlog"
        );
        assert_eq!(q.try_pop().as_deref(), Some("ns/old1"));
        assert_eq!(q.try_pop(), None);
    }

    #[test]
    fn only_so_many_backlog_keys_are_out_at_once_and_a_change_still_goes() {
        let q = queue(2);
        for i in 0..5 {
            q.add(&format!("ns/cm{i}"), Lane::Backlog, 0);
        }
        assert_eq!(q.try_pop().as_deref(), Some("ns/cm0"));
        assert_eq!(q.try_pop().as_deref(), Some("ns/cm1"));
        assert_eq!(q.try_pop(), None, "two backlog turns out: the third waits");
        q.add("ns/changed", Lane::Live, 0);
        assert_eq!(q.try_pop().as_deref(), Some("ns/changed"));
        q.done("ns/changed"); // a live key frees no backlog turn
        assert_eq!(q.try_pop(), None);
        q.done("ns/cm0");
        assert_eq!(q.try_pop().as_deref(), Some("ns/cm2"));
    }

    #[test]
    fn a_key_being_worked_on_is_not_handed_out_twice_and_comes_back_when_done() {
        let q = queue(1);
        q.add("ns/a", Lane::Live, 0);
        assert_eq!(q.try_pop().as_deref(), Some("ns/a"));
        q.add("ns/a", Lane::Live, 0);
        q.add("ns/b", Lane::Live, 0);
        assert_eq!(q.try_pop().as_deref(), Some("ns/b"));
        assert_eq!(q.try_pop(), None, "ns/a is still being worked on");
        q.done("ns/a");
        assert_eq!(q.try_pop().as_deref(), Some("ns/a"));
        q.done("ns/a");
        q.done("ns/b");
        assert!(q.is_empty());
    }

    #[test]
    fn a_delay_is_waited_out_unless_an_add_comes_first() {
        let q = queue(1);
        q.add_after("ns/a", Duration::from_secs(60));
        assert_eq!(q.try_pop(), None, "not due");
        assert_eq!(q.len(), 1);
        q.add("ns/a", Lane::Live, 0);
        assert_eq!(
            q.try_pop().as_deref(),
            Some("ns/a"),
            "the add comes at once"
        );
        q.done("ns/a");
        assert!(q.is_empty(), "and the delay is over");
        q.add_after("ns/b", Duration::ZERO);
        assert_eq!(q.try_pop().as_deref(), Some("ns/b"));
        // due while being worked on: back once done
        q.add_after("ns/b", Duration::ZERO);
        assert_eq!(q.try_pop(), None);
        q.done("ns/b");
        assert_eq!(q.try_pop().as_deref(), Some("ns/b"));
        q.remove("ns/b");
        q.done("ns/b");
        assert!(q.is_empty());
    }

    #[test]
    fn a_lower_priority_add_keeps_the_better_place() {
        let q = queue(1);
        q.add("ns/a", Lane::Live, 10);
        q.add("ns/b", Lane::Live, 5);
        q.add("ns/a", Lane::Live, 0);
        assert_eq!(q.try_pop().as_deref(), Some("ns/a"));
        assert_eq!(q.try_pop().as_deref(), Some("ns/b"));
    }

    #[test]
    fn newest_first_in_the_live_lane_and_the_backlog_in_order() {
        let q = queue(10).newest_first(Duration::from_secs(60));
        for k in ["ns/a", "ns/b", "ns/c"] {
            q.add(k, Lane::Live, 0);
        }
        for k in ["ns/old1", "ns/old2"] {
            q.add(k, Lane::Backlog, 0);
        }
        assert_eq!(q.try_pop().as_deref(), Some("ns/c"));
        q.done("ns/c");
        // its own write comes back: it goes on before a and b start
        q.add("ns/c", Lane::Live, 0);
        // an add of a key already queued keeps its place
        q.add("ns/a", Lane::Live, 0);
        // changed while being worked on: back as the newest once done
        assert_eq!(q.try_pop().as_deref(), Some("ns/c"));
        q.add("ns/c", Lane::Live, 0);
        q.add("ns/d", Lane::Live, 0);
        q.done("ns/c");
        // priority still comes first
        q.add("ns/urgent", Lane::Live, 10);
        let order: Vec<String> = std::iter::from_fn(|| q.try_pop()).collect();
        assert_eq!(
            order,
            [
                "ns/urgent",
                "ns/c",
                "ns/d",
                "ns/b",
                "ns/a",
                "ns/old1",
                "ns/old2"
            ]
        );
    }

    #[test]
    fn a_key_that_waited_past_the_patience_goes_first_oldest_first() {
        let q = queue(1).newest_first(Duration::from_millis(30));
        q.add("ns/a", Lane::Live, 0);
        q.add("ns/b", Lane::Live, 0);
        std::thread::sleep(Duration::from_millis(40));
        q.add("ns/c", Lane::Live, 0);
        q.add("ns/d", Lane::Live, 0);
        let order: Vec<String> = std::iter::from_fn(|| q.try_pop()).collect();
        assert_eq!(order, ["ns/a", "ns/b", "ns/d", "ns/c"]);
        assert!(q.is_empty());
        // a queue without newest-first is FIFO throughout
        let q = queue(1);
        for k in ["ns/a", "ns/b", "ns/c"] {
            q.add(k, Lane::Live, 0);
        }
        let order: Vec<String> = std::iter::from_fn(|| q.try_pop()).collect();
        assert_eq!(order, ["ns/a", "ns/b", "ns/c"]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_burst_keeps_every_waiting_worker_busy() {
        // eight workers wait; a burst of adds from another task must reach them all, not one
        let q = std::sync::Arc::new(queue(1));
        let (busy, most) = (
            std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0)),
            std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0)),
        );
        let mut workers = tokio::task::JoinSet::new();
        for _ in 0..8 {
            let (q, busy, most) = (q.clone(), busy.clone(), most.clone());
            workers.spawn(async move {
                while let Some(k) = q.pop().await {
                    let now = busy.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
                    most.fetch_max(now, std::sync::atomic::Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    busy.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                    q.done(&k);
                }
            });
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        for i in 0..8 {
            q.add(&format!("ns/k{i}"), Lane::Live, 0);
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
        assert_eq!(most.load(std::sync::atomic::Ordering::SeqCst), 8);
        q.shut_down();
        while workers.join_next().await.is_some() {}
    }

    #[tokio::test]
    async fn pop_waits_for_a_delay_and_ends_at_shut_down() {
        let q = std::sync::Arc::new(queue(1));
        q.add_after("ns/a", Duration::from_millis(30));
        let started = Instant::now();
        assert_eq!(q.pop().await.as_deref(), Some("ns/a"));
        assert!(started.elapsed() >= Duration::from_millis(30));
        let waiting = {
            let q = q.clone();
            tokio::spawn(async move { q.pop().await })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        q.shut_down();
        assert_eq!(waiting.await.ok().flatten(), None);
    }
}
