//! The kinds of things tether names in settings, JSON and metric labels: the stream formats it
//! knows, a route's format setting, and the resume dialects.

use std::str::FromStr;

use super::label::label_enum;

label_enum! {
    /// The stream formats tether knows; the `format` label of `tether_runs_started_total`.
    pub enum FormatKind {
        /// AG-UI events (`RUN_STARTED`, `TEXT_MESSAGE_CONTENT`, …).
        Agui => "agui",
        /// OpenAI Chat Completions chunks (`chat.completion.chunk`, then `[DONE]`).
        OpenaiChat => "openai_chat",
        /// OpenAI Responses events (`response.output_text.delta`, …).
        OpenaiResponses => "openai_responses",
        /// Anthropic Messages events (`message_start`, `content_block_delta`, …).
        Anthropic => "anthropic",
        /// The Vercel AI SDK UI message stream (`text-delta`, …, then `[DONE]`).
        AiSdk => "ai_sdk",
    }
}

/// A route's `format` setting: one format, or `auto` (detected per run).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FormatChoice {
    /// From the response headers, else from the first event's shape.
    #[default]
    Auto,
    /// Always this format.
    Fixed(FormatKind),
}

impl FromStr for FormatChoice {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        if s == "auto" {
            return Ok(FormatChoice::Auto);
        }
        FormatKind::ALL
            .iter()
            .find(|k| k.as_str() == s)
            .map(|k| FormatChoice::Fixed(*k))
            .ok_or_else(|| {
                let names: Vec<&str> = FormatKind::ALL.iter().map(|k| k.as_str()).collect();
                format!("{s:?} must be auto or one of {}", names.join(", "))
            })
    }
}

label_enum! {
    /// How a client family resumes: the `dialect` of a route, and the `dialect` metric label.
    pub enum DialectKind {
        /// tether's own protocol (attach routes).
        Protocol1 => "protocol1",
        /// The compacted history in the upstream's format, then the live tail.
        FromStart => "from_start",
        /// Raw frames after an SSE event id (`Last-Event-ID`).
        LastEventId => "last_event_id",
        /// Raw frames from a frame index (`startIndex`).
        FrameIndex => "frame_index",
        /// Raw frames after the frame whose JSON field equals the cursor.
        JsonCursor => "json_cursor",
        /// A read-only Durable Stream of the run's events (JSON mode).
        DurableStreams => "durable_streams",
    }
}
