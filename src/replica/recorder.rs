//! [`Recorder`]: the journal of a run produced on this replica with a shared journal set. It
//! records into the in-process journal as always and encodes each batch into the run's append
//! lane ([`super::pipe::lane`]), which the write pipeline sends without a hop through the run's
//! writer task; the end, the producer's finish and aliases go to the writer
//! ([`super::writer`]). A full queue or lane marks the run for a re-base instead of waiting.
//!
//! One end for every reader: once the run is in Redis, the producer's end is held, not shown to
//! this replica's readers, until Redis decides which end the run has (the first end written
//! wins there: the producer's own, or the reaper's `owner_lost` when it got there first); the
//! writer then delivers that one here ([`Core::deliver`]). A run not yet in Redis holds its end
//! too while its writer's go-live is under way (the go-live and the end are then written one
//! after the other, and another end may come between them); it shows its end at once when the
//! go-live could not be sent (Redis cannot be reached): no other replica knows the run, and
//! its writer writes it into Redis ended with that end, in one step.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::{mpsc, watch};

use super::pipe::lane::Lane;
use crate::journal::memory::MemoryJournal;
use crate::journal::raw::{Frame, Seek};
use crate::journal::{
    Appended, CursorMiss, Journal, JsonRead, RawRead, Read, SeekBy, SnapshotCapture,
};
use crate::record::format::Event;
use crate::vocab::end::End;
use crate::vocab::RunId;

/// Messages queued per run before the journal degrades for it.
const QUEUE: usize = 4096;

pub(super) enum Msg {
    End(End),
    Done,
    Alias(RunId),
}

pub(super) struct Core {
    pub(super) inner: MemoryJournal,
    /// Held across a local append and its encoding into the lane, and across a capture, so a
    /// capture at seq C follows every batch up to C in the lane.
    pub(super) order: Mutex<()>,
    tx: mpsc::Sender<Msg>,
    /// The run's append lane (its `lost` flag: the writer must re-base).
    pub(super) lane: Arc<Lane>,
    /// The run went live in Redis (set by the writer): its end waits for Redis's verdict.
    pub(super) journaled: AtomicBool,
    /// The writer's go-live could not be sent (Redis cannot be reached): until the run is
    /// journaled, its end is shown at once.
    pub(super) unheard: AtomicBool,
    /// The producer's end while it waits for Redis's verdict (readers here do not see it yet).
    held: Mutex<Option<End>>,
}

impl Core {
    /// Shows `end`, the one Redis settled on (or the one the rules pick while Redis is down),
    /// to this replica's readers; a held end is dropped. The first end shown wins.
    pub(super) fn deliver(&self, end: End) -> End {
        let _order = self.order.lock();
        self.held.lock().take();
        self.inner.end(end).0
    }

    /// The writer's go-live could not be sent: an end held for it is shown now, and any end
    /// until the run is journaled is shown at once.
    pub(super) fn unheard(&self) {
        let _order = self.order.lock();
        self.unheard.store(true, Ordering::Relaxed);
        if self.journaled.load(Ordering::Acquire) {
            return;
        }
        if let Some(end) = self.held.lock().take() {
            self.inner.end(end);
        }
    }
}

/// The journal of a run produced on this replica with a shared journal configured.
#[derive(Clone)]
pub struct Recorder(Arc<Core>);

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Recorder")
    }
}

impl Recorder {
    /// A journal for run `run_id` and the receiver its writer reads.
    pub fn new(run_id: &RunId, window: usize, raw_cap: Option<usize>) -> (Self, WriterInbox) {
        let (tx, rx) = mpsc::channel(QUEUE);
        let core = Arc::new(Core {
            inner: MemoryJournal::with_raw(run_id, window, raw_cap),
            order: Mutex::new(()),
            tx,
            lane: Arc::new(Lane::default()),
            journaled: AtomicBool::new(false),
            unheard: AtomicBool::new(false),
            held: Mutex::new(None),
        });
        (Recorder(core.clone()), WriterInbox { rx, core })
    }

    /// Queues `m` for the writer; false (the run marked for a re-base) when the queue is full.
    fn send(&self, m: Msg) -> bool {
        let sent = self.0.tx.try_send(m).is_ok();
        if !sent {
            self.0.lane.lost.store(true, Ordering::Relaxed);
        }
        sent
    }

    /// Tells the journal about an alias of the run (indexed for every replica).
    pub fn alias(&self, alias: &RunId) {
        let _ = self.send(Msg::Alias(alias.clone()));
    }
}

impl Journal for Recorder {
    fn append_raw(&self, events: &[Event], raw: Vec<Frame>) -> Appended {
        let c = &self.0;
        let _order = c.order.lock();
        let first = c.inner.head() + 1;
        let raw_first = c.inner.raw_end();
        if c.held.lock().is_some() {
            // The producer ended: nothing after its end is recorded.
            return Appended::default();
        }
        if c.inner.ended().is_some() || events.is_empty() {
            return c.inner.append_raw(events, raw);
        }
        c.lane.push(first, events, raw_first, &raw);
        c.inner.append_raw(events, raw)
    }
    fn read_raw(&self, from: u64, max: usize) -> Option<RawRead> {
        self.0.inner.read_raw(from, max)
    }
    fn seek(&self, by: SeekBy<'_>) -> Option<Seek> {
        self.0.inner.seek(by)
    }
    fn read_after(&self, after: u64, max: usize) -> Result<Read, CursorMiss> {
        self.0.inner.read_after(after, max)
    }
    fn read_json_after(
        &self,
        after: u64,
        max: usize,
        out: &mut bytes::BytesMut,
    ) -> Result<JsonRead, CursorMiss> {
        self.0.inner.read_json_after(after, max, out)
    }
    fn capture(&self) -> SnapshotCapture {
        self.0.inner.capture()
    }
    fn end(&self, mut end: End) -> (End, bool) {
        let c = &self.0;
        let _order = c.order.lock();
        if !c.journaled.load(Ordering::Acquire) && c.unheard.load(Ordering::Relaxed) {
            // Not in Redis, which cannot be reached: no other replica knows the run, its own
            // end is the one (written with the run once Redis is back).
            let (end, set) = c.inner.end(end);
            if set {
                let _ = self.send(Msg::End(end.clone()));
            }
            return (end, set);
        }
        let mut held = c.held.lock();
        if let Some(e) = c.inner.ended().or_else(|| held.clone()) {
            return (e, false);
        }
        end.seq = c.inner.head();
        if !self.send(Msg::End(end.clone())) {
            // The writer cannot hear of it: shown now (the re-base writes the run again).
            return c.inner.end(end);
        }
        *held = Some(end.clone());
        (end, true)
    }
    fn ended(&self) -> Option<End> {
        self.0.inner.ended()
    }
    fn head(&self) -> u64 {
        self.0.inner.head()
    }
    fn held_bytes(&self) -> usize {
        self.0.inner.held_bytes()
    }
    fn join_tally(&self, tally: &crate::journal::tally::Tally) -> bool {
        self.0.inner.join_tally(tally)
    }
    fn leave_tally(&self) -> bool {
        self.0.inner.leave_tally()
    }
    fn subscribe(&self) -> watch::Receiver<u64> {
        self.0.inner.subscribe()
    }
    fn wake(&self) {
        self.0.inner.wake();
        let _ = self.send(Msg::Done);
    }
}

/// The writer's end of a [`Recorder`].
pub struct WriterInbox {
    pub(super) rx: mpsc::Receiver<Msg>,
    pub(super) core: Arc<Core>,
}
