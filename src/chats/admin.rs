//! What the admin API asks of chats: every run held here, one run by id whoever recorded it,
//! the runs the shared journal indexes (every replica's), an operator's stop, and erasing every
//! chat of one owner (active runs stopped first), here and, with a shared journal, in Redis and
//! on every replica.

use std::collections::HashSet;
use std::time::Duration;

use log::warn;

use super::{Chats, Found, Owner};
use crate::replica::JournalRun;
use crate::state::registry::{Erased, Held};
use crate::vocab::end::EndReason;
use crate::vocab::{RunId, Scope};

/// A run as the shared journal describes it (whichever replica produces it), with its owner.
#[derive(Debug, Clone)]
pub struct Indexed {
    /// Who recorded it (from its chat's scope).
    pub owner: Owner,
    /// The run's meta in the journal.
    pub run: JournalRun,
}

impl Chats {
    /// Every run held here: the runs this replica produces or produced, and its mirrors of
    /// other replicas' runs.
    pub fn held(&self) -> Vec<Held> {
        self.registry.held()
    }

    /// The run whose tether run id is `id`, whoever recorded it, when held here.
    pub fn held_by_id(&self, id: &RunId) -> Option<Held> {
        self.registry.held().into_iter().find(|h| h.run.id() == id)
    }

    /// The runs the shared journal indexes, every replica's (`owner`'s only when given); none
    /// without a journal or while Redis cannot be asked.
    pub async fn indexed(&self, owner: Option<Owner>) -> Vec<Indexed> {
        let Some(j) = &self.journal else {
            return Vec::new();
        };
        match Box::pin(j.indexed(owner.as_ref())).await {
            Ok(runs) => runs.into_iter().map(|r| self.with_owner(r)).collect(),
            Err(e) => {
                warn!("admin: the shared journal's index could not be read ({e}); listing this replica's runs only");
                Vec::new()
            }
        }
    }

    /// The run with tether's run id `id` in the shared journal, whoever produces it.
    pub async fn indexed_run(&self, id: &RunId) -> Option<Indexed> {
        let j = self.journal.as_ref()?;
        match Box::pin(j.indexed_run(id)).await {
            Ok(r) => r.map(|r| self.with_owner(r)),
            Err(e) => {
                warn!("admin: the shared journal's index could not be read ({e})");
                None
            }
        }
    }

    fn with_owner(&self, run: JournalRun) -> Indexed {
        Indexed {
            owner: self.auth.owner_in(&run.scope),
            run,
        }
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

    /// Stops a run not held here through the shared journal (its producing replica stops it);
    /// true when it was live.
    pub async fn stop_indexed(&self, r: &Indexed) -> bool {
        match &self.journal {
            Some(j) if r.run.live => {
                Box::pin(j.stop_in_journal(&r.run.scope, &r.run.run, EndReason::Cancelled)).await
            }
            _ => false,
        }
    }

    /// Erases every chat of `owner`: its active runs are stopped first (each waited for up to
    /// `wait`), then every run, id, alias, idempotency key and remembered stop of theirs is
    /// dropped from memory. With a shared journal, the runs other replicas produce are stopped
    /// too, every key of theirs is deleted from Redis, and every replica drops its copies.
    pub async fn erase(&self, owner: Owner, wait: Duration) -> Erased {
        let here: Vec<Held> = self
            .registry
            .held()
            .into_iter()
            .filter(|h| h.owner.is(&owner))
            .collect();
        for h in here.iter().filter(|h| h.run.is_producing()) {
            self.stop_held(h).await;
        }
        let journal = match &self.journal {
            Some(j) => match Box::pin(j.stop_owner(&owner, wait)).await {
                Ok(runs) => Some((j, runs)),
                Err(e) => {
                    warn!("admin: the shared journal could not be read ({e}); erasing this replica's copies only");
                    None
                }
            },
            None => None,
        };
        for h in here.iter().filter(|h| h.run.is_producing()) {
            let mut rx = h.run.subscribe();
            let stopped = tokio::time::timeout(wait, rx.wait_for(|_| !h.run.is_producing())).await;
            if stopped.is_err() {
                warn!(
                    "run {}: still producing when its owner was erased",
                    h.run.id()
                );
            }
        }
        let mut scopes: HashSet<Scope> = here.iter().map(|h| h.scope.clone()).collect();
        let mut runs: HashSet<RunId> = here.iter().map(|h| h.run.id().clone()).collect();
        let mut keys = 0;
        // This replica's copies go before the keys do, so its writers do not write an ended
        // run back as lost; again after, for copies synced back in between.
        let early = self.journal.as_ref().map(|j| j.forget_owner(&owner));
        if let Some((j, indexed)) = journal {
            match Box::pin(j.erase_owner(&owner, indexed)).await {
                Ok(e) => {
                    keys = e.keys;
                    if e.still_live > 0 {
                        warn!(
                            "admin: {} of the erased owner's runs had not ended",
                            e.still_live
                        );
                    }
                    scopes.extend(e.runs.iter().map(|r| r.scope.clone()));
                    runs.extend(e.runs.into_iter().map(|r| r.run));
                }
                Err(e) => warn!(
                    "admin: the owner's keys could not be deleted from the shared journal ({e})"
                ),
            }
        }
        let mut local = match &self.journal {
            Some(j) => j.forget_owner(&owner),
            None => self.registry.erase_owner(&owner),
        };
        if let Some(e) = early {
            local.chats += e.chats;
            local.runs += e.runs;
            local.bytes += e.bytes;
        }
        Erased {
            chats: scopes.len().max(local.chats),
            runs: runs.len().max(local.runs),
            bytes: local.bytes,
            keys,
        }
    }
}
