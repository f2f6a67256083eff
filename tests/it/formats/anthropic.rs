//! Anthropic Messages: `text_delta`, `input_json_delta` and `thinking_delta` deltas merge by
//! block `index`; `ping` is left out of snapshots; `message_stop` ends the turn and an `error`
//! event fails it. The reducer accumulates like anthropic-sdk-python's `accumulate_event`
//! (`lib/streaming/_messages.py`).

use std::collections::BTreeMap;

use bytes::Bytes;
use proptest::prelude::*;
use serde_json::{json, Value};
use tether::record::format::{FormatChoice, FormatKind};

use crate::formats::common::*;
use crate::support::parse_frame;

const F: FormatKind = FormatKind::Anthropic;

/// The fixtures that end with `message_stop`.
const COMPLETE: [&str; 2] = ["tool_use_and_text", "thinking_and_citations"];
/// Every fixture, with how its run ends.
const ALL: [(&str, bool, Option<&str>); 4] = [
    ("tool_use_and_text", true, None),
    ("thinking_and_citations", true, None),
    ("overloaded_error", false, Some("error_event")),
    ("cut_before_stop", false, Some("no_terminal_event")),
];

/// The message as the SDK accumulates it, plus what the SDK's stream reports besides it: whether
/// `message_stop` came, the `error` event's error, and the order of every event that is not a
/// text-like delta or a `ping` (`lifecycle`, so that a lost or moved event shows).
#[derive(Debug, Default, PartialEq)]
struct Anthropic {
    /// `message_start.message`, with its `content` grown by `content_block_start`.
    message: Option<Value>,
    /// The joined `partial_json` per block index (the SDK's `json_bufs`).
    json_bufs: BTreeMap<u64, String>,
    stopped: bool,
    error: Option<Value>,
    lifecycle: Vec<String>,
}

impl Anthropic {
    /// The content block at `index`, when the message has one.
    fn block(&mut self, index: Option<u64>) -> Option<&mut Value> {
        let m = self.message.as_mut()?;
        m["content"].get_mut(usize::try_from(index?).ok()?)
    }
}

impl Reducer for Anthropic {
    fn apply(&mut self, e: &Value) {
        let ty = e["type"].as_str().unwrap_or_default();
        let index = e["index"].as_u64();
        let label = match index {
            Some(i) => format!("{ty}:{i}"),
            None => ty.to_string(),
        };
        match ty {
            // The SDK skips `event: ping`.
            "ping" => return,
            // A later `message_start` falls through every branch of `accumulate_event`.
            "message_start" if self.message.is_none() => self.message = Some(e["message"].clone()),
            "content_block_start" => {
                if let Some(m) = &mut self.message {
                    // The SDK appends whatever the index says.
                    if let Some(content) = m["content"].as_array_mut() {
                        content.push(e["content_block"].clone());
                    }
                }
            }
            "content_block_delta" => {
                let d = &e["delta"];
                let kind = d["type"].as_str().unwrap_or_default();
                let block_ty = self
                    .block(index)
                    .and_then(|b| b["type"].as_str().map(str::to_string))
                    .unwrap_or_default();
                let append = |b: &mut Value, field: &str, s: &str| {
                    let now = b[field].as_str().unwrap_or_default().to_string();
                    b[field] = Value::String(now + s);
                };
                match kind {
                    "text_delta" => {
                        if let (Some(b), "text") = (self.block(index), block_ty.as_str()) {
                            append(b, "text", d["text"].as_str().unwrap_or_default());
                        }
                        return;
                    }
                    "thinking_delta" => {
                        if let (Some(b), "thinking") = (self.block(index), block_ty.as_str()) {
                            append(b, "thinking", d["thinking"].as_str().unwrap_or_default());
                        }
                        return;
                    }
                    "input_json_delta" => {
                        if let (Some(i), "tool_use" | "server_tool_use") =
                            (index, block_ty.as_str())
                        {
                            *self.json_bufs.entry(i).or_default() +=
                                d["partial_json"].as_str().unwrap_or_default();
                        }
                        return;
                    }
                    "signature_delta" => {
                        if let (Some(b), "thinking") = (self.block(index), block_ty.as_str()) {
                            b["signature"] = d["signature"].clone();
                        }
                    }
                    "citations_delta" => {
                        if let (Some(b), "text") = (self.block(index), block_ty.as_str()) {
                            match b["citations"].as_array_mut() {
                                Some(c) if !c.is_empty() => c.push(d["citation"].clone()),
                                _ => b["citations"] = json!([d["citation"]]),
                            }
                        }
                    }
                    _ => {}
                }
                self.lifecycle.push(format!("{label}:{kind}"));
                return;
            }
            "message_delta" => {
                if let Some(m) = &mut self.message {
                    let d = &e["delta"];
                    m["stop_reason"] = d["stop_reason"].clone();
                    m["stop_sequence"] = d["stop_sequence"].clone();
                    if !d["container"].is_null() {
                        m["container"] = d["container"].clone();
                    }
                    // Cumulative counts overwrite; optional ones only when present.
                    let u = &e["usage"];
                    m["usage"]["output_tokens"] = u["output_tokens"].clone();
                    for k in [
                        "input_tokens",
                        "cache_creation_input_tokens",
                        "cache_read_input_tokens",
                        "server_tool_use",
                    ] {
                        if !u[k].is_null() {
                            m["usage"][k] = u[k].clone();
                        }
                    }
                }
            }
            "message_stop" => self.stopped = true,
            "error" => self.error = Some(e["error"].clone()),
            _ => {}
        }
        self.lifecycle.push(label);
    }

