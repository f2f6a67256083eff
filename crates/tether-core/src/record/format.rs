//! Stream formats: the seam that turns one upstream SSE event into a classified [`Event`]: its
//! JSON, its type, whether it is a delta that may merge with its neighbours (and where its key and
//! text sit in its own bytes), and whether it ends its stream.
//!
//! Each format is one file under `format/` implementing [`Format`]; [`compact`](crate::record::compact)
//! only compares the [`MergeClass`] and key a format hands it, so it knows no format. The hot path
//! builds no JSON tree: a format borrows the few fields it needs as raw spans of the event's own
//! bytes. Data that is not a JSON object is wrapped as an AG-UI `RAW` event
//! (`{"type":"RAW","source":"sse","event":{"event":<name>,"data":<string>}}`) by every format.

pub mod agui;
pub mod ai_sdk;
pub mod anthropic;
pub mod openai_chat;
pub mod openai_responses;

use std::fmt::Debug;
use std::ops::Range;

use bytes::{BufMut, Bytes, BytesMut};

use crate::record::sse::SseEvent;
pub use crate::vocab::end::EndReason;
pub use crate::vocab::kinds::{FormatChoice, FormatKind};

impl FormatKind {
    /// The classifier of this format.
    pub fn format(self) -> &'static dyn Format {
        match self {
            FormatKind::Agui => &agui::Agui,
            FormatKind::OpenaiChat => &openai_chat::OpenaiChat,
            FormatKind::OpenaiResponses => &openai_responses::OpenaiResponses,
            FormatKind::Anthropic => &anthropic::Anthropic,
            FormatKind::AiSdk => &ai_sdk::AiSdk,
        }
    }
}

/// The format a response's headers announce, if they do (`x-vercel-ai-ui-message-stream: v1`).
pub fn detect_from_headers(header: impl Fn(&str) -> Option<String>) -> Option<FormatKind> {
    header("x-vercel-ai-ui-message-stream")
        .is_some_and(|v| v.trim() == "v1")
        .then_some(FormatKind::AiSdk)
}

/// The format of a stream whose first event is `first`: the first format (in [`FormatKind::ALL`]
/// order) that recognizes its shape, else AG-UI (which records anything verbatim).
pub fn detect_from_event(first: &SseEvent) -> FormatKind {
    FormatKind::ALL
        .iter()
        .copied()
        .find(|k| k.format().recognizes(first))
        .unwrap_or(FormatKind::Agui)
}

/// Any event kept as it is: its JSON object verbatim (type found, nothing merged), or a `RAW`
/// wrapper for data that is not a JSON object. The starting point of every format.
pub fn verbatim(sse: &SseEvent) -> Event {
    let data = one_line(&sse.data);
    let start = data.iter().position(|b| !b.is_ascii_whitespace());
    if start.is_some_and(|i| data[i] == b'{') {
        if let Some(ty) = type_span(&data) {
            return Event::verbatim(data, ty, 0..0);
        }
    }
    wrap_raw(sse.event.as_deref(), &sse.data)
}

/// The span of a JSON object's top-level `type` string contents (empty when it has none), or
/// `None` when `data` is not a valid JSON object.
pub fn type_span(data: &Bytes) -> Option<Range<usize>> {
    #[derive(serde::Deserialize)]
    struct Ty<'a> {
        #[serde(rename = "type", borrow, default)]
        ty: Option<&'a serde_json::value::RawValue>,
    }
    let text = std::str::from_utf8(data).ok()?;
    let t: Ty = match serde_json::from_str(text) {
        Ok(t) => t,
        Err(_) => {
            serde_json::from_str::<serde::de::IgnoredAny>(text).ok()?;
            return Some(0..0);
        }
    };
    let Some(raw) = t.ty else { return Some(0..0) };
    let s = raw.get();
    let off = s.as_ptr() as usize - data.as_ptr() as usize;
    Some(if s.len() >= 2 && s.starts_with('"') {
        off + 1..off + s.len() - 1
    } else {
        0..0
    })
}

/// Which deltas may merge with each other: a format-chosen id, unique across formats, and whether
/// a later delta may omit the key and still join the open group (AG-UI `*_CHUNK` events).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MergeClass {
    /// Deltas merge only with deltas of the same id.
    pub id: u16,
    /// A delta with an empty key joins the open group of its class.
    pub key_optional: bool,
}

