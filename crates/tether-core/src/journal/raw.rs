//! The raw record: a run's upstream frames byte for byte, by frame index, for the verbatim resume
//! dialects. Bounded by a byte cap; past it the oldest frames go. Pure: no I/O.

use std::collections::VecDeque;

use bytes::Bytes;

/// One upstream frame as recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// The frame's own bytes (`event`/`id`/`data` lines and the blank line).
    pub bytes: Bytes,
    /// The SSE event id in force at the frame (`id:` of this or an earlier frame), as relayed
    /// (made unique in the run with `ids = "unique"`).
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

    /// An empty record whose next frame gets index `first` (a mirror that never saw the frames
    /// before it), marked `named` when the upstream was known to use `event:` lines.
    pub fn starting_at(cap: usize, first: u64, named: bool) -> Self {
        RawLog {
            cap,
            first,
            named,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(n: usize, id: Option<&str>, cursor: Option<i64>) -> Frame {
        Frame {
            bytes: Bytes::from(format!("data: {n:04}\n\n")),
            id: id.map(|i| Bytes::copy_from_slice(i.as_bytes())),
            cursor,
            named: false,
        }
    }

    #[test]
    fn frames_are_read_by_index_and_the_oldest_go_past_the_cap() {
        let mut log = RawLog::new(3 * (12 + FRAME_OVERHEAD));
        (0..5).for_each(|n| log.push(frame(n, None, None)));
        assert_eq!((log.first(), log.end()), (2, 5));
        let read = log.read(3, 10);
        assert_eq!(read.iter().map(|(i, _)| *i).collect::<Vec<_>>(), [3, 4]);
        assert_eq!(&read[0].1[..], b"data: 0003\n\n");
        assert_eq!(log.seek_index(1), Seek::Expired);
        assert_eq!(log.seek_index(7), Seek::From(7));
        assert_eq!(log.held(), 3 * (12 + FRAME_OVERHEAD));
    }

    #[test]
    fn an_id_seeks_after_its_frame_and_an_id_never_seen_is_unknown_until_frames_were_dropped() {
        let mut log = RawLog::new(1 << 20);
        log.push(frame(0, Some("a"), None));
        log.push(frame(1, Some("b"), None));
        assert_eq!(log.seek_id(b"a"), Seek::From(1));
        assert_eq!(log.seek_id(b"b"), Seek::From(2));
        assert_eq!(log.seek_id(b"zz"), Seek::Unknown);
        let mut small = RawLog::new(1);
        small.push(frame(0, Some("a"), None));
        small.push(frame(1, Some("b"), None));
        assert_eq!(small.seek_id(b"a"), Seek::Expired);
    }

    #[test]
    fn a_json_cursor_skips_null_frames_and_is_expired_below_every_value() {
        let mut log = RawLog::new(1 << 20);
        log.push(frame(0, None, Some(0)));
        log.push(frame(1, None, None));
        log.push(frame(2, None, Some(1)));
        log.push(frame(3, None, None));
        assert_eq!(log.seek_cursor(-1), Seek::From(0));
        // After the frame with 0: the null frame is replayed in place.
        assert_eq!(log.seek_cursor(0), Seek::From(1));
        assert_eq!(log.seek_cursor(1), Seek::From(3));
        // Past the head: wait for what comes next.
        assert_eq!(log.seek_cursor(9), Seek::From(3));
        let mut later = RawLog::new(1 << 20);
        later.push(frame(0, None, Some(5)));
        assert_eq!(later.seek_cursor(4), Seek::Expired);
    }
}
