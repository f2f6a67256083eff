//! Observers: the attach decision for one request, and the write loop that serves one client
//! from a run (snapshot or replay, live tail, then exactly one `STREAM_END`).
//!
//! The loop reads by cursor; it never consumes from a shared queue. Each wake-up writes every
//! frame available since the cursor in one write. An observer that falls out of the window is
//! reset with a fresh snapshot; a client that leaves, even while idle, ends only its observer.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use log::debug;

use crate::auth::Owner;
use crate::compact::Capture;
use crate::frames;
use crate::metrics::Metrics;
use crate::registry::Registry;
use crate::run::{CursorMiss, ObserverGuard, Run};
use crate::sse::KEEPALIVE;

/// Frames gathered into one write at most.
const MAX_FRAMES_PER_WRITE: usize = 512;

/// The client side of an observer: where frames go.
#[async_trait]
pub trait Sink: Send {
    /// Writes one chunk; an error means the client is gone (or stalled past the write timeout).
    async fn send(&mut self, data: Bytes) -> Result<(), ()>;
    /// Resolves when the client goes away while nothing is being written.
    async fn closed(&mut self);
}

/// How an observer starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// With a snapshot of the run as it is now.
    Snapshot,
    /// With an empty snapshot at seq 0 (the original requester of a new run).
    Fresh,
    /// With the events after this cursor, from the window.
    After(u64),
}

/// What an attach request gets.
#[derive(Debug, Clone)]
pub enum Decision {
    /// 204: nothing to show.
    NoContent,
    /// The chat has no run yet: wait for one (up to `wait_ms`), or record one (`on_miss`).
    Missing,
    /// Serve `run` from `start`; `reset` names why a replacement snapshot was sent.
    Serve {
        /// The run to serve.
        run: Arc<Run>,
        /// Where to start.
        start: Start,
        /// The `tether_snapshot_resets_total` reason, when the cursor could not be honoured.
        reset: Option<&'static str>,
    },
}

/// Decides an attach (DESIGN, attach table) for the chat at `scope` as seen by `owner`. A
/// `run_id` without `after_seq` counts as cursor 0.
pub fn decide(
    registry: &Registry,
    scope: &str,
    owner: &Owner,
    run_id: Option<&str>,
    after: Option<u64>,
) -> Decision {
    let current = registry.current(scope, owner);
    let replacement = |reason| match &current {
        Some(c) => Decision::Serve {
            run: c.clone(),
            start: Start::Snapshot,
            reset: Some(reason),
        },
        None => Decision::NoContent,
    };
    if let Some(run_id) = run_id {
        let after = after.unwrap_or(0);
        return match registry.find(scope, owner, run_id) {
            None => replacement("unknown_run"),
            Some(r) => match r.read_after(after, 0) {
                Ok(_) => Decision::Serve {
                    run: r,
                    start: Start::After(after),
                    reset: None,
                },
                Err(CursorMiss::Ahead) => replacement("future_cursor"),
                Err(CursorMiss::Expired) => replacement("expired_cursor"),
            },
        };
    }
    match current {
        None => Decision::Missing,
        Some(c) => match c.end() {
            Some(end) if end.persisted => Decision::NoContent,
            _ => Decision::Serve {
                run: c,
                start: Start::Snapshot,
                reset: None,
            },
        },
    }
}

/// Waits up to `wait` for the chat to get a run. The run that appears is served from a snapshot
/// even if it completed before this waiter got to it: the client asked for that turn.
pub async fn wait_for_run(
    registry: &Registry,
    scope: &str,
    owner: &Owner,
    wait: Duration,
) -> Decision {
    let deadline = tokio::time::Instant::now() + wait;
    let mut rx = registry.subscribe();
    loop {
        rx.borrow_and_update();
        if let Some(run) = registry.current(scope, owner) {
            return Decision::Serve {
                run,
                start: Start::Snapshot,
                reset: None,
            };
        }
        if tokio::time::timeout_at(deadline, rx.changed())
            .await
            .is_err()
        {
            return Decision::NoContent;
        }
    }
}

/// How one observer ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// `STREAM_END` was written.
    Ended,
    /// The client left or stalled.
    Gone,
    /// The process is shutting down.
    Shutdown,
}

