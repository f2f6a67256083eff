//! The fault schedule: one fault at a time, each healed and followed by a quiet stretch longer
//! than the hang bound before the next. The short profile injects every kind once, in a seeded
//! order; the long one draws kinds until its time is up.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::Rng;
use tokio::time::Instant;

use super::streams::run_stream_faults;
use super::world::{World, LEASE, NAMES};
use crate::support::{Fault, FaultProxy, RedisServer};

/// The links of one replica, each through a fault proxy.
pub struct Links {
    /// The replica's connections to Redis.
    pub redis: FaultProxy,
    /// The replica's connections to the backend.
    pub backend: FaultProxy,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// redis-server SIGSTOPped for twice the lease, then SIGCONTed.
    RedisPaused,
    /// One replica's Redis link stalls (bytes held, as TCP does in a partition) for 2.5 leases
    /// while its clients stay connected; sometimes its connections are reset at the heal.
    Partitioned,
    /// redis-server killed and started again, empty, on its port.
    RedisRestarted,
    /// The binary replica SIGSTOPped for 2.5 leases, then SIGCONTed: it must be fenced.
    ReplicaStopped,
    /// 50-200 ms each way on the Redis links of one to three replicas, for three leases.
    RedisLatency,
    /// Every connection of one replica to the backend reset, mid-turn.
    BackendReset,
    /// A producing replica's Redis link stalls until a reaper has ended its live runs, then
    /// delivers what it held: appends (each an `XADD` and its doorbell) past the ends, which
    /// Redis must refuse by their ids and no follower may show.
    HeldPastEnd,
    /// As [`Kind::HeldPastEnd`], and another replica's push connection is cut while the ends
    /// are rung (it misses their doorbells) and back before the held appends' doorbells come.
    EndMissedByFollower,
}

impl Kind {
    pub const ALL: [Kind; 8] = [
        Kind::RedisPaused,
        Kind::Partitioned,
        Kind::RedisRestarted,
        Kind::ReplicaStopped,
        Kind::RedisLatency,
        Kind::BackendReset,
        Kind::HeldPastEnd,
        Kind::EndMissedByFollower,
    ];

    /// Whether it can stall a producer's own stream.
    fn local(self) -> bool {
        matches!(self, Kind::ReplicaStopped | Kind::BackendReset)
    }

    fn name(self) -> &'static str {
        match self {
            Kind::RedisPaused => "redis_paused",
            Kind::Partitioned => "replica_partitioned",
            Kind::RedisRestarted => "redis_restarted_empty",
            Kind::ReplicaStopped => "replica_stopped",
            Kind::RedisLatency => "redis_latency",
            Kind::BackendReset => "backend_reset",
            Kind::HeldPastEnd => "appends_held_past_the_end",
            Kind::EndMissedByFollower => "end_missed_by_a_follower",
        }
    }
}

pub struct Schedule {
    pub w: Arc<World>,
    pub redis: Arc<Mutex<RedisServer>>,
    pub links: Arc<Vec<Links>>,
    /// The binary replica (the last one).
    pub binary_pid: u32,
    pub rng: StdRng,
}

fn signal(pid: u32, sig: libc::c_int) {
    let pid = libc::pid_t::try_from(pid).unwrap();
    // SAFETY: kill(2) on a child process this test started and still owns.
    let r = unsafe { libc::kill(pid, sig) };
    assert_eq!(r, 0, "kill({pid}, {sig})");
}

impl Schedule {
    /// Runs the schedule: every kind `rounds` times, each round in its own order (`until` =
    /// None), or random kinds until `until`. Each fault is logged as it heals.
    pub async fn run(&mut self, rounds: usize, until: Option<Instant>) {
        let mut kinds = Vec::new();
        for _ in 0..rounds {
            let mut round = Kind::ALL.to_vec();
            round.shuffle(&mut self.rng);
            kinds.extend(round);
        }
        let mut i = 0;
        loop {
            let kind = match until {
                None if i == kinds.len() => break,
                None => kinds[i],
                Some(t) if Instant::now() >= t => break,
                Some(_) => *Kind::ALL.choose(&mut self.rng).unwrap(),
            };
            i += 1;
            // A quiet stretch longer than the hang bound: every fault's aftermath is checked
            // against the bound before the next fault begins.
            let gap = self.w.bound + Duration::from_millis(self.rng.gen_range(500..2000));
            tokio::time::sleep(gap).await;
            let what = self.inject(kind).await;
            println!(
                "chaos: fault {} {what} at {:.1?}",
                kind.name(),
                self.w.elapsed()
            );
        }
    }

