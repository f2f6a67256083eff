//! Tests of the OpenAI Responses classifier, on byte slices.

use bytes::{Bytes, BytesMut};

use super::*;
use crate::record::compact::Compactor;
use crate::record::format::detect_from_event;

fn sse(event: Option<&str>, data: &str) -> SseEvent {
    SseEvent {
        event: event.map(|e| Bytes::copy_from_slice(e.as_bytes())),
        data: Bytes::copy_from_slice(data.as_bytes()),
        id: None,
    }
}

fn classify(data: &str) -> Event {
    OpenaiResponses.classify(&sse(None, data))
}

fn text_delta(seq: u64, item: &str, content: u32, delta: &str) -> String {
    format!(
        r#"{{"type":"response.output_text.delta","sequence_number":{seq},"item_id":"{item}","output_index":1,"content_index":{content},"delta":"{delta}","logprobs":[],"obfuscation":"ob{seq}"}}"#
    )
}

/// The snapshot of `events` as the compactor builds it.
fn compact(events: &[String]) -> Vec<serde_json::Value> {
    let mut c = Compactor::new();
    for e in events {
        c.push(&classify(e));
    }
    let cap = c.capture();
    let mut out = BytesMut::new();
    out.extend_from_slice(b"[");
    cap.write_to(&mut out);
    out.extend_from_slice(b"]");
    serde_json::from_slice(&out).unwrap()
}

