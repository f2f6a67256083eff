//! tether: a Pingora sidecar that records AI-chat SSE turns and serves reconnecting clients.
//!
//! ```text
//! client ──POST /chat──▶ proxy ──spawn──▶ producer ──HTTP──▶ backend (unchanged)
//!                          │                 │ bytes
//!                          │                 ▼
//!                          │     ingest: SSE decoder → format ──events──▶ journal ──┬─ window (recent events)
//!                          │                                                        └─ compacted snapshot
//! client ──POST /chat/live─┴──▶ attach policy ──▶ observer ◀──cursor / wake-ups── journal
//!                                                    └──▶ dialect: STREAM_SNAPSHOT · STREAM_EVENT… · STREAM_END ──▶ client
//! ```
//!
//! The modules, in data-flow order (declared below in rustfmt's alphabetical order):
//!
//! | stage | modules |
//! |---|---|
//! | pure core: bytes in, frames out | [`sse`] → [`format`] → [`compact`] → [`ingest`] → [`journal`] → [`dialect`] |
//! | pure core: requests and answers | [`request`], [`attach`] (policy), [`error`], [`json`] |
//! | state | [`auth`] → [`registry`] → [`run`] |
//! | edges | [`proxy`] (Pingora adapter) → [`upstream`] (backend client and producer) / [`observer`] (write loop) |
//! | process | [`config`] → [`server`] (listeners, drain, admin and demo apps), [`metrics`], [`budget`] (bytes buffered for clients and backends), [`logging`] |
//!
//! The pure core imports nothing from Pingora and no network types.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod attach;
pub mod auth;
pub mod budget;
pub mod compact;
pub mod config;
pub mod dialect;
pub mod error;
pub mod format;
pub mod ingest;
pub mod journal;
pub mod json;
pub mod logging;
pub mod metrics;
pub mod observer;
pub mod proxy;
pub mod registry;
pub mod replay;
pub mod request;
pub mod run;
pub mod server;
pub mod sse;
pub mod stall;
pub mod token;
pub mod upstream;