/// Where a mergeable delta sits in the event's JSON.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Merge {
    /// Which deltas this one may merge with.
    pub class: MergeClass,
    /// The raw JSON of the merge key (with quotes), empty when absent.
    pub key: Range<usize>,
    /// A second part of the key the format computes (a tool call's or content part's index).
    pub sub: u64,
    /// The escaped contents of the delta's string literal, without its quotes.
    pub delta: Range<usize>,
    /// A member whose value the last merged delta's replaces (OpenAI Responses'
    /// `sequence_number`); the merged event carries it last.
    pub last: Option<LastWins>,
}

/// A top-level member of a delta event whose merged value is the last delta's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LastWins {
    /// The member's bytes with exactly one adjacent comma (removing them leaves valid JSON).
    pub member: Range<usize>,
    /// The member's key and colon (`"sequence_number":`).
    pub label: Range<usize>,
    /// The member's value.
    pub value: Range<usize>,
}

/// One classified upstream event, ready for the run log.
#[derive(Debug, Clone)]
pub struct Event {
    /// The event's JSON object, one line: the upstream data, or its `RAW` wrapper.
    pub json: Bytes,
    /// The raw `type` string literal contents (empty when absent).
    pub ty: Range<usize>,
    /// The raw `name` string literal contents (empty when absent; used by `CUSTOM`).
    pub name: Range<usize>,
    /// Set when the event is a delta that may merge with adjacent ones.
    pub merge: Option<Merge>,
    /// Set when the event is its format's end of a turn (`RUN_FINISHED`, `message_stop`, …).
    pub terminal: bool,
    /// Set when the event is a finish marker that must come before the terminal event for the
    /// turn to count as complete (OpenAI's `finish_reason` chunk, the AI SDK's `finish`).
    pub finish: bool,
    /// Set when the event says the turn failed (`response.failed`, an Anthropic `error`, …).
    pub failure: Option<EndReason>,
    /// Set when a snapshot may leave the event out (Anthropic `ping`): it neither appears in
    /// the compacted history nor closes an open merge group.
    pub transient: bool,
    /// Set when the event carries token usage and has no `type` that says so (OpenAI Chat's
    /// chunk with a non-null `usage`); [`usage`](crate::record::usage) reads such events, and
    /// the other formats' usage events by their type.
    pub carries_usage: bool,
    /// The SSE `event:` name, when the upstream sent one that differs from the JSON `type`.
    pub sse_name: Option<Bytes>,
}

impl Event {
    /// The event's `type` (`RAW` for wrapped data).
    pub fn ty(&self) -> &[u8] {
        &self.json[self.ty.clone()]
    }

    /// The event's `name` field, when it is a plain string.
    pub fn name(&self) -> &[u8] {
        &self.json[self.name.clone()]
    }

    /// The raw merge key of a delta (empty when absent or not a delta).
    pub fn merge_key(&self) -> &[u8] {
        self.merge
            .as_ref()
            .map_or(&[][..], |m| &self.json[m.key.clone()])
    }

    /// The escaped delta text of a mergeable delta.
    pub fn delta(&self) -> &[u8] {
        self.merge
            .as_ref()
            .map_or(&[][..], |m| &self.json[m.delta.clone()])
    }
}

/// Where values that serde_json borrowed from one event's bytes sit in those bytes: every
/// `&RawValue` a format deserializes from the event's text points into it, so its offset from the
/// text's start is its span.
#[derive(Debug, Clone, Copy)]
pub struct Spans<'d> {
    data: &'d [u8],
}

impl<'d> Spans<'d> {
    /// Spans in `data`, the text the values were borrowed from.
    pub fn new(data: &'d [u8]) -> Self {
        Spans { data }
    }

    /// The span of a borrowed value (`None` when absent, or not borrowed from `data`).
    pub fn of(&self, raw: Option<&serde_json::value::RawValue>) -> Option<Range<usize>> {
        let s = raw?.get();
        let off = (s.as_ptr() as usize).checked_sub(self.data.as_ptr() as usize)?;
        (off + s.len() <= self.data.len()).then_some(off..off + s.len())
    }

