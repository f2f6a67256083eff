//! How a run ends: whether its answer was saved, whether a newer run replaced it, and why not.

use super::id::RunId;
use super::label::label_enum;

label_enum! {
    /// Why a run ended without its answer being persisted: the `reason` of `STREAM_END`.
    pub enum EndReason {
        /// A newer run of the chat replaced it.
        Superseded => "superseded",
        /// A stop route stopped it.
        Cancelled => "cancelled",
        /// It ran longer than `max_run_duration`.
        MaxDuration => "max_duration",
        /// No client watched it for `abandon_after`.
        Abandoned => "abandoned",
        /// The drain timed out and stopped it.
        Shutdown => "shutdown",
        /// The upstream connection failed mid-answer.
        UpstreamReset => "upstream_reset",
        /// The upstream was silent for longer than its idle timeout.
        UpstreamTimeout => "upstream_timeout",
        /// `commit = "eof"`: the upstream ended without its format's terminal event.
        NoTerminalEvent => "no_terminal_event",
        /// `commit = "event:…"`: the upstream ended without the committing event.
        NotCommitted => "not_committed",
        /// The upstream said the turn failed (`response.failed`).
        ResponseFailed => "response_failed",
        /// The upstream said the turn stopped short (`response.incomplete`).
        ResponseIncomplete => "response_incomplete",
        /// The upstream sent an error event (Anthropic `error`, AI SDK `error` chunk).
        ErrorEvent => "error_event",
        /// The replica producing it died or stalled (shared journal only).
        OwnerLost => "owner_lost",
        /// An upstream event was dropped: over `max_event_bytes`, or still arriving when
        /// `max_buffered_bytes` had no room for it.
        EventTooLarge => "event_too_large",
    }
}

/// How a run ended, as told to its observers by `STREAM_END`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct End {
    /// The run's last seq.
    pub seq: u64,
    /// Whether the backend's answer was saved (never claimed when it was not).
    pub persisted: bool,
    /// Whether a newer run of the chat replaced this one.
    pub superseded: bool,
    /// The replacing run, when superseded.
    pub next_run_id: Option<RunId>,
    /// Why the run ended without being persisted.
    pub reason: Option<EndReason>,
}

impl End {
    /// The end of a run that finished by itself (or was stopped); `seq` is set by the journal.
    pub fn finished(persisted: bool, reason: Option<EndReason>) -> End {
        End {
            seq: 0,
            persisted,
            superseded: false,
            next_run_id: None,
            reason,
        }
    }

    /// The end of a run that `next` replaced; `seq` is set by the journal.
    pub fn superseded(next: &RunId) -> End {
        End {
            seq: 0,
            persisted: false,
            superseded: true,
            next_run_id: Some(next.clone()),
            reason: Some(EndReason::Superseded),
        }
    }
}

label_enum! {
    /// `tether_runs_finished_total{outcome}`: how a run ended.
    pub enum RunOutcome {
        /// The backend's answer was saved.
        Persisted => "persisted",
        /// It was not (reset, timeout, no terminal event, …).
        NotPersisted => "not_persisted",
        /// A newer run of the chat replaced it.
        Superseded => "superseded",
        /// A stop route stopped it.
        Cancelled => "cancelled",
        /// The replica producing it died or stalled (shared journal).
        OwnerLost => "owner_lost",
    }
}
