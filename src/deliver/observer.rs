//! Observers: the write loop that serves one client from a run (snapshot or replay, live tail,
//! then exactly one `STREAM_END`).
//!
//! The loop reads by cursor; it never consumes from a shared queue. Each wake-up writes every
//! frame available since the cursor in one write. An observer that falls out of the window is
//! reset with a fresh snapshot; a client that leaves, even while idle, ends only its observer.

use std::future::{poll_fn, Future};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use log::debug;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::accounting::Join;
use crate::dialect::protocol1::Protocol1;
use crate::dialect::Dialect;
use crate::metrics::{Metrics, ResetReason};
use crate::record::compact::Capture;
use crate::record::sse::KEEPALIVE;
use crate::state::attach_policy::Start;
use crate::state::run::{ObserverGuard, Run};
use crate::vocab::kinds::DialectKind;
use standing::{Heartbeat, Shutdown};

/// Frames gathered into one write at most.
const MAX_FRAMES_PER_WRITE: usize = 512;
/// Frames in the first write of a reader resuming more than one write behind: small, so its
/// response head goes out in its first poll, before any other reader's backlog
/// (docs/performance.md, catch-up).
const FIRST_FRAMES: usize = 1;

/// A write to a client failed: it went away, or stalled past the write timeout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the client went away or stalled past the write timeout")]
pub struct ClientGone;

/// The client side of an observer: where frames go. Its futures are returned as they are, not
/// boxed: a reader calls both once a delivery.
pub trait Sink: Send {
    /// Writes one chunk; an error means the client is gone (or stalled past the write timeout).
    fn send(&mut self, data: Bytes) -> impl Future<Output = Result<(), ClientGone>> + Send;
    /// Resolves when the client goes away while nothing is being written.
    fn closed(&mut self) -> impl Future<Output = ()> + Send;
}

/// How one observer ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
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
    shutdown: &CancellationToken,
) -> Exit {
    let how = match start {
        Start::After(_) => Join::Resume,
        Start::Snapshot | Start::Fresh => Join::Attach,
    };
    let _guard = guard.unwrap_or_else(|| run.observe(how));
    metrics.observers_active.inc();
    let outcome = write_loop(sink, run, start, opts, metrics, shutdown).await;
    metrics.observers_active.dec();
    debug!("observer of run {} ended: {outcome:?}", run.id());
    outcome
}

async fn snapshot(run: &Run, metrics: &Metrics) -> (u64, Bytes) {
    let t = Instant::now();
    let snap = super::snapshot::snapshot(run).await;
    if snap.serialized {
        metrics
            .snapshot_serialize
            .observe(t.elapsed().as_secs_f64());
    }
    (snap.seq, snap.frame)
}

/// The cursor a reader starts from, after writing its first frame (an empty or a current
/// snapshot) when it starts with one; `None` when the client is gone.
async fn first_write<S: Sink>(
    sink: &mut S,
    run: &Arc<Run>,
    start: Start,
    metrics: &Metrics,
) -> Option<u64> {
    let (seq, frame) = match start {
        Start::After(c) => return Some(c),
        Start::Fresh => (0, Protocol1.snapshot(run.id(), 0, &Capture::default())),
        Start::Snapshot => snapshot(run, metrics).await,
    };
    sink.send(frame).await.ok().map(|()| seq)
}

/// What one pass of the write loop did.
enum Pass {
    /// Wrote what the window held after the cursor, which is now here; `caught_up`: nothing
    /// more to read until the run changes.
    Wrote { cursor: u64, caught_up: bool },
    /// The reader is done.
    Exit(Exit),
}

