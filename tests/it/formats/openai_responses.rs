//! OpenAI Responses: output text, refusal, function-call arguments, reasoning summary and
//! reasoning text deltas merge by item (and content or summary index); a merged delta carries
//! the last `sequence_number`; everything else is verbatim. `response.completed` persists a
//! turn, `response.failed`, `response.incomplete` and `error` do not.

use std::collections::BTreeMap;

use bytes::Bytes;
use proptest::prelude::*;
use serde_json::{json, Value};
use tether::ingest::Ending;
use tether::record::format::{detect_from_headers, FormatChoice, FormatKind};

use crate::formats::common::*;
use crate::support::parse_frame;

const F: FormatKind = FormatKind::OpenaiResponses;

/// The fixtures: name, events, delta events, snapshot events once merged, and how each ends.
const FIXTURES: [(&str, usize, usize, usize, Option<&str>); 5] = [
    // 49 deltas in 4 runs (2 summary parts, 1 text part, 1 call's arguments).
    ("summary_text_and_tool_call", 68, 49, 23, None),
    // 18 deltas in 2 runs (reasoning text, refusal).
    ("reasoning_text_and_refusal", 31, 18, 15, None),
    ("failed", 11, 6, 6, Some("response_failed")),
    ("incomplete", 14, 6, 9, Some("response_incomplete")),
    ("error", 8, 3, 6, Some("error_event")),
];

type Parts = BTreeMap<String, BTreeMap<u64, String>>;

/// A Responses client's state, accumulated as openai-python's `ResponseStreamState` does for
/// text and arguments (and likewise for refusals, summaries and reasoning text): delta strings
/// joined per item and content / summary index, `logprobs` lists joined, the last
/// `sequence_number` of each delta stream, the status of the last lifecycle event, and every
/// other event in order.
#[derive(Debug, Default, PartialEq)]
struct Responses {
    status: Option<String>,
    text: Parts,
    refusal: Parts,
    args: BTreeMap<String, String>,
    summary: Parts,
    reasoning: Parts,
    logprobs: BTreeMap<String, BTreeMap<u64, Vec<Value>>>,
    delta_seq: BTreeMap<String, u64>,
    others: Vec<Value>,
}

impl Reducer for Responses {
    fn apply(&mut self, e: &Value) {
        let ty = e["type"].as_str().unwrap_or_default();
        let item = e["item_id"].as_str().unwrap_or_default().to_string();
        let content = e["content_index"].as_u64().unwrap_or_default();
        let part = |m: &mut Parts, i: u64, d: &str| {
            *m.entry(item.clone()).or_default().entry(i).or_default() += d;
        };
        let Some(d) = e["delta"].as_str() else {
            self.others.push(e.clone());
            if let Some(status) = e["response"]["status"].as_str() {
                self.status = Some(status.to_string());
            }
            return;
        };
        let index = match ty {
            "response.output_text.delta" => {
                part(&mut self.text, content, d);
                // An absent list and an empty one add nothing alike (a merged delta keeps the
                // first delta's member, which may be either).
                if let Some(l) = e["logprobs"].as_array().filter(|l| !l.is_empty()) {
                    let list = self.logprobs.entry(item.clone()).or_default();
                    list.entry(content).or_default().extend(l.iter().cloned());
                }
                content
            }
            "response.refusal.delta" => {
                part(&mut self.refusal, content, d);
                content
            }
            "response.function_call_arguments.delta" => {
                *self.args.entry(item.clone()).or_default() += d;
                0
            }
            "response.reasoning_summary_text.delta" => {
                let i = e["summary_index"].as_u64().unwrap_or_default();
                part(&mut self.summary, i, d);
                i
            }
            "response.reasoning_text.delta" => {
                part(&mut self.reasoning, content, d);
                content
            }
            _ => {
                self.others.push(e.clone());
                return;
            }
        };
        let seq = e["sequence_number"].as_u64().unwrap_or_default();
        self.delta_seq.insert(format!("{ty} {item} {index}"), seq);
    }

    fn to_json(&self) -> Value {
        json!({
            "status": self.status,
            "text": self.text,
            "refusal": self.refusal,
            "args": self.args,
            "summary": self.summary,
            "reasoning": self.reasoning,
            "logprobs": self.logprobs,
            "delta_seq": self.delta_seq,
            "others": self.others,
        })
    }
}

