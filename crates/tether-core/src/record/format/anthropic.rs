//! Anthropic Messages: `event: <name>\ndata: {"type":"<name>",…}` events (anthropic-sdk-python's
//! `RawMessageStreamEvent`, accumulated by `lib/streaming/_messages.py`'s `accumulate_event`).
//!
//! A `content_block_delta` merges with the adjacent deltas of the same block `index` and the same
//! `delta.type` when it is one of the three text-like kinds whose field the SDK concatenates:
//! `text_delta.text`, `input_json_delta.partial_json`, `thinking_delta.thinking`. It merges only
//! when it carries nothing else (top level exactly `type`, `index`, `delta`; `delta` exactly its
//! `type` and that field): a merged event keeps the first delta's JSON, so anything a later delta
//! carried beyond its text would be lost. `signature_delta`, `citations_delta` and every other
//! event stay verbatim. `ping` is transient (the SDK skips it), `message_stop` ends the stream,
//! an `error` event (by its JSON `type` or its SSE `event:` name) fails the turn. Every event keeps
//! its SSE `event:` name when it differs from the JSON `type`: the SDK skips events without one.

use std::fmt;
use std::ops::Range;

use bytes::Bytes;
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

use super::{one_line, verbatim, Event, Format, FormatKind, Merge, MergeClass};
use crate::record::sse::SseEvent;
use crate::vocab::end::EndReason;

/// `content_block_delta` with a `text_delta`: `delta.text` concatenates, keyed by `index`.
pub const TEXT_DELTA: MergeClass = class(300);
/// `content_block_delta` with an `input_json_delta`: `delta.partial_json` concatenates, keyed by
/// `index`.
pub const INPUT_JSON_DELTA: MergeClass = class(301);
/// `content_block_delta` with a `thinking_delta`: `delta.thinking` concatenates, keyed by `index`.
pub const THINKING_DELTA: MergeClass = class(302);

const fn class(id: u16) -> MergeClass {
    MergeClass {
        id,
        key_optional: false,
    }
}

/// The Anthropic Messages format.
#[derive(Debug, Clone, Copy, Default)]
pub struct Anthropic;

impl Format for Anthropic {
    fn kind(&self) -> FormatKind {
        FormatKind::Anthropic
    }

    /// A stream starts with `message_start` (its `message` an object), or, when the API fails
    /// before the message starts, with `event: error` whose `error` is an object (OpenAI
    /// Responses' and the AI SDK's `error` events carry no nested `error` object).
    fn recognizes(&self, first: &SseEvent) -> bool {
        let data = one_line(&first.data);
        let Some((event, top)) = parse(&data) else {
            return false;
        };
        let is_object =
            |s: &Option<Range<usize>>| s.as_ref().is_some_and(|r| data[r.start] == b'{');
        match event.ty() {
            b"message_start" => is_object(&top.message),
            b"error" => is_object(&top.error) && first.event.as_deref() == Some(&b"error"[..]),
            _ => false,
        }
    }

    fn classify(&self, sse: &SseEvent) -> Event {
        let data = one_line(&sse.data);
        let mut event = match parse(&data) {
            Some((event, _)) => event,
            // Not an object, or JSON the borrowing pass cannot take (a duplicate member): kept
            // verbatim (or wrapped as `RAW`), never merged.
            None => verbatim(sse),
        };
        let name = sse.event.as_deref();
        match event.ty() {
            b"message_stop" => event.terminal = true,
            // The SDK skips `event: ping` (and any event without a name) before reading its data.
            b"ping" if name.is_none_or(|n| n == b"ping") => event.transient = true,
            _ => {}
        }
        // The SDK raises on `event: error` whatever its data; the data's own `type` says so too.
        if event.ty() == b"error" || name == Some(&b"error"[..]) {
            event.failure = Some(EndReason::ErrorEvent);
        }
        event.with_sse_name(sse)
    }
}

/// Spans found by the one borrowing pass over an event's JSON object.
struct Found {
    /// `message` (of `message_start`).
    message: Option<Range<usize>>,
    /// `error` (of `error`).
    error: Option<Range<usize>>,
}

