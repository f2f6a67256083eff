//! The replay window: a run's last events, their JSON written back to back into blocks, and
//! encoded as protocol-1 `STREAM_EVENT` frames when read.
//!
//! An event costs its JSON (and its SSE `event:` name, when it has one) plus a 24-byte slot.
//! The frame envelope (`id:` line, `type`, the run id twice, `seq`) is about as long as a token
//! event's JSON, so keeping the JSON halves the window; a read encodes its frames into one
//! buffer, which it would otherwise have copied them into. Blocks are freed when the window
//! slides past all of their events.
//!
//! Before this, the window kept every frame encoded, each batch its own allocation with a
//! shared-buffer header, and a 48-byte entry per frame: about 360 bytes a ~100-byte token event.
//! Pure: no I/O.

use std::collections::VecDeque;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::time::Instant;

use crate::frame::EventEncoder;

/// The first block of a run; blocks double up to [`MAX_BLOCK`], so a short run holds little
/// and a long one few blocks.
const MIN_BLOCK: usize = 512;
/// Largest block allocated for growth (a larger event gets a block of its own size).
const MAX_BLOCK: usize = 4 * 1024;

/// Where one event's bytes are, and when it arrived.
#[derive(Debug, Clone, Copy)]
struct Slot {
    /// Offset in its block: the SSE event name (`name` bytes), then the JSON (`len` bytes).
    off: u32,
    name: u32,
    len: u32,
    /// Nanoseconds from the window's creation to the event's arrival.
    at: u64,
}

/// A block of event bytes: the events from seq `first` up to the next block's first.
#[derive(Debug)]
struct Block {
    first: u64,
    data: Vec<u8>,
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
    /// Event bytes in the window.
    bytes: usize,
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

    /// Bytes of the events kept (JSON and names).
    pub fn event_bytes(&self) -> usize {
        self.bytes
    }

    /// Bytes allocated: the blocks still held (with the last one's spare room) and the slots.
    pub fn allocated(&self) -> usize {
        self.blocks.iter().map(|b| b.data.capacity()).sum::<usize>()
            + self.slots.capacity() * std::mem::size_of::<Slot>()
    }

    /// Appends the next event: its JSON and, when it differs from its `type`, its SSE `event:`
    /// name. Drops the oldest event past the cap.
    pub fn push(&mut self, json: &[u8], name: Option<&[u8]>, at: Instant) {
        let name = name.unwrap_or_default();
        let need = name.len() + json.len();
        let next = self.first + self.slots.len() as u64;
        let room = self
            .blocks
            .back()
            .map_or(0, |b| b.data.capacity() - b.data.len());
        if room < need || self.blocks.is_empty() {
            let size = self.next_block.max(need);
            self.next_block = (self.next_block * 2).min(MAX_BLOCK);
            self.blocks.push_back(Block {
                first: next,
                data: Vec::with_capacity(size),
            });
        }
        let Some(block) = self.blocks.back_mut() else {
            return;
        };
        let off = block.data.len();
        block.data.extend_from_slice(name);
        block.data.extend_from_slice(json);
        self.bytes += need;
        self.slots.push_back(Slot {
            off: off as u32,
            name: name.len() as u32,
            len: json.len() as u32,
            at: at.saturating_duration_since(self.base).as_nanos() as u64,
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
            self.blocks.pop_front();
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
                match s.name {
                    0 => encoder.max_len(s.len as usize),
                    n => encoder.max_len_named(s.len as usize, n as usize),
                }
            })
            .sum();
        let mut buf = BytesMut::with_capacity(size);
        self.walk(from, to, |seq, name, json| {
            match name.is_empty() {
                true => encoder.write(&mut buf, seq, json),
                false => encoder.write_named(&mut buf, seq, json, name),
            }
            // Each frame a slice of the one buffer (the spare room stays with `buf`).
            out.push(buf.split().freeze());
        });
        let at = self.slots[(to - 1 - self.first) as usize].at;
        Some(self.base + Duration::from_nanos(at))
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
            .map(|seq| self.slots[(seq - self.first) as usize].len as usize + 1)
            .sum();
        out.reserve(size);
        self.walk(from, to, |_, _, json| {
            if out.last().is_some_and(|&b| b != b'[') {
                out.extend_from_slice(b",");
            }
            out.extend_from_slice(json);
        });
        (to - from) as usize
    }

    /// Calls `f(seq, name, json)` for each event of seqs `from..to` (both within the window).
    fn walk(&self, from: u64, to: u64, mut f: impl FnMut(u64, &[u8], &[u8])) {
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
            let s = self.slots[idx(seq)];
            let data = &self.blocks[b].data;
            let (off, name, len) = (s.off as usize, s.name as usize, s.len as usize);
            f(
                seq,
                &data[off..off + name],
                &data[off + name..off + name + len],
            );
        }
    }
}

#[cfg(test)]
mod tests;
