//! the Vercel AI SDK UI message stream: recorded event by event, verbatim (no deltas merged yet).

use super::{verbatim, Event, Format, FormatKind};
use crate::sse::SseEvent;

/// The the Vercel AI SDK UI message stream format.
#[derive(Debug, Clone, Copy, Default)]
pub struct AiSdk;

impl Format for AiSdk {
    fn kind(&self) -> FormatKind {
        FormatKind::AiSdk
    }

    fn classify(&self, sse: &SseEvent) -> Event {
        verbatim(sse)
    }
}
