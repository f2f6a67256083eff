//! Downstream connections: the accept loop, the deadline for a whole request head, the keep-alive
//! idle timeout and the connection cap (their metrics are [`crate::metrics::downstream`]'s; the
//! body deadline is [`super::front`]'s and the route handlers').
//!
//! Pingora times each read of a request head on its own (60 s), so a client sending a header
//! byte now and then would hold its connection forever, and it waits for the next request on a
//! keep-alive connection without any limit. tether therefore reads every request head itself,
//! under one deadline for the whole head, and hands the bytes to Pingora as the start of the
//! request (Pingora parses a complete head without reading again). Between requests it waits for
//! the next request's first byte for at most the keep-alive timeout. Neither limit runs while a
//! request is being answered, so a long stream is never cut by them.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::BytesMut;
use log::{debug, warn};
use pingora_core::apps::{HttpPersistentSettings, HttpServerApp, ReusedHttpStream, ServerApp};
use pingora_core::protocols::http::ServerSession;
use pingora_core::protocols::l4::stream::Stream as L4Stream;
use pingora_core::protocols::Stream;
use pingora_core::protocols::ALPN;
use prometheus::IntGauge;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::error::{ApiError, Code};
use preface::Preface;

mod preface;
pub use crate::metrics::downstream::{DownstreamMetrics, TimeoutKind};

/// How often at most a failing `accept` is logged (the failures in between are counted).
const ACCEPT_LOG_EVERY: Duration = Duration::from_secs(10);
/// The pause after a failed `accept` (out of descriptors and the like), instead of spinning.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);
/// Connections the accept loop takes in a row before it lets other tasks run. Tokio's cooperative
/// budget alone would stop it after 128 and queue it behind every running task, so a burst of
/// clients (a thousand tabs reloading) waited several rounds of the run queue for its accepts
/// (docs/performance.md, catch-up).
const ACCEPT_BURST: usize = 1024;
/// Bytes a refused connection may still send (its request) before it is closed, so that the
/// close does not reset the answer away; and how long it may take.
const LINGER_BYTES: usize = 64 << 10;
const LINGER: Duration = Duration::from_secs(1);
/// Refused connections answered at once at most; past it a refused connection is closed at once.
const MAX_REFUSING: usize = 64;
/// Bytes of a head read before it is refused with 431, beyond `max_header_bytes` (the request
/// line's and the blank line's framing, which `max_header_bytes` does not count exactly).
const HEAD_SLACK: usize = 4096;
/// The keep-alive seconds Pingora is told for a connection's first request. tether times the
/// wait between requests itself; Pingora only needs to know the connection may be reused.
const PINGORA_KEEPALIVE_SECS: u64 = 60;

/// How one listener treats its connections.
#[derive(Debug, Clone)]
pub struct Policy {
    /// The whole request head must arrive within this: from the accept, or on a reused
    /// connection from the next request's first byte.
    pub header_timeout: Duration,
    /// How long a connection may sit idle between two requests.
    pub keepalive_timeout: Duration,
    /// An unfinished head longer than this is refused with `431`.
    pub max_head_bytes: usize,
    /// Connections open at once at most; more are refused with `503`.
    pub max_connections: usize,
    /// The proxy listener's families (`None`: the admin and demo listeners, not counted).
    pub metrics: Option<DownstreamMetrics>,
    /// HTTPS (`None`: plain HTTP/1.1). The handshake runs under the header deadline; a client
    /// that picks `h2` is served by Pingora's HTTP/2 server, one task per stream.
    pub tls: Option<Arc<super::tls::ListenerTls>>,
}

impl Policy {
    /// The limits of `[server]` and `[limits]`, no cap and no metrics (admin, demo).
    pub fn new(cfg: &crate::config::Config) -> Self {
        Policy {
            header_timeout: cfg.server.header_timeout.0,
            keepalive_timeout: cfg.server.keepalive_timeout.0,
            max_head_bytes: cfg.limits.max_header_bytes.saturating_add(HEAD_SLACK),
            max_connections: usize::MAX,
            metrics: None,
            tls: None,
        }
    }
}

/// Rate-limits a log line that can repeat many times a second (a failing `accept`): the first
/// hit is logged, then at most one per interval, with how many hits were not.
#[derive(Debug)]
pub struct LogLimiter {
    every: Duration,
    next: Option<Instant>,
    suppressed: u64,
}

impl LogLimiter {
    /// At most one line per `every`.
    pub fn new(every: Duration) -> Self {
        LogLimiter {
            every,
            next: None,
            suppressed: 0,
        }
    }

