//! openai-python's accumulation of a Chat Completions stream, written from its source, for the
//! format tests to reduce both the upstream stream and tether's snapshots with.

use serde_json::{json, Map, Value};

use crate::formats::common::*;

/// What openai-python's `ChatCompletionStreamState` accumulates (a port of its
/// `_accumulate_chunk` and of `accumulate_delta`, written from their source), plus what its
/// `Stream` does around the chunks: it stops at `[DONE]` and raises on an `error` object.
#[derive(Debug, Default, PartialEq)]
pub struct Chat {
    /// The completion snapshot (`ParsedChatCompletionSnapshot` as a dict).
    snapshot: Option<Value>,
    /// `[DONE]` arrived; later events are not read.
    done: bool,
    /// The `error` objects, in order.
    errors: Vec<Value>,
    /// Events that are none of the above (RAW data, objects without `choices`).
    others: Vec<Value>,
}

/// Python truthiness of a JSON value.
fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64() != Some(0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}

fn has_indexed_entries(v: &Value) -> bool {
    v.as_array()
        .is_some_and(|a| a.iter().any(|e| e.get("index").is_some()))
}

/// openai-python's `accumulate_delta` (src/openai/lib/streaming/_deltas.py).
fn accumulate(acc: &mut Map<String, Value>, delta: &Map<String, Value>) {
    for (key, dv) in delta {
        if acc.get(key).is_none_or(Value::is_null) {
            if has_indexed_entries(dv) {
                acc.insert(key.clone(), json!([]));
            } else {
                acc.insert(key.clone(), dv.clone());
                continue;
            }
        }
        if key == "index" || key == "type" {
            acc.insert(key.clone(), dv.clone());
            continue;
        }
        let Some(av) = acc.get_mut(key) else { continue };
        match (av, dv) {
            (Value::String(a), Value::String(d)) => a.push_str(d),
            (Value::Number(a), Value::Number(d)) => {
                *a = match (a.as_i64(), d.as_i64()) {
                    (Some(x), Some(y)) => (x + y).into(),
                    _ => serde_json::Number::from_f64(a.as_f64().unwrap() + d.as_f64().unwrap())
                        .unwrap(),
                }
            }
            (Value::Object(a), Value::Object(d)) => accumulate(a, d),
            (Value::Array(a), Value::Array(d)) => {
                let scalars = a.iter().all(|x| x.is_string() || x.is_number());
                if scalars && (!a.is_empty() || !has_indexed_entries(dv)) {
                    a.extend(d.iter().cloned());
                    continue;
                }
                for entry in d {
                    let i = entry["index"].as_u64().expect("an indexed entry") as usize;
                    match a.get_mut(i) {
                        Some(Value::Object(e)) => accumulate(e, entry.as_object().unwrap()),
                        Some(_) => panic!("not handled yet"),
                        // Python's `list.insert` past the end appends.
                        None => a.push(entry.clone()),
                    }
                }
            }
            _ => {}
        }
    }
}

fn message_of(delta: &Value) -> Value {
    let mut m = Map::new();
    if let Some(d) = delta.as_object() {
        accumulate(&mut m, d);
    }
    Value::Object(m)
}

/// A chunk's choice as a new choice snapshot: its members but `delta`, and the message.
fn new_choice(choice: &Value) -> Value {
    let mut c = choice.as_object().cloned().unwrap_or_default();
    c.remove("delta");
    c.insert("message".into(), message_of(&choice["delta"]));
    Value::Object(c)
}

