//! The configuration file: the `conf/tether.toml` tree as read, with its defaults. Every table
//! denies unknown keys; values are checked once, by [`FileConf::validate`](super::FileConf::validate).

use std::str::FromStr;
use std::time::Duration;

use serde::Deserialize;

use super::accounting::AccountingConf;
use super::cors::CorsConf;
pub use super::duration::Dur;
use super::route_conf::RouteConf;
use crate::error::ConfigError;

/// `[server]`: listeners, upstream and timeouts.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConf {
    /// Address the proxy listens on.
    pub listen: String,
    /// The backend, `host:port`; empty runs the embedded demo backend.
    pub upstream: String,
    /// Address of the admin listener (`/metrics`, `/healthz`, `/readyz`).
    pub admin: String,
    /// Threads of the runtime (0: one per core this process may use); one runs tokio's
    /// current-thread scheduler ([`crate::server::runtime`]).
    pub threads: usize,
    /// Interval of `: keepalive` comments on idle observer streams.
    pub heartbeat: Dur,
    /// A write to a client that makes no progress for this long closes that client (on every
    /// route: tether's own and pass-through, HTTP/1.1 and HTTP/2).
    pub write_timeout: Dur,
    /// On SIGTERM, how long live runs may keep going before the process exits.
    pub drain_timeout: Dur,
    /// A client's whole request head must arrive within this (from the connect, or from the
    /// first byte of the next request on a kept-alive connection); slower: the connection is
    /// closed.
    pub header_timeout: Dur,
    /// A kept-alive client connection idle this long between requests is closed.
    pub keepalive_timeout: Dur,
    /// A request's whole body must arrive within this, from the end of its head; slower: a
    /// body tether reads is answered `408 body_timeout`, a pass-through request's connection
    /// (HTTP/2: its stream) is closed.
    pub body_timeout: Dur,
    /// Client connections open at once on the proxy listener; more are refused with `503
    /// too_many_connections`. Unset: half the open-files limit less a reserve (the other half
    /// is for backend connections, `[upstream] max_requests`).
    pub max_connections: Option<usize>,
    /// Streams one HTTP/2 connection may have open at once (`SETTINGS_MAX_CONCURRENT_STREAMS`);
    /// a client opening more gets `RST_STREAM REFUSED_STREAM`.
    pub max_streams_per_connection: u32,
    /// Serve the browser client at `GET /_tether/client.js` (and, in demo mode, the demo page at
    /// `GET /`); unset: on in demo mode only.
    pub serve_client: Option<bool>,
    /// PEM file of the certificate chain the proxy listener serves HTTPS with (ALPN `h2` and
    /// `http/1.1`), with `tls_key` (`--tls-cert`); unset: plain HTTP/1.1. Read again on SIGHUP.
    pub tls_cert: Option<std::path::PathBuf>,
    /// PEM file of that certificate's private key (`--tls-key`).
    pub tls_key: Option<std::path::PathBuf>,
    /// A file holding the bearer token of the admin API on the admin listener (`--admin-token`;
    /// `TETHER_ADMIN_TOKEN` gives the token itself instead); unset: the admin API is off.
    pub admin_token: Option<std::path::PathBuf>,
    /// `[server.cors]`: pages on other origins reading tether's own answers.
    pub cors: CorsConf,
}

impl Default for ServerConf {
    fn default() -> Self {
        ServerConf {
            listen: "127.0.0.1:8080".into(),
            upstream: String::new(),
            admin: "127.0.0.1:9090".into(),
            threads: 0,
            heartbeat: Dur(Duration::from_secs(15)),
            write_timeout: Dur(Duration::from_secs(30)),
            drain_timeout: Dur(Duration::from_secs(300)),
            header_timeout: Dur(Duration::from_secs(10)),
            keepalive_timeout: Dur(Duration::from_secs(60)),
            body_timeout: Dur(Duration::from_secs(60)),
            max_connections: None,
            max_streams_per_connection: 100,
            serve_client: None,
            tls_cert: None,
            tls_key: None,
            admin_token: None,
            cors: CorsConf::default(),
        }
    }
}

