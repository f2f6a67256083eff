//! The replay window: a run's last events, their JSON written back to back into blocks, each
//! stored as the length of the prefix it shares with a base event of its block plus the rest,
//! and encoded as protocol-1 `STREAM_EVENT` frames when read.
//!
//! Events of one shape share everything up to what changes (a token event's JSON up to its
//! delta, often further): a block keeps up to [`MAX_BASES`] base events whole, and every other
//! event of the block as its shared-prefix length against the base it shares most with, plus its
//! suffix. Reading one event is two slices, whatever the block. An event costs its suffix (and
//! its SSE `event:` name, when it has one) plus a 20-byte slot. A read encodes its frames into
//! one buffer. Blocks are freed when the window slides past all of their events.
//!
//! Before this, the window kept every event's whole JSON and a 24-byte slot (about 116 bytes of
//! a ~92-byte token event), and before that every frame encoded, each batch its own allocation
//! with a shared-buffer header, and a 48-byte entry per frame: about 360 bytes. Pure: no I/O.

use std::collections::VecDeque;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::time::Instant;

use crate::frame::EventEncoder;

/// The first block of a run; blocks double up to [`MAX_BLOCK`], so a short run holds little
/// and a long one few blocks. The last block's spare room is most of a run's slack.
const MIN_BLOCK: usize = 256;
/// Largest block allocated for growth (a larger event gets a block of its own size).
const MAX_BLOCK: usize = 2 * 1024;
/// Base events a block keeps whole, at most (events of that many shapes share a prefix).
const MAX_BASES: usize = 4;
/// A prefix shorter than this is not worth a base's lookups: the event becomes a base itself
/// while the block has room for one.
const MIN_SHARED: usize = 16;
/// The longest prefix an event shares (the slot's width).
const MAX_SHARED: usize = u16::MAX as usize;
/// A slot's base when the event is whole.
const WHOLE: u8 = u8::MAX;

/// Where one event's bytes are, and when it arrived.
#[derive(Debug, Clone, Copy)]
struct Slot {
    /// Offset in its block: the SSE event name (`name` bytes), then the JSON's suffix (`len`
    /// bytes), the JSON being `shared` bytes of base `base` followed by the suffix.
    off: u32,
    name: u32,
    len: u32,
    /// Microseconds from its block's start to the event's arrival.
    at: u32,
    shared: u16,
    base: u8,
}

/// A block of event bytes: the events from seq `first` up to the next block's first.
#[derive(Debug)]
struct Block {
    first: u64,
    data: Vec<u8>,
    /// The whole JSON of each base event: offset and length in `data`.
    bases: Vec<(u32, u32)>,
    /// Nanoseconds from the window's creation to the block's first event.
    start: u64,
}

impl Block {
    /// Bytes the block has allocated: its data buffer and its bases.
    fn allocated(&self) -> usize {
        self.data.capacity() + self.bases.capacity() * std::mem::size_of::<(u32, u32)>()
    }

    /// The event of `s`: its name, the prefix it shares with its base, and its suffix.
    fn parts(&self, s: &Slot) -> (&[u8], &[u8], &[u8]) {
        let (off, name, len) = (s.off as usize, s.name as usize, s.len as usize);
        let prefix = match s.base {
            WHOLE => &[][..],
            b => {
                let (boff, _) = self.bases[b as usize];
                &self.data[boff as usize..boff as usize + s.shared as usize]
            }
        };
        (
            &self.data[off..off + name],
            prefix,
            &self.data[off + name..off + name + len],
        )
    }

    /// The base `json` shares the longest prefix with, and that prefix's length.
    fn best_base(&self, json: &[u8]) -> Option<(u8, usize)> {
        self.bases
            .iter()
            .enumerate()
            .map(|(i, &(off, len))| {
                let base = &self.data[off as usize..(off + len) as usize];
                (i as u8, common_prefix(base, json, MAX_SHARED))
            })
            .max_by_key(|&(_, n)| n)
    }
}

