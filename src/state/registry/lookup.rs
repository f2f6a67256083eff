//! Lookups: the id index (tether's run ids and aliases, by a typed key scoped by owner) and the
//! chat lookups, each through the one ownership check ([`Registry::visible`]).

use std::sync::Arc;

use super::chat::Chat;
use super::Registry;
use crate::state::auth::{Auth, Owner};
use crate::state::run::Run;
use crate::vocab::{RunId, Scope};

/// A run found for a caller, with the scope of the chat it belongs to (what the id index
/// holds, and what [`Registry::by_id`] answers).
#[derive(Debug, Clone)]
pub struct Found {
    /// The scope (registry key) of the run's chat.
    pub scope: Scope,
    /// The run.
    pub run: Arc<Run>,
}

impl Registry {
    /// Indexes `run` (of the chat at `scope`) under `id` for `owner`: tether's run id, or an
    /// alias (the backend's id for the run). A later run with the same alias takes it over.
    /// Nothing happens unless `owner` recorded the run.
    pub fn index(&self, owner: &Owner, id: &RunId, scope: &Scope, run: &Arc<Run>) {
        if !run.is_owned_by(owner) {
            return;
        }
        let key = Auth::id_key(owner, id);
        run.add_index_key(&key);
        let found = Found {
            scope: scope.clone(),
            run: run.clone(),
        };
        self.ids.insert(key, found);
    }

    /// A run by tether's run id or an alias, with its chat's scope, if `owner` recorded it.
    pub fn by_id(&self, owner: &Owner, id: &RunId) -> Option<Found> {
        self.maybe_sweep();
        let entry = self.ids.get(&Auth::id_key(owner, id))?;
        let found = entry.value().clone();
        drop(entry);
        // A run the registry let go of is no longer reachable.
        self.chats.get(&found.scope).filter(|c| {
            c.runs()
                .any(|r| Arc::ptr_eq(r, &found.run) && Self::visible(c, r, owner))
        })?;
        Some(found)
    }

    /// The one ownership check of every lookup: `run` of `chat` is `owner`'s when both the chat
    /// and the run itself were recorded for `owner` (constant time in the owners' hashes).
    pub(super) fn visible(chat: &Chat, run: &Run, owner: &Owner) -> bool {
        chat.owner.is(owner) & run.is_owned_by(owner)
    }

    /// The chat's current run, if `owner` recorded it.
    pub fn current(&self, scope: &Scope, owner: &Owner) -> Option<Arc<Run>> {
        self.maybe_sweep();
        let chat = self.chats.get(scope)?;
        chat.current
            .clone()
            .filter(|r| Self::visible(&chat, r, owner))
    }

    /// A run of the chat by id (the current one or one it superseded), if `owner` recorded it.
    pub fn find(&self, scope: &Scope, owner: &Owner, run_id: &RunId) -> Option<Arc<Run>> {
        let chat = self.chats.get(scope)?;
        let found = chat
            .runs()
            .find(|r| r.id() == run_id && Self::visible(&chat, r, owner))
            .cloned();
        found
    }
}
