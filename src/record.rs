//! Record routes: read and check the request, register the run, hand it to a producer, and
//! answer the requester from what the producer reports (protocol-1 frames, the upstream bytes
//! unchanged for a legacy client, or the upstream's own non-SSE answer).

use std::sync::atomic::Ordering;

use bytes::Bytes;
use log::info;
use pingora_http::ResponseHeader;
use pingora_proxy::Session;
use tokio::sync::mpsc;

use crate::auth::Auth;
use crate::config::Route;
use crate::observer::Start;
use crate::producer::{self, Head, Job};
use crate::proxy::{relayed, unreachable, write_sse_header, Handled, Sidecar};
use crate::registry::{mint_run_id, Pending};
use crate::request::ApiError;

impl Sidecar {
    /// `kind = "record"`: one turn, recorded as a new run of the chat.
    pub(crate) async fn record(&self, session: &mut Session, route: &Route) -> Handled {
        let s = &self.shared;
        if s.draining.load(Ordering::Relaxed) {
            return Handled::Error(ApiError {
                status: 503,
                code: "draining",
                message: "tether is shutting down; retry on another instance".into(),
            });
        }
        let (owner, body, req) = match self.read_turn(session, route).await {
            Ok(t) => t,
            Err(h) => return h,
        };
        let limits = &s.cfg.limits;
        if !s
            .registry
            .make_room(limits.max_runs, limits.max_recorded_bytes)
        {
            // Over the run or byte limits even after evicting completed runs: never refuse a
            // turn, pass it through unrecorded.
            s.metrics.runs_unrecorded.inc();
            info!(
                "chat {:?}: recorder full, turn passed through unrecorded",
                req.chat_id
            );
            return self.forward_unrecorded(session, body).await.1;
        }
        let scope = Auth::scope(&owner, &req.chat_id);
        let run_id = mint_run_id();
        let pending = if route.single_flight {
            match s.registry.begin_single(&scope, owner, &run_id) {
                Ok(p) => p,
                Err(active) => {
                    let v = serde_json::json!({
                        "error": "turn_already_running",
                        "message": "this chat already has a turn running",
                        "run_id": active,
                    });
                    return Handled::Json(409, Some(v));
                }
            }
        } else {
            s.registry.begin(&scope, owner, &run_id)
        };
        self.run_upstream(session, route, pending, run_id, body, !req.protocol1)
            .await
    }

    /// Forwards the request through a producer and answers from what it reports.
    pub(crate) async fn run_upstream(
        &self,
        session: &mut Session,
        route: &Route,
        pending: Pending,
        run_id: String,
        body: Bytes,
        legacy: bool,
    ) -> Handled {
        let s = &self.shared;
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
            Err(_) | Ok(Head::Failed(_)) => Handled::Error(unreachable()),
            Ok(Head::Relay { header, body }) => relay(session, header, body).await,
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

    /// A legacy requester: the upstream bytes unchanged. The producer marks a clean upstream end
    /// with an empty chunk; a tee closed without it (upstream reset, or this client too slow)
    /// closes the connection without a clean end, as the upstream did.
    async fn legacy(
        &self,
        session: &mut Session,
        header: ResponseHeader,
        mut raw: mpsc::Receiver<Bytes>,
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
            let mut sink = crate::proxy::SessionSink(session);
            let next = tokio::select! {
                c = raw.recv() => c,
                _ = crate::observer::Sink::closed(&mut sink) => return Handled::Abort,
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
}

/// Relays an upstream answer that is not recorded (non-2xx or not SSE), chunk by chunk.
async fn relay(
    session: &mut Session,
    header: ResponseHeader,
    mut body: mpsc::Receiver<Bytes>,
) -> Handled {
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
