//! Configuration: the `conf/tether.toml` tree ([`file`]), its routes ([`route`]) and the
//! command-line flags ([`flags`]), merged and validated.
//!
//! Precedence: built-in defaults, then the file named by `--config`, then flags (each flag also
//! reads a `TETHER_*` environment variable). [`FileConf::validate`] checks the result once at start;
//! an invalid configuration is a [`ConfigError`] naming the key, and `main` exits with status 64.

mod accounting;
mod admin_token;
mod cors;
mod drop_in;
mod duration;
mod file;
mod flags;
mod journal;
mod pattern;
mod route;
mod route_conf;
mod upstream_url;
mod validate;

use std::net::SocketAddr;

pub use crate::journal::DEFAULT_WINDOW;

pub use crate::error::ConfigError;
pub use crate::vocab::kinds::DialectKind;
pub use accounting::{AccountingConf, AccountingSettings, OnDisconnect, WebhookSettings};
pub use admin_token::{AdminToken, ADMIN_TOKEN_ENV};
pub use cors::{CorsConf, CorsSettings, Origins};
pub use file::{
    parse_file, AuthConf, Dur, FileConf, JournalConf, LimitsConf, RecorderConf, ServerConf,
    Subject, UpstreamConf,
};
pub use flags::{Flags, LogFormat};
pub use journal::{JournalSettings, JournalTls};
pub use pattern::{Captures, RoutePath};
pub use route::{match_route, Route};
pub use route_conf::{default_routes, OnDisconnectKind, OnMiss, RouteConf, RouteKind, UsageConf};
pub use tether_core::settings::{
    check_pointer, Alias, Answer, Commit, Completed, Expired, Ids, KeySource, OnNothing, OneOrMany,
    OnlyIf, Resume, Tokens,
};
pub use upstream_url::UpstreamUrl;

fn err(key: impl Into<String>, message: impl Into<String>) -> ConfigError {
    ConfigError::new(key, message)
}

/// A pair of files set together or not at all (a certificate and its key): the error names the
/// one missing.
fn paired(
    (first, first_set): (&str, bool),
    (second, second_set): (&str, bool),
    message: &str,
) -> Result<(), ConfigError> {
    match (first_set, second_set) {
        (true, false) => Err(err(second, message)),
        (false, true) => Err(err(first, message)),
        _ => Ok(()),
    }
}

/// The validated configuration the sidecar runs with.
#[derive(Debug, Clone)]
pub struct Config {
    /// Proxy listen address.
    pub listen: SocketAddr,
    /// Backend address; `None` runs the embedded demo backend.
    pub upstream: Option<UpstreamUrl>,
    /// Admin listen address.
    pub admin: SocketAddr,
    /// Serve the browser client (`GET /_tether/client.js`) and, in demo mode, the demo page
    /// (`GET /`).
    pub serve_client: bool,
    /// The `[server]` table.
    pub server: ServerConf,
    /// The `[upstream]` table.
    pub upstream_opts: UpstreamConf,
    /// The `[recorder]` table.
    pub recorder: RecorderConf,
    /// Where the caller's identity comes from.
    pub subject: Subject,
    /// The `[limits]` table.
    pub limits: LimitsConf,
    /// Routes in match order.
    pub routes: Vec<Route>,
    /// The raw record every run keeps, when a route reads raw frames.
    pub raw: Option<RawRecord>,
    /// The secret resume tokens are signed with.
    pub secret: Vec<u8>,
    /// Whether the secret was configured (not drawn at random at start).
    pub secret_configured: bool,
    /// The shared journal, when one is configured.
    pub journal: Option<JournalSettings>,
    /// `[server.cors]`, when some origin is allowed.
    pub cors: Option<CorsSettings>,
    /// `[accounting]`: the run records' webhook and the OTLP trace endpoint.
    pub accounting: AccountingSettings,
    /// The admin API's bearer token; `None`: the admin API is off.
    pub admin_token: Option<AdminToken>,
}

/// The raw record's settings, derived from the routes that read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawRecord {
    /// Bytes of raw frames kept per run.
    pub cap: usize,
    /// The JSON pointer whose integer each frame is indexed by (`json_cursor` routes).
    pub cursor_field: Option<String>,
}

impl Config {
    /// Reads the file named by the flags (if any), applies the flags and validates.
    pub fn load(flags: &Flags) -> Result<Config, ConfigError> {
        let file = match &flags.config {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| err(path.display().to_string(), e.to_string()))?;
                parse_file(&text)?
            }
            None => FileConf::default(),
        };
        Config::from_parts(file, flags)
    }

    /// Applies flags to a parsed file and validates the result.
    pub fn from_parts(mut file: FileConf, flags: &Flags) -> Result<Config, ConfigError> {
        flags.apply(&mut file);
        let otlp_key = otlp_flag(flags, std::env::var(OTEL_ENDPOINT).ok());
        if let Some((_, v)) = &otlp_key {
            file.accounting.otlp_endpoint = v.clone();
        }
        // Empty entries (an empty TETHER_CORS_ORIGINS, a doubled comma) name no origin.
        let origins: Vec<String> = flags
            .cors_origins
            .iter()
            .map(|o| o.trim().to_string())
            .filter(|o| !o.is_empty())
            .collect();
        if !origins.is_empty() {
            file.server.cors.allow_origins = origins.clone();
        }
        let mut cfg = file.validate().map_err(|mut e| {
            if e.key == "server.upstream" {
                e.key = upstream_key(flags).into();
            }
            if e.key == ORIGINS_KEY && !origins.is_empty() {
                e.key = "--cors-origin".into();
            }
            if let (accounting::OTLP_KEY, Some((key, _))) = (e.key.as_str(), &otlp_key) {
                e.key = (*key).into();
            }
            e
        })?;
        if let Some(s) = &flags.auth_subject {
            cfg.subject = s.clone();
        }
        if cfg.journal.is_some() && cfg.subject != Subject::None && !cfg.secret_configured {
            return Err(err(
                "auth.secret",
                "a shared journal with an auth subject needs the secret every replica shares \
                 ([auth] secret or TETHER_AUTH_SECRET)",
            ));
        }
        Ok(cfg)
    }
}

