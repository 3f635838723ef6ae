//! Kubernetes Events about Clusternet objects, so a user's mistake shows in `kubectl describe`.

use kube::Resource;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use tracing::debug;

#[derive(Clone)]
pub struct Events {
    recorder: Recorder,
}

impl Events {
    pub fn new(client: kube::Client, component: &str) -> Self {
        let reporter = Reporter {
            controller: component.to_string(),
            instance: std::env::var("HOSTNAME").ok(),
        };
        Events {
            recorder: Recorder::new(client, reporter),
        }
    }

    async fn publish<K: Resource<DynamicType = ()>>(
        &self,
        obj: &K,
        type_: EventType,
        reason: &str,
        note: &str,
        action: &str,
    ) {
        let mut note = note.to_string();
        if note.len() > 1024 {
            // the API server refuses longer notes
            let mut cut = 1020;
            while !note.is_char_boundary(cut) {
                cut -= 1;
            }
            note.truncate(cut);
            note.push_str(" ...");
        }
        let ev = Event {
            type_,
            reason: reason.to_string(),
            note: Some(note),
            action: action.to_string(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&ev, &obj.object_ref(&())).await {
            debug!(error = %e, reason, "could not record an event");
        }
    }

    pub async fn warn<K: Resource<DynamicType = ()>>(&self, obj: &K, reason: &str, note: &str) {
        self.publish(obj, EventType::Warning, reason, note, reason)
            .await
    }

    pub async fn normal<K: Resource<DynamicType = ()>>(&self, obj: &K, reason: &str, note: &str) {
        self.publish(obj, EventType::Normal, reason, note, reason)
            .await
    }
}
