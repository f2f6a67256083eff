//! The producer side: the writer task of a run produced here, fed by its
//! [`Recorder`](super::recorder::Recorder); the producer never waits for Redis.
//!
//! The writer holds one script call in flight; batches queued meanwhile are coalesced into the
//! next. A full queue or a failed call degrades the journal for the run: it drops what it cannot
//! write and, once Redis answers again, re-bases (checkpoint at the local head, head moved
//! there), so followers re-seed instead of seeing a gap. Checkpoints are written when half a
//! window of events or max(64 KiB, half the last checkpoint) of bytes came since the last one.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};

use tokio::sync::mpsc;

mod end;
mod rebase;
use tokio::time::Instant;

use super::codec::{self, Checkpoint};
use super::pipe::Inv;
use super::recorder::{Core, Msg, WriterInbox};
use super::{scripts, Cluster, RunKeys, WriteResult, CALL_TIMEOUT};
use crate::auth::Owner;
use crate::journal::{End, EndReason, Journal};

/// Bytes of batches coalesced into one append at most.
const MAX_WRITE: usize = 1 << 20;
use crate::run::Run;

/// What the writer needs besides the run: where it lives in Redis and its metadata.
pub struct Meta {
    /// The chat's scope.
    pub scope: String,
    /// Who recorded it.
    pub owner: Owner,
    /// The upstream response header, for verbatim readers elsewhere.
    pub header: String,
}

/// One writer's state.
struct Writer {
    cluster: Arc<Cluster>,
    run: Arc<Run>,
    meta: Meta,
    keys: RunKeys,
    core: Arc<Core>,
    /// Whether the run is written in Redis under this lease (go-live or re-base done).
    live: bool,
    /// The last seq written to Redis.
    head: u64,
    ckpt: u64,
    since_events: u64,
    since_bytes: usize,
    last_ckpt: usize,
    /// Redis has this run's end (or refused it to us): nothing more is written but `done`.
    ended: bool,
    producer_done: bool,
    /// An end Redis has not taken yet (it was down), retried on every tick until the deadline.
    pending_end: Option<(End, Instant)>,
    ids: Vec<String>,
}

/// Starts the writer of `run` (whose journal is the [`Recorder`] `inbox` came with).
pub fn spawn(cluster: Arc<Cluster>, run: Arc<Run>, inbox: WriterInbox, meta: Meta) {
    cluster.producing(&run);
    let keys = RunKeys::new(&meta.scope, run.id());
    let id_key = super::id_key(&meta.owner, run.id());
    let w = Writer {
        cluster,
        run,
        meta,
        keys,
        core: inbox.core,
        live: false,
        head: 0,
        ckpt: 0,
        since_events: 0,
        since_bytes: 0,
        last_ckpt: 0,
        ended: false,
        producer_done: false,
        pending_end: None,
        ids: vec![id_key],
    };
    tokio::spawn(w.run(inbox.rx));
}

fn timed_out() -> redis::RedisError {
    (redis::ErrorKind::Io, "timed out").into()
}

impl Writer {
    fn ttl_ms(&self) -> u64 {
        (self.cluster.cfg.lease + self.cluster.retention).as_millis() as u64
    }

    async fn run(mut self, mut rx: mpsc::Receiver<Msg>) {
        let mut tick = tokio::time::interval(self.cluster.cfg.lease / 3);
        loop {
            let mut msgs = Vec::new();
            tokio::select! {
                m = rx.recv() => match m {
                    Some(m) => msgs.push(m),
                    None => break,
                },
                _ = tick.tick() => {}
            }
            while let Ok(m) = rx.try_recv() {
                msgs.push(m);
            }
            if msgs.is_empty() && !self.ended {
                self.lease_tick().await;
            }
            if let Some((end, deadline)) = self.pending_end.take() {
                self.retry_end(end, deadline, true).await;
            } else if !self.ended && (!self.live || self.core.lost.load(Ordering::Relaxed)) {
                self.rebase().await;
            }
            self.process(msgs).await;
            if self.live && !self.ended {
                self.maybe_checkpoint(&mut rx).await;
            }
            if self.producer_done && self.ended {
                break;
            }
        }
        self.cluster.produced(self.run.id());
        self.cluster
            .unregister_run(&self.meta.scope, self.run.id())
            .await;
    }

