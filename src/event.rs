//! Classifies one upstream SSE event: its JSON, type, merge key, delta span and terminal flag.
//!
//! The hot path builds no JSON tree: one validating pass of `serde_json` borrows the few
//! top-level fields the recorder needs (`type`, `messageId`, `toolCallId`, `delta`, `name`) as raw
//! spans of the event's own bytes. Data that is not a JSON object is wrapped as an AG-UI `RAW`
//! event (`{"type":"RAW","source":"sse","event":{"event":<name>,"data":<string>}}`).

use std::ops::Range;

use bytes::{BufMut, Bytes, BytesMut};
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::sse::SseEvent;

/// Which deltas may merge with each other, and how their key is compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MergeClass {
    /// `TEXT_MESSAGE_CONTENT`, keyed by `messageId`.
    TextContent,
    /// `REASONING_MESSAGE_CONTENT`, keyed by `messageId`.
    ReasoningContent,
    /// `TOOL_CALL_ARGS`, keyed by `toolCallId`.
    ToolCallArgs,
    /// `THINKING_TEXT_MESSAGE_CONTENT`: no key, merges only when directly adjacent.
    ThinkingContent,
    /// `TEXT_MESSAGE_CHUNK`: later chunks may omit the `messageId`.
    TextChunk,
    /// `TOOL_CALL_CHUNK`: later chunks may omit the `toolCallId`.
    ToolCallChunk,
    /// `REASONING_MESSAGE_CHUNK`: later chunks may omit the `messageId`.
    ReasoningChunk,
}

impl MergeClass {
    /// Chunk classes let a later delta without a key join the open chunk stream.
    pub fn key_optional(self) -> bool {
        matches!(
            self,
            MergeClass::TextChunk | MergeClass::ToolCallChunk | MergeClass::ReasoningChunk
        )
    }
}

/// Where a mergeable delta sits in the event's JSON.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Merge {
    /// Which deltas this one may merge with.
    pub class: MergeClass,
    /// The raw JSON of the merge key (with quotes), empty when absent.
    pub key: Range<usize>,
    /// The escaped contents of the `delta` string literal, without its quotes.
    pub delta: Range<usize>,
}

/// One classified upstream event, ready for the run log.
#[derive(Debug, Clone)]
pub struct Event {
    /// The event's JSON object, one line: the upstream data, or its `RAW` wrapper.
    pub json: Bytes,
    /// The raw `type` string literal contents (empty when absent).
    pub ty: Range<usize>,
    /// The raw `name` string literal contents (empty when absent; used by `CUSTOM`).
    pub name: Range<usize>,
    /// Set when the event is a delta that may merge with adjacent ones.
    pub merge: Option<Merge>,
    /// Set when the event ends its stream (`RUN_FINISHED`, `RUN_ERROR`, `[DONE]`, …).
    pub terminal: bool,
}

impl Event {
    /// The event's `type` (`RAW` for wrapped data).
    pub fn ty(&self) -> &[u8] {
        &self.json[self.ty.clone()]
    }

    /// The event's `name` field, when it is a plain string.
    pub fn name(&self) -> &[u8] {
        &self.json[self.name.clone()]
    }

    /// The raw merge key of a delta (empty when absent or not a delta).
    pub fn merge_key(&self) -> &[u8] {
        self.merge
            .as_ref()
            .map_or(&[][..], |m| &self.json[m.key.clone()])
    }

    /// The escaped `delta` text of a mergeable delta.
    pub fn delta(&self) -> &[u8] {
        self.merge
            .as_ref()
            .map_or(&[][..], |m| &self.json[m.delta.clone()])
    }
}

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

/// Classifies one decoded SSE event.
pub fn classify(sse: &SseEvent) -> Event {
    let data = one_line(&sse.data);
    if let Some(event) = classify_json(&data) {
        return event;
    }
    wrap_raw(sse.event.as_deref(), &sse.data)
}

/// Multi-line JSON is joined with `\n`; outside strings that is whitespace, so replacing CR/LF
/// with spaces keeps the value and makes it one line. Copies only when needed.
fn one_line(data: &Bytes) -> Bytes {
    if memchr::memchr2(b'\n', b'\r', data).is_none() {
        return data.clone();
    }
    let v: Vec<u8> = data
        .iter()
        .map(|&b| if b == b'\n' || b == b'\r' { b' ' } else { b })
        .collect();
    Bytes::from(v)
}

