//! Record routes: read and check the request, register the run, hand it to a producer, and
//! answer the requester from what the producer reports (protocol-1 frames, the upstream bytes
//! unchanged for a legacy client, or the upstream's own non-SSE answer).

use std::sync::atomic::Ordering;

use bytes::Bytes;
use log::info;
use pingora_proxy::Session;

use super::session::{
    forward_unrecorded, observe, read_body, relay, relay_upstream, unreachable, write_sse_header,
    Handled, Reply, Source,
};
use super::{Matched, Sidecar};
use crate::auth::{Auth, Owner};
use crate::config::Route;
use crate::error::{ApiError, Code};
use crate::observer::Start;
use crate::registry::{Admission, Busy, Pending};
use crate::request::{self, Parts, RecordRequest};
use crate::run::mint_run_id;
use crate::upstream::producer::{self, Head, Job};

impl Sidecar {
    /// Reads a turn-like request (record and annotate routes): the caller, the capped body, and
    /// the chat id from where the route says.
    pub(crate) async fn read_turn(
        &self,
        session: &mut Session,
        m: &Matched<'_>,
    ) -> std::result::Result<(Owner, Bytes, RecordRequest), Handled> {
        let owner = self.owner(session).map_err(Err)?;
        let body = read_body(session, self.shared.cfg.recorder.max_body_bytes)
            .await
            .map_err(Handled::from)?;
        let header = |h: &str| super::session::header_value(session, h);
        let parts = Parts {
            captures: &m.captures,
            query: session.req_header().uri.query(),
            header: &header,
        };
        let req = request::record(&m.route.chat_id, &body, &parts).map_err(Err)?;
        Ok((owner, body, req))
    }

    /// `kind = "record"`: one turn, recorded as a new run of the chat.
    pub(crate) async fn record(&self, session: &mut Session, m: &Matched<'_>) -> Handled {
        let (s, route) = (&self.shared, m.route);
        if s.draining.load(Ordering::Relaxed) {
            return Err(ApiError::new(
                Code::Draining,
                "tether is shutting down; retry on another instance",
            ));
        }
        let (owner, body, req) = match self.read_turn(session, m).await {
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
            return Ok(forward_unrecorded(s, session, body).await?.1);
        }
        let scope = Auth::scope(&owner, &req.chat_id);
        let run_id = mint_run_id();
        let admit = match route.single_flight {
            true => Admission::SingleFlight,
            false => Admission::Always,
        };
        let pending = match s.registry.register(&scope, owner, &run_id, admit) {
            Ok(p) => p,
            Err(busy) => {
                let mut e = ApiError::new(
                    Code::TurnAlreadyRunning,
                    "this chat already has a turn running",
                );
                if let Busy::Running(active) = busy {
                    e.run_id = Some(active);
                }
                return Err(e);
            }
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
        let head = producer::spawn(
            &s.producers,
            Job {
                upstream: s.upstream.clone(),
                registry: s.registry.clone(),
                metrics: s.metrics.clone(),
                pending,
                run_id,
                route: route.path.as_str().to_string(),
                format: route.format,
                commit: route.commit.clone(),
                window: s.cfg.recorder.window,
                max_event: s.cfg.recorder.max_event_bytes,
                max_duration: (!max.is_zero()).then_some(max),
                request: session.req_header().clone(),
                body,
                legacy,
            },
        );
        match head.await {
            Err(_) | Ok(Head::Failed(_)) => Err(unreachable()),
            Ok(Head::Relay { header, upstream }) => {
                Ok(relay_upstream(session, &s.upstream, header, upstream).await)
            }
            Ok(Head::Live {
                run,
                header,
                legacy: Some(tee),
                guard,
            }) => {
                // A legacy requester: the upstream bytes unchanged, attached while it reads.
                let _attached = guard;
                let _run = run;
                session.set_write_timeout(Some(s.cfg.server.write_timeout.0));
                Ok(relay(session, header, &mut Source::Tee(tee)).await)
            }
            Ok(Head::Live {
                run,
                legacy: None,
                guard,
                ..
            }) => {
                if !write_sse_header(session, run.id()).await {
                    return Ok(Reply::Abort);
                }
                Ok(observe(s, session, &run, Start::Fresh, Some(guard)).await)
            }
        }
    }
}
