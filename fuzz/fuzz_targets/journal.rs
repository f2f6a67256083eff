//! Fuzzes the shared journal's codec (`tether::replica::codec`): a replica decodes whatever is
//! in Redis, so arbitrary bytes are decoded as a stream entry's batches, a checkpoint, an end
//! record, a doorbell carrying an entry and a control channel's stop request. Nothing may panic;
//! what decodes must re-encode to bytes that decode to the same value (and re-encode to the same
//! bytes); and what decodes is applied as a follower applies it: a mirror seeded from the
//! checkpoint, the doorbell's batches appended at its seqs, then read back.
//!
//! Input: one selector byte (low 3 bits: which decoder reads the rest as a whole), two length
//! bytes, then the bytes. The bytes after the lengths are also cut into a checkpoint (the first
//! length), an end record (the second) and a doorbell (the rest), the three things a follower
//! reads for one run.

#![no_main]

use bytes::{Bytes, BytesMut};
use libfuzzer_sys::fuzz_target;
use tether::replica::codec::{self, Batch, Checkpoint, Rung};
use tether_core::journal::memory::MemoryJournal;
use tether_core::journal::Journal;
use tether_core::record::compact::Compactor;
use tether_core::vocab::RunId;

/// A batch's stored parts, comparable.
fn parts(
    b: &Batch,
) -> (
    u64,
    Vec<(Bytes, Option<Bytes>, bool)>,
    Vec<tether_core::journal::raw::Frame>,
) {
    let events = b
        .events
        .iter()
        .map(|e| (e.json.clone(), e.sse_name.clone(), e.transient))
        .collect();
    (b.raw_first, events, b.raw.clone())
}

/// Decodes a stream entry's data; each batch that decodes round-trips.
fn entry(data: &Bytes) -> Vec<Batch> {
    let mut rest = data.clone();
    let mut out = Vec::new();
    while let Ok(Some(b)) = codec::next_batch(&mut rest) {
        let mut again = BytesMut::new();
        codec::encode_entry_batch(&mut again, &b.events, b.raw_first, &b.raw);
        let mut again = again.freeze();
        let copy = codec::next_batch(&mut again)
            .expect("a re-encoded batch decodes")
            .expect("a re-encoded batch is there");
        assert!(again.is_empty(), "one batch re-encoded is one batch");
        assert_eq!(parts(&copy), parts(&b), "a batch round-trips");
        out.push(b);
    }
    out
}

/// Decodes a checkpoint; what decodes round-trips.
fn checkpoint(b: &Bytes) -> Option<Checkpoint> {
    let c = codec::decode_checkpoint(b.clone())?;
    let bytes = codec::encode_checkpoint(&c);
    assert_eq!(codec::decode_checkpoint(bytes.clone()).as_ref(), Some(&c));
    assert_eq!(codec::encode_checkpoint(&c), bytes);
    Some(c)
}

/// Decodes an end record; what decodes round-trips.
fn end(b: &[u8], seq: u64) {
    if let Some(e) = codec::decode_end(b, seq) {
        let text = codec::encode_end(&e);
        assert_eq!(codec::decode_end(text.as_bytes(), seq).as_ref(), Some(&e));
    }
}

/// Decodes a doorbell; what decodes round-trips.
fn rung(b: &Bytes) -> Option<Rung> {
    let r = codec::decode_rung(b)?;
    let msg = codec::encode_rung(&r);
    assert_eq!(codec::decode_rung(&msg).as_ref(), Some(&r));
    assert_eq!(codec::encode_rung(&r), msg);
    Some(r)
}

/// Decodes a control message; it round-trips when it names a reason tether knows.
fn stop(b: &[u8]) {
    let s = codec::decode_stop(b);
    let msg = codec::encode_stop(&s);
    let again = codec::decode_stop(msg.as_bytes());
    assert_eq!(again.reason, s.reason);
    // A run id with a `\n` in it is cut at its first one, as any message is.
    if !s.run.as_str().contains('\n') {
        assert_eq!(again, s);
    }
}

/// A follower's mirror: seeded from the checkpoint, the doorbell's batches appended at its
/// seqs, then read back as observers read it.
fn follow(ck: Option<Checkpoint>, r: Option<Rung>) {
    let ck = ck.unwrap_or_default();
    let j = MemoryJournal::mirror(
        &RunId::from("fuzz"),
        64,
        Some(1 << 16),
        ck.seq,
        Compactor::seeded(&ck.body, ck.events),
        ck.raw_end,
        ck.named,
    );
    if let Some(r) = r {
        let mut at = r.first;
        for b in entry(&r.data) {
            let n = b.events.len() as u64;
            if j.append_at(at, &b.events, b.raw, b.raw_first, ck.seq)
                .is_err()
            {
                break;
            }
            at = at.saturating_add(n);
        }
    }
    let cap = j.capture();
    assert!(cap.seq <= j.head());
    let _ = j.read_after(ck.seq, 1 << 20);
    let _ = j.read_raw(0, 1 << 20);
}

fuzz_target!(|input: &[u8]| {
    let [selector, rest @ ..] = input else {
        return;
    };
    let whole = Bytes::copy_from_slice(rest);
    match selector & 7 {
        0 => drop(entry(&whole)),
        1 => drop(checkpoint(&whole)),
        2 => end(&whole, u64::from(*selector)),
        3 => drop(rung(&whole)),
        4 => stop(&whole),
        _ => {}
    }
    // The same bytes as the three things a follower reads for one run.
    let [a, b, parts @ ..] = rest else {
        return follow(None, None);
    };
    let (ck, parts) = parts.split_at(usize::from(*a).min(parts.len()));
    let (e, r) = parts.split_at(usize::from(*b).min(parts.len()));
    let ck = checkpoint(&Bytes::copy_from_slice(ck));
    end(e, 0);
    follow(ck, rung(&Bytes::copy_from_slice(r)));
});
