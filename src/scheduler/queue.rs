//! The scheduling queue (docs/spec/scheduler.md §2): an active queue ordered by
//! `spec.priority` (higher first) then enqueue time, and a backoff queue for failed attempts
//! (1 s doubling per attempt, capped at 10 s). Adding a key that waits in backoff moves it to the
//! active queue at once; deleting Subscriptions are forgotten.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio::sync::Notify;

const INITIAL_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(10);

#[derive(Default)]
struct State {
    /// (-priority, enqueue sequence, key): the first element is popped next.
    active: BTreeSet<(i64, u64, String)>,
    /// key -> its entry in `active`.
    index: HashMap<String, (i64, u64)>,
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

    /// Enqueues (or re-prioritises) a Subscription; one waiting in backoff becomes active now.
    pub fn add(&self, key: &str, priority: i32) {
        let mut s = self.lock();
        s.backoff.remove(key);
        let prio = -i64::from(priority);
        match s.index.get(key).copied() {
            Some((p, seq)) if p == prio => {
                let _ = seq;
            }
            Some((p, seq)) => {
                s.active.remove(&(p, seq, key.to_string()));
                s.active.insert((prio, seq, key.to_string()));
                s.index.insert(key.to_string(), (prio, seq));
            }
            None => {
                s.seq += 1;
                let seq = s.seq;
                s.active.insert((prio, seq, key.to_string()));
                s.index.insert(key.to_string(), (prio, seq));
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
        let delay = INITIAL_BACKOFF
            .saturating_mul(1 << (*attempts - 1).min(8))
            .min(MAX_BACKOFF);
        if !s.index.contains_key(key) {
            s.backoff.insert(key.to_string(), Instant::now() + delay);
        }
        drop(s);
        self.notify.notify_one();
        delay
    }

    /// Success or deletion: no more backoff memory for the key.
    pub fn forget(&self, key: &str) {
        let mut s = self.lock();
        s.attempts.remove(key);
    }

    /// Removes a deleting Subscription from both queues.
    pub fn remove(&self, key: &str) {
        let mut s = self.lock();
        if let Some((p, seq)) = s.index.remove(key) {
            s.active.remove(&(p, seq, key.to_string()));
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
                s.active.insert((0, seq, key.clone()));
                s.index.insert(key, (0, seq));
            }
        }
        let first = s.active.iter().next().cloned()?;
        s.active.remove(&first);
        s.index.remove(&first.2);
        Some(first.2)
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
