//! Drop-in route settings: resume dialects and their options, run aliases, injected ids,
//! resume tokens and control answer shapes (`docs/dialects.md`). Parsing and checks only.

use std::str::FromStr;
use std::time::Duration;

use serde::Deserialize;

use super::source::{check_pointer, KeySource};
pub use crate::vocab::kinds::DialectKind;

impl FromStr for DialectKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        DialectKind::ALL
            .iter()
            .copied()
            .find(|d| d.as_str() == s && *d != DialectKind::Protocol1)
            .ok_or_else(|| {
                format!("{s:?} must be from_start, last_event_id, frame_index, json_cursor or durable_streams")
            })
    }
}

/// `on_nothing`: the answer when there is nothing to resume.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum OnNothing {
    /// `204` (EventSource stops reconnecting).
    #[default]
    NoContent,
    /// A `200` SSE response that ends at once (the LangGraph SDK throws on a body-less 204).
    EmptyStream,
}

/// `completed` (`from_start`): what a completed run gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Completed {
    /// `204`: the client reloads its history.
    #[default]
    NoContent,
    /// The whole turn, as for an active run.
    Replay,
}

/// `expired`: the answer to a cursor older than the raw record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Expired {
    /// The `from_start` rendering of the whole turn.
    FromStart,
    /// `404`.
    NotFound,
    /// `409 {"code":"REPLAY_UNAVAILABLE"}`.
    ReplayUnavailable,
    /// `400 {"error":{"type":"invalid_request_error","code":"cursor_expired",…}}`.
    Openai,
}

/// `ids` on a record route.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Ids {
    /// The upstream bytes, unchanged.
    #[default]
    Upstream,
    /// An `id: <run_id>:<index>` line added to each relayed frame.
    Inject,
    /// The upstream's ids, made unique in the run: a frame whose id repeats one already relayed
    /// gets `<id>~<frame index>` (see [`crate::record::unique_ids`]).
    Unique,
}

/// `answer` on stop and status routes: the shape of the reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Answer {
    /// tether's own fields.
    #[default]
    Tether,
    /// `{"run_id","execution_stopped","terminal_persisted"}` with the client's run id; status
    /// adds `status` and `can_send`.
    Igraph,
    /// `{"cancelRequested":true}`.
    CancelRequested,
}

/// One alias of a record route: where a run's other name comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Alias {
    /// The first upstream event with a string or number at this JSON pointer.
    Event(String),
    /// A key of the record request.
    Request(KeySource),
    /// An upstream response header (lower case).
    Header(String),
}

impl FromStr for Alias {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        if let Some(p) = s.strip_prefix("event:") {
            check_pointer(p)?;
            return Ok(Alias::Event(p.to_string()));
        }
        if let Some(src) = s.strip_prefix("request:") {
            return src.parse().map(Alias::Request);
        }
        if let Some(h) = s.strip_prefix("header:") {
            if http::HeaderName::from_bytes(h.as_bytes()).is_err() {
                return Err(format!("{h:?} is not a header name"));
            }
            return Ok(Alias::Header(h.to_ascii_lowercase()));
        }
        Err(format!(
            "{s:?} must be event:<JSON pointer>, request:<source> or header:<Name>"
        ))
    }
}

/// `only_if = "query:<name>=<value>"`: a request that does not carry it is passed through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OnlyIf {
    /// The query parameter.
    pub name: String,
    /// Its required value.
    pub value: String,
}

impl FromStr for OnlyIf {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        s.strip_prefix("query:")
            .and_then(|rest| rest.split_once('='))
            .filter(|(n, _)| !n.is_empty())
            .map(|(n, v)| OnlyIf {
                name: n.to_string(),
                value: v.to_string(),
            })
            .ok_or_else(|| format!("{s:?} must be query:<name>=<value>"))
    }
}

/// A resume route's dialect and options.
#[derive(Debug, Clone)]
pub struct Resume {
    /// The dialect.
    pub dialect: DialectKind,
    /// Where the cursor is (none for `from_start`).
    pub cursor: Option<KeySource>,
    /// `json_cursor`: the JSON pointer compared with the cursor.
    pub cursor_field: Option<String>,
    /// `last_event_id`: the answer when there is nothing to resume.
    pub on_nothing: OnNothing,
    /// `from_start`: what a completed run gets.
    pub completed: Completed,
    /// The answer to an expired cursor.
    pub expired: Expired,
    /// A request without this query value is passed through.
    pub only_if: Option<OnlyIf>,
    /// `frame_index`: where the resume token is.
    pub token: Option<KeySource>,
}

impl Resume {
    /// The dialect's default cursor source and expired answer.
    pub fn defaults(dialect: DialectKind) -> (Option<KeySource>, Expired) {
        match dialect {
            DialectKind::LastEventId => (
                Some(KeySource::Header("last-event-id".into())),
                Expired::FromStart,
            ),
            DialectKind::FrameIndex => (
                Some(KeySource::Query("startIndex".into())),
                Expired::NotFound,
            ),
            DialectKind::JsonCursor => (None, Expired::ReplayUnavailable),
            DialectKind::FromStart | DialectKind::Protocol1 => (None, Expired::FromStart),
            // The offset is the protocol's own query parameter; an expired one is `410`.
            DialectKind::DurableStreams => (None, Expired::NotFound),
        }
    }
}

/// Resume tokens on a record route's responses.
#[derive(Debug, Clone, Default)]
pub struct Tokens {
    /// The response header carrying the run id (an alias when there is one).
    pub run_id_header: Option<String>,
    /// The response header carrying a fresh resume token.
    pub token_header: Option<String>,
    /// How long a token is valid.
    pub ttl: Duration,
}

/// `run = "<source>"` or `run = ["<source>", …]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum OneOrMany {
    /// One source.
    One(String),
    /// Sources tried in order; the first present wins.
    Many(Vec<String>),
}

impl OneOrMany {
    /// The sources in order.
    pub fn list(&self) -> Vec<&str> {
        match self {
            OneOrMany::One(s) => vec![s.as_str()],
            OneOrMany::Many(v) => v.iter().map(String::as_str).collect(),
        }
    }
}
