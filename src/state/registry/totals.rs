//! The registry's totals: the runs it holds and the bytes they record, the one place both are
//! counted.
//!
//! A run is counted when it joins the registry (gone live here, or adopted as a mirror of
//! another replica's run) and taken out when the registry lets it go, by the same two calls for
//! every kind of run. Its bytes are counted through its journal's share of the [`Tally`]
//! ([`crate::journal::tally`]): the journal re-counts itself after every change, whoever made it
//! (this replica's producer, a follower, a doorbell, a re-seed), and leaving takes out exactly
//! what was counted, so the total is always the sum of the held runs' bytes and cannot underflow.
//! Bytes held on a run's behalf outside its journal (its remembered ids) are counted through a
//! [`Share`] of the same tally.

use std::sync::atomic::{AtomicUsize, Ordering};

use crate::journal::tally::{Share, Tally};
use crate::state::run::Run;

/// Runs held and the bytes they record.
#[derive(Debug, Default)]
pub(super) struct Totals {
    runs: AtomicUsize,
    bytes: Tally,
}

impl Totals {
    /// Counts `run` in, once: a run counted already is not counted again.
    pub(super) fn admit(&self, run: &Run) {
        if run.journal().join_tally(&self.bytes) {
            self.runs.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Counts `run` out, once: what [`Self::admit`] counted, and what its journal counted since.
    pub(super) fn release(&self, run: &Run) {
        if run.journal().leave_tally() {
            self.runs.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Runs counted in.
    pub(super) fn runs(&self) -> usize {
        self.runs.load(Ordering::Relaxed)
    }

    /// Bytes counted.
    pub(super) fn bytes(&self) -> usize {
        self.bytes.total()
    }

    /// A share of the recorded bytes for what a run holds outside its journal.
    pub(super) fn share(&self) -> Share {
        self.bytes.share()
    }
}