/// How many leading bytes `a` and `b` share, at most `max`: compared eight bytes a step, the
/// first differing byte found from the lowest set bit of the words' XOR.
fn common_prefix(a: &[u8], b: &[u8], max: usize) -> usize {
    let len = a.len().min(b.len()).min(max);
    let (a, b) = (&a[..len], &b[..len]);
    let mut n = 0;
    for (x, y) in a.chunks_exact(8).zip(b.chunks_exact(8)) {
        let word = |c: &[u8]| u64::from_le_bytes(c.try_into().unwrap_or_default());
        let diff = word(x) ^ word(y);
        if diff != 0 {
            return n + (diff.trailing_zeros() / 8) as usize;
        }
        n += 8;
    }
    n + a[n..]
        .iter()
        .zip(&b[n..])
        .take_while(|(x, y)| x == y)
        .count()
}

/// The last `cap` events of a run, by seq.
#[derive(Debug)]
pub struct Window {
    cap: usize,
    slots: VecDeque<Slot>,
    /// Seq of `slots[0]` (the next seq when the window is empty).
    first: u64,
    /// The last block is the one written to.
    blocks: VecDeque<Block>,
    /// Event bytes held for the events in the window (names and suffixes; bases whole).
    bytes: usize,
    /// [`Block::allocated`] summed over `blocks`, kept as blocks come, grow and go: the journal
    /// counts its held bytes after every append, and a long run's window holds thousands of
    /// blocks.
    block_bytes: usize,
    next_block: usize,
    base: Instant,
}

impl Window {
    /// An empty window keeping at most `cap` events, whose first event will be seq `first`.
    pub fn new(cap: usize, first: u64) -> Self {
        Window {
            cap: cap.max(1),
            slots: VecDeque::new(),
            first,
            blocks: VecDeque::new(),
            bytes: 0,
            block_bytes: 0,
            next_block: MIN_BLOCK,
            base: Instant::now(),
        }
    }

    /// Seq of the oldest event kept (the next seq when empty).
    pub fn first(&self) -> u64 {
        self.first
    }

    /// Number of events kept.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether no event is kept.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Bytes held for the events kept: their names and what they do not share with a base.
    pub fn event_bytes(&self) -> usize {
        self.bytes
    }

    /// Bytes allocated: the blocks still held (with the last one's spare room) and the slots.
    pub fn allocated(&self) -> usize {
        self.block_bytes + self.slots.capacity() * std::mem::size_of::<Slot>()
    }

    /// Appends the next event: its JSON and, when it differs from its `type`, its SSE `event:`
    /// name. Drops the oldest event past the cap.
    pub fn push(&mut self, json: &[u8], name: Option<&[u8]>, at: Instant) {
        let name = name.unwrap_or_default();
        let next = self.first + self.slots.len() as u64;
        let now = at.saturating_duration_since(self.base).as_nanos() as u64;
        // Against the current block's bases: how much of `json` it need not store.
        let fits = |b: &Block, need: usize| {
            b.data.capacity() - b.data.len() >= need
                && now.saturating_sub(b.start) / 1_000 <= u32::MAX as u64
        };
        let mut shared = None;
        if let Some(b) = self.blocks.back() {
            let best = b.best_base(json).filter(|&(_, n)| n > 0);
            let whole = best.is_none_or(|(_, n)| n < MIN_SHARED) && b.bases.len() < MAX_BASES;
            let stored = match (whole, best) {
                (false, Some((_, n))) => json.len() - n,
                _ => json.len(),
            };
            if fits(b, name.len() + stored) {
                shared = Some(if whole { None } else { best });
            }
        }
        let shared = match shared {
            Some(s) => s,
            None => {
                let size = self.next_block.max(name.len() + json.len());
                self.next_block = (self.next_block * 2).min(MAX_BLOCK);
                let block = Block {
                    first: next,
                    data: Vec::with_capacity(size),
                    bases: Vec::new(),
                    start: now,
                };
                self.block_bytes += block.allocated();
                self.blocks.push_back(block);
                None
            }
        };
        let Some(block) = self.blocks.back_mut() else {
            return;
        };
        let before = block.allocated();
        let off = block.data.len();
        block.data.extend_from_slice(name);
        let (base, n) = match shared {
            Some((b, n)) => (b, n),
            None if block.bases.len() < MAX_BASES => {
                block
                    .bases
                    .push(((off + name.len()) as u32, json.len() as u32));
                (WHOLE, 0)
            }
            None => (WHOLE, 0),
        };
        block.data.extend_from_slice(&json[n..]);
        self.block_bytes = self.block_bytes + block.allocated() - before;
        let stored = name.len() + json.len() - n;
        self.bytes += stored;
        self.slots.push_back(Slot {
            off: off as u32,
            name: name.len() as u32,
            len: (json.len() - n) as u32,
            at: (now.saturating_sub(block.start) / 1_000) as u32,
            shared: n as u16,
            base,
        });
        if self.slots.len() > self.cap {
            self.pop_front();
        }
    }

