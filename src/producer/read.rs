//! The producer's read loop: a live run's upstream read to its end (or a stop, the deadline,
//! silence), each batch recorded, the legacy requester's copy fed, aliases found in events named.

use std::sync::Arc;
use std::time::Duration;

use log::{info, warn};
use tokio::time::Instant;

use super::handoff::Handoff;
use super::tee::{Cut, Tee};
use crate::backend::Exchange;
use crate::chats::Naming;
use crate::config::OnDisconnect;
use crate::error::UpstreamErrorKind;
use crate::ingest::{Ending, Fed, Ingest};
use crate::metrics::{DropReason, Metrics};
use crate::record::format::{Event, FormatKind};
use crate::stall::{Stall, Stalled};
use crate::state::run::{Labels, Run};
use crate::vocab::end::EndReason;
use crate::vocab::{RunId, Scope};

/// When a live run's upstream read loop gives up: the run's deadline (`max_run_duration`) and
/// how long the upstream may stay silent.
pub(super) struct ReadLimits {
    /// The run is stopped `max_duration` at this instant, if set.
    pub(super) deadline: Option<tokio::time::Instant>,
    /// The run ends `upstream_timeout` after this long without a byte.
    pub(super) idle: Duration,
    /// The route's disconnect policy.
    pub(super) on_disconnect: OnDisconnect,
    /// Where each append's frames are handed to the requester whose task runs the producer.
    pub(super) handoff: Option<Arc<Handoff>>,
}

/// How a live run's read loop ended.
pub(super) struct ReadEnd {
    /// Why the read ended.
    pub(super) ending: Ending,
    /// The legacy requester's copy, if it is still attached.
    pub(super) tee: Option<Tee>,
    /// That copy ends cleanly once the run has ended: the upstream ended cleanly, or a stop was
    /// told in the format's own words ([`tell_stop`]). Otherwise it is cut.
    pub(super) clean: bool,
    /// When the backend's first body byte came.
    pub(super) first_byte: Option<Instant>,
}

