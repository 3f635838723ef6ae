//! Kubernetes Events about Clusternet objects, so a user's mistake shows in `kubectl describe`.
//!
//! Recording never blocks the caller and never holds up the recorder's other events (as
//! client-go's broadcaster and correlator): an event goes into a table of pending events; while it
//! waits there, repeats of it (same object, type, reason and note) only raise its count, so a
//! burst of identical events is written once. Like client-go's aggregator, more than
//! [`MAX_SIMILAR`] different notes of one reason about one object within [`SIMILAR_WINDOW`] (a
//! Subscription's `BaseCreated` for each of 1,000 clusters) fold into one event "(combined from
//! similar events): ..." that counts them. [`WRITERS`] tasks write the pending events side by
//! side, in the order they first came; an event already written (within [`SERIES_TTL`]) is
//! counted up with a patch of its `series` instead of being created again, as kube's recorder
//! and client-go do. More than [`PENDING`] distinct events waiting drops the newest (counted in
//! `clusternet_events_dropped_total`) rather than slowing a reconciler down.
//!
//! Give it a client of its own ([`super::Runtime::events_client`]): upstream's components record
//! through a clientset with its own rate limiter, so events never take the tokens of the writes
//! that do the work.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event as K8sEvent, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Resource;
use kube::api::{Api, Patch, PatchParams, PostParams};
use tokio::sync::Notify;
use tracing::debug;

/// Distinct events that may wait to be written.
const PENDING: usize = 1024;
/// Events written at once.
const WRITERS: usize = 4;
/// How long a written event is counted up instead of created again (kube's recorder: 6 minutes).
const SERIES_TTL: Duration = Duration::from_secs(6 * 60);
/// Different notes of one reason about one object written one by one (client-go's maxEvents).
const MAX_SIMILAR: usize = 10;
/// How long notes count as similar ones (client-go's maxIntervalInSeconds).
const SIMILAR_WINDOW: Duration = Duration::from_secs(600);
/// The note of the event similar ones fold into (client-go's words).
const COMBINED: &str = "(combined from similar events)";

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Kind {
    Normal,
    Warning,
}

/// What makes two events the same: the object, type, reason and note.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Key {
    object: (String, String, String, String, String),
    kind: Kind,
    reason: String,
    note: String,
}

impl Key {
    fn new(reference: &ObjectReference, kind: Kind, reason: &str, note: &str) -> Key {
        let s = |o: &Option<String>| o.clone().unwrap_or_default();
        Key {
            object: (
                s(&reference.api_version),
                s(&reference.kind),
                s(&reference.namespace),
                s(&reference.name),
                s(&reference.uid),
            ),
            kind,
            reason: reason.to_string(),
            note: clip(note),
        }
    }
}

struct Waiting {
    reference: ObjectReference,
    count: i32,
    /// The note to write: the key's, or for similar events folded together the first of them.
    note: String,
}

/// Notes seen of one reason about one object lately (their fingerprints: at most
/// [`MAX_SIMILAR`]).
struct Similar {
    notes: Vec<u64>,
    last: Instant,
}

/// An event as written: its name (its namespace is its object's), how often it was seen, when
/// last.
struct Written {
    name: Box<str>,
    count: i32,
    at: Instant,
}

/// The event an occurrence continues: its name and count so far.
type Earlier = (String, i32);

/// The recorder's memory of what it wrote is kept by [`Table::fingerprint`] rather than by
/// [`Key`]: a burst leaves thousands of series behind for [`SERIES_TTL`], and a key's seven
/// strings per series were most of what a burst of 1,000 Subscriptions left in memory (about a
/// kilobyte each, with the similar-notes entry). Two keys share a 64-bit fingerprint with odds of
/// about 1 in 10^12 at 10,000 series; such a pair would only count into one series.
#[derive(Default)]
struct Table {
    /// Pending events, in the order they first came.
    order: VecDeque<Key>,
    waiting: HashMap<Key, Waiting>,
    written: HashMap<u64, Written>,
    /// Being written now: a repeat waits until that write is done, so it continues its series.
    in_flight: std::collections::HashSet<Key>,
    /// (object, type, reason) -> its notes seen within [`SIMILAR_WINDOW`].
    similar: HashMap<u64, Similar>,
    last_gc: Option<Instant>,
    hasher: std::hash::RandomState,
}

