//! OpenAI Responses: `event: <type>\ndata: {"type":…,"sequence_number":n,…}` events
//! (openai-python `types/responses/response_stream_event.py`).
//!
//! Five kinds of delta merge with adjacent deltas of the same kind and key, their `delta` strings
//! joined: `response.output_text.delta` and `response.refusal.delta` (key `item_id`, sub-key
//! `content_index`), `response.function_call_arguments.delta` (`item_id`),
//! `response.reasoning_summary_text.delta` (`item_id`, `summary_index`) and
//! `response.reasoning_text.delta` (`item_id`, `content_index`); `output_index` is part of every
//! sub-key. A merged event keeps the first delta's members (its `obfuscation` among them) and
//! carries the last delta's `sequence_number`, moved to its end.
//!
//! A delta merges only when it has exactly the members its type defines, each of the expected
//! kind (string ids and deltas, non-negative integer indices and sequence number), no member
//! twice and no escaped member name; `logprobs`, where present, must be `[]` (a merge keeps only
//! the first delta's list, so a non-empty list would be lost). Everything else stays verbatim:
//! every `*.added`, `*.done` and lifecycle event, audio deltas, partial images, annotations,
//! tool-call progress. `response.completed` ends a turn; `response.failed` and
//! `response.incomplete` end it failed, and `error` says it failed. Frames carry the SSE
//! `event:` name when it differs from the JSON `type`.

use std::fmt;
use std::ops::Range;

use bytes::Bytes;
use serde::de::{self, Deserialize, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::value::RawValue;

use super::{one_line, wrap_raw, Event, Format, FormatKind, LastWins, Merge, MergeClass, Spans};
use crate::record::sse::SseEvent;
use crate::vocab::end::EndReason;

/// `response.output_text.delta`, keyed by `item_id`, sub-keyed by `content_index`.
pub const OUTPUT_TEXT: MergeClass = class(200);
/// `response.refusal.delta`, keyed by `item_id`, sub-keyed by `content_index`.
pub const REFUSAL: MergeClass = class(201);
/// `response.function_call_arguments.delta`, keyed by `item_id`.
pub const FUNCTION_CALL_ARGUMENTS: MergeClass = class(202);
/// `response.reasoning_summary_text.delta`, keyed by `item_id`, sub-keyed by `summary_index`.
pub const REASONING_SUMMARY_TEXT: MergeClass = class(203);
/// `response.reasoning_text.delta`, keyed by `item_id`, sub-keyed by `content_index`.
pub const REASONING_TEXT: MergeClass = class(204);

const fn class(id: u16) -> MergeClass {
    MergeClass {
        id,
        key_optional: false,
    }
}

/// The prefix of every Responses event type but `error`.
const TYPE_PREFIX: &[u8] = b"response.";

/// The OpenAI Responses format.
#[derive(Debug, Clone, Copy, Default)]
pub struct OpenaiResponses;

impl Format for OpenaiResponses {
    fn kind(&self) -> FormatKind {
        FormatKind::OpenaiResponses
    }

    /// A JSON object whose `type` is `response.…` (`response.created` first, or any event of a
    /// resumed stream), or an `error` event with a `sequence_number` (Anthropic's `error` has
    /// none).
    fn recognizes(&self, first: &SseEvent) -> bool {
        let data = one_line(&first.data);
        let Some((fields, _)) = read(&data) else {
            return false;
        };
        let ty = fields.ty.and_then(|t| string_contents(t.get()));
        match ty {
            Some(b"error") => fields.sequence_number.is_some(),
            Some(ty) => {
                ty.len() > TYPE_PREFIX.len()
                    && ty.starts_with(TYPE_PREFIX)
                    && ty
                        .iter()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._".contains(b))
            }
            None => false,
        }
    }

    fn classify(&self, sse: &SseEvent) -> Event {
        let data = one_line(&sse.data);
        match classify_json(&data) {
            Some(event) => event.with_sse_name(sse),
            None => wrap_raw(sse.event.as_deref(), &sse.data),
        }
    }
}

/// The top-level members a Responses delta may have, borrowed from the event's own bytes in one
/// pass; every other member is skipped (and noted).
#[derive(Default)]
struct Fields<'a> {
    ty: Option<&'a RawValue>,
    item_id: Option<&'a RawValue>,
    output_index: Option<&'a RawValue>,
    content_index: Option<&'a RawValue>,
    summary_index: Option<&'a RawValue>,
    delta: Option<&'a RawValue>,
    sequence_number: Option<&'a RawValue>,
    logprobs: Option<&'a RawValue>,
    obfuscation: Option<&'a RawValue>,
    /// A member none of the above, a member seen twice, or a member whose name is escaped: a
    /// delta with one never merges (a merge would drop or misplace it).
    unusual: bool,
}

