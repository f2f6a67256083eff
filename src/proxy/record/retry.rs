//! Retried record requests: one whose idempotency key (the route's `idempotency_key`, by default
//! the `Idempotency-Key` header) names a run of the same chat and owner is answered from that run
//! and never forwarded, so the backend generates a turn once however often its client retries.

use std::sync::Arc;

use log::info;
use pingora_proxy::Session;

use super::busy;
use crate::chats::{ByKey, Chat, IdempotencyKey, Owner};
use crate::config::{Ids, Route};
use crate::dialect::Plan;
use crate::error::{ApiError, Code};
use crate::proxy::serve::{observe, serve_verbatim, write_sse_header, Reader, Verbatim};
use crate::proxy::session::{Handled, Reply};
use crate::proxy::Sidecar;
use crate::state::attach_policy::Start;
use crate::state::registry::{Admission, Pending};
use crate::state::run::Run;
use crate::vocab::RunId;

/// `422 idempotency_key_reused`, naming the run the key started.
fn reused(first: RunId) -> ApiError {
    let mut e = ApiError::new(
        Code::IdempotencyKeyReused,
        "this idempotency key was used with another request body",
    );
    e.run_id = Some(first);
    e
}

/// A record request's idempotency key, and how its requester reads.
pub(super) struct Retry<'a> {
    /// The key, with its request body's hash.
    pub(super) key: &'a IdempotencyKey,
    /// The requester reads the upstream bytes unchanged (not protocol 1).
    pub(super) legacy: bool,
}

impl Sidecar {
    /// Registers a record request that carries an idempotency key, as [`Chat::register`] does,
    /// unless the key names a run of the chat: then the request is
    /// answered from that run (`Err` holds the answer). A key whose first request still waits
    /// for the backend's answer waits with it, up to `[recorder] max_wait`.
    pub(super) async fn register_retry(
        &self,
        session: &mut Session,
        route: &Route,
        chat: &Chat<'_>,
        run_id: &RunId,
        admit: Admission,
        retry: Retry<'_>,
    ) -> Result<Pending, Handled> {
        let s = &self.shared;
        let wait = s.cfg.recorder.max_wait.0;
        let owner = chat.owner();
        match chat.register_keyed(run_id, admit, retry.key, wait).await {
            Ok(ByKey::New(p)) => Ok(p),
            Ok(ByKey::Join(run)) => {
                Err(self.join(session, route, &run, &owner, retry.legacy).await)
            }
            Ok(ByKey::Reused(first)) => Err(Err(reused(first))),
            Ok(ByKey::InUse(first)) => {
                let mut e = ApiError::new(
                    Code::IdempotencyKeyInUse,
                    "the first request with this idempotency key is still waiting for the \
                     backend; retry later",
                );
                e.run_id = Some(first);
                Err(Err(e))
            }
            Err(b) => Err(Err(busy(b))),
        }
    }

    /// Answers a retry from the run its key started: a protocol-1 requester from a snapshot of
    /// the run, a legacy one from the start of the raw record (the upstream's bytes).
    async fn join(
        &self,
        session: &mut Session,
        route: &Route,
        run: &Arc<Run>,
        owner: &Owner,
        legacy: bool,
    ) -> Handled {
        let s = &self.shared;
        if legacy && s.cfg.raw.is_none() {
            let mut e = ApiError::new(
                Code::IdempotencyKeyInUse,
                "a request with this idempotency key started a run that this route cannot replay \
                 to a client reading the backend's own stream (no raw record): attach to it",
            );
            e.run_id = Some(run.id().clone());
            return Err(e);
        }
        s.metrics.idempotent_joins.inc();
        info!(
            "run {}: a retried request (same idempotency key) joins it",
            run.id()
        );
        if legacy {
            // Counted as a join (above), not as an attach, as a protocol-1 join is.
            let read = Verbatim {
                plan: Plan::From(0),
                reader: Reader::Requester,
                inject_ids: route.ids == Ids::Inject,
            };
            return serve_verbatim(s, session, run, read, owner).await;
        }
        if !write_sse_header(session, &s.cors, run.id()).await {
            return Ok(Reply::Abort);
        }
        Ok(observe(s, session, run, Start::Snapshot, None).await)
    }
}