    /// Calls a script through the replica's write pipeline with a timeout, counting it and the
    /// journal's health.
    async fn call(&self, inv: &Inv) -> redis::RedisResult<Vec<Bytes>> {
        let t = tokio::time::Instant::now();
        let r: redis::RedisResult<Vec<Vec<u8>>> =
            tokio::time::timeout(CALL_TIMEOUT, self.cluster.pipe.call(inv))
                .await
                .unwrap_or_else(|_| Err(timed_out()))
                .and_then(|v| redis::from_redis_value(v).map_err(redis::RedisError::from));
        let jm = &self.cluster.jm;
        jm.write_seconds.observe(t.elapsed().as_secs_f64());
        let result = match &r {
            Ok(v) if v.first().map(Vec::as_slice) == Some(b"fenced") => WriteResult::Fenced,
            Ok(v) if v.first().map(Vec::as_slice) == Some(b"ended") => WriteResult::Ended,
            Ok(_) => WriteResult::Ok,
            Err(_) => WriteResult::Error,
        };
        jm.writes.inc(result);
        self.cluster.health(r.is_ok());
        r.map(|v| v.into_iter().map(Bytes::from).collect())
    }

    async fn process(&mut self, msgs: Vec<Msg>) {
        let mut data = BytesMut::new();
        let (mut first, mut last, mut n) = (0u64, 0u64, 0u64);
        for m in msgs {
            match m {
                Msg::Batch {
                    first: f,
                    events,
                    raw_first,
                    raw,
                } => {
                    let l = f + events.len() as u64 - 1;
                    if self.ended || !self.live || l <= self.head {
                        continue;
                    }
                    if n == 0 {
                        first = f;
                    }
                    let mut b = BytesMut::new();
                    codec::encode_batch(&mut b, &events, raw_first, &raw);
                    // Entries are per coalesced write: one entry holds several batches.
                    data.extend_from_slice(&(b.len() as u32).to_le_bytes());
                    data.extend_from_slice(&b);
                    (last, n) = (l, n + 1);
                    if data.len() >= MAX_WRITE {
                        self.append(first, last, data.split().freeze()).await;
                        n = 0;
                    }
                }
                Msg::End(end) => {
                    if n > 0 {
                        self.append(first, last, data.split().freeze()).await;
                        n = 0;
                    }
                    self.write_end(end).await;
                }
                Msg::Done => {
                    self.producer_done = true;
                    self.done().await;
                }
                Msg::Alias(a) => {
                    self.ids.push(super::id_key(&self.meta.owner, &a));
                    if self.live {
                        self.index_ids().await;
                    }
                }
            }
        }
        if n > 0 {
            self.append(first, last, data.freeze()).await;
        }
    }

    async fn append(&mut self, first: u64, last: u64, data: Bytes) {
        if self.ended || !self.live {
            return;
        }
        if first != self.head + 1 {
            self.core.lost.store(true, Ordering::Relaxed);
            return;
        }
        let win = self.cluster.window as u64;
        let minid = (last + 1).saturating_sub(win).min(self.ckpt + 1).max(1);
        let len = data.len();
        let r = self
            .call(
                Inv::new(&scripts::APPEND)
                    .key(&self.keys.m)
                    .key(&self.keys.s)
                    .arg(&self.cluster.lease)
                    .arg(first)
                    .arg(last)
                    .arg(&data[..])
                    .arg(minid)
                    .arg(&self.keys.bell)
                    .arg(self.cluster.publish_command()),
            )
            .await;
        let Ok(v) = r else {
            self.core.lost.store(true, Ordering::Relaxed);
            return;
        };
        match v.first().map(|b| &b[..]) {
            Some(b"ok") | Some(b"dup") => {
                self.head = last;
                self.since_events += last + 1 - first;
                self.since_bytes += len;
                self.stop_flag(v.get(1));
            }
            Some(b"ended") | Some(b"fenced") => self.fetch_end().await,
            _ => self.core.lost.store(true, Ordering::Relaxed),
        }
    }

