//! OpenAI Chat Completions: `data: {chat.completion.chunk}` events, then `data: [DONE]`.
//!
//! Rules (reference "2. OpenAI Chat Completions"; openai-python's `ChatCompletionStreamState`
//! and `accumulate_delta`): a chunk whose only choice's delta carries exactly one concatenating
//! field — `content`, `refusal`, or one tool call's `function.arguments` — is a delta keyed by
//! the choice's `index` (raw bytes), with `sub` naming the field and the tool call's `index`.
//! A chunk that repeats a first-wins field (`role`, a tool call's `id`, `type`, `function.name`),
//! carries a `finish_reason`, `logprobs`, a non-null `usage` or `moderation`, more than one
//! choice, or any member this file does not know never merges: the SDK would accumulate what a
//! merge drops. `null` members are no-ops to the SDK's accumulator, so they may be dropped.
//!
//! `system_fingerprint` is last-wins in the SDK's snapshot, so a merged chunk carries the last
//! merged delta's value (a [`LastWins`] member), and deltas merge only with deltas that agree on
//! whether they carry one. `[DONE]` ends the stream; it counts as the end of a turn only after
//! a chunk with a `finish_reason` ([`Format::needs_finish`]). An error object
//! (`{"error":{…}}`, which openai-python raises as `APIError`) fails the turn.
//!
//! The hot path borrows every field as a span of the event's own bytes (`&RawValue`) in one
//! serde_json pass: nested visitors descend into `choices`, the first choice's `delta`, its
//! `tool_calls` and their `function` while the event is parsed, noting each level's member
//! names; no JSON tree is built and no byte is scanned twice.

mod chunk;
mod read;

use std::ops::Range;

use bytes::Bytes;
use serde_json::value::RawValue;

use super::{one_line, wrap_raw, Event, Format, FormatKind, LastWins, Merge, MergeClass};
use crate::record::sse::SseEvent;
use crate::vocab::end::EndReason;
use chunk::{parse, Choice, Chunk};
use read::{index, is_truthy, Slot};

/// `choices[i].delta.content`, keyed by the choice's `index`.
pub const CONTENT: MergeClass = class(101);
/// `choices[i].delta.refusal`, keyed by the choice's `index`.
pub const REFUSAL: MergeClass = class(102);
/// `choices[i].delta.tool_calls[j].function.arguments`, keyed by the choice's `index`, `sub`
/// carrying the tool call's `index`.
pub const TOOL_ARGUMENTS: MergeClass = class(103);

/// [`Merge::sub`]'s low bits: which field the delta extends (content, refusal, arguments).
pub const SUB_FIELD_BITS: u32 = 2;
/// [`Merge::sub`]'s flag: the chunk has a `system_fingerprint` member (carried last-wins).
pub const SUB_FINGERPRINT: u64 = 1 << SUB_FIELD_BITS;
/// [`Merge::sub`]'s shift of the tool call's `index`.
pub const SUB_TOOL_SHIFT: u32 = SUB_FIELD_BITS + 1;

const fn class(id: u16) -> MergeClass {
    MergeClass {
        id,
        key_optional: false,
    }
}

/// The OpenAI Chat Completions format.
#[derive(Debug, Clone, Copy, Default)]
pub struct OpenaiChat;

impl Format for OpenaiChat {
    fn kind(&self) -> FormatKind {
        FormatKind::OpenaiChat
    }

    /// A first event shaped like a chunk of this format: a JSON object with no `type` member
    /// (every event of AG-UI, OpenAI Responses, Anthropic and the AI SDK has one) that is a
    /// `chat.completion.chunk`, carries a `choices` array (OpenAI-compatible servers that omit
    /// `object`, Azure's prompt-filter chunk), or is an error object (`{"error":{…}}`).
    fn recognizes(&self, first: &SseEvent) -> bool {
        let data = one_line(&first.data);
        let Some(top) = parse(&data).filter(|top| top.readable) else {
            return false;
        };
        if top.ty.is_some() {
            return false;
        }
        top.object
            .is_some_and(|o| o.get() == "\"chat.completion.chunk\"")
            || matches!(top.choices, Slot::Got(_))
            || top.error.is_some_and(|e| e.get().starts_with('{'))
    }

    fn needs_finish(&self) -> bool {
        true
    }

    fn classify(&self, sse: &SseEvent) -> Event {
        // openai-python stops at any data starting with `[DONE]`.
        if sse.data.starts_with(b"[DONE]") {
            let mut done = wrap_raw(sse.event.as_deref(), &sse.data);
            done.terminal = true;
            return done;
        }
        let data = one_line(&sse.data);
        match parse(&data) {
            Some(top) if top.readable => classify_object(&data, &top).with_sse_name(sse),
            Some(_) => Event::verbatim(data.clone(), 0..0, 0..0).with_sse_name(sse),
            None => wrap_raw(sse.event.as_deref(), &sse.data),
        }
    }
}

