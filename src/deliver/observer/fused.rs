//! The requester's reader in its producer's task ([`serve_fused`]): a fresh protocol-1 reader
//! driven by the same polls as the producer of its run, so an event wakes one task (the upstream
//! socket's), not a second one through the run's watch.
//!
//! At every wake of the task: a reader that was waiting lets go of its waits first (a waiter on
//! the run's watch would be woken by the producer's append: a wake of this very task, and a poll
//! more); then the producer runs (reads the upstream, appends); then the reader writes the frames
//! the producer handed it ([`Handoff`]: the append that followed its cursor while it waited
//! caught up), or else reads and writes what the run gained since its cursor ([`super::pass`],
//! the general path), and waits again. A write that waits for the client's socket stays in
//! flight across wakes while the producer keeps reading; the reader catches up from the journal
//! afterwards, in writes of up to 512 frames, or by a snapshot when it fell out of the window, as
//! any reader. The producer reads at most one write's worth ahead of what the reader has written
//! before it lets the reader write ([`Handoff::pace`]); and when the run grows while a write
//! waits for the client's socket (a run faster than its client), the producer goes on in a task
//! of its own ([`Producing::detach`]) and the reader waits on the run's watch as any reader.

use std::future::{poll_fn, Future};
use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::Poll;

use bytes::Bytes;
use log::debug;
use tokio_util::sync::CancellationToken;

use super::{
    first_write, pass, ClientGone, Exit, Idle, Options, Pass, Sink, Wake, MAX_FRAMES_PER_WRITE,
};
use crate::metrics::Metrics;
use crate::producer::{Handed, Handoff, Producing};
use crate::record::sse::KEEPALIVE;
use crate::state::attach_policy::Start;
use crate::state::run::{ObserverGuard, Run};

/// Serves the run's requester (counted by `guard` since the run went live) from the start of
/// `run` until `STREAM_END`, the client leaving, or shutdown, with `producing`, the run's
/// producer, polled beside it. The producer is not waited for: once the reader is done, the
/// caller decides what runs it.
pub async fn serve_fused<S: Sink, P: Future<Output = ()> + Send + 'static>(
    sink: &mut S,
    producing: &mut Producing<P>,
    run: &Arc<Run>,
    guard: ObserverGuard,
    opts: &Options,
    metrics: &Metrics,
    shutdown: &CancellationToken,
) -> Exit {
    let _guard = guard;
    metrics.observers_active.inc();
    let handoff = producing.handoff();
    let outcome = fused_loop(
        sink,
        producing,
        handoff.as_deref(),
        run,
        opts,
        metrics,
        shutdown,
    );
    let outcome = outcome.await;
    // Nothing more is handed to a reader that is done.
    if let Some(h) = &handoff {
        h.disarm();
        h.release();
    }
    metrics.observers_active.dec();
    debug!("requester of run {} ended: {outcome:?}", run.id());
    outcome
}

/// One step of the reader, holding its sink and its waits while in flight and giving them
/// back when done (so a step is one future of one type, kept in one slot).
enum Op {
    /// Reads and writes what follows the cursor ([`pass`]).
    Pass(u64),
    /// Writes frames the producer handed over ([`Handoff`]).
    Direct(Handed),
    /// Writes a heartbeat.
    Heartbeat,
    /// Waits ([`Idle::next`]) until the run changes, a heartbeat is due, the client leaves,
    /// shutdown, or the task's next wake (interrupted).
    Idle,
}

/// What a step did.
enum Done {
    Pass(Pass),
    Sent(Result<(), ClientGone>),
    /// `None`: interrupted before anything happened.
    Woke(Result<Option<Wake>, Exit>),
}

async fn step<'s, 'i, 't, S: Sink>(
    sink: &'s mut S,
    idle: &'i mut Idle<'t>,
    op: Op,
    run: &Arc<Run>,
    metrics: &Metrics,
    interrupt: &AtomicBool,
) -> (&'s mut S, &'i mut Idle<'t>, Done) {
    let done = match op {
        Op::Pass(cursor) => {
            Done::Pass(pass(sink, run, cursor, MAX_FRAMES_PER_WRITE, metrics).await)
        }
        Op::Direct(handed) => {
            let sent = sink.send(handed.frames).await;
            if sent.is_ok() {
                // The frames were the run's newest: no lag.
                metrics.observer_lag.observe(0.0);
                metrics
                    .delivery_delay
                    .observe(handed.at.elapsed().as_secs_f64());
            }
            Done::Sent(sent)
        }
        Op::Heartbeat => Done::Sent(sink.send(Bytes::from_static(KEEPALIVE)).await),
        Op::Idle => Done::Woke(tokio::select! {
            biased;
            () = interrupted(interrupt) => Ok(None),
            w = idle.next(sink) => w.map(Some),
        }),
    };
    (sink, idle, done)
}

/// Resolves once `flag` is set. It registers no waker: whoever sets the flag polls it next.
async fn interrupted(flag: &AtomicBool) {
    poll_fn(|_| match flag.load(Ordering::Relaxed) {
        true => Poll::Ready(()),
        false => Poll::Pending,
    })
    .await
}

/// The reader's position between steps.
struct Reader<'h> {
    cursor: u64,
    /// Read again at once: the last pass stopped short of the head, or a wake said the run
    /// changed (and marked it seen).
    again: bool,
    heartbeat: bool,
    /// The producer's handoff, armed while the reader waits.
    handoff: Option<&'h Handoff>,
    armed: bool,
}

