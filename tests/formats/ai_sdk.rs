//! The Vercel AI SDK UI message stream: `text-delta` / `reasoning-delta` merge by `id`,
//! `tool-input-delta` by `toolCallId`; everything else is verbatim. A turn is complete when
//! `finish` came before `[DONE]`; an `error` chunk fails it.

use std::collections::BTreeMap;

use bytes::Bytes;
use proptest::prelude::*;
use serde_json::{json, Map, Value};
use tether::format::{detect_from_headers, FormatChoice, FormatKind};

use crate::common::*;
use crate::support::parse_frame;

const F: FormatKind = FormatKind::AiSdk;

/// The fixtures, and how each ends: `(name, persisted, reason)`.
const FIXTURES: [(&str, bool, Option<&str>); 4] = [
    ("weather_tool_call", true, None),
    ("interleaved_parts", true, None),
    ("error_event", false, Some("error_event")),
    ("aborted_without_finish", false, Some("no_terminal_event")),
];

/// The assistant message as the AI SDK's client accumulates it (`processUIMessageStream` in
/// vercel/ai `packages/ai/src/ui/process-ui-message-stream.ts`, AI SDK 5.0.277), written from
/// that source and independent of tether's compactor: parts in order (`step-start`, `text`,
/// `reasoning`, `tool-<name>` / `dynamic-tool`, `source-*`, `file`, `data-*`), text and
/// reasoning parts found by their active `id`, tool parts by `toolCallId` in the current step,
/// message metadata deep-merged. While a tool's input streams, its part's `rawInput` is the
/// concatenated `inputTextDelta`s (as in the SDK); the part also keeps them as `inputText` after
/// that (the SDK keeps them in its partial tool call; the SDK check compares `inputText` with the
/// last `rawInput` it saw streaming).
///
/// Where the SDK would throw (a delta or end without its start), the reducer is lenient: a
/// delta opens its part, an end or output without its part is kept in `others`. Not modelled:
/// `readUIMessageStream`'s reset on a `start` with a new `messageId` (`useChat` does not reset),
/// and partial-JSON parsing of a streaming tool input (`input` is set once the text parses).
#[derive(Debug, Default, PartialEq)]
struct AiSdk {
    id: Option<Value>,
    metadata: Option<Value>,
    parts: Vec<Map<String, Value>>,
    active_text: BTreeMap<String, usize>,
    active_reasoning: BTreeMap<String, usize>,
    partial_tools: BTreeMap<String, Partial>,
    errors: Vec<Value>,
    finish_reason: Option<Value>,
    aborted: bool,
    done: bool,
    others: Vec<Value>,
}

#[derive(Debug, Default, PartialEq)]
struct Partial {
    text: String,
    tool_name: String,
    dynamic: bool,
}

/// A member as JS reads it: `None` when absent (`undefined`).
fn def(e: &Value, k: &str) -> Option<Value> {
    e.get(k).cloned()
}

/// A member that `??` would take: present and not null.
fn nn(e: &Value, k: &str) -> Option<Value> {
    e.get(k).filter(|v| !v.is_null()).cloned()
}

fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64() != Some(0.0),
        Value::String(s) => !s.is_empty(),
        _ => true,
    }
}

fn put(p: &mut Map<String, Value>, k: &str, v: Option<Value>) {
    match v {
        Some(v) => p.insert(k.to_string(), v),
        None => p.remove(k),
    };
}

/// `mergeObjects` (vercel/ai `packages/ai/src/util/merge-objects.ts`): objects merge deeply,
/// arrays and primitives are replaced.
fn merge_objects(base: &Value, over: &Value) -> Value {
    match (base, over) {
        (Value::Object(b), Value::Object(o)) => {
            let mut out = b.clone();
            for (k, v) in o {
                if matches!(k.as_str(), "__proto__" | "constructor" | "prototype") {
                    continue;
                }
                let merged = match out.get(k) {
                    Some(bv @ Value::Object(_)) if v.is_object() => merge_objects(bv, v),
                    _ => v.clone(),
                };
                out.insert(k.clone(), merged);
            }
            Value::Object(out)
        }
        _ => over.clone(),
    }
}

/// What one tool chunk sets on its part (`updateToolPart` / `updateDynamicToolPart`).
#[derive(Default)]
struct ToolUpdate {
    state: &'static str,
    call_id: Value,
    tool_name: Value,
    input: Option<Value>,
    output: Option<Value>,
    error_text: Option<Value>,
    raw_input: Option<Value>,
    preliminary: Option<Value>,
    provider_executed: Option<Value>,
    provider_metadata: Option<Value>,
}

