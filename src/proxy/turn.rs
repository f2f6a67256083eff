//! Running a turn upstream, for the routes that start one (a record request, an attach that
//! records on a miss): hand the registered turn to a producer and answer the requester from
//! what the producer reports (protocol-1 frames, the upstream bytes unchanged for a legacy
//! client, the raw record with ids added or made unique, or the upstream's own non-SSE answer).

use std::future::Future;
use std::time::SystemTime;

use bytes::Bytes;
use pingora_http::RequestHeader;
use pingora_proxy::Session;
use tokio::sync::oneshot::error::RecvError;
use tokio::time::Instant;

use super::serve::{add_token_headers, observe, observe_fused, serve_verbatim, write_sse_header};
use super::serve::{Reader, Verbatim};
use super::session::{at_capacity, relay, relay_upstream, unreachable, Handled, Reply, Source};
use super::shared::Shared;
use crate::accounting::trace::{parent_context, TRACEPARENT, TRACESTATE};
use crate::backend::slots::Slot;
use crate::chats::Owner;
use crate::config::{Ids, Route};
use crate::dialect::Plan;
use crate::producer::{self, Head, Job, Producing, Rules, RunAccount};
use crate::state::attach_policy::Start;
use crate::state::owner_limits::ActiveRun;
use crate::state::registry::Pending;
use crate::vocab::RunId;

/// A turn ready to forward: its registration, run id, body, and how its requester reads it.
pub(crate) struct Turn {
    /// The chat's pending registration.
    pub(crate) pending: Pending,
    /// Its place among its owner's active runs (`max_active_runs_per_owner`), held until it
    /// ends.
    pub(crate) active: Option<ActiveRun>,
    /// The run id minted for it.
    pub(crate) run_id: RunId,
    /// The request body.
    pub(crate) body: Bytes,
    /// The requester reads the upstream bytes unchanged (not protocol 1).
    pub(crate) legacy: bool,
    /// Values of the route's `request:` aliases.
    pub(crate) request_aliases: Vec<String>,
    /// Index-only names of the run: its idempotency key's
    /// ([`IdempotencyKey::names`](crate::chats::IdempotencyKey::names)).
    pub(crate) keys: Vec<String>,
    /// When its request arrived.
    pub(crate) arrived: Arrival,
}

/// When a turn's request arrived: where its span, its first-byte time and its duration count
/// from.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Arrival {
    /// On the monotonic clock.
    pub(crate) at: Instant,
    /// On the wall clock.
    pub(crate) wall: SystemTime,
}

impl Arrival {
    /// Now.
    pub(crate) fn now() -> Arrival {
        Arrival {
            at: Instant::now(),
            wall: SystemTime::now(),
        }
    }
}

/// Forwards the request through a producer and answers from what it reports.
pub(crate) async fn run_upstream(
    s: &Shared,
    session: &mut Session,
    route: &Route,
    turn: Turn,
) -> Handled {
    // Refused before the producer starts: the pending registration goes with it.
    let Some(slot) = s.upstream.slot() else {
        return Err(at_capacity(s));
    };
    let owner = turn.pending.owner();
    // Injected or unique ids: the requester reads the raw record (its ids added or made
    // unique), not the upstream bytes.
    let from_raw = turn.legacy && route.ids != Ids::Upstream && s.cfg.raw.is_some();
    let tee = turn.legacy && !from_raw;
    if turn.legacy {
        // A legacy or raw requester reads a copy or the raw record: the producer runs detached.
        let head = producer::spawn(&s.producers, job(s, session, route, turn, slot, tee)).await;
        let none: Option<&mut Producing<std::future::Ready<()>>> = None;
        return answer(s, session, route, head, &owner, from_raw, none).await;
    }
    // A protocol-1 requester's task runs the producer itself, beside its reader; what remains
    // when the reader is done goes on in a task of its own (`Producing`'s drop).
    let (mut producing, head) =
        producer::start(&s.producers, job(s, session, route, turn, slot, false));
    let head = producing.beside(head).await;
    answer(
        s,
        session,
        route,
        head,
        &owner,
        from_raw,
        Some(&mut producing),
    )
    .await
}