#[test]
fn each_fixture_reduces_to_its_golden_state_from_the_stream_and_from_the_snapshot() {
    for (name, events, deltas, merged, failure) in FIXTURES {
        let bytes = fixture(F, name);
        assert_eq!(count_events(&bytes), events, "{name}");
        let (run, ingest, _) = record(FormatChoice::Auto, &[bytes]);
        assert_eq!(
            ingest.format(),
            Some(F),
            "{name}: detected from the first event"
        );
        let verdict = ingest.verdict(Ending::Clean);
        assert_eq!(verdict.persisted, failure.is_none(), "{name}");
        assert_eq!(verdict.reason.map(|r| r.as_str()), failure, "{name}");
        let golden = golden(F, name);
        let all = events_after(&run, 0);
        assert_eq!(all.len(), events, "{name}");
        assert_eq!(Responses::of(&all).to_json(), golden, "{name}: the stream");
        let (_, snap, _) = snapshot(&run);
        assert_eq!(
            Responses::of(&snap).to_json(),
            golden,
            "{name}: the snapshot"
        );
        // Every delta run merged into one event.
        assert_eq!(snap.len(), merged, "{name}: {deltas} deltas merged");
        assert!(merged < events - deltas + 5, "{name}");
    }
}

#[test]
fn a_merged_delta_keeps_the_first_deltas_members_and_the_last_sequence_number() {
    let (run, _, _) = record(
        FormatChoice::Fixed(F),
        &[fixture(F, "summary_text_and_tool_call")],
    );
    let all = events_after(&run, 0);
    let (_, snap, _) = snapshot(&run);
    for ty in [
        "response.output_text.delta",
        "response.function_call_arguments.delta",
    ] {
        let deltas: Vec<&Value> = all.iter().filter(|e| e["type"] == ty).collect();
        let merged: Vec<&Value> = snap.iter().filter(|e| e["type"] == ty).collect();
        assert_eq!(merged.len(), 1, "{ty}");
        let (first, last, merged) = (deltas[0], deltas[deltas.len() - 1], merged[0]);
        let text: String = deltas
            .iter()
            .map(|e| e["delta"].as_str().unwrap())
            .collect();
        let mut want = first.clone();
        want["delta"] = json!(text);
        want["sequence_number"] = last["sequence_number"].clone();
        assert_eq!(merged, &want, "{ty}");
        assert_eq!(merged["obfuscation"], first["obfuscation"]);
    }
}

#[test]
fn no_header_names_this_format_detection_comes_from_the_first_event() {
    let headers = [
        ("content-type", "text/event-stream; charset=utf-8"),
        ("openai-processing-ms", "83"),
        ("x-request-id", "req_1"),
    ];
    let header = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.to_string())
    };
    assert_eq!(detect_from_headers(header), None);
    // The first event decides; `response.created` comes first in every fixture.
    for (name, ..) in FIXTURES {
        let (_, ingest, _) = record(FormatChoice::Auto, &[fixture(F, name)]);
        assert_eq!(ingest.format(), Some(F), "{name}");
    }
}

#[test]
fn every_fixture_recovers_at_every_read_boundary_of_a_fine_split() {
    for (name, ..) in FIXTURES {
        let bytes = fixture(F, name);
        let step = if bytes.len() > 8000 { 23 } else { 7 };
        let cuts: Vec<usize> = (1..bytes.len()).step_by(step).collect();
        let full = check_recovery::<Responses>(F, &bytes, &cuts);
        assert_eq!(full.to_json(), golden(F, name), "{name}");
    }
}

#[test]
fn a_small_fixture_recovers_at_every_byte() {
    let bytes = fixture(F, "error");
    let cuts: Vec<usize> = (1..bytes.len()).collect();
    check_recovery::<Responses>(F, &bytes, &cuts);
}

/// A text of JSON-escaped, multi-byte and plain pieces.
const TEXT: &str = "[a-z \u{e9}\u{65e5}\u{1F600}\"\\\\\n\t/]{0,6}";

