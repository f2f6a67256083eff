//! Resume routes: a client resuming in its own dialect (`docs/dialects.md`). Find the run (by
//! tether's run id, an alias, or the chat's current run), check the resume token, let the
//! dialect place the cursor, and serve the raw record in the upstream's own format, or answer
//! the dialect's status. A request the route's `only_if` does not match is passed through.

use std::sync::Arc;

use bytes::Bytes;
use log::debug;
use pingora_http::ResponseHeader;
use pingora_proxy::Session;
use serde_json::{json, Map, Value};

use super::session::{forward_unrecorded, header_value, read_body, Handled, Reply, SessionSink};
use super::{Matched, Sidecar};
use crate::backend::relayed;
use crate::chats::{Name, Owner};
use crate::config::{DialectKind, Expired, KeySource, OnNothing, Route};
use crate::deliver::replay;
use crate::dialect::{verbatim, Plan, Refusal};
use crate::error::{ApiError, Code};
use crate::metrics::AttachResult;
use crate::request::{self, json_object, Parts, Query};
use crate::state::run::Run;
use crate::state::token;
use crate::vocab::RunId;

/// The first of `sources` the request carries, as text.
pub(crate) fn first_key(
    sources: &[KeySource],
    parts: &Parts<'_>,
    body: Option<&Map<String, Value>>,
) -> Result<Option<String>, ApiError> {
    for src in sources {
        match request::key(src, parts, body, Code::InvalidRunId)? {
            Some(Value::String(s)) if !s.is_empty() => return Ok(Some(s)),
            Some(Value::Number(n)) => return Ok(Some(n.to_string())),
            _ => {}
        }
    }
    Ok(None)
}

/// The run a request names by the first of `sources` it carries: tether's run id or an alias.
pub(crate) fn run_key(
    sources: &[KeySource],
    parts: &Parts<'_>,
    body: Option<&Map<String, Value>>,
) -> Result<Option<RunId>, ApiError> {
    Ok(first_key(sources, parts, body)?.map(RunId::from))
}

/// Who a verbatim stream ([`Sidecar::serve_verbatim`]) is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reader {
    /// A client resuming (or attaching) in this dialect: counted in `tether_attach_total`.
    Resume(DialectKind),
    /// The turn's own requester, or a retry that joins its run, reading the upstream's bytes
    /// from the raw record (ids added or made unique): not an attach, so not counted, as a
    /// protocol-1 requester is not.
    Requester,
}

/// What a resume or status request names: by the route's `run` sources (tether's run id or an
/// alias), else the chat's current run.
pub(crate) fn lookup(
    route: &Route,
    parts: &Parts<'_>,
    body: Option<&Map<String, Value>>,
) -> Result<Name, ApiError> {
    if route.run.is_empty() {
        return Ok(Name::Chat(request::chat_id(&route.chat_id, parts, body)?));
    }
    match run_key(&route.run, parts, body)? {
        Some(id) => Ok(Name::Run(id)),
        None => Err(ApiError::new(
            Code::InvalidRunId,
            "the request names no run",
        )),
    }
}

/// The status answer of a refused resume, and its metric result.
pub(crate) fn refused(
    dialect: DialectKind,
    r: Refusal,
    on_nothing: OnNothing,
) -> (AttachResult, Handled) {
    let not_found = || Err(ApiError::new(Code::NoRun, "no such run to resume"));
    match (r, dialect) {
        (Refusal::Expired(Expired::ReplayUnavailable), _) => (
            AttachResult::Expired,
            Ok(Reply::Json(
                409,
                Some(
                    json!({"code": "REPLAY_UNAVAILABLE", "message": "the events after this cursor are no longer kept"}),
                ),
            )),
        ),
        (Refusal::Expired(Expired::Openai), _) => (
            AttachResult::Expired,
            Ok(Reply::Json(
                400,
                Some(
                    json!({"error": {"type": "invalid_request_error", "code": "cursor_expired", "param": "starting_after", "message": "The events after this cursor are no longer available to stream."}}),
                ),
            )),
        ),
        (Refusal::Expired(_), _) => (AttachResult::Expired, not_found()),
        (
            Refusal::Nothing | Refusal::Unknown,
            DialectKind::FrameIndex | DialectKind::JsonCursor,
        ) => (AttachResult::NotFound, not_found()),
        (Refusal::Nothing | Refusal::Unknown, _) => match on_nothing {
            OnNothing::NoContent => (AttachResult::NoContent, Ok(Reply::Json(204, None))),
            OnNothing::EmptyStream => (AttachResult::EndOnly, Ok(Reply::EmptyStream)),
        },
    }
}

