//! The producer side: the writer task of a run produced here; the producer never waits for
//! Redis. Batches go from the [`Recorder`](super::recorder::Recorder) through the run's append
//! lane ([`super::pipe::lane`]) without this task; it makes the run live, writes checkpoints, the end,
//! aliases and lease ticks, and handles what the lane reports.
//!
//! A full queue or a failed call degrades the journal for the run: it drops what it cannot
//! write and, once Redis answers again, re-bases (checkpoint at the local head, head moved
//! there), so followers re-seed instead of seeing a gap. Checkpoints are written when half a
//! window of events or max(64 KiB, half the last checkpoint) of bytes came since the last one.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};

use tokio::sync::mpsc;

mod end;
mod keep;
mod rebase;
use tokio::time::Instant;

use super::codec::{self, Checkpoint};
use super::pipe::lane::{Target, Trouble};
use super::pipe::Inv;
use super::recorder::{Core, Msg, WriterInbox};
use super::{scripts, timed, Replica, RunKeys, WriteResult};
use crate::journal::Journal;
use crate::state::auth::Owner;
use crate::state::run::Run;
use crate::vocab::end::{End, EndReason};
use crate::vocab::Scope;

/// What the writer needs besides the run: where it lives in Redis and its metadata.
pub struct Meta {
    /// The chat's scope.
    pub scope: Scope,
    /// Who recorded it.
    pub owner: Owner,
    /// The upstream response header, for verbatim readers elsewhere.
    pub header: String,
    /// When the turn's request arrived (ms since the Unix epoch): a chat's runs are ordered by
    /// it across replicas.
    pub requested_ms: u64,
    /// The path of the route that records it (the meta's `extra`, for the admin API).
    pub route: String,
}

/// One writer's state.
struct Writer {
    cluster: Arc<Replica>,
    run: Arc<Run>,
    meta: Meta,
    keys: RunKeys,
    core: Arc<Core>,
    /// Whether the run is written in Redis under this lease (go-live or re-base done).
    live: bool,
    /// Redis has this run's end (or refused it to us): nothing more is written but `done`.
    ended: bool,
    producer_done: bool,
    /// An end Redis has not taken yet (it was down), retried on every tick until the deadline.
    pending_end: Option<(End, Instant)>,
    /// An end call went unanswered (timed out, connection lost): Redis may have taken it, so
    /// only Redis's answer to a retry says which end the run has.
    end_unknown: bool,
    /// Reading the end another actor wrote failed: read it again on the next tick.
    refetch: bool,
    /// Since when the run's end is settled, while the writer keeps it in Redis ([`keep`]).
    kept: Option<Instant>,
    ids: Vec<String>,
}

/// Starts the writer of `run` (whose journal is the [`Recorder`](super::recorder::Recorder) `inbox` came with).
pub fn spawn(cluster: Arc<Replica>, run: Arc<Run>, inbox: WriterInbox, meta: Meta) {
    cluster.producing(&run);
    let keys = RunKeys::new(&meta.scope, run.id());
    let id_key = super::id_key(&meta.owner, run.id());
    inbox.core.lane.target(Target {
        m: keys.m.clone(),
        s: keys.s.clone(),
        bell: keys.bell.clone(),
        publish: cluster.publish_command(),
        lease: cluster.lease.clone(),
        window: cluster.window as u64,
        pipe: cluster.pipe.sender(),
    });
    let w = Writer {
        cluster,
        run,
        meta,
        keys,
        core: inbox.core,
        live: false,
        ended: false,
        producer_done: false,
        pending_end: None,
        end_unknown: false,
        refetch: false,
        kept: None,
        ids: vec![id_key],
    };
    tokio::spawn(w.run(inbox.rx));
}

impl Writer {
    fn ttl_ms(&self) -> u64 {
        (self.cluster.cfg.lease + self.cluster.retention).as_millis() as u64
    }

    async fn run(mut self, mut rx: mpsc::Receiver<Msg>) {
        let mut tick = tokio::time::interval(self.cluster.cfg.lease / 3);
        let lane = self.core.lane.clone();
        loop {
            let mut msgs = Vec::new();
            let mut ticked = false;
            tokio::select! {
                m = rx.recv() => match m {
                    Some(m) => msgs.push(m),
                    None => break,
                },
                _ = tick.tick() => ticked = true,
                _ = lane.wake.notified() => {}
            }
            while let Ok(m) = rx.try_recv() {
                msgs.push(m);
            }
            let (trouble, stop) = lane.take_news();
            self.stop_flag(stop.as_ref());
            if (trouble == Some(Trouble::Stored) || self.refetch) && !self.ended {
                self.fetch_end().await;
            }
            if ticked && msgs.is_empty() && !self.ended {
                self.lease_tick().await;
            }
            if ticked && self.ended {
                self.check_kept().await;
            }
            if !self.ended && self.core.journaled.load(Ordering::Relaxed) && self.cluster.lapsed() {
                self.lapsed().await;
            }
            if let Some((end, deadline)) = self.pending_end.take() {
                self.retry_end(end, deadline, true).await;
            } else if !self.ended && (!self.live || lane.lost.load(Ordering::Relaxed)) {
                self.rebase().await;
            }
            self.process(msgs).await;
            if self.live && !self.ended {
                self.maybe_checkpoint().await;
            }
            if self.producer_done && self.ended && self.kept() {
                break;
            }
        }
        self.core.lane.close();
        self.cluster.produced(self.run.id());
        self.cluster
            .unregister_run(&self.meta.scope, self.run.id())
            .await;
    }

