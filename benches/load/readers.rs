//! Many readers of one run: scenario 11, fan-out (one paced run followed live by 1, 10, 100 and
//! 1,000 observers), and scenario 12, catch-up (1,000 clients reading a completed run from
//! cursor 0 at once). Both put a single reader beside the crowd in the same run as the baseline.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::client::{self, Seen};
use crate::producer::Producer;
use crate::scenarios::{
    contention, percentile, read_response, request, stream, Via, KIB_PAD, TOKEN_PAD,
};
use crate::sched::{self, Machine};
use crate::targets::{self, Hop};
use crate::Row;

/// Scenario 11's number.
pub const FANOUT: u32 = 11;
/// Scenario 12's number.
pub const CATCH_UP: u32 = 12;

/// Scenario 11's event rate, the anchor's.
const FANOUT_RATE: u64 = 50;
/// Events of scenario 11's run that arrive while its observers attach; their deliveries are not
/// counted (2 s at 50 events/s).
const ATTACH_EVENTS: u64 = 100;

/// Scenario 11: one run at 50 events/s for `secs`, followed live by each count of `observers`
/// (a fresh run for each count); the direct row is one client of the producer at the same rate.
pub(crate) async fn fanout(bin: &str, p: &Producer, observers: &[usize], secs: u64) -> Vec<Row> {
    let n = FANOUT_RATE * secs;
    let query = format!("n={n}&size={TOKEN_PAD}&rate={FANOUT_RATE}");
    let mut rows = Vec::new();
    let (a, path, body) = request(Via::Direct, p.addr, "s11", &query);
    let mut direct = stream(a, &path, &body, true).await;
    direct.delays.sort_unstable();
    rows.push(delay_row(
        "11 fan-out 1 (one stream)",
        "direct",
        &direct.delays,
        0,
        0.0,
        &[],
    ));
    let tether = targets::tether(bin, p.addr, &[]);
    for &k in observers {
        rows.push(fanout_once(&tether, &query, n, k).await);
    }
    rows
}

async fn fanout_once(tether: &Hop, query: &str, n: u64, k: usize) -> Row {
    let chat = format!("s11-{k}");
    let (a, path, body) = request(Via::Tether, tether.addr, &chat, query);
    let cpu0 = tether.cpu_seconds();
    let sched0 = (Some(tether.sched()), sched::own(), Machine::now());
    // The requester reads the run too (the writer's own response); its deliveries are not
    // counted. The observers attach once its first event arrived.
    let Ok(mut origin) = client::open(a, "POST", &path, &body).await else {
        return Row {
            scenario: format!("11 fan-out {k}"),
            target: "tether",
            notes: "BROKEN: no run".into(),
            ..Row::default()
        };
    };
    let mut first = Seen::default();
    origin
        .read_until(&mut first, false, |s| s.last_i >= 1)
        .await;
    let origin = tokio::spawn(async move { while origin.read_some(&mut first, false).await {} });
    let t = Instant::now();
    let body = json!({"chat_id": chat, "protocol": 1}).to_string();
    let tasks: Vec<_> = (0..k)
        .map(|_| {
            let body = body.clone();
            let addr = tether.addr;
            let seen = Seen {
                delays_after: ATTACH_EVENTS,
                ..Seen::default()
            };
            tokio::spawn(async move {
                read_response(addr, "/chat/live", body.as_bytes(), true, seen).await
            })
        })
        .collect();
    let mut delays = Vec::new();
    let mut lost = 0;
    let mut attached = Duration::ZERO;
    for task in tasks {
        match task.await {
            Ok((mut s, head)) if !s.broken && s.ended && s.last_i == n => {
                attached = attached.max(head - t);
                delays.append(&mut s.delays);
            }
            _ => lost += 1,
        }
    }
    let _ = origin.await;
    delays.sort_unstable();
    let mut notes = String::new();
    if lost > 0 {
        notes = format!("BROKEN: {lost} of {k} observers lost or truncated");
    } else if attached.as_secs_f64() * FANOUT_RATE as f64 > ATTACH_EVENTS as f64 {
        notes = "attaching took longer than the skipped events".into();
    }
    let mut row = delay_row(
        &format!("11 fan-out {k}"),
        "tether",
        &delays,
        lost,
        tether.cpu_seconds() - cpu0,
        &[("all_attached_ms", attached.as_secs_f64() * 1e3)],
    );
    row.figures.push(("peak_rss_mib", tether.peak_rss_mib()));
    row.figures.extend(contention(sched0, Some(tether)));
    row.notes = notes;
    row
}