impl Chat {
    fn chunk(&mut self, chunk: &Value) {
        let Some(snap) = &mut self.snapshot else {
            // `_convert_initial_chunk_into_snapshot`.
            let mut snap = chunk.as_object().cloned().unwrap();
            snap.remove("obfuscation");
            snap.entry("system_fingerprint").or_insert(Value::Null);
            snap.insert("object".into(), json!("chat.completion"));
            let choices = snap["choices"].as_array_mut().unwrap();
            for (at, choice) in chunk["choices"].as_array().unwrap().iter().enumerate() {
                // The SDK raises IndexError for an index past the list; keep the choice where
                // it stands then.
                let i = choice["index"].as_u64().unwrap() as usize;
                let i = if i < choices.len() { i } else { at };
                choices[i] = new_choice(choice);
            }
            self.snapshot = Some(Value::Object(snap));
            return;
        };
        for choice in chunk["choices"].as_array().unwrap() {
            let i = choice["index"].as_u64().unwrap() as usize;
            let choices = snap["choices"].as_array_mut().unwrap();
            let cs = if i < choices.len() {
                let cs = &mut choices[i];
                let mut message = cs["message"].as_object().cloned().unwrap_or_default();
                if let Some(d) = choice["delta"].as_object() {
                    accumulate(&mut message, d);
                }
                cs["message"] = Value::Object(message);
                cs
            } else {
                choices.push(new_choice(choice));
                choices.last_mut().unwrap()
            };
            if truthy(&choice["finish_reason"]) {
                cs["finish_reason"] = choice["finish_reason"].clone();
            }
            let lp = &choice["logprobs"];
            if !lp.is_null() {
                if cs["logprobs"].is_null() {
                    cs["logprobs"] = json!({"content": lp["content"], "refusal": lp["refusal"]});
                } else {
                    for k in ["content", "refusal"] {
                        if truthy(&lp[k]) {
                            if cs["logprobs"][k].is_null() {
                                cs["logprobs"][k] = json!([]);
                            }
                            let list = cs["logprobs"][k].as_array_mut().unwrap();
                            list.extend(lp[k].as_array().unwrap().iter().cloned());
                        }
                    }
                }
            }
        }
        snap["usage"] = chunk["usage"].clone();
        snap["system_fingerprint"] = chunk["system_fingerprint"].clone();
        if !chunk["moderation"].is_null() {
            snap["moderation"] = chunk["moderation"].clone();
        }
    }
}

impl Reducer for Chat {
    fn apply(&mut self, e: &Value) {
        if self.done {
            return;
        }
        if e["type"] == "RAW" {
            let data = e["event"]["data"].as_str().unwrap_or_default();
            if data.starts_with("[DONE]") {
                self.done = true;
            } else {
                self.others.push(e.clone());
            }
        } else if truthy(&e["error"]) {
            self.errors.push(e["error"].clone());
        } else if e["choices"].is_array() {
            self.chunk(e);
        } else {
            self.others.push(e.clone());
        }
    }

    /// The golden shape, shared with `scripts/sdk/openai_chat.py`: the completion's identity,
    /// last fingerprint and usage, and per choice the accumulated message (role, content,
    /// refusal, the `reasoning_content` some OpenAI-compatible servers add, tool calls) and
    /// finish reason.
    fn to_json(&self) -> Value {
        let s = self.snapshot.clone().unwrap_or(Value::Null);
        let choices: Vec<Value> = s["choices"]
            .as_array()
            .map(|cs| {
                cs.iter()
                    .map(|c| {
                        let m = &c["message"];
                        let calls: Option<Vec<Value>> = m["tool_calls"].as_array().map(|calls| {
                            calls
                                .iter()
                                .map(|t| {
                                    json!({"id": t["id"], "type": t["type"], "function": {
                                        "name": t["function"]["name"],
                                        "arguments": t["function"]["arguments"]}})
                                })
                                .collect()
                        });
                        json!({
                            "index": c["index"],
                            "finish_reason": c["finish_reason"],
                            "message": {
                                "role": m["role"],
                                "content": m["content"],
                                "refusal": m["refusal"],
                                "reasoning_content": m["reasoning_content"],
                                "tool_calls": calls,
                            },
                            "logprobs": c["logprobs"],
                        })
                    })
                    .collect()
            })
            .unwrap_or_default();
        json!({
            "id": s["id"],
            "model": s["model"],
            "created": s["created"],
            "service_tier": s["service_tier"],
            "system_fingerprint": s["system_fingerprint"],
            "usage": s["usage"],
            "choices": choices,
            "done": self.done,
            "errors": self.errors,
            "others": self.others,
        })
    }
}
