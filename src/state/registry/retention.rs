//! The registry's retention and eviction: the lazy and periodic sweeps (completed runs past the
//! retention, then completed chats beyond `max_chats`), room made for a new run under the run and
//! byte limits, and the hook told about every eviction.
//!
//! Eviction is fair between owners: the owner holding the most completed chats loses its oldest
//! first, so one caller creating many chats evicts its own before anyone else's, and an owner is
//! only reached once no other owner holds more completed chats than it does.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio::time::Instant;

use super::{Registry, Swept};
use crate::state::run::Run;
use crate::vocab::Scope;

impl Registry {
    pub(super) fn maybe_sweep(&self) {
        let now_ms = self.epoch.elapsed().as_millis() as u64;
        let last = self.last_sweep_ms.load(Ordering::Relaxed);
        if now_ms.saturating_sub(last) >= 1000
            && self
                .last_sweep_ms
                .compare_exchange(last, now_ms, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            self.sweep(Instant::now());
        }
    }

    /// Sets what is told about every eviction, from sweeps and from [`Self::make_room`] alike
    /// (once; later calls are ignored).
    pub fn on_evict(&self, f: impl Fn(Swept) + Send + Sync + 'static) {
        let _ = self.on_evict.0.set(Box::new(f));
    }

    pub(super) fn report(&self, swept: Swept) {
        if swept != Swept::default() {
            if let Some(f) = self.on_evict.0.get() {
                f(swept);
            }
        }
    }

    /// Drops completed runs older than the retention, then the chats beyond `max_chats` whose
    /// runs have all completed, in the fair order of the module docs.
    pub fn sweep(&self, now: Instant) -> Swept {
        let mut swept = Swept::default();
        let expired = |r: &Arc<Run>| {
            !r.is_producing()
                && r.finished_at()
                    .is_some_and(|t| now.saturating_duration_since(t) >= self.retention)
        };
        self.chats.retain(|_, chat| {
            let mut gone = Vec::new();
            chat.older.retain(|r| {
                let keep = !expired(r);
                if !keep {
                    gone.push(r.clone());
                }
                keep
            });
            if chat.current.as_ref().is_some_and(expired) {
                gone.extend(chat.current.take());
            }
            swept.expired += gone.len();
            gone.iter().for_each(|r| self.forget(r));
            chat.current.is_some() || !chat.older.is_empty() || chat.is_busy()
        });
        let idle = self.idle_chats();
        let excess = idle.len().saturating_sub(self.max_chats);
        swept.capacity += self.evict_in(idle, excess, usize::MAX, usize::MAX);
        self.report(swept);
        swept
    }

    /// Chats whose runs have all completed, in eviction order: each next one is the oldest
    /// completion of the owner then holding the most of them (ties: the older completion).
    fn idle_chats(&self) -> Vec<Scope> {
        let mut by_owner: HashMap<Vec<u8>, Vec<(Instant, Scope)>> = HashMap::new();
        for c in self.chats.iter().filter(|c| !c.is_busy()) {
            if let Some(t) = c.completed_at() {
                by_owner
                    .entry(c.owner.as_bytes().to_vec())
                    .or_default()
                    .push((t, c.key().clone()));
            }
        }
        let mut owners: Vec<VecDeque<(Instant, Scope)>> = by_owner
            .into_values()
            .map(|mut chats| {
                chats.sort();
                chats.into()
            })
            .collect();
        let mut next: BinaryHeap<(usize, Reverse<Instant>, usize)> = owners
            .iter()
            .enumerate()
            .filter_map(|(i, o)| o.front().map(|(t, _)| (o.len(), Reverse(*t), i)))
            .collect();
        let mut order = Vec::with_capacity(owners.iter().map(VecDeque::len).sum());
        while let Some((_, _, i)) = next.pop() {
            let owner = &mut owners[i];
            if let Some((_, scope)) = owner.pop_front() {
                order.push(scope);
            }
            if let Some((t, _)) = owner.front() {
                next.push((owner.len(), Reverse(*t), i));
            }
        }
        order
    }

    /// Evicts chats whose runs have all completed (in the fair order) beyond `max_chats`, as
    /// a sweep does: called as a chat is made or adopted and as a run ends, so `max_chats` holds
    /// then, not only at the next sweep. Cheap while no more chats than that are held at all.
    /// Called with no chat entry held (an eviction locks other entries).
    pub(super) fn keep_max_chats(&self) {
        if self.chats.len() <= self.max_chats {
            return;
        }
        let idle = self.idle_chats();
        let excess = idle.len().saturating_sub(self.max_chats);
        if excess == 0 {
            return;
        }
        let capacity = self.evict_in(idle, excess, usize::MAX, usize::MAX);
        self.report(Swept {
            expired: 0,
            capacity,
        });
    }

    /// Evicts idle chats in the fair order of [`Self::idle_chats`]: at least `count`, and then
    /// more while the run count or recorded bytes are at or over the given limits. Returns runs
    /// evicted.
    fn evict_idle(&self, count: usize, max_runs: usize, max_bytes: usize) -> usize {
        self.evict_in(self.idle_chats(), count, max_runs, max_bytes)
    }

    /// [`Self::evict_idle`] over `order`, chats in eviction order.
    fn evict_in(
        &self,
        order: Vec<Scope>,
        count: usize,
        max_runs: usize,
        max_bytes: usize,
    ) -> usize {
        let mut evicted = 0;
        for (i, scope) in order.into_iter().enumerate() {
            let over = self.run_count() >= max_runs || self.recorded_bytes() >= max_bytes;
            if i >= count && !over {
                break;
            }
            if let Some((_, chat)) = self.chats.remove_if(&scope, |_, c| !c.is_busy()) {
                chat.runs().for_each(|r| self.forget(r));
                evicted += chat.runs().count();
            }
        }
        evicted
    }

    /// Makes room for one more run under `max_runs` and `max_bytes`, evicting completed runs
    /// first. Returns false when it is still over (the caller then does not record).
    pub fn make_room(&self, max_runs: usize, max_bytes: usize) -> bool {
        let fits = |r: &Registry| r.run_count() < max_runs && r.recorded_bytes() < max_bytes;
        if fits(self) {
            return true;
        }
        let evicted = self.evict_idle(0, max_runs, max_bytes);
        self.report(Swept {
            expired: 0,
            capacity: evicted,
        });
        fits(self)
    }
}
