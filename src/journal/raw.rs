//! The raw record: a run's upstream frames byte for byte, by frame index, for the verbatim resume
//! dialects. Bounded by a byte cap; past it the oldest frames go. Pure: no I/O.

use std::collections::VecDeque;

use bytes::Bytes;

/// One upstream frame as recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// The frame's own bytes (`event`/`id`/`data` lines and the blank line).
    pub bytes: Bytes,
    /// The SSE event id in force at the frame (`id:` of this or an earlier frame).
    pub id: Option<Bytes>,
    /// The integer at the configured cursor field of the frame's JSON, if any.
    pub cursor: Option<i64>,
    /// Whether the frame has an `event:` line.
    pub named: bool,
}

/// Fixed cost accounted per kept frame besides its bytes.
const FRAME_OVERHEAD: usize = 48;

/// Where a cursor lands in the raw record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seek {
    /// Replay from this frame index on.
    From(u64),
    /// The frames the cursor needs are no longer kept.
    Expired,
    /// The record never held what the cursor names.
    Unknown,
}

/// The raw frames of one run.
#[derive(Debug, Default)]
pub struct RawLog {
    frames: VecDeque<Frame>,
    /// Index of `frames[0]`.
    first: u64,
    bytes: usize,
    cap: usize,
    /// Whether any frame had an `event:` line.
    named: bool,
    /// The smallest cursor value ever recorded.
    min_cursor: Option<i64>,
}

impl RawLog {
    /// An empty record keeping at most `cap` bytes of frames.
    pub fn new(cap: usize) -> Self {
        RawLog {
            cap,
            ..RawLog::default()
        }
    }

    /// Appends the next frame; drops the oldest while over the cap (the newest always stays).
    pub fn push(&mut self, frame: Frame) {
        self.named |= frame.named;
        if let Some(c) = frame.cursor {
            self.min_cursor = Some(self.min_cursor.map_or(c, |m| m.min(c)));
        }
        self.bytes += frame.bytes.len() + FRAME_OVERHEAD;
        self.frames.push_back(frame);
        while self.bytes > self.cap && self.frames.len() > 1 {
            if let Some(old) = self.frames.pop_front() {
                self.bytes -= old.bytes.len() + FRAME_OVERHEAD;
                self.first += 1;
            }
        }
    }

    /// Bytes accounted for the kept frames.
    pub fn held(&self) -> usize {
        self.bytes
    }

    /// Frames recorded since the start (the index the next frame gets).
    pub fn end(&self) -> u64 {
        self.first + self.frames.len() as u64
    }

    /// The index of the oldest frame kept.
    pub fn first(&self) -> u64 {
        self.first
    }

    /// Whether the upstream used `event:` lines.
    pub fn named(&self) -> bool {
        self.named
    }

    /// Up to `max` frames from index `from` on, with the index of each.
    pub fn read(&self, from: u64, max: usize) -> Vec<(u64, Bytes)> {
        let skip = from.saturating_sub(self.first) as usize;
        self.frames
            .iter()
            .enumerate()
            .skip(skip)
            .take(max)
            .map(|(i, f)| (self.first + i as u64, f.bytes.clone()))
            .collect()
    }

    /// Frame index `n`: frames before it are what the client has.
    pub fn seek_index(&self, n: u64) -> Seek {
        if n < self.first {
            Seek::Expired
        } else {
            Seek::From(n)
        }
    }

    /// After the frame whose event id is `id` (the last one with it).
    pub fn seek_id(&self, id: &[u8]) -> Seek {
        match self
            .frames
            .iter()
            .rposition(|f| f.id.as_deref() == Some(id))
        {
            Some(i) => Seek::From(self.first + i as u64 + 1),
            None if self.first > 0 => Seek::Expired,
            None => Seek::Unknown,
        }
    }

    /// After the last frame whose cursor value is at most `c` (frames without one do not
    /// advance the cursor and are replayed in place); `-1` is from frame 0. A cursor below every
    /// value ever recorded, or whose frame is no longer kept, is expired.
    pub fn seek_cursor(&self, c: i64) -> Seek {
        if c == -1 {
            return self.seek_index(0);
        }
        if self.min_cursor.is_some_and(|m| c < m) {
            return Seek::Expired;
        }
        match self
            .frames
            .iter()
            .rposition(|f| f.cursor.is_some_and(|v| v <= c))
        {
            Some(i) => Seek::From(self.first + i as u64 + 1),
            // Nothing kept at or below the cursor: its frame is gone, or none came yet.
            None if self.first > 0 => Seek::Expired,
            None if self.min_cursor.is_none() => Seek::From(self.end()),
            None => Seek::Expired,
        }
    }
}
