//! Tests of compaction and the byte log, on byte slices.

use super::*;
use crate::format::{agui::Agui, Format};
use crate::sse::SseEvent;

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
