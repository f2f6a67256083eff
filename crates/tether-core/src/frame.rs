//! Protocol-1 frames: `STREAM_SNAPSHOT`, `STREAM_EVENT` and `STREAM_END`, each one SSE event
//! `id: <run_id>:<seq>\ndata: <one-line JSON>\n\n`. The one encoder the journal (its window
//! encodes events when read) and the protocol-1 dialect share.

use bytes::{BufMut, Bytes, BytesMut};

use crate::record::compact::Capture;
use crate::record::json::write_str as write_json_str;
use crate::vocab::end::End;
use crate::vocab::RunId;

/// Digits of the largest seq (`u64::MAX`).
const MAX_SEQ_DIGITS: usize = 20;

fn write_id(out: &mut BytesMut, run_id: &RunId, seq: u64) {
    out.put_slice(b"id: ");
    out.put_slice(run_id.as_bytes());
    out.put_u8(b':');
    out.put_slice(itoa::Buffer::new().format(seq).as_bytes());
    out.put_slice(b"\ndata: ");
}

fn write_head(out: &mut BytesMut, ty: &str, run_id: &RunId, seq: u64) {
    write_id(out, run_id, seq);
    out.put_slice(b"{\"type\":\"");
    out.put_slice(ty.as_bytes());
    out.put_slice(b"\",\"run_id\":");
    write_json_str(out, run_id);
    out.put_slice(b",\"seq\":");
    out.put_slice(itoa::Buffer::new().format(seq).as_bytes());
}

/// Upper bound of a frame's fixed part: `id: <run_id>:<seq>\ndata: ` and the terminator, plus
/// `{"type":"STREAM_SNAPSHOT","run_id":<run_id>,"seq":<seq>` with room for escapes.
fn overhead(run_id: &RunId) -> usize {
    let id_line = "id: :\ndata: \n\n".len() + run_id.len() + MAX_SEQ_DIGITS;
    id_line + 64 + 2 * run_id.len() + MAX_SEQ_DIGITS
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
    pub fn new(run_id: &RunId) -> Self {
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
        // The seq twice, then `,"event":` and `}\n\n`.
        self.id.len() + self.head.len() + 2 * MAX_SEQ_DIGITS + 12 + event_len
    }

    /// Appends a `STREAM_EVENT` frame carrying `event` (one-line JSON) byte for byte.
    pub fn write(&self, out: &mut BytesMut, seq: u64, event: &[u8]) {
        self.write_split(out, seq, event, &[], None);
    }

    /// Like [`Self::write`], for an upstream event whose SSE `event:` name differs from its JSON
    /// `type`: the frame also carries `"event_name":<name>` after the event.
    pub fn write_named(&self, out: &mut BytesMut, seq: u64, event: &[u8], name: &[u8]) {
        self.write_split(out, seq, event, &[], Some(name));
    }

    /// [`Self::write`] or [`Self::write_named`] of the event whose JSON is `head` then `tail`
    /// (the replay window keeps an event as a prefix it shares and the rest).
    pub fn write_split(
        &self,
        out: &mut BytesMut,
        seq: u64,
        head: &[u8],
        tail: &[u8],
        name: Option<&[u8]>,
    ) {
        let mut n = itoa::Buffer::new();
        let seq = n.format(seq).as_bytes();
        let len = head.len() + tail.len();
        out.reserve(match name {
            None => self.max_len(len),
            Some(name) => self.max_len_named(len, name.len()),
        });
        out.put_slice(&self.id);
        out.put_slice(seq);
        out.put_slice(&self.head);
        out.put_slice(seq);
        out.put_slice(b",\"event\":");
        out.put_slice(head);
        out.put_slice(tail);
        if let Some(name) = name {
            out.put_slice(b",\"event_name\":");
            write_json_str(out, &String::from_utf8_lossy(name));
        }
        out.put_slice(b"}\n\n");
    }

    /// The encoded size of a frame carrying `event_len` bytes of event and an `event_name` of
    /// `name_len` bytes, at most (each name byte may take a six-byte escape).
    pub fn max_len_named(&self, event_len: usize, name_len: usize) -> usize {
        self.max_len(event_len) + ",\"event_name\":\"\"".len() + 6 * name_len
    }
}

/// A `STREAM_SNAPSHOT` frame of a compacted history covering seqs up to `seq`.
pub fn snapshot(run_id: &RunId, seq: u64, history: &Capture) -> Bytes {
    let mut out = BytesMut::with_capacity(overhead(run_id) + 16 + history.len());
    write_head(&mut out, "STREAM_SNAPSHOT", run_id, seq);
    out.put_slice(b",\"events\":[");
    history.write_to(&mut out);
    out.put_slice(b"]}\n\n");
    out.freeze()
}

/// A `STREAM_END` frame.
pub fn end(run_id: &RunId, end: &End) -> Bytes {
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
        out.put_slice(b",\"reason\":\"");
        out.put_slice(reason.as_str().as_bytes());
        out.put_u8(b'"');
    }
    out.put_slice(b"}\n\n");
    out.freeze()
}
