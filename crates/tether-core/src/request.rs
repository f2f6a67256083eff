//! Client requests: parsing and validating record, stop and status inputs, and the shared
//! checks (chat ids, run ids, JSON bodies, query strings) every dialect reuses. A key such as
//! the chat id is read from the route's [`KeySource`] by [`key`].
//!
//! Pure: works on bodies, query strings and header values. Every rejection is an [`ApiError`]
//! with a stable code.

use serde_json::{Map, Value};

use crate::error::{ApiError, Code};
use crate::settings::KeySource;
use crate::vocab::{ChatId, RunId};

/// Longest chat id accepted, in bytes.
pub const MAX_CHAT_ID: usize = 256;
/// Longest run id accepted, in bytes.
pub const MAX_RUN_ID: usize = 64;
/// Longest `cancel_request_id` accepted, in bytes.
pub const MAX_CANCEL_ID: usize = 128;

/// A record request's parsed inputs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordRequest {
    /// The chat the run belongs to.
    pub chat_id: ChatId,
    /// Whether the requester asked for protocol-1 frames.
    pub protocol1: bool,
    /// The body as a JSON object, when the route read it as one.
    pub body: Option<Map<String, Value>>,
}

/// A stop request's parsed inputs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StopRequest {
    /// The chat whose run to stop.
    pub chat_id: ChatId,
    /// The run to stop (default: the chat's current run).
    pub run_id: Option<RunId>,
    /// An idempotency key: a repeated stop names the run the first one stopped.
    pub cancel_request_id: Option<String>,
}

/// A decoded `application/x-www-form-urlencoded` query string.
#[derive(Debug, Clone, Copy)]
pub struct Query<'a> {
    raw: Option<&'a str>,
}

impl<'a> Query<'a> {
    /// The query of a request URI (`None`: no query).
    pub fn parse(raw: Option<&'a str>) -> Self {
        Query { raw }
    }

    /// The decoded value of parameter `name` (its first occurrence).
    pub fn get(&self, name: &str) -> Result<Option<String>, ApiError> {
        let Some(raw) = self.raw else { return Ok(None) };
        // `form_urlencoded` decodes lossily; a query that is not UTF-8 once decoded is refused.
        // ('&', '=' and '+' are ASCII, so the whole query decodes to UTF-8 exactly when every
        // key and value does.)
        if percent_encoding::percent_decode_str(raw)
            .decode_utf8()
            .is_err()
        {
            return Err(ApiError::new(
                Code::InvalidQuery,
                format!("the query is not valid UTF-8 (looking for {name})"),
            ));
        }
        Ok(form_urlencoded::parse(raw.as_bytes())
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.into_owned()))
    }
}

/// Parses a JSON object body.
pub fn json_object(body: &[u8]) -> Result<Map<String, Value>, ApiError> {
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(ApiError::new(
            Code::InvalidBody,
            "the body must be a JSON object",
        )),
        Err(e) => Err(ApiError::new(
            Code::InvalidJson,
            format!("the body is not JSON: {e}"),
        )),
    }
}

/// Checks a chat id: 1 to 256 bytes of UTF-8 without control characters.
pub fn check_chat_id(id: &str) -> Result<(), ApiError> {
    if id.is_empty() || id.len() > MAX_CHAT_ID {
        return Err(ApiError::new(
            Code::InvalidChatId,
            format!("chat_id must be 1 to {MAX_CHAT_ID} bytes"),
        ));
    }
    if id.chars().any(char::is_control) {
        return Err(ApiError::new(
            Code::InvalidChatId,
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
        Err(ApiError::new(
            Code::InvalidRunId,
            format!("run_id must be 1 to {MAX_RUN_ID} of A-Z a-z 0-9 _ -"),
        ))
    }
}

/// A required chat id named `name`: present, a string, and valid.
pub fn chat_id_value(v: Option<&Value>, name: &str) -> Result<ChatId, ApiError> {
    match v {
        None | Some(Value::Null) => Err(ApiError::new(
            Code::MissingChatId,
            format!("the request has no {name}"),
        )),
        Some(Value::String(s)) => {
            check_chat_id(s)?;
            Ok(ChatId::from(s.as_str()))
        }
        Some(_) => Err(ApiError::new(
            Code::InvalidChatId,
            format!("{name} must be a string"),
        )),
    }
}

/// An optional run id: absent, null, or a valid run id string.
pub fn run_id_value(v: Option<&Value>) -> Result<Option<RunId>, ApiError> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => {
            check_run_id(s)?;
            Ok(Some(RunId::from(s.as_str())))
        }
        Some(_) => Err(ApiError::new(Code::InvalidRunId, "run_id must be a string")),
    }
}

