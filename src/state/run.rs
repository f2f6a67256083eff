//! One run's local handle: its journal, where it is produced ([`Origin`]), the stop request,
//! the producer's lifecycle, the observers attached here and how long it has gone unobserved,
//! its watch record and the provider's usage so far ([`crate::accounting`]).
//!
//! The log itself (seqs, window, history, terminal state) is the run's [`Journal`]; this handle
//! adds what only the process that serves the run knows. What the rooms above hang on a run
//! (an HTTP head, token settings, a replica's marks, a dialect's cache) lives in its [`Slots`],
//! each under the owning room's type, so this handle names no HTTP, config or replica type.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use parking_lot::Mutex;
use tokio::sync::{watch, Notify};
use tokio::time::Instant;

use crate::accounting::{Join, Watch, WatchRecord};
use crate::journal::memory::MemoryJournal;
use crate::journal::{Appended, CursorMiss, Journal, Read, SnapshotCapture};
use crate::record::format::Event;
use crate::record::usage::Usage;
use crate::state::auth::{IdKey, Owner};
use crate::vocab::end::{End, EndReason};
use crate::vocab::RunId;

/// A fresh transport run id: 128 random bits as 22 URL-safe base64 characters. It appears twice
/// in every frame, so it is kept short.
pub fn mint_run_id() -> RunId {
    RunId::from(URL_SAFE_NO_PAD.encode(rand::random::<[u8; 16]>()))
}

/// Where a run is produced. Every room asks it (the registry's supersession holds a mirror
/// apart, a stop of a mirror goes to its producer, the status and admin routes show no usage
/// for one), so it is a plain property of the run, naming no replica type; how a mirror is
/// kept in step is the replica's business.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// Produced by this process (recorded in memory, or through the shared journal).
    Local,
    /// A local copy of a run another replica produces, followed from the shared journal.
    Mirror,
}

impl Origin {
    /// Whether the run is a mirror of a run another replica produces.
    pub fn is_mirror(self) -> bool {
        self == Origin::Mirror
    }
}

/// One recorded run.
#[derive(Debug)]
pub struct Run {
    id: RunId,
    journal: Box<dyn Journal>,
    observers: AtomicUsize,
    peak_observers: AtomicUsize,
    /// When the last observer left (`started` until one attaches).
    unobserved_since: Mutex<Instant>,
    started: Instant,
    producing: AtomicBool,
    finished_at: Mutex<Option<Instant>>,
    stop: Notify,
    stop_reason: Mutex<Option<EndReason>>,
    /// The registry's id-index keys of this run (its id and aliases), removed with it.
    index_keys: Mutex<Vec<IdKey>>,
    /// The run's first alias, when the backend named it.
    alias: Mutex<Option<RunId>>,
    /// Set when the run is a [`Origin::Mirror`]; see [`Run::origin`].
    mirror: AtomicBool,
    /// What the rooms above hang on the run, each under its own type.
    slots: Slots,
    /// Who recorded the run: bound once (see [`Run::bind_owner`]), never changed.
    owner: OnceLock<Owner>,
    /// Its route, format and wall-clock start, for the admin API.
    labels: Labels,
    /// Who watches it and what it has cost so far ([`crate::accounting`]).
    account: Mutex<Account>,
    /// The number of clients reading it, for whoever waits for the last one to leave.
    presence: watch::Sender<usize>,
}

/// What a run's accounting learns while it runs.
#[derive(Debug)]
struct Account {
    watch: Watch,
    /// The provider's usage so far, when its stream reported any.
    usage: Option<Usage>,
    /// Events recorded since the last client left (0 while one reads).
    unwatched_stretch: u64,
}

impl Run {
    /// A new, live run with an in-memory journal keeping the last `window` events as frames.
    pub fn new(id: impl Into<RunId>, window: usize) -> Self {
        let id = id.into();
        let journal = Box::new(MemoryJournal::new(&id, window));
        Run::with_journal(id, journal)
    }

    /// A new, live run over `journal`.
    pub fn with_journal(id: RunId, journal: Box<dyn Journal>) -> Self {
        let now = Instant::now();
        Run {
            id,
            journal,
            observers: AtomicUsize::new(0),
            peak_observers: AtomicUsize::new(0),
            unobserved_since: Mutex::new(now),
            started: now,
            producing: AtomicBool::new(true),
            finished_at: Mutex::new(None),
            stop: Notify::new(),
            stop_reason: Mutex::new(None),
            index_keys: Mutex::new(Vec::new()),
            alias: Mutex::new(None),
            mirror: AtomicBool::new(false),
            slots: Slots::default(),
            owner: OnceLock::new(),
            labels: Labels::new(),
            account: Mutex::new(Account {
                watch: Watch::new(now),
                usage: None,
                unwatched_stretch: 0,
            }),
            presence: watch::channel(0).0,
        }
    }