fn arb_delta() -> impl Strategy<Value = Value> {
    let item = prop_oneof![Just("msg_1"), Just("msg_2"), Just("fc_1"), Just("rs_1")];
    let index = 0u64..2;
    let logprobs = prop_oneof![
        4 => Just(Some(json!([]))),
        1 => Just(None),
        1 => TEXT.prop_map(|t| Some(json!([{"token": t, "logprob": -0.5, "bytes": [], "top_logprobs": []}]))),
    ];
    let obfuscation = proptest::option::of("[A-Za-z0-9]{1,8}");
    prop_oneof![
        (item.clone(), index.clone(), TEXT, logprobs, obfuscation.clone()).prop_map(
            |(item, ci, d, lp, ob)| {
                let mut e = json!({"type":"response.output_text.delta","item_id":item,"output_index":0,"content_index":ci,"delta":d});
                if let Some(lp) = lp {
                    e["logprobs"] = lp;
                }
                if let Some(ob) = ob {
                    e["obfuscation"] = json!(ob);
                }
                e
            }
        ),
        (item.clone(), index.clone(), TEXT).prop_map(|(item, ci, d)| {
            json!({"type":"response.refusal.delta","item_id":item,"output_index":0,"content_index":ci,"delta":d})
        }),
        (item.clone(), TEXT, obfuscation).prop_map(|(item, d, ob)| {
            let mut e = json!({"type":"response.function_call_arguments.delta","item_id":item,"output_index":1,"delta":d});
            if let Some(ob) = ob {
                e["obfuscation"] = json!(ob);
            }
            e
        }),
        (item.clone(), index.clone(), TEXT).prop_map(|(item, si, d)| {
            json!({"type":"response.reasoning_summary_text.delta","item_id":item,"output_index":0,"summary_index":si,"delta":d})
        }),
        (item, index, TEXT).prop_map(|(item, ci, d)| {
            json!({"type":"response.reasoning_text.delta","item_id":item,"output_index":0,"content_index":ci,"delta":d})
        }),
    ]
}

fn arb_other() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(json!({"type":"response.in_progress","response":{"id":"resp_1","status":"in_progress","output":[]}})),
        Just(json!({"type":"response.content_part.added","item_id":"msg_1","output_index":0,"content_index":1,"part":{"type":"output_text","text":"","annotations":[]}})),
        TEXT.prop_map(|t| json!({"type":"response.output_text.done","item_id":"msg_1","output_index":0,"content_index":0,"text":t,"logprobs":[]})),
        Just(json!({"type":"response.audio.delta","delta":"UklGRg=="})),
        Just(json!({"type":"response.output_text.annotation.added","item_id":"msg_1","output_index":0,"content_index":0,"annotation_index":0,"annotation":{"type":"url_citation","url":"https://e.x","title":"t","start_index":0,"end_index":1}})),
        // A delta with a member a merge would lose.
        TEXT.prop_map(|d| json!({"type":"response.output_text.delta","item_id":"msg_1","output_index":0,"content_index":0,"delta":d,"extra":true})),
    ]
}

/// `event: <type>` + `data: <json>` with `sequence_number` `seq`, placed first or last.
fn sse_of(e: &Value, seq: usize, seq_first: bool) -> String {
    let body = serde_json::to_string(e).unwrap();
    let data = if seq_first {
        format!("{{\"sequence_number\":{seq},{}", &body[1..])
    } else {
        format!("{},\"sequence_number\":{seq}}}", &body[..body.len() - 1])
    };
    format!("event: {}\ndata: {data}\n\n", e["type"].as_str().unwrap())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn any_sequence_split_anywhere_recovers_from_every_snapshot(
        events in proptest::collection::vec(
            prop_oneof![4 => arb_delta(), 1 => arb_other()].prop_flat_map(|e| (Just(e), any::<bool>())),
            0..28,
        ),
        cuts in proptest::collection::vec(0usize..6000, 0..12),
    ) {
        let mut bytes = String::new();
        for (seq, (e, seq_first)) in events.iter().enumerate() {
            bytes.push_str(&sse_of(e, seq, *seq_first));
        }
        let values: Vec<Value> = bytes
            .split("\n\n")
            .filter_map(|b| b.lines().find_map(|l| l.strip_prefix("data: ")))
            .map(|d| serde_json::from_str(d).unwrap())
            .collect();
        prop_assert_eq!(values.len(), events.len());
        let bytes = Bytes::from(bytes);
        let cuts = cuts_within(cuts, bytes.len());
        let full = check_recovery::<Responses>(F, &bytes, &cuts);
        prop_assert_eq!(full, Responses::of(&values));
    }
}

