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
//! The hot path borrows every field as a span of the event's own bytes (`&RawValue`), one
//! serde_json pass per nesting level over the same buffer; no JSON tree is built.

use std::ops::Range;

use bytes::Bytes;
use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

use super::{one_line, wrap_raw, Event, Format, FormatKind, LastWins, Merge, MergeClass};
use crate::journal::EndReason;
use crate::sse::SseEvent;

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
        let Some(Parsed::Object(top)) = parse(&data) else {
            return false;
        };
        if top.get("type").is_some() {
            return false;
        }
        top.get("object")
            .is_some_and(|o| o.get() == "\"chat.completion.chunk\"")
            || top.get("choices").is_some_and(|c| c.get().starts_with('['))
            || top.get("error").is_some_and(|e| e.get().starts_with('{'))
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
            Some(Parsed::Object(top)) => classify_object(&data, &top).with_sse_name(sse),
            Some(Parsed::Unreadable) => {
                Event::verbatim(data.clone(), 0..0, 0..0).with_sse_name(sse)
            }
            None => wrap_raw(sse.event.as_deref(), &sse.data),
        }
    }
}

/// A JSON object's members in order, every key and value borrowed from the event's bytes.
struct Members<'a>(Vec<(&'a str, &'a RawValue)>);

impl<'a> Members<'a> {
    /// The value of `key`, unless it is absent or `null` (both no-ops to the SDK).
    fn get(&self, key: &str) -> Option<&'a RawValue> {
        self.0
            .iter()
            .find(|(k, v)| *k == key && !is_null(v))
            .map(|(_, v)| *v)
    }

    /// The member `key` with its key, even when `null`.
    fn entry(&self, key: &str) -> Option<(&'a str, &'a RawValue)> {
        self.0.iter().find(|(k, _)| *k == key).copied()
    }

    /// Whether every member that is not `null` is one of `known`.
    fn only(&self, known: &[&str]) -> bool {
        self.0.iter().all(|(k, v)| is_null(v) || known.contains(k))
    }

    /// Whether a key appears twice (the SDK's parser keeps the last; a merge could keep the
    /// first). Sorts the keys of a large object, so a hostile one costs `n log n`.
    fn has_duplicates(&self) -> bool {
        if self.0.len() <= 16 {
            return self
                .0
                .iter()
                .enumerate()
                .any(|(i, (k, _))| self.0[..i].iter().any(|(j, _)| j == k));
        }
        let mut keys: Vec<&str> = self.0.iter().map(|(k, _)| *k).collect();
        keys.sort_unstable();
        keys.windows(2).any(|w| w[0] == w[1])
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Members<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Members<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<Members<'a>, M::Error> {
                let mut out = Vec::with_capacity(map.size_hint().unwrap_or(8));
                // A key with escapes cannot be borrowed: the event is then kept unclassified.
                while let Some(entry) = map.next_entry::<&'de str, &'de RawValue>()? {
                    out.push(entry);
                }
                Ok(Members(out))
            }
        }
        d.deserialize_map(V(std::marker::PhantomData))
    }
}

/// What a first parse of an event's data found.
enum Parsed<'a> {
    /// A JSON object whose members could be borrowed, none repeated.
    Object(Members<'a>),
    /// Valid JSON that the borrowing pass cannot take (a duplicate or escaped key, a
    /// non-object): kept verbatim, unclassified.
    Unreadable,
}

/// Parses `data` when it is a JSON object; `None` when it is not (then wrapped as `RAW`).
fn parse(data: &Bytes) -> Option<Parsed<'_>> {
    let start = data.iter().position(|b| !b.is_ascii_whitespace())?;
    if data[start] != b'{' {
        return None;
    }
    let text = std::str::from_utf8(data).ok()?;
    match serde_json::from_str::<Members>(text) {
        Ok(m) if !m.has_duplicates() => Some(Parsed::Object(m)),
        _ => {
            serde_json::from_str::<IgnoredAny>(text).ok()?;
            Some(Parsed::Unreadable)
        }
    }
}

fn is_null(v: &RawValue) -> bool {
    v.get() == "null"
}

/// Python truthiness of a JSON value, as `data.get("error")` tests it.
fn is_truthy(v: &RawValue) -> bool {
    let s = v.get();
    let empty_container = s.starts_with(['{', '[']) && s[1..s.len() - 1].trim().is_empty();
    let falsy = matches!(s, "null" | "false" | "\"\"") || s.parse::<f64>() == Ok(0.0);
    !(empty_container || falsy)
}

