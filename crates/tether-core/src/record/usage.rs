//! Token usage from the provider's own frames: per run, the numbers the upstream itself
//! reported, normalised to [`Usage`], never an estimate.
//!
//! Where each format reports it (the events read, and the fields):
//!
//! | format | events | input | output | cached input | reasoning | model |
//! |---|---|---|---|---|---|---|
//! | OpenAI Chat | the chunk with a non-null `usage` ([`Event::carries_usage`]; sent when the request asked `stream_options.include_usage`) | `prompt_tokens` | `completion_tokens` | `prompt_tokens_details.cached_tokens` | `completion_tokens_details.reasoning_tokens` | `model` |
//! | OpenAI Responses | `response.completed`, `response.incomplete`, `response.failed` (and `response.created` for the model) | `response.usage.input_tokens` | `output_tokens` | `input_tokens_details.cached_tokens` | `output_tokens_details.reasoning_tokens` | `response.model` |
//! | Anthropic | `message_start` (input and cache), every `message_delta` (output, cumulative: the last wins) | `input_tokens` + `cache_creation_input_tokens` + `cache_read_input_tokens` | `output_tokens` | `cache_read_input_tokens` | — | `message.model` |
//! | AG-UI, AI SDK | the event a route's `usage` setting names ([`UsagePointers`]) | its pointer | its pointer | its pointer | its pointer | its pointer |
//!
//! Input tokens count every token of the prompt, cached ones included (OpenAI's convention, and
//! OpenTelemetry's `gen_ai.usage.input_tokens`): Anthropic reports the uncached part, the part
//! written to the cache and the part read from it separately, so its three are added, and only
//! the part read from the cache is `cached_input_tokens` (cache writes are billed as input).
//!
//! Each field is absent, not zero, when the upstream did not report it. The [`Meter`] reads only
//! the events that can carry usage: the formats' classifiers already name them (by type, or
//! [`Event::carries_usage`]), so every other event costs a comparison or two and no parse. It
//! answers "usage so far" mid-stream ([`Meter::so_far`]) and, at the end, the provider's numbers
//! or `usage_missing` ([`Meter::finish`]).

mod read;

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::record::format::{Event, FormatKind};
pub use crate::vocab::usage::UsagePointers;

/// Longest model name kept (longer names are cut at a character boundary): a hostile upstream
/// cannot make every record and span carry a large string.
pub const MAX_MODEL_BYTES: usize = 256;

/// Longest finish reason kept.
pub const MAX_FINISH_REASON_BYTES: usize = 64;

/// One run's token usage as the provider reported it; each field absent when it did not.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Prompt tokens, cached ones included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_tokens: Option<u64>,
    /// Completion tokens, reasoning ones included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<u64>,
    /// Prompt tokens read from the provider's cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_input_tokens: Option<u64>,
    /// Completion tokens spent on reasoning.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_tokens: Option<u64>,
    /// The model that answered, when the stream names one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

impl Usage {
    /// Whether any token count is known.
    pub fn has_tokens(&self) -> bool {
        self.input_tokens.is_some()
            || self.output_tokens.is_some()
            || self.cached_input_tokens.is_some()
            || self.reasoning_tokens.is_some()
    }

    /// Takes every field `other` reports (a later frame's numbers replace an earlier one's).
    fn absorb(&mut self, other: Usage) {
        let take = |mine: &mut Option<u64>, theirs: Option<u64>| {
            if theirs.is_some() {
                *mine = theirs;
            }
        };
        take(&mut self.input_tokens, other.input_tokens);
        take(&mut self.output_tokens, other.output_tokens);
        take(&mut self.cached_input_tokens, other.cached_input_tokens);
        take(&mut self.reasoning_tokens, other.reasoning_tokens);
        if other.model.is_some() {
            self.model = other.model;
        }
    }
}

/// What a run's frames said of its usage, at its end.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Metered {
    /// The provider's numbers: all of them when its final usage frame arrived; when it did not,
    /// only those already final before it (Anthropic's input and cache tokens, from
    /// `message_start`), and `None` when there are none.
    pub usage: Option<Usage>,
    /// The run ended without the provider's final usage frame (cut before it, or the frame
    /// reported no numbers).
    pub usage_missing: bool,
    /// The model that answered, when the stream named one (also when `usage` is `None`).
    pub model: Option<String>,
    /// The provider's finish reason (`stop`, `length`, `end_turn`, `tool_use`,
    /// `max_output_tokens`, …), when the stream gave one.
    pub finish_reason: Option<String>,
}

/// Anthropic's three parts of the input, each last-reported-wins.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct InputParts {
    uncached: Option<u64>,
    cache_write: Option<u64>,
    cache_read: Option<u64>,
}

impl InputParts {
    /// The whole input: the sum of the parts reported; `None` when none was.
    fn total(&self) -> Option<u64> {
        let parts = [self.uncached, self.cache_write, self.cache_read];
        parts.iter().flatten().copied().reduce(u64::saturating_add)
    }
}

