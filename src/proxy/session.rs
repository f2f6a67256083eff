//! A Pingora session as the handlers use it: reading a capped body, writing whole responses, one
//! [`relay`] for every answer passed through chunk by chunk, forwarding a request tether does not
//! record, and the error answers several routes give.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use log::debug;
use pingora_core::Result;
use pingora_http::ResponseHeader;
use pingora_proxy::Session;

use super::cors::Cors;
use super::shared::Shared;
use crate::backend::{relayed, Exchange};
use crate::deliver::observer::{ClientGone, Sink};
use crate::error::{ApiError, Code};
use crate::metrics::downstream::TimeoutKind;
use crate::producer::{StreamCut, TeeReader};
use crate::stall::Stall;

/// How a handled request ended, for the adapter. Errors are [`ApiError`]s beside it.
pub(crate) enum Reply {
    /// A response was written completely.
    Done,
    /// The client left or the response was cut: close the connection.
    Abort,
    /// Answer with this status and JSON body (`None`: no body).
    Json(u16, Option<serde_json::Value>),
    /// Answer with a whole file of another type.
    File(FileReply),
    /// A `200` event stream that ends at once.
    EmptyStream,
}

/// A whole answer that is not JSON: an embedded file, or its `304`.
pub(crate) struct FileReply {
    /// `200`, or `304` when the client's copy is current.
    pub status: u16,
    /// The `content-type`.
    pub content_type: &'static str,
    /// The file's entity tag, quoted.
    pub etag: &'static str,
    /// The file's bytes (sent with a `200` to a `GET`).
    pub body: Bytes,
    /// A `HEAD` request: the headers only.
    pub head: bool,
}

/// What a handler returns: a reply, or an error answer.
pub(crate) type Handled = std::result::Result<Reply, ApiError>;

/// Writes the reply or the error answer, with `cors`'s headers; the request is always handled
/// here.
pub(crate) async fn finish(session: &mut Session, cors: &Cors, r: Handled) -> Result<bool> {
    match r {
        Ok(Reply::Done) => {}
        Ok(Reply::Abort) => {
            session.set_keepalive(None);
            session.as_downstream_mut().shutdown().await;
        }
        Ok(Reply::Json(status, body)) => {
            let body = body.map(|b| Bytes::from(b.to_string()));
            let _ = respond(session, cors, status, body, None).await;
        }
        Ok(Reply::File(f)) => {
            let _ = respond_file(session, cors, f).await;
        }
        Ok(Reply::EmptyStream) => {
            let _ = respond_empty_stream(session, cors).await;
        }
        Err(e) => {
            let _ = respond(session, cors, e.status(), Some(e.body()), e.retry_after).await;
        }
    }
    Ok(true)
}

/// Writes a whole small response (`application/json` when there is a body), with
/// `Retry-After: <retry_after>` when given.
async fn respond(
    session: &mut Session,
    cors: &Cors,
    status: u16,
    body: Option<Bytes>,
    retry_after: Option<u64>,
) -> Result<()> {
    let mut h = ResponseHeader::build(status, Some(4))?;
    h.insert_header("cache-control", "no-store")?;
    if let Some(secs) = retry_after {
        h.insert_header("retry-after", secs.to_string())?;
    }
    match &body {
        Some(b) => {
            h.insert_header("content-type", "application/json")?;
            h.insert_header("content-length", b.len().to_string())?;
        }
        None => h.insert_header("content-length", "0")?,
    }
    cors.own(session.req_header(), &mut h);
    session
        .write_response_header(Box::new(h), body.is_none())
        .await?;
    if let Some(b) = body {
        session.write_response_body(Some(b), true).await?;
    }
    Ok(())
}

/// Writes a `200 text/event-stream` response with an empty body.
async fn respond_empty_stream(session: &mut Session, cors: &Cors) -> Result<()> {
    let mut h = ResponseHeader::build(200, Some(3))?;
    h.insert_header("content-type", "text/event-stream")?;
    h.insert_header("cache-control", "no-cache")?;
    h.insert_header("content-length", "0")?;
    cors.own(session.req_header(), &mut h);
    session.write_response_header(Box::new(h), true).await
}

