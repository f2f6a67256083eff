//! The load scenarios (issue text numbering), each run against the direct producer, tether and
//! nginx where it applies, with hops started fresh per scenario so CPU and peak RSS are its own.

use std::net::SocketAddr;
use std::time::Instant;

use serde_json::json;

use crate::client::{self, Seen};
use crate::producer::Producer;
use crate::sched::{self, Machine};
use crate::targets::{self, Hop};
use crate::Row;

/// Bytes of delta padding that make a token event about 90 bytes of JSON.
pub(crate) const TOKEN_PAD: usize = 4;
/// Padding that makes an event about 1 KiB of JSON.
pub(crate) const KIB_PAD: usize = 940;

#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Via {
    Direct,
    Tether,
    Nginx,
    /// nginx with one worker process.
    NginxOne,
}

impl Via {
    fn name(self) -> &'static str {
        match self {
            Via::Direct => "direct",
            Via::Tether => "tether",
            Via::Nginx => "nginx",
            Via::NginxOne => "nginx-1w",
        }
    }
}

/// Where to send a stream request, and what to send.
pub(crate) fn request(
    via: Via,
    addr: SocketAddr,
    chat: &str,
    query: &str,
) -> (SocketAddr, String, Vec<u8>) {
    match via {
        Via::Tether => (
            addr,
            format!("/chat?{query}"),
            json!({"chat_id": chat, "protocol": 1})
                .to_string()
                .into_bytes(),
        ),
        _ => (addr, format!("/stream?{query}"), b"{}".to_vec()),
    }
}

/// One stream, read to its end.
pub(crate) async fn stream(addr: SocketAddr, path: &str, body: &[u8], delays: bool) -> Seen {
    read_response(addr, path, body, delays, Seen::default())
        .await
        .0
}

/// One stream, read to its end into `seen`, and when its response head arrived (when the
/// request failed: when it failed).
pub(crate) async fn read_response(
    addr: SocketAddr,
    path: &str,
    body: &[u8],
    delays: bool,
    mut seen: Seen,
) -> (Seen, Instant) {
    match client::open(addr, "POST", path, body).await {
        Ok(mut c) if c.status == 200 => {
            let head = Instant::now();
            seen.sent = Some(c.sent);
            while c.read_some(&mut seen, delays).await {}
            return (seen, head);
        }
        Ok(c) => {
            seen.broken = true;
            seen.failure = Some(format!("status {}", c.status));
        }
        Err(e) => {
            seen.broken = true;
            seen.failure = Some(e.to_string());
        }
    }
    (seen, Instant::now())
}

pub(crate) fn percentile(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i] as f64 / 1000.0 // microseconds
}

struct Hops {
    tether: Hop,
    nginx: Option<Hop>,
    /// nginx with one worker too (scenario 3's CPU baseline).
    nginx_one: Option<Hop>,
}

fn hops(bin: &str, producer: &Producer) -> Hops {
    let nginx = targets::nginx(producer.addr);
    if nginx.is_none() {
        eprintln!("  nginx is not installed (apt-get install nginx-light): its rows are skipped");
    }
    Hops {
        tether: targets::tether(bin, producer.addr, &[]),
        nginx,
        nginx_one: None,
    }
}

fn vias(h: &Hops) -> Vec<(Via, SocketAddr)> {
    let mut v = vec![
        (Via::Direct, SocketAddr::from(([0, 0, 0, 0], 0))),
        (Via::Tether, h.tether.addr),
    ];
    if let Some(n) = &h.nginx {
        v.push((Via::Nginx, n.addr));
    }
    if let Some(n) = &h.nginx_one {
        v.push((Via::NginxOne, n.addr));
    }
    v
}

fn hop(h: &Hops, via: Via) -> Option<&Hop> {
    match via {
        Via::Tether => Some(&h.tether),
        Via::Nginx => h.nginx.as_ref(),
        Via::NginxOne => h.nginx_one.as_ref(),
        Via::Direct => None,
    }
}

