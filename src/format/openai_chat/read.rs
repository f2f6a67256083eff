//! The one borrowing pass over a Chat Completions chunk: a reader per level (the chunk,
//! `choices`, a choice, `delta`, `tool_calls`, a tool call, `function`) that descends into the
//! next while the event is parsed, noting member names (repeats, escapes, unknown non-null
//! members) and borrowing leaf values as `&RawValue` spans of the event's bytes.

use std::marker::PhantomData;

use bytes::Bytes;
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

/// How a nested object or array is read.
#[derive(Debug, Clone, Copy)]
pub(super) enum Pass {
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
pub(super) enum Slot<T> {
    /// Absent or `null`: a no-op to the SDK.
    Null,
    /// Read as `T`.
    Got(T),
    /// Not `null`, but not readable as `T`.
    Other,
}

impl<T> Slot<T> {
    pub(super) fn is_null(&self) -> bool {
        matches!(self, Slot::Null)
    }

    pub(super) fn got(self) -> Option<T> {
        match self {
            Slot::Got(t) => Some(t),
            Slot::Null | Slot::Other => None,
        }
    }
}

/// A nested JSON object or array read member by member, its leaves borrowed as `&RawValue`.
pub(super) trait Nested<'de>: Sized {
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
pub(super) struct SlotSeed<T>(Pass, PhantomData<T>);

pub(super) fn slot<T>(pass: Pass) -> SlotSeed<T> {
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
pub(super) struct SlotVisitor<T>(Pass, PhantomData<T>);

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
pub(super) enum Key<'a> {
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
pub(super) struct Names<'a> {
    /// The bits of the keys read so far.
    pub(super) known: u32,
    /// Whether a bit was set twice.
    pub(super) repeated: bool,
    /// Whether a key had escapes.
    pub(super) escaped: bool,
    /// The other keys.
    pub(super) others: Vec<&'a str>,
}

impl<'a> Names<'a> {
    /// The next key of `map` that can be borrowed; one with escapes is noted, its value skipped.
    pub(super) fn next_key<M: MapAccess<'a>>(
        &mut self,
        map: &mut M,
    ) -> Result<Option<&'a str>, M::Error> {
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
    pub(super) fn known(&mut self, bit: u32) {
        self.repeated |= self.known & bit != 0;
        self.known |= bit;
    }

    /// Notes any other key `k` and reads its value: whether it is not `null`.
    pub(super) fn other<M: MapAccess<'a>>(
        &mut self,
        k: &'a str,
        map: &mut M,
    ) -> Result<bool, M::Error> {
        self.others.push(k);
        Ok(!is_null(map.next_value()?))
    }

    /// Whether the object can be read: no key with escapes, none repeated. Sorts the other keys
    /// of a large object, so a hostile one costs `n log n`.
    pub(super) fn readable(mut self) -> bool {
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
pub(super) fn non_null<'a, M: MapAccess<'a>>(
    map: &mut M,
) -> Result<Option<&'a RawValue>, M::Error> {
    let v: &RawValue = map.next_value()?;
    Ok((!is_null(v)).then_some(v))
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

pub(super) fn is_null(v: &RawValue) -> bool {
    v.get() == "null"
}

/// Python truthiness of a JSON value, as `data.get("error")` tests it.
pub(super) fn is_truthy(v: &RawValue) -> bool {
    let s = v.get();
    let empty_container = s.starts_with(['{', '[']) && s[1..s.len() - 1].trim().is_empty();
    let falsy = matches!(s, "null" | "false" | "\"\"") || s.parse::<f64>() == Ok(0.0);
    !(empty_container || falsy)
}

/// A non-negative integer literal (an `index`).
pub(super) fn index(v: &RawValue) -> Option<u64> {
    let s = v.get();
    s.bytes()
        .all(|b| b.is_ascii_digit())
        .then(|| s.parse().ok())
        .flatten()
}