fn part_type(p: &Map<String, Value>) -> &str {
    p.get("type").and_then(Value::as_str).unwrap_or_default()
}

fn is_tool(p: &Map<String, Value>, dynamic: bool) -> bool {
    if dynamic {
        part_type(p) == "dynamic-tool"
    } else {
        part_type(p).starts_with("tool-")
    }
}

impl AiSdk {
    /// The index where the current step's parts start (after the last `step-start`).
    fn step_start(&self) -> usize {
        self.parts
            .iter()
            .rposition(|p| part_type(p) == "step-start")
            .map_or(0, |i| i + 1)
    }

    /// A tool part of the current step.
    fn step_tool(&self, call_id: &Value, dynamic: bool) -> Option<usize> {
        let from = self.step_start();
        (from..self.parts.len())
            .find(|&i| is_tool(&self.parts[i], dynamic) && self.parts[i]["toolCallId"] == *call_id)
    }

    /// `getToolInvocation` / `getDynamicToolInvocation`: the current step first, then the
    /// latest in the message.
    fn find_tool(&self, call_id: &Value, dynamic: bool) -> Option<usize> {
        self.step_tool(call_id, dynamic).or_else(|| {
            (0..self.parts.len()).rev().find(|&i| {
                is_tool(&self.parts[i], dynamic) && self.parts[i]["toolCallId"] == *call_id
            })
        })
    }

    fn update_tool(&mut self, dynamic: bool, u: ToolUpdate, existing: Option<usize>) {
        match existing.or_else(|| self.step_tool(&u.call_id, dynamic)) {
            Some(i) => {
                let p = &mut self.parts[i];
                p.insert("state".into(), json!(u.state));
                if dynamic {
                    p.insert("toolName".into(), u.tool_name);
                }
                put(p, "input", u.input);
                put(p, "output", u.output);
                put(p, "errorText", u.error_text);
                put(p, "rawInput", u.raw_input);
                put(p, "preliminary", u.preliminary);
                if let Some(pe) = u.provider_executed {
                    p.insert("providerExecuted".into(), pe);
                }
                if let Some(pm) = u.provider_metadata {
                    if u.state == "input-available" {
                        p.insert("callProviderMetadata".into(), pm);
                    }
                }
            }
            None => {
                let mut p = Map::new();
                if dynamic {
                    p.insert("type".into(), json!("dynamic-tool"));
                    p.insert("toolName".into(), u.tool_name);
                } else {
                    let name = u.tool_name.as_str().unwrap_or_default();
                    p.insert("type".into(), json!(format!("tool-{name}")));
                }
                p.insert("toolCallId".into(), u.call_id);
                p.insert("state".into(), json!(u.state));
                put(&mut p, "input", u.input);
                put(&mut p, "output", u.output);
                if !dynamic {
                    put(&mut p, "rawInput", u.raw_input);
                }
                put(&mut p, "errorText", u.error_text);
                put(&mut p, "providerExecuted", u.provider_executed);
                put(&mut p, "preliminary", u.preliminary);
                put(&mut p, "callProviderMetadata", u.provider_metadata);
                self.parts.push(p);
            }
        }
    }

    fn update_metadata(&mut self, m: Option<Value>) {
        if let Some(m) = m {
            self.metadata = Some(match &self.metadata {
                Some(base) => merge_objects(base, &m),
                None => m,
            });
        }
    }

    /// `text-start` / `reasoning-start`.
    fn start_part(&mut self, e: &Value, ty: &str) {
        let mut p = Map::new();
        p.insert("type".into(), json!(ty));
        if ty == "reasoning" {
            put(&mut p, "id", def(e, "id"));
        }
        p.insert("text".into(), json!(""));
        put(&mut p, "providerMetadata", def(e, "providerMetadata"));
        p.insert("state".into(), json!("streaming"));
        self.parts.push(p);
        let at = self.parts.len() - 1;
        let id = e["id"].as_str().unwrap_or_default().to_string();
        self.active(ty).insert(id, at);
    }

    fn active(&mut self, ty: &str) -> &mut BTreeMap<String, usize> {
        if ty == "text" {
            &mut self.active_text
        } else {
            &mut self.active_reasoning
        }
    }

