//! The backend client: Pingora's connection pool behind a connect queue ([`connect`]) with
//! tether's own HTTP/1.1 exchange on top ([`exchange`], [`wire`]), plain or over TLS ([`tls`])
//! to an address kept fresh ([`dns`]); the request as forwarded (hop-by-hop headers dropped,
//! `Accept-Encoding: identity`, `X-Tether-Run-Id`, an HTTPS backend's own `Host`), the response
//! as relayed, and the rule for which answers are recorded. The run task that uses it is [`crate::producer`].

pub mod connect;
pub mod dns;
pub mod exchange;
pub mod slots;
pub mod tls;
pub mod wire;

use std::time::Duration;

use bytes::Bytes;
use pingora_core::connectors::TransportConnector;
use pingora_core::upstreams::peer::{HttpPeer, Peer};
use pingora_http::{RequestHeader, ResponseHeader};

pub use exchange::Exchange;

use connect::{Connects, Refused};
use slots::{Slot, Slots};

use crate::config;
use crate::error::{UpstreamError, UpstreamErrorKind};
use crate::vocab::RunId;
use dns::Resolved;
use tls::BackendTls;

/// The header naming the run a forwarded request records: tether's alone to set, never the
/// client's (a backend may trust it).
pub const RUN_ID_HEADER: &str = "x-tether-run-id";

/// How long an idle pooled connection to the backend is kept open.
const POOL_IDLE: Duration = Duration::from_secs(60);

/// Headers that describe one hop, never forwarded (RFC 9110 §7.6.1), besides those that a
/// `Connection` header names.
const HOP_BY_HOP: [&str; 9] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// The hop-by-hop headers of a message with these headers: the fixed list, and the headers its
/// `Connection` header names (lower case).
fn hop_by_hop(headers: &http::HeaderMap) -> Vec<String> {
    let named = headers
        .get_all("connection")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|t| t.trim().to_ascii_lowercase())
        .filter(|t| !t.is_empty());
    HOP_BY_HOP
        .iter()
        .map(|h| h.to_string())
        .chain(named)
        .collect()
}

/// An upstream response header as relayed to a client: unchanged but for hop-by-hop headers,
/// and chunked framing when `chunked` (Pingora redoes the framing). A `204` or `304` has no
/// body, so it never gets framing headers (RFC 9110 §6.4.1); a `204` loses a `Content-Length`
/// too (§8.6).
pub fn relayed(mut h: ResponseHeader, chunked: bool) -> ResponseHeader {
    for name in hop_by_hop(&h.headers) {
        h.remove_header(&name);
    }
    let status = h.status.as_u16();
    if status == 204 {
        h.remove_header("content-length");
    }
    if chunked && !matches!(status, 204 | 304) {
        h.remove_header("content-length");
        let _ = h.insert_header("transfer-encoding", "chunked");
    }
    h
}

/// The backend: a connection pool, its connect queue and the peer it connects to.
pub struct Upstream {
    connector: TransportConnector,
    connects: Connects,
    slots: std::sync::Arc<Slots>,
    peer: Resolved,
    opts: config::UpstreamConf,
    /// The `Host` of every forwarded request, for an HTTPS backend (its URL's); a plain
    /// backend gets the client's.
    host: Option<String>,
}

impl Upstream {
    /// A client for the backend at `url` (plain HTTP/1.1, or HTTPS verified against the
    /// system's roots or `opts.ca`, with `opts`' client certificate), resolved here and again
    /// as [`dns`] says.
    pub fn new(url: &config::UpstreamUrl, opts: config::UpstreamConf) -> std::io::Result<Self> {
        let tls = BackendTls::load(&opts).map_err(std::io::Error::other)?;
        // Pingora's `HttpPeer::new` would panic on a name that does not resolve.
        let addr = config::resolve(&url.hostport())?;
        let sni = if url.tls { url.server_name() } else { "" };
        let mut peer = HttpPeer::new(addr, url.tls, sni.to_string());
        peer.options.ca = tls.ca;
        peer.client_cert_key = tls.client;
        peer.options.connection_timeout = Some(opts.connect_timeout.0);
        peer.options.idle_timeout = Some(POOL_IDLE);
        // For Pingora's pass-through path; tether's own exchanges take theirs from `opts`.
        peer.options.read_timeout = Some(opts.idle_timeout.0);
        peer.options.write_timeout = Some(opts.write_timeout.0);
        Ok(Upstream {
            connector: TransportConnector::new(None),
            connects: Connects::new(opts.max_connecting, opts.connect_queue_timeout.0),
            slots: Slots::new(opts.max_requests.unwrap_or_else(slots::descriptor_share)),
            peer: Resolved::new(peer, &url.hostport(), opts.connect_timeout.0),
            opts,
            host: url.tls.then(|| url.authority()),
        })
    }

