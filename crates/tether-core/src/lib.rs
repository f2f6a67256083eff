//! tether-core: the pure core of tether, the bytes and values every upper room shares, with no
//! Pingora, network or Redis type (the compiler keeps it so: none is a dependency).
//!
//! ```text
//! upstream bytes ──▶ record: SSE decoder → format → compactor ──▶ ingest ──▶ journal (window, history, raw record, end)
//!                                                                              │
//! resume request ──▶ request, settings ──▶ dialect: cursor → plan ◀─────────────┘ ──▶ frame: protocol-1 bytes
//! ```
//!
//! The layers, lowest first. A module uses only modules listed above it (`tests/it/layers.rs`
//! reads this table and the sources and fails on a `use crate::…` that points down it, or on an
//! import cycle between the modules under any one parent):
//!
//! | layer | modules | job |
//! |---|---|---|
//! | vocabulary | [`vocab`] | words every layer shares: the label macro, how a run ends, format and dialect kinds, the id types |
//! | foundations | [`error`], [`budget`], [`settings`] | error codes, the buffer budget, the route settings the pure layers interpret |
//! | requests | [`request`] | record, stop and status requests parsed and checked |
//! | record | [`record`] | bytes → SSE events → classified events (one file per stream format) → compacted history |
//! | frames | [`frame`] | the protocol-1 frame encoder the journal and the dialects share |
//! | journal | [`journal`] | one run's log in memory: seqs, the replay window, history, the raw record, the end |
//! | recording rules | [`ingest`] | one upstream read → events and raw frames for the journal; the end-of-run verdict |
//! | dialects | [`dialect`] | a client's resume request → cursor; protocol 1, the verbatim dialects, Durable Streams |

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod budget;
pub mod dialect;
pub mod error;
pub mod frame;
pub mod ingest;
pub mod journal;
pub mod record;
pub mod request;
pub mod settings;
pub mod vocab;
