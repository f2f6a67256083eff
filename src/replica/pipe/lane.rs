//! A run's append lane: the recorder encodes each batch straight into it (no hop through the
//! run's writer task) and the replica's write pipeline ([`super`]) sends what it holds as one
//! append without a script: `XADD <s> NOMKSTREAM MINID ~ <minid> <last>-0 f <first> d <data>`
//! pipelined with `PUBLISH <bell> "<first> <last> <data>"`. One append in flight per run;
//! batches recorded meanwhile are coalesced into the next. The pipeline settles the answer
//! itself; the writer task is woken only for what it handles: opening the lane (go-live,
//! re-base), trouble (a failed or refused append), a stop flag, a checkpoint due.
//!
//! Fencing is by the stream id (docs/protocol.md, "The journal in Redis"): Redis itself refuses
//! an `XADD` whose id is not above the stream's top, so an append after the run's end (the
//! entry at the highest id) or below a re-base's marker is refused, and `NOMKSTREAM` refuses one
//! to a stream Redis lost. A refused append (the rare path) sends [`scripts::REFUSED`], which
//! says why: a duplicate (taken as written), an end or a newer lease (the writer reads the
//! stored end), a lost run or lost entries (the writer re-bases). Its `PUBLISH` ran anyway: the
//! followers' rules make that doorbell harmless ([`crate::replica::bell`]). The lane counts the
//! entries its appends added to the stream (from the count the go-live or re-base answered): a
//! lease tick or the end that finds fewer in Redis (`entries-added`) has found a hole Redis left
//! under later appends (a failover, a restore from older data), and the writer re-bases.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;
use redis::{Cmd, RedisResult, Value};
use tokio::sync::{mpsc, Notify};
use tokio::time::Instant;

mod cmds;

use super::Work;
use crate::journal::raw::Frame;
use crate::record::format::Event;
use crate::replica::{codec, scripts, Health, JournalMetrics, WriteResult};
use cmds::{append_cmds, appended, outcome, Appended};

/// Bytes a lane holds unsent at most (a call's time of a fast stream, or a go-live's); past
/// that the run degrades (it re-bases).
const CAP: usize = 4 << 20;

/// Where a lane's calls go: the run's keys and the producer's lease.
pub(crate) struct Target {
    /// The run's meta hash.
    pub(crate) m: String,
    /// The run's stream.
    pub(crate) s: String,
    /// The run's doorbell channel.
    pub(crate) bell: String,
    /// The publish command of this topology (`PUBLISH`, or `SPUBLISH` in a Redis Cluster).
    pub(crate) publish: &'static str,
    /// The producer's lease token.
    pub(crate) lease: String,
    /// The replay window (events) the stream keeps.
    pub(crate) window: u64,
    /// The pipeline's queue.
    pub(crate) pipe: mpsc::UnboundedSender<Work>,
}

/// What the writer must handle after an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Trouble {
    /// The run ended in Redis or a newer lease owns it: the writer reads the stored end.
    Stored,
}

#[derive(Default)]
struct St {
    /// The pipeline may send: the run is written in Redis under this lease from `head`.
    open: bool,
    in_flight: bool,
    /// The last seq Redis has.
    head: u64,
    /// The stream's `entries-added` once every confirmed append landed: the go-live's or
    /// re-base's count plus one per append Redis took.
    added: u64,
    /// A refused append (`first`, `last`) whose reason [`scripts::REFUSED`] is asked next.
    why: Option<(u64, u64)>,
    /// The last checkpoint's seq (the stream keeps everything after it).
    ckpt: u64,
    /// Encoded entries (`u32 len` + batch each) covering seqs `first..=last`, not sent yet.
    data: BytesMut,
    first: u64,
    last: u64,
    since_events: u64,
    since_bytes: usize,
    /// Bytes after which a checkpoint is due.
    ckpt_bytes: usize,
    trouble: Option<Trouble>,
    stop: Option<Bytes>,
    /// The writer waits for an answer ([`Lane::wait_for`]).
    waiting: bool,
    /// When the lane was queued on the pipeline (`tether_journal_write_seconds` counts from it).
    queued: Option<Instant>,
}

/// The append lane of one run (shared by its recorder, the pipeline and its writer).
#[derive(Default)]
pub(crate) struct Lane {
    st: Mutex<St>,
    target: OnceLock<Target>,
    /// A batch could not be written (or kept): the writer must re-base.
    pub(crate) lost: AtomicBool,
    /// Wakes the writer task: trouble, a stop flag, a checkpoint due.
    pub(crate) wake: Notify,
    /// Wakes a writer waiting in [`Lane::wait_for`].
    answered: Notify,
}

/// One call on the wire: what it covered.
pub(crate) struct Sent {
    first: u64,
    last: u64,
    len: usize,
    at: Instant,
    /// The rare path's [`scripts::REFUSED`] call, not an append.
    why: bool,
}