/// Reads the live upstream to its end (or a stop), recording every batch.
pub(super) async fn read(
    s: &mut Exchange,
    run: &Arc<Run>,
    limits: ReadLimits,
    ingest: &mut Ingest,
    mut tee: Option<Tee>,
    started: &mut Started<'_>,
    naming: &Naming,
) -> ReadEnd {
    // The run's remembered ids (`ids = "unique"`) are counted in the recorded bytes while its
    // upstream is read, and given back when the read ends (they are not needed after it).
    let mut ids = naming.registry().share_bytes();
    let m = started.metrics;
    let mut batch: Vec<Event> = Vec::new();
    // Built once: a stop or the deadline is noticed without re-arming them per read.
    let stop = run.stop_requested();
    let expiry = sleep_until(limits.deadline);
    let (grace, max_unwatched) = match limits.on_disconnect {
        OnDisconnect::Continue => (None, None),
        OnDisconnect::Cancel {
            grace,
            max_unwatched_events,
        } => (Some(grace), max_unwatched_events),
    };
    let deserted = deserted(run, grace);
    tokio::pin!(stop, expiry, deserted);
    let mut idle = Stall::new(limits.idle);
    let mut first_byte = None;
    let mut usage_readings = 0;
    let ending = loop {
        let read = tokio::select! {
            biased;
            r = idle.run(s.next()) => r,
            reason = &mut stop => break Ending::Stopped(reason),
            _ = &mut expiry => break Ending::Stopped(EndReason::MaxDuration),
            () = &mut deserted => break abandon(run),
        };
        let chunk = match read {
            Err(Stalled) => {
                m.upstream_errors.inc(UpstreamErrorKind::Timeout);
                warn!(
                    "run {}: upstream silent for {:?}; the run ends",
                    run.id(),
                    limits.idle
                );
                break Ending::Failed(EndReason::UpstreamTimeout);
            }
            Ok(read) => read,
        };
        let chunk = match chunk {
            Ok(Some(c)) => c,
            // A close-delimited body's close is a clean end only after a terminal event.
            Ok(None) if s.is_close_delimited() && ingest.at_close() != Ending::Clean => {
                m.upstream_errors.inc(UpstreamErrorKind::Reset);
                warn!(
                    "run {}: upstream closed before its terminal event",
                    run.id()
                );
                break ingest.at_close();
            }
            Ok(None) => break Ending::Clean,
            Err(e) => {
                let kind = e.kind;
                m.upstream_errors.inc(kind);
                warn!("run {}: upstream read failed: {}", run.id(), e.message);
                break Ending::Failed(match kind {
                    UpstreamErrorKind::Timeout => EndReason::UpstreamTimeout,
                    _ => EndReason::UpstreamReset,
                });
            }
        };
        first_byte.get_or_insert_with(Instant::now);
        m.upstream_bytes.inc_by(chunk.len() as u64);
        if let Some(t) = &tee {
            if let Err(cut) = t.send(chunk.clone()) {
                if let Cut::Slow(reason) = cut {
                    m.legacy_cuts.inc(reason);
                    warn!(
                        "run {}: legacy client too slow ({}), its stream is cut",
                        run.id(),
                        reason.as_str()
                    );
                }
                if let Some(t) = tee.take() {
                    t.cut();
                }
            }
        }
        let fed = ingest.feed(&chunk, &mut batch);
        took(run, ingest, naming, m, fed);
        if batch.is_empty() {
            continue;
        }
        if let Some(kind) = ingest.format() {
            started.count(kind);
        }
        m.upstream_events.inc_by(batch.len() as u64);
        // The journal counts what it holds in the registry's recorded bytes itself.
        let appended = run.append_raw(&batch, ingest.take_raw());
        if let Some(h) = &limits.handoff {
            // The requester polled beside this producer writes its backlog before the next
            // read when the run got more than one write ahead of it.
            let handed = h.appended(run, &batch, appended.events);
            h.pace(run, handed).await;
        }
        ids.set(ingest.held_bytes());
        if appended.events < batch.len() {
            m.events_dropped
                .inc_by(DropReason::AfterEnd, (batch.len() - appended.events) as u64);
        }
        publish_usage(run, ingest, &mut usage_readings);
        if over_budget(run, m, appended.events as u64, max_unwatched) {
            break abandon(run);
        }
    };
    let clean = match ending {
        Ending::Clean => true,
        Ending::Stopped(_) => tell_stop(run, ingest, tee.as_ref()),
        Ending::Failed(_) => false,
    };
    if ingest.finish() && ending == Ending::Clean {
        m.upstream_errors.inc(UpstreamErrorKind::Protocol);
        warn!(
            "run {}: upstream ended inside an event; it was discarded",
            run.id()
        );
    }
    ReadEnd {
        ending,
        tee,
        clean,
        first_byte,
    }
}

/// What one upstream read gave besides events: the aliases found in them named, the events
/// dropped (over the event cap, or the buffer budget spent) counted and logged.
fn took(run: &Arc<Run>, ingest: &mut Ingest, naming: &Naming, m: &Metrics, fed: Fed) {
    for alias in ingest.take_aliases() {
        naming.name(run, &alias);
    }
    for bytes in fed.oversized {
        m.events_dropped.inc(DropReason::Oversized);
        warn!(
            "run {}: dropped an upstream event over {bytes} bytes",
            run.id()
        );
    }
    if let Some(bytes) = fed.over_budget {
        m.events_dropped.inc(DropReason::OverBudget);
        warn!(
            "run {}: dropped an upstream event at {bytes} bytes: max_buffered_bytes is spent",
            run.id()
        );
    }
}

