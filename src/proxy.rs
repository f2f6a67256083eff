//! The Pingora `ProxyHttp` adapter: matches a route and hands the request to record, attach or
//! Pingora's own pass-through path. Everything else about a request lives in the modules it
//! calls (`request`, `producer`, `observer`); this file only adapts Pingora sessions to them.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use log::{debug, info};
use pingora_core::upstreams::peer::HttpPeer;
use pingora_core::Result;
use pingora_http::{RequestHeader, ResponseHeader};
use pingora_proxy::{ProxyHttp, Session};
use tokio::sync::watch;

use crate::config::{Config, Route, RouteKind};
use crate::metrics::Metrics;
use crate::observer::{self, Decision, Sink, Start};
use crate::producer::{self, Head, Job, Upstream};
use crate::registry::{mint_run_id, Registry};
use crate::request::{self, ApiError};
use crate::run::{ObserverGuard, Run};

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
    /// Set on SIGTERM: new record requests are refused with 503.
    pub draining: AtomicBool,
    /// Set when the drain ends: live observer streams stop.
    pub stop: watch::Receiver<bool>,
}

/// The `ProxyHttp` implementation.
pub struct Sidecar {
    shared: Arc<Shared>,
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

#[async_trait]
impl ProxyHttp for Sidecar {
    type CTX = ();

    /// Runs once per request, before anything else; this proxy keeps no per-request context.
    fn new_ctx(&self) -> Self::CTX {}

    /// Runs after the request header is read. Record and attach routes are answered here in
    /// full (returns `true`); pass-through routes return `false` and continue to
    /// [`Self::upstream_peer`]. Default (not overridden): `Ok(false)`.
    async fn request_filter(&self, session: &mut Session, _ctx: &mut ()) -> Result<bool> {
        let Some(route) = match_route(&self.shared.cfg.routes, session.req_header()).cloned()
        else {
            return Ok(false);
        };
        match route.kind {
            RouteKind::Passthrough => Ok(false),
            RouteKind::Record => {
                let r = self.record(session, &route).await;
                finish(session, r).await
            }
            RouteKind::Attach => {
                let r = self.attach(session, &route).await;
                finish(session, r).await
            }
        }
    }

