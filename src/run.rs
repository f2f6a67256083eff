//! One run's log: seq assignment, the replay window of encoded frames, the compacted history,
//! terminal state, and the wake-up observers wait on.
//!
//! The producer is the writer; observers only read by cursor. Every event is encoded once as a
//! `STREAM_EVENT` frame and shared by all observers. A snapshot is captured under the lock without
//! copying any text ([`Run::capture`]) and serialized outside it; [`Run::snapshot`] caches the
//! serialized frame per seq, so a reconnect storm serializes it once.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;
use tokio::sync::watch;

use crate::compact::{Capture, Compactor};
use crate::event::Event;
use crate::frames::{self, End, EventEncoder};

/// Default number of events kept in the replay window.
pub const DEFAULT_WINDOW: usize = 4096;

/// Why a cursor cannot be served from the window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CursorMiss {
    /// The cursor is past the run's head.
    Ahead,
    /// The events after the cursor have left the window.
    Expired,
}

/// What a read after a cursor returns.
#[derive(Debug, Default)]
pub struct Read {
    /// `STREAM_EVENT` frames after the cursor, in seq order.
    pub frames: Vec<Bytes>,
    /// The seq of the last frame returned (the cursor when none).
    pub last: u64,
    /// The run's terminal state, present once `last` reached the run's end.
    pub end: Option<End>,
    /// Arrival time of the last frame returned (for delivery-delay metrics).
    pub last_arrival: Option<Instant>,
    /// The run's head seq at the time of the read.
    pub head: u64,
}

/// A snapshot captured under the lock: shares the history, copies no text.
#[derive(Debug, Clone)]
pub struct SnapshotCapture {
    /// The last seq the snapshot covers.
    pub seq: u64,
    /// The compacted history up to `seq`.
    pub history: Capture,
    /// The terminal state, if the run had ended at capture time.
    pub end: Option<End>,
}

/// Result of appending a batch of events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Appended {
    /// Events recorded.
    pub events: usize,
    /// Change in bytes held by the run.
    pub bytes: isize,
}

#[derive(Debug)]
struct State {
    head: u64,
    window: VecDeque<(Bytes, Instant)>,
    window_bytes: usize,
    history: Compactor,
    end: Option<End>,
    producing: bool,
    finished_at: Option<Instant>,
}

impl State {
    fn held(&self) -> usize {
        self.window_bytes + self.history.allocated()
    }
}

/// One recorded run.
#[derive(Debug)]
pub struct Run {
    id: String,
    encoder: EventEncoder,
    window_cap: usize,
    state: Mutex<State>,
    wake: watch::Sender<u64>,
    cache: tokio::sync::Mutex<Option<(u64, Bytes)>>,
    observers: AtomicUsize,
    peak_observers: AtomicUsize,
    /// Milliseconds after `started` when the last observer left (0: never observed yet).
    unobserved_since_ms: std::sync::atomic::AtomicU64,
    started: Instant,
    stop: tokio::sync::Notify,
    stop_reason: Mutex<Option<&'static str>>,
}

impl Run {
    /// A new, live run keeping the last `window` events as frames.
    pub fn new(id: impl Into<String>, window: usize) -> Self {
        let id = id.into();
        Run {
            encoder: EventEncoder::new(&id),
            id,
            window_cap: window.max(1),
            state: Mutex::new(State {
                head: 0,
                window: VecDeque::new(),
                window_bytes: 0,
                history: Compactor::new(),
                end: None,
                producing: true,
                finished_at: None,
            }),
            wake: watch::channel(0).0,
            cache: tokio::sync::Mutex::new(None),
            observers: AtomicUsize::new(0),
            peak_observers: AtomicUsize::new(0),
            unobserved_since_ms: std::sync::atomic::AtomicU64::new(0),
            started: Instant::now(),
            stop: tokio::sync::Notify::new(),
            stop_reason: Mutex::new(None),
        }
    }

    /// When the run was created.
    pub fn started(&self) -> Instant {
        self.started
    }

