//! AG-UI: classifies `data: <json>` events by `type`; text, reasoning and tool-argument deltas
//! merge by `messageId` / `toolCallId`, `*_CHUNK` streams by their open chunk, and
//! `THINKING_TEXT_MESSAGE_CONTENT` only when directly adjacent. `RUN_FINISHED` and `RUN_ERROR`
//! end a stream. The members are found by a scanner ([`scan`]), with `serde_json` behind it for
//! whatever the scanner leaves.

pub mod scan;
#[cfg(test)]
mod tests;

use std::ops::Range;

use bytes::Bytes;
use serde::Deserialize;
use serde_json::value::RawValue;

use self::scan::Members;
use super::{one_line, wrap_raw, Event, Format, FormatKind, Merge, MergeClass, Spans};
use crate::record::sse::SseEvent;

/// `TEXT_MESSAGE_CONTENT`, keyed by `messageId`.
pub const TEXT_CONTENT: MergeClass = class(1, false);
/// `REASONING_MESSAGE_CONTENT`, keyed by `messageId`.
pub const REASONING_CONTENT: MergeClass = class(2, false);
/// `TOOL_CALL_ARGS`, keyed by `toolCallId`.
pub const TOOL_CALL_ARGS: MergeClass = class(3, false);
/// `THINKING_TEXT_MESSAGE_CONTENT`: no key, merges only when directly adjacent.
pub const THINKING_CONTENT: MergeClass = class(4, false);
/// `TEXT_MESSAGE_CHUNK`: later chunks may omit the `messageId`.
pub const TEXT_CHUNK: MergeClass = class(5, true);
/// `TOOL_CALL_CHUNK`: later chunks may omit the `toolCallId`.
pub const TOOL_CALL_CHUNK: MergeClass = class(6, true);
/// `REASONING_MESSAGE_CHUNK`: later chunks may omit the `messageId`.
pub const REASONING_CHUNK: MergeClass = class(7, true);

const fn class(id: u16, key_optional: bool) -> MergeClass {
    MergeClass { id, key_optional }
}

/// The AG-UI format.
#[derive(Debug, Clone, Copy, Default)]
pub struct Agui;

#[derive(Deserialize)]
struct Fields<'a> {
    #[serde(rename = "type", borrow, default)]
    ty: Option<&'a RawValue>,
    #[serde(rename = "messageId", borrow, default)]
    message_id: Option<&'a RawValue>,
    #[serde(rename = "toolCallId", borrow, default)]
    tool_call_id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    delta: Option<&'a RawValue>,
    #[serde(borrow, default)]
    name: Option<&'a RawValue>,
}

impl Format for Agui {
    fn kind(&self) -> FormatKind {
        FormatKind::Agui
    }

    fn recognizes(&self, first: &SseEvent) -> bool {
        classify_json(&one_line(&first.data)).is_some_and(|e| {
            let ty = e.ty();
            !ty.is_empty() && ty.iter().all(|b| b.is_ascii_uppercase() || *b == b'_')
        })
    }

    fn classify(&self, sse: &SseEvent) -> Event {
        let data = one_line(&sse.data);
        if let Some(event) = classify_json(&data) {
            return event;
        }
        wrap_raw(sse.event.as_deref(), &sse.data)
    }
}

fn classify_json(data: &Bytes) -> Option<Event> {
    let start = data.iter().position(|b| !b.is_ascii_whitespace())?;
    if data[start] != b'{' {
        return None;
    }
    // Validating UTF-8 up front lets the scanner and serde_json skip it, and covers the fields
    // they ignore.
    let text = std::str::from_utf8(data).ok()?;
    let members = match scan::scan(data) {
        Some(m) => m,
        None => match members_by_serde(text) {
            Ok(m) => m,
            // Valid JSON that the borrowing pass cannot take (a duplicate key): keep it verbatim,
            // unclassified.
            Err(_) => {
                serde_json::from_str::<serde::de::IgnoredAny>(text).ok()?;
                return Some(Event::verbatim(data.clone(), 0..0, 0..0));
            }
        },
    };
    Some(event_of(data, &members))
}

/// The members of `text` read by `serde_json` into borrowed fields, the reference the scanner is
/// checked against; `Err` when `serde_json` refuses them (invalid JSON, a known key twice).
pub fn members_by_serde(text: &str) -> Result<Members, serde_json::Error> {
    let fields: Fields = serde_json::from_str(text)?;
    let spans = Spans::new(text.as_bytes());
    Ok(Members {
        ty: spans.of(fields.ty),
        message_id: spans.of(fields.message_id),
        tool_call_id: spans.of(fields.tool_call_id),
        delta: spans.of(fields.delta),
        name: spans.of(fields.name),
    })
}

/// The classified event of `data` whose members are `m`.
fn event_of(data: &Bytes, m: &Members) -> Event {
    let spans = Spans::new(data);
    let inner = |r: &Option<Range<usize>>| r.clone().and_then(|r| spans.string(r));
    let ty = inner(&m.ty).unwrap_or(0..0);
    let name = inner(&m.name).unwrap_or(0..0);
    let merge = merge_class(&data[ty.clone()]).and_then(|class| {
        let delta = inner(&m.delta)?;
        let key = if class == TOOL_CALL_ARGS || class == TOOL_CALL_CHUNK {
            m.tool_call_id.clone()
        } else if class == THINKING_CONTENT {
            None
        } else {
            m.message_id.clone()
        };
        let key = match key {
            Some(k) => k,
            None if class.key_optional || class == THINKING_CONTENT => 0..0,
            None => return None,
        };
        Some(Merge {
            class,
            key,
            sub: 0,
            delta,
            last: None,
        })
    });
    let terminal = matches!(&data[ty.clone()], b"RUN_FINISHED" | b"RUN_ERROR");
    let mut event = Event::verbatim(data.clone(), ty, name);
    event.merge = merge;
    event.terminal = terminal;
    event
}

fn merge_class(ty: &[u8]) -> Option<MergeClass> {
    Some(match ty {
        b"TEXT_MESSAGE_CONTENT" => TEXT_CONTENT,
        b"REASONING_MESSAGE_CONTENT" => REASONING_CONTENT,
        b"TOOL_CALL_ARGS" => TOOL_CALL_ARGS,
        b"THINKING_TEXT_MESSAGE_CONTENT" => THINKING_CONTENT,
        b"TEXT_MESSAGE_CHUNK" => TEXT_CHUNK,
        b"TOOL_CALL_CHUNK" => TOOL_CALL_CHUNK,
        b"REASONING_MESSAGE_CHUNK" => REASONING_CHUNK,
        _ => return None,
    })
}
