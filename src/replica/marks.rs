//! What the replica keeps on a run's handle, in its slots ([`crate::state::run::Slots`]): the
//! mark that a run produced here reached the shared journal, and the upstream's response head a
//! mirror read from the journal; and the head's text form the journal stores.

use std::sync::Arc;

use pingora_http::ResponseHeader;

use crate::state::run::Run;

/// The mark a run's writer leaves once the run's go-live reached the shared journal.
#[derive(Debug)]
struct Journaled;

/// Marks `run` as written to the shared journal.
pub(crate) fn mark_journaled(run: &Run) {
    run.slots().insert(Journaled);
}

/// Whether `run`'s go-live reached the shared journal.
pub(crate) fn is_journaled(run: &Run) -> bool {
    run.slots().contains::<Journaled>()
}

/// The upstream's response head of a mirror, as the producing replica stored it.
#[derive(Debug)]
struct MirrorHead(Arc<ResponseHeader>);

/// Keeps on the mirror `run` the upstream head stored with it in the journal, when it parses.
pub(crate) fn keep_mirror_head(run: &Run, text: &str) {
    if let Some(h) = header(text) {
        run.slots().insert(MirrorHead(Arc::new(h)));
    }
}

/// The upstream's response head of the mirror `run`, as the journal stored it.
pub fn mirror_head(run: &Run) -> Option<Arc<ResponseHeader>> {
    run.slots().get::<MirrorHead>().map(|h| h.0.clone())
}

/// The upstream response header stored with the run (`status\nname: value\n…`).
fn header(text: &str) -> Option<ResponseHeader> {
    let mut lines = text.lines();
    let status: u16 = lines.next()?.parse().ok()?;
    let mut h = ResponseHeader::build(status, None).ok()?;
    for l in lines {
        if let Some((k, v)) = l.split_once(": ") {
            h.append_header(k.to_string(), v).ok()?;
        }
    }
    Some(h)
}

/// Serializes a response header in the form the journal stores (`status\nname: value\n…`).
pub fn header_text(h: &ResponseHeader) -> String {
    let mut out = h.status.as_u16().to_string();
    for (k, v) in h.headers.iter() {
        if let Ok(v) = v.to_str() {
            out.push('\n');
            out.push_str(k.as_str());
            out.push_str(": ");
            out.push_str(v);
        }
    }
    out
}
