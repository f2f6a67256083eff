//! `durable_streams`: a run as a read-only Durable Stream (ElectricSQL's HTTP protocol for
//! resumable streams, read path, JSON mode). Parses a read (`offset`, `live`, `cursor`) and
//! encodes what the reader gets: offsets, JSON arrays of messages, the end message, SSE `data`
//! and `control` events and the collapsing cursor. Pure: no I/O; the serving loop is
//! the sidecar's Durable Streams writer.
//!
//! Each message is one recorded event's JSON; after the last event comes one end message (the
//! protocol-1 `STREAM_END` object, so `persisted` reaches the reader) and the stream is closed.
//! An offset is `<seq, 20 digits>_<run_id>`: the messages up to seq `seq` of that run are read
//! (the end message is seq `end.seq + 1`). Fixed width, so offsets of one run sort as their
//! positions do; the run id in it keeps a chat's stream from resuming into another turn.

use bytes::{BufMut, BytesMut};

use crate::error::{ApiError, Code};
use crate::frame;
use crate::request::{self, Query};
use crate::vocab::end::End;
use crate::vocab::RunId;

/// The content type of every stream tether serves (JSON mode).
pub const CONTENT_TYPE: &str = "application/json";

/// The protocol's response headers, as tether writes them.
pub mod header {
    /// The offset to read from next.
    pub const NEXT_OFFSET: &str = "stream-next-offset";
    /// The collapsing cursor of a live read.
    pub const CURSOR: &str = "stream-cursor";
    /// The response holds everything the stream had when it was written.
    pub const UP_TO_DATE: &str = "stream-up-to-date";
    /// The stream is closed and the reader has reached its end.
    pub const CLOSED: &str = "stream-closed";
    /// Every header a page on another origin must be able to read.
    pub const EXPOSED: [&str; 5] = [NEXT_OFFSET, CURSOR, UP_TO_DATE, CLOSED, "etag"];
}

/// Digits of a seq in an offset (`u64::MAX` has 20).
const SEQ_DIGITS: usize = 20;

/// Where a read starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum From {
    /// `-1` (or no `offset`): the stream's beginning.
    Start,
    /// `now`: the current tail; no history.
    Now,
    /// An offset tether gave: after seq `seq` of run `run`.
    At {
        /// The run the offset belongs to.
        run: RunId,
        /// The messages up to this seq have been read.
        seq: u64,
    },
}

/// How a read waits for what is not there yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Live {
    /// A catch-up read: what there is, now.
    No,
    /// `live=long-poll`: what there is, or wait for the next message up to a timeout.
    LongPoll,
    /// `live=sse`: an SSE response of `data` and `control` events until the stream closes.
    Sse,
}

/// One read, as the query asked for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadRequest {
    /// Where it starts.
    pub from: From,
    /// How it waits.
    pub live: Live,
    /// The `cursor` the reader echoed (ignored when it is not a number).
    pub cursor: Option<u64>,
}

/// Parses a read's query. A malformed offset or an unknown `live` mode is `400`; so is a live
/// read without an offset (the protocol requires one).
pub fn parse(query: Option<&str>) -> Result<ReadRequest, ApiError> {
    let q = Query::parse(query);
    let live = match q.get("live")?.as_deref() {
        None => Live::No,
        Some("long-poll") => Live::LongPoll,
        Some("sse") => Live::Sse,
        Some(other) => {
            return Err(ApiError::new(
                Code::InvalidQuery,
                format!("live must be long-poll or sse, not {other:?}"),
            ))
        }
    };
    let from = match q.get("offset")?.as_deref() {
        None if live != Live::No => {
            return Err(ApiError::new(
                Code::InvalidOffset,
                "a live read needs an offset",
            ))
        }
        None | Some("-1") => From::Start,
        Some("now") => From::Now,
        Some(o) => parse_offset(o)?,
    };
    let cursor = q.get("cursor")?.and_then(|c| c.parse().ok());
    Ok(ReadRequest { from, live, cursor })
}

/// Parses an offset tether gave (`<20 digits>_<run_id>`).
pub fn parse_offset(o: &str) -> Result<From, ApiError> {
    let bad = || {
        ApiError::new(
            Code::InvalidOffset,
            "offset must be -1, now or an offset tether gave",
        )
    };
    let (seq, run) = match (o.get(..SEQ_DIGITS), o.get(SEQ_DIGITS..)) {
        (Some(seq), Some(rest)) => (seq, rest.strip_prefix('_').ok_or_else(bad)?),
        _ => return Err(bad()),
    };
    if !seq.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    request::check_run_id(run).map_err(|_| bad())?;
    let seq = seq.parse().map_err(|_| bad())?;
    Ok(From::At {
        run: RunId::from(run),
        seq,
    })
}