    fn to_json(&self) -> Value {
        let mut message = self.message.clone().unwrap_or(Value::Null);
        for (i, buf) in &self.json_bufs {
            if let Some(b) = message["content"].get_mut(*i as usize) {
                if !buf.is_empty() {
                    b["input"] = serde_json::from_str(buf).unwrap_or(Value::String(buf.clone()));
                }
            }
        }
        json!({
            "message": message,
            "stopped": self.stopped,
            "error": self.error,
            "lifecycle": self.lifecycle,
        })
    }
}

/// Writes `<name>.json` from the reducer when `TETHER_WRITE_GOLDEN` is set (review it by hand).
fn write_golden_if_asked(name: &str, state: &Value) {
    if std::env::var_os("TETHER_WRITE_GOLDEN").is_some() {
        let path = fixture_path(F, name, "json");
        let text = serde_json::to_string_pretty(state).unwrap() + "\n";
        std::fs::write(&path, text).unwrap();
    }
}

/// A turn's bytes: the text of its text-like deltas (text, thinking, partial JSON, as decoded),
/// and the data of every other event that a snapshot keeps (all but text-like deltas and pings).
fn turn_bytes(bytes: &Bytes) -> (usize, usize) {
    let text = std::str::from_utf8(bytes).unwrap();
    let mut out = (0, 0);
    for data in text.lines().filter_map(|l| l.strip_prefix("data: ")) {
        let v: Value = serde_json::from_str(data).unwrap();
        let d = &v["delta"];
        let fragment = ["text", "thinking", "partial_json"].iter().find_map(|k| {
            d[*k]
                .as_str()
                .filter(|_| v["type"] == "content_block_delta")
        });
        match (fragment, v["type"].as_str()) {
            (Some(f), _) => out.0 += f.len(),
            (None, Some("ping")) => {}
            (None, _) => out.1 += data.len(),
        }
    }
    out
}

#[test]
fn the_fixtures_reduce_to_their_golden_state_from_the_stream_and_from_the_snapshot() {
    // Events in each fixture, and how many its snapshot keeps: pings dropped, runs of one block's
    // text-like deltas merged into one.
    for (name, events, kept) in [
        ("tool_use_and_text", 22, 9),
        ("thinking_and_citations", 17, 12),
        ("overloaded_error", 7, 4),
        ("cut_before_stop", 6, 3),
    ] {
        let bytes = fixture(F, name);
        assert_eq!(count_events(&bytes), events, "{name}");
        let (run, ingest, _) = record(FormatChoice::Auto, &[bytes]);
        assert_eq!(
            ingest.format(),
            Some(F),
            "{name}: detected from message_start"
        );
        let full = Anthropic::of(&events_after(&run, 0)).to_json();
        write_golden_if_asked(name, &full);
        let golden = golden(F, name);
        assert_eq!(full, golden, "{name}: the stream");
        let (_, snap, _) = snapshot(&run);
        assert_eq!(
            Anthropic::of(&snap).to_json(),
            golden,
            "{name}: the snapshot"
        );
        assert_eq!(snap.len(), kept, "{name}: {snap:#?}");
    }
}

