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

use std::marker::PhantomData;
use std::ops::Range;

use bytes::Bytes;
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
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

/// How a nested object or array is read.
#[derive(Debug, Clone, Copy)]
enum Pass {
    /// While its parent is parsed: the event's bytes are scanned once.
    One,
    /// From its own raw text, which its parent borrowed as a `&RawValue`: a value that
    /// `deserialize_any` rejects but `&RawValue` accepts (a number beyond `f64`, a lone
    /// surrogate escape) then makes only its own level unreadable, as when every level was
    /// parsed on its own. Taken only after [`Pass::One`] failed on valid JSON.
    Layered,
}

/// A member holding a nested object or array: absent or `null`, readable as `T`, or not (another
/// JSON type, an escaped or repeated key).
enum Slot<T> {
    /// Absent or `null`: a no-op to the SDK.
    Null,
    /// Read as `T`.
    Got(T),
    /// Not `null`, but not readable as `T`.
    Other,
}

impl<T> Slot<T> {
    fn is_null(&self) -> bool {
        matches!(self, Slot::Null)
    }

    fn got(self) -> Option<T> {
        match self {
            Slot::Got(t) => Some(t),
            Slot::Null | Slot::Other => None,
        }
    }
}

/// A nested JSON object or array read member by member, its leaves borrowed as `&RawValue`.
trait Nested<'de>: Sized {
    /// Reads an object; `None` when it cannot be read (an escaped or repeated key) or is not
    /// what `Self` is. Nested members are read by `pass`.
    fn map<M: MapAccess<'de>>(pass: Pass, mut map: M) -> Result<Option<Self>, M::Error> {
        let _ = pass;
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(None)
    }

    /// Reads an array; `None` when it is not what `Self` is.
    fn seq<S: SeqAccess<'de>>(pass: Pass, mut seq: S) -> Result<Option<Self>, S::Error> {
        let _ = pass;
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(None)
    }
}

/// Reads a member's value as a [`Slot`] of `T`.
struct SlotSeed<T>(Pass, PhantomData<T>);

fn slot<T>(pass: Pass) -> SlotSeed<T> {
    SlotSeed(pass, PhantomData)
}

impl<'de, T: Nested<'de>> DeserializeSeed<'de> for SlotSeed<T> {
    type Value = Slot<T>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Slot<T>, D::Error> {
        match self.0 {
            Pass::One => d.deserialize_any(SlotVisitor(Pass::One, PhantomData)),
            Pass::Layered => {
                let raw = <&'de RawValue>::deserialize(d)?;
                if is_null(raw) {
                    return Ok(Slot::Null);
                }
                let mut de = serde_json::Deserializer::from_str(raw.get());
                Ok((&mut de)
                    .deserialize_any(SlotVisitor(Pass::Layered, PhantomData))
                    .unwrap_or(Slot::Other))
            }
        }
    }
}

/// Visits any JSON value: objects and arrays go to `T`, `null` is [`Slot::Null`], any other
/// value [`Slot::Other`].
struct SlotVisitor<T>(Pass, PhantomData<T>);

impl<'de, T: Nested<'de>> Visitor<'de> for SlotVisitor<T> {
    type Value = Slot<T>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E>(self) -> Result<Slot<T>, E> {
        Ok(Slot::Null)
    }

    fn visit_bool<E>(self, _: bool) -> Result<Slot<T>, E> {
        Ok(Slot::Other)
    }

    fn visit_i64<E>(self, _: i64) -> Result<Slot<T>, E> {
        Ok(Slot::Other)
    }

    fn visit_u64<E>(self, _: u64) -> Result<Slot<T>, E> {
        Ok(Slot::Other)
    }

    fn visit_f64<E>(self, _: f64) -> Result<Slot<T>, E> {
        Ok(Slot::Other)
    }

    fn visit_str<E>(self, _: &str) -> Result<Slot<T>, E> {
        Ok(Slot::Other)
    }

    fn visit_map<M: MapAccess<'de>>(self, map: M) -> Result<Slot<T>, M::Error> {
        Ok(T::map(self.0, map)?.map_or(Slot::Other, Slot::Got))
    }

    fn visit_seq<S: SeqAccess<'de>>(self, seq: S) -> Result<Slot<T>, S::Error> {
        Ok(T::seq(self.0, seq)?.map_or(Slot::Other, Slot::Got))
    }
}

/// A member's key: borrowed from the event's bytes, or one with escapes (which cannot be).
enum Key<'a> {
    /// The key as it is in the event.
    Plain(&'a str),
    /// A key with escapes: its object is then unreadable.
    Escaped,
}

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a key")
            }
            fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Key<'de>, E> {
                Ok(Key::Plain(s))
            }
            fn visit_str<E>(self, _: &str) -> Result<Key<'de>, E> {
                Ok(Key::Escaped)
            }
        }
        d.deserialize_str(V)
    }
}

