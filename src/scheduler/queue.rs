//! The scheduling queue (docs/spec/scheduler.md §2): an active queue ordered by
//! `spec.priority` (higher first) then enqueue time, and a backoff queue for failed attempts
//! (1 s doubling per attempt, capped at 10 s). Adding a key that waits in backoff moves it to the
//! active queue at once; deleting Subscriptions are forgotten.
//!
//! Two lanes: what users and clusters just changed goes before the backlog the scheduler lists
//! when it starts (or takes over leadership), so a new Subscription is served at once even while
//! 10,000 existing ones are re-checked behind it.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use crate::runtime::backoff::Exponential;
use crate::runtime::queue::{Lane, WorkQueue};

/// A failed attempt waits 1 s, doubling per attempt, up to 10 s (upstream's pod backoff).
const BACKOFF: Exponential = Exponential::new(Duration::from_secs(1), Duration::from_secs(10));

/// The kit's [`WorkQueue`] ordered by the Subscriptions' priorities, with upstream's backoff of
/// failed attempts. The scheduler takes one key at a time, so a key is done as soon as it is
/// taken (the binder queues it again when it must).
pub struct SchedulingQueue {
    queue: WorkQueue,
    /// key -> failed attempts so far (reset by `forget`).
    attempts: Mutex<HashMap<String, u32>>,
}

impl Default for SchedulingQueue {
    fn default() -> Self {
        SchedulingQueue {
            queue: WorkQueue::new(
                "scheduler",
                usize::MAX,
                "clusternet_controller_backlog_objects",
            ),
            attempts: Mutex::default(),
        }
    }
}

impl SchedulingQueue {
    /// Enqueues (or re-prioritises) a Subscription that just changed; one waiting in backoff or in
    /// the backlog becomes active in the live lane now.
    pub fn add(&self, key: &str, priority: i32) {
        self.queue.add(key, Lane::Live, i64::from(priority));
    }

    /// Enqueues a Subscription found when the scheduler starts: served after every live change.
    pub fn add_backlog(&self, key: &str, priority: i32) {
        self.queue.add(key, Lane::Backlog, i64::from(priority));
    }

    /// A failed attempt: retry after the key's backoff.
    pub fn add_backoff(&self, key: &str) -> Duration {
        let delay = {
            let mut attempts = self.attempts.lock().unwrap_or_else(|p| p.into_inner());
            let n = attempts.entry(key.to_string()).or_default();
            *n = n.saturating_add(1);
            BACKOFF.after(*n)
        };
        self.queue.retry_after(key, delay);
        delay
    }

    /// Looks at `key` again after `delay` (a timer of the scheduler's own, e.g. a failover grace
    /// that ends), unless it is queued or due sooner anyway.
    pub fn add_after(&self, key: &str, delay: Duration) {
        self.queue.add_after(key, delay);
    }

    /// Success or deletion: no more backoff memory for the key.
    pub fn forget(&self, key: &str) {
        self.attempts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(key);
    }

    /// Removes a deleting Subscription from both queues.
    pub fn remove(&self, key: &str) {
        self.queue.remove(key);
        self.forget(key);
    }

    /// The next key without waiting.
    pub fn try_pop(&self) -> Option<String> {
        let key = self.queue.try_pop()?;
        self.queue.done(&key);
        Some(key)
    }

    /// Waits for the next key (the queue is never shut down: the scheduler stops on its token).
    pub async fn pop(&self) -> String {
        match self.queue.pop().await {
            Some(key) => {
                self.queue.done(&key);
                key
            }
            None => std::future::pending().await,
        }
    }

    pub fn len(&self) -> usize {
        self.queue.len()
    }

    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
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
