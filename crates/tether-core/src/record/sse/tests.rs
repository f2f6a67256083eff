//! Unit and property tests of the SSE decoder, fed byte slices.

use super::*;
use proptest::prelude::*;

fn decode_chunks(chunks: &[&[u8]], cap: usize) -> (Vec<Decoded>, bool) {
    let mut d = Decoder::new(cap);
    let mut out = Vec::new();
    for c in chunks {
        d.feed(&Bytes::copy_from_slice(c), &mut out);
    }
    let pending = d.finish();
    (out, pending)
}

fn events(input: &[u8]) -> Vec<SseEvent> {
    let (out, _) = decode_chunks(&[input], 1 << 20);
    out.into_iter()
        .map(|d| match d {
            Decoded::Event(e) => e,
            other => panic!("unexpected {other:?}"),
        })
        .collect()
}

fn ev(event: Option<&str>, data: &str, id: Option<&str>) -> SseEvent {
    SseEvent {
        event: event.map(|e| Bytes::copy_from_slice(e.as_bytes())),
        data: Bytes::copy_from_slice(data.as_bytes()),
        id: id.map(|i| Bytes::copy_from_slice(i.as_bytes())),
    }
}

#[test]
fn dispatches_on_blank_line_with_each_line_ending() {
    for sep in ["\n", "\r", "\r\n"] {
        let input = format!("data: a{sep}{sep}data: b{sep}{sep}");
        assert_eq!(
            events(input.as_bytes()),
            vec![ev(None, "a", None), ev(None, "b", None)],
            "{sep:?}"
        );
    }
}

#[test]
fn cr_at_chunk_end_and_lf_at_next_chunk_start_are_one_line_ending() {
    let (out, _) = decode_chunks(&[b"data: a\r", b"\ndata: b\r", b"\n\r", b"\n"], 1024);
    assert_eq!(out, vec![Decoded::Event(ev(None, "a\nb", None))]);
}

#[test]
fn lone_cr_then_data_in_next_chunk_is_a_line_ending() {
    let (out, _) = decode_chunks(&[b"data: a\r", b"data: b\r", b"\r"], 1024);
    assert_eq!(out, vec![Decoded::Event(ev(None, "a\nb", None))]);
}

#[test]
fn strips_one_bom_at_stream_start_only() {
    assert_eq!(
        events(b"\xEF\xBB\xBFdata: x\n\n"),
        vec![ev(None, "x", None)]
    );
    // A second BOM makes the field name unknown, so that line is ignored.
    assert_eq!(
        events(b"\xEF\xBB\xBF\xEF\xBB\xBFdata: x\n\ndata: y\n\n"),
        vec![ev(None, "y", None)]
    );
    // A BOM later in the stream is not stripped.
    assert_eq!(
        events(b"data: x\n\n\xEF\xBB\xBFdata: y\n\ndata: z\n\n"),
        vec![ev(None, "x", None), ev(None, "z", None)]
    );
}

#[test]
fn bom_split_across_chunks_is_stripped() {
    let (out, _) = decode_chunks(&[b"\xEF", b"\xBB", b"\xBFdata: x\n\n"], 1024);
    assert_eq!(out, vec![Decoded::Event(ev(None, "x", None))]);
}

#[test]
fn partial_bom_prefix_is_kept_as_line_content() {
    // EF BB then 'd': not a BOM; the line's field name is "\xEF\xBBdata", unknown, ignored.
    let (out, _) = decode_chunks(&[b"\xEF\xBB", b"data: x\n\ndata: y\n\n"], 1024);
    assert_eq!(out, vec![Decoded::Event(ev(None, "y", None))]);
}

#[test]
fn a_stream_that_ends_inside_a_possible_bom_ended_inside_a_line() {
    // EF BB and the end: two bytes of an unterminated line, like any other; a whole BOM alone
    // is nothing.
    for chunks in [&[&b"\xEF\xBB"[..]][..], &[b"\xEF", b"\xBB"], &[b"\xEF"]] {
        let (out, pending) = decode_chunks(chunks, 1024);
        assert!(out.is_empty());
        assert!(pending, "{chunks:?}");
    }
    let (_, pending) = decode_chunks(&[b"\xEF\xBB\xBF"], 1024);
    assert!(!pending);
}

