//! Chats: the one place that turns a caller and a request into a run.
//!
//! A route asks this room, never the registry or the shared journal directly: who the caller
//! is ([`Chats::owner`]), the chat it names ([`Chats::chat`], where the chat's scope is minted,
//! once per request), and a run of it: the chat's current run, one of its runs by id
//! ([`Chat::find`]), a run by tether's run id or an alias ([`Chats::by_id`]), by idempotency key
//! ([`Chat::register_keyed`], in [`keys`]), or the run an earlier stop named ([`stop`]). With a
//! shared journal every lookup first brings what the journal knows into the registry (and an
//! attach with a cursor waits for a mirror a little behind its producer); without one nothing
//! but the registry is asked. Registration and go-live are here too: a new run's admission
//! under the per-owner limits ([`Chats::admit_run`]), a record request's
//! pending registration ([`Chat::register`]), and the run that goes live, recorded in memory or
//! through the shared journal's recorder whose writer is spawned here ([`live`]), then named by
//! its aliases; what it carries for the routes (the upstream's head, the token headers) is kept
//! on it by [`head`]. Every answer is a named type ([`Found`]), never a tuple.

pub mod admin;
pub mod head;
pub mod keys;
pub mod live;
pub mod stop;

use std::sync::Arc;
use std::time::Duration;

use http::HeaderMap;
use log::debug;

use crate::config::Subject;
use crate::error::ApiError;
use crate::replica::Replica;
use crate::state::attach_policy::{self, Decision};
use crate::state::auth::Auth;
pub use crate::state::auth::Owner;
use crate::state::owner_limits::{ActiveRun, Limited, OwnerLimit, OwnerLimits, ACTIVE_RETRY_AFTER};
use crate::state::registry::{Admission, Busy, Pending, Registry};
use crate::state::run::Run;
use crate::vocab::{ChatId, RunId, Scope};
pub use keys::{ByKey, IdempotencyKey};
pub use live::{Live, Naming, Recording};
pub use stop::StopTarget;

/// How long an attach with a cursor just ahead of a mirror waits for the mirror's follower
/// before the cursor counts as a future one.
const MIRROR_CATCH_UP: Duration = Duration::from_secs(1);

/// A run found for a caller, with the scope of the chat it belongs to: the registry's answer,
/// which every lookup here passes on.
pub use crate::state::registry::Found;

/// What a resume or status request names: a run, or a chat's current run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Name {
    /// A run by tether's run id or an alias (the backend's name for it).
    Run(RunId),
    /// The current run of the chat with this id.
    Chat(ChatId),
}

/// Chats and their runs as the routes see them: the registry, callers' identities and, when one
/// is configured, the shared journal. Cheap to clone (shared handles).
#[derive(Clone)]
pub struct Chats {
    registry: Arc<Registry>,
    auth: Arc<Auth>,
    journal: Option<Arc<Replica>>,
    limits: Option<Arc<OwnerLimits>>,
}

impl std::fmt::Debug for Chats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Chats")
            .field("chats", &self.registry.chats())
            .field("journal", &self.journal)
            .finish()
    }
}

impl Chats {
    /// Chats over `registry`, the callers named by `subject`, and the shared `journal` when
    /// one is set. With a journal every replica derives the same owners from `secret` (a run
    /// recorded on one replica answers its owner on every other); without one the owners'
    /// key is drawn at random at start.
    pub fn new(
        registry: Arc<Registry>,
        subject: Subject,
        secret: &[u8],
        journal: Option<Arc<Replica>>,
    ) -> Self {
        let auth = match &journal {
            Some(_) => Auth::with_secret(subject, secret),
            None => Auth::new(subject),
        };
        Chats {
            registry,
            auth: Arc::new(auth),
            journal,
            limits: None,
        }
    }

    /// The same chats, admitting new runs under the per-owner `limits` ([`Self::admit_run`]).
    pub fn with_limits(mut self, limits: Arc<OwnerLimits>) -> Self {
        self.limits = Some(limits);
        self
    }