    /// Injects one fault and heals it; returns what it did, for the log.
    async fn inject(&mut self, kind: Kind) -> String {
        let w = self.w.clone();
        match kind {
            Kind::RedisPaused => {
                let pid = self.redis.lock().pid().expect("redis runs");
                w.fault_begins(kind.name(), kind.local());
                signal(pid, libc::SIGSTOP);
                tokio::time::sleep(2 * LEASE).await;
                signal(pid, libc::SIGCONT);
                w.fault_heals();
                format!("for {:?}", 2 * LEASE)
            }
            Kind::Partitioned => {
                let r = self.rng.gen_range(0..self.links.len());
                let reset = self.rng.gen_bool(0.5);
                w.fault_begins(kind.name(), kind.local());
                self.links[r].redis.set(Fault::Stall);
                tokio::time::sleep(LEASE * 5 / 2).await;
                if reset {
                    self.links[r].redis.reset();
                }
                self.links[r].redis.heal();
                w.fault_heals();
                format!("replica {} (reset at the heal: {reset})", NAMES[r])
            }
            Kind::RedisRestarted => {
                let redis = self.redis.clone();
                w.fault_begins(kind.name(), kind.local());
                tokio::task::spawn_blocking(move || {
                    let mut r = redis.lock();
                    r.kill();
                    r.restart();
                })
                .await
                .unwrap();
                w.restarted();
                w.fault_heals();
                String::new()
            }
            Kind::ReplicaStopped => self.stop_binary().await,
            Kind::HeldPastEnd => self.held_past_end(kind, false).await,
            Kind::EndMissedByFollower => self.held_past_end(kind, true).await,
            Kind::RedisLatency => {
                let n = self.rng.gen_range(1..=self.links.len());
                let mut which: Vec<usize> = (0..self.links.len()).collect();
                which.shuffle(&mut self.rng);
                which.truncate(n);
                let d = Duration::from_millis(self.rng.gen_range(50..=200));
                w.fault_begins(kind.name(), kind.local());
                for r in &which {
                    self.links[*r].redis.set(Fault::Latency(d));
                }
                tokio::time::sleep(3 * LEASE).await;
                for r in &which {
                    self.links[*r].redis.heal();
                }
                w.fault_heals();
                let names: Vec<_> = which.iter().map(|r| NAMES[*r]).collect();
                format!("{d:?} on {names:?}")
            }
            Kind::BackendReset => {
                let r = self.busy_replica(None).await;
                w.fault_begins(kind.name(), kind.local());
                self.links[r].backend.reset();
                w.fault_heals();
                format!("replica {}", NAMES[r])
            }
        }
    }