#[test]
fn comments_are_ignored() {
    assert_eq!(
        events(b": keepalive\n\n:x\ndata: a\n: mid\n\n"),
        vec![ev(None, "a", None)]
    );
}

#[test]
fn multi_line_data_joins_with_lf() {
    assert_eq!(
        events(b"data: a\ndata:b\ndata\ndata:  c\n\n"),
        vec![ev(None, "a\nb\n\n c", None)]
    );
}

#[test]
fn empty_data_line_dispatches_an_empty_event_but_no_data_dispatches_nothing() {
    assert_eq!(events(b"data\n\n"), vec![ev(None, "", None)]);
    assert_eq!(
        events(b"event: x\n\ndata: y\n\n"),
        vec![ev(None, "y", None)]
    );
}

#[test]
fn event_id_and_retry_fields() {
    let mut d = Decoder::new(1024);
    let mut out = Vec::new();
    d.feed(
        &Bytes::from_static(b"event: add\nid: 7\nretry: 1500\ndata: a\n\ndata: b\n\nid: 8\x009\nretry: 1x\ndata: c\n\nid\ndata: d\n\n"),
        &mut out,
    );
    assert_eq!(
        out,
        vec![
            Decoded::Event(ev(Some("add"), "a", Some("7"))),
            Decoded::Event(ev(None, "b", Some("7"))),
            Decoded::Event(ev(None, "c", Some("7"))),
            Decoded::Event(ev(None, "d", None)),
        ]
    );
    assert_eq!(d.retry(), Some(1500));
}

#[test]
fn unknown_fields_and_colonless_lines_are_ignored() {
    assert_eq!(
        events(b"foo: bar\nbaz\ndata: a\n\n"),
        vec![ev(None, "a", None)]
    );
}

#[test]
fn incomplete_event_at_end_of_stream_is_never_dispatched() {
    let (out, pending) = decode_chunks(&[b"data: a\n\ndata: b\n"], 1024);
    assert_eq!(out, vec![Decoded::Event(ev(None, "a", None))]);
    assert!(pending);
    let (out, pending) = decode_chunks(&[b"data: a\n\ndata: b"], 1024);
    assert_eq!(out.len(), 1);
    assert!(pending);
    let (_, pending) = decode_chunks(&[b"data: a\n\n"], 1024);
    assert!(!pending);
}

#[test]
fn utf8_split_across_chunks_is_reassembled() {
    let s = "data: h\u{e9}llo \u{1F600} \u{4e16}\n\n"
        .as_bytes()
        .to_vec();
    for split in 0..s.len() {
        let (out, _) = decode_chunks(&[&s[..split], &s[split..]], 1024);
        assert_eq!(
            out,
            vec![Decoded::Event(ev(
                None,
                "h\u{e9}llo \u{1F600} \u{4e16}",
                None
            ))]
        );
    }
}

#[test]
fn oversized_event_is_dropped_and_decoding_resumes_at_the_next() {
    let big = "x".repeat(100);
    let input = format!("data: a\n\ndata: {big}\ndata: more\n\ndata: b\n\n");
    let (out, _) = decode_chunks(&[input.as_bytes()], 50);
    assert_eq!(
        out,
        vec![
            Decoded::Event(ev(None, "a", None)),
            Decoded::Oversized { bytes: 106 },
            Decoded::Event(ev(None, "b", None)),
        ]
    );
    // Byte by byte, the oversized line is noticed before it is complete.
    let chunks: Vec<&[u8]> = input.as_bytes().chunks(1).collect();
    let (out, _) = decode_chunks(&chunks, 50);
    assert_eq!(out.len(), 3);
    assert!(matches!(out[1], Decoded::Oversized { .. }));
    assert_eq!(out[2], Decoded::Event(ev(None, "b", None)));
}

