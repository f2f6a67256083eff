//! Attach routes: parse the request, decide per the attach table (`observer::decide`), wait or
//! record on a miss, and serve the client as an observer. A request without `"protocol": 1` goes
//! to the backend unchanged.

use log::{debug, info};
use pingora_proxy::Session;

use crate::auth::Auth;
use crate::config::{OnMiss, Route};
use crate::observer::{self, Decision, Start};
use crate::proxy::{header_value, read_body, write_sse_header, Handled, Sidecar};
use crate::registry::mint_run_id;
use crate::request::{self, ApiError};

impl Sidecar {
    /// `kind = "attach"`: serve the chat's run from the buffer.
    pub(crate) async fn attach(&self, session: &mut Session, route: &Route) -> Handled {
        let s = &self.shared;
        let max_wait = s.cfg.recorder.max_wait.0;
        let is_get = session.req_header().method == http::Method::GET;
        let (req, body) = if is_get {
            let q = session.req_header().uri.query().map(str::to_string);
            let last = header_value(session, "last-event-id");
            match request::attach_get(q.as_deref(), last.as_deref(), max_wait) {
                Ok(r) => (r, bytes::Bytes::new()),
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
            return self.forward_unrecorded(session, body).await.1;
        }
        let owner = match self.owner(session) {
            Ok(o) => o,
            Err(h) => return h,
        };
        let scope = Auth::scope(&owner, &req.chat_id);
        let mut decision = observer::decide(
            &s.registry,
            &scope,
            &owner,
            req.run_id.as_deref(),
            req.after_seq,
        );
        if matches!(decision, Decision::Missing) {
            let mut wait = req.wait;
            if route.on_miss == OnMiss::Record {
                let run_id = mint_run_id();
                if let Some(pending) = s.registry.begin_attach_record(&scope, owner, &run_id) {
                    info!(
                        "attach for chat {:?} found no run; recording the backend's live stream",
                        req.chat_id
                    );
                    return self
                        .run_upstream(session, route, pending, run_id, body, false)
                        .await;
                }
                // Another attach is fetching it: wait for that run to go live.
                wait = max_wait.max(req.wait);
            }
            decision = observer::wait_for_run(&s.registry, &scope, &owner, wait).await;
        }
        match decision {
            Decision::NoContent | Decision::Missing => {
                s.metrics.attach.with_label_values(&["no_content"]).inc();
                debug!("attach chat {:?}: 204", req.chat_id);
                Handled::Json(204, None)
            }
            Decision::Serve { run, start, reset } => {
                if run.observers() >= s.cfg.limits.max_observers_per_run {
                    return Handled::Error(ApiError {
                        status: 429,
                        code: "too_many_observers",
                        message: "this run has as many observers as it may".into(),
                    });
                }
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
}
