//! Requests to the backend in flight: each holds a backend connection, so a file descriptor, and
//! at most `[upstream] max_requests` are held at once; a request over it is refused at once
//! (`503 at_capacity`), never queued.
//!
//! The cap is what keeps HTTP/2 clients from taking every descriptor: a client connection holds
//! one descriptor whatever it carries, but each of its streams that records a turn or passes a
//! request through holds a backend connection of its own, and one connection may carry
//! `max_streams_per_connection` of them. The client connections' cap (`[server]
//! max_connections`) and this one each default to half the open-files limit less a reserve, so
//! that together they leave descriptors for accepts, the admin listener and the journal.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

/// Descriptors kept out of both shares: the listeners, the journal's connections, log files,
/// the runtime's own, accepts being refused and admin scrapes.
pub const RESERVED_DESCRIPTORS: u64 = 64;

/// The default of both `[server] max_connections` and `[upstream] max_requests`: half the
/// open-files soft limit (1,024 when it cannot be read) less [`RESERVED_DESCRIPTORS`], at least 1.
pub fn descriptor_share() -> usize {
    let soft = rlimit::getrlimit(rlimit::Resource::NOFILE).map_or(1024, |(soft, _)| soft);
    usize::try_from(soft.saturating_sub(RESERVED_DESCRIPTORS) / 2)
        .unwrap_or(usize::MAX)
        .max(1)
}

/// The backend's request slots.
#[derive(Debug)]
pub struct Slots {
    max: usize,
    held: AtomicUsize,
    refused: AtomicU64,
}

/// One request's hold on a backend connection; given back when dropped.
#[derive(Debug)]
pub struct Slot(Arc<Slots>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.held.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Slots {
    /// At most `max` slots held at once.
    pub fn new(max: usize) -> Arc<Self> {
        Arc::new(Slots {
            max,
            held: AtomicUsize::new(0),
            refused: AtomicU64::new(0),
        })
    }

    /// A slot, or `None` (counted as refused) when `max` are held.
    pub fn try_take(self: &Arc<Self>) -> Option<Slot> {
        let taken = self
            .held
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (n < self.max).then_some(n + 1)
            });
        match taken {
            Ok(_) => Some(Slot(self.clone())),
            Err(_) => {
                self.refused.fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    }

    /// Slots held now.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }

    /// The most slots held at once.
    pub fn max(&self) -> usize {
        self.max
    }

    /// Requests refused so far.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_more_than_max_are_held_and_a_dropped_slot_frees_its_place() {
        let slots = Slots::new(2);
        let a = slots.try_take().expect("first");
        let _b = slots.try_take().expect("second");
        assert!(slots.try_take().is_none());
        assert!(slots.try_take().is_none());
        assert_eq!((slots.held(), slots.refused()), (2, 2));
        drop(a);
        assert_eq!(slots.held(), 1);
        let _c = slots.try_take().expect("a freed slot");
        assert_eq!((slots.held(), slots.refused()), (2, 2));
    }
}
