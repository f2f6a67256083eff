//! Tests of the format seam and the AG-UI classifier, on byte slices.

use super::agui::{self, Agui};
use super::*;

fn classify(sse: &SseEvent) -> Event {
    Agui.classify(sse)
}

fn sse(event: Option<&str>, data: &str) -> SseEvent {
    SseEvent {
        event: event.map(|e| Bytes::copy_from_slice(e.as_bytes())),
        data: Bytes::copy_from_slice(data.as_bytes()),
        id: None,
    }
}

#[test]
fn finds_type_key_and_delta_span_of_a_text_delta() {
    let e = classify(&sse(
        None,
        r#"{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"he\"llo"}"#,
    ));
    assert_eq!(e.ty(), b"TEXT_MESSAGE_CONTENT");
    assert_eq!(e.merge_key(), br#""m1""#);
    assert_eq!(e.delta(), br#"he\"llo"#);
    assert_eq!(e.merge.unwrap().class, agui::TEXT_CONTENT);
    assert!(!e.terminal);
}

#[test]
fn tool_call_args_key_on_tool_call_id() {
    let e = classify(&sse(
        None,
        r#"{"delta":"{\"a\"","toolCallId":"t1","type":"TOOL_CALL_ARGS","messageId":"x"}"#,
    ));
    assert_eq!(e.merge_key(), br#""t1""#);
    assert_eq!(e.delta(), br#"{\"a\""#);
}

#[test]
fn a_content_delta_without_its_key_or_with_a_non_string_delta_does_not_merge() {
    let e = classify(&sse(None, r#"{"type":"TEXT_MESSAGE_CONTENT","delta":"x"}"#));
    assert!(e.merge.is_none());
    let e = classify(&sse(
        None,
        r#"{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":5}"#,
    ));
    assert!(e.merge.is_none());
}

#[test]
fn chunks_and_thinking_may_lack_a_key() {
    let e = classify(&sse(None, r#"{"type":"TEXT_MESSAGE_CHUNK","delta":"x"}"#));
    assert_eq!(e.merge.unwrap().class, agui::TEXT_CHUNK);
    let e = classify(&sse(
        None,
        r#"{"type":"THINKING_TEXT_MESSAGE_CONTENT","delta":"x"}"#,
    ));
    assert_eq!(e.merge.unwrap().class, agui::THINKING_CONTENT);
}

#[test]
fn each_format_ends_on_its_own_terminal_event_only() {
    let ends = |kind: FormatKind, data: &str, name: Option<&str>| {
        kind.format().classify(&sse(name, data)).terminal
    };
    assert!(ends(FormatKind::Agui, r#"{"type":"RUN_FINISHED"}"#, None));
    assert!(ends(
        FormatKind::Agui,
        r#"{"type":"RUN_ERROR","message":"x"}"#,
        None
    ));
    assert!(!ends(FormatKind::Agui, r#"{"type":"RUN_STARTED"}"#, None));
    // Other formats' terminal events are theirs: AG-UI no longer ends on them.
    assert!(!ends(FormatKind::Agui, "[DONE]", None));
    assert!(!ends(FormatKind::Agui, r#"{"type":"message_stop"}"#, None));
    assert!(ends(FormatKind::OpenaiChat, "[DONE]", None));
    assert!(ends(FormatKind::AiSdk, "[DONE]", None));
    assert!(ends(
        FormatKind::Anthropic,
        r#"{"type":"message_stop"}"#,
        Some("message_stop")
    ));
    assert!(ends(
        FormatKind::OpenaiResponses,
        r#"{"type":"response.completed","sequence_number":9,"response":{}}"#,
        Some("response.completed")
    ));
}

#[test]
fn auto_detection_tells_the_formats_apart_by_their_first_event() {
    let first = |name: Option<&str>, data: &str| detect_from_event(&sse(name, data));
    assert_eq!(
        first(None, r#"{"type":"RUN_STARTED","threadId":"t","runId":"r"}"#),
        FormatKind::Agui
    );
    assert_eq!(
        first(
            None,
            r#"{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[]}"#
        ),
        FormatKind::OpenaiChat
    );
    assert_eq!(
        first(
            Some("response.created"),
            r#"{"type":"response.created","sequence_number":0,"response":{"id":"resp_1"}}"#
        ),
        FormatKind::OpenaiResponses
    );
    assert_eq!(
        first(
            Some("message_start"),
            r#"{"type":"message_start","message":{"id":"msg_1","role":"assistant","content":[]}}"#
        ),
        FormatKind::Anthropic
    );
    assert_eq!(
        first(None, r#"{"type":"start","messageId":"m"}"#),
        FormatKind::AiSdk
    );
    // Anything else falls back to AG-UI, which keeps it verbatim.
    assert_eq!(first(None, "hello"), FormatKind::Agui);
    assert_eq!(
        detect_from_headers(|h| (h == "x-vercel-ai-ui-message-stream").then(|| "v1".into())),
        Some(FormatKind::AiSdk)
    );
    assert_eq!(detect_from_headers(|_| None), None);
}

#[test]
fn route_format_settings_parse() {
    assert_eq!("auto".parse(), Ok(FormatChoice::Auto));
    assert_eq!(
        "anthropic".parse(),
        Ok(FormatChoice::Fixed(FormatKind::Anthropic))
    );
    assert!("openai"
        .parse::<FormatChoice>()
        .unwrap_err()
        .contains("openai_chat"));
}

#[test]
fn non_object_data_is_wrapped_as_raw() {
    let e = classify(&sse(Some("ping"), "not \"json\"\nline2"));
    assert_eq!(e.ty(), b"RAW");
    let v: serde_json::Value = serde_json::from_slice(&e.json).unwrap();
    assert_eq!(
        v,
        serde_json::json!({"type":"RAW","source":"sse","event":{"event":"ping","data":"not \"json\"\nline2"}})
    );
    let e = classify(&sse(None, "[1,2]"));
    assert_eq!(e.ty(), b"RAW");
    let e = classify(&sse(None, "{broken"));
    assert_eq!(e.ty(), b"RAW");
}

#[test]
fn multi_line_json_becomes_one_line_and_keeps_its_value() {
    let e = classify(&sse(None, "{\"type\":\"CUSTOM\",\n\"name\":\"a\\nb\"}"));
    assert_eq!(e.ty(), b"CUSTOM");
    assert!(!e.json.contains(&b'\n'));
    assert_eq!(e.name(), br"a\nb");
}

#[test]
fn invalid_utf8_in_json_is_wrapped_lossily() {
    let e = classify(&SseEvent {
        event: None,
        data: Bytes::from_static(b"{\"type\":\"X\",\"delta\":\"\xff\"}"),
        id: None,
    });
    assert_eq!(e.ty(), b"RAW");
    assert!(serde_json::from_slice::<serde_json::Value>(&e.json).is_ok());
}

#[test]
fn duplicate_keys_stay_verbatim_unclassified() {
    let e = classify(&sse(None, r#"{"type":"A","type":"B"}"#));
    assert_eq!(e.ty(), b"");
    assert_eq!(&e.json[..], br#"{"type":"A","type":"B"}"#);
}

#[test]
fn json_object_data_is_kept_byte_for_byte() {
    let data = r#"{ "type" : "CUSTOM", "value": {"k": [1, 2]} }"#;
    let e = classify(&sse(None, data));
    assert_eq!(&e.json[..], data.as_bytes());
    assert_eq!(e.ty(), b"CUSTOM");
}
