//! A run's accounting as its producer sees it: what the record request told (owner, model,
//! trace), the run's span, and at the end the one [`RunRecord`] of the run, handed to the
//! sidecar's [`Ledger`] (log, counters, webhook, span). Only the producer of a run writes it, so
//! a follower's mirror of a shared-journal run never does.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

use crate::accounting::{Ledger, RunRecord, RunSpan};
use crate::ingest::Ingest;
use crate::metrics::RunOutcome;
use crate::state::run::Run;
use crate::vocab::end::End;
use crate::vocab::kinds::FormatKind;

/// What the record request told about a run, and its span.
#[derive(Debug)]
pub struct RunAccount {
    /// Where the run's record goes.
    pub ledger: Arc<Ledger>,
    /// The run's span, when tracing is on.
    pub span: Option<RunSpan>,
    /// The caller's trace id, when it sent a valid `traceparent` and tracing is off.
    pub caller_trace: Option<String>,
    /// The owner's subject as the record names it.
    pub owner: Option<String>,
    /// The model the request body asked for.
    pub request_model: Option<String>,
    /// When the record request was taken up.
    pub arrived: Instant,
    /// The same instant on the wall clock.
    pub arrived_wall: SystemTime,
}

/// How a run ended, as its record says it.
pub(super) struct Ended<'a> {
    pub(super) route: &'a str,
    pub(super) format: Option<FormatKind>,
    pub(super) outcome: RunOutcome,
    pub(super) end: &'a End,
    /// When the backend's first body byte came.
    pub(super) first_byte: Option<Instant>,
}

/// Whole milliseconds of `d`.
fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl RunAccount {
    /// Writes the run's record, once, and ends its span.
    pub(super) fn close(self, run: &Run, ingest: &Ingest, ended: Ended<'_>) {
        let mut r = RunRecord::new(run.id().clone(), ended.route);
        if let Some(m) = ingest.usage() {
            r = r.metered(m.finish());
        }
        r.format = ended.format;
        r.owner = self.owner;
        r.outcome = Some(ended.outcome);
        r.reason = ended.end.reason;
        r.persisted = ended.end.persisted;
        r.request_model = self.request_model;
        r.watch = run.watch_record();
        let now = Instant::now();
        r.first_byte_ms = ended
            .first_byte
            .map(|t| millis(t.saturating_duration_since(self.arrived)));
        r.duration_ms = millis(now.saturating_duration_since(self.arrived));
        r.started_at_ms = self
            .arrived_wall
            .duration_since(UNIX_EPOCH)
            .map_or(0, millis);
        r.trace_id = match &self.span {
            Some(s) => Some(s.trace_id()),
            None => self.caller_trace,
        };
        self.ledger.close(&r, self.span);
    }
}
