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

use std::collections::VecDeque;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use dashmap::DashMap;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::journal::tally::Share;
use crate::state::auth::{Auth, Owner};
use crate::state::run::Run;
use crate::vocab::{RunId, Scope};

/// Superseded runs kept per chat for cursor reads (the oldest goes first).
const MAX_OLDER: usize = 4;
/// `cancel_request_id`s remembered per chat for idempotent stops.
const MAX_CANCELS: usize = 16;

#[derive(Debug)]
struct Chat {
    owner: Owner,
    current: Option<Arc<Run>>,
    older: Vec<Arc<Run>>,
    /// Run ids of record requests forwarded whose upstream has not answered yet.
    pending: Vec<RunId>,
    /// An `on_miss = record` attach is fetching the backend's live stream.
    attach_recording: bool,
    /// `cancel_request_id` → the run it stopped.
    cancels: VecDeque<(String, RunId)>,
    /// Idempotency keys of record requests: the run each started and its request body's hash
    /// ([`idempotency`]).
    keys: VecDeque<idempotency::Key>,
}

impl Chat {
    fn new(owner: Owner) -> Self {
        Chat {
            owner,
            current: None,
            older: Vec::new(),
            pending: Vec::new(),
            attach_recording: false,
            cancels: VecDeque::new(),
            keys: VecDeque::new(),
        }
    }

    fn runs(&self) -> impl Iterator<Item = &Arc<Run>> {
        self.current.iter().chain(self.older.iter())
    }

    fn is_busy(&self) -> bool {
        !self.pending.is_empty() || self.attach_recording || self.runs().any(|r| r.is_producing())
    }

    /// When the chat's latest run completed (for eviction order).
    fn completed_at(&self) -> Option<Instant> {
        self.current.as_ref().and_then(|r| r.finished_at())
    }
}

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
    ids: DashMap<String, (Scope, Arc<Run>)>,
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

/// A record request in flight for a chat; dropping it ends the pending registration.
#[derive(Debug)]
pub struct Pending {
    registry: Arc<Registry>,
    scope: Scope,
    owner: Owner,
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

    fn pending(self: &Arc<Self>, scope: &Scope, run_id: &RunId, attach: bool) -> Pending {
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
    fn admit(chat: &mut Chat, run_id: &RunId, admit: Admission) -> Result<(), Busy> {
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
                chat.older.push(prev);
                if chat.older.len() > MAX_OLDER {
                    // Never drop an active producer's run; drop the oldest completed one.
                    if let Some(i) = chat.older.iter().position(|r| !r.is_producing()) {
                        let gone = chat.older.remove(i);
                        self.forget(&gone);
                    }
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
                    .is_some_and(|prev| !prev.is_mirror() && prev.end().is_none());
            if chat.runs().any(|r| Arc::ptr_eq(r, &run)) {
                // Held already: a mirror held as an older run becomes the current one.
                if current && run.is_mirror() && chat.older.iter().any(|r| Arc::ptr_eq(r, &run)) {
                    chat.older.retain(|r| !Arc::ptr_eq(r, &run));
                    if let Some(prev) = chat.current.replace(run.clone()) {
                        chat.older.push(prev);
                    }
                    drop(chat);
                    self.notify();
                }
                return;
            }
            if current {
                if let Some(prev) = chat.current.replace(run.clone()) {
                    chat.older.push(prev);
                }
            } else {
                chat.older.push(run.clone());
            }
            if chat.older.len() > MAX_OLDER {
                if let Some(i) = chat.older.iter().position(|r| !r.is_producing()) {
                    let gone = chat.older.remove(i);
                    self.forget(&gone);
                }
            }
        }
        self.index(&owner, run.id(), scope, &run);
        self.totals.admit(&run);
        self.notify();
        // After it joined: a mirror of a run that has ended is one of the completed chats.
        self.keep_max_chats();
    }

    /// Indexes `run` (of the chat at `scope`) under `id` for `owner`: tether's run id, or an
    /// alias (the backend's id for the run). A later run with the same alias takes it over.
    /// Nothing happens unless `owner` recorded the run.
    pub fn index(&self, owner: &Owner, id: &RunId, scope: &Scope, run: &Arc<Run>) {
        if !run.is_owned_by(owner) {
            return;
        }
        let key = Auth::id_key(owner, id);
        run.add_index_key(&key);
        self.ids.insert(key, (scope.clone(), run.clone()));
    }

    /// A run by tether's run id or an alias, with its chat's scope, if `owner` recorded it.
    pub fn by_id(&self, owner: &Owner, id: &RunId) -> Option<(Scope, Arc<Run>)> {
        self.maybe_sweep();
        let entry = self.ids.get(&Auth::id_key(owner, id))?;
        let found = entry.value().clone();
        drop(entry);
        // A run the registry let go of is no longer reachable.
        self.chats.get(&found.0).filter(|c| {
            c.runs()
                .any(|r| Arc::ptr_eq(r, &found.1) && Self::visible(c, r, owner))
        })?;
        Some(found)
    }

    /// The one ownership check of every lookup: `run` of `chat` is `owner`'s when both the chat
    /// and the run itself were recorded for `owner` (constant time in the owners' hashes).
    fn visible(chat: &Chat, run: &Run, owner: &Owner) -> bool {
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

    /// Remembers that `cancel_id` stopped `run_id`, for idempotent retries.
    pub fn remember_cancel(&self, scope: &Scope, cancel_id: &str, run_id: &RunId) {
        if let Some(mut chat) = self.chats.get_mut(scope) {
            if chat.cancels.iter().all(|(c, _)| c != cancel_id) {
                chat.cancels
                    .push_back((cancel_id.to_string(), run_id.clone()));
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
            .find(|(c, _)| c == cancel_id)
            .map(|(_, r)| r.clone());
        found
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

    fn forget(&self, run: &Run) {
        for key in run.index_keys() {
            self.ids
                .remove_if(&key, |_, (_, r)| std::ptr::eq(Arc::as_ptr(r), run));
        }
        self.totals.release(run);
    }
}

pub mod idempotency;
mod retention;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_totals;
mod totals;
