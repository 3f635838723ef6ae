//! The table of sessions the hub holds, by ID: agent sessions by cluster ID ([`super::server`]),
//! sessions other hub replicas opened to us by peer ID ([`super::peer`]). Several sessions may
//! share an ID (a reconnecting agent or peer briefly has two); each has a key of its own, and
//! each ID's list is kept oldest first so the choice among them is stable.

use std::collections::HashMap;

use super::session::SessionHandle;

#[derive(Default)]
pub struct SessionTable {
    next_key: u64,
    by_id: HashMap<String, Vec<(u64, SessionHandle)>>,
}

impl SessionTable {
    /// Records the session `spawn` starts (it gets the session's key, for its name) under `id`.
    pub fn open(
        &mut self,
        id: &str,
        spawn: impl FnOnce(u64) -> SessionHandle,
    ) -> (u64, SessionHandle) {
        self.next_key += 1;
        let key = self.next_key;
        let handle = spawn(key);
        self.by_id
            .entry(id.to_owned())
            .or_default()
            .push((key, handle.clone()));
        (key, handle)
    }

    /// Forgets the session `key` of `id` (an ID with no session left is forgotten too).
    pub fn remove(&mut self, id: &str, key: u64) {
        if let Some(list) = self.by_id.get_mut(id) {
            list.retain(|(k, _)| *k != key);
            if list.is_empty() {
                self.by_id.remove(id);
            }
        }
    }

    /// The sessions of `id`, oldest first, with their keys.
    pub fn of(&self, id: &str) -> &[(u64, SessionHandle)] {
        self.by_id.get(id).map_or(&[], Vec::as_slice)
    }

    /// Every ID with its sessions, in no order.
    pub fn iter(&self) -> impl Iterator<Item = (&String, &[(u64, SessionHandle)])> {
        self.by_id.iter().map(|(id, list)| (id, list.as_slice()))
    }

    /// IDs with at least one session not closed, sorted.
    pub fn connected(&self) -> Vec<String> {
        let mut ids: Vec<String> = self
            .iter()
            .filter(|(_, list)| list.iter().any(|(_, h)| !h.is_closed()))
            .map(|(id, _)| id.clone())
            .collect();
        ids.sort();
        ids
    }

    /// Closes every session of `id`.
    pub fn close_all(&self, id: &str) {
        for (_, handle) in self.of(id) {
            handle.close();
        }
    }
}
