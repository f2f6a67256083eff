//! Pingora's log records at the level their cause deserves, with request text bounded.
//!
//! Pingora 0.9 logs some records at `ERROR` that are not tether's or the backend's failure:
//!
//! * `pingora_core::connectors` (`TransportConnector::reused_stream`) logs
//!   `failed to acquire reusable stream` when the pool's idle watcher still holds a pooled
//!   connection it is handing back: a benign race, after which a new connection is opened.
//! * `pingora_proxy` logs `Fail to proxy: {error}, status: …, tries: …, retry: …, {summary}`
//!   (`HttpProxy::process_request`), `{context} {error}, status: …, {summary}` (`handle_error`) and
//!   `Fail to proxy: {error}, downstream session type: …` (`handle_new_request`, a request head
//!   that could not be read). When the client caused the error, Pingora has marked it
//!   `ErrorSource::Downstream`, and its text starts with `Downstream` (invalid chunked encoding,
//!   a body or head cut short, a malformed head, a read timeout).
//! * `pingora_proxy` logs `failed to send error response to downstream: …` and
//!   `Error finish sending body to downstream: …` when writing to a client that has gone.
//! * `pingora_core::apps` logs `H2 handshake error {error}` when a client that chose HTTP/2 does
//!   not complete the connection preface (it left, or sent something else): the client's
//!   failure, not the server's, so it is a warning.
//!
//! [`verdict`] decides, as a pure function of a record's target, level and text, what becomes of
//! it; [`Rewrite`] applies it around any [`log::Log`] (env_logger's in the binary, a capture in
//! tests). The request summary Pingora writes into its records comes from
//! [`request_summary`] (tether's `ProxyHttp::request_summary`), which bounds the method, path
//! and host, so a hostile 5,000-byte path never reaches the log whole. Records from tether
//! itself pass unchanged.

use std::borrow::Cow;

use log::{Level, Log, Metadata, Record};
use pingora_http::RequestHeader;

#[cfg(test)]
mod tests;

/// Most bytes of a request's method, path or host written into a log record.
pub const MAX_REQUEST_TEXT: usize = 256;

/// Most bytes of any Pingora record's text (a backstop for text Pingora copies from a request).
pub const MAX_MESSAGE: usize = 1024;

/// Pingora's error types (after `Downstream`) for a client that went away or stalled, logged at
/// `INFO`; any other client-caused error (malformed HTTP) is logged at `WARN`.
const DISCONNECTS: [&str; 6] = [
    "ConnectionClosed",
    "ReadError",
    "WriteError",
    "ReadTimedout",
    "WriteTimedout",
    "PrematureBodyEnd",
];

/// `text` if it is at most `max` bytes; otherwise its first `max` bytes (at a character
/// boundary) followed by `…(N bytes)`, N being the length of the whole text.
pub fn bounded(text: &str, max: usize) -> Cow<'_, str> {
    if text.len() <= max {
        return Cow::Borrowed(text);
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    Cow::Owned(format!("{}…({} bytes)", &text[..end], text.len()))
}

/// Pingora's request summary (`METHOD PATH, Host: HOST`) with each part bounded to
/// [`MAX_REQUEST_TEXT`] bytes.
pub fn request_summary(req: &RequestHeader) -> String {
    let path = String::from_utf8_lossy(req.raw_path());
    let host = req
        .headers
        .get(http::header::HOST)
        .map(|h| String::from_utf8_lossy(h.as_bytes()))
        .unwrap_or_default();
    format!(
        "{} {}, Host: {}",
        bounded(req.method.as_str(), MAX_REQUEST_TEXT),
        bounded(&path, MAX_REQUEST_TEXT),
        bounded(&host, MAX_REQUEST_TEXT)
    )
}

/// What becomes of one log record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Passed on as it is.
    Keep,
    /// Passed on at `level`, with `message` as its text when given (else its own text).
    Rewrite {
        /// The level it is logged at.
        level: Level,
        /// The replacement text, if the text changes.
        message: Option<String>,
    },
}

/// Whether `target` is one of Pingora's crates (`pingora_core::…`, `pingora_proxy`, …).
pub fn is_pingora(target: &str) -> bool {
    target == "pingora" || target.starts_with("pingora_")
}

