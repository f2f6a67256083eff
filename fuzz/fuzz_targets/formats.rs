//! Fuzzes the five stream formats' classifiers (`tether_core::record::format`), format detection, and the
//! compactor (`tether_core::record::compact`) on the events the SSE decoder makes of the input.
//!
//! For each format: every classified event is one line of JSON, an object, whose spans (type,
//! name, merge key, delta, last-wins member) lie where they claim to. The compactor's capture
//! at arbitrary points (its sealed log plus the open group's closing bytes) must equal a
//! reference compaction built here on `serde_json::Value`s (adjacent deltas of one class, key and
//! sub-key merged: the first delta's JSON with the joined text and the last delta's last-wins
//! value), and a compactor seeded with a capture and fed the rest must give the capture's
//! events followed by the rest's, never merging across.
//!
//! Input: one seed byte for the capture points, then an SSE stream.

#![no_main]

use std::ops::Range;

use bytes::{Bytes, BytesMut};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use tether_core::record::compact::{Capture, Compactor};
use tether_core::record::format::{self, Event, FormatKind, MergeClass};
use tether_core::record::sse::{Decoded, Decoder, SseEvent};

fn in_bounds(r: &Range<usize>, len: usize) -> bool {
    r.start <= r.end && r.end <= len
}

/// The contents of a string literal at `r` (inside its quotes) decode as a JSON string.
fn is_string_contents(json: &[u8], r: &Range<usize>) -> bool {
    if r.start == 0 || r.end >= json.len() || json[r.start - 1] != b'"' || json[r.end] != b'"' {
        return false;
    }
    // (Grammar only: a lone surrogate escape is valid JSON that a Rust `String` cannot hold.)
    is_json(&json[r.start - 1..r.end + 1])
}

/// What a classified event claims about its own bytes.
fn check_event(e: &Event) {
    let j = &e.json[..];
    assert!(
        !j.contains(&b'\n') && !j.contains(&b'\r'),
        "one line: {:?}",
        String::from_utf8_lossy(j)
    );
    assert!(
        is_json(j),
        "an event is JSON: {:?}",
        String::from_utf8_lossy(j)
    );
    assert_eq!(
        j.trim_ascii_start().first(),
        Some(&b'{'),
        "an event is a JSON object"
    );
    for r in [&e.ty, &e.name] {
        assert!(in_bounds(r, j.len()));
        if !r.is_empty() {
            assert!(is_string_contents(j, r), "a type or name span");
        }
    }
    if let Some(m) = &e.merge {
        assert!(in_bounds(&m.key, j.len()) && in_bounds(&m.delta, j.len()));
        if !m.key.is_empty() {
            assert!(is_json(&j[m.key.clone()]), "a merge key is JSON");
        }
        assert!(
            is_string_contents(j, &m.delta),
            "the delta span {:?} of {:?}",
            m.delta,
            String::from_utf8_lossy(j)
        );
        assert!(!e.terminal, "a delta ends no turn");
        if let Some(l) = &m.last {
            for r in [&l.member, &l.label, &l.value] {
                assert!(in_bounds(r, j.len()));
            }
            assert!(l.member.start <= l.label.start && l.value.end <= l.member.end);
            assert!(l.label.end <= l.value.start);
            assert!(
                l.member.end <= m.delta.start - 1 || l.member.start > m.delta.end,
                "the last-wins member is not the delta's"
            );
            let mut without = j[..l.member.start].to_vec();
            without.extend_from_slice(&j[l.member.end..]);
            assert!(is_json(&without), "removing the member leaves JSON");
            assert!(is_json(&j[l.value.clone()]), "a last-wins value");
            label_key(&j[l.label.clone()]);
        }
    }
}

/// Whether `b` is one JSON value (numbers of any size: `Value` cannot hold all of them).
fn is_json(b: &[u8]) -> bool {
    serde_json::from_slice::<serde::de::IgnoredAny>(b).is_ok()
}

/// The key of a member label `"name":` (whitespace allowed around the colon).
fn label_key(label: &[u8]) -> String {
    let text = std::str::from_utf8(label)
        .expect("a UTF-8 label")
        .trim_end();
    let text = text.strip_suffix(':').expect("a label ends with a colon");
    serde_json::from_str(text.trim()).expect("a label is a JSON string")
}

/// One entry of the reference history.
enum Group<'e> {
    Plain(&'e Event),
    Delta {
        first: &'e Event,
        class: MergeClass,
        key: &'e [u8],
        sub: u64,
        text: Vec<u8>,
        last: Option<&'e [u8]>,
    },
}