impl Table {
    fn fingerprint(&self, key: &impl std::hash::Hash) -> u64 {
        std::hash::BuildHasher::hash_one(&self.hasher, key)
    }

    /// Remembers that `key` was written as `written`.
    fn wrote(&mut self, key: &Key, written: Written) {
        let fp = self.fingerprint(key);
        self.written.insert(fp, written);
    }

    /// Adds one occurrence; false when it had to be dropped.
    fn add(&mut self, key: Key, reference: ObjectReference) -> bool {
        let (key, note) = self.fold_similar(key, Instant::now());
        if let Some(w) = self.waiting.get_mut(&key) {
            w.count = w.count.saturating_add(1);
            metrics::counter!("clusternet_events_aggregated_total").increment(1);
            return true;
        }
        if self.waiting.len() >= PENDING {
            return false;
        }
        self.order.push_back(key.clone());
        self.waiting.insert(
            key,
            Waiting {
                reference,
                count: 1,
                note,
            },
        );
        true
    }

    /// The key an occurrence counts under, and the note to write for it: its own, or once its
    /// object had [`MAX_SIMILAR`] other notes of the same reason lately, the combined event's.
    fn fold_similar(&mut self, key: Key, now: Instant) -> (Key, String) {
        let group = Key {
            note: String::new(),
            ..key.clone()
        };
        let (group_fp, note_fp) = (self.fingerprint(&group), self.fingerprint(&key.note));
        let similar = self.similar.entry(group_fp).or_insert(Similar {
            notes: Vec::new(),
            last: now,
        });
        if now.duration_since(similar.last) > SIMILAR_WINDOW {
            similar.notes.clear();
        }
        similar.last = now;
        let seen = similar.notes.contains(&note_fp);
        if seen || similar.notes.len() < MAX_SIMILAR {
            if !seen {
                similar.notes.push(note_fp);
            }
            let note = key.note.clone();
            return (key, note);
        }
        let note = clip(&format!("{COMBINED}: {}", key.note));
        (
            Key {
                note: COMBINED.to_string(),
                ..group
            },
            note,
        )
    }

    /// The next pending event, with the earlier write it continues (if any).
    fn take(&mut self, now: Instant) -> Option<(Key, Waiting, Option<Earlier>)> {
        if self
            .last_gc
            .is_none_or(|t| now.duration_since(t) > Duration::from_secs(30))
        {
            self.written
                .retain(|_, w| now.duration_since(w.at) < SERIES_TTL);
            self.similar
                .retain(|_, s| now.duration_since(s.last) < SIMILAR_WINDOW);
            self.last_gc = Some(now);
        }
        let at = self
            .order
            .iter()
            .position(|k| !self.in_flight.contains(k))?;
        let key = self.order.remove(at)?;
        let waiting = self.waiting.remove(&key)?;
        self.in_flight.insert(key.clone());
        let earlier = self
            .written
            .get(&self.fingerprint(&key))
            .filter(|w| now.duration_since(w.at) < SERIES_TTL)
            .map(|w| (w.name.to_string(), w.count));
        Some((key, waiting, earlier))
    }
}

#[derive(Clone)]
pub struct Events {
    table: Arc<Mutex<Table>>,
    wake: Arc<Notify>,
}

/// The API server refuses notes over 1 KiB.
fn clip(note: &str) -> String {
    let mut note = note.to_string();
    if note.len() > 1024 {
        let mut cut = 1020;
        while !note.is_char_boundary(cut) {
            cut -= 1;
        }
        note.truncate(cut);
        note.push_str(" ...");
    }
    note
}

