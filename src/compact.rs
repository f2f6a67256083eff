//! Compaction: the run's whole history as the `events` array of a snapshot, adjacent deltas merged.
//!
//! Rules (AG-UI, DESIGN "Compaction"): adjacent deltas of one [`MergeClass`] with the same key
//! merge into one event at the first delta's position; nothing is reordered, dropped or merged
//! across any other event. The merged event is the first delta's JSON with `delta` holding the
//! whole concatenation: joining the *escaped* contents of JSON string literals yields the escaped
//! form of the joined string, so no fragment is ever unescaped.
//!
//! The history is kept already serialized, in an append-only [`ByteLog`]: each event's JSON is
//! written once, and each later delta of an open merge group appends only its escaped text. The
//! open group's closing bytes (the first delta's JSON after its `delta` text) are held aside and
//! written when the group closes. A [`Capture`] shares the log's blocks (no text is copied), so
//! capturing costs a few reference-count increments whatever the run's size.

use bytes::{Bytes, BytesMut};

use crate::event::{Event, MergeClass};

/// Smallest block of the log; blocks double with the log so their number stays logarithmic
/// while a short run holds little memory.
const MIN_BLOCK: usize = 512;
/// Largest block allocated for growth (a single larger write gets its own block).
const MAX_BLOCK: usize = 8 * 1024 * 1024;

/// Append-only bytes, readable by sharing sealed blocks.
#[derive(Debug, Default)]
pub struct ByteLog {
    sealed: Vec<Bytes>,
    active: BytesMut,
    len: usize,
}

impl ByteLog {
    /// Appends bytes.
    pub fn push(&mut self, b: &[u8]) {
        if self.active.capacity() - self.active.len() < b.len() {
            self.seal();
            let want = self.len.clamp(MIN_BLOCK, MAX_BLOCK).max(b.len());
            self.active = BytesMut::with_capacity(want);
        }
        self.active.extend_from_slice(b);
        self.len += b.len();
    }

    /// Total bytes written.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing was written.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes allocated for the log (written plus spare capacity of the active block).
    pub fn allocated(&self) -> usize {
        self.len + (self.active.capacity() - self.active.len())
    }

    /// Shares everything written so far as blocks, without copying.
    pub fn share(&mut self) -> Vec<Bytes> {
        self.seal();
        self.sealed.clone()
    }

    fn seal(&mut self) {
        if !self.active.is_empty() {
            // `split` hands out the written part and keeps the spare capacity for later pushes.
            self.sealed.push(self.active.split().freeze());
        }
    }
}

/// The open merge group: the last event of the history, still able to take deltas.
#[derive(Debug)]
struct Open {
    class: MergeClass,
    key: Bytes,
    /// The first delta's JSON after its `delta` text (closing quote onwards).
    tail: Bytes,
}

/// A shared, copy-free view of a compacted history, ready to serialize outside any lock.
#[derive(Debug, Clone, Default)]
pub struct Capture {
    /// The serialized events, comma-separated, in order.
    pub blocks: Vec<Bytes>,
    /// Closing bytes of the open merge group, if any.
    pub tail: Option<Bytes>,
    /// Number of events in the compacted history.
    pub events: usize,
}

impl Capture {
    /// Length of the serialized `events` array contents.
    pub fn len(&self) -> usize {
        self.blocks.iter().map(Bytes::len).sum::<usize>() + self.tail.as_ref().map_or(0, Bytes::len)
    }

    /// Whether the history is empty.
    pub fn is_empty(&self) -> bool {
        self.events == 0
    }

    /// Writes the `events` array contents (without brackets).
    pub fn write_to(&self, out: &mut BytesMut) {
        for b in &self.blocks {
            out.extend_from_slice(b);
        }
        if let Some(t) = &self.tail {
            out.extend_from_slice(t);
        }
    }
}

/// The compacted history of one run.
#[derive(Debug, Default)]
pub struct Compactor {
    log: ByteLog,
    open: Option<Open>,
    events: usize,
}

impl Compactor {
    /// An empty history.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends one event, merging it into the open group when it continues it.
    pub fn push(&mut self, ev: &Event) {
        if let (Some(open), Some(m)) = (&self.open, &ev.merge) {
            let key = &ev.json[m.key.clone()];
            let same_key = key == &open.key[..] || (m.class.key_optional() && key.is_empty());
            if open.class == m.class && same_key {
                self.log.push(&ev.json[m.delta.clone()]);
                return;
            }
        }
        self.close();
        if self.events > 0 {
            self.log.push(b",");
        }
        self.events += 1;
        match &ev.merge {
            Some(m) => {
                self.log.push(&ev.json[..m.delta.end]);
                self.open = Some(Open {
                    class: m.class,
                    key: ev.json.slice(m.key.clone()),
                    tail: ev.json.slice(m.delta.end..),
                });
            }
            None => self.log.push(&ev.json),
        }
    }

    /// Shares the history as it is now. Copies no text.
    pub fn capture(&mut self) -> Capture {
        Capture {
            blocks: self.log.share(),
            tail: self.open.as_ref().map(|o| o.tail.clone()),
            events: self.events,
        }
    }

    /// Number of events in the compacted history.
    pub fn events(&self) -> usize {
        self.events
    }

    /// Bytes held by the history.
    pub fn allocated(&self) -> usize {
        self.log.allocated() + self.open.as_ref().map_or(0, |o| o.tail.len() + o.key.len())
    }