#[test]
fn an_output_text_delta_is_keyed_by_item_and_content_index_and_sequence_number_is_last_wins() {
    let data = text_delta(7, "msg_1", 2, r#"he said \"hi\" \\ \n\t é 😀"#);
    let e = classify(&data);
    assert_eq!(e.ty(), b"response.output_text.delta");
    assert_eq!(e.merge_key(), br#""msg_1""#);
    assert_eq!(e.delta(), r#"he said \"hi\" \\ \n\t é 😀"#.as_bytes());
    let m = e.merge.clone().unwrap();
    assert_eq!(m.class, OUTPUT_TEXT);
    assert_eq!(m.sub, (2 << 32) | 1);
    let l = m.last.unwrap();
    assert_eq!(&e.json[l.label.clone()], br#""sequence_number":"#);
    assert_eq!(&e.json[l.value.clone()], b"7");
    // The member with the comma after it.
    assert_eq!(&e.json[l.member.clone()], br#""sequence_number":7,"#);
    assert!(!e.terminal && !e.finish && !e.transient && e.failure.is_none());
    assert_eq!(e.sse_name, None);
}

#[test]
fn each_delta_kind_has_its_own_class_key_and_sub_key() {
    let cases = [
        (
            r#"{"type":"response.refusal.delta","sequence_number":1,"item_id":"msg_2","output_index":0,"content_index":3,"delta":"no"}"#,
            REFUSAL,
            3 << 32,
        ),
        (
            r#"{"type":"response.function_call_arguments.delta","sequence_number":1,"item_id":"fc_1","output_index":4,"delta":"{\"a\""}"#,
            FUNCTION_CALL_ARGUMENTS,
            4,
        ),
        (
            r#"{"type":"response.reasoning_summary_text.delta","sequence_number":1,"item_id":"rs_1","output_index":0,"summary_index":1,"delta":"x","obfuscation":"abc"}"#,
            REASONING_SUMMARY_TEXT,
            1 << 32,
        ),
        (
            r#"{"type":"response.reasoning_text.delta","sequence_number":1,"item_id":"rs_1","output_index":0,"content_index":0,"delta":"y"}"#,
            REASONING_TEXT,
            0,
        ),
    ];
    for (data, class, sub) in cases {
        let e = classify(data);
        let m = e.merge.clone().unwrap_or_else(|| panic!("{data}"));
        assert_eq!(m.class, class, "{data}");
        assert_eq!(m.sub, sub, "{data}");
        assert_eq!(e.merge_key()[0], b'"');
    }
    let ids: Vec<u16> = [
        OUTPUT_TEXT,
        REFUSAL,
        FUNCTION_CALL_ARGUMENTS,
        REASONING_SUMMARY_TEXT,
        REASONING_TEXT,
    ]
    .iter()
    .map(|c| c.id)
    .collect();
    assert!(ids.iter().all(|id| (200..300).contains(id)));
    assert_eq!(ids, [200, 201, 202, 203, 204]);
}

#[test]
fn spans_are_found_in_any_member_order_and_with_whitespace() {
    let data = r#"{ "delta" : "a\"b" , "item_id" : "fc_9", "output_index" : 0 , "type" : "response.function_call_arguments.delta" , "sequence_number" : 12 }"#;
    let e = classify(data);
    assert_eq!(e.delta(), br#"a\"b"#);
    assert_eq!(e.merge_key(), br#""fc_9""#);
    let l = e.merge.clone().unwrap().last.unwrap();
    // Last member: the comma before it goes with it.
    assert_eq!(&e.json[l.member.clone()], br#", "sequence_number" : 12"#);
    assert_eq!(&e.json[l.label.clone()], br#""sequence_number" : "#);
    assert_eq!(&e.json[l.value.clone()], b"12");
    let mut rest = e.json[..l.member.start].to_vec();
    rest.extend_from_slice(&e.json[l.member.end..]);
    serde_json::from_slice::<serde_json::Value>(&rest).unwrap();
}

#[test]
fn adjacent_deltas_merge_into_one_event_with_the_last_sequence_number_and_first_obfuscation() {
    let events = [
        text_delta(3, "msg_1", 0, "Hel"),
        text_delta(4, "msg_1", 0, r#"lo \"é\""#),
        text_delta(5, "msg_1", 0, "!"),
    ];
    let snap = compact(&events);
    assert_eq!(
        snap,
        [serde_json::json!({
            "type": "response.output_text.delta",
            "item_id": "msg_1",
            "output_index": 1,
            "content_index": 0,
            "delta": "Hello \"é\"!",
            "logprobs": [],
            "obfuscation": "ob3",
            "sequence_number": 5
        })]
    );
}

#[test]
fn deltas_of_other_items_indices_or_kinds_do_not_merge() {
    let refusal = r#"{"type":"response.refusal.delta","sequence_number":9,"item_id":"msg_1","output_index":1,"content_index":0,"delta":"x"}"#;
    let other_output =
        text_delta(10, "msg_1", 0, "y").replace(r#""output_index":1"#, r#""output_index":2"#);
    let events = [
        text_delta(5, "msg_1", 0, "a"),
        text_delta(6, "msg_2", 0, "b"),
        text_delta(7, "msg_2", 1, "c"),
        text_delta(8, "msg_2", 1, "d"),
        refusal.to_string(),
        other_output,
    ];
    let snap = compact(&events);
    let deltas: Vec<&str> = snap.iter().map(|e| e["delta"].as_str().unwrap()).collect();
    assert_eq!(deltas, ["a", "b", "cd", "x", "y"]);
    assert_eq!(snap[2]["sequence_number"], 8);
}

#[test]
fn a_delta_with_anything_a_merge_would_lose_does_not_merge() {
    let base = text_delta(1, "m", 0, "x");
    let cases = [
        // Non-empty logprobs would be lost (a merge keeps the first delta's list only).
        base.replace(
            r#""logprobs":[]"#,
            r#""logprobs":[{"token":"x","logprob":-0.1,"bytes":[120],"top_logprobs":[]}]"#,
        ),
        // A member the type does not define.
        base.replace(r#""obfuscation""#, r#""annotations":[],"obfuscation""#),
        // A repeated member.
        base.replace(r#""delta":"x""#, r#""delta":"x","delta":"y""#),
        // An escaped member name.
        base.replace(r#""item_id""#, r#""item\u005fid""#),
        // Ids, deltas and indices of another kind.
        base.replace(r#""item_id":"m""#, r#""item_id":7"#),
        base.replace(r#""delta":"x""#, r#""delta":null"#),
        base.replace(r#""content_index":0"#, r#""content_index":-1"#),
        base.replace(r#""content_index":0"#, r#""content_index":1.5"#),
        base.replace(r#""output_index":1"#, r#""output_index":"1""#),
        base.replace(r#""sequence_number":1"#, r#""sequence_number":1e3"#),
        // A missing key or index, or the other kind's index.
        base.replace(r#""item_id":"m","#, ""),
        base.replace(r#""content_index":0,"#, ""),
        base.replace(r#""output_index":1,"#, ""),
        base.replace(r#""sequence_number":1,"#, ""),
        base.replace(
            r#""content_index":0"#,
            r#""content_index":0,"summary_index":0"#,
        ),
    ];
    for data in &cases {
        let e = classify(data);
        assert_eq!(e.ty(), b"response.output_text.delta", "{data}");
        assert!(e.merge.is_none(), "{data}");
    }
    let args = r#"{"type":"response.function_call_arguments.delta","sequence_number":1,"item_id":"fc","output_index":0,"content_index":0,"delta":"{"}"#;
    assert!(classify(args).merge.is_none());
    let summary = r#"{"type":"response.reasoning_summary_text.delta","sequence_number":1,"item_id":"rs","output_index":0,"delta":"x"}"#;
    assert!(classify(summary).merge.is_none());
    // `[ ]` is an empty list too; absent logprobs are fine.
    assert!(classify(&base.replace("[]", "[ ]")).merge.is_some());
    assert!(classify(&base.replace(r#","logprobs":[]"#, ""))
        .merge
        .is_some());
}

#[test]
fn audio_partial_images_and_every_added_done_and_lifecycle_event_stay_verbatim() {
    for data in [
        r#"{"type":"response.audio.delta","sequence_number":1,"delta":"AAAA"}"#,
        r#"{"type":"response.audio.transcript.delta","sequence_number":1,"delta":"hi"}"#,
        r#"{"type":"response.image_generation_call.partial_image","sequence_number":1,"item_id":"ig","output_index":0,"partial_image_index":0,"partial_image_b64":"AAAA"}"#,
        r#"{"type":"response.output_text.done","sequence_number":1,"item_id":"m","output_index":0,"content_index":0,"text":"hi","logprobs":[]}"#,
        r#"{"type":"response.content_part.added","sequence_number":1,"item_id":"m","output_index":0,"content_index":0,"part":{"type":"output_text","text":"","annotations":[]}}"#,
        r#"{"type":"response.output_item.added","sequence_number":1,"output_index":0,"item":{"id":"m","type":"message","status":"in_progress","content":[],"role":"assistant"}}"#,
        r#"{"type":"response.created","sequence_number":0,"response":{"id":"resp_1","status":"in_progress","output":[]}}"#,
        r#"{"type":"response.in_progress","sequence_number":1,"response":{"id":"resp_1","status":"in_progress","output":[]}}"#,
        r#"{"type":"response.output_text.annotation.added","sequence_number":1,"item_id":"m","output_index":0,"content_index":0,"annotation_index":0,"annotation":{}}"#,
        r#"{"type":"response.custom_tool_call_input.delta","sequence_number":1,"item_id":"ct","output_index":0,"delta":"x"}"#,
    ] {
        let e = classify(data);
        assert!(e.merge.is_none(), "{data}");
        assert_eq!(&e.json[..], data.as_bytes());
        assert!(
            !e.terminal && e.failure.is_none() && !e.transient && !e.finish,
            "{data}"
        );
    }
}

#[test]
fn completed_ends_the_turn_failed_incomplete_and_error_say_it_failed() {
    let cases = [
        (
            r#"{"type":"response.completed","sequence_number":9,"response":{"id":"r","status":"completed"}}"#,
            true,
            None,
        ),
        (
            r#"{"type":"response.failed","sequence_number":9,"response":{"id":"r","status":"failed"}}"#,
            true,
            Some(EndReason::ResponseFailed),
        ),
        (
            r#"{"type":"response.incomplete","sequence_number":9,"response":{"id":"r","status":"incomplete"}}"#,
            true,
            Some(EndReason::ResponseIncomplete),
        ),
        // The upstream closes after it; the turn ends without its terminal event.
        (
            r#"{"type":"error","sequence_number":3,"code":"server_error","message":"boom","param":null}"#,
            false,
            Some(EndReason::ErrorEvent),
        ),
    ];
    for (data, terminal, failure) in cases {
        let e = classify(data);
        assert_eq!(e.terminal, terminal, "{data}");
        assert_eq!(e.failure, failure, "{data}");
        assert!(!e.finish && !e.transient && e.merge.is_none(), "{data}");
    }
    assert!(!OpenaiResponses.needs_finish());
}

#[test]
fn the_sse_name_is_kept_only_when_it_differs_from_the_type() {
    let data = text_delta(1, "m", 0, "x");
    let e = OpenaiResponses.classify(&sse(Some("response.output_text.delta"), &data));
    assert_eq!(e.sse_name, None);
    let e = OpenaiResponses.classify(&sse(Some("message"), &data));
    assert_eq!(e.sse_name.as_deref(), Some(&b"message"[..]));
    assert!(e.merge.is_some());
}

#[test]
fn data_that_is_not_a_json_object_is_wrapped_as_raw() {
    for data in ["[DONE]", "[1,2]", "{broken", "\"s\"", ""] {
        let e = OpenaiResponses.classify(&sse(Some("response.output_text.delta"), data));
        assert_eq!(e.ty(), b"RAW", "{data:?}");
        assert!(e.merge.is_none() && !e.terminal && e.failure.is_none());
        let v: serde_json::Value = serde_json::from_slice(&e.json).unwrap();
        assert_eq!(v["event"]["data"], data);
        assert_eq!(v["event"]["event"], "response.output_text.delta");
    }
    let e = OpenaiResponses.classify(&SseEvent {
        event: None,
        data: Bytes::from_static(b"{\"type\":\"response.output_text.delta\",\"delta\":\"\xff\"}"),
        id: None,
    });
    assert_eq!(e.ty(), b"RAW");
}

#[test]
fn multi_line_json_becomes_one_line_and_still_merges() {
    let data = "{\"type\":\"response.output_text.delta\",\n\"sequence_number\":4,\n\"item_id\":\"m\",\"output_index\":0,\"content_index\":0,\"delta\":\"a\\nb\"}";
    let e = classify(data);
    assert!(!e.json.contains(&b'\n'));
    assert_eq!(e.delta(), br"a\nb");
    assert!(e.merge.is_some());
}

#[test]
fn json_objects_are_kept_byte_for_byte() {
    let data = r#"{ "type" : "response.output_item.done", "sequence_number": 4, "output_index": 0, "item": {"k": [1, 2]} }"#;
    let e = classify(data);
    assert_eq!(&e.json[..], data.as_bytes());
    assert_eq!(e.ty(), b"response.output_item.done");
}

#[test]
fn a_repeated_type_keeps_the_last_like_json_readers_and_never_merges() {
    let e = classify(r#"{"type":"response.created","type":"response.failed","sequence_number":1}"#);
    assert_eq!(e.ty(), b"response.failed");
    assert_eq!(e.failure, Some(EndReason::ResponseFailed));
}

#[test]
fn recognizes_responses_events_and_no_other_format() {
    let yes = [
        r#"{"type":"response.created","sequence_number":0,"response":{"id":"resp_1"}}"#,
        r#"{"type":"response.queued","sequence_number":0,"response":{"id":"resp_1"}}"#,
        r#"{"type":"response.output_text.delta","sequence_number":9,"item_id":"m","output_index":0,"content_index":0,"delta":"x"}"#,
        r#"{"type":"error","sequence_number":0,"code":"server_error","message":"boom"}"#,
    ];
    for data in yes {
        assert!(OpenaiResponses.recognizes(&sse(None, data)), "{data}");
    }
    let no = [
        r#"{"type":"RUN_STARTED","threadId":"t","runId":"r"}"#,
        r#"{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"response."}"#,
        r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[]}"#,
        r#"{"type":"message_start","message":{"id":"msg_1","type":"message"}}"#,
        r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
        r#"{"type":"start","messageId":"m"}"#,
        r#"{"type":"text-delta","id":"t","delta":"response."}"#,
        r#"{"type":"response."}"#,
        r#"{"type":"response.Created"}"#,
        r#"{"type":"response\u002ecreated"}"#,
        "[DONE]",
        "response.created",
        "{broken",
    ];
    for data in no {
        assert!(!OpenaiResponses.recognizes(&sse(None, data)), "{data}");
    }
    // Detection picks this format for a Responses stream, AG-UI for AG-UI.
    let first = sse(Some("response.created"), yes[0]);
    assert_eq!(detect_from_event(&first), FormatKind::OpenaiResponses);
    assert_eq!(detect_from_event(&sse(None, no[0])), FormatKind::Agui);
}

#[test]
fn indices_past_u32_do_not_merge() {
    let data =
        text_delta(1, "m", 0, "x").replace(r#""content_index":0"#, r#""content_index":4294967296"#);
    assert!(classify(&data).merge.is_none());
    let data =
        text_delta(1, "m", 0, "x").replace(r#""content_index":0"#, r#""content_index":4294967295"#);
    assert_eq!(classify(&data).merge.unwrap().sub, (4294967295 << 32) | 1);
}
