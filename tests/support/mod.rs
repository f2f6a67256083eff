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
mod frames;
mod sidecar;

use std::future::Future;
use std::time::Duration;

pub use backend::{backend, sse, sse_head, turn, Backend, Gate, Req, Served, Step};
pub use client::{close_with_rst, parse_head, post, request, Head, Resp};
pub use frames::{parse_frame, Frame, Reduced};
pub use sidecar::{sidecar, Sidecar};

pub use tether::config::{parse_file, Config, Flags};
pub use tether::demo::DemoOptions;
pub use tether::server::Handle;

/// Upper bound on any single wait in a test, so a bug fails instead of hanging.
pub const LIMIT: Duration = Duration::from_secs(20);

/// Awaits `f` or panics after [`LIMIT`].
pub async fn within<T>(what: &str, f: impl Future<Output = T>) -> T {
    tokio::time::timeout(LIMIT, f)
        .await
        .unwrap_or_else(|_| panic!("timed out: {what}"))
}

/// How often [`eventually`] looks again.
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
