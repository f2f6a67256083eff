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
}

impl Kind {
    pub const ALL: [Kind; 6] = [
        Kind::RedisPaused,
        Kind::Partitioned,
        Kind::RedisRestarted,
        Kind::ReplicaStopped,
        Kind::RedisLatency,
        Kind::BackendReset,
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