/// The keys of one object, for its readability: the SDK's parser keeps a repeated key's last
/// value (a merge could keep the first), and a key with escapes cannot be borrowed. The keys a
/// level reads are bits, any other is listed.
#[derive(Default)]
struct Names<'a> {
    /// The bits of the keys read so far.
    known: u32,
    /// Whether a bit was set twice.
    repeated: bool,
    /// Whether a key had escapes.
    escaped: bool,
    /// The other keys.
    others: Vec<&'a str>,
}

impl<'a> Names<'a> {
    /// The next key of `map` that can be borrowed; one with escapes is noted, its value skipped.
    fn next_key<M: MapAccess<'a>>(&mut self, map: &mut M) -> Result<Option<&'a str>, M::Error> {
        while let Some(key) = map.next_key::<Key>()? {
            match key {
                Key::Plain(k) => return Ok(Some(k)),
                Key::Escaped => {
                    self.escaped = true;
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(None)
    }

    /// Notes a key the level reads, as `bit`.
    fn known(&mut self, bit: u32) {
        self.repeated |= self.known & bit != 0;
        self.known |= bit;
    }

    /// Notes any other key `k` and reads its value: whether it is not `null`.
    fn other<M: MapAccess<'a>>(&mut self, k: &'a str, map: &mut M) -> Result<bool, M::Error> {
        self.others.push(k);
        Ok(!is_null(map.next_value()?))
    }

    /// Whether the object can be read: no key with escapes, none repeated. Sorts the other keys
    /// of a large object, so a hostile one costs `n log n`.
    fn readable(mut self) -> bool {
        if self.escaped || self.repeated {
            return false;
        }
        let keys = &mut self.others;
        if keys.len() <= 16 {
            return !keys.iter().enumerate().any(|(i, k)| keys[..i].contains(k));
        }
        keys.sort_unstable();
        !keys.windows(2).any(|w| w[0] == w[1])
    }
}

/// A member read as a leaf: its value, `None` when `null`.
fn non_null<'a, M: MapAccess<'a>>(map: &mut M) -> Result<Option<&'a RawValue>, M::Error> {
    let v: &RawValue = map.next_value()?;
    Ok((!is_null(v)).then_some(v))
}

/// The top-level members a chunk's classification reads.
struct Chunk<'a> {
    /// No key with escapes, none repeated.
    readable: bool,
    /// `type`, unless `null`.
    ty: Option<&'a RawValue>,
    /// `object`, unless `null`.
    object: Option<&'a RawValue>,
    /// `error`, unless `null`.
    error: Option<&'a RawValue>,
    /// `choices`.
    choices: Slot<Choices<'a>>,
    /// The `system_fingerprint` member's key and value, even `null`.
    fingerprint: Option<(&'a str, &'a RawValue)>,
    /// Whether a member a mergeable chunk may not carry is not `null`. It may carry `id`,
    /// `object`, `created`, `model` and `service_tier` (the SDK reads them from the first chunk
    /// only), `obfuscation` (ignored), `system_fingerprint` (last-wins, carried as such) and
    /// `choices`; `usage` and `moderation` only when `null`.
    other: bool,
}

impl Chunk<'_> {
    /// A chunk with nothing read, and unreadable.
    fn unreadable() -> Self {
        Chunk {
            readable: false,
            ty: None,
            object: None,
            error: None,
            choices: Slot::Null,
            fingerprint: None,
            other: false,
        }
    }
}

impl<'a> Nested<'a> for Chunk<'a> {
    fn map<M: MapAccess<'a>>(pass: Pass, mut map: M) -> Result<Option<Self>, M::Error> {
        let mut names = Names::default();
        let mut c = Chunk::unreadable();
        while let Some(k) = names.next_key(&mut map)? {
            match k {
                "choices" => {
                    names.known(1);
                    c.choices = map.next_value_seed(slot(pass))?;
                }
                "object" => {
                    names.known(1 << 1);
                    c.object = non_null(&mut map)?;
                }
                "system_fingerprint" => {
                    names.known(1 << 2);
                    c.fingerprint = Some((k, map.next_value()?));
                }
                "type" => {
                    names.known(1 << 3);
                    c.ty = non_null(&mut map)?;
                    c.other |= c.ty.is_some();
                }
                "error" => {
                    names.known(1 << 4);
                    c.error = non_null(&mut map)?;
                    c.other |= c.error.is_some();
                }
                "id" | "created" | "model" | "service_tier" | "obfuscation" => {
                    names.known(match k {
                        "id" => 1 << 5,
                        "created" => 1 << 6,
                        "model" => 1 << 7,
                        "service_tier" => 1 << 8,
                        _ => 1 << 9,
                    });
                    map.next_value::<IgnoredAny>()?;
                }
                "usage" | "moderation" => {
                    names.known(if k == "usage" { 1 << 10 } else { 1 << 11 });
                    c.other |= non_null(&mut map)?.is_some();
                }
                _ => c.other |= names.other(k, &mut map)?,
            }
        }
        c.readable = names.readable();
        Ok(Some(c))
    }
}

