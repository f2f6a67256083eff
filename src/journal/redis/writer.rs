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
use log::{info, warn};
use redis::AsyncCommands;
use tokio::sync::mpsc;

use super::codec::{self, Checkpoint};
use super::recorder::{Core, Msg, WriterInbox};
use super::{scripts, Cluster, RunKeys, CALL_TIMEOUT};
use crate::auth::Owner;
use crate::journal::{End, EndReason, Journal, SnapshotCapture};

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
            if !self.ended && (!self.live || self.core.lost.load(Ordering::Relaxed)) {
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
    }

    /// Calls a script with a timeout, counting it and the journal's health.
    async fn call(&self, inv: &mut redis::ScriptInvocation<'_>) -> redis::RedisResult<Vec<Bytes>> {
        let mut c = self.cluster.conn();
        let t = tokio::time::Instant::now();
        let r: redis::RedisResult<Vec<Vec<u8>>> =
            tokio::time::timeout(CALL_TIMEOUT, inv.invoke_async(&mut c))
                .await
                .unwrap_or_else(|_| Err(timed_out()));
        let jm = &self.cluster.jm;
        jm.write_seconds.observe(t.elapsed().as_secs_f64());
        let result = match &r {
            Ok(v) if v.first().map(Vec::as_slice) == Some(b"fenced") => "fenced",
            Ok(v) if v.first().map(Vec::as_slice) == Some(b"ended") => "ended",
            Ok(_) => "ok",
            Err(_) => "error",
        };
        jm.writes.with_label_values(&[result]).inc();
        self.cluster.health(r.is_ok());
        r.map(|v| v.into_iter().map(Bytes::from).collect())
    }

    /// Writes the run (again) at the local head: at go-live, after a degraded spell, or when
    /// Redis lost it. Batches already queued up to that head are skipped afterwards.
    async fn rebase(&mut self) {
        let (cap, raw_end) = {
            let _order = self.core.order.lock();
            // A first go-live with nothing lost starts at seq 0: every batch is still queued,
            // so the stream holds the whole window (a cursor replays on any replica).
            let lost = self.core.lost.swap(false, Ordering::Relaxed);
            match (self.live, lost) {
                (false, false) => (
                    SnapshotCapture {
                        seq: 0,
                        history: Default::default(),
                        end: None,
                        raw_end: 0,
                        named: false,
                    },
                    0,
                ),
                _ => (self.core.inner.capture(), self.core.inner.raw_end()),
            }
        };
        let mut conn = self.cluster.conn();
        for _ in 0..3 {
            let prev: Option<String> =
                match tokio::time::timeout(CALL_TIMEOUT, conn.hget(&self.keys.chat, "run")).await {
                    Ok(Ok(p)) => p,
                    _ => {
                        self.cluster.health(false);
                        self.core.lost.store(true, Ordering::Relaxed);
                        return;
                    }
                };
            let prev = prev.unwrap_or_default();
            let pk = RunKeys::new(&self.meta.scope, &prev);
            let body = match cap.seq {
                0 => Bytes::new(),
                seq => {
                    let mut b = BytesMut::with_capacity(cap.history.len());
                    cap.history.write_to(&mut b);
                    codec::encode_checkpoint(&Checkpoint {
                        seq,
                        events: cap.history.events,
                        raw_end,
                        named: cap.named,
                        body: b.freeze(),
                    })
                }
            };
            let mode = if self.live { "rebase" } else { "live" };
            let superseded = codec::encode_end(&End::superseded(self.run.id()));
            let c = &self.cluster;
            let r = self
                .call(
                    scripts::UPSERT
                        .key(&self.keys.chat)
                        .key(&self.keys.m)
                        .key(&self.keys.s)
                        .key(&self.keys.k)
                        .key(&pk.m)
                        .key(&pk.s)
                        .arg(mode)
                        .arg(self.run.id())
                        .arg(&prev)
                        .arg(&c.lease)
                        .arg(&c.cfg.replica_id)
                        .arg(c.window)
                        .arg(&self.meta.scope)
                        .arg(self.ttl_ms())
                        .arg(cap.seq)
                        .arg(&body[..])
                        .arg(superseded)
                        .arg(&pk.bell)
                        .arg(&self.meta.header)
                        .arg(""),
                )
                .await;
            let Ok(v) = r else {
                self.core.lost.store(true, Ordering::Relaxed);
                return;
            };
            match v.first().map(|b| &b[..]) {
                Some(b"ok") => {
                    if self.live {
                        info!(
                            "run {}: re-based in the shared journal at {}",
                            self.run.id(),
                            cap.seq
                        );
                    }
                    self.live = true;
                    self.run.set_journaled();
                    (self.head, self.ckpt) = (cap.seq, cap.seq);
                    (self.since_events, self.since_bytes) = (0, 0);
                    self.last_ckpt = body.len();
                    self.index_ids().await;
                    return;
                }
                Some(b"retry") => continue,
                Some(b"superseded") => {
                    let next = v.get(1).map(|b| String::from_utf8_lossy(b).into_owned());
                    self.settle(End::superseded(&next.unwrap_or_default()));
                    return;
                }
                _ => {
                    self.settle_stored(&v);
                    return;
                }
            }
        }
    }

    /// Another actor ended the run in Redis (a reaper, a newer run): the local run ends the same.
    fn settle_stored(&mut self, v: &[Bytes]) {
        let seq = v
            .get(2)
            .and_then(|s| std::str::from_utf8(s).ok()?.parse().ok())
            .unwrap_or(0);
        let end = v
            .get(1)
            .and_then(|j| codec::decode_end(j, seq))
            .unwrap_or_else(|| End::finished(false, Some(EndReason::OwnerLost)));
        self.settle(end);
    }

    fn settle(&mut self, end: End) {
        self.ended = true;
        if self.run.end().is_none() {
            info!(
                "run {}: ended through the shared journal ({})",
                self.run.id(),
                end.reason.map_or("-", EndReason::as_str)
            );
            self.core.inner.end(end);
        }
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
                scripts::APPEND
                    .key(&self.keys.m)
                    .key(&self.keys.s)
                    .arg(&self.cluster.lease)
                    .arg(first)
                    .arg(last)
                    .arg(&data[..])
                    .arg(minid)
                    .arg(&self.keys.bell),
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

    /// Reads the end another actor wrote and settles the local run with it.
    async fn fetch_end(&mut self) {
        let mut c = self.cluster.conn();
        let r: redis::RedisResult<(Option<String>, Option<u64>)> = tokio::time::timeout(
            CALL_TIMEOUT,
            redis::cmd("HMGET")
                .arg(&self.keys.m)
                .arg("end")
                .arg("end_seq")
                .query_async(&mut c),
        )
        .await
        .unwrap_or_else(|_| Err(timed_out()));
        let end = match r {
            Ok((Some(j), Some(seq))) => codec::decode_end(j.as_bytes(), seq),
            _ => None,
        };
        self.settle(end.unwrap_or_else(|| End::finished(false, Some(EndReason::OwnerLost))));
    }

    async fn write_end(&mut self, end: End) {
        if self.ended {
            return;
        }
        if !self.live || self.head < end.seq || self.core.lost.load(Ordering::Relaxed) {
            self.rebase().await;
            if !self.live || self.ended {
                return;
            }
        }
        let r = self
            .call(
                scripts::END
                    .key(&self.keys.chat)
                    .key(&self.keys.m)
                    .key(&self.keys.s)
                    .key(&self.keys.k)
                    .arg(&self.cluster.lease)
                    .arg(codec::encode_end(&end))
                    .arg(self.cluster.retention.as_millis() as u64)
                    .arg(&self.keys.bell)
                    .arg(self.run.id())
                    .arg(if self.run.is_producing() { "1" } else { "0" }),
            )
            .await;
        if r.is_ok() {
            self.ended = true;
        }
    }

    /// The producer finished: stop-waiters on other replicas see `producing = 0`.
    async fn done(&mut self) {
        let mut c = self.cluster.conn();
        let _: redis::RedisResult<()> = tokio::time::timeout(
            CALL_TIMEOUT,
            redis::Script::new(
                "if redis.call('EXISTS', KEYS[1]) == 1 then redis.call('HSET', KEYS[1], 'producing', 0) end",
            )
            .key(&self.keys.m)
            .invoke_async(&mut c),
        )
        .await
        .unwrap_or_else(|_| Err(timed_out()));
        if !self.ended {
            // The end could not be written (Redis down): give up on this run's journal.
            warn!("run {}: its end was not journaled", self.run.id());
            self.ended = true;
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
                scripts::TOUCH
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
                scripts::CHECKPOINT
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
