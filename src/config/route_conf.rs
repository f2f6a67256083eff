//! The `[[routes]]` entries as written in the file: what a route does, its keys and their
//! defaults, and the default routes. Checking them is the job of `route.rs`.

use serde::Deserialize;

use super::duration::Dur;
use super::{Answer, Completed, Expired, Ids, OnNothing, OneOrMany};

/// What a route does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RouteKind {
    /// Forward upstream and record the response as a new run of the chat.
    Record,
    /// Serve the chat's run from the buffer.
    Attach,
    /// Stop a run by aborting its upstream request (`forward = true`: also tell the backend).
    Stop,
    /// Answer the chat's run status.
    Status,
    /// Forward, and on 2xx append a `tether.resolution` CUSTOM event to the chat's active run.
    Annotate,
    /// Serve a run to a client in its own resume dialect (`dialect`).
    Resume,
    /// Plain reverse proxy (also what unmatched requests get).
    Passthrough,
}

/// What an attach does for a chat with no known run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum OnMiss {
    /// Wait up to `wait_ms` for a run, then answer 204.
    #[default]
    NoContent,
    /// Forward the request upstream and record the backend's live stream as the run.
    Record,
}

/// What a recording route does with a run once its last client has left.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum OnDisconnectKind {
    /// The run goes on to its end (only `--abandon-after` stops it).
    #[default]
    Continue,
    /// The run is stopped (`abandoned`) once `grace` passes or `max_unwatched_events` are
    /// recorded with no client attached.
    Cancel,
}

/// One `[[routes]]` entry.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteConf {
    /// HTTP methods the route matches.
    pub methods: Vec<String>,
    /// The request path the route matches (query excluded): exact, or a pattern with `{name}`
    /// captures and one trailing `{*rest}` catch-all.
    pub path: String,
    /// What the route does.
    pub kind: RouteKind,
    /// Where the chat id is: `path:<capture>`, `json:<pointer>`, `body:<field>`,
    /// `query:<name>`, `header:<Name>` or `cookie:<name>`.
    #[serde(default = "default_chat_id")]
    pub chat_id: String,
    /// `eof`, `clean_end` or `event:<TYPE>[:<name>]` (record routes, and attach with
    /// `on_miss = "record"`).
    #[serde(default = "default_commit")]
    pub commit: String,
    /// Attach routes: what to do when the chat has no run.
    #[serde(default)]
    pub on_miss: OnMiss,
    /// Stop routes: also forward the stop request to the backend.
    #[serde(default)]
    pub forward: bool,
    /// Record routes: refuse (409) a turn while the chat's run is still active.
    #[serde(default)]
    pub single_flight: bool,
    /// The stream format: `auto` (default), `agui`, `openai_chat`, `openai_responses`,
    /// `anthropic` or `ai_sdk`.
    #[serde(default = "default_format")]
    pub format: String,
    /// Resume routes: `from_start`, `last_event_id`, `frame_index` or `json_cursor`.
    #[serde(default)]
    pub dialect: Option<String>,
    /// Resume, stop and status routes: the source(s) naming the run (tether's id or an alias).
    #[serde(default)]
    pub run: Option<OneOrMany>,
    /// Resume routes: where the cursor is.
    #[serde(default)]
    pub cursor: Option<String>,
    /// `json_cursor`: the JSON pointer compared with the cursor.
    #[serde(default)]
    pub cursor_field: Option<String>,
    /// `last_event_id` (and `resume_on`): `no_content` or `empty_stream`.
    #[serde(default)]
    pub on_nothing: OnNothing,
    /// `from_start`: `no_content` or `replay` for a completed run.
    #[serde(default)]
    pub completed: Completed,
    /// Resume routes: the answer to an expired cursor.
    #[serde(default)]
    pub expired: Option<Expired>,
    /// Resume routes: `query:<name>=<value>`; other requests pass through.
    #[serde(default)]
    pub only_if: Option<String>,
    /// `frame_index`: where the resume token is.
    #[serde(default)]
    pub token: Option<String>,
    /// Record routes: `event:<pointer>`, `request:<source>` or `header:<Name>`.
    #[serde(default)]
    pub aliases: Vec<String>,
    /// Record routes: `upstream`, `inject` or `unique`.
    #[serde(default)]
    pub ids: Ids,
    /// Record routes: `header:Last-Event-ID` serves a resume instead of a new turn.
    #[serde(default)]
    pub resume_on: Option<String>,
    /// Record routes: where a retried request's idempotency key is (a key source as for
    /// `chat_id`); unset: `header:Idempotency-Key`; `""`: none.
    #[serde(default)]
    pub idempotency_key: Option<String>,
    /// Record routes: the response header carrying the run id.
    #[serde(default)]
    pub run_id_header: Option<String>,
    /// Record routes: the response header carrying a resume token.
    #[serde(default)]
    pub token_header: Option<String>,
    /// Record routes: how long a resume token is valid.
    #[serde(default)]
    pub token_ttl: Option<Dur>,
    /// Stop and status routes: the reply's shape.
    #[serde(default)]
    pub answer: Answer,
    /// Stop routes: where the cancel request id is.
    #[serde(default)]
    pub cancel_request_id: Option<String>,
    /// Routes that record AG-UI or AI SDK streams: the event carrying the provider's token
    /// usage and the JSON pointers of its numbers.
    #[serde(default)]
    pub usage: Option<UsageConf>,
    /// Recording routes: what happens to a run once its last client has left.
    #[serde(default)]
    pub on_disconnect: OnDisconnectKind,
    /// `on_disconnect = "cancel"`: how long a run may go with no client before it is stopped.
    #[serde(default)]
    pub grace: Option<Dur>,
    /// `on_disconnect = "cancel"`: the events a run may record with no client before it is
    /// stopped, however short the wait.
    #[serde(default)]
    pub max_unwatched_events: Option<u64>,
}