/// The decoded stream with the sizes of oversized events left out (they say how much had been
/// seen when the event was dropped, which depends on where the reads ended).
fn outcome(chunks: &[&[u8]], cap: usize) -> (Vec<Decoded>, bool) {
    let (out, pending) = decode_chunks(chunks, cap);
    let out = out
        .into_iter()
        .map(|d| match d {
            Decoded::Oversized { .. } => Decoded::Oversized { bytes: 0 },
            d => d,
        })
        .collect();
    (out, pending)
}

#[test]
fn a_line_over_the_cap_drops_its_event_at_every_split() {
    // An `event` line, a comment and a `data` line whose value fits but whose line does not:
    // each drops its event whether the line arrives in one read or is cut across two.
    for long in [
        "event: a-name-longer-than-the-cap".to_string(),
        format!(": {}", "c".repeat(40)),
        format!("data: {}", "v".repeat(30)),
    ] {
        let input = format!("{long}\ndata: x\n\ndata: y\n\n");
        let input = input.as_bytes();
        let whole = outcome(&[input], 32);
        assert_eq!(
            whole,
            (
                vec![
                    Decoded::Oversized { bytes: 0 },
                    Decoded::Event(ev(None, "y", None))
                ],
                false
            ),
            "{long:?}"
        );
        for cut in 1..input.len() {
            let (a, b) = input.split_at(cut);
            assert_eq!(outcome(&[a, b], 32), whole, "{long:?} cut at {cut}");
        }
    }
}

#[test]
fn oversized_event_across_many_data_lines_is_dropped() {
    let line = format!("data: {}\n", "y".repeat(20));
    let input = format!("{}\ndata: ok\n\n", line.repeat(10));
    let (out, _) = decode_chunks(&[input.as_bytes()], 64);
    assert!(matches!(out[0], Decoded::Oversized { .. }));
    assert_eq!(out[1..], [Decoded::Event(ev(None, "ok", None))]);
}

#[test]
fn a_discarded_partial_event_is_skipped_to_its_blank_line() {
    let mut d = Decoder::new(1 << 20);
    let mut out = Vec::new();
    assert_eq!(d.discard_partial(), None, "nothing held");
    d.feed(
        &Bytes::from_static(b"data: a\n\ndata: part one\ndata: tw"),
        &mut out,
    );
    // The data so far ("part one") and the carried-over line ("data: tw").
    assert_eq!(d.discard_partial(), Some(8 + 8));
    assert_eq!((d.buffered(), d.dropped()), (0, 1));
    assert_eq!(d.discard_partial(), None, "already discarding");
    d.feed(
        &Bytes::from_static(b"o\ndata: three\n\ndata: b\n\n"),
        &mut out,
    );
    assert_eq!(
        out,
        vec![
            Decoded::Event(ev(None, "a", None)),
            Decoded::Event(ev(None, "b", None)),
        ]
    );
}

#[test]
fn data_inside_one_chunk_is_a_slice_of_that_chunk() {
    let chunk = Bytes::from_static(b"data: {\"a\":1}\n\ndata: split");
    let mut d = Decoder::new(1024);
    let mut out = Vec::new();
    d.feed(&chunk, &mut out);
    let Decoded::Event(e) = &out[0] else {
        panic!("no event")
    };
    let range = chunk.as_ptr_range();
    assert!(range.contains(&e.data.as_ptr()), "data was copied");
}

