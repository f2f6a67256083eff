//! The soak (scenario 7, `--only soak`): runs start and end continuously at 500 concurrent, in
//! rounds; clients drop at random points and resume through `/chat/live` with their cursor.
//! tether's RSS, open file descriptors and threads are read from /proc once a second. After each
//! round the load stops until every run has ended and the retention has passed, and RSS is read
//! again; after the last round the tool checks that recorded bytes, descriptors and threads came
//! back and that RSS plateaus, prints PASS/FAIL lines and plots the samples to
//! `target/soak-rss.svg`.
//!
//! `--soak-secs N` (seconds of load in all, split over the rounds), `--soak-rounds R`,
//! `--soak-concurrency C`; the whole scenario stays under ten minutes.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;

use crate::client::{self, Seen};
use crate::plot;
use crate::producer::Producer;
use crate::scenarios::{metric, request, Via};
use crate::targets;
use crate::Row;

/// The scenario's number for `--only` (`--only soak` names it too).
pub const SCENARIO: u32 = 9;

/// Completed runs are kept this long (tether's `--retention`).
const RETENTION: Duration = Duration::from_secs(5);
/// tether closes pooled backend connections after this much idleness (`POOL_IDLE` in
/// `src/backend.rs`); descriptors can only come back after it.
const POOL_IDLE: Duration = Duration::from_secs(60);
/// The longest run: 240 events at 20 events/s.
const LONGEST_RUN: Duration = Duration::from_secs(12);
/// A stream that delivers nothing for this long has stalled (events come every 50 ms).
const STALL: Duration = Duration::from_secs(10);
/// The whole scenario stays under this.
const BUDGET: Duration = Duration::from_secs(600);

/// How long and how wide the soak is.
#[derive(Debug, Clone)]
pub struct Opts {
    pub concurrency: usize,
    pub rounds: usize,
    pub round_secs: u64,
}

impl Opts {
    /// From `--soak-secs`, `--soak-rounds` and `--soak-concurrency`, bounded so the scenario
    /// (load, the waits after each round and the final wait for pooled connections) stays under
    /// ten minutes.
    pub fn from_args(args: &[String], quick: bool) -> Opts {
        let num = |name: &str| {
            args.iter()
                .position(|a| a == name)
                .and_then(|i| args.get(i + 1))
                .and_then(|v| v.parse::<u64>().ok())
        };
        let rounds = num("--soak-rounds").unwrap_or(4).clamp(3, 12) as usize;
        let secs = num("--soak-secs").unwrap_or(if quick { 40 } else { 120 });
        // Per round besides the load: the last runs finishing, the retention, a sweep, slack.
        let per_round_wait = LONGEST_RUN + RETENTION + Duration::from_secs(4);
        let fixed = POOL_IDLE + Duration::from_secs(20) + per_round_wait * rounds as u32;
        let max_load = BUDGET.saturating_sub(fixed).as_secs();
        let secs = secs.min(max_load);
        Opts {
            concurrency: num("--soak-concurrency").unwrap_or(500).max(1) as usize,
            rounds,
            round_secs: (secs / rounds as u64).max(1),
        }
    }
}

/// What /proc says about a process.
#[derive(Debug, Clone, Copy, Default)]
pub struct ProcStat {
    pub rss_mib: f64,
    pub threads: u64,
    pub fds: u64,
}

/// RSS (VmRSS), threads (tasks) and open descriptors of `pid`.
pub fn proc_stat(pid: u32) -> ProcStat {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count() as u64);
    ProcStat {
        rss_mib: field("VmRSS:") as f64 / 1024.0,
        threads: field("Threads:"),
        fds,
    }
}

/// One second's sample.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    /// Seconds since the soak started.
    pub t: f64,
    pub stat: ProcStat,
    pub recorded_mib: f64,
    /// Clients were running when sampled.
    pub load: bool,
}

/// Outcomes of the streams, all slots together.
#[derive(Default)]
struct Tally {
    runs: AtomicU64,
    complete: AtomicU64,
    disconnects: AtomicU64,
    resumed: AtomicU64,
    abandoned: AtomicU64,
    lost: AtomicU64,
    why: Mutex<BTreeMap<String, u64>>,
}

impl Tally {
    fn lose(&self, why: String) {
        self.lost.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut w) = self.why.lock() {
            *w.entry(why).or_default() += 1;
        }
    }
}

