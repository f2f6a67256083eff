//! The frames a producer hands the requester that runs it ([`Handoff`]): after an append, when
//! that reader waits caught up, the batch's protocol-1 frames, encoded from the events the
//! producer holds, so the reader writes them without reading them back from the journal.

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
#[derive(Debug, Default)]
pub struct Handoff(Mutex<State>);

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
        self.0.lock().armed = Some(cursor);
    }

    /// The reader reads the journal from here on: nothing is handed until it arms again.
    pub fn disarm(&self) {
        let mut st = self.0.lock();
        st.armed = None;
        st.handed = None;
    }

    /// How many appends were handed over.
    pub fn count(&self) -> u64 {
        self.0.lock().count
    }

    /// What was handed since the reader armed it, if anything (and disarms it).
    pub fn take(&self) -> Option<Handed> {
        let mut st = self.0.lock();
        st.armed = None;
        st.handed.take()
    }

    /// After `run` recorded `recorded` of `batch` (the producer's read loop calls it after
    /// every append): hands the batch's frames over when the reader waits armed just before it
    /// and the whole batch was recorded.
    pub fn appended(&self, run: &Run, batch: &[Event], recorded: usize) {
        let mut st = self.0.lock();
        let Some(cursor) = st.armed.take() else {
            return;
        };
        let n = batch.len() as u64;
        if recorded != batch.len() || n == 0 || run.head() != cursor + n {
            return;
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
    }
}