/// Observer settings.
#[derive(Debug, Clone)]
pub struct Options {
    /// Interval of `: keepalive` comments while idle.
    pub heartbeat: Duration,
}

/// Serves one client from `run` until `STREAM_END`, the client leaving, or shutdown. `guard`
/// is the client's attachment when it was counted earlier (the original requester).
pub async fn serve<S: Sink>(
    sink: &mut S,
    run: &Arc<Run>,
    start: Start,
    guard: Option<ObserverGuard>,
    opts: &Options,
    metrics: &Metrics,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) -> Outcome {
    let _guard = guard.unwrap_or_else(|| run.observe());
    metrics.observers_active.inc();
    let outcome = write_loop(sink, run, start, opts, metrics, &mut shutdown).await;
    metrics.observers_active.dec();
    debug!("observer of run {} ended: {outcome:?}", run.id());
    outcome
}

async fn snapshot(run: &Run, metrics: &Metrics) -> (u64, Bytes) {
    let t = Instant::now();
    let snap = run.snapshot().await;
    if snap.serialized {
        metrics
            .snapshot_serialize
            .observe(t.elapsed().as_secs_f64());
    }
    (snap.seq, snap.frame)
}

async fn write_loop<S: Sink>(
    sink: &mut S,
    run: &Arc<Run>,
    start: Start,
    opts: &Options,
    metrics: &Metrics,
    shutdown: &mut tokio::sync::watch::Receiver<bool>,
) -> Outcome {
    let mut rx = run.subscribe();
    let mut cursor = match start {
        Start::After(c) => c,
        Start::Fresh => {
            let frame = frames::snapshot(run.id(), 0, &Capture::default());
            if sink.send(frame).await.is_err() {
                return Outcome::Gone;
            }
            0
        }
        Start::Snapshot => {
            let (seq, frame) = snapshot(run, metrics).await;
            if sink.send(frame).await.is_err() {
                return Outcome::Gone;
            }
            seq
        }
    };
    let mut heartbeat =
        tokio::time::interval_at(tokio::time::Instant::now() + opts.heartbeat, opts.heartbeat);
    loop {
        rx.borrow_and_update();
        match run.read_after(cursor, MAX_FRAMES_PER_WRITE) {
            Ok(read) => {
                let out = match (&read.frames[..], &read.end) {
                    // One frame: the shared frame itself, no copy.
                    ([one], None) => one.clone(),
                    (frames, end) => {
                        let len = frames.iter().map(Bytes::len).sum::<usize>();
                        let mut out = BytesMut::with_capacity(len + 160);
                        frames.iter().for_each(|f| out.extend_from_slice(f));
                        if let Some(end) = end {
                            out.extend_from_slice(&frames::end(run.id(), end));
                        }
                        out.freeze()
                    }
                };
                if !out.is_empty() {
                    if sink.send(out).await.is_err() {
                        return Outcome::Gone;
                    }
                    if !read.frames.is_empty() {
                        metrics
                            .observer_lag
                            .observe(read.head.saturating_sub(read.last) as f64);
                        if let Some(at) = read.last_arrival {
                            metrics.delivery_delay.observe(at.elapsed().as_secs_f64());
                        }
                    }
                }
                if read.end.is_some() {
                    return Outcome::Ended;
                }
                if read.last > cursor {
                    cursor = read.last;
                    continue;
                }
            }
            Err(_) => {
                // Fell out of the window (a slow reader): reset from a fresh snapshot.
                metrics.snapshot_resets.with_label_values(&["lagged"]).inc();
                debug!(
                    "observer of run {} lagged at {cursor}; reset by snapshot",
                    run.id()
                );
                let (seq, frame) = snapshot(run, metrics).await;
                if sink.send(frame).await.is_err() {
                    return Outcome::Gone;
                }
                cursor = seq;
                continue;
            }
        }
        tokio::select! {
            r = rx.changed() => { if r.is_err() { return Outcome::Gone; } }
            _ = sink.closed() => return Outcome::Gone,
            _ = heartbeat.tick() => {
                if sink.send(Bytes::from_static(KEEPALIVE)).await.is_err() {
                    return Outcome::Gone;
                }
            }
            _ = shutdown.changed() => return Outcome::Shutdown,
        }
    }
}

#[cfg(test)]
#[path = "observer_tests.rs"]
mod tests;
