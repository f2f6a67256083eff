//! Tests of the Anthropic Messages classifier, on byte slices.

use bytes::Bytes;

use super::*;
use crate::record::compact::Compactor;

fn sse(event: Option<&str>, data: &str) -> SseEvent {
    SseEvent {
        event: event.map(|e| Bytes::copy_from_slice(e.as_bytes())),
        data: Bytes::copy_from_slice(data.as_bytes()),
        id: None,
    }
}

/// An event as the API sends it: the SSE name is the JSON `type`.
fn named(ty: &str, data: &str) -> Event {
    Anthropic.classify(&sse(Some(ty), data))
}

fn delta(index: &str, inner: &str) -> Event {
    named(
        "content_block_delta",
        &format!(r#"{{"type":"content_block_delta","index":{index},"delta":{inner}}}"#),
    )
}

fn merged(events: &[Event]) -> Vec<serde_json::Value> {
    let mut c = Compactor::new();
    events.iter().for_each(|e| c.push(e));
    let cap = c.capture();
    let mut out = bytes::BytesMut::new();
    out.extend_from_slice(b"[");
    cap.write_to(&mut out);
    out.extend_from_slice(b"]");
    serde_json::from_slice(&out).unwrap()
}

#[test]
fn a_text_delta_merges_by_index_with_its_escaped_text_as_the_span() {
    let e = delta("0", r#"{"type":"text_delta","text":"h\u00e9 \"q\"\n"}"#);
    assert_eq!(e.ty(), b"content_block_delta");
    assert_eq!(e.merge_key(), b"0");
    assert_eq!(e.delta(), br#"h\u00e9 \"q\"\n"#);
    let m = e.merge.as_ref().unwrap();
    assert_eq!(m.class, TEXT_DELTA);
    assert_eq!(m.sub, 0);
    assert!(m.last.is_none());
    assert!(!e.terminal && !e.finish && !e.transient && e.failure.is_none());
    assert!(e.sse_name.is_none(), "the name equals the type");
}

#[test]
fn each_text_like_delta_kind_has_its_own_class_and_field() {
    let e = delta(
        "3",
        r#"{"type":"input_json_delta","partial_json":"{\"a\": 1"}"#,
    );
    assert_eq!(e.merge.as_ref().unwrap().class, INPUT_JSON_DELTA);
    assert_eq!(e.merge_key(), b"3");
    assert_eq!(e.delta(), br#"{\"a\": 1"#);
    let e = delta(
        "12",
        r#"{"type":"thinking_delta","thinking":"hmm \ud83d\ude00"}"#,
    );
    assert_eq!(e.merge.as_ref().unwrap().class, THINKING_DELTA);
    assert_eq!(e.merge_key(), b"12");
    assert_eq!(e.delta(), br"hmm \ud83d\ude00");
    let classes = [TEXT_DELTA.id, INPUT_JSON_DELTA.id, THINKING_DELTA.id];
    assert!(classes.iter().all(|id| (300..400).contains(id)));
}

#[test]
fn members_in_any_order_and_whitespace_still_give_the_right_spans() {
    let e = Anthropic.classify(&sse(
        Some("content_block_delta"),
        "{ \"delta\" : { \"text\" : \"x\\\\y\" ,\n \"type\" : \"text_delta\" } , \"index\" : 7 ,\"type\":\"content_block_delta\" }",
    ));
    assert_eq!(e.ty(), b"content_block_delta");
    assert_eq!(e.merge_key(), b"7");
    assert_eq!(e.delta(), br"x\\y");
    assert!(!e.json.contains(&b'\n'), "one line");
}

#[test]
fn signature_and_citations_deltas_stay_verbatim() {
    let e = delta(
        "0",
        r#"{"type":"signature_delta","signature":"EqQBCgIYAhIM"}"#,
    );
    assert!(e.merge.is_none());
    let e = delta(
        "0",
        r#"{"type":"citations_delta","citation":{"type":"char_location","cited_text":"x","document_index":0,"start_char_index":0,"end_char_index":1}}"#,
    );
    assert!(e.merge.is_none());
}

#[test]
fn a_delta_carrying_anything_else_does_not_merge() {
    // An extra member at the top level or in the delta would be lost in a merged event.
    let e = named(
        "content_block_delta",
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"a"},"usage":{"output_tokens":3}}"#,
    );
    assert!(e.merge.is_none());
    let e = delta("0", r#"{"type":"text_delta","text":"a","citations":[]}"#);
    assert!(e.merge.is_none());
    // The other kinds' fields count as extra too.
    let e = delta("0", r#"{"type":"text_delta","text":"a","thinking":"b"}"#);
    assert!(e.merge.is_none());
    let e = delta(
        "0",
        r#"{"type":"thinking_delta","thinking":"a","partial_json":"b"}"#,
    );
    assert!(e.merge.is_none());
}

#[test]
fn a_delta_without_a_plain_index_or_string_field_does_not_merge() {
    for (index, inner) in [
        ("-1", r#"{"type":"text_delta","text":"a"}"#),
        ("1.0", r#"{"type":"text_delta","text":"a"}"#),
        (r#""0""#, r#"{"type":"text_delta","text":"a"}"#),
        ("0", r#"{"type":"text_delta","text":5}"#),
        ("0", r#"{"type":"text_delta","text":null}"#),
        ("0", r#"{"type":"text_delta"}"#),
        ("0", r#"{"text":"a"}"#),
        ("0", r#"{"type":"input_json_delta","text":"a"}"#),
        ("0", r#"{"type":"image_delta","data":"a"}"#),
    ] {
        let e = delta(index, inner);
        assert!(e.merge.is_none(), "{index} {inner}");
        assert_eq!(e.ty(), b"content_block_delta");
    }
    let e = named(
        "content_block_delta",
        r#"{"type":"content_block_delta","delta":{"type":"text_delta","text":"a"}}"#,
    );
    assert!(e.merge.is_none(), "no index");
    let e = named(
        "content_block_delta",
        r#"{"type":"content_block_delta","index":0,"delta":"text"}"#,
    );
    assert!(e.merge.is_none(), "a delta that is not an object");
    assert_eq!(e.ty(), b"content_block_delta");
}

#[test]
fn only_content_block_delta_merges() {
    let e = named(
        "message_delta",
        r#"{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":15}}"#,
    );
    assert!(e.merge.is_none());
    let e = named(
        "x",
        r#"{"type":"x","index":0,"delta":{"type":"text_delta","text":"a"}}"#,
    );
    assert!(e.merge.is_none());
}

#[test]
fn escaped_member_names_are_read_like_plain_ones() {
    let e = named(
        "content_block_delta",
        r#"{"\u0074ype":"content_block_delta","index":0,"delta":{"type":"text_delta","te\u0078t":"a"}}"#,
    );
    assert_eq!(e.ty(), b"content_block_delta");
    assert_eq!(e.delta(), b"a");
}

#[test]
fn duplicate_members_stay_verbatim_unmerged() {
    let data = r#"{"type":"content_block_delta","index":0,"index":1,"delta":{"type":"text_delta","text":"a"}}"#;
    let e = named("content_block_delta", data);
    assert!(e.merge.is_none());
    assert_eq!(&e.json[..], data.as_bytes());
    let e = delta("0", r#"{"type":"text_delta","text":"a","text":"b"}"#);
    assert!(e.merge.is_none());
}

#[test]
fn adjacent_deltas_of_one_block_and_kind_merge_and_nothing_else_does() {
    let text = |i: &str, t: &str| delta(i, &format!(r#"{{"type":"text_delta","text":"{t}"}}"#));
    let ping = named("ping", r#"{"type": "ping"}"#);
    let stop = named(
        "content_block_stop",
        r#"{"type":"content_block_stop","index":0}"#,
    );
    let sig = delta("0", r#"{"type":"signature_delta","signature":"s"}"#);
    let think = delta("0", r#"{"type":"thinking_delta","thinking":"t"}"#);
    let events = [
        text("0", "He"),
        ping.clone(),
        text("0", "l\\\"lo"),
        text("1", "x"),
        text("0", "!"),
        think,
        text("0", "?"),
        sig,
        text("0", "a"),
        stop,
        text("0", "b"),
    ];
    let v = merged(&events);
    let texts: Vec<String> = v
        .iter()
        .map(|e| match e["delta"]["type"].as_str() {
            Some("text_delta") => {
                format!("{}:{}", e["index"], e["delta"]["text"].as_str().unwrap())
            }
            _ => e["type"].as_str().unwrap().to_string(),
        })
        .collect();
    assert_eq!(
        texts,
        [
            "0:Hel\"lo",
            "1:x",
            "0:!",
            "content_block_delta",
            "0:?",
            "content_block_delta",
            "0:a",
            "content_block_stop",
            "0:b"
        ]
    );
}

#[test]
fn message_stop_is_terminal_and_nothing_else_is() {
    assert!(named("message_stop", r#"{"type":"message_stop"}"#).terminal);
    for (name, data) in [
        (
            "message_start",
            r#"{"type":"message_start","message":{"id":"m","content":[]}}"#,
        ),
        (
            "message_delta",
            r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":1}}"#,
        ),
        (
            "content_block_stop",
            r#"{"type":"content_block_stop","index":0}"#,
        ),
        ("ping", r#"{"type":"ping"}"#),
    ] {
        let e = named(name, data);
        assert!(!e.terminal && !e.finish && e.failure.is_none(), "{name}");
    }
    assert!(!Anthropic.needs_finish());
}

#[test]
fn an_error_event_fails_the_turn_by_its_type_or_its_name() {
    let e = named(
        "error",
        r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
    );
    assert_eq!(e.failure, Some(EndReason::ErrorEvent));
    assert!(!e.terminal);
    assert!(e.sse_name.is_none());
    // The SDK raises on `event: error` whatever its data.
    let e = Anthropic.classify(&sse(Some("error"), "Internal server error"));
    assert_eq!(e.failure, Some(EndReason::ErrorEvent));
    assert_eq!(e.ty(), b"RAW");
    assert_eq!(e.sse_name.as_deref(), Some(&b"error"[..]));
    let e = Anthropic.classify(&sse(
        None,
        r#"{"type":"error","error":{"type":"api_error"}}"#,
    ));
    assert_eq!(e.failure, Some(EndReason::ErrorEvent));
}

#[test]
fn ping_is_transient_unless_named_otherwise() {
    let e = named("ping", r#"{"type": "ping"}"#);
    assert!(e.transient && !e.terminal && e.merge.is_none());
    assert!(
        Anthropic
            .classify(&sse(None, r#"{"type":"ping"}"#))
            .transient
    );
    let e = Anthropic.classify(&sse(Some("message_delta"), r#"{"type":"ping"}"#));
    assert!(!e.transient);
    assert_eq!(e.sse_name.as_deref(), Some(&b"message_delta"[..]));
}

#[test]
fn the_sse_name_is_kept_when_it_differs_from_the_type() {
    let e = Anthropic.classify(&sse(
        Some("content_block_delta"),
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"a"}}"#,
    ));
    assert!(e.sse_name.is_none());
    let e = Anthropic.classify(&sse(
        Some("custom_name"),
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"a"}}"#,
    ));
    assert_eq!(e.sse_name.as_deref(), Some(&b"custom_name"[..]));
    assert!(e.merge.is_some());
    let e = Anthropic.classify(&sse(None, r#"{"type":"message_stop"}"#));
    assert!(e.sse_name.is_none());
}

#[test]
fn data_that_is_not_a_json_object_is_wrapped_as_raw() {
    for data in ["not json", "[1,2]", "{broken", "\"s\""] {
        let e = Anthropic.classify(&sse(Some("content_block_delta"), data));
        assert_eq!(e.ty(), b"RAW", "{data}");
        assert!(e.merge.is_none());
        let v: serde_json::Value = serde_json::from_slice(&e.json).unwrap();
        assert_eq!(v["event"]["data"], data);
        assert_eq!(v["event"]["event"], "content_block_delta");
    }
    let e = Anthropic.classify(&SseEvent {
        event: Some(Bytes::from_static(b"content_block_delta")),
        data: Bytes::from_static(b"{\"type\":\"content_block_delta\",\"delta\":\"\xff\"}"),
        id: None,
    });
    assert_eq!(e.ty(), b"RAW");
}

#[test]
fn terminal_still_set_when_the_pass_falls_back_to_verbatim() {
    let e = named("message_stop", r#"{"type":"message_stop","delta":5}"#);
    assert_eq!(e.ty(), b"message_stop");
    assert!(e.terminal);
}

#[test]
fn json_objects_are_kept_byte_for_byte() {
    let data = r#"{ "type" : "message_start", "message": {"id": "msg_1", "content": []} }"#;
    let e = named("message_start", data);
    assert_eq!(&e.json[..], data.as_bytes());
    assert_eq!(e.ty(), b"message_start");
}

#[test]
fn recognizes_message_start_and_a_named_error_only() {
    let yes = |event: Option<&str>, data: &str| Anthropic.recognizes(&sse(event, data));
    assert!(yes(
        Some("message_start"),
        r#"{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[]}}"#
    ));
    assert!(yes(None, r#"{"type":"message_start","message":{}}"#));
    assert!(yes(
        Some("error"),
        r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#
    ));
    // Not this format's first events, or other formats' streams.
    for (event, data) in [
        (Some("message_start"), r#"{"type":"message_start"}"#),
        (
            Some("message_start"),
            r#"{"type":"message_start","message":"m"}"#,
        ),
        (
            None,
            r#"{"type":"error","error":{"type":"overloaded_error"}}"#,
        ),
        (
            Some("error"),
            r#"{"type":"error","code":"server_error","message":"x","sequence_number":3}"#,
        ),
        (None, r#"{"type":"error","errorText":"x"}"#),
        (Some("ping"), r#"{"type":"ping"}"#),
        (None, r#"{"type":"RUN_STARTED","threadId":"t","runId":"r"}"#),
        (
            None,
            r#"{"type":"TEXT_MESSAGE_START","messageId":"m","role":"assistant"}"#,
        ),
        (
            None,
            r#"{"id":"c","object":"chat.completion.chunk","choices":[]}"#,
        ),
        (
            Some("response.created"),
            r#"{"type":"response.created","sequence_number":0,"response":{}}"#,
        ),
        (None, r#"{"type":"start","messageId":"m"}"#),
        (None, "[DONE]"),
        (None, "message_start"),
    ] {
        assert!(!yes(event, data), "{event:?} {data}");
    }
}

#[test]
fn auto_detection_picks_anthropic_from_message_start() {
    let first = sse(
        Some("message_start"),
        r#"{"type":"message_start","message":{"id":"msg_1","content":[]}}"#,
    );
    assert_eq!(
        crate::record::format::detect_from_event(&first),
        FormatKind::Anthropic
    );
    let agui = sse(None, r#"{"type":"RUN_STARTED","threadId":"t","runId":"r"}"#);
    assert_eq!(
        crate::record::format::detect_from_event(&agui),
        FormatKind::Agui
    );
}