/// A member name, as the visitor sorts it.
enum Key {
    Known(Name),
    Other,
}

/// The member names [`Fields`] keeps.
#[derive(Clone, Copy)]
enum Name {
    Type,
    ItemId,
    OutputIndex,
    ContentIndex,
    SummaryIndex,
    Delta,
    SequenceNumber,
    Logprobs,
    Obfuscation,
}

impl Name {
    fn of(s: &str) -> Option<Name> {
        Some(match s {
            "type" => Name::Type,
            "item_id" => Name::ItemId,
            "output_index" => Name::OutputIndex,
            "content_index" => Name::ContentIndex,
            "summary_index" => Name::SummaryIndex,
            "delta" => Name::Delta,
            "sequence_number" => Name::SequenceNumber,
            "logprobs" => Name::Logprobs,
            "obfuscation" => Name::Obfuscation,
            _ => return None,
        })
    }
}

/// A member name and whether it was written escaped.
struct KeySeen(Key, bool);

impl<'de> Deserialize<'de> for KeySeen {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = KeySeen;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a member name")
            }
            // serde_json hands out a borrowed name when it had no escapes.
            fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> Result<KeySeen, E> {
                Ok(KeySeen(Name::of(s).map_or(Key::Other, Key::Known), false))
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<KeySeen, E> {
                Ok(KeySeen(Name::of(s).map_or(Key::Other, Key::Known), true))
            }
        }
        d.deserialize_identifier(V)
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Fields<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Fields<'a>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Fields<'a>, A::Error> {
                let mut f = Fields::default();
                while let Some(KeySeen(key, escaped)) = map.next_key::<KeySeen>()? {
                    f.unusual |= escaped;
                    let Key::Known(name) = key else {
                        f.unusual = true;
                        map.next_value::<IgnoredAny>()?;
                        continue;
                    };
                    let slot = match name {
                        Name::Type => &mut f.ty,
                        Name::ItemId => &mut f.item_id,
                        Name::OutputIndex => &mut f.output_index,
                        Name::ContentIndex => &mut f.content_index,
                        Name::SummaryIndex => &mut f.summary_index,
                        Name::Delta => &mut f.delta,
                        Name::SequenceNumber => &mut f.sequence_number,
                        Name::Logprobs => &mut f.logprobs,
                        Name::Obfuscation => &mut f.obfuscation,
                    };
                    // A repeated member: JSON readers keep the last one; so do we, unmerged.
                    f.unusual |= slot.is_some();
                    *slot = Some(map.next_value::<&'a RawValue>()?);
                }
                Ok(f)
            }
        }
        d.deserialize_map(V(std::marker::PhantomData))
    }
}

/// The members of `data` when it is one valid JSON object, and its text.
fn read(data: &Bytes) -> Option<(Fields<'_>, &str)> {
    let start = data.iter().position(|b| !b.is_ascii_whitespace())?;
    if data[start] != b'{' {
        return None;
    }
    // Validating UTF-8 up front lets serde_json skip it, and covers the members it skips.
    let text = std::str::from_utf8(data).ok()?;
    let fields: Fields = serde_json::from_str(text).ok()?;
    Some((fields, text))
}

/// The contents of a string literal without escapes inside its quotes (a type name).
fn string_contents(raw: &str) -> Option<&[u8]> {
    let b = raw.as_bytes();
    (b.len() >= 2 && b[0] == b'"' && !b.contains(&b'\\')).then(|| &b[1..b.len() - 1])
}

