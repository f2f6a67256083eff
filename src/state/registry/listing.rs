//! What the admin API reads of the registry: every run held here with its chat's scope and
//! owner, and erasing every chat of one owner.

use std::sync::Arc;

use super::Registry;
use crate::state::auth::Owner;
use crate::state::run::Run;
use crate::vocab::Scope;

/// A run the registry holds, with its chat.
#[derive(Debug, Clone)]
pub struct Held {
    /// The chat's scope.
    pub scope: Scope,
    /// Who recorded the chat's runs.
    pub owner: Owner,
    /// The run.
    pub run: Arc<Run>,
}

/// What an erasure removed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Erased {
    /// Chats removed.
    pub chats: usize,
    /// Runs removed (their recorded events, snapshots and raw records with them).
    pub runs: usize,
    /// Recorded bytes released.
    pub bytes: usize,
    /// Keys deleted from the shared journal (0 without one).
    pub keys: usize,
}

impl Registry {
    /// Every run held (current and older runs of every chat, mirrors included).
    pub fn held(&self) -> Vec<Held> {
        let mut out = Vec::new();
        for chat in self.chats.iter() {
            out.extend(chat.runs().map(|run| Held {
                scope: chat.key().clone(),
                owner: chat.owner,
                run: run.clone(),
            }));
        }
        out
    }

    /// Removes every chat of `owner`, with its runs, ids and aliases, idempotency keys and
    /// remembered stops. A run still producing is removed too (its producer carries on
    /// unseen): stop those first.
    pub fn erase_owner(&self, owner: &Owner) -> Erased {
        let scopes: Vec<Scope> = self
            .chats
            .iter()
            .filter(|c| c.owner.is(owner))
            .map(|c| c.key().clone())
            .collect();
        let mut erased = Erased::default();
        for scope in scopes {
            let Some((_, chat)) = self.chats.remove_if(&scope, |_, c| c.owner.is(owner)) else {
                continue;
            };
            erased.chats += 1;
            for run in chat.runs() {
                erased.runs += 1;
                erased.bytes += run.bytes();
                self.forget(run);
            }
        }
        self.notify();
        erased
    }
}
