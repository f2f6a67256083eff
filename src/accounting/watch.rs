//! The watch record of a run: how many clients read it at most, how often one attached or
//! resumed, how long it ran with at least one client attached and with none, how many events it
//! recorded while nobody was attached, and whether it ended watched.
//!
//! A pure accumulator driven by explicit calls, each given the time it happened at: the run
//! calls [`Watch::join`] when a client starts reading, [`Watch::leave`] when one stops,
//! [`Watch::events`] for each batch it records and [`Watch::end`] when it ends.

use std::time::Duration;

use serde::Serialize;
use tokio::time::Instant;

use crate::vocab::label::label_enum;

/// Most attach and resume marks kept per run for its trace (later ones are counted only).
pub const MAX_MARKS: usize = 64;

label_enum! {
    /// How a client came to read a run.
    pub enum Join {
        /// The client whose record request started the run, reading its answer.
        Origin => "origin",
        /// A client attached (protocol 1: snapshot, then the live tail).
        Attach => "attach",
        /// A client resumed from a cursor (a verbatim dialect, Durable Streams).
        Resume => "resume",
    }
}

/// One client joining, for the run's trace (a span event each).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mark {
    /// Milliseconds from the run's start.
    pub at_ms: u64,
    /// How the client came.
    pub join: Join,
    /// Clients reading the run once it had joined.
    pub observers: u32,
}

/// What a run's watchers did, as the run record and the status route show it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct WatchRecord {
    /// Clients reading the run now (at its end, for an ended run).
    pub observers: u32,
    /// Most clients reading the run at once.
    pub observers_max: u32,
    /// Clients that attached (protocol 1).
    pub attaches: u32,
    /// Clients that resumed from a cursor.
    pub resumes: u32,
    /// Milliseconds with at least one client attached.
    pub watched_ms: u64,
    /// Milliseconds with no client attached.
    pub unwatched_ms: u64,
    /// Events recorded while no client was attached.
    pub events_unwatched: u64,
    /// Whether a client was attached when the run ended (for a running run: now).
    pub ended_watched: bool,
    /// Attach and resume marks, for the trace (not in the JSON record), at most [`MAX_MARKS`].
    #[serde(skip)]
    pub marks: Vec<Mark>,
    /// Marks left out past [`MAX_MARKS`].
    #[serde(skip)]
    pub marks_dropped: u32,
}

/// One run's watch accumulator.
#[derive(Debug, Clone)]
pub struct Watch {
    started: Instant,
    /// When the observer count last changed (or the run started).
    since: Instant,
    record: WatchRecord,
    watched: Duration,
    unwatched: Duration,
}

impl Watch {
    /// The watch of a run that started at `start`, with no client reading it yet.
    pub fn new(start: Instant) -> Watch {
        Watch {
            started: start,
            since: start,
            record: WatchRecord::default(),
            watched: Duration::ZERO,
            unwatched: Duration::ZERO,
        }
    }

    /// Adds the time since the last change to the watched or unwatched total.
    fn settle(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.since);
        if self.record.observers > 0 {
            self.watched += elapsed;
        } else {
            self.unwatched += elapsed;
        }
        self.since = self.since.max(now);
    }

    /// A client started reading the run at `now`.
    pub fn join(&mut self, now: Instant, how: Join) {
        self.settle(now);
        let r = &mut self.record;
        r.observers = r.observers.saturating_add(1);
        r.observers_max = r.observers_max.max(r.observers);
        match how {
            Join::Origin => {}
            Join::Attach => r.attaches = r.attaches.saturating_add(1),
            Join::Resume => r.resumes = r.resumes.saturating_add(1),
        }
        if how == Join::Origin {
            return;
        }
        if r.marks.len() < MAX_MARKS {
            let at = now.saturating_duration_since(self.started);
            r.marks.push(Mark {
                at_ms: millis(at),
                join: how,
                observers: r.observers,
            });
        } else {
            r.marks_dropped = r.marks_dropped.saturating_add(1);
        }
    }

    /// A client stopped reading the run at `now` (one more than joined is ignored).
    pub fn leave(&mut self, now: Instant) {
        self.settle(now);
        self.record.observers = self.record.observers.saturating_sub(1);
    }

    /// The run recorded `n` events; they count as unwatched when no client is reading it.
    /// Returns whether they did.
    pub fn events(&mut self, n: u64) -> bool {
        let unwatched = self.record.observers == 0;
        if unwatched {
            self.record.events_unwatched = self.record.events_unwatched.saturating_add(n);
        }
        unwatched
    }

    /// Clients reading the run now.
    pub fn observers(&self) -> u32 {
        self.record.observers
    }

    /// The record as of `now` (the status route's `watch` for a running run).
    pub fn so_far(&self, now: Instant) -> WatchRecord {
        let mut w = self.clone();
        w.settle(now);
        let mut r = w.record;
        r.watched_ms = millis(w.watched);
        r.unwatched_ms = millis(w.unwatched);
        r.ended_watched = r.observers > 0;
        r
    }

    /// The record of a run that ended at `now`.
    pub fn end(&self, now: Instant) -> WatchRecord {
        self.so_far(now)
    }
}