fn classify_json(data: &Bytes) -> Option<Event> {
    let start = data.iter().position(|b| !b.is_ascii_whitespace())?;
    if data[start] != b'{' {
        return None;
    }
    // Validating UTF-8 up front lets serde_json skip it, and covers the fields it ignores.
    let text = std::str::from_utf8(data).ok()?;
    let fields: Fields = match serde_json::from_str(text) {
        Ok(f) => f,
        // Valid JSON that the borrowing pass cannot take (a duplicate key, an escaped key):
        // keep it verbatim, unclassified.
        Err(_) => {
            serde_json::from_str::<serde::de::IgnoredAny>(text).ok()?;
            return Some(Event {
                json: data.clone(),
                ty: 0..0,
                name: 0..0,
                merge: None,
                terminal: false,
            });
        }
    };
    let base = data.as_ptr() as usize;
    let span = |raw: Option<&RawValue>| -> Option<Range<usize>> {
        let s = raw?.get();
        let off = s.as_ptr() as usize - base;
        Some(off..off + s.len())
    };
    // The contents of a string literal: inside the quotes.
    let inner = |r: Range<usize>| -> Option<Range<usize>> {
        (r.len() >= 2 && data[r.start] == b'"').then(|| r.start + 1..r.end - 1)
    };
    let ty = span(fields.ty).and_then(inner).unwrap_or(0..0);
    let name = span(fields.name).and_then(inner).unwrap_or(0..0);
    let class = merge_class(&data[ty.clone()]);
    let merge = class.and_then(|class| {
        let delta = inner(span(fields.delta)?)?;
        let key = match class {
            MergeClass::ToolCallArgs | MergeClass::ToolCallChunk => span(fields.tool_call_id),
            MergeClass::ThinkingContent => None,
            _ => span(fields.message_id),
        };
        let key = match key {
            Some(k) => k,
            None if class.key_optional() || class == MergeClass::ThinkingContent => 0..0,
            None => return None,
        };
        Some(Merge { class, key, delta })
    });
    let terminal = is_terminal_type(&data[ty.clone()]);
    Some(Event {
        json: data.clone(),
        ty,
        name,
        merge,
        terminal,
    })
}

fn merge_class(ty: &[u8]) -> Option<MergeClass> {
    Some(match ty {
        b"TEXT_MESSAGE_CONTENT" => MergeClass::TextContent,
        b"REASONING_MESSAGE_CONTENT" => MergeClass::ReasoningContent,
        b"TOOL_CALL_ARGS" => MergeClass::ToolCallArgs,
        b"THINKING_TEXT_MESSAGE_CONTENT" => MergeClass::ThinkingContent,
        b"TEXT_MESSAGE_CHUNK" => MergeClass::TextChunk,
        b"TOOL_CALL_CHUNK" => MergeClass::ToolCallChunk,
        b"REASONING_MESSAGE_CHUNK" => MergeClass::ReasoningChunk,
        _ => return None,
    })
}

/// Types that end a stream for the `commit = eof` rule, across the formats tether knows.
fn is_terminal_type(ty: &[u8]) -> bool {
    matches!(
        ty,
        b"RUN_FINISHED"
            | b"RUN_ERROR"
            | b"message_stop"
            | b"response.completed"
            | b"response.failed"
            | b"response.incomplete"
    )
}

/// Wraps data that is not a JSON object as an AG-UI `RAW` event.
fn wrap_raw(name: Option<&[u8]>, data: &[u8]) -> Event {
    let name = String::from_utf8_lossy(name.unwrap_or(b"message"));
    let text = String::from_utf8_lossy(data);
    let mut out = BytesMut::with_capacity(data.len() + name.len() + 64);
    out.put_slice(b"{\"type\":\"RAW\",\"source\":\"sse\",\"event\":{\"event\":");
    write_json_str(&mut out, &name);
    out.put_slice(b",\"data\":");
    write_json_str(&mut out, &text);
    out.put_slice(b"}}");
    Event {
        json: out.freeze(),
        ty: 9..12,
        name: 0..0,
        merge: None,
        terminal: data.trim_ascii() == b"[DONE]",
    }
}

