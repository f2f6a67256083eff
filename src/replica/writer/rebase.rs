//! The writer's re-base: the run (re-)written at the local head, at go-live, after a degraded
//! spell or when Redis lost it; and settling the local run with an end another actor wrote.

use std::sync::atomic::Ordering;

use bytes::{Bytes, BytesMut};
use log::{info, warn};
use redis::AsyncCommands;

use super::super::codec::{self, Checkpoint};
use super::super::marks::mark_journaled;
use super::super::pipe::Inv;
use super::super::{scripts, timed, Conn, RunKeys};
use super::Writer;
use crate::journal::{Journal, SnapshotCapture};
use crate::vocab::end::{End, EndReason};
use crate::vocab::RunId;

impl Writer {
    /// Writes the run (again) at the local head: at go-live, after a degraded spell, or when
    /// Redis lost it. Batches already queued up to that head are skipped afterwards.
    pub(super) async fn rebase(&mut self) {
        let lane = self.core.lane.clone();
        // No call of the lane's may land after the re-base's.
        lane.close();
        lane.idle().await;
        // Listed for the reaper (with this replica's liveness written first) before the run is.
        let listed = self
            .cluster
            .register_run(&self.meta.scope, self.run.id())
            .await;
        if listed.is_err() {
            self.cluster.health(&listed);
            lane.lost.store(true, Ordering::Relaxed);
            // Nothing of the run was sent: an end before its go-live is shown now.
            self.core.unheard();
            return;
        }
        let mut conn = self.cluster.conn();
        let Some(mut prev) = self.chat_run(&mut conn).await else {
            self.core.unheard();
            return;
        };
        let (cap, raw_end, shown) = self.capture();
        let end = shown.as_ref().map(codec::encode_end).unwrap_or_default();
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
        for _ in 0..3 {
            let inv = self.upsert(&prev, cap.seq, &body, &end);
            let r = self.call(inv).await;
            let Ok(v) = r else {
                lane.lost.store(true, Ordering::Relaxed);
                return;
            };
            match v.first().map(|b| &b[..]) {
                Some(b"ok" | b"older") => {
                    return self
                        .went_live(&v, cap.seq, body.len(), shown.is_some())
                        .await;
                }
                Some(b"retry") => match self.chat_run(&mut conn).await {
                    Some(p) => prev = p,
                    None => return,
                },
                Some(b"superseded") => {
                    let next = v.get(1).map(|b| String::from_utf8_lossy(b).into_owned());
                    self.settle(End::superseded(&RunId::from(next.unwrap_or_default())));
                    return;
                }
                _ => {
                    self.settle_stored(&v);
                    return;
                }
            }
        }
    }

    /// Redis has the run (again) at `seq`, with a checkpoint of `ckpt_len` bytes; `ended`
    /// when the end this replica's readers got went with it.
    async fn went_live(&mut self, v: &[Bytes], seq: u64, ckpt_len: usize, ended: bool) {
        let added = v
            .get(2)
            .and_then(|n| std::str::from_utf8(n).ok()?.parse::<i64>().ok())
            .map_or(0, |n| n.max(0) as u64);
        if v.first().map(|b| &b[..]) == Some(b"older") {
            // This run's request came before the chat's current one's (its go-live reached
            // Redis late): it stays readable by its id but does not take the chat, and, still
            // producing, it ends superseded as it would have there.
            let next = RunId::from(
                v.get(1)
                    .map(|b| String::from_utf8_lossy(b).into_owned())
                    .unwrap_or_default(),
            );
            info!(
                "run {}: the chat went on to the later run {next} meanwhile",
                self.run.id()
            );
            self.run.supersede(&next);
        }
        if self.live {
            info!(
                "run {}: re-based in the shared journal at {seq}",
                self.run.id()
            );
        }
        self.live = true;
        mark_journaled(&self.run);
        self.core.lane.open(seq, seq, ckpt_len, added);
        self.index_ids().await;
        if ended {
            // Written with the run: the end its readers got is the run's end.
            self.ended = true;
            self.keep();
        }
    }