fn delay_row(
    scenario: &str,
    target: &'static str,
    delays: &[u64],
    lost: usize,
    cpu: f64,
    extra: &[(&'static str, f64)],
) -> Row {
    let mut figures = vec![
        ("delay_p50_ms", percentile(delays, 0.5) / 1e3),
        ("delay_p99_ms", percentile(delays, 0.99) / 1e3),
        ("delay_p999_ms", percentile(delays, 0.999) / 1e3),
        ("delay_max_ms", percentile(delays, 1.0) / 1e3),
        ("deliveries", delays.len() as f64),
        ("readers_lost", lost as f64),
        ("cpu_s", cpu),
    ];
    figures.extend_from_slice(extra);
    Row {
        scenario: scenario.into(),
        target,
        figures,
        notes: String::new(),
    }
}

/// Scenario 12: a completed run of each of `lengths` events of 1 KiB, read from cursor 0 by one
/// client alone, then by `clients` at once; every client must get every event once, in order,
/// and the end.
pub(crate) async fn catch_up(bin: &str, p: &Producer, clients: usize, lengths: &[u64]) -> Vec<Row> {
    let tether = targets::tether(bin, p.addr, &[]);
    let mut rows = Vec::new();
    for &n in lengths {
        let chat = format!("s12-{n}");
        let (a, path, body) = request(
            Via::Tether,
            tether.addr,
            &chat,
            &format!("n={n}&size={KIB_PAD}"),
        );
        let done = stream(a, &path, &body, false).await;
        let Some(run_id) = done.run_id.filter(|_| done.ended && done.last_i == n) else {
            rows.push(Row {
                scenario: format!("12 catch-up {n} x 1 KiB"),
                target: "tether",
                notes: "BROKEN: the run did not complete".into(),
                ..Row::default()
            });
            continue;
        };
        let body =
            json!({"chat_id": chat, "protocol": 1, "run_id": run_id, "after_seq": 0}).to_string();
        for k in [1, clients] {
            rows.push(catch_up_once(&tether, &body, n, k).await);
        }
    }
    rows
}

async fn catch_up_once(tether: &Hop, body: &str, n: u64, k: usize) -> Row {
    let cpu0 = tether.cpu_seconds();
    let sched0 = (Some(tether.sched()), sched::own(), Machine::now());
    let t = Instant::now();
    let tasks: Vec<_> = (0..k)
        .map(|_| {
            let body = body.to_string();
            let addr = tether.addr;
            tokio::spawn(async move {
                let (seen, head) =
                    read_response(addr, "/chat/live", body.as_bytes(), false, Seen::default())
                        .await;
                (seen, head, Instant::now())
            })
        })
        .collect();
    let (mut heads, mut transfers) = (Vec::with_capacity(k), Vec::with_capacity(k));
    // From the request written to the head: the server's share of the wait for the head.
    let mut served = Vec::with_capacity(k);
    let mut sent_last = t;
    let (mut bytes, mut lost, mut sizes) = (0u64, 0, std::collections::BTreeSet::new());
    let mut last = t;
    for task in tasks {
        match task.await {
            Ok((s, head, end)) if !s.broken && s.ended && s.events == n && s.last_i == n => {
                heads.push((head - t).as_nanos() as u64);
                if let Some(sent) = s.sent {
                    served.push((head - sent).as_nanos() as u64);
                    sent_last = sent_last.max(sent);
                }
                transfers.push((end - head).as_nanos() as u64);
                bytes += s.bytes;
                sizes.insert(s.bytes);
                last = last.max(end);
            }
            _ => lost += 1,
        }
    }
    let wall = (last - t).as_secs_f64();
    heads.sort_unstable();
    transfers.sort_unstable();
    served.sort_unstable();
    let mut figures = vec![
        ("mb_per_s", bytes as f64 / wall / 1e6),
        ("wall_ms", wall * 1e3),
        ("head_p50_ms", percentile(&heads, 0.5) / 1e3),
        ("head_p99_ms", percentile(&heads, 0.99) / 1e3),
        // The last request written, from the start: how long the tool took to connect all.
        ("last_sent_ms", (sent_last - t).as_secs_f64() * 1e3),
        ("served_p50_ms", percentile(&served, 0.5) / 1e3),
        ("served_p99_ms", percentile(&served, 0.99) / 1e3),
        ("transfer_p50_ms", percentile(&transfers, 0.5) / 1e3),
        ("transfer_p99_ms", percentile(&transfers, 0.99) / 1e3),
        ("clients_complete", (k - lost) as f64),
        (
            "bytes_per_client",
            sizes.first().copied().unwrap_or(0) as f64,
        ),
        ("cpu_s", tether.cpu_seconds() - cpu0),
        ("peak_rss_mib", tether.peak_rss_mib()),
    ];
    figures.extend(contention(sched0, Some(tether)));
    Row {
        scenario: format!(
            "12 catch-up {n} x 1 KiB, {k} client{}",
            if k == 1 { "" } else { "s" }
        ),
        target: "tether",
        figures,
        notes: if lost > 0 {
            format!("BROKEN: {lost} of {k} clients lost or incomplete")
        } else if sizes.len() > 1 {
            format!("BROKEN: clients got different byte counts {sizes:?}")
        } else {
            String::new()
        },
    }
}