    fn stop_flag(&self, flag: Option<&Bytes>) {
        let Some(f) = flag.filter(|f| !f.is_empty()) else {
            return;
        };
        let reason = EndReason::ALL
            .iter()
            .copied()
            .find(|r| r.as_str().as_bytes() == &f[..])
            .unwrap_or(EndReason::Cancelled);
        if self.run.is_producing() {
            self.run.request_stop(reason);
        }
    }

    /// Indexes the run id and aliases for every replica.
    async fn index_ids(&self) {
        let mut c = self.cluster.conn();
        let value = format!("{}\n{}", self.meta.scope, self.run.id());
        let ttl = self.ttl_ms();
        for key in &self.ids {
            let _: redis::RedisResult<()> = tokio::time::timeout(
                CALL_TIMEOUT,
                redis::cmd("SET")
                    .arg(key)
                    .arg(&value)
                    .arg("PX")
                    .arg(ttl)
                    .query_async(&mut c),
            )
            .await
            .unwrap_or_else(|_| Err(timed_out()));
        }
    }

    /// The lease tick of a live run: TTLs refreshed, a stop flag or a foreign end noticed.
    async fn lease_tick(&mut self) {
        if !self.live {
            return;
        }
        let r = self
            .call(
                Inv::new(&scripts::TOUCH)
                    .key(&self.keys.chat)
                    .key(&self.keys.m)
                    .key(&self.keys.s)
                    .key(&self.keys.k)
                    .arg(&self.cluster.lease)
                    .arg(self.ttl_ms())
                    .arg(self.run.id()),
            )
            .await;
        match r {
            Err(_) => self.core.lost.store(true, Ordering::Relaxed),
            Ok(v) => match v.first().map(|b| &b[..]) {
                Some(b"ok") => {
                    self.stop_flag(v.get(1));
                    self.index_ids().await;
                }
                Some(b"missing") => self.core.lost.store(true, Ordering::Relaxed),
                _ => self.settle_stored(&v),
            },
        }
    }

    async fn maybe_checkpoint(&mut self, rx: &mut mpsc::Receiver<Msg>) {
        let half = (self.cluster.window as u64 / 2).max(1);
        let bytes = (64 << 10).max(self.last_ckpt / 2);
        if self.since_events < half && self.since_bytes < bytes {
            return;
        }
        let (cap, raw_end, queued) = {
            let _order = self.core.order.lock();
            let mut queued = Vec::new();
            while let Ok(m) = rx.try_recv() {
                queued.push(m);
            }
            (self.core.inner.capture(), self.core.inner.raw_end(), queued)
        };
        self.process(queued).await;
        if self.ended || self.head < cap.seq || cap.seq <= self.ckpt {
            return;
        }
        let mut b = BytesMut::with_capacity(cap.history.len());
        cap.history.write_to(&mut b);
        let value = codec::encode_checkpoint(&Checkpoint {
            seq: cap.seq,
            events: cap.history.events,
            raw_end,
            named: cap.named,
            body: b.freeze(),
        });
        let r = self
            .call(
                Inv::new(&scripts::CHECKPOINT)
                    .key(&self.keys.m)
                    .key(&self.keys.k)
                    .arg(&self.cluster.lease)
                    .arg(cap.seq)
                    .arg(&value[..])
                    .arg(self.ttl_ms()),
            )
            .await;
        if matches!(&r, Ok(v) if v.first().map(|b| &b[..]) == Some(b"ok")) {
            self.ckpt = cap.seq;
            (self.since_events, self.since_bytes) = (0, 0);
            self.last_ckpt = value.len();
        }
    }
}
