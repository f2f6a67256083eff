//! Unit tests of the replay window: frames encoded as the encoder writes them, names, the cap,
//! blocks freed as the window slides, arrival times.

use bytes::{Bytes, BytesMut};
use proptest::prelude::*;
use tokio::time::Instant;

use super::{Slot, Window, MAX_BLOCK};
use crate::frame::EventEncoder;
use crate::vocab::RunId;

fn event(seq: u64, len: usize) -> Vec<u8> {
    let mut j = format!("{{\"type\":\"T\",\"n\":{seq},\"pad\":\"").into_bytes();
    j.resize(len.max(j.len()), b'a' + (seq % 26) as u8);
    j.extend_from_slice(b"\"}");
    j
}

/// The frame the encoder writes for event `json` at `seq`, alone.
fn expected(enc: &EventEncoder, seq: u64, json: &[u8], name: Option<&[u8]>) -> Vec<u8> {
    let mut b = BytesMut::new();
    match name {
        None => enc.write(&mut b, seq, json),
        Some(n) => enc.write_named(&mut b, seq, json, n),
    }
    b.to_vec()
}

fn read(w: &Window, enc: &EventEncoder, from: u64, max: usize) -> Vec<Bytes> {
    let mut out = Vec::new();
    w.read(from, max, enc, &mut out);
    out
}

#[test]
fn frames_read_back_as_the_encoder_writes_them_across_blocks_and_an_event_larger_than_a_block() {
    let enc = EventEncoder::new(&RunId::from("run-1"));
    let mut w = Window::new(1_000, 1);
    let lens = [10, 300, 2_000, MAX_BLOCK + 5, 40, 900, 17];
    for (i, len) in lens.iter().enumerate() {
        w.push(&event(i as u64 + 1, *len), None, Instant::now());
    }
    let got = read(&w, &enc, 1, usize::MAX);
    assert_eq!(got.len(), lens.len());
    for (i, f) in got.iter().enumerate() {
        let seq = i as u64 + 1;
        assert_eq!(&f[..], &expected(&enc, seq, &event(seq, lens[i]), None)[..]);
    }
    let json: usize = lens
        .iter()
        .enumerate()
        .map(|(i, l)| event(i as u64 + 1, *l).len())
        .sum();
    assert!(w.event_bytes() <= json);
}

/// A token event as the load tool's producer writes it: everything up to the index shared.
fn token(i: u64) -> Vec<u8> {
    format!(
        r#"{{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"abcdefghijklmnop","i":{i},"t":{}}}"#,
        1_700_000_000_000u64 + i * 48_611
    )
    .into_bytes()
}

#[test]
fn token_events_are_kept_as_what_they_do_not_share_and_read_back_whole() {
    let enc = EventEncoder::new(&RunId::from("r"));
    let mut w = Window::new(10_000, 1);
    let n = 2_000u64;
    for i in 1..=n {
        w.push(&token(i), None, Instant::now());
    }
    let json: usize = (1..=n).map(|i| token(i).len()).sum();
    // About 90 bytes of JSON each; well under a third of it is kept.
    assert!(
        w.event_bytes() * 3 < json,
        "{} of {json} bytes kept",
        w.event_bytes()
    );
    let got = read(&w, &enc, 1, usize::MAX);
    for (i, f) in got.iter().enumerate() {
        let seq = i as u64 + 1;
        assert_eq!(&f[..], &expected(&enc, seq, &token(seq), None)[..]);
    }
    let mut array = BytesMut::from(&b"["[..]);
    assert_eq!(w.read_json(1, usize::MAX, &mut array), n as usize);
    array.extend_from_slice(b"]");
    let v: Vec<serde_json::Value> = serde_json::from_slice(&array).unwrap();
    assert_eq!(v.len(), n as usize);
    let t42: serde_json::Value = serde_json::from_slice(&token(42)).unwrap();
    assert_eq!(v[41], t42);
}

#[test]
fn an_event_with_an_sse_name_reads_back_as_a_named_frame() {
    let enc = EventEncoder::new(&RunId::from("r"));
    let mut w = Window::new(10, 1);
    w.push(b"{\"type\":\"a\"}", Some(b"custom-name"), Instant::now());
    w.push(b"{\"type\":\"b\"}", None, Instant::now());
    let got = read(&w, &enc, 1, 10);
    assert_eq!(
        &got[0][..],
        &expected(&enc, 1, b"{\"type\":\"a\"}", Some(b"custom-name"))[..]
    );
    assert_eq!(
        &got[1][..],
        &expected(&enc, 2, b"{\"type\":\"b\"}", None)[..]
    );
}

#[test]
fn the_cap_drops_the_oldest_events_and_reads_start_at_the_first_kept() {
    let enc = EventEncoder::new(&RunId::from("r"));
    let mut w = Window::new(3, 1);
    for seq in 1..=5 {
        w.push(&event(seq, 50), None, Instant::now());
    }
    assert_eq!((w.first(), w.len()), (3, 3));
    let got = read(&w, &enc, 1, 10);
    assert_eq!(got.len(), 3);
    assert_eq!(&got[0][..], &expected(&enc, 3, &event(3, 50), None)[..]);
    assert_eq!(read(&w, &enc, 4, 1).len(), 1);
    assert!(read(&w, &enc, 6, 10).is_empty());
}

