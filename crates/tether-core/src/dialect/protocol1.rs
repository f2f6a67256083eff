//! Protocol 1, tether's own dialect: frames `STREAM_SNAPSHOT`, `STREAM_EVENT` and `STREAM_END`,
//! each one SSE event `id: <run_id>:<seq>\ndata: <one-line JSON>\n\n`, and the attach request
//! (`POST` body, or `GET` query plus `Last-Event-ID: <run_id>:<seq>`).

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use serde_json::{Map, Value};

use super::{AttachRequest, Dialect, Incoming};
use crate::error::{ApiError, Code};
use crate::frame::{self, EventEncoder};
use crate::record::compact::Capture;
use crate::request;
use crate::settings::KeySource;
use crate::vocab::end::End;
use crate::vocab::RunId;

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

    fn snapshot(&self, run_id: &RunId, seq: u64, history: &Capture) -> Bytes {
        frame::snapshot(run_id, seq, history)
    }

    fn event(&self, out: &mut BytesMut, run_id: &RunId, seq: u64, event: &[u8]) {
        EventEncoder::new(run_id).write(out, seq, event);
    }

    fn end(&self, run_id: &RunId, end: &End) -> Bytes {
        frame::end(run_id, end)
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
pub fn last_event_id(v: &str) -> Result<(RunId, u64), ApiError> {
    let (run, seq) = v.rsplit_once(':').ok_or_else(|| {
        ApiError::new(
            Code::InvalidLastEventId,
            "Last-Event-ID must be <run_id>:<seq>",
        )
    })?;
    request::check_run_id(run)?;
    Ok((RunId::from(run), parse_cursor(seq, "Last-Event-ID seq")?))
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
