//! Resume dialects: the seam between a run's journal and one family of clients. A dialect
//! parses that family's attach or resume request into where to start, and encodes what the
//! client reads: the snapshot, each event, and the end.
//!
//! [`protocol1::Protocol1`] is tether's own protocol (`STREAM_SNAPSHOT`, `STREAM_EVENT`,
//! `STREAM_END`). Each further client family is one file under `dialect/`. Pure: no I/O.

pub mod protocol1;

use std::fmt::Debug;
use std::time::Duration;

use bytes::{Bytes, BytesMut};

use crate::compact::Capture;
use crate::config::KeySource;
use crate::error::ApiError;
use crate::journal::End;
use crate::request::Parts;

/// An attach or resume request as the edge read it.
pub struct Incoming<'a> {
    /// Whether it is a `GET` (its inputs are the query and headers) rather than a `POST`.
    pub get: bool,
    /// The query, the headers and the route's path captures.
    pub parts: Parts<'a>,
    /// The request body (empty for `GET`).
    pub body: &'a [u8],
    /// Where the route finds the chat id.
    pub chat_id: &'a KeySource,
    /// The cap on how long the client may ask to wait for a run.
    pub max_wait: Duration,
}

/// What an attach asks for: the chat, and the cursor into one of its runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttachRequest {
    /// The chat to attach to.
    pub chat_id: String,
    /// Whether the requester speaks protocol 1 (a legacy request is passed through).
    pub protocol1: bool,
    /// The run the cursor belongs to.
    pub run_id: Option<String>,
    /// The last seq the client applied.
    pub after_seq: Option<u64>,
    /// How long to wait for a run when the chat has none (already capped).
    pub wait: Duration,
}

/// One client family's wire form of a run.
pub trait Dialect: Send + Sync + Debug {
    /// The dialect's name, as configured and as a metric label.
    fn name(&self) -> &'static str;

    /// Parses an attach or resume request. Runs once per request, before any lookup; a
    /// malformed request is an [`ApiError`] and nothing is looked up.
    fn parse(&self, req: &Incoming<'_>) -> Result<AttachRequest, ApiError>;

    /// The snapshot of a compacted history covering seqs up to `seq`.
    fn snapshot(&self, run_id: &str, seq: u64, history: &Capture) -> Bytes;

    /// Appends one event (its upstream JSON, one line) as seq `seq`.
    fn event(&self, out: &mut BytesMut, run_id: &str, seq: u64, event: &[u8]);

    /// The run's end.
    fn end(&self, run_id: &str, end: &End) -> Bytes;
}
