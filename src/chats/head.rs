//! What a run that went live carries for the routes, kept in the run's slots
//! ([`crate::state::run::Slots`]): the upstream's response head, replayed to verbatim readers,
//! and the resume-token headers its record route hands out. A mirror's head is the one the
//! shared journal stored ([`crate::replica::mirror_head`]); the routes ask here, not the replica.

use std::sync::Arc;

use pingora_http::ResponseHeader;

use crate::config::Tokens;
use crate::replica::mirror_head;
use crate::state::run::Run;

/// The upstream's response head of a run produced here.
#[derive(Debug)]
struct UpstreamHead(Arc<ResponseHeader>);

/// The resume-token headers of a run's responses.
#[derive(Debug)]
struct TokenHeaders(Tokens);

/// Keeps the upstream's response head on a run going live here.
pub(super) fn keep_head(run: &Run, header: &ResponseHeader) {
    run.slots().insert(UpstreamHead(Arc::new(header.clone())));
}

/// Keeps the resume-token headers on a run whose route hands them out.
pub(super) fn keep_tokens(run: &Run, tokens: &Tokens) {
    if tokens.run_id_header.is_some() || tokens.token_header.is_some() {
        run.slots().insert(TokenHeaders(tokens.clone()));
    }
}

/// The upstream's response head of `run`: the one it went live with here, or, for a mirror,
/// the one the shared journal stored. `None` when neither is known.
pub fn upstream_head(run: &Run) -> Option<Arc<ResponseHeader>> {
    match run.slots().get::<UpstreamHead>() {
        Some(h) => Some(h.0.clone()),
        None => mirror_head(run),
    }
}

/// The resume-token headers of `run`'s responses, if its route hands them out.
pub fn tokens(run: &Run) -> Option<Tokens> {
    run.slots().get::<TokenHeaders>().map(|t| t.0.clone())
}