/// Whether a body asks for protocol 1 (`"protocol": 1`); any other value is refused.
pub fn protocol1(body: &Map<String, Value>) -> Result<bool, ApiError> {
    match body.get("protocol") {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Number(n)) if n.as_u64() == Some(1) => Ok(true),
        Some(_) => Err(ApiError::new(
            Code::InvalidProtocol,
            "protocol must be 1 or absent",
        )),
    }
}

/// The parts of a request a key source reads, besides the body.
#[derive(Clone, Copy)]
pub struct Parts<'a> {
    /// The matched route's path captures, raw (percent-encoded) as in the request path.
    pub captures: &'a [(String, String)],
    /// The raw query string.
    pub query: Option<&'a str>,
    /// A request header's value by (lower-case) name.
    pub header: &'a dyn Fn(&str) -> Option<String>,
}

impl Parts<'_> {
    /// Parts with no captures, no query and no headers.
    pub const EMPTY: Parts<'static> = Parts {
        captures: &[],
        query: None,
        header: &|_| None,
    };
}

/// The value at an RFC 6901 `pointer` (`/`-prefixed) in a JSON object.
fn pointer<'v>(body: &'v Map<String, Value>, pointer: &str) -> Option<&'v Value> {
    let tokens = pointer.strip_prefix('/')?;
    let (first, rest) = match tokens.find('/') {
        Some(i) => (&tokens[..i], &tokens[i..]),
        None => (tokens, ""),
    };
    let first = first.replace("~1", "/").replace("~0", "~");
    body.get(&first)?.pointer(rest)
}

/// A request's `Cookie` header lines joined into one value, `; ` between them, when it has more
/// than one (`None` otherwise: nothing to change). An HTTP/2 client may split its cookies into
/// one `cookie` field each, and RFC 9113 §8.2.3 says they must be joined so before the request
/// goes on as HTTP/1.1, where a `Cookie` header is one line (RFC 6265 §5.4): a backend that
/// reads only one line, or joins repeated headers with `,`, would lose or garble the rest. Empty
/// lines are dropped; an all-empty set joins to an empty value.
pub fn joined_cookies(headers: &http::HeaderMap) -> Option<http::HeaderValue> {
    let mut lines = headers.get_all(http::header::COOKIE).iter();
    lines.next()?;
    lines.next()?;
    let mut joined: Vec<u8> = Vec::new();
    for v in headers.get_all(http::header::COOKIE) {
        let crumb = v.as_bytes().trim_ascii();
        if crumb.is_empty() {
            continue;
        }
        if !joined.is_empty() {
            joined.extend_from_slice(b"; ");
        }
        joined.extend_from_slice(crumb);
    }
    // Each line was a valid field value, and `; ` is one too.
    http::HeaderValue::from_bytes(&joined).ok()
}

/// The value of a cookie in the `Cookie` header, as sent.
fn cookie(header: Option<String>, name: &str) -> Option<String> {
    let header = header?;
    cookie::Cookie::split_parse(header.as_str())
        .filter_map(Result::ok)
        .find(|c| c.name() == name)
        .map(|c| c.value().to_string())
}

/// Reads a key from where `source` says. `body` is the request's JSON body, `None` for a request
/// without one (a `body:<field>` source then reads the query parameter `<field>`). A path capture
/// is percent-decoded; one that is not UTF-8 once decoded is refused with `invalid`. `Ok(None)`:
/// the request has no such key.
pub fn key(
    source: &KeySource,
    parts: &Parts<'_>,
    body: Option<&Map<String, Value>>,
    invalid: Code,
) -> Result<Option<Value>, ApiError> {
    let text = match source {
        KeySource::Json { pointer: p, field } => match (body, field) {
            (Some(m), _) => return Ok(pointer(m, p).cloned()),
            (None, Some(f)) => Query::parse(parts.query).get(f)?,
            (None, None) => None,
        },
        KeySource::Path(name) => match parts.captures.iter().find(|(k, _)| k == name) {
            Some((_, raw)) => Some(
                percent_encoding::percent_decode_str(raw)
                    .decode_utf8()
                    .map_err(|_| {
                        ApiError::new(
                            invalid,
                            format!("the path capture {name} is not UTF-8 once decoded"),
                        )
                    })?
                    .into_owned(),
            ),
            None => None,
        },
        KeySource::Query(name) => Query::parse(parts.query).get(name)?,
        KeySource::Header(name) => (parts.header)(name),
        KeySource::Cookie(name) => cookie((parts.header)("cookie"), name),
    };
    Ok(text.map(Value::String))
}

