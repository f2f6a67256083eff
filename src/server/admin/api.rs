//! The admin API on the admin listener, on only with an admin token: the runs held here
//! (`GET /admin/runs`, `GET /admin/runs/{run_id}`), an operator's stop
//! (`POST /admin/runs/{run_id}/stop`) and erasing one owner (`DELETE /admin/owners/{subject}`).
//!
//! Every request needs `Authorization: Bearer <token>`, checked before the route is looked at,
//! so a wrong or missing token gets the same `401` on every route. Answers are JSON; errors
//! have the proxy's codes.

use std::time::Duration;

use bytes::Bytes;
use http::Method;
use log::warn;
use serde_json::{json, Map, Value};

use crate::chats::Chats;
use crate::config::AdminToken;
use crate::error::{ApiError, Code};
use crate::ingest::Ending;
use crate::state::auth::Auth;
use crate::state::registry::Held;
use crate::vocab::end::{End, EndReason};
use crate::vocab::RunId;

/// How many runs a list answers by default, and at most.
const DEFAULT_LIMIT: usize = 100;
const MAX_LIMIT: usize = 1_000;
/// How long an erasure waits for each of the owner's active runs to stop.
const ERASE_WAIT: Duration = Duration::from_secs(5);

/// An admin request: what the admin listener read of it.
pub struct AdminRequest<'a> {
    /// The method.
    pub method: &'a Method,
    /// The path (starting with `/admin/`).
    pub path: &'a str,
    /// The query string, if any.
    pub query: Option<&'a str>,
    /// The `Authorization` header, if exactly one was sent.
    pub authorization: Option<&'a [u8]>,
}

/// An admin answer: a status and a JSON body.
pub struct AdminAnswer {
    /// The HTTP status.
    pub status: u16,
    /// The JSON body.
    pub body: Bytes,
}

impl From<ApiError> for AdminAnswer {
    fn from(e: ApiError) -> Self {
        AdminAnswer {
            status: e.status(),
            body: e.body(),
        }
    }
}

fn ok(v: Value) -> AdminAnswer {
    AdminAnswer {
        status: 200,
        body: Bytes::from(v.to_string()),
    }
}

/// Answers an admin request (`token` is the configured admin token).
pub async fn serve(chats: &Chats, token: &AdminToken, req: &AdminRequest<'_>) -> AdminAnswer {
    if !token.accepts(req.authorization) {
        return ApiError::new(
            Code::Unauthenticated,
            "the admin API needs Authorization: Bearer <admin token>",
        )
        .into();
    }
    let rest = req.path.trim_start_matches("/admin/");
    let parts: Vec<&str> = rest.split('/').collect();
    let answer = match (req.method, parts.as_slice()) {
        (&Method::GET, ["runs"]) => list(chats, req.query),
        (&Method::GET, ["runs", id]) => one(chats, id),
        (&Method::POST, ["runs", id, "stop"]) => stop(chats, id).await,
        (&Method::DELETE, ["owners", subject]) => erase(chats, subject).await,
        _ => Err(ApiError::new(
            Code::NotFound,
            "the admin API serves GET /admin/runs, GET /admin/runs/{run_id}, \
             POST /admin/runs/{run_id}/stop and DELETE /admin/owners/{subject}",
        )),
    };
    answer.unwrap_or_else(AdminAnswer::from)
}

/// Which runs a list asks for.
#[derive(Debug, Default)]
struct Filter {
    active: Option<bool>,
    owner: Option<crate::chats::Owner>,
    route: Option<String>,
    limit: usize,
    after: Option<RunId>,
}

fn bad(message: impl Into<String>) -> ApiError {
    ApiError::new(Code::InvalidQuery, message)
}

fn filter(chats: &Chats, query: Option<&str>) -> Result<Filter, ApiError> {
    let mut f = Filter {
        limit: DEFAULT_LIMIT,
        ..Filter::default()
    };
    for (k, v) in form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
        match &*k {
            "state" => {
                f.active = Some(match &*v {
                    "active" => true,
                    "completed" => false,
                    _ => return Err(bad("state must be active or completed")),
                })
            }
            "owner" => {
                let o = chats
                    .owner_of(&v)
                    .ok_or_else(|| bad("owner names no one: [auth] subject is none"))?;
                f.owner = Some(o);
            }
            "route" => f.route = Some(v.into_owned()),
            "limit" => {
                f.limit = v
                    .parse()
                    .ok()
                    .filter(|n| (1..=MAX_LIMIT).contains(n))
                    .ok_or_else(|| bad(format!("limit must be 1 to {MAX_LIMIT}")))?
            }
            "cursor" => f.after = Some(cursor(&v)?),
            _ => return Err(bad(format!("unknown parameter {k:?}"))),
        }
    }
    Ok(f)
}

/// The run id an opaque cursor carries.
fn cursor(text: &str) -> Result<RunId, ApiError> {
    use base64::Engine;
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(text)
        .ok()
        .and_then(|b| String::from_utf8(b).ok())
        .filter(|s| !s.is_empty())
        .ok_or_else(|| bad("cursor is not one this API gave"))?;
    Ok(RunId::from(raw))
}

fn cursor_of(id: &RunId) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(id.as_str())
}