impl Lane {
    /// Sets where the lane's calls go (once, when the writer starts).
    pub(crate) fn target(&self, t: Target) {
        let _ = self.target.set(t);
    }

    /// Adds a batch (seqs from `first`) and hands the lane to the pipeline when it is open and
    /// has no call in flight. Called under the recorder's order lock, so batches come in order.
    /// Nothing is kept while the run waits for a re-base (Redis down, say): the re-base writes
    /// the local head, so a degraded run holds no copies.
    pub(crate) fn push(
        self: &Arc<Self>,
        first: u64,
        events: &[Event],
        raw_first: u64,
        raw: &[Frame],
    ) {
        if self.lost.load(Ordering::Relaxed) {
            return;
        }
        let mut st = self.st.lock();
        if st.data.is_empty() {
            st.first = first;
        }
        codec::encode_entry_batch(&mut st.data, events, raw_first, raw);
        st.last = first + events.len() as u64 - 1;
        if st.data.len() > CAP {
            st.data = BytesMut::new();
            self.lost.store(true, Ordering::Relaxed);
            drop(st);
            self.wake.notify_one();
            return;
        }
        if st.open && !st.in_flight {
            st.in_flight = true;
            st.queued = Some(Instant::now());
            drop(st);
            self.kick();
        }
    }

    fn kick(self: &Arc<Self>) {
        let sent = self
            .target
            .get()
            .is_some_and(|t| t.pipe.send(Work::Lane(self.clone())).is_ok());
        if !sent {
            self.st.lock().in_flight = false;
        }
    }

    /// The commands of what the lane holds: an append (`XADD` + `PUBLISH`), or the rare path's
    /// [`scripts::REFUSED`] after a refused one; `None` when it holds nothing to send (the call
    /// in flight is over).
    pub(crate) fn take(&self) -> Option<(Vec<Cmd>, Sent)> {
        let t = self.target.get()?;
        let mut st = self.st.lock();
        if let Some((first, last)) = st.why.take() {
            let mut cmd = Cmd::with_capacity(8, 256);
            cmd.arg("EVALSHA")
                .arg(scripts::REFUSED.get_hash())
                .arg(2)
                .arg(&t.m)
                .arg(&t.s)
                .arg(&t.lease)
                .arg(first)
                .arg(last);
            let at = Instant::now();
            let why = true;
            return Some((
                vec![cmd],
                Sent {
                    first,
                    last,
                    len: 0,
                    at,
                    why,
                },
            ));
        }
        if !st.open || st.data.is_empty() || st.first != st.head + 1 {
            st.in_flight = false;
            if st.open && !st.data.is_empty() {
                // Batches before a re-base's head cannot follow on: re-base again.
                st.data.clear();
                self.lost.store(true, Ordering::Relaxed);
                drop(st);
                self.wake.notify_one();
            }
            return None;
        }
        let (first, last) = (st.first, st.last);
        let minid = (last + 1).saturating_sub(t.window).min(st.ckpt + 1).max(1);
        let cmds = append_cmds(t, first, last, minid, &st.data);
        let len = st.data.len();
        st.data.clear();
        let at = st.queued.take().unwrap_or_else(Instant::now);
        Some((
            cmds,
            Sent {
                first,
                last,
                len,
                at,
                why: false,
            },
        ))
    }

    /// Settles the answers to the commands that sent `sent`; sends the lane again when more
    /// came meanwhile, or the rare path's call after a refused append.
    pub(crate) fn answered(
        self: &Arc<Self>,
        sent: Sent,
        r: Vec<RedisResult<Value>>,
        jm: &JournalMetrics,
        health: &Health,
    ) {
        let first = r
            .into_iter()
            .next()
            .unwrap_or_else(|| Err((redis::ErrorKind::Io, "journal pipeline: no answer").into()));
        let (result, flag, added) = match sent.why {
            true => {
                health.record(&first);
                let (result, flag) = outcome(&first);
                (result, flag, false)
            }
            false => match appended(&first) {
                Appended::Taken => (WriteResult::Ok, Some(Bytes::new()), true),
                Appended::Refused => {
                    // Redis answered: the rare path asks why, the lane stays in flight.
                    health.record(&Ok::<(), redis::RedisError>(()));
                    self.st.lock().why = Some((sent.first, sent.last));
                    self.kick();
                    return;
                }
                Appended::Failed => {
                    health.record(&first);
                    (outcome(&first).0, None, false)
                }
            },
        };
        jm.write_seconds.observe(sent.at.elapsed().as_secs_f64());
        jm.writes.inc(result);
        self.settle(sent, result, flag, added);
    }

