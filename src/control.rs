//! Control routes: stop a run, report a chat's run status, and record resolution events.
//!
//! Every lookup is scoped by the caller's owner, so a request about another caller's chat gets
//! exactly the answer an unknown chat gets.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use log::{info, warn};
use pingora_proxy::Session;
use serde_json::{json, Value};

use crate::auth::Auth;
use crate::config::{ChatIdFrom, Route};
use crate::event::classify;
use crate::proxy::{header_value, read_body, Handled, Sidecar};
use crate::request::{self, ApiError};
use crate::run::Run;
use crate::sse::SseEvent;

/// How long a stop waits for the producer before answering 202.
const STOP_WAIT: Duration = Duration::from_secs(2);
/// Longest `cancel_request_id` kept.
const MAX_CANCEL_ID: usize = 128;

/// The answer for a chat with no such run (also what another owner's chat gets).
fn no_run() -> Handled {
    Handled::Error(ApiError {
        status: 404,
        code: "no_run",
        message: "the chat has no such run".into(),
    })
}

fn string_field(
    m: &serde_json::Map<String, Value>,
    name: &str,
    max: usize,
) -> Result<Option<String>, ApiError> {
    match m.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s))
            if !s.is_empty() && s.len() <= max && !s.chars().any(char::is_control) =>
        {
            Ok(Some(s.clone()))
        }
        Some(_) => Err(ApiError::bad(
            "invalid_cancel_request_id",
            format!("{name} must be a string of 1 to {max} bytes"),
        )),
    }
}

/// Waits until `run`'s producer has stopped, or `limit` passes; returns whether it stopped.
async fn stopped(run: &Run, limit: Duration) -> bool {
    let mut rx = run.subscribe();
    let deadline = tokio::time::Instant::now() + limit;
    while run.is_producing() {
        if tokio::time::timeout_at(deadline, rx.changed())
            .await
            .is_err()
        {
            return false;
        }
    }
    true
}

impl Sidecar {
    /// `kind = "stop"`: `{"chat_id", "run_id"?, "cancel_request_id"?}` stops the named run or the
    /// chat's active run by aborting its upstream request.
    pub(crate) async fn stop(&self, session: &mut Session, route: &Route) -> Handled {
        let s = &self.shared;
        let owner = match self.owner(session) {
            Ok(o) => o,
            Err(h) => return h,
        };
        let body = match read_body(session, s.cfg.recorder.max_body_bytes).await {
            Ok(b) => b,
            Err(h) => return h,
        };
        let (chat_id, run_id, cancel_id) = match parse_stop(&route.chat_id, &body) {
            Ok(v) => v,
            Err(e) => return Handled::Error(e),
        };
        let scope = Auth::scope(&owner, &chat_id);
        // A repeated cancel_request_id names the run it stopped the first time.
        let run_id = run_id.or_else(|| {
            cancel_id
                .as_deref()
                .and_then(|c| s.registry.cancelled_run(&scope, &owner, c))
        });
        let run: Option<Arc<Run>> = match &run_id {
            Some(id) => s.registry.find(&scope, &owner, id),
            None => s.registry.current(&scope, &owner),
        };
        let Some(run) = run else { return no_run() };
        if let Some(c) = &cancel_id {
            s.registry.remember_cancel(&scope, c, run.id());
        }
        if run.is_producing() {
            info!("run {}: stop requested", run.id());
            run.request_stop("cancelled");
        }
        if route.forward {
            self.forward_stop(session, body);
        }
        let answer = if stopped(&run, STOP_WAIT).await {
            let persisted = run.end().is_some_and(|e| e.persisted);
            (
                200,
                json!({"run_id": run.id(), "execution_stopped": true, "terminal_persisted": persisted}),
            )
        } else {
            (
                202,
                json!({"run_id": run.id(), "execution_stopped": false, "terminal_persisted": false}),
            )
        };
        Handled::Json(answer.0, Some(answer.1))
    }

    /// Tells the backend too, detached: the client's answer does not wait for it.
    fn forward_stop(&self, session: &Session, body: Bytes) {
        let upstream = self.shared.upstream.clone();
        let metrics = self.shared.metrics.clone();
        let req = session.req_header().clone();
        tokio::spawn(async move {
            match upstream.open(&req, &body, None).await {
                Ok(mut up) => {
                    while let Ok(Some(_)) = up.read_response_body().await {}
                    upstream.release(up).await;
                }
                Err(e) => {
                    metrics.upstream_errors.with_label_values(&[e.kind]).inc();
                    warn!("forwarding a stop to the backend failed: {}", e.message);
                }
            }
        });
    }

