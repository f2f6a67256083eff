//! Errors and their stable codes: API error answers, configuration errors, upstream failures.
//!
//! Every code and kind is an enum with one `as_str()`, which feeds both the JSON a client reads
//! and the metric label an operator charts, so a typo cannot mint a new series or a new code.

use bytes::Bytes;
use thiserror::Error;

use crate::vocab::label::Label;
use crate::vocab::RunId;

/// The stable code of an API error answer; each code has one HTTP status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    /// 400: the body is not JSON.
    InvalidJson,
    /// 400: the body is JSON but not an object (or lacks what the route needs).
    InvalidBody,
    /// 400: no chat id where the route looks for one.
    MissingChatId,
    /// 400: the chat id is not 1–256 bytes of text without control characters.
    InvalidChatId,
    /// 400: a run id is not 1–64 of `[A-Za-z0-9_-]`.
    InvalidRunId,
    /// 400: `after_seq` (or a cursor) is not a non-negative integer.
    InvalidCursor,
    /// 400: `Last-Event-ID` is not `<run_id>:<seq>`.
    InvalidLastEventId,
    /// 400: `wait_ms` is not a non-negative integer.
    InvalidWaitMs,
    /// 400: `protocol` is neither 1 nor absent.
    InvalidProtocol,
    /// 400: a query parameter does not decode to UTF-8 (or a Durable Streams `live` mode is
    /// unknown).
    InvalidQuery,
    /// 400: a Durable Streams offset is not `-1`, `now` or one tether gave for this stream.
    InvalidOffset,
    /// 400: `cancel_request_id` is not a string of 1–128 bytes.
    InvalidCancelRequestId,
    /// 401: `[auth] subject` is set and the request carries no caller identity.
    Unauthenticated,
    /// 404: the chat has no such run (also what another owner's chat gets).
    NoRun,
    /// 404: the admin API has no such route (or is off).
    NotFound,
    /// 405: a write to a read-only Durable Stream.
    MethodNotAllowed,
    /// 410: a Durable Streams offset names events (or a run) no longer kept.
    OffsetGone,
    /// 409: a `single_flight` route refused a turn while one is running.
    TurnAlreadyRunning,
    /// 409: a retry joined a run that cannot be replayed to this requester (a legacy
    /// requester on a route without a raw record).
    IdempotencyKeyInUse,
    /// 408: the request body did not arrive whole within `body_timeout`.
    BodyTimeout,
    /// 413: the request body is over `max_body_bytes`.
    BodyTooLarge,
    /// 422: a record request reused an idempotency key with another body.
    IdempotencyKeyReused,
    /// 429: the run has `max_observers_per_run` observers.
    TooManyObservers,
    /// 429: the caller has `[limits] max_active_runs_per_owner` runs going (with `Retry-After`).
    TooManyRuns,
    /// 429: the caller started `[limits] max_runs_per_owner_per_minute` runs in the last
    /// minute (with `Retry-After`).
    RateLimited,
    /// 431: the request headers are over `max_header_bytes`.
    HeadersTooLarge,
    /// 502: the backend could not be reached.
    UpstreamUnreachable,
    /// 503: tether is draining and takes no new turns.
    Draining,
    /// 503: the proxy listener has `max_connections` client connections open.
    TooManyConnections,
    /// 503: `[upstream] max_requests` requests hold backend connections.
    AtCapacity,
}

impl Code {
    /// The code as it appears in the `error` field of the JSON body.
    pub fn as_str(self) -> &'static str {
        match self {
            Code::InvalidJson => "invalid_json",
            Code::InvalidBody => "invalid_body",
            Code::MissingChatId => "missing_chat_id",
            Code::InvalidChatId => "invalid_chat_id",
            Code::InvalidRunId => "invalid_run_id",
            Code::InvalidCursor => "invalid_cursor",
            Code::InvalidLastEventId => "invalid_last_event_id",
            Code::InvalidWaitMs => "invalid_wait_ms",
            Code::InvalidProtocol => "invalid_protocol",
            Code::InvalidQuery => "invalid_query",
            Code::InvalidOffset => "invalid_offset",
            Code::InvalidCancelRequestId => "invalid_cancel_request_id",
            Code::Unauthenticated => "unauthenticated",
            Code::NoRun => "no_run",
            Code::NotFound => "not_found",
            Code::MethodNotAllowed => "method_not_allowed",
            Code::OffsetGone => "offset_gone",
            Code::TurnAlreadyRunning => "turn_already_running",
            Code::IdempotencyKeyInUse => "idempotency_key_in_use",
            Code::BodyTimeout => "body_timeout",
            Code::BodyTooLarge => "body_too_large",
            Code::IdempotencyKeyReused => "idempotency_key_reused",
            Code::TooManyObservers => "too_many_observers",
            Code::TooManyRuns => "too_many_runs",
            Code::RateLimited => "rate_limited",
            Code::HeadersTooLarge => "headers_too_large",
            Code::UpstreamUnreachable => "upstream_unreachable",
            Code::Draining => "draining",
            Code::TooManyConnections => "too_many_connections",
            Code::AtCapacity => "at_capacity",
        }
    }

    /// The HTTP status answered with this code.
    pub fn status(self) -> u16 {
        match self {
            Code::Unauthenticated => 401,
            Code::NoRun | Code::NotFound => 404,
            Code::MethodNotAllowed => 405,
            Code::OffsetGone => 410,
            Code::TurnAlreadyRunning | Code::IdempotencyKeyInUse => 409,
            Code::BodyTimeout => 408,
            Code::BodyTooLarge => 413,
            Code::IdempotencyKeyReused => 422,
            Code::TooManyObservers | Code::TooManyRuns | Code::RateLimited => 429,
            Code::HeadersTooLarge => 431,
            Code::UpstreamUnreachable => 502,
            Code::Draining | Code::TooManyConnections | Code::AtCapacity => 503,
            _ => 400,
        }
    }
}

