//! Protocol-1 frames as a client reads them, and the reducer the tests compare streams with: a
//! stream and its recovery are equal when they reduce to the same state. Depends on nothing but
//! `serde_json`.

use std::collections::BTreeMap;

use serde_json::Value;

/// One protocol-1 frame.
#[derive(Debug, Clone)]
pub struct Frame {
    pub id: Option<String>,
    pub json: Value,
}

impl Frame {
    pub fn ty(&self) -> &str {
        self.json["type"].as_str().unwrap()
    }
    pub fn seq(&self) -> u64 {
        self.json["seq"].as_u64().unwrap()
    }
}

/// The seqs of the `STREAM_EVENT` frames among `frames`, in order.
pub fn event_seqs(frames: &[Frame]) -> Vec<u64> {
    frames
        .iter()
        .filter(|f| f.ty() == "STREAM_EVENT")
        .map(Frame::seq)
        .collect()
}

/// The frame in one SSE block (`id:` and `data:` lines up to the blank line); `None` for a block
/// without data (a comment). Panics when the data is not JSON.
pub fn parse_frame(block: &str) -> Option<Frame> {
    let mut id = None;
    let mut data = None;
    for line in block.lines() {
        if let Some(v) = line.strip_prefix("id: ") {
            id = Some(v.to_string());
        } else if let Some(v) = line.strip_prefix("data: ") {
            data = Some(v);
        }
    }
    let data = data?;
    let json = serde_json::from_str(data).unwrap_or_else(|e| panic!("frame data {data:?}: {e}"));
    Some(Frame { id, json })
}

/// Text, arguments and reasoning per id, and the ordered list of every other event.
#[derive(Debug, Default, PartialEq)]
pub struct Reduced {
    pub text: BTreeMap<String, String>,
    pub args: BTreeMap<String, String>,
    pub reasoning: BTreeMap<String, String>,
    pub others: Vec<Value>,
}

impl Reduced {
    pub fn apply(&mut self, e: &Value) {
        let id = |k: &str| e[k].as_str().unwrap_or_default().to_string();
        match (e["type"].as_str().unwrap_or_default(), e["delta"].as_str()) {
            ("TEXT_MESSAGE_CONTENT", Some(d)) => {
                *self.text.entry(id("messageId")).or_default() += d
            }
            ("REASONING_MESSAGE_CONTENT", Some(d)) => {
                *self.reasoning.entry(id("messageId")).or_default() += d
            }
            ("TOOL_CALL_ARGS", Some(d)) => *self.args.entry(id("toolCallId")).or_default() += d,
            _ => self.others.push(e.clone()),
        }
    }

    pub fn of(events: &[Value]) -> Self {
        let mut r = Reduced::default();
        events.iter().for_each(|e| r.apply(e));
        r
    }

    /// Applies protocol-1 frames as a client does: a snapshot replaces the state, events apply
    /// once (a seq already applied is ignored). Returns the last applied seq.
    pub fn apply_frames(&mut self, frames: &[Frame], mut last: u64) -> u64 {
        for f in frames {
            match f.ty() {
                "STREAM_SNAPSHOT" => {
                    *self = Reduced::of(f.json["events"].as_array().unwrap());
                    last = f.seq();
                }
                "STREAM_EVENT" if f.seq() > last => {
                    assert_eq!(f.seq(), last + 1, "a gap in seq");
                    self.apply(&f.json["event"]);
                    last = f.seq();
                }
                _ => {}
            }
        }
        last
    }
}
