//! The one work queue of the process, as client-go's workqueue with two lanes: keys
//! (`namespace/name`), each queued at most once, handed out by lane (what changed while the
//! process runs before the backlog it found when it started or won leadership), then priority
//! (higher first), then arrival. A key can wait out a delay before it joins (a retry's backoff, a
//! periodic recheck); a direct add makes it active at once. A key being worked on is never handed
//! out twice: added meanwhile, it comes back once it is done. At most `backlog_limit` backlog keys
//! are out at once, so a change always finds a free worker instead of waiting behind 10,000
//! objects looked at again after a restart. The controllers ([`super::controller`]) and the
//! scheduler both run on it; it keeps client-go's `workqueue_*{name}` series.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio::sync::Notify;

/// Which lane a key waits in: live changes go first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Lane {
    Live,
    Backlog,
}

/// Where a key is, for those that are anywhere.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Queued {
    lane: Lane,
    /// Negated priority, so the set's first element is the highest.
    rank: i64,
    seq: u64,
    since: Instant,
}

#[derive(Default)]
struct State {
    /// (lane, -priority, arrival, key): the first element is handed out next.
    active: BTreeSet<(Lane, i64, u64, String)>,
    queued: HashMap<String, Queued>,
    /// Keys waiting out a delay, and when they are due.
    delayed: HashMap<String, Instant>,
    /// Keys handed out and not done yet, with their lane and when they were handed out.
    processing: HashMap<String, (Lane, Instant)>,
    /// Keys added while being worked on: queued again (lane, priority) once done.
    dirty: HashMap<String, (Lane, i64)>,
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

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues `key` in `lane` with `priority` (higher first), or moves it up if it waits in a
    /// worse place; a delay it was waiting out is over.
    pub fn add(&self, key: &str, lane: Lane, priority: i64) {
        self.series.adds.increment(1);
        let mut s = self.lock();
        s.delayed.remove(key);
        insert(&mut s, key, lane, -priority);
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
        if let Some(q) = s.queued.remove(key) {
            s.active.remove(&(q.lane, q.rank, q.seq, key.to_string()));
        }
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
        let first = s.active.iter().next().cloned()?;
        if first.0 == Lane::Backlog && s.backlog_out >= self.backlog_limit {
            return None;
        }
        s.active.remove(&first);
        let key = first.3;
        if let Some(q) = s.queued.remove(&key) {
            self.series
                .latency
                .record(now.saturating_duration_since(q.since).as_secs_f64());
        }
        if first.0 == Lane::Backlog {
            s.backlog_out += 1;
        }
        s.processing.insert(key.clone(), (first.0, now));
        self.gauge(&s);
        Some(key)
    }

    /// Waits for the next key; `None` once the queue is shut down.
    pub async fn pop(&self) -> Option<String> {
        loop {
            let notified = self.notify.notified();
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
        if let Some((lane, since)) = s.processing.remove(key) {
            self.series.work.record(since.elapsed().as_secs_f64());
            if lane == Lane::Backlog {
                s.backlog_out = s.backlog_out.saturating_sub(1);
            }
        }
        if let Some((lane, rank)) = s.dirty.remove(key) {
            insert(&mut s, key, lane, rank);
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
        let backlog = s
            .queued
            .values()
            .filter(|q| q.lane == Lane::Backlog)
            .count();
        self.series.backlog.set(backlog as f64);
    }
}

/// Queues `key`, or keeps the better of its place and the new one; a key being worked on is
/// marked to come back instead.
fn insert(s: &mut State, key: &str, lane: Lane, rank: i64) {
    if s.processing.contains_key(key) {
        let entry = s.dirty.entry(key.to_string()).or_insert((lane, rank));
        *entry = (entry.0.min(lane), entry.1.min(rank));
        return;
    }
    match s.queued.get(key).copied() {
        // as good or better where it is: keeps its place
        Some(q) if q.lane <= lane && q.rank == rank => {}
        Some(q) => {
            s.active.remove(&(q.lane, q.rank, q.seq, key.to_string()));
            // promoted from the backlog: it joins the live lane at its end
            let (lane, seq) = if lane < q.lane {
                s.seq += 1;
                (lane, s.seq)
            } else {
                (q.lane, q.seq)
            };
            s.active.insert((lane, rank, seq, key.to_string()));
            s.queued.insert(
                key.to_string(),
                Queued {
                    lane,
                    rank,
                    seq,
                    since: q.since,
                },
            );
        }
        None => {
            s.seq += 1;
            let seq = s.seq;
            s.active.insert((lane, rank, seq, key.to_string()));
            s.queued.insert(
                key.to_string(),
                Queued {
                    lane,
                    rank,
                    seq,
                    since: Instant::now(),
                },
            );
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
            insert(s, &key, Lane::Live, 0);
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
