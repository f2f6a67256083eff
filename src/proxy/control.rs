//! Control routes: stop a run, report a chat's run status, and record resolution events.
//!
//! Every lookup is scoped by the caller's owner, so a request about another caller's chat gets
//! exactly the answer an unknown chat gets.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use log::{info, warn};
use pingora_proxy::Session;
use serde_json::json;

use super::resume::{first_key, run_key, Lookup};
use super::session::{forward_unrecorded, header_value, read_body, Handled, Reply};
use super::{Matched, Sidecar};
use crate::config::Answer;
use crate::error::{ApiError, Code};
use crate::record::format::{agui::Agui, Format};
use crate::record::sse::SseEvent;
use crate::request::{self, Parts};
use crate::stall::Stall;
use crate::state::auth::Auth;
use crate::state::run::Run;
use crate::vocab::end::EndReason;
use crate::vocab::{RunId, Scope};

/// What a stop names: the run, the id the client named it by, the chat's scope when known, and
/// the cancel request id.
type Target = (Arc<Run>, Option<RunId>, Option<Scope>, Option<String>);

/// How long a stop waits for the producer before answering 202.
const STOP_WAIT: Duration = Duration::from_secs(2);

/// The answer for a chat with no such run (also what another owner's chat gets).
fn no_run() -> ApiError {
    ApiError::new(Code::NoRun, "the chat has no such run")
}

/// Waits until `run`'s producer has stopped, or `limit` passes; returns whether it stopped.
async fn stopped(run: &Run, limit: Duration) -> bool {
    let mut rx = run.subscribe();
    tokio::time::timeout(limit, rx.wait_for(|_| !run.is_producing()))
        .await
        .is_ok_and(|r| r.is_ok())
}

