//! Scenario 13, steps: the user-space instructions a delivery costs, counted by callgrind
//! (valgrind), so two builds can be compared on a shared, noisy machine: the count is the same
//! run after run, whatever else the machine is doing, where CPU seconds move by 10-15%.
//!
//! Two workloads, each counted as the difference between two runs of the hop under callgrind
//! that differ only in the deliveries, so start-up, connections and shutdown cancel out:
//! - fan-out: one run of [`EVENTS`] token events at [`RATE`] events/s followed live by
//!   [`OBSERVERS`] observers, against the same run with none (tether only: nginx cannot serve one
//!   upstream response to many clients);
//! - one stream a client, as in scenario 3: [`RUNS`] streams of [`LONG`] events against
//!   [`RUNS`] of [`SHORT`], each read by its requester, through tether and through nginx (one
//!   process, `master_process off`, so callgrind sees its one worker).
//!
//! Every producer stream holds its first event until every reader has its response head, so
//! each event reaches every reader separately at the paced rate (no coalescing that would
//! depend on timing). Kernel time, the writes themselves included, is not counted: callgrind
//! sees user space only. Skipped with a note when valgrind is not installed.
//! `LOAD_STEPS_DIR=/path` keeps the callgrind files (`fanout-0`, `fanout-50`,
//! `streams-{true,false}-{50,250}`) for `callgrind_annotate`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::json;

use crate::client::{self, Seen};
use crate::producer::Producer;
use crate::scenarios::{request, Via, TOKEN_PAD};
use crate::targets::{self, Hop};
use crate::Row;

/// Scenario 13's number.
pub const SCENARIO: u32 = 13;

/// Events of the fan-out run.
const EVENTS: u64 = 200;
/// Observers of the fan-out run.
const OBSERVERS: usize = 50;
/// Events a second of every stream: slow enough that the hop keeps up under callgrind.
const RATE: u64 = 20;
/// Streams of the one-stream-a-client workload.
const RUNS: usize = 20;
/// Events of its short and its long streams.
const SHORT: u64 = 50;
const LONG: u64 = 250;

/// How long a hop under callgrind may take to exit after SIGTERM (it writes its counts then).
const EXIT: Duration = Duration::from_secs(120);

/// Scenario 13: instructions a delivery through tether (fan-out and one stream a client) and
/// nginx (one stream a client).
pub(crate) async fn run(bin: &str, p: &Producer) -> Vec<Row> {
    if Command::new("valgrind").arg("--version").output().is_err() {
        return vec![Row {
            scenario: "13 steps".into(),
            target: "tether",
            notes: "skipped: valgrind is not installed".into(),
            ..Row::default()
        }];
    }
    // `LOAD_STEPS_DIR=/path`: keep the callgrind files there (for `callgrind_annotate`).
    let keep = std::env::var_os("LOAD_STEPS_DIR").map(PathBuf::from);
    let dir = keep.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("tether-load-steps-{}", std::process::id()))
    });
    let _ = std::fs::create_dir_all(&dir);
    let mut rows = Vec::new();

    let none = fanout(bin, p, &dir, 0).await;
    let all = fanout(bin, p, &dir, OBSERVERS).await;
    let deliveries = (OBSERVERS as u64 * EVENTS) as f64;
    rows.push(per(
        &format!("13 steps: fan-out, {OBSERVERS} observers"),
        "tether",
        none.zip(all),
        deliveries,
        "instructions_per_delivery",
    ));

    let events = (RUNS as u64 * (LONG - SHORT)) as f64;
    for via in [Via::Tether, Via::Nginx] {
        let short = streams(bin, p, &dir, via, SHORT).await;
        let long = streams(bin, p, &dir, via, LONG).await;
        rows.push(per(
            "13 steps: one stream a client",
            if via == Via::Tether {
                "tether"
            } else {
                "nginx"
            },
            short.zip(long),
            events,
            "instructions_per_event",
        ));
    }
    if keep.is_none() {
        let _ = std::fs::remove_dir_all(&dir);
    }
    rows
}