/// The chat id from where `source` says (see [`key`]): present, a string, and valid.
pub fn chat_id(
    source: &KeySource,
    parts: &Parts<'_>,
    body: Option<&Map<String, Value>>,
) -> Result<ChatId, ApiError> {
    let v = key(source, parts, body, Code::InvalidChatId)?;
    chat_id_value(v.as_ref(), source.label())
}

/// A record request's body as a record route reads it: a JSON object when it is not empty or
/// the chat id is in it, else none (a `body:<field>` source then reads the query).
pub fn record_body(from: &KeySource, body: &[u8]) -> Result<Option<Map<String, Value>>, ApiError> {
    match (from, body.is_empty()) {
        (KeySource::Json { .. }, _) | (_, false) => Ok(Some(json_object(body)?)),
        _ => Ok(None),
    }
}

/// Parses a record request. The chat id comes from where the route says; a non-empty body must
/// be a JSON object (it is read for `"protocol": 1`).
pub fn record(from: &KeySource, body: &[u8], parts: &Parts<'_>) -> Result<RecordRequest, ApiError> {
    let map = record_body(from, body)?;
    let chat_id = chat_id(from, parts, map.as_ref())?;
    let protocol1 = match &map {
        Some(m) => protocol1(m)?,
        None => false,
    };
    Ok(RecordRequest {
        chat_id,
        protocol1,
        body: map,
    })
}

/// A control body (stop, `POST` attach): a JSON object. With a chat id outside the body an empty
/// body is an empty object.
pub fn control_body(from: &KeySource, body: &[u8]) -> Result<Map<String, Value>, ApiError> {
    match (from, body.is_empty()) {
        (KeySource::Json { .. }, _) | (_, false) => json_object(body),
        _ => Ok(Map::new()),
    }
}

/// Parses a stop body: `{"chat_id"?, "run_id"?, "cancel_request_id"?}`, the chat id read from
/// where the route says (`body:chat_id` by default).
pub fn stop(from: &KeySource, body: &[u8], parts: &Parts<'_>) -> Result<StopRequest, ApiError> {
    let m = control_body(from, body)?;
    let chat_id = chat_id(from, parts, Some(&m))?;
    let run_id = run_id_value(m.get("run_id"))?;
    let cancel_request_id = cancel_request_id(m.get("cancel_request_id"))?;
    Ok(StopRequest {
        chat_id,
        run_id,
        cancel_request_id,
    })
}

/// A `cancel_request_id` value: absent, or a string of 1–128 bytes without control characters.
pub fn cancel_request_id(v: Option<&Value>) -> Result<Option<String>, ApiError> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s))
            if !s.is_empty() && s.len() <= MAX_CANCEL_ID && !s.chars().any(char::is_control) =>
        {
            Ok(Some(s.clone()))
        }
        Some(_) => Err(ApiError::new(
            Code::InvalidCancelRequestId,
            format!("cancel_request_id must be a string of 1 to {MAX_CANCEL_ID} bytes"),
        )),
    }
}

/// Parses a status request (no body is read). A `body:<field>` route reads the query parameter
/// `<field>`.
pub fn status(from: &KeySource, parts: &Parts<'_>) -> Result<ChatId, ApiError> {
    chat_id(from, parts, None)
}

/// The resolution event an `annotate` route records for a request `body`:
/// `{"type":"CUSTOM","name":"tether.resolution","value":<body>}`, the body kept verbatim. The
/// body must be JSON (any value); anything else is refused before it is forwarded.
pub fn resolution(body: &[u8]) -> Result<Vec<u8>, ApiError> {
    #[derive(serde::Serialize)]
    struct Resolution<'a> {
        #[serde(rename = "type")]
        ty: &'static str,
        name: &'static str,
        value: &'a serde_json::value::RawValue,
    }
    let text = std::str::from_utf8(body)
        .map_err(|_| ApiError::new(Code::InvalidJson, "the body is not UTF-8 JSON"))?;
    let value: &serde_json::value::RawValue = serde_json::from_str(text).map_err(|e| {
        ApiError::new(
            Code::InvalidJson,
            format!("an annotate route needs a JSON body: {e}"),
        )
    })?;
    serde_json::to_vec(&Resolution {
        ty: "CUSTOM",
        name: "tether.resolution",
        value,
    })
    .map_err(|e| ApiError::new(Code::InvalidJson, e.to_string()))
}

#[cfg(test)]
mod tests;