    /// Admits a new run of `owner` under the per-owner limits (`[limits]
    /// max_active_runs_per_owner`, `max_runs_per_owner_per_minute`), before anything is
    /// forwarded: the run's place among the owner's active runs (hold it until the run ends;
    /// `None` when that limit is off), or the limit that refuses it (counted). With a shared
    /// journal both are counted there, for every replica: runs going in the owner's set of
    /// places (also counted here), the rate in the owner's bucket; while Redis cannot be asked,
    /// on this replica only.
    pub async fn admit_run(&self, owner: Owner) -> Result<Option<ActiveRun>, Limited> {
        let Some(l) = &self.limits else {
            return Ok(None);
        };
        // A degraded journal is not asked: the wait for its answer would hold every turn.
        let Some(j) = self.journal.as_ref().filter(|j| !j.is_degraded()) else {
            return l.admit(owner);
        };
        let mut active = l.admit_active(owner)?;
        if let Some(place) = active.as_mut() {
            match Box::pin(j.admit_active(&owner, l.max_active())).await {
                Ok(Some(shared)) => place.also_release(move || Box::pin(shared.release())),
                // Refused: the place taken here goes back with `active`.
                Ok(None) => {
                    return Err(l.refused(Limited {
                        limit: OwnerLimit::ActiveRuns,
                        retry_after: ACTIVE_RETRY_AFTER,
                    }))
                }
                Err(e) => debug!(
                    "shared journal: the owner's places could not be read ({e}); counting here"
                ),
            }
        }
        if l.per_minute() == 0 {
            return Ok(active);
        }
        match Box::pin(j.take_run(&owner, l.per_minute())).await {
            Ok(None) => Ok(active),
            Ok(Some(wait)) => Err(l.refused(Limited {
                limit: OwnerLimit::Rate,
                retry_after: wait,
            })),
            Err(e) => {
                debug!("shared journal: the owner's bucket could not be read ({e}); counting here");
                l.admit_rate(owner).map(|()| active)
            }
        }
    }

    /// The registry, for what is not a lookup: the drain, the recorded bytes' gauge, a
    /// producer's byte accounting and wake-ups.
    pub fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    /// The shared journal, when one is configured (the drain and readiness ask).
    pub fn journal(&self) -> Option<&Arc<Replica>> {
        self.journal.as_ref()
    }

    /// The caller of a request with these headers, or the 401 to answer.
    pub fn owner(&self, headers: &HeaderMap) -> Result<Owner, ApiError> {
        self.auth.owner(headers)
    }

    /// The caller's subject as a run record names its owner ([`Auth::subject`]).
    pub fn subject(&self, headers: &HeaderMap) -> Option<String> {
        self.auth.subject(headers)
    }

    /// Chat `id` of `owner`: its scope is minted here.
    pub fn chat(&self, owner: Owner, id: &ChatId) -> Chat<'_> {
        Chat {
            chats: self,
            owner,
            scope: Auth::scope(&owner, id),
        }
    }

    /// The run `owner` knows by tether's run id or an alias `id`, with its chat's scope.
    pub async fn by_id(&self, owner: Owner, id: &RunId) -> Option<Found> {
        if let Some(j) = &self.journal {
            Box::pin(j.sync_id(owner, id)).await;
        }
        self.registry.by_id(&owner, id)
    }

    /// The run `name` names for `owner`: by id or alias, or the chat's current run.
    pub async fn lookup(&self, owner: Owner, name: &Name) -> Option<Found> {
        match name {
            Name::Run(id) => self.by_id(owner, id).await,
            Name::Chat(chat) => self.chat(owner, chat).current().await,
        }
    }

    /// Makes room for one more run under `max_runs` and `max_bytes`, evicting completed runs
    /// first; false when it is still over (the turn then goes through unrecorded).
    pub fn make_room(&self, max_runs: usize, max_bytes: usize) -> bool {
        self.registry.make_room(max_runs, max_bytes)
    }
}

/// One caller's chat, as a request names it: the owner and the chat's scope.
pub struct Chat<'c> {
    chats: &'c Chats,
    owner: Owner,
    scope: Scope,
}

