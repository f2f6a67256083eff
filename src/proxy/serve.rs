//! Serving a run to a reader, for every route that does: a protocol-1 observer ([`observe`],
//! after [`write_sse_header`]), a verbatim reader of the raw record ([`serve_verbatim`], with
//! the run's resume-token headers), the room a run has for one more reader, and a refused
//! resume's answer in its dialect ([`refused`]).

use std::future::Future;
use std::sync::Arc;

use log::debug;
use pingora_core::Result;
use pingora_http::ResponseHeader;
use pingora_proxy::Session;
use serde_json::json;

use super::cors::Cors;
use super::session::{Handled, Reply, SessionSink};
use super::shared::Shared;
use crate::accounting::Join;
use crate::backend::relayed;
use crate::chats::head::{tokens, upstream_head};
use crate::chats::Owner;
use crate::config::{DialectKind, Expired, OnNothing};
use crate::deliver::observer::{self, Exit};
use crate::deliver::replay;
use crate::dialect::{Plan, Refusal};
use crate::error::{ApiError, Code};
use crate::metrics::AttachResult;
use crate::producer::Producing;
use crate::state::attach_policy::Start;
use crate::state::run::{ObserverGuard, Run};
use crate::state::token;
use crate::vocab::RunId;

/// Who a verbatim stream ([`serve_verbatim`]) is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reader {
    /// A client resuming (or attaching) in this dialect: counted in `tether_attach_total`.
    Resume(DialectKind),
    /// The turn's own requester, or a retry that joins its run, reading the upstream's bytes
    /// from the raw record (ids added or made unique): not an attach, so not counted, as a
    /// protocol-1 requester is not.
    Requester,
}

/// A verbatim read of a run: where it starts, who reads, and whether ids are added.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Verbatim {
    /// Where the read starts.
    pub(crate) plan: Plan,
    /// Who reads.
    pub(crate) reader: Reader,
    /// Add ids to frames without one (`ids = "inject"`).
    pub(crate) inject_ids: bool,
}

/// Starts a protocol-1 stream, with `cors`'s headers; false when the client is gone.
pub(crate) async fn write_sse_header(session: &mut Session, cors: &Cors, run_id: &RunId) -> bool {
    let header = || -> Result<ResponseHeader> {
        // Kept by Pingora for the whole stream: no case map (the names are lower case anyway),
        // and room for the `date` and `connection` headers Pingora adds.
        let mut h = ResponseHeader::build_no_case(200, Some(7))?;
        h.insert_header("content-type", "text/event-stream")?;
        h.insert_header("cache-control", "no-cache")?;
        h.insert_header("transfer-encoding", "chunked")?;
        h.insert_header("x-accel-buffering", "no")?;
        h.insert_header("x-tether-run-id", run_id.as_str())?;
        Ok(h)
    };
    match header() {
        Ok(mut h) => {
            cors.own(session.req_header(), &mut h);
            session
                .write_response_header(Box::new(h), false)
                .await
                .is_ok()
        }
        Err(_) => false,
    }
}

/// Serves `run` to this client as an observer, then ends the response.
pub(crate) async fn observe(
    s: &Shared,
    session: &mut Session,
    run: &Arc<Run>,
    start: Start,
    guard: Option<ObserverGuard>,
) -> Reply {
    // Counted by the drain until this observer has written its end or left.
    let _tracked = s.observers.token();
    let opts = observer::Options {
        heartbeat: s.cfg.server.heartbeat.0,
    };
    let mut sink = SessionSink::new(session, s.cfg.server.write_timeout.0);
    let outcome = observer::serve(&mut sink, run, start, guard, &opts, &s.metrics, &s.stop).await;
    match outcome {
        Exit::Ended if sink.finish().await => Reply::Done,
        _ => Reply::Abort,
    }
}

