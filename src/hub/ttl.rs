//! A small time-bounded memo for delegated decisions (TokenReviews, SubjectAccessReviews), so a
//! busy client does not turn every request into a round trip to the parent.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Entries older than the TTL are ignored; the map is emptied when it grows past `max`.
pub struct TtlCache<K, V> {
    ttl: Duration,
    max: usize,
    entries: Mutex<HashMap<K, (Instant, V)>>,
}

impl<K: Eq + Hash, V: Clone> TtlCache<K, V> {
    pub fn new(ttl: Duration, max: usize) -> Self {
        TtlCache {
            ttl,
            max,
            entries: Mutex::new(HashMap::new()),
        }
    }

    pub fn get(&self, key: &K) -> Option<V> {
        let entries = self.entries.lock().ok()?;
        entries
            .get(key)
            .filter(|(at, _)| at.elapsed() < self.ttl)
            .map(|(_, v)| v.clone())
    }

    pub fn insert(&self, key: K, value: V) {
        if let Ok(mut entries) = self.entries.lock() {
            if entries.len() >= self.max {
                entries.clear();
            }
            entries.insert(key, (Instant::now(), value));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_expire_and_the_map_stays_bounded() {
        let c = TtlCache::new(Duration::from_millis(30), 2);
        c.insert("a", 1);
        assert_eq!(c.get(&"a"), Some(1));
        c.insert("b", 2);
        c.insert("c", 3);
        assert_eq!(c.get(&"a"), None, "cleared when full");
        assert_eq!(c.get(&"c"), Some(3));
        std::thread::sleep(Duration::from_millis(40));
        assert_eq!(c.get(&"c"), None, "expired");
    }
}