    /// `kind = "status"`: the chat's current run, or 204.
    pub(crate) async fn status(&self, session: &mut Session, route: &Route) -> Handled {
        let s = &self.shared;
        let owner = match self.owner(session) {
            Ok(o) => o,
            Err(h) => return h,
        };
        let query = session.req_header().uri.query().map(str::to_string);
        let chat_id = match &route.chat_id {
            ChatIdFrom::Header(h) => header_value(session, h),
            ChatIdFrom::Query(q) | ChatIdFrom::Body(q) => {
                match request::query_param(query.as_deref(), q) {
                    Ok(v) => v,
                    Err(e) => return Handled::Error(e),
                }
            }
        };
        let Some(chat_id) = chat_id else {
            return Handled::Error(ApiError::bad(
                "missing_chat_id",
                "the request has no chat_id",
            ));
        };
        if let Err(e) = request::check_chat_id(&chat_id) {
            return Handled::Error(e);
        }
        let Some(run) = s.registry.current(&Auth::scope(&owner, &chat_id), &owner) else {
            return Handled::Json(204, None);
        };
        let end = run.end();
        let v = json!({
            "run_id": run.id(),
            "status": if end.is_none() { "running" } else { "completed" },
            "seq": run.head(),
            "persisted": end.as_ref().is_some_and(|e| e.persisted),
            "superseded": end.as_ref().is_some_and(|e| e.superseded),
        });
        Handled::Json(200, Some(v))
    }

    /// `kind = "annotate"`: forward, and on a 2xx answer append the request body to the chat's
    /// active run as a `CUSTOM` event named `tether.resolution`.
    pub(crate) async fn annotate(&self, session: &mut Session, route: &Route) -> Handled {
        let s = &self.shared;
        let (owner, body, req) = match self.read_turn(session, route).await {
            Ok(t) => t,
            Err(h) => return h,
        };
        let (status, handled) = self.forward_unrecorded(session, body.clone()).await;
        if !status.is_some_and(|c| (200..300).contains(&c)) {
            return handled;
        }
        let scope = Auth::scope(&owner, &req.chat_id);
        let Some(run) = s
            .registry
            .current(&scope, &owner)
            .filter(|r| r.end().is_none())
        else {
            return handled;
        };
        let mut data = Vec::with_capacity(body.len() + 48);
        data.extend_from_slice(br#"{"type":"CUSTOM","name":"tether.resolution","value":"#);
        data.extend_from_slice(&body);
        data.push(b'}');
        let event = classify(&SseEvent {
            event: None,
            data: Bytes::from(data),
            id: None,
        });
        let appended = run.append(&[event]);
        s.registry.add_bytes(appended.bytes);
        info!("run {}: resolution recorded", run.id());
        handled
    }
}

/// Parses a stop body: chat id, optional run id and cancel request id.
fn parse_stop(
    from: &ChatIdFrom,
    body: &[u8],
) -> Result<(String, Option<String>, Option<String>), ApiError> {
    let m = request::json_object(body)?;
    let field = match from {
        ChatIdFrom::Body(f) => f.as_str(),
        _ => "chat_id",
    };
    let chat_id = match m.get(field) {
        Some(Value::String(c)) => {
            request::check_chat_id(c)?;
            c.clone()
        }
        None | Some(Value::Null) => {
            return Err(ApiError::bad(
                "missing_chat_id",
                format!("the request has no {field}"),
            ))
        }
        Some(_) => {
            return Err(ApiError::bad(
                "invalid_chat_id",
                format!("{field} must be a string"),
            ))
        }
    };
    let run_id = match m.get("run_id") {
        None | Some(Value::Null) => None,
        Some(Value::String(r)) => {
            request::check_run_id(r)?;
            Some(r.clone())
        }
        Some(_) => return Err(ApiError::bad("invalid_run_id", "run_id must be a string")),
    };
    let cancel = string_field(&m, "cancel_request_id", MAX_CANCEL_ID)?;
    Ok((chat_id, run_id, cancel))
}
