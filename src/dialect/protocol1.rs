//! Protocol 1, tether's own dialect: frames `STREAM_SNAPSHOT`, `STREAM_EVENT` and `STREAM_END`,
//! each one SSE event `id: <run_id>:<seq>\ndata: <one-line JSON>\n\n`, and the attach request
//! (`POST` body, or `GET` query plus `Last-Event-ID: <run_id>:<seq>`).

use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use serde_json::{Map, Value};

use super::{AttachRequest, Dialect, Incoming};
use crate::compact::Capture;
use crate::config::KeySource;
use crate::error::{ApiError, Code};
use crate::journal::End;
use crate::json::write_str as write_json_str;
use crate::request;

/// Digits of the largest seq (`u64::MAX`).
const MAX_SEQ_DIGITS: usize = 20;

fn write_id(out: &mut BytesMut, run_id: &str, seq: u64) {
    out.put_slice(b"id: ");
    out.put_slice(run_id.as_bytes());
    out.put_u8(b':');
    out.put_slice(itoa::Buffer::new().format(seq).as_bytes());
    out.put_slice(b"\ndata: ");
}

fn write_head(out: &mut BytesMut, ty: &str, run_id: &str, seq: u64) {
    write_id(out, run_id, seq);
    out.put_slice(b"{\"type\":\"");
    out.put_slice(ty.as_bytes());
    out.put_slice(b"\",\"run_id\":");
    write_json_str(out, run_id);
    out.put_slice(b",\"seq\":");
    out.put_slice(itoa::Buffer::new().format(seq).as_bytes());
}

/// Upper bound of a frame's fixed part: `id: <run_id>:<seq>\ndata: ` and the terminator, plus
/// `{"type":"STREAM_SNAPSHOT","run_id":<run_id>,"seq":<seq>` with room for escapes.
fn overhead(run_id: &str) -> usize {
    let id_line = "id: :\ndata: \n\n".len() + run_id.len() + MAX_SEQ_DIGITS;
    id_line + 64 + 2 * run_id.len() + MAX_SEQ_DIGITS
}

/// Encodes the `STREAM_EVENT` frames of one run; the parts that do not change per event are
/// rendered once.
#[derive(Debug, Clone)]
pub struct EventEncoder {
    /// `id: <run_id>:`
    id: Bytes,
    /// `\ndata: {"type":"STREAM_EVENT","run_id":"<run_id>","seq":`
    head: Bytes,
}

impl EventEncoder {
    /// An encoder for the run `run_id`.
    pub fn new(run_id: &str) -> Self {
        let mut id = BytesMut::new();
        id.put_slice(b"id: ");
        id.put_slice(run_id.as_bytes());
        id.put_u8(b':');
        let mut head = BytesMut::new();
        head.put_slice(b"\ndata: {\"type\":\"STREAM_EVENT\",\"run_id\":");
        write_json_str(&mut head, run_id);
        head.put_slice(b",\"seq\":");
        EventEncoder {
            id: id.freeze(),
            head: head.freeze(),
        }
    }

    /// The encoded size of a frame carrying `event_len` bytes of event, at most.
    pub fn max_len(&self, event_len: usize) -> usize {
        // The seq twice, then `,"event":` and `}\n\n`.
        self.id.len() + self.head.len() + 2 * MAX_SEQ_DIGITS + 12 + event_len
    }

    /// Appends a `STREAM_EVENT` frame carrying `event` (one-line JSON) byte for byte.
    pub fn write(&self, out: &mut BytesMut, seq: u64, event: &[u8]) {
        let mut n = itoa::Buffer::new();
        let seq = n.format(seq).as_bytes();
        out.reserve(self.max_len(event.len()));
        out.put_slice(&self.id);
        out.put_slice(seq);
        out.put_slice(&self.head);
        out.put_slice(seq);
        out.put_slice(b",\"event\":");
        out.put_slice(event);
        out.put_slice(b"}\n\n");
    }

    /// Like [`Self::write`], for an upstream event whose SSE `event:` name differs from its JSON
    /// `type`: the frame also carries `"event_name":<name>` after the event.
    pub fn write_named(&self, out: &mut BytesMut, seq: u64, event: &[u8], name: &[u8]) {
        self.write(out, seq, event);
        out.truncate(out.len() - b"}\n\n".len());
        out.put_slice(b",\"event_name\":");
        write_json_str(out, &String::from_utf8_lossy(name));
        out.put_slice(b"}\n\n");
    }

    /// The encoded size of a frame carrying `event_len` bytes of event and an `event_name` of
    /// `name_len` bytes, at most (each name byte may take a six-byte escape).
    pub fn max_len_named(&self, event_len: usize, name_len: usize) -> usize {
        self.max_len(event_len) + ",\"event_name\":\"\"".len() + 6 * name_len
    }
}

/// A `STREAM_SNAPSHOT` frame of a compacted history covering seqs up to `seq`.
pub fn snapshot(run_id: &str, seq: u64, history: &Capture) -> Bytes {
    let mut out = BytesMut::with_capacity(overhead(run_id) + 16 + history.len());
    write_head(&mut out, "STREAM_SNAPSHOT", run_id, seq);
    out.put_slice(b",\"events\":[");
    history.write_to(&mut out);
    out.put_slice(b"]}\n\n");
    out.freeze()
}

