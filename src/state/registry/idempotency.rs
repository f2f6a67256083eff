//! Idempotency keys of record requests: a retried turn (the same key, from the same owner, for
//! the same chat) joins the run its first request started instead of reaching the backend
//! again. A key names its run and the hash of its request body; it is forgotten with the run
//! (a key whose run is neither held nor pending names nothing), and a chat keeps its
//! [`MAX_KEYS`] newest keys.

use std::sync::Arc;

use super::chat::{Chat, Key};
use super::{Admission, Busy, Pending, Registry};
use crate::state::auth::Owner;
use crate::state::run::Run;
use crate::vocab::{RunId, Scope};

/// Keys a chat remembers at most (the oldest is dropped first).
pub const MAX_KEYS: usize = 64;

/// A record request with an idempotency key, as the registry found its key.
#[derive(Debug)]
pub enum Keyed {
    /// A new key: the request is registered (as [`Registry::register`]) and goes to the backend.
    New(Pending),
    /// The key's run is held (active or retained): the request is answered from it.
    Join(Arc<Run>),
    /// The key's request is still waiting for the backend's answer: wait for its run.
    Wait(RunId),
    /// The key was used with another request body (`422 idempotency_key_reused`).
    Reused(RunId),
}

/// The hash a key's request body is compared by.
pub fn body_hash(body: &[u8]) -> [u8; 32] {
    *blake3::hash(body).as_bytes()
}

impl Registry {
    /// Registers a record request carrying idempotency key `key` (its body hashed by
    /// [`body_hash`]) for run `run_id`, unless the key already names a run of the chat.
    pub fn register_keyed(
        self: &Arc<Self>,
        scope: &Scope,
        owner: Owner,
        run_id: &RunId,
        admit: Admission,
        key: &str,
        body: [u8; 32],
    ) -> Result<Keyed, Busy> {
        self.maybe_sweep();
        let mut chat = self
            .chats
            .entry(scope.clone())
            .or_insert_with(|| Chat::new(owner));
        if let Some(found) = known(&chat, key, &body, &owner) {
            return Ok(found);
        }
        Self::admit(&mut chat, run_id, admit)?;
        chat.keys.retain(|k| k.key != key);
        chat.keys.push_back(Key {
            key: key.to_string(),
            run_id: run_id.clone(),
            body,
        });
        if chat.keys.len() > MAX_KEYS {
            chat.keys.pop_front();
        }
        drop(chat);
        Ok(Keyed::New(self.pending(scope, run_id, false)))
    }

    /// What `key` names in the chat now, without registering anything: `None` when it names
    /// nothing held or pending.
    pub fn keyed(&self, scope: &Scope, owner: &Owner, key: &str, body: [u8; 32]) -> Option<Keyed> {
        let chat = self.chats.get(scope)?;
        known(&chat, key, &body, owner)
    }
}

/// The run (or pending request) `key` names in `chat`, if any is still there.
fn known(chat: &Chat, key: &str, body: &[u8; 32], owner: &Owner) -> Option<Keyed> {
    if !chat.owner.is(owner) {
        return None;
    }
    let k = chat.keys.iter().find(|k| k.key == key)?;
    let held = chat.runs().find(|r| r.id() == &k.run_id);
    let pending = chat.pending.contains(&k.run_id);
    if held.is_none() && !pending {
        return None;
    }
    if &k.body != body {
        return Some(Keyed::Reused(k.run_id.clone()));
    }
    Some(match held {
        Some(run) => Keyed::Join(run.clone()),
        None => Keyed::Wait(k.run_id.clone()),
    })
}

#[cfg(test)]
mod tests;
