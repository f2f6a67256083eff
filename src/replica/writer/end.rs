//! The writer's end of a run: written once, kept and retried while Redis is down (until the
//! lease plus the retention, when every key of the run has expired anyway), and
//! `producing = 0` for cross-replica stop-waiters.

use std::sync::atomic::Ordering;

use bytes::Bytes;
use log::{info, warn};
use tokio::time::Instant;

use super::super::pipe::Inv;
use super::super::{codec, scripts, timed};
use super::Writer;
use crate::vocab::end::{End, EndReason};

impl Writer {
    /// Reads the end another actor wrote and settles the local run with it.
    pub(super) async fn fetch_end(&mut self) {
        let mut c = self.cluster.conn();
        let r: redis::RedisResult<(Option<String>, Option<u64>)> = timed(
            redis::cmd("HMGET")
                .arg(&self.keys.m)
                .arg("end")
                .arg("end_seq")
                .query_async(&mut c),
        )
        .await;
        let end = match r {
            Ok((Some(j), Some(seq))) => codec::decode_end(j.as_bytes(), seq),
            Ok(_) => None,
            // Not known yet: guessing could show this replica's readers another end than
            // everyone else's.
            Err(_) => {
                self.refetch = true;
                return;
            }
        };
        self.refetch = false;
        self.settle(end.unwrap_or_else(|| End::finished(false, Some(EndReason::OwnerLost))));
    }

    /// Writes the run's end; when Redis cannot take it now, keeps it for [`Self::retry_end`].
    pub(super) async fn write_end(&mut self, end: End) {
        let deadline = Instant::now() + self.cluster.cfg.lease + self.cluster.retention;
        self.retry_end(end, deadline, false).await;
        if self.pending_end.is_some() {
            info!(
                "run {}: its end waits for the shared journal to come back",
                self.run.id()
            );
        }
    }

    /// One attempt at writing the end (re-basing first when Redis lost the run or missed
    /// batches). On failure the end stays pending and the next tick tries again, until
    /// `deadline` (lease + retention after the end: by then every key of the run has expired).
    pub(super) async fn retry_end(&mut self, end: End, deadline: Instant, was_pending: bool) {
        self.try_end(end, deadline).await;
        let gauge = &self.cluster.jm.pending_ends;
        match (was_pending, self.pending_end.is_some()) {
            (false, true) => gauge.inc(),
            (true, false) => gauge.dec(),
            _ => {}
        }
    }

    async fn try_end(&mut self, end: End, deadline: Instant) {
        if self.ended {
            return;
        }
        // Every batch before the end goes first (the lane's calls in flight answered).
        let lane = self.core.lane.clone();
        let mut acked = self.live && lane.wait_for(end.seq).await;
        if !acked || lane.lost.load(Ordering::Relaxed) {
            self.rebase().await;
            if self.ended {
                return;
            }
            acked = self.live && lane.wait_for(end.seq).await;
        }
        let answer = match acked {
            true => match self.call_end(&end).await {
                Ok(v) => Some(v),
                Err(e) => {
                    // Refused outright, Redis took nothing; unanswered, it may have.
                    self.end_unknown |= !super::super::refuses_writes(&e);
                    None
                }
            },
            false => None,
        };
        match answer.as_ref().and_then(|v| v.first()).map(|b| &b[..]) {
            // Redis took this end first: it is the run's end everywhere.
            Some(b"ok") => {
                self.ended = true;
                self.core.deliver(end);
                self.keep();
                return;
            }
            // Another end got there first (the reaper's `owner_lost`): that one is shown here.
            Some(b"ended") => return self.settle_stored(answer.as_deref().unwrap_or_default()),
            // A newer lease owns the run: its end (or `owner_lost`) is the run's.
            Some(b"fenced") => return self.fetch_end().await,
            // Redis lost the run (restarted empty) or entries under later appends: re-base, then
            // end it.
            Some(b"missing" | b"gap") => self.core.lane.lost.store(true, Ordering::Relaxed),
            _ => {}
        }
        if Instant::now() >= deadline {
            warn!(
                "run {}: its end could not be journaled before its keys expired",
                self.run.id()
            );
            self.ended = true;
            self.core.deliver(end);
        } else {
            self.pending_end = Some((end, deadline));
        }
    }

    /// This replica's liveness lapsed while the run is (or may be) in Redis: any replica's
    /// reaper may end it `owner_lost`, and a follower that cannot write ends its mirror so, so its readers here
    /// get that end too (unless they already saw one), and it is the end written once Redis
    /// takes writes again. The producer keeps reading its upstream.
    pub(super) async fn lapsed(&mut self) {
        // An end call Redis may have taken: only its retry's answer says which end won.
        if self.ended || self.end_unknown || self.run.end().is_some() {
            return;
        }
        warn!(
            "run {}: this replica's liveness lapsed in the shared journal; ended as owner_lost",
            self.run.id()
        );
        let end = self
            .core
            .deliver(End::finished(false, Some(EndReason::OwnerLost)));
        let deadline = Instant::now() + self.cluster.cfg.lease + self.cluster.retention;
        let was_pending = self.pending_end.take().is_some();
        self.retry_end(end, deadline, was_pending).await;
    }

    async fn call_end(&self, end: &End) -> redis::RedisResult<Vec<Bytes>> {
        let k = &self.keys;
        self.call(
            Inv::new(&scripts::END, &[&k.chat, &k.m, &k.s, &k.k])
                .arg(&self.cluster.lease)
                .arg(codec::encode_end(end))
                .arg(self.cluster.retention.as_millis() as u64)
                .arg(&self.keys.bell)
                .arg(self.run.id().as_str())
                .arg(if self.run.is_producing() { "1" } else { "0" })
                .arg(self.cluster.publish_command())
                .arg(self.core.lane.added().max(1)),
        )
        .await
    }

    /// The producer finished: stop-waiters on other replicas see `producing = 0`.
    pub(super) async fn done(&mut self) {
        let mut c = self.cluster.conn();
        let _: redis::RedisResult<()> = timed(
            redis::Script::new(
                "if redis.call('EXISTS', KEYS[1]) == 1 then redis.call('HSET', KEYS[1], 'producing', 0) end",
            )
            .key(&self.keys.m)
            .invoke_async(&mut c)
        )
        .await;
    }
}
