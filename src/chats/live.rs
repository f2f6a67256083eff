//! Going live: a run recording an upstream answer is made (in memory, or through the shared
//! journal's recorder), joins its chat in the registry, has its journal writer spawned when a
//! journal is set, and is named by the aliases the backend gives it ([`Naming`]).

use std::sync::Arc;

use log::info;
use pingora_http::ResponseHeader;

use super::{Chats, Owner};
use crate::config::Tokens;
use crate::replica::{header_text, spawn_writer, Meta, Recorder};
use crate::state::registry::{Pending, Registry};
use crate::state::run::{ObserverGuard, Run};
use crate::vocab::{RunId, Scope};

/// The longest alias a run is indexed by (a longer one is ignored).
const MAX_ALIAS_BYTES: usize = 256;

/// How a route records a run that goes live: its path, its replay window, its raw record's cap,
/// and the resume-token headers of its responses.
#[derive(Debug, Clone, Copy)]
pub struct Recording<'a> {
    /// The path of the route recording it.
    pub route: &'a str,
    /// Replay window size (events).
    pub window: usize,
    /// The raw record's cap in bytes, when the run keeps one.
    pub raw_cap: Option<usize>,
    /// The resume-token headers of the run's responses.
    pub tokens: &'a Tokens,
}

/// A run just gone live: the requester's observer guard, and how to name the run.
pub struct Live {
    /// The run.
    pub run: Arc<Run>,
    /// Counts the requester as attached.
    pub guard: ObserverGuard,
    /// Names the run by its aliases, here and in the shared journal.
    pub naming: Naming,
}

impl Chats {
    /// Makes run `run_id` for the recordable answer `header` and makes it its chat's current
    /// run (the pending registration ends here). With a shared journal, the run records
    /// through a [`Recorder`] whose writer task is spawned now.
    pub fn go_live(
        &self,
        pending: Pending,
        run_id: RunId,
        rec: &Recording<'_>,
        header: &ResponseHeader,
    ) -> Live {
        let (run, recorder) = match &self.journal {
            Some(_) => {
                let (r, inbox) = Recorder::new(&run_id, rec.window, rec.raw_cap);
                let run = Arc::new(Run::with_journal(run_id, Box::new(r.clone())));
                (run, Some((r, inbox)))
            }
            None => (
                Arc::new(Run::with_raw(run_id, rec.window, rec.raw_cap)),
                None,
            ),
        };
        super::head::keep_head(&run, header);
        super::head::keep_tokens(&run, rec.tokens);
        run.labels().set_window(rec.window);
        run.labels().set_route(rec.route);
        let scope = pending.scope().clone();
        let owner = pending.owner();
        let requested_ms = pending.since_ms();
        let guard = run.observe(crate::accounting::Join::Origin);
        self.registry.go_live(&pending, run.clone());
        drop(pending);
        let recorder = match (&self.journal, recorder) {
            (Some(c), Some((r, inbox))) => {
                let meta = Meta {
                    scope: scope.clone(),
                    owner,
                    header: header_text(header),
                    requested_ms,
                    route: rec.route.to_string(),
                };
                spawn_writer(c.clone(), run.clone(), inbox, meta);
                Some(r)
            }
            _ => None,
        };
        let naming = Naming {
            registry: self.registry.clone(),
            owner,
            scope,
            recorder,
        };
        Live { run, guard, naming }
    }
}

/// Indexes a run's aliases (the backend's names for it) in the registry, for its owner, and
/// tells the shared journal's writer of each.
pub struct Naming {
    registry: Arc<Registry>,
    owner: Owner,
    scope: Scope,
    /// The run's shared-journal writer, told about each alias.
    recorder: Option<Recorder>,
}

impl Naming {
    /// The scope of the run's chat.
    pub fn scope(&self) -> &Scope {
        &self.scope
    }

    /// The registry the run is in (for its byte accounting and wake-ups).
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Indexes `run` under `alias` (ignored when empty or over 256 bytes).
    pub fn name(&self, run: &Arc<Run>, alias: &str) {
        if alias.is_empty() || alias.len() > MAX_ALIAS_BYTES {
            return;
        }
        let alias = RunId::from(alias);
        self.registry.index(&self.owner, &alias, &self.scope, run);
        run.set_alias(&alias);
        if let Some(r) = &self.recorder {
            r.alias(&alias);
        }
        info!("run {}: known to the backend as {alias:?}", run.id());
    }

    /// Indexes `run` under `name` here and in the shared journal without making it the run's
    /// alias (an idempotency key's name, [`super::IdempotencyKey::names`]).
    pub fn index_only(&self, run: &Arc<Run>, name: &str) {
        let name = RunId::from(name);
        self.registry.index(&self.owner, &name, &self.scope, run);
        if let Some(r) = &self.recorder {
            r.alias(&name);
        }
    }
}
