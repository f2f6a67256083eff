//! The integration tests, one binary: the real sidecar in-process in front of in-process fake
//! backends (`support`), one module per area. Two tests that change the whole process live in
//! binaries of their own: `tests/fd_limit.rs` (lowers the open-files limit) and
//! `tests/logging.rs` (installs the process logger).

#[path = "../support/mod.rs"]
mod support;

mod accounting;
mod admin;
mod attach;
mod capacity;
mod chaos;
mod control;
mod cors;
mod deadlines;
mod deploy;
mod dialects;
mod faults;
mod formats;
mod hostile;
mod https;
mod idempotency;
mod journal;
mod keepalive;
mod layers;
mod limits;
mod links;
mod ops;
mod owner_limits;
mod readme;
mod record;
mod requester;
mod routes;
mod tls;