/// Whole milliseconds of `d`.
fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn watched_and_unwatched_time_add_up_to_the_runs_duration() {
        let t0 = Instant::now();
        let mut w = Watch::new(t0);
        w.join(t0, Join::Origin);
        assert!(!w.events(3));
        // The origin leaves at 100 ms; nobody for 400 ms.
        w.leave(t0 + ms(100));
        assert!(w.events(5));
        w.join(t0 + ms(500), Join::Attach);
        w.join(t0 + ms(600), Join::Resume);
        w.leave(t0 + ms(700));
        w.events(2);
        let r = w.end(t0 + ms(1000));
        assert_eq!(
            (r.watched_ms, r.unwatched_ms, r.events_unwatched),
            (600, 400, 5)
        );
        assert_eq!((r.observers_max, r.attaches, r.resumes), (2, 1, 1));
        assert_eq!((r.observers, r.ended_watched), (1, true));
        assert_eq!(
            r.marks,
            [
                Mark {
                    at_ms: 500,
                    join: Join::Attach,
                    observers: 1
                },
                Mark {
                    at_ms: 600,
                    join: Join::Resume,
                    observers: 2
                },
            ]
        );
    }

    #[test]
    fn a_run_nobody_watched_is_unwatched_from_start_to_end() {
        let t0 = Instant::now();
        let mut w = Watch::new(t0);
        assert!(w.events(10));
        // A stray leave (a client that was never counted) changes nothing.
        w.leave(t0 + ms(10));
        let r = w.end(t0 + ms(250));
        assert_eq!((r.watched_ms, r.unwatched_ms), (0, 250));
        assert_eq!(
            (r.observers, r.observers_max, r.ended_watched),
            (0, 0, false)
        );
        assert_eq!(r.events_unwatched, 10);
    }

    #[test]
    fn so_far_reads_the_running_totals_without_changing_them() {
        let t0 = Instant::now();
        let mut w = Watch::new(t0);
        w.join(t0 + ms(50), Join::Attach);
        let r = w.so_far(t0 + ms(80));
        assert_eq!(
            (r.watched_ms, r.unwatched_ms, r.ended_watched),
            (30, 50, true)
        );
        w.leave(t0 + ms(100));
        let r = w.end(t0 + ms(100));
        assert_eq!(
            (r.watched_ms, r.unwatched_ms, r.ended_watched),
            (50, 50, false)
        );
    }

    #[test]
    fn marks_are_bounded_and_the_rest_counted() {
        let t0 = Instant::now();
        let mut w = Watch::new(t0);
        for i in 0..(MAX_MARKS as u64 + 10) {
            w.join(t0 + ms(i), Join::Resume);
            w.leave(t0 + ms(i));
        }
        let r = w.end(t0 + ms(1000));
        assert_eq!(r.marks.len(), MAX_MARKS);
        assert_eq!(r.marks_dropped, 10);
        assert_eq!(r.resumes, MAX_MARKS as u32 + 10);
    }

    #[test]
    fn the_json_record_has_the_counts_and_not_the_marks() {
        let t0 = Instant::now();
        let mut w = Watch::new(t0);
        w.join(t0, Join::Attach);
        let v = serde_json::to_value(w.end(t0 + ms(5))).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"observers":1,"observers_max":1,"attaches":1,"resumes":0,
                "watched_ms":5,"unwatched_ms":0,"events_unwatched":0,"ended_watched":true})
        );
    }
}
