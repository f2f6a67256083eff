//! Validation: every value of the file (flags already applied) checked, section by section, and
//! the [`Config`] the sidecar runs with built from them. An invalid value is a [`ConfigError`]
//! naming its key.

use std::time::Duration;

use super::{
    accounting, addr, admin_token, default_routes, err, flags_secret, journal, paired, raw_record,
    route, Config, CorsSettings, FileConf, LimitsConf, RecorderConf, ServerConf, Subject,
    UpstreamConf, UpstreamUrl, ADMIN_TOKEN_ENV, ORIGINS_KEY,
};
use crate::error::ConfigError;

/// `key` must be more than zero seconds.
fn positive(key: &str, d: Duration) -> Result<(), ConfigError> {
    match d.is_zero() {
        true => Err(err(key, "must be more than 0s")),
        false => Ok(()),
    }
}

/// `key` must be at least `min`.
fn at_least(key: &str, v: usize, min: usize) -> Result<(), ConfigError> {
    match v < min {
        true => Err(err(key, format!("must be at least {min}"))),
        false => Ok(()),
    }
}

impl FileConf {
    /// Checks every value and builds the [`Config`].
    pub fn validate(self) -> Result<Config, ConfigError> {
        let listen = addr("server.listen", &self.server.listen)?;
        let admin = addr("server.admin", &self.server.admin)?;
        let upstream = backend(&self.server, &self.upstream)?;
        check_recorder(&self.recorder)?;
        check_server(&self.server)?;
        check_upstream(&self.upstream)?;
        check_limits(&self.limits, &self.recorder)?;
        let subject: Subject = self
            .auth
            .subject
            .parse()
            .map_err(|e| err("auth.subject", e))?;
        check_owner_limits(&self.limits, &subject)?;
        let confs = self.routes.clone().unwrap_or_else(default_routes);
        let mut routes = Vec::with_capacity(confs.len());
        for (i, rc) in confs.into_iter().enumerate() {
            routes.push(route::check(i, rc)?);
        }
        let serve_client = self.server.serve_client.unwrap_or(upstream.is_none());
        let raw = raw_record(&routes, self.recorder.max_raw_bytes_per_run)?;
        let journal = journal::journal(&self.journal)?;
        let cors = CorsSettings::check(&self.server.cors, ORIGINS_KEY)?;
        let accounting = accounting::accounting(&self.accounting)?;
        let admin_token = admin_token::admin_token(
            std::env::var(ADMIN_TOKEN_ENV).ok(),
            self.server.admin_token.as_deref(),
        )?;
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
            accounting,
            admin_token,
        })
    }
}

/// The backend, named once (`[server] upstream` or `[upstream] url`), with its TLS files only
/// for an HTTPS backend; and the listener's certificate and key set together or not at all.
fn backend(server: &ServerConf, u: &UpstreamConf) -> Result<Option<UpstreamUrl>, ConfigError> {
    let upstream = match (server.upstream.trim(), u.url.trim()) {
        ("", "") => None,
        (url, "") => Some(UpstreamUrl::parse(url).map_err(|m| err("server.upstream", m))?),
        ("", url) => Some(UpstreamUrl::parse(url).map_err(|m| err("upstream.url", m))?),
        _ => {
            return Err(err(
                "upstream.url",
                "the backend is named twice (also [server] upstream): keep one",
            ))
        }
    };
    paired(
        ("upstream.cert", u.cert.is_some()),
        ("upstream.key", u.key.is_some()),
        "a client certificate needs both cert and key",
    )?;
    if (u.ca.is_some() || u.cert.is_some()) && !upstream.as_ref().is_some_and(|b| b.tls) {
        let key = match u.ca.is_some() {
            true => "upstream.ca",
            false => "upstream.cert",
        };
        return Err(err(key, "is for an HTTPS backend (--upstream https://…)"));
    }
    paired(
        ("server.tls_cert", server.tls_cert.is_some()),
        ("server.tls_key", server.tls_key.is_some()),
        "HTTPS on the listener needs both tls_cert and tls_key",
    )?;
    Ok(upstream)
}

/// `[recorder]`: the window, the body and event caps.
fn check_recorder(r: &RecorderConf) -> Result<(), ConfigError> {
    at_least("recorder.window", r.window, 1)?;
    if r.window > 1 << 20 {
        return Err(err("recorder.window", "must be at most 1048576"));
    }
    at_least("recorder.max_body_bytes", r.max_body_bytes, 1)?;
    at_least("recorder.max_event_bytes", r.max_event_bytes, 1024)
}

/// `[server]`: the client-side timeouts and caps.
fn check_server(s: &ServerConf) -> Result<(), ConfigError> {
    positive("server.heartbeat", s.heartbeat.0)?;
    positive("server.write_timeout", s.write_timeout.0)?;
    positive("server.header_timeout", s.header_timeout.0)?;
    positive("server.keepalive_timeout", s.keepalive_timeout.0)?;
    positive("server.body_timeout", s.body_timeout.0)?;
    if s.max_connections == Some(0) {
        return Err(err("server.max_connections", "must be at least 1"));
    }
    at_least(
        "server.max_streams_per_connection",
        s.max_streams_per_connection as usize,
        1,
    )
}

/// `[upstream]`: the backend's request cap and timeouts.
fn check_upstream(u: &UpstreamConf) -> Result<(), ConfigError> {
    if u.max_requests == Some(0) {
        return Err(err("upstream.max_requests", "must be at least 1"));
    }
    positive("upstream.idle_timeout", u.idle_timeout.0)?;
    positive("upstream.connect_timeout", u.connect_timeout.0)
}

/// `[limits]`: the header cap, observers, runs and the buffers (the sidecar's budget holds at
/// least one client's queue and one event).
fn check_limits(l: &LimitsConf, r: &RecorderConf) -> Result<(), ConfigError> {
    at_least("limits.max_header_bytes", l.max_header_bytes, 1024)?;
    at_least("limits.max_observers_per_run", l.max_observers_per_run, 1)?;
    at_least("limits.max_runs", l.max_runs, 1)?;
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
    Ok(())
}

/// `[limits]`'s per-owner limits need callers told apart: with `[auth] subject = "none"` every
/// caller is one owner, so a per-owner limit would be one limit for everyone.
fn check_owner_limits(l: &LimitsConf, subject: &Subject) -> Result<(), ConfigError> {
    if *subject != Subject::None {
        return Ok(());
    }
    let set = [
        (
            "limits.max_active_runs_per_owner",
            l.max_active_runs_per_owner,
        ),
        (
            "limits.max_runs_per_owner_per_minute",
            l.max_runs_per_owner_per_minute,
        ),
    ];
    match set.into_iter().find(|(_, v)| *v > 0) {
        Some((key, _)) => Err(err(
            key,
            "needs [auth] subject (--auth-subject): with subject = \"none\" every caller is \
             one owner",
        )),
        None => Ok(()),
    }
}
