//! The scheduling queue (docs/spec/scheduler.md §2): an active queue ordered by
//! `spec.priority` (higher first) then enqueue time, and a backoff queue for failed attempts
//! (1 s doubling per attempt, capped at 10 s). Adding a key that waits in backoff moves it to the
//! active queue at once; deleting Subscriptions are forgotten.
//!
//! Two lanes: what users and clusters just changed goes before the backlog the scheduler lists
//! when it starts (or takes over leadership), so a new Subscription is served at once even while
//! 10,000 existing ones are re-checked behind it.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use crate::runtime::backoff::Exponential;

/// A failed attempt waits 1 s, doubling per attempt, up to 10 s (upstream's pod backoff).
const BACKOFF: Exponential = Exponential::new(Duration::from_secs(1), Duration::from_secs(10));

/// Live changes first, the start-up backlog after them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Lane {
    Live,
    Backlog,
}

#[derive(Default)]
struct State {
    /// (lane, -priority, enqueue sequence, key): the first element is popped next.
    active: BTreeSet<(Lane, i64, u64, String)>,
    /// key -> its entry in `active`.
    index: HashMap<String, (Lane, i64, u64)>,
    /// key -> when it may be retried.
    backoff: HashMap<String, Instant>,
    /// key -> failed attempts so far (reset by `forget`).
    attempts: HashMap<String, u32>,
    seq: u64,
}

#[derive(Default)]
pub struct SchedulingQueue {
    state: Mutex<State>,
    notify: Notify,
}