    /// `text-delta` / `reasoning-delta`; a delta without its start opens its part.
    fn delta_part(&mut self, e: &Value, ty: &str) {
        let id = e["id"].as_str().unwrap_or_default().to_string();
        let at = match self.active(ty).get(&id) {
            Some(&at) => at,
            None => {
                self.start_part(&json!({"id": id}), ty);
                self.parts.len() - 1
            }
        };
        let p = &mut self.parts[at];
        let text = format!(
            "{}{}",
            p["text"].as_str().unwrap_or_default(),
            e["delta"].as_str().unwrap_or_default()
        );
        p.insert("text".into(), json!(text));
        if let Some(pm) = nn(e, "providerMetadata") {
            p.insert("providerMetadata".into(), pm);
        }
    }

    /// `text-end` / `reasoning-end`.
    fn end_part(&mut self, e: &Value, ty: &str) {
        let id = e["id"].as_str().unwrap_or_default().to_string();
        let Some(at) = self.active(ty).remove(&id) else {
            self.others.push(e.clone());
            return;
        };
        let p = &mut self.parts[at];
        p.insert("state".into(), json!("done"));
        if let Some(pm) = nn(e, "providerMetadata") {
            p.insert("providerMetadata".into(), pm);
        }
    }

    fn tool_chunk(&mut self, e: &Value, ty: &str) {
        let call_id = e["toolCallId"].clone();
        let id = call_id.as_str().unwrap_or_default().to_string();
        let dynamic = e.get("dynamic").is_some_and(truthy);
        let base = |state| ToolUpdate {
            state,
            call_id: call_id.clone(),
            tool_name: e["toolName"].clone(),
            provider_executed: nn(e, "providerExecuted"),
            ..ToolUpdate::default()
        };
        match ty {
            "tool-input-start" => {
                self.partial_tools.insert(
                    id,
                    Partial {
                        text: String::new(),
                        tool_name: e["toolName"].as_str().unwrap_or_default().to_string(),
                        dynamic,
                    },
                );
                self.update_tool(dynamic, base("input-streaming"), None);
                if let Some(i) = self.step_tool(&call_id, dynamic) {
                    self.parts[i].insert("inputText".into(), json!(""));
                }
            }
            "tool-input-delta" => {
                // A delta without its start opens an unnamed partial call.
                let partial = self.partial_tools.entry(id).or_default();
                partial.text += e["inputTextDelta"].as_str().unwrap_or_default();
                let (text, name, dynamic) = (
                    partial.text.clone(),
                    partial.tool_name.clone(),
                    partial.dynamic,
                );
                let u = ToolUpdate {
                    state: "input-streaming",
                    call_id: call_id.clone(),
                    tool_name: json!(name),
                    // The SDK parses partial JSON; this reducer keeps only a complete parse.
                    input: serde_json::from_str(&text).ok(),
                    raw_input: Some(json!(text)),
                    ..ToolUpdate::default()
                };
                self.update_tool(dynamic, u, None);
                if let Some(i) = self.step_tool(&call_id, dynamic) {
                    self.parts[i].insert("inputText".into(), json!(text));
                }
            }
            "tool-input-available" => {
                let u = ToolUpdate {
                    input: def(e, "input"),
                    provider_metadata: nn(e, "providerMetadata"),
                    ..base("input-available")
                };
                self.update_tool(dynamic, u, None);
            }
            "tool-input-error" => {
                let u = if dynamic {
                    ToolUpdate {
                        input: def(e, "input"),
                        ..base("output-error")
                    }
                } else {
                    ToolUpdate {
                        raw_input: def(e, "input"),
                        ..base("output-error")
                    }
                };
                let u = ToolUpdate {
                    error_text: def(e, "errorText"),
                    provider_metadata: nn(e, "providerMetadata"),
                    ..u
                };
                self.update_tool(dynamic, u, None);
            }
            "tool-output-available" | "tool-output-error" => {
                let Some(at) = self.find_tool(&call_id, dynamic) else {
                    self.others.push(e.clone());
                    return;
                };
                let p = &self.parts[at];
                let mut u = ToolUpdate {
                    call_id: call_id.clone(),
                    tool_name: if dynamic {
                        p["toolName"].clone()
                    } else {
                        json!(part_type(p).trim_start_matches("tool-"))
                    },
                    input: def(&Value::Object(p.clone()), "input"),
                    ..ToolUpdate::default()
                };
                if !dynamic {
                    u.provider_executed = nn(e, "providerExecuted");
                }
                if ty == "tool-output-available" {
                    u.state = "output-available";
                    u.output = def(e, "output");
                    u.preliminary = def(e, "preliminary");
                } else {
                    u.state = "output-error";
                    u.error_text = def(e, "errorText");
                    if !dynamic {
                        u.raw_input = def(&Value::Object(p.clone()), "rawInput");
                    }
                }
                self.update_tool(dynamic, u, Some(at));
            }
            _ => self.others.push(e.clone()),
        }
    }

