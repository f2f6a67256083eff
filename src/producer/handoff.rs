//! The frames a producer hands the requester that runs it ([`Handoff`]): after an append, when
//! that reader waits caught up, the batch's protocol-1 frames, encoded from the events the
//! producer holds, so the reader writes them without reading them back from the journal.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;
use tokio::time::Instant;

use crate::frame::EventEncoder;
use crate::record::format::Event;
use crate::state::run::Run;

/// Between a producer and the reader in its task: the reader arms it with its cursor when it
/// waits caught up; the producer's next append, when it follows that cursor, leaves the
/// batch's frames here (and disarms it). Anything else (a second append before the reader
/// took the first, an append that recorded less than its batch, a cursor that does not match)
/// hands nothing, and the reader reads the journal as any reader does.
///
/// It also paces the producer while the reader writes a backlog: the reader says how far it has
/// written ([`Self::wrote`]), and a producer more than [`LEAD`] events ahead of that lets the
/// task's reader write before it reads on ([`Self::pace`]), so an upstream faster than one poll
/// of the task can read does not run the reader out of the window before it writes at all.
#[derive(Debug, Default)]
pub struct Handoff {
    st: Mutex<State>,
    /// The reader's cursor after its last write; `u64::MAX` once it no longer paces the producer.
    written: AtomicU64,
}

/// Events a producer reads ahead of the reader polled beside it before it lets that reader
/// write: one write's worth.
pub const LEAD: u64 = 512;

#[derive(Debug, Default)]
struct State {
    /// The cursor of the waiting reader.
    armed: Option<u64>,
    /// The run's frame encoder, made at the first handoff.
    encoder: Option<EventEncoder>,
    handed: Option<Handed>,
    /// Appends handed over so far.
    count: u64,
}

/// Frames handed over: the events after the reader's cursor up to `last`, encoded as the
/// journal encodes them.
#[derive(Debug)]
pub struct Handed {
    /// Their `STREAM_EVENT` frames, back to back.
    pub frames: Bytes,
    /// The seq of the first.
    pub first: u64,
    /// The seq of the last.
    pub last: u64,
    /// When they were recorded.
    pub at: Instant,
}

impl Handoff {
    /// A handoff, unarmed, shared by the producer and its reader.
    pub fn new() -> Arc<Handoff> {
        Arc::new(Handoff::default())
    }

    /// The reader waits caught up at `cursor`: the next append after it is handed over.
    pub fn arm(&self, cursor: u64) {
        self.st.lock().armed = Some(cursor);
    }

    /// The reader reads the journal from here on: nothing is handed until it arms again.
    pub fn disarm(&self) {
        let mut st = self.st.lock();
        st.armed = None;
        st.handed = None;
    }

    /// The reader wrote everything up to `cursor`.
    pub fn wrote(&self, cursor: u64) {
        self.written.store(cursor, Ordering::Relaxed);
    }

    /// The reader no longer paces the producer (it is done, or the producer went on in a task
    /// of its own).
    pub fn release(&self) {
        self.written.store(u64::MAX, Ordering::Relaxed);
    }

    /// Whether a run at `head` is more than [`LEAD`] events ahead of the reader's writes.
    fn ahead(&self, head: u64) -> bool {
        head > self.written.load(Ordering::Relaxed).saturating_add(LEAD)
    }

    /// After an append to `run` that was not `handed` over (the reader was not waiting): lets
    /// the task's reader write before the producer reads on, when the run is more than [`LEAD`]
    /// events ahead of it. The producer's read loop calls it after every append.
    pub async fn pace(&self, run: &Run, handed: bool) {
        if !handed && self.ahead(run.head()) {
            tokio::task::yield_now().await;
        }
    }

    /// How many appends were handed over.
    pub fn count(&self) -> u64 {
        self.st.lock().count
    }

    /// What was handed since the reader armed it, if anything (and disarms it).
    pub fn take(&self) -> Option<Handed> {
        let mut st = self.st.lock();
        st.armed = None;
        st.handed.take()
    }

    /// After `run` recorded `recorded` of `batch` (the producer's read loop calls it after
    /// every append): hands the batch's frames over when the reader waits armed just before it
    /// and the whole batch was recorded. False when the reader was not waiting (it is writing,
    /// or behind).
    pub fn appended(&self, run: &Run, batch: &[Event], recorded: usize) -> bool {
        let mut st = self.st.lock();
        let Some(cursor) = st.armed.take() else {
            return false;
        };
        let n = batch.len() as u64;
        if recorded != batch.len() || n == 0 || run.head() != cursor + n {
            return true;
        }
        let encoder = st
            .encoder
            .get_or_insert_with(|| EventEncoder::new(run.id()));
        let size = batch.iter().map(|e| {
            let name = e.sse_name.as_ref().map_or(0, |n| n.len());
            encoder.max_len_named(e.json.len(), name)
        });
        let mut out = BytesMut::with_capacity(size.sum());
        for (seq, e) in (cursor + 1..).zip(batch) {
            let name = e.sse_name.as_deref().filter(|n| !n.is_empty());
            encoder.write_split(&mut out, seq, &e.json, &[], name);
        }
        st.count += 1;
        st.handed = Some(Handed {
            frames: out.freeze(),
            first: cursor + 1,
            last: cursor + n,
            at: Instant::now(),
        });
        true
    }
}
