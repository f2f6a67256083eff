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
//! Two crates. The pure core, `tether-core` (`crates/tether-core`), holds the bytes and values:
//! the vocabulary, errors, the buffer budget, route settings, request parsing, SSE and stream
//! formats, protocol-1 frames, a run's log, the recording rules and the resume dialects, with no
//! Pingora, network or Redis type. This crate re-exports its modules under the same names
//! ([`vocab`], [`error`], [`budget`], [`settings`], [`request`], [`record`], [`frame`],
//! [`journal`], [`ingest`], [`dialect`]), so every layer below sits under the core.
//!
//! The sidecar's layers, lowest first. A module uses only the core and modules listed above it
//! (`tests/it/layers.rs` reads this table and the sources and fails on a `use crate::…` that
//! points down it, or on an import cycle between the modules under any one parent):
//!
//! | layer | modules | job |
//! |---|---|---|
//! | foundations | [`stall`], [`metrics`], [`config`] | stall timers, Prometheus families, `conf/tether.toml` + flags |
//! | accounting | [`accounting`] | run records (usage, watch, outcome), the records' webhook, the OTLP trace exporter |
//! | state | [`state`] | owners, resume tokens, runs, chats, the attach table; ownership is checked here |
//! | replica | [`replica`] | the shared journal on Redis Streams: append lanes, followers and mirrors, the reaper |
//! | chats | [`chats`] | a caller and a request → a run: the owner, the chat's scope, lookups with the journal's sync, registration, go-live (memory or shared journal), naming, the stop |
//! | backend | [`backend`] | the connect queue and tether's own HTTP/1.1 exchange with the backend, plain or TLS |
//! | producer | [`producer`] | the run's producer (in its protocol-1 requester's task, else detached): the upstream exchange, the read loop, the requester's handoff, a legacy client's copy |
//! | deliver | [`deliver`] | write loops to clients: protocol 1, verbatim, Durable Streams |
//! | edges | [`logging`], [`proxy`], [`server`] | Pingora's records, the Pingora adapter and route handlers, listeners and lifecycle |

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub use tether_core::{
    budget, dialect, error, frame, ingest, journal, record, request, settings, vocab,
};

pub mod accounting;
pub mod backend;
pub mod chats;
pub mod config;
pub mod deliver;
pub mod logging;
pub mod metrics;
pub mod producer;
pub mod proxy;
pub mod replica;
pub mod server;
pub mod stall;
pub mod state;