/// `choices`: how many, the first when readable, whether a readable one has finished.
struct Choices<'a> {
    /// The number of choices.
    count: usize,
    /// The first choice, when readable.
    first: Option<Choice<'a>>,
    /// Whether a readable choice has a truthy `finish_reason`.
    finish: bool,
}

impl<'a> Nested<'a> for Choices<'a> {
    fn seq<S: SeqAccess<'a>>(pass: Pass, mut seq: S) -> Result<Option<Self>, S::Error> {
        let mut out = Choices {
            count: 0,
            first: None,
            finish: false,
        };
        while let Some(choice) = seq.next_element_seed(slot::<Choice>(pass))? {
            if let Slot::Got(choice) = choice {
                // openai-python records a choice's `finish_reason` when it is truthy.
                out.finish |= choice.finish_reason.is_some_and(is_truthy);
                if out.count == 0 {
                    out.first = Some(choice);
                }
            }
            out.count += 1;
        }
        Ok(Some(out))
    }
}

/// One choice's members.
struct Choice<'a> {
    /// `index`, unless `null`.
    index: Option<&'a RawValue>,
    /// `delta`.
    delta: Slot<Delta<'a>>,
    /// `finish_reason`, unless `null`.
    finish_reason: Option<&'a RawValue>,
    /// Whether a member other than `index` and `delta` is not `null`.
    other: bool,
}

impl<'a> Nested<'a> for Choice<'a> {
    fn map<M: MapAccess<'a>>(pass: Pass, mut map: M) -> Result<Option<Self>, M::Error> {
        let mut names = Names::default();
        let mut c = Choice {
            index: None,
            delta: Slot::Null,
            finish_reason: None,
            other: false,
        };
        while let Some(k) = names.next_key(&mut map)? {
            match k {
                "delta" => {
                    names.known(1);
                    c.delta = map.next_value_seed(slot(pass))?;
                }
                "index" => {
                    names.known(1 << 1);
                    c.index = non_null(&mut map)?;
                }
                "finish_reason" => {
                    names.known(1 << 2);
                    c.finish_reason = non_null(&mut map)?;
                    c.other |= c.finish_reason.is_some();
                }
                "logprobs" => {
                    names.known(1 << 3);
                    c.other |= non_null(&mut map)?.is_some();
                }
                _ => c.other |= names.other(k, &mut map)?,
            }
        }
        Ok(names.readable().then_some(c))
    }
}

/// A choice's `delta` members.
struct Delta<'a> {
    /// `content`, unless `null`.
    content: Option<&'a RawValue>,
    /// `refusal`, unless `null`.
    refusal: Option<&'a RawValue>,
    /// `tool_calls`.
    tool_calls: Slot<Calls<'a>>,
    /// Whether it has an `index` or `type` member, even `null` (see [`Call::replaced`]).
    replaced: bool,
    /// Whether a member other than these is not `null`.
    other: bool,
}

impl<'a> Nested<'a> for Delta<'a> {
    fn map<M: MapAccess<'a>>(pass: Pass, mut map: M) -> Result<Option<Self>, M::Error> {
        let mut names = Names::default();
        let mut d = Delta {
            content: None,
            refusal: None,
            tool_calls: Slot::Null,
            replaced: false,
            other: false,
        };
        while let Some(k) = names.next_key(&mut map)? {
            match k {
                "content" => {
                    names.known(1);
                    d.content = non_null(&mut map)?;
                }
                "refusal" => {
                    names.known(1 << 1);
                    d.refusal = non_null(&mut map)?;
                }
                "tool_calls" => {
                    names.known(1 << 2);
                    d.tool_calls = map.next_value_seed(slot(pass))?;
                }
                "index" | "type" => {
                    names.known(if k == "index" { 1 << 3 } else { 1 << 4 });
                    d.replaced = true;
                    map.next_value::<IgnoredAny>()?;
                }
                "role" => {
                    names.known(1 << 5);
                    d.other |= non_null(&mut map)?.is_some();
                }
                _ => d.other |= names.other(k, &mut map)?,
            }
        }
        Ok(names.readable().then_some(d))
    }
}

