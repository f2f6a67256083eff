//! Client requests: parsing and validating record and attach inputs, and the JSON error answers.
//!
//! Pure: works on bodies, query strings and header values. Every rejection is an [`ApiError`]
//! with a stable `code`, answered as `{"error": "<code>", "message": "…"}`.

use std::time::Duration;

use bytes::Bytes;
use serde_json::{Map, Value};

use crate::config::ChatIdFrom;

/// Longest chat id accepted, in bytes.
pub const MAX_CHAT_ID: usize = 256;
/// Longest run id accepted, in bytes.
pub const MAX_RUN_ID: usize = 64;

/// A rejected request: HTTP status, stable code, message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// HTTP status.
    pub status: u16,
    /// Stable machine-readable code.
    pub code: &'static str,
    /// Human-readable detail.
    pub message: String,
}

impl ApiError {
    /// A 400 with `code`.
    pub fn bad(code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status: 400,
            code,
            message: message.into(),
        }
    }

    /// The JSON body of the answer.
    pub fn body(&self) -> Bytes {
        let v = serde_json::json!({"error": self.code, "message": self.message});
        Bytes::from(v.to_string())
    }
}

/// A record request's parsed inputs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordRequest {
    /// The chat the run belongs to.
    pub chat_id: String,
    /// Whether the requester asked for protocol-1 frames.
    pub protocol1: bool,
}

/// An attach request's parsed inputs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttachRequest {
    /// The chat to attach to.
    pub chat_id: String,
    /// Whether the requester speaks protocol 1 (always true for GET).
    pub protocol1: bool,
    /// The run the cursor belongs to.
    pub run_id: Option<String>,
    /// The last seq the client applied.
    pub after_seq: Option<u64>,
    /// How long to wait for a run when the chat has none (already capped).
    pub wait: Duration,
}

/// Parses a JSON object body.
pub fn json_object(body: &[u8]) -> Result<Map<String, Value>, ApiError> {
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(ApiError::bad(
            "invalid_body",
            "the body must be a JSON object",
        )),
        Err(e) => Err(ApiError::bad(
            "invalid_json",
            format!("the body is not JSON: {e}"),
        )),
    }
}

/// Checks a chat id: 1 to 256 bytes of UTF-8 without control characters.
pub fn check_chat_id(id: &str) -> Result<(), ApiError> {
    if id.is_empty() || id.len() > MAX_CHAT_ID {
        return Err(ApiError::bad(
            "invalid_chat_id",
            format!("chat_id must be 1 to {MAX_CHAT_ID} bytes"),
        ));
    }
    if id.chars().any(char::is_control) {
        return Err(ApiError::bad(
            "invalid_chat_id",
            "chat_id must not contain control characters",
        ));
    }
    Ok(())
}

/// Checks a run id: 1 to 64 of `[A-Za-z0-9_-]`.
pub fn check_run_id(id: &str) -> Result<(), ApiError> {
    let ok = !id.is_empty()
        && id.len() <= MAX_RUN_ID
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(ApiError::bad(
            "invalid_run_id",
            format!("run_id must be 1 to {MAX_RUN_ID} of A-Z a-z 0-9 _ -"),
        ))
    }
}

fn chat_id_value(v: Option<&Value>, name: &str) -> Result<String, ApiError> {
    match v {
        None | Some(Value::Null) => Err(ApiError::bad(
            "missing_chat_id",
            format!("the request has no {name}"),
        )),
        Some(Value::String(s)) => {
            check_chat_id(s)?;
            Ok(s.clone())
        }
        Some(_) => Err(ApiError::bad(
            "invalid_chat_id",
            format!("{name} must be a string"),
        )),
    }
}

/// The decoded value of query parameter `name`.
pub fn query_param(query: Option<&str>, name: &str) -> Result<Option<String>, ApiError> {
    let Some(q) = query else { return Ok(None) };
    for pair in q.split('&') {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        if k == name {
            return percent_decode(v).map(Some).ok_or_else(|| {
                ApiError::bad("invalid_query", format!("{name} is not valid UTF-8"))
            });
        }
    }
    Ok(None)
}

fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' if i + 2 < b.len() => {
                let hex = std::str::from_utf8(&b[i + 1..i + 3]).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b'%' => return None,
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

fn protocol1(body: &Map<String, Value>) -> Result<bool, ApiError> {
    match body.get("protocol") {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Number(n)) if n.as_u64() == Some(1) => Ok(true),
        Some(_) => Err(ApiError::bad(
            "invalid_protocol",
            "protocol must be 1 or absent",
        )),
    }
}

