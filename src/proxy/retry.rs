//! Retried record requests: one whose idempotency key (the route's `idempotency_key`, by default
//! the `Idempotency-Key` header) names a run of the same chat and owner is answered from that run
//! and never forwarded, so the backend generates a turn once however often its client retries.

use std::sync::Arc;

use log::info;
use pingora_proxy::Session;

use super::resume::Reader;
use super::session::{observe, write_sse_header, Handled, Reply};
use super::Sidecar;
use crate::config::{Ids, Route};
use crate::dialect::Plan;
use crate::error::{ApiError, Code};
use crate::state::attach_policy::Start;
use crate::state::auth::Owner;
use crate::state::registry::idempotency::Keyed;
use crate::state::registry::{Admission, Busy, Pending};
use crate::state::run::Run;
use crate::vocab::{RunId, Scope};

/// The names a run is indexed by for its idempotency key (here and in the shared journal): the
/// key's, and the key's with its request body's, both hashed (short and of one alphabet).
pub(crate) fn key_names(key: &str, body: &[u8; 32]) -> [String; 2] {
    let k = blake3::hash(key.as_bytes()).to_hex();
    let b = blake3::Hash::from_bytes(*body).to_hex();
    [
        format!("~key:{}", &k[..32]),
        format!("~key:{}:{}", &k[..32], &b[..32]),
    ]
}

/// `422 idempotency_key_reused`, naming the run the key started.
fn reused(first: RunId) -> ApiError {
    let mut e = ApiError::new(
        Code::IdempotencyKeyReused,
        "this idempotency key was used with another request body",
    );
    e.run_id = Some(first);
    e
}

/// A record request's idempotency key and the hash of its body.
pub(crate) struct Retry<'a> {
    pub(crate) key: &'a str,
    pub(crate) body: [u8; 32],
    /// The requester reads the upstream bytes unchanged (not protocol 1).
    pub(crate) legacy: bool,
}

impl Sidecar {
    /// Registers a record request that carries an idempotency key, as
    /// [`Registry::register`](crate::state::registry::Registry::register) does, unless the key
    /// names a run of the chat: then the request is answered from that run (`Err` holds the
    /// answer). A key whose first request still waits for the backend's answer waits with it,
    /// up to `[recorder] max_wait`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn register_retry(
        &self,
        session: &mut Session,
        route: &Route,
        scope: &Scope,
        owner: Owner,
        run_id: &RunId,
        admit: Admission,
        retry: Retry<'_>,
    ) -> Result<Pending, Handled> {
        let s = &self.shared;
        let deadline = tokio::time::Instant::now() + s.cfg.recorder.max_wait.0;
        let mut changed = s.registry.subscribe();
        if let Some(j) = &s.journal {
            // A run another replica started for this key: the journal indexes it by the key's
            // names (with its body, and without: another body).
            if s.registry
                .keyed(scope, &owner, retry.key, retry.body)
                .is_none()
            {
                let [plain, with_body] = key_names(retry.key, &retry.body);
                if let Some(run) = j.find_named(scope, owner, &with_body.into()).await {
                    return Err(self.join(session, route, &run, &owner, retry.legacy).await);
                }
                if let Some(run) = j.find_named(scope, owner, &plain.into()).await {
                    return Err(Err(reused(run.id().clone())));
                }
            }
        }
        loop {
            let keyed = s
                .registry
                .register_keyed(scope, owner, run_id, admit, retry.key, retry.body);
            match keyed {
                Ok(Keyed::New(p)) => return Ok(p),
                Ok(Keyed::Join(run)) => {
                    return Err(self.join(session, route, &run, &owner, retry.legacy).await)
                }
                Ok(Keyed::Reused(first)) => return Err(Err(reused(first))),
                Ok(Keyed::Wait(first)) => {
                    let woke = tokio::time::timeout_at(deadline, changed.changed()).await;
                    if !matches!(woke, Ok(Ok(()))) {
                        let mut e = ApiError::new(
                            Code::IdempotencyKeyInUse,
                            "the first request with this idempotency key is still waiting for \
                             the backend; retry later",
                        );
                        e.run_id = Some(first);
                        return Err(Err(e));
                    }
                }
                Err(busy) => {
                    let mut e = ApiError::new(
                        Code::TurnAlreadyRunning,
                        "this chat already has a turn running",
                    );
                    if let Busy::Running(active) = busy {
                        e.run_id = Some(active);
                    }
                    return Err(Err(e));
                }
            }
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
            let inject = route.ids == Ids::Inject;
            return self
                .serve_verbatim(
                    session,
                    run,
                    Plan::From(0),
                    Reader::Requester,
                    inject,
                    owner,
                )
                .await;
        }
        if !write_sse_header(session, &s.cors, run.id()).await {
            return Ok(Reply::Abort);
        }
        Ok(observe(s, session, run, Start::Snapshot, None).await)
    }
}
