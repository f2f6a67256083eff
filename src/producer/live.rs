//! Going live: a run recording an upstream answer is made (in memory, or through the shared
//! journal's recorder), joins its chat in the registry, has its writer spawned when a journal is
//! set, and is named by the aliases the request and the response header carry.

use std::sync::Arc;

use log::info;
use pingora_http::ResponseHeader;

use super::Rules;
use crate::config::Alias;
use crate::replica::{header_text, spawn_writer, Meta, Recorder, Replica};
use crate::state::auth::Owner;
use crate::state::registry::{Pending, Registry};
use crate::state::run::{ObserverGuard, Run};
use crate::vocab::{RunId, Scope};

/// A run just gone live: its chat's scope and owner, the requester's observer guard, and the
/// shared-journal recorder when one is set.
pub(super) struct Live {
    /// The run.
    pub(super) run: Arc<Run>,
    /// The chat's scope.
    pub(super) scope: Scope,
    /// Who recorded it.
    pub(super) owner: Owner,
    /// Counts the requester as attached.
    pub(super) guard: ObserverGuard,
    /// The run's shared-journal writer's handle.
    pub(super) recorder: Option<Recorder>,
}

/// Makes run `run_id` for the recordable answer `header` and makes it its chat's current run
/// (the pending registration ends here). With a shared journal, the run records through a
/// [`Recorder`] whose writer task is spawned now.
pub(super) fn go_live(
    registry: &Registry,
    journal: Option<&Arc<Replica>>,
    pending: Pending,
    run_id: RunId,
    rules: &Rules,
    header: &ResponseHeader,
) -> Live {
    let raw_cap = rules.raw.as_ref().map(|r| r.cap);
    let window = rules.window;
    let (run, recorder) = match journal {
        Some(_) => {
            let (rec, inbox) = Recorder::new(&run_id, window, raw_cap);
            let run = Arc::new(Run::with_journal(run_id, Box::new(rec.clone())));
            (run, Some((rec, inbox)))
        }
        None => (Arc::new(Run::with_raw(run_id, window, raw_cap)), None),
    };
    run.set_header(header.clone());
    let tokens = &rules.tokens;
    if tokens.run_id_header.is_some() || tokens.token_header.is_some() {
        run.set_tokens(tokens.clone());
    }
    let scope = pending.scope().clone();
    let owner = pending.owner();
    let requested_ms = pending.since_ms();
    let guard = run.observe();
    registry.go_live(&pending, run.clone());
    drop(pending);
    let recorder = match (journal, recorder) {
        (Some(c), Some((rec, inbox))) => {
            let meta = Meta {
                scope: scope.clone(),
                owner,
                header: header_text(header),
                requested_ms,
            };
            spawn_writer(c.clone(), run.clone(), inbox, meta);
            Some(rec)
        }
        _ => None,
    };
    Live {
        run,
        scope,
        owner,
        guard,
        recorder,
    }
}

/// The aliases known at go-live: the request's (`request:` sources, read by the record route)
/// and the response header's (`header:` sources).
pub(super) fn known_aliases(
    aliases: &[Alias],
    request_aliases: Vec<String>,
    header: &ResponseHeader,
) -> Vec<String> {
    let from_header = aliases.iter().filter_map(|a| match a {
        Alias::Header(h) => header
            .headers
            .get(h.as_str())?
            .to_str()
            .ok()
            .map(str::to_string),
        _ => None,
    });
    request_aliases.into_iter().chain(from_header).collect()
}

/// The JSON pointers of the `event:` aliases, looked for in each event.
pub(super) fn event_aliases(aliases: &[Alias]) -> Vec<String> {
    aliases
        .iter()
        .filter_map(|a| match a {
            Alias::Event(p) => Some(p.clone()),
            _ => None,
        })
        .collect()
}

/// Indexes a run's aliases (the backend's names for it) in the registry, for its owner.
pub(super) struct Naming<'a> {
    pub(super) registry: &'a Registry,
    pub(super) owner: Owner,
    pub(super) scope: &'a Scope,
    /// The run's shared-journal writer, told about each alias.
    pub(super) recorder: Option<Recorder>,
}