impl SchedulingQueue {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        match self.state.lock() {
            Ok(s) => s,
            Err(p) => p.into_inner(),
        }
    }

    /// Enqueues (or re-prioritises) a Subscription that just changed; one waiting in backoff or in
    /// the backlog becomes active in the live lane now.
    pub fn add(&self, key: &str, priority: i32) {
        self.insert(key, priority, Lane::Live);
    }

    /// Enqueues a Subscription found when the scheduler starts: served after every live change.
    pub fn add_backlog(&self, key: &str, priority: i32) {
        self.insert(key, priority, Lane::Backlog);
    }

    fn insert(&self, key: &str, priority: i32, lane: Lane) {
        let mut s = self.lock();
        s.backoff.remove(key);
        let prio = -i64::from(priority);
        match s.index.get(key).copied() {
            // already queued in this lane or a better one, with this priority: keeps its place
            Some((l, p, _)) if p == prio && l <= lane => {}
            Some((l, p, seq)) => {
                s.active.remove(&(l, p, seq, key.to_string()));
                // promoted from the backlog: it joins the live lane at its end
                let (lane, seq) = if lane < l {
                    s.seq += 1;
                    (lane, s.seq)
                } else {
                    (l, seq)
                };
                s.active.insert((lane, prio, seq, key.to_string()));
                s.index.insert(key.to_string(), (lane, prio, seq));
            }
            None => {
                s.seq += 1;
                let seq = s.seq;
                s.active.insert((lane, prio, seq, key.to_string()));
                s.index.insert(key.to_string(), (lane, prio, seq));
            }
        }
        drop(s);
        self.notify.notify_one();
    }

    /// A failed attempt: retry after the key's backoff.
    pub fn add_backoff(&self, key: &str) -> Duration {
        let mut s = self.lock();
        let attempts = s.attempts.entry(key.to_string()).or_default();
        *attempts += 1;
        let delay = BACKOFF.after(*attempts);
        if !s.index.contains_key(key) {
            s.backoff.insert(key.to_string(), Instant::now() + delay);
        }
        drop(s);
        self.notify.notify_one();
        delay
    }

    /// Looks at `key` again after `delay` (a timer of the scheduler's own, e.g. a failover grace
    /// that ends), unless it is queued or due sooner anyway.
    pub fn add_after(&self, key: &str, delay: Duration) {
        let mut s = self.lock();
        if s.index.contains_key(key) {
            return;
        }
        let due = Instant::now() + delay;
        let entry = s.backoff.entry(key.to_string()).or_insert(due);
        if due < *entry {
            *entry = due;
        }
    }

    /// Success or deletion: no more backoff memory for the key.
    pub fn forget(&self, key: &str) {
        let mut s = self.lock();
        s.attempts.remove(key);
    }

    /// Removes a deleting Subscription from both queues.
    pub fn remove(&self, key: &str) {
        let mut s = self.lock();
        if let Some((l, p, seq)) = s.index.remove(key) {
            s.active.remove(&(l, p, seq, key.to_string()));
        }
        s.backoff.remove(key);
        s.attempts.remove(key);
    }

    /// The next key without waiting, moving expired backoffs to the active queue first.
    pub fn try_pop(&self) -> Option<String> {
        let mut s = self.lock();
        let now = Instant::now();
        let due: Vec<String> = s
            .backoff
            .iter()
            .filter(|(_, t)| **t <= now)
            .map(|(k, _)| k.clone())
            .collect();
        for key in due {
            s.backoff.remove(&key);
            if !s.index.contains_key(&key) {
                s.seq += 1;
                let seq = s.seq;
                s.active.insert((Lane::Live, 0, seq, key.clone()));
                s.index.insert(key, (Lane::Live, 0, seq));
            }
        }
        let first = s.active.iter().next().cloned()?;
        s.active.remove(&first);
        s.index.remove(&first.3);
        Some(first.3)
    }

    /// Waits for the next key (backoffs are re-checked at least every 100 ms).
    pub async fn pop(&self) -> String {
        loop {
            if let Some(k) = self.try_pop() {
                return k;
            }
            tokio::select! {
                _ = self.notify.notified() => {}
                _ = tokio::time::sleep(Duration::from_millis(100)) => {}
            }
        }
    }

    pub fn len(&self) -> usize {
        let s = self.lock();
        s.active.len() + s.backoff.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn higher_priority_first_then_fifo() {
        let q = SchedulingQueue::default();
        q.add("ns/a", 0);
        q.add("ns/b", 10);
        q.add("ns/c", 0);
        q.add("ns/a", 0); // already queued: keeps its place
        assert_eq!(q.try_pop().as_deref(), Some("ns/b"));
        assert_eq!(q.try_pop().as_deref(), Some("ns/a"));
        assert_eq!(q.try_pop().as_deref(), Some("ns/c"));
        assert_eq!(q.try_pop(), None);
    }

    #[test]
    fn live_changes_overtake_the_start_up_backlog() {
        let q = SchedulingQueue::default();
        q.add_backlog("ns/old1", 0);
        q.add_backlog("ns/old2", 100);
        q.add_backlog("ns/old3", 0);
        q.add("ns/new", 0);
        q.add("ns/old3", 0); // changed meanwhile: promoted to the live lane, not queued twice
        q.add_backlog("ns/new", 0); // a live key never drops back
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
    fn backoff_doubles_and_caps_and_add_skips_it() {
        let q = SchedulingQueue::default();
        assert_eq!(q.add_backoff("ns/a"), Duration::from_secs(1));
        assert_eq!(q.add_backoff("ns/a"), Duration::from_secs(2));
        assert_eq!(q.add_backoff("ns/a"), Duration::from_secs(4));
        assert_eq!(q.add_backoff("ns/a"), Duration::from_secs(8));
        assert_eq!(q.add_backoff("ns/a"), Duration::from_secs(10));
        assert_eq!(q.try_pop(), None, "still backing off");
        q.add("ns/a", 0);
        assert_eq!(
            q.try_pop().as_deref(),
            Some("ns/a"),
            "an event makes it active at once"
        );
        q.forget("ns/a");
        assert_eq!(q.add_backoff("ns/a"), Duration::from_secs(1));
        q.remove("ns/a");
        assert!(q.is_empty());
    }
}
