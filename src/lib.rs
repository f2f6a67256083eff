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
//! The layers, lowest first; `ls src/` names them. A module uses only modules listed above it
//! (`tests/it/layers.rs` reads `src/` and fails on a `use crate::…` that points down this table,
//! or on an import cycle between the modules under any one parent):
//!
//! | layer | modules | job |
//! |---|---|---|
//! | vocabulary | [`vocab`] | words every layer shares: the label macro, how a run ends, format and dialect kinds, the id types |
//! | foundations | [`error`], [`budget`], [`stall`], [`metrics`], [`config`] | error codes, the buffer budget, stall timers, Prometheus families, `conf/tether.toml` + flags |
//! | requests | [`request`] | record, stop and status requests parsed and checked |
//! | record (pure) | [`record`] | bytes → SSE events → classified events (one file per stream format) → compacted history |
//! | frames (pure) | [`frame`] | the protocol-1 frame encoder the journal and the dialects share |
//! | journal (pure) | [`journal`] | one run's log in memory: seqs, the replay window, history, the raw record, the end |
//! | recording rules (pure) | [`ingest`] | one upstream read → events and raw frames for the journal; the end-of-run verdict |
//! | dialects (pure) | [`dialect`] | a client's resume request → cursor; protocol 1, the verbatim dialects, Durable Streams |
//! | state | [`state`] | owners, resume tokens, runs, chats, the attach table; ownership is checked here |
//! | replica | [`replica`] | the shared journal on Redis Streams: append lanes, followers and mirrors, the reaper |
//! | backend | [`backend`] | the connect queue and tether's own HTTP/1.1 exchange with the backend, plain or TLS |
//! | producer | [`producer`] | the detached run task: go-live, journal choice, the read loop, a legacy client's copy |
//! | deliver | [`deliver`] | write loops to clients: protocol 1, verbatim, Durable Streams |
//! | edges | [`logging`], [`proxy`], [`server`] | Pingora's records, the Pingora adapter and route handlers, listeners and lifecycle |
//!
//! The pure layers work on bytes and values: no Pingora, network or Redis types.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod backend;
pub mod budget;
pub mod config;
pub mod deliver;
pub mod dialect;
pub mod error;
pub mod frame;
pub mod ingest;
pub mod journal;
pub mod logging;
pub mod metrics;
pub mod producer;
pub mod proxy;
pub mod record;
pub mod replica;
pub mod request;
pub mod server;
pub mod stall;
pub mod state;
pub mod vocab;
