//! Protocol-1 frames: `STREAM_SNAPSHOT`, `STREAM_EVENT` and `STREAM_END`, each one SSE event
//! `id: <run_id>:<seq>\ndata: <one-line JSON>\n\n`.

use bytes::{BufMut, Bytes, BytesMut};

use crate::compact::Capture;
use crate::event::write_json_str;
use crate::sse::frame_len;

/// How a run ended, as told to its observers by `STREAM_END`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct End {
    /// The run's last seq.
    pub seq: u64,
    /// Whether the backend's answer was saved (never claimed when it was not).
    pub persisted: bool,
    /// Whether a newer run of the chat replaced this one.
    pub superseded: bool,
    /// The replacing run, when superseded.
    pub next_run_id: Option<String>,
    /// Why the run ended without being persisted (`eof`, `upstream_reset`, `cancelled`, …).
    pub reason: Option<&'static str>,
}

fn write_id(out: &mut BytesMut, run_id: &str, seq: u64) {
    out.put_slice(b"id: ");
    out.put_slice(run_id.as_bytes());
    out.put_u8(b':');
    out.put_slice(itoa::Buffer::new().format(seq).as_bytes());
    out.put_slice(b"\ndata: ");
}

fn write_head(out: &mut BytesMut, ty: &str, run_id: &str, seq: u64) {
    write_id(out, run_id, seq);
    out.put_slice(b"{\"type\":\"");
    out.put_slice(ty.as_bytes());
    out.put_slice(b"\",\"run_id\":");
    write_json_str(out, run_id);
    out.put_slice(b",\"seq\":");
    out.put_slice(itoa::Buffer::new().format(seq).as_bytes());
}

/// Upper bound of a frame's fixed part (id line, type, run id, seq, terminator).
fn overhead(run_id: &str) -> usize {
    frame_len(run_id.len() + 21, 0) + 64 + run_id.len()
}

/// Encodes the `STREAM_EVENT` frames of one run; the parts that do not change per event are
/// rendered once.
#[derive(Debug, Clone)]
pub struct EventEncoder {
    /// `id: <run_id>:`
    id: Bytes,
    /// `\ndata: {"type":"STREAM_EVENT","run_id":"<run_id>","seq":`
    head: Bytes,
}

impl EventEncoder {
    /// An encoder for the run `run_id`.
    pub fn new(run_id: &str) -> Self {
        let mut id = BytesMut::new();
        id.put_slice(b"id: ");
        id.put_slice(run_id.as_bytes());
        id.put_u8(b':');
        let mut head = BytesMut::new();
        head.put_slice(b"\ndata: {\"type\":\"STREAM_EVENT\",\"run_id\":");
        write_json_str(&mut head, run_id);
        head.put_slice(b",\"seq\":");
        EventEncoder {
            id: id.freeze(),
            head: head.freeze(),
        }
    }

    /// The encoded size of a frame carrying `event_len` bytes of event, at most.
    pub fn max_len(&self, event_len: usize) -> usize {
        self.id.len() + self.head.len() + 2 * 20 + 12 + event_len
    }

    /// Appends a `STREAM_EVENT` frame carrying `event` (one-line JSON) byte for byte.
    pub fn write(&self, out: &mut BytesMut, seq: u64, event: &[u8]) {
        let mut n = itoa::Buffer::new();
        let seq = n.format(seq).as_bytes();
        out.reserve(self.max_len(event.len()));
        out.put_slice(&self.id);
        out.put_slice(seq);
        out.put_slice(&self.head);
        out.put_slice(seq);
        out.put_slice(b",\"event\":");
        out.put_slice(event);
        out.put_slice(b"}\n\n");
    }
}

