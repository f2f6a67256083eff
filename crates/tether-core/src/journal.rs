//! The journal: the seam a run's log lives behind. It assigns seqs, keeps the replay window of
//! recent events and the compacted history, holds the terminal state, and wakes readers.
//!
//! The producer is the only writer; observers read by cursor ([`Journal::read_after`]) or take a
//! snapshot ([`Journal::capture`]), and wait on [`Journal::subscribe`]. [`memory::MemoryJournal`]
//! is the in-process implementation; a shared journal (several replicas) implements the same
//! trait. Pure: no I/O, no Pingora.

pub mod memory;
pub mod raw;
pub mod tally;
pub mod window;

use std::fmt::Debug;

use bytes::Bytes;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::record::compact::Capture;
use crate::record::format::Event;
use raw::{Frame, Seek};

use crate::vocab::end::End;

/// Default number of events kept in a run's replay window (`--window`).
pub const DEFAULT_WINDOW: usize = 4096;

/// Why a cursor cannot be served from the window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CursorMiss {
    /// The cursor is past the run's head.
    Ahead,
    /// The events after the cursor have left the window.
    Expired,
}

/// What a read after a cursor returns.
#[derive(Debug, Default)]
pub struct Read {
    /// Encoded event frames after the cursor, in seq order.
    pub frames: Vec<Bytes>,
    /// The seq of the last frame returned (the cursor when none).
    pub last: u64,
    /// The run's terminal state, present once `last` reached the run's end.
    pub end: Option<End>,
    /// Arrival time of the last frame returned (for delivery-delay metrics).
    pub last_arrival: Option<Instant>,
    /// The run's head seq at the time of the read.
    pub head: u64,
}

/// What a read of events' JSON after a cursor returns (the JSON went to the caller's buffer).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct JsonRead {
    /// The seq of the last event written (the cursor when none).
    pub last: u64,
    /// The run's terminal state, present once `last` reached the run's end.
    pub end: Option<End>,
    /// The run's head seq at the time of the read.
    pub head: u64,
}

/// A snapshot captured under the journal's lock: shares the history, copies no text.
#[derive(Debug, Clone)]
pub struct SnapshotCapture {
    /// The last seq the snapshot covers.
    pub seq: u64,
    /// The compacted history up to `seq`.
    pub history: Capture,
    /// The terminal state, if the run had ended at capture time.
    pub end: Option<End>,
    /// The raw record's next frame index at capture time: the live tail after the snapshot
    /// starts there.
    pub raw_end: u64,
    /// Whether the upstream used `event:` lines (known from the raw record).
    pub named: bool,
}

/// What a read of the raw record returns.
#[derive(Debug, Default)]
pub struct RawRead {
    /// Frames from the requested index on, each with its index.
    pub frames: Vec<(u64, Bytes)>,
    /// The index after the last frame returned.
    pub next: u64,
    /// The run's terminal state, once `next` reached the record's end after the run ended.
    pub end: Option<End>,
    /// The requested frames are no longer kept.
    pub expired: bool,
    /// The record held more frames after `next` than this read took (read again at once).
    pub more: bool,
}

/// A cursor into the raw record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeekBy<'a> {
    /// The frame index the client wants next.
    Index(u64),
    /// After the frame with this SSE event id.
    Id(&'a [u8]),
    /// After the frame with this cursor-field value (`-1`: from the start).
    Cursor(i64),
}

/// Result of appending a batch of events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Appended {
    /// Events recorded.
    pub events: usize,
    /// Change in bytes held by the journal.
    pub bytes: isize,
}

/// One run's log.
pub trait Journal: Send + Sync + Debug {
    /// Records a batch of events (one upstream read) and wakes readers once. Events arriving
    /// after the run's end (a superseded run) are not recorded: `events` says how many were.
    fn append(&self, events: &[Event]) -> Appended {
        self.append_raw(events, Vec::new())
    }

    /// [`Self::append`], with the batch's raw frames for the raw record (kept only when the
    /// journal keeps one).
    fn append_raw(&self, events: &[Event], raw: Vec<Frame>) -> Appended;

    /// Raw frames from index `from` on, up to `max`; `None` when no raw record is kept.
    fn read_raw(&self, from: u64, max: usize) -> Option<RawRead>;

    /// Where a cursor lands in the raw record; `None` when no raw record is kept.
    fn seek(&self, by: SeekBy<'_>) -> Option<Seek>;

    /// The frames after `after`, up to `max` of them, or why the window cannot serve them.
    fn read_after(&self, after: u64, max: usize) -> Result<Read, CursorMiss>;

    /// Like [`Self::read_after`], writing the events' JSON (no frame envelope) to `out`, each
    /// after a comma unless `out` ends with `[`: a Durable Streams reader's messages.
    fn read_json_after(
        &self,
        after: u64,
        max: usize,
        out: &mut bytes::BytesMut,
    ) -> Result<JsonRead, CursorMiss>;

    /// Captures a snapshot of the whole history now, copying no text.
    fn capture(&self) -> SnapshotCapture;

    /// Sets the run's end at its head, unless one is already set (the first end wins), and
    /// wakes readers. Returns the end in force and whether this call set it.
    fn end(&self, end: End) -> (End, bool);

    /// The terminal state, once set.
    fn ended(&self) -> Option<End>;

    /// The last seq recorded.
    fn head(&self) -> u64;

    /// Bytes held by the window and the history.
    fn held_bytes(&self) -> usize;

    /// Starts counting [`Self::held_bytes`] in `tally`, kept up to date under the journal's own
    /// lock after every change (see [`tally`]). False when already counted in one.
    fn join_tally(&self, tally: &tally::Tally) -> bool;

    /// Stops counting in the tally joined, taking out exactly what was counted. False when not
    /// counted.
    fn leave_tally(&self) -> bool;

    /// A receiver woken after every batch of events, at the end, and by [`Journal::wake`].
    fn subscribe(&self) -> watch::Receiver<u64>;

    /// Wakes every reader without a change to the log (the producer finished).
    fn wake(&self);
}

impl<J: Journal> Journal for std::sync::Arc<J> {
    fn append_raw(&self, events: &[Event], raw: Vec<Frame>) -> Appended {
        (**self).append_raw(events, raw)
    }
    fn read_raw(&self, from: u64, max: usize) -> Option<RawRead> {
        (**self).read_raw(from, max)
    }
    fn seek(&self, by: SeekBy<'_>) -> Option<Seek> {
        (**self).seek(by)
    }
    fn read_after(&self, after: u64, max: usize) -> Result<Read, CursorMiss> {
        (**self).read_after(after, max)
    }
    fn read_json_after(
        &self,
        after: u64,
        max: usize,
        out: &mut bytes::BytesMut,
    ) -> Result<JsonRead, CursorMiss> {
        (**self).read_json_after(after, max, out)
    }
    fn capture(&self) -> SnapshotCapture {
        (**self).capture()
    }
    fn end(&self, end: End) -> (End, bool) {
        (**self).end(end)
    }
    fn ended(&self) -> Option<End> {
        (**self).ended()
    }
    fn head(&self) -> u64 {
        (**self).head()
    }
    fn held_bytes(&self) -> usize {
        (**self).held_bytes()
    }
    fn join_tally(&self, tally: &tally::Tally) -> bool {
        (**self).join_tally(tally)
    }
    fn leave_tally(&self) -> bool {
        (**self).leave_tally()
    }
    fn subscribe(&self) -> watch::Receiver<u64> {
        (**self).subscribe()
    }
    fn wake(&self) {
        (**self).wake()
    }
}

#[cfg(test)]
mod tests;