/// Appends `s` as a JSON string literal.
pub fn write_json_str(out: &mut BytesMut, s: &str) {
    // serde_json writes into any io::Write; BytesMut's writer cannot fail.
    let mut w = std::mem::take(out).writer();
    let _ = serde_json::to_writer(&mut w, s);
    *out = w.into_inner();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sse(event: Option<&str>, data: &str) -> SseEvent {
        SseEvent {
            event: event.map(|e| Bytes::copy_from_slice(e.as_bytes())),
            data: Bytes::copy_from_slice(data.as_bytes()),
            id: None,
        }
    }

    #[test]
    fn finds_type_key_and_delta_span_of_a_text_delta() {
        let e = classify(&sse(
            None,
            r#"{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"he\"llo"}"#,
        ));
        assert_eq!(e.ty(), b"TEXT_MESSAGE_CONTENT");
        assert_eq!(e.merge_key(), br#""m1""#);
        assert_eq!(e.delta(), br#"he\"llo"#);
        assert_eq!(e.merge.unwrap().class, MergeClass::TextContent);
        assert!(!e.terminal);
    }

    #[test]
    fn tool_call_args_key_on_tool_call_id() {
        let e = classify(&sse(
            None,
            r#"{"delta":"{\"a\"","toolCallId":"t1","type":"TOOL_CALL_ARGS","messageId":"x"}"#,
        ));
        assert_eq!(e.merge_key(), br#""t1""#);
        assert_eq!(e.delta(), br#"{\"a\""#);
    }

    #[test]
    fn a_content_delta_without_its_key_or_with_a_non_string_delta_does_not_merge() {
        let e = classify(&sse(None, r#"{"type":"TEXT_MESSAGE_CONTENT","delta":"x"}"#));
        assert!(e.merge.is_none());
        let e = classify(&sse(
            None,
            r#"{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":5}"#,
        ));
        assert!(e.merge.is_none());
    }

    #[test]
    fn chunks_and_thinking_may_lack_a_key() {
        let e = classify(&sse(None, r#"{"type":"TEXT_MESSAGE_CHUNK","delta":"x"}"#));
        assert_eq!(e.merge.unwrap().class, MergeClass::TextChunk);
        let e = classify(&sse(
            None,
            r#"{"type":"THINKING_TEXT_MESSAGE_CONTENT","delta":"x"}"#,
        ));
        assert_eq!(e.merge.unwrap().class, MergeClass::ThinkingContent);
    }

    #[test]
    fn terminal_events_of_each_format() {
        for t in [
            "RUN_FINISHED",
            "RUN_ERROR",
            "message_stop",
            "response.completed",
        ] {
            assert!(
                classify(&sse(None, &format!(r#"{{"type":"{t}"}}"#))).terminal,
                "{t}"
            );
        }
        assert!(classify(&sse(None, "[DONE]")).terminal);
        assert!(!classify(&sse(None, r#"{"type":"RUN_STARTED"}"#)).terminal);
    }

    #[test]
    fn non_object_data_is_wrapped_as_raw() {
        let e = classify(&sse(Some("ping"), "not \"json\"\nline2"));
        assert_eq!(e.ty(), b"RAW");
        let v: serde_json::Value = serde_json::from_slice(&e.json).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"type":"RAW","source":"sse","event":{"event":"ping","data":"not \"json\"\nline2"}})
        );
        let e = classify(&sse(None, "[1,2]"));
        assert_eq!(e.ty(), b"RAW");
        let e = classify(&sse(None, "{broken"));
        assert_eq!(e.ty(), b"RAW");
    }

    #[test]
    fn multi_line_json_becomes_one_line_and_keeps_its_value() {
        let e = classify(&sse(None, "{\"type\":\"CUSTOM\",\n\"name\":\"a\\nb\"}"));
        assert_eq!(e.ty(), b"CUSTOM");
        assert!(!e.json.contains(&b'\n'));
        assert_eq!(e.name(), br"a\nb");
    }

    #[test]
    fn invalid_utf8_in_json_is_wrapped_lossily() {
        let e = classify(&SseEvent {
            event: None,
            data: Bytes::from_static(b"{\"type\":\"X\",\"delta\":\"\xff\"}"),
            id: None,
        });
        assert_eq!(e.ty(), b"RAW");
        assert!(serde_json::from_slice::<serde_json::Value>(&e.json).is_ok());
    }

    #[test]
    fn duplicate_keys_stay_verbatim_unclassified() {
        let e = classify(&sse(None, r#"{"type":"A","type":"B"}"#));
        assert_eq!(e.ty(), b"");
        assert_eq!(&e.json[..], br#"{"type":"A","type":"B"}"#);
    }

    #[test]
    fn json_object_data_is_kept_byte_for_byte() {
        let data = r#"{ "type" : "CUSTOM", "value": {"k": [1, 2]} }"#;
        let e = classify(&sse(None, data));
        assert_eq!(&e.json[..], data.as_bytes());
        assert_eq!(e.ty(), b"CUSTOM");
    }
}
