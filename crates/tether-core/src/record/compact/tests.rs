//! Tests of compaction and the byte log, on byte slices.

use super::*;
use crate::record::format::{agui::Agui, Format};
use crate::record::sse::SseEvent;

fn ev(json: &str) -> Event {
    Agui.classify(&SseEvent {
        event: None,
        data: Bytes::copy_from_slice(json.as_bytes()),
        id: None,
    })
}

fn compact(events: &[&str]) -> String {
    let mut c = Compactor::new();
    for e in events {
        c.push(&ev(e));
    }
    let cap = c.capture();
    let mut out = BytesMut::new();
    out.extend_from_slice(b"[");
    cap.write_to(&mut out);
    out.extend_from_slice(b"]");
    String::from_utf8(out.to_vec()).unwrap()
}

const START: &str = r#"{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant"}"#;
const END: &str = r#"{"type":"TEXT_MESSAGE_END","messageId":"m1"}"#;

fn content(id: &str, delta: &str) -> String {
    format!(
        r#"{{"type":"TEXT_MESSAGE_CONTENT","messageId":"{id}","delta":"{delta}","timestamp":1}}"#
    )
}

#[test]
fn merges_adjacent_deltas_at_the_first_position() {
    let (a, b, c) = (
        content("m1", "Hel"),
        content("m1", "lo"),
        content("m1", "!"),
    );
    let out = compact(&[START, &a, &b, &c, END]);
    assert_eq!(out, format!("[{START},{},{END}]", content("m1", "Hello!")));
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v.as_array().unwrap().len(), 3);
}

#[test]
fn never_merges_across_another_event_or_another_key() {
    let custom = r#"{"type":"CUSTOM","name":"x","value":1}"#;
    let out = compact(&[
        &content("m1", "a"),
        custom,
        &content("m1", "b"),
        &content("m2", "c"),
    ]);
    assert_eq!(
        out,
        format!(
            "[{},{custom},{},{}]",
            content("m1", "a"),
            content("m1", "b"),
            content("m2", "c")
        )
    );
}

#[test]
fn different_classes_with_the_same_key_do_not_merge() {
    let r = r#"{"type":"REASONING_MESSAGE_CONTENT","messageId":"m1","delta":"r"}"#;
    let out = compact(&[&content("m1", "a"), r]);
    assert_eq!(out, format!("[{},{r}]", content("m1", "a")));
}

#[test]
fn escaped_fragments_join_into_valid_json() {
    let parts = [r"\ud83d", r"\ude00", r#"\"q\""#, r"\n", "\u{e9}"];
    let events: Vec<String> = parts.iter().map(|p| content("m", p)).collect();
    let refs: Vec<&str> = events.iter().map(String::as_str).collect();
    let out = compact(&refs);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v[0]["delta"], "\u{1F600}\"q\"\n\u{e9}");
}

#[test]
fn chunks_without_an_id_join_the_open_chunk() {
    let a = r#"{"type":"TEXT_MESSAGE_CHUNK","messageId":"m","role":"assistant","delta":"a"}"#;
    let b = r#"{"type":"TEXT_MESSAGE_CHUNK","delta":"b"}"#;
    let c = r#"{"type":"TEXT_MESSAGE_CHUNK","messageId":"n","delta":"c"}"#;
    let out = compact(&[a, b, c]);
    assert_eq!(
        out,
        format!(
            r#"[{{"type":"TEXT_MESSAGE_CHUNK","messageId":"m","role":"assistant","delta":"ab"}},{c}]"#
        )
    );
}

#[test]
fn an_open_group_is_captured_with_its_tail_and_keeps_growing() {
    let mut c = Compactor::new();
    c.push(&ev(&content("m", "a")));
    let first = c.capture();
    c.push(&ev(&content("m", "b")));
    let second = c.capture();
    let text = |cap: &Capture| {
        let mut o = BytesMut::new();
        cap.write_to(&mut o);
        String::from_utf8(o.to_vec()).unwrap()
    };
    assert_eq!(text(&first), content("m", "a"));
    assert_eq!(text(&second), content("m", "ab"));
    assert_eq!(second.events, 1);
}

use proptest::prelude::*;

