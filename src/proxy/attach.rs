//! Attach routes: parse the request (protocol 1), decide per the attach table
//! ([`crate::state::attach_policy`]), wait or record on a miss, and serve the client as an observer. A request
//! without `"protocol": 1` goes to the backend unchanged.

use log::{debug, info};
use pingora_proxy::Session;

use super::session::{
    forward_unrecorded, header_value, observe, read_body, write_sse_header, Handled, Reply,
};
use super::{Matched, Sidecar};
use crate::config::OnMiss;
use crate::dialect::protocol1::Protocol1;
use crate::dialect::{Dialect, Incoming};
use crate::error::{ApiError, Code};
use crate::metrics::AttachResult;
use crate::state::attach_policy::{self, Decision};
use crate::state::auth::Auth;
use crate::vocab::kinds::DialectKind;

const P1: DialectKind = DialectKind::Protocol1;
use crate::request::Parts;
use crate::state::attach_policy::Start;
use crate::state::registry::Admission;
use crate::state::run::mint_run_id;

impl Sidecar {
    /// `kind = "attach"`: serve the chat's run from the buffer.
    pub(crate) async fn attach(&self, session: &mut Session, m: &Matched<'_>) -> Handled {
        let (s, route) = (&self.shared, m.route);
        let max_wait = s.cfg.recorder.max_wait.0;
        let get = session.req_header().method == http::Method::GET;
        let body = match get {
            true => bytes::Bytes::new(),
            false => match read_body(session, s).await {
                Ok(b) => b,
                Err(e) => return e.into(),
            },
        };
        let header = |name: &str| header_value(session, name);
        let req = Protocol1.parse(&Incoming {
            get,
            parts: Parts {
                captures: &m.captures,
                query: session.req_header().uri.query(),
                header: &header,
            },
            body: &body,
            chat_id: &route.chat_id,
            max_wait,
        })?;
        if !req.protocol1 {
            // A legacy attach goes to the backend unchanged, unrecorded.
            return Ok(forward_unrecorded(s, session, body).await?.1);
        }
        let owner = self.owner(session)?;
        let scope = Auth::scope(&owner, &req.chat_id);
        self.sync_chat(&scope, &owner, req.run_id.as_ref()).await;
        if let (Some(id), Some(after)) = (&req.run_id, req.after_seq) {
            // A mirror a little behind the producer: a cursor just ahead of it waits for the
            // follower (up to a second) before it counts as a future cursor.
            if let Some(run) = s
                .registry
                .find(&scope, &owner, id)
                .filter(|r| r.is_mirror())
            {
                let mut rx = run.subscribe();
                let wait = rx.wait_for(|_| run.head() >= after || run.end().is_some());
                let _ = tokio::time::timeout(std::time::Duration::from_secs(1), wait).await;
            }
        }
        let mut decision = attach_policy::decide(
            &s.registry,
            &scope,
            &owner,
            req.run_id.as_ref(),
            req.after_seq,
        );
        if matches!(decision, Decision::Missing) {
            let mut wait = req.wait;
            if route.on_miss == OnMiss::Record {
                let run_id = mint_run_id();
                if let Ok(pending) =
                    s.registry
                        .register(&scope, owner, &run_id, Admission::AttachRecord)
                {
                    info!(
                        "attach for chat {:?} found no run; recording the backend's live stream",
                        req.chat_id
                    );
                    return self
                        .run_upstream(
                            session,
                            route,
                            super::record::Turn {
                                pending,
                                run_id,
                                body,
                                legacy: false,
                                request_aliases: Vec::new(),
                                keys: Vec::new(),
                            },
                        )
                        .await;
                }
                // Another attach is fetching it: wait for that run to go live.
                wait = max_wait.max(req.wait);
            }
            decision = attach_policy::wait_for_run(&s.registry, &scope, &owner, wait).await;
        }
        let (run, start, reset) = match decision {
            Decision::NoContent | Decision::Missing => {
                s.metrics.attach.inc(P1, AttachResult::NoContent);
                debug!("attach chat {:?}: 204", req.chat_id);
                return Ok(Reply::Json(204, None));
            }
            Decision::Serve { run, start, reset } => (run, start, reset),
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
}