impl Sidecar {
    /// `kind = "resume"`: serve a run in the client's own dialect.
    pub(crate) async fn resume(&self, session: &mut Session, m: &Matched<'_>) -> Handled {
        let (s, route) = (&self.shared, m.route);
        let Some(resume) = &route.resume else {
            return Err(ApiError::new(Code::InvalidBody, "route has no dialect"));
        };
        if resume.dialect == DialectKind::DurableStreams {
            return self.durable(session, m).await;
        }
        let body = match session.req_header().method == http::Method::GET {
            true => Bytes::new(),
            false => match read_body(session, s).await {
                Ok(b) => b,
                Err(e) => return e.into(),
            },
        };
        if let Some(cond) = &resume.only_if {
            let q = Query::parse(session.req_header().uri.query());
            if q.get(&cond.name)?.as_deref() != Some(cond.value.as_str()) {
                return Ok(forward_unrecorded(s, session, body).await?.1);
            }
        }
        let owner = s.chats.owner(&session.req_header().headers)?;
        let map = match body.is_empty() {
            true => None,
            false => Some(json_object(&body)?),
        };
        let (name, tok, cursor) = {
            let header = |h: &str| header_value(session, h);
            let parts = Parts {
                captures: &m.captures,
                query: session.req_header().uri.query(),
                header: &header,
            };
            let name = lookup(route, &parts, map.as_ref())?;
            let key = |src: &Option<KeySource>| match src {
                Some(src) => first_key(std::slice::from_ref(src), &parts, map.as_ref()),
                None => Ok(None),
            };
            (name, key(&resume.token), key(&resume.cursor))
        };
        let run = s.chats.lookup(owner, &name).await.map(|f| f.run);
        let named = match name {
            Name::Run(id) => Some(id),
            Name::Chat(_) => None,
        };
        let run = match (&resume.token, &named, run) {
            (Some(_), Some(name), Some(run)) => {
                let ok = tok?
                    .is_some_and(|t| token::verify(&s.cfg.secret, name, &owner, &t, token::now()));
                ok.then_some(run)
            }
            (Some(_), _, _) => None,
            (None, _, run) => run,
        };
        let cursor = cursor?;
        let dialect = verbatim(resume);
        let kind = dialect.kind();
        let Some(run) = run else {
            // A run named by id that tether does not know is 404 for every dialect but
            // from_start; a chat without a run gets the dialect's nothing-to-resume answer.
            let r = match (named.is_some(), kind) {
                (true, DialectKind::LastEventId) => (
                    AttachResult::NotFound,
                    Err(ApiError::new(Code::NoRun, "no such run to resume")),
                ),
                _ => refused(kind, Refusal::Nothing, resume.on_nothing),
            };
            s.metrics.attach.inc(kind, r.0);
            debug!("resume ({}): no run", kind.as_str());
            return r.1;
        };
        let plan = match dialect.plan(run.id(), run.journal(), cursor.as_deref())? {
            Ok(plan) => plan,
            Err(Refusal::Unknown) => match resume.expired {
                Expired::FromStart => Plan::Render,
                e => {
                    let r = refused(kind, Refusal::Expired(e), resume.on_nothing);
                    s.metrics.attach.inc(kind, r.0);
                    return r.1;
                }
            },
            Err(refusal) => {
                let r = refused(kind, refusal, resume.on_nothing);
                s.metrics.attach.inc(kind, r.0);
                return r.1;
            }
        };
        self.serve_verbatim(session, &run, plan, Reader::Resume(kind), false, &owner)
            .await
    }

