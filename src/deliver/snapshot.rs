//! The protocol-1 snapshot an observer starts from: serialized outside the journal's lock and at
//! most once per seq, cached on the run's handle (a slot of its own, see
//! [`crate::state::run::Slots`]), so a reconnect storm serializes it once.

use bytes::Bytes;

use crate::dialect::{protocol1::Protocol1, Dialect};
use crate::state::run::Run;
use crate::vocab::end::End;

/// A serialized snapshot of a run.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// The last seq it covers.
    pub seq: u64,
    /// The `STREAM_SNAPSHOT` frame.
    pub frame: Bytes,
    /// The terminal state at capture time.
    pub end: Option<End>,
    /// Whether this call serialized it (false: served from the per-seq cache).
    pub serialized: bool,
}

/// The last frame serialized for a run, and the seq it covers.
#[derive(Debug)]
struct Cached {
    seq: u64,
    frame: Bytes,
}

/// A run's snapshot cache (its slot). An async lock: concurrent callers wait for one
/// serialization.
#[derive(Debug, Default)]
struct SnapshotCache(tokio::sync::Mutex<Option<Cached>>);

/// The serialized `STREAM_SNAPSHOT` frame of `run` now. Serialized outside the journal's lock,
/// and at most once per seq: concurrent callers wait for one serialization.
pub async fn snapshot(run: &Run) -> Snapshot {
    let slot = run.slots().get_or_insert_with(SnapshotCache::default);
    let mut cache = slot.0.lock().await;
    let (head, end) = (run.head(), run.end());
    if let Some(c) = cache.as_ref().filter(|c| c.seq == head) {
        return Snapshot {
            seq: head,
            frame: c.frame.clone(),
            end,
            serialized: false,
        };
    }
    let cap = run.capture();
    let frame = Protocol1.snapshot(run.id(), cap.seq, &cap.history);
    *cache = Some(Cached {
        seq: cap.seq,
        frame: frame.clone(),
    });
    Snapshot {
        seq: cap.seq,
        frame,
        end: cap.end,
        serialized: true,
    }
}

#[cfg(test)]
mod tests;