impl Sidecar {
    /// `kind = "stop"`: `{"chat_id", "run_id"?, "cancel_request_id"?}` stops the named run or the
    /// chat's active run by aborting its upstream request.
    pub(crate) async fn stop(&self, session: &mut Session, m: &Matched<'_>) -> Handled {
        let (s, route) = (&self.shared, m.route);
        let owner = self.owner(session)?;
        let body = match read_body(session, s).await {
            Ok(b) => b,
            Err(e) => return e.into(),
        };
        if s.journal.is_some() {
            let lookup = {
                let header = |h: &str| header_value(session, h);
                let parts = Parts {
                    captures: &m.captures,
                    query: session.req_header().uri.query(),
                    header: &header,
                };
                self.stop_lookup(route, &parts, &body, &owner)
            };
            if let Some(l) = lookup {
                self.sync_lookup(&l, &owner).await;
            }
        }
        let (run, named, scope, cancel_id) = {
            let header = |h: &str| header_value(session, h);
            let parts = Parts {
                captures: &m.captures,
                query: session.req_header().uri.query(),
                header: &header,
            };
            if route.run.is_empty() && route.cancel_request_id.is_none() {
                let req = request::stop(&route.chat_id, &body, &parts)?;
                let scope = Auth::scope(&owner, &req.chat_id);
                // A repeated cancel_request_id names the run it stopped the first time.
                let run_id = req.run_id.or_else(|| {
                    req.cancel_request_id
                        .as_deref()
                        .and_then(|c| s.registry.cancelled_run(&scope, &owner, c))
                });
                let run: Option<Arc<Run>> = match &run_id {
                    Some(id) => s.registry.find(&scope, &owner, id),
                    None => s.registry.current(&scope, &owner),
                };
                (
                    run.ok_or_else(no_run)?,
                    None,
                    Some(scope),
                    req.cancel_request_id,
                )
            } else {
                self.stop_target(route, &parts, &body, &owner)?
            }
        };
        if let (Some(c), Some(scope)) = (&cancel_id, &scope) {
            s.registry.remember_cancel(scope, c, run.id());
        }
        if run.is_producing() {
            info!("run {}: stop requested", run.id());
            let remote = match (&s.journal, &scope) {
                (Some(j), Some(sc)) => j.stop_remote(&run, sc, EndReason::Cancelled).await,
                _ => false,
            };
            if !remote {
                run.request_stop(EndReason::Cancelled);
            }
        }
        if route.forward {
            self.forward_stop(session, body);
        }
        let done = stopped(&run, STOP_WAIT).await;
        let persisted = done && run.end().is_some_and(|e| e.persisted);
        let run_id = match route.answer {
            Answer::Igraph => named.unwrap_or_else(|| run.id().clone()),
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

    /// The run a stop with `run` sources or a `cancel_request_id` source names: by id (tether's
    /// run id or an alias; never a later run of the chat), or the run an earlier stop with the
    /// same cancel id stopped. Returns the run, the id the client named, the chat's scope when
    /// known, and the cancel id.
    fn stop_target(
        &self,
        route: &crate::config::Route,
        parts: &Parts<'_>,
        body: &[u8],
        owner: &crate::state::auth::Owner,
    ) -> Result<Target, ApiError> {
        let reg = &self.shared.registry;
        // A stop that names its run by path, query or header may have no body at all (the
        // OpenAI SDK's cancel, a DELETE): nothing in it is required.
        let map = match body.is_empty() {
            true => serde_json::Map::new(),
            false => request::control_body(&route.chat_id, body)?,
        };
        let cancel_id = match &route.cancel_request_id {
            Some(src) => first_key(std::slice::from_ref(src), parts, Some(&map))?,
            None => request::cancel_request_id(map.get("cancel_request_id"))?,
        };
        let scope = request::chat_id(&route.chat_id, parts, Some(&map))
            .ok()
            .map(|c| Auth::scope(owner, &c));
        let named = run_key(&route.run, parts, Some(&map))?;
        if let Some(id) = &named {
            if let Some((chat, run)) = reg.by_id(owner, id) {
                return Ok((run, named.clone(), Some(chat), cancel_id));
            }
        }
        let earlier = match (&cancel_id, &scope) {
            (Some(c), Some(scope)) => reg
                .cancelled_run(scope, owner, c)
                .and_then(|id| reg.find(scope, owner, &id)),
            _ => None,
        };
        match (earlier, &named, &scope) {
            (Some(run), _, _) => Ok((run, named, scope, cancel_id)),
            // Without a named run, the chat's current run (route.run empty).
            (None, None, Some(sc)) if route.run.is_empty() => {
                let run = reg.current(sc, owner).ok_or_else(no_run)?;
                Ok((run, None, scope, cancel_id))
            }
            _ => Err(no_run()),
        }
    }

    /// What a stop names, for the shared journal's lookup (`None` when the request is
    /// malformed: the registry lookup answers that).
    fn stop_lookup(
        &self,
        route: &crate::config::Route,
        parts: &Parts<'_>,
        body: &[u8],
        owner: &crate::state::auth::Owner,
    ) -> Option<Lookup> {
        if route.run.is_empty() && route.cancel_request_id.is_none() {
            let req = request::stop(&route.chat_id, body, parts).ok()?;
            return Some(Lookup::Chat(Auth::scope(owner, &req.chat_id), req.run_id));
        }
        let map = request::control_body(&route.chat_id, body).ok()?;
        if let Ok(Some(id)) = run_key(&route.run, parts, Some(&map)) {
            return Some(Lookup::Id(id));
        }
        let chat = request::chat_id(&route.chat_id, parts, Some(&map)).ok()?;
        Some(Lookup::Chat(Auth::scope(owner, &chat), None))
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

    /// `kind = "status"`: the chat's current run, or 204.
    pub(crate) async fn status(&self, session: &mut Session, m: &Matched<'_>) -> Handled {
        let s = &self.shared;
        let owner = self.owner(session)?;
        if s.journal.is_some() {
            let lookup = {
                let header = |h: &str| header_value(session, h);
                let parts = Parts {
                    captures: &m.captures,
                    query: session.req_header().uri.query(),
                    header: &header,
                };
                match m.route.run.is_empty() {
                    true => request::status(&m.route.chat_id, &parts)
                        .ok()
                        .map(|c| Lookup::Chat(Auth::scope(&owner, &c), None)),
                    false => run_key(&m.route.run, &parts, None)
                        .ok()
                        .flatten()
                        .map(Lookup::Id),
                }
            };
            if let Some(l) = lookup {
                self.sync_lookup(&l, &owner).await;
            }
        }
        let header = |h: &str| header_value(session, h);
        let parts = Parts {
            captures: &m.captures,
            query: session.req_header().uri.query(),
            header: &header,
        };
        let (run, named) = match m.route.run.is_empty() {
            true => {
                let chat_id = request::status(&m.route.chat_id, &parts)?;
                (
                    s.registry.current(&Auth::scope(&owner, &chat_id), &owner),
                    None,
                )
            }
            false => {
                let named = run_key(&m.route.run, &parts, None)?;
                let run = named
                    .as_ref()
                    .and_then(|id| s.registry.by_id(&owner, id))
                    .map(|(_, r)| r);
                (run, named)
            }
        };
        let Some(run) = run else {
            return match m.route.answer {
                Answer::Igraph => Err(no_run()),
                _ => Ok(Reply::Json(204, None)),
            };
        };
        let end = run.end();
        if m.route.answer == Answer::Igraph {
            let stopped = !run.is_producing();
            let persisted = end.as_ref().is_some_and(|e| e.persisted);
            let v = json!({
                "run_id": named.unwrap_or_else(|| run.id().clone()),
                "status": match (&end, stopped) {
                    (None, _) | (Some(_), false) => "running",
                    (Some(e), true) if e.persisted => "completed",
                    (Some(e), true) if e.reason == Some(EndReason::Cancelled) => "cancelled",
                    (Some(_), true) => "failed",
                },
                "execution_stopped": stopped,
                "terminal_persisted": persisted,
                "can_send": stopped,
            });
            return Ok(Reply::Json(200, Some(v)));
        }
        let v = json!({
            "run_id": run.id(),
            "status": if end.is_none() { "running" } else { "completed" },
            "seq": run.head(),
            "persisted": end.as_ref().is_some_and(|e| e.persisted),
            "superseded": end.as_ref().is_some_and(|e| e.superseded),
        });
        Ok(Reply::Json(200, Some(v)))
    }

    /// `kind = "annotate"`: forward, and on a 2xx answer append the request body (which must be
    /// JSON) to the chat's active run as a `CUSTOM` event named `tether.resolution`.
    pub(crate) async fn annotate(&self, session: &mut Session, m: &Matched<'_>) -> Handled {
        let s = &self.shared;
        let (owner, body, req) = match self.read_turn(session, m).await {
            Ok(t) => t,
            Err(h) => return h,
        };
        let event = request::resolution(&body)?;
        let (status, reply) = forward_unrecorded(s, session, body).await?;
        if !(200..300).contains(&status) {
            return Ok(reply);
        }
        let scope = Auth::scope(&owner, &req.chat_id);
        let Some(run) = s
            .registry
            .current(&scope, &owner)
            .filter(|r| r.end().is_none())
        else {
            return Ok(reply);
        };
        let event = Agui.classify(&SseEvent {
            event: None,
            data: Bytes::from(event),
            id: None,
        });
        let appended = run.append(&[event]);
        s.registry.add_bytes(appended.bytes);
        info!("run {}: resolution recorded", run.id());
        Ok(reply)
    }
}
