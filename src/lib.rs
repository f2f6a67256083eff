//! tether: a Pingora sidecar that records AI-chat SSE turns and serves reconnecting clients.
//!
//! ```text
//! client ──POST /chat──▶ proxy ──spawn──▶ producer ──HTTP──▶ backend (unchanged)
//!                          │                 │ bytes
//!                          │                 ▼
//!                          │            SSE decoder ──events──▶ run log ──┬─ window (encoded frames)
//!                          │                                              └─ compacted snapshot
//! client ──POST /chat/live─┴──────────▶ observer ◀──cursor / wakeups── run log
//!                                          └──▶ STREAM_SNAPSHOT · STREAM_EVENT… · STREAM_END ──▶ client
//! ```
//!
//! The modules, in data-flow order (declared below in rustfmt's alphabetical order):
//!
//! | stage | modules |
//! |---|---|
//! | pure core: bytes in, frames out | [`sse`] → [`event`] → [`compact`] → [`frames`] → [`run`] |
//! | who may see what | [`auth`] → [`registry`] |
//! | requests | [`request`] → [`proxy`] → [`record`] / [`attach`] / [`control`] |
//! | upstream | [`upstream`] → [`producer`] |
//! | downstream | [`observer`] |
//! | process | [`config`] → [`server`] → [`admin`], [`metrics`], [`demo`], [`logging`] |
//!
//! The pure core imports nothing from Pingora and no network types.

pub mod admin;
pub mod attach;
pub mod auth;
pub mod compact;
pub mod config;
pub mod control;
pub mod demo;
pub mod event;
pub mod frames;
pub mod logging;
pub mod metrics;
pub mod observer;
pub mod producer;
pub mod proxy;
pub mod record;
pub mod registry;
pub mod request;
pub mod run;
pub mod server;
pub mod sse;
pub mod upstream;
