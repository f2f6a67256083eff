//! Record routes: read and check the request, register the run, hand it to a producer, and
//! answer the requester from what the producer reports (protocol-1 frames, the upstream bytes
//! unchanged for a legacy client, or the upstream's own non-SSE answer).

use std::sync::atomic::Ordering;

use bytes::Bytes;
use log::info;
use pingora_proxy::Session;

use super::resume::{first_key, refused, Reader};
use super::retry::Retry;
use super::session::{
    at_capacity, forward_unrecorded, observe, read_body, relay, relay_upstream, unreachable,
    write_sse_header, Handled, Reply, Source,
};
use super::{Matched, Sidecar};
use crate::chats::{Chat, IdempotencyKey, Owner};
use crate::config::{Alias, DialectKind, Expired, Ids, KeySource, Route};
use crate::dialect::last_event_id::LastEventId;
use crate::dialect::{Plan, Refusal, Verbatim};
use crate::error::{ApiError, Code};
use crate::producer::{self, Head, Job, Rules};
use crate::request::{self, Parts, RecordRequest};
use crate::state::attach_policy::Start;
use crate::state::registry::{Admission, Busy, Pending};
use crate::state::run::mint_run_id;
use crate::vocab::{ChatId, RunId};

/// The longest idempotency key kept (a longer one is ignored, and the request is a new turn).
const MAX_KEY_BYTES: usize = 256;

/// A turn ready to forward: its registration, run id, body, and how its requester reads it.
pub(crate) struct Turn {
    /// The chat's pending registration.
    pub(crate) pending: Pending,
    /// The run id minted for it.
    pub(crate) run_id: RunId,
    /// The request body.
    pub(crate) body: Bytes,
    /// The requester reads the upstream bytes unchanged (not protocol 1).
    pub(crate) legacy: bool,
    /// Values of the route's `request:` aliases.
    pub(crate) request_aliases: Vec<String>,
    /// Index-only names of the run: its idempotency key's (see [`super::retry`]).
    pub(crate) keys: Vec<String>,
}

impl Sidecar {
    /// Reads a turn-like request (record and annotate routes): the caller, the capped body, and
    /// the chat id from where the route says.
    pub(crate) async fn read_turn(
        &self,
        session: &mut Session,
        m: &Matched<'_>,
    ) -> std::result::Result<(Owner, Bytes, RecordRequest), Handled> {
        let owner = self
            .shared
            .chats
            .owner(&session.req_header().headers)
            .map_err(Err)?;
        let body = read_body(session, &self.shared)
            .await
            .map_err(Handled::from)?;
        let header = |h: &str| super::session::header_value(session, h);
        let parts = Parts {
            captures: &m.captures,
            query: session.req_header().uri.query(),
            header: &header,
        };
        let req = match request::record(&m.route.chat_id, &body, &parts) {
            // A route that knows its runs by the backend's ids needs no chat id: such a turn
            // is a chat of its own, found by its aliases.
            Err(e) if e.code == Code::MissingChatId && !m.route.aliases.is_empty() => {
                RecordRequest {
                    chat_id: ChatId::from(format!("~{}", mint_run_id())),
                    protocol1: false,
                    body: None,
                }
            }
            r => r.map_err(Err)?,
        };
        Ok((owner, body, req))
    }

    /// The values of the route's `request:` aliases in this request.
    fn request_aliases(&self, session: &Session, m: &Matched<'_>, body: &Bytes) -> Vec<String> {
        let map = request::json_object(body).ok();
        let header = |h: &str| super::session::header_value(session, h);
        let parts = Parts {
            captures: &m.captures,
            query: session.req_header().uri.query(),
            header: &header,
        };
        m.route
            .aliases
            .iter()
            .filter_map(|a| match a {
                Alias::Request(src) => first_key(std::slice::from_ref(src), &parts, map.as_ref())
                    .ok()
                    .flatten(),
                _ => None,
            })
            .collect()
    }

    /// The route's idempotency key in this request (`None`: absent, empty, or the route has
    /// none).
    fn idempotency_key(&self, session: &Session, m: &Matched<'_>, body: &Bytes) -> Option<String> {
        let src = m.route.idempotency_key.as_ref()?;
        let map = request::json_object(body).ok();
        let header = |h: &str| super::session::header_value(session, h);
        let parts = Parts {
            captures: &m.captures,
            query: session.req_header().uri.query(),
            header: &header,
        };
        first_key(std::slice::from_ref(src), &parts, map.as_ref())
            .ok()
            .flatten()
            .filter(|k| !k.is_empty() && k.len() <= MAX_KEY_BYTES)
    }

    /// `resume_on`: a request carrying the header with an id of a frame of the chat's run is a
    /// `last_event_id` resume of that run, not a new turn. Returns `None` for a new turn.
    async fn resume_on(
        &self,
        session: &mut Session,
        route: &Route,
        chat: &Chat<'_>,
    ) -> Option<Handled> {
        let KeySource::Header(name) = route.resume_on.as_ref()? else {
            return None;
        };
        let id = super::session::header_value(session, name)?;
        let run_id = id.rsplit_once(':').map(|(r, _)| RunId::from(r));
        let run = chat.find_or_current(run_id.as_ref()).await?.run;
        let owner = &chat.owner();
        let dialect = LastEventId {
            expired: Expired::FromStart,
        };
        let kind = DialectKind::LastEventId;
        let inject = route.ids == Ids::Inject;
        match dialect.plan(run.id(), run.journal(), Some(&id)) {
            Err(e) => Some(Err(e)),
            Ok(Ok(plan)) => Some(
                self.serve_verbatim(session, &run, plan, Reader::Resume(kind), inject, owner)
                    .await,
            ),
            Ok(Err(Refusal::Nothing)) => {
                let (result, answer) = refused(kind, Refusal::Nothing, route.on_nothing);
                self.shared.metrics.attach.inc(kind, result);
                Some(answer)
            }
            Ok(Err(Refusal::Expired(_))) => Some(
                self.serve_verbatim(
                    session,
                    &run,
                    Plan::Render,
                    Reader::Resume(kind),
                    inject,
                    owner,
                )
                .await,
            ),
            // An id tether never recorded: a new turn.
            Ok(Err(Refusal::Unknown)) => None,
        }
    }