    /// The contents of the string literal at `r` (inside its quotes); `None` for other values.
    pub fn string(&self, r: Range<usize>) -> Option<Range<usize>> {
        (r.len() >= 2 && self.data[r.start] == b'"').then(|| r.start + 1..r.end - 1)
    }
}

/// A stream format: classifies one SSE event of its streams.
pub trait Format: Send + Sync + Debug {
    /// The format's kind (its configured name, its metric label).
    fn kind(&self) -> FormatKind;

    /// The format's name, as configured and as logged.
    fn name(&self) -> &'static str {
        self.kind().as_str()
    }

    /// Whether `first`, the first event of a stream, has this format's shape. Runs once per
    /// run on a route with `format = "auto"` whose headers named no format. Default: no.
    fn recognizes(&self, first: &SseEvent) -> bool {
        let _ = first;
        false
    }

    /// Whether a turn counts as complete only when a finish marker ([`Event::finish`]) came
    /// before its terminal event. Default: no.
    fn needs_finish(&self) -> bool {
        false
    }

    /// Classifies one decoded SSE event. Runs once per upstream event on the producer's task;
    /// must not fail: data it cannot read is kept verbatim (a JSON object) or wrapped as `RAW`.
    fn classify(&self, sse: &SseEvent) -> Event;

    /// The SSE frames that end a stream the format's own server stopped on purpose (its
    /// client shows a stopped answer, not an error), when the format has such an event. Runs
    /// once, when tether stops a run (a stop route, `max_run_duration`, the abandon timer, a
    /// drain): the frames are recorded after the upstream's, and a reader of the upstream's
    /// own bytes gets them and a clean end instead of a cut. Default: none (readers' streams
    /// are cut, as the upstream's was).
    fn stop_frames(&self) -> Option<&'static [u8]> {
        None
    }
}

impl Event {
    /// An event that is none of: delta, terminal, finish, failure, transient, usage.
    pub fn verbatim(json: Bytes, ty: Range<usize>, name: Range<usize>) -> Event {
        Event {
            json,
            ty,
            name,
            merge: None,
            terminal: false,
            finish: false,
            failure: None,
            transient: false,
            carries_usage: false,
            sse_name: None,
        }
    }

    /// Sets [`Event::sse_name`] from the SSE event's `event:` field when it differs from the
    /// JSON `type`.
    pub fn with_sse_name(mut self, sse: &SseEvent) -> Event {
        if let Some(name) = &sse.event {
            if name[..] != self.json[self.ty.clone()] {
                self.sse_name = Some(name.clone());
            }
        }
        self
    }
}

/// Multi-line JSON is joined with `\n`; outside strings that is whitespace, so replacing CR/LF
/// with spaces keeps the value and makes it one line. Copies only when needed.
pub fn one_line(data: &Bytes) -> Bytes {
    if memchr::memchr2(b'\n', b'\r', data).is_none() {
        return data.clone();
    }
    let v: Vec<u8> = data
        .iter()
        .map(|&b| if b == b'\n' || b == b'\r' { b' ' } else { b })
        .collect();
    Bytes::from(v)
}

/// The opening bytes of every `RAW` wrapper; `RAW` is the `type` value inside them.
const RAW_PREFIX: &[u8] = b"{\"type\":\"RAW\",\"source\":\"sse\",\"event\":{\"event\":";

/// Wraps data that is not a JSON object as an AG-UI `RAW` event.
pub fn wrap_raw(name: Option<&[u8]>, data: &[u8]) -> Event {
    let name = String::from_utf8_lossy(name.unwrap_or(b"message"));
    let text = String::from_utf8_lossy(data);
    let mut out = BytesMut::with_capacity(data.len() + name.len() + 64);
    out.put_slice(RAW_PREFIX);
    crate::record::json::write_str(&mut out, &name);
    out.put_slice(b",\"data\":");
    crate::record::json::write_str(&mut out, &text);
    out.put_slice(b"}}");
    // `{"type":"` is 9 bytes; `RAW` follows.
    const TY: Range<usize> = 9..12;
    debug_assert_eq!(&RAW_PREFIX[TY], b"RAW");
    Event::verbatim(out.freeze(), TY, 0..0)
}

#[cfg(test)]
mod tests;
