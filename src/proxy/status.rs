//! Status routes: the run a request names (by id or alias, or the chat's current run), as
//! tether's status object or in the `igraph` answer form; `204` (or `404` in that form) when
//! there is none.
//!
//! tether's status object carries the run's `usage` and `watch` ([`crate::accounting`]).
//!
//! Every lookup is scoped by the caller's owner, so a request about another caller's chat gets
//! exactly the answer an unknown chat gets.

use pingora_proxy::Session;
use serde_json::json;

use super::request::{run_key, with_parts};
use super::session::{no_run, Handled, Reply};
use super::{Matched, Sidecar};
use crate::chats::Name;
use crate::config::Answer;
use crate::request;
use crate::state::run::Run;
use crate::vocab::end::EndReason;

impl Sidecar {
    /// `kind = "status"`: the chat's current run, or 204.
    pub(crate) async fn status(&self, session: &mut Session, m: &Matched<'_>) -> Handled {
        let s = &self.shared;
        let owner = s.chats.owner(&session.req_header().headers)?;
        let name = with_parts(session, m, |parts| match m.route.run.is_empty() {
            true => request::status(&m.route.chat_id, parts).map(|c| Some(Name::Chat(c))),
            false => run_key(&m.route.run, parts, None).map(|id| id.map(Name::Run)),
        })?;
        let run = match &name {
            Some(name) => s.chats.lookup(owner, name).await.map(|f| f.run),
            None => None,
        };
        let named = match name {
            Some(Name::Run(id)) => Some(id),
            _ => None,
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
        let v = with_accounting(v, &run);
        Ok(Reply::Json(200, Some(v)))
    }
}

/// A status object with the run's `usage` (the provider's numbers so far: `null` while it
/// reported none) and `watch` (who reads it). A mirror of a run another replica produces has
/// neither here: both are `null`.
fn with_accounting(mut v: serde_json::Value, run: &Run) -> serde_json::Value {
    let (usage, watch) = match run.origin().is_mirror() {
        true => (serde_json::Value::Null, serde_json::Value::Null),
        false => (json!(run.usage()), json!(run.watch_record())),
    };
    if let Some(obj) = v.as_object_mut() {
        obj.insert("usage".into(), usage);
        obj.insert("watch".into(), watch);
    }
    v
}
