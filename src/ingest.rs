//! Ingest: the pure recording rules. Upstream bytes in; classified events out, one batch per
//! upstream read; and at the end, the verdict: whether the answer was persisted, and why not.
//!
//! The producer (`upstream/producer.rs`) only reads the socket, feeds [`Ingest`], appends each
//! batch to the run's journal and counts metrics. Everything that decides what a run's end means
//! lives here, unit-tested with byte slices.

use bytes::Bytes;

use crate::config::Commit;
use crate::format::{detect_from_event, Event, Format, FormatKind};
use crate::journal::{End, EndReason};
use crate::metrics::Outcome;
use crate::sse::{Decoded, Decoder};

/// How the upstream read loop ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// The upstream ended its body cleanly.
    Clean,
    /// tether stopped reading (stop route, `max_run_duration`, abandon, shutdown).
    Stopped(EndReason),
    /// The upstream failed mid-answer (`UpstreamReset` or `UpstreamTimeout`).
    Failed(EndReason),
}

/// What one upstream read produced.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Fed {
    /// Sizes of the events dropped for being over the event cap.
    pub oversized: Vec<usize>,
}

/// The decided end of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verdict {
    /// Whether the backend's answer counts as saved.
    pub persisted: bool,
    /// Why not, when it does not.
    pub reason: Option<EndReason>,
}

/// The recording rules of one run: decoder, format and commit rule, and what they saw.
#[derive(Debug)]
pub struct Ingest {
    decoder: Decoder,
    format: Option<&'static dyn Format>,
    commit: Commit,
    decoded: Vec<Decoded>,
    saw_finish: bool,
    saw_terminal: bool,
    failure: Option<EndReason>,
    committed: bool,
    events: u64,
    bytes: u64,
}

impl Ingest {
    /// Rules for a run of `format` (`None`: detected from the first event), persisted per
    /// `commit`, dropping events over `max_event`.
    pub fn new(format: Option<&'static dyn Format>, commit: Commit, max_event: usize) -> Self {
        Ingest {
            decoder: Decoder::new(max_event),
            format,
            commit,
            decoded: Vec::new(),
            saw_finish: false,
            saw_terminal: false,
            failure: None,
            committed: false,
            events: 0,
            bytes: 0,
        }
    }

    /// The run's format, once known.
    pub fn format(&self) -> Option<FormatKind> {
        self.format.map(|f| f.kind())
    }

    /// Decodes one upstream read and classifies its complete events into `batch` (cleared
    /// first).
    pub fn feed(&mut self, chunk: &Bytes, batch: &mut Vec<Event>) -> Fed {
        let mut fed = Fed::default();
        batch.clear();
        self.bytes += chunk.len() as u64;
        self.decoded.clear();
        self.decoder.feed(chunk, &mut self.decoded);
        for d in self.decoded.drain(..) {
            match d {
                Decoded::Event(e) => {
                    let format = *self
                        .format
                        .get_or_insert_with(|| detect_from_event(&e).format());
                    let ev = format.classify(&e);
                    self.saw_finish |= ev.finish;
                    self.saw_terminal |= ev.terminal && (self.saw_finish || !format.needs_finish());
                    if self.failure.is_none() {
                        self.failure = ev.failure;
                    }
                    self.committed |= commits(&self.commit, &ev);
                    batch.push(ev);
                }
                Decoded::Oversized { bytes } => fed.oversized.push(bytes),
            }
        }
        self.events += batch.len() as u64;
        fed
    }

    /// Ends decoding; true when the upstream stopped inside an event (which is discarded).
    pub fn finish(&mut self) -> bool {
        self.decoder.finish()
    }

    /// Events classified so far.
    pub fn events(&self) -> u64 {
        self.events
    }

    /// Upstream body bytes fed so far.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Whether the run's answer was persisted, and why not. A stop or a failure is never
    /// persisted; a clean end is persisted per the route's `commit` rule (for `eof`: the
    /// format's terminal event arrived, after its finish marker where the format has one, and
    /// no event said the turn failed).
    pub fn verdict(&self, ending: Ending) -> Verdict {
        let persisted = match ending {
            Ending::Clean => match self.commit {
                Commit::Eof => self.saw_terminal && self.failure.is_none(),
                Commit::Event { .. } => self.committed,
            },
            // `commit = event:…` counts the committing event even if the upstream then failed.
            Ending::Failed(_) => matches!(self.commit, Commit::Event { .. }) && self.committed,
            Ending::Stopped(_) => false,
        };
        let reason = match (persisted, ending) {
            (true, _) => None,
            (false, Ending::Stopped(r) | Ending::Failed(r)) => Some(r),
            (false, Ending::Clean) => Some(match (&self.commit, self.failure) {
                (Commit::Eof, Some(failure)) => failure,
                (Commit::Eof, None) => EndReason::NoTerminalEvent,
                (Commit::Event { .. }, _) => EndReason::NotCommitted,
            }),
        };
        Verdict { persisted, reason }
    }
}

/// The outcome label of a run that ended with `end` after `ending`.
pub fn outcome(end: &End, ending: Ending) -> Outcome {
    if end.superseded {
        Outcome::Superseded
    } else if ending == Ending::Stopped(EndReason::Cancelled) {
        Outcome::Cancelled
    } else if end.persisted {
        Outcome::Persisted
    } else {
        Outcome::NotPersisted
    }
}

/// Whether `ev` is the event a `commit = event:<TYPE>[:<name>]` route waits for.
fn commits(commit: &Commit, ev: &Event) -> bool {
    match commit {
        Commit::Eof => false,
        Commit::Event { ty, name } => {
            ev.ty() == ty.as_bytes() && name.as_ref().is_none_or(|n| ev.name() == n.as_bytes())
        }
    }
}

#[cfg(test)]
mod tests;
