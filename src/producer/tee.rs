//! The legacy tee: a legacy (not protocol-1) requester's copy of a recorded run's upstream bytes,
//! queued by the producer and written by the requester's relay.
//!
//! The queue is bounded in bytes, not reads: every chunk it holds, and the one the relay is
//! writing, is charged to the reader's own budget (`[limits] max_client_buffer_bytes`) and to the
//! sidecar-wide [`Budget`] (`[limits] max_buffered_bytes`). A chunk that does not fit in either
//! cuts the reader off ([`Cut`]) at once, even while its relay is stuck writing to a client that
//! does not read ([`TeeReader::cut`]); the producer goes on recording. Dropping the queue gives
//! every byte back.

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::budget::{Budget, Charge};
use crate::metrics::CutReason;

/// Chunks queued at most, whatever their size (a second bound beside the bytes).
pub(super) const RAW_QUEUE: usize = 1024;
/// Bytes counted for each queued chunk on top of its length (its slot and handle).
const CHUNK_OVERHEAD: usize = 64;

/// A chunk and the bytes it holds against both budgets.
struct Queued {
    bytes: Bytes,
    _own: Charge,
    _global: Charge,
}

/// The producer's side of a legacy requester's copy of the upstream bytes.
pub(super) struct Tee {
    data: mpsc::Sender<Queued>,
    clean: oneshot::Sender<()>,
    cut: CancellationToken,
    own: Budget,
    global: Budget,
}

/// Why a chunk could not be queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Cut {
    /// The reader is gone (its client left).
    Gone,
    /// The reader fell too far behind, or the sidecar-wide budget is spent.
    Slow(CutReason),
}

impl Tee {
    /// Queues `chunk` for the reader, or says why it cannot be.
    pub(super) fn send(&self, chunk: Bytes) -> Result<(), Cut> {
        if self.data.is_closed() {
            return Err(Cut::Gone);
        }
        let n = chunk.len() + CHUNK_OVERHEAD;
        let own = self
            .own
            .try_charge(n)
            .ok_or(Cut::Slow(CutReason::QueueFull))?;
        let global = self
            .global
            .try_charge(n)
            .ok_or(Cut::Slow(CutReason::Budget))?;
        let queued = Queued {
            bytes: chunk,
            _own: own,
            _global: global,
        };
        self.data.try_send(queued).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => Cut::Slow(CutReason::QueueFull),
            mpsc::error::TrySendError::Closed(_) => Cut::Gone,
        })
    }

    /// Tells the reader the upstream ended cleanly; it reads what is queued, then the end.
    pub(super) fn end_clean(self) {
        let _ = self.clean.send(());
    }

    /// Cuts the reader off now: what it has queued is not written, its stream ends cut.
    pub(super) fn cut(self) {
        self.cut.cancel();
    }
}

/// A legacy requester's copy of the upstream bytes. The data channel closes when the upstream
/// ended or when this reader fell too far behind; only a clean upstream end also delivers the
/// clean mark, so a cut is never mistaken for an end.
pub struct TeeReader {
    data: mpsc::Receiver<Queued>,
    clean: oneshot::Receiver<()>,
    cut: CancellationToken,
    /// The chunk handed out last, still charged while the relay writes it.
    writing: Option<Queued>,
}

/// A legacy client's copy ended without the upstream's clean end: the upstream failed, the run
/// was stopped, or this reader fell too far behind and was cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the stream was cut before the upstream's clean end")]
pub struct StreamCut;

impl TeeReader {
    /// The next chunk; `Ok(None)` once the upstream ended cleanly, `Err(StreamCut)` when the stream was
    /// cut (upstream failure, stop, or this reader too slow). The chunk handed out by the
    /// previous call stops counting against the budgets now.
    pub async fn next(&mut self) -> Result<Option<Bytes>, StreamCut> {
        self.writing = None;
        let next = tokio::select! {
            biased;
            _ = self.cut.cancelled() => return Err(StreamCut),
            q = self.data.recv() => q,
        };
        match next {
            Some(q) => {
                let bytes = q.bytes.clone();
                self.writing = Some(q);
                Ok(Some(bytes))
            }
            // The producer sends the clean mark before it drops the data channel.
            None => match self.clean.try_recv() {
                Ok(()) => Ok(None),
                Err(_) => Err(StreamCut),
            },
        }
    }

    /// Resolves once the producer cut this reader off (too slow, or the budget is spent): a relay
    /// writing to its client gives up then rather than at its write timeout.
    pub async fn cut(&self) {
        self.cut.cancelled().await
    }
}

/// A tee whose reader may hold `own` bytes, charged also to `global`.
pub(super) fn tee(own: usize, global: &Budget) -> (Tee, TeeReader) {
    let (data_tx, data_rx) = mpsc::channel(RAW_QUEUE);
    let (clean_tx, clean_rx) = oneshot::channel();
    let cut = CancellationToken::new();
    (
        Tee {
            data: data_tx,
            clean: clean_tx,
            cut: cut.clone(),
            own: Budget::new(own),
            global: global.clone(),
        },
        TeeReader {
            data: data_rx,
            clean: clean_rx,
            cut,
            writing: None,
        },
    )
}

#[cfg(test)]
mod tests;