    /// Applies the result of `sent` to the lane's state (see [`Self::answered`]).
    fn settle(self: &Arc<Self>, sent: Sent, result: WriteResult, flag: Option<Bytes>, added: bool) {
        let mut st = self.st.lock();
        let mut wake = false;
        let again = match result {
            WriteResult::Ok if flag.is_some() => {
                st.head = st.head.max(sent.last);
                st.added += u64::from(added);
                st.since_events += sent.last + 1 - sent.first;
                st.since_bytes += sent.len;
                let half = (self.target.get().map_or(2, |t| t.window) / 2).max(1);
                if st.since_events >= half || st.since_bytes >= st.ckpt_bytes {
                    wake = true;
                }
                if let Some(f) = flag.filter(|f| !f.is_empty()) {
                    st.stop = Some(f);
                    wake = true;
                }
                st.open && !st.data.is_empty()
            }
            WriteResult::Ended | WriteResult::Fenced => {
                st.open = false;
                st.trouble = Some(Trouble::Stored);
                wake = true;
                false
            }
            _ => {
                st.open = false;
                self.lost.store(true, Ordering::Relaxed);
                wake = true;
                false
            }
        };
        st.in_flight = again;
        if again {
            st.queued = Some(Instant::now());
        }
        let waiting = std::mem::take(&mut st.waiting);
        drop(st);
        if again {
            self.kick();
        }
        if waiting {
            self.answered.notify_waiters();
        }
        if wake {
            self.wake.notify_one();
        }
    }

    /// Stops the pipeline from sending (a re-base follows).
    pub(crate) fn close(&self) {
        self.st.lock().open = false;
    }

    /// Drops what the lane holds: the local journal is captured at `head` (under the order
    /// lock), and a re-base writes the run there.
    pub(crate) fn reset(&self, head: u64) {
        let mut st = self.st.lock();
        st.data.clear();
        st.last = head;
    }

    /// Opens the lane at `head` (the run is written in Redis there, with its checkpoint at
    /// `ckpt` whose value was `ckpt_len` bytes, and the stream's `entries-added` was `added`)
    /// and sends what it holds.
    pub(crate) fn open(self: &Arc<Self>, head: u64, ckpt: u64, ckpt_len: usize, added: u64) {
        let mut st = self.st.lock();
        st.open = true;
        st.head = head;
        st.added = added;
        st.why = None;
        st.trouble = None;
        st.ckpt = ckpt;
        (st.since_events, st.since_bytes) = (0, 0);
        st.ckpt_bytes = (64 << 10).max(ckpt_len / 2);
        let send = !st.in_flight && !st.data.is_empty();
        st.in_flight |= send;
        if send {
            st.queued = Some(Instant::now());
        }
        drop(st);
        if send {
            self.kick();
        }
    }

    /// A checkpoint at `seq` (`len` bytes) was written.
    pub(crate) fn checkpointed(&self, seq: u64, len: usize) {
        let mut st = self.st.lock();
        st.ckpt = seq;
        (st.since_events, st.since_bytes) = (0, 0);
        st.ckpt_bytes = (64 << 10).max(len / 2);
    }

    /// The stream's `entries-added` as the appends Redis confirmed left it.
    pub(crate) fn added(&self) -> u64 {
        self.st.lock().added
    }

    /// Whether a checkpoint is due.
    pub(crate) fn checkpoint_due(&self) -> bool {
        let st = self.st.lock();
        let half = (self.target.get().map_or(2, |t| t.window) / 2).max(1);
        st.open && (st.since_events >= half || st.since_bytes >= st.ckpt_bytes)
    }

    /// Takes the trouble and the stop flag the answers left for the writer.
    pub(crate) fn take_news(&self) -> (Option<Trouble>, Option<Bytes>) {
        let mut st = self.st.lock();
        (st.trouble.take(), st.stop.take())
    }

    /// Waits (for a call's time at most) until Redis has the lane up to `seq` or nothing more
    /// will be sent; true when Redis has it.
    pub(crate) async fn wait_for(&self, seq: u64) -> bool {
        self.wait_until(|st| {
            (st.head >= seq)
                .then_some(true)
                .or((!st.in_flight).then_some(false))
        })
        .await
        .unwrap_or(false)
    }

    /// Waits (for a call's time at most) until no call is in flight.
    pub(crate) async fn idle(&self) {
        self.wait_until(|st| (!st.in_flight).then_some(())).await;
    }

    /// Waits, for a call's time at most, until `done` gives an answer, re-checking after each
    /// answer from Redis; `None` when the time ran out.
    async fn wait_until<T>(&self, done: impl Fn(&St) -> Option<T>) -> Option<T> {
        let deadline = Instant::now() + crate::replica::CALL_TIMEOUT * 2;
        loop {
            let answered = self.answered.notified();
            tokio::pin!(answered);
            answered.as_mut().enable();
            {
                let mut st = self.st.lock();
                if let Some(t) = done(&st) {
                    return Some(t);
                }
                st.waiting = true;
            }
            if tokio::time::timeout_at(deadline, answered).await.is_err() {
                return None;
            }
        }
    }
}
