//! Configuration: the `conf/tether.toml` tree and the command-line flags, merged and validated.
//!
//! Precedence: built-in defaults, then the file named by `--config`, then flags (each flag also
//! reads a `TETHER_*` environment variable). [`File::validate`] checks the result once at start;
//! an invalid configuration is an [`ConfigError`] naming the key, and `main` exits with status 64.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use serde::Deserialize;

pub use crate::error::ConfigError;

fn err(key: impl Into<String>, message: impl Into<String>) -> ConfigError {
    ConfigError::new(key, message)
}

/// A duration written as `15s`, `5m`, `300ms`, `1h 30m` (humantime syntax).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dur(pub Duration);

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        humantime::parse_duration(&s)
            .map(Dur)
            .map_err(|e| serde::de::Error::custom(format!("{s:?} is not a duration: {e}")))
    }
}

/// `[server]`: listeners, upstream and timeouts.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Server {
    /// Address the proxy listens on.
    pub listen: String,
    /// The backend, `host:port`; empty runs the embedded demo backend.
    pub upstream: String,
    /// Address of the admin listener (`/metrics`, `/healthz`, `/readyz`).
    pub admin: String,
    /// Worker threads of the runtime (0: one per core).
    pub threads: usize,
    /// Interval of `: keepalive` comments on idle observer streams.
    pub heartbeat: Dur,
    /// A write to a client that makes no progress for this long closes that client.
    pub write_timeout: Dur,
    /// On SIGTERM, how long live runs may keep going before the process exits.
    pub drain_timeout: Dur,
}

impl Default for Server {
    fn default() -> Self {
        Server {
            listen: "127.0.0.1:8080".into(),
            upstream: String::new(),
            admin: "127.0.0.1:9090".into(),
            threads: 0,
            heartbeat: Dur(Duration::from_secs(15)),
            write_timeout: Dur(Duration::from_secs(30)),
            drain_timeout: Dur(Duration::from_secs(300)),
        }
    }
}

/// `[upstream]`: how the producer talks to the backend.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Upstream {
    /// TCP connect timeout.
    pub connect_timeout: Dur,
    /// A read from the backend that takes longer than this ends the run (`upstream_timeout`).
    pub idle_timeout: Dur,
    /// A write of the request to the backend that takes longer than this fails it.
    pub write_timeout: Dur,
    /// A run that lasts longer than this is stopped (`max_duration`); `0s` means no limit.
    pub max_run_duration: Dur,
}

impl Default for Upstream {
    fn default() -> Self {
        Upstream {
            connect_timeout: Dur(Duration::from_secs(5)),
            idle_timeout: Dur(Duration::from_secs(300)),
            write_timeout: Dur(Duration::from_secs(30)),
            max_run_duration: Dur(Duration::ZERO),
        }
    }
}

/// `[recorder]`: the recovery buffer and its limits.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Recorder {
    /// Events kept per run as ready-to-send frames for cursor replay.
    pub window: usize,
    /// How long a completed run is kept.
    pub retention: Dur,
    /// Chats with completed runs kept (oldest completion evicted first).
    pub max_chats: usize,
    /// Largest request body accepted on record and attach routes (larger: 413).
    pub max_body_bytes: usize,
    /// Largest upstream event recorded (larger: dropped from the record and counted).
    pub max_event_bytes: usize,
    /// Cap of the `wait_ms` an attach may ask for.
    pub max_wait: Dur,
}

impl Default for Recorder {
    fn default() -> Self {
        Recorder {
            window: crate::journal::memory::DEFAULT_WINDOW,
            retention: Dur(Duration::from_secs(300)),
            max_chats: 64,
            max_body_bytes: 1 << 20,
            max_event_bytes: 8 << 20,
            max_wait: Dur(Duration::from_secs(30)),
        }
    }
}

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

/// `[auth]`: who may see and stop a run.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuthConf {
    /// `none`, `header:<Name>`, `cookie:<name>` or `authorization`.
    pub subject: String,
}