/// `<reason>-<digest of note>`, within the API server's 128 characters: different news about one
/// object are different events (a second drift of the same object is its own event), repeats of
/// one note fold into a count.
fn action_for(reason: &str, note: &str) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, note.as_bytes());
    let hex: String = digest.as_ref()[..4]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let mut reason = reason.to_string();
    reason.truncate(110);
    format!("{reason}-{hex}")
}

/// Who reports: the component and this instance of it.
struct Reporter {
    controller: String,
    instance: String,
}

/// The event to create for `key` with `note`, seen `count` times.
fn new_event(
    key: &Key,
    note: &str,
    reporter: &Reporter,
    reference: &ObjectReference,
    count: i32,
) -> K8sEvent {
    let now = Timestamp::now();
    let name = reference.name.as_deref().unwrap_or(&reporter.controller);
    K8sEvent {
        action: Some(action_for(&key.reason, &key.note)),
        reason: Some(key.reason.clone()),
        event_time: Some(MicroTime(now)),
        regarding: Some(reference.clone()),
        note: Some(note.to_string()),
        metadata: ObjectMeta {
            namespace: Some(event_namespace(reference)),
            name: Some(format!("{name}.{:x}", now.as_nanosecond())),
            ..Default::default()
        },
        reporting_controller: Some(reporter.controller.clone()),
        reporting_instance: Some(reporter.instance.clone()),
        series: (count > 1).then_some(EventSeries {
            count,
            last_observed_time: MicroTime(now),
        }),
        type_: Some(match key.kind {
            Kind::Normal => "Normal".into(),
            Kind::Warning => "Warning".into(),
        }),
        ..Default::default()
    }
}

/// Cluster-scoped objects' events live in `default`, as kube's and client-go's recorders put them.
fn event_namespace(reference: &ObjectReference) -> String {
    reference
        .namespace
        .clone()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "default".to_string())
}

/// Writes one pending event: a patch of the series of the earlier one, or a new event (also when
/// the earlier one is gone). Returns what was written.
async fn write(
    client: &kube::Client,
    reporter: &Reporter,
    key: &Key,
    waiting: &Waiting,
    earlier: Option<Earlier>,
) -> Result<Written, kube::Error> {
    let namespace = event_namespace(&waiting.reference);
    if let Some((name, count)) = earlier {
        let count = count.saturating_add(waiting.count);
        let api: Api<K8sEvent> = Api::namespaced(client.clone(), &namespace);
        let patch = serde_json::json!({"series": {
            "count": count, "lastObservedTime": MicroTime(Timestamp::now())}});
        match api
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {
                return Ok(Written {
                    name: name.into(),
                    count,
                    at: Instant::now(),
                });
            }
            // gone (an event's TTL is an hour): create it again
            Err(e) if super::api_code(&e) == Some(404) => {}
            Err(e) => return Err(e),
        }
    }
    let event = new_event(
        key,
        &waiting.note,
        reporter,
        &waiting.reference,
        waiting.count,
    );
    let api: Api<K8sEvent> = Api::namespaced(client.clone(), &namespace);
    let created = api.create(&PostParams::default(), &event).await?;
    Ok(Written {
        name: created.metadata.name.unwrap_or_default().into(),
        count: waiting.count.max(1),
        at: Instant::now(),
    })
}

