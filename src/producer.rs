//! The producer: the detached task that sends a recorded request upstream and reads the answer
//! to its end, whatever the observers do.
//!
//! The task owns its upstream exchange (see [`crate::backend::exchange`]), so a client leaving never
//! reaches the backend. It reports the upstream's answer
//! once as a [`Head`]: a live run, a response to relay unchanged (non-2xx or not SSE: nothing is
//! recorded), or a failure to reach the backend. Only an explicit stop, the maximum run duration,
//! or an upstream error or timeout ends a live run early. What the bytes mean (events, the
//! verdict) is [`Ingest`]'s; this file does I/O and metrics.

mod tee;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use log::{info, warn};
use pingora_http::{RequestHeader, ResponseHeader};
use tokio::sync::oneshot;
use tokio_util::task::TaskTracker;

use crate::backend::{is_recordable, Exchange, Upstream};
use crate::budget::Budget;
use crate::config::{Alias, Commit, RawRecord, Tokens};
use crate::error::{UpstreamError, UpstreamErrorKind};
use crate::ingest::{outcome, Ending, Ingest};
use crate::metrics::{DropReason, Metrics};
use crate::record::format::{detect_from_headers, Event, FormatChoice, FormatKind};
use crate::replica::{header_text, spawn_writer, Meta, Recorder, Replica};
use crate::stall::{Stall, Stalled};
use crate::state::auth::Owner;
use crate::state::registry::{Pending, Registry};
use crate::state::run::{ObserverGuard, Run};
use crate::vocab::end::EndReason;
use crate::vocab::{RunId, Scope};
use tee::{tee, Cut, Tee};
pub use tee::{StreamCut, TeeReader};

/// The upstream's answer, reported once by the producer.
pub enum Head {
    /// The run is live and recording.
    Live {
        /// The run.
        run: Arc<Run>,
        /// The upstream response header.
        header: ResponseHeader,
        /// The upstream bytes, unchanged, when a legacy tee was asked for.
        legacy: Option<TeeReader>,
        /// Counts the requester as attached from the first event on.
        guard: ObserverGuard,
    },
    /// Not recorded (non-2xx or not SSE): the requester relays this answer unchanged and
    /// returns the connection to the pool once it is read to its end.
    Relay {
        /// The upstream response header.
        header: ResponseHeader,
        /// The upstream exchange, its body still unread.
        upstream: Box<Exchange>,
    },
    /// The backend could not be reached or answered garbage.
    Failed(UpstreamError),
}

/// Everything a producer needs.
pub struct Job {
    /// The backend client.
    pub upstream: Arc<Upstream>,
    /// Where the run goes live.
    pub registry: Arc<Registry>,
    /// Metric families.
    pub metrics: Metrics,
    /// The chat's pending registration, released once the upstream answered.
    pub pending: Pending,
    /// The transport run id, minted before forwarding.
    pub run_id: RunId,
    /// Route label for metrics.
    pub route: String,
    /// The format the run's events are classified by, or `auto`.
    pub format: FormatChoice,
    /// When the run counts as persisted.
    pub commit: Commit,
    /// Replay window size.
    pub window: usize,
    /// Largest event recorded.
    pub max_event: usize,
    /// The sidecar-wide budget of bytes buffered for clients and backends (unfinished events,
    /// the legacy queue).
    pub budget: Budget,
    /// Bytes the legacy requester's queue may hold.
    pub client_buffer: usize,
    /// Stop the run after this long, if set.
    pub max_duration: Option<Duration>,
    /// The client's request header.
    pub request: RequestHeader,
    /// The client's request body.
    pub body: Bytes,
    /// Tee the raw upstream bytes for a legacy requester.
    pub legacy: bool,
    /// Keep the raw record, with these settings.
    pub raw: Option<RawRecord>,
    /// The record route's aliases.
    pub aliases: Vec<Alias>,
    /// Values of the route's `request:` aliases, read from the request.
    pub request_aliases: Vec<String>,
    /// The resume-token headers of the run's responses.
    pub tokens: Tokens,
    /// The shared journal the run is also written to, when one is configured.
    pub journal: Option<Arc<Replica>>,
}

/// Starts the producer as its own task, detached from the requester: whatever the requester
/// does, the producer reads the upstream to its end. The receiver gets the upstream's answer.
/// `tracker` counts the task until it ends (the drain waits on it).
pub fn spawn(tracker: &TaskTracker, job: Job) -> oneshot::Receiver<Head> {
    let (tx, rx) = oneshot::channel();
    // The job is boxed and the connect future below too: a task's future keeps room for its
    // arguments and for its largest await for the whole run (5,184 bytes unboxed, 2,880 boxed).
    tracker.spawn(produce(Box::new(job), tx));
    rx
}