/// The offset after seq `seq` of run `run`.
pub fn offset(run: &RunId, seq: u64) -> String {
    format!("{seq:0SEQ_DIGITS$}_{run}")
}

/// The offset after a run's last message: after its end message once it has ended, else after
/// its head.
pub fn tail(run: &RunId, head: u64, end: Option<&End>) -> String {
    match end {
        Some(e) => offset(run, e.seq + 1),
        None => offset(run, head),
    }
}

/// Appends the end message (the protocol-1 `STREAM_END` object) to a JSON array being built.
pub fn put_end(out: &mut BytesMut, run: &RunId, end: &End) {
    let f = frame::end(run, end);
    // `id: …\ndata: <object>\n\n`: the object is the frame's one data line.
    let data = f
        .iter()
        .position(|&b| b == b'\n')
        .map(|nl| &f[nl + b"\ndata: ".len()..f.len() - 2]);
    if let Some(obj) = data {
        put_sep(out);
        out.put_slice(obj);
    }
}

/// Starts a JSON array of messages.
pub fn open(out: &mut BytesMut) {
    out.put_u8(b'[');
}

/// Ends a JSON array of messages.
pub fn close(out: &mut BytesMut) {
    out.put_u8(b']');
}

/// A comma unless the array is still empty.
pub fn put_sep(out: &mut BytesMut) {
    if out.last() != Some(&b'[') {
        out.put_u8(b',');
    }
}

/// An SSE `data` event carrying one JSON array: one `data:` line per line of it (a reader joins
/// them with `\n`, which JSON reads as whitespace).
pub fn sse_data(out: &mut BytesMut, array: &[u8]) {
    out.put_slice(b"event: data\n");
    for line in array.split(|&b| b == b'\n') {
        out.put_slice(b"data: ");
        out.put_slice(line);
        out.put_u8(b'\n');
    }
    out.put_u8(b'\n');
}

/// An SSE `control` event: the next offset, the cursor while the stream is open, `upToDate`,
/// and `streamClosed` once the reader has reached the end of a closed stream.
pub fn sse_control(out: &mut BytesMut, next: &str, cursor: u64, up_to_date: bool, closed: bool) {
    out.put_slice(b"event: control\ndata: {\"streamNextOffset\":\"");
    out.put_slice(next.as_bytes());
    out.put_u8(b'"');
    if closed {
        out.put_slice(b",\"streamClosed\":true,\"upToDate\":true");
    } else {
        out.put_slice(b",\"streamCursor\":\"");
        out.put_slice(itoa::Buffer::new().format(cursor).as_bytes());
        out.put_u8(b'"');
        if up_to_date {
            out.put_slice(b",\"upToDate\":true");
        }
    }
    out.put_slice(b"}\n\n");
}

/// The start of the protocol's cursor intervals: 2024-10-09T00:00:00Z, in Unix seconds.
const CURSOR_EPOCH: u64 = 1_728_432_000;
/// The length of one cursor interval.
const CURSOR_INTERVAL_SECS: u64 = 20;

/// The collapsing cursor of a live response at Unix time `now`: the number of 20-second
/// intervals since the protocol's epoch, or, when the reader echoed a cursor at or past it,
/// that cursor advanced by `jitter_secs` (1 to 3,600, random) so cursors never go back.
pub fn stream_cursor(now: u64, echoed: Option<u64>, jitter_secs: u64) -> u64 {
    let interval = now.saturating_sub(CURSOR_EPOCH) / CURSOR_INTERVAL_SECS;
    match echoed {
        Some(c) if c >= interval => c.saturating_add(1 + jitter_secs / CURSOR_INTERVAL_SECS),
        _ => interval,
    }
}

/// The entity tag of a catch-up response: the run, the range read and whether it reached the
/// end of the closed stream.
pub fn etag(run: &RunId, from: u64, next: u64, closed: bool) -> String {
    let c = if closed { ":c" } else { "" };
    format!("\"{run}:{from}:{next}{c}\"")
}

#[cfg(test)]
mod tests;