impl Default for AuthConf {
    fn default() -> Self {
        AuthConf {
            subject: "none".into(),
        }
    }
}

/// Where the caller's identity comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Subject {
    /// Everyone is the same caller: any client that knows a chat id may read and stop it.
    None,
    /// The value of a request header.
    Header(String),
    /// The value of a cookie.
    Cookie(String),
    /// The whole `Authorization` header.
    Authorization,
}

/// `[limits]`: bounds on what one client or the whole sidecar may hold.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Largest request header block (all header lines), in bytes; larger gets 431.
    pub max_header_bytes: usize,
    /// Observers one run may have at once; more get 429.
    pub max_observers_per_run: usize,
    /// Recorded runs held at once (active and completed); over it, completed runs are evicted
    /// first, then new turns pass through unrecorded.
    pub max_runs: usize,
    /// Bytes all recorded runs may hold; over it, as for `max_runs`.
    pub max_recorded_bytes: usize,
    /// Stop a run no client has watched for this long (`abandoned`); `0s` turns it off.
    pub abandon_after: Dur,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_header_bytes: 64 * 1024,
            max_observers_per_run: 1024,
            max_runs: 10_000,
            max_recorded_bytes: 1 << 30,
            abandon_after: Dur(Duration::ZERO),
        }
    }
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

/// Where a route finds the chat id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChatIdFrom {
    /// A top-level field of the JSON body.
    Body(String),
    /// A query parameter.
    Query(String),
    /// A request header.
    Header(String),
}

/// When a run counts as persisted.
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
    /// Exact request path the route matches (query excluded).
    pub path: String,
    /// What the route does.
    pub kind: RouteKind,
    /// Where the chat id is: `body:<field>`, `query:<name>` or `header:<Name>`.
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
    /// Exact path.
    pub path: String,
    /// What the route does.
    pub kind: RouteKind,
    /// Where the chat id is.
    pub chat_id: ChatIdFrom,
    /// When a run counts as persisted.
    pub commit: Commit,
    /// Attach only: what to do for a chat with no run.
    pub on_miss: OnMiss,
    /// Stop only: also forward to the backend.
    pub forward: bool,
    /// Record only: one active turn per chat.
    pub single_flight: bool,
}

/// The whole file, as read.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct File {
    /// `[server]`
    pub server: Server,
    /// `[upstream]`
    pub upstream: Upstream,
    /// `[recorder]`
    pub recorder: Recorder,
    /// `[auth]`
    pub auth: AuthConf,
    /// `[limits]`
    pub limits: Limits,
    /// `[[routes]]`; when absent, the defaults of [`default_routes`].
    pub routes: Option<Vec<RouteConf>>,
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

/// The validated configuration the sidecar runs with.
#[derive(Debug, Clone)]
pub struct Config {
    /// Proxy listen address.
    pub listen: SocketAddr,
    /// Backend address; `None` runs the embedded demo backend.
    pub upstream: Option<String>,
    /// Admin listen address.
    pub admin: SocketAddr,
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
}

