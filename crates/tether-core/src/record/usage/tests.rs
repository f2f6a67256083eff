//! Tests of the usage meter: each format's usage frames on byte slices and on the golden
//! fixtures (the workspace's `tests/fixtures/<format>/`), runs cut before their usage frame,
//! and the route's pointers for AG-UI and the AI SDK.

use std::sync::Arc;

use bytes::Bytes;

use super::*;
use crate::record::sse::{Decoded, Decoder};

/// The classified events of an SSE body of `format`.
fn events(format: FormatKind, body: &[u8]) -> Vec<Event> {
    let mut dec = Decoder::new(8 << 20);
    let mut out = Vec::new();
    dec.feed(&Bytes::copy_from_slice(body), &mut out);
    out.into_iter()
        .filter_map(|d| match d {
            Decoded::Event(e) => Some(format.format().classify(&e)),
            Decoded::Oversized { .. } => None,
        })
        .collect()
}

/// A meter fed every event of `body`.
fn meter(format: FormatKind, body: &[u8], pointers: Option<UsagePointers>) -> Meter {
    let mut m = Meter::new(pointers.map(Arc::new));
    for ev in events(format, body) {
        m.observe(format, &ev);
    }
    m
}

fn fixture(format: FormatKind, name: &str) -> Vec<u8> {
    let path = format!(
        "{}/../../tests/fixtures/{}/{name}.sse",
        env!("CARGO_MANIFEST_DIR"),
        format.as_str()
    );
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// `body` without its last `n` events (a run cut by the upstream).
fn without_last(body: &[u8], n: usize) -> Vec<u8> {
    let text = std::str::from_utf8(body).unwrap();
    let blocks: Vec<&str> = text.split_terminator("\n\n").collect();
    let kept = &blocks[..blocks.len() - n];
    format!("{}\n\n", kept.join("\n\n")).into_bytes()
}

fn usage(input: u64, output: u64, cached: u64, reasoning: Option<u64>, model: &str) -> Usage {
    Usage {
        input_tokens: Some(input),
        output_tokens: Some(output),
        cached_input_tokens: Some(cached),
        reasoning_tokens: reasoning,
        model: Some(model.into()),
    }
}

fn complete(u: Usage, finish: &str) -> Metered {
    Metered {
        model: u.model.clone(),
        usage: Some(u),
        usage_missing: false,
        finish_reason: Some(finish.into()),
    }
}

#[test]
fn openai_chat_fixtures_report_the_usage_chunk() {
    let f = FormatKind::OpenaiChat;
    let m = meter(f, &fixture(f, "text"), None);
    let u = usage(21, 31, 0, Some(0), "gpt-4o-2024-08-06");
    assert_eq!(m.finish(), complete(u, "stop"));
    let m = meter(f, &fixture(f, "tool_calls"), None);
    assert_eq!(
        m.finish().usage,
        Some(usage(88, 54, 0, Some(0), "gpt-4o-2024-08-06"))
    );
    assert_eq!(m.finish().finish_reason.as_deref(), Some("tool_calls"));
    let m = meter(f, &fixture(f, "reasoning"), None);
    assert_eq!(
        m.finish().usage,
        Some(usage(12, 40, 0, Some(28), "deepseek-reasoner"))
    );
}

#[test]
fn an_openai_chat_stream_without_a_usage_chunk_says_usage_missing_and_keeps_the_model() {
    let f = FormatKind::OpenaiChat;
    // The request did not ask `include_usage`: no usage chunk at all.
    let m = meter(f, &fixture(f, "refusal"), None);
    let end = m.finish();
    assert_eq!(end.usage, None);
    assert!(end.usage_missing);
    assert_eq!(end.model.as_deref(), Some("gpt-4o-2024-08-06"));
    assert_eq!(end.finish_reason.as_deref(), Some("stop"));
    // Cut before its usage chunk (the usage chunk and `[DONE]` never came).
    let cut = without_last(&fixture(f, "text"), 2);
    let m = meter(f, &cut, None);
    assert_eq!(m.so_far(), None);
    let end = m.finish();
    assert_eq!((end.usage, end.usage_missing), (None, true));
}

#[test]
fn openai_chat_reads_cached_tokens_and_servers_that_count_on_every_chunk() {
    let f = FormatKind::OpenaiChat;
    let chunk = |choices: &str, usage: &str| {
        format!(
            "data: {{\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"model\":\"m\",\"choices\":{choices},\"usage\":{usage}}}\n\n"
        )
    };
    let delta = r#"[{"index":0,"delta":{"content":"a"},"finish_reason":null}]"#;
    let running = chunk(delta, r#"{"prompt_tokens":1200,"completion_tokens":3}"#);
    let m = meter(f, running.as_bytes(), None);
    // Mid-stream: usage so far, not final.
    assert_eq!(m.so_far().and_then(|u| u.output_tokens), Some(3));
    assert!(!m.complete());
    // Cut there: the input count stands, the output count that was still growing does not.
    let end = m.finish();
    assert!(end.usage_missing);
    assert_eq!(
        end.usage,
        Some(Usage {
            input_tokens: Some(1200),
            model: Some("m".into()),
            ..Usage::default()
        })
    );
    let last = chunk(
        "[]",
        r#"{"prompt_tokens":1200,"completion_tokens":7,"prompt_tokens_details":{"cached_tokens":1024},"completion_tokens_details":{"reasoning_tokens":2}}"#,
    );
    let m = meter(
        f,
        format!("{running}{last}data: [DONE]\n\n").as_bytes(),
        None,
    );
    assert_eq!(m.finish().usage, Some(usage(1200, 7, 1024, Some(2), "m")));
    assert!(!m.finish().usage_missing);
    // A server that sends the final count with the finish reason.
    let finish = r#"[{"index":0,"delta":{},"finish_reason":"length"}]"#;
    let m = meter(
        f,
        chunk(finish, r#"{"prompt_tokens":5,"completion_tokens":9}"#).as_bytes(),
        None,
    );
    assert_eq!(m.finish().usage.and_then(|u| u.output_tokens), Some(9));
    assert_eq!(m.finish().finish_reason.as_deref(), Some("length"));
}

#[test]
fn a_count_the_upstream_did_not_report_as_a_count_is_absent_not_zero() {
    let f = FormatKind::OpenaiChat;
    let body = r#"data: {"object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":"12","completion_tokens":-1,"prompt_tokens_details":null,"completion_tokens_details":{"reasoning_tokens":4}}}

"#;
    let m = meter(f, body.as_bytes(), None);
    assert_eq!(
        m.finish().usage,
        Some(Usage {
            reasoning_tokens: Some(4),
            ..Usage::default()
        })
    );
    // The record says `usage` without the fields the upstream did not report.
    let json = serde_json::to_string(&m.finish().usage).unwrap();
    assert_eq!(json, r#"{"reasoning_tokens":4}"#);
}

#[test]
fn the_meter_reads_only_the_events_the_classifier_flags() {
    let f = FormatKind::OpenaiChat;
    let evs = events(
        f,
        br#"data: {"object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"role":"assistant"}}]}

data: {"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"x"}}],"usage":null}

"#,
    );
    assert!(!evs[1].carries_usage && evs[1].merge.is_some());
    let mut m = Meter::new(None);
    m.observe(f, &evs[0]);
    // The first chunk is read (its model).
    assert_eq!((m.readings(), m.model()), (1, Some("m")));
    // A delta event that is not flagged is not read, whatever its bytes say.
    let mut forged = evs[1].clone();
    forged.json = Bytes::from_static(br#"{"choices":[],"usage":{"prompt_tokens":9}}"#);
    m.observe(f, &forged);
    assert_eq!((m.so_far(), m.readings()), (None, 1));
    forged.carries_usage = true;
    m.observe(f, &forged);
    assert_eq!(m.so_far().and_then(|u| u.input_tokens), Some(9));
    assert_eq!(m.readings(), 2);
}

#[test]
fn of_a_whole_turn_only_the_few_events_that_can_carry_usage_are_read() {
    let count = |f: FormatKind, name: &str| {
        let body = fixture(f, name);
        (meter(f, &body, None).readings(), events(f, &body).len())
    };
    // The first chunk (model), the finish chunk and the usage chunk.
    assert_eq!(count(FormatKind::OpenaiChat, "text"), (3, 35));
    // response.created and response.incomplete.
    assert_eq!(count(FormatKind::OpenaiResponses, "incomplete"), (2, 14));
    // message_start and message_delta.
    assert_eq!(count(FormatKind::Anthropic, "tool_use_and_text"), (2, 22));
}

#[test]
fn openai_responses_fixtures_report_the_usage_of_the_event_that_ends_the_response() {
    let f = FormatKind::OpenaiResponses;
    let m = meter(f, &fixture(f, "incomplete"), None);
    let u = usage(12, 16, 0, Some(0), "gpt-5-2025-08-07");
    assert_eq!(m.finish(), complete(u, "max_output_tokens"));
    let m = meter(f, &fixture(f, "reasoning_text_and_refusal"), None);
    let u = usage(40, 60, 0, Some(30), "gpt-5-2025-08-07");
    assert_eq!(m.finish(), complete(u, "completed"));
    let m = meter(f, &fixture(f, "summary_text_and_tool_call"), None);
    assert_eq!(
        m.finish().usage,
        Some(usage(182, 241, 0, Some(128), "gpt-5-2025-08-07"))
    );
    // `response.failed` with `usage: null`: the upstream reported nothing.
    let m = meter(f, &fixture(f, "failed"), None);
    let end = m.finish();
    assert_eq!((end.usage, end.usage_missing), (None, true));
    assert_eq!(end.model.as_deref(), Some("gpt-5-2025-08-07"));
    assert_eq!(end.finish_reason.as_deref(), Some("failed"));
}

#[test]
fn an_openai_responses_run_names_its_model_from_its_first_event_and_is_missing_usage_when_cut() {
    let f = FormatKind::OpenaiResponses;
    let cut = without_last(&fixture(f, "incomplete"), 1);
    let m = meter(f, &cut, None);
    assert_eq!(m.model(), Some("gpt-5-2025-08-07"));
    assert_eq!(m.so_far(), None);
    let end = m.finish();
    assert_eq!((end.usage, end.usage_missing), (None, true));
    assert_eq!(end.model.as_deref(), Some("gpt-5-2025-08-07"));
}

#[test]
fn anthropic_fixtures_report_input_from_message_start_and_the_last_output_count() {
    let f = FormatKind::Anthropic;
    let m = meter(f, &fixture(f, "tool_use_and_text"), None);
    let u = usage(472, 89, 0, None, "claude-sonnet-4-5");
    assert_eq!(m.finish(), complete(u, "tool_use"));
    // Its `message_delta` repeats the input count (cumulative usage).
    let m = meter(f, &fixture(f, "thinking_and_citations"), None);
    let u = usage(2679, 312, 0, None, "claude-sonnet-4-5");
    assert_eq!(m.finish(), complete(u, "end_turn"));
}

#[test]
fn an_anthropic_run_cut_before_message_delta_keeps_its_input_and_says_usage_missing() {
    let f = FormatKind::Anthropic;
    let m = meter(f, &fixture(f, "cut_before_stop"), None);
    // Mid-stream, usage so far: message_start's counts (its output count is a running one).
    assert_eq!(m.so_far().and_then(|u| u.output_tokens), Some(1));
    let end = m.finish();
    assert!(end.usage_missing);
    assert_eq!(
        end.usage,
        Some(Usage {
            input_tokens: Some(31),
            cached_input_tokens: Some(0),
            model: Some("claude-sonnet-4-5".into()),
            ..Usage::default()
        })
    );
    let m = meter(f, &fixture(f, "overloaded_error"), None);
    assert!(m.finish().usage_missing);
    assert_eq!(m.finish().usage.and_then(|u| u.input_tokens), Some(25));
}

#[test]
fn anthropic_cache_reads_and_writes_count_as_input_and_only_reads_as_cached() {
    let f = FormatKind::Anthropic;
    let start = r#"event: message_start
data: {"type":"message_start","message":{"id":"m","model":"claude","usage":{"input_tokens":100,"cache_creation_input_tokens":2000,"cache_read_input_tokens":3000,"output_tokens":1}}}

"#;
    let delta = |usage: &str| {
        format!("event: message_delta\ndata: {{\"type\":\"message_delta\",\"delta\":{{\"stop_reason\":\"max_tokens\"}},\"usage\":{usage}}}\n\n")
    };
    let expect = usage(5100, 50, 3000, None, "claude");
    // A delta with the output count only: the input stands from message_start.
    let body = format!("{start}{}", delta(r#"{"output_tokens":50}"#));
    assert_eq!(
        meter(f, body.as_bytes(), None).finish().usage,
        Some(expect.clone())
    );
    // A delta repeating every count (cumulative), and a later one: the last output count wins.
    let body = format!(
        "{start}{}{}",
        delta(
            r#"{"input_tokens":100,"cache_creation_input_tokens":2000,"cache_read_input_tokens":3000,"output_tokens":20}"#
        ),
        delta(r#"{"output_tokens":50}"#)
    );
    let m = meter(f, body.as_bytes(), None);
    assert_eq!(m.finish().usage, Some(expect));
    assert_eq!(m.finish().finish_reason.as_deref(), Some("max_tokens"));
}

fn agui_pointers() -> UsagePointers {
    UsagePointers {
        ty: "CUSTOM".into(),
        name: Some("usage".into()),
        input_tokens: Some("/value/input".into()),
        output_tokens: Some("/value/output".into()),
        cached_input_tokens: Some("/value/cached".into()),
        reasoning_tokens: None,
        model: Some("/value/model".into()),
    }
}

#[test]
fn agui_reads_the_event_and_pointers_its_route_names() {
    let f = FormatKind::Agui;
    let body = br#"data: {"type":"RUN_STARTED","threadId":"t","runId":"r"}

data: {"type":"CUSTOM","name":"progress","value":{"input":1,"output":1}}

data: {"type":"CUSTOM","name":"usage","value":{"input":300,"output":42,"cached":7,"model":"llama-3"}}

data: {"type":"RUN_FINISHED","threadId":"t","runId":"r"}

"#;
    let m = meter(f, body, Some(agui_pointers()));
    let u = Usage {
        input_tokens: Some(300),
        output_tokens: Some(42),
        cached_input_tokens: Some(7),
        reasoning_tokens: None,
        model: Some("llama-3".into()),
    };
    assert_eq!(m.finish().usage, Some(u));
    assert!(!m.finish().usage_missing);
    // Without the setting, AG-UI reports nothing.
    let m = meter(f, body, None);
    assert_eq!(
        m.finish(),
        Metered {
            usage_missing: true,
            ..Metered::default()
        }
    );
    // Cut before the usage event.
    let m = meter(f, &without_last(body, 2), Some(agui_pointers()));
    assert_eq!((m.finish().usage, m.finish().usage_missing), (None, true));
}

#[test]
fn the_ai_sdk_fixture_reads_its_finish_chunks_message_metadata() {
    let f = FormatKind::AiSdk;
    let p = UsagePointers {
        ty: "finish".into(),
        name: None,
        input_tokens: Some("/messageMetadata/usage/inputTokens".into()),
        output_tokens: Some("/messageMetadata/usage/outputTokens".into()),
        cached_input_tokens: Some("/messageMetadata/usage/cachedInputTokens".into()),
        reasoning_tokens: Some("/messageMetadata/usage/reasoningTokens".into()),
        model: None,
    };
    let m = meter(f, &fixture(f, "weather_tool_call"), Some(p.clone()));
    let u = Usage {
        input_tokens: Some(412),
        output_tokens: Some(128),
        cached_input_tokens: Some(256),
        reasoning_tokens: Some(31),
        model: None,
    };
    assert_eq!(
        m.finish(),
        Metered {
            usage: Some(u),
            usage_missing: false,
            model: None,
            finish_reason: Some("stop".into()),
        }
    );
    let m = meter(f, &fixture(f, "aborted_without_finish"), Some(p));
    assert_eq!((m.finish().usage, m.finish().usage_missing), (None, true));
}

#[test]
fn a_long_model_name_is_cut_at_a_character_boundary() {
    let f = FormatKind::OpenaiChat;
    let model = "é".repeat(200);
    let body = format!(
        "data: {{\"object\":\"chat.completion.chunk\",\"model\":\"{model}\",\"choices\":[]}}\n\n"
    );
    let m = meter(f, body.as_bytes(), None);
    let got = m.model().unwrap();
    assert_eq!(got.len(), MAX_MODEL_BYTES);
    assert!(model.starts_with(got));
}