/// The OpenTelemetry SDKs' variable of the OTLP endpoint, honoured when `--otlp-endpoint`
/// (`TETHER_OTLP_ENDPOINT`) is not set.
pub const OTEL_ENDPOINT: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";

/// The OTLP endpoint the flags name and the name to give it in errors: `--otlp-endpoint` (or
/// `TETHER_OTLP_ENDPOINT`), else `otel_env` (the value of [`OTEL_ENDPOINT`]), else none (the
/// file's, if any). An empty value names none.
fn otlp_flag(flags: &Flags, otel_env: Option<String>) -> Option<(&'static str, String)> {
    let set = |v: &String| !v.trim().is_empty();
    match (&flags.otlp_endpoint, otel_env) {
        (Some(v), _) if set(v) => Some(("--otlp-endpoint", v.clone())),
        (_, Some(v)) if set(&v) => Some((OTEL_ENDPOINT, v)),
        _ => None,
    }
}

/// The file's key of the allowed CORS origins (`--cors-origin` when the flag set them).
const ORIGINS_KEY: &str = "server.cors.allow_origins";

/// `TETHER_AUTH_SECRET`, read from the environment only (a secret never goes on a command line).
fn flags_secret() -> Option<String> {
    std::env::var("TETHER_AUTH_SECRET")
        .ok()
        .filter(|s| !s.is_empty())
}

/// The raw record, when a route reads raw frames: a resume route of a verbatim dialect (or
/// `from_start`, whose live tail is raw; not `durable_streams`, which reads the window), a
/// record route with `resume_on`, injected ids or ids made unique.
fn raw_record(routes: &[Route], cap: usize) -> Result<Option<RawRecord>, ConfigError> {
    let mut field: Option<&str> = None;
    let mut needed = false;
    for (i, r) in routes.iter().enumerate() {
        let raw_resume = r
            .resume
            .as_ref()
            .is_some_and(|x| x.dialect != DialectKind::DurableStreams);
        needed |= raw_resume || r.resume_on.is_some() || r.ids != Ids::Upstream;
        if let Some(f) = r.resume.as_ref().and_then(|x| x.cursor_field.as_deref()) {
            match field {
                Some(other) if other != f => {
                    return Err(err(
                        format!("routes[{i}].cursor_field"),
                        format!(
                            "every json_cursor route must compare one field ({other:?} and {f:?})"
                        ),
                    ))
                }
                _ => field = Some(f),
            }
        }
    }
    if needed && cap < 1024 {
        return Err(err(
            "recorder.max_raw_bytes_per_run",
            "must be at least 1024",
        ));
    }
    Ok(needed.then(|| RawRecord {
        cap,
        cursor_field: field.map(str::to_string),
    }))
}

/// The key an error about the backend address names: the flag when the value came from it
/// (or its environment variable), else the file's key.
fn upstream_key(flags: &Flags) -> &'static str {
    match flags.upstream {
        Some(_) => "--upstream",
        None => "server.upstream",
    }
}

impl Config {
    /// Looks the backend's host up (once, at start: the address is kept for the process's
    /// life). `None` without a backend (the demo). A name that does not resolve is a
    /// [`ConfigError`] naming `--upstream` or `server.upstream`, whichever set it.
    pub fn resolve_upstream(&self, flags: &Flags) -> Result<Option<SocketAddr>, ConfigError> {
        let Some(url) = &self.upstream else {
            return Ok(None);
        };
        resolve(&url.hostport())
            .map(Some)
            .map_err(|e| err(upstream_key(flags), e.to_string()))
    }
}

/// The first address `hostport` (`host:port`) resolves to: a DNS lookup for a host name.
pub fn resolve(hostport: &str) -> std::io::Result<SocketAddr> {
    use std::net::ToSocketAddrs;
    let cannot = |why: String| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("cannot resolve the backend address {hostport:?}: {why}"),
        )
    };
    hostport
        .to_socket_addrs()
        .map_err(|e| cannot(e.to_string()))?
        .next()
        .ok_or_else(|| cannot("no address".into()))
}

fn addr(key: &str, v: &str) -> Result<SocketAddr, ConfigError> {
    v.parse()
        .map_err(|_| err(key, format!("{v:?} is not an ip:port address")))
}

#[cfg(test)]
mod tests;
