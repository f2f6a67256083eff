//! Tests of protocol-1 frames and attach requests, on byte slices.

use std::time::Duration;

use super::*;
use crate::frame::{end, snapshot};
use crate::request::Parts;

const MAX: Duration = Duration::from_secs(30);

fn code<T: std::fmt::Debug>(r: Result<T, ApiError>) -> &'static str {
    r.unwrap_err().code.as_str()
}
use serde_json::{json, Value};

fn parse(frame: &[u8]) -> (String, Value) {
    let text = std::str::from_utf8(frame).unwrap();
    let rest = text.strip_prefix("id: ").unwrap();
    let (id, rest) = rest.split_once('\n').unwrap();
    let data = rest
        .strip_prefix("data: ")
        .unwrap()
        .strip_suffix("\n\n")
        .unwrap();
    assert!(!data.contains('\n'));
    (id.to_string(), serde_json::from_str(data).unwrap())
}

#[test]
fn event_frame_embeds_the_event_verbatim() {
    let mut out = BytesMut::new();
    let ev = br#"{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"hello"}"#;
    let enc = EventEncoder::new(&RunId::from("r1"));
    enc.write(&mut out, 43, ev);
    assert!(out.len() <= enc.max_len(ev.len()));
    assert_eq!(
        &out[..],
        &b"id: r1:43\ndata: {\"type\":\"STREAM_EVENT\",\"run_id\":\"r1\",\"seq\":43,\"event\":{\"type\":\"TEXT_MESSAGE_CONTENT\",\"messageId\":\"m\",\"delta\":\"hello\"}}\n\n"[..]
    );
}