/// Scenario 1: one stream at full speed.
async fn full_speed(bin: &str, p: &Producer, n: u64, pad: usize, label: &str) -> Vec<Row> {
    let h = hops(bin, p);
    let mut rows = Vec::new();
    for (via, addr) in vias(&h) {
        let addr = if via == Via::Direct { p.addr } else { addr };
        let mut best: Option<(f64, Seen, f64)> = None;
        for k in 0..3 {
            let cpu0 = hop(&h, via).map_or(0.0, Hop::cpu_seconds);
            let (a, path, body) = request(
                via,
                addr,
                &format!("s1-{label}-{k}"),
                &format!("n={n}&size={pad}"),
            );
            let t = Instant::now();
            let seen = stream(a, &path, &body, false).await;
            let secs = t.elapsed().as_secs_f64();
            let cpu = hop(&h, via).map_or(0.0, Hop::cpu_seconds) - cpu0;
            if best.as_ref().is_none_or(|(b, _, _)| secs < *b) {
                best = Some((secs, seen, cpu));
            }
        }
        let (secs, seen, cpu) = best.unwrap_or_default();
        let event_bytes = (pad + 86) as f64;
        rows.push(Row {
            scenario: format!("1 full speed {label}"),
            target: via.name(),
            figures: vec![
                ("events_per_s", seen.events as f64 / secs),
                (
                    "mib_per_s",
                    seen.events as f64 * event_bytes / secs / 1048576.0,
                ),
                ("seconds", secs),
                ("cpu_s", cpu),
                ("peak_rss_mib", hop(&h, via).map_or(0.0, Hop::peak_rss_mib)),
            ],
            notes: format!("{}{}", check(&seen, n), resets(&seen)),
        });
    }
    rows
}

fn resets(seen: &Seen) -> String {
    if seen.resets > 0 {
        format!("{} slow-reader resets", seen.resets)
    } else {
        String::new()
    }
}

fn check(seen: &Seen, n: u64) -> String {
    // A reset snapshot may also cover RUN_FINISHED (seq n + 1).
    if seen.broken || seen.events < n || seen.last_i < n {
        format!(
            "BROKEN: {} of {n} events, last {}, resets {}, ended {}",
            seen.events, seen.last_i, seen.resets, seen.ended
        )
    } else {
        String::new()
    }
}

/// Scenario 2: one stream paced at `rate` for `secs`: the delay each hop adds.
async fn paced(bin: &str, p: &Producer, rate: u64, secs: u64) -> Vec<Row> {
    let h = hops(bin, p);
    let n = rate * secs;
    let mut rows = Vec::new();
    for (via, addr) in vias(&h) {
        let addr = if via == Via::Direct { p.addr } else { addr };
        let cpu0 = hop(&h, via).map_or(0.0, Hop::cpu_seconds);
        let (a, path, body) = request(
            via,
            addr,
            "s2",
            &format!("n={n}&size={TOKEN_PAD}&rate={rate}"),
        );
        let mut seen = stream(a, &path, &body, true).await;
        seen.delays.sort_unstable();
        rows.push(Row {
            scenario: format!("2 paced {rate}/s for {secs}s"),
            target: via.name(),
            figures: vec![
                ("delay_p50_us", percentile(&seen.delays, 0.5)),
                ("delay_p99_us", percentile(&seen.delays, 0.99)),
                ("delay_p999_us", percentile(&seen.delays, 0.999)),
                ("cpu_s", hop(&h, via).map_or(0.0, Hop::cpu_seconds) - cpu0),
            ],
            notes: check(&seen, n),
        });
    }
    added(&mut rows);
    rows
}

/// Adds `added_*` figures: each hop's delay percentiles minus the direct ones.
fn added(rows: &mut [Row]) {
    let Some(direct) = rows.iter().find(|r| r.target == "direct").cloned() else {
        return;
    };
    for r in rows.iter_mut().filter(|r| r.target != "direct") {
        for (k, name) in [
            ("delay_p50_us", "added_p50_us"),
            ("delay_p99_us", "added_p99_us"),
            ("delay_p999_us", "added_p999_us"),
        ] {
            if let (Some(v), Some(d)) = (r.get(k), direct.get(k)) {
                r.figures.push((name, v - d));
            }
        }
    }
}

