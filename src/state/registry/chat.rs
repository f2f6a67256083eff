//! One chat's entry in the registry: its owner, its current and older runs, what is pending, and
//! the per-chat memories (stops, idempotency keys). Keeping `MAX_OLDER` older runs is the one
//! place a chat lets a run go on its own ([`Chat::push_older`]).

use std::collections::VecDeque;
use std::sync::Arc;

use tokio::time::Instant;

use super::cancels::Cancel;
use crate::state::auth::Owner;
use crate::state::run::Run;
use crate::vocab::RunId;

/// One idempotency key a chat remembers: the run its request started and the request body's
/// hash (the registry's `idempotency` part reads and writes them).
#[derive(Debug, Clone)]
pub(super) struct Key {
    pub(super) key: String,
    pub(super) run_id: RunId,
    pub(super) body: [u8; 32],
}

/// Superseded runs kept per chat for cursor reads (the oldest completed one goes first).
const MAX_OLDER: usize = 4;

#[derive(Debug)]
pub(super) struct Chat {
    pub(super) owner: Owner,
    pub(super) current: Option<Arc<Run>>,
    pub(super) older: Vec<Arc<Run>>,
    /// Run ids of record requests forwarded whose upstream has not answered yet.
    pub(super) pending: Vec<RunId>,
    /// An `on_miss = record` attach is fetching the backend's live stream.
    pub(super) attach_recording: bool,
    /// `cancel_request_id` → the run it stopped.
    pub(super) cancels: VecDeque<Cancel>,
    /// Idempotency keys of record requests: the run each started and its request body's hash
    /// (the registry's `idempotency` part).
    pub(super) keys: VecDeque<Key>,
}

impl Chat {
    pub(super) fn new(owner: Owner) -> Self {
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

    pub(super) fn runs(&self) -> impl Iterator<Item = &Arc<Run>> {
        self.current.iter().chain(self.older.iter())
    }

    pub(super) fn is_busy(&self) -> bool {
        !self.pending.is_empty() || self.attach_recording || self.runs().any(|r| r.is_producing())
    }

    /// When the chat's latest run completed (for eviction order).
    pub(super) fn completed_at(&self) -> Option<Instant> {
        self.current.as_ref().and_then(|r| r.finished_at())
    }

    /// Keeps `run` among the older runs. Past `MAX_OLDER` the oldest completed one goes (never
    /// an active producer's run): returned for the registry to forget.
    pub(super) fn push_older(&mut self, run: Arc<Run>) -> Option<Arc<Run>> {
        self.older.push(run);
        if self.older.len() <= MAX_OLDER {
            return None;
        }
        let i = self.older.iter().position(|r| !r.is_producing())?;
        Some(self.older.remove(i))
    }
}