fn classify_json(data: &Bytes) -> Option<Event> {
    // `read` borrowed every value from `data`'s own text.
    let (fields, _) = read(data)?;
    let spans = Spans::new(data);
    let span = |raw: Option<&RawValue>| spans.of(raw);
    let inner = |r: Range<usize>| spans.string(r);
    let ty = span(fields.ty).and_then(inner).unwrap_or(0..0);
    let mut event = Event::verbatim(data.clone(), ty.clone(), 0..0);
    match &data[ty.clone()] {
        b"response.completed" => event.terminal = true,
        b"response.failed" => {
            event.terminal = true;
            event.failure = Some(EndReason::ResponseFailed);
        }
        b"response.incomplete" => {
            event.terminal = true;
            event.failure = Some(EndReason::ResponseIncomplete);
        }
        b"error" => event.failure = Some(EndReason::ErrorEvent),
        _ => {}
    }
    event.merge = merge_class(&data[ty]).and_then(|class| {
        if fields.unusual {
            return None;
        }
        let delta = inner(span(fields.delta)?)?;
        let key = span(fields.item_id)?;
        if data[key.start] != b'"' {
            return None;
        }
        let output_index = index(fields.output_index?)?;
        // The secondary index each kind is keyed by; the others must be absent.
        let (sub_index, stray) = if class == FUNCTION_CALL_ARGUMENTS {
            (Some(0), fields.content_index.or(fields.summary_index))
        } else if class == REASONING_SUMMARY_TEXT {
            (fields.summary_index.and_then(index), fields.content_index)
        } else {
            (fields.content_index.and_then(index), fields.summary_index)
        };
        if stray.is_some() || !fields.logprobs.is_none_or(is_empty_list) {
            return None;
        }
        let sub = (sub_index? << 32) | output_index;
        let last = last_wins(data, span(fields.sequence_number)?)?;
        Some(Merge {
            class,
            key,
            sub,
            delta,
            last: Some(last),
        })
    });
    Some(event)
}

fn merge_class(ty: &[u8]) -> Option<MergeClass> {
    Some(match ty {
        b"response.output_text.delta" => OUTPUT_TEXT,
        b"response.refusal.delta" => REFUSAL,
        b"response.function_call_arguments.delta" => FUNCTION_CALL_ARGUMENTS,
        b"response.reasoning_summary_text.delta" => REASONING_SUMMARY_TEXT,
        b"response.reasoning_text.delta" => REASONING_TEXT,
        _ => return None,
    })
}

/// A non-negative integer below 2³² (an index, packed into a sub-key).
fn index(raw: &RawValue) -> Option<u64> {
    let s = raw.get();
    if !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse::<u32>().ok().map(u64::from)
}

/// Whether a raw JSON value is an empty array.
fn is_empty_list(raw: &RawValue) -> bool {
    let b = raw.get().as_bytes();
    b.len() >= 2 && b[0] == b'[' && b[1..b.len() - 1].trim_ascii().is_empty()
}

/// The `sequence_number` member around its value `value` (a non-negative integer): its label
/// (name and colon) and the member with exactly one adjacent comma, the one after it if there is
/// one, else the one before.
fn last_wins(data: &[u8], value: Range<usize>) -> Option<LastWins> {
    const LABEL: &[u8] = b"\"sequence_number\"";
    let digits = &data[value.clone()];
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let before = data[..value.start].trim_ascii_end();
    let before = before.strip_suffix(b":")?.trim_ascii_end();
    if !before.ends_with(LABEL) {
        return None;
    }
    let label = before.len() - LABEL.len()..value.start;
    let after = value.end + (data[value.end..].len() - data[value.end..].trim_ascii_start().len());
    let member = if data.get(after) == Some(&b',') {
        label.start..after + 1
    } else {
        let comma = data[..label.start].trim_ascii_end().len().checked_sub(1)?;
        if data[comma] != b',' {
            return None;
        }
        comma..value.end
    };
    Some(LastWins {
        member,
        label,
        value,
    })
}

#[cfg(test)]
mod tests;