    /// The go-live (or re-base) call: the run at `seq` with checkpoint `body` (none when
    /// empty) and `end` (none when empty), superseding `prev`.
    fn upsert(&self, prev: &RunId, seq: u64, body: &[u8], end: &str) -> Inv {
        let mode = if self.live { "rebase" } else { "live" };
        let superseded = codec::encode_end(&End::superseded(self.run.id()));
        let (c, k) = (&self.cluster, &self.keys);
        let pk = RunKeys::new(&self.meta.scope, prev);
        Inv::new(&scripts::UPSERT, &[&k.chat, &k.m, &k.s, &k.k, &pk.m, &pk.s])
            .arg(mode)
            .arg(self.run.id().as_str())
            .arg(prev.as_str())
            .arg(&c.lease)
            .arg(&c.cfg.replica_id)
            .arg(c.window)
            .arg(self.meta.scope.as_str())
            .arg(self.ttl_ms())
            .arg(seq)
            .arg(body)
            .arg(superseded)
            .arg(&pk.bell)
            .arg(&self.meta.header)
            .arg(&self.meta.route)
            .arg(self.meta.requested_ms)
            .arg(c.publish_command())
            .arg(end)
            .arg(c.retention.as_millis() as u64)
            .arg(&k.bell)
    }

    /// The chat's current run in Redis (the previous run a go-live supersedes); `None` when
    /// Redis did not answer (the run is marked for another re-base).
    async fn chat_run(&self, conn: &mut Conn) -> Option<RunId> {
        match timed(conn.hget::<_, _, Option<String>>(&self.keys.chat, "run")).await {
            Ok(p) => Some(RunId::from(p.unwrap_or_default())),
            Err(e) => {
                self.cluster.health(&Err::<(), _>(e));
                self.core.lane.lost.store(true, Ordering::Relaxed);
                None
            }
        }
    }

    /// What a re-base writes: the capture at the local head (none at a first go-live with
    /// nothing lost: every batch is still in the lane, so the stream holds the whole window and
    /// a cursor replays on any replica), the raw record's end, and the end this replica's
    /// readers already got, if any. From here the run may be in Redis (an unanswered go-live
    /// may have been taken): its end waits for Redis's verdict.
    fn capture(&self) -> (SnapshotCapture, u64, Option<End>) {
        let lane = &self.core.lane;
        let _order = self.core.order.lock();
        self.core.journaled.store(true, Ordering::Release);
        // Shown before the run was in Redis (Redis could not be reached): it goes into Redis
        // with the run, in one step, so no other end can come between them.
        let shown = self.core.inner.ended();
        let lost = lane.lost.swap(false, Ordering::Relaxed);
        if !self.live && !lost && shown.is_none() {
            let cap = SnapshotCapture {
                seq: 0,
                history: Default::default(),
                end: None,
                raw_end: 0,
                named: false,
            };
            return (cap, 0, None);
        }
        let cap = self.core.inner.capture();
        lane.reset(cap.seq);
        let raw_end = self.core.inner.raw_end();
        (cap, raw_end, shown)
    }

    /// Another actor ended the run in Redis (a reaper, a newer run): the local run ends the same.
    pub(super) fn settle_stored(&mut self, v: &[Bytes]) {
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

    /// Settles the local run with `end`, the one Redis has: this replica's readers see it (a
    /// held end of the producer's own is dropped), unless they already saw one.
    pub(super) fn settle(&mut self, end: End) {
        self.ended = true;
        let verdict = |e: &End| (e.persisted, e.reason.map_or("-", EndReason::as_str));
        if let Some(told) = self.run.end().filter(|told| verdict(told) != verdict(&end)) {
            // Only when Redis lost the end its readers got and another was written before this
            // replica could write it again (docs/protocol.md, "One end for every reader").
            warn!(
                "run {}: Redis lost the end its readers here got ({:?}) and holds another ({:?})",
                self.run.id(),
                verdict(&told),
                verdict(&end)
            );
        }
        self.keep();
        if self.run.end().is_none() {
            info!(
                "run {}: ended through the shared journal ({})",
                self.run.id(),
                end.reason.map_or("-", EndReason::as_str)
            );
            self.core.deliver(end);
        }
    }
}