/// A rejected request, answered as `{"error": "<code>", "message": "…"}` with the code's status.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{}: {message}", code.as_str())]
pub struct ApiError {
    /// The stable code (and so the status).
    pub code: Code,
    /// Human-readable detail.
    pub message: String,
    /// The run the answer is about, added to the body as `run_id` (the running turn of a 409).
    pub run_id: Option<RunId>,
    /// Seconds the client should wait before trying again, sent as `Retry-After` (a 429 of a
    /// per-owner limit).
    pub retry_after: Option<u64>,
}

impl ApiError {
    /// An error with `code`.
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        ApiError {
            code,
            message: message.into(),
            run_id: None,
            retry_after: None,
        }
    }

    /// The same answer, telling the client to wait `secs` seconds before trying again.
    pub fn with_retry_after(mut self, secs: u64) -> Self {
        self.retry_after = Some(secs);
        self
    }

    /// The HTTP status of the answer.
    pub fn status(&self) -> u16 {
        self.code.status()
    }

    /// The JSON body of the answer.
    pub fn body(&self) -> Bytes {
        let mut v = serde_json::json!({"error": self.code.as_str(), "message": self.message});
        if let Some(run_id) = &self.run_id {
            v["run_id"] = run_id.as_str().into();
        }
        Bytes::from(v.to_string())
    }
}

/// An invalid configuration: the key at fault and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("invalid configuration: {key}: {message}")]
pub struct ConfigError {
    /// The dotted key (`recorder.window`, `routes[2].path`, …), the flag, or the file.
    pub key: String,
    /// What is wrong.
    pub message: String,
}

impl ConfigError {
    /// An error about `key`.
    pub fn new(key: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError {
            key: key.into(),
            message: message.into(),
        }
    }
}

/// The `tether_upstream_errors_total{kind}` label: how the backend failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UpstreamErrorKind {
    /// The TCP connection could not be made (refused, unreachable, connect timeout).
    Connect,
    /// The TLS handshake with an HTTPS backend failed (its certificate did not verify, or it
    /// spoke no TLS, or refused the client certificate).
    Tls,
    /// A read or write took longer than its timeout.
    Timeout,
    /// The connection was reset or closed mid-answer.
    Reset,
    /// The backend answered a non-2xx status to a recorded route.
    Status,
    /// The backend spoke broken HTTP or broken SSE.
    Protocol,
}

impl UpstreamErrorKind {
    /// Every kind, in label order.
    pub const ALL: &'static [UpstreamErrorKind] = &[
        UpstreamErrorKind::Connect,
        UpstreamErrorKind::Tls,
        UpstreamErrorKind::Timeout,
        UpstreamErrorKind::Reset,
        UpstreamErrorKind::Status,
        UpstreamErrorKind::Protocol,
    ];

    /// The metric label value.
    pub fn as_str(self) -> &'static str {
        match self {
            UpstreamErrorKind::Connect => "connect",
            UpstreamErrorKind::Tls => "tls",
            UpstreamErrorKind::Timeout => "timeout",
            UpstreamErrorKind::Reset => "reset",
            UpstreamErrorKind::Status => "status",
            UpstreamErrorKind::Protocol => "protocol",
        }
    }
}

impl Label for UpstreamErrorKind {
    fn all() -> &'static [Self] {
        UpstreamErrorKind::ALL
    }
    fn as_str(self) -> &'static str {
        UpstreamErrorKind::as_str(self)
    }
}

/// The error underneath another, shared so the error that carries it stays `Clone`.
pub type Cause = std::sync::Arc<dyn std::error::Error + Send + Sync>;

/// Why the backend could not be used.
#[derive(Debug, Clone, Error)]
#[error("{message}")]
pub struct UpstreamError {
    /// The metric kind.
    pub kind: UpstreamErrorKind,
    /// What happened.
    pub message: String,
    /// The error underneath (the socket's I/O error, Pingora's connect error), when there is one.
    #[source]
    pub cause: Option<Cause>,
}

impl UpstreamError {
    /// An error of `kind` with no cause underneath.
    pub fn new(kind: UpstreamErrorKind, message: impl Into<String>) -> Self {
        UpstreamError {
            kind,
            message: message.into(),
            cause: None,
        }
    }

    /// The same error, keeping `cause` as its source.
    pub fn caused_by(mut self, cause: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.cause = Some(std::sync::Arc::new(cause));
        self
    }
}
