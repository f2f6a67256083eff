//! A waiting reader's standing waits, the shutdown and the heartbeat's timer: registered once
//! and polled again only for another waker, so a reader woken for every event does not poll
//! (and re-register) them at every wait (docs/performance.md, 2026-12-06).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::time::{Instant, Sleep};
use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};

/// Whether `seen`, the waker a registration holds, wakes the task `cx` polls for.
fn holds(seen: &Option<Waker>, cx: &Context<'_>) -> bool {
    seen.as_ref().is_some_and(|w| w.will_wake(cx.waker()))
}

/// The process's shutdown, as a reader waits for it.
pub(super) struct Shutdown<'a> {
    token: &'a CancellationToken,
    wait: Pin<Box<WaitForCancellationFuture<'a>>>,
    /// The waker the wait holds, once polled.
    seen: Option<Waker>,
}

impl<'a> Shutdown<'a> {
    pub(super) fn new(token: &'a CancellationToken) -> Self {
        Shutdown {
            token,
            wait: Box::pin(token.cancelled()),
            seen: None,
        }
    }

    /// Whether the process is shutting down.
    pub(super) fn is_cancelled(&self) -> bool {
        self.token.is_cancelled()
    }

    /// Ready once the process is shutting down. The wait is polled only for a new waker: it
    /// holds the last one, and a shutdown is seen by the token's flag.
    pub(super) fn poll(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if self.token.is_cancelled() {
            return Poll::Ready(());
        }
        if holds(&self.seen, cx) {
            return Poll::Pending;
        }
        if self.wait.as_mut().poll(cx).is_ready() {
            return Poll::Ready(());
        }
        self.seen = Some(cx.waker().clone());
        Poll::Pending
    }
}

/// Tolerance before a late tick counts as missed (tokio's `Interval` allows the same).
const LATE: Duration = Duration::from_millis(5);

/// A reader's heartbeat timer: due every `every`, the ticks missed while frames kept the
/// reader busy skipped (not written in a burst), as `MissedTickBehavior::Skip`.
pub(super) struct Heartbeat {
    sleep: Pin<Box<Sleep>>,
    every: Duration,
    /// The waker the timer holds, once polled since it was last set.
    seen: Option<Waker>,
}

impl Heartbeat {
    /// The first tick due `every` from now.
    pub(super) fn new(every: Duration) -> Self {
        Heartbeat {
            sleep: Box::pin(tokio::time::sleep_until(Instant::now() + every)),
            every,
            seen: None,
        }
    }

    /// Ready when a heartbeat is due (the next one is then set). The timer is polled only for a
    /// new waker, or once it fired.
    pub(super) fn poll(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if !self.sleep.is_elapsed() && holds(&self.seen, cx) {
            return Poll::Pending;
        }
        if self.sleep.as_mut().poll(cx).is_pending() {
            self.seen = Some(cx.waker().clone());
            return Poll::Pending;
        }
        let deadline = self.sleep.deadline();
        let now = Instant::now();
        let next = match now > deadline + LATE {
            false => deadline + self.every,
            true => {
                let period = self.every.as_nanos().max(1);
                let late = (now - deadline).as_nanos() % period;
                now + Duration::from_nanos((period - late) as u64)
            }
        };
        self.sleep.as_mut().reset(next);
        // A timer set again holds no waker until it is polled.
        self.seen = None;
        Poll::Ready(())
    }
}