impl Events {
    /// A recorder reporting as `component`; its writer tasks live as long as any clone does.
    pub fn new(client: kube::Client, component: &str) -> Self {
        let reporter = Arc::new(Reporter {
            controller: component.to_string(),
            instance: std::env::var("HOSTNAME").unwrap_or_else(|_| component.to_string()),
        });
        let table = Arc::new(Mutex::new(Table::default()));
        let wake = Arc::new(Notify::new());
        for _ in 0..WRITERS {
            let (client, reporter) = (client.clone(), reporter.clone());
            let weak = Arc::downgrade(&table);
            let wake = wake.clone();
            tokio::spawn(async move {
                loop {
                    let Some(table) = weak.upgrade() else { return };
                    let next = lock(&table).take(Instant::now());
                    let Some((key, waiting, earlier)) = next else {
                        drop(table);
                        // the recorder may be gone meanwhile: look again now and then
                        let _ = tokio::time::timeout(Duration::from_secs(5), wake.notified()).await;
                        continue;
                    };
                    let written = write(&client, &reporter, &key, &waiting, earlier).await;
                    metrics::gauge!("clusternet_events_pending").decrement(1.0);
                    let mut t = lock(&table);
                    t.in_flight.remove(&key);
                    match written {
                        Ok(w) => t.wrote(&key, w),
                        Err(e) => {
                            debug!(error = %e, reason = %key.reason, "could not record an event")
                        }
                    }
                    // a repeat that waited for this write may go now
                    if !t.waiting.is_empty() {
                        wake.notify_one();
                    }
                }
            });
        }
        Events { table, wake }
    }

    fn send(&self, reference: ObjectReference, kind: Kind, reason: &str, note: &str) {
        let key = Key::new(&reference, kind, reason, note);
        let mut table = lock(&self.table);
        let before = table.waiting.len();
        let added = table.add(key, reference);
        // an event to write (not a repeat folded into one already waiting): pending until written
        if table.waiting.len() > before {
            metrics::gauge!("clusternet_events_pending").increment(1.0);
        }
        drop(table);
        if added {
            self.wake.notify_one();
        } else {
            metrics::counter!("clusternet_events_dropped_total").increment(1);
        }
    }

    pub fn warn<K: Resource<DynamicType = ()>>(&self, obj: &K, reason: &str, note: &str) {
        self.send(obj.object_ref(&()), Kind::Warning, reason, note)
    }

    pub fn normal<K: Resource<DynamicType = ()>>(&self, obj: &K, reason: &str, note: &str) {
        self.send(obj.object_ref(&()), Kind::Normal, reason, note)
    }
}