#[test]
fn headers_name_no_anthropic_stream_and_the_first_event_does() {
    let header = |name: &str| match name {
        "content-type" => Some("text/event-stream".to_string()),
        "anthropic-version" => Some("2023-06-01".to_string()),
        _ => None,
    };
    assert_eq!(tether::record::format::detect_from_headers(header), None);
    for name in ["tool_use_and_text", "overloaded_error"] {
        let first = fixture(F, name);
        let (_, ingest, _) = record(FormatChoice::Auto, &[first.slice(..first.len().min(400))]);
        assert_eq!(ingest.format(), Some(F), "{name}");
    }
    // An error before message_start: the API's `event: error` is recognized too.
    let err = Bytes::from_static(
        b"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n",
    );
    let (_, ingest, _) = record(FormatChoice::Auto, &[err]);
    assert_eq!(ingest.format(), Some(F));
    let v = ingest.verdict(tether::ingest::Ending::Clean);
    assert!(!v.persisted);
    assert_eq!(v.reason.map(|r| r.as_str()), Some("error_event"));
}

#[test]
fn the_verdict_of_each_fixture() {
    for (name, persisted, reason) in ALL {
        let (_, ingest, _) = record(FormatChoice::Fixed(F), &[fixture(F, name)]);
        let v = ingest.verdict(tether::ingest::Ending::Clean);
        assert_eq!(v.persisted, persisted, "{name}");
        assert_eq!(v.reason.map(|r| r.as_str()), reason, "{name}");
    }
    // An error event fails the turn even when message_stop follows it.
    let mut bytes = fixture(F, "overloaded_error").to_vec();
    bytes.extend_from_slice(b"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n");
    let (_, ingest, _) = record(FormatChoice::Fixed(F), &[Bytes::from(bytes)]);
    let v = ingest.verdict(tether::ingest::Ending::Clean);
    assert!(!v.persisted);
    assert_eq!(v.reason.map(|r| r.as_str()), Some("error_event"));
}

#[test]
fn the_fixtures_recover_at_every_read_boundary_of_a_byte_level_split() {
    for (name, _, _) in ALL {
        let bytes = fixture(F, name);
        let cuts: Vec<usize> = (1..bytes.len()).step_by(13).collect();
        let full = check_recovery::<Anthropic>(F, &bytes, &cuts);
        assert_eq!(full.to_json(), golden(F, name), "{name}");
    }
}

#[test]
fn frames_carry_the_sse_name_as_the_type_and_event_name_when_they_differ() {
    let bytes = Bytes::from_static(
        b"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"content\":[]}}\n\n\
          event: ping\ndata: {\"type\": \"ping\"}\n\n\
          event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"a\"}}\n\n\
          event: renamed\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n\
          event: error\ndata: overloaded\n\n",
    );
    let (run, _, _) = record(FormatChoice::Fixed(F), &[bytes]);
    let read = run.read_after(0, usize::MAX).unwrap();
    let frames: Vec<Value> = read
        .frames
        .iter()
        .map(|f| parse_frame(std::str::from_utf8(f).unwrap()).unwrap().json)
        .collect();
    assert_eq!(frames.len(), 5, "a ping is sent live: {frames:#?}");
    for (f, name) in frames[..3]
        .iter()
        .zip(["message_start", "ping", "content_block_delta"])
    {
        assert_eq!(f["type"], "STREAM_EVENT");
        assert_eq!(f["event"]["type"], name);
        assert!(f.get("event_name").is_none(), "{f}");
    }
    assert_eq!(frames[3]["event"]["type"], "content_block_stop");
    assert_eq!(frames[3]["event_name"], "renamed");
    // Data that is not JSON is wrapped as RAW and keeps its name.
    assert_eq!(frames[4]["event"]["type"], "RAW");
    assert_eq!(frames[4]["event_name"], "error");
}

/// A text with JSON escapes and multi-byte characters.
fn arb_text() -> impl Strategy<Value = String> {
    "[a-z \u{e9}\u{1F600}\u{65E5}\"\\\\\n\t{}:,]{0,6}"
}

