//! The drop-in keys of a route, checked: resume dialects and their options, `run` sources,
//! aliases, `resume_on`, resume tokens, answer shapes and cancel ids (`docs/dialects.md`). One
//! file a key family: [`resume`] (a resume route's dialect and its options), [`names`] (what
//! names a run: `run` sources, aliases, `resume_on`, the idempotency key) and [`answers`] (what a
//! route hands out or answers: resume tokens, answer shapes, cancel ids).

mod answers;
mod names;
mod resume;

use super::pattern::RoutePath;
use super::route_conf::{RouteConf, RouteKind};
use super::KeySource;
use super::{Alias, Resume, Tokens};
use crate::error::ConfigError;

/// A route's checked drop-in settings.
pub(super) struct DropIn {
    pub(super) resume: Option<Resume>,
    pub(super) run: Vec<KeySource>,
    pub(super) aliases: Vec<Alias>,
    pub(super) resume_on: Option<KeySource>,
    pub(super) idempotency_key: Option<KeySource>,
    pub(super) tokens: Tokens,
    pub(super) cancel_request_id: Option<KeySource>,
}

/// One route's keys under check: the route, its checked path and methods, and how its keys are
/// named in errors.
struct Check<'a> {
    key: &'a dyn Fn(&str) -> String,
    rc: &'a RouteConf,
    path: &'a RoutePath,
    methods: &'a [String],
}

impl Check<'_> {
    /// An error about key `k` of this route.
    fn err(&self, k: &str, message: impl Into<String>) -> ConfigError {
        ConfigError::new((self.key)(k), message)
    }

    /// Key `k`'s value `v` as a key source this route can read.
    fn source(&self, k: &str, v: &str) -> Result<KeySource, ConfigError> {
        let src: KeySource = v.parse().map_err(|e: String| self.err(k, e))?;
        check_source(&src, self.path, self.rc.kind, self.methods).map_err(|e| self.err(k, e))?;
        Ok(src)
    }

    /// Refuses key `k`, when set, on anything but a record route.
    fn record_only(&self, k: &str, set: bool) -> Result<(), ConfigError> {
        if set && self.rc.kind != RouteKind::Record {
            return Err(self.err(k, "only record routes take it"));
        }
        Ok(())
    }
}

/// Checks the drop-in keys of route `rc` (its path and upper-case methods already checked);
/// `key` names a key of this route in errors. Keys are checked in the file's order of families:
/// `run`, the dialect, aliases and the record-only keys, tokens, answers, cancel ids.
pub(super) fn drop_in(
    key: &dyn Fn(&str) -> String,
    rc: &RouteConf,
    path: &RoutePath,
    methods: &[String],
) -> Result<DropIn, ConfigError> {
    let c = Check {
        key,
        rc,
        path,
        methods,
    };
    let run = c.run()?;
    let resume = c.resume()?;
    let aliases = c.aliases()?;
    let resume_on = c.resume_on()?;
    let idempotency_key = c.idempotency_key()?;
    let tokens = c.tokens()?;
    c.answer()?;
    let cancel_request_id = c.cancel_request_id()?;
    Ok(DropIn {
        resume,
        run,
        aliases,
        resume_on,
        idempotency_key,
        tokens,
        cancel_request_id,
    })
}

/// The header a retried record request carries its idempotency key in, by default (the IETF
/// `Idempotency-Key` draft's name).
pub const DEFAULT_IDEMPOTENCY_HEADER: &str = "idempotency-key";

/// Checks that a route can read `source`: a `path:` capture must be in the route's pattern, and
/// a `json:` pointer needs a body (a status route and a `GET` attach have none).
pub(super) fn check_source(
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
