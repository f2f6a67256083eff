//! The admin API on the admin listener, on only with an admin token: the runs held here and,
//! with a shared journal, every replica's (`GET /admin/runs`, `GET /admin/runs/{run_id}`,
//! [`super::rows`]), an operator's stop
//! (`POST /admin/runs/{run_id}/stop`) and erasing one owner (`DELETE /admin/owners/{subject}`).
//!
//! Every request needs `Authorization: Bearer <token>`, checked before the route is looked at,
//! so a wrong or missing token gets the same `401` on every route. Answers are JSON; errors
//! have the proxy's codes.

use std::collections::HashSet;
use std::time::Duration;

use bytes::Bytes;
use http::Method;
use log::warn;
use serde_json::{json, Value};

use super::rows::Row;
use crate::chats::Chats;
use crate::config::AdminToken;
use crate::error::{ApiError, Code};
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
        (&Method::GET, ["runs"]) => list(chats, req.query).await,
        (&Method::GET, ["runs", id]) => one(chats, id).await,
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

/// The runs a list shows: every run held here and, with a shared journal, every run it indexes
/// that is not held here, once each.
async fn rows(chats: &Chats, owner: Option<crate::chats::Owner>) -> Vec<Row> {
    let mut rows: Vec<Row> = chats.held().into_iter().map(Row::Here).collect();
    let mut seen: HashSet<RunId> = rows.iter().map(|r| r.id().clone()).collect();
    for r in chats.indexed(owner).await {
        if seen.insert(r.run.run.clone()) {
            rows.push(Row::There(r));
        }
    }
    rows
}

async fn list(chats: &Chats, query: Option<&str>) -> Result<AdminAnswer, ApiError> {
    let f = filter(chats, query)?;
    let mut runs: Vec<Row> = rows(chats, f.owner)
        .await
        .into_iter()
        .filter(|r| f.active.is_none_or(|a| a == r.is_active()))
        .filter(|r| f.owner.is_none_or(|o| r.owner().is(&o)))
        .filter(|r| {
            f.route
                .as_deref()
                .is_none_or(|want| r.route() == Some(want))
        })
        .filter(|r| f.after.as_ref().is_none_or(|a| r.id() > a))
        .collect();
    runs.sort_by(|a, b| a.id().cmp(b.id()));
    let more = runs.len() > f.limit;
    runs.truncate(f.limit);
    let next = match (more, runs.last()) {
        (true, Some(last)) => Value::String(cursor_of(last.id())),
        _ => Value::Null,
    };
    let items: Vec<Value> = runs.iter().map(|r| Value::Object(r.view())).collect();
    Ok(ok(json!({ "runs": items, "next_cursor": next })))
}

fn run_id(text: &str) -> Result<RunId, ApiError> {
    let decoded = percent_encoding::percent_decode_str(text)
        .decode_utf8()
        .map_err(|_| ApiError::new(Code::InvalidRunId, "the run id is not UTF-8"))?;
    Ok(RunId::from(decoded.into_owned()))
}

fn no_run() -> ApiError {
    ApiError::new(
        Code::NoRun,
        "no run with this id is held here or in the shared journal",
    )
}

/// The run `id` names: held here, else in the shared journal.
async fn find(chats: &Chats, id: &RunId) -> Result<Row, ApiError> {
    if let Some(h) = chats.held_by_id(id) {
        return Ok(Row::Here(h));
    }
    chats
        .indexed_run(id)
        .await
        .map(Row::There)
        .ok_or_else(no_run)
}

async fn one(chats: &Chats, id: &str) -> Result<AdminAnswer, ApiError> {
    let row = find(chats, &run_id(id)?).await?;
    let mut v = row.view();
    let (bytes, window, mirror) = match &row {
        Row::Here(h) => (
            json!(h.run.bytes()),
            json!(h.run.labels().window()),
            h.run.origin().is_mirror(),
        ),
        Row::There(r) => (Value::Null, json!(r.run.window), false),
    };
    v.insert("recorded_bytes".into(), bytes);
    v.insert("window".into(), window);
    v.insert("mirror".into(), json!(mirror));
    Ok(ok(Value::Object(v)))
}

async fn stop(chats: &Chats, id: &str) -> Result<AdminAnswer, ApiError> {
    let row = find(chats, &run_id(id)?).await?;
    let was_active = match &row {
        Row::Here(h) => {
            let producing = h.run.is_producing();
            chats.stop_held(h).await;
            producing
        }
        Row::There(r) => chats.stop_indexed(r).await,
    };
    let mut v = row.view();
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
        "admin: erased an owner's data: {} chats, {} runs, {} recorded bytes, {} shared-journal keys",
        erased.chats, erased.runs, erased.bytes, erased.keys
    );
    Ok(ok(json!({
        "erased": {
            "chats": erased.chats,
            "runs": erased.runs,
            "bytes": erased.bytes,
            "journal_keys": erased.keys,
        }
    })))
}