/// Classifies a JSON object event in one borrowing pass; `None` when `data` is not a JSON object
/// the pass can take.
fn parse(data: &Bytes) -> Option<(Event, Found)> {
    let start = data.iter().position(|b| !b.is_ascii_whitespace())?;
    if data[start] != b'{' {
        return None;
    }
    // Validating UTF-8 up front lets serde_json skip it, and covers the members it ignores.
    let text = std::str::from_utf8(data).ok()?;
    let top: Top = serde_json::from_str(text).ok()?;
    let spans = super::Spans::new(data);
    let span = |raw: Option<&RawValue>| spans.of(raw);
    let inner = |r: Range<usize>| spans.string(r);
    let ty = span(top.ty).and_then(inner).unwrap_or(0..0);
    let merge = (&data[ty.clone()] == b"content_block_delta" && !top.others)
        .then_some(())
        .and_then(|()| {
            let delta = top.delta.as_ref()?;
            // Exactly `type` and the kind's own field: any other member would be lost.
            if delta.others {
                return None;
            }
            let (class, field) = match span(delta.ty).map(|r| &data[r])? {
                br#""text_delta""# if delta.partial_json.is_none() && delta.thinking.is_none() => {
                    (TEXT_DELTA, delta.text)
                }
                br#""input_json_delta""# if delta.text.is_none() && delta.thinking.is_none() => {
                    (INPUT_JSON_DELTA, delta.partial_json)
                }
                br#""thinking_delta""# if delta.text.is_none() && delta.partial_json.is_none() => {
                    (THINKING_DELTA, delta.thinking)
                }
                _ => return None,
            };
            let delta = inner(span(field)?)?;
            // A plain non-negative integer: equal indices have equal bytes.
            let key = span(top.index)?;
            if !data[key.clone()].iter().all(u8::is_ascii_digit) {
                return None;
            }
            Some(Merge {
                class,
                key,
                sub: 0,
                delta,
                last: None,
            })
        });
    let found = Found {
        message: span(top.message),
        error: span(top.error),
    };
    let mut event = Event::verbatim(data.clone(), ty, 0..0);
    event.merge = merge;
    Some((event, found))
}

/// The top-level members of an event, borrowed; `others` is set when it has any member besides
/// `type`, `index` and `delta`.
#[derive(Default)]
struct Top<'a> {
    ty: Option<&'a RawValue>,
    index: Option<&'a RawValue>,
    delta: Option<Delta<'a>>,
    message: Option<&'a RawValue>,
    error: Option<&'a RawValue>,
    others: bool,
}

/// The members of a `delta` object, borrowed; `others` is set when it has any member besides
/// `type`, `text`, `partial_json` and `thinking`.
#[derive(Default)]
struct Delta<'a> {
    ty: Option<&'a RawValue>,
    text: Option<&'a RawValue>,
    partial_json: Option<&'a RawValue>,
    thinking: Option<&'a RawValue>,
    others: bool,
}

#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "snake_case")]
enum TopKey {
    Type,
    Index,
    Delta,
    Message,
    Error,
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "snake_case")]
enum DeltaKey {
    Type,
    Text,
    PartialJson,
    Thinking,
    #[serde(other)]
    Other,
}

/// Stores a member's value; a member seen twice fails the pass (the event stays verbatim).
fn set<T, E: de::Error>(slot: &mut Option<T>, value: T, name: &'static str) -> Result<(), E> {
    if slot.is_some() {
        return Err(E::duplicate_field(name));
    }
    *slot = Some(value);
    Ok(())
}

impl<'de> Deserialize<'de> for Top<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Top<'de>;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an Anthropic stream event object")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Top<'de>, A::Error> {
                let mut top = Top::default();
                while let Some(key) = map.next_key::<TopKey>()? {
                    match key {
                        TopKey::Type => set(&mut top.ty, map.next_value()?, "type")?,
                        TopKey::Index => set(&mut top.index, map.next_value()?, "index")?,
                        TopKey::Delta => set(&mut top.delta, map.next_value()?, "delta")?,
                        TopKey::Message => {
                            top.others = true;
                            set(&mut top.message, map.next_value()?, "message")?
                        }
                        TopKey::Error => {
                            top.others = true;
                            set(&mut top.error, map.next_value()?, "error")?
                        }
                        TopKey::Other => {
                            top.others = true;
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(top)
            }
        }
        d.deserialize_map(V)
    }
}

impl<'de> Deserialize<'de> for Delta<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Delta<'de>;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a delta object")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Delta<'de>, A::Error> {
                let mut delta = Delta::default();
                while let Some(key) = map.next_key::<DeltaKey>()? {
                    match key {
                        DeltaKey::Type => set(&mut delta.ty, map.next_value()?, "type")?,
                        DeltaKey::Text => set(&mut delta.text, map.next_value()?, "text")?,
                        DeltaKey::PartialJson => {
                            set(&mut delta.partial_json, map.next_value()?, "partial_json")?
                        }
                        DeltaKey::Thinking => {
                            set(&mut delta.thinking, map.next_value()?, "thinking")?
                        }
                        DeltaKey::Other => {
                            delta.others = true;
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(delta)
            }
        }
        d.deserialize_map(V)
    }
}

#[cfg(test)]
mod tests;