fn failed(m: &Metrics, run_id: &RunId, e: UpstreamError) -> Head {
    warn!("upstream failed for run {run_id}: {e}");
    m.upstream_errors.inc(e.kind);
    Head::Failed(e)
}

async fn produce(job: Box<Job>, head: oneshot::Sender<Head>) {
    let Job {
        upstream,
        registry,
        metrics: m,
        pending,
        run_id,
        route,
        format,
        commit,
        window,
        max_event,
        budget,
        client_buffer,
        max_duration,
        request,
        body,
        legacy,
        raw,
        aliases,
        request_aliases,
        tokens,
        journal,
    } = *job;
    let mut s = match Box::pin(upstream.open(&request, &body, Some(&run_id))).await {
        Ok(s) => s,
        Err(e) => {
            let _ = head.send(failed(&m, &run_id, e));
            return;
        }
    };
    let header = s.header().clone();
    if !is_recordable(&header) {
        if !header.status.is_success() {
            m.upstream_errors.inc(UpstreamErrorKind::Status);
        }
        let _ = head.send(Head::Relay {
            header,
            upstream: Box::new(s),
        });
        return;
    }
    let raw_cap = raw.as_ref().map(|r| r.cap);
    let (run, recorder) = match &journal {
        Some(_) => {
            let (rec, inbox) = Recorder::new(&run_id, window, raw_cap);
            let run = Arc::new(Run::with_journal(run_id, Box::new(rec.clone())));
            (run, Some((rec, inbox)))
        }
        None => (Arc::new(Run::with_raw(run_id, window, raw_cap)), None),
    };
    run.set_header(header.clone());
    if tokens.run_id_header.is_some() || tokens.token_header.is_some() {
        run.set_tokens(tokens);
    }
    let scope = pending.scope().clone();
    let owner = pending.owner();
    let guard = run.observe();
    registry.go_live(&pending, run.clone());
    drop(pending);
    let recorder = match (journal, recorder) {
        (Some(c), Some((rec, inbox))) => {
            let meta = Meta {
                scope: scope.clone(),
                owner,
                header: header_text(&header),
            };
            spawn_writer(c, run.clone(), inbox, meta);
            Some(rec)
        }
        _ => None,
    };
    let naming = Naming {
        registry: &registry,
        owner,
        scope: &scope,
        recorder,
    };
    let header_aliases = aliases.iter().filter_map(|a| match a {
        Alias::Header(h) => header
            .headers
            .get(h.as_str())?
            .to_str()
            .ok()
            .map(str::to_string),
        _ => None,
    });
    for alias in request_aliases.into_iter().chain(header_aliases) {
        naming.name(&run, &alias);
    }
    let event_aliases: Vec<String> = aliases
        .iter()
        .filter_map(|a| match a {
            Alias::Event(p) => Some(p.clone()),
            _ => None,
        })
        .collect();
    m.runs_active.inc();
    let (tee, legacy) = match legacy {
        true => {
            let (t, r) = tee(client_buffer, &budget);
            (Some(t), Some(r))
        }
        false => (None, None),
    };
    let known = match format {
        FormatChoice::Fixed(kind) => Some(kind),
        FormatChoice::Auto => detect_from_headers(|name| {
            header
                .headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        }),
    };
    let mut started = Started {
        metrics: &m,
        route: &route,
        scope: &scope,
        run_id: run.id(),
        counted: false,
    };
    if let Some(kind) = known {
        started.count(kind);
    }
    let _ = head.send(Head::Live {
        run: run.clone(),
        header,
        legacy,
        guard,
    });
    let mut ingest = Ingest::new(known.map(FormatKind::format), commit, max_event)
        .find_aliases(event_aliases)
        .with_budget(&budget);
    if let Some(r) = &raw {
        ingest = ingest.keep_raw(r.cursor_field.clone());
    }
    // The idle limit is a per-stream tokio timer (see `stall`).
    let limits = ReadLimits {
        deadline: max_duration.map(|d| tokio::time::Instant::now() + d),
        idle: upstream.idle_timeout(),
    };
    let (ending, tee) = read(
        &mut s,
        &run,
        limits,
        &mut ingest,
        tee,
        &mut started,
        &naming,
    )
    .await;
    // A run that ended before its first event never showed its format: AG-UI, the fallback.
    started.count(ingest.format().unwrap_or(FormatKind::Agui));
    let verdict = ingest.verdict(ending);
    let end = run.settle(verdict.persisted, verdict.reason);
    let outcome = outcome(&end, ending);
    m.runs_finished.inc(outcome);
    m.runs_active.dec();
    // Only now publish the end: whoever sees it also sees it counted.
    run.done();
    registry.notify();
    if let (Ending::Clean, Some(tee)) = (ending, tee) {
        tee.end_clean();
    }
    info!(
        "run {} ended: chat {:?} outcome {} reason {} duration {:.3}s events {} bytes {} peak_observers {}",
        run.id(),
        scope,
        outcome.as_str(),
        end.reason.map_or("-", EndReason::as_str),
        run.started().elapsed().as_secs_f64(),
        ingest.events(),
        ingest.bytes(),
        run.peak_observers(),
    );
    if ending == Ending::Clean {
        upstream.release(s);
    }
}