/// A generated stream: its bytes and the events a correct decoder yields.
fn arb_stream() -> impl Strategy<Value = (Vec<u8>, Vec<SseEvent>)> {
    let text = "[a-z \u{e9}\u{1F600}\u{4e16}:]{0,12}";
    let event = (
        proptest::option::of("[a-z]{1,6}"),
        proptest::collection::vec(text, 1..4),
        proptest::option::of("[0-9]{1,3}"),
        any::<bool>(),
    );
    (
        any::<bool>(),
        proptest::collection::vec(event, 0..8),
        proptest::collection::vec(0..3usize, 64),
    )
        .prop_map(|(bom, evs, endings)| {
            let mut bytes = Vec::new();
            if bom {
                bytes.extend_from_slice(BOM);
            }
            let mut expected = Vec::new();
            let mut last_id: Option<String> = None;
            let mut prev = 1usize;
            let mut n = 0usize;
            let mut line = |bytes: &mut Vec<u8>, content: &str| {
                bytes.extend_from_slice(content.as_bytes());
                let mut e = endings[n % endings.len()];
                n += 1;
                // A lone CR followed by an LF ending would read as one CRLF ending.
                if content.is_empty() && prev == 1 && e == 0 {
                    e = 2;
                }
                prev = e;
                bytes.extend_from_slice([&b"\n"[..], b"\r", b"\r\n"][e]);
            };
            for (name, data, id, comment) in evs {
                if comment {
                    line(&mut bytes, ": hb");
                }
                if let Some(name) = &name {
                    line(&mut bytes, &format!("event: {name}"));
                }
                if let Some(id) = &id {
                    line(&mut bytes, &format!("id: {id}"));
                    last_id = Some(id.clone());
                }
                for d in &data {
                    line(&mut bytes, &format!("data: {d}"));
                }
                line(&mut bytes, "");
                expected.push(ev(name.as_deref(), &data.join("\n"), last_id.as_deref()));
            }
            (bytes, expected)
        })
}

proptest! {
    #[test]
    fn any_chunking_yields_the_events_of_the_stream(
        (bytes, expected) in arb_stream(),
        cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..12),
    ) {
        let mut points: Vec<usize> = cuts.iter().map(|c| c.index(bytes.len() + 1)).collect();
        points.sort_unstable();
        let mut chunks: Vec<&[u8]> = Vec::new();
        let mut at = 0;
        for p in points {
            chunks.push(&bytes[at..p]);
            at = p;
        }
        chunks.push(&bytes[at..]);
        let (out, pending) = decode_chunks(&chunks, 1 << 16);
        let got: Vec<SseEvent> = out.into_iter().map(|d| match d {
            Decoded::Event(e) => e,
            other => panic!("unexpected {other:?}"),
        }).collect();
        prop_assert_eq!(got, expected);
        prop_assert!(!pending);
    }

    #[test]
    fn one_byte_at_a_time_equals_one_chunk((bytes, expected) in arb_stream()) {
        let chunks: Vec<&[u8]> = bytes.chunks(1).collect();
        let (out, _) = decode_chunks(&chunks, 1 << 16);
        prop_assert_eq!(out.len(), expected.len());
        let (whole, _) = decode_chunks(&[&bytes], 1 << 16);
        prop_assert_eq!(out, whole);
    }
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic_and_buffering_stays_under_the_cap(
        bytes in proptest::collection::vec(any::<u8>(), 0..4096),
        cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..16),
        cap in 16usize..512,
    ) {
        let mut points: Vec<usize> = cuts.iter().map(|c| c.index(bytes.len() + 1)).collect();
        points.sort_unstable();
        points.push(bytes.len());
        let mut d = Decoder::new(cap);
        let mut out = Vec::new();
        let mut at = 0;
        for p in points {
            d.feed(&Bytes::copy_from_slice(&bytes[at..p]), &mut out);
            at = p;
            // What is held stays within the cap (the decoder drops the event past it); what is
            // allocated for it, counted by capacity, within twice the cap.
            prop_assert!(d.held() <= cap, "{} held over a cap of {cap}", d.held());
            prop_assert!(d.buffered() <= 2 * cap, "{} buffered over twice a cap of {cap}", d.buffered());
        }
        for item in &out {
            if let Decoded::Event(e) = item {
                prop_assert!(e.data.len() <= cap);
            }
        }
        d.finish();
    }
}

