//! The Pingora `ProxyHttp` adapter: matches a route and hands the request to its route file, or
//! to Pingora's own streaming pass-through.
//!
//! Calls go one way: [`ProxyHttp::request_filter`] dispatches each route kind to the one file that
//! serves it (`record` with its `record/retry`, `attach`, `resume`, `durable` for the Durable
//! Streams dialect, `stop`, `status`, `annotate`); a route file calls no other route file, only
//! the shared files below them: `request` (reading a request's keys and a turn's body, once),
//! `serve` (serving a run to a reader), `turn` (running a turn upstream), `session` (the Pingora
//! session: bodies, whole answers, relays), `shared`, `cors`, `deadline`, and `assets` (the files
//! tether serves itself). How a caller's chat and run are found is [`crate::chats`]'s.

mod annotate;
mod assets;
mod attach;
mod cors;
pub mod deadline;
mod durable;
mod record;
mod request;
mod resume;
mod serve;
mod session;
mod shared;
mod status;
mod stop;
mod turn;

use std::sync::Arc;

use async_trait::async_trait;
use pingora_core::upstreams::peer::HttpPeer;
use pingora_core::Result;
use pingora_http::RequestHeader;
use pingora_proxy::{ProxyHttp, Session};

use crate::backend::slots::Slot;
use crate::config::{match_route, Captures, DialectKind, Route, RouteKind};
use crate::error::{ApiError, Code};
pub use assets::CLIENT_PATH;
pub use cors::Cors;
use deadline::BodyWatch;
use session::{at_capacity, finish};
pub use shared::Shared;

/// The `ProxyHttp` implementation.
pub struct Sidecar {
    pub(crate) shared: Arc<Shared>,
}

impl Sidecar {
    /// A proxy over the shared state.
    pub fn new(shared: Arc<Shared>) -> Self {
        Sidecar { shared }
    }

    /// Sets a pass-through up before Pingora proxies it: a backend slot (none free: `503
    /// at_capacity`, answered here, returns `true`), the client write timeout (Pingora's proxy
    /// has none: a client that stops reading would hold its stream and a backend connection for
    /// ever), and the body deadline armed while the body is still to come.
    async fn pass_through(&self, session: &mut Session, ctx: &mut Ctx) -> Result<bool> {
        let s = &self.shared;
        let Some(slot) = s.upstream.slot() else {
            return finish(session, &s.cors, Err(at_capacity(s))).await;
        };
        ctx.slot = Some(slot);
        session.set_write_timeout(Some(s.cfg.server.write_timeout.0));
        if let Some(w) = &ctx.body {
            if !session.as_mut().is_body_done() {
                w.arm();
            }
        }
        Ok(false)
    }
}

/// What one request carries from one of the adapter's hooks to the next (Pingora makes it with
/// [`ProxyHttp::new_ctx`] and drops it when the request ends).
#[derive(Debug, Default)]
pub struct Ctx {
    /// A pass-through's hold on a backend connection (`[upstream] max_requests`).
    slot: Option<Slot>,
    /// The request's body deadline, armed for a pass-through ([`deadline`]).
    body: Option<BodyWatch>,
}

/// The route a request matched, with its path captures (raw, as in the request path).
pub(crate) struct Matched<'a> {
    pub(crate) route: &'a Route,
    pub(crate) captures: Captures,
}

/// The size of the request header block as received: the request line (method, URI, ` `,
/// ` HTTP/1.1\r\n`) and each header line (`name: value\r\n`).
fn header_bytes(req: &RequestHeader) -> usize {
    const REQUEST_LINE_EXTRA: usize = " ".len() + " HTTP/1.1\r\n".len();
    const HEADER_LINE_EXTRA: usize = ": \r\n".len();
    let line = req.method.as_str().len() + req.uri.to_string().len() + REQUEST_LINE_EXTRA;
    req.headers
        .iter()
        .map(|(k, v)| k.as_str().len() + v.len() + HEADER_LINE_EXTRA)
        .sum::<usize>()
        + line
}

#[async_trait]
impl ProxyHttp for Sidecar {
    type CTX = Ctx;

    /// Runs once per request, before anything else: the request's body deadline, when it runs
    /// under one, and no backend slot yet.
    fn new_ctx(&self) -> Self::CTX {
        Ctx {
            slot: None,
            body: BodyWatch::current(),
        }
    }