    /// Writes the run's recorded response header (plus resume-token headers) and serves the
    /// raw record from `plan` until the run ends; a resume is counted in `tether_attach_total`.
    pub(crate) async fn serve_verbatim(
        &self,
        session: &mut Session,
        run: &Arc<Run>,
        plan: Plan,
        reader: Reader,
        inject_ids: bool,
        owner: &Owner,
    ) -> Handled {
        let s = &self.shared;
        self.room_for_reader(run)?;
        if let Reader::Resume(kind) = reader {
            let result = match plan {
                Plan::Render => AttachResult::Snapshot,
                Plan::From(_) => AttachResult::Replay,
                Plan::Empty => AttachResult::EndOnly,
            };
            s.metrics.attach.inc(kind, result);
            debug!(
                "resume ({}) of run {}: {}",
                kind.as_str(),
                run.id(),
                result.as_str()
            );
        }
        let mut header = match run.header() {
            Some(h) => relayed((*h).clone(), true),
            None => sse_header()?,
        };
        self.add_token_headers(&mut header, run, owner);
        s.cors.own(session.req_header(), &mut header);
        if session
            .write_response_header(Box::new(header), false)
            .await
            .is_err()
        {
            return Ok(Reply::Abort);
        }
        let _tracked = s.observers.token();
        let opts = replay::Options {
            heartbeat: s.cfg.server.heartbeat.0,
            inject_ids,
        };
        let mut sink = SessionSink::new(session, s.cfg.server.write_timeout.0);
        let outcome = replay::serve(&mut sink, run, plan, &opts, &s.stop).await;
        match outcome {
            crate::deliver::observer::Exit::Ended if sink.finish().await => Ok(Reply::Done),
            _ => Ok(Reply::Abort),
        }
    }

    /// `429 too_many_observers` when the run already has `max_observers_per_run` readers.
    pub(crate) fn room_for_reader(&self, run: &Run) -> Result<(), ApiError> {
        match run.observers() >= self.shared.cfg.limits.max_observers_per_run {
            true => Err(ApiError::new(
                Code::TooManyObservers,
                "this run has as many readers as it may",
            )),
            false => Ok(()),
        }
    }

    /// Adds the run id and a fresh resume token, when the run's record route hands them out.
    pub(crate) fn add_token_headers(&self, header: &mut ResponseHeader, run: &Run, owner: &Owner) {
        let Some(tokens) = run.tokens() else {
            return;
        };
        let name = run.alias().unwrap_or_else(|| run.id().clone());
        if let Some(h) = &tokens.run_id_header {
            let _ = header.insert_header(h.clone(), name.as_str());
        }
        if let Some(h) = &tokens.token_header {
            let expiry = token::now() + tokens.ttl.as_secs();
            let t = token::mint(&self.shared.cfg.secret, &name, owner, expiry);
            let _ = header.insert_header(h.clone(), t);
        }
    }
}

/// A plain SSE response header, for a run whose upstream header is unknown (and a Durable
/// Streams SSE read).
pub(super) fn sse_header() -> Result<ResponseHeader, ApiError> {
    let build = || -> pingora_core::Result<ResponseHeader> {
        let mut h = ResponseHeader::build(200, Some(3))?;
        h.insert_header("content-type", "text/event-stream")?;
        h.insert_header("cache-control", "no-cache")?;
        h.insert_header("transfer-encoding", "chunked")?;
        Ok(h)
    };
    build().map_err(|e| ApiError::new(Code::InvalidBody, e.to_string()))
}
