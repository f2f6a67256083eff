//! Routes: what each `[[routes]]` entry matches (method and path, first in file order wins) and
//! does, where it finds the chat id, and when its runs count as persisted. The `prefix:value`
//! settings parse with [`FromStr`], so the file and the flags share one grammar.

use std::str::FromStr;

use serde::Deserialize;

use super::pattern::{Captures, RoutePath};
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

/// When a run counts as persisted: `eof` or `event:<TYPE>[:<name>]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Commit {
    /// The upstream ended cleanly after a terminal event of its format.
    Eof,
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
    /// `eof` or `event:<TYPE>[:<name>]` (record routes, and attach with `on_miss = "record"`).
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
        let bad = || format!("{s:?} must be eof or event:<TYPE>[:<name>]");
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
        || (kind == RouteKind::Attach && methods.iter().any(|m| m == "GET"));
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
    })
}