/// `[upstream]`: how the producer talks to the backend.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct UpstreamConf {
    /// The backend's address (as `--upstream`; or `[server] upstream`, not both).
    pub url: String,
    /// PEM file of the CA certificates that verify an HTTPS backend, instead of the system's
    /// roots (`--upstream-ca`).
    pub ca: Option<std::path::PathBuf>,
    /// PEM file of the client certificate chain presented to an HTTPS backend (mTLS), with
    /// `key` (`--upstream-cert`).
    pub cert: Option<std::path::PathBuf>,
    /// PEM file of the client certificate's private key (`--upstream-key`).
    pub key: Option<std::path::PathBuf>,
    /// TCP connect timeout (with an HTTPS backend, the TLS handshake's too).
    pub connect_timeout: Dur,
    /// Backend connects in flight at once; further turns wait their turn (`0`: no limit).
    pub max_connecting: usize,
    /// Requests to the backend in flight at once (recorded turns still running, pass-through
    /// and forwarded requests), each holding a backend connection; more are refused with `503
    /// at_capacity`. Unset: half the open-files limit less a reserve (the other half is for
    /// client connections, `[server] max_connections`).
    pub max_requests: Option<usize>,
    /// How long a turn may wait for a connect slot or a free file descriptor before it fails
    /// (`502 upstream_unreachable`).
    pub connect_queue_timeout: Dur,
    /// A read from the backend that takes longer than this ends the run (`upstream_timeout`).
    pub idle_timeout: Dur,
    /// A write of the request to the backend that takes longer than this fails it.
    pub write_timeout: Dur,
    /// A run that lasts longer than this is stopped (`max_duration`); `0s` means no limit.
    pub max_run_duration: Dur,
}

impl Default for UpstreamConf {
    fn default() -> Self {
        UpstreamConf {
            url: String::new(),
            ca: None,
            cert: None,
            key: None,
            connect_timeout: Dur(Duration::from_secs(5)),
            max_connecting: 256,
            max_requests: None,
            connect_queue_timeout: Dur(Duration::from_secs(30)),
            idle_timeout: Dur(Duration::from_secs(300)),
            write_timeout: Dur(Duration::from_secs(30)),
            max_run_duration: Dur(Duration::ZERO),
        }
    }
}

/// `[recorder]`: the recovery buffer and its limits.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RecorderConf {
    /// Events kept per run for cursor replay.
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
    /// Bytes of raw upstream frames kept per run for the verbatim resume dialects.
    pub max_raw_bytes_per_run: usize,
}

impl Default for RecorderConf {
    fn default() -> Self {
        RecorderConf {
            window: super::DEFAULT_WINDOW,
            retention: Dur(Duration::from_secs(300)),
            max_chats: 64,
            max_body_bytes: 1 << 20,
            max_event_bytes: 8 << 20,
            max_wait: Dur(Duration::from_secs(30)),
            max_raw_bytes_per_run: 16 << 20,
        }
    }
}

/// `[auth]`: who may see and stop a run.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuthConf {
    /// `none`, `header:<Name>`, `cookie:<name>` or `authorization`.
    pub subject: String,
    /// The secret resume tokens are signed with (shared by every replica); empty: a random one
    /// per process.
    pub secret: String,
}

impl Default for AuthConf {
    fn default() -> Self {
        AuthConf {
            subject: "none".into(),
            secret: String::new(),
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

impl FromStr for Subject {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "none" => Ok(Subject::None),
            "authorization" => Ok(Subject::Authorization),
            s => match s.split_once(':') {
                Some(("header", h)) if !h.is_empty() => Ok(Subject::Header(h.to_ascii_lowercase())),
                Some(("cookie", c)) if !c.is_empty() => Ok(Subject::Cookie(c.to_string())),
                _ => Err(format!(
                    "{s:?} must be none, header:<Name>, cookie:<name> or authorization"
                )),
            },
        }
    }
}

/// `[limits]`: bounds on what one client or the whole sidecar may hold.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsConf {
    /// Largest request header block (all header lines), in bytes; larger gets 431.
    pub max_header_bytes: usize,
    /// Observers one run may have at once; more get 429.
    pub max_observers_per_run: usize,
    /// Recorded runs held at once (active and completed); over it, completed runs are evicted
    /// first, then new turns pass through unrecorded.
    pub max_runs: usize,
    /// Bytes all recorded runs may hold; over it, as for `max_runs`.
    pub max_recorded_bytes: usize,
    /// Bytes held at once for legacy clients' queues and unfinished upstream events, all runs
    /// together; over it, the next chunk cuts its legacy client and a growing event is dropped.
    pub max_buffered_bytes: usize,
    /// Bytes one legacy client's queue may hold; a client that falls further behind is cut.
    pub max_client_buffer_bytes: usize,
    /// Stop a run no client has watched for this long (`abandoned`); `0s` turns it off.
    pub abandon_after: Dur,
    /// Runs one owner (`[auth] subject`) may have going at once; a record request over it gets
    /// `429 too_many_runs`. `0`: off.
    pub max_active_runs_per_owner: u32,
    /// Runs one owner may start per minute (a token bucket of this size, refilled evenly); a
    /// record request over it gets `429 rate_limited`. `0`: off.
    pub max_runs_per_owner_per_minute: u32,
}