/// Scenario 3: `runs` concurrent streams at `rate` events/s for `secs`, one observer each.
async fn concurrent(bin: &str, p: &Producer, runs: usize, rate: u64, secs: u64) -> Vec<Row> {
    let mut h = hops(bin, p);
    // The CPU target compares against one nginx worker; measured at 1,000 runs only.
    if runs <= 1_000 && h.nginx.is_some() {
        h.nginx_one = targets::nginx_one_worker(p.addr);
    }
    let n = rate * secs;
    let mut rows = Vec::new();
    for (via, addr) in vias(&h) {
        let addr = if via == Via::Direct { p.addr } else { addr };
        let cpu0 = hop(&h, via).map_or(0.0, Hop::cpu_seconds);
        let sched0 = (hop(&h, via).map(Hop::sched), sched::own(), Machine::now());
        let t = Instant::now();
        // Sample tether's recorded bytes while the streams run, for the peak.
        let admin = if via == Via::Tether {
            h.tether.admin
        } else {
            None
        };
        let (stop_tx, mut stop_rx) = tokio::sync::watch::channel(false);
        let sampler = tokio::spawn(async move {
            let mut peak: f64 = 0.0;
            loop {
                peak = peak.max(metric(admin, "tether_recorded_bytes").await);
                tokio::select! {
                    _ = tokio::time::sleep(std::time::Duration::from_millis(250)) => {}
                    _ = stop_rx.changed() => return peak,
                }
            }
        });
        let tasks: Vec<_> = (0..runs)
            .map(|k| {
                let (a, path, body) = request(
                    via,
                    addr,
                    &format!("s3-{k}"),
                    &format!("n={n}&size={TOKEN_PAD}&rate={rate}"),
                );
                tokio::spawn(async move { stream(a, &path, &body, true).await })
            })
            .collect();
        let mut delays = Vec::with_capacity(runs * n as usize);
        let mut lost = 0;
        let mut why = std::collections::BTreeMap::<String, usize>::new();
        for task in tasks {
            match task.await {
                Ok(mut s) => {
                    if !check(&s, n).is_empty() {
                        lost += 1;
                        let reason = s
                            .failure
                            .clone()
                            .unwrap_or_else(|| format!("truncated at {} of {n}", s.events));
                        *why.entry(reason).or_default() += 1;
                    }
                    delays.append(&mut s.delays);
                }
                Err(_) => lost += 1,
            }
        }
        let wall = t.elapsed().as_secs_f64();
        let _ = stop_tx.send(true);
        let peak_recorded = sampler.await.unwrap_or(0.0);
        delays.sort_unstable();
        let mut figures = vec![
            ("cpu_s", hop(&h, via).map_or(0.0, Hop::cpu_seconds) - cpu0),
            (
                "cpu_share_of_one_core",
                (hop(&h, via).map_or(0.0, Hop::cpu_seconds) - cpu0) / wall,
            ),
            ("peak_rss_mib", hop(&h, via).map_or(0.0, Hop::peak_rss_mib)),
            ("delay_p50_us", percentile(&delays, 0.5)),
            ("delay_p99_us", percentile(&delays, 0.99)),
            ("delay_p999_us", percentile(&delays, 0.999)),
            ("streams_lost", lost as f64),
        ];
        if via == Via::Tether {
            figures.push(("peak_recorded_mib", peak_recorded / 1048576.0));
        }
        figures.extend(contention(sched0, hop(&h, via)));
        rows.push(Row {
            scenario: format!("3 {runs} runs at {rate}/s for {secs}s"),
            target: via.name(),
            figures,
            notes: if lost > 0 {
                format!("BROKEN: {lost} streams lost or truncated: {why:?}")
            } else {
                String::new()
            },
        });
    }
    rows
}

/// What a phase started from: the hop's and the tool's scheduler totals and the machine's.
pub(crate) type SchedStart = (Option<sched::Sample>, sched::Sample, Machine);

/// How much a phase waited for CPUs since `start`: the hop's threads (`runq_wait_ms`, when
/// there is a hop), the load tool's own, whose clients time the deliveries
/// (`tool_runq_wait_ms`, with its CPU time `tool_cpu_s`: a tool short of CPU reads late and
/// counts its own backlog as delivery delay), and how busy the whole machine was
/// (`machine_busy_pct`).
pub(crate) fn contention(start: SchedStart, hop: Option<&Hop>) -> Vec<(&'static str, f64)> {
    let (hop0, own0, machine0) = start;
    let mut out = Vec::new();
    if let (Some(h), Some(h0)) = (hop, hop0) {
        out.push(("runq_wait_ms", h.sched().since(&h0).waiting_ms()));
    }
    let tool = sched::own().since(&own0);
    out.push(("tool_cpu_s", tool.on_cpu_ns as f64 / 1e9));
    out.push(("tool_runq_wait_ms", tool.waiting_ms()));
    out.push(("machine_busy_pct", Machine::now().busy_pct_since(machine0)));
    out
}