    /// Binds the run to the owner who recorded it, unless it is bound already (the first
    /// binding wins: a run produced here is bound as it goes live, a mirror of another
    /// replica's run when it is built from the journal, for the owner whose keys found it).
    /// Returns whether the run is `owner`'s.
    pub fn bind_owner(&self, owner: Owner) -> bool {
        self.owner.get_or_init(|| owner).is(&owner)
    }

    /// Who recorded the run, once bound.
    pub fn owner(&self) -> Option<Owner> {
        self.owner.get().copied()
    }

    /// The run's route, format and wall-clock start.
    pub fn labels(&self) -> &Labels {
        &self.labels
    }

    /// Whether the run was recorded for `owner` (false while it is bound to no one).
    pub fn is_owned_by(&self, owner: &Owner) -> bool {
        self.owner.get().is_some_and(|o| o.is(owner))
    }

    /// Marks the run as a mirror of a run another replica produces (a run is
    /// [`Origin::Local`] until then).
    pub fn mark_mirror(&self) {
        self.mirror.store(true, Ordering::Relaxed);
    }

    /// Where the run is produced.
    pub fn origin(&self) -> Origin {
        match self.mirror.load(Ordering::Relaxed) {
            true => Origin::Mirror,
            false => Origin::Local,
        }
    }

    /// What the rooms above hang on the run (see [`Slots`]).
    pub fn slots(&self) -> &Slots {
        &self.slots
    }

    /// A new, live run whose journal also keeps a raw record of `raw_cap` bytes when given.
    pub fn with_raw(id: impl Into<RunId>, window: usize, raw_cap: Option<usize>) -> Self {
        let id = id.into();
        let journal = Box::new(MemoryJournal::with_raw(&id, window, raw_cap));
        Run::with_journal(id, journal)
    }

    /// Remembers a registry id-index key of this run.
    pub fn add_index_key(&self, key: &IdKey) {
        self.index_keys.lock().push(key.clone());
    }

    /// The registry id-index keys of this run.
    pub fn index_keys(&self) -> Vec<IdKey> {
        self.index_keys.lock().clone()
    }

    /// Records the backend's name for the run (the first one wins).
    pub fn set_alias(&self, alias: &RunId) {
        self.alias.lock().get_or_insert_with(|| alias.clone());
    }

    /// The backend's name for the run, if it has one.
    pub fn alias(&self) -> Option<RunId> {
        self.alias.lock().clone()
    }

    /// The transport run id.
    pub fn id(&self) -> &RunId {
        &self.id
    }

    /// The run's log.
    pub fn journal(&self) -> &dyn Journal {
        &*self.journal
    }

    /// When the run was created.
    pub fn started(&self) -> Instant {
        self.started
    }

    /// When the producer finished, if it has.
    pub fn finished_at(&self) -> Option<Instant> {
        *self.finished_at.lock()
    }

    /// Asks the producer to stop reading the upstream (`reason` becomes the end's reason).
    /// The first request wins.
    pub fn request_stop(&self, reason: EndReason) {
        self.stop_reason.lock().get_or_insert(reason);
        self.stop.notify_one();
    }

    /// Resolves once a stop has been requested; returns its reason.
    pub async fn stop_requested(&self) -> EndReason {
        loop {
            if let Some(r) = *self.stop_reason.lock() {
                return r;
            }
            self.stop.notified().await;
        }
    }

    /// The last seq recorded.
    pub fn head(&self) -> u64 {
        self.journal.head()
    }

    /// The terminal state observers see, once set.
    pub fn end(&self) -> Option<End> {
        self.journal.ended()
    }

    /// Whether the producer is still reading the upstream.
    pub fn is_producing(&self) -> bool {
        self.producing.load(Ordering::Acquire)
    }

    /// Bytes held by the window and the history.
    pub fn bytes(&self) -> usize {
        self.journal.held_bytes()
    }

