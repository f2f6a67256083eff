//! Tests of the OpenAI Chat Completions classifier, on byte slices.

use bytes::Bytes;
use serde_json::{json, Value};

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
    OpenaiChat.classify(&sse(None, data))
}

/// A chunk as OpenAI sends it, around one choice.
fn chunk(choice: &str) -> String {
    format!(
        r#"{{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-4o","service_tier":"default","system_fingerprint":"fp_1","choices":[{choice}],"usage":null,"obfuscation":"xY"}}"#
    )
}

fn merge(e: &Event) -> &Merge {
    e.merge.as_ref().expect("a delta")
}

#[test]
fn a_content_delta_is_keyed_by_its_choice_index_with_its_escaped_text_as_delta() {
    let e = classify(&chunk(
        r#"{"index":0,"delta":{"content":"caf\u00e9 \"q\" \\ é😀日本\n\t"},"logprobs":null,"finish_reason":null}"#,
    ));
    let m = merge(&e);
    assert_eq!(m.class, CONTENT);
    assert_eq!(e.merge_key(), b"0");
    assert_eq!(e.delta(), r#"caf\u00e9 \"q\" \\ é😀日本\n\t"#.as_bytes());
    assert_eq!(m.sub, SUB_FINGERPRINT);
    assert!(!e.terminal && !e.finish && e.failure.is_none() && !e.transient);
    assert_eq!(e.ty(), b"");
}

#[test]
fn the_fingerprint_is_a_last_wins_member_with_one_comma() {
    let e = classify(&chunk(r#"{"index":0,"delta":{"content":"x"}}"#));
    let l = merge(&e).last.clone().expect("system_fingerprint");
    assert_eq!(&e.json[l.label.clone()], br#""system_fingerprint":"#);
    assert_eq!(&e.json[l.value.clone()], br#""fp_1""#);
    assert_eq!(
        &e.json[l.member.clone()],
        br#""system_fingerprint":"fp_1","#
    );
    let mut rest = e.json[..l.member.start].to_vec();
    rest.extend_from_slice(&e.json[l.member.end..]);
    assert!(serde_json::from_slice::<Value>(&rest).is_ok());
    // As the last member, with spaces: the comma before it.
    let e = classify(
        r#"{"choices":[{"index":0,"delta":{"content":"x"}}] , "system_fingerprint" : null }"#,
    );
    let l = merge(&e).last.clone().expect("system_fingerprint");
    assert_eq!(
        &e.json[l.member.clone()],
        br#", "system_fingerprint" : null"#
    );
    assert_eq!(&e.json[l.label.clone()], br#""system_fingerprint" :"#);
    // Without one, the delta carries none and says so in its sub.
    let e = classify(r#"{"id":"c","choices":[{"index":0,"delta":{"content":"x"}}]}"#);
    assert_eq!(merge(&e).last, None);
    assert_eq!(merge(&e).sub, 0);
}

#[test]
fn refusal_and_tool_arguments_have_their_own_classes_and_sub_keys() {
    let e = classify(&chunk(r#"{"index":1,"delta":{"refusal":"I can't"}}"#));
    assert_eq!(merge(&e).class, REFUSAL);
    assert_eq!(e.merge_key(), b"1");
    assert_eq!(merge(&e).sub, SUB_FINGERPRINT | 1);
    assert_eq!(e.delta(), b"I can't");

    let e = classify(&chunk(
        r#"{"index":0,"delta":{"tool_calls":[{"index":3,"function":{"arguments":"{\"city\":"}}]}}"#,
    ));
    let m = merge(&e);
    assert_eq!(m.class, TOOL_ARGUMENTS);
    assert_eq!(e.merge_key(), b"0");
    assert_eq!(m.sub, 3 << SUB_TOOL_SHIFT | SUB_FINGERPRINT | 2);
    assert_eq!(e.delta(), br#"{\"city\":"#);
    // Null members are no-ops to the SDK's accumulator.
    let e = classify(&chunk(
        r#"{"index":0,"delta":{"role":null,"content":null,"tool_calls":[{"index":0,"id":null,"function":{"name":null,"arguments":"1"}}]}}"#,
    ));
    assert_eq!(merge(&e).class, TOOL_ARGUMENTS);
    assert_eq!(e.delta(), b"1");
}

#[test]
fn a_chunk_that_repeats_a_first_wins_field_never_merges() {
    for choice in [
        r#"{"index":0,"delta":{"role":"assistant","content":""}}"#,
        r#"{"index":0,"delta":{"role":"assistant","content":"","refusal":null}}"#,
        r#"{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"f","arguments":""}}]}}"#,
        r#"{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","function":{"arguments":"x"}}]}}"#,
        r#"{"index":0,"delta":{"tool_calls":[{"index":0,"type":"function","function":{"arguments":"x"}}]}}"#,
        r#"{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"name":"f","arguments":"x"}}]}}"#,
        // `accumulate_delta` replaces `type` even with null.
        r#"{"index":0,"delta":{"tool_calls":[{"index":0,"type":null,"function":{"arguments":"x"}}]}}"#,
    ] {
        let e = classify(&chunk(choice));
        assert!(e.merge.is_none(), "{choice}");
        assert!(!e.finish, "{choice}");
    }
}

#[test]
fn only_a_delta_with_exactly_one_concatenating_field_and_nothing_else_merges() {
    for choice in [
        r#"{"index":0,"delta":{"content":"a","refusal":"b"}}"#,
        r#"{"index":0,"delta":{"content":"a","tool_calls":[{"index":0,"function":{"arguments":"x"}}]}}"#,
        r#"{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"x"}},{"index":1,"function":{"arguments":"y"}}]}}"#,
        r#"{"index":0,"delta":{"tool_calls":[]}}"#,
        r#"{"index":0,"delta":{}}"#,
        r#"{"index":0,"delta":{"content":5}}"#,
        r#"{"index":0,"delta":{"content":"a","reasoning_content":"b"}}"#,
        r#"{"index":0,"delta":{"reasoning_content":"thinking"}}"#,
        r#"{"index":0,"delta":{"function_call":{"arguments":"x"}}}"#,
        r#"{"index":0,"delta":{"audio":{"transcript":"x"}}}"#,
        r#"{"index":0,"delta":{"content":"a","type":null}}"#,
        r#"{"index":0,"delta":{"content":"a"},"logprobs":{"content":[]}}"#,
        r#"{"index":0,"delta":{"content":"a"},"native_finish_reason":"x"}"#,
        r#"{"index":"0","delta":{"content":"a"}}"#,
        r#"{"index":0.0,"delta":{"content":"a"}}"#,
        r#"{"delta":{"content":"a"}}"#,
    ] {
        assert!(classify(&chunk(choice)).merge.is_none(), "{choice}");
    }
    // Unknown nulls are dropped safely.
    let e = classify(&chunk(
        r#"{"index":0,"delta":{"content":"a","reasoning_content":null},"native_finish_reason":null}"#,
    ));
    assert_eq!(merge(&e).class, CONTENT);
}

#[test]
fn state_changing_top_level_members_and_several_choices_never_merge() {
    let c = r#"{"index":0,"delta":{"content":"a"}}"#;
    for data in [
        format!(r#"{{"choices":[{c}],"usage":{{"total_tokens":3}}}}"#),
        format!(r#"{{"choices":[{c}],"moderation":{{"input":{{}}}}}}"#),
        format!(r#"{{"choices":[{c}],"provider":"x"}}"#),
        format!(r#"{{"choices":[{c}],"type":"x"}}"#),
        format!(r#"{{"choices":[{c},{c}]}}"#),
        format!(r#"{{"choices":[{c}],"choices":[{c}]}}"#),
        format!(r#"{{"choices":[{c}],"system_fingerprint":"a","system_fingerprint":"b"}}"#),
        format!(r#"{{"choic\u0065s":[{c}]}}"#),
    ] {
        assert!(classify(&data).merge.is_none(), "{data}");
    }
    let e = classify(&format!(
        r#"{{"choices":[{c}],"usage":null,"moderation":null}}"#
    ));
    assert_eq!(merge(&e).class, CONTENT);
}

#[test]
fn a_finish_reason_marks_the_finish_and_is_never_merged_into() {
    let e = classify(&chunk(
        r#"{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}"#,
    ));
    assert!(e.finish && e.merge.is_none() && !e.terminal);
    let e = classify(&chunk(
        r#"{"index":0,"delta":{"content":"last"},"finish_reason":"length"}"#,
    ));
    assert!(e.finish && e.merge.is_none());
    // Any choice of several.
    let e = classify(
        r#"{"choices":[{"index":0,"delta":{"content":"a"}},{"index":1,"delta":{},"finish_reason":"tool_calls"}]}"#,
    );
    assert!(e.finish && e.merge.is_none());
    // A null or empty reason is no finish.
    for f in ["null", r#""""#] {
        let e = classify(&chunk(&format!(
            r#"{{"index":0,"delta":{{"content":"a"}},"finish_reason":{f}}}"#
        )));
        assert!(!e.finish, "{f}");
    }
}

#[test]
fn the_usage_chunk_is_kept_as_it_is() {
    let data = r#"{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}}"#;
    let e = classify(data);
    assert!(e.merge.is_none() && !e.finish && !e.terminal && e.failure.is_none());
    assert_eq!(&e.json[..], data.as_bytes());
}

#[test]
fn done_is_the_terminal_event_and_a_raw_event() {
    let e = classify("[DONE]");
    assert!(e.terminal && !e.finish && e.merge.is_none());
    assert_eq!(e.ty(), b"RAW");
    let v: Value = serde_json::from_slice(&e.json).unwrap();
    assert_eq!(
        v,
        json!({"type":"RAW","source":"sse","event":{"event":"message","data":"[DONE]"}})
    );
    // openai-python stops at any data starting with it.
    assert!(classify("[DONE] ").terminal);
    assert!(!classify(" [DONE]").terminal);
    assert!(!classify(&chunk(r#"{"index":0,"delta":{},"finish_reason":"stop"}"#)).terminal);
    assert!(OpenaiChat.needs_finish());
}

#[test]
fn an_error_object_fails_the_turn() {
    let e = classify(
        r#"{"error":{"message":"The server had an error","type":"server_error","param":null,"code":null}}"#,
    );
    assert_eq!(e.failure, Some(EndReason::ErrorEvent));
    assert!(e.merge.is_none() && !e.terminal && !e.finish);
    // openai-python raises only on a truthy `error`.
    for data in [
        r#"{"error":null,"choices":[]}"#,
        r#"{"error":{},"choices":[]}"#,
        r#"{"error":"","choices":[]}"#,
        r#"{"error":false,"choices":[]}"#,
        r#"{"error":0,"choices":[]}"#,
    ] {
        assert_eq!(classify(data).failure, None, "{data}");
    }
    assert_eq!(
        classify(r#"{"error":"overloaded"}"#).failure,
        Some(EndReason::ErrorEvent)
    );
}

#[test]
fn data_that_is_not_a_json_object_stays_raw() {
    for data in ["not json", "[1,2]", "{broken", "\"s\""] {
        let e = classify(data);
        assert_eq!(e.ty(), b"RAW", "{data}");
        assert!(!e.terminal && e.merge.is_none(), "{data}");
    }
    let e = OpenaiChat.classify(&SseEvent {
        event: None,
        data: Bytes::from_static(b"{\"choices\":[],\"x\":\"\xff\"}"),
        id: None,
    });
    assert_eq!(e.ty(), b"RAW");
    // Multi-line JSON becomes one line and still merges.
    let e = classify("{\"choices\":[{\"index\":0,\n\"delta\":{\"content\":\"a\\nb\"}}]}");
    assert!(!e.json.contains(&b'\n'));
    assert_eq!(e.delta(), br"a\nb");
}

#[test]
fn an_sse_event_name_is_kept_on_the_event() {
    let e = OpenaiChat.classify(&sse(
        Some("chunk"),
        r#"{"choices":[{"index":0,"delta":{"content":"a"}}]}"#,
    ));
    assert_eq!(e.sse_name.as_deref(), Some(&b"chunk"[..]));
    assert!(classify(r#"{"choices":[]}"#).sse_name.is_none());
}

#[test]
fn recognizes_chunks_and_error_objects_but_no_other_format() {
    let yes = [
        chunk(r#"{"index":0,"delta":{"role":"assistant","content":""}}"#),
        r#"{"choices":[],"created":0,"id":"","model":"","object":"","prompt_filter_results":[]}"#
            .to_string(),
        r#"{"id":"x","choices":[{"index":0,"delta":{"content":"hi"}}]}"#.to_string(),
        r#"{"error":{"message":"bad","type":"invalid_request_error"}}"#.to_string(),
    ];
    for data in &yes {
        assert!(OpenaiChat.recognizes(&sse(None, data)), "{data}");
        assert_eq!(
            detect_from_event(&sse(None, data)),
            FormatKind::OpenaiChat,
            "{data}"
        );
    }
    let no = [
        r#"{"type":"RUN_STARTED","threadId":"t","runId":"r"}"#,
        r#"{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"x"}"#,
        r#"{"type":"response.created","sequence_number":0,"response":{"object":"response"}}"#,
        r#"{"type":"message_start","message":{"id":"msg","content":[]}}"#,
        r#"{"type":"error","error":{"type":"overloaded_error","message":"x"}}"#,
        r#"{"type":"start","messageId":"m"}"#,
        r#"{"type":"text-delta","id":"t","delta":"x"}"#,
        r#"{"type":"x","object":"chat.completion.chunk","choices":[]}"#,
        r#"{"object":"list","data":[]}"#,
        r#"{"error":"not an object"}"#,
        "[DONE]",
        "hello",
    ];
    for data in no {
        assert!(!OpenaiChat.recognizes(&sse(None, data)), "{data}");
    }
}

/// The classified deltas through the compactor: what a snapshot holds.
fn compact(events: &[String]) -> Vec<Value> {
    let mut c = Compactor::new();
    for e in events {
        c.push(&classify(e));
    }
    let cap = c.capture();
    let mut out = bytes::BytesMut::new();
    out.extend_from_slice(b"[");
    cap.write_to(&mut out);
    out.extend_from_slice(b"]");
    serde_json::from_slice(&out).expect("valid JSON")
}

#[test]
fn adjacent_deltas_of_one_field_merge_and_carry_the_last_fingerprint() {
    let with_fp = |fp: &str, choice: &str| {
        format!(r#"{{"id":"c","system_fingerprint":"{fp}","choices":[{choice}],"usage":null}}"#)
    };
    let text = |t: &str| format!(r#"{{"index":0,"delta":{{"content":"{t}"}}}}"#);
    let args = |i: u32, a: &str| {
        format!(
            r#"{{"index":0,"delta":{{"tool_calls":[{{"index":{i},"function":{{"arguments":"{a}"}}}}]}}}}"#
        )
    };
    let events = [
        with_fp(
            "a",
            r#"{"index":0,"delta":{"role":"assistant","content":""}}"#,
        ),
        with_fp("a", &text("caf")),
        with_fp("b", &text("\\u00e9 ")),
        with_fp("c", &text("\\\"q\\\"")),
        with_fp("c", r#"{"index":0,"delta":{"refusal":"no"}}"#),
        with_fp("c", &args(0, "{\\\"a\\\"")),
        with_fp("d", &args(0, ":1}")),
        with_fp("d", &args(1, "{}")),
        with_fp("d", r#"{"index":0,"delta":{},"finish_reason":"stop"}"#),
    ];
    let got = compact(&events);
    assert_eq!(got.len(), 6, "{got:#?}");
    assert_eq!(got[1]["choices"][0]["delta"]["content"], "café \"q\"");
    assert_eq!(got[1]["system_fingerprint"], "c");
    assert_eq!(
        got[3]["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"],
        "{\"a\":1}"
    );
    assert_eq!(got[3]["system_fingerprint"], "d");
    assert_eq!(got[4]["choices"][0]["delta"]["tool_calls"][0]["index"], 1);
    // A delta without a fingerprint does not join one with it (the SDK would reset it).
    let events = [
        with_fp("a", &text("x")),
        format!(r#"{{"id":"c","choices":[{}]}}"#, text("y")),
    ];
    assert_eq!(compact(&events).len(), 2);
    // Different choices never merge.
    let events = [
        format!(r#"{{"choices":[{}]}}"#, text("x")),
        r#"{"choices":[{"index":1,"delta":{"content":"y"}}]}"#.to_string(),
        format!(r#"{{"choices":[{}]}}"#, text("z")),
    ];
    assert_eq!(compact(&events).len(), 3);
}

#[test]
fn duplicates_are_found_in_large_objects_too() {
    let mut members: Vec<String> = (0..40).map(|i| format!(r#""k{i}":null"#)).collect();
    members.push(r#""choices":[{"index":0,"delta":{"content":"a"}}]"#.to_string());
    let data = format!("{{{}}}", members.join(","));
    assert_eq!(merge(&classify(&data)).class, CONTENT);
    members.push(r#""k7":1"#.to_string());
    let data = format!("{{{}}}", members.join(","));
    let e = classify(&data);
    assert!(e.merge.is_none());
    assert_eq!(&e.json[..], data.as_bytes());
}

#[test]
fn a_nested_value_serde_cannot_visit_spoils_only_its_own_level() {
    // `1e400` (beyond `f64`) and a lone surrogate are valid JSON that `&RawValue` accepts but
    // `deserialize_any` rejects: where the one pass meets them in a nested object's place, the
    // event is read level by level, as if each level were parsed on its own.
    for bad in ["1e400", r#""\ud800""#] {
        let e = classify(&format!(r#"{{"choices":{bad},"error":{{"message":"x"}}}}"#));
        assert_eq!(e.failure, Some(EndReason::ErrorEvent), "{bad}");
        let e = classify(&format!(
            r#"{{"choices":[{{"index":0,"delta":{bad},"finish_reason":"stop"}}]}}"#
        ));
        assert!(e.finish && e.merge.is_none(), "{bad}");
        let e = classify(&format!(
            r#"{{"choices":[{{"index":0,"delta":{{"content":"a"}}}},{bad}]}}"#
        ));
        assert!(!e.finish && e.merge.is_none(), "{bad}");
        let e = classify(&format!(
            r#"{{"choices":[{{"index":0,"delta":{{"content":"a"}}}},{{"index":1,"delta":{{"tool_calls":[{bad}]}},"finish_reason":"stop"}}]}}"#
        ));
        assert!(e.finish && e.merge.is_none(), "{bad}");
        // As a leaf or an unknown member, it is only borrowed: the chunk still merges.
        let e = classify(&format!(
            r#"{{"choices":[{{"index":0,"delta":{{"content":"a","x":null}},"y":null}}],"z":null,"id":{bad}}}"#
        ));
        assert_eq!(merge(&e).class, CONTENT, "{bad}");
        let e = classify(&format!(
            r#"{{"choices":[{{"index":0,"delta":{{"content":"a","x":{bad}}}}}]}}"#
        ));
        assert!(e.merge.is_none(), "{bad}");
        assert!(OpenaiChat.recognizes(&sse(
            None,
            &format!(r#"{{"choices":[{{"index":0,"delta":{bad}}}]}}"#)
        )));
    }
    // A lone surrogate in a nested key spoils that level only; at the top, the whole event.
    let e = classify(r#"{"choices":[{"index":0,"delta":{"\ud800":1},"finish_reason":"stop"}]}"#);
    assert!(e.finish);
    let e = classify(r#"{"\ud800":1,"error":{"message":"x"}}"#);
    assert!(e.failure.is_none() && e.ty().is_empty());
    assert_eq!(classify(r#"{"\ud800":1,"#).ty(), b"RAW");
}

#[test]
fn escaped_or_repeated_keys_spoil_only_their_own_level() {
    for choice in [
        r#"{"index":0,"delta":{"cont\u0065nt":"a"}}"#,
        r#"{"index":0,"delta":{"content":"a","content":"b"}}"#,
        r#"{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"a","arguments":"b"}}]}}"#,
        r#"{"index":0,"delta":{"tool_calls":[{"ind\u0065x":0,"function":{"arguments":"a"}}]}}"#,
        r#"{"index":0,"index":0,"delta":{"content":"a"}}"#,
    ] {
        let e = classify(&chunk(choice));
        assert!(
            e.merge.is_none() && !e.finish && e.ty().is_empty(),
            "{choice}"
        );
    }
    // A repeated key in a choice's delta leaves its finish_reason read; in the choice, not.
    let e = classify(&chunk(
        r#"{"index":0,"delta":{"content":"a","content":"b"},"finish_reason":"stop"}"#,
    ));
    assert!(e.finish);
    let e = classify(&chunk(
        r#"{"index":0,"delta":{},"finish_reason":"stop","finish_reason":"stop"}"#,
    ));
    assert!(!e.finish);
}