fn raw_frames(chunks: &[&[u8]]) -> (Vec<SseEvent>, Vec<RawFrame>) {
    let mut d = Decoder::new(1 << 20).keep_raw();
    let (mut events, mut raw) = (Vec::new(), Vec::new());
    for c in chunks {
        let mut out = Vec::new();
        d.feed(&Bytes::copy_from_slice(c), &mut out);
        events.extend(out.into_iter().filter_map(|o| match o {
            Decoded::Event(e) => Some(e),
            Decoded::Oversized { .. } => None,
        }));
        raw.extend(d.take_raw());
    }
    (events, raw)
}

#[test]
fn raw_frames_keep_event_id_and_data_lines_in_order_without_comments_or_retry() {
    let stream = b": hi\nevent: a\nid: 7\nretry: 10\ndata: x\ndata:y\n\n: ping\n\ndata: z\n\n";
    let (events, raw) = raw_frames(&[stream]);
    assert_eq!(events.len(), 2);
    let bytes: Vec<&[u8]> = raw.iter().map(|r| &r.bytes[..]).collect();
    assert_eq!(
        bytes,
        vec![&b"event: a\nid: 7\ndata: x\ndata:y\n\n"[..], b"data: z\n\n"]
    );
    assert_eq!((raw[0].named, raw[1].named), (true, false));
}

#[test]
fn raw_frames_are_the_same_at_every_split_and_normalize_crlf() {
    let stream = b"event: a\r\ndata: {\"k\":1}\r\n\r\ndata: b\r\rdata: c\n\n";
    let (_, whole) = raw_frames(&[stream]);
    assert_eq!(whole.len(), 3);
    assert_eq!(&whole[0].bytes[..], b"event: a\ndata: {\"k\":1}\n\n");
    for cut in 1..stream.len() {
        let (_, split) = raw_frames(&[&stream[..cut], &stream[cut..]]);
        assert_eq!(split, whole, "cut at {cut}");
    }
}

#[test]
fn no_raw_frame_for_an_oversized_event_or_without_keep_raw() {
    let mut d = Decoder::new(8).keep_raw();
    let mut out = Vec::new();
    d.feed(
        &Bytes::from_static(b"data: 0123456789\n\ndata: ok\n\n"),
        &mut out,
    );
    let raw: Vec<RawFrame> = d.take_raw().collect();
    assert_eq!(raw.len(), 1);
    assert_eq!(&raw[0].bytes[..], b"data: ok\n\n");
    let mut plain = Decoder::new(64);
    plain.feed(&Bytes::from_static(b"data: ok\n\n"), &mut out);
    assert_eq!(plain.take_raw().count(), 0);
}

#[test]
fn at_a_boundary_only_between_two_events_at_every_split() {
    let stream = b"event: a\r\ndata: {\"k\":1}\r\n\r\n: note\nretry: 5\n\ndata: b\n\n";
    // The start, and after a blank line (its CR already ends it), a comment or a `retry`
    // line; nowhere else.
    let ends = [0, 26, 27, 34, 43, 44, stream.len()];
    for keep_raw in [false, true] {
        for cut in 0..=stream.len() {
            let mut d = Decoder::new(1 << 10);
            if keep_raw {
                d = d.keep_raw();
            }
            d.feed(&Bytes::copy_from_slice(&stream[..cut]), &mut Vec::new());
            let _ = d.take_raw();
            assert_eq!(d.at_boundary(), ends.contains(&cut), "cut at {cut}");
        }
    }
    // Inside a byte-order mark, and inside an event dropped for its size.
    let mut d = Decoder::new(4);
    d.feed(&Bytes::from_static(b"\xEF\xBB"), &mut Vec::new());
    assert!(!d.at_boundary());
    d.feed(
        &Bytes::from_static(b"\xBFdata: 0123456789\n"),
        &mut Vec::new(),
    );
    assert!(!d.at_boundary());
    d.feed(&Bytes::from_static(b"\n"), &mut Vec::new());
    assert!(d.at_boundary());
}
