//! Routes: what each `[[routes]]` entry matches (method and path, first in file order wins) and
//! does, where it finds the chat id, and when its runs count as persisted. The `prefix:value`
//! settings parse with [`FromStr`], so the file and the flags share one grammar.

use std::str::FromStr;

use serde::Deserialize;

use super::file::Dur;
use super::pattern::{Captures, RoutePath};
use super::resume::{
    Alias, Answer, Completed, DialectKind, Expired, Ids, OnNothing, OneOrMany, OnlyIf, Resume,
    Tokens,
};
use super::source::KeySource;
use crate::error::ConfigError;
use crate::format::FormatChoice;

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

/// When a run counts as persisted: `eof`, `clean_end` or `event:<TYPE>[:<name>]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Commit {
    /// The upstream ended cleanly after a terminal event of its format.
    Eof,
    /// The upstream ended its body cleanly, whatever its last event (for streams whose format
    /// tether does not judge, such as LangGraph's or an SSE v2 envelope).
    CleanEnd,
    /// An event of this type (and `name`, when given) arrived.
    Event {
        /// The event `type`.
        ty: String,
        /// The event `name` (for `CUSTOM`), if required.
        name: Option<String>,
    },
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
    /// Record routes: `upstream` or `inject`.
    #[serde(default)]
    pub ids: Ids,
    /// Record routes: `header:Last-Event-ID` serves a resume instead of a new turn.
    #[serde(default)]
    pub resume_on: Option<String>,
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
}

fn default_format() -> String {
    "auto".into()
}

fn default_chat_id() -> String {
    "body:chat_id".into()
}

fn default_commit() -> String {
    "eof".into()
}

/// A validated route.
#[derive(Debug, Clone)]
pub struct Route {
    /// HTTP methods the route matches (upper case).
    pub methods: Vec<String>,
    /// The path, exact or a pattern.
    pub path: RoutePath,
    /// What the route does.
    pub kind: RouteKind,
    /// Where the chat id is.
    pub chat_id: KeySource,
    /// When a run counts as persisted.
    pub commit: Commit,
    /// Attach only: what to do for a chat with no run.
    pub on_miss: OnMiss,
    /// Stop only: also forward to the backend.
    pub forward: bool,
    /// Record only: one active turn per chat.
    pub single_flight: bool,
    /// How the run's events are classified.
    pub format: FormatChoice,
    /// Resume routes: the dialect and its options.
    pub resume: Option<Resume>,
    /// Resume, stop and status routes: the sources naming the run, first present wins.
    pub run: Vec<KeySource>,
    /// Record routes: the run's aliases.
    pub aliases: Vec<Alias>,
    /// Record routes: relay ids unchanged or inject them.
    pub ids: Ids,
    /// Record routes: the header whose value makes a request a `last_event_id` resume.
    pub resume_on: Option<KeySource>,
    /// Record routes (`resume_on`): the answer when there is nothing after the id.
    pub on_nothing: OnNothing,
    /// Record routes: resume tokens.
    pub tokens: Tokens,
    /// Stop and status routes: the reply's shape.
    pub answer: Answer,
    /// Stop routes: where the cancel request id is (default: the body's `cancel_request_id`).
    pub cancel_request_id: Option<KeySource>,
}

impl Route {
    /// Whether the route's requests never carry a body of their own.
    pub fn bodyless(&self) -> bool {
        self.methods
            .iter()
            .all(|m| m == "GET" || m == "HEAD" || m == "DELETE")
    }
}

impl Route {
    /// The path captures when the route matches `method` and `path`, else `None`.
    pub fn matches(&self, method: &str, path: &str) -> Option<Captures> {
        if !self.methods.iter().any(|m| m == method) {
            return None;
        }
        self.path.matches(path)
    }
}

/// The first route in file order that matches `method` and `path`, with its path captures.
pub fn match_route<'a>(
    routes: &'a [Route],
    method: &str,
    path: &str,
) -> Option<(&'a Route, Captures)> {
    routes
        .iter()
        .find_map(|r| r.matches(method, path).map(|c| (r, c)))
}

impl FromStr for Commit {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        if s == "eof" {
            return Ok(Commit::Eof);
        }
        if s == "clean_end" {
            return Ok(Commit::CleanEnd);
        }
        let bad = || format!("{s:?} must be eof, clean_end or event:<TYPE>[:<name>]");
        let rest = s.strip_prefix("event:").ok_or_else(bad)?;
        match rest.split_once(':') {
            Some((ty, name)) if !ty.is_empty() && !name.is_empty() => Ok(Commit::Event {
                ty: ty.into(),
                name: Some(name.into()),
            }),
            None if !rest.is_empty() => Ok(Commit::Event {
                ty: rest.into(),
                name: None,
            }),
            _ => Err(bad()),
        }
    }
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
        run_id_header: None,
        token_header: None,
        token_ttl: None,
        answer: Answer::Tether,
        cancel_request_id: None,
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