/// Reads the live upstream to its end (or a stop), recording every batch. Returns how it ended
/// and the legacy tee if it is still attached.
/// When a live run's upstream read loop gives up: the run's deadline (`max_run_duration`) and
/// how long the upstream may stay silent.
struct ReadLimits {
    deadline: Option<tokio::time::Instant>,
    idle: Duration,
}

async fn read(
    s: &mut Exchange,
    run: &Arc<Run>,
    limits: ReadLimits,
    ingest: &mut Ingest,
    mut tee: Option<Tee>,
    started: &mut Started<'_>,
    naming: &Naming<'_>,
) -> (Ending, Option<Tee>) {
    let registry = naming.registry;
    let m = started.metrics;
    let mut batch: Vec<Event> = Vec::new();
    // Built once: a stop or the deadline is noticed without re-arming them per read.
    let stop = run.stop_requested();
    let expiry = sleep_until(limits.deadline);
    tokio::pin!(stop, expiry);
    let mut idle = Stall::new(limits.idle);
    let ending = loop {
        let read = tokio::select! {
            biased;
            r = idle.run(s.next()) => r,
            reason = &mut stop => break Ending::Stopped(reason),
            _ = &mut expiry => break Ending::Stopped(EndReason::MaxDuration),
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
        if batch.is_empty() {
            continue;
        }
        if let Some(kind) = ingest.format() {
            started.count(kind);
        }
        m.upstream_events.inc_by(batch.len() as u64);
        let appended = run.append_raw(&batch, ingest.take_raw());
        registry.add_bytes(appended.bytes);
        if appended.events < batch.len() {
            m.events_dropped
                .inc_by(DropReason::AfterEnd, (batch.len() - appended.events) as u64);
        }
        if run.observers() == 0 {
            m.unobserved_events.inc_by(appended.events as u64);
        }
    };
    if ingest.finish() && ending == Ending::Clean {
        m.upstream_errors.inc(UpstreamErrorKind::Protocol);
        warn!(
            "run {}: upstream ended inside an event; it was discarded",
            run.id()
        );
    }
    (ending, tee)
}

/// Indexes a run's aliases (the backend's names for it) in the registry, for its owner.
struct Naming<'a> {
    registry: &'a Registry,
    owner: Owner,
    scope: &'a Scope,
    /// The run's shared-journal writer, told about each alias.
    recorder: Option<Recorder>,
}

impl Naming<'_> {
    fn name(&self, run: &Arc<Run>, alias: &str) {
        if alias.is_empty() || alias.len() > 256 {
            return;
        }
        let alias = RunId::from(alias);
        self.registry.index(&self.owner, &alias, self.scope, run);
        run.set_alias(&alias);
        if let Some(r) = &self.recorder {
            r.alias(&alias);
        }
        info!("run {}: known to the backend as {alias:?}", run.id());
    }
}

/// Counts a run in `tether_runs_started_total{route,format}` and logs its start, once its format
/// is known (at go-live when the route or the headers name it, else at its first event).
struct Started<'a> {
    metrics: &'a Metrics,
    route: &'a str,
    /// The chat's scope (logged as its chat).
    scope: &'a Scope,
    run_id: &'a RunId,
    counted: bool,
}

impl Started<'_> {
    fn count(&mut self, kind: FormatKind) {
        if std::mem::replace(&mut self.counted, true) {
            return;
        }
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
