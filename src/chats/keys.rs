//! A chat's runs by idempotency key: a record request whose key names a run of the same chat
//! and owner is answered from that run instead of reaching the backend again. The registry
//! remembers the keys of the runs it holds; with a shared journal a key another replica's run
//! took is found by the key's index names ([`IdempotencyKey::names`]), which the run is indexed
//! by here and in the journal as it goes live.

use std::sync::Arc;
use std::time::Duration;

use super::Chat;
use crate::state::registry::idempotency::{body_hash, Keyed};
use crate::state::registry::{Admission, Busy, Pending};
use crate::state::run::Run;
use crate::vocab::RunId;

/// A record request's idempotency key and the hash of its body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyKey {
    key: String,
    body: [u8; 32],
}

impl IdempotencyKey {
    /// Key `key` of a request with `body`.
    pub fn new(key: String, body: &[u8]) -> Self {
        IdempotencyKey {
            key,
            body: body_hash(body),
        }
    }

    /// The names a run is indexed by for this key (here and in the shared journal): the key's,
    /// and the key's with its request body's, both hashed (short and of one alphabet).
    pub fn names(&self) -> [String; 2] {
        let k = blake3::hash(self.key.as_bytes()).to_hex();
        let b = blake3::Hash::from_bytes(self.body).to_hex();
        [
            format!("~key:{}", &k[..32]),
            format!("~key:{}:{}", &k[..32], &b[..32]),
        ]
    }
}

/// What an idempotency key meant for a record request.
#[derive(Debug)]
pub enum ByKey {
    /// A new key: the request is registered and goes to the backend.
    New(Pending),
    /// The key started this run (held here, or another replica's run mirrored here): the
    /// request is answered from it.
    Join(Arc<Run>),
    /// The key started this run with another request body (`422 idempotency_key_reused`).
    Reused(RunId),
    /// The key's first request still waited for the backend's answer when the wait ran out.
    InUse(RunId),
}

impl Chat<'_> {
    /// Registers a record request carrying idempotency key `key` for run `run_id`, as
    /// [`Chat::register`] does, unless the key names a run of the chat (see [`ByKey`]). A key
    /// whose first request still waits for the backend's answer waits with it, up to `wait`.
    pub async fn register_keyed(
        &self,
        run_id: &RunId,
        admit: Admission,
        key: &IdempotencyKey,
        wait: Duration,
    ) -> Result<ByKey, Busy> {
        self.sync_single_flight(admit).await;
        let reg = self.registry();
        let deadline = tokio::time::Instant::now() + wait;
        let mut changed = reg.subscribe();
        if let Some(found) = Box::pin(self.journal_key(key)).await {
            return Ok(found);
        }
        loop {
            let keyed =
                reg.register_keyed(&self.scope, self.owner, run_id, admit, &key.key, key.body);
            match keyed? {
                Keyed::New(p) => return Ok(ByKey::New(p)),
                Keyed::Join(run) => return Ok(ByKey::Join(run)),
                Keyed::Reused(first) => return Ok(ByKey::Reused(first)),
                Keyed::Wait(first) => {
                    let woke = tokio::time::timeout_at(deadline, changed.changed()).await;
                    if !matches!(woke, Ok(Ok(()))) {
                        return Ok(ByKey::InUse(first));
                    }
                }
            }
        }
    }

    /// A run another replica started for `key`, unknown here: the shared journal indexes it by
    /// the key's names (with its body, and without: another body).
    async fn journal_key(&self, key: &IdempotencyKey) -> Option<ByKey> {
        let j = self.chats.journal.as_ref()?;
        let reg = self.registry();
        if reg
            .keyed(&self.scope, &self.owner, &key.key, key.body)
            .is_some()
        {
            return None;
        }
        let [plain, with_body] = key.names();
        if let Some(run) = j
            .find_named(&self.scope, self.owner, &with_body.into())
            .await
        {
            return Some(ByKey::Join(run));
        }
        let run = j.find_named(&self.scope, self.owner, &plain.into()).await?;
        Some(ByKey::Reused(run.id().clone()))
    }
}
