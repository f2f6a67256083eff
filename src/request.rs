//! Client requests: parsing and validating record, stop and status inputs, and the shared
//! checks (chat ids, run ids, JSON bodies, query strings) every dialect reuses.
//!
//! Pure: works on bodies, query strings and header values. Every rejection is an [`ApiError`]
//! with a stable code.

use serde_json::{Map, Value};

use crate::config::ChatIdFrom;
use crate::error::{ApiError, Code};

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
    pub chat_id: String,
    /// Whether the requester asked for protocol-1 frames.
    pub protocol1: bool,
    /// The body as a JSON object, when the route read it as one.
    pub body: Option<Map<String, Value>>,
}

/// A stop request's parsed inputs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StopRequest {
    /// The chat whose run to stop.
    pub chat_id: String,
    /// The run to stop (default: the chat's current run).
    pub run_id: Option<String>,
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
pub fn chat_id_value(v: Option<&Value>, name: &str) -> Result<String, ApiError> {
    match v {
        None | Some(Value::Null) => Err(ApiError::new(
            Code::MissingChatId,
            format!("the request has no {name}"),
        )),
        Some(Value::String(s)) => {
            check_chat_id(s)?;
            Ok(s.clone())
        }
        Some(_) => Err(ApiError::new(
            Code::InvalidChatId,
            format!("{name} must be a string"),
        )),
    }
}

/// An optional run id: absent, null, or a valid run id string.
pub fn run_id_value(v: Option<&Value>) -> Result<Option<String>, ApiError> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => {
            check_run_id(s)?;
            Ok(Some(s.clone()))
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

/// The chat id from a query parameter or a header (`Body` routes are handled by the caller).
fn chat_id_outside_body(
    from: &ChatIdFrom,
    query: Query<'_>,
    header: &dyn Fn(&str) -> Option<String>,
) -> Result<String, ApiError> {
    let (value, name) = match from {
        ChatIdFrom::Query(q) | ChatIdFrom::Body(q) => (query.get(q)?, q),
        ChatIdFrom::Header(h) => (header(h), h),
    };
    chat_id_value(value.map(Value::String).as_ref(), name)
}

/// Parses a record request. The chat id comes from where the route says; a non-empty body must
/// be a JSON object (it is read for `"protocol": 1`).
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
        _ => chat_id_outside_body(from, Query::parse(query), &header)?,
    };
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

/// Parses a stop body: `{"<chat field>", "run_id"?, "cancel_request_id"?}`. The chat id is the
/// route's body field (`chat_id` unless the route names another).
pub fn stop(from: &ChatIdFrom, body: &[u8]) -> Result<StopRequest, ApiError> {
    let m = json_object(body)?;
    let field = match from {
        ChatIdFrom::Body(f) => f.as_str(),
        _ => "chat_id",
    };
    let chat_id = chat_id_value(m.get(field), field)?;
    let run_id = run_id_value(m.get("run_id"))?;
    let cancel_request_id = match m.get("cancel_request_id") {
        None | Some(Value::Null) => None,
        Some(Value::String(s))
            if !s.is_empty() && s.len() <= MAX_CANCEL_ID && !s.chars().any(char::is_control) =>
        {
            Some(s.clone())
        }
        Some(_) => {
            return Err(ApiError::new(
                Code::InvalidCancelRequestId,
                format!("cancel_request_id must be a string of 1 to {MAX_CANCEL_ID} bytes"),
            ))
        }
    };
    Ok(StopRequest {
        chat_id,
        run_id,
        cancel_request_id,
    })
}

/// Parses a status request (a `GET`: no body). The chat id is a query parameter, or a header
/// for `header:` routes; a `body:<field>` route reads the query parameter `<field>`.
pub fn status(
    from: &ChatIdFrom,
    query: Option<&str>,
    header: impl Fn(&str) -> Option<String>,
) -> Result<String, ApiError> {
    chat_id_outside_body(from, Query::parse(query), &header)
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