/// A JSON value's `members`, when it is an object whose members can be borrowed, none repeated.
fn members(v: &RawValue) -> Option<Members<'_>> {
    serde_json::from_str::<Members>(v.get())
        .ok()
        .filter(|m| !m.has_duplicates())
}

/// A non-negative integer literal (an `index`).
fn index(v: &RawValue) -> Option<u64> {
    let s = v.get();
    s.bytes()
        .all(|b| b.is_ascii_digit())
        .then(|| s.parse().ok())
        .flatten()
}

/// The top-level members a mergeable chunk may carry: the SDK reads `id`, `object`, `created`,
/// `model` and `service_tier` from the first chunk only, ignores `obfuscation`, and keeps the
/// last `system_fingerprint` (carried last-wins). `usage` and `moderation` only when `null`.
const CHUNK_MEMBERS: &[&str] = &[
    "id",
    "object",
    "created",
    "model",
    "service_tier",
    "system_fingerprint",
    "obfuscation",
    "choices",
];

fn classify_object(data: &Bytes, top: &Members) -> Event {
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
    let ty = top.get("type").and_then(inner).unwrap_or(0..0);
    let mut event = Event::verbatim(data.clone(), ty, 0..0);
    if top.get("error").is_some_and(is_truthy) {
        event.failure = Some(EndReason::ErrorEvent);
        return event;
    }
    let Some(choices) = top
        .get("choices")
        .and_then(|c| serde_json::from_str::<Vec<&RawValue>>(c.get()).ok())
    else {
        return event;
    };
    let choices: Vec<Option<Members>> = choices.iter().map(|c| members(c)).collect();
    // openai-python records a choice's `finish_reason` when it is truthy.
    event.finish = choices
        .iter()
        .flatten()
        .any(|c| c.get("finish_reason").is_some_and(is_truthy));
    if event.finish || !top.only(CHUNK_MEMBERS) {
        return event;
    }
    let [Some(choice)] = &choices[..] else {
        return event;
    };
    event.merge = mergeable(choice, &span, &inner).and_then(|(class, key, sub, delta)| {
        let (sub, last) = match top.entry("system_fingerprint") {
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
    choice: &Members,
    span: &impl Fn(&str) -> Range<usize>,
    inner: &impl Fn(&RawValue) -> Option<Range<usize>>,
) -> Option<(MergeClass, Range<usize>, u64, Range<usize>)> {
    if !choice.only(&["index", "delta"]) {
        return None;
    }
    let key = choice.get("index")?;
    index(key)?;
    let delta = members(choice.get("delta")?)?;
    // `accumulate_delta` sets `index` and `type` even to `null`: such a member is never a no-op.
    if has_replaced(&delta) {
        return None;
    }
    let field = |name: &str, class: MergeClass, kind: u64| {
        (delta.only(&[name]))
            .then(|| Some((class, span(key.get()), kind, inner(delta.get(name)?)?)))
            .flatten()
    };
    if delta.get("content").is_some() {
        return field("content", CONTENT, 0);
    }
    if delta.get("refusal").is_some() {
        return field("refusal", REFUSAL, 1);
    }
    if !delta.only(&["tool_calls"]) {
        return None;
    }
    let calls = serde_json::from_str::<Vec<&RawValue>>(delta.get("tool_calls")?.get()).ok()?;
    let [call] = &calls[..] else { return None };
    let call = members(call)?;
    if !call.only(&["index", "function"]) || call.entry("type").is_some() {
        return None;
    }
    let tool = index(call.get("index")?)?;
    let function = members(call.get("function")?)?;
    if !function.only(&["arguments"]) || has_replaced(&function) {
        return None;
    }
    let arguments = inner(function.get("arguments")?)?;
    let sub = tool.checked_mul(1 << SUB_TOOL_SHIFT)? | 2;
    Some((TOOL_ARGUMENTS, span(key.get()), sub, arguments))
}

/// Whether an object the SDK accumulates has an `index` or `type` member (which
/// `accumulate_delta` replaces instead of concatenating, even with `null`).
fn has_replaced(m: &Members) -> bool {
    m.entry("index").is_some() || m.entry("type").is_some()
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
