//! The Vercel AI SDK UI message stream (AI SDK 5; response header
//! `x-vercel-ai-ui-message-stream: v1`): one `data: {json}` chunk per event, typed by `type`,
//! ending with `data: [DONE]` (vercel/ai `packages/ai/src/ui-message-stream/ui-message-chunks.ts`).
//!
//! Merges: `text-delta` and `reasoning-delta` by `id` (`delta` concatenates), `tool-input-delta`
//! by `toolCallId` (`inputTextDelta` concatenates), each kind its own [`MergeClass`]. A delta
//! merges only when it carries exactly those three members: a `providerMetadata` (which the
//! client's accumulator keeps, last non-null wins), any unknown member, a repeated member or an
//! SSE `event:` name that differs from its type would be lost in a merge, so such a delta stays
//! as it is. Every other chunk is verbatim and closes an open merge group (`*-start`, `*-end`,
//! `start-step`, `finish-step`, `reset-step`, `data-*`, tool states, metadata, …).
//!
//! Ends: `finish` is the finish marker, `[DONE]` (a `RAW` event) the terminal event; a turn is
//! complete only when `finish` came before `[DONE]`. An `error` chunk marks the turn failed. A
//! run tether stops ends as the SDK's server ends a stopped stream: `abort`, then `[DONE]`
//! ([`STOP_FRAMES`]).

use std::ops::Range;

use bytes::Bytes;
use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

use super::{one_line, wrap_raw, Event, Format, FormatKind, Merge, MergeClass, Spans};
use crate::record::sse::SseEvent;
use crate::vocab::end::EndReason;

/// `text-delta`, keyed by `id`.
pub const TEXT_DELTA: MergeClass = class(401);
/// `reasoning-delta`, keyed by `id`.
pub const REASONING_DELTA: MergeClass = class(402);
/// `tool-input-delta`, keyed by `toolCallId`.
pub const TOOL_INPUT_DELTA: MergeClass = class(403);

const fn class(id: u16) -> MergeClass {
    MergeClass {
        id,
        key_optional: false,
    }
}

/// The chunk types of the UI message stream (AI SDK 5, plus the later `tool-approval-*`,
/// `tool-output-denied`, `reset-step`, `reasoning-file` and `custom`); `data-*` chunks are
/// recognized by their prefix.
pub const CHUNK_TYPES: &[&[u8]] = &[
    b"start",
    b"finish",
    b"abort",
    b"error",
    b"message-metadata",
    b"start-step",
    b"finish-step",
    b"reset-step",
    b"text-start",
    b"text-delta",
    b"text-end",
    b"reasoning-start",
    b"reasoning-delta",
    b"reasoning-end",
    b"tool-input-start",
    b"tool-input-delta",
    b"tool-input-available",
    b"tool-input-error",
    b"tool-approval-request",
    b"tool-approval-response",
    b"tool-output-available",
    b"tool-output-error",
    b"tool-output-denied",
    b"source-url",
    b"source-document",
    b"file",
    b"reasoning-file",
    b"custom",
];

/// How the SDK's own server ends a stream it stopped (`streamText` whose `abortSignal` fired,
/// piped with `pipeUIMessageStreamToResponse` or `toUIMessageStreamResponse`): an `abort`
/// chunk, then `[DONE]` as the stream closes, then a clean end of the body. `useChat` then ends
/// the turn `ready` with the answer so far, where a cut body is its `error` ("network error").
/// The chunk carries no `reason`: AI SDK 7 writes one (the abort signal's message) and accepts
/// it missing, as AI SDK 5 writes and reads it.
pub const STOP_FRAMES: &[u8] = b"data: {\"type\":\"abort\"}\n\ndata: [DONE]\n\n";

/// The AI SDK UI message stream format.
#[derive(Debug, Clone, Copy, Default)]
pub struct AiSdk;

impl Format for AiSdk {
    fn kind(&self) -> FormatKind {
        FormatKind::AiSdk
    }

    /// A first chunk whose `type` is one of [`CHUNK_TYPES`] or starts with `data-`; an `error`
    /// counts only with its `errorText` string (Anthropic's and OpenAI's `error` events have
    /// none). AG-UI's UPPER_CASE types and the other formats' dotted or underscored types are
    /// never in the list.
    fn recognizes(&self, first: &SseEvent) -> bool {
        let data = one_line(&first.data);
        let Some((event, members)) = parse(&data) else {
            return false;
        };
        let ty = event.ty();
        if ty == b"error" {
            return members.error_text.is_some_and(|t| t.get().starts_with('"'));
        }
        ty.starts_with(b"data-") || CHUNK_TYPES.contains(&ty)
    }

    fn needs_finish(&self) -> bool {
        true
    }

