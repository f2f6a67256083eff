//! The admin API's indexes in the shared journal, so any replica lists every replica's runs
//! without a `KEYS`/`SCAN` of the keyspace: every run in `tj:runs`, and per owner (under the
//! keyed owner hash, never the subject) its runs in `tj:{own:<owner hash>}:runs` and the id
//! keys naming them (run id, aliases, idempotency keys' names) in `tj:{own:<owner hash>}:ids`.
//! Sorted sets written by [`scripts::INDEX`]: each member (`<scope>\n<run>` for runs) is scored
//! by when it stops counting, its run's writer adds it again on every lease tick, a write drops
//! the members whose time passed, and the key expires with its newest member, so an index
//! outlives its runs' keys by at most a lease. A reader drops the members whose run's meta
//! hash is gone ([`Replica::indexed`]).

use std::collections::HashMap;

use futures_util::future::join_all;
use redis::AsyncCommands;

use super::pipe::Inv;
use super::{codec, scripts, timed, Replica, RunKeys};
use crate::state::auth::Owner;
use crate::vocab::end::End;
use crate::vocab::{RunId, Scope};

/// Every run in the journal, live or kept for its retention.
pub(super) const RUNS: &str = "tj:runs";

/// The most runs one read of an index returns (the most recently written first).
pub const MAX_INDEXED: usize = 10_000;

/// The meta hash fields a reader asks for, in this order.
const FIELDS: [&str; 8] = [
    "state", "producer", "head", "win", "extra", "t", "end", "end_seq",
];

/// A run as its meta hash in the journal describes it, whichever replica produces it.
#[derive(Debug, Clone)]
pub struct JournalRun {
    /// Its chat's scope.
    pub scope: Scope,
    /// Tether's run id.
    pub run: RunId,
    /// Whether the run is live in the journal (no end written yet).
    pub live: bool,
    /// The replica producing (or that produced) it.
    pub producer: String,
    /// Its head seq.
    pub head: u64,
    /// Its replay window, in events.
    pub window: Option<u64>,
    /// The path of the route that recorded it.
    pub route: Option<String>,
    /// When its turn's request arrived (ms since the Unix epoch, its producer's clock).
    pub started_at_ms: Option<u64>,
    /// Its end, once written.
    pub end: Option<End>,
}

/// The key of one of `owner`'s indexes or places (`what`: `runs`, `ids`, `active`, `bucket`);
/// `None` for the one owner of `subject = "none"`.
pub(super) fn owner_key(owner: &Owner, what: &str) -> Option<String> {
    owner.hex().map(|h| format!("tj:{{own:{h}}}:{what}"))
}

/// The index member of run `run` of the chat at `scope`.
fn member(scope: &Scope, run: &RunId) -> String {
    format!("{scope}\n{run}")
}

impl Replica {
    /// Indexes run `run` of `owner`'s chat at `scope`, and its id keys `ids`, for `ttl_ms`
    /// (the writer's call, at go-live and every lease tick; quiet when Redis is down: the next
    /// tick writes it again).
    pub(super) async fn index_run(
        &self,
        scope: &Scope,
        owner: &Owner,
        run: &RunId,
        ids: &[String],
        ttl_ms: u64,
    ) {
        let m = member(scope, run);
        let mut calls = vec![Inv::new(&scripts::INDEX, &[RUNS]).arg(ttl_ms).arg(&m)];
        if let (Some(runs), Some(idx)) = (owner_key(owner, "runs"), owner_key(owner, "ids")) {
            calls.push(Inv::new(&scripts::INDEX, &[&runs]).arg(ttl_ms).arg(&m));
            calls.push(Inv::new(&scripts::INDEX, &[&idx]).arg(ttl_ms).arg(ids));
        }
        let calls = calls.into_iter().map(|inv| timed(self.pipe.call(inv)));
        for r in join_all(calls).await {
            if let Err(e) = r {
                log::debug!("run {run}: the admin index could not be written ({e})");
            }
        }
    }