#[test]
fn a_mirror_window_starts_at_its_seq() {
    let enc = EventEncoder::new(&RunId::from("r"));
    let mut w = Window::new(10, 41);
    w.push(&event(41, 20), None, Instant::now());
    assert_eq!(w.first(), 41);
    assert_eq!(
        &read(&w, &enc, 1, 10)[0][..],
        &expected(&enc, 41, &event(41, 20), None)[..]
    );
}

/// [`Window::allocated`] counted the long way: every block held, and the slots.
fn recounted(w: &Window) -> usize {
    w.blocks
        .iter()
        .map(|b| b.data.capacity() + b.bases.capacity() * 8)
        .sum::<usize>()
        + w.slots.capacity() * std::mem::size_of::<Slot>()
}

#[test]
fn blocks_are_freed_once_the_window_slides_past_them() {
    let mut w = Window::new(10, 1);
    for seq in 1..=10_000 {
        w.push(&event(seq, 200), None, Instant::now());
    }
    assert_eq!(w.len(), 10);
    assert!(w.blocks.len() <= 3, "{} blocks kept", w.blocks.len());
    assert!(w.allocated() < 3 * MAX_BLOCK + 16 * 24, "{}", w.allocated());
    assert_eq!(w.allocated(), recounted(&w));
}

#[test]
fn a_slot_is_twenty_bytes() {
    assert_eq!(std::mem::size_of::<Slot>(), 20);
}

#[test]
fn a_read_returns_the_arrival_of_its_last_event() {
    let enc = EventEncoder::new(&RunId::from("r"));
    let mut w = Window::new(10, 1);
    let t1 = Instant::now();
    w.push(b"{}", None, t1);
    let t2 = t1 + std::time::Duration::from_millis(7);
    w.push(b"{}", None, t2);
    let mut out = Vec::new();
    let at = w.read(1, 10, &enc, &mut out).expect("two frames");
    assert_eq!(at.duration_since(t1).as_millis(), 7);
    assert_eq!(w.read(3, 10, &enc, &mut out), None);
}

proptest! {
    /// Whatever the event sizes, the cap and the reads, every frame read is the frame of the
    /// event pushed at that seq, and the window holds exactly the last `cap` events.
    #[test]
    fn any_sequence_reads_the_events_pushed(
        cap in 1usize..40,
        ops in prop::collection::vec(
            (0usize..3_000, any::<bool>(), 0u64..50, 1usize..8, 0usize..7),
            1..150,
        ),
    ) {
        let enc = EventEncoder::new(&RunId::from("run"));
        let mut w = Window::new(cap, 1);
        let mut pushed: Vec<(Vec<u8>, Option<Vec<u8>>)> = Vec::new();
        for (len, named, back, max, shape) in ops {
            let seq = pushed.len() as u64 + 1;
            let name = named.then(|| format!("ev{seq}").into_bytes());
            // Events of up to seven shapes (more than a block keeps bases for), sharing
            // prefixes of every length with each other.
            let mut json = format!("{{\"s{shape}\":{}", "x".repeat(shape * 7)).into_bytes();
            json.extend_from_slice(&event(seq, len));
            json.push(b'}');
            w.push(&json, name.as_deref(), Instant::now());
            prop_assert_eq!(w.allocated(), recounted(&w));
            pushed.push((json, name));
            let from = seq.saturating_sub(back).max(1);
            let got = read(&w, &enc, from, max);
            let start = from.max(w.first());
            for (i, f) in got.iter().enumerate() {
                let s = start + i as u64;
                let (json, name) = &pushed[s as usize - 1];
                prop_assert_eq!(&f[..], &expected(&enc, s, json, name.as_deref())[..]);
            }
            let kept = pushed.len().min(cap);
            prop_assert_eq!(w.len(), kept);
            let bytes: usize = pushed[pushed.len() - kept..]
                .iter()
                .map(|(j, n)| j.len() + n.as_ref().map_or(0, Vec::len))
                .sum();
            prop_assert!(w.event_bytes() <= bytes);
            // The JSON alone, as a Durable Streams reader gets it.
            let mut array = BytesMut::new();
            let n = w.read_json(from, max, &mut array);
            prop_assert_eq!(n, got.len());
            let want: Vec<u8> = (start..start + n as u64)
                .map(|s| pushed[s as usize - 1].0.clone())
                .collect::<Vec<_>>()
                .join(&b","[..]);
            prop_assert_eq!(&array[..], &want[..]);
        }
    }
}

proptest! {
    /// The word-at-a-time prefix agrees with a byte-by-byte count for any two byte strings that
    /// share any prefix, at any cap.
    #[test]
    fn the_common_prefix_is_the_bytewise_one(
        shared in prop::collection::vec(any::<u8>(), 0..40),
        a in prop::collection::vec(any::<u8>(), 0..20),
        b in prop::collection::vec(any::<u8>(), 0..20),
        max in 0usize..70,
    ) {
        let x = [&shared[..], &a[..]].concat();
        let y = [&shared[..], &b[..]].concat();
        let slow = x.iter().zip(&y).take(max).take_while(|(p, q)| p == q).count();
        prop_assert_eq!(super::common_prefix(&x, &y, max), slow);
    }
}
