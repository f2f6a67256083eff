//! Idempotent stops: the `cancel_request_id`s a chat remembers and the run each stopped.

use super::Registry;
use crate::state::auth::Owner;
use crate::vocab::{RunId, Scope};

/// `cancel_request_id`s remembered per chat for idempotent stops.
pub(super) const MAX_CANCELS: usize = 16;

/// A stop a chat remembers: its `cancel_request_id` and the run it stopped.
#[derive(Debug)]
pub(super) struct Cancel {
    id: String,
    run: RunId,
}

impl Registry {
    /// Remembers that `cancel_id` stopped `run_id`, for idempotent retries.
    pub fn remember_cancel(&self, scope: &Scope, cancel_id: &str, run_id: &RunId) {
        if let Some(mut chat) = self.chats.get_mut(scope) {
            if chat.cancels.iter().all(|c| c.id != cancel_id) {
                chat.cancels.push_back(Cancel {
                    id: cancel_id.to_string(),
                    run: run_id.clone(),
                });
                if chat.cancels.len() > MAX_CANCELS {
                    chat.cancels.pop_front();
                }
            }
        }
    }

    /// The run an earlier stop with `cancel_id` named.
    pub fn cancelled_run(&self, scope: &Scope, owner: &Owner, cancel_id: &str) -> Option<RunId> {
        let chat = self.chats.get(scope).filter(|c| c.owner.is(owner))?;
        let found = chat
            .cancels
            .iter()
            .find(|c| c.id == cancel_id)
            .map(|c| c.run.clone());
        found
    }
}
