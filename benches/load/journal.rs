//! Scenario 8: the shared journal's cost, side by side with memory-only in one run. A
//! redis-server of its own (free port, no persistence, stopped by its PID), tether without a
//! journal, and two journaled replicas A and B: events/s of one full-speed stream; at `runs`
//! streams x `rate` events/s the delivery delay on the producing replica A and, for observers
//! attached to the same runs, on B (at a fifth of `runs` first, which leaves the machine
//! headroom, then at `runs`); Redis commands per event (`INFO commandstats` before and
//! after) and Redis bytes per completed run.

use std::net::{SocketAddr, TcpListener};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::client::Seen;
use crate::producer::Producer;
use crate::scenarios::contention;
use crate::sched::{self, Machine};
use crate::targets::{self, Hop};
use crate::Row;

/// A redis-server of the benchmark's own.
struct Redis {
    port: u16,
    child: Child,
}

impl Redis {
    fn start() -> Option<Redis> {
        let port = TcpListener::bind("127.0.0.1:0")
            .ok()?
            .local_addr()
            .ok()?
            .port();
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        let r = Redis { port, child };
        for _ in 0..500 {
            if r.cli(&["PING"]).trim() == "PONG" {
                return Some(r);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        None
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    fn cli(&self, args: &[&str]) -> String {
        Command::new("redis-cli")
            .args(["-p", &self.port.to_string()])
            .args(args)
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
    }

    /// Calls of every command but INFO so far.
    fn calls(&self) -> f64 {
        self.cli(&["INFO", "commandstats"])
            .lines()
            .filter(|l| l.starts_with("cmdstat_") && !l.starts_with("cmdstat_info:"))
            .filter_map(|l| {
                l.split("calls=")
                    .nth(1)?
                    .split(',')
                    .next()?
                    .parse::<f64>()
                    .ok()
            })
            .sum()
    }

    fn used_memory(&self) -> f64 {
        self.cli(&["INFO", "memory"])
            .lines()
            .find_map(|l| l.strip_prefix("used_memory:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0.0)
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One protocol-1 stream of `chat` at `path`, read to its end.
async fn stream(addr: SocketAddr, path: &str, chat: &str, delays: bool) -> Seen {
    let body = json!({"chat_id": chat, "protocol": 1}).to_string();
    crate::scenarios::stream(addr, path, body.as_bytes(), delays).await
}

/// Scenario 8 (see the module comment).
pub async fn journal(bin: &str, p: &Producer, runs: usize, rate: u64, secs: u64) -> Vec<Row> {
    let Some(redis) = Redis::start() else {
        eprintln!("  redis-server is not installed (apt-get install redis-server): skipped");
        return Vec::new();
    };
    let url = redis.url();
    let memory = targets::tether(bin, p.addr, &[]);
    let a = targets::tether(bin, p.addr, &["--journal", &url, "--replica-id", "a"]);
    let b = targets::tether(bin, p.addr, &["--journal", &url, "--replica-id", "b"]);
    let mut rows = Vec::new();

    // One stream at full speed, 100k token events.
    let n = 100_000u64;
    for (name, hop) in [("memory", &memory), ("journal", &a)] {
        let calls0 = redis.calls();
        let cpu0 = hop.cpu_seconds();
        let t = Instant::now();
        let path = format!("/chat?n={n}&size=4");
        let seen = stream(hop.addr, &path, &format!("s8-full-{name}"), false).await;
        let secs = t.elapsed().as_secs_f64();
        // The writer is asynchronous: let it finish before counting Redis commands.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let mut figures = vec![
            ("events_per_s", seen.events as f64 / secs),
            ("cpu_s", hop.cpu_seconds() - cpu0),
        ];
        if name == "journal" {
            figures.push(("redis_cmds_per_event", (redis.calls() - calls0) / n as f64));
        }
        rows.push(Row {
            scenario: "8 journal: full speed 100k tokens".into(),
            target: name,
            figures,
            notes: if seen.events < n {
                format!("BROKEN: {} of {n}", seen.events)
            } else {
                String::new()
            },
        });
    }

    // Redis bytes per completed run of 2,000 token events.
    let (k, per) = (50usize, 2_000u64);
    let mem0 = redis.used_memory();
    let tasks: Vec<_> = (0..k)
        .map(|i| {
            let addr = a.addr;
            tokio::spawn(async move {
                stream(
                    addr,
                    &format!("/chat?n={per}&size=4"),
                    &format!("s8-mem-{i}"),
                    false,
                )
                .await
            })
        })
        .collect();
    for t in tasks {
        let _ = t.await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    rows.push(Row {
        scenario: format!("8 journal: Redis bytes per completed run of {per} events"),
        target: "journal",
        figures: vec![("bytes_per_run", (redis.used_memory() - mem0) / k as f64)],
        notes: String::new(),
    });

    // Two loads: one that leaves the machine headroom (a fifth of the streams), then `runs`.
    for k in [(runs / 5).max(1), runs] {
        rows.extend(paced(&redis, [&memory, &a, &b], k, rate, secs).await);
    }
    drop((memory, a, b));
    rows
}

/// `runs` streams at `rate`/s for `secs`: the delivery delay on the memory-only tether, on the
/// producing replica A, and on observers attached to A's runs through replica B.
async fn paced(
    redis: &Redis,
    [memory, a, b]: [&Hop; 3],
    runs: usize,
    rate: u64,
    secs: u64,
) -> Vec<Row> {
    let mut rows = Vec::new();
    let n = rate * secs;
    for (name, hop) in [("memory", &memory), ("journal", &a)] {
        let calls0 = redis.calls();
        let cpu0 = (hop.cpu_seconds(), b.cpu_seconds());
        let sched0 = (Some(hop.sched()), sched::own(), Machine::now());
        let b_sched0 = (Some(b.sched()), sched::own(), Machine::now());
        let redis0 = sched::of(&[redis.child.id()]);
        let tasks: Vec<_> = (0..runs)
            .map(|i| {
                let (addr, chat) = (hop.addr, format!("s8-{runs}-{name}-{i}"));
                let path = format!("/chat?n={n}&size=4&rate={rate}");
                tokio::spawn(async move { stream(addr, &path, &chat, true).await })
            })
            .collect();
        let observers: Vec<_> = if name == "journal" {
            // Attach on B once the runs are under way.
            tokio::time::sleep(Duration::from_secs(1)).await;
            (0..runs)
                .map(|i| {
                    let (addr, chat) = (b.addr, format!("s8-{runs}-{name}-{i}"));
                    tokio::spawn(async move { stream(addr, "/chat/live", &chat, true).await })
                })
                .collect()
        } else {
            Vec::new()
        };
        let mut produced = Vec::new();
        for t in tasks {
            produced.extend(t.await.ok());
        }
        let mut followed = Vec::new();
        for t in observers {
            followed.extend(t.await.ok());
        }
        // A row's delays, losses, CPU and waits for a core, for the observers on `on`.
        let figures_of = |seen: Vec<Seen>, on: &Hop, cpu0: f64, sched0| {
            let lost = seen.iter().filter(|s| s.broken || !s.ended).count();
            let mut d: Vec<u64> = seen.into_iter().flat_map(|s| s.delays).collect();
            d.sort_unstable();
            let mut figures = vec![
                ("delay_p50_us", crate::scenarios::percentile(&d, 0.5)),
                ("delay_p99_us", crate::scenarios::percentile(&d, 0.99)),
                ("cpu_s", on.cpu_seconds() - cpu0),
                ("streams_lost", lost as f64),
            ];
            figures.extend(contention(sched0, Some(on)));
            figures
        };
        let mut figures = figures_of(produced, hop, cpu0.0, sched0);
        if name == "journal" {
            let redis_sched = sched::of(&[redis.child.id()]).since(&redis0);
            figures.push(("redis_runq_wait_ms", redis_sched.waiting_ms()));
            // Redis's own CPU per recorded event (all its threads, its command thread nearly all
            // of it; the target is <= 4 us).
            figures.push(("redis_cpu_s", redis_sched.on_cpu_ns as f64 / 1e9));
            figures.push((
                "redis_cpu_us_per_event",
                redis_sched.on_cpu_ns as f64 / 1e3 / (runs as u64 * n) as f64,
            ));
            figures.push((
                "redis_cmds_per_event",
                (redis.calls() - calls0) / (runs as u64 * n) as f64,
            ));
        }
        rows.push(Row {
            scenario: format!("8 journal: {runs} runs at {rate}/s, producing replica"),
            target: name,
            figures,
            notes: String::new(),
        });
        if name == "journal" {
            rows.push(Row {
                scenario: format!("8 journal: {runs} runs at {rate}/s, observers on B"),
                target: "follower",
                figures: figures_of(followed, b, cpu0.1, b_sched0),
                notes: String::new(),
            });
        }
    }
    rows
}
