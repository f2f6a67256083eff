//! The Vercel AI SDK UI message stream: `text-delta` / `reasoning-delta` merge by `id`,
//! `tool-input-delta` by `toolCallId`; everything else is verbatim. A turn is complete when
//! `finish` came before `[DONE]`; an `error` chunk fails it.

use bytes::Bytes;
use proptest::prelude::*;
use serde_json::{json, Value};
use tether::record::format::{detect_from_headers, FormatChoice, FormatKind};

use crate::formats::common::*;
use crate::support::parse_frame;

const F: FormatKind = FormatKind::AiSdk;

/// The fixtures, and how each ends: `(name, persisted, reason)`.
const FIXTURES: [(&str, bool, Option<&str>); 4] = [
    ("weather_tool_call", true, None),
    ("interleaved_parts", true, None),
    ("error_event", false, Some("error_event")),
    ("aborted_without_finish", false, Some("no_terminal_event")),
];

mod reduce;

use reduce::AiSdk;

/// The fixture's chunks as JSON (`[DONE]` as its `RAW` wrapper), in order.
fn fixture_events(name: &str) -> Vec<Value> {
    let bytes = fixture(F, name);
    sse_blocks(&bytes)
        .iter()
        .filter_map(|b| {
            let text = std::str::from_utf8(b).unwrap();
            let data = text.lines().find_map(|l| l.strip_prefix("data: "))?;
            Some(serde_json::from_str(data).unwrap_or_else(
                |_| json!({"type":"RAW","source":"sse","event":{"event":"message","data":data}}),
            ))
        })
        .collect()
}

#[test]
fn every_fixture_reduces_to_its_golden_state_from_the_stream_and_from_the_snapshot() {
    // (name, events, events in the final snapshot): the deltas merged per run of one key.
    let sizes = [
        // 4 reasoning deltas → 1, 19 tool-input deltas → 1, 6 text deltas → 1.
        ("weather_tool_call", 45, 45 - 29 + 3),
        // 15 deltas → 10: reasoning 2 → 1 and the signed one apart; text runs by id 0×2, 1×2,
        // 0, 1×2 (metadata between) → 4; tool inputs a, b, a×2, b → 4.
        ("interleaved_parts", 34, 34 - 15 + 10),
        ("error_event", 9, 9 - 2 + 1),
        ("aborted_without_finish", 7, 7 - 2 + 1),
    ];
    for (name, events, compacted) in sizes {
        let bytes = fixture(F, name);
        assert_eq!(count_events(&bytes), events, "{name}");
        let (run, ingest, _) = record(FormatChoice::Auto, &[bytes]);
        assert_eq!(
            ingest.format(),
            Some(F),
            "{name}: detected from the first event"
        );
        let golden = golden(F, name);
        let all = events_after(&run, 0);
        assert_eq!(all, fixture_events(name), "{name}: the events as sent");
        assert_eq!(AiSdk::of(&all).to_json(), golden, "{name}: from the stream");
        let (_, snap, _) = snapshot(&run);
        assert_eq!(
            AiSdk::of(&snap).to_json(),
            golden,
            "{name}: from the snapshot"
        );
        assert_eq!(snap.len(), compacted, "{name}: the snapshot's events");
    }
}

#[test]
fn the_response_header_names_the_format() {
    let header = |v: &'static str| {
        move |name: &str| (name == "x-vercel-ai-ui-message-stream").then(|| v.to_string())
    };
    assert_eq!(detect_from_headers(header("v1")), Some(F));
    assert_eq!(detect_from_headers(header(" v1 ")), Some(F));
    assert_eq!(detect_from_headers(header("v2")), None);
    assert_eq!(detect_from_headers(|_| None), None);
}