/// One run's usage accumulator: fed every classified event, it reads the few that carry usage.
#[derive(Debug, Clone, Default)]
pub struct Meter {
    /// The route's `usage` setting, for AG-UI and AI SDK runs.
    pointers: Option<Arc<UsagePointers>>,
    /// The numbers so far (output counts may still grow until `complete`).
    usage: Usage,
    /// Anthropic's input parts.
    parts: InputParts,
    /// The final usage frame arrived.
    complete: bool,
    finish_reason: Option<String>,
    /// The first event has been read (the first OpenAI Chat chunk names the model).
    seen_first: bool,
    /// Events read as usage frames.
    readings: u64,
}

impl Meter {
    /// A meter for a run of a route with `pointers` as its `usage` setting (if any).
    pub fn new(pointers: Option<Arc<UsagePointers>>) -> Meter {
        Meter {
            pointers,
            ..Meter::default()
        }
    }

    /// Reads `ev`, the next classified event of a run of `format`, when it can carry usage.
    /// Runs once per upstream event on the producer's task: every other event costs a flag or
    /// type comparison.
    #[inline]
    pub fn observe(&mut self, format: FormatKind, ev: &Event) {
        match format {
            FormatKind::OpenaiChat => {
                if ev.carries_usage || ev.finish || !self.seen_first {
                    self.seen_first = true;
                    read::openai_chat(ev, self);
                }
            }
            FormatKind::OpenaiResponses => {
                if read::RESPONSES_TYPES.contains(&ev.ty()) {
                    read::openai_responses(ev, self);
                }
            }
            FormatKind::Anthropic => {
                if matches!(ev.ty(), b"message_start" | b"message_delta") {
                    read::anthropic(ev, self);
                }
            }
            FormatKind::AiSdk => {
                if ev.finish {
                    read::ai_sdk_finish(ev, self);
                }
                if self.pointers.is_some() {
                    self.configured(ev);
                }
            }
            FormatKind::Agui => {
                if self.pointers.is_some() {
                    self.configured(ev);
                }
            }
        }
    }

    /// Reads `ev` when it is the event the route's `usage` setting names.
    fn configured(&mut self, ev: &Event) {
        let Some(p) = &self.pointers else { return };
        if ev.ty() != p.ty.as_bytes() || p.name.as_ref().is_some_and(|n| ev.name() != n.as_bytes())
        {
            return;
        }
        let p = Arc::clone(p);
        read::pointers(ev, &p, self);
    }

    /// The usage reported so far, when any token count is (mid-stream: output counts may still
    /// grow, and most formats report nothing before their final frame).
    pub fn so_far(&self) -> Option<&Usage> {
        self.usage.has_tokens().then_some(&self.usage)
    }

    /// How many events were read as usage frames so far: when it has not changed since a
    /// caller last looked, neither has [`Self::so_far`] (a producer publishes usage so far only
    /// then).
    pub fn readings(&self) -> u64 {
        self.readings
    }

    /// Whether the provider's final usage frame has arrived.
    pub fn complete(&self) -> bool {
        self.complete
    }

    /// The model, when the stream named one.
    pub fn model(&self) -> Option<&str> {
        self.usage.model.as_deref()
    }

    /// The run's usage at its end: the provider's numbers when its final usage frame arrived;
    /// otherwise `usage_missing`, keeping only the numbers that were final before it (input and
    /// cache counts), never an output count that was still growing.
    pub fn finish(&self) -> Metered {
        let complete = self.complete && self.usage.has_tokens();
        let usage = if complete {
            self.usage.clone()
        } else {
            Usage {
                output_tokens: None,
                reasoning_tokens: None,
                ..self.usage.clone()
            }
        };
        Metered {
            model: usage.model.clone(),
            usage: usage.has_tokens().then_some(usage),
            usage_missing: !complete,
            finish_reason: self.finish_reason.clone(),
        }
    }

    /// Counts one event read as a usage frame.
    fn read_one(&mut self) {
        self.readings = self.readings.saturating_add(1);
    }

    /// Sets the model named by a frame (cut to [`MAX_MODEL_BYTES`]).
    fn name_model(&mut self, model: Option<String>) {
        if let Some(m) = model.filter(|m| !m.is_empty()) {
            self.usage.model = Some(cut(m, MAX_MODEL_BYTES));
        }
    }

    /// Sets the finish reason a frame gave (cut to [`MAX_FINISH_REASON_BYTES`]).
    fn finish_reason(&mut self, reason: Option<String>) {
        if let Some(r) = reason.filter(|r| !r.is_empty()) {
            self.finish_reason = Some(cut(r, MAX_FINISH_REASON_BYTES));
        }
    }
}

/// `s` cut to at most `max` bytes, at a character boundary.
fn cut(mut s: String, max: usize) -> String {
    if s.len() > max {
        let at = (0..=max)
            .rev()
            .find(|i| s.is_char_boundary(*i))
            .unwrap_or(0);
        s.truncate(at);
    }
    s
}

#[cfg(test)]
mod tests;