    /// `kind = "record"`: one turn, recorded as a new run of the chat.
    pub(crate) async fn record(&self, session: &mut Session, m: &Matched<'_>) -> Handled {
        let (s, route) = (&self.shared, m.route);
        if s.draining.load(Ordering::Relaxed) {
            return Err(ApiError::new(
                Code::Draining,
                "tether is shutting down; retry on another instance",
            ));
        }
        let (owner, body, mut req) = match self.read_turn(session, m).await {
            Ok(t) => t,
            Err(h) => return h,
        };
        // The parsed body is not needed past here; this future lives as long as the stream.
        req.body = None;
        let chat = s.chats.chat(owner, &req.chat_id);
        // The rare branches' futures are boxed (here and below): inline, the largest of them
        // would size this future, which lives as long as the stream, for every turn.
        if let Some(handled) = Box::pin(self.resume_on(session, route, &chat)).await {
            return handled;
        }
        let request_aliases = self.request_aliases(session, m, &body);
        let limits = &s.cfg.limits;
        if !s
            .chats
            .make_room(limits.max_runs, limits.max_recorded_bytes)
        {
            // Over the run or byte limits even after evicting completed runs: never refuse a
            // turn, pass it through unrecorded.
            s.metrics.runs_unrecorded.inc();
            info!(
                "chat {:?}: recorder full, turn passed through unrecorded",
                req.chat_id
            );
            return Ok(forward_unrecorded(s, session, body).await?.1);
        }
        let run_id = mint_run_id();
        let admit = match route.single_flight {
            true => Admission::SingleFlight,
            false => Admission::Always,
        };
        let key = self
            .idempotency_key(session, m, &body)
            .map(|k| IdempotencyKey::new(k, &body));
        let keys = key.as_ref().map_or_else(Vec::new, |k| k.names().to_vec());
        let registered = match key {
            Some(key) => {
                let retry = Retry {
                    key,
                    legacy: !req.protocol1,
                };
                let registered = self.register_retry(session, route, &chat, &run_id, admit, retry);
                match Box::pin(registered).await {
                    Ok(p) => Ok(p),
                    Err(answered) => return answered,
                }
            }
            None => Box::pin(chat.register(&run_id, admit)).await,
        };
        drop(chat);
        let pending = match registered {
            Ok(p) => p,
            Err(busy) => {
                let mut e = ApiError::new(
                    Code::TurnAlreadyRunning,
                    "this chat already has a turn running",
                );
                if let Busy::Running(active) = busy {
                    e.run_id = Some(active);
                }
                return Err(e);
            }
        };
        let turn = Turn {
            pending,
            run_id,
            body,
            legacy: !req.protocol1,
            request_aliases,
            keys,
        };
        self.run_upstream(session, route, turn).await
    }

    /// Forwards the request through a producer and answers from what it reports.
    pub(crate) async fn run_upstream(
        &self,
        session: &mut Session,
        route: &Route,
        turn: Turn,
    ) -> Handled {
        let Turn {
            pending,
            run_id,
            body,
            legacy,
            request_aliases,
            keys,
        } = turn;
        let s = &self.shared;
        // Refused before the producer starts: the pending registration goes with it.
        let Some(slot) = s.upstream.slot() else {
            return Err(at_capacity(s));
        };
        let owner = pending.owner();
        // Injected or unique ids: the requester reads the raw record (its ids added or made
        // unique), not the upstream bytes.
        let from_raw = legacy && route.ids != Ids::Upstream && s.cfg.raw.is_some();
        let max = s.cfg.upstream_opts.max_run_duration.0;
        let head = producer::spawn(
            &s.producers,
            Job {
                upstream: s.upstream.clone(),
                chats: s.chats.clone(),
                metrics: s.metrics.clone(),
                pending,
                run_id,
                route: route.path.as_str().to_string(),
                request: session.req_header().clone(),
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
                },
                budget: s.budget.clone(),
                max_duration: (!max.is_zero()).then_some(max),
                legacy: (legacy && !from_raw).then_some(s.cfg.limits.max_client_buffer_bytes),
            },
        );
        match head.await {
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
                self.add_token_headers(&mut header, &run, &owner);
                s.cors.own(session.req_header(), &mut header);
                let limit = Some(s.cfg.server.write_timeout.0);
                Ok(Box::pin(relay(session, header, &mut Source::Tee(tee), limit)).await)
            }
            Ok(Head::Live { run, guard, .. }) if from_raw => {
                // The reader counts itself in from here on (an observer, not an attach).
                drop(guard);
                let inject = route.ids == Ids::Inject;
                self.serve_verbatim(
                    session,
                    &run,
                    Plan::From(0),
                    Reader::Requester,
                    inject,
                    &owner,
                )
                .await
            }
            Ok(Head::Live {
                run,
                legacy: None,
                guard,
                ..
            }) => {
                if !write_sse_header(session, &s.cors, run.id()).await {
                    return Ok(Reply::Abort);
                }
                Ok(observe(s, session, &run, Start::Fresh, Some(guard)).await)
            }
        }
    }
}
