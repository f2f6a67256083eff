//! The backend client: Pingora's HTTP connector with explicit timeouts, the request as forwarded
//! (hop-by-hop headers dropped, `Accept-Encoding: identity`, `X-Tether-Run-Id`), the response as
//! relayed, and the rule for which answers are recorded. The producer is in [`producer`].

pub mod exchange;
pub mod producer;
pub mod wire;

use std::time::Duration;

use bytes::Bytes;
use pingora_core::connectors::http::Connector;
use pingora_core::protocols::http::client::HttpSession;
use pingora_core::upstreams::peer::{HttpPeer, Peer};
use pingora_core::ErrorType;
use pingora_http::{RequestHeader, ResponseHeader};

use crate::config;
use crate::error::{UpstreamError, UpstreamErrorKind};

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

/// The metric kind of a Pingora error on the upstream side.
pub(crate) fn kind_of(e: &pingora_core::Error, connecting: bool) -> UpstreamErrorKind {
    match e.etype() {
        ErrorType::ConnectTimedout if connecting => UpstreamErrorKind::Connect,
        ErrorType::ReadTimedout | ErrorType::WriteTimedout | ErrorType::ConnectTimedout => {
            UpstreamErrorKind::Timeout
        }
        ErrorType::InvalidHTTPHeader | ErrorType::H1Error | ErrorType::H2Error => {
            UpstreamErrorKind::Protocol
        }
        _ if connecting => UpstreamErrorKind::Connect,
        _ => UpstreamErrorKind::Reset,
    }
}

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
/// and chunked framing when `chunked` (Pingora redoes the framing).
pub fn relayed(mut h: ResponseHeader, chunked: bool) -> ResponseHeader {
    for name in hop_by_hop(&h.headers) {
        h.remove_header(&name);
    }
    if chunked {
        h.remove_header("content-length");
        let _ = h.insert_header("transfer-encoding", "chunked");
    }
    h
}

/// The backend: a connection pool and the peer it connects to.
pub struct Upstream {
    connector: Connector,
    peer: HttpPeer,
    opts: config::Upstream,
}

impl Upstream {
    /// A client for the backend at `addr` (`host:port`, plain HTTP/1.1).
    pub fn new(addr: &str, opts: config::Upstream) -> Self {
        let mut peer = HttpPeer::new(addr, false, String::new());
        peer.options.connection_timeout = Some(opts.connect_timeout.0);
        peer.options.idle_timeout = Some(POOL_IDLE);
        peer.options.read_timeout = Some(opts.idle_timeout.0);
        peer.options.write_timeout = Some(opts.write_timeout.0);
        Upstream {
            connector: Connector::new(None),
            peer,
            opts,
        }
    }

    /// How long a backend may stay silent mid-answer.
    pub fn idle_timeout(&self) -> Duration {
        self.opts.idle_timeout.0
    }

    /// The peer, for Pingora's pass-through path.
    pub fn peer(&self) -> Box<HttpPeer> {
        Box::new(self.peer.clone())
    }

    /// Sends `req` with `body` and reads the response header. A pooled connection that fails
    /// before the header is retried once on a fresh one.
    pub async fn open(
        &self,
        req: &RequestHeader,
        body: &Bytes,
        run_id: Option<&str>,
    ) -> Result<HttpSession, UpstreamError> {
        let header = outgoing(req, body.len(), run_id).map_err(|e| UpstreamError {
            kind: UpstreamErrorKind::Protocol,
            message: format!("cannot build the upstream request: {e}"),
        })?;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let (mut s, reused) =
                self.connector
                    .get_http_session(&self.peer)
                    .await
                    .map_err(|e| UpstreamError {
                        kind: kind_of(&e, true),
                        message: format!("cannot connect to {}: {e}", self.peer.address()),
                    })?;
            s.set_read_timeout(Some(self.opts.idle_timeout.0));
            s.set_write_timeout(Some(self.opts.write_timeout.0));
            match exchange(&mut s, header.clone(), body.clone()).await {
                Ok(()) => return Ok(s),
                Err(_) if reused && attempt == 1 => continue,
                Err(e) => {
                    return Err(UpstreamError {
                        kind: kind_of(&e, false),
                        message: format!("upstream request failed: {e}"),
                    })
                }
            }
        }
    }

    /// Returns a session whose response was read to its end to the pool.
    pub async fn release(&self, s: HttpSession) {
        self.connector
            .release_http_session(s, &self.peer, self.peer.idle_timeout())
            .await;
    }
}

async fn exchange(
    s: &mut HttpSession,
    header: RequestHeader,
    body: Bytes,
) -> pingora_core::Result<()> {
    s.write_request_header(Box::new(header)).await?;
    if !body.is_empty() {
        s.write_request_body(body, true).await?;
    }
    s.finish_request_body().await?;
    loop {
        s.read_response_header().await?;
        match s.response_header() {
            Some(h) if h.status.is_informational() => continue,
            _ => return Ok(()),
        }
    }
}

/// The request as forwarded: the client's, minus hop-by-hop headers, with the body length,
/// `Accept-Encoding: identity` and `X-Tether-Run-Id`.
fn outgoing(
    req: &RequestHeader,
    len: usize,
    run_id: Option<&str>,
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
    h.insert_header("content-length", len.to_string())?;
    h.insert_header("accept-encoding", "identity")?;
    if let Some(id) = run_id {
        h.insert_header("x-tether-run-id", id)?;
    }
    Ok(h)
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
