//! Erasing one owner from the shared journal (the admin API's `DELETE /admin/owners/{subject}`):
//! the owner's live runs are stopped on whichever replica produces them and waited for until
//! their ends are in Redis (so no producer writes them again), then every key of theirs is
//! deleted (each run's meta, stream and checkpoint, each chat's pointer, every id key naming
//! their runs, their indexes, places and rate bucket, their members of `tj:runs`), and every
//! replica is told on [`ERASE_CHANNEL`] to drop its copies and mirrors.

use std::collections::HashSet;
use std::time::Duration;

use log::warn;
use redis::AsyncCommands;
use tokio::time::Instant;

use super::index::{owner_key, JournalRun, RUNS};
use super::{chat_key, timed, Conn, Replica, RunKeys};
use crate::state::auth::Owner;
use crate::state::registry::Erased;
use crate::vocab::end::EndReason;
use crate::vocab::RunId;

/// The channel an erasure is announced on: `<replica id>\n<owner hash>`.
pub(super) const ERASE_CHANNEL: &str = "tj:{adm}:erase";

/// How often an erasure looks again for the owner's runs to have ended.
const ERASE_POLL: Duration = Duration::from_millis(50);

/// What an erasure removed from Redis.
#[derive(Debug, Default, Clone)]
pub struct JournalErased {
    /// The owner's runs the journal held, live or kept for their retention.
    pub runs: Vec<JournalRun>,
    /// Keys deleted.
    pub keys: usize,
    /// Runs still live in the journal when the wait ran out (their producers may write them
    /// again; erase again once they end).
    pub still_live: usize,
}

impl Replica {
    /// Stops every run of `owner` live in the journal, wherever it is produced, and waits up
    /// to `wait` for their ends to be in Redis (runs that go live meanwhile are stopped too).
    /// Returns the owner's runs as the journal has them after the wait.
    pub async fn stop_owner(
        &self,
        owner: &Owner,
        wait: Duration,
    ) -> redis::RedisResult<Vec<JournalRun>> {
        let until = Instant::now() + wait;
        let mut stopped: HashSet<RunId> = HashSet::new();
        loop {
            let runs = self.indexed(Some(owner)).await?;
            let live: Vec<&JournalRun> = runs.iter().filter(|r| r.live).collect();
            if live.is_empty() || Instant::now() >= until {
                return Ok(runs);
            }
            for r in live {
                if stopped.insert(r.run.clone()) {
                    self.stop_in_journal(&r.scope, &r.run, EndReason::Cancelled)
                        .await;
                }
            }
            tokio::time::sleep(ERASE_POLL).await;
        }
    }

    /// Deletes every key of `owner` (`runs` are theirs, as [`Self::stop_owner`] found them)
    /// and tells every replica to drop its copies; this replica's are dropped by the caller.
    pub async fn erase_owner(
        &self,
        owner: &Owner,
        runs: Vec<JournalRun>,
    ) -> redis::RedisResult<JournalErased> {
        let mut conn = self.conn();
        let mut keys: Vec<String> = Vec::new();
        if let Some(ids) = owner_key(owner, "ids") {
            let named: Vec<String> = timed(conn.zrange(&ids, 0, -1)).await?;
            keys.extend(named);
        }
        for r in &runs {
            let k = RunKeys::new(&r.scope, &r.run);
            keys.extend([k.m, k.s, k.k, chat_key(&r.scope)]);
            keys.push(super::id_key(owner, &r.run));
        }
        for what in ["runs", "ids", "active", "bucket"] {
            keys.extend(owner_key(owner, what));
        }
        keys.sort();
        keys.dedup();
        let mut p = redis::pipe();
        for k in &keys {
            p.cmd("DEL").arg(k);
        }
        let members: Vec<String> = runs
            .iter()
            .map(|r| format!("{}\n{}", r.scope, r.run))
            .collect();
        if !members.is_empty() {
            p.cmd("ZREM").arg(RUNS).arg(&members).ignore();
        }
        // Told before the keys go, so the replicas producing the runs drop them first and do
        // not write them back as lost (a producer keeps an ended run's end in Redis for a
        // lease); told again after, for copies synced back in between.
        self.announce_erase(owner, &mut conn).await;
        let deleted: Vec<usize> = timed(p.query_async(&mut conn)).await?;
        let still_live = runs.iter().filter(|r| r.live).count();
        self.announce_erase(owner, &mut conn).await;
        Ok(JournalErased {
            runs,
            keys: deleted.iter().sum(),
            still_live,
        })
    }

    /// Tells every other replica that `owner` is erased (they drop their copies).
    async fn announce_erase(&self, owner: &Owner, conn: &mut Conn) {
        if let Some(hex) = owner.hex() {
            let msg = format!("{}\n{hex}", self.cfg.replica_id);
            let _ = timed(conn.publish(ERASE_CHANNEL, &msg)).await;
        }
    }

    /// Drops every copy and mirror of `owner`'s runs held here.
    pub fn forget_owner(&self, owner: &Owner) -> Erased {
        let erased = self.registry.erase_owner(owner);
        self.mirrors
            .retain(|_, w| w.upgrade().is_none_or(|run| !run.is_owned_by(owner)));
        erased
    }

    /// Another replica erased an owner (`msg`: `<replica id>\n<owner hash>`): drop its copies
    /// here (nothing waits).
    pub(super) fn erased_elsewhere(&self, msg: &[u8]) {
        let msg = String::from_utf8_lossy(msg);
        let Some((from, hex)) = msg.split_once('\n') else {
            return;
        };
        let Some(owner) = Owner::from_hex(hex).filter(|_| from != self.cfg.replica_id) else {
            return;
        };
        let e = self.forget_owner(&owner);
        warn!(
            "admin: an owner erased through replica {from:?}: dropped {} chats, {} runs, {} \
             recorded bytes held here",
            e.chats, e.runs, e.bytes
        );
    }
}
