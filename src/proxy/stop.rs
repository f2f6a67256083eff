//! Stop routes: stop the run a request names (by the chat, by id or alias, or by the cancel
//! request id of an earlier stop) by aborting its upstream request, optionally tell the backend
//! too, and answer once the producer has stopped (or after a short wait).
//!
//! Every lookup is scoped by the caller's owner, so a request about another caller's chat gets
//! exactly the answer an unknown chat gets.

use std::time::Duration;

use bytes::Bytes;
use log::warn;
use pingora_proxy::Session;
use serde_json::json;

use super::request::{first_key, run_key, with_parts};
use super::session::{no_run, read_body, Handled, Reply};
use super::{Matched, Sidecar};
use crate::chats::StopTarget;
use crate::config::{Answer, Route};
use crate::error::ApiError;
use crate::request::{self, Parts};
use crate::stall::Stall;
use crate::state::run::Run;
use crate::vocab::end::EndReason;

/// How long a stop waits for the producer before answering 202.
const STOP_WAIT: Duration = Duration::from_secs(2);

/// Waits until `run`'s producer has stopped, or `limit` passes; returns whether it stopped.
async fn stopped(run: &Run, limit: Duration) -> bool {
    let mut rx = run.subscribe();
    tokio::time::timeout(limit, rx.wait_for(|_| !run.is_producing()))
        .await
        .is_ok_and(|r| r.is_ok())
}

/// What a stop request names. Without `run` sources or a `cancel_request_id` source, the stop
/// body names a chat's run; otherwise the run is named by id (tether's run id or an alias), or
/// by the cancel id of an earlier stop of the chat.
fn stop_target(route: &Route, parts: &Parts<'_>, body: &[u8]) -> Result<StopTarget, ApiError> {
    if route.run.is_empty() && route.cancel_request_id.is_none() {
        let req = request::stop(&route.chat_id, body, parts)?;
        return Ok(StopTarget::Chat {
            chat: req.chat_id,
            run: req.run_id,
            cancel: req.cancel_request_id,
        });
    }
    // A stop that names its run by path, query or header may have no body at all (the OpenAI
    // SDK's cancel, a DELETE): nothing in it is required.
    let map = match body.is_empty() {
        true => serde_json::Map::new(),
        false => request::control_body(&route.chat_id, body)?,
    };
    let cancel = match &route.cancel_request_id {
        Some(src) => first_key(std::slice::from_ref(src), parts, Some(&map))?,
        None => request::cancel_request_id(map.get("cancel_request_id"))?,
    };
    let chat = request::chat_id(&route.chat_id, parts, Some(&map)).ok();
    let run = run_key(&route.run, parts, Some(&map))?;
    Ok(StopTarget::Named {
        chat,
        run,
        cancel,
        current: route.run.is_empty(),
    })
}

impl Sidecar {
    /// `kind = "stop"`: `{"chat_id", "run_id"?, "cancel_request_id"?}` stops the named run or the
    /// chat's active run by aborting its upstream request.
    pub(crate) async fn stop(&self, session: &mut Session, m: &Matched<'_>) -> Handled {
        let (s, route) = (&self.shared, m.route);
        let owner = s.chats.owner(&session.req_header().headers)?;
        let body = match read_body(session, s).await {
            Ok(b) => b,
            Err(e) => return e.into(),
        };
        let target = with_parts(session, m, |parts| stop_target(route, parts, &body))?;
        let found = s
            .chats
            .stop_target(owner, &target)
            .await
            .ok_or_else(no_run)?;
        s.chats
            .stop(&found, target.cancel(), EndReason::Cancelled)
            .await;
        let run = found.run;
        if route.forward {
            self.forward_stop(session, body);
        }
        let done = stopped(&run, STOP_WAIT).await;
        let persisted = done && run.end().is_some_and(|e| e.persisted);
        let run_id = match (route.answer, target.named()) {
            (Answer::Igraph, Some(named)) => named.clone(),
            _ => run.id().clone(),
        };
        let body = match route.answer {
            Answer::CancelRequested => json!({"cancelRequested": true}),
            _ => {
                json!({"run_id": run_id, "execution_stopped": done, "terminal_persisted": persisted})
            }
        };
        Ok(Reply::Json(if done { 200 } else { 202 }, Some(body)))
    }

    /// Tells the backend too, detached: the client's answer does not wait for it.
    fn forward_stop(&self, session: &Session, body: Bytes) {
        let upstream = self.shared.upstream.clone();
        let metrics = self.shared.metrics.clone();
        let req = session.req_header().clone();
        let Some(slot) = upstream.slot() else {
            warn!("a stop was not forwarded to the backend: every request slot is held");
            return;
        };
        tokio::spawn(async move {
            match upstream.open(&req, &body, None, slot).await {
                Ok(mut up) => {
                    let mut idle = Stall::new(upstream.idle_timeout());
                    while let Ok(Ok(Some(_))) = idle.run(up.next()).await {}
                    upstream.release(up);
                }
                Err(e) => {
                    metrics.upstream_errors.inc(e.kind);
                    warn!("forwarding a stop to the backend failed: {e}");
                }
            }
        });
    }
}
