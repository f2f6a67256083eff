//! Command-line flags. Each overrides the file and has a `TETHER_*` environment variable;
//! durations (`15s`, `5m`, `1h 30m`) and choices are parsed by clap, so a bad value is refused
//! before anything starts, naming the flag.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, ValueEnum};

use super::file::{Dur, FileConf, Subject};

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line (`ts`, `level`, `target`, `msg`).
    Json,
}

fn duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| format!("{s:?} is not a duration: {e}"))
}

fn subject(s: &str) -> Result<Subject, String> {
    s.parse()
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
    /// Backend: host:port or http://host[:port] (plain), https://host[:port] (HTTPS); without
    /// it tether runs its embedded demo backend.
    #[arg(long, env = "TETHER_UPSTREAM")]
    pub upstream: Option<String>,
    /// PEM file of the CA certificates that verify an HTTPS backend [default: the system's].
    #[arg(long, env = "TETHER_UPSTREAM_CA")]
    pub upstream_ca: Option<PathBuf>,
    /// PEM file of a client certificate chain for an HTTPS backend (mTLS; with --upstream-key).
    #[arg(long, env = "TETHER_UPSTREAM_CERT")]
    pub upstream_cert: Option<PathBuf>,
    /// PEM file of the client certificate's private key.
    #[arg(long, env = "TETHER_UPSTREAM_KEY")]
    pub upstream_key: Option<PathBuf>,
    /// PEM file of the certificate chain to serve HTTPS (with HTTP/2) on --listen, with
    /// --tls-key; read again on SIGHUP [default: plain HTTP/1.1].
    #[arg(long, env = "TETHER_TLS_CERT")]
    pub tls_cert: Option<PathBuf>,
    /// PEM file of the --tls-cert certificate's private key.
    #[arg(long, env = "TETHER_TLS_KEY")]
    pub tls_key: Option<PathBuf>,
    /// Admin listen address for /metrics, /healthz, /readyz [default: 127.0.0.1:9090].
    #[arg(long, env = "TETHER_ADMIN")]
    pub admin: Option<String>,
    /// A file holding the admin API's bearer token (at least 16 bytes; TETHER_ADMIN_TOKEN gives
    /// the token itself instead) [default: the admin API is off].
    #[arg(long, env = "TETHER_ADMIN_TOKEN_FILE")]
    pub admin_token: Option<PathBuf>,
    /// Replay window, events per run [default: 4096].
    #[arg(long, env = "TETHER_WINDOW")]
    pub window: Option<usize>,
    /// How long completed runs are kept, e.g. 5m [default: 5m].
    #[arg(long, env = "TETHER_RETENTION", value_parser = duration)]
    pub retention: Option<Duration>,
    /// Chats with completed runs kept [default: 64].
    #[arg(long, env = "TETHER_MAX_CHATS")]
    pub max_chats: Option<usize>,
    /// Bytes held for legacy clients' queues and unfinished upstream events, all runs together
    /// [default: 268435456].
    #[arg(long, env = "TETHER_MAX_BUFFERED_BYTES")]
    pub max_buffered_bytes: Option<usize>,
    /// Bytes one legacy client's queue may hold before it is cut [default: 1048576].
    #[arg(long, env = "TETHER_MAX_CLIENT_BUFFER_BYTES")]
    pub max_client_buffer_bytes: Option<usize>,
    /// Heartbeat interval on idle observer streams, e.g. 15s [default: 15s].
    #[arg(long, env = "TETHER_HEARTBEAT", value_parser = duration)]
    pub heartbeat: Option<Duration>,
    /// Upstream idle read timeout, e.g. 5m [default: 5m].
    #[arg(long, env = "TETHER_UPSTREAM_IDLE_TIMEOUT", value_parser = duration)]
    pub upstream_idle_timeout: Option<Duration>,
    /// On SIGTERM, how long live runs may finish before exit, e.g. 5m [default: 5m].
    #[arg(long, env = "TETHER_DRAIN_TIMEOUT", value_parser = duration)]
    pub drain_timeout: Option<Duration>,
    /// A client's whole request head must arrive within this, e.g. 10s [default: 10s].
    #[arg(long, env = "TETHER_HEADER_TIMEOUT", value_parser = duration)]
    pub header_timeout: Option<Duration>,
    /// Close a kept-alive client connection idle this long between requests [default: 60s].
    #[arg(long, env = "TETHER_KEEPALIVE_TIMEOUT", value_parser = duration)]
    pub keepalive_timeout: Option<Duration>,
    /// A request's whole body must arrive within this, e.g. 60s [default: 60s].
    #[arg(long, env = "TETHER_BODY_TIMEOUT", value_parser = duration)]
    pub body_timeout: Option<Duration>,
    /// Client connections open at once; more get 503 [default: half the open-files limit].
    #[arg(long, env = "TETHER_MAX_CONNECTIONS")]
    pub max_connections: Option<usize>,
    /// Streams one HTTP/2 connection may have open at once [default: 100].
    #[arg(long, env = "TETHER_MAX_STREAMS_PER_CONNECTION")]
    pub max_streams_per_connection: Option<u32>,
    /// Requests to the backend in flight at once (running turns, pass-through requests); more
    /// get 503 [default: half the open-files limit].
    #[arg(long, env = "TETHER_UPSTREAM_MAX_REQUESTS")]
    pub upstream_max_requests: Option<usize>,
    /// Stop a run no client has watched for this long, e.g. 10m [default: off].
    #[arg(long, env = "TETHER_ABANDON_AFTER", value_parser = duration)]
    pub abandon_after: Option<Duration>,
    /// Runs one owner (--auth-subject) may have going at once; more get 429 too_many_runs
    /// [default: 0, off].
    #[arg(long, env = "TETHER_MAX_ACTIVE_RUNS_PER_OWNER")]
    pub max_active_runs_per_owner: Option<u32>,
    /// Runs one owner may start per minute (a token bucket); more get 429 rate_limited
    /// [default: 0, off].
    #[arg(long, env = "TETHER_MAX_RUNS_PER_OWNER_PER_MINUTE")]
    pub max_runs_per_owner_per_minute: Option<u32>,
    /// Serve the browser client at /_tether/client.js (and the demo page at / in demo mode):
    /// true or false [default: true without --upstream, else false].
    #[arg(long, env = "TETHER_SERVE_CLIENT", value_name = "BOOL", num_args = 0..=1,
          default_missing_value = "true", value_parser = clap::builder::BoolishValueParser::new())]
    pub serve_client: Option<bool>,
    /// An origin whose pages may read tether's own answers (CORS), as the browser sends it:
    /// scheme://host[:port], or * for any (without credentials); repeatable, and comma-separated
    /// in the environment variable [default: none].
    #[arg(
        long = "cors-origin",
        env = "TETHER_CORS_ORIGINS",
        value_name = "ORIGIN",
        value_delimiter = ','
    )]
    pub cors_origins: Vec<String>,
    /// Caller identity: none, header:NAME, cookie:NAME or authorization [default: none].
    #[arg(long, env = "TETHER_AUTH_SUBJECT", value_parser = subject)]
    pub auth_subject: Option<Subject>,
    /// Shared journal, redis://HOST:PORT[/DB] (rediss:// for TLS): every replica serves every
    /// run [default: off].
    /// With --journal-cluster, one or more seed nodes separated by commas.
    #[arg(long, env = "TETHER_JOURNAL")]
    pub journal: Option<String>,
    /// The shared journal is a Redis Cluster: true or false [default: false].
    #[arg(long, env = "TETHER_JOURNAL_CLUSTER", value_name = "BOOL", num_args = 0..=1,
          default_missing_value = "true", value_parser = clap::builder::BoolishValueParser::new())]
    pub journal_cluster: Option<bool>,
    /// PEM file of the CA certificates that verify a rediss:// journal [default: the system's].
    #[arg(long, env = "TETHER_JOURNAL_CA")]
    pub journal_ca: Option<PathBuf>,
    /// PEM file of a client certificate for the journal's Redis (with --journal-key).
    #[arg(long, env = "TETHER_JOURNAL_CERT")]
    pub journal_cert: Option<PathBuf>,
    /// PEM file of the journal client certificate's private key.
    #[arg(long, env = "TETHER_JOURNAL_KEY")]
    pub journal_key: Option<PathBuf>,
    /// How long an append may wait for others to share its round trip to Redis, counted from
    /// the round trip before, e.g. 500us; 0s: never waits [default: 1ms].
    #[arg(long, env = "TETHER_JOURNAL_FLUSH_DELAY", value_parser = duration)]
    pub journal_flush_delay: Option<Duration>,
    /// This replica's name in the shared journal [default: hostname-pid-random].
    #[arg(long, env = "TETHER_REPLICA_ID")]
    pub replica_id: Option<String>,
    /// OTLP/HTTP collector to send a trace of each run to, http(s)://host:port (/v1/traces is
    /// appended); OTEL_EXPORTER_OTLP_ENDPOINT is read when this is not set [default: off].
    #[arg(long, env = "TETHER_OTLP_ENDPOINT")]
    pub otlp_endpoint: Option<String>,
    /// Log format; the level comes from RUST_LOG (default info).
    #[arg(long, env = "TETHER_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Demo backend: text deltas per turn.
    #[arg(long, env = "TETHER_DEMO_TOKENS", default_value_t = 40)]
    pub demo_tokens: usize,
    /// Demo backend: pause between events, e.g. 50ms.
    #[arg(long, env = "TETHER_DEMO_PACE", value_parser = duration, default_value = "50ms")]
    pub demo_pace: Duration,
}

