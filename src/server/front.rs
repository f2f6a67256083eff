//! The proxy listener's app: tether's own routes answered straight from the connection, every
//! other request (and every HTTP/2 stream) through Pingora's proxy.
//!
//! Pingora's `HttpProxy` runs each request inside one future that also holds what a
//! pass-through needs (the upstream exchange, the cache, the filters), 13 KB of it, and for a
//! recorded turn that future lives as long as the stream. A request for one of tether's routes
//! needs none of it, so [`Front`] claims it from its head's bytes and runs the same steps
//! `HttpProxy` would (parse the head, the route's handler, the connection back for the next
//! request), in a future of its own.

use std::sync::Arc;

use async_trait::async_trait;
use log::{debug, warn};
use pingora_core::apps::{
    HttpPersistentSettings, HttpServerApp, HttpServerOptions, ReusedHttpStream,
};
use pingora_core::protocols::http::ServerSession;
use pingora_core::protocols::Stream;
use pingora_core::server::ShutdownWatch;
use pingora_core::ErrorType;
use pingora_proxy::{HttpProxy, ProxyHttp, Session};

use tokio::time::Instant;

use super::conn::{Shortcut, TimeoutKind};
use crate::config::{match_route, Route, RouteKind};
use crate::proxy::{deadline, Ctx, Sidecar};

/// Pingora's proxy, and tether's routes beside it.
pub struct Front {
    proxy: Arc<HttpProxy<Sidecar>>,
    sidecar: Sidecar,
}

impl Front {
    /// `proxy` answers what tether does not claim; `sidecar` is the same handlers, called
    /// directly for what it does.
    pub fn new(proxy: Arc<HttpProxy<Sidecar>>, sidecar: Sidecar) -> Self {
        Front { proxy, sidecar }
    }
}

/// The method and path of the request line at the start of `head` (the bytes read so far;
/// empty lines before it skipped, as the parser does); `None` when the line is not one Pingora
/// would take as it is (then Pingora parses it, and answers it as it always did).
fn request_line(head: &[u8]) -> Option<(&str, http::Uri)> {
    let start = head.iter().position(|b| *b != b'\r' && *b != b'\n')?;
    let line = &head[start..];
    let line = &line[..line.iter().position(|b| *b == b'\n')?];
    let line = std::str::from_utf8(line).ok()?.trim_end_matches('\r');
    let mut parts = line.split(' ');
    let (method, target, version) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || !version.starts_with("HTTP/1.") {
        return None;
    }
    Some((method, target.parse().ok()?))
}

/// Whether a request with this head goes to one of `routes` that tether answers itself: the
/// route its handlers will match (method and path of the parsed head), not a pass-through one.
fn claimed(routes: &[Route], head: &[u8]) -> bool {
    let Some((method, uri)) = request_line(head) else {
        return false;
    };
    matches!(
        match_route(routes, method, uri.path()),
        Some((route, _)) if route.kind != RouteKind::Passthrough
    )
}

#[async_trait]
impl HttpServerApp for Front {
    /// Runs for each request tether does not claim, and each HTTP/2 stream: Pingora's proxy,
    /// under the body deadline (from now: the head has just been read), which a pass-through
    /// arms ([`crate::proxy::deadline`]). Past it, the request is dropped: its connection
    /// closed (HTTP/2: its stream reset), counted.
    async fn process_new_http(
        self: &Arc<Self>,
        session: ServerSession,
        shutdown: &ShutdownWatch,
    ) -> Option<ReusedHttpStream> {
        let shared = &self.sidecar.shared;
        let limit = shared.cfg.server.body_timeout.0;
        let served = self.proxy.process_new_http(session, shutdown);
        match deadline::under(Instant::now() + limit, served).await {
            Some(reused) => reused,
            None => {
                debug!("pass-through request body not read within {limit:?}; closing");
                shared.downstream.timeouts.inc(TimeoutKind::Body);
                None
            }
        }
    }

    /// The proxy's options (its HTTP/2 idle timeout).
    fn server_options(&self) -> Option<&HttpServerOptions> {
        self.proxy.server_options()
    }

    /// The proxy's HTTP/2 options.
    fn h2_options(&self) -> Option<pingora_core::protocols::http::v2::server::H2Options> {
        self.proxy.h2_options()
    }

    /// Runs once at shutdown: the proxy's own cleanup.
    async fn http_cleanup(&self) {
        self.proxy.http_cleanup().await
    }
}

#[async_trait]
impl Shortcut for Front {
    /// A request for one of tether's routes (recorded turns, attach, resume, stop, status,
    /// annotate); not a pass-through route, a preflight, an asset or a path no route matches.
    fn claims(&self, head: &[u8]) -> bool {
        claimed(&self.sidecar.shared.cfg.routes, head)
    }

    /// A session with the proxy's own downstream modules (tether's proxy has none today), so a
    /// claimed request gets what `HttpProxy` would give it.
    fn own_session(&self, stream: Stream) -> Session {
        Session::new_h1_with_modules(stream, &self.proxy.downstream_modules)
    }

    /// The steps `HttpProxy` takes for a request its `request_filter` answers: read the head
    /// (a malformed one gets Pingora's `400`), stop keep-alive once a drain began, the
    /// downstream modules' request filters, the route's handler, then the connection back for
    /// the next request when the answer left it reusable.
    async fn serve_own(
        self: &Arc<Self>,
        mut session: Session,
        shutdown: &ShutdownWatch,
    ) -> Option<ReusedHttpStream> {
        match session.downstream_session.read_request().await {
            Ok(true) => {}
            Ok(false) => return None,
            Err(e) => {
                debug!("bad request head: {e}");
                if matches!(e.etype, ErrorType::InvalidHTTPHeader) {
                    let _ = session.downstream_session.respond_error(400).await;
                }
                session.downstream_session.shutdown().await;
                return None;
            }
        }
        if *shutdown.borrow() {
            session.set_keepalive(None);
        }
        let req = session.downstream_session.req_header_mut();
        if let Err(e) = session
            .downstream_modules_ctx
            .request_header_filter(req)
            .await
        {
            // As `HttpProxy` answers a module's refusal: Pingora's error answer, then closed.
            debug!("a downstream module refused the request: {e}");
            let _ = session.downstream_session.respond_error(500).await;
            session.downstream_session.shutdown().await;
            return None;
        }
        let mut ctx = Ctx::default();
        match self.sidecar.request_filter(&mut session, &mut ctx).await {
            Ok(true) => {}
            // The handlers answer every request of a claimed route; a route that matched the
            // head's bytes but not the parsed head would be a bug: close rather than guess.
            _ => {
                warn!("a request claimed for one of tether's routes was not answered; closing");
                session.downstream_session.shutdown().await;
                return None;
            }
        }
        let settings = HttpPersistentSettings::for_session(&session.downstream_session);
        session
            .downstream_session
            .finish()
            .await
            .ok()
            .flatten()
            .map(|s| ReusedHttpStream::from_reusable_stream(s, settings))
    }
}

#[cfg(test)]
mod tests;
