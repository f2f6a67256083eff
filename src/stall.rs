//! Stall limits: one timer per stream, re-armed lazily, that ends a read or a write making no
//! progress for a limit (an upstream silent for `idle_timeout`, a client not taking a write for
//! `write_timeout`).
//!
//! Pingora's own per-call timeouts (`set_read_timeout`, `set_write_timeout`) register a timer
//! per call in its timer wheel that stays there until the limit passes, even after the call
//! finished: with a 5-minute upstream idle timeout every upstream read left an entry alive for 5
//! minutes, scattered through the heap between short-lived allocations, so the allocator could not
//! give those pages back (the soak's RSS crept up round after round; a heap profile showed the
//! timer entries as the long-lived allocations). A [`Stall`] keeps one tokio sleep for the stream
//! instead, moved only when it fires early.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use tokio::time::{Instant, Sleep};

/// A call that made no progress within the limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stalled;

/// The stall limit of one stream's reads or writes.
#[derive(Debug)]
pub struct Stall {
    limit: Duration,
    sleep: Pin<Box<Sleep>>,
}

impl Stall {
    /// A limit of `limit` per call.
    pub fn new(limit: Duration) -> Self {
        Stall {
            limit,
            sleep: Box::pin(tokio::time::sleep(limit)),
        }
    }

    /// Runs `fut`; `Err(Stalled)` when it has not finished `limit` after it started.
    pub async fn run<F: Future>(&mut self, fut: F) -> Result<F::Output, Stalled> {
        let start = Instant::now();
        tokio::pin!(fut);
        loop {
            tokio::select! {
                biased;
                out = &mut fut => return Ok(out),
                _ = &mut self.sleep => {
                    if start.elapsed() >= self.limit {
                        return Err(Stalled);
                    }
                    // Armed by an earlier call: move it to this call's limit.
                    self.sleep.as_mut().reset(start + self.limit);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_call_longer_than_the_limit_stalls_and_quick_calls_never_do() {
        let mut stall = Stall::new(Duration::from_secs(30));
        for _ in 0..100 {
            // Many quick calls across several limits' worth of time: never a stall.
            let quick = stall.run(tokio::time::sleep(Duration::from_secs(1))).await;
            assert_eq!(quick, Ok(()));
        }
        let slow = stall.run(tokio::time::sleep(Duration::from_secs(31))).await;
        assert_eq!(slow, Err(Stalled));
        let t = Instant::now();
        let just_under = stall.run(tokio::time::sleep(Duration::from_secs(29))).await;
        assert_eq!(just_under, Ok(()));
        assert_eq!(t.elapsed(), Duration::from_secs(29));
    }

    #[tokio::test(start_paused = true)]
    async fn a_stall_is_measured_from_the_start_of_its_own_call() {
        let mut stall = Stall::new(Duration::from_secs(10));
        let _ = stall.run(tokio::time::sleep(Duration::from_secs(9))).await;
        // The timer was armed for the first call; the second call still gets its full limit.
        let t = Instant::now();
        let r = stall.run(std::future::pending::<()>()).await;
        assert_eq!((r, t.elapsed()), (Err(Stalled), Duration::from_secs(10)));
    }
}