#[test]
fn snapshot_frame_wraps_the_history() {
    let mut c = crate::record::compact::Compactor::new();
    let empty = snapshot(&RunId::from("r"), 0, &c.capture());
    assert_eq!(
        parse(&empty),
        (
            "r:0".into(),
            json!({"type":"STREAM_SNAPSHOT","run_id":"r","seq":0,"events":[]})
        )
    );
    c.push(&crate::record::format::Format::classify(
        &crate::record::format::agui::Agui,
        &crate::record::sse::SseEvent {
            event: None,
            data: bytes::Bytes::from_static(br#"{"type":"RUN_STARTED"}"#),
            id: None,
        },
    ));
    let (id, v) = parse(&snapshot(&RunId::from("r"), 1, &c.capture()));
    assert_eq!(id, "r:1");
    assert_eq!(v["events"], json!([{"type":"RUN_STARTED"}]));
}

#[test]
fn end_frame_carries_terminal_state() {
    let f = end(
        &RunId::from("r"),
        &End {
            seq: 43,
            persisted: true,
            superseded: false,
            next_run_id: None,
            reason: None,
        },
    );
    assert_eq!(
        parse(&f),
        (
            "r:43".into(),
            json!({"type":"STREAM_END","run_id":"r","seq":43,"persisted":true,"superseded":false})
        )
    );
    let f = end(
        &RunId::from("r"),
        &End {
            seq: 7,
            persisted: false,
            superseded: true,
            next_run_id: Some("r2".into()),
            reason: Some(crate::vocab::end::EndReason::Superseded),
        },
    );
    assert_eq!(
        parse(&f).1,
        json!({"type":"STREAM_END","run_id":"r","seq":7,"persisted":false,"superseded":true,"next_run_id":"r2","reason":"superseded"})
    );
}

#[test]
fn attach_post_fields_and_types() {
    let a = attach_post(
        &KeySource::body("chat_id"),
        br#"{"chat_id":"c","protocol":1,"run_id":"r1","after_seq":5,"wait_ms":99999999}"#,
        &Parts::EMPTY,
        MAX,
    )
    .unwrap();
    assert_eq!(a.run_id.as_deref(), Some("r1"));
    assert_eq!(a.after_seq, Some(5));
    assert_eq!(a.wait, MAX);
    assert!(a.protocol1);
    for (body, c) in [
        (r#"{"chat_id":"c","after_seq":-1}"#, "invalid_cursor"),
        (r#"{"chat_id":"c","after_seq":1.5}"#, "invalid_cursor"),
        (r#"{"chat_id":"c","after_seq":"3"}"#, "invalid_cursor"),
        (
            r#"{"chat_id":"c","after_seq":18446744073709551616}"#,
            "invalid_cursor",
        ),
        (r#"{"chat_id":"c","run_id":"a b"}"#, "invalid_run_id"),
        (r#"{"chat_id":"c","run_id":7}"#, "invalid_run_id"),
        (r#"{"chat_id":"c","wait_ms":-5}"#, "invalid_wait_ms"),
        (r#"{"chat":"c"}"#, "missing_chat_id"),
    ] {
        assert_eq!(
            code(attach_post(
                &KeySource::body("chat_id"),
                body.as_bytes(),
                &Parts::EMPTY,
                MAX
            )),
            c,
            "{body}"
        );
    }
}

/// A `GET` attach on the default route (`body:chat_id`, read from the query).
fn get(query: Option<&str>, last: Option<&str>, max: Duration) -> Result<AttachRequest, ApiError> {
    let parts = Parts {
        query,
        ..Parts::EMPTY
    };
    attach_get(&KeySource::body("chat_id"), &parts, last, max)
}

#[test]
fn attach_get_reads_query_and_last_event_id() {
    let a = get(Some("chat_id=c&run_id=r&after_seq=3&wait_ms=10"), None, MAX).unwrap();
    assert_eq!((a.run_id.as_deref(), a.after_seq), (Some("r"), Some(3)));
    assert_eq!(a.wait, Duration::from_millis(10));
    let a = get(Some("chat_id=c"), Some("r2:42"), MAX).unwrap();
    assert_eq!((a.run_id.as_deref(), a.after_seq), (Some("r2"), Some(42)));
    assert_eq!(
        code(get(Some("chat_id=c"), Some("r2"), MAX)),
        "invalid_last_event_id"
    );
    assert_eq!(
        code(get(Some("chat_id=c"), Some("r2:-1"), MAX)),
        "invalid_cursor"
    );
    assert_eq!(
        code(get(
            Some("chat_id=c&after_seq=99999999999999999999"),
            None,
            MAX
        )),
        "invalid_cursor"
    );
    assert_eq!(code(get(None, None, MAX)), "missing_chat_id");
    assert_eq!(code(get(Some("chat_id=%ff"), None, MAX)), "invalid_query");
}

#[test]
fn an_event_frame_decodes_back_to_its_id_and_event() {
    let mut out = BytesMut::new();
    EventEncoder::new(&RunId::from("r")).write(&mut out, 1, b"{}");
    assert_eq!(
        &out[..],
        b"id: r:1\ndata: {\"type\":\"STREAM_EVENT\",\"run_id\":\"r\",\"seq\":1,\"event\":{}}\n\n"
    );
    let mut dec = crate::record::sse::Decoder::new(1024);
    let mut got = Vec::new();
    dec.feed(&out.freeze(), &mut got);
    match &got[..] {
        [crate::record::sse::Decoded::Event(e)] => {
            assert_eq!(e.id.as_deref(), Some(&b"r:1"[..]));
            let v: Value = serde_json::from_slice(&e.data).unwrap();
            assert_eq!(v["event"], json!({}));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_cached_encoder_and_the_dialect_encode_the_same_bytes() {
    let (mut a, mut b) = (BytesMut::new(), BytesMut::new());
    EventEncoder::new(&RunId::from("run-\"q\"")).write(&mut a, 42, br#"{"type":"X"}"#);
    Protocol1.event(&mut b, &RunId::from("run-\"q\""), 42, br#"{"type":"X"}"#);
    assert_eq!(a, b);
}

#[test]
fn an_event_whose_sse_name_differs_from_its_type_carries_the_name() {
    let enc = EventEncoder::new(&RunId::from("r"));
    let mut out = BytesMut::new();
    enc.write_named(&mut out, 3, br#"{"type":"x"}"#, b"named \"y\"");
    assert!(out.len() <= enc.max_len_named(12, 10));
    assert_eq!(
        parse(&out).1,
        json!({"type":"STREAM_EVENT","run_id":"r","seq":3,"event":{"type":"x"},"event_name":"named \"y\""})
    );
}

#[test]
fn attach_reads_the_chat_id_from_the_route_source() {
    let captures = [("id".to_string(), "c%201".to_string())];
    let parts = Parts {
        captures: &captures,
        query: Some("after_seq=2&run_id=r"),
        ..Parts::EMPTY
    };
    let path = KeySource::Path("id".into());
    let a = attach_get(&path, &parts, None, MAX).unwrap();
    assert_eq!((a.chat_id.as_str(), a.after_seq), ("c 1", Some(2)));
    // POST: the chat id from the path, the cursor from the body (which may be empty).
    let a = attach_post(&path, br#"{"protocol":1,"after_seq":4}"#, &parts, MAX).unwrap();
    assert_eq!((a.chat_id.as_str(), a.after_seq), ("c 1", Some(4)));
    let a = attach_post(&path, b"", &parts, MAX).unwrap();
    assert!(!a.protocol1);
    // A body field on a GET reads the query parameter of that name.
    let q = Parts {
        query: Some("conversation=k"),
        ..Parts::EMPTY
    };
    let a = attach_get(&KeySource::body("conversation"), &q, None, MAX).unwrap();
    assert_eq!(a.chat_id, "k");
    let nested: KeySource = "json:/thread/id".parse().unwrap();
    let a = attach_post(&nested, br#"{"thread":{"id":"t"}}"#, &Parts::EMPTY, MAX).unwrap();
    assert_eq!(a.chat_id, "t");
}