    /// Calls a script through the replica's write pipeline with a timeout, counting it and the
    /// journal's health.
    async fn call(&self, inv: Inv) -> redis::RedisResult<Vec<Bytes>> {
        let t = tokio::time::Instant::now();
        let r: redis::RedisResult<Vec<Vec<u8>>> = timed(self.cluster.pipe.call(inv))
            .await
            .and_then(|v| redis::from_redis_value(v).map_err(redis::RedisError::from));
        let jm = &self.cluster.jm;
        jm.write_seconds.observe(t.elapsed().as_secs_f64());
        let result = match &r {
            Ok(v) if v.first().map(Vec::as_slice) == Some(b"fenced") => WriteResult::Fenced,
            Ok(v) if v.first().map(Vec::as_slice) == Some(b"ended") => WriteResult::Ended,
            Ok(_) => WriteResult::Ok,
            Err(e) if super::refuses_writes(e) => WriteResult::Refused,
            Err(_) => WriteResult::Error,
        };
        jm.writes.inc(result);
        self.cluster.health(&r);
        r.map(|v| v.into_iter().map(Bytes::from).collect())
    }

    /// Handles `msgs` in order; aliases that come together are indexed together (an
    /// idempotency key's two names land one after the other, with no other call between).
    async fn process(&mut self, msgs: Vec<Msg>) {
        let mut named = false;
        for m in msgs {
            if !matches!(m, Msg::Alias(_)) && std::mem::take(&mut named) {
                self.index_names().await;
            }
            match m {
                Msg::End(end) => self.write_end(end).await,
                Msg::Done => {
                    self.producer_done = true;
                    self.done().await;
                }
                Msg::Alias(a) => {
                    self.ids.push(super::id_key(&self.meta.owner, &a));
                    named = true;
                }
            }
        }
        if named {
            self.index_names().await;
        }
    }

    /// Indexes the run's ids and aliases while it is live here.
    async fn index_names(&self) {
        if self.live && !self.ended {
            self.index_ids().await;
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

    /// Indexes the run id and aliases for every replica, and the run in the admin API's
    /// indexes ([`super::index`]).
    async fn index_ids(&self) {
        let mut c = self.cluster.conn();
        let value = format!("{}\n{}", self.meta.scope, self.run.id());
        let ttl = self.ttl_ms();
        for key in &self.ids {
            let _: redis::RedisResult<()> = timed(
                redis::cmd("SET")
                    .arg(key)
                    .arg(&value)
                    .arg("PX")
                    .arg(ttl)
                    .query_async(&mut c),
            )
            .await;
        }
        self.cluster
            .index_run(
                &self.meta.scope,
                &self.meta.owner,
                self.run.id(),
                &self.ids,
                ttl,
            )
            .await;
    }

    /// The lease tick of a live run: TTLs refreshed, a stop flag or a foreign end noticed, and
    /// the stream's `entries-added` compared with the appends Redis confirmed before the call:
    /// fewer means Redis lost entries (a failover, a restore from older data) and later appends
    /// may sit above a hole, so the run is re-based (docs/protocol.md, "The journal in Redis").
    async fn lease_tick(&mut self) {
        if !self.live {
            return;
        }
        let confirmed = self.core.lane.added();
        let k = &self.keys;
        let r = self
            .call(
                Inv::new(&scripts::TOUCH, &[&k.chat, &k.m, &k.s, &k.k])
                    .arg(&self.cluster.lease)
                    .arg(self.ttl_ms())
                    .arg(self.run.id().as_str()),
            )
            .await;
        match r {
            Err(_) => self.core.lane.lost.store(true, Ordering::Relaxed),
            Ok(v) => match v.first().map(|b| &b[..]) {
                Some(b"ok") => {
                    self.stop_flag(v.get(1));
                    let added = v
                        .get(2)
                        .and_then(|n| std::str::from_utf8(n).ok()?.parse().ok());
                    if added.is_some_and(|n: i64| n >= 0 && (n as u64) < confirmed) {
                        log::warn!(
                            "run {}: the shared journal lost entries Redis had confirmed; \
                             re-based",
                            self.run.id()
                        );
                        self.core.lane.lost.store(true, Ordering::Relaxed);
                    }
                    self.index_ids().await;
                }
                Some(b"missing") => self.core.lane.lost.store(true, Ordering::Relaxed),
                _ => self.settle_stored(&v),
            },
        }
    }

    /// Writes a checkpoint at the local head when one is due, once Redis has the batches up to
    /// it (the lane's call in flight answered).
    async fn maybe_checkpoint(&mut self) {
        let lane = &self.core.lane;
        if !lane.checkpoint_due() {
            return;
        }
        let (cap, raw_end) = {
            let _order = self.core.order.lock();
            (self.core.inner.capture(), self.core.inner.raw_end())
        };
        if !lane.wait_for(cap.seq).await {
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
        let k = &self.keys;
        let r = self
            .call(
                Inv::new(&scripts::CHECKPOINT, &[&k.m, &k.k, &k.s])
                    .arg(&self.cluster.lease)
                    .arg(cap.seq)
                    .arg(&value[..])
                    .arg(self.ttl_ms()),
            )
            .await;
        if matches!(&r, Ok(v) if v.first().map(|b| &b[..]) == Some(b"ok")) {
            lane.checkpointed(cap.seq, value.len());
        }
    }
}