/// One event after the fixed opening (message_start, then blocks 0 text, 1 tool_use,
/// 2 thinking): deltas of every kind for any of the blocks, and events that never merge.
fn arb_event() -> impl Strategy<Value = Value> {
    let index = 0u64..3;
    let delta = |i: u64, d: Value| json!({"type":"content_block_delta","index":i,"delta":d});
    prop_oneof![
        4 => (index.clone(), arb_text())
            .prop_map(move |(i, t)| delta(i, json!({"type":"text_delta","text":t}))),
        3 => (index.clone(), arb_text())
            .prop_map(move |(i, t)| delta(i, json!({"type":"input_json_delta","partial_json":t}))),
        3 => (index.clone(), arb_text())
            .prop_map(move |(i, t)| delta(i, json!({"type":"thinking_delta","thinking":t}))),
        1 => (index.clone(), arb_text())
            .prop_map(move |(i, t)| delta(i, json!({"type":"signature_delta","signature":t}))),
        1 => index.clone().prop_map(move |i| delta(
            i,
            json!({"type":"citations_delta","citation":{"type":"char_location","cited_text":"c","document_index":0,"start_char_index":0,"end_char_index":1}})
        )),
        // A text delta carrying more than its text: verbatim.
        1 => (index.clone(), arb_text()).prop_map(|(i, t)| json!({
            "type":"content_block_delta","index":i,"delta":{"type":"text_delta","text":t},"extra":1
        })),
        2 => Just(json!({"type":"ping"})),
        1 => index.prop_map(|i| json!({"type":"content_block_stop","index":i})),
        1 => (0u64..500).prop_map(|n| json!({
            "type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":n}
        })),
    ]
}

/// The event as upstream bytes; `escape` writes `é` and `😀` as `\u` escapes (the JSON value is
/// the same).
fn wire(e: &Value, escape: bool) -> String {
    let mut data = e.to_string();
    if escape {
        data = data
            .replace('\u{e9}', "\\u00e9")
            .replace('\u{1F600}', "\\ud83d\\ude00");
    }
    format!("event: {}\ndata: {data}\n\n", e["type"].as_str().unwrap())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn any_sequence_split_anywhere_recovers_from_every_snapshot(
        events in proptest::collection::vec((arb_event(), any::<bool>()), 0..24),
        stop in any::<bool>(),
        cuts in proptest::collection::vec(0usize..4000, 0..12),
    ) {
        let mut all = vec![
            json!({"type":"message_start","message":{"id":"m","type":"message","role":"assistant","content":[],"usage":{"input_tokens":1,"output_tokens":1}}}),
            json!({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}),
            json!({"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"t","name":"f","input":{}}}),
            json!({"type":"content_block_start","index":2,"content_block":{"type":"thinking","thinking":"","signature":""}}),
        ];
        let mut bytes: String = all.iter().map(|e| wire(e, false)).collect();
        for (e, escape) in &events {
            bytes.push_str(&wire(e, *escape));
            all.push(e.clone());
        }
        if stop {
            let e = json!({"type":"message_stop"});
            bytes.push_str(&wire(&e, false));
            all.push(e);
        }
        let bytes = Bytes::from(bytes);
        let cuts = cuts_within(cuts, bytes.len());
        let full = check_recovery::<Anthropic>(F, &bytes, &cuts);
        prop_assert_eq!(&full, &Anthropic::of(&all));
        let (run, ingest, _) = record(FormatChoice::Auto, &[bytes]);
        prop_assert_eq!(ingest.format(), Some(F));
        prop_assert_eq!(ingest.verdict(tether::ingest::Ending::Clean).persisted, stop);
        let (_, snap, _) = snapshot(&run);
        prop_assert_eq!(Anthropic::of(&snap), full);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_killed_mid_turn_recovers_the_whole_answer_compactly() {
    for (name, persisted, reason) in ALL {
        let bytes = fixture(F, name);
        let n = count_events(&bytes);
        let golden = golden(F, name);
        // The snapshot holds the text once (escapes allowed for), the events it keeps verbatim,
        // and one delta event per merged run (at most 4 per fixture).
        let (text, kept) = turn_bytes(&bytes);
        let bound = text * 6 / 5 + kept + 4 * 100;
        for cut in [0, 1, n / 2, n.saturating_sub(1), n] {
            let expect = Expect { persisted, reason };
            let (r, size) = kill_and_recover::<Anthropic>(F, name, vec![], cut, expect).await;
            assert_eq!(r.to_json(), golden, "{name}: cut after {cut} events");
            assert!(size <= bound, "{name}: snapshot of {size} bytes > {bound}");
        }
    }
    assert!(COMPLETE
        .iter()
        .all(|c| ALL.iter().any(|(n, p, _)| n == c && *p)));
}