    /// When the producer finished, if it has.
    pub fn finished_at(&self) -> Option<Instant> {
        self.state.lock().finished_at
    }

    /// Asks the producer to stop reading the upstream (`reason` becomes the end's reason).
    /// The first request wins.
    pub fn request_stop(&self, reason: &'static str) {
        self.stop_reason.lock().get_or_insert(reason);
        self.stop.notify_one();
    }

    /// Resolves once a stop has been requested; returns its reason.
    pub async fn stop_requested(&self) -> &'static str {
        loop {
            if let Some(r) = *self.stop_reason.lock() {
                return r;
            }
            self.stop.notified().await;
        }
    }

    /// The transport run id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The last seq recorded.
    pub fn head(&self) -> u64 {
        self.state.lock().head
    }

    /// The terminal state observers see, once set.
    pub fn end(&self) -> Option<End> {
        self.state.lock().end.clone()
    }

    /// Whether the producer is still reading the upstream.
    pub fn is_producing(&self) -> bool {
        self.state.lock().producing
    }

    /// Bytes held by the window and the history.
    pub fn bytes(&self) -> usize {
        self.state.lock().held()
    }

    /// A receiver woken after every batch of events and at the end.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.wake.subscribe()
    }

    /// Counts an observer in; the guard counts it out when dropped.
    pub fn observe(self: &std::sync::Arc<Self>) -> ObserverGuard {
        let now = self.observers.fetch_add(1, Ordering::Relaxed) + 1;
        self.peak_observers.fetch_max(now, Ordering::Relaxed);
        ObserverGuard(self.clone())
    }

    /// The most observers attached at once.
    pub fn peak_observers(&self) -> usize {
        self.peak_observers.load(Ordering::Relaxed)
    }

    /// How long the run has had no observer, or `None` while one is attached.
    pub fn unobserved_for(&self) -> Option<std::time::Duration> {
        if self.observers() > 0 {
            return None;
        }
        let since = self.unobserved_since_ms.load(Ordering::Relaxed);
        let since = self.started + std::time::Duration::from_millis(since);
        Some(since.elapsed())
    }

    /// Number of observers attached now.
    pub fn observers(&self) -> usize {
        self.observers.load(Ordering::Relaxed)
    }

    /// Records a batch of events (one upstream read) and wakes observers once. Events arriving
    /// after the observers' end (a superseded run) are not recorded.
    pub fn append(&self, events: &[Event]) -> Appended {
        if events.is_empty() {
            return Appended::default();
        }
        let now = Instant::now();
        let mut st = self.state.lock();
        if st.end.is_some() {
            return Appended::default();
        }
        let before = st.held() as isize;
        let total: usize = events
            .iter()
            .map(|e| self.encoder.max_len(e.json.len()))
            .sum();
        let mut buf = BytesMut::with_capacity(total);
        for e in events {
            st.head += 1;
            let head = st.head;
            self.encoder.write(&mut buf, head, &e.json);
            let frame = buf.split().freeze();
            st.window_bytes += frame.len();
            st.window.push_back((frame, now));
            if st.window.len() > self.window_cap {
                if let Some((old, _)) = st.window.pop_front() {
                    st.window_bytes -= old.len();
                }
            }
            st.history.push(e);
        }
        let head = st.head;
        let appended = Appended {
            events: events.len(),
            bytes: st.held() as isize - before,
        };
        drop(st);
        self.wake.send_replace(head);
        appended
    }

    /// Ends the run for its observers (if not already ended), marks the producer done, and
    /// wakes observers.
    pub fn finish(&self, persisted: bool, reason: Option<&'static str>) -> End {
        let end = self.settle(persisted, reason);
        self.done();
        end
    }

    /// The first half of [`Self::finish`]: decides the end without publishing it. The producer
    /// then accounts for the run and calls [`Self::done`], so whoever sees the run ended (a
    /// client reading `STREAM_END`, a drain, a test) also sees it counted.
    pub fn settle(&self, persisted: bool, reason: Option<&'static str>) -> End {
        let mut st = self.state.lock();
        let head = st.head;
        st.end
            .get_or_insert(End {
                seq: head,
                persisted,
                superseded: false,
                next_run_id: None,
                reason,
            })
            .clone()
    }

    /// The second half of [`Self::finish`]: marks the producer done and wakes observers.
    pub fn done(&self) {
        let mut st = self.state.lock();
        st.producing = false;
        st.finished_at.get_or_insert_with(Instant::now);
        drop(st);
        self.wake.send_modify(|_| {});
    }

    /// Ends the run for its observers because `next` replaced it; the producer keeps going.
    /// Returns false when the run had already ended.
    pub fn supersede(&self, next: &str) -> bool {
        let mut st = self.state.lock();
        if st.end.is_some() {
            return false;
        }
        st.end = Some(End {
            seq: st.head,
            persisted: false,
            superseded: true,
            next_run_id: Some(next.to_string()),
            reason: Some("superseded"),
        });
        drop(st);
        self.wake.send_modify(|_| {});
        true
    }

    /// The frames after `after`, up to `max` of them, or why the window cannot serve them.
    pub fn read_after(&self, after: u64, max: usize) -> Result<Read, CursorMiss> {
        let st = self.state.lock();
        if after > st.head {
            return Err(CursorMiss::Ahead);
        }
        let first = st.head + 1 - st.window.len() as u64; // seq of window[0]
        if after + 1 < first {
            return Err(CursorMiss::Expired);
        }
        let skip = (after + 1 - first) as usize;
        let mut read = Read {
            last: after,
            head: st.head,
            ..Read::default()
        };
        for (frame, at) in st.window.iter().skip(skip).take(max) {
            read.frames.push(frame.clone());
            read.last_arrival = Some(*at);
        }
        read.last = after + read.frames.len() as u64;
        if let Some(end) = &st.end {
            if read.last >= end.seq {
                read.end = Some(end.clone());
                read.frames
                    .truncate((end.seq.saturating_sub(after)) as usize);
                read.last = read.last.min(end.seq);
            }
        }
        Ok(read)
    }

    /// Captures a snapshot under the lock, copying no text.
    pub fn capture(&self) -> SnapshotCapture {
        let mut st = self.state.lock();
        let seq = st.head;
        SnapshotCapture {
            seq,
            history: st.history.capture(),
            end: st.end.clone(),
        }
    }

    /// The serialized `STREAM_SNAPSHOT` frame of the run now. Serialized outside the run's
    /// lock, and at most once per seq: concurrent callers wait for one serialization.
    pub async fn snapshot(&self) -> Snapshot {
        let mut cache = self.cache.lock().await;
        let (head, end) = {
            let st = self.state.lock();
            (st.head, st.end.clone())
        };
        if let Some((seq, frame)) = cache.as_ref() {
            if *seq == head {
                return Snapshot {
                    seq: head,
                    frame: frame.clone(),
                    end,
                    serialized: false,
                };
            }
        }
        let cap = self.capture();
        let frame = frames::snapshot(&self.id, cap.seq, &cap.history);
        *cache = Some((cap.seq, frame.clone()));
        Snapshot {
            seq: cap.seq,
            frame,
            end: cap.end,
            serialized: true,
        }
    }
}

/// A serialized snapshot of a run.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// The last seq it covers.
    pub seq: u64,
    /// The `STREAM_SNAPSHOT` frame.
    pub frame: Bytes,
    /// The terminal state at capture time.
    pub end: Option<End>,
    /// Whether this call serialized it (false: served from the per-seq cache).
    pub serialized: bool,
}

/// Counts one observer of a run while alive.
#[derive(Debug)]
pub struct ObserverGuard(std::sync::Arc<Run>);

impl Drop for ObserverGuard {
    fn drop(&mut self) {
        let run = &self.0;
        if run.observers.fetch_sub(1, Ordering::Relaxed) == 1 {
            let ms = run.started.elapsed().as_millis() as u64;
            run.unobserved_since_ms.store(ms, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
#[path = "run_tests.rs"]
mod tests;
