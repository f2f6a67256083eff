//! The registry: chats → runs, lookups, pending registrations, supersession, single flight,
//! retention and eviction, and the totals the limits are checked against.
//!
//! Chats are keyed by *scope* (the chat id, prefixed by the owner's hash when auth is on; see
//! `auth`), and each entry also keeps its owner. Every run is bound to the owner who recorded
//! it ([`Run::bind_owner`]); every lookup goes through one check (`Registry::visible`) of both
//! owners in constant time, so a run (a mirror of another replica's run included) answers only
//! the owner who recorded it, and is never adopted into, or found in, another owner's chat. A
//! chat's *current* run is its latest run that went live; runs it superseded stay reachable by
//! cursor while their producer runs and for the retention period after. Active runs and chats with
//! a pending registration are never evicted. Cleanup is lazy (on registrations and lookups, at
//! most once a second) plus a periodic [`Registry::sweep`].
//!
//! One part per concern, each the only owner of what it changes: `chat` (a chat's entry, and
//! the older runs it keeps), `pending` (registrations and admission), `supersede` (go-live and
//! adopting mirrors), `lookup` (the id index by a typed [`IdKey`], and the lookups), `cancels`
//! (idempotent stops), [`idempotency`] (idempotency keys), `retention` (sweeps and the one
//! eviction routine, `Registry::forget` the one way a run leaves) and `totals` (runs and
//! recorded bytes).

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use dashmap::DashMap;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::journal::tally::Share;
use crate::state::auth::IdKey;
use crate::state::run::Run;
use crate::vocab::{RunId, Scope};

pub use pending::Pending;

#[cfg(test)]
use cancels::MAX_CANCELS;
use chat::Chat;

/// What a sweep removed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Swept {
    /// Runs dropped because their retention passed.
    pub expired: usize,
    /// Runs dropped to stay within `max_chats`, `max_runs` or `max_recorded_bytes`.
    pub capacity: usize,
}

/// Which registrations a record request may make.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Always (a new run supersedes the chat's active one when it goes live).
    Always,
    /// Only while the chat has no active or pending run (`single_flight` routes).
    SingleFlight,
    /// Only for the first attach of a chat with no run (`on_miss = "record"`); the others wait
    /// for that run.
    AttachRecord,
}

/// Why a registration was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Busy {
    /// The chat has this run active or pending (`SingleFlight`).
    Running(RunId),
    /// Another attach is already fetching the chat's live stream, or it has a run
    /// (`AttachRecord`).
    Fetching,
}

/// Chats and their runs.
#[derive(Debug)]
pub struct Registry {
    chats: DashMap<Scope, Chat>,
    /// Runs by id: tether's run id and each alias, scoped by owner ([`Auth::scope`]) → the
    /// chat's scope and the run.
    ids: DashMap<IdKey, Found>,
    live: watch::Sender<u64>,
    retention: Duration,
    max_chats: usize,
    epoch: Instant,
    last_sweep_ms: AtomicU64,
    /// Runs held and the bytes they record.
    totals: totals::Totals,
    /// Told about every eviction (the sidecar counts them in its metrics).
    on_evict: EvictHook,
}

/// What the registry tells about evictions.
#[derive(Default)]
struct EvictHook(std::sync::OnceLock<Box<dyn Fn(Swept) + Send + Sync>>);

impl std::fmt::Debug for EvictHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.get().is_some() {
            "EvictHook(set)"
        } else {
            "EvictHook"
        })
    }
}

/// How many runs are held, by state ([`Registry::held_by_state`]).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct HeldByState {
    /// Runs not ended.
    pub active: usize,
    /// Ended runs kept for resume.
    pub completed: usize,
}

impl Registry {
    /// An empty registry keeping completed runs for `retention`, and at most `max_chats` chats
    /// whose runs have all completed.
    pub fn new(retention: Duration, max_chats: usize) -> Arc<Self> {
        Arc::new(Registry {
            chats: DashMap::new(),
            ids: DashMap::new(),
            live: watch::channel(0).0,
            retention,
            max_chats,
            epoch: Instant::now(),
            last_sweep_ms: AtomicU64::new(0),
            totals: totals::Totals::default(),
            on_evict: EvictHook::default(),
        })
    }

    /// A run produced here ended: its chat may now be one too many of those whose runs have all
    /// completed (`max_chats` holds as runs end, not only at the next sweep), and every
    /// subscriber is woken.
    pub fn ended(&self) {
        self.keep_max_chats();
        self.notify();
    }

    /// Wakes every subscriber (a producer calls this when its run ended).
    pub fn notify(&self) {
        self.live.send_modify(|v| *v += 1);
    }

    /// A receiver woken whenever a run goes live or ends, or a pending registration ends.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.live.subscribe()
    }

    /// How many receivers of [`Self::subscribe`] exist (waiting attaches, draining).
    pub fn subscribers(&self) -> usize {
        self.live.receiver_count()
    }

    /// A share of the recorded bytes, for bytes a run holds outside its journal (its
    /// remembered ids); what it counts is taken back out when it is dropped.
    pub fn share_bytes(&self) -> Share {
        self.totals.share()
    }

    /// Bytes held by the windows and histories of every run in the registry (local runs and
    /// mirrors alike), and by the shares of [`Self::share_bytes`].
    pub fn recorded_bytes(&self) -> usize {
        self.totals.bytes()
    }

    /// Runs held (active and completed).
    pub fn run_count(&self) -> usize {
        self.totals.runs()
    }

    /// Runs held, by state: not ended, and ended (kept for resume until retention drops them).
    pub fn held_by_state(&self) -> HeldByState {
        let mut n = HeldByState::default();
        for chat in self.chats.iter() {
            for run in chat.runs() {
                match run.end() {
                    None => n.active += 1,
                    Some(_) => n.completed += 1,
                }
            }
        }
        n
    }

    /// Every run still reading its upstream.
    pub fn producing(&self) -> Vec<Arc<Run>> {
        let mut out = Vec::new();
        for chat in self.chats.iter() {
            out.extend(chat.runs().filter(|r| r.is_producing()).cloned());
        }
        out
    }

    /// Every run still producing that has had no observer for at least `after`.
    pub fn abandoned(&self, after: Duration) -> Vec<Arc<Run>> {
        let mut runs = self.producing();
        runs.retain(|r| r.end().is_none() && r.unobserved_for().is_some_and(|d| d >= after));
        runs
    }

    /// Number of chats held.
    pub fn chats(&self) -> usize {
        self.chats.len()
    }

    /// Lets `run` go: out of the id index and out of the totals, the one way a run leaves.
    fn forget(&self, run: &Run) {
        for key in run.index_keys() {
            self.ids
                .remove_if(&key, |_, f| std::ptr::eq(Arc::as_ptr(&f.run), run));
        }
        self.totals.release(run);
    }
}

mod cancels;
mod chat;
pub mod idempotency;
mod listing;
mod lookup;
mod pending;
mod retention;
mod supersede;

pub use listing::{Erased, Held};
pub use lookup::Found;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_totals;
mod totals;