/// The most a snapshot of fixture `name` may take: every event that never merges as it is
/// (the lifecycle events' response objects and the `*.done` events repeat the text: they count
/// as text), the merged deltas' text at 1.2x, and a constant per merged delta for its envelope.
fn size_bound(name: &str) -> usize {
    let bytes = fixture(F, name);
    let text = std::str::from_utf8(&bytes).unwrap();
    let events: Vec<Value> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    let is_delta = |e: &Value| e["type"].as_str().unwrap().ends_with(".delta");
    let verbatim: usize = events
        .iter()
        .filter(|e| !is_delta(e))
        .map(|e| serde_json::to_string(e).unwrap().len() + 1)
        .sum();
    let delta_text: usize = events
        .iter()
        .filter(|e| is_delta(e))
        .map(|e| serde_json::to_string(&e["delta"]).unwrap().len() - 2)
        .sum();
    let (.., events, deltas, merged, _) = FIXTURES.iter().find(|f| f.0 == name).unwrap();
    let runs = merged - (events - deltas);
    verbatim + delta_text * 6 / 5 + 300 * runs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_killed_mid_turn_recovers_the_whole_answer_compactly() {
    let runs: [(&str, &[usize]); 5] = [
        ("summary_text_and_tool_call", &[0, 1, 30, 67, 68]),
        ("reasoning_text_and_refusal", &[0, 12, 31]),
        ("failed", &[1, 8, 11]),
        ("incomplete", &[5, 14]),
        ("error", &[4, 8]),
    ];
    for (name, cuts) in runs {
        let (.., failure) = FIXTURES.iter().find(|f| f.0 == name).unwrap();
        let golden = golden(F, name);
        let bound = size_bound(name);
        for &cut in cuts {
            let expect = Expect {
                persisted: failure.is_none(),
                reason: *failure,
            };
            let (r, size) = kill_and_recover::<Responses>(F, name, vec![], cut, expect).await;
            assert_eq!(r.to_json(), golden, "{name}: cut after {cut} events");
            assert!(size <= bound, "{name}: snapshot of {size} bytes > {bound}");
        }
    }
}

#[test]
fn frames_carry_the_type_and_the_sse_name_only_when_it_differs() {
    let same = r#"{"type":"response.output_text.delta","sequence_number":1,"item_id":"m","output_index":0,"content_index":0,"delta":"a"}"#;
    let other = r#"{"type":"response.output_text.delta","sequence_number":2,"item_id":"m","output_index":0,"content_index":0,"delta":"b"}"#;
    let bytes = Bytes::from(format!(
        "event: response.output_text.delta\ndata: {same}\n\nevent: message\ndata: {other}\n\ndata: {other}\n\n"
    ));
    let (run, _, _) = record(FormatChoice::Fixed(F), &[bytes]);
    let read = run.read_after(0, usize::MAX).unwrap();
    let frames: Vec<Value> = read
        .frames
        .iter()
        .map(|f| parse_frame(std::str::from_utf8(f).unwrap()).unwrap().json)
        .collect();
    assert_eq!(frames.len(), 3);
    for f in &frames {
        assert_eq!(f["type"], "STREAM_EVENT");
        assert_eq!(f["event"]["type"], "response.output_text.delta");
    }
    assert_eq!(frames[0].get("event_name"), None);
    assert_eq!(frames[1]["event_name"], "message");
    assert_eq!(frames[2].get("event_name"), None);
    // The fixtures name every event by its type: no frame needs a name.
    let (run, _, _) = record(
        FormatChoice::Fixed(F),
        &[fixture(F, "summary_text_and_tool_call")],
    );
    let read = run.read_after(0, usize::MAX).unwrap();
    let names: Vec<String> = std::str::from_utf8(&fixture(F, "summary_text_and_tool_call"))
        .unwrap()
        .lines()
        .filter_map(|l| l.strip_prefix("event: "))
        .map(str::to_string)
        .collect();
    assert_eq!(names.len(), read.frames.len());
    for (f, name) in read.frames.iter().zip(&names) {
        let f = parse_frame(std::str::from_utf8(f).unwrap()).unwrap().json;
        assert_eq!(f["event"]["type"], name.as_str());
        assert_eq!(f.get("event_name"), None);
    }
}
