//! Scenario 7: resume first byte per dialect. A run of `n` events stays live; each resume
//! dialect is asked for the second half of it (`from_start` for the whole turn), and the time
//! from sending the request to the first body byte is measured (median of several tries).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::producer::Producer;
use crate::targets;
use crate::Row;

/// Tries per dialect; the median is reported.
const TRIES: usize = 15;

/// The routes of the scenario: the default record route and one resume route per dialect.
const CONFIG: &str = r#"
[[routes]]
methods = ["POST"]
path = "/chat"
kind = "record"
[[routes]]
methods = ["GET"]
path = "/r/fs/{chat}"
kind = "resume"
dialect = "from_start"
chat_id = "path:chat"
completed = "replay"
[[routes]]
methods = ["GET"]
path = "/r/lei/{run}"
kind = "resume"
dialect = "last_event_id"
run = "path:run"
[[routes]]
methods = ["GET"]
path = "/r/fi"
kind = "resume"
dialect = "frame_index"
run = "query:runId"
[[routes]]
methods = ["GET"]
path = "/r/jc/{run}"
kind = "resume"
dialect = "json_cursor"
run = "path:run"
cursor = "query:after"
cursor_field = "/i"
"#;

/// Sends a GET with `headers` and returns the time to the first body byte and the status.
async fn first_byte(addr: SocketAddr, path: &str, headers: &str) -> Option<(Duration, u16)> {
    let t = Instant::now();
    let mut sock = TcpStream::connect(addr).await.ok()?;
    sock.set_nodelay(true).ok()?;
    let req = format!("GET {path} HTTP/1.1\r\nhost: load\r\n{headers}\r\n");
    sock.write_all(req.as_bytes()).await.ok()?;
    let mut buf = Vec::with_capacity(64 * 1024);
    loop {
        let mut chunk = [0u8; 16 * 1024];
        let n = tokio::time::timeout(Duration::from_secs(10), sock.read(&mut chunk))
            .await
            .ok()?
            .ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = memchr::memmem::find(&buf, b"\r\n\r\n") {
            if buf.len() > end + 4 {
                let status = std::str::from_utf8(buf.get(9..12)?).ok()?.parse().ok()?;
                return Some((t.elapsed(), status));
            }
        }
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Resume first byte per dialect for a live run of `n` events.
pub async fn resume_first_byte(bin: &str, p: &Producer, n: u64) -> Vec<Row> {
    let dir = std::env::temp_dir().join(format!("tether-load-dialects-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let conf = dir.join("dialects.toml");
    if std::fs::write(&conf, CONFIG).is_err() {
        return Vec::new();
    }
    let tether = targets::tether(bin, p.addr, &["--config", &conf.to_string_lossy()]);
    let chat = format!("s7-{n}");
    let Some((c, seen)) = crate::recovery::held_run(tether.addr, &chat, n, 16).await else {
        return Vec::new();
    };
    let run = seen.run_id.clone().unwrap_or_default();
    let half = n / 2;
    let cases: Vec<(&str, String, String)> = vec![
        ("from_start", format!("/r/fs/{chat}"), String::new()),
        (
            "last_event_id",
            format!("/r/lei/{run}"),
            format!("last-event-id: {run}:{}\r\n", half - 1),
        ),
        (
            "frame_index",
            format!("/r/fi?runId={run}&startIndex={half}"),
            String::new(),
        ),
        (
            "json_cursor",
            format!("/r/jc/{run}?after={half}"),
            String::new(),
        ),
    ];
    let mut rows = Vec::new();
    for (dialect, path, headers) in cases {
        let mut times = Vec::new();
        let mut bad = 0;
        for _ in 0..TRIES {
            match first_byte(tether.addr, &path, &headers).await {
                Some((d, 200)) => times.push(d.as_secs_f64() * 1e3),
                _ => bad += 1,
            }
        }
        rows.push(Row {
            scenario: format!("7 resume {dialect} of {n}"),
            target: "tether",
            figures: vec![("first_byte_ms", median(times))],
            notes: if bad == 0 {
                format!("median of {TRIES}")
            } else {
                format!("BROKEN: {bad} of {TRIES} failed")
            },
        });
    }
    p.release();
    drop(c);
    let _ = std::fs::remove_dir_all(&dir);
    rows
}
