//! How the write pipeline gathers calls into round trips: every call pending goes in the next
//! one, up to [`Pace::in_flight`] round trips are on the wire at once, and a round trip that
//! would follow the one before within [`Pace::delay`] waits out the rest of it (unless it
//! already carries [`FULL`] calls), so a busy replica sends fewer, larger round trips (Redis's
//! cost is mostly per round trip) and an idle one sends a lone call at once. The wait is
//! tokio's timer, so it ends on the timer's next 1 ms tick at or after the delay.

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

/// Calls per round trip at most.
pub(crate) const MAX_CALLS: usize = 512;
/// Calls a round trip carries that make it go without waiting for more.
pub(crate) const FULL: usize = 64;

/// How the flusher paces its round trips.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Pace {
    /// Round trips on the wire at once.
    pub(crate) in_flight: usize,
    /// The shortest time between the starts of two round trips that carry fewer than [`FULL`]
    /// calls: what a call may wait at most for others to join it (zero: never waits).
    pub(crate) delay: Duration,
}

/// Gathers the calls of `rx` into batches and drives `send`'s future of each (no task per
/// round trip: one scheduling hop less on the way back to the callers). When `rx` closes, the
/// calls still pending are sent and the round trips on the wire finish.
pub(crate) async fn gather<T, F>(
    mut rx: mpsc::UnboundedReceiver<T>,
    pace: Pace,
    mut send: impl FnMut(Vec<T>) -> F,
) where
    F: Future<Output = ()>,
{
    let in_flight = pace.in_flight.max(1);
    let mut flights: Vec<Pin<Box<F>>> = Vec::with_capacity(in_flight);
    let mut batch: Vec<T> = Vec::new();
    let mut closed = false;
    // When the last round trip went, and the timer for the next one's earliest start.
    let mut last: Option<Instant> = None;
    let timer = tokio::time::sleep(Duration::ZERO);
    tokio::pin!(timer);
    loop {
        let go = std::future::poll_fn(|cx| {
            flights.retain_mut(|f| f.as_mut().poll(cx).is_pending());
            while !closed && batch.len() < MAX_CALLS {
                match rx.poll_recv(cx) {
                    Poll::Ready(Some(c)) => batch.push(c),
                    Poll::Ready(None) => closed = true,
                    Poll::Pending => break,
                }
            }
            if batch.is_empty() {
                return if closed {
                    Poll::Ready(false)
                } else {
                    Poll::Pending
                };
            }
            if flights.len() >= in_flight {
                return Poll::Pending;
            }
            let at = last.map(|l| l + pace.delay);
            match at {
                Some(at) if batch.len() < FULL && !closed && at > Instant::now() => {
                    if timer.deadline() != at {
                        timer.as_mut().reset(at);
                    }
                    timer.as_mut().poll(cx).map(|()| true)
                }
                _ => Poll::Ready(true),
            }
        })
        .await;
        if !go {
            break;
        }
        last = Some(Instant::now());
        flights.push(Box::pin(send(std::mem::take(&mut batch))));
    }
    for f in flights {
        f.await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use parking_lot::Mutex;
    use std::sync::Arc;

    /// What the fake sender saw: each round trip's calls and when it went.
    type Log = Arc<Mutex<Vec<(Vec<u32>, Instant)>>>;

    /// Starts [`gather`] with a sender whose round trips take `rtt`; the second log says when
    /// each round trip was answered.
    fn start_logged(pace: Pace, rtt: Duration) -> (mpsc::UnboundedSender<u32>, Log, Log) {
        let (tx, rx) = mpsc::unbounded_channel();
        let (log, answered): (Log, Log) = Default::default();
        let (seen, done) = (log.clone(), answered.clone());
        tokio::spawn(gather(rx, pace, move |b: Vec<u32>| {
            seen.lock().push((b.clone(), Instant::now()));
            let done = done.clone();
            async move {
                tokio::time::sleep(rtt).await;
                done.lock().push((b, Instant::now()));
            }
        }));
        (tx, log, answered)
    }

    fn start(pace: Pace, rtt: Duration) -> (mpsc::UnboundedSender<u32>, Log) {
        let (tx, log, _) = start_logged(pace, rtt);
        (tx, log)
    }

    /// Lets the gatherer run without moving the paused clock.
    async fn settle() {
        for _ in 0..8 {
            tokio::task::yield_now().await;
        }
    }

    fn trips(log: &Log) -> Vec<Vec<u32>> {
        log.lock().iter().map(|(b, _)| b.clone()).collect()
    }

    /// The timer's resolution: a deadline is rounded up to its next tick.
    const TICK: Duration = Duration::from_millis(1);

    const PACED: Pace = Pace {
        in_flight: 4,
        delay: Duration::from_micros(500),
    };

    #[tokio::test(start_paused = true)]
    async fn a_lone_call_on_an_idle_pipeline_goes_at_once() {
        let (tx, log) = start(PACED, Duration::from_micros(100));
        let t0 = Instant::now();
        tx.send(1).unwrap();
        settle().await;
        let log = log.lock();
        assert_eq!(log.len(), 1);
        assert_eq!(log[0], (vec![1], t0), "sent with no wait");
    }

    #[tokio::test(start_paused = true)]
    async fn calls_within_the_delay_after_a_round_trip_share_the_next_one() {
        let (tx, log) = start(PACED, Duration::from_micros(100));
        let t0 = Instant::now();
        tx.send(1).unwrap();
        settle().await;
        // Three calls arrive over the next 300 us, while the first round trip is answered.
        for c in 2..=4 {
            tokio::time::advance(Duration::from_micros(100)).await;
            tx.send(c).unwrap();
            settle().await;
        }
        assert_eq!(
            trips(&log),
            vec![vec![1]],
            "the later calls wait for the delay"
        );
        tokio::time::sleep_until(t0 + PACED.delay + TICK).await;
        settle().await;
        let log = log.lock();
        assert_eq!(log.len(), 2, "one more round trip: {log:?}");
        assert_eq!(log[1].0, vec![2, 3, 4]);
        let at = log[1].1 - t0;
        assert!(
            at >= PACED.delay && at <= PACED.delay + TICK,
            "held for the delay, rounded up to the timer's tick: {at:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_after_a_quiet_delay_is_not_held() {
        let (tx, log) = start(PACED, Duration::from_micros(100));
        tx.send(1).unwrap();
        settle().await;
        tokio::time::advance(Duration::from_millis(2)).await;
        let t1 = Instant::now();
        tx.send(2).unwrap();
        settle().await;
        let log = log.lock();
        assert_eq!(log.len(), 2);
        assert_eq!(log[1], (vec![2], t1));
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_round_trip_does_not_wait() {
        let (tx, log) = start(PACED, Duration::from_micros(100));
        let t0 = Instant::now();
        tx.send(0).unwrap();
        settle().await;
        for c in 1..=FULL as u32 {
            tx.send(c).unwrap();
        }
        settle().await;
        let log = log.lock();
        assert_eq!(log.len(), 2, "the full batch went at once");
        assert_eq!(log[1].0.len(), FULL);
        assert_eq!(log[1].1, t0);
    }

    #[tokio::test(start_paused = true)]
    async fn no_delay_sends_whatever_is_pending_at_once() {
        let pace = Pace {
            in_flight: 1,
            delay: Duration::ZERO,
        };
        let (tx, log, answered) = start_logged(pace, Duration::from_micros(100));
        tx.send(1).unwrap();
        settle().await;
        // One round trip on the wire at most: these queue behind it, then go together.
        tx.send(2).unwrap();
        tx.send(3).unwrap();
        settle().await;
        assert_eq!(trips(&log), vec![vec![1]]);
        tokio::time::sleep(TICK * 2).await;
        settle().await;
        let first_answered = answered.lock()[0].1;
        let log = log.lock();
        assert_eq!(
            log[1],
            (vec![2, 3], first_answered),
            "sent as the first was answered"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn calls_pending_when_the_queue_closes_are_sent() {
        let (tx, log) = start(PACED, Duration::from_micros(100));
        tx.send(1).unwrap();
        settle().await;
        tx.send(2).unwrap();
        drop(tx);
        settle().await;
        assert_eq!(trips(&log), vec![vec![1], vec![2]]);
    }
}