impl Flags {
    /// Copies every flag that was given (or its `TETHER_*` variable) onto its key of `file`;
    /// flags win over the file.
    pub(super) fn apply(&self, file: &mut FileConf) {
        self.apply_server(file);
        self.apply_upstream(file);
        self.apply_recorder(file);
        self.apply_journal(file);
    }

    /// `[server]`: listeners, client-side timeouts and caps.
    fn apply_server(&self, file: &mut FileConf) {
        if let Some(v) = &self.listen {
            file.server.listen = v.clone();
        }
        if let Some(v) = &self.upstream {
            // The flag names the backend wherever the file did.
            file.server.upstream = v.clone();
            file.upstream.url.clear();
        }
        if let Some(v) = &self.admin {
            file.server.admin = v.clone();
        }
        if let Some(v) = &self.admin_token {
            file.server.admin_token = Some(v.clone());
        }
        if let Some(v) = &self.tls_cert {
            file.server.tls_cert = Some(v.clone());
        }
        if let Some(v) = &self.tls_key {
            file.server.tls_key = Some(v.clone());
        }
        if let Some(v) = self.heartbeat {
            file.server.heartbeat = Dur(v);
        }
        if let Some(v) = self.drain_timeout {
            file.server.drain_timeout = Dur(v);
        }
        if let Some(v) = self.header_timeout {
            file.server.header_timeout = Dur(v);
        }
        if let Some(v) = self.keepalive_timeout {
            file.server.keepalive_timeout = Dur(v);
        }
        if let Some(v) = self.body_timeout {
            file.server.body_timeout = Dur(v);
        }
        if let Some(v) = self.max_connections {
            file.server.max_connections = Some(v);
        }
        if let Some(v) = self.max_streams_per_connection {
            file.server.max_streams_per_connection = v;
        }
        if let Some(v) = self.serve_client {
            file.server.serve_client = Some(v);
        }
    }

