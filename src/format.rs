//! Stream formats: the seam that turns one upstream SSE event into a classified [`Event`]: its
//! JSON, its type, whether it is a delta that may merge with its neighbours (and where its key and
//! text sit in its own bytes), and whether it ends its stream.
//!
//! Each format is one file under `format/` implementing [`Format`]; [`compact`](crate::compact)
//! only compares the [`MergeClass`] and key a format hands it, so it knows no format. The hot path
//! builds no JSON tree: a format borrows the few fields it needs as raw spans of the event's own
//! bytes. Data that is not a JSON object is wrapped as an AG-UI `RAW` event
//! (`{"type":"RAW","source":"sse","event":{"event":<name>,"data":<string>}}`) by every format.

pub mod agui;

use std::fmt::Debug;
use std::ops::Range;

use bytes::{BufMut, Bytes, BytesMut};

use crate::sse::SseEvent;

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
    /// The escaped contents of the delta's string literal, without its quotes.
    pub delta: Range<usize>,
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
    /// Set when the event ends its stream (per its format).
    pub terminal: bool,
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

/// A stream format: classifies one SSE event of its streams.
pub trait Format: Send + Sync + Debug {
    /// The format's name, as configured and as logged.
    fn name(&self) -> &'static str;

    /// Classifies one decoded SSE event. Runs once per upstream event on the producer's task;
    /// must not fail: data it cannot read is kept verbatim (a JSON object) or wrapped as `RAW`.
    fn classify(&self, sse: &SseEvent) -> Event;
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
    crate::json::write_str(&mut out, &name);
    out.put_slice(b",\"data\":");
    crate::json::write_str(&mut out, &text);
    out.put_slice(b"}}");
    // `{"type":"` is 9 bytes; `RAW` follows.
    const TY: Range<usize> = 9..12;
    debug_assert_eq!(&RAW_PREFIX[TY], b"RAW");
    Event {
        json: out.freeze(),
        ty: TY,
        name: 0..0,
        merge: None,
        terminal: false,
    }
}

#[cfg(test)]
mod tests;
