//! The Pingora `ProxyHttp` adapter: matches a route and hands the request to record, attach or
//! control handlers (`record.rs`, `attach.rs`, `control.rs`), or to Pingora's own streaming
//! pass-through. The helpers here adapt a Pingora session: reading a capped body, writing whole
//! responses and SSE heads, relaying an unrecorded upstream answer, and serving an observer.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use log::debug;
use pingora_core::upstreams::peer::HttpPeer;
use pingora_core::Result;
use pingora_http::{RequestHeader, ResponseHeader};
use pingora_proxy::{ProxyHttp, Session};
use tokio::sync::watch;

use crate::auth::{Auth, Owner};
use crate::config::{Config, Route, RouteKind};
use crate::metrics::Metrics;
use crate::observer::{self, Sink, Start};
use crate::registry::Registry;
use crate::request::ApiError;
use crate::run::{ObserverGuard, Run};
use crate::upstream::Upstream;

/// State shared by every request of one sidecar.
pub struct Shared {
    /// The validated configuration.
    pub cfg: Config,
    /// Chats and runs.
    pub registry: Arc<Registry>,
    /// The backend client.
    pub upstream: Arc<Upstream>,
    /// Metric families.
    pub metrics: Metrics,
    /// Caller identities.
    pub auth: Auth,
    /// Set on SIGTERM: new record requests are refused with 503.
    pub draining: AtomicBool,
    /// Set when the drain ends: live observer streams stop.
    pub stop: watch::Receiver<bool>,
}

/// The `ProxyHttp` implementation.
pub struct Sidecar {
    pub(crate) shared: Arc<Shared>,
}

impl Sidecar {
    /// A proxy over the shared state.
    pub fn new(shared: Arc<Shared>) -> Self {
        Sidecar { shared }
    }
}

fn match_route<'a>(routes: &'a [Route], req: &RequestHeader) -> Option<&'a Route> {
    let path = req.uri.path();
    let method = req.method.as_str();
    routes
        .iter()
        .find(|r| r.path == path && r.methods.iter().any(|m| m == method))
}

/// The size of the request header block as received (request line and header lines).
fn header_bytes(req: &RequestHeader) -> usize {
    let line = req.method.as_str().len() + req.uri.to_string().len() + 12;
    req.headers
        .iter()
        .map(|(k, v)| k.as_str().len() + v.len() + 4)
        .sum::<usize>()
        + line
}

#[async_trait]
impl ProxyHttp for Sidecar {
    type CTX = ();

    /// Runs once per request, before anything else; this proxy keeps no per-request context.
    fn new_ctx(&self) -> Self::CTX {}

    /// Runs once at start to set up the downstream modules. The default adds response
    /// compression (disabled); tether never compresses (an SSE stream would stick in the
    /// compressor), so it adds none and saves their work on every body write.
    fn init_downstream_modules(&self, _modules: &mut pingora_core::modules::http::HttpModules) {}

    /// Runs after the request header is read. Record, attach and control routes are answered
    /// here in full (returns `true`); pass-through routes return `false` and continue to
    /// [`Self::upstream_peer`]. Default (not overridden): `Ok(false)`.
    async fn request_filter(&self, session: &mut Session, _ctx: &mut ()) -> Result<bool> {
        let max = self.shared.cfg.limits.max_header_bytes;
        if header_bytes(session.req_header()) > max {
            let e = ApiError {
                status: 431,
                code: "headers_too_large",
                message: format!("the request headers are over {max} bytes"),
            };
            return finish(session, Handled::Error(e)).await;
        }
        let Some(route) = match_route(&self.shared.cfg.routes, session.req_header()).cloned()
        else {
            return Ok(false);
        };
        let handled = match route.kind {
            RouteKind::Passthrough => return Ok(false),
            RouteKind::Record => self.record(session, &route).await,
            RouteKind::Attach => self.attach(session, &route).await,
            RouteKind::Stop => self.stop(session, &route).await,
            RouteKind::Status => self.status(session, &route).await,
            RouteKind::Annotate => self.annotate(session, &route).await,
        };
        finish(session, handled).await
    }

