//! The in-process journal: the replay window of recent events, the compacted history and the
//! terminal state under one lock, and a `watch` that wakes readers once per batch.
//!
//! Every event's JSON is kept in the run's [`Window`] (back to back in blocks) and encoded as its
//! protocol-1 `STREAM_EVENT` frame when an observer reads it, into the buffer that observer
//! writes. The newest event's frame, once encoded for one reader, is kept for the others that
//! read just it (many readers of one run read each event as it arrives). A snapshot is captured
//! under the lock without copying any text and serialized outside it.

use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;
use tokio::sync::watch;
use tokio::time::Instant;

use super::raw::{Frame, RawLog, Seek};
use super::tally::{Counted, Tally};
use super::window::Window;
use super::{Appended, CursorMiss, Journal, JsonRead, RawRead, Read, SeekBy, SnapshotCapture};
use crate::frame::EventEncoder;
use crate::record::compact::Compactor;
use crate::record::format::Event;
use crate::vocab::end::End;
use crate::vocab::RunId;

#[derive(Debug)]
struct State {
    head: u64,
    window: Window,
    history: Compactor,
    end: Option<End>,
    raw: Option<RawLog>,
    /// The newest event's frame as a reader encoded it, for the others that read just it.
    newest: Option<Newest>,
    /// The seq of the last event a reader read alone: a second reader of it keeps its frame,
    /// so a run with one reader keeps none.
    read_once: u64,
    /// Where [`Self::held`] is counted (the registry's recorded bytes), if anywhere.
    counted: Counted,
}

/// One event's encoded frame, kept for the readers that follow.
#[derive(Debug)]
struct Newest {
    seq: u64,
    frame: Bytes,
    arrival: Instant,
}

/// The largest frame [`State::newest`] keeps: a token event is about a hundred bytes; a big
/// event is encoded for each reader rather than held twice.
const NEWEST_MAX: usize = 4096;

impl State {
    fn held(&self) -> usize {
        self.window.allocated()
            + self.history.allocated()
            + self.raw.as_ref().map_or(0, RawLog::held)
            + self.newest.as_ref().map_or(0, |n| n.frame.len())
    }

    /// Pushes the frame of the newest event (seq `head`) to `out`: the kept one, or encoded
    /// now, and kept when small and read a second time. Returns its arrival.
    fn read_newest(&mut self, encoder: &EventEncoder, out: &mut Vec<Bytes>) -> Option<Instant> {
        if let Some(n) = self.newest.as_ref().filter(|n| n.seq == self.head) {
            out.push(n.frame.clone());
            return Some(n.arrival);
        }
        let arrival = self.window.read(self.head, 1, encoder, out)?;
        if self.read_once != self.head {
            self.read_once = self.head;
            return Some(arrival);
        }
        if let Some(frame) = out.last().filter(|f| f.len() <= NEWEST_MAX) {
            self.newest = Some(Newest {
                seq: self.head,
                frame: frame.clone(),
                arrival,
            });
            self.recount();
        }
        Some(arrival)
    }

    /// Re-counts what the log holds in its tally: after every change to it, under the lock.
    fn recount(&mut self) {
        let held = self.held();
        self.counted.update(held);
    }
}

/// A run's log held in this process.
#[derive(Debug)]
pub struct MemoryJournal {
    encoder: EventEncoder,
    state: Mutex<State>,
    wake: watch::Sender<u64>,
}

impl MemoryJournal {
    /// An empty log for run `run_id`, keeping the last `window` events as frames.
    pub fn new(run_id: &RunId, window: usize) -> Self {
        Self::with_raw(run_id, window, None)
    }

    /// Like [`Self::new`], also keeping the raw record within `raw_cap` bytes when given.
    pub fn with_raw(run_id: &RunId, window: usize, raw_cap: Option<usize>) -> Self {
        MemoryJournal {
            encoder: EventEncoder::new(run_id),
            state: Mutex::new(State {
                head: 0,
                window: Window::new(window, 1),
                history: Compactor::new(),
                end: None,
                raw: raw_cap.map(RawLog::new),
                newest: None,
                read_once: 0,
                counted: Counted::default(),
            }),
            wake: watch::channel(0).0,
        }
    }
}