/// A delta's `tool_calls`: how many, the first when readable.
struct Calls<'a> {
    /// The number of tool calls.
    count: usize,
    /// The first, when readable.
    first: Option<Call<'a>>,
}

impl<'a> Nested<'a> for Calls<'a> {
    fn seq<S: SeqAccess<'a>>(pass: Pass, mut seq: S) -> Result<Option<Self>, S::Error> {
        let mut out = Calls {
            count: 0,
            first: None,
        };
        while let Some(call) = seq.next_element_seed(slot::<Call>(pass))? {
            if out.count == 0 {
                out.first = call.got();
            }
            out.count += 1;
        }
        Ok(Some(out))
    }
}

/// A tool call's members.
struct Call<'a> {
    /// `index`, unless `null`.
    index: Option<&'a RawValue>,
    /// `function`.
    function: Slot<Function<'a>>,
    /// Whether it has a `type` member, even `null` (which `accumulate_delta` replaces instead
    /// of concatenating: never a no-op).
    replaced: bool,
    /// Whether a member other than `index` and `function` is not `null`.
    other: bool,
}

impl<'a> Nested<'a> for Call<'a> {
    fn map<M: MapAccess<'a>>(pass: Pass, mut map: M) -> Result<Option<Self>, M::Error> {
        let mut names = Names::default();
        let mut c = Call {
            index: None,
            function: Slot::Null,
            replaced: false,
            other: false,
        };
        while let Some(k) = names.next_key(&mut map)? {
            match k {
                "function" => {
                    names.known(1);
                    c.function = map.next_value_seed(slot(pass))?;
                }
                "index" => {
                    names.known(1 << 1);
                    c.index = non_null(&mut map)?;
                }
                "type" => {
                    names.known(1 << 2);
                    c.replaced = true;
                    map.next_value::<IgnoredAny>()?;
                }
                _ => c.other |= names.other(k, &mut map)?,
            }
        }
        Ok(names.readable().then_some(c))
    }
}

/// A tool call's `function` members.
struct Function<'a> {
    /// `arguments`, unless `null`.
    arguments: Option<&'a RawValue>,
    /// Whether it has an `index` or `type` member, even `null` (see [`Call::replaced`]).
    replaced: bool,
    /// Whether a member other than `arguments` is not `null`.
    other: bool,
}

impl<'a> Nested<'a> for Function<'a> {
    fn map<M: MapAccess<'a>>(_: Pass, mut map: M) -> Result<Option<Self>, M::Error> {
        let mut names = Names::default();
        let mut f = Function {
            arguments: None,
            replaced: false,
            other: false,
        };
        while let Some(k) = names.next_key(&mut map)? {
            match k {
                "arguments" => {
                    names.known(1);
                    f.arguments = non_null(&mut map)?;
                }
                "index" | "type" => {
                    names.known(if k == "index" { 1 << 1 } else { 1 << 2 });
                    f.replaced = true;
                    map.next_value::<IgnoredAny>()?;
                }
                _ => f.other |= names.other(k, &mut map)?,
            }
        }
        Ok(names.readable().then_some(f))
    }
}

/// Parses `data` when it is a JSON object; `None` when it is not (then wrapped as `RAW`). Valid
/// JSON that the borrowing pass cannot take (a repeated or escaped key) is an unreadable
/// [`Chunk`]: kept verbatim, unclassified.
fn parse(data: &Bytes) -> Option<Chunk<'_>> {
    let start = data.iter().position(|b| !b.is_ascii_whitespace())?;
    if data[start] != b'{' {
        return None;
    }
    let text = std::str::from_utf8(data).ok()?;
    match read_chunk(text, Pass::One) {
        Some(top) => Some(top),
        None => {
            serde_json::from_str::<IgnoredAny>(text).ok()?;
            Some(read_chunk(text, Pass::Layered).unwrap_or_else(Chunk::unreadable))
        }
    }
}

/// Reads the object `text` by `pass`; `None` when the pass fails.
fn read_chunk(text: &str, pass: Pass) -> Option<Chunk<'_>> {
    let mut de = serde_json::Deserializer::from_str(text);
    let top = (&mut de)
        .deserialize_map(SlotVisitor::<Chunk>(pass, PhantomData))
        .ok()?;
    de.end().ok()?;
    top.got()
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

/// A non-negative integer literal (an `index`).
fn index(v: &RawValue) -> Option<u64> {
    let s = v.get();
    s.bytes()
        .all(|b| b.is_ascii_digit())
        .then(|| s.parse().ok())
        .flatten()
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