    /// The `Host` every forwarded request carries: an HTTPS backend's own name (`None`: the
    /// client's, for a plain backend).
    pub fn host(&self) -> Option<&str> {
        self.host.as_deref()
    }

    /// How long a backend may stay silent mid-answer.
    pub fn idle_timeout(&self) -> Duration {
        self.opts.idle_timeout.0
    }

    /// The connect queue, for its gauges.
    pub fn connects(&self) -> &Connects {
        &self.connects
    }

    /// A slot for one request to the backend (`[upstream] max_requests`), held until the
    /// request's exchange ends; `None` (counted) when all are held: answer `503 at_capacity`.
    pub fn slot(&self) -> Option<Slot> {
        self.slots.try_take()
    }

    /// The request slots, for their gauges.
    pub fn slots(&self) -> &Slots {
        &self.slots
    }

    /// The peer, for Pingora's pass-through path.
    pub fn peer(&self) -> Box<HttpPeer> {
        Box::new(HttpPeer::clone(&self.peer.current()))
    }

    /// Sends `req` with `body` and reads the response head; the exchange holds `slot` until it
    /// ends (on a failure it is given back at once). The request goes to the backend at most
    /// once: only a pooled connection found gone before any byte of the request was written to
    /// it (the backend closed the idle connection meanwhile) is retried, once, on a fresh one.
    /// Once a byte was written, a failure before the answer (a close, a reset, a timeout, a
    /// garbled head) is the caller's error: the backend may be running the turn. (Pingora's
    /// pool drops idle connections the backend closed, and checks each one again just before
    /// handing it out.)
    pub async fn open(
        &self,
        req: &RequestHeader,
        body: &Bytes,
        run_id: Option<&RunId>,
        slot: Slot,
    ) -> Result<Exchange, UpstreamError> {
        let refused = |e: String| {
            UpstreamError::new(
                UpstreamErrorKind::Protocol,
                format!("cannot build the upstream request: {e}"),
            )
        };
        let header = outgoing(req, body.len(), run_id, self.host.as_deref())
            .map_err(|e| refused(e.to_string()))?;
        let head = wire::request_head(&header).map_err(|e| refused(e.to_string()))?;
        let limits = exchange::StartTimeouts {
            write: self.opts.write_timeout.0,
            head: self.opts.idle_timeout.0,
        };
        let mut retried = false;
        loop {
            let peer = self.peer.for_connect().await;
            let (stream, reused) = self
                .connects
                .run(|| self.connector.get_stream(&*peer), |e| out_of_fds(e))
                .await
                .map_err(|r| self.unreachable(&peer, r))?;
            match Exchange::start(stream, &head, body, &header.method, limits).await {
                Ok(x) => return Ok(x.pooled_as(peer.reuse_hash()).holding(slot)),
                Err(f) if f.retry && reused && !retried => retried = true,
                Err(f) => return Err(f.error),
            }
        }
    }

    fn unreachable(&self, peer: &HttpPeer, r: Refused<Box<pingora_core::Error>>) -> UpstreamError {
        if matches!(r, Refused::Failed { .. }) {
            self.peer.failed();
        }
        let addr = peer.address();
        let (message, cause) = match r {
            Refused::Queue(d) => (
                format!("no connect slot for {addr} freed within {d:?} (connect_queue_timeout)"),
                None,
            ),
            Refused::Failed {
                error,
                waited: None,
            } => (format!("cannot connect to {addr}: {error}"), Some(error)),
            Refused::Failed {
                error,
                waited: Some(w),
            } => (
                format!(
                    "cannot connect to {addr} after waiting {w:?} for a file descriptor: {error}"
                ),
                Some(error),
            ),
        };
        let kind = match &cause {
            Some(c) if is_tls(c) => UpstreamErrorKind::Tls,
            _ => UpstreamErrorKind::Connect,
        };
        let e = UpstreamError::new(kind, message);
        match cause {
            Some(c) => e.caused_by(*c),
            None => e,
        }
    }

