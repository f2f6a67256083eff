//! The replay window: a run's last encoded frames, written back to back into shared blocks.
//!
//! A frame costs its bytes plus a 16-byte slot. Frames are written into the active block; a
//! reader gets each frame as a [`Bytes`]: a slice of a sealed piece (no copy), or, for frames
//! still in the active block that no reader took yet, a slice of one copy made for that read.
//! A second reader of the same active frames seals them into a piece that every later reader
//! shares, so one live observer costs one small copy per read and a thousand observers share
//! one piece. Blocks are freed when the window slides past all of their frames.
//!
//! Before this, every batch was its own allocation plus a shared-buffer header and every frame a
//! 48-byte `(Bytes, Instant)` entry: about 160 bytes a token event besides its own ~200.
//! Pure: no I/O.

use std::collections::VecDeque;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::time::Instant;

/// The first block of a run; blocks double up to [`MAX_BLOCK`], so a short run holds little
/// and a long one few blocks.
const MIN_BLOCK: usize = 1024;
/// Largest block allocated for growth (a larger frame gets a block of its own size).
const MAX_BLOCK: usize = 4 * 1024;

/// Where one frame's bytes are, and when it arrived.
#[derive(Debug, Clone, Copy)]
struct Slot {
    /// Offset in the piece (or active region) that holds the frame.
    off: u32,
    len: u32,
    /// Nanoseconds from the window's creation to the frame's arrival.
    at: u64,
}

/// A sealed region of a block: the frames from seq `first` up to the next piece's first.
#[derive(Debug)]
struct Piece {
    first: u64,
    bytes: Bytes,
}

/// The last `cap` frames of a run, by seq.
#[derive(Debug)]
pub struct Window {
    cap: usize,
    slots: VecDeque<Slot>,
    /// Seq of `slots[0]` (the next seq when the window is empty).
    first: u64,
    pieces: VecDeque<Piece>,
    /// Frames written since the last seal; offsets of their slots are into it.
    active: BytesMut,
    /// Seq of the first frame in `active`.
    active_first: u64,
    /// Bytes of `active` a reader already took by copy: reading them again seals instead.
    copied_to: usize,
    /// Frame bytes in the window.
    bytes: usize,
    next_block: usize,
    base: Instant,
}

impl Window {
    /// An empty window keeping at most `cap` frames, whose first frame will be seq `first`.
    pub fn new(cap: usize, first: u64) -> Self {
        Window {
            cap: cap.max(1),
            slots: VecDeque::new(),
            first,
            pieces: VecDeque::new(),
            active: BytesMut::new(),
            active_first: first,
            copied_to: 0,
            bytes: 0,
            next_block: MIN_BLOCK,
            base: Instant::now(),
        }
    }

    /// Seq of the oldest frame kept (the next seq when empty).
    pub fn first(&self) -> u64 {
        self.first
    }

    /// Number of frames kept.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether no frame is kept.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Bytes of the frames kept.
    pub fn frame_bytes(&self) -> usize {
        self.bytes
    }

    /// Bytes allocated: the blocks still referenced (sealed pieces and the whole active block)
    /// and the slots.
    pub fn allocated(&self) -> usize {
        self.pieces.iter().map(|p| p.bytes.len()).sum::<usize>()
            + self.active.capacity()
            + self.slots.capacity() * std::mem::size_of::<Slot>()
    }

    /// Appends the next frame: `write` appends at most `max_len` bytes to the buffer it gets.
    /// Drops the oldest frame past the cap.
    pub fn push(&mut self, max_len: usize, at: Instant, write: impl FnOnce(&mut BytesMut)) {
        if self.active.capacity() - self.active.len() < max_len {
            self.seal();
            let size = self.next_block.max(max_len);
            self.next_block = (self.next_block * 2).min(MAX_BLOCK);
            self.active = BytesMut::with_capacity(size);
            self.copied_to = 0;
        }
        let off = self.active.len();
        write(&mut self.active);
        let len = self.active.len() - off;
        self.bytes += len;
        self.slots.push_back(Slot {
            off: off as u32,
            len: len as u32,
            at: at.saturating_duration_since(self.base).as_nanos() as u64,
        });
        if self.slots.len() > self.cap {
            self.pop_front();
        }
    }

    fn pop_front(&mut self) {
        if let Some(s) = self.slots.pop_front() {
            self.bytes -= s.len as usize;
            self.first += 1;
        }
        // A piece goes once the window starts at or after the piece that follows it.
        while !self.pieces.is_empty() {
            let next = self.pieces.get(1).map_or(self.active_first, |n| n.first);
            if next > self.first {
                break;
            }
            self.pieces.pop_front();
        }
    }

    /// Moves the active frames into a piece readers share.
    fn seal(&mut self) {
        if !self.active.is_empty() {
            let next = self.first + self.slots.len() as u64;
            let bytes = self.active.split().freeze();
            self.pieces.push_back(Piece {
                first: self.active_first,
                bytes,
            });
            self.active_first = next;
            self.copied_to = 0;
        }
    }

    /// Appends to `out` up to `max` frames from seq `from` on (clamped to [`Self::first`]);
    /// returns the arrival time of the last one.
    pub fn read(&mut self, from: u64, max: usize, out: &mut Vec<Bytes>) -> Option<Instant> {
        let end = self.first + self.slots.len() as u64;
        let from = from.max(self.first);
        let to = end.min(from.saturating_add(max as u64));
        if from >= to {
            return None;
        }
        let first = self.first;
        let idx = |seq: u64| (seq - first) as usize;
        // Reaching into the active frames: copy them once for this read, or seal them when a
        // reader already took (some of) them, so this reader and every later one share them.
        let active_from = from.max(self.active_first);
        if to > self.active_first && (self.slots[idx(active_from)].off as usize) < self.copied_to {
            self.seal();
        }
        let copy = if to > self.active_first {
            let start = self.slots[idx(active_from)].off as usize;
            let last = self.slots[idx(to - 1)];
            let stop = (last.off + last.len) as usize;
            self.copied_to = self.copied_to.max(stop);
            Some((start, Bytes::copy_from_slice(&self.active[start..stop])))
        } else {
            None
        };
        for seq in from..to {
            let s = self.slots[idx(seq)];
            let (off, len) = (s.off as usize, s.len as usize);
            let frame = match &copy {
                Some((start, c)) if seq >= self.active_first => {
                    c.slice(off - start..off - start + len)
                }
                _ => {
                    // Pieces cover [pieces[0].first, active_first) without a hole.
                    let p = self
                        .pieces
                        .partition_point(|p| p.first <= seq)
                        .saturating_sub(1);
                    self.pieces[p].bytes.slice(off..off + len)
                }
            };
            out.push(frame);
        }
        let at = self.slots[idx(to - 1)].at;
        Some(self.base + Duration::from_nanos(at))
    }
}

#[cfg(test)]
mod tests;