/// Writes a whole file answer: no body for a `304` or a `HEAD`, `content-length` as for a `GET`.
async fn respond_file(session: &mut Session, cors: &Cors, f: FileReply) -> Result<()> {
    let mut h = ResponseHeader::build(f.status, Some(5))?;
    h.insert_header("etag", f.etag)?;
    // Revalidate every time: a new tether build serves a new client at the same path.
    h.insert_header("cache-control", "no-cache")?;
    h.insert_header("x-content-type-options", "nosniff")?;
    let send_body = f.status == 200 && !f.head;
    if f.status == 200 {
        h.insert_header("content-type", f.content_type)?;
        h.insert_header("content-length", f.body.len().to_string())?;
    }
    cors.own(session.req_header(), &mut h);
    session
        .write_response_header(Box::new(h), !send_body)
        .await?;
    if send_body {
        session.write_response_body(Some(f.body), true).await?;
    }
    Ok(())
}

/// Reads the whole request body, up to the route's cap (`[recorder] max_body_bytes`; over it:
/// 413), within the body deadline (`[server] body_timeout`, from the call, which comes right
/// after the head: past it, 408, counted, and the connection is not kept alive).
pub(crate) async fn read_body(
    session: &mut Session,
    s: &Shared,
) -> std::result::Result<Bytes, BodyError> {
    let (cap, limit) = (s.cfg.recorder.max_body_bytes, s.cfg.server.body_timeout.0);
    match tokio::time::timeout(limit, read_capped(session, cap)).await {
        Ok(r) => r,
        Err(_) => {
            debug!("request body not read within {limit:?}");
            s.downstream.timeouts.inc(TimeoutKind::Body);
            // The rest of the body would be drained before the connection is reused.
            session.set_keepalive(None);
            Err(BodyError::Refused(ApiError::new(
                Code::BodyTimeout,
                format!("the request body did not arrive within {limit:?}"),
            )))
        }
    }
}

/// [`read_body`] without its deadline.
async fn read_capped(session: &mut Session, cap: usize) -> std::result::Result<Bytes, BodyError> {
    let too_large = || {
        BodyError::Refused(ApiError::new(
            Code::BodyTooLarge,
            format!("the request body is over {cap} bytes"),
        ))
    };
    let declared = session
        .req_header()
        .headers
        .get("content-length")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|len| len > cap) {
        return Err(too_large());
    }
    let mut buf = BytesMut::new();
    loop {
        match session.read_request_body().await {
            Ok(Some(chunk)) => {
                if buf.len() + chunk.len() > cap {
                    return Err(too_large());
                }
                buf.extend_from_slice(&chunk);
            }
            Ok(None) => return Ok(buf.freeze()),
            Err(e) => {
                debug!("request body read failed: {e}");
                return Err(BodyError::Gone);
            }
        }
    }
}

/// Why a request body was not read.
pub(crate) enum BodyError {
    /// Answer this error.
    Refused(ApiError),
    /// The client left mid-body.
    Gone,
}

impl From<BodyError> for Handled {
    fn from(e: BodyError) -> Handled {
        match e {
            BodyError::Refused(e) => Err(e),
            BodyError::Gone => Ok(Reply::Abort),
        }
    }
}

