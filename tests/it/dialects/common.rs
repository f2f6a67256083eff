//! Shared harness of the dialect tests: SSE frames written as a backend family writes them, a
//! backend answer held at a gate after N frames, a client cut after N frames, and the attach
//! metric of a dialect.

use bytes::Bytes;
use rand::Rng;
use serde_json::Value;

use crate::support::*;

/// One SSE frame: `event:`, `id:` and `data:` lines in that order, then the blank line.
pub fn frame(event: Option<&str>, id: Option<&str>, data: &str) -> Bytes {
    let mut s = String::new();
    if let Some(e) = event {
        s.push_str(&format!("event: {e}\n"));
    }
    if let Some(i) = id {
        s.push_str(&format!("id: {i}\n"));
    }
    s.push_str(&format!("data: {data}\n\n"));
    Bytes::from(s)
}

/// An SSE answer of `frames`, one chunk each; with a gate, held before frame `at` until it
/// opens (`at == frames.len()` holds the end of the stream).
pub fn held(frames: &[Bytes], pause: Option<(usize, &Gate)>) -> Vec<Step> {
    let mut steps = vec![sse_head()];
    for (i, f) in frames.iter().enumerate() {
        if let Some((at, g)) = pause {
            if at == i {
                steps.push(Step::Wait(g.clone()));
            }
        }
        steps.push(Step::Chunk(f.clone()));
    }
    if let Some((at, g)) = pause {
        if at == frames.len() {
            steps.push(Step::Wait(g.clone()));
        }
    }
    steps.push(Step::End);
    steps
}

/// A random cut in `lo..=hi`, printed so that a failure can be reproduced.
pub fn random_cut(what: &str, lo: usize, hi: usize) -> usize {
    let n = rand::thread_rng().gen_range(lo..=hi);
    eprintln!("{what}: cut after {n} frames");
    n
}

/// Reads `n` blocks of `r` and drops the connection (RST), as a closed tab does.
pub async fn cut(mut r: Resp, n: usize) -> Vec<Bytes> {
    let mut got = Vec::new();
    for _ in 0..n {
        got.push(r.block().await.expect("a frame before the cut"));
    }
    r.kill();
    got
}

/// Every block up to the end of the body.
pub async fn blocks_to_end(r: &mut Resp) -> Vec<Bytes> {
    let mut v = Vec::new();
    while let Some(b) = r.block().await {
        v.push(b);
    }
    assert!(r.ended, "the response ended cleanly");
    v
}

/// The bytes of `frames`, concatenated.
pub fn concat(frames: &[Bytes]) -> String {
    frames
        .iter()
        .map(|f| std::str::from_utf8(f).unwrap())
        .collect()
}

/// The `data:` of one block (one data line).
pub fn data(block: &[u8]) -> &str {
    std::str::from_utf8(block)
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("data: "))
        .expect("a data line")
}

/// The JSON of one block's data.
pub fn data_json(block: &[u8]) -> Value {
    serde_json::from_str(data(block)).unwrap()
}

/// A `GET` with headers.
pub async fn get(addr: std::net::SocketAddr, path: &str, headers: &[(&str, &str)]) -> Resp {
    request(addr, "GET", path, headers, b"").await
}

/// The whole body as JSON.
pub async fn json_body(r: &mut Resp) -> Value {
    let b = r.body_to_end().await;
    serde_json::from_slice(&b).unwrap_or_else(|e| panic!("{e}: {:?}", String::from_utf8_lossy(&b)))
}

/// `tether_attach_total{dialect, result}`.
pub async fn attach_metric(tether: &Sidecar, dialect: &str, result: &str) -> f64 {
    tether
        .metric(&format!(
            "tether_attach_total{{dialect=\"{dialect}\",result=\"{result}\"}}"
        ))
        .await
}

/// How many requests the backend has seen.
pub fn requests(be: &Backend) -> usize {
    be.requests.lock().len()
}

/// Every `tether_attach_total` sample summed: all the attaches and resumes counted, whatever
/// their dialect and result.
pub async fn attach_total(tether: &Sidecar) -> f64 {
    tether
        .metrics()
        .await
        .lines()
        .filter(|l| l.starts_with("tether_attach_total{"))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
        .sum()
}
