//! The bytes a shared journal stores: one stream entry per batch (each event's JSON, SSE name
//! and transient flag, and the batch's raw frames with their index), the checkpoint value, and
//! the end record. Length-prefixed binary, so frames with newlines need no escaping. Pure.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use serde_json::{json, Value};

use crate::journal::raw::Frame;
use crate::record::format::Event;
use crate::vocab::end::{End, EndReason};
use crate::vocab::RunId;

const TRANSIENT: u8 = 1;
const NAMED_EVENT: u8 = 2;
const RAW_NAMED: u8 = 1;
const RAW_ID: u8 = 2;
const RAW_CURSOR: u8 = 4;

/// One batch as read back: its events and raw frames.
#[derive(Debug, Default)]
pub struct Batch {
    /// The events, in seq order.
    pub events: Vec<Event>,
    /// The index of the first raw frame.
    pub raw_first: u64,
    /// The raw frames.
    pub raw: Vec<Frame>,
}

fn put_bytes(out: &mut BytesMut, b: &[u8]) {
    out.put_u32_le(b.len() as u32);
    out.put_slice(b);
}

/// Encodes a batch of events and the raw frames read with them (frame `raw_first` first).
pub fn encode_batch(out: &mut BytesMut, events: &[Event], raw_first: u64, raw: &[Frame]) {
    out.put_u64_le(raw_first);
    out.put_u32_le(events.len() as u32);
    for e in events {
        let flags = (e.transient as u8 * TRANSIENT) | (e.sse_name.is_some() as u8 * NAMED_EVENT);
        out.put_u8(flags);
        if let Some(n) = &e.sse_name {
            put_bytes(out, n);
        }
        put_bytes(out, &e.json);
    }
    out.put_u32_le(raw.len() as u32);
    for f in raw {
        let flags = (f.named as u8 * RAW_NAMED)
            | (f.id.is_some() as u8 * RAW_ID)
            | (f.cursor.is_some() as u8 * RAW_CURSOR);
        out.put_u8(flags);
        put_bytes(out, &f.bytes);
        if let Some(id) = &f.id {
            put_bytes(out, id);
        }
        if let Some(c) = f.cursor {
            out.put_i64_le(c);
        }
    }
}

/// Reads `n` bytes, or `None` when the input is short.
fn take(b: &mut Bytes, n: usize) -> Option<Bytes> {
    (b.remaining() >= n).then(|| b.split_to(n))
}

fn get_bytes(b: &mut Bytes) -> Option<Bytes> {
    let n = (b.remaining() >= 4).then(|| b.get_u32_le())? as usize;
    take(b, n)
}

/// An event rebuilt from what the journal stored: its JSON, SSE name and transient flag (it
/// merges with no other event; its type and name are not needed to serve it).
fn event(json: Bytes, sse_name: Option<Bytes>, transient: bool) -> Event {
    Event {
        transient,
        sse_name,
        ..Event::verbatim(json, 0..0, 0..0)
    }
}

/// Decodes a batch written by [`encode_batch`]; `None` when it is malformed.
pub fn decode_batch(mut b: Bytes) -> Option<Batch> {
    if b.remaining() < 12 {
        return None;
    }
    let raw_first = b.get_u64_le();
    let n = b.get_u32_le() as usize;
    let mut batch = Batch {
        raw_first,
        events: Vec::with_capacity(n.min(4096)),
        raw: Vec::new(),
    };
    for _ in 0..n {
        let flags = *take(&mut b, 1)?.first()?;
        let name = match flags & NAMED_EVENT {
            0 => None,
            _ => Some(get_bytes(&mut b)?),
        };
        let json = get_bytes(&mut b)?;
        batch.events.push(event(json, name, flags & TRANSIENT != 0));
    }
    let n = (b.remaining() >= 4).then(|| b.get_u32_le())? as usize;
    for _ in 0..n {
        let flags = *take(&mut b, 1)?.first()?;
        // Raw frames outlive the batch (the raw record keeps them): each in an allocation of
        // its own, so they never keep the whole batch's buffer alive.
        let bytes = Bytes::copy_from_slice(&get_bytes(&mut b)?);
        let id = match flags & RAW_ID {
            0 => None,
            _ => Some(Bytes::copy_from_slice(&get_bytes(&mut b)?)),
        };
        let cursor = match flags & RAW_CURSOR {
            0 => None,
            _ => Some(take(&mut b, 8)?.get_i64_le()),
        };
        batch.raw.push(Frame {
            bytes,
            id,
            cursor,
            named: flags & RAW_NAMED != 0,
        });
    }
    Some(batch)
}

