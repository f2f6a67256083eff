//! Reading a request for the routes: its key-source view ([`Parts`]: path captures, query,
//! headers), built once per request by [`with_parts`], the keys the route's sources name (the
//! run, a chat or run [`Name`]), and a turn-like request read whole ([`read_turn`]: the caller,
//! the capped body parsed as JSON once, and everything the route reads from it).

use bytes::Bytes;
use pingora_proxy::Session;
use serde_json::{Map, Value};

use super::session::{header_value, read_body, Handled};
use super::shared::Shared;
use super::Matched;
use crate::chats::{Name, Owner};
use crate::config::{Alias, KeySource, Route};
use crate::error::{ApiError, Code};
use crate::request::{self, Parts};
use crate::state::run::mint_run_id;
use crate::vocab::{ChatId, RunId};

/// The longest idempotency key kept (a longer one is ignored, and the request is a new turn).
const MAX_KEY_BYTES: usize = 256;

/// Hands `f` the request's key-source view: the matched route's path captures, the query and
/// the headers.
pub(crate) fn with_parts<R>(
    session: &Session,
    m: &Matched<'_>,
    f: impl FnOnce(&Parts<'_>) -> R,
) -> R {
    let header = |h: &str| header_value(session, h);
    f(&Parts {
        captures: &m.captures,
        query: session.req_header().uri.query(),
        header: &header,
    })
}

/// The first of `sources` the request carries, as text.
pub(crate) fn first_key(
    sources: &[KeySource],
    parts: &Parts<'_>,
    body: Option<&Map<String, Value>>,
) -> Result<Option<String>, ApiError> {
    for src in sources {
        match request::key(src, parts, body, Code::InvalidRunId)? {
            Some(Value::String(s)) if !s.is_empty() => return Ok(Some(s)),
            Some(Value::Number(n)) => return Ok(Some(n.to_string())),
            _ => {}
        }
    }
    Ok(None)
}

/// The value of one optional source, as text ([`first_key`] of it).
pub(crate) fn one_key(
    source: Option<&KeySource>,
    parts: &Parts<'_>,
    body: Option<&Map<String, Value>>,
) -> Result<Option<String>, ApiError> {
    match source {
        Some(src) => first_key(std::slice::from_ref(src), parts, body),
        None => Ok(None),
    }
}

/// The run a request names by the first of `sources` it carries: tether's run id or an alias.
pub(crate) fn run_key(
    sources: &[KeySource],
    parts: &Parts<'_>,
    body: Option<&Map<String, Value>>,
) -> Result<Option<RunId>, ApiError> {
    Ok(first_key(sources, parts, body)?.map(RunId::from))
}

/// What a resume or status request names: by the route's `run` sources (tether's run id or an
/// alias, required when the route has any), else the chat's current run.
pub(crate) fn name(
    route: &Route,
    parts: &Parts<'_>,
    body: Option<&Map<String, Value>>,
) -> Result<Name, ApiError> {
    if route.run.is_empty() {
        return Ok(Name::Chat(request::chat_id(&route.chat_id, parts, body)?));
    }
    match run_key(&route.run, parts, body)? {
        Some(id) => Ok(Name::Run(id)),
        None => Err(ApiError::new(
            Code::InvalidRunId,
            "the request names no run",
        )),
    }
}

/// A turn-like request (record and annotate routes) read whole: the caller, the body, and what
/// the route reads from it. The body is parsed as JSON once, here.
pub(crate) struct TurnRequest {
    /// The caller.
    pub(crate) owner: Owner,
    /// The request body, as received.
    pub(crate) body: Bytes,
    /// The chat the turn belongs to.
    pub(crate) chat_id: ChatId,
    /// The requester asked for protocol-1 frames.
    pub(crate) protocol1: bool,
    /// Values of the route's `request:` aliases.
    pub(crate) aliases: Vec<String>,
    /// The route's idempotency key (absent, empty, over 256 bytes, or the route has none:
    /// `None`).
    pub(crate) key: Option<String>,
    /// The route's `resume_on` header's value: the id of a frame this client read.
    pub(crate) resume_id: Option<String>,
}

/// Reads a turn-like request: the caller, the capped body, and the chat id from where the route
/// says (see [`TurnRequest`]).
pub(crate) async fn read_turn(
    s: &Shared,
    session: &mut Session,
    m: &Matched<'_>,
) -> Result<TurnRequest, Handled> {
    let owner = s.chats.owner(&session.req_header().headers).map_err(Err)?;
    let body = read_body(session, s).await.map_err(Handled::from)?;
    let read = with_parts(session, m, |parts| turn(m.route, parts, &body));
    let Read {
        chat_id,
        protocol1,
        aliases,
        key,
    } = read.map_err(Err)?;
    let resume_id = match &m.route.resume_on {
        Some(KeySource::Header(name)) => header_value(session, name),
        _ => None,
    };
    Ok(TurnRequest {
        owner,
        body,
        chat_id,
        protocol1,
        aliases,
        key,
        resume_id,
    })
}

/// What [`turn`] reads from a turn's body and parts.
struct Read {
    chat_id: ChatId,
    protocol1: bool,
    aliases: Vec<String>,
    key: Option<String>,
}

/// Reads a turn: its chat id and protocol, then the route's `request:` aliases and idempotency
/// key, from one parse of the body. A route that knows its runs by the backend's ids needs no
/// chat id: such a turn is a chat of its own (found by its aliases), and not protocol 1.
fn turn(route: &Route, parts: &Parts<'_>, body: &[u8]) -> Result<Read, ApiError> {
    let map = request::record_body(&route.chat_id, body)?;
    let (chat_id, protocol1) = match request::chat_id(&route.chat_id, parts, map.as_ref()) {
        Err(e) if e.code == Code::MissingChatId && !route.aliases.is_empty() => {
            (ChatId::from(format!("~{}", mint_run_id())), false)
        }
        Err(e) => return Err(e),
        Ok(chat_id) => match &map {
            Some(m) => (chat_id, request::protocol1(m)?),
            None => (chat_id, false),
        },
    };
    let map = map.as_ref();
    let aliases = route
        .aliases
        .iter()
        .filter_map(|a| match a {
            Alias::Request(src) => one_key(Some(src), parts, map).ok().flatten(),
            _ => None,
        })
        .collect();
    let key = one_key(route.idempotency_key.as_ref(), parts, map)
        .ok()
        .flatten()
        .filter(|k| !k.is_empty() && k.len() <= MAX_KEY_BYTES);
    Ok(Read {
        chat_id,
        protocol1,
        aliases,
        key,
    })
}
