//! Kubernetes Events about Clusternet objects, so a user's mistake shows in `kubectl describe`.
//!
//! Recording never blocks the caller (as client-go's broadcaster): events go into a bounded queue
//! that one background task drains; kube's recorder folds repeats of the same event into one with
//! a growing count. A full queue drops the event (counted in
//! `clusternet_events_dropped_total`) rather than slowing a reconciler down.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Resource;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use tokio::sync::mpsc;
use tracing::debug;

const QUEUE: usize = 1024;

#[derive(Clone)]
pub struct Events {
    queue: mpsc::Sender<(ObjectReference, Event)>,
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

/// `<reason>-<digest of note>`, within the API server's 128 characters.
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

impl Events {
    /// A recorder reporting as `component`; its writer task lives as long as any clone does.
    pub fn new(client: kube::Client, component: &str) -> Self {
        let reporter = Reporter {
            controller: component.to_string(),
            instance: std::env::var("HOSTNAME").ok(),
        };
        let recorder = Recorder::new(client, reporter);
        let (queue, mut rx) = mpsc::channel::<(ObjectReference, Event)>(QUEUE);
        tokio::spawn(async move {
            while let Some((reference, ev)) = rx.recv().await {
                if let Err(e) = recorder.publish(&ev, &reference).await {
                    debug!(error = %e, reason = %ev.reason, "could not record an event");
                }
            }
        });
        Events { queue }
    }

    fn publish<K: Resource<DynamicType = ()>>(
        &self,
        obj: &K,
        type_: EventType,
        reason: &str,
        note: &str,
    ) {
        self.send(obj.object_ref(&()), type_, reason, note)
    }

    fn send(&self, reference: ObjectReference, type_: EventType, reason: &str, note: &str) {
        let ev = Event {
            type_,
            reason: reason.to_string(),
            note: Some(clip(note)),
            // kube's recorder folds events by (reason, action, object), not by note: an action
            // that carries the note's digest keeps different news apart (a second drift of the
            // same object is its own event) while repeats of one note still fold into a count
            action: action_for(reason, note),
            secondary: None,
        };
        if self.queue.try_send((reference, ev)).is_err() {
            metrics::counter!("clusternet_events_dropped_total").increment(1);
        }
    }

    pub fn warn<K: Resource<DynamicType = ()>>(&self, obj: &K, reason: &str, note: &str) {
        self.publish(obj, EventType::Warning, reason, note)
    }

    pub fn normal<K: Resource<DynamicType = ()>>(&self, obj: &K, reason: &str, note: &str) {
        self.publish(obj, EventType::Normal, reason, note)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn long_notes_are_clipped_on_a_char_boundary() {
        let long = "é".repeat(700);
        let c = super::clip(&long);
        assert!(c.len() <= 1024 && c.ends_with(" ..."));
        assert_eq!(super::clip("short"), "short");
    }
}
