//! The machinery of the one borrowing pass over a Chat Completions chunk: each level (see
//! `chunk.rs`) descends into the next while the event is parsed, noting member names (repeats,
//! escapes, unknown non-null members) and borrowing leaf values as `&RawValue` spans of the
//! event's bytes.

use std::marker::PhantomData;

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
pub(super) struct SlotVisitor<T>(pub(super) Pass, pub(super) PhantomData<T>);

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
