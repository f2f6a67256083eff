//! The recorded-bytes tally: one total of the bytes held by every journal counted in it, kept
//! exact by construction.
//!
//! A [`Tally`] is only ever changed through a [`Share`]: a share remembers what it added and
//! gives exactly that back when it is reset, shrunk or dropped. A journal holds one share while
//! it is counted ([`Counted`]) and re-sets it under its own lock after every change to what it
//! holds, so the total is always the sum of the counted journals' shares: adding and removing
//! count the same way for every kind of run, and the total can never go below zero.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// A total of bytes, shared by everything counted in it.
#[derive(Debug, Clone, Default)]
pub struct Tally(Arc<AtomicUsize>);

impl Tally {
    /// An empty tally.
    pub fn new() -> Self {
        Tally::default()
    }

    /// The bytes counted now.
    pub fn total(&self) -> usize {
        self.0.load(Ordering::Relaxed)
    }

    /// A share of nothing, grown with [`Share::set`].
    pub fn share(&self) -> Share {
        Share {
            tally: self.clone(),
            bytes: 0,
        }
    }
}

/// Bytes counted in a [`Tally`] on one holder's behalf; taken back out when dropped.
#[derive(Debug)]
pub struct Share {
    tally: Tally,
    bytes: usize,
}

impl Share {
    /// Makes this share count `n` bytes.
    pub fn set(&mut self, n: usize) {
        if n > self.bytes {
            self.tally.0.fetch_add(n - self.bytes, Ordering::Relaxed);
        } else if n < self.bytes {
            // Only ever what this share added before: the total cannot underflow.
            self.tally.0.fetch_sub(self.bytes - n, Ordering::Relaxed);
        }
        self.bytes = n;
    }

    /// The bytes this share counts.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

impl Drop for Share {
    fn drop(&mut self) {
        self.set(0);
    }
}

/// A journal's place in a tally: counted in none, or in one through a share.
#[derive(Debug, Default)]
pub struct Counted(Option<Share>);

impl Counted {
    /// Starts counting `held` bytes in `tally`. False (and nothing changes) when already
    /// counted somewhere.
    pub fn join(&mut self, tally: &Tally, held: usize) -> bool {
        if self.0.is_some() {
            return false;
        }
        let mut share = tally.share();
        share.set(held);
        self.0 = Some(share);
        true
    }

    /// Stops counting: what was counted is taken back out. False when not counted.
    pub fn leave(&mut self) -> bool {
        self.0.take().is_some()
    }

    /// Re-counts `held` bytes, when counted.
    pub fn update(&mut self, held: usize) {
        if let Some(s) = &mut self.0 {
            s.set(held);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_give_back_exactly_what_they_added() {
        let t = Tally::new();
        let mut a = Counted::default();
        assert!(a.join(&t, 100));
        assert!(!a.join(&t, 100), "counted once");
        let mut b = t.share();
        b.set(40);
        a.update(70);
        assert_eq!(t.total(), 110);
        drop(b);
        assert!(a.leave());
        assert!(!a.leave());
        a.update(500);
        assert_eq!(t.total(), 0);
    }
}