/// A `STREAM_END` frame.
pub fn end(run_id: &str, end: &End) -> Bytes {
    let mut out = BytesMut::with_capacity(overhead(run_id) + 128);
    write_head(&mut out, "STREAM_END", run_id, end.seq);
    out.put_slice(if end.persisted {
        &b",\"persisted\":true"[..]
    } else {
        b",\"persisted\":false"
    });
    out.put_slice(if end.superseded {
        &b",\"superseded\":true"[..]
    } else {
        b",\"superseded\":false"
    });
    if let Some(next) = &end.next_run_id {
        out.put_slice(b",\"next_run_id\":");
        write_json_str(&mut out, next);
    }
    if let Some(reason) = end.reason {
        out.put_slice(b",\"reason\":\"");
        out.put_slice(reason.as_str().as_bytes());
        out.put_u8(b'"');
    }
    out.put_slice(b"}\n\n");
    out.freeze()
}

/// Protocol 1.
#[derive(Debug, Clone, Copy, Default)]
pub struct Protocol1;

impl Dialect for Protocol1 {
    fn name(&self) -> &'static str {
        "protocol1"
    }

    fn parse(&self, req: &Incoming<'_>) -> Result<AttachRequest, ApiError> {
        if req.get {
            let last = (req.parts.header)("last-event-id");
            attach_get(req.chat_id, &req.parts, last.as_deref(), req.max_wait)
        } else {
            attach_post(req.chat_id, req.body, &req.parts, req.max_wait)
        }
    }

    fn snapshot(&self, run_id: &str, seq: u64, history: &Capture) -> Bytes {
        snapshot(run_id, seq, history)
    }

    fn event(&self, out: &mut BytesMut, run_id: &str, seq: u64, event: &[u8]) {
        EventEncoder::new(run_id).write(out, seq, event);
    }

    fn end(&self, run_id: &str, end: &End) -> Bytes {
        self::end(run_id, end)
    }
}

fn cursor_value(v: &Value, name: &str) -> Result<u64, ApiError> {
    v.as_u64().ok_or_else(|| {
        ApiError::new(
            Code::InvalidCursor,
            format!("{name} must be a non-negative integer below 2^64"),
        )
    })
}

fn parse_cursor(s: &str, name: &str) -> Result<u64, ApiError> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(ApiError::new(
            Code::InvalidCursor,
            format!("{name} must be a non-negative integer"),
        ));
    }
    s.parse()
        .map_err(|_| ApiError::new(Code::InvalidCursor, format!("{name} is too large")))
}

/// Parses `Last-Event-ID: <run_id>:<seq>`.
pub fn last_event_id(v: &str) -> Result<(String, u64), ApiError> {
    let (run, seq) = v.rsplit_once(':').ok_or_else(|| {
        ApiError::new(
            Code::InvalidLastEventId,
            "Last-Event-ID must be <run_id>:<seq>",
        )
    })?;
    request::check_run_id(run)?;
    Ok((run.to_string(), parse_cursor(seq, "Last-Event-ID seq")?))
}

fn wait_ms(v: Option<u64>, max_wait: Duration) -> Duration {
    Duration::from_millis(v.unwrap_or(0)).min(max_wait)
}

/// Parses a `POST` attach body; the chat id comes from where the route says; `max_wait` caps
/// `wait_ms`.
pub fn attach_post(
    from: &KeySource,
    body: &[u8],
    parts: &request::Parts<'_>,
    max_wait: Duration,
) -> Result<AttachRequest, ApiError> {
    let m: Map<String, Value> = request::control_body(from, body)?;
    let chat_id = request::chat_id(from, parts, Some(&m))?;
    let protocol1 = request::protocol1(&m)?;
    let run_id = request::run_id_value(m.get("run_id"))?;
    let after_seq = match m.get("after_seq") {
        None | Some(Value::Null) => None,
        Some(v) => Some(cursor_value(v, "after_seq")?),
    };
    let wait = match m.get("wait_ms") {
        None | Some(Value::Null) => None,
        Some(v) => Some(v.as_u64().ok_or_else(|| {
            ApiError::new(
                Code::InvalidWaitMs,
                "wait_ms must be a non-negative integer",
            )
        })?),
    };
    Ok(AttachRequest {
        chat_id,
        protocol1,
        run_id,
        after_seq,
        wait: wait_ms(wait, max_wait),
    })
}

/// Parses a `GET` attach (query string and `Last-Event-ID`); always protocol 1. The chat id comes
/// from where the route says; a `body:<field>` route reads the query parameter `<field>`.
pub fn attach_get(
    from: &KeySource,
    parts: &request::Parts<'_>,
    last_event_id_header: Option<&str>,
    max_wait: Duration,
) -> Result<AttachRequest, ApiError> {
    let q = request::Query::parse(parts.query);
    let chat_id = request::chat_id(from, parts, None)?;
    let mut run_id = request::run_id_value(q.get("run_id")?.map(Value::String).as_ref())?;
    let mut after_seq = match q.get("after_seq")? {
        Some(s) => Some(parse_cursor(&s, "after_seq")?),
        None => None,
    };
    if let Some(h) = last_event_id_header.filter(|h| !h.is_empty()) {
        let (r, s) = last_event_id(h)?;
        run_id = Some(r);
        after_seq = Some(s);
    }
    let wait = match q.get("wait_ms")? {
        Some(s) => Some(parse_cursor(&s, "wait_ms").map_err(|_| {
            ApiError::new(
                Code::InvalidWaitMs,
                "wait_ms must be a non-negative integer",
            )
        })?),
        None => None,
    };
    Ok(AttachRequest {
        chat_id,
        protocol1: true,
        run_id,
        after_seq,
        wait: wait_ms(wait, max_wait),
    })
}

#[cfg(test)]
mod tests;