fn lock(table: &Mutex<Table>) -> std::sync::MutexGuard<'_, Table> {
    table.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference(name: &str) -> ObjectReference {
        ObjectReference {
            api_version: Some("apps.clusternet.io/v1alpha1".into()),
            kind: Some("Subscription".into()),
            namespace: Some("default".into()),
            name: Some(name.into()),
            uid: Some(format!("uid-{name}")),
            ..Default::default()
        }
    }

    #[test]
    fn long_notes_are_clipped_on_a_char_boundary() {
        let long = "é".repeat(700);
        let c = clip(&long);
        assert!(c.len() <= 1024 && c.ends_with(" ..."));
        assert_eq!(clip("short"), "short");
    }

    #[test]
    fn repeats_while_pending_fold_into_one_event_with_a_count() {
        let mut t = Table::default();
        let key = |n: &str, note: &str| Key::new(&reference(n), Kind::Normal, "Scheduled", note);
        for _ in 0..5 {
            assert!(t.add(key("a", "bound to c1"), reference("a")));
        }
        assert!(t.add(key("a", "bound to c2"), reference("a")), "other news");
        assert!(
            t.add(key("b", "bound to c1"), reference("b")),
            "another object"
        );
        let now = Instant::now();
        let (k, w, earlier) = t.take(now).expect("the first event");
        assert_eq!((k.note.as_str(), w.count), ("bound to c1", 5));
        assert!(earlier.is_none());
        // a repeat while the first is being written waits for that write
        assert!(t.add(k.clone(), reference("a")));
        assert_eq!(
            t.take(now).map(|(k, ..)| k.note),
            Some("bound to c2".into())
        );
        assert_eq!(t.take(now).map(|(k, ..)| k.object.3), Some("b".into()));
        assert!(t.take(now).is_none(), "the repeat waits");
        // written: the repeat continues its series
        t.in_flight.remove(&k);
        t.wrote(
            &k,
            Written {
                name: "a.1".into(),
                count: 5,
                at: now,
            },
        );
        let (_, w, earlier) = t.take(now).expect("the repeat");
        assert_eq!(w.count, 1);
        assert_eq!(earlier, Some(("a.1".into(), 5)));
        assert!(t.take(now).is_none());
        // past the series' time an event starts anew
        t.in_flight.clear();
        t.add(k.clone(), reference("a"));
        let later = now + SERIES_TTL + Duration::from_secs(1);
        assert!(t.take(later).is_some_and(|(_, _, e)| e.is_none()));
    }

    #[test]
    fn many_different_notes_of_one_reason_fold_into_a_combined_event() {
        let mut t = Table::default();
        let r = reference("web");
        for c in 0..25 {
            let note = format!("Base clusternet-{c}/web is created successfully");
            assert!(t.add(Key::new(&r, Kind::Normal, "BaseCreated", &note), r.clone()));
        }
        // another reason and another object are counted on their own
        assert!(t.add(Key::new(&r, Kind::Normal, "Scheduled", "bound"), r.clone()));
        let other = reference("api");
        assert!(t.add(
            Key::new(&other, Kind::Normal, "BaseCreated", "x"),
            other.clone()
        ));
        let now = Instant::now();
        let mut taken = Vec::new();
        while let Some((k, w, _)) = t.take(now) {
            taken.push((k.object.3, k.reason, w.note, w.count));
        }
        assert_eq!(taken.len(), MAX_SIMILAR + 3, "{taken:?}");
        let combined = taken
            .iter()
            .find(|(_, _, note, _)| note.starts_with(COMBINED))
            .expect("a combined event");
        assert_eq!(combined.3, 25 - MAX_SIMILAR as i32);
        assert!(
            combined
                .2
                .ends_with("clusternet-10/web is created successfully")
        );
        // a note already written one by one still counts as itself
        let again = Key::new(
            &r,
            Kind::Normal,
            "BaseCreated",
            "Base clusternet-3/web is created successfully",
        );
        assert!(t.add(again.clone(), r.clone()));
        t.in_flight.clear();
        assert_eq!(t.take(now).map(|(k, ..)| k), Some(again));
    }

    #[test]
    fn a_full_table_drops_new_events_but_still_counts_waiting_ones() {
        let mut t = Table::default();
        for i in 0..PENDING {
            let r = reference(&format!("s{i}"));
            assert!(t.add(Key::new(&r, Kind::Warning, "Failed", "x"), r));
        }
        let r = reference("one-more");
        assert!(!t.add(Key::new(&r, Kind::Warning, "Failed", "x"), r));
        let r = reference("s0");
        assert!(t.add(Key::new(&r, Kind::Warning, "Failed", "x"), r));
    }

    #[test]
    fn events_carry_a_series_only_when_seen_more_than_once() {
        let r = reference("a");
        let key = Key::new(&r, Kind::Warning, "FailedScheduling", "no cluster");
        let reporter = Reporter {
            controller: "clusternet-scheduler".into(),
            instance: "x".into(),
        };
        let once = new_event(&key, &key.note, &reporter, &r, 1);
        assert!(once.series.is_none());
        assert_eq!(once.type_.as_deref(), Some("Warning"));
        assert_eq!(once.metadata.namespace.as_deref(), Some("default"));
        assert!(
            once.action
                .is_some_and(|a| a.starts_with("FailedScheduling-"))
        );
        let thrice = new_event(&key, &key.note, &reporter, &r, 3);
        assert_eq!(thrice.series.map(|s| s.count), Some(3));
        let mut cluster_scoped = r.clone();
        cluster_scoped.namespace = None;
        assert_eq!(event_namespace(&cluster_scoped), "default");
    }
}
