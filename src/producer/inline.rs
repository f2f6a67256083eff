//! A producer run inside its requester's task ([`Producing`]): polled beside the requester's
//! reader, so an event wakes one task, not two (docs/performance.md, 2026-12-06), and handed
//! to a task of its own when the reader is done before the run is, or falls behind it
//! ([`Producing::detach`]).

use std::future::{poll_fn, Future};
use std::pin::{pin, Pin};
use std::sync::Arc;
use std::task::{Context, Poll};

use super::handoff::Handoff;

/// A producer's future, run by the task of its run's requester. Whoever holds it polls it at
/// every wake of that task ([`Self::poll`], [`Self::beside`]); once the holder is done with it,
/// or drops it, what remains of the run is spawned as a task of its own, still counted by the
/// producers' tracker: a requester that leaves never stops the upstream read.
pub struct Producing<P: Future<Output = ()> + Send + 'static> {
    fut: Option<Pin<Box<P>>>,
    handoff: Option<Arc<Handoff>>,
    /// Set while the producer's future is polled: still set when dropped, its poll panicked.
    in_poll: bool,
    /// Handed to a task of its own before its end ([`Self::detach`]).
    detached: bool,
}

impl<P: Future<Output = ()> + Send + 'static> Producing<P> {
    /// Runs `fut` (boxed: a producer's future is kilobytes, and inline it would size the
    /// requester's future for every request). [`crate::producer::start`] makes a run's; a test
    /// may run any future in its place.
    pub fn new(fut: P) -> Self {
        Producing {
            fut: Some(Box::pin(fut)),
            handoff: None,
            in_poll: false,
            detached: false,
        }
    }

    /// Like [`Self::new`], for a producer that hands its appends' frames to `handoff`.
    pub fn with_handoff(fut: P, handoff: Arc<Handoff>) -> Self {
        Producing {
            fut: Some(Box::pin(fut)),
            handoff: Some(handoff),
            in_poll: false,
            detached: false,
        }
    }

    /// Where the producer hands its appends' frames, if it does.
    pub fn handoff(&self) -> Option<Arc<Handoff>> {
        self.handoff.clone()
    }

    /// Polls the producer once, unless it has ended.
    pub fn poll(&mut self, cx: &mut Context<'_>) {
        if let Some(f) = &mut self.fut {
            self.in_poll = true;
            let done = f.as_mut().poll(cx).is_ready();
            self.in_poll = false;
            if done {
                self.fut = None;
            }
        }
    }

    /// Whether the producer's future has ended in this task (the run's end is published and
    /// accounted); false once it was handed to a task of its own.
    pub fn ended(&self) -> bool {
        self.fut.is_none() && !self.detached
    }

    /// Hands what remains of the producer to a task of its own now (still counted by the
    /// producers' tracker), so the upstream read and the reader's writes run on two threads
    /// again, the producer no longer paced by the reader: the reader calls it when its write
    /// waits for the client's socket while the run grows (a run faster than its client, or a
    /// slow client), where one task for both would build the reader's resets and read the
    /// upstream in turn (docs/performance.md, "one stream at full speed"). From then on
    /// [`Self::poll`] polls nothing. Outside a runtime it keeps the producer.
    pub fn detach(&mut self) {
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            if let Some(fut) = self.fut.take() {
                if let Some(h) = &self.handoff {
                    h.disarm();
                    h.release();
                }
                rt.spawn(fut);
                self.detached = true;
            }
        }
    }

    /// Whether [`Self::detach`] handed the producer to a task of its own.
    pub fn detached(&self) -> bool {
        self.detached
    }

    /// Runs `work` to its end with the producer polled beside it, first at every wake: a
    /// requester's write that waits for its socket never holds up the upstream read.
    pub async fn beside<F: Future>(&mut self, work: F) -> F::Output {
        let mut work = pin!(work);
        poll_fn(|cx| {
            self.poll(cx);
            work.as_mut().poll(cx)
        })
        .await
    }

    /// Runs the producer to its end in this task (at once when it was detached).
    pub async fn finish(&mut self) {
        poll_fn(|cx| {
            self.poll(cx);
            match self.fut.is_none() {
                true => Poll::Ready(()),
                false => Poll::Pending,
            }
        })
        .await
    }
}

impl<P: Future<Output = ()> + Send + 'static> Drop for Producing<P> {
    /// What remains of the run goes on in a task of its own (outside a runtime, as the process
    /// ends, it is dropped, as a spawned producer would be; so is a producer whose own poll
    /// panicked, which cannot be polled again).
    fn drop(&mut self) {
        if self.in_poll {
            return;
        }
        if let (Some(fut), Ok(rt)) = (self.fut.take(), tokio::runtime::Handle::try_current()) {
            rt.spawn(fut);
        }
    }
}