#[test]
fn the_verdicts_follow_finish_done_and_error() {
    use tether::ingest::{Ending, Verdict};
    use tether::vocab::end::EndReason;
    for (name, persisted, reason) in FIXTURES {
        let (_, ingest, _) = record(FormatChoice::Fixed(F), &[fixture(F, name)]);
        let reason = reason.map(|r| match r {
            "error_event" => EndReason::ErrorEvent,
            _ => EndReason::NoTerminalEvent,
        });
        assert_eq!(
            ingest.verdict(Ending::Clean),
            Verdict { persisted, reason },
            "{name}"
        );
    }
    // `finish` without `[DONE]` is not complete either.
    let cut = "data: {\"type\":\"start\"}\n\ndata: {\"type\":\"finish\"}\n\n";
    let (_, ingest, _) = record(FormatChoice::Fixed(F), &[Bytes::from(cut)]);
    assert_eq!(
        ingest.verdict(Ending::Clean).reason,
        Some(EndReason::NoTerminalEvent)
    );
}

#[test]
fn every_fixture_recovers_at_every_read_boundary_of_small_splits() {
    for (name, _, _) in FIXTURES {
        let bytes = fixture(F, name);
        for step in [1, 5, 13] {
            let cuts: Vec<usize> = (step..bytes.len()).step_by(step).collect();
            let full = check_recovery::<AiSdk>(F, &bytes, &cuts);
            assert_eq!(
                full.to_json(),
                golden(F, name),
                "{name}, reads of {step} bytes"
            );
        }
    }
}