/// A checkpoint: the compacted history at `seq`, and where the raw record stood then.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Checkpoint {
    /// The last seq the history covers.
    pub seq: u64,
    /// Events in the compacted history.
    pub events: usize,
    /// The raw record's next frame index at `seq`.
    pub raw_end: u64,
    /// Whether the upstream used `event:` lines.
    pub named: bool,
    /// The `events` array contents.
    pub body: Bytes,
}

/// Encodes a checkpoint: `<seq> <events> <raw_end> <named>\n<body>`. The seq travels inside the
/// value, so a reader never pairs a history with the wrong seq.
pub fn encode_checkpoint(c: &Checkpoint) -> Bytes {
    let head = format!("{} {} {} {}\n", c.seq, c.events, c.raw_end, c.named as u8);
    let mut out = BytesMut::with_capacity(head.len() + c.body.len());
    out.put_slice(head.as_bytes());
    out.put_slice(&c.body);
    out.freeze()
}

/// Decodes a checkpoint; `None` when malformed.
pub fn decode_checkpoint(mut b: Bytes) -> Option<Checkpoint> {
    let nl = memchr::memchr(b'\n', &b)?;
    let head = b.split_to(nl + 1);
    let text = std::str::from_utf8(&head[..nl]).ok()?;
    let mut f = text.split(' ').map(str::parse::<u64>);
    let (seq, events, raw_end, named) = (
        f.next()?.ok()?,
        f.next()?.ok()?,
        f.next()?.ok()?,
        f.next()?.ok()?,
    );
    Some(Checkpoint {
        seq,
        events: events as usize,
        raw_end,
        named: named != 0,
        body: b,
    })
}

/// The end record's JSON (its seq is the entry's).
pub fn encode_end(end: &End) -> String {
    json!({
        "persisted": end.persisted,
        "superseded": end.superseded,
        "next_run_id": end.next_run_id,
        "reason": end.reason.map(EndReason::as_str),
    })
    .to_string()
}

/// Decodes an end record at `seq`; `None` when malformed.
pub fn decode_end(text: &[u8], seq: u64) -> Option<End> {
    let v: Value = serde_json::from_slice(text).ok()?;
    let reason = match v.get("reason").and_then(Value::as_str) {
        None => None,
        Some(r) => Some(*EndReason::ALL.iter().find(|x| x.as_str() == r)?),
    };
    Some(End {
        seq,
        persisted: v.get("persisted")?.as_bool()?,
        superseded: v.get("superseded")?.as_bool()?,
        next_run_id: v
            .get("next_run_id")
            .and_then(Value::as_str)
            .map(RunId::from),
        reason,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_round_trips_with_names_flags_and_raw_frames() {
        let events = vec![
            event(Bytes::from_static(b"{\"a\":1}"), None, false),
            event(
                Bytes::from_static(b"{\"b\":2}"),
                Some(Bytes::from_static(b"ping")),
                true,
            ),
        ];
        let raw = vec![Frame {
            bytes: Bytes::from_static(b"event: ping\ndata: {}\n\n"),
            id: Some(Bytes::from_static(b"7")),
            cursor: Some(-3),
            named: true,
        }];
        let mut out = BytesMut::new();
        encode_batch(&mut out, &events, 9, &raw);
        let b = decode_batch(out.freeze()).unwrap();
        assert_eq!(b.raw_first, 9);
        assert_eq!(&b.events[1].json[..], b"{\"b\":2}");
        assert_eq!(b.events[1].sse_name.as_deref(), Some(&b"ping"[..]));
        assert!(b.events[1].transient && !b.events[0].transient);
        assert_eq!(b.raw, raw);
        assert!(decode_batch(Bytes::from_static(b"\x01\x02")).is_none());
    }

    #[test]
    fn checkpoints_and_ends_round_trip() {
        let c = Checkpoint {
            seq: 42,
            events: 3,
            raw_end: 40,
            named: true,
            body: Bytes::from_static(b"{\"x\":\"a\nb\"},{}"),
        };
        assert_eq!(decode_checkpoint(encode_checkpoint(&c)), Some(c));
        let end = End {
            seq: 5,
            persisted: false,
            superseded: true,
            next_run_id: Some("r2".into()),
            reason: Some(EndReason::OwnerLost),
        };
        assert_eq!(decode_end(encode_end(&end).as_bytes(), 5), Some(end));
    }
}