fn list(chats: &Chats, query: Option<&str>) -> Result<AdminAnswer, ApiError> {
    let f = filter(chats, query)?;
    let mut runs: Vec<Held> = chats
        .held()
        .into_iter()
        .filter(|h| f.active.is_none_or(|a| a == h.run.end().is_none()))
        .filter(|h| f.owner.is_none_or(|o| h.owner.is(&o)))
        .filter(|h| {
            f.route
                .as_deref()
                .is_none_or(|r| h.run.labels().route() == Some(r))
        })
        .filter(|h| f.after.as_ref().is_none_or(|a| h.run.id() > a))
        .collect();
    runs.sort_by(|a, b| a.run.id().cmp(b.run.id()));
    let more = runs.len() > f.limit;
    runs.truncate(f.limit);
    let next = match (more, runs.last()) {
        (true, Some(last)) => Value::String(cursor_of(last.run.id())),
        _ => Value::Null,
    };
    let items: Vec<Value> = runs.iter().map(|h| Value::Object(view(h))).collect();
    Ok(ok(json!({ "runs": items, "next_cursor": next })))
}

fn run_id(text: &str) -> Result<RunId, ApiError> {
    let decoded = percent_encoding::percent_decode_str(text)
        .decode_utf8()
        .map_err(|_| ApiError::new(Code::InvalidRunId, "the run id is not UTF-8"))?;
    Ok(RunId::from(decoded.into_owned()))
}

fn no_run() -> ApiError {
    ApiError::new(Code::NoRun, "no run with this id is held here")
}

fn one(chats: &Chats, id: &str) -> Result<AdminAnswer, ApiError> {
    let held = chats.held_by_id(&run_id(id)?).ok_or_else(no_run)?;
    let mut v = view(&held);
    v.insert("recorded_bytes".into(), json!(held.run.bytes()));
    v.insert("window".into(), json!(held.run.labels().window()));
    v.insert("mirror".into(), json!(held.run.origin().is_mirror()));
    Ok(ok(Value::Object(v)))
}

async fn stop(chats: &Chats, id: &str) -> Result<AdminAnswer, ApiError> {
    let held = chats.held_by_id(&run_id(id)?).ok_or_else(no_run)?;
    let was_active = held.run.is_producing();
    chats.stop_held(&held).await;
    let mut v = view(&held);
    v.insert("stop_requested".into(), json!(was_active));
    Ok(ok(Value::Object(v)))
}

async fn erase(chats: &Chats, subject: &str) -> Result<AdminAnswer, ApiError> {
    let subject = percent_encoding::percent_decode_str(subject)
        .decode_utf8()
        .map_err(|_| bad("the subject is not UTF-8"))?;
    let owner = chats.owner_of(&subject).ok_or_else(|| {
        ApiError::new(
            Code::NotFound,
            "owners are not told apart: [auth] subject is none",
        )
    })?;
    let erased = chats.erase(owner, ERASE_WAIT).await;
    warn!(
        "admin: erased an owner's data: {} chats, {} runs, {} recorded bytes",
        erased.chats, erased.runs, erased.bytes
    );
    Ok(ok(json!({
        "erased": { "chats": erased.chats, "runs": erased.runs, "bytes": erased.bytes }
    })))
}

/// How a run ended, as `tether_runs_finished_total{outcome}` names it: the producer's rule,
/// told how the read ended by the end's reason (a stop's reason is the stop's).
fn outcome(end: &End) -> &'static str {
    let ending = match end.reason {
        Some(r @ EndReason::Cancelled) => Ending::Stopped(r),
        _ => Ending::Clean,
    };
    crate::ingest::outcome(end, ending).as_str()
}

/// The fields every answer shows of a run.
fn view(h: &Held) -> Map<String, Value> {
    let run = &h.run;
    let labels = run.labels();
    let end = run.end();
    let ended_at = run
        .finished_at()
        .map(|t| labels.at_ms(t.saturating_duration_since(run.started())));
    let mut v = Map::new();
    v.insert("run_id".into(), json!(run.id().as_str()));
    v.insert("chat_id".into(), json!(Auth::chat_of(&h.owner, &h.scope)));
    v.insert("owner".into(), json!(h.owner.hex()));
    v.insert("route".into(), json!(labels.route()));
    v.insert("format".into(), json!(labels.format().map(|f| f.as_str())));
    let state = if end.is_none() { "active" } else { "completed" };
    v.insert("state".into(), json!(state));
    v.insert("head_seq".into(), json!(run.head()));
    v.insert("observers".into(), json!(run.observers()));
    v.insert("started_at_ms".into(), json!(labels.started_at_ms()));
    v.insert("ended_at_ms".into(), json!(ended_at));
    v.insert("outcome".into(), json!(end.as_ref().map(outcome)));
    v.insert("persisted".into(), json!(end.as_ref().map(|e| e.persisted)));
    let reason = end.as_ref().and_then(|e| e.reason).map(|r| r.as_str());
    v.insert("reason".into(), json!(reason));
    // The accounting figures, as the status route shows them: a mirror's are the producing
    // replica's to tell.
    let (usage, watch) = match run.origin().is_mirror() {
        true => (Value::Null, Value::Null),
        false => (json!(run.usage()), json!(run.watch_record())),
    };
    v.insert("usage".into(), usage);
    v.insert("watch".into(), watch);
    v
}
