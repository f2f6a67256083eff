//! The registry: chats → runs, lookups, pending registrations, supersession, retention and
//! eviction.
//!
//! A chat's *current* run is its latest run that went live; runs it superseded stay reachable by
//! cursor while their producer runs and for the retention period after. Active runs (producer
//! still reading) and chats with a pending registration are never evicted. Cleanup is lazy (on
//! registrations and lookups, at most once a second) plus a periodic [`Registry::sweep`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dashmap::DashMap;
use parking_lot::Mutex;
use tokio::sync::watch;

use crate::metrics::Metrics;
use crate::run::Run;

/// Superseded runs kept per chat for cursor reads (the oldest goes first).
const MAX_OLDER: usize = 4;

#[derive(Debug, Default)]
struct Chat {
    current: Option<Arc<Run>>,
    older: Vec<Arc<Run>>,
    /// Record requests forwarded whose upstream has not answered yet.
    pending: usize,
    /// An `on_miss = record` attach is fetching the backend's live stream.
    attach_recording: bool,
}

impl Chat {
    fn is_busy(&self) -> bool {
        self.pending > 0
            || self.attach_recording
            || self.current.as_ref().is_some_and(|r| r.is_producing())
            || self.older.iter().any(|r| r.is_producing())
    }

    /// When the chat's latest run completed (for eviction order).
    fn completed_at(&self) -> Option<Instant> {
        self.current.as_ref().and_then(|r| r.finished_at())
    }
}

/// What a sweep removed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Swept {
    /// Runs dropped because their retention passed.
    pub expired: usize,
    /// Chats dropped because more than `max_chats` had completed runs.
    pub capacity: usize,
}

/// Chats and their runs.
#[derive(Debug)]
pub struct Registry {
    chats: DashMap<String, Chat>,
    live: watch::Sender<u64>,
    retention: Duration,
    max_chats: usize,
    epoch: Instant,
    last_sweep_ms: AtomicU64,
    swept: Mutex<Swept>,
    metrics: Metrics,
}

/// A record request in flight for a chat; dropping it ends the pending registration.
#[derive(Debug)]
pub struct Pending {
    registry: Arc<Registry>,
    chat_id: String,
    attach: bool,
}

impl Drop for Pending {
    fn drop(&mut self) {
        if let Some(mut chat) = self.registry.chats.get_mut(&self.chat_id) {
            if self.attach {
                chat.attach_recording = false;
            } else {
                chat.pending = chat.pending.saturating_sub(1);
            }
        }
        self.registry.live.send_modify(|v| *v += 1);
    }
}

impl Pending {
    /// The chat this registration is for.
    pub fn chat_id(&self) -> &str {
        &self.chat_id
    }
}

impl Registry {
    /// An empty registry keeping completed runs for `retention`, and at most `max_chats` chats
    /// whose runs have all completed.
    pub fn new(retention: Duration, max_chats: usize, metrics: Metrics) -> Arc<Self> {
        Arc::new(Registry {
            chats: DashMap::new(),
            live: watch::channel(0).0,
            retention,
            max_chats,
            epoch: Instant::now(),
            last_sweep_ms: AtomicU64::new(0),
            swept: Mutex::new(Swept::default()),
            metrics,
        })
    }

    /// Registers a record request for `chat_id` before it is forwarded.
    pub fn begin(self: &Arc<Self>, chat_id: &str) -> Pending {
        self.maybe_sweep();
        self.chats.entry(chat_id.to_string()).or_default().pending += 1;
        Pending {
            registry: self.clone(),
            chat_id: chat_id.to_string(),
            attach: false,
        }
    }

    /// Single flight for `on_miss = record`: the first attach of a chat with no run gets the
    /// registration; the others get `None` and wait for the run to go live.
    pub fn begin_attach_record(self: &Arc<Self>, chat_id: &str) -> Option<Pending> {
        self.maybe_sweep();
        let mut chat = self.chats.entry(chat_id.to_string()).or_default();
        if chat.attach_recording || chat.current.is_some() {
            return None;
        }
        chat.attach_recording = true;
        Some(Pending {
            registry: self.clone(),
            chat_id: chat_id.to_string(),
            attach: true,
        })
    }

