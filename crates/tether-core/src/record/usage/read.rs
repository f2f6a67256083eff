//! The readers of each format's usage frames: typed, lenient serde passes over one event's JSON
//! (members not named here are skipped without being built; a member of an unexpected JSON type
//! reads as absent and hides nothing else), run only for the events [`Meter::observe`] picks.

use serde::de::{Deserializer, IgnoredAny};
use serde::Deserialize;

use super::{InputParts, Meter, Usage, UsagePointers};
use crate::record::format::Event;

/// The OpenAI Responses events read: the first names the model, the others end the response
/// with its usage.
pub(super) const RESPONSES_TYPES: &[&[u8]] = &[
    b"response.created",
    b"response.completed",
    b"response.incomplete",
    b"response.failed",
];

/// A member read leniently: `None` when absent, `null` or of another shape than `T`.
struct Lenient<T>(Option<T>);

impl<T> Default for Lenient<T> {
    fn default() -> Self {
        Lenient(None)
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Lenient<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Or<T> {
            Got(T),
            Other(IgnoredAny),
        }
        Ok(Lenient(match Or::<T>::deserialize(d)? {
            Or::Got(t) => Some(t),
            Or::Other(_) => None,
        }))
    }
}

/// The event's JSON read as `T`; `None` when it is not a JSON object `T` can take (a repeated
/// member, say).
fn parse<'a, T: Deserialize<'a>>(ev: &'a Event) -> Option<T> {
    serde_json::from_slice(&ev.json).ok()
}

#[derive(Deserialize)]
struct Cached {
    #[serde(default)]
    cached_tokens: Lenient<u64>,
}

#[derive(Deserialize)]
struct Reasoning {
    #[serde(default)]
    reasoning_tokens: Lenient<u64>,
}

#[derive(Deserialize)]
struct ChatChunk {
    #[serde(default)]
    model: Lenient<String>,
    #[serde(default)]
    usage: Lenient<ChatUsage>,
    #[serde(default)]
    choices: Lenient<Vec<Lenient<ChatChoice>>>,
}

#[derive(Deserialize)]
struct ChatUsage {
    #[serde(default)]
    prompt_tokens: Lenient<u64>,
    #[serde(default)]
    completion_tokens: Lenient<u64>,
    #[serde(default)]
    prompt_tokens_details: Lenient<Cached>,
    #[serde(default)]
    completion_tokens_details: Lenient<Reasoning>,
}

#[derive(Deserialize)]
struct ChatChoice {
    #[serde(default)]
    finish_reason: Lenient<String>,
}

/// An OpenAI Chat chunk: its `model`; its `usage` (final in the chunk with no choices that
/// `include_usage` adds, or in a chunk that finishes; a running count in the chunks of servers
/// that report usage on every chunk); a choice's `finish_reason`.
pub(super) fn openai_chat(ev: &Event, m: &mut Meter) {
    let Some(chunk) = parse::<ChatChunk>(ev) else {
        return;
    };
    m.read_one();
    m.name_model(chunk.model.0);
    let choices = chunk.choices.0.unwrap_or_default();
    let no_choices = choices.is_empty();
    let reason = choices
        .into_iter()
        .find_map(|c| c.0.and_then(|c| c.finish_reason.0));
    let finishes = reason.is_some();
    m.finish_reason(reason);
    let Some(u) = chunk.usage.0 else { return };
    m.usage.absorb(Usage {
        input_tokens: u.prompt_tokens.0,
        output_tokens: u.completion_tokens.0,
        cached_input_tokens: u.prompt_tokens_details.0.and_then(|d| d.cached_tokens.0),
        reasoning_tokens: u
            .completion_tokens_details
            .0
            .and_then(|d| d.reasoning_tokens.0),
        model: None,
    });
    // OpenAI's usage chunk has an empty `choices`; a chunk that also finishes carries the final
    // count too (servers that send usage with the finish reason).
    m.complete |= no_choices || finishes;
}

#[derive(Deserialize)]
struct ResponsesEvent {
    #[serde(rename = "type", default)]
    ty: Lenient<String>,
    #[serde(default)]
    response: Option<Response>,
}

#[derive(Deserialize)]
struct Response {
    #[serde(default)]
    model: Lenient<String>,
    #[serde(default)]
    status: Lenient<String>,
    #[serde(default)]
    incomplete_details: Lenient<Incomplete>,
    #[serde(default)]
    usage: Lenient<ResponsesUsage>,
}

#[derive(Deserialize)]
struct Incomplete {
    #[serde(default)]
    reason: Lenient<String>,
}

#[derive(Deserialize)]
struct ResponsesUsage {
    #[serde(default)]
    input_tokens: Lenient<u64>,
    #[serde(default)]
    output_tokens: Lenient<u64>,
    #[serde(default)]
    input_tokens_details: Lenient<Cached>,
    #[serde(default)]
    output_tokens_details: Lenient<Reasoning>,
}

