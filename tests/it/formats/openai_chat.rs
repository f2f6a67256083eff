//! OpenAI Chat Completions: content, refusal and tool-call argument deltas merge per choice
//! (and tool call); role/tool heads, finish_reason and usage chunks, `[DONE]` stay verbatim.

use bytes::Bytes;
use proptest::prelude::*;
use serde_json::{json, Value};
use tether::ingest::Ending;
use tether::record::format::{detect_from_headers, FormatChoice, FormatKind};

use crate::formats::common::*;
use crate::support::parse_frame;

mod reduce;

use reduce::Chat;

const F: FormatKind = FormatKind::OpenaiChat;

/// Every fixture: its name, how its run ends, and how many events its snapshot holds.
struct Case {
    name: &'static str,
    persisted: bool,
    reason: Option<&'static str>,
    events: usize,
    snapshot: usize,
}

const CASES: &[Case] = &[
    // role | 31 content deltas | finish | usage | [DONE]
    Case {
        name: "text",
        persisted: true,
        reason: None,
        events: 35,
        snapshot: 5,
    },
    // head 0 | 20 argument deltas | head 1 | 8 argument deltas | finish | usage | [DONE]
    Case {
        name: "tool_calls",
        persisted: true,
        reason: None,
        events: 33,
        snapshot: 7,
    },
    // role | 12 refusal deltas | finish | [DONE]
    Case {
        name: "refusal",
        persisted: true,
        reason: None,
        events: 15,
        snapshot: 4,
    },
    // role | 8 reasoning_content chunks (verbatim) | 5 content deltas | finish | usage | [DONE]
    Case {
        name: "reasoning",
        persisted: true,
        reason: None,
        events: 17,
        snapshot: 13,
    },
    // 2 roles | 10 deltas in 6 runs of one choice | 2 finishes | [DONE]
    Case {
        name: "two_choices",
        persisted: true,
        reason: None,
        events: 15,
        snapshot: 11,
    },
    // role | 4 content deltas | [DONE] without a finish_reason chunk
    Case {
        name: "no_finish",
        persisted: false,
        reason: Some("no_terminal_event"),
        events: 6,
        snapshot: 3,
    },
    // role | 4 content deltas | an error object
    Case {
        name: "error",
        persisted: false,
        reason: Some("error_event"),
        events: 6,
        snapshot: 3,
    },
];

#[test]
fn every_fixture_reduces_to_its_golden_state_from_the_stream_and_from_the_snapshot() {
    for case in CASES {
        let bytes = fixture(F, case.name);
        assert_eq!(count_events(&bytes), case.events, "{}", case.name);
        let (run, ingest, _) = record(FormatChoice::Auto, &[bytes]);
        assert_eq!(
            ingest.format(),
            Some(F),
            "{}: detected from the first event",
            case.name
        );
        let verdict = ingest.verdict(Ending::Clean);
        assert_eq!(verdict.persisted, case.persisted, "{}", case.name);
        assert_eq!(
            verdict.reason.map(|r| r.as_str()),
            case.reason,
            "{}",
            case.name
        );
        let golden = golden(F, case.name);
        assert_eq!(
            Chat::of(&events_after(&run, 0)).to_json(),
            golden,
            "{}",
            case.name
        );
        let (_, snap, _) = snapshot(&run);
        assert_eq!(
            Chat::of(&snap).to_json(),
            golden,
            "{}: from the snapshot",
            case.name
        );
        assert_eq!(snap.len(), case.snapshot, "{}: {snap:#?}", case.name);
    }
}

#[test]
fn the_headers_of_a_chat_completions_stream_name_no_format() {
    let headers = [
        ("content-type", "text/event-stream; charset=utf-8"),
        ("openai-processing-ms", "212"),
        ("openai-version", "2020-10-01"),
        ("x-request-id", "req_1"),
    ];
    let found = detect_from_headers(|name| {
        headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.to_string())
    });
    assert_eq!(found, None, "detected from the first event instead");
}

#[test]
fn every_fixture_recovers_at_every_read_boundary_of_a_fine_split() {
    for case in CASES {
        let bytes = fixture(F, case.name);
        let cuts: Vec<usize> = (1..bytes.len()).step_by(13).collect();
        let full = check_recovery::<Chat>(F, &bytes, &cuts);
        assert_eq!(full.to_json(), golden(F, case.name), "{}", case.name);
    }
}