/// Serves a run's protocol-1 requester from the run's start with its producer polled in the same
/// task ([`observer::serve_fused`]), its SSE header first; then ends the response. The producer
/// is polled beside every step, the header's and the last chunk's writes too.
pub(crate) async fn observe_fused<P: Future<Output = ()> + Send + 'static>(
    s: &Shared,
    session: &mut Session,
    run: &Arc<Run>,
    guard: ObserverGuard,
    producing: &mut Producing<P>,
) -> Reply {
    if !producing
        .beside(write_sse_header(session, &s.cors, run.id()))
        .await
    {
        return Reply::Abort;
    }
    // Counted by the drain until this reader has written its end or left.
    let _tracked = s.observers.token();
    let opts = observer::Options {
        heartbeat: s.cfg.server.heartbeat.0,
    };
    let mut sink = SessionSink::new(session, s.cfg.server.write_timeout.0);
    let outcome =
        observer::serve_fused(&mut sink, producing, run, guard, &opts, &s.metrics, &s.stop).await;
    match outcome {
        Exit::Ended if producing.beside(sink.finish()).await => Reply::Done,
        _ => Reply::Abort,
    }
}

/// Writes the run's recorded response header (plus resume-token headers) and serves the raw
/// record as `read` says until the run ends; a resume is counted in `tether_attach_total`.
pub(crate) async fn serve_verbatim(
    s: &Shared,
    session: &mut Session,
    run: &Arc<Run>,
    read: Verbatim,
    owner: &Owner,
) -> Handled {
    room_for_reader(s, run)?;
    if let Reader::Resume(kind) = read.reader {
        let result = match read.plan {
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
    let mut header = match upstream_head(run) {
        Some(h) => relayed((*h).clone(), true),
        None => sse_header()?,
    };
    add_token_headers(s, &mut header, run, owner);
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
        inject_ids: read.inject_ids,
    };
    let mut sink = SessionSink::new(session, s.cfg.server.write_timeout.0);
    let how = match read.reader {
        Reader::Resume(_) => Join::Resume,
        Reader::Requester => Join::Origin,
    };
    let outcome = replay::serve(&mut sink, run, read.plan, how, &opts, &s.stop).await;
    match outcome {
        Exit::Ended if sink.finish().await => Ok(Reply::Done),
        _ => Ok(Reply::Abort),
    }
}

/// `429 too_many_observers` when the run already has `max_observers_per_run` readers.
pub(crate) fn room_for_reader(s: &Shared, run: &Run) -> std::result::Result<(), ApiError> {
    match run.observers() >= s.cfg.limits.max_observers_per_run {
        true => Err(ApiError::new(
            Code::TooManyObservers,
            "this run has as many readers as it may",
        )),
        false => Ok(()),
    }
}

/// Adds the run id and a fresh resume token, when the run's record route hands them out.
pub(crate) fn add_token_headers(s: &Shared, header: &mut ResponseHeader, run: &Run, owner: &Owner) {
    let Some(tokens) = tokens(run) else {
        return;
    };
    let name = run.alias().unwrap_or_else(|| run.id().clone());
    if let Some(h) = &tokens.run_id_header {
        let _ = header.insert_header(h.clone(), name.as_str());
    }
    if let Some(h) = &tokens.token_header {
        let expiry = token::now() + tokens.ttl.as_secs();
        let t = token::mint(&s.cfg.secret, &name, owner, expiry);
        let _ = header.insert_header(h.clone(), t);
    }
}

/// A plain SSE response header, for a run whose upstream header is unknown (and a Durable
/// Streams SSE read).
pub(crate) fn sse_header() -> std::result::Result<ResponseHeader, ApiError> {
    let build = || -> Result<ResponseHeader> {
        let mut h = ResponseHeader::build(200, Some(3))?;
        h.insert_header("content-type", "text/event-stream")?;
        h.insert_header("cache-control", "no-cache")?;
        h.insert_header("transfer-encoding", "chunked")?;
        Ok(h)
    };
    build().map_err(|e| ApiError::new(Code::InvalidBody, e.to_string()))
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