/// One client slot: runs one turn after another on its chat until `until`.
async fn slot(addr: SocketAddr, chat: String, until: Instant, seed: u64, tally: Arc<Tally>) {
    let mut rng = StdRng::seed_from_u64(seed);
    // Stagger the first starts over two seconds: runs start continuously, not in waves.
    tokio::time::sleep(Duration::from_millis(rng.gen_range(0..2000))).await;
    while Instant::now() < until {
        // Bounded: a stream that stalls counts as lost instead of stalling the soak.
        let limit = LONGEST_RUN * 3;
        let mut at = Stage::default();
        match tokio::time::timeout(limit, turn(addr, &chat, &mut rng, &tally, &mut at)).await {
            Ok(Ok(())) => {}
            Ok(Err(why)) => {
                tally.lose(why);
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(_) => tally.lose(format!(
                "no end within {limit:?} while {} ({} of {})",
                at.doing, at.last_i, at.n
            )),
        }
    }
}

/// Where a turn is, for the report when it stalls.
#[derive(Default)]
struct Stage {
    doing: &'static str,
    n: u64,
    last_i: u64,
}

/// One run: starts it and reads it, dropping and resuming at a random point half the time
/// (never coming back one time in ten of those). `Err` says why the stream was lost.
async fn turn(
    addr: SocketAddr,
    chat: &str,
    rng: &mut StdRng,
    tally: &Tally,
    at: &mut Stage,
) -> Result<(), String> {
    let n: u64 = rng.gen_range(40..=240);
    at.n = n;
    at.doing = "starting";
    let size: usize = rng.gen_range(4..=200);
    let (a, path, body) = request(
        Via::Tether,
        addr,
        chat,
        &format!("n={n}&size={size}&rate=20"),
    );
    let mut c = match client::open(a, "POST", &path, &body).await {
        Ok(c) if c.status == 200 => c,
        Ok(c) => return Err(format!("status {}", c.status)),
        Err(e) => return Err(e.to_string()),
    };
    tally.runs.fetch_add(1, Ordering::Relaxed);
    let mut seen = Seen::default();
    if rng.gen_bool(0.5) {
        let cut = rng.gen_range(1..n);
        at.doing = "reading to the cut";
        c.read_until(&mut seen, false, |s| s.last_i >= cut).await;
        at.last_i = seen.last_i;
        drop(c);
        tally.disconnects.fetch_add(1, Ordering::Relaxed);
        if rng.gen_bool(0.1) {
            // Gone for good: the run goes on recording without an observer.
            tally.abandoned.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(rng.gen_range(0..2000))).await;
        let body = json!({
            "chat_id": chat,
            "protocol": 1,
            "run_id": seen.run_id.clone().unwrap_or_default(),
            "after_seq": seen.last_i,
        })
        .to_string();
        at.doing = "resuming";
        match client::open(addr, "POST", "/chat/live", body.as_bytes()).await {
            Ok(mut c) if c.status == 200 => {
                tally.resumed.fetch_add(1, Ordering::Relaxed);
                seen.ended = false;
                at.doing = "reading the resumed stream";
                loop {
                    match tokio::time::timeout(STALL, c.read_some(&mut seen, false)).await {
                        Ok(true) => at.last_i = seen.last_i,
                        Ok(false) => break,
                        Err(_) => {
                            return Err(format!(
                                "resumed stream stalled at {} of {n} ({} bytes): {}",
                                seen.last_i,
                                seen.bytes,
                                c.pending()
                            ))
                        }
                    }
                }
            }
            Ok(c) => return Err(format!("resume status {}", c.status)),
            Err(e) => return Err(format!("resume: {e}")),
        }
    } else {
        at.doing = "reading";
        while c.read_some(&mut seen, false).await {
            at.last_i = seen.last_i;
        }
    }
    if seen.broken {
        Err("out of order or repeated".to_string())
    } else if seen.last_i < n || !seen.ended {
        Err(format!(
            "truncated ({} of {n}, ended {})",
            seen.last_i, seen.ended
        ))
    } else {
        tally.complete.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

/// Polls tether's metric `name` until it is 0 or `limit` passes; returns the last value.
async fn until_zero(admin: Option<SocketAddr>, name: &str, limit: Duration) -> f64 {
    let t = Instant::now();
    loop {
        let v = metric(admin, name).await;
        if v == 0.0 || t.elapsed() >= limit {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

fn verdict(ok: bool) -> &'static str {
    if ok {
        "PASS"
    } else {
        "FAIL"
    }
}

fn leak(s: String) -> &'static str {
    Box::leak(s.into_boxed_str())
}

/// Runs the soak against a fresh tether with a 5 s retention.
pub async fn run(bin: &str, p: &Producer, o: &Opts) -> Vec<Row> {
    let retention = format!("{}s", RETENTION.as_secs());
    // Every slot's chat is kept (no capacity eviction at the default 64 chats): retention alone
    // frees the runs.
    let tether = targets::tether(
        bin,
        p.addr,
        &["--retention", &retention, "--max-chats", "100000"],
    );
    let (pid, admin, addr) = (tether.pid(), tether.admin, tether.addr);
    eprintln!(
        "  soak: {} rounds of {} s at {} concurrent runs, retention {retention}",
        o.rounds, o.round_secs, o.concurrency
    );
    // Let the process settle (runtime threads, listeners) before the baseline.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut base = proc_stat(pid);
    // Pingora starts its timer thread on the first proxied request and keeps it: one turn
    // before the baseline of threads (descriptors are counted before it).
    let (a, path, body) = request(Via::Tether, addr, "soak-warm-up", "n=5&size=4");
    if let Ok(mut c) = client::open(a, "POST", &path, &body).await {
        while c.read_some(&mut Seen::default(), false).await {}
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    base.threads = proc_stat(pid).threads;
    let start = Instant::now();
    let samples = Arc::new(Mutex::new(Vec::<Sample>::new()));
    let load = Arc::new(AtomicU8::new(0));
    let (stop_tx, mut stop_rx) = tokio::sync::watch::channel(false);
    let sampler = {
        let (samples, load) = (samples.clone(), load.clone());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = stop_rx.changed() => return,
                }
                let s = Sample {
                    t: start.elapsed().as_secs_f64(),
                    stat: proc_stat(pid),
                    recorded_mib: metric(admin, "tether_recorded_bytes").await / 1048576.0,
                    load: load.load(Ordering::Relaxed) == 1,
                };
                if let Ok(mut v) = samples.lock() {
                    v.push(s);
                }
            }
        })
    };
    let tally = Arc::new(Tally::default());
    let cpu0 = tether.cpu_seconds();
    let mut after = Vec::new();
    let mut marks = Vec::new();
    let mut recorded_after = 0.0;
    // The final wait for pooled connections comes after the rounds; stop early rather than run
    // past the budget when rounds take longer than planned (a saturated machine).
    let last_start = BUDGET.saturating_sub(POOL_IDLE + Duration::from_secs(15));
    let round_wait = LONGEST_RUN * 3 + Duration::from_secs(o.round_secs) + RETENTION * 2;
    for round in 0..o.rounds {
        if start.elapsed() + round_wait > last_start {
            eprintln!("  soak: stopping after {round} rounds to stay within {BUDGET:?}");
            break;
        }
        load.store(1, Ordering::Relaxed);
        let until = Instant::now() + Duration::from_secs(o.round_secs);
        let slots: Vec<_> = (0..o.concurrency)
            .map(|k| {
                let seed = (round * o.concurrency + k) as u64;
                tokio::spawn(slot(addr, format!("soak-{k}"), until, seed, tally.clone()))
            })
            .collect();
        for s in slots {
            let _ = s.await;
        }
        load.store(0, Ordering::Relaxed);
        // Abandoned runs still record until their producer ends; then the retention, a sweep
        // (every retention / 4) and slack.
        until_zero(
            admin,
            "tether_runs_active",
            LONGEST_RUN + Duration::from_secs(10),
        )
        .await;
        tokio::time::sleep(RETENTION + RETENTION / 4 + Duration::from_secs(2)).await;
        recorded_after = metric(admin, "tether_recorded_bytes").await;
        let st = proc_stat(pid);
        eprintln!(
            "  soak round {}: {} runs so far; after retention RSS {:.1} MiB, recorded {} B, fds {}, threads {}",
            round + 1,
            tally.runs.load(Ordering::Relaxed),
            st.rss_mib,
            recorded_after,
            st.fds,
            st.threads
        );
        marks.push((start.elapsed().as_secs_f64(), format!("R{}", round + 1)));
        after.push(st.rss_mib);
    }
    let cpu = tether.cpu_seconds() - cpu0;
    let runs_active = metric(admin, "tether_runs_active").await;
    let observers = until_zero(admin, "tether_observers_active", Duration::from_secs(5)).await;
    // Pooled backend connections close after POOL_IDLE; wait for descriptors and threads.
    let t = Instant::now();
    let mut end = proc_stat(pid);
    while (end.fds > base.fds || end.threads > base.threads)
        && t.elapsed() < POOL_IDLE + Duration::from_secs(15)
    {
        tokio::time::sleep(Duration::from_secs(1)).await;
        end = proc_stat(pid);
    }
    let settle = t.elapsed().as_secs_f64();
    let _ = stop_tx.send(true);
    let _ = sampler.await;
    let samples = samples.lock().map(|v| v.clone()).unwrap_or_default();
    let peak = samples.iter().map(|s| s.stat.rss_mib).fold(0.0, f64::max);
    let peak_recorded = samples.iter().map(|s| s.recorded_mib).fold(0.0, f64::max);

    // The checks.
    let round2 = after.get(1).copied().unwrap_or(0.0);
    let plateau_worst = after
        .iter()
        .skip(1)
        .map(|r| (r / round2 - 1.0).abs())
        .fold(0.0, f64::max);
    let near_base = after.iter().skip(1).all(|r| *r <= base.rss_mib * 1.5 + 8.0);
    let lost = tally.lost.load(Ordering::Relaxed);
    let checks = [
        (
            recorded_after == 0.0,
            format!("tether_recorded_bytes after the load and the retention: {recorded_after} (want 0)"),
        ),
        (
            runs_active == 0.0 && observers == 0.0,
            format!("runs active {runs_active}, observers active {observers} (want 0, 0)"),
        ),
        (
            end.fds <= base.fds,
            format!(
                "open fds {} before the load, {} after ({settle:.0} s after the last round; pooled backend connections close after {} s idle)",
                base.fds,
                end.fds,
                POOL_IDLE.as_secs()
            ),
        ),
        (
            end.threads <= base.threads,
            format!(
                "threads (tasks in /proc) {} before the load (after one warm-up turn), {} after",
                base.threads, end.threads
            ),
        ),
        (
            plateau_worst <= 0.10 || near_base,
            format!(
                "RSS plateau: after each round's retention {} MiB (before the load {:.1}); rounds 2+ within {:.1}% of round 2's{}",
                after.iter().map(|r| format!("{r:.1}")).collect::<Vec<_>>().join(", "),
                base.rss_mib,
                plateau_worst * 100.0,
                if near_base { ", and near the baseline" } else { "" }
            ),
        ),
        (
            lost == 0,
            format!(
                "streams: {} runs, {} read to the end exactly once, {} dropped and {} resumed, {} abandoned, {lost} lost {:?}",
                tally.runs.load(Ordering::Relaxed),
                tally.complete.load(Ordering::Relaxed),
                tally.disconnects.load(Ordering::Relaxed),
                tally.resumed.load(Ordering::Relaxed),
                tally.abandoned.load(Ordering::Relaxed),
                tally.why.lock().map(|w| w.clone()).unwrap_or_default()
            ),
        ),
    ];
    for (ok, line) in &checks {
        println!("soak {}: {line}", verdict(*ok));
    }

    let title = format!(
        "tether soak: {} rounds × {} s at {} concurrent runs, retention {retention}",
        o.rounds, o.round_secs, o.concurrency
    );
    let svg = plot::svg(&samples, &marks, &title);
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/soak-rss.svg");
    match std::fs::write(&path, svg) {
        Ok(()) => println!("soak plot: {}", path.display()),
        Err(e) => eprintln!("cannot write {}: {e}", path.display()),
    }

    let mut figures = vec![
        ("rounds", o.rounds as f64),
        ("round_secs", o.round_secs as f64),
        ("concurrency", o.concurrency as f64),
        ("runs", tally.runs.load(Ordering::Relaxed) as f64),
        ("streams_lost", lost as f64),
        ("cpu_s", cpu),
        ("rss_before_mib", base.rss_mib),
        ("peak_rss_mib", peak),
        ("peak_recorded_mib", peak_recorded),
    ];
    for (k, r) in after.iter().enumerate() {
        figures.push((leak(format!("rss_after_round_{}_mib", k + 1)), *r));
    }
    figures.extend([
        ("rss_end_mib", end.rss_mib),
        ("plateau_worst_vs_round_2", plateau_worst),
        ("recorded_bytes_after", recorded_after),
        ("fds_before", base.fds as f64),
        ("fds_after", end.fds as f64),
        ("threads_before", base.threads as f64),
        ("threads_after", end.threads as f64),
    ]);
    let failed: Vec<&str> = checks
        .iter()
        .zip([
            "recorded bytes",
            "runs/observers",
            "fds",
            "threads",
            "RSS plateau",
            "streams",
        ])
        .filter(|((ok, _), _)| !ok)
        .map(|(_, name)| name)
        .collect();
    vec![Row {
        scenario: format!(
            "{SCENARIO} soak {}x{}s at {}",
            o.rounds, o.round_secs, o.concurrency
        ),
        target: "tether",
        figures,
        notes: if failed.is_empty() {
            "all checks PASS".into()
        } else {
            format!("FAIL: {}", failed.join(", "))
        },
    }]
}
