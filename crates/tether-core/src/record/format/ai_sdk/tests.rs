//! Tests of the AI SDK UI message stream classifier, on byte slices.

use bytes::Bytes;

use super::*;
use crate::record::format::{detect_from_event, detect_from_headers};

fn sse(event: Option<&str>, data: &str) -> SseEvent {
    SseEvent {
        event: event.map(|e| Bytes::copy_from_slice(e.as_bytes())),
        data: Bytes::copy_from_slice(data.as_bytes()),
        id: None,
    }
}

fn classify(data: &str) -> Event {
    AiSdk.classify(&sse(None, data))
}

fn flags(e: &Event) -> (bool, bool, Option<EndReason>, bool) {
    (e.terminal, e.finish, e.failure, e.transient)
}

const NONE: (bool, bool, Option<EndReason>, bool) = (false, false, None, false);

#[test]
fn a_text_delta_merges_by_id_with_the_delta_span_inside_its_quotes() {
    let e = classify(r#"{"type":"text-delta","id":"0","delta":"he\"llo \u00e9\n"}"#);
    assert_eq!(e.ty(), b"text-delta");
    assert_eq!(e.merge_key(), br#""0""#);
    assert_eq!(e.delta(), br#"he\"llo \u00e9\n"#);
    let m = e.merge.as_ref().unwrap();
    assert_eq!((m.class, m.sub, m.last.clone()), (TEXT_DELTA, 0, None));
    assert_eq!(flags(&e), NONE);
}

#[test]
fn spans_are_found_whatever_the_member_order_and_whitespace() {
    let e =
        classify("{ \"delta\" : \"a\\\\b\" ,\n \"id\":\"msg_1\", \"type\":\"reasoning-delta\" }");
    assert_eq!(e.ty(), b"reasoning-delta");
    assert_eq!(e.merge_key(), br#""msg_1""#);
    assert_eq!(e.delta(), br#"a\\b"#);
    assert_eq!(e.merge.unwrap().class, REASONING_DELTA);
}

#[test]
fn multi_byte_text_spans_whole_characters() {
    let e = classify(r#"{"type":"text-delta","id":"t","delta":"é😀漢字"}"#);
    assert_eq!(e.delta(), "é😀漢字".as_bytes());
}

#[test]
fn a_tool_input_delta_merges_by_tool_call_id() {
    let e = classify(
        r#"{"type":"tool-input-delta","toolCallId":"call_1","inputTextDelta":"{\"city\":"}"#,
    );
    assert_eq!(e.merge_key(), br#""call_1""#);
    assert_eq!(e.delta(), br#"{\"city\":"#);
    assert_eq!(e.merge.unwrap().class, TOOL_INPUT_DELTA);
}

#[test]
fn the_three_delta_kinds_have_distinct_classes_in_the_ai_sdk_range() {
    let classes = [TEXT_DELTA, REASONING_DELTA, TOOL_INPUT_DELTA];
    for (i, c) in classes.iter().enumerate() {
        assert!((400..500).contains(&c.id), "{c:?}");
        assert!(!c.key_optional, "{c:?}");
        assert!(classes[i + 1..].iter().all(|o| o.id != c.id), "{c:?}");
    }
}

#[test]
fn a_delta_with_provider_metadata_or_any_other_member_does_not_merge() {
    for data in [
        r#"{"type":"text-delta","id":"0","delta":"x","providerMetadata":{"a":{"b":1}}}"#,
        r#"{"type":"reasoning-delta","id":"0","delta":"","providerMetadata":{"anthropic":{"signature":"s"}}}"#,
        r#"{"type":"text-delta","id":"0","delta":"x","extra":null}"#,
        r#"{"type":"tool-input-delta","toolCallId":"c","inputTextDelta":"x","id":"c"}"#,
    ] {
        let e = classify(data);
        assert!(e.merge.is_none(), "{data}");
        assert!(!e.ty().is_empty(), "{data}");
    }
}

#[test]
fn a_delta_missing_its_key_or_with_non_string_parts_does_not_merge() {
    for data in [
        r#"{"type":"text-delta","delta":"x"}"#,
        r#"{"type":"text-delta","id":"0"}"#,
        r#"{"type":"text-delta","id":0,"delta":"x"}"#,
        r#"{"type":"text-delta","id":"0","delta":5}"#,
        r#"{"type":"text-delta","id":"0","delta":null}"#,
        r#"{"type":"tool-input-delta","id":"c","inputTextDelta":"x"}"#,
        r#"{"type":"tool-input-delta","toolCallId":"c","delta":"x"}"#,
        r#"{"type":"reasoning-delta","id":"0","inputTextDelta":"x"}"#,
    ] {
        assert!(classify(data).merge.is_none(), "{data}");
    }
}

#[test]
fn a_repeated_member_does_not_merge_and_the_last_value_counts_as_in_json_parse() {
    let e = classify(r#"{"type":"text-delta","id":"0","delta":"a","delta":"b"}"#);
    assert!(e.merge.is_none());
    let e = classify(r#"{"type":"text-delta","id":"0","type":"finish"}"#);
    assert_eq!(e.ty(), b"finish");
    assert!(e.finish);
}

#[test]
fn an_escaped_member_name_is_read_as_its_name() {
    // `JSON.parse` reads `\u0064elta` as `delta`: the member is the delta, not an unknown one.
    let e = classify(r#"{"type":"text-delta","id":"0","\u0064elta":"x"}"#);
    assert_eq!(e.delta(), b"x");
}

#[test]
fn a_delta_whose_sse_name_differs_keeps_its_name_and_does_not_merge() {
    let e = AiSdk.classify(&sse(
        Some("chunk"),
        r#"{"type":"text-delta","id":"0","delta":"x"}"#,
    ));
    assert_eq!(e.sse_name.as_deref(), Some(&b"chunk"[..]));
    assert!(e.merge.is_none());
    let e = AiSdk.classify(&sse(
        Some("text-delta"),
        r#"{"type":"text-delta","id":"0","delta":"x"}"#,
    ));
    assert_eq!(e.sse_name, None);
    assert!(e.merge.is_some());
}

#[test]
fn boundaries_and_state_changing_chunks_are_verbatim() {
    for data in [
        r#"{"type":"start","messageId":"m"}"#,
        r#"{"type":"start-step"}"#,
        r#"{"type":"finish-step"}"#,
        r#"{"type":"reset-step"}"#,
        r#"{"type":"text-start","id":"0"}"#,
        r#"{"type":"text-end","id":"0"}"#,
        r#"{"type":"reasoning-start","id":"r"}"#,
        r#"{"type":"reasoning-end","id":"r"}"#,
        r#"{"type":"tool-input-start","toolCallId":"c","toolName":"w"}"#,
        r#"{"type":"tool-input-available","toolCallId":"c","toolName":"w","input":{}}"#,
        r#"{"type":"tool-output-available","toolCallId":"c","output":"x"}"#,
        r#"{"type":"data-weather","id":"d","data":{"delta":"x"}}"#,
        r#"{"type":"data-note","data":"x","transient":true}"#,
        r#"{"type":"message-metadata","messageMetadata":{"a":1}}"#,
        r#"{"type":"source-url","sourceId":"s","url":"https://e"}"#,
        r#"{"type":"abort"}"#,
    ] {
        let e = classify(data);
        assert!(e.merge.is_none(), "{data}");
        assert_eq!(flags(&e), NONE, "{data}");
        assert_eq!(&e.json[..], data.as_bytes(), "kept byte for byte");
    }
}

#[test]
fn finish_is_the_finish_marker_and_done_the_terminal_event() {
    let e = classify(r#"{"type":"finish","finishReason":"stop"}"#);
    assert_eq!(flags(&e), (false, true, None, false));
    let e = classify("[DONE]");
    assert_eq!(e.ty(), b"RAW");
    assert_eq!(flags(&e), (true, false, None, false));
    assert_eq!(
        &e.json[..],
        br#"{"type":"RAW","source":"sse","event":{"event":"message","data":"[DONE]"}}"#
    );
    assert!(AiSdk.needs_finish());
}

#[test]
fn an_error_chunk_marks_the_turn_failed() {
    let e = classify(r#"{"type":"error","errorText":"An error occurred."}"#);
    assert_eq!(
        flags(&e),
        (false, false, Some(EndReason::ErrorEvent), false)
    );
}

#[test]
fn data_that_is_not_a_json_object_is_wrapped_as_raw() {
    for data in [
        "hello",
        "[1,2]",
        "{\"type\":\"text-delta\"",
        "\"x\"",
        "{} x",
    ] {
        let e = classify(data);
        assert_eq!(e.ty(), b"RAW", "{data}");
        assert_eq!(flags(&e), NONE, "{data}");
    }
}

#[test]
fn multi_line_data_is_made_one_line_and_still_merges() {
    let e = classify("{\"type\":\"text-delta\",\n\"id\":\"0\",\r\n\"delta\":\"x\"}");
    assert!(!e.json.contains(&b'\n'));
    assert_eq!(e.delta(), b"x");
}

#[test]
fn recognizes_its_chunk_types_as_a_first_event() {
    for data in [
        r#"{"type":"start"}"#,
        r#"{"type":"start","messageId":"m","messageMetadata":{}}"#,
        r#"{"type":"start-step"}"#,
        r#"{"type":"text-start","id":"0"}"#,
        r#"{"type":"data-weather","data":{}}"#,
        r#"{"type":"error","errorText":"boom"}"#,
    ] {
        assert!(AiSdk.recognizes(&sse(None, data)), "{data}");
        assert_eq!(
            detect_from_event(&sse(None, data)),
            FormatKind::AiSdk,
            "{data}"
        );
    }
}

#[test]
fn does_not_recognize_other_formats_first_events() {
    for data in [
        r#"{"type":"RUN_STARTED","threadId":"t","runId":"r"}"#,
        r#"{"type":"TEXT_MESSAGE_START","messageId":"m","role":"assistant"}"#,
        r#"{"id":"c","object":"chat.completion.chunk","choices":[]}"#,
        r#"{"type":"response.created","sequence_number":0,"response":{}}"#,
        r#"{"type":"message_start","message":{}}"#,
        r#"{"type":"ping"}"#,
        r#"{"type":"error","error":{"type":"overloaded_error","message":"x"}}"#,
        r#"{"type":"error","code":"x","message":"y","sequence_number":1}"#,
        r#"{"type":"error","errorText":5}"#,
        r#"{"type":"Start"}"#,
        r#"{"kind":"start"}"#,
        "[DONE]",
        "start",
    ] {
        assert!(!AiSdk.recognizes(&sse(None, data)), "{data}");
    }
}

#[test]
fn the_header_names_the_format() {
    let h = |v: &'static str| {
        move |name: &str| (name == "x-vercel-ai-ui-message-stream").then(|| v.to_string())
    };
    assert_eq!(detect_from_headers(h("v1")), Some(FormatKind::AiSdk));
    assert_eq!(detect_from_headers(h("v2")), None);
}
