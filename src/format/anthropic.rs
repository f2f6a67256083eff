//! Anthropic Messages: recorded event by event, verbatim (no deltas merged yet).

use super::{verbatim, Event, Format, FormatKind};
use crate::sse::SseEvent;

/// The Anthropic Messages format.
#[derive(Debug, Clone, Copy, Default)]
pub struct Anthropic;

impl Format for Anthropic {
    fn kind(&self) -> FormatKind {
        FormatKind::Anthropic
    }

    fn classify(&self, sse: &SseEvent) -> Event {
        verbatim(sse)
    }
}