impl Naming<'_> {
    /// Indexes `run` under `alias` (ignored when empty or over 256 bytes).
    pub(super) fn name(&self, run: &Arc<Run>, alias: &str) {
        if alias.is_empty() || alias.len() > 256 {
            return;
        }
        let alias = RunId::from(alias);
        self.registry.index(&self.owner, &alias, self.scope, run);
        run.set_alias(&alias);
        if let Some(r) = &self.recorder {
            r.alias(&alias);
        }
        info!("run {}: known to the backend as {alias:?}", run.id());
    }

    /// Indexes `run` under `name` here and in the shared journal without making it the run's
    /// alias (an idempotency key's name).
    pub(super) fn index_only(&self, run: &Arc<Run>, name: &str) {
        let name = RunId::from(name);
        self.registry.index(&self.owner, &name, self.scope, run);
        if let Some(r) = &self.recorder {
            r.alias(&name);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::config::{Commit, KeySource, Tokens};
    use crate::record::format::FormatChoice;
    use crate::state::registry::Admission;

    fn rules(aliases: Vec<Alias>, request_aliases: Vec<String>, tokens: Tokens) -> Rules {
        Rules {
            format: FormatChoice::Auto,
            commit: Commit::Eof,
            window: 16,
            max_event: 1 << 16,
            raw: None,
            unique_ids: false,
            aliases,
            request_aliases,
            keys: Vec::new(),
            tokens,
        }
    }

    #[test]
    fn a_run_goes_live_as_its_chats_current_run_for_the_owner_that_registered_it() {
        let reg = Registry::new(Duration::from_secs(60), 100);
        let scope = Scope::from("c");
        let pending = reg
            .register(&scope, Owner::NONE, &RunId::from("r1"), Admission::Always)
            .unwrap();
        let mut header = ResponseHeader::build(200, None).unwrap();
        header
            .insert_header("content-type", "text/event-stream")
            .unwrap();
        let tokens = Tokens {
            run_id_header: Some("x-run".into()),
            token_header: None,
            ttl: Duration::from_secs(60),
        };
        let r = rules(vec![], vec![], tokens);
        let live = go_live(&reg, None, pending, RunId::from("r1"), &r, &header);
        assert_eq!(live.run.id(), "r1");
        assert_eq!(live.scope, scope);
        assert!(live.recorder.is_none());
        assert_eq!(
            live.run.observers(),
            1,
            "the requester is counted as attached"
        );
        let current = reg.current(&scope, &Owner::NONE).expect("current run");
        assert!(Arc::ptr_eq(&current, &live.run));
        assert!(
            live.run.tokens().is_some(),
            "the route's token headers are kept"
        );
        assert_eq!(
            live.run.header().map(|h| h.status.as_u16()),
            Some(200),
            "the upstream header is kept for verbatim readers"
        );
    }

    #[test]
    fn aliases_known_at_go_live_come_from_the_request_then_the_header_and_events_name_pointers() {
        let aliases = vec![
            Alias::Event("/thread_id".into()),
            Alias::Header("x-backend-run".into()),
            Alias::Request(KeySource::Json {
                pointer: "/id".into(),
                field: None,
            }),
            Alias::Header("x-absent".into()),
        ];
        let mut header = ResponseHeader::build(200, None).unwrap();
        header.insert_header("x-backend-run", "b-7").unwrap();
        let known = known_aliases(&aliases, vec!["req-1".into()], &header);
        assert_eq!(known, ["req-1", "b-7"]);
        assert_eq!(event_aliases(&aliases), ["/thread_id"]);
    }

    #[test]
    fn naming_indexes_the_run_under_its_alias_and_ignores_empty_or_overlong_ones() {
        let reg = Registry::new(Duration::from_secs(60), 100);
        let scope = Scope::from("c");
        let pending = reg
            .register(&scope, Owner::NONE, &RunId::from("r1"), Admission::Always)
            .unwrap();
        let header = ResponseHeader::build(200, None).unwrap();
        let r = rules(vec![], vec![], Tokens::default());
        let live = go_live(&reg, None, pending, RunId::from("r1"), &r, &header);
        let naming = Naming {
            registry: &reg,
            owner: Owner::NONE,
            scope: &scope,
            recorder: None,
        };
        naming.name(&live.run, "");
        naming.name(&live.run, &"x".repeat(257));
        naming.name(&live.run, "backend-1");
        assert_eq!(live.run.alias().as_deref(), Some("backend-1"));
        let (found_scope, found) = reg
            .by_id(&Owner::NONE, &RunId::from("backend-1"))
            .expect("found by its alias");
        assert_eq!(found_scope, scope);
        assert!(Arc::ptr_eq(&found, &live.run));
        assert!(reg.by_id(&Owner::NONE, &RunId::from("")).is_none());
    }
}