    /// Runs for pass-through requests: every one goes to the configured backend.
    async fn upstream_peer(&self, _session: &mut Session, _ctx: &mut ()) -> Result<Box<HttpPeer>> {
        Ok(self.shared.upstream.peer())
    }

    /// The request as Pingora names it in its log records (`METHOD PATH, Host: HOST`), each part
    /// bounded so a hostile path cannot flood the log. Default: the whole request line.
    fn request_summary(&self, session: &Session, _ctx: &()) -> String {
        crate::logging::request_summary(session.req_header())
    }
}

/// How a handled request ended, for the adapter.
pub(crate) enum Handled {
    /// A response was written completely.
    Done,
    /// The client left or the response was cut: close the connection.
    Abort,
    /// Answer with this error.
    Error(ApiError),
    /// Answer with this status and JSON body (`None`: no body).
    Json(u16, Option<serde_json::Value>),
}

async fn finish(session: &mut Session, r: Handled) -> Result<bool> {
    match r {
        Handled::Done => {}
        Handled::Abort => {
            session.set_keepalive(None);
            session.as_downstream_mut().shutdown().await;
        }
        Handled::Error(e) => {
            let _ = respond(session, e.status, Some(e.body())).await;
        }
        Handled::Json(status, body) => {
            let _ = respond(session, status, body.map(|b| Bytes::from(b.to_string()))).await;
        }
    }
    Ok(true)
}

/// Writes a whole small response (`application/json` when there is a body).
async fn respond(session: &mut Session, status: u16, body: Option<Bytes>) -> Result<()> {
    let mut h = ResponseHeader::build(status, Some(3))?;
    h.insert_header("cache-control", "no-store")?;
    match &body {
        Some(b) => {
            h.insert_header("content-type", "application/json")?;
            h.insert_header("content-length", b.len().to_string())?;
        }
        None => h.insert_header("content-length", "0")?,
    }
    session
        .write_response_header(Box::new(h), body.is_none())
        .await?;
    if let Some(b) = body {
        session.write_response_body(Some(b), true).await?;
    }
    Ok(())
}

/// Starts a protocol-1 stream; false when the client is gone.
pub(crate) async fn write_sse_header(session: &mut Session, run_id: &str) -> bool {
    let header = || -> Result<ResponseHeader> {
        let mut h = ResponseHeader::build(200, Some(5))?;
        h.insert_header("content-type", "text/event-stream")?;
        h.insert_header("cache-control", "no-cache")?;
        h.insert_header("transfer-encoding", "chunked")?;
        h.insert_header("x-accel-buffering", "no")?;
        h.insert_header("x-tether-run-id", run_id)?;
        Ok(h)
    };
    match header() {
        Ok(h) => session
            .write_response_header(Box::new(h), false)
            .await
            .is_ok(),
        Err(_) => false,
    }
}

/// An upstream header as relayed: unchanged but for hop-by-hop framing, which Pingora redoes.
pub(crate) fn relayed(mut h: ResponseHeader, chunked: bool) -> ResponseHeader {
    for name in [
        "connection",
        "keep-alive",
        "transfer-encoding",
        "trailer",
        "upgrade",
    ] {
        h.remove_header(name);
    }
    if chunked {
        h.remove_header("content-length");
        let _ = h.insert_header("transfer-encoding", "chunked");
    }
    h
}

/// Reads the whole request body, up to `cap` bytes (over it: 413).
pub(crate) async fn read_body(
    session: &mut Session,
    cap: usize,
) -> std::result::Result<Bytes, Handled> {
    let too_large = || {
        Handled::Error(ApiError {
            status: 413,
            code: "body_too_large",
            message: format!("the request body is over {cap} bytes"),
        })
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
                return Err(Handled::Abort);
            }
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

/// A Pingora session as an observer's sink.
pub(crate) struct SessionSink<'a>(pub(crate) &'a mut Session);