/// An OpenAI Responses lifecycle event: the model of `response.created`, and the usage, status
/// and incomplete reason of the event that ends the response.
pub(super) fn openai_responses(ev: &Event, m: &mut Meter) {
    let Some(e) = parse::<ResponsesEvent>(ev) else {
        return;
    };
    m.read_one();
    let Some(r) = e.response else { return };
    m.name_model(r.model.0);
    if e.ty.0.as_deref() == Some("response.created") {
        return;
    }
    m.complete = true;
    let incomplete = r.incomplete_details.0.and_then(|d| d.reason.0);
    m.finish_reason(incomplete.or(r.status.0));
    if let Some(u) = r.usage.0 {
        m.usage.absorb(Usage {
            input_tokens: u.input_tokens.0,
            output_tokens: u.output_tokens.0,
            cached_input_tokens: u.input_tokens_details.0.and_then(|d| d.cached_tokens.0),
            reasoning_tokens: u.output_tokens_details.0.and_then(|d| d.reasoning_tokens.0),
            model: None,
        });
    }
}

#[derive(Deserialize)]
struct AnthropicEvent {
    #[serde(rename = "type", default)]
    ty: Lenient<String>,
    #[serde(default)]
    message: Lenient<Message>,
    #[serde(default)]
    usage: Lenient<AnthropicUsage>,
    #[serde(default)]
    delta: Lenient<StopReason>,
}

#[derive(Deserialize)]
struct Message {
    #[serde(default)]
    model: Lenient<String>,
    #[serde(default)]
    usage: Lenient<AnthropicUsage>,
}

#[derive(Deserialize)]
struct AnthropicUsage {
    #[serde(default)]
    input_tokens: Lenient<u64>,
    #[serde(default)]
    cache_creation_input_tokens: Lenient<u64>,
    #[serde(default)]
    cache_read_input_tokens: Lenient<u64>,
    #[serde(default)]
    output_tokens: Lenient<u64>,
}

#[derive(Deserialize)]
struct StopReason {
    #[serde(default)]
    stop_reason: Lenient<String>,
}

/// An Anthropic `message_start` (model; input and cache counts, final; an output count that
/// grows) or `message_delta` (cumulative counts, the output's final in the last one; the stop
/// reason).
pub(super) fn anthropic(ev: &Event, m: &mut Meter) {
    let Some(e) = parse::<AnthropicEvent>(ev) else {
        return;
    };
    m.read_one();
    let (usage, delta) = match e.ty.0.as_deref() {
        Some("message_start") => {
            let Some(msg) = e.message.0 else { return };
            m.name_model(msg.model.0);
            (msg.usage.0, false)
        }
        Some("message_delta") => {
            m.finish_reason(e.delta.0.and_then(|d| d.stop_reason.0));
            (e.usage.0, true)
        }
        _ => return,
    };
    let Some(u) = usage else { return };
    let reported = InputParts {
        uncached: u.input_tokens.0,
        cache_write: u.cache_creation_input_tokens.0,
        cache_read: u.cache_read_input_tokens.0,
    };
    let parts = &mut m.parts;
    parts.uncached = reported.uncached.or(parts.uncached);
    parts.cache_write = reported.cache_write.or(parts.cache_write);
    parts.cache_read = reported.cache_read.or(parts.cache_read);
    let (input, cached) = (parts.total(), parts.cache_read);
    m.usage.absorb(Usage {
        input_tokens: input,
        output_tokens: u.output_tokens.0,
        cached_input_tokens: cached,
        reasoning_tokens: None,
        model: None,
    });
    m.complete |= delta && u.output_tokens.0.is_some();
}

/// The AI SDK's `finish` chunk: its `finishReason`.
pub(super) fn ai_sdk_finish(ev: &Event, m: &mut Meter) {
    #[derive(Deserialize)]
    struct Finish {
        #[serde(rename = "finishReason", default)]
        finish_reason: Lenient<String>,
    }
    if let Some(f) = parse::<Finish>(ev) {
        m.read_one();
        m.finish_reason(f.finish_reason.0);
    }
}

/// The event a route's `usage` setting names: each pointer's value (a non-negative integer for
/// a count, a string for the model). The event is the run's usage frame.
pub(super) fn pointers(ev: &Event, p: &UsagePointers, m: &mut Meter) {
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(&ev.json) else {
        return;
    };
    m.read_one();
    let count = |ptr: &Option<String>| {
        ptr.as_deref()
            .and_then(|ptr| v.pointer(ptr))
            .and_then(serde_json::Value::as_u64)
    };
    let model = p
        .model
        .as_deref()
        .and_then(|ptr| v.pointer(ptr))
        .and_then(serde_json::Value::as_str)
        .map(str::to_string);
    m.name_model(model);
    m.usage.absorb(Usage {
        input_tokens: count(&p.input_tokens),
        output_tokens: count(&p.output_tokens),
        cached_input_tokens: count(&p.cached_input_tokens),
        reasoning_tokens: count(&p.reasoning_tokens),
        model: None,
    });
    m.complete = true;
}
