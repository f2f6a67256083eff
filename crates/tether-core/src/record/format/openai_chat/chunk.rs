//! The levels of a Chat Completions chunk as the borrowing pass reads them (the chunk,
//! `choices`, a choice, `delta`, `tool_calls`, a tool call, `function`), and the parse that
//! starts the pass at the top.

use std::marker::PhantomData;

use bytes::Bytes;
use serde::de::{Deserializer, IgnoredAny, MapAccess, SeqAccess};
use serde_json::value::RawValue;

use super::read::{is_truthy, non_null, slot, Names, Nested, Pass, Slot, SlotVisitor};

/// Parses `data` when it is a JSON object; `None` when it is not (then wrapped as `RAW`). Valid
/// JSON that the borrowing pass cannot take (a repeated or escaped key) is an unreadable
/// [`Chunk`]: kept verbatim, unclassified.
pub(super) fn parse(data: &Bytes) -> Option<Chunk<'_>> {
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
pub(super) fn read_chunk(text: &str, pass: Pass) -> Option<Chunk<'_>> {
    let mut de = serde_json::Deserializer::from_str(text);
    let top = (&mut de)
        .deserialize_map(SlotVisitor::<Chunk>(pass, PhantomData))
        .ok()?;
    de.end().ok()?;
    top.got()
}

/// The top-level members a chunk's classification reads.
pub(super) struct Chunk<'a> {
    /// No key with escapes, none repeated.
    pub(super) readable: bool,
    /// `type`, unless `null`.
    pub(super) ty: Option<&'a RawValue>,
    /// `object`, unless `null`.
    pub(super) object: Option<&'a RawValue>,
    /// `error`, unless `null`.
    pub(super) error: Option<&'a RawValue>,
    /// `choices`.
    pub(super) choices: Slot<Choices<'a>>,
    /// Whether `usage` is not `null` (the usage chunk).
    pub(super) usage: bool,
    /// The `system_fingerprint` member's key and value, even `null`.
    pub(super) fingerprint: Option<(&'a str, &'a RawValue)>,
    /// Whether a member a mergeable chunk may not carry is not `null`. It may carry `id`,
    /// `object`, `created`, `model` and `service_tier` (the SDK reads them from the first chunk
    /// only), `obfuscation` (ignored), `system_fingerprint` (last-wins, carried as such) and
    /// `choices`; `usage` and `moderation` only when `null`.
    pub(super) other: bool,
}

impl Chunk<'_> {
    /// A chunk with nothing read, and unreadable.
    pub(super) fn unreadable() -> Self {
        Chunk {
            readable: false,
            ty: None,
            object: None,
            error: None,
            choices: Slot::Null,
            usage: false,
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
                "usage" => {
                    names.known(1 << 10);
                    c.usage = non_null(&mut map)?.is_some();
                    c.other |= c.usage;
                }
                "moderation" => {
                    names.known(1 << 11);
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
pub(super) struct Choices<'a> {
    /// The number of choices.
    pub(super) count: usize,
    /// The first choice, when readable.
    pub(super) first: Option<Choice<'a>>,
    /// Whether a readable choice has a truthy `finish_reason`.
    pub(super) finish: bool,
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
pub(super) struct Choice<'a> {
    /// `index`, unless `null`.
    pub(super) index: Option<&'a RawValue>,
    /// `delta`.
    pub(super) delta: Slot<Delta<'a>>,
    /// `finish_reason`, unless `null`.
    pub(super) finish_reason: Option<&'a RawValue>,
    /// Whether a member other than `index` and `delta` is not `null`.
    pub(super) other: bool,
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
pub(super) struct Delta<'a> {
    /// `content`, unless `null`.
    pub(super) content: Option<&'a RawValue>,
    /// `refusal`, unless `null`.
    pub(super) refusal: Option<&'a RawValue>,
    /// `tool_calls`.
    pub(super) tool_calls: Slot<Calls<'a>>,
    /// Whether it has an `index` or `type` member, even `null` (see [`Call::replaced`]).
    pub(super) replaced: bool,
    /// Whether a member other than these is not `null`.
    pub(super) other: bool,
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
pub(super) struct Calls<'a> {
    /// The number of tool calls.
    pub(super) count: usize,
    /// The first, when readable.
    pub(super) first: Option<Call<'a>>,
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
pub(super) struct Call<'a> {
    /// `index`, unless `null`.
    pub(super) index: Option<&'a RawValue>,
    /// `function`.
    pub(super) function: Slot<Function<'a>>,
    /// Whether it has a `type` member, even `null` (which `accumulate_delta` replaces instead
    /// of concatenating: never a no-op).
    pub(super) replaced: bool,
    /// Whether a member other than `index` and `function` is not `null`.
    pub(super) other: bool,
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
pub(super) struct Function<'a> {
    /// `arguments`, unless `null`.
    pub(super) arguments: Option<&'a RawValue>,
    /// Whether it has an `index` or `type` member, even `null` (see [`Call::replaced`]).
    pub(super) replaced: bool,
    /// Whether a member other than `arguments` is not `null`.
    pub(super) other: bool,
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
