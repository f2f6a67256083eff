//! Stopping a run: which run a stop request names (by id, by the chat, or by the cancel request
//! id of an earlier stop, remembered per chat), and the stop itself: a run produced here is
//! asked to stop; a mirror of another replica's run is stopped through the shared journal.

use log::info;

use super::{Chats, Found, Owner};
use crate::vocab::end::EndReason;
use crate::vocab::{ChatId, RunId};

/// What a stop request names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopTarget {
    /// A chat's run, by the stop body (`{"chat_id", "run_id"?, "cancel_request_id"?}`): run
    /// `run` of the chat when named, else the run an earlier stop with `cancel` stopped, else
    /// the chat's current run.
    Chat {
        /// The chat.
        chat: ChatId,
        /// Tether's id of one of the chat's runs.
        run: Option<RunId>,
        /// The stop's cancel request id.
        cancel: Option<String>,
    },
    /// A run by tether's run id or an alias (never a later run of the chat); else the run an
    /// earlier stop of the chat with `cancel` stopped; else, with `current`, the chat's
    /// current run when the request names no run.
    Named {
        /// The chat, when the request names one.
        chat: Option<ChatId>,
        /// Tether's run id or an alias, when the request names one.
        run: Option<RunId>,
        /// The stop's cancel request id.
        cancel: Option<String>,
        /// Whether a request that names no run stops the chat's current run.
        current: bool,
    },
}

impl StopTarget {
    /// The stop's cancel request id, when it carries one.
    pub fn cancel(&self) -> Option<&str> {
        match self {
            StopTarget::Chat { cancel, .. } | StopTarget::Named { cancel, .. } => cancel.as_deref(),
        }
    }

    /// The id or alias the request named its run by ([`StopTarget::Named`] only).
    pub fn named(&self) -> Option<&RunId> {
        match self {
            StopTarget::Chat { .. } => None,
            StopTarget::Named { run, .. } => run.as_ref(),
        }
    }
}

impl Chats {
    /// The run a stop request names for `owner` (see [`StopTarget`]).
    pub async fn stop_target(&self, owner: Owner, target: &StopTarget) -> Option<Found> {
        match target {
            StopTarget::Chat { chat, run, cancel } => {
                let chat = self.chat(owner, chat);
                chat.sync(run.as_ref()).await;
                // A repeated cancel request id names the run it stopped the first time.
                let run_id = run
                    .clone()
                    .or_else(|| cancel.as_deref().and_then(|c| chat.cancelled(c)));
                let reg = self.registry();
                let run = match &run_id {
                    Some(id) => reg.find(chat.scope(), &owner, id),
                    None => reg.current(chat.scope(), &owner),
                };
                Some(chat.found(run?))
            }
            StopTarget::Named {
                chat,
                run,
                cancel,
                current,
            } => {
                let chat = chat.as_ref().map(|c| self.chat(owner, c));
                match (run, &chat) {
                    (Some(id), _) => {
                        if let Some(found) = self.by_id(owner, id).await {
                            return Some(found);
                        }
                    }
                    (None, Some(chat)) => chat.sync(None).await,
                    (None, None) => {}
                }
                let chat = chat?;
                let reg = self.registry();
                let earlier = cancel
                    .as_deref()
                    .and_then(|c| chat.cancelled(c))
                    .and_then(|id| reg.find(chat.scope(), &owner, &id));
                match earlier {
                    Some(run) => Some(chat.found(run)),
                    None if run.is_none() && *current => {
                        Some(chat.found(reg.current(chat.scope(), &owner)?))
                    }
                    None => None,
                }
            }
        }
    }

    /// Stops `found` with `reason` while its producer runs: a mirror of another replica's run
    /// through the shared journal (the producing replica stops it), a run produced here by
    /// asking its producer. A stop's cancel request id (`cancel_id`) is remembered with the
    /// run it named, for an idempotent retry of the stop.
    pub async fn stop(&self, found: &Found, cancel_id: Option<&str>, reason: EndReason) {
        let run = &found.run;
        if let Some(c) = cancel_id {
            self.registry()
                .remember_cancel(&found.scope, c, found.run.id());
        }
        if !run.is_producing() {
            return;
        }
        info!("run {}: stop requested", run.id());
        let remote = match &self.journal {
            Some(j) => Box::pin(j.stop_remote(run, &found.scope, reason)).await,
            None => false,
        };
        if !remote {
            run.request_stop(reason);
        }
    }
}