/// Reads what follows `cursor` (up to `max` frames, and the end) and writes it in one write; a
/// reader that fell out of the window is reset from a fresh snapshot.
async fn pass<S: Sink>(
    sink: &mut S,
    run: &Arc<Run>,
    cursor: u64,
    max: usize,
    metrics: &Metrics,
) -> Pass {
    let read = match run.read_after(cursor, max) {
        Ok(read) => read,
        Err(_) => {
            // Fell out of the window (a slow reader): reset from a fresh snapshot.
            metrics
                .snapshot_resets
                .inc(DialectKind::Protocol1, ResetReason::Lagged);
            debug!(
                "observer of run {} lagged at {cursor}; reset by snapshot",
                run.id()
            );
            let (seq, frame) = snapshot(run, metrics).await;
            if sink.send(frame).await.is_err() {
                return Pass::Exit(Exit::Gone);
            }
            return Pass::Wrote {
                cursor: seq,
                caught_up: false,
            };
        }
    };
    let out = match (&read.frames[..], &read.end) {
        // One frame: the shared frame itself, no copy.
        ([one], None) => one.clone(),
        (frames, end) => {
            let len = frames.iter().map(Bytes::len).sum::<usize>();
            let mut out = BytesMut::with_capacity(len + 160);
            frames.iter().for_each(|f| out.extend_from_slice(f));
            if let Some(end) = end {
                out.extend_from_slice(&Protocol1.end(run.id(), end));
            }
            out.freeze()
        }
    };
    if !out.is_empty() {
        if sink.send(out).await.is_err() {
            return Pass::Exit(Exit::Gone);
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
        return Pass::Exit(Exit::Ended);
    }
    // Caught up with the head: nothing to read again until the run changes. A change since the
    // wait's `seen` ends the wait at once.
    Pass::Wrote {
        cursor: read.last.max(cursor),
        caught_up: read.last <= cursor || read.last >= read.head,
    }
}

async fn write_loop<S: Sink>(
    sink: &mut S,
    run: &Arc<Run>,
    start: Start,
    opts: &Options,
    metrics: &Metrics,
    shutdown: &CancellationToken,
) -> Exit {
    let rx = run.subscribe();
    let Some(mut cursor) = first_write(sink, run, start, metrics).await else {
        return Exit::Gone;
    };
    let mut idle = Idle::new(rx, opts.heartbeat, shutdown);
    // A reader resuming further behind than one write takes writes a small first write: its
    // response head goes out at once. A backlog that fits in one write goes whole.
    let mut max = match start {
        Start::After(c) if run.head().saturating_sub(c) > MAX_FRAMES_PER_WRITE as u64 => {
            FIRST_FRAMES
        }
        _ => MAX_FRAMES_PER_WRITE,
    };
    loop {
        idle.seen();
        let this = std::mem::replace(&mut max, MAX_FRAMES_PER_WRITE);
        match pass(sink, run, cursor, this, metrics).await {
            Pass::Exit(exit) => return exit,
            Pass::Wrote {
                cursor: next,
                caught_up,
            } => {
                cursor = next;
                if this == FIRST_FRAMES && !caught_up {
                    // The head is out: queue this reader's backlog behind the other tasks once,
                    // so readers attaching together get their heads first.
                    tokio::task::yield_now().await;
                }
                if !caught_up {
                    continue;
                }
            }
        }
        if let Err(outcome) = idle.wait(sink).await {
            return outcome;
        }
    }
}

/// What a reader with nothing to write waits for: the run changing, a heartbeat due, its client
/// leaving, shutdown. It lives as long as the reader, so the shutdown wait and the heartbeat's
/// timer are registered once, not again for every wait ([`standing`]).
pub struct Idle<'a> {
    rx: watch::Receiver<u64>,
    heartbeat: Heartbeat,
    shutdown: Shutdown<'a>,
}

impl<'a> Idle<'a> {
    /// Waits on `rx` (the run's wake-ups, subscribed before the reader first read the run),
    /// with the first heartbeat due one interval from now.
    pub fn new(rx: watch::Receiver<u64>, every: Duration, shutdown: &'a CancellationToken) -> Self {
        Idle {
            rx,
            heartbeat: Heartbeat::new(every),
            shutdown: Shutdown::new(shutdown),
        }
    }

    /// Marks the run's wake-ups so far as seen: call it before reading the run, so a change
    /// after the read ends the next [`Self::wait`] at once.
    pub fn seen(&mut self) {
        self.rx.borrow_and_update();
    }

    /// Waits, while the reader has nothing to write, until the run changes, writing a heartbeat
    /// when one is due (then returns too, so the reader looks again). `Err` is how the reader
    /// ends: the client left (also noticed while idle) or the process is shutting down.
    ///
    /// The branches are polled in this order, the run's change first: a wake-up for new frames
    /// polls nothing else. Shutdown is checked before each wait, so a reader that never runs
    /// out of frames still notices it.
    pub async fn wait<S: Sink>(&mut self, sink: &mut S) -> Result<(), Exit> {
        match self.next(sink).await? {
            Wake::Changed => Ok(()),
            Wake::Heartbeat => sink
                .send(Bytes::from_static(KEEPALIVE))
                .await
                .map_err(|ClientGone| Exit::Gone),
        }
    }

    /// [`Self::wait`] without the heartbeat's write: says that one is due instead. Dropped
    /// before it resolves, it has written nothing.
    pub async fn next<S: Sink>(&mut self, sink: &mut S) -> Result<Wake, Exit> {
        if self.shutdown.is_cancelled() {
            return Err(Exit::Shutdown);
        }
        let (shutdown, heartbeat) = (&mut self.shutdown, &mut self.heartbeat);
        tokio::select! {
            biased;
            r = self.rx.changed() => r.map(|()| Wake::Changed).map_err(|_| Exit::Gone),
            () = poll_fn(|cx| shutdown.poll(cx)) => Err(Exit::Shutdown),
            _ = sink.closed() => Err(Exit::Gone),
            () = poll_fn(|cx| heartbeat.poll(cx)) => Ok(Wake::Heartbeat),
        }
    }

    /// Whether the run changed since [`Self::seen`] (a run's wake-ups never close while the
    /// run lives; a closed one counts as a change, which the next read settles).
    pub fn changed(&self) -> bool {
        self.rx.has_changed().unwrap_or(true)
    }

    /// Whether the process is shutting down.
    pub fn shutting_down(&self) -> bool {
        self.shutdown.is_cancelled()
    }
}

/// Why [`Idle::next`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wake {
    /// The run changed.
    Changed,
    /// A heartbeat is due.
    Heartbeat,
}

mod fused;
mod standing;
#[cfg(test)]
mod tests;

pub use fused::serve_fused;
