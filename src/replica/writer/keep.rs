//! The writer keeps its run's end in Redis for a while after it settled: a Redis that restarts
//! empty loses the end a follower may not have read yet, and that follower would then end its
//! readers `owner_lost` while this replica's readers got the end Redis had taken. So, every
//! tick for a lease after the end settled (and until Redis answers once after that), the writer
//! checks that the run is still in Redis, and writes it again, ended with the end its readers
//! got, when it is gone, unless this replica no longer holds the run (an erased owner's runs
//! are dropped everywhere before their keys are deleted). That write is first-wins too: a follower that gave up on the run
//! first wrote its `owner_lost` there (then the split is logged: Redis lost an end readers were
//! told, and this replica could not write it again in time).

use redis::AsyncCommands;
use tokio::time::Instant;

use super::super::timed;
use super::Writer;

impl Writer {
    /// The run's end has settled (this replica's readers got the end Redis holds): it is kept
    /// in Redis from now.
    pub(super) fn keep(&mut self) {
        self.kept = Some(Instant::now());
    }

    /// Whether this replica still holds the run (the registry's copy is this writer's run).
    fn held_here(&self) -> bool {
        self.cluster
            .registry
            .find(&self.meta.scope, &self.meta.owner, self.run.id())
            .is_some_and(|r| std::sync::Arc::ptr_eq(&r, &self.run))
    }

    /// Whether the writer is done keeping the end.
    pub(super) fn kept(&self) -> bool {
        self.kept.is_none()
    }

    /// One check of a kept end: the run still in Redis, or written again.
    pub(super) async fn check_kept(&mut self) {
        let Some(since) = self.kept else { return };
        let mut c = self.cluster.conn();
        let r: redis::RedisResult<bool> = timed(c.exists(&self.keys.m)).await;
        match r {
            // Redis has had the end for a lease and still has it: every follower that could
            // read it has.
            Ok(true) if since.elapsed() >= self.cluster.cfg.lease => self.kept = None,
            Ok(true) => {}
            // Gone, and no longer held here either: erased (an operator's erasure drops every
            // replica's copies before it deletes the keys) or dropped by retention. Not lost:
            // nothing is written again.
            Ok(false) if !self.held_here() => {
                log::info!(
                    "run {}: gone from the shared journal and from this replica after its end; \
                     not written again",
                    self.run.id()
                );
                self.kept = None;
            }
            Ok(false) => {
                log::info!(
                    "run {}: the shared journal lost it after its end; written again",
                    self.run.id()
                );
                self.core
                    .lane
                    .lost
                    .store(true, std::sync::atomic::Ordering::Relaxed);
                self.rebase().await;
            }
            // Redis does not answer: kept until it does, while the run's keys would live.
            Err(_) if since.elapsed() >= self.cluster.cfg.lease + self.cluster.retention => {
                self.kept = None
            }
            Err(_) => {}
        }
    }
}
