//! What the admin API asks of chats: every run held here, one run by id whoever recorded it,
//! an operator's stop, and erasing every chat of one owner (active runs stopped first).

use std::time::Duration;

use log::warn;

use super::{Chats, Found, Owner};
use crate::state::registry::{Erased, Held};
use crate::vocab::end::EndReason;
use crate::vocab::RunId;

impl Chats {
    /// Every run held here: the runs this replica produces or produced, and its mirrors of
    /// other replicas' runs.
    pub fn held(&self) -> Vec<Held> {
        self.registry.held()
    }

    /// The run whose tether run id is `id`, whoever recorded it.
    pub fn held_by_id(&self, id: &RunId) -> Option<Held> {
        self.registry.held().into_iter().find(|h| h.run.id() == id)
    }

    /// The owner a caller with subject `subject` is, or `None` when auth is off.
    pub fn owner_of(&self, subject: &str) -> Option<Owner> {
        self.auth.owner_of(subject.as_bytes())
    }

    /// Stops `held` as an operator (`reason: "cancelled"`), as a stop route does: through the
    /// shared journal when another replica produces it. Nothing happens to a run that ended.
    pub async fn stop_held(&self, held: &Held) {
        let found = Found {
            scope: held.scope.clone(),
            run: held.run.clone(),
        };
        self.stop(&found, None, EndReason::Cancelled).await;
    }

    /// Erases every chat of `owner`: its active runs are stopped first (each waited for up to
    /// `wait`), then every run, id, alias, idempotency key and remembered stop of theirs is
    /// dropped from memory.
    pub async fn erase(&self, owner: Owner, wait: Duration) -> Erased {
        let active: Vec<Held> = self
            .registry
            .held()
            .into_iter()
            .filter(|h| h.owner.is(&owner) && h.run.is_producing())
            .collect();
        for h in &active {
            self.stop_held(h).await;
        }
        for h in &active {
            let mut rx = h.run.subscribe();
            let stopped = tokio::time::timeout(wait, rx.wait_for(|_| !h.run.is_producing())).await;
            if stopped.is_err() {
                warn!(
                    "run {}: still producing when its owner was erased",
                    h.run.id()
                );
            }
        }
        self.registry.erase_owner(&owner)
    }
}
