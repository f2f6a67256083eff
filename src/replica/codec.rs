//! The bytes a shared journal stores and rings: one stream entry per append (its batches, each
//! with its events' JSON, SSE name and transient flag, and its raw frames with their index),
//! the checkpoint value, the end record, and the doorbell and control messages. Length-prefixed
//! binary, so frames with newlines need no escaping. Pure, and total: a replica decodes
//! whatever is in Redis, so every decoder answers `None` (or an error) on bytes it did not
//! write, never panics (`fuzz/fuzz_targets/journal.rs`).

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

/// The largest seq or raw frame index a journal holds: the largest integer a JSON number keeps
/// exactly (seqs reach clients as JSON numbers). A larger one in Redis is not tether's, and a
/// mirror seeded at it would overflow its head: the decoders refuse it.
pub const MAX_SEQ: u64 = (1 << 53) - 1;

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
    if raw_first > MAX_SEQ {
        return None;
    }
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

/// A stream entry's data (or a doorbell's) that is cut or not batches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Malformed;

/// Appends one batch to a stream entry's data: its length (`u32`, little-endian), then the
/// batch as [`encode_batch`] writes it.
pub fn encode_entry_batch(out: &mut BytesMut, events: &[Event], raw_first: u64, raw: &[Frame]) {
    let at = out.len();
    out.put_u32_le(0);
    encode_batch(out, events, raw_first, raw);
    let len = (out.len() - at - 4) as u32;
    out[at..at + 4].copy_from_slice(&len.to_le_bytes());
}

/// Takes the next batch off a stream entry's data (batches as [`encode_entry_batch`] writes
/// them): `Ok(None)` once fewer than a length's four bytes are left.
pub fn next_batch(data: &mut Bytes) -> Result<Option<Batch>, Malformed> {
    if data.remaining() < 4 {
        return Ok(None);
    }
    let len = data.get_u32_le() as usize;
    let b = take(data, len).ok_or(Malformed)?;
    decode_batch(b).map(Some).ok_or(Malformed)
}

/// A doorbell carrying the stream entry just appended: `<first> <last> <data>`, batches of
/// seqs `first..=last` (the append script writes it; any other doorbell, such as `end`, only
/// wakes the follower).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rung {
    /// The entry's first seq.
    pub first: u64,
    /// The entry's last seq.
    pub last: u64,
    /// The entry's data (see [`next_batch`]).
    pub data: Bytes,
}

/// The doorbell message the append script rings for `r`.
pub fn encode_rung(r: &Rung) -> Bytes {
    let mut out = BytesMut::from(format!("{} {} ", r.first, r.last).as_bytes());
    out.extend_from_slice(&r.data);
    out.freeze()
}

/// Decodes a doorbell that carries its entry; `None` for any other message.
pub fn decode_rung(msg: &Bytes) -> Option<Rung> {
    let sp = |from: usize| {
        msg[from..]
            .iter()
            .position(|&b| b == b' ')
            .map(|i| i + from)
    };
    let a = sp(0)?;
    let b = sp(a + 1)?;
    let num = |r: &[u8]| {
        let t = std::str::from_utf8(r).ok()?;
        // Only the digits the script writes (`parse` also takes a leading `+`).
        let n: u64 = t
            .bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| t.parse().ok())??;
        (n <= MAX_SEQ).then_some(n)
    };
    Some(Rung {
        first: num(&msg[..a])?,
        last: num(&msg[a + 1..b])?,
        data: msg.slice(b + 1..),
    })
}

/// A stop request sent to a run's producer on its replica's control channel:
/// `<run id>\n<reason>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StopRequest {
    /// The run to stop.
    pub run: RunId,
    /// Why (`cancelled` when the message names no reason tether knows).
    pub reason: EndReason,
}

/// The control message asking for `s`.
pub fn encode_stop(s: &StopRequest) -> String {
    format!("{}\n{}", s.run, s.reason.as_str())
}

/// Decodes a control message (any bytes: a message is a stop request).
pub fn decode_stop(msg: &[u8]) -> StopRequest {
    let msg = String::from_utf8_lossy(msg);
    let (run, reason) = msg.split_once('\n').unwrap_or((&msg, "cancelled"));
    let reason = EndReason::ALL
        .iter()
        .copied()
        .find(|r| r.as_str() == reason)
        .unwrap_or(EndReason::Cancelled);
    StopRequest {
        run: RunId::from(run),
        reason,
    }
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
    if seq > MAX_SEQ || raw_end > MAX_SEQ {
        return None;
    }
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

    #[test]
    fn seqs_past_what_a_json_number_keeps_are_refused() {
        // Found by fuzz/fuzz_targets/journal.rs: a mirror seeded at seq u64::MAX overflowed.
        let max = u64::MAX;
        let ck = Bytes::from(format!("{max} 0 0 0\n"));
        assert_eq!(decode_checkpoint(ck), None);
        let ck = Bytes::from(format!("{MAX_SEQ} 0 {MAX_SEQ} 0\n"));
        assert_eq!(decode_checkpoint(ck).map(|c| c.seq), Some(MAX_SEQ));
        assert_eq!(decode_rung(&Bytes::from(format!("1 {max} d"))), None);
        let mut out = BytesMut::new();
        encode_batch(&mut out, &[], max, &[]);
        assert!(decode_batch(out.freeze()).is_none());
    }
}
