//! Resume dialects: the seam between a run's journal and one family of clients. A dialect
//! parses that family's attach or resume request into where to start, and encodes what the
//! client reads: the snapshot, each event, and the end.
//!
//! [`protocol1::Protocol1`] is tether's own protocol (`STREAM_SNAPSHOT`, `STREAM_EVENT`,
//! `STREAM_END`). The drop-in dialects ([`Verbatim`]) answer a client in the upstream's own
//! format from the run's raw record, one file each: [`from_start`], [`last_event_id`],
//! [`frame_index`], [`json_cursor`]. [`durable_streams`] serves a run's events as a read-only
//! Durable Stream. Pure: no I/O.

pub mod durable_streams;
pub mod frame_index;
pub mod from_start;
pub mod json_cursor;
pub mod last_event_id;
pub mod protocol1;

use std::fmt::Debug;
use std::time::Duration;

use bytes::{Bytes, BytesMut};

use crate::error::ApiError;
use crate::record::compact::Capture;
use crate::request::Parts;
use crate::settings::{DialectKind, Expired, KeySource, Resume};
use crate::vocab::end::End;
use crate::vocab::{ChatId, RunId};

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
    pub chat_id: ChatId,
    /// Whether the requester speaks protocol 1 (a legacy request is passed through).
    pub protocol1: bool,
    /// The run the cursor belongs to.
    pub run_id: Option<RunId>,
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
    fn snapshot(&self, run_id: &RunId, seq: u64, history: &Capture) -> Bytes;

    /// Appends one event (its upstream JSON, one line) as seq `seq`.
    fn event(&self, out: &mut BytesMut, run_id: &RunId, seq: u64, event: &[u8]);

    /// The run's end.
    fn end(&self, run_id: &RunId, end: &End) -> Bytes;
}

/// Where a verbatim resume starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plan {
    /// The compacted history rendered in the upstream's format, then the raw tail.
    Render,
    /// Raw frames from this index on.
    From(u64),
    /// A `200` stream that ends at once.
    Empty,
}

/// Why a verbatim resume is answered by a status instead of a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Nothing to resume (the dialect's "nothing" answer).
    Nothing,
    /// The cursor names nothing the run ever had (a new turn, for `resume_on`).
    Unknown,
    /// The cursor's frames are no longer kept; answered as configured.
    Expired(Expired),
}

/// One client family's resume: where its cursor lands in a run's raw record.
pub trait Verbatim: Send + Sync + Debug {
    /// The dialect, as configured and as a metric label.
    fn kind(&self) -> DialectKind;

    /// Where the client's resume of run `run_id` (its log `run`) starts, given its cursor as sent
    /// (`None`: none sent). A malformed cursor is an [`ApiError`] (400).
    fn plan(
        &self,
        run_id: &RunId,
        run: &dyn crate::journal::Journal,
        cursor: Option<&str>,
    ) -> Result<Result<Plan, Refusal>, ApiError>;
}

/// The dialect of a resume route.
pub fn verbatim(resume: &Resume) -> Box<dyn Verbatim> {
    match resume.dialect {
        DialectKind::FromStart | DialectKind::Protocol1 => Box::new(from_start::FromStart {
            completed: resume.completed,
        }),
        DialectKind::LastEventId => Box::new(last_event_id::LastEventId {
            expired: resume.expired,
        }),
        DialectKind::FrameIndex => Box::new(frame_index::FrameIndex),
        DialectKind::JsonCursor => Box::new(json_cursor::JsonCursor {
            expired: resume.expired,
        }),
        // Never asked for: a durable_streams route is served by its own handler, from the
        // window rather than the raw record.
        DialectKind::DurableStreams => Box::new(from_start::FromStart {
            completed: resume.completed,
        }),
    }
}

/// A run's end as the raw record sees it: whether the reader is at the end of an ended run.
fn at_end(run: &dyn crate::journal::Journal, index: u64) -> bool {
    run.ended().is_some()
        && run
            .read_raw(index, 0)
            .is_some_and(|r| r.next >= index && r.end.is_some())
}

/// The answer to an expired cursor: the `from_start` rendering, or the configured status.
fn expired(e: Expired) -> Result<Plan, Refusal> {
    match e {
        Expired::FromStart => Ok(Plan::Render),
        other => Err(Refusal::Expired(other)),
    }
}