impl Reader<'_> {
    /// Takes in what a step did; `Some` when the reader is done.
    fn took(&mut self, done: Done) -> Option<Exit> {
        match done {
            Done::Pass(Pass::Exit(exit)) => return Some(exit),
            Done::Pass(Pass::Wrote { cursor, caught_up }) => {
                self.cursor = cursor;
                self.again |= !caught_up;
            }
            Done::Sent(Err(ClientGone)) => return Some(Exit::Gone),
            Done::Sent(Ok(())) | Done::Woke(Ok(None)) => {}
            Done::Woke(Ok(Some(Wake::Changed))) => self.again = true,
            Done::Woke(Ok(Some(Wake::Heartbeat))) => self.heartbeat = true,
            Done::Woke(Err(exit)) => return Some(exit),
        }
        None
    }

    /// The producer went on in a task of its own: nothing more is handed over.
    fn detached(&mut self) {
        self.handoff = None;
    }

    /// The next step, or the reader's end (shutdown, checked before each wait).
    fn next(&mut self, idle: &mut Idle<'_>, run: &Run) -> Result<Op, Exit> {
        if let Some(h) = self.handoff {
            h.wrote(self.cursor);
        }
        if let Some(handed) = self.handed(idle, run) {
            return Ok(Op::Direct(handed));
        }
        if std::mem::take(&mut self.again) || idle.changed() {
            idle.seen();
            return Ok(Op::Pass(self.cursor));
        }
        if std::mem::take(&mut self.heartbeat) {
            return Ok(Op::Heartbeat);
        }
        if idle.shutting_down() {
            return Err(Exit::Shutdown);
        }
        if let Some(h) = self.handoff {
            h.arm(self.cursor);
            self.armed = true;
        }
        Ok(Op::Idle)
    }

    /// What the producer handed over since the reader armed the handoff, when it follows the
    /// cursor: the cursor moves past it, and the run's change it made is marked seen unless the
    /// run has more (a second append, an end), which the next pass reads.
    fn handed(&mut self, idle: &mut Idle<'_>, run: &Run) -> Option<Handed> {
        if !std::mem::take(&mut self.armed) {
            return None;
        }
        let handed = self.handoff?.take()?;
        if handed.first != self.cursor + 1 {
            return None;
        }
        self.cursor = handed.last;
        idle.seen();
        if run.head() != handed.last || run.end().is_some() {
            self.again = true;
        }
        Some(handed)
    }
}

async fn fused_loop<S: Sink, P: Future<Output = ()> + Send + 'static>(
    sink: &mut S,
    producing: &mut Producing<P>,
    handoff: Option<&Handoff>,
    run: &Arc<Run>,
    opts: &Options,
    metrics: &Metrics,
    shutdown: &CancellationToken,
) -> Exit {
    let rx = run.subscribe();
    let first = producing.beside(first_write(sink, run, Start::Fresh, metrics));
    let Some(cursor) = first.await else {
        return Exit::Gone;
    };
    let mut idle = Idle::new(rx, opts.heartbeat, shutdown);
    idle.seen();
    let interrupt = AtomicBool::new(false);
    let mut reader = Reader {
        cursor,
        again: false,
        heartbeat: false,
        handoff,
        armed: false,
    };
    let first = step(sink, &mut idle, Op::Pass(cursor), run, metrics, &interrupt);
    let mut slot = pin!(Some(first));
    let mut parts = None;
    let mut waiting = false;
    poll_fn(|cx| {
        if waiting {
            // Let go of the waits before the producer appends (see the file's doc): an
            // interrupted step resolves at once.
            interrupt.store(true, Ordering::Relaxed);
            if let Some(Poll::Ready((s, i, done))) =
                slot.as_mut().as_pin_mut().map(|op| op.poll(cx))
            {
                slot.set(None);
                parts = Some((s, i));
                waiting = false;
                interrupt.store(false, Ordering::Relaxed);
                if let Some(exit) = reader.took(done) {
                    return Poll::Ready(exit);
                }
            }
        }
        let head = run.head();
        producing.poll(cx);
        let produced = run.head() != head;
        loop {
            if let Some(op) = slot.as_mut().as_pin_mut() {
                let Poll::Ready((s, i, done)) = op.poll(cx) else {
                    if produced && !waiting && !producing.detached() {
                        // A write waits for the socket while the run grew: the client is slower
                        // than the run. The producer goes on in a task of its own.
                        producing.detach();
                        reader.detached();
                        debug!(
                            "requester of run {} behind: its producer detached",
                            run.id()
                        );
                    }
                    return Poll::Pending;
                };
                slot.set(None);
                parts = Some((s, i));
                waiting = false;
                if let Some(exit) = reader.took(done) {
                    return Poll::Ready(exit);
                }
            }
            let Some((s, i)) = parts.take() else {
                // Not reached: a step in flight or its parts given back.
                return Poll::Ready(Exit::Gone);
            };
            match reader.next(i, run) {
                Ok(op) => {
                    waiting = matches!(op, Op::Idle);
                    slot.set(Some(step(s, i, op, run, metrics, &interrupt)));
                }
                Err(exit) => return Poll::Ready(exit),
            }
        }
    })
    .await
}

#[cfg(test)]
mod tests;