/// Checks that a route can read `source`: a `path:` capture must be in the route's pattern, and
/// a `json:` pointer needs a body (a status route and a `GET` attach have none).
fn check_source(
    source: &KeySource,
    path: &RoutePath,
    kind: RouteKind,
    methods: &[String],
) -> Result<(), String> {
    if let KeySource::Path(name) = source {
        if !path.captures().iter().any(|c| c == name) {
            return Err(format!(
                "path:{name} names no capture of the path {:?}",
                path.as_str()
            ));
        }
    }
    let bodyless = kind == RouteKind::Status
        || ((kind == RouteKind::Attach || kind == RouteKind::Resume)
            && methods.iter().any(|m| m == "GET" || m == "DELETE"))
        || methods.iter().all(|m| m == "DELETE");
    if source.needs_body() && bodyless {
        return Err(format!(
            "json:{} reads the body, and a {} route has none{}",
            source.label(),
            if kind == RouteKind::Status {
                "status"
            } else {
                "GET attach"
            },
            "; use path:, query:, header: or cookie:"
        ));
    }
    Ok(())
}

/// Checks route `i` of the file and builds it.
pub(super) fn check(i: usize, rc: RouteConf) -> Result<Route, ConfigError> {
    let key = |k: &str| format!("routes[{i}].{k}");
    let path = RoutePath::parse(&rc.path).map_err(|e| ConfigError::new(key("path"), e))?;
    if rc.methods.is_empty() {
        return Err(ConfigError::new(
            key("methods"),
            "must name at least one method",
        ));
    }
    let methods: Vec<String> = rc.methods.iter().map(|m| m.to_ascii_uppercase()).collect();
    if let Some(m) = methods
        .iter()
        .find(|m| !m.bytes().all(|b| b.is_ascii_uppercase()))
    {
        return Err(ConfigError::new(
            key("methods"),
            format!("{m:?} is not an HTTP method"),
        ));
    }
    let chat_id: KeySource = rc
        .chat_id
        .parse()
        .map_err(|e| ConfigError::new(key("chat_id"), e))?;
    check_source(&chat_id, &path, rc.kind, &methods)
        .map_err(|e| ConfigError::new(key("chat_id"), e))?;
    let commit: Commit = rc
        .commit
        .parse()
        .map_err(|e| ConfigError::new(key("commit"), e))?;
    let format: FormatChoice = rc
        .format
        .parse()
        .map_err(|e| ConfigError::new(key("format"), e))?;
    let source = |k: &str, v: &str| -> Result<KeySource, ConfigError> {
        let src: KeySource = v.parse().map_err(|e| ConfigError::new(key(k), e))?;
        check_source(&src, &path, rc.kind, &methods).map_err(|e| ConfigError::new(key(k), e))?;
        Ok(src)
    };
    let mut run = Vec::new();
    if let Some(r) = &rc.run {
        if !matches!(
            rc.kind,
            RouteKind::Resume | RouteKind::Stop | RouteKind::Status
        ) {
            return Err(ConfigError::new(
                key("run"),
                "only resume, stop and status routes name a run",
            ));
        }
        for v in r.list() {
            run.push(source("run", v)?);
        }
    }
    let resume = match (rc.kind, &rc.dialect) {
        (RouteKind::Resume, Some(d)) => {
            let dialect: DialectKind =
                d.parse().map_err(|e| ConfigError::new(key("dialect"), e))?;
            let (default_cursor, default_expired) = Resume::defaults(dialect);
            let cursor = match &rc.cursor {
                Some(c) if dialect == DialectKind::FromStart => {
                    return Err(ConfigError::new(
                        key("cursor"),
                        format!("from_start takes no cursor ({c:?})"),
                    ))
                }
                Some(c) => Some(source("cursor", c)?),
                None => default_cursor,
            };
            if dialect == DialectKind::JsonCursor && cursor.is_none() {
                return Err(ConfigError::new(
                    key("cursor"),
                    "json_cursor needs a cursor source, e.g. query:starting_after",
                ));
            }
            let cursor_field = match (&rc.cursor_field, dialect) {
                (Some(f), DialectKind::JsonCursor) => {
                    super::source::check_pointer(f)
                        .map_err(|e| ConfigError::new(key("cursor_field"), e))?;
                    Some(f.clone())
                }
                (None, DialectKind::JsonCursor) => {
                    return Err(ConfigError::new(
                        key("cursor_field"),
                        "json_cursor needs a cursor_field, e.g. /sequence_number",
                    ))
                }
                (Some(_), _) => {
                    return Err(ConfigError::new(
                        key("cursor_field"),
                        "only json_cursor compares a field",
                    ))
                }
                (None, _) => None,
            };
            let only_if = match &rc.only_if {
                Some(o) => Some(
                    o.parse::<OnlyIf>()
                        .map_err(|e| ConfigError::new(key("only_if"), e))?,
                ),
                None => None,
            };
            let token = match &rc.token {
                Some(t) => Some(source("token", t)?),
                None => None,
            };
            Some(Resume {
                dialect,
                cursor,
                cursor_field,
                on_nothing: rc.on_nothing,
                completed: rc.completed,
                expired: rc.expired.unwrap_or(default_expired),
                only_if,
                token,
            })
        }
        (RouteKind::Resume, None) => return Err(ConfigError::new(
            key("dialect"),
            "a resume route needs a dialect: from_start, last_event_id, frame_index or json_cursor",
        )),
        (_, Some(_)) => {
            return Err(ConfigError::new(
                key("dialect"),
                "only resume routes have a dialect",
            ))
        }
        (_, None) => None,
    };
    let mut aliases = Vec::new();
    for a in &rc.aliases {
        let alias: Alias = a.parse().map_err(|e| ConfigError::new(key("aliases"), e))?;
        if let Alias::Request(src) = &alias {
            check_source(src, &path, rc.kind, &methods)
                .map_err(|e| ConfigError::new(key("aliases"), e))?;
        }
        aliases.push(alias);
    }
    let record_only = |k: &str, set: bool| -> Result<(), ConfigError> {
        if set && rc.kind != RouteKind::Record {
            return Err(ConfigError::new(key(k), "only record routes take it"));
        }
        Ok(())
    };
    record_only("aliases", !aliases.is_empty())?;
    record_only("ids", rc.ids != Ids::Upstream)?;
    record_only("resume_on", rc.resume_on.is_some())?;
    record_only("run_id_header", rc.run_id_header.is_some())?;
    record_only("token_header", rc.token_header.is_some())?;
    record_only("token_ttl", rc.token_ttl.is_some())?;
    let resume_on = match &rc.resume_on {
        Some(r) => match r.parse::<KeySource>() {
            Ok(KeySource::Header(h)) => Some(KeySource::Header(h)),
            _ => {
                return Err(ConfigError::new(
                    key("resume_on"),
                    format!("{r:?} must be header:<Name>, e.g. header:Last-Event-ID"),
                ))
            }
        },
        None => None,
    };
    let header_name = |k: &str, v: &Option<String>| -> Result<Option<String>, ConfigError> {
        match v {
            Some(h) if http::HeaderName::from_bytes(h.as_bytes()).is_ok() => {
                Ok(Some(h.to_ascii_lowercase()))
            }
            Some(h) => Err(ConfigError::new(
                key(k),
                format!("{h:?} is not a header name"),
            )),
            None => Ok(None),
        }
    };
    let tokens = Tokens {
        run_id_header: header_name("run_id_header", &rc.run_id_header)?,
        token_header: header_name("token_header", &rc.token_header)?,
        ttl: rc
            .token_ttl
            .map_or(std::time::Duration::from_secs(15 * 60), |d| d.0),
    };
    if tokens.ttl.is_zero() {
        return Err(ConfigError::new(key("token_ttl"), "must be more than 0s"));
    }
    if rc.answer != Answer::Tether && !matches!(rc.kind, RouteKind::Stop | RouteKind::Status) {
        return Err(ConfigError::new(
            key("answer"),
            "only stop and status routes have an answer shape",
        ));
    }
    if rc.answer == Answer::CancelRequested && rc.kind == RouteKind::Status {
        return Err(ConfigError::new(
            key("answer"),
            "cancel_requested is a stop answer",
        ));
    }
    let cancel_request_id = match &rc.cancel_request_id {
        Some(_) if rc.kind != RouteKind::Stop => {
            return Err(ConfigError::new(
                key("cancel_request_id"),
                "only stop routes take it",
            ))
        }
        Some(c) => Some(source("cancel_request_id", c)?),
        None => None,
    };
    Ok(Route {
        methods,
        path,
        kind: rc.kind,
        chat_id,
        commit,
        on_miss: rc.on_miss,
        forward: rc.forward,
        single_flight: rc.single_flight,
        format,
        resume,
        run,
        aliases,
        ids: rc.ids,
        resume_on,
        on_nothing: rc.on_nothing,
        tokens,
        answer: rc.answer,
        cancel_request_id,
    })
}