#[async_trait]
impl Sink for SessionSink<'_> {
    async fn send(&mut self, data: Bytes) -> std::result::Result<(), ()> {
        self.0
            .write_response_body(Some(data), false)
            .await
            .map_err(|_| ())
    }

    async fn closed(&mut self) {
        // An error is the client closing or resetting; data (a pipelined request) is not.
        if self
            .0
            .as_downstream_mut()
            .read_body_or_idle(true)
            .await
            .is_ok()
        {
            std::future::pending::<()>().await;
        }
    }
}

impl Sidecar {
    /// The caller's owner, or the 401 to answer.
    pub(crate) fn owner(&self, session: &Session) -> std::result::Result<Owner, Handled> {
        self.shared
            .auth
            .owner(&session.req_header().headers)
            .map_err(Handled::Error)
    }

    /// Reads a turn-like request (record and annotate routes): the caller, the capped body, and
    /// the chat id from where the route says.
    pub(crate) async fn read_turn(
        &self,
        session: &mut Session,
        route: &Route,
    ) -> std::result::Result<(Owner, Bytes, crate::request::RecordRequest), Handled> {
        let owner = self.owner(session)?;
        let body = read_body(session, self.shared.cfg.recorder.max_body_bytes).await?;
        let query = session.req_header().uri.query().map(str::to_string);
        let req = crate::request::record(&route.chat_id, &body, query.as_deref(), |h| {
            header_value(session, h)
        })
        .map_err(Handled::Error)?;
        Ok((owner, body, req))
    }

    /// Serves `run` to this client as an observer, then ends the response.
    pub(crate) async fn observe(
        &self,
        session: &mut Session,
        run: &Arc<Run>,
        start: Start,
        guard: Option<ObserverGuard>,
    ) -> Handled {
        let s = &self.shared;
        session.set_write_timeout(Some(s.cfg.server.write_timeout.0));
        let opts = observer::Options {
            heartbeat: s.cfg.server.heartbeat.0,
        };
        let mut sink = SessionSink(session);
        let outcome = observer::serve(
            &mut sink,
            run,
            start,
            guard,
            &opts,
            &s.metrics,
            s.stop.clone(),
        )
        .await;
        match outcome {
            observer::Outcome::Ended => match session.write_response_body(None, true).await {
                Ok(()) => Handled::Done,
                Err(_) => Handled::Abort,
            },
            _ => Handled::Abort,
        }
    }

    /// Sends a request tether does not record to the backend and relays the answer unchanged.
    /// Returns the upstream status with how the relay ended.
    pub(crate) async fn forward_unrecorded(
        &self,
        session: &mut Session,
        body: Bytes,
    ) -> (Option<u16>, Handled) {
        let s = &self.shared;
        let mut up = match s.upstream.open(session.req_header(), &body, None).await {
            Ok(u) => u,
            Err(e) => {
                s.metrics.upstream_errors.with_label_values(&[e.kind]).inc();
                return (None, Handled::Error(unreachable()));
            }
        };
        let Some(header) = up.response_header().cloned() else {
            return (None, Handled::Abort);
        };
        let status = header.status.as_u16();
        let chunked = header.headers.get("content-length").is_none();
        if session
            .write_response_header(Box::new(relayed(header, chunked)), false)
            .await
            .is_err()
        {
            return (Some(status), Handled::Abort);
        }
        loop {
            match up.read_response_body().await {
                Ok(Some(chunk)) => {
                    if session
                        .write_response_body(Some(chunk), false)
                        .await
                        .is_err()
                    {
                        return (Some(status), Handled::Abort);
                    }
                }
                Ok(None) => break,
                Err(_) => return (Some(status), Handled::Abort),
            }
        }
        s.upstream.release(up).await;
        match session.write_response_body(None, true).await {
            Ok(()) => (Some(status), Handled::Done),
            Err(_) => (Some(status), Handled::Abort),
        }
    }
}

/// The 502 answered when the backend cannot be reached.
pub(crate) fn unreachable() -> ApiError {
    ApiError {
        status: 502,
        code: "upstream_unreachable",
        message: "the backend could not be reached".into(),
    }
}
