//! Configuration: the `conf/tether.toml` tree ([`file`]), its routes ([`route`]) and the
//! command-line flags ([`flags`]), merged and validated.
//!
//! Precedence: built-in defaults, then the file named by `--config`, then flags (each flag also
//! reads a `TETHER_*` environment variable). [`File::validate`] checks the result once at start;
//! an invalid configuration is a [`ConfigError`] naming the key, and `main` exits with status 64.

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

use std::net::SocketAddr;

pub use crate::journal::DEFAULT_WINDOW;

pub use crate::error::ConfigError;
pub use crate::vocab::kinds::DialectKind;
pub use cors::{Cors, CorsConf, Origins};
pub use file::{
    parse_file, AuthConf, Dur, File, JournalConf, Limits, Recorder, Server, Subject, Upstream,
};
pub use flags::{Flags, LogFormat};
pub use journal::{Journal, JournalTls};
pub use pattern::{Captures, RoutePath};
pub use route::{match_route, Route};
pub use route_conf::{default_routes, OnMiss, RouteConf, RouteKind};
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
    pub server: Server,
    /// The `[upstream]` table.
    pub upstream_opts: Upstream,
    /// The `[recorder]` table.
    pub recorder: Recorder,
    /// Where the caller's identity comes from.
    pub subject: Subject,
    /// The `[limits]` table.
    pub limits: Limits,
    /// Routes in match order.
    pub routes: Vec<Route>,
    /// The raw record every run keeps, when a route reads raw frames.
    pub raw: Option<RawRecord>,
    /// The secret resume tokens are signed with.
    pub secret: Vec<u8>,
    /// Whether the secret was configured (not drawn at random at start).
    pub secret_configured: bool,
    /// The shared journal, when one is configured.
    pub journal: Option<Journal>,
    /// `[server.cors]`, when some origin is allowed.
    pub cors: Option<Cors>,
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
            None => File::default(),
        };
        Config::from_parts(file, flags)
    }

    /// Applies flags to a parsed file and validates the result.
    pub fn from_parts(mut file: File, flags: &Flags) -> Result<Config, ConfigError> {
        if let Some(v) = &flags.listen {
            file.server.listen = v.clone();
        }
        if let Some(v) = &flags.upstream {
            // The flag names the backend wherever the file did.
            file.server.upstream = v.clone();
            file.upstream.url.clear();
        }
        if let Some(v) = &flags.upstream_ca {
            file.upstream.ca = Some(v.clone());
        }
        if let Some(v) = &flags.upstream_cert {
            file.upstream.cert = Some(v.clone());
        }
        if let Some(v) = &flags.upstream_key {
            file.upstream.key = Some(v.clone());
        }
        if let Some(v) = &flags.admin {
            file.server.admin = v.clone();
        }
        if let Some(v) = &flags.tls_cert {
            file.server.tls_cert = Some(v.clone());
        }
        if let Some(v) = &flags.tls_key {
            file.server.tls_key = Some(v.clone());
        }
        if let Some(v) = flags.window {
            file.recorder.window = v;
        }
        if let Some(v) = flags.retention {
            file.recorder.retention = Dur(v);
        }
        if let Some(v) = flags.max_chats {
            file.recorder.max_chats = v;
        }
        if let Some(v) = flags.max_buffered_bytes {
            file.limits.max_buffered_bytes = v;
        }
        if let Some(v) = flags.max_client_buffer_bytes {
            file.limits.max_client_buffer_bytes = v;
        }
        if let Some(v) = flags.heartbeat {
            file.server.heartbeat = Dur(v);
        }
        if let Some(v) = flags.upstream_idle_timeout {
            file.upstream.idle_timeout = Dur(v);
        }
        if let Some(v) = flags.drain_timeout {
            file.server.drain_timeout = Dur(v);
        }
        if let Some(v) = flags.header_timeout {
            file.server.header_timeout = Dur(v);
        }
        if let Some(v) = flags.keepalive_timeout {
            file.server.keepalive_timeout = Dur(v);
        }
        if let Some(v) = flags.body_timeout {
            file.server.body_timeout = Dur(v);
        }
        if let Some(v) = flags.max_connections {
            file.server.max_connections = Some(v);
        }
        if let Some(v) = flags.max_streams_per_connection {
            file.server.max_streams_per_connection = v;
        }
        if let Some(v) = flags.upstream_max_requests {
            file.upstream.max_requests = Some(v);
        }
        if let Some(v) = flags.serve_client {
            file.server.serve_client = Some(v);
        }
        if let Some(v) = flags.abandon_after {
            file.limits.abandon_after = Dur(v);
        }
        if let Some(v) = &flags.journal {
            file.journal.url = v.clone();
        }
        if let Some(v) = &flags.replica_id {
            file.journal.replica_id = v.clone();
        }
        if let Some(v) = flags.journal_cluster {
            file.journal.cluster = v;
        }
        if let Some(v) = &flags.journal_ca {
            file.journal.ca = Some(v.clone());
        }
        if let Some(v) = &flags.journal_cert {
            file.journal.cert = Some(v.clone());
        }
        if let Some(v) = &flags.journal_key {
            file.journal.key = Some(v.clone());
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

impl File {
    /// Checks every value and builds the [`Config`].
    pub fn validate(self) -> Result<Config, ConfigError> {
        let listen = addr("server.listen", &self.server.listen)?;
        let admin = addr("server.admin", &self.server.admin)?;
        let upstream = match (self.server.upstream.trim(), self.upstream.url.trim()) {
            ("", "") => None,
            (u, "") => Some(UpstreamUrl::parse(u).map_err(|m| err("server.upstream", m))?),
            ("", u) => Some(UpstreamUrl::parse(u).map_err(|m| err("upstream.url", m))?),
            _ => {
                return Err(err(
                    "upstream.url",
                    "the backend is named twice (also [server] upstream): keep one",
                ))
            }
        };
        let u = &self.upstream;
        paired(
            ("upstream.cert", u.cert.is_some()),
            ("upstream.key", u.key.is_some()),
            "a client certificate needs both cert and key",
        )?;
        if (u.ca.is_some() || u.cert.is_some()) && !upstream.as_ref().is_some_and(|b| b.tls) {
            let key = if u.ca.is_some() {
                "upstream.ca"
            } else {
                "upstream.cert"
            };
            return Err(err(key, "is for an HTTPS backend (--upstream https://…)"));
        }
        paired(
            ("server.tls_cert", self.server.tls_cert.is_some()),
            ("server.tls_key", self.server.tls_key.is_some()),
            "HTTPS on the listener needs both tls_cert and tls_key",
        )?;
        let r = &self.recorder;
        if r.window == 0 {
            return Err(err("recorder.window", "must be at least 1"));
        }
        if r.window > 1 << 20 {
            return Err(err("recorder.window", "must be at most 1048576"));
        }
        if r.max_body_bytes == 0 {
            return Err(err("recorder.max_body_bytes", "must be at least 1"));
        }
        if r.max_event_bytes < 1024 {
            return Err(err("recorder.max_event_bytes", "must be at least 1024"));
        }
        if self.server.heartbeat.0.is_zero() {
            return Err(err("server.heartbeat", "must be more than 0s"));
        }
        if self.server.write_timeout.0.is_zero() {
            return Err(err("server.write_timeout", "must be more than 0s"));
        }
        if self.server.header_timeout.0.is_zero() {
            return Err(err("server.header_timeout", "must be more than 0s"));
        }
        if self.server.keepalive_timeout.0.is_zero() {
            return Err(err("server.keepalive_timeout", "must be more than 0s"));
        }
        if self.server.body_timeout.0.is_zero() {
            return Err(err("server.body_timeout", "must be more than 0s"));
        }
        if self.server.max_connections == Some(0) {
            return Err(err("server.max_connections", "must be at least 1"));
        }
        if self.server.max_streams_per_connection == 0 {
            return Err(err(
                "server.max_streams_per_connection",
                "must be at least 1",
            ));
        }
        if self.upstream.max_requests == Some(0) {
            return Err(err("upstream.max_requests", "must be at least 1"));
        }
        if self.upstream.idle_timeout.0.is_zero() {
            return Err(err("upstream.idle_timeout", "must be more than 0s"));
        }
        if self.upstream.connect_timeout.0.is_zero() {
            return Err(err("upstream.connect_timeout", "must be more than 0s"));
        }
        let l = &self.limits;
        if l.max_header_bytes < 1024 {
            return Err(err("limits.max_header_bytes", "must be at least 1024"));
        }
        if l.max_observers_per_run == 0 {
            return Err(err("limits.max_observers_per_run", "must be at least 1"));
        }
        if l.max_runs == 0 {
            return Err(err("limits.max_runs", "must be at least 1"));
        }
        if l.max_client_buffer_bytes < 128 * 1024 {
            return Err(err(
                "limits.max_client_buffer_bytes",
                "must be at least 131072 (two upstream reads)",
            ));
        }
        if l.max_buffered_bytes < l.max_client_buffer_bytes.max(r.max_event_bytes) {
            return Err(err(
                "limits.max_buffered_bytes",
                "must be at least limits.max_client_buffer_bytes and recorder.max_event_bytes",
            ));
        }
        let subject: Subject = self
            .auth
            .subject
            .parse()
            .map_err(|e| err("auth.subject", e))?;
        let confs = self.routes.clone().unwrap_or_else(default_routes);
        let mut routes = Vec::with_capacity(confs.len());
        for (i, rc) in confs.into_iter().enumerate() {
            routes.push(route::check(i, rc)?);
        }
        let serve_client = self.server.serve_client.unwrap_or(upstream.is_none());
        let raw = raw_record(&routes, self.recorder.max_raw_bytes_per_run)?;
        let journal = journal::journal(&self.journal)?;
        let cors = Cors::check(&self.server.cors, ORIGINS_KEY)?;
        let secret_configured = flags_secret().is_some() || !self.auth.secret.is_empty();
        let secret = match (&flags_secret(), self.auth.secret.as_str()) {
            (Some(s), _) => s.clone().into_bytes(),
            (None, "") => rand::random::<[u8; 32]>().to_vec(),
            (None, s) => s.as_bytes().to_vec(),
        };
        Ok(Config {
            listen,
            upstream,
            admin,
            serve_client,
            server: self.server,
            upstream_opts: self.upstream,
            recorder: self.recorder,
            subject,
            limits: self.limits,
            routes,
            raw,
            secret,
            secret_configured,
            journal,
            cors,
        })
    }
}

#[cfg(test)]
mod tests;