    /// A replica with a turn in progress (`only` that one), waiting a little for one.
    async fn busy_replica(&mut self, only: Option<usize>) -> usize {
        // Drawn once, so the schedule's later draws do not depend on the machine's timing.
        let pick: usize = self.rng.gen();
        let t0 = Instant::now();
        loop {
            let busy: Vec<usize> = (0..self.links.len())
                .filter(|r| only.is_none_or(|o| o == *r))
                .filter(|r| self.w.live[*r].load(Ordering::SeqCst) > 0)
                .collect();
            if !busy.is_empty() {
                return busy[pick % busy.len()];
            }
            if t0.elapsed() > Duration::from_secs(5) {
                return only.unwrap_or(0);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// SIGSTOP of the binary replica with runs live on it, for 2.5 leases: its lease lapses,
    /// another replica's reaper ends its live runs `owner_lost`. After SIGCONT it must be
    /// fenced: each of those runs keeps the `owner_lost` end in the journal.
    async fn stop_binary(&mut self) -> String {
        let c = NAMES.len() - 1;
        let w = self.w.clone();
        w.fault_begins(Kind::ReplicaStopped.name(), true);
        let mut live = Vec::new();
        for _ in 0..20 {
            self.busy_replica(Some(c)).await;
            signal(self.binary_pid, libc::SIGSTOP);
            // What it had written before it stopped has landed by now.
            tokio::time::sleep(Duration::from_millis(100)).await;
            live = self.journal_runs(NAMES[c], "live").await;
            if !live.is_empty() {
                break;
            }
            // None of its runs is live in the journal yet: a stop this short (well under the
            // lease) changes nothing; try again in a moment.
            signal(self.binary_pid, libc::SIGCONT);
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        if live.is_empty() {
            signal(self.binary_pid, libc::SIGSTOP);
        }
        tokio::time::sleep(LEASE * 5 / 2).await;
        signal(self.binary_pid, libc::SIGCONT);
        w.fault_heals();
        w.add("fence.runs_checked", live.len() as u64);
        let what = format!("replica c with {} live runs", live.len());
        // The reaper ended them while the replica was stopped; give the resumed replica a
        // while to (wrongly) write over them.
        tokio::time::sleep(LEASE).await;
        for (key, _) in live {
            let fields = self.hmget(&key, &["state", "end"]).await;
            let end = fields[1].clone().unwrap_or_default();
            if fields[0].as_deref() != Some("ended") || !end.contains("\"owner_lost\"") {
                w.violation(format!(
                    "replica c was not fenced: its run {key} was live when it stopped, and is \
                     now {:?} {end}",
                    fields[0]
                ));
            }
        }
        what
    }

    /// Stalls a busy replica's Redis link until a reaper ended its live runs, then delivers what
    /// it held (`away`: another replica is cut off from Redis meanwhile, and back first). Each
    /// of those runs must stay ended, with no batch of its stream past its end or over a hole.
    async fn held_past_end(&mut self, kind: Kind, away: bool) -> String {
        let w = self.w.clone();
        let p = self.busy_replica(None).await;
        let f = (p + self.rng.gen_range(1..self.links.len())) % self.links.len();
        w.fault_begins(kind.name(), kind.local());
        self.links[p].redis.set(Fault::Stall);
        if away {
            self.links[f].redis.set(Fault::Refuse);
            self.links[f].redis.reset();
        }
        // What it had written before the stall has landed by now.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let live: Vec<String> = self
            .journal_runs(NAMES[p], "live")
            .await
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        let t0 = Instant::now();
        let mut reaped = false;
        while !reaped && t0.elapsed() < 4 * LEASE {
            tokio::time::sleep(Duration::from_millis(100)).await;
            reaped = true;
            for k in &live {
                reaped &= self.hmget(k, &["state"]).await[0].as_deref() == Some("ended");
            }
        }
        if away {
            self.links[f].redis.heal();
            tokio::time::sleep(LEASE / 2).await;
        }
        self.links[p].redis.heal();
        w.fault_heals();
        w.add("fence.held_past_the_end_runs", live.len() as u64);
        let what = format!(
            "replica {} with {} live runs (reaped: {reaped}; {} away: {away})",
            NAMES[p],
            live.len(),
            NAMES[f]
        );
        // The held appends land now; give them a while to (wrongly) write past the ends.
        tokio::time::sleep(LEASE).await;
        let redis = self.redis.clone();
        let keys = live.clone();
        let faults = tokio::task::spawn_blocking(move || run_stream_faults(&redis.lock(), &keys))
            .await
            .unwrap();
        for v in faults {
            w.violation(format!("after appends held past the end: {v}"));
        }
        for k in &live {
            let state = self.hmget(k, &["state"]).await.remove(0);
            if reaped && state.as_deref() != Some("ended") {
                w.violation(format!("run {k} was ended, and is now {state:?}"));
            }
        }
        what
    }

    /// The meta keys (and their fields) of the runs in the journal that `producer` produces in
    /// `state`.
    async fn journal_runs(&self, producer: &str, state: &str) -> Vec<(String, String)> {
        let redis = self.redis.clone();
        let (producer, state) = (producer.to_string(), state.to_string());
        tokio::task::spawn_blocking(move || {
            let r = redis.lock();
            let keys: Vec<String> = r.query(&["KEYS", "tj:*:r:*:m"]);
            keys.into_iter()
                .filter_map(|k| {
                    let f: Vec<Option<String>> = r.query(&["HMGET", &k, "state", "producer"]);
                    (f[0].as_deref() == Some(&state) && f[1].as_deref() == Some(&producer))
                        .then(|| (k, producer.clone()))
                })
                .collect()
        })
        .await
        .unwrap()
    }

    async fn hmget(&self, key: &str, fields: &[&str]) -> Vec<Option<String>> {
        let redis = self.redis.clone();
        let mut args = vec!["HMGET".to_string(), key.to_string()];
        args.extend(fields.iter().map(|f| f.to_string()));
        tokio::task::spawn_blocking(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            redis.lock().query(&args)
        })
        .await
        .unwrap()
    }
}
