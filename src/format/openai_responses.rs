//! OpenAI Responses: recorded event by event, verbatim (no deltas merged yet).

use super::{verbatim, Event, Format, FormatKind};
use crate::sse::SseEvent;

/// The OpenAI Responses format.
#[derive(Debug, Clone, Copy, Default)]
pub struct OpenaiResponses;

impl Format for OpenaiResponses {
    fn kind(&self) -> FormatKind {
        FormatKind::OpenaiResponses
    }

    fn classify(&self, sse: &SseEvent) -> Event {
        verbatim(sse)
    }
}