    /// Runs once at start to set up the downstream modules. The default adds response
    /// compression (disabled); tether never compresses (an SSE stream would stick in the
    /// compressor), so it adds none and saves their work on every body write.
    fn init_downstream_modules(&self, _modules: &mut pingora_core::modules::http::HttpModules) {}

    /// Runs after the request header is read. Joins the request's `Cookie` lines into one
    /// (HTTP/2 cookie crumbs, RFC 9113 §8.2.3) for everything after it, Pingora's pass-through
    /// included. Embedded files (the browser client, the demo
    /// page), record, attach and control routes are answered here in full (returns `true`);
    /// pass-through routes return `false` and continue to [`Self::upstream_peer`], unless every
    /// backend slot is held (then `503 at_capacity`, answered here). Default (not overridden):
    /// `Ok(false)`.
    async fn request_filter(&self, session: &mut Session, ctx: &mut Ctx) -> Result<bool> {
        let max = self.shared.cfg.limits.max_header_bytes;
        let cors = &self.shared.cors;
        // A body left unread behind an answer is drained before the connection is reused: for
        // no longer than a body may take.
        session.set_total_drain_timeout(Some(self.shared.cfg.server.body_timeout.0));
        if header_bytes(session.req_header()) > max {
            let e = ApiError::new(
                Code::HeadersTooLarge,
                format!("the request headers are over {max} bytes"),
            );
            return finish(session, cors, Err(e)).await;
        }
        // One `Cookie` line from here on, for the caller's identity, key sources and every
        // path that forwards the request (HTTP/2 cookie crumbs joined).
        crate::backend::join_cookies(session.req_header_mut());
        if let Some(h) = cors.preflight(&self.shared.cfg.routes, session.req_header()) {
            let _ = session.write_response_header(Box::new(h), true).await;
            return Ok(true);
        }
        if let Some(file) = assets::answer(&self.shared.cfg, session.req_header()) {
            return finish(session, cors, Ok(file)).await;
        }
        let req = session.req_header();
        let Some((route, captures)) =
            match_route(&self.shared.cfg.routes, req.method.as_str(), req.uri.path())
        else {
            return self.pass_through(session, ctx).await;
        };
        let m = Matched { route, captures };
        let handled = match route.kind {
            RouteKind::Passthrough => return self.pass_through(session, ctx).await,
            RouteKind::Record => self.record(session, &m).await,
            RouteKind::Attach => self.attach(session, &m).await,
            RouteKind::Stop => self.stop(session, &m).await,
            RouteKind::Status => self.status(session, &m).await,
            RouteKind::Annotate => self.annotate(session, &m).await,
            RouteKind::Resume => match &route.resume {
                Some(r) if r.dialect == DialectKind::DurableStreams => {
                    self.durable(session, &m).await
                }
                _ => self.resume(session, &m).await,
            },
        };
        finish(session, cors, handled).await
    }

    /// Runs for pass-through requests: every one goes to the configured backend.
    async fn upstream_peer(&self, _session: &mut Session, _ctx: &mut Ctx) -> Result<Box<HttpPeer>> {
        Ok(self.shared.upstream.peer())
    }

    /// Runs for each piece of a pass-through's request body read from the client (and once,
    /// with `end_of_stream`, for a request without one): the body deadline stops at its end.
    /// Default: nothing.
    async fn request_body_filter(
        &self,
        _session: &mut Session,
        _body: &mut Option<bytes::Bytes>,
        end_of_stream: bool,
        ctx: &mut Ctx,
    ) -> Result<()> {
        if let (true, Some(w)) = (end_of_stream, &ctx.body) {
            w.done();
        }
        Ok(())
    }

    /// Runs for pass-through requests before they go upstream: a client's `X-Tether-Run-Id` is
    /// dropped (tether names no run here, and a backend may trust the header), and an HTTPS
    /// backend gets its own `Host`. Default: nothing.
    async fn upstream_request_filter(
        &self,
        _session: &mut Session,
        upstream_request: &mut RequestHeader,
        _ctx: &mut Ctx,
    ) -> Result<()> {
        upstream_request.remove_header(crate::backend::RUN_ID_HEADER);
        if let Some(host) = self.shared.upstream.host() {
            upstream_request.insert_header("host", host)?;
        }
        Ok(())
    }

    /// The request as Pingora names it in its log records (`METHOD PATH, Host: HOST`), each part
    /// bounded so a hostile path cannot flood the log. Default: the whole request line.
    fn request_summary(&self, session: &Session, _ctx: &Ctx) -> String {
        crate::logging::request_summary(session.req_header())
    }
}
