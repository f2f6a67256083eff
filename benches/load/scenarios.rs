//! The load scenarios (issue text numbering), each run against the direct producer, tether and
//! nginx where it applies, with hops started fresh per scenario so CPU and peak RSS are its own.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::Instant;

use serde_json::json;

use crate::client::{self, Seen};
use crate::producer::Producer;
use crate::targets::{self, Hop};
use crate::Row;

/// Bytes of delta padding that make a token event about 90 bytes of JSON.
const TOKEN_PAD: usize = 4;
/// Padding that makes an event about 1 KiB of JSON.
const KIB_PAD: usize = 940;

#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Via {
    Direct,
    Tether,
    Nginx,
}

impl Via {
    fn name(self) -> &'static str {
        match self {
            Via::Direct => "direct",
            Via::Tether => "tether",
            Via::Nginx => "nginx",
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
    let mut seen = Seen::default();
    match client::open(addr, "POST", path, body).await {
        Ok(mut c) if c.status == 200 => while c.read_some(&mut seen, delays).await {},
        Ok(c) => {
            seen.broken = true;
            seen.failure = Some(format!("status {}", c.status));
        }
        Err(e) => {
            seen.broken = true;
            seen.failure = Some(e.to_string());
        }
    }
    seen
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
}

fn hops(bin: &str, producer: &Producer) -> Hops {
    let nginx = targets::nginx(producer.addr);
    if nginx.is_none() {
        eprintln!("  nginx is not installed (apt-get install nginx-light): its rows are skipped");
    }
    Hops {
        tether: targets::tether(bin, producer.addr, &[]),
        nginx,
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
    v
}

fn hop(h: &Hops, via: Via) -> Option<&Hop> {
    match via {
        Via::Tether => Some(&h.tether),
        Via::Nginx => h.nginx.as_ref(),
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
    let h = hops(bin, p);
    let n = rate * secs;
    let mut rows = Vec::new();
    for (via, addr) in vias(&h) {
        let addr = if via == Via::Direct { p.addr } else { addr };
        let cpu0 = hop(&h, via).map_or(0.0, Hop::cpu_seconds);
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

/// Scenario 4: read half of a live run, drop, reconnect with the cursor.
async fn resume(bin: &str, p: &Producer, n: u64, rate: u64) -> Vec<Row> {
    let tether = targets::tether(bin, p.addr, &[]);
    let chat = format!("s4-{n}");
    let (a, path, body) = request(
        Via::Tether,
        tether.addr,
        &chat,
        &format!("n={n}&size={TOKEN_PAD}&rate={rate}"),
    );
    let mut seen = Seen::default();
    let Ok(mut c) = client::open(a, "POST", &path, &body).await else {
        return vec![Row {
            scenario: format!("4 resume {n}"),
            target: "tether",
            notes: "BROKEN: no stream".into(),
            ..Row::default()
        }];
    };
    c.read_until(&mut seen, false, |s| s.last_i >= n / 2).await;
    let cursor = seen.last_i;
    let run_id = seen.run_id.clone().unwrap_or_default();
    let sent_before = p.sent.load(Ordering::Relaxed) - seen.last_i;
    drop(c);
    // A reconnect backoff, while the run goes on: the events of this gap are what is missing.
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    let t = Instant::now();
    let body =
        json!({"chat_id": chat, "protocol": 1, "run_id": run_id, "after_seq": cursor}).to_string();
    let mut again = Seen {
        last_i: cursor,
        ..Seen::default()
    };
    let mut to_last_missing = None;
    // The newest event the producer had written when the client reconnected.
    let missing_upto = (p.sent.load(Ordering::Relaxed) - sent_before)
        .min(n)
        .max(cursor);
    if let Ok(mut c) = client::open(tether.addr, "POST", "/chat/live", body.as_bytes()).await {
        while c.read_some(&mut again, false).await {
            if to_last_missing.is_none() && again.last_i >= missing_upto {
                to_last_missing = Some(t.elapsed());
            }
        }
    }
    let first = again
        .first_byte
        .map_or(f64::NAN, |f| (f - t).as_secs_f64() * 1e3);
    let ok = !again.broken && again.last_i == n && again.events == n - cursor;
    vec![Row {
        scenario: format!("4 resume at {cursor} of {n}"),
        target: "tether",
        figures: vec![
            ("first_byte_ms", first),
            (
                "last_missing_ms",
                to_last_missing.map_or(f64::NAN, |d| d.as_secs_f64() * 1e3),
            ),
            ("missing_events", (missing_upto - cursor) as f64),
        ],
        notes: if ok {
            "exactly once".into()
        } else {
            format!(
                "BROKEN: {} events after the cursor, last {}",
                again.events, again.last_i
            )
        },
    }]
}

/// Starts a run of `n` events of `size` bytes on `chat` that stays live after its last event
/// (`hold=1`), and reads it to that event. The connection must stay open until the producer is
/// released.
pub(crate) async fn held_run(
    addr: SocketAddr,
    chat: &str,
    n: u64,
    size: usize,
) -> Option<(client::Conn, Seen)> {
    let (a, path, body) = request(
        Via::Tether,
        addr,
        chat,
        &format!("n={n}&size={size}&hold=1"),
    );
    let mut c = client::open(a, "POST", &path, &body).await.ok()?;
    let mut seen = Seen::default();
    c.read_until(&mut seen, false, |s| s.last_i >= n).await;
    Some((c, seen))
}

/// Scenario 5: `observers` attach at once to one run whose snapshot is about `mib` MiB.
async fn storm(bin: &str, p: &Producer, observers: usize, mib: usize) -> Vec<Row> {
    let tether = targets::tether(bin, p.addr, &[]);
    let n = (mib * 1024) as u64;
    let Some((mut c, mut origin)) = held_run(tether.addr, "s5", n, KIB_PAD).await else {
        return Vec::new();
    };
    // Learn the snapshot's size once, then let everyone in at once.
    let probe = client::open(
        tether.addr,
        "POST",
        "/chat/live",
        br#"{"chat_id":"s5","protocol":1}"#,
    )
    .await;
    let snapshot_bytes = match probe {
        Ok(mut pc) => pc.read_first_frame().await,
        Err(_) => 0,
    };
    let serialized0 = metric(tether.admin, "tether_snapshot_serialize_seconds_count").await;
    let cpu0 = tether.cpu_seconds();
    let t = Instant::now();
    let tasks: Vec<_> = (0..observers)
        .map(|_| {
            let addr = tether.addr;
            tokio::spawn(async move {
                let mut c = client::open(
                    addr,
                    "POST",
                    "/chat/live",
                    br#"{"chat_id":"s5","protocol":1}"#,
                )
                .await
                .ok()?;
                if c.status != 200 {
                    return None;
                }
                let first = c.read_bytes(1).await;
                let first_at = Instant::now();
                let got = first + c.read_bytes(snapshot_bytes.saturating_sub(first)).await;
                Some((got, Instant::now(), first_at))
            })
        })
        .collect();
    let mut served = 0;
    let mut last = t;
    let mut first_bytes = t;
    for task in tasks {
        if let Ok(Some((got, at, first))) = task.await {
            if got >= snapshot_bytes {
                served += 1;
                last = last.max(at);
                first_bytes = first_bytes.max(first);
            }
        }
    }
    let serialized =
        metric(tether.admin, "tether_snapshot_serialize_seconds_count").await - serialized0;
    p.release();
    c.read_until(&mut origin, false, |_| false).await;
    vec![Row {
        scenario: format!("5 storm {observers} x {mib} MiB"),
        target: "tether",
        figures: vec![
            ("all_first_byte_s", (first_bytes - t).as_secs_f64()),
            ("all_served_s", (last - t).as_secs_f64()),
            ("served", served as f64),
            ("serializations", serialized),
            ("snapshot_mib", snapshot_bytes as f64 / 1048576.0),
            ("cpu_s", tether.cpu_seconds() - cpu0),
            ("peak_rss_mib", tether.peak_rss_mib()),
        ],
        notes: String::new(),
    }]
}

/// Scenario 6: cold recovery of a run of `n` token events.
async fn cold(bin: &str, p: &Producer, n: u64) -> Vec<Row> {
    let tether = targets::tether(bin, p.addr, &[]);
    let pad = 6;
    let Some((mut c, mut origin)) = held_run(tether.addr, "s6", n, pad).await else {
        return Vec::new();
    };
    let t = Instant::now();
    let size = match client::open(
        tether.addr,
        "POST",
        "/chat/live",
        br#"{"chat_id":"s6","protocol":1}"#,
    )
    .await
    {
        Ok(mut pc) => pc.read_first_frame().await,
        Err(_) => 0,
    };
    let secs = t.elapsed().as_secs_f64();
    p.release();
    c.read_until(&mut origin, false, |_| false).await;
    // The text the run carried: n deltas of `pad` bytes, plus the events' other fields once
    // each in a compacted snapshot.
    let text = (n as usize * pad) as f64;
    vec![Row {
        scenario: format!("6 cold recovery of {n} events"),
        target: "tether",
        figures: vec![
            ("snapshot_last_byte_ms", secs * 1e3),
            ("snapshot_kib", size as f64 / 1024.0),
            ("text_kib", text / 1024.0),
            ("snapshot_to_text", size as f64 / text),
        ],
        notes: String::new(),
    }]
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
    soak: &crate::soak::Opts,
) -> Vec<Row> {
    let p = Producer::start().await;
    let want = |k: u32| only.as_ref().is_none_or(|o| o.contains(&k));
    let mut rows = Vec::new();
    let (secs3, runs_big) = if quick { (4, 2_000) } else { (20, 10_000) };
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
        add(&mut rows, concurrent(bin, &p, runs_big, 10, secs3).await);
    }
    if want(4) {
        add(&mut rows, resume(bin, &p, 1_000, 2_000).await);
        add(&mut rows, resume(bin, &p, 10_000, 10_000).await);
    }
    if want(5) {
        add(&mut rows, storm(bin, &p, 1_000, 10).await);
    }
    if want(6) {
        add(&mut rows, cold(bin, &p, 100_000).await);
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
    vec![Row {
        scenario: "smoke".into(),
        target: "tether",
        figures: vec![("events_per_s", n as f64 / t.elapsed().as_secs_f64())],
        notes: "exactly once".into(),
    }]
}