/// Answers the requester from the producer's `head`; `producing`: the producer, when this task
/// runs it.
async fn answer<P: Future<Output = ()> + Send + 'static>(
    s: &Shared,
    session: &mut Session,
    route: &Route,
    head: Result<Head, RecvError>,
    owner: &Owner,
    from_raw: bool,
    producing: Option<&mut Producing<P>>,
) -> Handled {
    match head {
        Err(_) | Ok(Head::Failed(_)) => Err(unreachable()),
        Ok(Head::Relay { header, upstream }) => {
            Ok(Box::pin(relay_upstream(session, s, header, upstream)).await)
        }
        Ok(Head::Live {
            run,
            header,
            legacy: Some(tee),
            guard,
        }) => {
            // A legacy requester: the upstream bytes unchanged, attached while it reads.
            let _attached = guard;
            let mut header = header;
            add_token_headers(s, &mut header, &run, owner);
            s.cors.own(session.req_header(), &mut header);
            let limit = Some(s.cfg.server.write_timeout.0);
            Ok(Box::pin(relay(session, header, &mut Source::Tee(tee), limit)).await)
        }
        Ok(Head::Live { run, guard, .. }) if from_raw => {
            // The reader counts itself in from here on (an observer, not an attach).
            drop(guard);
            let read = Verbatim {
                plan: Plan::From(0),
                reader: Reader::Requester,
                inject_ids: route.ids == Ids::Inject,
            };
            serve_verbatim(s, session, &run, read, owner).await
        }
        Ok(Head::Live {
            run,
            legacy: None,
            guard,
            ..
        }) => match producing {
            Some(p) => Ok(observe_fused(s, session, &run, guard, p).await),
            None => {
                if !write_sse_header(session, &s.cors, run.id()).await {
                    return Ok(Reply::Abort);
                }
                Ok(observe(s, session, &run, Start::Fresh, Some(guard)).await)
            }
        },
    }
}

/// The producer's job for `turn`; `tee`: the requester reads the upstream bytes unchanged.
fn job(s: &Shared, session: &Session, route: &Route, turn: Turn, slot: Slot, tee: bool) -> Job {
    let Turn {
        pending,
        active,
        run_id,
        body,
        legacy: _,
        request_aliases,
        keys,
        arrived,
    } = turn;
    let max = s.cfg.upstream_opts.max_run_duration.0;
    let (request, account) = account(s, session, &body, arrived);
    Job {
        upstream: s.upstream.clone(),
        chats: s.chats.clone(),
        metrics: s.metrics.clone(),
        pending,
        active,
        run_id,
        route: route.path.as_str().to_string(),
        request,
        body,
        slot,
        rules: Rules {
            format: route.format,
            commit: route.commit.clone(),
            window: s.cfg.recorder.window,
            max_event: s.cfg.recorder.max_event_bytes,
            raw: s.cfg.raw.clone(),
            unique_ids: route.ids == Ids::Unique,
            aliases: route.aliases.clone(),
            request_aliases,
            keys,
            tokens: route.tokens.clone(),
            usage: route.usage.clone(),
            on_disconnect: route.on_disconnect,
        },
        budget: s.budget.clone(),
        max_duration: (!max.is_zero()).then_some(max),
        legacy: tee.then_some(s.cfg.limits.max_client_buffer_bytes),
        account,
        handoff: None,
    }
}

/// The request forwarded to the backend and the run's accounting: the run's span opened (a
/// child of the caller's `traceparent`, when it sent one), the forwarded request carrying the
/// span's own `traceparent` as its parent; the owner's subject and the model the body names.
fn account(
    s: &Shared,
    session: &Session,
    body: &[u8],
    arrived: Arrival,
) -> (RequestHeader, RunAccount) {
    let mut request = session.req_header().clone();
    let header = |name: &str| {
        request
            .headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let (parent, state) = (header(TRACEPARENT), header(TRACESTATE));
    let request_model = request_model(body);
    let span = s.ledger.run_span(
        parent.as_deref(),
        state.as_deref(),
        request_model.as_deref(),
        arrived.wall,
    );
    let caller_trace =
        parent_context(parent.as_deref(), state.as_deref()).map(|sc| sc.trace_id().to_string());
    if let Some(span) = &span {
        let _ = request.insert_header(TRACEPARENT, span.traceparent());
        if let Some(state) = span.tracestate() {
            let _ = request.insert_header(TRACESTATE, state);
        }
    }
    let account = RunAccount {
        ledger: s.ledger.clone(),
        span,
        caller_trace,
        owner: s.chats.subject(&request.headers),
        request_model,
        arrived: arrived.at,
        arrived_wall: arrived.wall,
    };
    (request, account)
}

/// The `model` a JSON request body names, if any.
fn request_model(body: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Model {
        model: Option<String>,
    }
    serde_json::from_slice::<Model>(body).ok()?.model
}