/// The row of a workload counted as `(without, with)`, per `n` deliveries.
fn per(
    scenario: &str,
    target: &'static str,
    counts: Option<(u64, u64)>,
    n: f64,
    name: &'static str,
) -> Row {
    let Some((without, with)) = counts else {
        return Row {
            scenario: scenario.into(),
            target,
            notes: "BROKEN: a reader lost events, or no counts were written".into(),
            ..Row::default()
        };
    };
    Row {
        scenario: scenario.into(),
        target,
        figures: vec![
            (name, with.saturating_sub(without) as f64 / n),
            ("instructions_without", without as f64),
            ("instructions_with", with as f64),
        ],
        notes: String::new(),
    }
}

/// The callgrind command line that writes its counts to `out`.
fn callgrind(out: &Path) -> Vec<String> {
    vec![
        "valgrind".into(),
        "--quiet".into(),
        "--tool=callgrind".into(),
        format!("--callgrind-out-file={}", out.display()),
    ]
}

/// Total instructions of a hop run under callgrind, once it has exited.
fn total(hop: Hop, out: &Path) -> Option<u64> {
    hop.stop(EXIT);
    let text = std::fs::read_to_string(out).ok()?;
    let line = text.lines().find(|l| l.starts_with("totals:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// A fresh output path under `dir`.
fn out_path(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.callgrind"))
}

/// Reads every response to its end; true when each got `n` events once, in order, and its end.
async fn read_all(conns: Vec<client::Conn>, n: u64) -> bool {
    let tasks: Vec<_> = conns
        .into_iter()
        .map(|mut c| {
            tokio::spawn(async move {
                let mut seen = Seen::default();
                while c.read_some(&mut seen, false).await {}
                seen
            })
        })
        .collect();
    let mut ok = true;
    for t in tasks {
        ok &= matches!(t.await, Ok(s) if !s.broken && s.ended && s.last_i == n);
    }
    ok
}

/// One fan-out run under callgrind with `k` observers: its total instructions.
async fn fanout(bin: &str, p: &Producer, dir: &Path, k: usize) -> Option<u64> {
    let out = out_path(dir, &format!("fanout-{k}"));
    let prefix = callgrind(&out);
    let hop = targets::tether_wrapped(&prefix, bin, &p.addr.to_string(), &[]);
    let chat = format!("s13-fanout-{k}");
    let query = format!("n={EVENTS}&size={TOKEN_PAD}&rate={RATE}&wait=1");
    let (a, path, body) = request(Via::Tether, hop.addr, &chat, &query);
    let mut conns = vec![client::open(a, "POST", &path, &body).await.ok()?];
    let live = json!({"chat_id": chat, "protocol": 1}).to_string();
    for _ in 0..k {
        let c = client::open(hop.addr, "POST", "/chat/live", live.as_bytes()).await;
        conns.push(c.ok().filter(|c| c.status == 200)?);
    }
    p.release();
    let ok = read_all(conns, EVENTS).await;
    let n = total(hop, &out);
    n.filter(|_| ok)
}

/// [`RUNS`] streams of `n` events each through `via` under callgrind: its total instructions.
async fn streams(bin: &str, p: &Producer, dir: &Path, via: Via, n: u64) -> Option<u64> {
    let out = out_path(dir, &format!("streams-{}-{n}", via == Via::Tether));
    let prefix = callgrind(&out);
    let hop = match via {
        Via::Tether => targets::tether_wrapped(&prefix, bin, &p.addr.to_string(), &[]),
        _ => targets::nginx_wrapped(p.addr, &prefix)?,
    };
    let query = format!("n={n}&size={TOKEN_PAD}&rate={RATE}&wait=1");
    let mut conns = Vec::with_capacity(RUNS);
    for i in 0..RUNS {
        let (a, path, body) = request(via, hop.addr, &format!("s13-{n}-{i}"), &query);
        conns.push(
            client::open(a, "POST", &path, &body)
                .await
                .ok()
                .filter(|c| c.status == 200)?,
        );
    }
    p.release();
    let ok = read_all(conns, n).await;
    let n = total(hop, &out);
    n.filter(|_| ok)
}