#[test]
fn an_sse_event_name_rides_on_the_frame_and_the_chunk_stays_byte_for_byte() {
    let chunk = r#"{"id":"c","choices":[{"index":0,"delta":{"content":"hi"}}]}"#;
    let bytes = Bytes::from(format!("event: chunk\ndata: {chunk}\n\ndata: {chunk}\n\n"));
    let (run, _, _) = record(FormatChoice::Fixed(F), &[bytes]);
    let read = run.read_after(0, usize::MAX).unwrap();
    let frames: Vec<_> = read
        .frames
        .iter()
        .map(|f| parse_frame(std::str::from_utf8(f).unwrap()).unwrap())
        .collect();
    assert_eq!(frames[0].json["event_name"], "chunk");
    assert_eq!(
        frames[0].json["event"],
        serde_json::from_str::<Value>(chunk).unwrap()
    );
    assert!(frames[1].json.get("event_name").is_none());
    let raw = std::str::from_utf8(&read.frames[1]).unwrap();
    assert!(raw.contains(&format!(r#""event":{chunk}}}"#)), "{raw}");
}

/// A string with escapes and multi-byte characters.
fn text() -> impl Strategy<Value = String> {
    "[a-z \u{e9}\u{65e5}\u{1F600}\"\\\\\n\t/]{0,6}"
}

fn fingerprint() -> impl Strategy<Value = Option<Option<&'static str>>> {
    prop_oneof![
        4 => Just(Some(Some("fp_a"))),
        1 => Just(Some(Some("fp_b"))),
        1 => Just(Some(None)),
        1 => Just(None),
    ]
}

/// A chunk around `choices`, with or without a fingerprint and `"usage":null`.
fn chunk(choices: Value, fp: Option<Option<&str>>, usage_null: bool) -> Value {
    let mut c = json!({"id":"chatcmpl-p","object":"chat.completion.chunk","created":1,"model":"m"});
    if let Some(fp) = fp {
        c["system_fingerprint"] = json!(fp);
    }
    c["choices"] = choices;
    if usage_null {
        c["usage"] = Value::Null;
    }
    c["obfuscation"] = json!("o");
    c
}

fn arb_choice() -> impl Strategy<Value = Value> {
    let i = 0u64..2;
    let tool = 0u64..2;
    prop_oneof![
        6 => (i.clone(), text()).prop_map(|(i, t)| json!({"index":i,"delta":{"content":t},"logprobs":null,"finish_reason":null})),
        2 => (i.clone(), text()).prop_map(|(i, t)| json!({"index":i,"delta":{"refusal":t}})),
        5 => (i.clone(), tool.clone(), text()).prop_map(|(i, j, t)| json!({"index":i,"delta":{"tool_calls":[{"index":j,"function":{"arguments":t}}]}})),
        // Heads: a repeated role, a tool call's id, type and name.
        1 => (i.clone(), text()).prop_map(|(i, t)| json!({"index":i,"delta":{"role":"assistant","content":t}})),
        1 => (i.clone(), tool).prop_map(|(i, j)| json!({"index":i,"delta":{"tool_calls":[{"index":j,"id":format!("call_{j}"),"type":"function","function":{"name":"f","arguments":""}}]}})),
        // Not merged: an unknown field, logprobs, a finish reason.
        1 => (i.clone(), text()).prop_map(|(i, t)| json!({"index":i,"delta":{"reasoning_content":t}})),
        1 => (i.clone(), text()).prop_map(|(i, t)| json!({"index":i,"delta":{"content":t},"logprobs":{"content":[{"token":t,"logprob":-0.5,"bytes":null,"top_logprobs":[]}],"refusal":null}})),
        1 => i.prop_map(|i| json!({"index":i,"delta":{},"finish_reason":"stop"})),
    ]
}

fn arb_event() -> impl Strategy<Value = Value> {
    prop_oneof![
        12 => (arb_choice(), fingerprint(), any::<bool>()).prop_map(|(c, fp, u)| chunk(json!([c]), fp, u)),
        1 => (arb_choice(), arb_choice(), fingerprint()).prop_map(|(a, b, fp)| chunk(json!([a, b]), fp, true)),
        1 => fingerprint().prop_map(|fp| {
            let mut c = chunk(json!([]), fp, false);
            c["usage"] = json!({"prompt_tokens":1,"completion_tokens":2,"total_tokens":3});
            c
        }),
        1 => Just(json!({"error":{"message":"boom","type":"server_error","param":null,"code":null}})),
    ]
}

/// Makes choice and tool call indices dense, as OpenAI sends them: index `n` first appears
/// after `0..n`. openai-python keeps choices and tool calls in lists and inserts an unseen
/// index at the list's end, so with a gap each fragment of the missing index makes a new
/// entry: the state then depends on how many fragments there were, merged or not.
fn densify(events: &mut [Value]) {
    // Tool calls per choice, in choice order.
    let mut tools: Vec<u64> = Vec::new();
    for e in events {
        let Some(choices) = e["choices"].as_array_mut() else {
            continue;
        };
        for c in choices {
            let i = c["index"].as_u64().unwrap().min(tools.len() as u64);
            c["index"] = json!(i);
            if i == tools.len() as u64 {
                tools.push(0);
            }
            let seen = &mut tools[i as usize];
            if let Some(calls) = c["delta"]["tool_calls"].as_array_mut() {
                for t in calls {
                    let j = t["index"].as_u64().unwrap().min(*seen);
                    t["index"] = json!(j);
                    if j == *seen {
                        *seen += 1;
                    }
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn any_sequence_split_anywhere_recovers_from_every_snapshot(
        events in proptest::collection::vec(arb_event(), 0..24),
        done in proptest::bool::ANY,
        cuts in proptest::collection::vec(0usize..6000, 0..12),
    ) {
        // Streams open with the role chunk, as OpenAI's do.
        let head = json!([{"index":0,"delta":{"role":"assistant","content":""}}]);
        let mut all = vec![chunk(head, Some(Some("fp_a")), true)];
        all.extend(events);
        densify(&mut all);
        let mut bytes = String::new();
        for e in &all {
            bytes.push_str(&format!("data: {e}\n\n"));
        }
        if done {
            bytes.push_str("data: [DONE]\n\n");
        }
        let bytes = Bytes::from(bytes);
        let cuts = cuts_within(cuts, bytes.len());
        let full = check_recovery::<Chat>(F, &bytes, &cuts);
        if done {
            all.push(json!({"type":"RAW","source":"sse","event":{"event":"message","data":"[DONE]"}}));
        }
        prop_assert_eq!(full, Chat::of(&all));
    }
}

/// The turn's text as its snapshot carries it: the escaped content, refusal, reasoning and
/// arguments of every choice in the golden state.
fn text_bytes(golden: &Value) -> usize {
    let escaped = |v: &Value| {
        v.as_str()
            .map_or(0, |s| serde_json::to_string(s).unwrap().len())
    };
    golden["choices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let m = &c["message"];
            let calls = m["tool_calls"].as_array().map_or(0, |t| {
                t.iter().map(|t| escaped(&t["function"]["arguments"])).sum()
            });
            escaped(&m["content"])
                + escaped(&m["refusal"])
                + escaped(&m["reasoning_content"])
                + calls
        })
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_killed_mid_turn_recovers_the_whole_answer_compactly() {
    for case in CASES.iter().filter(|c| c.name != "reasoning") {
        let golden = golden(F, case.name);
        let n = case.events;
        for cut in [0, 1, n / 2, n] {
            let expect = Expect {
                persisted: case.persisted,
                reason: case.reason,
            };
            let (r, size) = kill_and_recover::<Chat>(F, case.name, vec![], cut, expect).await;
            assert_eq!(r.to_json(), golden, "{} cut after {cut} events", case.name);
            // Every event the snapshot keeps whole (role and tool heads, finish, usage,
            // [DONE], one open delta per run) is under 500 bytes.
            let bound = text_bytes(&golden) * 6 / 5 + 500 * case.snapshot;
            assert!(
                size <= bound,
                "{} cut after {cut}: snapshot of {size} bytes, bound {bound}",
                case.name
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verbatim_reasoning_chunks_recover_too() {
    let golden = golden(F, "reasoning");
    let n = count_events(&fixture(F, "reasoning"));
    for cut in [0, 1, n / 2, n] {
        let expect = Expect {
            persisted: true,
            reason: None,
        };
        let (r, size) = kill_and_recover::<Chat>(F, "reasoning", vec![], cut, expect).await;
        assert_eq!(r.to_json(), golden, "cut after {cut} events");
        assert!(
            size < fixture(F, "reasoning").len(),
            "snapshot of {size} bytes"
        );
    }
}
