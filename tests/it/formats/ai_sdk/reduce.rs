//! The AI SDK client's accumulation of a UI message stream, written from its source, for the
//! format tests to reduce both the upstream stream and tether's snapshots with.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use crate::formats::common::*;

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
pub(super) struct AiSdk {
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