/// A route's `usage` table, as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UsageConf {
    /// The event carrying the usage: `<TYPE>` or `<TYPE>:<name>` (an AG-UI `CUSTOM` event's
    /// `name`).
    pub event: String,
    /// JSON pointer of the input tokens in that event.
    #[serde(default)]
    pub input_tokens: Option<String>,
    /// JSON pointer of the output tokens.
    #[serde(default)]
    pub output_tokens: Option<String>,
    /// JSON pointer of the cached input tokens.
    #[serde(default)]
    pub cached_input_tokens: Option<String>,
    /// JSON pointer of the reasoning tokens.
    #[serde(default)]
    pub reasoning_tokens: Option<String>,
    /// JSON pointer of the model name.
    #[serde(default)]
    pub model: Option<String>,
}

pub(super) fn default_format() -> String {
    "auto".into()
}

pub(super) fn default_chat_id() -> String {
    "body:chat_id".into()
}

pub(super) fn default_commit() -> String {
    "eof".into()
}

/// The default routes: record `POST /chat`, attach `POST|GET /chat/live` (seed `000_*`), stop
/// `POST /chat/stop`, status `GET /chat/run`.
pub fn default_routes() -> Vec<RouteConf> {
    let route = |methods: &[&str], path: &str, kind| RouteConf {
        methods: methods.iter().map(|m| m.to_string()).collect(),
        path: path.into(),
        kind,
        chat_id: default_chat_id(),
        commit: default_commit(),
        on_miss: OnMiss::NoContent,
        forward: false,
        single_flight: false,
        format: default_format(),
        dialect: None,
        run: None,
        cursor: None,
        cursor_field: None,
        on_nothing: OnNothing::NoContent,
        completed: Completed::NoContent,
        expired: None,
        only_if: None,
        token: None,
        aliases: Vec::new(),
        ids: Ids::Upstream,
        resume_on: None,
        idempotency_key: None,
        run_id_header: None,
        token_header: None,
        token_ttl: None,
        answer: Answer::Tether,
        cancel_request_id: None,
        usage: None,
        on_disconnect: OnDisconnectKind::Continue,
        grace: None,
        max_unwatched_events: None,
    };
    vec![
        route(&["POST"], "/chat", RouteKind::Record),
        route(&["POST", "GET"], "/chat/live", RouteKind::Attach),
        route(&["POST"], "/chat/stop", RouteKind::Stop),
        RouteConf {
            chat_id: "query:chat_id".into(),
            ..route(&["GET"], "/chat/run", RouteKind::Status)
        },
    ]
}
