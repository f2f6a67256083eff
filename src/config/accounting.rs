//! Accounting settings: a route's `usage` table (where an AG-UI or AI SDK stream reports its
//! token usage), its disconnect policy (`on_disconnect`, `grace`, `max_unwatched_events`) and
//! the `[accounting]` table (the run records' webhook, the OTLP trace endpoint), checked.

use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;

use super::duration::Dur;
use super::route_conf::{OnDisconnectKind, OnMiss, RouteConf, RouteKind};
use super::{err, ConfigError};
use crate::settings::check_pointer;
use crate::vocab::kinds::{FormatChoice, FormatKind};
use crate::vocab::usage::UsagePointers;

/// What a recording route does with a run once its last client has left.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnDisconnect {
    /// The run goes on (`--abandon-after` may still stop it).
    #[default]
    Continue,
    /// The run is stopped as `abandoned` once `grace` passes with no client, or once it
    /// recorded `max_unwatched_events` since the last one left, whichever comes first; a
    /// client attaching before that keeps it.
    Cancel {
        /// How long the run may go with no client.
        grace: Duration,
        /// How many events it may record with no client.
        max_unwatched_events: Option<u64>,
    },
}

/// Whether route `rc` records runs (a record route, or an attach that records on a miss).
fn records(rc: &RouteConf) -> bool {
    rc.kind == RouteKind::Record || (rc.kind == RouteKind::Attach && rc.on_miss == OnMiss::Record)
}

/// Checks route `rc`'s `on_disconnect`, `grace` and `max_unwatched_events`.
pub(super) fn on_disconnect(
    key: &dyn Fn(&str) -> String,
    rc: &RouteConf,
) -> Result<OnDisconnect, ConfigError> {
    let set = rc.on_disconnect != OnDisconnectKind::Continue
        || rc.grace.is_some()
        || rc.max_unwatched_events.is_some();
    if set && !records(rc) {
        return Err(err(
            key("on_disconnect"),
            "only a route that records runs has a disconnect policy",
        ));
    }
    match rc.on_disconnect {
        OnDisconnectKind::Continue => match (rc.grace, rc.max_unwatched_events) {
            (None, None) => Ok(OnDisconnect::Continue),
            (Some(_), _) => Err(err(key("grace"), "needs on_disconnect = \"cancel\"")),
            (_, Some(_)) => Err(err(
                key("max_unwatched_events"),
                "needs on_disconnect = \"cancel\"",
            )),
        },
        OnDisconnectKind::Cancel => {
            let Some(grace) = rc.grace else {
                return Err(err(
                    key("grace"),
                    "on_disconnect = \"cancel\" needs a grace (a duration, 0s allowed)",
                ));
            };
            if rc.max_unwatched_events == Some(0) {
                return Err(err(key("max_unwatched_events"), "must be at least 1"));
            }
            Ok(OnDisconnect::Cancel {
                grace: grace.0,
                max_unwatched_events: rc.max_unwatched_events,
            })
        }
    }
}

/// Checks route `rc`'s `usage` table; `key` names a key of this route in errors.
pub(super) fn usage(
    key: &dyn Fn(&str) -> String,
    rc: &RouteConf,
    format: FormatChoice,
) -> Result<Option<Arc<UsagePointers>>, ConfigError> {
    let Some(u) = &rc.usage else {
        return Ok(None);
    };
    if !records(rc) {
        return Err(err(
            key("usage"),
            "only a route that records runs reads usage",
        ));
    }
    if let FormatChoice::Fixed(
        f @ (FormatKind::OpenaiChat | FormatKind::OpenaiResponses | FormatKind::Anthropic),
    ) = format
    {
        return Err(err(
            key("usage"),
            format!(
                "{} reports usage in its own frames; the usage table is for agui and ai_sdk",
                f.as_str()
            ),
        ));
    }
    let (ty, name) = UsagePointers::event(&u.event).ok_or_else(|| {
        err(
            key("usage.event"),
            format!("{:?} must be <TYPE> or <TYPE>:<name>", u.event),
        )
    })?;
    let p = UsagePointers {
        ty,
        name,
        input_tokens: u.input_tokens.clone(),
        output_tokens: u.output_tokens.clone(),
        cached_input_tokens: u.cached_input_tokens.clone(),
        reasoning_tokens: u.reasoning_tokens.clone(),
        model: u.model.clone(),
    };
    if p.pointers().next().is_none() {
        return Err(err(
            key("usage"),
            "names no pointer: set input_tokens, output_tokens, cached_input_tokens, \
             reasoning_tokens or model",
        ));
    }
    for (field, pointer) in p.pointers() {
        check_pointer(pointer).map_err(|e| err(key(&format!("usage.{field}")), e))?;
    }
    Ok(Some(Arc::new(p)))
}

