//! The producer: the detached task that sends a recorded request upstream and reads the answer
//! to its end, whatever the observers do.
//!
//! The task owns its upstream connection (Pingora's HTTP connector, read and write timeouts set
//! explicitly), so a client leaving never reaches the backend. It reports the upstream's answer
//! once as a [`Head`]: a live run, a response to relay unchanged (non-2xx or not SSE: nothing is
//! recorded), or a failure to reach the backend. Only an explicit stop, the maximum run duration,
//! or an upstream error or timeout ends a live run early.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use log::{info, warn};
use pingora_core::protocols::http::client::HttpSession;
use pingora_http::{RequestHeader, ResponseHeader};
use tokio::sync::{mpsc, oneshot};

use crate::config::Commit;
use crate::event::{classify, Event};
use crate::metrics::Metrics;
use crate::registry::{Pending, Registry};
use crate::run::{ObserverGuard, Run};
use crate::sse::{Decoded, Decoder};
use crate::upstream::{is_recordable, kind_of, Upstream, UpstreamError};

/// Upstream chunks queued for a legacy requester before it counts as too slow and is cut off.
const RAW_QUEUE: usize = 1024;

/// The upstream's answer, reported once by the producer.
pub enum Head {
    /// The run is live and recording. `raw` carries the upstream bytes for a legacy requester.
    Live {
        /// The run.
        run: Arc<Run>,
        /// The upstream response header.
        header: ResponseHeader,
        /// Upstream body chunks, unchanged, when a legacy tee was asked for.
        raw: Option<mpsc::Receiver<Bytes>>,
        /// Counts the requester as attached from the first event on.
        guard: ObserverGuard,
    },
    /// Not recorded: relay this response unchanged.
    Relay {
        /// The upstream response header.
        header: ResponseHeader,
        /// The body chunks.
        body: mpsc::Receiver<Bytes>,
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
    pub pending: Option<Pending>,
    /// The transport run id, minted before forwarding.
    pub run_id: String,
    /// Route label for metrics.
    pub route: String,
    /// When the run counts as persisted.
    pub commit: Commit,
    /// Replay window size.
    pub window: usize,
    /// Largest event recorded.
    pub max_event: usize,
    /// Stop the run after this long, if set.
    pub max_duration: Option<Duration>,
    /// The client's request header.
    pub request: RequestHeader,
    /// The client's request body.
    pub body: Bytes,
    /// Tee the raw upstream bytes for a legacy requester.
    pub legacy: bool,
}

/// Starts the producer as its own task, detached from the requester: whatever the requester
/// does, the producer reads the upstream to its end. The receiver gets the upstream's answer.
pub fn spawn(job: Job) -> oneshot::Receiver<Head> {
    let (tx, rx) = oneshot::channel();
    tokio::spawn(produce(job, tx));
    rx
}

async fn produce(mut job: Job, head: oneshot::Sender<Head>) {
    let m = job.metrics.clone();
    let mut s = match job
        .upstream
        .open(&job.request, &job.body, Some(&job.run_id))
        .await
    {
        Ok(s) => s,
        Err(e) => {
            warn!(
                "upstream unreachable for chat run {}: {}",
                job.run_id, e.message
            );
            m.upstream_errors.with_label_values(&[e.kind]).inc();
            let _ = head.send(Head::Failed(e));
            return;
        }
    };
    let header = match s.response_header() {
        Some(h) => h.clone(),
        None => {
            let _ = head.send(Head::Failed(UpstreamError {
                kind: "protocol",
                message: "upstream sent no response header".into(),
            }));
            return;
        }
    };
    if !is_recordable(&header) {
        if !header.status.is_success() {
            m.upstream_errors.with_label_values(&["status"]).inc();
        }
        relay(s, header, head).await;
        return;
    }
    let run = Arc::new(Run::new(job.run_id.clone(), job.window));
    let Some(pending) = job.pending.take() else {
        return;
    };
    let chat_id = pending.scope().to_string();
    let guard = run.observe();
    job.registry.go_live(&pending, run.clone());
    drop(pending);
    m.runs_started.with_label_values(&[&job.route]).inc();
    m.runs_active.inc();
    let (tee, raw) = if job.legacy {
        let (tx, rx) = mpsc::channel(RAW_QUEUE);
        (Some(tx), Some(rx))
    } else {
        (None, None)
    };
    info!(
        "run {} started: chat {:?} route {}",
        run.id(),
        chat_id,
        job.route
    );
    let _ = head.send(Head::Live {
        run: run.clone(),
        header,
        raw,
        guard,
    });
    let mut tee = tee;
    let rec = Recording::read(&mut s, &run, &job, &mut tee).await;
    let persisted = rec.stopped.is_none()
        && match &job.commit {
            Commit::Eof => rec.clean && rec.saw_terminal,
            Commit::Event { .. } => rec.committed,
        };
    let reason = match (persisted, rec.stopped) {
        (true, _) => None,
        (false, Some(r)) => Some(r),
        (false, None) if !rec.clean => Some(rec.error.unwrap_or("upstream_reset")),
        (false, None) => Some(match job.commit {
            Commit::Eof => "no_terminal_event",
            Commit::Event { .. } => "not_committed",
        }),
    };
    let end = run.settle(persisted, reason);
    let outcome = if end.superseded {
        "superseded"
    } else if matches!(rec.stopped, Some("cancelled")) {
        "cancelled"
    } else if end.persisted {
        "persisted"
    } else {
        "not_persisted"
    };
    m.runs_finished.with_label_values(&[outcome]).inc();
    m.runs_active.dec();
    // Only now publish the end: whoever sees it also sees it counted.
    run.done();
    job.registry.notify();
    if let (true, Some(tx)) = (rec.clean, tee) {
        // An empty chunk tells a legacy requester the upstream ended cleanly.
        let _ = tx.try_send(Bytes::new());
    }
    info!(
        "run {} ended: chat {:?} outcome {} reason {} duration {:.3}s events {} bytes {} peak_observers {}",
        run.id(),
        chat_id,
        outcome,
        end.reason.unwrap_or("-"),
        run.started().elapsed().as_secs_f64(),
        rec.events,
        rec.bytes,
        run.peak_observers(),
    );
    if rec.clean {
        job.upstream.release(s).await;
    }
}

/// Relays a response that is not recorded, chunk by chunk, until the requester leaves.
async fn relay(mut s: HttpSession, header: ResponseHeader, head: oneshot::Sender<Head>) {
    let (tx, rx) = mpsc::channel(16);
    if head.send(Head::Relay { header, body: rx }).is_err() {
        return;
    }
    while let Ok(Some(chunk)) = s.read_response_body().await {
        if tx.send(chunk).await.is_err() {
            return;
        }
    }
}

/// What reading a live upstream to its end observed.
#[derive(Default)]
struct Recording {
    clean: bool,
    saw_terminal: bool,
    committed: bool,
    stopped: Option<&'static str>,
    error: Option<&'static str>,
    events: u64,
    bytes: u64,
}

impl Recording {
    async fn read(
        s: &mut HttpSession,
        run: &Arc<Run>,
        job: &Job,
        tee: &mut Option<mpsc::Sender<Bytes>>,
    ) -> Recording {
        let m = &job.metrics;
        let mut rec = Recording::default();
        let mut dec = Decoder::new(job.max_event);
        let mut decoded = Vec::new();
        let mut batch: Vec<Event> = Vec::new();
        let deadline = job.max_duration.map(|d| tokio::time::Instant::now() + d);
        // Built once: a stop or the deadline is noticed without re-arming them per read.
        let stop = run.stop_requested();
        let expiry = sleep_until(deadline);
        tokio::pin!(stop, expiry);
        loop {
            let read = tokio::select! {
                biased;
                r = s.read_response_body() => r,
                reason = &mut stop => { rec.stopped = Some(reason); break; }
                _ = &mut expiry => { rec.stopped = Some("max_duration"); break; }
            };
            let chunk = match read {
                Ok(Some(c)) => c,
                Ok(None) => {
                    rec.clean = true;
                    break;
                }
                Err(e) => {
                    let kind = kind_of(&e, false);
                    m.upstream_errors.with_label_values(&[kind]).inc();
                    rec.error = Some(if kind == "timeout" {
                        "upstream_timeout"
                    } else {
                        "upstream_reset"
                    });
                    warn!("run {}: upstream read failed: {e}", run.id());
                    break;
                }
            };
            rec.bytes += chunk.len() as u64;
            m.upstream_bytes.inc_by(chunk.len() as u64);
            if let Some(tx) = tee.as_ref() {
                if let Err(e) = tx.try_send(chunk.clone()) {
                    if matches!(e, mpsc::error::TrySendError::Full(_)) {
                        warn!(
                            "run {}: legacy client too slow, its stream is cut",
                            run.id()
                        );
                    }
                    *tee = None;
                }
            }
            decoded.clear();
            batch.clear();
            dec.feed(&chunk, &mut decoded);
            for d in decoded.drain(..) {
                match d {
                    Decoded::Event(e) => {
                        let ev = classify(&e);
                        rec.saw_terminal |= ev.terminal;
                        rec.committed |= commits(&job.commit, &ev);
                        batch.push(ev);
                    }
                    Decoded::Oversized { bytes } => {
                        m.events_dropped.with_label_values(&["oversized"]).inc();
                        warn!(
                            "run {}: dropped an upstream event over {bytes} bytes",
                            run.id()
                        );
                    }
                }
            }
            if batch.is_empty() {
                continue;
            }
            rec.events += batch.len() as u64;
            m.upstream_events.inc_by(batch.len() as u64);
            let appended = run.append(&batch);
            job.registry.add_bytes(appended.bytes);
            if appended.events < batch.len() {
                m.events_dropped
                    .with_label_values(&["after_end"])
                    .inc_by((batch.len() - appended.events) as u64);
            }
            if run.observers() == 0 {
                m.unobserved_events.inc_by(appended.events as u64);
            }
        }
        if dec.finish() && rec.clean {
            m.upstream_errors.with_label_values(&["protocol"]).inc();
            warn!(
                "run {}: upstream ended inside an event; it was discarded",
                run.id()
            );
        }
        rec
    }
}

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
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
