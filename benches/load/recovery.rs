//! The recovery scenarios: 4, a cursor resume in the middle of a live run; 5, a storm of
//! observers attaching to one large run at once; 6, a cold recovery of a long completed turn.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::Instant;

use serde_json::json;

use crate::client::{self, Seen};
use crate::producer::Producer;
use crate::scenarios::{metric, request, Via, KIB_PAD, TOKEN_PAD};
use crate::targets;
use crate::Row;

/// Scenario 4: read half of a live run, drop, reconnect with the cursor.
pub(crate) async fn resume(bin: &str, p: &Producer, n: u64, rate: u64) -> Vec<Row> {
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