/// Command-line flags. Each overrides the file; each has a `TETHER_*` environment variable.
#[derive(Debug, Clone, Parser, Default)]
#[command(
    name = "tether",
    version,
    about = "Records AI-chat SSE turns so clients can reconnect"
)]
pub struct Flags {
    /// Configuration file (TOML, see conf/tether.toml).
    #[arg(long, short = 'c', env = "TETHER_CONFIG")]
    pub config: Option<PathBuf>,
    /// Proxy listen address [default: 127.0.0.1:8080].
    #[arg(long, env = "TETHER_LISTEN")]
    pub listen: Option<String>,
    /// Backend host:port; without it tether runs its embedded demo backend.
    #[arg(long, env = "TETHER_UPSTREAM")]
    pub upstream: Option<String>,
    /// Admin listen address for /metrics, /healthz, /readyz [default: 127.0.0.1:9090].
    #[arg(long, env = "TETHER_ADMIN")]
    pub admin: Option<String>,
    /// Replay window, events per run [default: 4096].
    #[arg(long, env = "TETHER_WINDOW")]
    pub window: Option<usize>,
    /// How long completed runs are kept, e.g. 5m [default: 5m].
    #[arg(long, env = "TETHER_RETENTION")]
    pub retention: Option<String>,
    /// Chats with completed runs kept [default: 64].
    #[arg(long, env = "TETHER_MAX_CHATS")]
    pub max_chats: Option<usize>,
    /// Heartbeat interval on idle observer streams, e.g. 15s [default: 15s].
    #[arg(long, env = "TETHER_HEARTBEAT")]
    pub heartbeat: Option<String>,
    /// Upstream idle read timeout, e.g. 5m [default: 5m].
    #[arg(long, env = "TETHER_UPSTREAM_IDLE_TIMEOUT")]
    pub upstream_idle_timeout: Option<String>,
    /// On SIGTERM, how long live runs may finish before exit, e.g. 5m [default: 5m].
    #[arg(long, env = "TETHER_DRAIN_TIMEOUT")]
    pub drain_timeout: Option<String>,
    /// Stop a run no client has watched for this long, e.g. 10m [default: off].
    #[arg(long, env = "TETHER_ABANDON_AFTER")]
    pub abandon_after: Option<String>,
    /// Caller identity: none, header:NAME, cookie:NAME or authorization [default: none].
    #[arg(long, env = "TETHER_AUTH_SUBJECT")]
    pub auth_subject: Option<String>,
    /// Log format: text or json [default: text]; the level comes from RUST_LOG (default info).
    #[arg(long, env = "TETHER_LOG_FORMAT", default_value = "text")]
    pub log_format: String,
    /// Demo backend: text deltas per turn [default: 40].
    #[arg(long, env = "TETHER_DEMO_TOKENS", default_value_t = 40)]
    pub demo_tokens: usize,
    /// Demo backend: pause between events, e.g. 50ms [default: 50ms].
    #[arg(long, env = "TETHER_DEMO_PACE", default_value = "50ms")]
    pub demo_pace: String,
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
        let dur = |key: &str, v: &str| {
            humantime::parse_duration(v)
                .map(Dur)
                .map_err(|e| err(key, format!("{v:?} is not a duration: {e}")))
        };
        if let Some(v) = &flags.listen {
            file.server.listen = v.clone();
        }
        if let Some(v) = &flags.upstream {
            file.server.upstream = v.clone();
        }
        if let Some(v) = &flags.admin {
            file.server.admin = v.clone();
        }
        if let Some(v) = flags.window {
            file.recorder.window = v;
        }
        if let Some(v) = &flags.retention {
            file.recorder.retention = dur("recorder.retention (--retention)", v)?;
        }
        if let Some(v) = flags.max_chats {
            file.recorder.max_chats = v;
        }
        if let Some(v) = &flags.heartbeat {
            file.server.heartbeat = dur("server.heartbeat (--heartbeat)", v)?;
        }
        if let Some(v) = &flags.upstream_idle_timeout {
            file.upstream.idle_timeout = dur("upstream.idle_timeout (--upstream-idle-timeout)", v)?;
        }
        if let Some(v) = &flags.drain_timeout {
            file.server.drain_timeout = dur("server.drain_timeout (--drain-timeout)", v)?;
        }
        if let Some(v) = &flags.abandon_after {
            file.limits.abandon_after = dur("limits.abandon_after (--abandon-after)", v)?;
        }
        if let Some(v) = &flags.auth_subject {
            file.auth.subject = v.clone();
        }
        file.validate()
    }
}