fn classify_object(data: &Bytes, top: &Chunk) -> Event {
    // Every `RawValue` and key was borrowed from `data`: its offset from `data`'s start is its
    // span in the event's own bytes.
    let base = data.as_ptr() as usize;
    let span = |s: &str| -> Range<usize> {
        let off = s.as_ptr() as usize - base;
        debug_assert!(off + s.len() <= data.len());
        off..off + s.len()
    };
    // The contents of a string literal: inside the quotes.
    let inner = |v: &RawValue| -> Option<Range<usize>> {
        let s = v.get();
        (s.len() >= 2 && s.starts_with('"')).then(|| {
            let r = span(s);
            r.start + 1..r.end - 1
        })
    };
    let ty = top.ty.and_then(inner).unwrap_or(0..0);
    let mut event = Event::verbatim(data.clone(), ty, 0..0);
    event.carries_usage = top.usage;
    if top.error.is_some_and(is_truthy) {
        event.failure = Some(EndReason::ErrorEvent);
        return event;
    }
    let Slot::Got(choices) = &top.choices else {
        return event;
    };
    event.finish = choices.finish;
    if event.finish || top.other {
        return event;
    }
    let (1, Some(choice)) = (choices.count, &choices.first) else {
        return event;
    };
    event.merge = mergeable(choice, &span, &inner).and_then(|(class, key, sub, delta)| {
        let (sub, last) = match top.fingerprint {
            None => (sub, None),
            Some((k, v)) => (
                sub | SUB_FINGERPRINT,
                Some(last_wins(data, span(k), span(v.get()))?),
            ),
        };
        Some(Merge {
            class,
            key,
            sub,
            delta,
            last,
        })
    });
    event
}

/// The merge of a single choice whose delta extends exactly one concatenating field and
/// carries nothing else: its class, key span, `sub` (field and tool call index) and delta span.
fn mergeable(
    choice: &Choice,
    span: &impl Fn(&str) -> Range<usize>,
    inner: &impl Fn(&RawValue) -> Option<Range<usize>>,
) -> Option<(MergeClass, Range<usize>, u64, Range<usize>)> {
    if choice.other {
        return None;
    }
    let key = choice.index?;
    index(key)?;
    let Slot::Got(delta) = &choice.delta else {
        return None;
    };
    // `accumulate_delta` sets `index` and `type` even to `null`: such a member is never a no-op.
    if delta.replaced || delta.other {
        return None;
    }
    // Exactly one concatenating field that is not `null`.
    match (delta.content, delta.refusal, delta.tool_calls.is_null()) {
        (Some(content), None, true) => return Some((CONTENT, span(key.get()), 0, inner(content)?)),
        (None, Some(refusal), true) => return Some((REFUSAL, span(key.get()), 1, inner(refusal)?)),
        (None, None, false) => {}
        _ => return None,
    }
    let Slot::Got(calls) = &delta.tool_calls else {
        return None;
    };
    let (1, Some(call)) = (calls.count, &calls.first) else {
        return None;
    };
    if call.other || call.replaced {
        return None;
    }
    let tool = index(call.index?)?;
    let Slot::Got(function) = &call.function else {
        return None;
    };
    if function.other || function.replaced {
        return None;
    }
    let arguments = inner(function.arguments?)?;
    let sub = tool.checked_mul(1 << SUB_TOOL_SHIFT)? | 2;
    Some((TOOL_ARGUMENTS, span(key.get()), sub, arguments))
}

/// The `system_fingerprint` member (key span `key`, value span `value`) as a last-wins member:
/// its bytes with exactly one adjacent comma.
fn last_wins(data: &[u8], key: Range<usize>, value: Range<usize>) -> Option<LastWins> {
    let ws = |b: &u8| b.is_ascii_whitespace();
    // The key's literal starts at its opening quote; the label ends after the colon.
    let label_start = key.start.checked_sub(1)?;
    if data[label_start] != b'"' {
        return None;
    }
    let gap = data[..value.start]
        .iter()
        .rev()
        .take_while(|b| ws(b))
        .count();
    let colon = value.start.checked_sub(gap + 1)?;
    if data.get(colon) != Some(&b':') {
        return None;
    }
    let label = label_start..colon + 1;
    let after = value.end + data[value.end..].iter().take_while(|b| ws(b)).count();
    let member = if data.get(after) == Some(&b',') {
        label_start..after + 1
    } else {
        let gap = data[..label_start]
            .iter()
            .rev()
            .take_while(|b| ws(b))
            .count();
        let before = label_start - gap;
        let comma = before.checked_sub(1)?;
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