    fn close(&mut self) {
        if let Some(open) = self.open.take() {
            self.log.push(&open.tail);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::classify;
    use crate::sse::SseEvent;

    fn ev(json: &str) -> Event {
        classify(&SseEvent {
            event: None,
            data: Bytes::copy_from_slice(json.as_bytes()),
            id: None,
        })
    }

    fn compact(events: &[&str]) -> String {
        let mut c = Compactor::new();
        for e in events {
            c.push(&ev(e));
        }
        let cap = c.capture();
        let mut out = BytesMut::new();
        out.extend_from_slice(b"[");
        cap.write_to(&mut out);
        out.extend_from_slice(b"]");
        String::from_utf8(out.to_vec()).unwrap()
    }

    const START: &str = r#"{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant"}"#;
    const END: &str = r#"{"type":"TEXT_MESSAGE_END","messageId":"m1"}"#;

    fn content(id: &str, delta: &str) -> String {
        format!(
            r#"{{"type":"TEXT_MESSAGE_CONTENT","messageId":"{id}","delta":"{delta}","timestamp":1}}"#
        )
    }

    #[test]
    fn merges_adjacent_deltas_at_the_first_position() {
        let (a, b, c) = (
            content("m1", "Hel"),
            content("m1", "lo"),
            content("m1", "!"),
        );
        let out = compact(&[START, &a, &b, &c, END]);
        assert_eq!(out, format!("[{START},{},{END}]", content("m1", "Hello!")));
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v.as_array().unwrap().len(), 3);
    }

    #[test]
    fn never_merges_across_another_event_or_another_key() {
        let custom = r#"{"type":"CUSTOM","name":"x","value":1}"#;
        let out = compact(&[
            &content("m1", "a"),
            custom,
            &content("m1", "b"),
            &content("m2", "c"),
        ]);
        assert_eq!(
            out,
            format!(
                "[{},{custom},{},{}]",
                content("m1", "a"),
                content("m1", "b"),
                content("m2", "c")
            )
        );
    }

    #[test]
    fn different_classes_with_the_same_key_do_not_merge() {
        let r = r#"{"type":"REASONING_MESSAGE_CONTENT","messageId":"m1","delta":"r"}"#;
        let out = compact(&[&content("m1", "a"), r]);
        assert_eq!(out, format!("[{},{r}]", content("m1", "a")));
    }

    #[test]
    fn escaped_fragments_join_into_valid_json() {
        let parts = [r"\ud83d", r"\ude00", r#"\"q\""#, r"\n", "\u{e9}"];
        let events: Vec<String> = parts.iter().map(|p| content("m", p)).collect();
        let refs: Vec<&str> = events.iter().map(String::as_str).collect();
        let out = compact(&refs);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v[0]["delta"], "\u{1F600}\"q\"\n\u{e9}");
    }

    #[test]
    fn chunks_without_an_id_join_the_open_chunk() {
        let a = r#"{"type":"TEXT_MESSAGE_CHUNK","messageId":"m","role":"assistant","delta":"a"}"#;
        let b = r#"{"type":"TEXT_MESSAGE_CHUNK","delta":"b"}"#;
        let c = r#"{"type":"TEXT_MESSAGE_CHUNK","messageId":"n","delta":"c"}"#;
        let out = compact(&[a, b, c]);
        assert_eq!(
            out,
            format!(
                r#"[{{"type":"TEXT_MESSAGE_CHUNK","messageId":"m","role":"assistant","delta":"ab"}},{c}]"#
            )
        );
    }

    #[test]
    fn an_open_group_is_captured_with_its_tail_and_keeps_growing() {
        let mut c = Compactor::new();
        c.push(&ev(&content("m", "a")));
        let first = c.capture();
        c.push(&ev(&content("m", "b")));
        let second = c.capture();
        let text = |cap: &Capture| {
            let mut o = BytesMut::new();
            cap.write_to(&mut o);
            String::from_utf8(o.to_vec()).unwrap()
        };
        assert_eq!(text(&first), content("m", "a"));
        assert_eq!(text(&second), content("m", "ab"));
        assert_eq!(second.events, 1);
    }

    use proptest::prelude::*;

    proptest! {
        /// Hostile input: any bytes as event data, mixed with real deltas, always compact into a
        /// valid JSON array with one entry per unmerged event.
        #[test]
        fn arbitrary_event_data_compacts_into_valid_json(
            items in proptest::collection::vec(
                prop_oneof![
                    proptest::collection::vec(any::<u8>(), 0..64).prop_map(Some),
                    Just(None),
                ],
                0..40,
            ),
        ) {
            let mut c = Compactor::new();
            for item in &items {
                let data = match item {
                    Some(raw) => Bytes::copy_from_slice(raw),
                    None => Bytes::from_static(br#"{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"\u00e9x"}"#),
                };
                let e = classify(&SseEvent { event: Some(Bytes::from_static(b"\xff")), data, id: None });
                prop_assert!(serde_json::from_slice::<serde_json::Value>(&e.json).is_ok_and(|v| v.is_object()));
                c.push(&e);
            }
            let cap = c.capture();
            let mut out = BytesMut::new();
            out.extend_from_slice(b"[");
            cap.write_to(&mut out);
            out.extend_from_slice(b"]");
            let v: serde_json::Value = serde_json::from_slice(&out).expect("valid JSON");
            prop_assert_eq!(v.as_array().unwrap().len(), cap.events);
        }
    }

    #[test]
    fn the_log_shares_blocks_without_copying_and_stays_logarithmic() {
        let mut log = ByteLog::default();
        let piece = [b'x'; 1000];
        for _ in 0..20_000 {
            log.push(&piece);
        }
        let blocks = log.share();
        assert_eq!(blocks.iter().map(Bytes::len).sum::<usize>(), 20_000_000);
        assert!(blocks.len() < 40, "{} blocks", blocks.len());
        let again = log.share();
        assert_eq!(blocks[0].as_ptr(), again[0].as_ptr());
    }
}