    /// The runs the journal indexes for `owner` (every run when `None`), at most
    /// [`MAX_INDEXED`], with their meta read in one pipelined round trip. Members whose run's
    /// keys are gone are dropped from the index.
    pub async fn indexed(&self, owner: Option<&Owner>) -> redis::RedisResult<Vec<JournalRun>> {
        let key = match owner {
            Some(o) => match owner_key(o, "runs") {
                Some(k) => k,
                None => RUNS.to_string(),
            },
            None => RUNS.to_string(),
        };
        let mut conn = self.conn();
        let members: Vec<String> = timed(
            redis::cmd("ZRANGE")
                .arg(&key)
                .arg(0)
                .arg(MAX_INDEXED - 1)
                .arg("REV")
                .query_async(&mut conn),
        )
        .await?;
        self.read_members(&key, members).await
    }

    /// The run with tether's run id `id` in the journal, whoever produces it.
    pub async fn indexed_run(&self, id: &RunId) -> redis::RedisResult<Option<JournalRun>> {
        let mut conn = self.conn();
        let members: Vec<String> = timed(conn.zrange(RUNS, 0, -1)).await?;
        let suffix = format!("\n{id}");
        let found: Vec<String> = members
            .into_iter()
            .filter(|m| m.ends_with(&suffix))
            .take(1)
            .collect();
        Ok(self.read_members(RUNS, found).await?.into_iter().next())
    }

    /// The runs `members` of index `key` name, with their meta; stale members are dropped.
    async fn read_members(
        &self,
        key: &str,
        members: Vec<String>,
    ) -> redis::RedisResult<Vec<JournalRun>> {
        if members.is_empty() {
            return Ok(Vec::new());
        }
        let mut p = redis::pipe();
        for m in &members {
            let (scope, run) = split(m);
            p.cmd("HMGET")
                .arg(RunKeys::new(&scope, &run).m)
                .arg(&FIELDS[..]);
        }
        let mut conn = self.conn();
        let metas: Vec<Vec<Option<String>>> = timed(p.query_async(&mut conn)).await?;
        let mut out = Vec::with_capacity(members.len());
        let mut stale = Vec::new();
        for (m, meta) in members.into_iter().zip(metas) {
            let fields: HashMap<&str, String> = FIELDS
                .iter()
                .copied()
                .zip(meta)
                .filter_map(|(k, v)| Some((k, v?)))
                .collect();
            let (scope, run) = split(&m);
            match journal_run(scope, run, &fields) {
                Some(r) => out.push(r),
                None => stale.push(m),
            }
        }
        if !stale.is_empty() {
            let _: redis::RedisResult<()> = timed(conn.zrem(key, stale)).await;
        }
        Ok(out)
    }
}

/// The scope and run an index member names (a malformed one names no run's keys).
fn split(member: &str) -> (Scope, RunId) {
    let (s, r) = member.split_once('\n').unwrap_or((member, ""));
    (Scope::from(s), RunId::from(r))
}

/// The run a meta hash's `fields` describe; `None` when the hash is gone.
fn journal_run(scope: Scope, run: RunId, f: &HashMap<&str, String>) -> Option<JournalRun> {
    let state = f.get("state")?;
    let num = |k: &str| f.get(k).and_then(|v| v.parse::<u64>().ok());
    let end = match (f.get("end"), num("end_seq")) {
        (Some(json), Some(seq)) => codec::decode_end(json.as_bytes(), seq),
        _ => None,
    };
    Some(JournalRun {
        scope,
        run,
        live: state == "live",
        producer: f.get("producer").cloned().unwrap_or_default(),
        head: num("head").unwrap_or(0),
        window: num("win"),
        route: f.get("extra").filter(|r| !r.is_empty()).cloned(),
        started_at_ms: num("t"),
        end,
    })
}
