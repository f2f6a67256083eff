//! End-to-end load tool: a fast SSE producer, tether in front of it, and the same workloads run
//! straight against the producer and through nginx, in one invocation.
//!
//! `cargo bench --bench load` runs every scenario; `cargo bench --bench load -- --quick` runs
//! shorter ones; `-- --only 1,4` picks scenarios, `-- --only soak` (or 9) the soak, sized by
//! `--soak-secs`, `--soak-rounds` and `--soak-concurrency` (see `soak.rs`), and `-- --only tls`
//! (or 10) TLS against plain (see `tls.rs`), `-- --only fanout` (11) and `-- --only catchup` (12)
//! many readers of one run (see `readers.rs`), `-- --only steps` (13) instructions a delivery
//! under callgrind (see `steps.rs`); `--s3-big N` sets the stream count of scenario 3's
//! second phase (10,000, or 2,000 with `--quick`; 0 skips it).
//! Under `cargo test` (no `--bench` argument) it runs a small smoke check instead. It prints a
//! table and writes `target/load-report.json`.

// The load tool measures wall-clock time against real servers; it has no timer rules to
// pause, so std's Instant is the right clock here.
#![allow(clippy::disallowed_types)]

mod client;
mod dialects;
mod journal;
mod plot;
mod producer;
mod readers;
mod recovery;
mod scenarios;
mod sched;
mod soak;
mod steps;
mod targets;
mod tls;

use std::sync::OnceLock;
use std::time::Instant;

use serde_json::{json, Value};

static EPOCH: OnceLock<Instant> = OnceLock::new();

/// Nanoseconds since the tool started; producer and clients share this clock.
pub fn now_ns() -> u64 {
    EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// One measured line of the report.
#[derive(Debug, Clone, Default)]
pub struct Row {
    pub scenario: String,
    pub target: &'static str,
    pub figures: Vec<(&'static str, f64)>,
    pub notes: String,
}

impl Row {
    pub fn get(&self, k: &str) -> Option<f64> {
        self.figures.iter().find(|(n, _)| *n == k).map(|(_, v)| *v)
    }
}

/// Raises the open-file limit so thousands of connections fit (children inherit it).
fn raise_nofile() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain libc calls on a local struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 {
            let want = 200_000.max(lim.rlim_cur);
            let raised = libc::rlimit {
                rlim_cur: want,
                rlim_max: want.max(lim.rlim_max),
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) != 0 {
                lim.rlim_cur = lim.rlim_max;
                libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
            }
        }
    }
}

fn print(rows: &[Row]) {
    println!("\n{:<34} {:<7} figures", "scenario", "target");
    for r in rows {
        let figs: Vec<String> = r
            .figures
            .iter()
            .map(|(k, v)| format!("{k}={}", fmt(*v)))
            .collect();
        println!(
            "{:<34} {:<7} {}{}",
            r.scenario,
            r.target,
            figs.join("  "),
            if r.notes.is_empty() {
                String::new()
            } else {
                format!("  [{}]", r.notes)
            }
        );
    }
}

fn fmt(v: f64) -> String {
    if v.abs() >= 1000.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}")
    }
}

/// Every figure of each tether/nginx row as a ratio to the same figure of the direct row (and
/// tether's to nginx's, and to one-worker nginx's where scenario 3 ran it) of the same scenario.
fn with_ratios(rows: &[Row]) -> Vec<Value> {
    rows.iter()
        .map(|r| {
            let peer = |t: &str| rows.iter().find(|o| o.scenario == r.scenario && o.target == t);
            let mut figures = serde_json::Map::new();
            for (k, v) in &r.figures {
                let mut f = json!({"value": v});
                for base in ["direct", "nginx", "nginx-1w"] {
                    if base != r.target {
                        if let Some(b) = peer(base).and_then(|p| p.get(k)).filter(|b| *b != 0.0) {
                            f[format!("ratio_to_{base}")] = json!(v / b);
                        }
                    }
                }
                figures.insert(k.to_string(), f);
            }
            json!({"scenario": r.scenario, "target": r.target, "figures": figures, "notes": r.notes})
        })
        .collect()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let bench = args.iter().any(|a| a == "--bench");
    let quick = args.iter().any(|a| a == "--quick");
    let only: Option<Vec<u32>> = args
        .iter()
        .position(|a| a == "--only")
        .and_then(|i| args.get(i + 1))
        .map(|s| {
            s.split(',')
                .filter_map(|n| match n.trim() {
                    "soak" => Some(soak::SCENARIO),
                    "tls" => Some(tls::SCENARIO),
                    "fanout" => Some(readers::FANOUT),
                    "catchup" => Some(readers::CATCH_UP),
                    "steps" => Some(steps::SCENARIO),
                    n => n.parse().ok(),
                })
                .collect()
        });
    let soak_opts = soak::Opts::from_args(&args, quick);
    let s3_big = args
        .iter()
        .position(|a| a == "--s3-big")
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse::<usize>().ok());
    raise_nofile();
    now_ns();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    // `LOAD_TETHER_BIN=/path/to/tether`: measure another build (A/B of two builds in one
    // session without rebuilding between runs).
    let other = std::env::var("LOAD_TETHER_BIN").ok();
    let bin = other.as_deref().unwrap_or(env!("CARGO_BIN_EXE_tether"));
    if !bench {
        println!("load: smoke check (run `cargo bench --bench load` for the full scenarios)");
        let rows = rt.block_on(scenarios::smoke(bin));
        print(&rows);
        return;
    }
    let rows = rt.block_on(scenarios::all(bin, quick, only, s3_big, &soak_opts));
    print(&rows);
    let report = json!({
        "machine": machine(),
        "quick": quick,
        "rows": with_ratios(&rows),
    });
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/load-report.json");
    match std::fs::write(
        &path,
        serde_json::to_string_pretty(&report).unwrap_or_default(),
    ) {
        Ok(()) => println!("\nreport: {}", path.display()),
        Err(e) => eprintln!("cannot write {}: {e}", path.display()),
    }
}

fn machine() -> Value {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_default();
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    json!({"cpu": cpu, "cores": cores})
}
