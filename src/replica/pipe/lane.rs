//! A run's append lane: the recorder encodes each batch straight into it (no hop through the
//! run's writer task) and the replica's write pipeline ([`super`]) sends what it holds as
//! one `APPEND` call with explicit stream ids. One call in flight per run; batches recorded
//! meanwhile are coalesced into the next. The pipeline settles the answer itself; the writer
//! task is woken only for what it handles: opening the lane (go-live, re-base), trouble (a
//! failed or refused call), a stop flag, a checkpoint due.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;
use redis::{Cmd, RedisResult, Value};
use tokio::sync::{mpsc, Notify};
use tokio::time::Instant;

use super::Work;
use crate::journal::raw::Frame;
use crate::record::format::Event;
use crate::replica::{codec, scripts, Health, JournalMetrics, WriteResult};

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

    /// The `APPEND` call of what the lane holds (`None` when it holds nothing to send: the
    /// call in flight is over).
    pub(crate) fn take(&self) -> Option<(Cmd, Sent)> {
        let t = self.target.get()?;
        let mut st = self.st.lock();
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
        let mut cmd = Cmd::with_capacity(12, call_size(t, st.data.len()));
        cmd.arg("EVALSHA")
            .arg(scripts::APPEND.get_hash())
            .arg(2)
            .arg(&t.m)
            .arg(&t.s)
            .arg(&t.lease)
            .arg(first)
            .arg(last)
            .arg(&st.data[..])
            .arg(minid)
            .arg(&t.bell)
            .arg(t.publish);
        let len = st.data.len();
        st.data.clear();
        Some((
            cmd,
            Sent {
                first,
                last,
                len,
                at: st.queued.take().unwrap_or_else(Instant::now),
            },
        ))
    }

    /// Settles the answer to the call that sent `sent`; sends the lane again when more came
    /// meanwhile.
    pub(crate) fn answered(
        self: &Arc<Self>,
        sent: Sent,
        r: RedisResult<Value>,
        jm: &JournalMetrics,
        health: &Health,
    ) {
        jm.write_seconds.observe(sent.at.elapsed().as_secs_f64());
        let (result, flag) = outcome(&r);
        jm.writes.inc(result);
        health.record(&r);
        let mut st = self.st.lock();
        let mut wake = false;
        let again = match result {
            WriteResult::Ok if flag.is_some() => {
                st.head = st.head.max(sent.last);
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
    /// `ckpt` whose value was `ckpt_len` bytes) and sends what it holds.
    pub(crate) fn open(self: &Arc<Self>, head: u64, ckpt: u64, ckpt_len: usize) {
        let mut st = self.st.lock();
        st.open = true;
        st.head = head;
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

/// Bytes of arguments an `APPEND` call of `data` bytes has at most: the call's buffer gets them
/// all up front, so the batch is copied into it once (a short estimate had the buffer grow, and
/// copy the batch again, on every call).
fn call_size(t: &Target, data: usize) -> usize {
    // EVALSHA, the hash, the key count, three numbers (first, last, minid) of 20 digits at most.
    "EVALSHA".len()
        + scripts::APPEND.get_hash().len()
        + 1
        + 3 * 20
        + t.m.len()
        + t.s.len()
        + t.lease.len()
        + data
        + t.bell.len()
        + t.publish.len()
}

/// How an `APPEND` answer counts, and its stop flag when it was taken (`ok`/`dup`; the integer 1
/// is `ok` without a flag).
fn outcome(r: &RedisResult<Value>) -> (WriteResult, Option<Bytes>) {
    let v = match r {
        Ok(Value::Int(1)) => return (WriteResult::Ok, Some(Bytes::new())),
        Ok(Value::Array(v)) => v,
        Err(e) if crate::replica::refuses_writes(e) => return (WriteResult::Refused, None),
        _ => return (WriteResult::Error, None),
    };
    let text = |i: usize| match v.get(i) {
        Some(Value::BulkString(b)) => Some(&b[..]),
        Some(Value::SimpleString(s)) => Some(s.as_bytes()),
        _ => None,
    };
    match text(0) {
        Some(b"ok") | Some(b"dup") => (
            WriteResult::Ok,
            Some(Bytes::copy_from_slice(text(1).unwrap_or_default())),
        ),
        Some(b"ended") => (WriteResult::Ended, None),
        Some(b"fenced") => (WriteResult::Fenced, None),
        // `gap`, `missing`: Redis took nothing; the writer re-bases.
        _ => (WriteResult::Ok, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_append_call_is_built_without_its_buffer_growing() {
        let lane = Arc::new(Lane::default());
        let key = |k: &str| format!("tj:{{s:chat-0123456789abcdef:run-0123456789abcdef}}:{k}");
        lane.target(Target {
            m: key("m"),
            s: key("s"),
            bell: key("bell"),
            publish: "PUBLISH",
            lease: "0123456789abcdef".into(),
            window: 1000,
            pipe: mpsc::unbounded_channel().0,
        });
        lane.open(0, 0, 0);
        let ev = Event::verbatim(
            Bytes::from_static(b"{\"type\":\"text-delta\",\"delta\":\"abcd\"}"),
            0..0,
            0..0,
        );
        lane.push(1, std::slice::from_ref(&ev), 0, &[]);
        let Some((cmd, _)) = lane.take() else {
            panic!("the lane holds a batch to send");
        };
        let used: usize = cmd
            .args_iter()
            .map(|a| match a {
                redis::Arg::Simple(b) => b.len(),
                _ => 0,
            })
            .sum();
        let Some(t) = lane.target.get() else {
            panic!("the lane has its target");
        };
        let mut batch = BytesMut::new();
        codec::encode_batch(&mut batch, std::slice::from_ref(&ev), 0, &[]);
        let room = call_size(t, 4 + batch.len());
        assert!(
            used <= room,
            "{used} bytes of arguments in a buffer of {room}: it grows on every call"
        );
    }

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn an_append_answer_counts_its_result_and_carries_the_stop_flag() {
        let ok = |r: Value| outcome(&Ok(r));
        assert_eq!(
            ok(Value::Int(1)),
            (WriteResult::Ok, Some(Bytes::new())),
            "the integer answer: written, no stop flag"
        );
        assert_eq!(
            ok(Value::Array(vec![bulk("ok"), bulk("cancelled")])),
            (WriteResult::Ok, Some(Bytes::from_static(b"cancelled")))
        );
        assert_eq!(
            ok(Value::Array(vec![bulk("dup"), bulk("")])),
            (WriteResult::Ok, Some(Bytes::new()))
        );
        assert_eq!(ok(Value::Array(vec![bulk("gap")])), (WriteResult::Ok, None));
        assert_eq!(
            ok(Value::Array(vec![bulk("fenced")])).0,
            WriteResult::Fenced
        );
        assert_eq!(ok(Value::Array(vec![bulk("ended")])).0, WriteResult::Ended);
        assert_eq!(ok(Value::Int(0)).0, WriteResult::Error);
    }
}