    /// A `data-*` chunk: transient ones are not kept; one with an `id` replaces the data of the
    /// part of its type and id.
    fn data_chunk(&mut self, e: &Value, ty: &str) {
        if e.get("transient").is_some_and(truthy) {
            return;
        }
        let id = nn(e, "id");
        let existing = id.as_ref().and_then(|id| {
            self.parts
                .iter()
                .position(|p| part_type(p) == ty && p.get("id") == Some(id))
        });
        match existing {
            Some(i) => {
                put(&mut self.parts[i], "data", def(e, "data"));
            }
            None => self.parts.push(e.as_object().cloned().unwrap_or_default()),
        }
    }
}

impl Reducer for AiSdk {
    fn apply(&mut self, e: &Value) {
        let ty = e["type"].as_str().unwrap_or_default();
        match ty {
            "start" => {
                if let Some(id) = nn(e, "messageId") {
                    self.id = Some(id);
                }
                self.update_metadata(nn(e, "messageMetadata"));
            }
            "finish" => {
                if let Some(r) = nn(e, "finishReason") {
                    self.finish_reason = Some(r);
                }
                self.update_metadata(nn(e, "messageMetadata"));
            }
            "message-metadata" => self.update_metadata(nn(e, "messageMetadata")),
            "error" => self.errors.push(e["errorText"].clone()),
            "abort" => self.aborted = true,
            "start-step" => {
                let mut p = Map::new();
                p.insert("type".into(), json!("step-start"));
                self.parts.push(p);
            }
            "finish-step" => {
                self.active_text.clear();
                self.active_reasoning.clear();
            }
            // AI SDK 6+: removes the current step's parts (the `step-start` stays).
            "reset-step" => {
                let from = self.step_start();
                self.parts.truncate(from);
                self.active_text.clear();
                self.active_reasoning.clear();
                self.partial_tools.clear();
            }
            "text-start" => self.start_part(e, "text"),
            "text-delta" => self.delta_part(e, "text"),
            "text-end" => self.end_part(e, "text"),
            "reasoning-start" => self.start_part(e, "reasoning"),
            "reasoning-delta" => self.delta_part(e, "reasoning"),
            "reasoning-end" => self.end_part(e, "reasoning"),
            "file" => {
                let mut p = Map::new();
                p.insert("type".into(), json!("file"));
                put(&mut p, "mediaType", def(e, "mediaType"));
                put(&mut p, "url", def(e, "url"));
                self.parts.push(p);
            }
            "source-url" | "source-document" => {
                let mut p = Map::new();
                p.insert("type".into(), json!(ty));
                let keys: &[&str] = if ty == "source-url" {
                    &["sourceId", "url", "title", "providerMetadata"]
                } else {
                    &[
                        "sourceId",
                        "mediaType",
                        "title",
                        "filename",
                        "providerMetadata",
                    ]
                };
                for k in keys {
                    put(&mut p, k, def(e, k));
                }
                self.parts.push(p);
            }
            t if t.starts_with("tool-input-") || t.starts_with("tool-output-") => {
                self.tool_chunk(e, t)
            }
            t if t.starts_with("data-") => self.data_chunk(e, t),
            "RAW" if e["event"]["data"] == "[DONE]" => self.done = true,
            _ => self.others.push(e.clone()),
        }
    }

    fn to_json(&self) -> Value {
        let mut message = Map::new();
        message.insert("id".into(), self.id.clone().unwrap_or(json!("")));
        put(&mut message, "metadata", self.metadata.clone());
        message.insert("parts".into(), json!(self.parts));
        json!({
            "message": message,
            "errors": self.errors,
            "finishReason": self.finish_reason,
            "aborted": self.aborted,
            "done": self.done,
            "others": self.others,
        })
    }
}

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
    use tether::journal::EndReason;
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