impl Chat<'_> {
    /// The caller.
    pub fn owner(&self) -> Owner {
        self.owner
    }

    /// The chat's scope (registry key).
    pub fn scope(&self) -> &Scope {
        &self.scope
    }

    fn registry(&self) -> &Arc<Registry> {
        &self.chats.registry
    }

    fn found(&self, run: Arc<Run>) -> Found {
        Found {
            scope: self.scope.clone(),
            run,
        }
    }

    /// Brings what the shared journal knows of the chat (its current run, and run `run` when
    /// named) into the registry. Nothing without a journal.
    async fn sync(&self, run: Option<&RunId>) {
        if let Some(j) = &self.chats.journal {
            // Boxed: rare, and its future would size every caller's.
            Box::pin(j.sync_chat(&self.scope, self.owner, run)).await;
        }
    }

    /// The chat's current run.
    pub async fn current(&self) -> Option<Found> {
        self.sync(None).await;
        let run = self.registry().current(&self.scope, &self.owner)?;
        Some(self.found(run))
    }

    /// The chat's current run as this replica holds it, without asking the shared journal (an
    /// annotation is appended only to a run recorded here).
    pub fn current_here(&self) -> Option<Found> {
        let run = self.registry().current(&self.scope, &self.owner)?;
        Some(self.found(run))
    }

    /// Run `run_id` of the chat (its current run or one it superseded).
    pub async fn find(&self, run_id: &RunId) -> Option<Found> {
        self.sync(Some(run_id)).await;
        let run = self.registry().find(&self.scope, &self.owner, run_id)?;
        Some(self.found(run))
    }

    /// Run `run_id` of the chat when named and held, else the chat's current run.
    pub async fn find_or_current(&self, run_id: Option<&RunId>) -> Option<Found> {
        self.sync(run_id).await;
        let reg = self.registry();
        let named = run_id.and_then(|id| reg.find(&self.scope, &self.owner, id));
        let run = named.or_else(|| reg.current(&self.scope, &self.owner))?;
        Some(self.found(run))
    }

    /// What a protocol-1 attach gets (the attach table, [`attach_policy::decide`]). A cursor
    /// just ahead of a mirror (a run another replica produces, followed here a little behind)
    /// first waits for the mirror's follower, up to a second, before it counts as a future
    /// cursor.
    pub async fn attach(&self, run_id: Option<&RunId>, after: Option<u64>) -> Decision {
        self.sync(run_id).await;
        let reg = self.registry();
        if let (Some(id), Some(after)) = (run_id, after) {
            if let Some(run) = reg
                .find(&self.scope, &self.owner, id)
                .filter(|r| r.origin().is_mirror())
            {
                let mut rx = run.subscribe();
                let wait = rx.wait_for(|_| run.head() >= after || run.end().is_some());
                let _ = tokio::time::timeout(MIRROR_CATCH_UP, wait).await;
            }
        }
        attach_policy::decide(reg, &self.scope, &self.owner, run_id, after)
    }

    /// Waits up to `wait` for the chat to get a run ([`attach_policy::wait_for_run`]).
    pub async fn wait_for_run(&self, wait: Duration) -> Decision {
        attach_policy::wait_for_run(self.registry(), &self.scope, &self.owner, wait).await
    }

    /// Registers a record request for run `run_id` of the chat before it is forwarded, as
    /// `admit` allows ([`Registry::register`]). A single-flight request first brings another
    /// replica's live run of the chat here from the shared journal, so that it counts too (best
    /// effort: a run whose go-live has not reached Redis yet, a few milliseconds, is not seen).
    pub async fn register(&self, run_id: &RunId, admit: Admission) -> Result<Pending, Busy> {
        self.sync_single_flight(admit).await;
        self.registry()
            .register(&self.scope, self.owner, run_id, admit)
    }

    /// The shared journal's sync before a single-flight registration.
    async fn sync_single_flight(&self, admit: Admission) {
        if admit == Admission::SingleFlight {
            self.sync(None).await;
        }
    }

    /// The run an earlier stop of this chat with cancel request id `cancel_id` named.
    pub fn cancelled(&self, cancel_id: &str) -> Option<RunId> {
        self.registry()
            .cancelled_run(&self.scope, &self.owner, cancel_id)
    }
}

#[cfg(test)]
mod tests;
