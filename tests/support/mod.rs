//! Test harness: the real sidecar in-process, scripted fake backends, a raw HTTP/1.1 client that
//! reads a stream frame by frame and can drop the connection mid-stream, and the reducer the
//! tests compare streams with. Every listener binds 127.0.0.1:0.
//!
//! The `tether::` items the tests use are re-exported here, so a path that moves in the library
//! is fixed in one place.
// Each test binary compiles this module and uses a part of it.
#![allow(dead_code, unused_imports)]

mod backend;
mod client;
mod faults;
mod frames;
mod https;
mod otlp;
mod redis;
mod replicas;
mod sidecar;
mod tls;

use std::future::Future;
use std::time::Duration;

use serde_json::{json, Value};

pub use backend::{
    backend, backend_at, fixed_answer, scripted_turn, sse, sse_head, turn, turn_backend, Backend,
    Gate, Req, Served, Step,
};
pub use client::{close_with_rst, parse_head, post, request, request_on, try_request, Head, Resp};
pub use faults::{Fault, FaultProxy};
pub use frames::{event_seqs, parse_frame, Frame, Reduced};
pub use https::{https1, tls_connect, H2Resp, H2};
pub use otlp::{export_requests, hex, otlp_collector, received_spans, span_attr};
pub use redis::{free_port, JournalRedis, RedisCluster, RedisServer};
pub use replicas::{journal_table, replica, Binary};
pub use sidecar::{demo_sidecar, sidecar, sidecar_from, Sidecar};
pub use tls::{toml_path, Issued, TestCa, TlsFront, TlsRedis, TlsRedisCluster};

pub use tether::config::{parse_file, Config, Flags};
pub use tether::metrics::Metrics;
pub use tether::server::demo::{self, DemoOptions};
pub use tether::server::Handle;
pub use tether::state::auth::Owner;

/// Upper bound on any single wait in a test, so a bug fails instead of hanging.
pub const LIMIT: Duration = Duration::from_secs(20);

/// Runs a blocking wait (a child process's) on a thread, bounded by [`LIMIT`].
pub fn within_blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(LIMIT)
        .expect("timed out waiting for the process")
}

/// Awaits `f` or panics after [`LIMIT`].
pub async fn within<T>(what: &str, f: impl Future<Output = T>) -> T {
    tokio::time::timeout(LIMIT, f)
        .await
        .unwrap_or_else(|_| panic!("timed out: {what}"))
}

/// How often [`eventually`] and [`eventually_async`] look again.
const POLL: Duration = Duration::from_millis(2);

/// Polls `cond` until it holds, or panics after [`LIMIT`]. For states that have no readiness
/// signal a test can await (a counter inside the sidecar, a request at the backend).
pub async fn eventually(what: &str, cond: impl Fn() -> bool) {
    within(what, async {
        while !cond() {
            tokio::time::sleep(POLL).await;
        }
    })
    .await
}

/// [`eventually`] for a condition that has to be asked over the network (an admin endpoint).
pub async fn eventually_async<F: Future<Output = bool>>(what: &str, cond: impl Fn() -> F) {
    within(what, async {
        while !cond().await {
            tokio::time::sleep(POLL).await;
        }
    })
    .await
}

/// A protocol-1 request body for `chat_id` without a cursor.
pub fn chat(id: &str) -> Value {
    json!({"chat_id": id, "protocol": 1})
}

/// Starts a protocol-1 turn of `chat_id` on `tether` with `headers` and reads its first two
/// events; returns the run id and the client, still reading.
pub async fn started(tether: &Sidecar, chat_id: &str, headers: &[(&str, &str)]) -> (String, Resp) {
    let body = chat(chat_id).to_string();
    let mut r = request(tether.addr, "POST", "/chat", headers, body.as_bytes()).await;
    assert_eq!(r.status, 200);
    let run = r.frame().await.unwrap().json["run_id"]
        .as_str()
        .unwrap()
        .to_string();
    r.frame().await.unwrap();
    r.frame().await.unwrap();
    (run, r)
}

/// A protocol-1 request body resuming `run` after seq `after`.
pub fn cursor(id: &str, run: &str, after: u64) -> Value {
    json!({"chat_id": id, "protocol": 1, "run_id": run, "after_seq": after})
}