    /// Returns the connection of an exchange to the pool when it can carry another request
    /// (see [`Exchange::into_reusable`]); otherwise it is closed.
    pub fn release(&self, x: Exchange) {
        let key = x.pool_key();
        if let Some(stream) = x.into_reusable() {
            // Under the key of the peer it was opened to: a backend that moved meanwhile
            // leaves it to callers of the old address, which there are no more of.
            self.connector
                .release_stream(stream, key, self.peer.current().idle_timeout());
        }
    }
}

/// Joins a request's `Cookie` lines into one, `; ` between them (an HTTP/2 client's cookie
/// crumbs, RFC 9113 §8.2.3; see [`crate::request::joined_cookies`]). The proxy does it as a
/// request arrives, so that every reader of the header and every path that forwards the request
/// sees one line; `outgoing` does it again for tether's own exchanges.
pub fn join_cookies(req: &mut RequestHeader) {
    if let Some(joined) = crate::request::joined_cookies(&req.headers) {
        // Through Pingora's own calls, which keep an HTTP/1.1 request's header-name case map
        // in step with the headers.
        req.remove_header(&http::header::COOKIE);
        if !joined.is_empty() {
            let _ = req.insert_header(http::header::COOKIE, joined);
        }
    }
}

/// The request as forwarded: the client's, minus hop-by-hop headers and any `X-Tether-Run-Id`
/// the client sent, its `Cookie` lines joined into one, with the body length, `Accept-Encoding: identity` and, when tether names
/// the run (`run_id`), its own `X-Tether-Run-Id`; `host`, when given, replaces the client's
/// `Host` (an HTTPS backend's own name).
fn outgoing(
    req: &RequestHeader,
    len: usize,
    run_id: Option<&RunId>,
    host: Option<&str>,
) -> pingora_core::Result<RequestHeader> {
    let mut h = req.clone();
    if h.uri.scheme().is_some() {
        let pq = h.uri.path_and_query().map_or("/", |p| p.as_str());
        let uri = http::Uri::try_from(pq).unwrap_or_else(|_| http::Uri::from_static("/"));
        if h.headers.get("host").is_none() {
            if let Some(a) = req.uri.authority() {
                h.insert_header("host", a.as_str())?;
            }
        }
        h.set_uri(uri);
    }
    for name in hop_by_hop(&req.headers) {
        h.remove_header(&name);
    }
    join_cookies(&mut h);
    h.remove_header(RUN_ID_HEADER);
    h.insert_header("content-length", len.to_string())?;
    h.insert_header("accept-encoding", "identity")?;
    if let Some(id) = run_id {
        h.insert_header(RUN_ID_HEADER, id.as_str())?;
    }
    if let Some(host) = host {
        h.insert_header("host", host)?;
    }
    Ok(h)
}

/// Whether a Pingora connect error is the TLS handshake's (verification, a peer speaking no TLS,
/// a refused client certificate).
fn is_tls(e: &pingora_core::Error) -> bool {
    use pingora_core::ErrorType::*;
    matches!(
        e.etype(),
        TLSHandshakeFailure
            | TLSHandshakeTimedout
            | InvalidCert
            | HandshakeError
            | TLSWantX509Lookup
    )
}

/// Whether a Pingora connect error is the process (or system) out of file descriptors.
fn out_of_fds(e: &pingora_core::Error) -> bool {
    e.root_cause()
        .downcast_ref::<std::io::Error>()
        .is_some_and(connect::is_out_of_fds)
}

/// Whether an upstream answer is recorded: 2xx and `text/event-stream`.
pub fn is_recordable(h: &ResponseHeader) -> bool {
    h.status.is_success()
        && h.headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| {
                v.trim_start()
                    .to_ascii_lowercase()
                    .starts_with("text/event-stream")
            })
}

#[cfg(test)]
mod tests;