    /// [`STOP_FRAMES`].
    fn stop_frames(&self) -> Option<&'static [u8]> {
        Some(STOP_FRAMES)
    }

    fn classify(&self, sse: &SseEvent) -> Event {
        let data = one_line(&sse.data);
        match parse(&data) {
            Some((event, members)) => classify_chunk(event.with_sse_name(sse), &members),
            None => {
                let mut raw = wrap_raw(sse.event.as_deref(), &sse.data);
                raw.terminal = sse.data.trim_ascii() == b"[DONE]";
                raw
            }
        }
    }
}

/// The members of a chunk that classification reads, borrowed from the chunk's own bytes in one
/// pass (no JSON tree), and how many members it has in all.
#[derive(Default)]
struct Members<'a> {
    ty: Option<&'a RawValue>,
    id: Option<&'a RawValue>,
    tool_call_id: Option<&'a RawValue>,
    delta: Option<&'a RawValue>,
    input_text_delta: Option<&'a RawValue>,
    error_text: Option<&'a RawValue>,
    /// Every member, known or not.
    count: usize,
    /// Some member name appeared twice (`JSON.parse` keeps the last value, as kept here).
    repeated: bool,
}

/// The member names classification reads; every other name is `Other`.
#[derive(Deserialize)]
#[serde(field_identifier)]
enum Key {
    #[serde(rename = "type")]
    Type,
    #[serde(rename = "id")]
    Id,
    #[serde(rename = "toolCallId")]
    ToolCallId,
    #[serde(rename = "delta")]
    Delta,
    #[serde(rename = "inputTextDelta")]
    InputTextDelta,
    #[serde(rename = "errorText")]
    ErrorText,
    #[serde(other)]
    Other,
}

impl<'de> Deserialize<'de> for Members<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Members<'de>;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Members<'de>, A::Error> {
                let mut m = Members::default();
                while let Some(key) = map.next_key::<Key>()? {
                    m.count += 1;
                    let slot = match key {
                        Key::Type => &mut m.ty,
                        Key::Id => &mut m.id,
                        Key::ToolCallId => &mut m.tool_call_id,
                        Key::Delta => &mut m.delta,
                        Key::InputTextDelta => &mut m.input_text_delta,
                        Key::ErrorText => &mut m.error_text,
                        Key::Other => {
                            map.next_value::<IgnoredAny>()?;
                            continue;
                        }
                    };
                    m.repeated |= slot.is_some();
                    *slot = Some(map.next_value()?);
                }
                Ok(m)
            }
        }
        d.deserialize_map(V)
    }
}

/// A JSON object chunk as a verbatim [`Event`] (its `type` found) with its members; `None` for
/// data that is not a JSON object.
fn parse(data: &Bytes) -> Option<(Event, Members<'_>)> {
    let start = data.iter().position(|b| !b.is_ascii_whitespace())?;
    if data[start] != b'{' {
        return None;
    }
    // Validating UTF-8 up front lets serde_json skip it, and covers the members it ignores.
    let text = std::str::from_utf8(data).ok()?;
    let members: Members = serde_json::from_str(text).ok()?;
    let ty = inner(data, span(data, members.ty)).unwrap_or(0..0);
    Some((Event::verbatim(data.clone(), ty, 0..0), members))
}

/// The span of a borrowed member value in `data` (see [`Spans`]).
fn span(data: &Bytes, raw: Option<&RawValue>) -> Option<Range<usize>> {
    Spans::new(data).of(raw)
}

/// The contents of a string literal's span: inside the quotes. `None` for other values.
fn inner(data: &[u8], r: Option<Range<usize>>) -> Option<Range<usize>> {
    Spans::new(data).string(r?)
}

/// Sets the merge, finish and failure of a parsed chunk.
fn classify_chunk(mut event: Event, m: &Members) -> Event {
    let data = event.json.clone();
    match event.ty() {
        b"finish" => event.finish = true,
        b"error" => event.failure = Some(EndReason::ErrorEvent),
        _ => {}
    }
    let (class, key, delta) = match event.ty() {
        b"text-delta" => (TEXT_DELTA, m.id, m.delta),
        b"reasoning-delta" => (REASONING_DELTA, m.id, m.delta),
        b"tool-input-delta" => (TOOL_INPUT_DELTA, m.tool_call_id, m.input_text_delta),
        _ => return event,
    };
    // Exactly `type`, the key and the delta: a merge keeps the first delta's other members
    // only, so a delta with any other member (or a repeated one, or an SSE name the frame
    // carries) stays whole.
    if m.count != 3 || m.repeated || event.sse_name.is_some() {
        return event;
    }
    let key = span(&data, key).filter(|k| data[k.start] == b'"');
    let delta = inner(&data, span(&data, delta));
    if let (Some(key), Some(delta)) = (key, delta) {
        event.merge = Some(Merge {
            class,
            key,
            sub: 0,
            delta,
            last: None,
        });
    }
    event
}

#[cfg(test)]
mod tests;