/// Parses the TOML text of a configuration file.
pub fn parse_file(text: &str) -> Result<File, ConfigError> {
    toml::from_str(text).map_err(|e| {
        let key = e
            .span()
            .map(|s| {
                let line = text[..s.start].matches('\n').count() + 1;
                format!("line {line}")
            })
            .unwrap_or_else(|| "file".into());
        err(key, e.message().to_string())
    })
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
        let upstream = match self.server.upstream.trim() {
            "" => None,
            u => {
                let hostport = u.strip_prefix("http://").unwrap_or(u).trim_end_matches('/');
                if hostport.contains('/') || !hostport.contains(':') {
                    return Err(err(
                        "server.upstream",
                        format!("{u:?} must be host:port (plain HTTP)"),
                    ));
                }
                Some(hostport.to_string())
            }
        };
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
        let subject = match self.auth.subject.as_str() {
            "none" => Subject::None,
            "authorization" => Subject::Authorization,
            s => match s.split_once(':') {
                Some(("header", h)) if !h.is_empty() => Subject::Header(h.to_ascii_lowercase()),
                Some(("cookie", c)) if !c.is_empty() => Subject::Cookie(c.to_string()),
                _ => {
                    return Err(err(
                        "auth.subject",
                        format!(
                            "{s:?} must be none, header:<Name>, cookie:<name> or authorization"
                        ),
                    ))
                }
            },
        };
        let confs = self.routes.clone().unwrap_or_else(default_routes);
        let mut routes = Vec::with_capacity(confs.len());
        for (i, rc) in confs.into_iter().enumerate() {
            routes.push(route(i, rc)?);
        }
        Ok(Config {
            listen,
            upstream,
            admin,
            server: self.server,
            upstream_opts: self.upstream,
            recorder: self.recorder,
            subject,
            limits: self.limits,
            routes,
        })
    }
}

fn route(i: usize, rc: RouteConf) -> Result<Route, ConfigError> {
    let key = |k: &str| format!("routes[{i}].{k}");
    if !rc.path.starts_with('/') {
        return Err(err(key("path"), format!("{:?} must start with /", rc.path)));
    }
    if rc.methods.is_empty() {
        return Err(err(key("methods"), "must name at least one method"));
    }
    let methods: Vec<String> = rc.methods.iter().map(|m| m.to_ascii_uppercase()).collect();
    if let Some(m) = methods
        .iter()
        .find(|m| !m.bytes().all(|b| b.is_ascii_uppercase()))
    {
        return Err(err(key("methods"), format!("{m:?} is not an HTTP method")));
    }
    let chat_id = match rc.chat_id.split_once(':') {
        Some(("body", f)) if !f.is_empty() => ChatIdFrom::Body(f.into()),
        Some(("query", f)) if !f.is_empty() => ChatIdFrom::Query(f.into()),
        Some(("header", f)) if !f.is_empty() => ChatIdFrom::Header(f.to_ascii_lowercase()),
        _ => {
            return Err(err(
                key("chat_id"),
                format!(
                    "{:?} must be body:<field>, query:<name> or header:<Name>",
                    rc.chat_id
                ),
            ))
        }
    };
    let commit = match rc.commit.as_str() {
        "eof" => Commit::Eof,
        c => match c.strip_prefix("event:").map(|r| r.split_once(':')) {
            Some(Some((ty, name))) if !ty.is_empty() && !name.is_empty() => Commit::Event {
                ty: ty.into(),
                name: Some(name.into()),
            },
            Some(None) if c.len() > 6 => Commit::Event {
                ty: c[6..].into(),
                name: None,
            },
            _ => {
                return Err(err(
                    key("commit"),
                    format!("{c:?} must be eof or event:<TYPE>[:<name>]"),
                ))
            }
        },
    };
    Ok(Route {
        methods,
        path: rc.path,
        kind: rc.kind,
        chat_id,
        commit,
        on_miss: rc.on_miss,
        forward: rc.forward,
        single_flight: rc.single_flight,
    })
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