    /// A receiver woken after every batch of events and at the end.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.journal.subscribe()
    }

    /// Records a batch of events; see [`Journal::append`].
    pub fn append(&self, events: &[Event]) -> Appended {
        self.journal.append(events)
    }

    /// Records a batch of events with their raw frames; see [`Journal::append_raw`].
    pub fn append_raw(&self, events: &[Event], raw: Vec<crate::journal::raw::Frame>) -> Appended {
        self.journal.append_raw(events, raw)
    }

    /// Raw frames from `from` on; see [`Journal::read_raw`].
    pub fn read_raw(&self, from: u64, max: usize) -> Option<crate::journal::RawRead> {
        self.journal.read_raw(from, max)
    }

    /// Where a cursor lands in the raw record; see [`Journal::seek`].
    pub fn seek(&self, by: crate::journal::SeekBy<'_>) -> Option<crate::journal::raw::Seek> {
        self.journal.seek(by)
    }

    /// The frames after `after`; see [`Journal::read_after`].
    pub fn read_after(&self, after: u64, max: usize) -> Result<Read, CursorMiss> {
        self.journal.read_after(after, max)
    }

    /// Captures a snapshot, copying no text; see [`Journal::capture`].
    pub fn capture(&self) -> SnapshotCapture {
        self.journal.capture()
    }

    /// Counts an observer in, come as `how` (the run's watch record counts attaches and
    /// resumes); the guard counts it out when dropped.
    pub fn observe(self: &Arc<Self>, how: Join) -> ObserverGuard {
        let now = {
            let mut a = self.account.lock();
            a.watch.join(Instant::now(), how);
            a.unwatched_stretch = 0;
            self.observers.fetch_add(1, Ordering::Relaxed) + 1
        };
        self.peak_observers.fetch_max(now, Ordering::Relaxed);
        self.presence.send_replace(now);
        ObserverGuard(self.clone())
    }

    /// Counts `n` recorded events in the watch record. Returns whether no client was reading
    /// the run (they count as unwatched).
    pub fn watch_events(&self, n: u64) -> bool {
        let mut a = self.account.lock();
        let unwatched = a.watch.events(n);
        if unwatched {
            a.unwatched_stretch = a.unwatched_stretch.saturating_add(n);
        }
        unwatched
    }

    /// Events recorded since the last client left (0 while one reads the run).
    pub fn unwatched_stretch(&self) -> u64 {
        self.account.lock().unwatched_stretch
    }

    /// The run's watch record as of now (at its end, once it ended).
    pub fn watch_record(&self) -> WatchRecord {
        let end = self.finished_at().unwrap_or_else(Instant::now);
        self.account.lock().watch.so_far(end)
    }

    /// Publishes the provider's usage so far (the status route shows it).
    pub fn set_usage(&self, usage: Option<Usage>) {
        self.account.lock().usage = usage;
    }

    /// The provider's usage so far, when the stream reported any.
    pub fn usage(&self) -> Option<Usage> {
        self.account.lock().usage.clone()
    }

    /// A receiver of the number of clients reading the run, changed on every join and leave.
    pub fn presence(&self) -> watch::Receiver<usize> {
        self.presence.subscribe()
    }

    /// The most observers attached at once.
    pub fn peak_observers(&self) -> usize {
        self.peak_observers.load(Ordering::Relaxed)
    }

    /// Number of observers attached now.
    pub fn observers(&self) -> usize {
        self.observers.load(Ordering::Relaxed)
    }

    /// How long the run has had no observer, or `None` while one is attached.
    pub fn unobserved_for(&self) -> Option<Duration> {
        if self.observers() > 0 {
            return None;
        }
        Some(self.unobserved_since.lock().elapsed())
    }

    /// Ends the run for its observers (if not already ended), marks the producer done, and
    /// wakes observers.
    pub fn finish(&self, persisted: bool, reason: Option<EndReason>) -> End {
        let end = self.settle(persisted, reason);
        self.done();
        end
    }

    /// The first half of [`Self::finish`]: sets the end (the first end wins) without marking the
    /// producer done. The producer then accounts for the run and calls [`Self::done`], so
    /// whoever sees the producer done (a drain, a test) also sees the run counted.
    pub fn settle(&self, persisted: bool, reason: Option<EndReason>) -> End {
        self.journal.end(End::finished(persisted, reason)).0
    }

    /// The second half of [`Self::finish`]: marks the producer done and wakes observers.
    pub fn done(&self) {
        self.finished_at.lock().get_or_insert_with(Instant::now);
        self.producing.store(false, Ordering::Release);
        self.journal.wake();
    }

    /// Ends the run for its observers because `next` replaced it; the producer keeps going.
    /// Returns false when the run had already ended.
    pub fn supersede(&self, next: &RunId) -> bool {
        self.journal.end(End::superseded(next)).1
    }
}

/// Counts one observer of a run while alive.
#[derive(Debug)]
pub struct ObserverGuard(Arc<Run>);

impl Drop for ObserverGuard {
    fn drop(&mut self) {
        let run = &self.0;
        let left = {
            let mut a = run.account.lock();
            let now = Instant::now();
            a.watch.leave(now);
            let left = run
                .observers
                .fetch_sub(1, Ordering::Relaxed)
                .saturating_sub(1);
            if left == 0 {
                *run.unobserved_since.lock() = now;
            }
            left
        };
        run.presence.send_replace(left);
    }
}

mod labels;
mod slots;
#[cfg(test)]
mod tests;

pub use labels::Labels;
pub use slots::{Slots, MAX_SLOTS};
