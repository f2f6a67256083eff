//! OpenAI Chat Completions: recorded event by event, verbatim (no deltas merged yet).

use super::{verbatim, Event, Format, FormatKind};
use crate::sse::SseEvent;

/// The OpenAI Chat Completions format.
#[derive(Debug, Clone, Copy, Default)]
pub struct OpenaiChat;

impl Format for OpenaiChat {
    fn kind(&self) -> FormatKind {
        FormatKind::OpenaiChat
    }

    fn classify(&self, sse: &SseEvent) -> Event {
        verbatim(sse)
    }
}
