//! Upstream connects, queued and paced: at most `max_connecting` in flight, the rest wait their
//! turn in arrival order; a connect that finds no free file descriptor waits for one instead of
//! failing the turn. Both waits end at `connect_queue_timeout`.
//!
//! A burst of thousands of new turns would otherwise open thousands of backend connections at
//! once, and any that the backend's accept queue or the process's descriptor limit cannot take
//! at that moment would fail with `502` although a slot frees a moment later.

use std::future::Future;
use std::io;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio::time::Instant;

/// First pause before trying again for a file descriptor; pauses double up to [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(10);
/// Longest pause between two tries for a file descriptor.
const MAX_PAUSE: Duration = Duration::from_millis(500);

/// Why a queued connect did not happen.
#[derive(Debug)]
pub enum Refused<E> {
    /// No connect slot freed within the queue timeout.
    Queue(Duration),
    /// The connect failed.
    Failed {
        /// The connect's last error.
        error: E,
        /// How long it waited for a file descriptor before giving up, if it did.
        waited: Option<Duration>,
    },
}

/// The connect queue of one backend.
#[derive(Debug)]
pub struct Connects {
    slots: Option<Semaphore>,
    queue_timeout: Duration,
    waiting: AtomicUsize,
    out_of_fds: AtomicU64,
}

/// Counts a turn as waiting while it lives.
struct Waiting<'a>(&'a AtomicUsize);

impl<'a> Waiting<'a> {
    fn new(n: &'a AtomicUsize) -> Self {
        n.fetch_add(1, Ordering::Relaxed);
        Waiting(n)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Connects {
    /// A queue letting `max_connecting` connects run at once (`0`: no limit), each waiting at
    /// most `queue_timeout` for its slot and a file descriptor.
    pub fn new(max_connecting: usize, queue_timeout: Duration) -> Self {
        Connects {
            slots: (max_connecting > 0).then(|| Semaphore::new(max_connecting)),
            queue_timeout,
            waiting: AtomicUsize::new(0),
            out_of_fds: AtomicU64::new(0),
        }
    }

    /// Turns waiting now for a connect slot or a file descriptor.
    pub fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Relaxed)
    }

    /// Connects that found the process out of file descriptors and waited (once per turn).
    pub fn out_of_fds(&self) -> u64 {
        self.out_of_fds.load(Ordering::Relaxed)
    }

    /// Runs `connect` once a slot is free, and again while it fails for want of a file
    /// descriptor (`fds_exhausted` says which errors those are), until the queue timeout.
    pub async fn run<T, E, F, Fut>(
        &self,
        mut connect: F,
        fds_exhausted: impl Fn(&E) -> bool,
    ) -> Result<T, Refused<E>>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let start = Instant::now();
        let deadline = start + self.queue_timeout;
        let _slot = match &self.slots {
            None => None,
            Some(slots) => {
                let _waiting = Waiting::new(&self.waiting);
                match tokio::time::timeout_at(deadline, slots.acquire()).await {
                    Ok(Ok(permit)) => Some(permit),
                    // The semaphore is never closed; treat it as no limit if it were.
                    Ok(Err(_)) => None,
                    Err(_) => return Err(Refused::Queue(self.queue_timeout)),
                }
            }
        };
        let mut pause = FIRST_PAUSE;
        // Set once the connect first found no descriptor: since when, and counted as waiting.
        let mut waiting: Option<(Instant, Waiting<'_>)> = None;
        loop {
            match connect().await {
                Ok(t) => return Ok(t),
                Err(e) if fds_exhausted(&e) && Instant::now() + pause <= deadline => {
                    if waiting.is_none() {
                        self.out_of_fds.fetch_add(1, Ordering::Relaxed);
                        log::warn!(
                            "no free file descriptor for a backend connection; the turn waits up \
                             to {:.1?} for one (raise the open-files limit: each stream holds two)",
                            deadline.saturating_duration_since(Instant::now())
                        );
                        waiting = Some((Instant::now(), Waiting::new(&self.waiting)));
                    }
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(MAX_PAUSE);
                }
                Err(error) => {
                    return Err(Refused::Failed {
                        error,
                        waited: waiting.map(|(since, _)| since.elapsed()),
                    })
                }
            }
        }
    }
}

/// Whether an I/O error says the process or the system has no file descriptor left.
pub fn is_out_of_fds(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE))
}

#[cfg(test)]
mod tests;