#[test]
fn a_frame_carries_the_chunk_type_and_a_differing_sse_name() {
    // The AI SDK's client reads only `data:`, but a name the upstream sent is kept.
    let bytes = Bytes::from(concat!(
        "data: {\"type\":\"text-start\",\"id\":\"0\"}\n\n",
        "event: chunk\ndata: {\"type\":\"text-delta\",\"id\":\"0\",\"delta\":\"a\"}\n\n",
        "event: chunk\ndata: {\"type\":\"text-delta\",\"id\":\"0\",\"delta\":\"b\"}\n\n",
        "event: text-delta\ndata: {\"type\":\"text-delta\",\"id\":\"0\",\"delta\":\"c\"}\n\n",
        "data: {\"type\":\"text-delta\",\"id\":\"0\",\"delta\":\"d\"}\n\n",
    ));
    let (run, _, _) = record(FormatChoice::Fixed(F), &[bytes]);
    let read = run.read_after(0, usize::MAX).unwrap();
    let frames: Vec<Value> = read
        .frames
        .iter()
        .map(|f| parse_frame(std::str::from_utf8(f).unwrap()).unwrap().json)
        .collect();
    let types: Vec<&str> = frames
        .iter()
        .map(|f| f["event"]["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        types,
        [
            "text-start",
            "text-delta",
            "text-delta",
            "text-delta",
            "text-delta"
        ]
    );
    let names: Vec<&Value> = frames.iter().map(|f| &f["event_name"]).collect();
    assert_eq!(
        names,
        [
            &Value::Null,
            &json!("chunk"),
            &json!("chunk"),
            &Value::Null,
            &Value::Null
        ]
    );
    // A named delta is not merged (its name would be lost); the two unnamed ones are.
    let (_, snap, _) = snapshot(&run);
    let deltas: Vec<&str> = snap
        .iter()
        .skip(1)
        .map(|e| e["delta"].as_str().unwrap())
        .collect();
    assert_eq!(deltas, ["a", "b", "cd"]);
}

fn arb_event() -> impl Strategy<Value = Value> {
    let text = "[a-z \u{e9}\u{1F600}\u{6F22}\"\\\\\n\t]{0,6}";
    let id = || prop_oneof![Just("0"), Just("1")];
    let call = || prop_oneof![Just("c1"), Just("c2")];
    prop_oneof![
        4 => (id(), text).prop_map(|(i, d)| json!({"type":"text-delta","id":i,"delta":d})),
        3 => (id(), text).prop_map(|(i, d)| json!({"type":"reasoning-delta","id":i,"delta":d})),
        3 => (call(), text).prop_map(|(c, d)| {
            json!({"type":"tool-input-delta","toolCallId":c,"inputTextDelta":d})
        }),
        1 => (id(), text).prop_map(|(i, d)| {
            json!({"type":"text-delta","id":i,"delta":d,"providerMetadata":{"p":{"n":d}}})
        }),
        1 => id().prop_map(|i| json!({"type":"text-start","id":i})),
        1 => id().prop_map(|i| json!({"type":"text-end","id":i})),
        1 => id().prop_map(|i| json!({"type":"reasoning-start","id":i})),
        1 => id().prop_map(|i| json!({"type":"reasoning-end","id":i})),
        1 => call().prop_map(|c| {
            json!({"type":"tool-input-start","toolCallId":c,"toolName":"t"})
        }),
        1 => prop_oneof![
            Just(json!({"type":"start-step"})),
            Just(json!({"type":"finish-step"})),
            Just(json!({"type":"reset-step"})),
        ],
        1 => text.prop_map(|t| json!({"type":"message-metadata","messageMetadata":{"t":t}})),
        1 => (id(), text).prop_map(|(i, t)| json!({"type":"data-note","id":i,"data":t})),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn any_sequence_split_anywhere_recovers_from_every_snapshot(
        events in proptest::collection::vec(arb_event(), 0..28),
        cuts in proptest::collection::vec(0usize..3000, 0..12),
    ) {
        let mut bytes = String::new();
        for e in &events {
            bytes.push_str(&format!("data: {e}\n\n"));
        }
        let bytes = Bytes::from(bytes);
        let cuts = cuts_within(cuts, bytes.len());
        let full = check_recovery::<AiSdk>(F, &bytes, &cuts);
        prop_assert_eq!(full, AiSdk::of(&events));
    }
}

/// The text a fixture streams in mergeable deltas (its escaped bytes), and the bytes a
/// compliant snapshot holds besides: every chunk sent whole, and one envelope (the chunk
/// without its delta text) per run of adjacent deltas of one kind and key.
fn delta_and_whole_bytes(name: &str) -> (usize, usize) {
    let (mut deltas, mut whole) = (0, 0);
    let mut open: Option<(Value, Value)> = None;
    for e in fixture_events(name) {
        let (key, d) = match e["type"].as_str() {
            Some("text-delta" | "reasoning-delta") => (&e["id"], &e["delta"]),
            Some("tool-input-delta") => (&e["toolCallId"], &e["inputTextDelta"]),
            _ => (&Value::Null, &Value::Null),
        };
        let len = e.to_string().len();
        if !d.is_string() || e.as_object().unwrap().len() != 3 {
            open = None;
            whole += len;
            continue;
        }
        let text = d.to_string().len() - 2;
        deltas += text;
        let group = (e["type"].clone(), key.clone());
        if open.as_ref() != Some(&group) {
            whole += len - text;
            open = Some(group);
        }
    }
    (deltas, whole)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_killed_mid_turn_recovers_the_whole_answer_compactly() {
    let header = || vec![("x-vercel-ai-ui-message-stream", "v1".to_string())];
    for (name, persisted, reason) in FIXTURES {
        let golden = golden(F, name);
        let events = count_events(&fixture(F, name));
        let (deltas, whole) = delta_and_whole_bytes(name);
        let bound = deltas * 6 / 5 + whole + 64;
        if matches!(name, "weather_tool_call" | "interleaved_parts") {
            // The bound bites: the same history with no delta merged would not fit it.
            let unmerged: usize = fixture_events(name)
                .iter()
                .map(|e| e.to_string().len() + 1)
                .sum();
            assert!(
                unmerged > bound,
                "{name}: {unmerged} unmerged bytes fit {bound}"
            );
        }
        for cut in [0, 1, events / 2, events - 1, events] {
            let expect = Expect { persisted, reason };
            let (r, size) = kill_and_recover::<AiSdk>(F, name, header(), cut, expect).await;
            assert_eq!(r.to_json(), golden, "{name}: cut after {cut} events");
            assert!(size <= bound, "{name}: snapshot of {size} bytes > {bound}");
        }
    }
}
