//! Routes: what each `[[routes]]` entry matches (method and path, first in file order wins) and
//! does, where it finds the chat id, and when its runs count as persisted. The `prefix:value`
//! settings parse with [`std::str::FromStr`], so the file and the flags share one grammar.

use std::sync::Arc;

use super::drop_in::{check_source, drop_in};
use super::pattern::{Captures, RoutePath};
use super::route_conf::{OnMiss, RouteConf, RouteKind};
use super::KeySource;
use super::{Alias, Answer, Commit, Ids, OnDisconnect, OnNothing, Resume, Tokens};
use crate::error::ConfigError;
use crate::vocab::kinds::FormatChoice;
use crate::vocab::usage::UsagePointers;

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
    /// Record routes: relay ids unchanged, inject them, or make them unique in the run.
    pub ids: Ids,
    /// Record routes: the header whose value makes a request a `last_event_id` resume.
    pub resume_on: Option<KeySource>,
    /// Record routes: where a retry's idempotency key is (default `header:Idempotency-Key`).
    pub idempotency_key: Option<KeySource>,
    /// Record routes (`resume_on`): the answer when there is nothing after the id.
    pub on_nothing: OnNothing,
    /// Record routes: resume tokens.
    pub tokens: Tokens,
    /// Stop and status routes: the reply's shape.
    pub answer: Answer,
    /// Stop routes: where the cancel request id is (default: the body's `cancel_request_id`).
    pub cancel_request_id: Option<KeySource>,
    /// Routes that record AG-UI or AI SDK streams: where the provider's token usage is.
    pub usage: Option<Arc<UsagePointers>>,
    /// Recording routes: what happens to a run once its last client has left.
    pub on_disconnect: OnDisconnect,
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
    let d = drop_in(&key, &rc, &path, &methods)?;
    let usage = super::accounting::usage(&key, &rc, format)?;
    let on_disconnect = super::accounting::on_disconnect(&key, &rc)?;
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
        resume: d.resume,
        run: d.run,
        aliases: d.aliases,
        ids: rc.ids,
        resume_on: d.resume_on,
        idempotency_key: d.idempotency_key,
        on_nothing: rc.on_nothing,
        tokens: d.tokens,
        answer: rc.answer,
        cancel_request_id: d.cancel_request_id,
        usage,
        on_disconnect,
    })
}
