//! The buffer budget: bytes tether holds on a client's or a backend's behalf that are not part of
//! a recording (chunks queued for a legacy client, an upstream event still being decoded).
//!
//! One [`Budget`] is shared by the whole sidecar (`[limits] max_buffered_bytes`); a legacy
//! client's queue also has a [`Budget`] of its own (`[limits] max_client_buffer_bytes`). Bytes are
//! taken as a [`Charge`], an RAII guard that gives them back when it is dropped or shrunk, so a
//! queue or decoder that goes away (a cut client, an ended run) can never leak its share. The
//! sidecar-wide budget mirrors what it holds in the `tether_buffered_bytes` gauge.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Where a budget mirrors what it holds (the sidecar's `tether_buffered_bytes` gauge).
pub trait Meter: Send + Sync {
    /// Adds `delta` bytes (negative: gives them back).
    fn add(&self, delta: i64);
    /// Takes `delta` bytes off.
    fn sub(&self, delta: i64) {
        self.add(-delta);
    }
}

struct Inner {
    used: AtomicUsize,
    max: usize,
    gauge: Option<Arc<dyn Meter>>,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Budget")
            .field("used", &self.used)
            .field("max", &self.max)
            .finish()
    }
}

/// A byte budget: at most `max` bytes held at once by all its [`Charge`]s.
#[derive(Debug, Clone)]
pub struct Budget(Arc<Inner>);

impl Budget {
    /// A budget of `max` bytes.
    pub fn new(max: usize) -> Self {
        Budget(Arc::new(Inner {
            used: AtomicUsize::new(0),
            max,
            gauge: None,
        }))
    }

    /// A budget of `max` bytes whose use is mirrored in `gauge`.
    pub fn with_gauge(max: usize, gauge: Arc<dyn Meter>) -> Self {
        Budget(Arc::new(Inner {
            used: AtomicUsize::new(0),
            max,
            gauge: Some(gauge),
        }))
    }

    /// A budget that never refuses (tests, tools).
    pub fn unlimited() -> Self {
        Budget::new(usize::MAX)
    }

    /// Bytes held by its charges now.
    pub fn used(&self) -> usize {
        self.0.used.load(Ordering::Relaxed)
    }

    /// The most it holds.
    pub fn max(&self) -> usize {
        self.0.max
    }

    /// An empty charge, grown later with [`Charge::resize`].
    pub fn empty(&self) -> Charge {
        Charge {
            budget: self.clone(),
            bytes: 0,
        }
    }

    /// Takes `n` bytes, or `None` when that would take the budget over its maximum.
    pub fn try_charge(&self, n: usize) -> Option<Charge> {
        self.take(n).then(|| Charge {
            budget: self.clone(),
            bytes: n,
        })
    }

    fn take(&self, n: usize) -> bool {
        if n == 0 {
            return true;
        }
        let inner = &self.0;
        let taken = inner
            .used
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |u| {
                u.checked_add(n).filter(|t| *t <= inner.max)
            })
            .is_ok();
        if taken {
            if let Some(g) = &inner.gauge {
                g.add(n as i64);
            }
        }
        taken
    }

    fn give(&self, n: usize) {
        if n == 0 {
            return;
        }
        self.0.used.fetch_sub(n, Ordering::Relaxed);
        if let Some(g) = &self.0.gauge {
            g.sub(n as i64);
        }
    }
}

/// Bytes held against a [`Budget`]; given back when dropped.
#[derive(Debug)]
pub struct Charge {
    budget: Budget,
    bytes: usize,
}

impl Charge {
    /// Bytes this charge holds.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Makes this charge hold `n` bytes. Shrinking always succeeds; growing fails (and the charge
    /// keeps what it held) when the budget has no room for the difference.
    pub fn resize(&mut self, n: usize) -> bool {
        if n <= self.bytes {
            self.budget.give(self.bytes - n);
            self.bytes = n;
            return true;
        }
        if self.budget.take(n - self.bytes) {
            self.bytes = n;
            true
        } else {
            false
        }
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.budget.give(self.bytes);
    }
}

#[cfg(test)]
mod tests;