/// A mirror's append found a gap: the events before `first` are missing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gap;

impl MemoryJournal {
    /// A mirror of another replica's run: its head is `at`, its history `history` (a
    /// checkpoint, at or after `at`'s events), and its raw record (when kept) starts at frame
    /// `raw_first`. Events are added by [`Self::append_at`].
    pub fn mirror(
        run_id: &RunId,
        window: usize,
        raw_cap: Option<usize>,
        at: u64,
        history: Compactor,
        raw_first: u64,
        named: bool,
    ) -> Self {
        let j = Self::with_raw(run_id, window, None);
        {
            let mut st = j.state.lock();
            st.head = at;
            st.window = Window::new(window, at + 1);
            st.history = history;
            st.raw = raw_cap.map(|cap| RawLog::starting_at(cap, raw_first, named));
            st.recount();
        }
        j
    }

    /// Records events whose first seq is `first`, skipping those already held (a retried
    /// read) and adding to the history only those after `history_after` (the checkpoint the
    /// history was seeded with). Raw frames start at index `raw_first`; those already held are
    /// skipped. Returns the events recorded, or [`Gap`] when `first` is past the head + 1.
    pub fn append_at(
        &self,
        first: u64,
        events: &[Event],
        raw: Vec<Frame>,
        raw_first: u64,
        history_after: u64,
    ) -> Result<usize, Gap> {
        let mut st = self.state.lock();
        if st.end.is_some() {
            return Ok(0);
        }
        if first > st.head + 1 {
            return Err(Gap);
        }
        let skip = (st.head + 1 - first) as usize;
        let now = Instant::now();
        let mut n = 0;
        for e in events.iter().skip(skip) {
            st.head += 1;
            let head = st.head;
            st.window.push(&e.json, e.sse_name.as_deref(), now);
            if head > history_after {
                st.history.push(e);
            }
            n += 1;
        }
        if let Some(log) = &mut st.raw {
            let have = log.end();
            for (i, f) in raw.into_iter().enumerate() {
                if raw_first + i as u64 >= have {
                    log.push(f);
                }
            }
        }
        st.recount();
        let head = st.head;
        drop(st);
        if n > 0 {
            self.wake.send_replace(head);
        }
        Ok(n)
    }

    /// Takes over the log of `other` (a mirror re-seeded after a gap) and wakes readers: a
    /// reader behind the new window is reset by snapshot, as any lagged reader.
    pub fn replace_with(&self, other: MemoryJournal) {
        let mut new = other.state.into_inner();
        let head = new.head;
        let mut st = self.state.lock();
        // The tally this log is counted in stays; it counts the new log from now on.
        new.counted = std::mem::take(&mut st.counted);
        *st = new;
        st.recount();
        drop(st);
        self.wake.send_replace(head);
    }

    /// The raw record's next frame index (0 when none is kept).
    pub fn raw_end(&self) -> u64 {
        self.state.lock().raw.as_ref().map_or(0, RawLog::end)
    }
}

impl Journal for MemoryJournal {
    fn append_raw(&self, events: &[Event], raw: Vec<Frame>) -> Appended {
        if events.is_empty() {
            return Appended::default();
        }
        let now = Instant::now();
        let mut st = self.state.lock();
        if st.end.is_some() {
            return Appended::default();
        }
        let before = st.held() as isize;
        for e in events {
            st.head += 1;
            st.window.push(&e.json, e.sse_name.as_deref(), now);
            st.history.push(e);
        }
        if let Some(log) = &mut st.raw {
            raw.into_iter().for_each(|f| log.push(f));
        }
        let head = st.head;
        st.recount();
        let appended = Appended {
            events: events.len(),
            bytes: st.held() as isize - before,
        };
        drop(st);
        self.wake.send_replace(head);
        appended
    }