    fn pop_front(&mut self) {
        if let Some(s) = self.slots.pop_front() {
            self.bytes -= (s.name + s.len) as usize;
            self.first += 1;
        }
        // A block goes once the window starts at or after the block that follows it.
        while self.blocks.len() > 1 && self.blocks[1].first <= self.first {
            if let Some(gone) = self.blocks.pop_front() {
                self.block_bytes -= gone.allocated();
            }
        }
    }

    /// Encodes up to `max` events from seq `from` on (clamped to [`Self::first`]) as frames
    /// into one buffer and appends each frame, a slice of it, to `out`; returns the arrival
    /// time of the last one.
    pub fn read(
        &self,
        from: u64,
        max: usize,
        encoder: &EventEncoder,
        out: &mut Vec<Bytes>,
    ) -> Option<Instant> {
        let end = self.first + self.slots.len() as u64;
        let from = from.max(self.first);
        let to = end.min(from.saturating_add(max as u64));
        if from >= to {
            return None;
        }
        let size: usize = (from..to)
            .map(|seq| {
                let s = self.slots[(seq - self.first) as usize];
                let len = s.shared as usize + s.len as usize;
                match s.name {
                    0 => encoder.max_len(len),
                    n => encoder.max_len_named(len, n as usize),
                }
            })
            .sum();
        let mut buf = BytesMut::with_capacity(size);
        let mut last = 0;
        self.walk(from, to, |seq, block, s| {
            let (name, head, tail) = block.parts(s);
            let name = (!name.is_empty()).then_some(name);
            encoder.write_split(&mut buf, seq, head, tail, name);
            // Each frame a slice of the one buffer (the spare room stays with `buf`).
            out.push(buf.split().freeze());
            last = block.start + s.at as u64 * 1_000;
        });
        Some(self.base + Duration::from_nanos(last))
    }

    /// Appends the JSON of up to `max` events from seq `from` on (clamped to [`Self::first`]) to
    /// `out`, each after a comma unless `out` ends with `[` (a JSON array being built); returns
    /// how many were written. No frame envelope: what a Durable Streams reader gets.
    pub fn read_json(&self, from: u64, max: usize, out: &mut BytesMut) -> usize {
        let end = self.first + self.slots.len() as u64;
        let from = from.max(self.first);
        let to = end.min(from.saturating_add(max as u64));
        if from >= to {
            return 0;
        }
        let size: usize = (from..to)
            .map(|seq| {
                let s = &self.slots[(seq - self.first) as usize];
                s.shared as usize + s.len as usize + 1
            })
            .sum();
        out.reserve(size);
        self.walk(from, to, |_, block, s| {
            let (_, head, tail) = block.parts(s);
            if out.last().is_some_and(|&b| b != b'[') {
                out.extend_from_slice(b",");
            }
            out.extend_from_slice(head);
            out.extend_from_slice(tail);
        });
        (to - from) as usize
    }

    /// Calls `f(seq, block, slot)` for each event of seqs `from..to` (both within the window).
    fn walk(&self, from: u64, to: u64, mut f: impl FnMut(u64, &Block, &Slot)) {
        let idx = |seq: u64| (seq - self.first) as usize;
        // Blocks cover [blocks[0].first, end) without a hole; walk them along with the seqs.
        let mut b = self
            .blocks
            .partition_point(|b| b.first <= from)
            .saturating_sub(1);
        for seq in from..to {
            while self.blocks.get(b + 1).is_some_and(|n| n.first <= seq) {
                b += 1;
            }
            f(seq, &self.blocks[b], &self.slots[idx(seq)]);
        }
    }
}

#[cfg(test)]
mod tests;