    /// Counts one hit at `now`: `Some(n)` when a line is due, `n` being the hits not logged
    /// since the last line; `None` when this one is suppressed.
    pub fn hit(&mut self, now: Instant) -> Option<u64> {
        match self.next {
            Some(next) if now < next => {
                self.suppressed += 1;
                None
            }
            _ => {
                self.next = Some(now + self.every);
                Some(std::mem::take(&mut self.suppressed))
            }
        }
    }
}

/// One open connection, counted (and in the gauge) until it is dropped.
struct Slot {
    open: Arc<AtomicUsize>,
    gauge: Option<IntGauge>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.open.fetch_sub(1, Ordering::Relaxed);
        if let Some(g) = &self.gauge {
            g.dec();
        }
    }
}

/// Accepts connections and serves each with `app` until `stop` turns true (or its sender is
/// dropped). `shutdown` is what the sessions see: once it is true, connections are not kept
/// alive after their current request.
pub async fn accept_loop<A>(
    listener: TcpListener,
    app: Arc<A>,
    policy: Policy,
    mut stop: watch::Receiver<bool>,
    shutdown: watch::Receiver<bool>,
) where
    A: Shortcut + Send + Sync + 'static,
{
    let policy = Arc::new(policy);
    let mut failures = LogLimiter::new(ACCEPT_LOG_EVERY);
    let refusing = Arc::new(AtomicUsize::new(0));
    let open = Arc::new(AtomicUsize::new(0));
    let mut burst = 0;
    loop {
        burst += 1;
        if burst > ACCEPT_BURST {
            burst = 0;
            tokio::task::yield_now().await;
        }
        let accepted = tokio::select! {
            // Outside the cooperative budget: a burst is taken whole, up to `ACCEPT_BURST`.
            a = tokio::task::unconstrained(listener.accept()) => a,
            _ = stop.wait_for(|s| *s) => return,
        };
        let tcp = match accepted {
            Ok((tcp, _)) => tcp,
            Err(e) => {
                if let Some(m) = &policy.metrics {
                    m.accept_errors.inc();
                }
                match failures.hit(Instant::now()) {
                    Some(0) => warn!("accept failed: {e}"),
                    Some(n) => warn!("accept failed: {e} ({n} more failures not logged)"),
                    None => {}
                }
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        // Only this loop adds to `open`, so the check and the add cannot race.
        if open.load(Ordering::Relaxed) >= policy.max_connections {
            refuse(tcp, &policy, &refusing);
            continue;
        }
        open.fetch_add(1, Ordering::Relaxed);
        let gauge = policy.metrics.as_ref().map(|m| m.open.clone());
        if let Some(g) = &gauge {
            g.inc();
        }
        let slot = Slot {
            open: open.clone(),
            gauge,
        };
        let (app, policy, shutdown) = (app.clone(), policy.clone(), shutdown.clone());
        tokio::spawn(async move {
            let _slot = slot;
            let accepted = Instant::now();
            let Some(stream) = secure(tcp, &policy).await else {
                return;
            };
            if stream.selected_alpn_proto() == Some(ALPN::H2) {
                // Pingora's HTTP/2 server: the connection's streams, each a session of `app`,
                // until the client leaves, or a drain (GOAWAY) once its streams have ended. Its
                // preface must come within the header deadline.
                let stream = Box::new(Preface::new(stream, accepted + policy.header_timeout));
                app.process_new(stream, &shutdown).await;
                return;
            }
            serve(app, stream, &policy, shutdown).await;
        });
    }
}

/// The connection as Pingora's stream: plain, or after the TLS handshake (under the header
/// deadline). `None`: the handshake failed or timed out (counted), the connection is closed.
async fn secure(tcp: TcpStream, policy: &Policy) -> Option<Stream> {
    let Some(tls) = &policy.tls else {
        return Some(Box::new(L4Stream::from(tcp)));
    };
    // Boxed: a TLS handshake's state is kilobytes, and inline it would size every connection's
    // task for its whole life, plain ones included.
    match tokio::time::timeout(policy.header_timeout, Box::pin(tls.handshake(tcp))).await {
        Ok(Ok(s)) => Some(s),
        Ok(Err(e)) => {
            debug!("TLS handshake with a client failed: {e}");
            if let Some(m) = &policy.metrics {
                m.tls_errors.inc();
            }
            None
        }
        Err(_) => {
            debug!("TLS handshake not done within {:?}", policy.header_timeout);
            if let Some(m) = &policy.metrics {
                m.timeouts.inc(TimeoutKind::Header);
            }
            None
        }
    }
}

/// Answers a connection over the cap with `503 too_many_connections` and closes it (over TLS,
/// closes it: the answer would need a handshake first).
fn refuse(tcp: TcpStream, policy: &Policy, refusing: &Arc<AtomicUsize>) {
    if let Some(m) = &policy.metrics {
        m.refused.inc();
    }
    debug!("connection refused: {} open", policy.max_connections);
    if policy.tls.is_some() {
        return;
    }
    if refusing.fetch_add(1, Ordering::Relaxed) >= MAX_REFUSING {
        refusing.fetch_sub(1, Ordering::Relaxed);
        return;
    }
    let refusing = refusing.clone();
    let e = ApiError::new(
        Code::TooManyConnections,
        format!(
            "tether has {} client connections open; retry later",
            policy.max_connections
        ),
    );
    tokio::spawn(async move {
        answer_and_close(tcp, &e).await;
        refusing.fetch_sub(1, Ordering::Relaxed);
    });
}

/// The whole HTTP/1.1 answer of `e`, closing the connection.
pub(crate) fn error_answer(e: &ApiError) -> Vec<u8> {
    let body = e.body();
    let status = e.status();
    let reason = http::StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
        .unwrap_or("");
    let mut out = format!(
        "HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n\
         cache-control: no-store\r\nconnection: close\r\ncontent-length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(&body);
    out
}

/// Writes `e` as a whole answer, ends the writing side, and reads what the client still sends
/// (bounded) until it closes, so that the close does not reset the answer away.
async fn answer_and_close<S: AsyncRead + AsyncWrite + Unpin>(mut s: S, e: &ApiError) {
    let answer = error_answer(e);
    let _ = tokio::time::timeout(LINGER, async {
        s.write_all(&answer).await?;
        s.flush().await?;
        s.shutdown().await?;
        // On the heap: an array here would be part of the future, so of every connection's task.
        let mut sink = vec![0u8; 4096];
        let mut left = LINGER_BYTES;
        loop {
            let n = s.read(&mut sink).await?;
            if n == 0 || n >= left {
                return Ok::<_, std::io::Error>(());
            }
            left -= n;
        }
    })
    .await;
}

/// How reading a request head ended.
#[derive(Debug, PartialEq, Eq)]
enum Head {
    /// The buffer holds a whole head (and maybe more).
    Ready,
    /// The client closed (or reset) the connection.
    Closed,
    /// The deadline passed first.
    TimedOut,
    /// The head grew past the cap without ending.
    TooLarge,
}

/// Where the head at the start of `buf` ends (past its blank line), scanning from `from`;
/// `None` while it has not ended. Empty lines before the request line are skipped, as the
/// parser does; a head's first empty line after them ends it (`\n\n` or `\n\r\n`).
pub(crate) fn head_end(buf: &[u8], from: usize) -> Option<usize> {
    let start = buf
        .iter()
        .position(|b| *b != b'\r' && *b != b'\n')
        .unwrap_or(buf.len());
    let mut i = from.max(start);
    while i < buf.len() {
        if buf[i] == b'\n' && i > start {
            match buf.get(i.saturating_sub(1)..i) {
                Some(b"\n") => return Some(i + 1),
                Some(b"\r") if i >= start + 2 && buf[i - 2] == b'\n' => return Some(i + 1),
                _ => {}
            }
        }
        i += 1;
    }
    None
}

/// Reads into `buf` until it holds a whole request head, the client leaves, `deadline`
/// passes or the head grows past `max` bytes.
async fn read_head(stream: &mut Stream, buf: &mut BytesMut, deadline: Instant, max: usize) -> Head {
    let mut scanned = 0;
    loop {
        if head_end(buf, scanned).is_some() {
            return Head::Ready;
        }
        if buf.len() > max {
            return Head::TooLarge;
        }
        scanned = buf.len();
        match tokio::time::timeout_at(deadline, stream.read_buf(buf)).await {
            Err(_) => return Head::TimedOut,
            Ok(Ok(0)) | Ok(Err(_)) => return Head::Closed,
            Ok(Ok(_)) => {}
        }
    }
}

/// An app that may answer some HTTP/1.1 requests itself instead of through
/// `process_new_http`, chosen from each request head's bytes: the proxy listener's
/// ([`super::front::Front`]) answers tether's own routes so. The admin and demo apps claim none.
#[async_trait]
pub trait Shortcut: HttpServerApp + Send + Sync {
    /// Runs once per HTTP/1.1 request, on the bytes read so far (its whole head, maybe the
    /// start of its body) before anything parses them: whether [`Self::serve_own`] answers it.
    /// Default: `false` (every request goes to `process_new_http`).
    fn claims(&self, _head: &[u8]) -> bool {
        false
    }

    /// Runs for each claimed request: the session it is served on, over its connection.
    /// Default: a session with no HTTP modules.
    fn own_session(&self, stream: Stream) -> pingora_proxy::Session {
        pingora_proxy::Session::new_h1(stream)
    }

    /// Runs for each claimed request, with a session over the connection whose head is still
    /// to be parsed (it is all buffered); returns the connection when it can take another
    /// request. Default: ends the connection (no request is claimed by default).
    async fn serve_own(
        self: &Arc<Self>,
        _session: pingora_proxy::Session,
        _shutdown: &watch::Receiver<bool>,
    ) -> Option<ReusedHttpStream> {
        None
    }
}

/// Sets up a request's session: the previous request's connection settings on a reused
/// connection (else keep-alive, unless a drain began, and the app's reuse limit), and the bytes
/// already read as the start of the request.
fn prepare<A: HttpServerApp>(
    session: &mut ServerSession,
    app: &A,
    settings: Option<HttpPersistentSettings>,
    shutdown: &watch::Receiver<bool>,
    prefix: BytesMut,
) {
    match settings {
        Some(s) => s.apply_to_session(session),
        None => {
            let keep = (!*shutdown.borrow()).then_some(PINGORA_KEEPALIVE_SECS);
            session.set_keepalive(keep);
            session.set_keepalive_reuses_remaining(
                app.server_options().and_then(|o| o.keepalive_request_limit),
            );
        }
    }
    session.set_pipelined_prefix(prefix);
}

/// Serves one connection: each request head read under the header deadline and handed to
/// `app`, the wait between requests bounded by the keep-alive timeout.
async fn serve<A>(app: Arc<A>, mut stream: Stream, policy: &Policy, shutdown: watch::Receiver<bool>)
where
    A: Shortcut + Send + Sync + 'static,
{
    let timed_out = |kind: TimeoutKind| {
        if let Some(m) = &policy.metrics {
            m.timeouts.inc(kind);
        }
    };
    let mut drain = shutdown.clone();
    let mut settings: Option<HttpPersistentSettings> = None;
    let mut buf = BytesMut::with_capacity(4096);
    let mut deadline = Instant::now() + policy.header_timeout;
    loop {
        match read_head(&mut stream, &mut buf, deadline, policy.max_head_bytes).await {
            Head::Ready => {}
            Head::Closed => {
                if !buf.is_empty() {
                    debug!("client left with {} bytes of a request head", buf.len());
                }
                return;
            }
            Head::TimedOut => {
                debug!("request head not read within {:?}", policy.header_timeout);
                return timed_out(TimeoutKind::Header);
            }
            Head::TooLarge => {
                let e = ApiError::new(
                    Code::HeadersTooLarge,
                    format!(
                        "the request headers are over {} bytes",
                        policy.max_head_bytes
                    ),
                );
                return answer_and_close(stream, &e).await;
            }
        }
        let claimed = app.claims(&buf);
        // The session keeps the buffer holding its head for as long as it lasts (a stream, for
        // minutes), so it gets a copy of just the bytes read, not the read buffer's room.
        let prefix = BytesMut::from(&buf[..]);
        buf = BytesMut::new();
        let settings_now = settings.take();
        let reused = if claimed {
            let mut session = app.own_session(stream);
            prepare(
                &mut session.downstream_session,
                &*app,
                settings_now,
                &shutdown,
                prefix,
            );
            app.serve_own(session, &shutdown).await
        } else {
            let mut session = ServerSession::new_http1(stream);
            prepare(&mut session, &*app, settings_now, &shutdown, prefix);
            app.process_new_http(session, &shutdown).await
        };
        let Some(reused) = reused else {
            return;
        };
        (stream, settings) = reused.consume();
        // Idle until the next request's first byte, the keep-alive timeout, or a drain.
        buf.reserve(4096);
        let first = tokio::select! {
            r = tokio::time::timeout(policy.keepalive_timeout, stream.read_buf(&mut buf)) => r,
            _ = drain.wait_for(|s| *s) => return,
        };
        match first {
            Err(_) => return timed_out(TimeoutKind::Keepalive),
            Ok(Ok(0)) | Ok(Err(_)) => return,
            Ok(Ok(_)) => deadline = Instant::now() + policy.header_timeout,
        }
    }
}

#[cfg(test)]
mod tests;