impl Default for LimitsConf {
    fn default() -> Self {
        LimitsConf {
            max_header_bytes: 64 * 1024,
            max_observers_per_run: 1024,
            max_runs: 10_000,
            max_recorded_bytes: 1 << 30,
            max_buffered_bytes: 256 << 20,
            max_client_buffer_bytes: 1 << 20,
            abandon_after: Dur(Duration::ZERO),
            max_active_runs_per_owner: 0,
            max_runs_per_owner_per_minute: 0,
        }
    }
}

/// `[journal]`: the shared journal that lets several replicas serve every run (off when `url`
/// is empty).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct JournalConf {
    /// `redis://HOST:PORT[/DB]` (`rediss://` for TLS); in cluster mode one or more seed nodes
    /// separated by commas; empty: the in-process journal only.
    pub url: String,
    /// PEM file of the CA certificates that verify a `rediss://` Redis, instead of the
    /// system's roots (`--journal-ca`).
    pub ca: Option<std::path::PathBuf>,
    /// PEM file of a client certificate for a Redis that asks for one, with `key`
    /// (`--journal-cert`).
    pub cert: Option<std::path::PathBuf>,
    /// PEM file of the client certificate's private key (`--journal-key`).
    pub key: Option<std::path::PathBuf>,
    /// Whether `url` names a Redis Cluster (7+) rather than one server.
    pub cluster: bool,
    /// This replica's name in the journal; empty: hostname, pid and a random suffix.
    pub replica_id: String,
    /// How long a replica's liveness lasts without a refresh; its live runs are ended as
    /// `owner_lost` by another replica within about 1.5x this.
    pub lease: Dur,
    /// How often a follower reads the stream without a wake-up (the safety net for a lost one).
    pub poll: Dur,
    /// How long an append may wait for others to share its round trip to Redis, counted from
    /// the round trip before (zero: never waits); `--journal-flush-delay`.
    pub flush_delay: Dur,
}

/// `[journal] flush_delay`'s default, in microseconds.
pub const FLUSH_DELAY_US: u64 = 1_000;

impl Default for JournalConf {
    fn default() -> Self {
        JournalConf {
            url: String::new(),
            ca: None,
            cert: None,
            key: None,
            cluster: false,
            replica_id: String::new(),
            lease: Dur(Duration::from_secs(10)),
            poll: Dur(Duration::from_secs(1)),
            flush_delay: Dur(Duration::from_micros(FLUSH_DELAY_US)),
        }
    }
}

/// The whole file, as read.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct FileConf {
    /// `[server]`
    pub server: ServerConf,
    /// `[upstream]`
    pub upstream: UpstreamConf,
    /// `[recorder]`
    pub recorder: RecorderConf,
    /// `[auth]`
    pub auth: AuthConf,
    /// `[limits]`
    pub limits: LimitsConf,
    /// `[journal]`
    pub journal: JournalConf,
    /// `[accounting]`
    pub accounting: AccountingConf,
    /// `[[routes]]`; when absent, the defaults of [`default_routes`](super::route_conf::default_routes).
    pub routes: Option<Vec<RouteConf>>,
}

/// Parses the TOML text of a configuration file.
pub fn parse_file(text: &str) -> Result<FileConf, ConfigError> {
    toml::from_str(text).map_err(|e| {
        let key = e
            .span()
            .map(|s| {
                let line = text[..s.start].matches('\n').count() + 1;
                format!("line {line}")
            })
            .unwrap_or_else(|| "file".into());
        ConfigError::new(key, e.message().to_string())
    })
}
