//! Supersession: a run goes live as its chat's current run (the active one it replaces is ended
//! `superseded`), and a mirror of another replica's run is adopted as the journal decides.

use std::sync::Arc;

use super::chat::Chat;
use super::pending::Pending;
use super::Registry;
use crate::state::auth::Owner;
use crate::state::run::Run;
use crate::vocab::Scope;

impl Registry {
    /// Makes `run` the chat's current run. A still-active previous run is superseded (its
    /// observers are ended; its producer keeps going). Returns the superseded run.
    pub fn go_live(&self, pending: &Pending, run: Arc<Run>) -> Option<Arc<Run>> {
        if !run.bind_owner(pending.owner) {
            // A run recorded for someone else never joins this owner's chat.
            return None;
        }
        let superseded = {
            // A chat with a pending registration is never evicted (`is_busy`), so it is here;
            // were it not, it comes back with the owner that registered.
            let mut chat = self
                .chats
                .entry(pending.scope.clone())
                .or_insert_with(|| Chat::new(pending.owner));
            let previous = chat.current.replace(run.clone());
            let mut superseded = None;
            if let Some(prev) = previous {
                if prev.supersede(run.id()) {
                    superseded = Some(prev.clone());
                }
                if let Some(gone) = chat.push_older(prev) {
                    self.forget(&gone);
                }
            }
            superseded
        };
        self.index(&pending.owner, run.id(), &pending.scope, &run);
        self.totals.admit(&run);
        self.notify();
        superseded
    }

    /// Adds `run`, a mirror of another replica's run of the chat at `scope`, as the chat's
    /// current run or as one of its older runs; a mirror already held as an older run is made
    /// current. A run produced here that has not ended stays current and `run` joins the older
    /// ones: whether a mirror's run is newer is the shared journal's to decide (by the turns'
    /// request times), and the local run's writer hears it from there and ends the run
    /// `superseded` if so. The journal's chat pointer alone can name an older run (Redis
    /// restarted empty and an earlier turn's producer wrote its run again first). A run
    /// recorded for another owner is never adopted (it supersedes nothing and is found by no
    /// one here).
    pub fn adopt(&self, scope: &Scope, owner: Owner, run: Arc<Run>, current: bool) {
        if !run.bind_owner(owner) {
            return;
        }
        {
            let mut chat = self
                .chats
                .entry(scope.clone())
                .or_insert_with(|| Chat::new(owner));
            if !chat.owner.is(&owner) {
                return;
            }
            // A run produced here and still going keeps the chat (see above).
            let current = current
                && !chat
                    .current
                    .as_ref()
                    .is_some_and(|prev| !prev.origin().is_mirror() && prev.end().is_none());
            if chat.runs().any(|r| Arc::ptr_eq(r, &run)) {
                // Held already: a mirror held as an older run becomes the current one.
                if current
                    && run.origin().is_mirror()
                    && chat.older.iter().any(|r| Arc::ptr_eq(r, &run))
                {
                    chat.older.retain(|r| !Arc::ptr_eq(r, &run));
                    if let Some(prev) = chat.current.replace(run.clone()) {
                        chat.older.push(prev);
                    }
                    drop(chat);
                    self.notify();
                }
                return;
            }
            let older = match current {
                true => chat.current.replace(run.clone()),
                false => Some(run.clone()),
            };
            if let Some(gone) = older.and_then(|r| chat.push_older(r)) {
                self.forget(&gone);
            }
        }
        self.index(&owner, run.id(), scope, &run);
        self.totals.admit(&run);
        self.notify();
        // After it joined: a mirror of a run that has ended is one of the completed chats.
        self.keep_max_chats();
    }
}