/// Counts `n` events just recorded in the run's watch (and, when nobody reads it, in
/// `tether_unobserved_events_total`). Returns whether they spent the route's unwatched-event
/// budget (`max_unwatched_events`) since the last client left.
fn over_budget(run: &Run, m: &Metrics, n: u64, max_unwatched: Option<u64>) -> bool {
    if !run.watch_events(n) {
        return false;
    }
    m.unobserved_events.inc_by(n);
    let spent = max_unwatched.is_some_and(|max| run.unwatched_stretch() >= max);
    if spent {
        info!(
            "run {}: {} events recorded with no client; stopping it as abandoned",
            run.id(),
            run.unwatched_stretch()
        );
    }
    spent
}

/// Stops `run` as abandoned (the first stop's reason wins, as for any stop).
fn abandon(run: &Run) -> Ending {
    run.request_stop(EndReason::Abandoned);
    Ending::Stopped(EndReason::Abandoned)
}

/// Publishes the run's usage so far when a usage frame was read since `seen` readings.
fn publish_usage(run: &Run, ingest: &Ingest, seen: &mut u64) {
    if let Some(meter) = ingest.usage() {
        if meter.readings() != *seen {
            *seen = meter.readings();
            run.set_usage(meter.so_far().cloned());
        }
    }
}

/// Resolves once `run` has had no client for `grace` (`on_disconnect = "cancel"`); a client
/// attaching within the grace starts the wait over when it leaves. Never, without a grace.
async fn deserted(run: &Run, grace: Option<Duration>) {
    let Some(grace) = grace else {
        return std::future::pending().await;
    };
    let mut presence = run.presence();
    loop {
        // The run's sender lives as long as the run: these waits do not fail.
        if presence.wait_for(|n| *n == 0).await.is_err() {
            return std::future::pending().await;
        }
        let back = tokio::select! {
            biased;
            back = presence.wait_for(|n| *n > 0) => back.is_ok(),
            () = tokio::time::sleep(grace) => false,
        };
        if !back {
            info!(
                "run {}: no client for {grace:?}; stopping it as abandoned",
                run.id()
            );
            return;
        }
    }
}

/// A run tether stopped on purpose, told as its format tells a stop ([`Ingest::stop`]: the AI
/// SDK's `abort`, then `[DONE]`): the frames recorded after the upstream's, so every reader of
/// the run reads them, and queued for the legacy requester when the upstream stopped between
/// two events. Returns whether the requester's copy (if any) may then end cleanly; false for a
/// format with no such event, whose readers' streams are cut as before.
fn tell_stop(run: &Run, ingest: &mut Ingest, tee: Option<&Tee>) -> bool {
    let mut batch = Vec::new();
    let Some(told) = ingest.stop(&mut batch) else {
        return false;
    };
    if !batch.is_empty() {
        run.append_raw(&batch, ingest.take_raw());
    }
    match tee {
        Some(t) => told.clean && t.send(told.bytes).is_ok(),
        None => true,
    }
}

/// Counts a run in `tether_runs_started_total{route,format}` and logs its start, once its format
/// is known (at go-live when the route or the headers name it, else at its first event).
pub(super) struct Started<'a> {
    pub(super) metrics: &'a Metrics,
    pub(super) route: &'a str,
    /// The chat's scope (logged as its chat).
    pub(super) scope: &'a Scope,
    pub(super) run_id: &'a RunId,
    /// The run's labels: its format is set with the count.
    pub(super) labels: &'a Labels,
    pub(super) counted: bool,
}

impl Started<'_> {
    /// Counts the run once, as `kind`.
    pub(super) fn count(&mut self, kind: FormatKind) {
        if std::mem::replace(&mut self.counted, true) {
            return;
        }
        self.labels.set_format(kind);
        self.metrics
            .runs_started
            .with_label_values(&[self.route, kind.as_str()])
            .inc();
        info!(
            "run {} started: chat {:?} route {} format {}",
            self.run_id,
            self.scope,
            self.route,
            kind.as_str()
        );
    }
}

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}