/// A request header's value as text.
pub(crate) fn header_value(session: &Session, name: &str) -> Option<String> {
    session
        .req_header()
        .headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

/// Resolves when the client closes or resets its connection while nothing is written.
///
/// Data (a request pipelined behind this answer) is not a close: the answer goes on to its end
/// and the connection is closed after it, the pipelined request unanswered (tether does not
/// pipeline; Pingora has already consumed the first bytes of that request). Up to
/// [`PIPELINED_DISCARD`] of its bytes are read and dropped while looking for the close.
pub(crate) async fn closed(session: &mut Session) {
    for _ in 0..PIPELINED_DISCARD {
        match session.as_downstream_mut().read_body_or_idle(true).await {
            // A request body still arriving, which tether read whole before answering: not
            // expected here, and not a close.
            Ok(_) => break,
            // "Sent data after end of body": a byte of a pipelined request.
            Err(e) if *e.etype() == pingora_core::ErrorType::ConnectError => {
                session.set_keepalive(None);
            }
            Err(_) => return,
        }
    }
    std::future::pending::<()>().await
}

/// Bytes of a pipelined request [`closed`] reads and drops (one a read) before it stops looking;
/// a close after that is noticed by the next write that fails.
const PIPELINED_DISCARD: usize = 4096;

/// A Pingora session as a reader's sink (protocol-1 observers and verbatim readers). A write
/// that makes no progress for the write timeout ends the reader (a [`Stall`], not Pingora's
/// per-write timeout).
pub(crate) struct SessionSink<'a> {
    session: &'a mut Session,
    stall: Stall,
}

impl<'a> SessionSink<'a> {
    /// A sink whose writes may stall for at most `write_timeout`.
    pub(crate) fn new(session: &'a mut Session, write_timeout: Duration) -> Self {
        SessionSink {
            session,
            stall: Stall::new(write_timeout),
        }
    }

    /// Ends the response cleanly; false when the client is gone or stalled.
    pub(crate) async fn finish(&mut self) -> bool {
        matches!(
            self.stall
                .run(self.session.write_response_body(None, true))
                .await,
            Ok(Ok(()))
        )
    }
}

impl Sink for SessionSink<'_> {
    /// Writes through the downstream session itself, below the proxy session's body filters:
    /// tether registers no downstream modules (`Sidecar::init_downstream_modules`), so those
    /// filters are an empty loop, and skipping their layer saves every write its instructions
    /// (docs/performance.md, 2026-12-05).
    async fn send(&mut self, data: Bytes) -> std::result::Result<(), ClientGone> {
        let downstream = self.session.as_downstream_mut();
        match self
            .stall
            .run(downstream.write_response_body(data, false))
            .await
        {
            Ok(Ok(())) => Ok(()),
            _ => Err(ClientGone),
        }
    }

    async fn closed(&mut self) {
        closed(self.session).await
    }
}

/// Where a relayed body comes from.
pub(crate) enum Source {
    /// An upstream exchange whose body is unread, and how long the backend may stay silent.
    Upstream(Box<Exchange>, Stall),
    /// A legacy requester's copy of a recorded run's upstream bytes.
    Tee(TeeReader),
}

impl Source {
    /// The next chunk; `Ok(None)` at a clean end; `Err(StreamCut)` when the body was cut.
    async fn next(&mut self) -> std::result::Result<Option<Bytes>, StreamCut> {
        match self {
            Source::Upstream(s, idle) => match idle.run(s.next()).await {
                Ok(Ok(chunk)) => Ok(chunk),
                _ => Err(StreamCut),
            },
            Source::Tee(t) => t.next().await,
        }
    }

    /// Resolves when the source cut its reader off mid-write (a legacy client too slow).
    async fn cut(&self) {
        match self {
            Source::Upstream(..) => std::future::pending().await,
            Source::Tee(t) => t.cut().await,
        }
    }
}

