//! Registrations: a record request in flight for a chat ([`Pending`]), admitted per the route's
//! [`Admission`] (single flight, the first attach that records) before it is forwarded.

use std::sync::Arc;

use super::chat::Chat;
use super::{Admission, Busy, Registry};
use crate::state::auth::Owner;
use crate::vocab::{RunId, Scope};

/// A record request in flight for a chat; dropping it ends the pending registration.
#[derive(Debug)]
pub struct Pending {
    registry: Arc<Registry>,
    pub(super) scope: Scope,
    pub(super) owner: Owner,
    run_id: RunId,
    attach: bool,
    /// When the request was registered (ms since the Unix epoch, this host's clock).
    since_ms: u64,
}

impl Drop for Pending {
    fn drop(&mut self) {
        if let Some(mut chat) = self.registry.chats.get_mut(&self.scope) {
            if self.attach {
                chat.attach_recording = false;
            }
            chat.pending.retain(|id| id != &self.run_id);
        }
        self.registry.notify();
    }
}

impl Pending {
    /// The scope (registry key) of the chat.
    pub fn scope(&self) -> &Scope {
        &self.scope
    }

    /// Who registered the run.
    pub fn owner(&self) -> Owner {
        self.owner
    }

    /// When the request was registered, before it was forwarded (ms since the Unix epoch on
    /// this host's clock): what orders a chat's runs across replicas.
    pub fn since_ms(&self) -> u64 {
        self.since_ms
    }
}

impl Registry {
    pub(super) fn pending(
        self: &Arc<Self>,
        scope: &Scope,
        run_id: &RunId,
        attach: bool,
    ) -> Pending {
        let owner = self.chats.get(scope).map(|c| c.owner).unwrap_or_default();
        Pending {
            registry: self.clone(),
            scope: scope.clone(),
            owner,
            run_id: run_id.clone(),
            attach,
            since_ms: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
        }
    }

    /// Registers a record request for run `run_id` of the chat before it is forwarded, as
    /// `admit` allows. A chat owned by someone else is never touched: the scope already
    /// separates owners.
    pub fn register(
        self: &Arc<Self>,
        scope: &Scope,
        owner: Owner,
        run_id: &RunId,
        admit: Admission,
    ) -> Result<Pending, Busy> {
        self.maybe_sweep();
        self.keep_max_chats();
        let mut chat = self
            .chats
            .entry(scope.clone())
            .or_insert_with(|| Chat::new(owner));
        Self::admit(&mut chat, run_id, admit)?;
        drop(chat);
        Ok(self.pending(scope, run_id, admit == Admission::AttachRecord))
    }

    /// The admission checks of [`Self::register`] on the chat's entry, and the pending run.
    pub(super) fn admit(chat: &mut Chat, run_id: &RunId, admit: Admission) -> Result<(), Busy> {
        match admit {
            Admission::Always => {}
            Admission::SingleFlight => {
                if let Some(id) = chat.pending.first() {
                    return Err(Busy::Running(id.clone()));
                }
                if let Some(r) = chat
                    .current
                    .as_ref()
                    .filter(|r| r.is_producing() && r.end().is_none())
                {
                    return Err(Busy::Running(r.id().clone()));
                }
            }
            Admission::AttachRecord => {
                if chat.attach_recording || chat.current.is_some() {
                    return Err(Busy::Fetching);
                }
                chat.attach_recording = true;
            }
        }
        chat.pending.push(run_id.clone());
        Ok(())
    }
}
