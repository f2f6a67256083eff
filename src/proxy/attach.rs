//! Attach routes: parse the request (protocol 1), decide per the attach table
//! ([`crate::state::attach_policy`], asked through [`crate::chats`]), wait or record on a miss
//! (the recorded turn runs upstream through [`super::turn`]), and serve the client as an
//! observer. A request without `"protocol": 1` goes to the backend unchanged.

use bytes::Bytes;
use log::{debug, info};
use pingora_proxy::Session;

use super::request::with_parts;
use super::serve::{observe, write_sse_header};
use super::session::{forward_unrecorded, read_body, Handled, Reply};
use super::turn::{run_upstream, Arrival, Turn};
use super::{Matched, Sidecar};
use crate::config::OnMiss;
use crate::dialect::protocol1::Protocol1;
use crate::dialect::{AttachRequest, Dialect, Incoming};
use crate::error::{ApiError, Code};
use crate::metrics::AttachResult;
use crate::state::attach_policy::{Decision, Start};
use crate::state::registry::Admission;
use crate::state::run::mint_run_id;
use crate::vocab::kinds::DialectKind;

const P1: DialectKind = DialectKind::Protocol1;

impl Sidecar {
    /// `kind = "attach"`: serve the chat's run from the buffer.
    pub(crate) async fn attach(&self, session: &mut Session, m: &Matched<'_>) -> Handled {
        let (s, route) = (&self.shared, m.route);
        let max_wait = s.cfg.recorder.max_wait.0;
        let get = session.req_header().method == http::Method::GET;
        let body = match get {
            true => Bytes::new(),
            false => match read_body(session, s).await {
                Ok(b) => b,
                Err(e) => return e.into(),
            },
        };
        let req = with_parts(session, m, |parts| {
            Protocol1.parse(&Incoming {
                get,
                parts: *parts,
                body: &body,
                chat_id: &route.chat_id,
                max_wait,
            })
        })?;
        if !req.protocol1 {
            // A legacy attach goes to the backend unchanged, unrecorded.
            return Ok(forward_unrecorded(s, session, body).await?.1);
        }
        let (run, start, reset) = match self.decide(session, m, &req, body).await {
            Ok(Decision::Serve { run, start, reset }) => (run, start, reset),
            Ok(Decision::NoContent | Decision::Missing) => {
                s.metrics.attach.inc(P1, AttachResult::NoContent);
                debug!("attach chat {:?}: 204", req.chat_id);
                return Ok(Reply::Json(204, None));
            }
            Err(recorded) => return recorded,
        };
        if run.observers() >= s.cfg.limits.max_observers_per_run {
            return Err(ApiError::new(
                Code::TooManyObservers,
                "this run has as many observers as it may",
            ));
        }
        if let Some(reason) = reset {
            s.metrics.snapshot_resets.inc(P1, reason);
        }
        let result = match start {
            Start::After(c) if run.end().is_some_and(|e| e.seq == c) => AttachResult::EndOnly,
            Start::After(_) => AttachResult::Replay,
            _ => AttachResult::Snapshot,
        };
        s.metrics.attach.inc(P1, result);
        debug!(
            "attach chat {:?}: run {} {} reset {:?}",
            req.chat_id,
            run.id(),
            result.as_str(),
            reset.map(|r| r.as_str())
        );
        if !write_sse_header(session, &s.cors, run.id()).await {
            return Ok(Reply::Abort);
        }
        Ok(observe(s, session, &run, start, None).await)
    }

    /// What the attach gets: the attach table's decision, after waiting for a run when the chat
    /// has none. With `on_miss = "record"` the first such attach records the backend's live
    /// stream itself (`Err` holds its answer) and the others wait for that run.
    async fn decide(
        &self,
        session: &mut Session,
        m: &Matched<'_>,
        req: &AttachRequest,
        body: Bytes,
    ) -> Result<Decision, Handled> {
        let (s, route) = (&self.shared, m.route);
        let owner = s.chats.owner(&session.req_header().headers).map_err(Err)?;
        let chat = s.chats.chat(owner, &req.chat_id);
        let decision = chat.attach(req.run_id.as_ref(), req.after_seq).await;
        if !matches!(decision, Decision::Missing) {
            return Ok(decision);
        }
        let mut wait = req.wait;
        if route.on_miss == OnMiss::Record {
            let run_id = mint_run_id();
            if let Ok(pending) = chat.register(&run_id, Admission::AttachRecord).await {
                info!(
                    "attach for chat {:?} found no run; recording the backend's live stream",
                    req.chat_id
                );
                let turn = Turn {
                    pending,
                    active: None,
                    run_id,
                    body,
                    legacy: false,
                    request_aliases: Vec::new(),
                    keys: Vec::new(),
                    arrived: Arrival::now(),
                };
                // Boxed: rare, and inline it would size this future, which lives as long as
                // the stream, for every attach.
                return Err(Box::pin(run_upstream(s, session, route, turn)).await);
            }
            // Another attach is fetching it: wait for that run to go live.
            wait = s.cfg.recorder.max_wait.0.max(req.wait);
        }
        Ok(chat.wait_for_run(wait).await)
    }
}