    /// Runs for pass-through requests: every one goes to the configured backend.
    async fn upstream_peer(&self, _session: &mut Session, _ctx: &mut ()) -> Result<Box<HttpPeer>> {
        Ok(self.shared.upstream.peer())
    }
}

/// How a handled request ended, for the adapter.
enum Handled {
    /// A response was written completely.
    Done,
    /// The client left or the response was cut: close the connection.
    Abort,
    /// Answer with this error.
    Error(ApiError),
}

async fn finish(session: &mut Session, r: Handled) -> Result<bool> {
    match r {
        Handled::Done => Ok(true),
        Handled::Abort => {
            session.set_keepalive(None);
            session.as_downstream_mut().shutdown().await;
            Ok(true)
        }
        Handled::Error(e) => {
            let _ = respond(session, e.status, Some(e.body())).await;
            Ok(true)
        }
    }
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
async fn write_sse_header(session: &mut Session, run_id: &str) -> bool {
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
fn relayed(mut h: ResponseHeader, chunked: bool) -> ResponseHeader {
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

/// Reads the whole request body, up to `cap` bytes.
async fn read_body(session: &mut Session, cap: usize) -> std::result::Result<Bytes, Handled> {
    let too_large = || {
        Handled::Error(ApiError {
            status: 413,
            code: "body_too_large",
            message: format!("the request body is over {cap} bytes"),
        })
    };
    if let Some(len) = session
        .req_header()
        .headers
        .get("content-length")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok())
    {
        if len > cap {
            return Err(too_large());
        }
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

/// A Pingora session as an observer's sink.
struct SessionSink<'a>(&'a mut Session);

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
    fn header_value(session: &Session, name: &str) -> Option<String> {
        session
            .req_header()
            .headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    }

    async fn record(&self, session: &mut Session, route: &Route) -> Handled {
        let s = &self.shared;
        if s.draining.load(Ordering::Relaxed) {
            return Handled::Error(ApiError {
                status: 503,
                code: "draining",
                message: "tether is shutting down; retry on another instance".into(),
            });
        }
        let body = match read_body(session, s.cfg.recorder.max_body_bytes).await {
            Ok(b) => b,
            Err(h) => return h,
        };
        let query = session.req_header().uri.query().map(str::to_string);
        let req = match request::record(&route.chat_id, &body, query.as_deref(), |h| {
            Self::header_value(session, h)
        }) {
            Ok(r) => r,
            Err(e) => return Handled::Error(e),
        };
        let pending = s.registry.begin(&req.chat_id);
        self.run_upstream(session, route, pending, body, !req.protocol1)
            .await
    }

    /// Forwards the request through a producer and answers from what it reports.
    async fn run_upstream(
        &self,
        session: &mut Session,
        route: &Route,
        pending: crate::registry::Pending,
        body: Bytes,
        legacy: bool,
    ) -> Handled {
        let s = &self.shared;
        let run_id = mint_run_id();
        let max = s.cfg.upstream_opts.max_run_duration.0;
        let head = producer::spawn(Job {
            upstream: s.upstream.clone(),
            registry: s.registry.clone(),
            metrics: s.metrics.clone(),
            pending: Some(pending),
            run_id,
            route: route.path.clone(),
            commit: route.commit.clone(),
            window: s.cfg.recorder.window,
            max_event: s.cfg.recorder.max_event_bytes,
            max_duration: (!max.is_zero()).then_some(max),
            request: session.req_header().clone(),
            body,
            legacy,
        });
        match head.await {
            Err(_) | Ok(Head::Failed(_)) => Handled::Error(ApiError {
                status: 502,
                code: "upstream_unreachable",
                message: "the backend could not be reached".into(),
            }),
            Ok(Head::Relay { header, mut body }) => {
                let chunked = header.headers.get("content-length").is_none();
                if session
                    .write_response_header(Box::new(relayed(header, chunked)), false)
                    .await
                    .is_err()
                {
                    return Handled::Abort;
                }
                while let Some(chunk) = body.recv().await {
                    if session
                        .write_response_body(Some(chunk), false)
                        .await
                        .is_err()
                    {
                        return Handled::Abort;
                    }
                }
                match session.write_response_body(None, true).await {
                    Ok(()) => Handled::Done,
                    Err(_) => Handled::Abort,
                }
            }
            Ok(Head::Live {
                run,
                header,
                raw,
                guard,
            }) => match raw {
                Some(raw) => {
                    let _attached = guard;
                    self.legacy(session, header, raw).await
                }
                None => {
                    if !write_sse_header(session, run.id()).await {
                        return Handled::Abort;
                    }
                    self.observe(session, &run, Start::Fresh, Some(guard)).await
                }
            },
        }
    }

    async fn observe(
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
        let outcome = observer::serve(
            &mut SessionSink(session),
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

    /// A legacy requester: the upstream bytes unchanged. The producer marks a clean upstream end
    /// with an empty chunk; a tee closed without it (upstream reset, or this client too slow)
    /// closes the connection without a clean end, as the upstream did.
    async fn legacy(
        &self,
        session: &mut Session,
        header: ResponseHeader,
        mut raw: tokio::sync::mpsc::Receiver<Bytes>,
    ) -> Handled {
        session.set_write_timeout(Some(self.shared.cfg.server.write_timeout.0));
        if session
            .write_response_header(Box::new(relayed(header, true)), false)
            .await
            .is_err()
        {
            return Handled::Abort;
        }
        loop {
            let mut sink = SessionSink(session);
            let next = tokio::select! {
                c = raw.recv() => c,
                _ = sink.closed() => return Handled::Abort,
            };
            match next {
                Some(chunk) if chunk.is_empty() => break,
                Some(chunk) => {
                    if session
                        .write_response_body(Some(chunk), false)
                        .await
                        .is_err()
                    {
                        return Handled::Abort;
                    }
                }
                None => return Handled::Abort,
            }
        }
        match session.write_response_body(None, true).await {
            Ok(()) => Handled::Done,
            Err(_) => Handled::Abort,
        }
    }

    async fn attach(&self, session: &mut Session, route: &Route) -> Handled {
        let s = &self.shared;
        let max_wait = s.cfg.recorder.max_wait.0;
        let is_get = session.req_header().method == http::Method::GET;
        let (req, body) = if is_get {
            let q = session.req_header().uri.query().map(str::to_string);
            let last = Self::header_value(session, "last-event-id");
            match request::attach_get(q.as_deref(), last.as_deref(), max_wait) {
                Ok(r) => (r, Bytes::new()),
                Err(e) => return Handled::Error(e),
            }
        } else {
            let body = match read_body(session, s.cfg.recorder.max_body_bytes).await {
                Ok(b) => b,
                Err(h) => return h,
            };
            match request::attach_post(&route.chat_id, &body, max_wait) {
                Ok(r) => (r, body),
                Err(e) => return Handled::Error(e),
            }
        };
        if !req.protocol1 {
            // A legacy attach goes to the backend unchanged, unrecorded.
            return self.forward_unrecorded(session, body).await;
        }
        let mut decision = observer::decide(
            &s.registry,
            &req.chat_id,
            req.run_id.as_deref(),
            req.after_seq,
        );
        if matches!(decision, Decision::Missing) {
            if route.on_miss == crate::config::OnMiss::Record {
                if let Some(pending) = s.registry.begin_attach_record(&req.chat_id) {
                    info!(
                        "attach for chat {:?} found no run; recording the backend's live stream",
                        req.chat_id
                    );
                    return self
                        .run_upstream_attach(session, route, pending, body)
                        .await;
                }
                decision =
                    observer::wait_for_run(&s.registry, &req.chat_id, max_wait.max(req.wait)).await;
            } else {
                decision = observer::wait_for_run(&s.registry, &req.chat_id, req.wait).await;
            }
        }
        match decision {
            Decision::NoContent | Decision::Missing => {
                s.metrics.attach.with_label_values(&["no_content"]).inc();
                debug!("attach chat {:?}: 204", req.chat_id);
                let _ = respond(session, 204, None).await;
                Handled::Done
            }
            Decision::Serve { run, start, reset } => {
                if let Some(reason) = reset {
                    s.metrics.snapshot_resets.with_label_values(&[reason]).inc();
                }
                let result = match start {
                    Start::After(c) if run.end().is_some_and(|e| e.seq == c) => "end_only",
                    Start::After(_) => "replay",
                    _ => "snapshot",
                };
                s.metrics.attach.with_label_values(&[result]).inc();
                debug!(
                    "attach chat {:?}: run {} {result} reset {reset:?}",
                    req.chat_id,
                    run.id()
                );
                if !write_sse_header(session, run.id()).await {
                    return Handled::Abort;
                }
                self.observe(session, &run, start, None).await
            }
        }
    }

    /// `on_miss = record`: the attach itself becomes the run's requester, in protocol 1.
    async fn run_upstream_attach(
        &self,
        session: &mut Session,
        route: &Route,
        pending: crate::registry::Pending,
        body: Bytes,
    ) -> Handled {
        self.run_upstream(session, route, pending, body, false)
            .await
    }

    /// Sends a request the sidecar does not record to the backend and relays the answer.
    async fn forward_unrecorded(&self, session: &mut Session, body: Bytes) -> Handled {
        let s = &self.shared;
        let mut up = match s.upstream.open(session.req_header(), &body, None).await {
            Ok(u) => u,
            Err(e) => {
                s.metrics.upstream_errors.with_label_values(&[e.kind]).inc();
                return Handled::Error(ApiError {
                    status: 502,
                    code: "upstream_unreachable",
                    message: "the backend could not be reached".into(),
                });
            }
        };
        let Some(header) = up.response_header().cloned() else {
            return Handled::Abort;
        };
        let chunked = header.headers.get("content-length").is_none();
        if session
            .write_response_header(Box::new(relayed(header, chunked)), false)
            .await
            .is_err()
        {
            return Handled::Abort;
        }
        loop {
            match up.read_response_body().await {
                Ok(Some(chunk)) => {
                    if session
                        .write_response_body(Some(chunk), false)
                        .await
                        .is_err()
                    {
                        return Handled::Abort;
                    }
                }
                Ok(None) => break,
                Err(_) => return Handled::Abort,
            }
        }
        s.upstream.release(up).await;
        match session.write_response_body(None, true).await {
            Ok(()) => Handled::Done,
            Err(_) => Handled::Abort,
        }
    }
}