/// Parses a record request. The chat id comes from where the route says.
pub fn record(
    from: &ChatIdFrom,
    body: &[u8],
    query: Option<&str>,
    header: impl Fn(&str) -> Option<String>,
) -> Result<RecordRequest, ApiError> {
    let map = match (from, body.is_empty()) {
        (ChatIdFrom::Body(_), _) | (_, false) => Some(json_object(body)?),
        _ => None,
    };
    let chat_id = match from {
        ChatIdFrom::Body(f) => chat_id_value(map.as_ref().and_then(|m| m.get(f)), f)?,
        ChatIdFrom::Query(q) => {
            chat_id_value(query_param(query, q)?.map(Value::String).as_ref(), q)?
        }
        ChatIdFrom::Header(h) => chat_id_value(header(h).map(Value::String).as_ref(), h)?,
    };
    let protocol1 = match &map {
        Some(m) => protocol1(m)?,
        None => false,
    };
    Ok(RecordRequest { chat_id, protocol1 })
}

fn cursor_value(v: &Value, name: &str) -> Result<u64, ApiError> {
    v.as_u64().ok_or_else(|| {
        ApiError::bad(
            "invalid_cursor",
            format!("{name} must be a non-negative integer below 2^64"),
        )
    })
}

fn parse_cursor(s: &str, name: &str) -> Result<u64, ApiError> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(ApiError::bad(
            "invalid_cursor",
            format!("{name} must be a non-negative integer"),
        ));
    }
    s.parse()
        .map_err(|_| ApiError::bad("invalid_cursor", format!("{name} is too large")))
}

/// Parses `Last-Event-ID: <run_id>:<seq>`.
pub fn last_event_id(v: &str) -> Result<(String, u64), ApiError> {
    let (run, seq) = v.rsplit_once(':').ok_or_else(|| {
        ApiError::bad(
            "invalid_last_event_id",
            "Last-Event-ID must be <run_id>:<seq>",
        )
    })?;
    check_run_id(run)?;
    Ok((run.to_string(), parse_cursor(seq, "Last-Event-ID seq")?))
}

/// Parses a `POST` attach body; `max_wait` caps `wait_ms`.
pub fn attach_post(
    from: &ChatIdFrom,
    body: &[u8],
    max_wait: Duration,
) -> Result<AttachRequest, ApiError> {
    let m = json_object(body)?;
    let field = match from {
        ChatIdFrom::Body(f) => f.as_str(),
        _ => "chat_id",
    };
    let chat_id = chat_id_value(m.get(field), field)?;
    let protocol1 = protocol1(&m)?;
    let run_id = match m.get("run_id") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => {
            check_run_id(s)?;
            Some(s.clone())
        }
        Some(_) => return Err(ApiError::bad("invalid_run_id", "run_id must be a string")),
    };
    let after_seq = match m.get("after_seq") {
        None | Some(Value::Null) => None,
        Some(v) => Some(cursor_value(v, "after_seq")?),
    };
    let wait = match m.get("wait_ms") {
        None | Some(Value::Null) => 0,
        Some(v) => v.as_u64().ok_or_else(|| {
            ApiError::bad("invalid_wait_ms", "wait_ms must be a non-negative integer")
        })?,
    };
    Ok(AttachRequest {
        chat_id,
        protocol1,
        run_id,
        after_seq,
        wait: Duration::from_millis(wait).min(max_wait),
    })
}

/// Parses a `GET` attach (query string and `Last-Event-ID`); always protocol 1.
pub fn attach_get(
    query: Option<&str>,
    last_event_id_header: Option<&str>,
    max_wait: Duration,
) -> Result<AttachRequest, ApiError> {
    let chat_id = chat_id_value(
        query_param(query, "chat_id")?.map(Value::String).as_ref(),
        "chat_id",
    )?;
    let mut run_id = query_param(query, "run_id")?;
    if let Some(r) = &run_id {
        check_run_id(r)?;
    }
    let mut after_seq = match query_param(query, "after_seq")? {
        Some(s) => Some(parse_cursor(&s, "after_seq")?),
        None => None,
    };
    if let Some(h) = last_event_id_header.filter(|h| !h.is_empty()) {
        let (r, s) = last_event_id(h)?;
        run_id = Some(r);
        after_seq = Some(s);
    }
    let wait = match query_param(query, "wait_ms")? {
        Some(s) => parse_cursor(&s, "wait_ms").map_err(|_| {
            ApiError::bad("invalid_wait_ms", "wait_ms must be a non-negative integer")
        })?,
        None => 0,
    };
    Ok(AttachRequest {
        chat_id,
        protocol1: true,
        run_id,
        after_seq,
        wait: Duration::from_millis(wait).min(max_wait),
    })
}

#[cfg(test)]
#[path = "request_tests.rs"]
mod tests;
