//! Record routes: read and check the request, register the run (a request with an idempotency
//! key that names a run is answered from it: [`retry`]), and run the turn upstream
//! ([`super::turn`]). A request carrying the route's `resume_on` header with an id of a frame
//! of the chat's run is a `last_event_id` resume of that run, not a new turn.

mod retry;

use std::sync::atomic::Ordering;

use log::info;
use pingora_proxy::Session;

use super::request::{read_turn, TurnRequest};
use super::serve::{refused, serve_verbatim, Reader, Verbatim};
use super::session::{forward_unrecorded, Handled};
use super::turn::{run_upstream, Arrival, Turn};
use super::{Matched, Sidecar};
use crate::chats::{Chat, IdempotencyKey};
use crate::config::{DialectKind, Expired, Ids, Route};
use crate::dialect::last_event_id::LastEventId;
use crate::dialect::{Plan, Refusal, Verbatim as _};
use crate::error::{ApiError, Code};
use crate::state::owner_limits::{ActiveRun, Limited, OwnerLimit};
use crate::state::registry::{Admission, Busy, Pending};
use crate::state::run::mint_run_id;
use crate::vocab::RunId;
use retry::Retry;

/// `409 turn_already_running`, naming the chat's running turn when it is known.
fn busy(busy: Busy) -> ApiError {
    let mut e = ApiError::new(
        Code::TurnAlreadyRunning,
        "this chat already has a turn running",
    );
    if let Busy::Running(active) = busy {
        e.run_id = Some(active);
    }
    e
}

/// `429 too_many_runs` or `429 rate_limited`, with `Retry-After`: a per-owner limit refused a
/// new run.
fn limited(l: Limited) -> ApiError {
    let e = match l.limit {
        OwnerLimit::ActiveRuns => ApiError::new(
            Code::TooManyRuns,
            "this caller has as many runs going as it may; retry when one ends",
        ),
        OwnerLimit::Rate => ApiError::new(
            Code::RateLimited,
            "this caller started as many runs this minute as it may; retry later",
        ),
    };
    e.with_retry_after(l.retry_after_secs())
}

/// A record request registered as a new run: its pending registration, and its place among
/// its owner's active runs (`max_active_runs_per_owner`).
struct Registered {
    pending: Pending,
    active: Option<ActiveRun>,
}

/// The turn of record request `req`, registered as `reg`, that arrived at `arrived`.
fn turn(
    req: TurnRequest,
    reg: Registered,
    run_id: RunId,
    key: Option<IdempotencyKey>,
    arrived: Arrival,
) -> Turn {
    Turn {
        arrived,
        pending: reg.pending,
        active: reg.active,
        run_id,
        body: req.body,
        legacy: !req.protocol1,
        request_aliases: req.aliases,
        keys: key.map_or_else(Vec::new, |k| k.names().to_vec()),
    }
}

impl Sidecar {
    /// `kind = "record"`: one turn, recorded as a new run of the chat.
    pub(crate) async fn record(&self, session: &mut Session, m: &Matched<'_>) -> Handled {
        let s = &self.shared;
        let arrived = Arrival::now();
        if s.draining.load(Ordering::Relaxed) {
            return Err(ApiError::new(
                Code::Draining,
                "tether is shutting down; retry on another instance",
            ));
        }
        // Only the turn outlives this block: this future lives as long as the stream.
        let turn = {
            let req = match read_turn(s, session, m).await {
                Ok(t) => t,
                Err(h) => return h,
            };
            let run_id = mint_run_id();
            let key = req.key.clone().map(|k| IdempotencyKey::new(k, &req.body));
            // Boxed: its rare branches (a resume, a retry, a full recorder) would otherwise
            // size this future for every turn.
            let registered = self.register(session, m, &req, &run_id, key.as_ref());
            match Box::pin(registered).await {
                Ok(reg) => turn(req, reg, run_id, key, arrived),
                Err(answered) => return answered,
            }
        };
        run_upstream(s, session, m.route, turn).await
    }