/// Relays `header` and the body of `source` to the client unchanged, chunk by chunk. A body that
/// ends cleanly ends the response cleanly; a cut body, or a client that leaves (noticed while
/// idle too), aborts the connection. Returns [`Reply::Done`] only when the body was relayed to
/// its clean end.
pub(crate) async fn relay(
    session: &mut Session,
    header: ResponseHeader,
    source: &mut Source,
    write_limit: Option<Duration>,
) -> Reply {
    let mut stall = write_limit.map(Stall::new);
    // The answer to a HEAD has no body: its head goes out as the backend framed it.
    let chunked = session.req_header().method != http::Method::HEAD
        && (matches!(source, Source::Tee(_)) || header.headers.get("content-length").is_none());
    if session
        .write_response_header(Box::new(relayed(header, chunked)), false)
        .await
        .is_err()
    {
        return Reply::Abort;
    }
    loop {
        let next = tokio::select! {
            c = source.next() => c,
            _ = closed(session) => return Reply::Abort,
        };
        match next {
            Ok(Some(chunk)) => {
                let written = limited(&mut stall, session.write_response_body(Some(chunk), false));
                let written = tokio::select! {
                    w = written => w,
                    _ = source.cut() => None,
                };
                if !matches!(written, Some(Ok(()))) {
                    return Reply::Abort;
                }
            }
            Ok(None) => break,
            Err(StreamCut) => return Reply::Abort,
        }
    }
    match limited(&mut stall, session.write_response_body(None, true)).await {
        Some(Ok(())) => Reply::Done,
        _ => Reply::Abort,
    }
}

/// Runs a relay's write, under its write limit when it has one; `None` when the write stalled.
async fn limited<F: std::future::Future>(stall: &mut Option<Stall>, write: F) -> Option<F::Output> {
    match stall {
        Some(s) => s.run(write).await.ok(),
        None => Some(write.await),
    }
}

/// Relays an unrecorded upstream answer (with tether's CORS headers when it has none of its
/// own) and returns its connection to the pool when the body was read to its end. A client
/// that stops reading is closed after the write timeout, and the backend connection with it.
pub(crate) async fn relay_upstream(
    session: &mut Session,
    s: &Shared,
    mut header: ResponseHeader,
    exchange: Box<Exchange>,
) -> Reply {
    s.cors.relayed(session.req_header(), &mut header);
    let upstream = &s.upstream;
    let mut source = Source::Upstream(exchange, Stall::new(upstream.idle_timeout()));
    let limit = Some(s.cfg.server.write_timeout.0);
    let reply = relay(session, header, &mut source, limit).await;
    if let (Reply::Done, Source::Upstream(s, _)) = (&reply, source) {
        upstream.release(*s);
    }
    reply
}

/// Sends a request tether does not record to the backend and relays the answer unchanged.
/// Returns the upstream status with how the relay ended.
pub(crate) async fn forward_unrecorded(
    s: &Shared,
    session: &mut Session,
    body: Bytes,
) -> std::result::Result<(u16, Reply), ApiError> {
    // Boxed: the handlers that may forward await this in a branch of their own, and the
    // exchange's state inline would size each of their futures (alive for a whole stream).
    Box::pin(forward(s, session, body)).await
}

/// [`forward_unrecorded`]'s body, run boxed.
async fn forward(
    s: &Shared,
    session: &mut Session,
    body: Bytes,
) -> std::result::Result<(u16, Reply), ApiError> {
    let slot = s.upstream.slot().ok_or_else(|| at_capacity(s))?;
    let up = match s
        .upstream
        .open(session.req_header(), &body, None, slot)
        .await
    {
        Ok(u) => u,
        Err(e) => {
            s.metrics.upstream_errors.inc(e.kind);
            return Err(unreachable());
        }
    };
    let header = up.header().clone();
    let status = header.status.as_u16();
    Ok((
        status,
        relay_upstream(session, s, header, Box::new(up)).await,
    ))
}

/// The 503 answered when `[upstream] max_requests` requests hold backend connections.
pub(crate) fn at_capacity(s: &Shared) -> ApiError {
    debug!(
        "request refused: {} requests hold backend connections",
        s.upstream.slots().max()
    );
    ApiError::new(
        Code::AtCapacity,
        format!(
            "tether has {} requests open to the backend; retry later",
            s.upstream.slots().max()
        ),
    )
}

/// The 502 answered when the backend cannot be reached.
pub(crate) fn unreachable() -> ApiError {
    ApiError::new(
        Code::UpstreamUnreachable,
        "the backend could not be reached",
    )
}

/// The 404 answered for a chat with no such run (also what another owner's chat gets).
pub(crate) fn no_run() -> ApiError {
    ApiError::new(Code::NoRun, "the chat has no such run")
}