    fn read_after(&self, after: u64, max: usize) -> Result<Read, CursorMiss> {
        let mut st = self.state.lock();
        if after > st.head {
            return Err(CursorMiss::Ahead);
        }
        if after + 1 < st.window.first() {
            return Err(CursorMiss::Expired);
        }
        let mut read = Read {
            last: after,
            head: st.head,
            ..Read::default()
        };
        read.last_arrival = if after + 1 == st.head && max > 0 {
            st.read_newest(&self.encoder, &mut read.frames)
        } else {
            st.window
                .read(after + 1, max, &self.encoder, &mut read.frames)
        };
        read.last = after + read.frames.len() as u64;
        if let Some(end) = &st.end {
            if read.last >= end.seq {
                read.end = Some(end.clone());
                read.frames
                    .truncate((end.seq.saturating_sub(after)) as usize);
                read.last = read.last.min(end.seq);
            }
        }
        Ok(read)
    }

    fn read_json_after(
        &self,
        after: u64,
        max: usize,
        out: &mut BytesMut,
    ) -> Result<JsonRead, CursorMiss> {
        let st = self.state.lock();
        if after > st.head {
            return Err(CursorMiss::Ahead);
        }
        if after + 1 < st.window.first() {
            return Err(CursorMiss::Expired);
        }
        // Never past the end (a mirror's window may hold events after it).
        let last = st.end.as_ref().map_or(st.head, |e| e.seq.min(st.head));
        let max = max.min(last.saturating_sub(after) as usize);
        let n = st.window.read_json(after + 1, max, out) as u64;
        let last = after + n;
        Ok(JsonRead {
            last,
            end: st.end.clone().filter(|e| last >= e.seq),
            head: st.head,
        })
    }

    fn capture(&self) -> SnapshotCapture {
        let mut st = self.state.lock();
        let cap = SnapshotCapture {
            seq: st.head,
            history: st.history.capture(),
            end: st.end.clone(),
            raw_end: st.raw.as_ref().map_or(0, RawLog::end),
            named: st.raw.as_ref().is_some_and(RawLog::named),
        };
        // Sealing the history's open block may change what it holds.
        st.recount();
        cap
    }

    fn read_raw(&self, from: u64, max: usize) -> Option<RawRead> {
        let st = self.state.lock();
        let log = st.raw.as_ref()?;
        if from < log.first() {
            return Some(RawRead {
                expired: true,
                ..RawRead::default()
            });
        }
        let frames = log.read(from, max);
        let next = frames.last().map_or(from, |(i, _)| i + 1);
        Some(RawRead {
            end: st.end.clone().filter(|_| next >= log.end()),
            frames,
            next,
            expired: false,
            more: next < log.end(),
        })
    }

    fn seek(&self, by: SeekBy<'_>) -> Option<Seek> {
        let st = self.state.lock();
        let log = st.raw.as_ref()?;
        Some(match by {
            SeekBy::Index(n) => log.seek_index(n),
            SeekBy::Id(id) => log.seek_id(id),
            SeekBy::Cursor(c) => log.seek_cursor(c),
        })
    }

    fn end(&self, mut end: End) -> (End, bool) {
        let mut st = self.state.lock();
        if let Some(e) = &st.end {
            return (e.clone(), false);
        }
        end.seq = st.head;
        st.end = Some(end.clone());
        drop(st);
        self.wake.send_modify(|_| {});
        (end, true)
    }

    fn ended(&self) -> Option<End> {
        self.state.lock().end.clone()
    }

    fn head(&self) -> u64 {
        self.state.lock().head
    }

    fn held_bytes(&self) -> usize {
        self.state.lock().held()
    }

    fn join_tally(&self, tally: &Tally) -> bool {
        let mut st = self.state.lock();
        let held = st.held();
        st.counted.join(tally, held)
    }

    fn leave_tally(&self) -> bool {
        self.state.lock().counted.leave()
    }

    fn subscribe(&self) -> watch::Receiver<u64> {
        self.wake.subscribe()
    }

    fn wake(&self) {
        self.wake.send_modify(|_| {});
    }
}
