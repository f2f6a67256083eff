//! Fuzzes the SSE decoder (`tether_core::record::sse::Decoder`): the input fed in one chunk must give the
//! same events as the input split at arbitrary points (split invariance, also with a small
//! event cap), and, below the cap, the same events as a line-by-line reference decoder written
//! here from the WHATWG rules. Raw frames (`keep_raw`) decode back to their events.
//!
//! Input: one seed byte for the split points, one cap byte (below 128: no cap in reach, else
//! a cap of 1 to 128 bytes), then the stream.

#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use tether_core::record::sse::{Decoded, Decoder};

/// An event as compared: type, data, id; `None` data marks an oversized event.
type Ev = (Option<Vec<u8>>, Option<Vec<u8>>, Option<Vec<u8>>);

fn ev(d: &Decoded) -> Ev {
    match d {
        Decoded::Event(e) => (
            e.event.as_ref().map(|b| b.to_vec()),
            Some(e.data.to_vec()),
            e.id.as_ref().map(|b| b.to_vec()),
        ),
        Decoded::Oversized { .. } => (None, None, None),
    }
}

/// What a whole decode gave.
#[derive(Debug, PartialEq, Eq)]
struct Outcome {
    events: Vec<Ev>,
    pending: bool,
    retry: Option<u64>,
    last_id: Option<Vec<u8>>,
    dropped: u64,
}

/// Decodes `chunks` with tether's decoder, checking the cap and the raw frames on the way.
fn decode(chunks: &[&[u8]], cap: usize) -> Outcome {
    let mut d = Decoder::new(cap).keep_raw();
    let mut out = Vec::new();
    let mut raws = Vec::new();
    for c in chunks {
        let before = out.len();
        d.feed(&Bytes::copy_from_slice(c), &mut out);
        // What the event holds stays under the cap; what its buffers allocate (`buffered`,
        // capacities, the raw frame included) is bounded by the unit tests.
        assert!(d.held() <= cap.max(1), "held {} > cap {cap}", d.held());
        let new = out[before..]
            .iter()
            .filter(|e| matches!(e, Decoded::Event(_)))
            .count();
        let frames: Vec<_> = d.take_raw().collect();
        assert_eq!(frames.len(), new, "one raw frame per event");
        raws.extend(frames);
    }
    let last_id = d.last_event_id().map(|b| b.to_vec());
    let pending = d.finish();
    // Each raw frame decodes back to its event (type and data).
    let events: Vec<_> = out
        .iter()
        .filter_map(|e| match e {
            Decoded::Event(e) => Some(e),
            Decoded::Oversized { .. } => None,
        })
        .collect();
    for (frame, e) in raws.iter().zip(events) {
        let mut again = Vec::new();
        let mut d2 = Decoder::new(usize::MAX);
        d2.feed(&frame.bytes, &mut again);
        assert!(!d2.finish(), "a raw frame ends its event");
        match &again[..] {
            [Decoded::Event(back)] => {
                assert_eq!(back.data, e.data, "raw frame data");
                assert_eq!(back.event, e.event, "raw frame type");
                let named = frame
                    .bytes
                    .split(|&b| b == b'\n')
                    .any(|l| l.split(|&b| b == b':').next() == Some(&b"event"[..]));
                assert_eq!(frame.named, named, "raw frame named");
            }
            other => panic!("raw frame {:?} decodes to {other:?}", frame.bytes),
        }
    }
    Outcome {
        events: out.iter().map(ev).collect(),
        pending,
        retry: d.retry(),
        last_id,
        dropped: d.dropped(),
    }
}

/// The WHATWG event-stream interpretation, line by line over the whole stream. `retry` is
/// `None` once a value past u64 was seen (tether's handling of that is its own).
fn reference(mut s: &[u8]) -> (Outcome, bool) {
    if let Some(rest) = s.strip_prefix(b"\xEF\xBB\xBF") {
        s = rest;
    }
    let mut lines = Vec::new();
    let mut start = 0;
    let mut i = 0;
    while i < s.len() {
        match s[i] {
            b'\n' => {
                lines.push(&s[start..i]);
                i += 1;
                start = i;
            }
            b'\r' => {
                lines.push(&s[start..i]);
                i += 1;
                if i < s.len() && s[i] == b'\n' {
                    i += 1;
                }
                start = i;
            }
            _ => i += 1,
        }
    }
    let unterminated = &s[start..];
    let mut events = Vec::new();
    let mut data: Vec<Vec<u8>> = Vec::new();
    let mut ty: Vec<u8> = Vec::new();
    let mut last_id: Vec<u8> = Vec::new();
    let mut retry = None;
    let mut retry_known = true;
    for line in lines {
        if line.is_empty() {
            if !data.is_empty() {
                events.push((
                    (!ty.is_empty()).then(|| ty.clone()),
                    Some(data.join(&b'\n')),
                    (!last_id.is_empty()).then(|| last_id.clone()),
                ));
            }
            data.clear();
            ty.clear();
            continue;
        }
        if line[0] == b':' {
            continue;
        }
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(c) => {
                let v = &line[c + 1..];
                (&line[..c], v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (line, &b""[..]),
        };
        match field {
            b"data" => data.push(value.to_vec()),
            b"event" => ty = value.to_vec(),
            b"id" if !value.contains(&0) => last_id = value.to_vec(),
            b"retry" if !value.is_empty() && value.iter().all(u8::is_ascii_digit) => {
                match std::str::from_utf8(value).unwrap().parse::<u64>() {
                    Ok(n) => retry = Some(n),
                    Err(_) => retry_known = false,
                }
            }
            _ => {}
        }
    }
    let pending = !data.is_empty() || !unterminated.is_empty();
    (
        Outcome {
            events,
            pending,
            retry,
            last_id: (!last_id.is_empty()).then_some(last_id),
            dropped: 0,
        },
        retry_known,
    )
}

fuzz_target!(|input: &[u8]| {
    let [seed, cap, stream @ ..] = input else {
        return;
    };
    let cap = if *cap < 128 {
        1 << 20
    } else {
        usize::from(*cap - 127)
    };
    // Split points from the seed (a tiny xorshift): single bytes, short and long pieces.
    let mut x = u32::from(*seed).wrapping_mul(0x9E37_79B9) | 1;
    let mut chunks = Vec::new();
    let mut at = 0;
    while at < stream.len() {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        let n = match x % 4 {
            0 => 1,
            1 => (x >> 8) as usize % 4 + 1,
            2 => (x >> 8) as usize % 32 + 1,
            _ => (x >> 8) as usize % 256 + 1,
        }
        .min(stream.len() - at);
        chunks.push(&stream[at..at + n]);
        at += n;
    }
    let whole = decode(&[stream], cap);
    let split = decode(&chunks, cap);
    assert_eq!(whole, split, "split invariance, cap {cap}");
    if cap > stream.len() {
        let (mut want, retry_known) = reference(stream);
        let mut got = whole;
        if !retry_known {
            want.retry = None;
            got.retry = None;
        }
        assert_eq!(got, want, "against the reference decoder");
    }
});
