//! Replica liveness and the replica-wide reaper. Every replica keeps its liveness key
//! (`tj:{rep:<id>}:alive` = its lease token, `PX lease`) fresh every third of the lease, lists
//! each run it produces in its life's set `tj:{rep:<id>}:runs:<lease>` (named in `tj:leases`),
//! and every quarter lease looks for lives whose liveness lapsed: their live runs are ended
//! `persisted:false, reason:"owner_lost"` with the end script's lease CAS, so the first end
//! written wins and a producer that comes back is fenced. Polling with server-side `PX`, not
//! keyspace notifications: no client clock is compared.

use std::sync::Weak;

use log::info;
use redis::AsyncCommands;

use super::{codec, scripts, timed, Conn, Replica, RunKeys};
use crate::vocab::end::{End, EndReason};
use crate::vocab::{RunId, Scope};

/// The set naming every replica life (`<id>\n<lease>`) that may have live runs.
const LEASES: &str = "tj:leases";

/// Returns the members of a life's run set when its liveness no longer holds its lease, in one
/// atomic step: a run listed after its producer wrote its liveness is never reaped.
///
/// KEYS: alive, runs. ARGV: lease.
static LAPSED: std::sync::LazyLock<redis::Script> = std::sync::LazyLock::new(|| {
    redis::Script::new(
        r#"
if redis.call('GET', KEYS[1]) == ARGV[1] then return false end
return redis.call('SMEMBERS', KEYS[2])
"#,
    )
});

/// Whether the replica `producer` still holds lease `lease` (its liveness key says so).
pub(crate) async fn owner_alive(
    conn: &mut Conn,
    producer: &str,
    lease: &str,
) -> redis::RedisResult<bool> {
    let v: Option<String> = conn.get(Replica::alive_key(producer)).await?;
    Ok(v.as_deref() == Some(lease))
}

impl Replica {
    fn life(&self) -> String {
        format!("{}\n{}", self.cfg.replica_id, self.lease)
    }

    /// Writes this replica's liveness and lists its life for the reaper.
    async fn touch_alive(&self, conn: &mut Conn) -> redis::RedisResult<()> {
        let id = &self.cfg.replica_id;
        let lease_ms = self.cfg.lease.as_millis() as u64;
        let r = timed(
            redis::pipe()
                .cmd("SET")
                .arg(Replica::alive_key(id))
                .arg(&self.lease)
                .arg("PX")
                .arg(lease_ms)
                .ignore()
                .cmd("PEXPIRE")
                .arg(Replica::runs_key(id, &self.lease))
                .arg(3 * lease_ms)
                .ignore()
                .cmd("SADD")
                .arg(LEASES)
                .arg(self.life())
                .ignore()
                .query_async::<()>(conn),
        )
        .await;
        if r.is_ok() {
            *self.alive_at.lock() = Some(tokio::time::Instant::now());
        }
        r
    }

    /// Lists a run produced here for the reaper (liveness written first).
    pub(crate) async fn register_run(&self, scope: &Scope, run: &RunId) -> redis::RedisResult<()> {
        let mut conn = self.conn();
        self.touch_alive(&mut conn).await?;
        let key = Replica::runs_key(&self.cfg.replica_id, &self.lease);
        timed(conn.sadd::<_, _, ()>(&key, format!("{run}\n{scope}"))).await?;
        timed(conn.pexpire::<_, ()>(&key, 3 * self.cfg.lease.as_millis() as i64)).await
    }

    /// Takes a run this replica produced off the reaper's list (quiet when Redis is down: a
    /// stale member is dropped by the reaper once the run has ended).
    pub(crate) async fn unregister_run(&self, scope: &Scope, run: &RunId) {
        let mut conn = self.conn();
        let key = Replica::runs_key(&self.cfg.replica_id, &self.lease);
        let _ = timed(conn.srem::<_, _, ()>(&key, format!("{run}\n{scope}"))).await;
    }

    /// One pass of the reaper: every life whose liveness lapsed has its live runs ended
    /// `owner_lost`. Returns how many runs this pass ended.
    pub(crate) async fn reap(&self) -> redis::RedisResult<usize> {
        let mut conn = self.conn();
        let lives: Vec<String> = timed(conn.smembers(LEASES)).await?;
        let mut ended = 0;
        for life in lives {
            let Some((id, lease)) = life.split_once('\n') else {
                let _ = timed(conn.srem::<_, _, ()>(LEASES, &life)).await;
                continue;
            };
            if lease == self.lease {
                continue;
            }
            let runs_key = Replica::runs_key(id, lease);
            let runs: Option<Vec<String>> = timed(
                LAPSED
                    .key(Replica::alive_key(id))
                    .key(&runs_key)
                    .arg(lease)
                    .invoke_async(&mut conn),
            )
            .await?;
            let Some(runs) = runs else { continue };
            for member in &runs {
                if let Some((run, scope)) = member.split_once('\n') {
                    let (scope, run) = (Scope::from(scope), RunId::from(run));
                    let keys = RunKeys::new(&scope, &run);
                    if self.end_lost(&mut conn, &keys, &run, id, lease).await? {
                        ended += 1;
                    }
                }
                timed(conn.srem::<_, _, ()>(&runs_key, member)).await?;
            }
            // Its set is empty: the life is forgotten (a run listed meanwhile re-lists it).
            timed(conn.srem::<_, _, ()>(LEASES, &life)).await?;
        }
        Ok(ended)
    }

    /// Ends run `run` `owner_lost` when it is still live under `lease`; true when this call
    /// wrote the end (the first end wins).
    pub(super) async fn end_lost(
        &self,
        conn: &mut Conn,
        keys: &RunKeys,
        run: &RunId,
        producer: &str,
        lease: &str,
    ) -> redis::RedisResult<bool> {
        let end = End::finished(false, Some(EndReason::OwnerLost));
        let v: Vec<Vec<u8>> = timed(
            scripts::END
                .key(&keys.chat)
                .key(&keys.m)
                .key(&keys.s)
                .key(&keys.k)
                .arg(lease)
                .arg(codec::encode_end(&end))
                .arg(self.retention.as_millis() as u64)
                .arg(&keys.bell)
                .arg(run.as_str())
                .arg("0")
                .arg(self.publish_command())
                .arg(0)
                .invoke_async(conn),
        )
        .await?;
        let ok = v.first().map(Vec::as_slice) == Some(b"ok");
        if ok {
            info!("run {run}: its replica {producer:?} is gone; ended as owner_lost");
            self.metrics
                .runs_finished
                .inc(crate::metrics::RunOutcome::OwnerLost);
        }
        Ok(ok)
    }
}

/// Keeps this replica's liveness fresh and its control channel subscribed, and runs the
/// reaper, every quarter lease: a lapsed life is reaped within 1.25x the lease of its last
/// refresh (plus one call).
pub(super) async fn liveness(cluster: Weak<Replica>) {
    let mut subscribed = false;
    loop {
        let Some(c) = cluster.upgrade() else { return };
        let every = c.cfg.lease / 4;
        let mut conn = c.conn();
        let r = c.touch_alive(&mut conn).await;
        c.health(&r);
        if r.is_ok() {
            if !subscribed {
                subscribed = c
                    .subscribe(&Replica::ctl_channel(&c.cfg.replica_id))
                    .await
                    .is_ok()
                    && c.subscribe(super::erase::ERASE_CHANNEL).await.is_ok();
            }
            c.refresh_places().await;
            if let Err(e) = c.reap().await {
                log::debug!("reaper pass failed: {e}");
            }
        }
        drop(c);
        tokio::time::sleep(every).await;
    }
}