    /// Makes `run` the chat's current run. A still-active previous run is superseded (its
    /// observers are ended; its producer keeps going). Returns the superseded run.
    pub fn go_live(&self, pending: &Pending, run: Arc<Run>) -> Option<Arc<Run>> {
        let superseded = {
            let mut chat = self.chats.entry(pending.chat_id.clone()).or_default();
            let previous = chat.current.replace(run.clone());
            let mut superseded = None;
            if let Some(prev) = previous {
                if prev.supersede(run.id()) {
                    superseded = Some(prev.clone());
                }
                chat.older.push(prev);
                if chat.older.len() > MAX_OLDER {
                    // Never drop an active producer's run; drop the oldest completed one.
                    if let Some(i) = chat.older.iter().position(|r| !r.is_producing()) {
                        chat.older.remove(i);
                    }
                }
            }
            superseded
        };
        self.live.send_modify(|v| *v += 1);
        superseded
    }

    /// The chat's current run.
    pub fn current(&self, chat_id: &str) -> Option<Arc<Run>> {
        self.maybe_sweep();
        self.chats.get(chat_id).and_then(|c| c.current.clone())
    }

    /// A run of the chat by id: the current one or one it superseded.
    pub fn find(&self, chat_id: &str, run_id: &str) -> Option<Arc<Run>> {
        let chat = self.chats.get(chat_id)?;
        chat.current
            .iter()
            .chain(chat.older.iter())
            .find(|r| r.id() == run_id)
            .cloned()
    }

    /// Whether a record request for the chat is waiting for its upstream.
    pub fn is_pending(&self, chat_id: &str) -> bool {
        self.chats
            .get(chat_id)
            .is_some_and(|c| c.pending > 0 || c.attach_recording)
    }

    /// Wakes every subscriber (a producer calls this when its run ended).
    pub fn notify(&self) {
        self.live.send_modify(|v| *v += 1);
    }

    /// A receiver woken whenever a run goes live or ends, or a pending registration ends.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.live.subscribe()
    }

    /// Bytes held by the windows and histories of every run in the registry.
    pub fn recorded_bytes(&self) -> usize {
        self.chats
            .iter()
            .map(|c| {
                c.current
                    .iter()
                    .chain(c.older.iter())
                    .map(|r| r.bytes())
                    .sum::<usize>()
            })
            .sum()
    }

    /// Every run still reading its upstream.
    pub fn producing(&self) -> Vec<Arc<Run>> {
        let mut out = Vec::new();
        for chat in self.chats.iter() {
            for r in chat.current.iter().chain(chat.older.iter()) {
                if r.is_producing() {
                    out.push(r.clone());
                }
            }
        }
        out
    }

    /// Number of chats held.
    pub fn chats(&self) -> usize {
        self.chats.len()
    }

    /// Totals of everything swept so far.
    pub fn swept(&self) -> Swept {
        *self.swept.lock()
    }

    fn maybe_sweep(&self) {
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

    /// Drops completed runs older than the retention, then the chats beyond `max_chats` whose
    /// runs have all completed, oldest completion first.
    pub fn sweep(&self, now: Instant) -> Swept {
        let mut swept = Swept::default();
        let expired = |r: &Arc<Run>| {
            !r.is_producing()
                && r.finished_at()
                    .is_some_and(|t| now.saturating_duration_since(t) >= self.retention)
        };
        self.chats.retain(|_, chat| {
            let before = chat.older.len();
            chat.older.retain(|r| !expired(r));
            swept.expired += before - chat.older.len();
            if chat.current.as_ref().is_some_and(expired) {
                chat.current = None;
                swept.expired += 1;
            }
            chat.current.is_some() || !chat.older.is_empty() || chat.is_busy()
        });
        let mut idle: Vec<(Instant, String)> = self
            .chats
            .iter()
            .filter(|c| !c.is_busy())
            .filter_map(|c| c.completed_at().map(|t| (t, c.key().clone())))
            .collect();
        if idle.len() > self.max_chats {
            idle.sort();
            let excess = idle.len() - self.max_chats;
            for (_, chat_id) in idle.into_iter().take(excess) {
                if self
                    .chats
                    .remove_if(&chat_id, |_, c| !c.is_busy())
                    .is_some()
                {
                    swept.capacity += 1;
                }
            }
        }
        let evicted = &self.metrics.runs_evicted;
        evicted
            .with_label_values(&["expired"])
            .inc_by(swept.expired as u64);
        evicted
            .with_label_values(&["capacity"])
            .inc_by(swept.capacity as u64);
        let mut total = self.swept.lock();
        total.expired += swept.expired;
        total.capacity += swept.capacity;
        swept
    }
}

