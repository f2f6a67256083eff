//! The recovery scenarios: 4, a cursor resume in the middle of a live run; 5, a storm of
//! observers attaching to one large run at once; 6, a cold recovery of a long completed turn.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::Instant;

use serde_json::json;

use crate::client::{self, Seen};
use crate::producer::Producer;
use crate::scenarios::{metric, percentile, request, Via, KIB_PAD, TOKEN_PAD};
use crate::targets;
use crate::Row;

/// Resumes a scenario 4 row takes the median of: one reconnect is one sample on a shared
/// machine, where a single first byte moves by a tenth of a millisecond from run to run.
const RESUMES: usize = 9;

/// Scenario 4: read half of a live run, drop, reconnect with the cursor; [`RESUMES`] times, each
/// on a run of its own, one tether for all.
pub(crate) async fn resume(bin: &str, p: &Producer, n: u64, rate: u64) -> Vec<Row> {
    let tether = targets::tether(bin, p.addr, &[]);
    let mut first = Vec::new();
    let mut last = Vec::new();
    let mut missing = Vec::new();
    let mut broken = None;
    for k in 0..RESUMES {
        match resume_once(&tether, p, &format!("s4-{n}-{k}"), n, rate).await {
            Ok(r) => {
                first.push(r.first_byte_us);
                last.push(r.last_missing_us);
                missing.push(r.missing);
            }
            Err(why) => {
                broken.get_or_insert(why);
            }
        }
    }
    first.sort_unstable();
    last.sort_unstable();
    missing.sort_unstable();
    // The samples are microseconds: `percentile` divides by 1,000, so these are milliseconds.
    vec![Row {
        scenario: format!("4 resume at the middle of {n}"),
        target: "tether",
        figures: vec![
            ("first_byte_ms", percentile(&first, 0.5)),
            ("first_byte_max_ms", percentile(&first, 1.0)),
            ("last_missing_ms", percentile(&last, 0.5)),
            (
                "missing_events",
                missing.get(missing.len() / 2).copied().unwrap_or(0) as f64,
            ),
            ("resumes", first.len() as f64),
        ],
        notes: match broken {
            None => format!("median of {RESUMES}, each exactly once"),
            Some(why) => format!("BROKEN: {why}"),
        },
    }]
}

/// One scenario 4 resume: microseconds to the first byte and to the last missing event.
struct Resumed {
    first_byte_us: u64,
    last_missing_us: u64,
    missing: u64,
}

async fn resume_once(
    tether: &targets::Hop,
    p: &Producer,
    chat: &str,
    n: u64,
    rate: u64,
) -> Result<Resumed, String> {
    let (a, path, body) = request(
        Via::Tether,
        tether.addr,
        chat,
        &format!("n={n}&size={TOKEN_PAD}&rate={rate}"),
    );
    let mut seen = Seen::default();
    let mut c = client::open(a, "POST", &path, &body)
        .await
        .map_err(|e| format!("no stream: {e}"))?;
    c.read_until(&mut seen, false, |s| s.last_i >= n / 2).await;
    let cursor = seen.last_i;
    let run_id = seen.run_id.clone().unwrap_or_default();
    let sent_before = p.sent.load(Ordering::Relaxed) - seen.last_i;
    drop(c);
    // A reconnect backoff, while the run goes on: the events of this gap are what is missing.
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    let body =
        json!({"chat_id": chat, "protocol": 1, "run_id": run_id, "after_seq": cursor}).to_string();
    // The newest event the producer had written when the client reconnected.
    let missing_upto = (p.sent.load(Ordering::Relaxed) - sent_before)
        .min(n)
        .max(cursor);
    // The reconnecting client runs on a thread and runtime of its own: on the tool's runtime
    // it would wait behind the producer's tasks, which write the run at full pace meanwhile,
    // and count that wait as tether's.
    let addr = tether.addr;
    let reader = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .ok()?;
        Some(rt.block_on(async move {
            let t = Instant::now();
            let mut again = Seen {
                last_i: cursor,
                ..Seen::default()
            };
            let mut to_last_missing = None;
            if let Ok(mut c) = client::open(addr, "POST", "/chat/live", body.as_bytes()).await {
                while c.read_some(&mut again, false).await {
                    if to_last_missing.is_none() && again.last_i >= missing_upto {
                        to_last_missing = Some(t.elapsed());
                    }
                }
            }
            (t, again, to_last_missing)
        }))
    });
    let (t, again, to_last_missing) = tokio::task::spawn_blocking(move || reader.join())
        .await
        .ok()
        .and_then(|r| r.ok())
        .flatten()
        .ok_or("the reconnecting client failed")?;
    if again.broken || again.last_i != n || again.events != n - cursor {
        return Err(format!(
            "{} events after the cursor {cursor}, last {}",
            again.events, again.last_i
        ));
    }
    let us = |d: std::time::Duration| d.as_micros() as u64;
    Ok(Resumed {
        first_byte_us: again.first_byte.map_or(u64::MAX, |f| us(f - t)),
        last_missing_us: to_last_missing.map_or(u64::MAX, us),
        missing: missing_upto - cursor,
    })
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
pub(crate) async fn storm(bin: &str, p: &Producer, observers: usize, mib: usize) -> Vec<Row> {
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
pub(crate) async fn cold(bin: &str, p: &Producer, n: u64) -> Vec<Row> {
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
