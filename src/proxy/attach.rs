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
use crate::state::attach_policy::Decision;
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
        let owner = s.chats.owner(&session.req_header().headers)?;
        let chat = s.chats.chat(owner, &req.chat_id);
        let mut decision = chat.attach(req.run_id.as_ref(), req.after_seq).await;
        if matches!(decision, Decision::Missing) {
            let mut wait = req.wait;
            if route.on_miss == OnMiss::Record {
                let run_id = mint_run_id();
                let registered = chat.register(&run_id, Admission::AttachRecord).await;
                if let Ok(pending) = registered {
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
            decision = chat.wait_for_run(wait).await;
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