/// A fresh transport run id: 32 lowercase hex digits.
pub fn mint_run_id() -> String {
    format!("{:032x}", rand::random::<u128>())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn live(reg: &Arc<Registry>, chat: &str, id: &str) -> Arc<Run> {
        let p = reg.begin(chat);
        let run = Arc::new(Run::new(id, 16));
        reg.go_live(&p, run.clone());
        run
    }

    #[test]
    fn a_new_run_supersedes_the_active_one_but_not_a_completed_one() {
        let reg = Registry::new(Duration::from_secs(60), 8, Metrics::new());
        let a = live(&reg, "c", "a");
        let b = live(&reg, "c", "b");
        let end = a.end().unwrap();
        assert!(end.superseded);
        assert_eq!(end.next_run_id.as_deref(), Some("b"));
        assert!(Arc::ptr_eq(&reg.current("c").unwrap(), &b));
        assert!(Arc::ptr_eq(&reg.find("c", "a").unwrap(), &a));
        b.finish(true, None);
        let _c = live(&reg, "c", "c2");
        assert!(!b.end().unwrap().superseded);
        assert!(reg.find("other", "a").is_none());
    }

    #[test]
    fn pending_registration_wakes_waiters_when_it_ends() {
        let reg = Registry::new(Duration::from_secs(60), 8, Metrics::new());
        let rx = reg.subscribe();
        let p = reg.begin("c");
        assert!(reg.is_pending("c"));
        drop(p);
        assert!(!reg.is_pending("c"));
        assert!(rx.has_changed().unwrap());
    }

    #[test]
    fn attach_record_is_single_flight() {
        let reg = Registry::new(Duration::from_secs(60), 8, Metrics::new());
        let first = reg.begin_attach_record("c");
        assert!(first.is_some());
        assert!(reg.begin_attach_record("c").is_none());
        drop(first);
        assert!(reg.begin_attach_record("c").is_some());
    }

    #[test]
    fn completed_runs_expire_after_retention_and_active_ones_never() {
        let reg = Registry::new(Duration::from_millis(0), 8, Metrics::new());
        let done = live(&reg, "done", "a");
        done.finish(true, None);
        let _active = live(&reg, "active", "b");
        let s = reg.sweep(Instant::now() + Duration::from_secs(1));
        assert_eq!(s.expired, 1);
        assert!(reg.current("done").is_none());
        assert!(reg.current("active").is_some());
        assert_eq!(reg.chats(), 1);
    }

    #[test]
    fn beyond_max_chats_the_oldest_completion_goes_first() {
        let reg = Registry::new(Duration::from_secs(3600), 2, Metrics::new());
        for c in ["c1", "c2", "c3"] {
            // Completion instants are increasing; ties fall back to chat id order.
            live(&reg, c, c).finish(true, None);
        }
        let _active = live(&reg, "c4", "c4");
        let s = reg.sweep(Instant::now());
        assert_eq!(s.capacity, 1);
        assert!(reg.current("c1").is_none());
        assert!(reg.current("c2").is_some() && reg.current("c3").is_some());
        assert!(reg.current("c4").is_some());
    }

    #[test]
    fn run_ids_are_fresh_hex() {
        let a = mint_run_id();
        assert_eq!(a.len(), 32);
        assert!(a.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_ne!(a, mint_run_id());
    }
}