    /// Registers the turn as run `run_id` of its chat and admits it under the per-owner limits,
    /// unless it is a resume (`resume_on`), the recorder is full (the turn is passed through
    /// unrecorded, admitted too), the chat is busy, its idempotency key names a run, or a
    /// per-owner limit refuses it: then `Err` holds the answer, and nothing was forwarded.
    async fn register(
        &self,
        session: &mut Session,
        m: &Matched<'_>,
        req: &TurnRequest,
        run_id: &RunId,
        key: Option<&IdempotencyKey>,
    ) -> Result<Registered, Handled> {
        let (s, route) = (&self.shared, m.route);
        let chat = s.chats.chat(req.owner, &req.chat_id);
        if let Some(id) = &req.resume_id {
            if let Some(handled) = self.resume_on(session, route, &chat, id).await {
                return Err(handled);
            }
        }
        let limits = &s.cfg.limits;
        if !s
            .chats
            .make_room(limits.max_runs, limits.max_recorded_bytes)
        {
            // Over the run or byte limits even after evicting completed runs: never refuse a
            // turn, pass it through unrecorded (under the per-owner limits all the same).
            let _active = s
                .chats
                .admit_run(req.owner)
                .await
                .map_err(|l| Err(limited(l)))?;
            s.metrics.runs_unrecorded.inc();
            info!(
                "chat {:?}: recorder full, turn passed through unrecorded",
                req.chat_id
            );
            let body = req.body.clone();
            return Err(forward_unrecorded(s, session, body).await.map(|r| r.1));
        }
        let admit = match route.single_flight {
            true => Admission::SingleFlight,
            false => Admission::Always,
        };
        let pending = match key {
            None => chat
                .register(run_id, admit)
                .await
                .map_err(|b| Err(busy(b)))?,
            Some(key) => {
                let retry = Retry {
                    key,
                    legacy: !req.protocol1,
                };
                self.register_retry(session, route, &chat, run_id, admit, retry)
                    .await?
            }
        };
        // Admitted only as a new run: a retry that joins its run, a busy chat, a resume are
        // not new runs. Refused, the pending registration goes with the answer.
        let active = s
            .chats
            .admit_run(req.owner)
            .await
            .map_err(|l| Err(limited(l)))?;
        Ok(Registered { pending, active })
    }

    /// `resume_on`: a request carrying the header with an id of a frame of the chat's run
    /// (`id`) is a `last_event_id` resume of that run, not a new turn. Returns `None` for a new
    /// turn.
    async fn resume_on(
        &self,
        session: &mut Session,
        route: &Route,
        chat: &Chat<'_>,
        id: &str,
    ) -> Option<Handled> {
        let s = &self.shared;
        let run_id = id.rsplit_once(':').map(|(r, _)| RunId::from(r));
        let run = chat.find_or_current(run_id.as_ref()).await?.run;
        let dialect = LastEventId {
            expired: Expired::FromStart,
        };
        let kind = DialectKind::LastEventId;
        let read = |plan| Verbatim {
            plan,
            reader: Reader::Resume(kind),
            inject_ids: route.ids == Ids::Inject,
        };
        let plan = match dialect.plan(run.id(), run.journal(), Some(id)) {
            Err(e) => return Some(Err(e)),
            Ok(Ok(plan)) => plan,
            Ok(Err(Refusal::Nothing)) => {
                let (result, answer) = refused(kind, Refusal::Nothing, route.on_nothing);
                s.metrics.attach.inc(kind, result);
                return Some(answer);
            }
            Ok(Err(Refusal::Expired(_))) => Plan::Render,
            // An id tether never recorded: a new turn.
            Ok(Err(Refusal::Unknown)) => return None,
        };
        Some(serve_verbatim(s, session, &run, read(plan), &chat.owner()).await)
    }
}