/// One sample of tether's Prometheus text.
pub(crate) async fn metric(admin: Option<SocketAddr>, name: &str) -> f64 {
    let Some(admin) = admin else { return 0.0 };
    let Ok(mut c) = client::open(admin, "GET", "/metrics", b"").await else {
        return 0.0;
    };
    let text = c.read_raw_to_end().await;
    String::from_utf8_lossy(&text)
        .lines()
        .find_map(|l| l.strip_prefix(name).and_then(|v| v.strip_prefix(' ')))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

/// Appends finished rows and shows them at once (a full run takes minutes).
pub(crate) fn add(rows: &mut Vec<Row>, new: Vec<Row>) {
    for r in &new {
        let figs: Vec<String> = r
            .figures
            .iter()
            .map(|(k, v)| format!("{k}={v:.3}"))
            .collect();
        eprintln!(
            "  {} / {}: {} {}",
            r.scenario,
            r.target,
            figs.join(" "),
            r.notes
        );
    }
    rows.extend(new);
}

/// Every scenario; `quick` shortens them.
pub async fn all(
    bin: &str,
    quick: bool,
    only: Option<Vec<u32>>,
    s3_big: Option<usize>,
    soak: &crate::soak::Opts,
) -> Vec<Row> {
    let p = Producer::start().await;
    let want = |k: u32| only.as_ref().is_none_or(|o| o.contains(&k));
    let mut rows = Vec::new();
    let (secs3, runs_big) = if quick { (4, 2_000) } else { (20, 10_000) };
    let runs_big = s3_big.unwrap_or(runs_big);
    if want(1) {
        add(
            &mut rows,
            full_speed(bin, &p, 100_000, TOKEN_PAD, "100k tokens").await,
        );
        add(
            &mut rows,
            full_speed(bin, &p, 10_000, KIB_PAD, "10k x 1KiB").await,
        );
    }
    if want(2) {
        add(&mut rows, paced(bin, &p, 50_000, 2).await);
    }
    if want(3) {
        add(&mut rows, concurrent(bin, &p, 1_000, 20, secs3).await);
        if runs_big > 0 {
            add(&mut rows, concurrent(bin, &p, runs_big, 10, secs3).await);
        }
    }
    if want(4) {
        add(
            &mut rows,
            crate::recovery::resume(bin, &p, 1_000, 2_000).await,
        );
        add(
            &mut rows,
            crate::recovery::resume(bin, &p, 10_000, 10_000).await,
        );
    }
    if want(5) {
        add(&mut rows, crate::recovery::storm(bin, &p, 1_000, 10).await);
    }
    if want(6) {
        add(&mut rows, crate::recovery::cold(bin, &p, 100_000).await);
    }
    if want(7) {
        add(
            &mut rows,
            crate::dialects::resume_first_byte(bin, &p, 1_000).await,
        );
        add(
            &mut rows,
            crate::dialects::resume_first_byte(bin, &p, 10_000).await,
        );
    }
    if want(8) {
        add(
            &mut rows,
            crate::journal::journal(bin, &p, 1_000, 20, secs3).await,
        );
    }
    if want(crate::soak::SCENARIO) {
        add(&mut rows, crate::soak::run(bin, &p, soak).await);
    }
    if want(crate::tls::SCENARIO) {
        add(&mut rows, crate::tls::run(bin, &p, quick).await);
    }
    if want(crate::readers::FANOUT) {
        let secs = if quick { 4 } else { 10 };
        add(
            &mut rows,
            crate::readers::fanout(bin, &p, &[1, 10, 100, 1_000], secs).await,
        );
    }
    if want(crate::readers::CATCH_UP) {
        add(
            &mut rows,
            crate::readers::catch_up(bin, &p, 1_000, &[200, 2_000]).await,
        );
    }
    if want(crate::steps::SCENARIO) {
        add(&mut rows, crate::steps::run(bin, &p).await);
    }
    rows
}

/// A fast check that the tool and tether work end to end (run under `cargo test`).
pub async fn smoke(bin: &str) -> Vec<Row> {
    let p = Producer::start().await;
    let tether = targets::tether(bin, p.addr, &[]);
    let n = 2_000;
    let (a, path, body) = request(
        Via::Tether,
        tether.addr,
        "smoke",
        &format!("n={n}&size={TOKEN_PAD}"),
    );
    let t = Instant::now();
    let seen = stream(a, &path, &body, true).await;
    assert!(
        !seen.broken && seen.events == n && seen.ended,
        "smoke stream: {} of {n}",
        seen.events
    );
    let mut rows = vec![Row {
        scenario: "smoke".into(),
        target: "tether",
        figures: vec![("events_per_s", n as f64 / t.elapsed().as_secs_f64())],
        notes: "exactly once".into(),
    }];
    // Scenario 12's path, small: ten clients read a completed run from cursor 0 at once.
    let catch_up = crate::readers::catch_up(bin, &p, 10, &[50]).await;
    for r in &catch_up {
        assert!(
            r.get("clients_complete").is_some() && !r.notes.contains("BROKEN"),
            "smoke catch-up: {} {}",
            r.scenario,
            r.notes
        );
    }
    rows.extend(catch_up);
    rows
}
