//! The writer's re-base: the run (re-)written at the local head, at go-live, after a degraded
//! spell or when Redis lost it; and settling the local run with an end another actor wrote.

use std::sync::atomic::Ordering;

use bytes::{Bytes, BytesMut};
use log::info;
use redis::AsyncCommands;

use super::super::codec::{self, Checkpoint};
use super::super::marks::mark_journaled;
use super::super::pipe::Inv;
use super::super::{scripts, timed, RunKeys};
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
        let (cap, raw_end) = {
            let _order = self.core.order.lock();
            // A first go-live with nothing lost starts at seq 0: every batch is still in the
            // lane, so the stream holds the whole window (a cursor replays on any replica).
            let lost = lane.lost.swap(false, Ordering::Relaxed);
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
                _ => {
                    let cap = self.core.inner.capture();
                    lane.reset(cap.seq);
                    (cap, self.core.inner.raw_end())
                }
            }
        };
        // Listed for the reaper (with this replica's liveness written first) before the run is.
        let listed = self
            .cluster
            .register_run(&self.meta.scope, self.run.id())
            .await;
        if listed.is_err() {
            self.cluster.health(&listed);
            lane.lost.store(true, Ordering::Relaxed);
            return;
        }
        let mut conn = self.cluster.conn();
        for _ in 0..3 {
            let prev: Option<String> = match timed(conn.hget(&self.keys.chat, "run")).await {
                Ok(p) => p,
                Err(e) => {
                    self.cluster.health(&Err::<(), _>(e));
                    lane.lost.store(true, Ordering::Relaxed);
                    return;
                }
            };
            let prev = RunId::from(prev.unwrap_or_default());
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
            // From here the run may be in Redis (an unanswered go-live may have been taken):
            // its end waits for Redis's verdict.
            self.core.journaled.store(true, Ordering::Release);
            let superseded = codec::encode_end(&End::superseded(self.run.id()));
            let c = &self.cluster;
            let k = &self.keys;
            let r = self
                .call(
                    Inv::new(&scripts::UPSERT, &[&k.chat, &k.m, &k.s, &k.k, &pk.m, &pk.s])
                        .arg(mode)
                        .arg(self.run.id().as_str())
                        .arg(prev.as_str())
                        .arg(&c.lease)
                        .arg(&c.cfg.replica_id)
                        .arg(c.window)
                        .arg(self.meta.scope.as_str())
                        .arg(self.ttl_ms())
                        .arg(cap.seq)
                        .arg(&body[..])
                        .arg(superseded)
                        .arg(&pk.bell)
                        .arg(&self.meta.header)
                        .arg(&self.meta.route)
                        .arg(self.meta.requested_ms)
                        .arg(c.publish_command()),
                )
                .await;
            let Ok(v) = r else {
                lane.lost.store(true, Ordering::Relaxed);
                return;
            };
            match v.first().map(|b| &b[..]) {
                Some(answer @ (b"ok" | b"older")) => {
                    if answer == b"older" {
                        // This run's request came before the chat's current one's (its
                        // go-live reached Redis late): it stays readable by its id but does
                        // not take the chat, and, still producing, it ends superseded as it
                        // would have there.
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
                            "run {}: re-based in the shared journal at {}",
                            self.run.id(),
                            cap.seq
                        );
                    }
                    self.live = true;
                    mark_journaled(&self.run);
                    lane.open(cap.seq, cap.seq, body.len());
                    self.index_ids().await;
                    return;
                }
                Some(b"retry") => continue,
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