/// The level a Pingora record deserves, when it is not the one it was logged at: `DEBUG` for the
/// pool race, `INFO` for a client that left or stalled, `WARN` for other client-caused errors
/// (a failed HTTP/2 handshake among them).
fn cause_level(target: &str, message: &str) -> Option<Level> {
    if target.starts_with("pingora_core::connectors")
        && message == "failed to acquire reusable stream"
    {
        return Some(Level::Debug);
    }
    if target == "pingora_core::apps" && message.starts_with("H2 handshake error") {
        return Some(Level::Warn);
    }
    // Pingora writes `{context}: {error}`; an error's text starts with its source.
    let (context, error) = message.split_once(": ")?;
    let error = error.trim_start();
    let (downstream, rest) = match error.strip_prefix("Downstream ") {
        Some(rest) => (true, rest),
        None => (false, error),
    };
    if !downstream && !context.ends_with("to downstream") {
        return None;
    }
    let etype = rest.split([' ', ',']).next().unwrap_or_default();
    Some(if DISCONNECTS.contains(&etype) {
        Level::Info
    } else {
        Level::Warn
    })
}

/// What becomes of a record with this target, level and text. Only Pingora's records change:
/// their level is lowered to the one their cause deserves (never raised), and text over
/// [`MAX_MESSAGE`] bytes is cut.
pub fn verdict(target: &str, level: Level, message: &str) -> Verdict {
    if !is_pingora(target) {
        return Verdict::Keep;
    }
    // `Level` orders ERROR lowest: the larger of the two is the less severe.
    let new_level = cause_level(target, message).map_or(level, |l| l.max(level));
    let new_message = match bounded(message, MAX_MESSAGE) {
        Cow::Owned(cut) => Some(cut),
        Cow::Borrowed(_) => None,
    };
    if new_level == level && new_message.is_none() {
        Verdict::Keep
    } else {
        Verdict::Rewrite {
            level: new_level,
            message: new_message,
        }
    }
}

/// A [`Log`] that applies [`verdict`] to each record before passing it to `inner`.
///
/// Install it with the global maximum level of `inner`'s filter: levels are only ever lowered,
/// so every record `inner` may want still arrives, and `inner` filters the rewritten ones.
pub struct Rewrite<L> {
    inner: L,
}

impl<L: Log> Rewrite<L> {
    /// Wraps `inner`.
    pub fn new(inner: L) -> Self {
        Rewrite { inner }
    }

    /// The wrapped logger.
    pub fn inner(&self) -> &L {
        &self.inner
    }
}

impl<L: Log> Log for Rewrite<L> {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        self.inner.enabled(metadata)
    }

    fn log(&self, record: &Record<'_>) {
        // Levels are only lowered: a record `inner` does not want now, it will not want after.
        if !self.inner.enabled(record.metadata()) {
            return;
        }
        if !is_pingora(record.target()) {
            self.inner.log(record);
            return;
        }
        let text: Cow<'_, str> = match record.args().as_str() {
            Some(s) => Cow::Borrowed(s),
            None => Cow::Owned(record.args().to_string()),
        };
        let (level, message) = match verdict(record.target(), record.level(), &text) {
            Verdict::Keep => {
                self.inner.log(record);
                return;
            }
            Verdict::Rewrite { level, message } => (level, message),
        };
        let metadata = Metadata::builder()
            .level(level)
            .target(record.target())
            .build();
        if !self.inner.enabled(&metadata) {
            return;
        }
        let mut builder = Record::builder();
        builder
            .level(level)
            .target(record.target())
            .module_path(record.module_path())
            .file(record.file())
            .line(record.line());
        match message {
            Some(m) => self.inner.log(&builder.args(format_args!("{m}")).build()),
            None => self.inner.log(&builder.args(*record.args()).build()),
        }
    }

    fn flush(&self) {
        self.inner.flush();
    }
}

/// Installs `logger` wrapped in [`Rewrite`] as the process's logger, with `logger`'s filter as
/// the global maximum level.
pub fn install(logger: env_logger::Logger) -> Result<(), log::SetLoggerError> {
    let max = logger.filter();
    log::set_boxed_logger(Box::new(Rewrite::new(logger)))?;
    log::set_max_level(max);
    Ok(())
}