/// The reference compaction of `events`, as JSON values (`None`: a number `Value` cannot
/// hold).
fn reference(events: &[Event]) -> Option<Vec<Value>> {
    let mut groups: Vec<Group> = Vec::new();
    for e in events.iter().filter(|e| !e.transient) {
        if let (
            Some(m),
            Some(Group::Delta {
                class,
                key,
                sub,
                text,
                last,
                ..
            }),
        ) = (&e.merge, groups.last_mut())
        {
            let k = &e.json[m.key.clone()];
            if *class == m.class
                && *sub == m.sub
                && (k == *key || (class.key_optional && k.is_empty()))
            {
                text.extend_from_slice(&e.json[m.delta.clone()]);
                if let Some(l) = &m.last {
                    *last = Some(&e.json[l.value.clone()]);
                }
                continue;
            }
        }
        groups.push(match &e.merge {
            None => Group::Plain(e),
            Some(m) => Group::Delta {
                first: e,
                class: m.class,
                key: &e.json[m.key.clone()],
                sub: m.sub,
                text: e.json[m.delta.clone()].to_vec(),
                last: m.last.as_ref().map(|l| &e.json[l.value.clone()]),
            },
        });
    }
    groups
        .iter()
        .map(|g| match g {
            Group::Plain(e) => serde_json::from_slice(&e.json).ok(),
            Group::Delta {
                first, text, last, ..
            } => {
                let j = &first.json[..];
                let m = first.merge.as_ref().unwrap();
                // The first delta's JSON with the whole text, its last-wins member taken out.
                let mut edits: Vec<(Range<usize>, &[u8])> = vec![(m.delta.clone(), text)];
                if let Some(l) = &m.last {
                    edits.push((l.member.clone(), b""));
                }
                edits.sort_by_key(|(r, _)| r.start);
                let mut out = Vec::new();
                let mut at = 0;
                for (r, with) in edits {
                    out.extend_from_slice(&j[at..r.start]);
                    out.extend_from_slice(with);
                    at = r.end;
                }
                out.extend_from_slice(&j[at..]);
                assert!(is_json(&out), "a merged delta is JSON");
                let mut v: Value = serde_json::from_slice(&out).ok()?;
                if let (Some(l), Some(value)) = (&m.last, last) {
                    let key = label_key(&j[l.label.clone()]);
                    let value: Value = serde_json::from_slice(value).ok()?;
                    v.as_object_mut().unwrap().insert(key, value);
                }
                Some(v)
            }
        })
        .collect()
}

/// A capture as JSON values (`None`: a number `Value` cannot hold); checks it is JSON.
fn values(cap: &Capture) -> Option<Vec<Value>> {
    let mut out = BytesMut::new();
    out.extend_from_slice(b"[");
    cap.write_to(&mut out);
    out.extend_from_slice(b"]");
    assert_eq!(out.len(), cap.len() + 2);
    assert!(is_json(&out), "a capture is JSON");
    let v: Value = serde_json::from_slice(&out).ok()?;
    let v = v.as_array().unwrap().clone();
    assert_eq!(v.len(), cap.events, "a capture's event count");
    Some(v)
}

fuzz_target!(|input: &[u8]| {
    let [seed, stream @ ..] = input else { return };
    let mut d = Decoder::new(1 << 20);
    let mut out = Vec::new();
    d.feed(&Bytes::copy_from_slice(stream), &mut out);
    d.finish();
    let sse: Vec<SseEvent> = out
        .into_iter()
        .filter_map(|e| match e {
            Decoded::Event(e) => Some(e),
            Decoded::Oversized { .. } => None,
        })
        .collect();
    if let Some(first) = sse.first() {
        let kind = format::detect_from_event(first);
        assert!(kind == FormatKind::Agui || kind.format().recognizes(first));
    }
    for kind in FormatKind::ALL {
        let f = kind.format();
        let events: Vec<Event> = sse.iter().map(|s| f.classify(s)).collect();
        events.iter().for_each(check_event);
        // Captures at a few points (two from the seed, and the end), each against the
        // reference of its prefix; the first point is also a checkpoint.
        let n = events.len();
        let x = u32::from(*seed).wrapping_mul(0x9E37_79B9);
        let points = [x as usize % (n + 1), (x >> 12) as usize % (n + 1), n];
        let mut c = Compactor::new();
        let mut checkpoint = None;
        for i in 0..=n {
            if points.contains(&i) {
                let cap = c.capture();
                let (got, want) = (values(&cap), reference(&events[..i]));
                if let (Some(got), Some(want)) = (got, want) {
                    assert_eq!(got, want, "{kind:?} capture after {i}");
                }
                if checkpoint.is_none() {
                    checkpoint = Some((cap, i));
                }
            }
            if let Some(e) = events.get(i) {
                c.push(e);
            }
        }
        // A checkpoint read back, then the rest: never merged across.
        if let Some((cap, at)) = checkpoint {
            let mut body = BytesMut::new();
            cap.write_to(&mut body);
            let mut seeded = Compactor::seeded(&body, cap.events);
            events[at..].iter().for_each(|e| seeded.push(e));
            let got = values(&seeded.capture());
            let want = reference(&events[..at]).zip(reference(&events[at..]));
            if let (Some(got), Some((mut want, rest))) = (got, want) {
                want.extend(rest);
                assert_eq!(got, want, "{kind:?} seeded at {at}");
            }
        }
    }
});