/// `[accounting]`: where run records and traces go.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AccountingConf {
    /// `http(s)://…` each ended run's record is POSTed to, once, as JSON; empty: off.
    pub webhook_url: String,
    /// Records waiting to be sent at most; past it (a receiver down for long) new records are
    /// dropped and counted.
    pub webhook_queue: usize,
    /// How long one POST may take before it is retried.
    pub webhook_timeout: Dur,
    /// OTLP/HTTP collector, `http(s)://host:port` (`/v1/traces` is appended), as
    /// `--otlp-endpoint`; empty: no traces.
    pub otlp_endpoint: String,
}

impl Default for AccountingConf {
    fn default() -> Self {
        AccountingConf {
            webhook_url: String::new(),
            webhook_queue: 1024,
            webhook_timeout: Dur(Duration::from_secs(10)),
            otlp_endpoint: String::new(),
        }
    }
}

/// The run records' webhook, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookSettings {
    /// The receiver's URL.
    pub url: String,
    /// Records queued at most.
    pub queue: usize,
    /// One POST's timeout.
    pub timeout: Duration,
}

/// The `[accounting]` table checked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AccountingSettings {
    /// The webhook, when `webhook_url` is set.
    pub webhook: Option<WebhookSettings>,
    /// The OTLP/HTTP traces URL (`…/v1/traces`), when an endpoint is set.
    pub otlp_traces: Option<String>,
}

/// The file's key of the OTLP endpoint (errors name the flag or variable when one set it).
pub(super) const OTLP_KEY: &str = "accounting.otlp_endpoint";

/// Checks that `url` is an absolute `http://` or `https://` URL with a host.
fn http_url(key: &str, url: &str) -> Result<(), ConfigError> {
    let uri: http::Uri = url
        .parse()
        .map_err(|e| err(key, format!("{url:?} is not a URL: {e}")))?;
    match (uri.scheme_str(), uri.host()) {
        (Some("http" | "https"), Some(h)) if !h.is_empty() => Ok(()),
        _ => Err(err(
            key,
            format!("{url:?} must be http://host[:port]/… or https://…"),
        )),
    }
}

/// The `[accounting]` table checked (the flags have set `otlp_endpoint` when they name one).
pub(super) fn accounting(a: &AccountingConf) -> Result<AccountingSettings, ConfigError> {
    let webhook = match a.webhook_url.trim() {
        "" => None,
        url => {
            http_url("accounting.webhook_url", url)?;
            if a.webhook_queue == 0 {
                return Err(err("accounting.webhook_queue", "must be at least 1"));
            }
            if a.webhook_timeout.0.is_zero() {
                return Err(err("accounting.webhook_timeout", "must be more than 0s"));
            }
            Some(WebhookSettings {
                url: url.to_string(),
                queue: a.webhook_queue,
                timeout: a.webhook_timeout.0,
            })
        }
    };
    let otlp_traces = match a.otlp_endpoint.trim() {
        "" => None,
        base => {
            http_url(OTLP_KEY, base)?;
            Some(format!("{}/v1/traces", base.trim_end_matches('/')))
        }
    };
    Ok(AccountingSettings {
        webhook,
        otlp_traces,
    })
}
