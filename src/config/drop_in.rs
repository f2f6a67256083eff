//! The drop-in keys of a route, checked: resume dialects and their options, `run` sources,
//! aliases, `resume_on`, resume tokens, answer shapes and cancel ids (`docs/dialects.md`).

use super::pattern::RoutePath;
use super::route_conf::{RouteConf, RouteKind};
use super::KeySource;
use super::{Alias, Answer, DialectKind, Ids, OnlyIf, Resume, Tokens};
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

/// Checks the drop-in keys of route `rc` (its path and upper-case methods already checked);
/// `key` names a key of this route in errors.
pub(super) fn drop_in(
    key: &dyn Fn(&str) -> String,
    rc: &RouteConf,
    path: &RoutePath,
    methods: &[String],
) -> Result<DropIn, ConfigError> {
    let source = |k: &str, v: &str| -> Result<KeySource, ConfigError> {
        let src: KeySource = v.parse().map_err(|e| ConfigError::new(key(k), e))?;
        check_source(&src, path, rc.kind, methods).map_err(|e| ConfigError::new(key(k), e))?;
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
                Some(_) if dialect == DialectKind::DurableStreams => {
                    return Err(ConfigError::new(
                        key("cursor"),
                        "durable_streams reads the protocol's own offset query parameter",
                    ))
                }
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
                    super::check_pointer(f)
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
            "a resume route needs a dialect: from_start, last_event_id, frame_index, json_cursor or durable_streams",
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
            check_source(src, path, rc.kind, methods)
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
    record_only(
        "idempotency_key",
        rc.idempotency_key.as_deref().is_some_and(|k| !k.is_empty()),
    )?;
    let idempotency_key = match (rc.kind, rc.idempotency_key.as_deref()) {
        (RouteKind::Record, None) => Some(KeySource::Header(DEFAULT_IDEMPOTENCY_HEADER.into())),
        (RouteKind::Record, Some(k)) if !k.is_empty() => Some(source("idempotency_key", k)?),
        _ => None,
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