proptest! {
    /// Hostile input: any bytes as event data, mixed with real deltas, always compact into a
    /// valid JSON array with one entry per unmerged event.
    #[test]
    fn arbitrary_event_data_compacts_into_valid_json(
        items in proptest::collection::vec(
            prop_oneof![
                proptest::collection::vec(any::<u8>(), 0..64).prop_map(Some),
                Just(None),
            ],
            0..40,
        ),
    ) {
        let mut c = Compactor::new();
        for item in &items {
            let data = match item {
                Some(raw) => Bytes::copy_from_slice(raw),
                None => Bytes::from_static(br#"{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"\u00e9x"}"#),
            };
            let e = Agui.classify(&SseEvent { event: Some(Bytes::from_static(b"\xff")), data, id: None });
            prop_assert!(serde_json::from_slice::<serde_json::Value>(&e.json).is_ok_and(|v| v.is_object()));
            c.push(&e);
        }
        let cap = c.capture();
        let mut out = BytesMut::new();
        out.extend_from_slice(b"[");
        cap.write_to(&mut out);
        out.extend_from_slice(b"]");
        let v: serde_json::Value = serde_json::from_slice(&out).expect("valid JSON");
        prop_assert_eq!(v.as_array().unwrap().len(), cap.events);
    }
}

#[test]
fn the_log_shares_blocks_without_copying_and_stays_logarithmic() {
    let mut log = ByteLog::default();
    let piece = [b'x'; 1000];
    for _ in 0..20_000 {
        log.push(&piece);
    }
    let blocks = log.share();
    assert_eq!(blocks.iter().map(Bytes::len).sum::<usize>(), 20_000_000);
    assert!(blocks.len() < 40, "{} blocks", blocks.len());
    let again = log.share();
    assert_eq!(blocks[0].as_ptr(), again[0].as_ptr());
}

/// A Responses-style delta whose `sequence_number` (before or after the delta) is last-wins.
fn seq_delta(json: &'static str, key: &str) -> Event {
    let j = Bytes::from_static(json.as_bytes());
    let find = |pat: &str| {
        let i = json.find(pat).unwrap();
        i..i + pat.len()
    };
    let d = find("\"delta\":\"");
    let delta_start = d.end;
    let delta_end = delta_start + json[delta_start..].find('"').unwrap();
    let seq_at = json.find("\"sequence_number\":").unwrap();
    let value_start = seq_at + "\"sequence_number\":".len();
    let value_end = value_start
        + json[value_start..]
            .find(|c: char| !c.is_ascii_digit())
            .unwrap();
    // One adjacent comma: the leading one when the member is not first.
    let member = if json[..seq_at].ends_with(',') {
        seq_at - 1..value_end
    } else {
        seq_at..value_end + 1
    };
    let mut e = Event::verbatim(j, 0..0, 0..0);
    e.merge = Some(crate::record::format::Merge {
        class: MergeClass {
            id: 900,
            key_optional: false,
        },
        key: find(key),
        sub: 0,
        delta: delta_start..delta_end,
        last: Some(crate::record::format::LastWins {
            member,
            label: seq_at..value_start,
            value: value_start..value_end,
        }),
    });
    e
}

fn compact_events(events: &[Event]) -> String {
    let mut c = Compactor::new();
    events.iter().for_each(|e| c.push(e));
    let mut out = BytesMut::new();
    c.capture().write_to(&mut out);
    String::from_utf8(out.to_vec()).unwrap()
}

#[test]
fn a_last_wins_member_takes_the_last_merged_value_wherever_it_stood() {
    let before = [
        seq_delta(
            r#"{"type":"d","sequence_number":4,"item_id":"i","delta":"He"}"#,
            "\"i\"",
        ),
        seq_delta(
            r#"{"type":"d","sequence_number":5,"item_id":"i","delta":"llo"}"#,
            "\"i\"",
        ),
    ];
    let out = compact_events(&before);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["delta"], "Hello");
    assert_eq!(v["sequence_number"], 5);
    assert_eq!(v["item_id"], "i");
    let after = [
        seq_delta(r#"{"type":"d","delta":"a","sequence_number":7}"#, "\"d\""),
        seq_delta(r#"{"type":"d","delta":"b","sequence_number":9} "#, "\"d\""),
        seq_delta(r#"{"type":"d","delta":"c","sequence_number":11}"#, "\"d\""),
    ];
    let out = compact_events(&after);
    assert_eq!(out, r#"{"type":"d","delta":"abc","sequence_number":11}"#);
    // A group of one keeps its own value.
    let out = compact_events(&after[..1]);
    assert_eq!(out, r#"{"type":"d","delta":"a","sequence_number":7}"#);
}

#[test]
fn a_transient_event_is_left_out_and_does_not_close_the_group() {
    let mut ping = Agui.classify(&SseEvent {
        event: None,
        data: Bytes::from_static(br#"{"type":"ping"}"#),
        id: None,
    });
    ping.transient = true;
    let out = compact_events(&[ev(&content("m", "a")), ping, ev(&content("m", "b"))]);
    assert_eq!(out, content("m", "ab"));
}

#[test]
fn deltas_with_the_same_key_but_another_sub_key_do_not_merge() {
    let mut a = ev(&content("m", "a"));
    let mut b = ev(&content("m", "b"));
    a.merge.as_mut().unwrap().sub = 1;
    b.merge.as_mut().unwrap().sub = 2;
    let out = compact_events(&[a, b]);
    assert_eq!(out, format!("{},{}", content("m", "a"), content("m", "b")));
}

#[test]
fn the_history_keeps_no_slice_of_an_events_bytes() {
    // A big delta: the open group's key and closing bytes must not keep its buffer alive.
    let json = Bytes::from(content("m1", &"x".repeat(7 << 20)));
    let mut c = Compactor::new();
    let event = Agui.classify(&SseEvent {
        event: None,
        data: json.clone(),
        id: None,
    });
    c.push(&event);
    drop(event);
    assert!(json.is_unique(), "the event's buffer is the caller's alone");
    // What the history holds is what it counts.
    assert!(c.allocated() >= 7 << 20);
}