    /// `[upstream]`: the backend, its TLS files and its limits.
    fn apply_upstream(&self, file: &mut FileConf) {
        if let Some(v) = &self.upstream_ca {
            file.upstream.ca = Some(v.clone());
        }
        if let Some(v) = &self.upstream_cert {
            file.upstream.cert = Some(v.clone());
        }
        if let Some(v) = &self.upstream_key {
            file.upstream.key = Some(v.clone());
        }
        if let Some(v) = self.upstream_idle_timeout {
            file.upstream.idle_timeout = Dur(v);
        }
        if let Some(v) = self.upstream_max_requests {
            file.upstream.max_requests = Some(v);
        }
    }

    /// `[recorder]` and `[limits]`: what a run keeps and what all runs may hold.
    fn apply_recorder(&self, file: &mut FileConf) {
        if let Some(v) = self.window {
            file.recorder.window = v;
        }
        if let Some(v) = self.retention {
            file.recorder.retention = Dur(v);
        }
        if let Some(v) = self.max_chats {
            file.recorder.max_chats = v;
        }
        if let Some(v) = self.max_buffered_bytes {
            file.limits.max_buffered_bytes = v;
        }
        if let Some(v) = self.max_client_buffer_bytes {
            file.limits.max_client_buffer_bytes = v;
        }
        if let Some(v) = self.abandon_after {
            file.limits.abandon_after = Dur(v);
        }
        if let Some(v) = self.max_active_runs_per_owner {
            file.limits.max_active_runs_per_owner = v;
        }
        if let Some(v) = self.max_runs_per_owner_per_minute {
            file.limits.max_runs_per_owner_per_minute = v;
        }
    }

    /// `[journal]`: the shared journal.
    fn apply_journal(&self, file: &mut FileConf) {
        if let Some(v) = &self.journal {
            file.journal.url = v.clone();
        }
        if let Some(v) = &self.replica_id {
            file.journal.replica_id = v.clone();
        }
        if let Some(v) = self.journal_cluster {
            file.journal.cluster = v;
        }
        if let Some(v) = &self.journal_ca {
            file.journal.ca = Some(v.clone());
        }
        if let Some(v) = &self.journal_cert {
            file.journal.cert = Some(v.clone());
        }
        if let Some(v) = &self.journal_key {
            file.journal.key = Some(v.clone());
        }
        if let Some(v) = self.journal_flush_delay {
            file.journal.flush_delay = Dur(v);
        }
    }
}