/// A `STREAM_SNAPSHOT` frame of a compacted history covering seqs up to `seq`.
pub fn snapshot(run_id: &str, seq: u64, history: &Capture) -> Bytes {
    let mut out = BytesMut::with_capacity(overhead(run_id) + 16 + history.len());
    write_head(&mut out, "STREAM_SNAPSHOT", run_id, seq);
    out.put_slice(b",\"events\":[");
    history.write_to(&mut out);
    out.put_slice(b"]}\n\n");
    out.freeze()
}

/// A `STREAM_END` frame.
pub fn end(run_id: &str, end: &End) -> Bytes {
    let mut out = BytesMut::with_capacity(overhead(run_id) + 128);
    write_head(&mut out, "STREAM_END", run_id, end.seq);
    out.put_slice(if end.persisted {
        &b",\"persisted\":true"[..]
    } else {
        b",\"persisted\":false"
    });
    out.put_slice(if end.superseded {
        &b",\"superseded\":true"[..]
    } else {
        b",\"superseded\":false"
    });
    if let Some(next) = &end.next_run_id {
        out.put_slice(b",\"next_run_id\":");
        write_json_str(&mut out, next);
    }
    if let Some(reason) = end.reason {
        out.put_slice(b",\"reason\":");
        write_json_str(&mut out, reason);
    }
    out.put_slice(b"}\n\n");
    out.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn parse(frame: &[u8]) -> (String, Value) {
        let text = std::str::from_utf8(frame).unwrap();
        let rest = text.strip_prefix("id: ").unwrap();
        let (id, rest) = rest.split_once('\n').unwrap();
        let data = rest
            .strip_prefix("data: ")
            .unwrap()
            .strip_suffix("\n\n")
            .unwrap();
        assert!(!data.contains('\n'));
        (id.to_string(), serde_json::from_str(data).unwrap())
    }

    #[test]
    fn event_frame_embeds_the_event_verbatim() {
        let mut out = BytesMut::new();
        let ev = br#"{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"hello"}"#;
        let enc = EventEncoder::new("r1");
        enc.write(&mut out, 43, ev);
        assert!(out.len() <= enc.max_len(ev.len()));
        assert_eq!(
            &out[..],
            &b"id: r1:43\ndata: {\"type\":\"STREAM_EVENT\",\"run_id\":\"r1\",\"seq\":43,\"event\":{\"type\":\"TEXT_MESSAGE_CONTENT\",\"messageId\":\"m\",\"delta\":\"hello\"}}\n\n"[..]
        );
    }

    #[test]
    fn snapshot_frame_wraps_the_history() {
        let mut c = crate::compact::Compactor::new();
        let empty = snapshot("r", 0, &c.capture());
        assert_eq!(
            parse(&empty),
            (
                "r:0".into(),
                json!({"type":"STREAM_SNAPSHOT","run_id":"r","seq":0,"events":[]})
            )
        );
        c.push(&crate::event::classify(&crate::sse::SseEvent {
            event: None,
            data: bytes::Bytes::from_static(br#"{"type":"RUN_STARTED"}"#),
            id: None,
        }));
        let (id, v) = parse(&snapshot("r", 1, &c.capture()));
        assert_eq!(id, "r:1");
        assert_eq!(v["events"], json!([{"type":"RUN_STARTED"}]));
    }

    #[test]
    fn end_frame_carries_terminal_state() {
        let f = end(
            "r",
            &End {
                seq: 43,
                persisted: true,
                superseded: false,
                next_run_id: None,
                reason: None,
            },
        );
        assert_eq!(
            parse(&f),
            (
                "r:43".into(),
                json!({"type":"STREAM_END","run_id":"r","seq":43,"persisted":true,"superseded":false})
            )
        );
        let f = end(
            "r",
            &End {
                seq: 7,
                persisted: false,
                superseded: true,
                next_run_id: Some("r2".into()),
                reason: Some("superseded"),
            },
        );
        assert_eq!(
            parse(&f).1,
            json!({"type":"STREAM_END","run_id":"r","seq":7,"persisted":false,"superseded":true,"next_run_id":"r2","reason":"superseded"})
        );
    }
}
