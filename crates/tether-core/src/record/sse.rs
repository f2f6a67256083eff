//! Incremental Server-Sent Events decoder (WHATWG rules): pure, no I/O.
//!
//! The [`Decoder`] is fed arbitrary chunks of an `text/event-stream` body, down to one byte at a
//! time, and yields exactly the events the WHATWG "server-sent events" parsing rules give:
//! CR, LF and CRLF line endings (a CR ending one chunk and its LF starting the next count once),
//! one byte-order mark stripped at stream start only, comments, multi-line `data` joined with
//! `\n`, `event`, `id` (ignored when it contains NUL) and `retry`. An event still incomplete at
//! end of stream is never dispatched. The decoder works on bytes, so a multi-byte UTF-8
//! character split across chunks is reassembled untouched.
//!
//! A `data` line that lies inside one chunk is handed out as a [`Bytes`] slice of that chunk,
//! without copying. An event larger than the configured cap (its data and the line being read,
//! whatever the line's field, comments included) is dropped, reported once as
//! [`Decoded::Oversized`], and decoding resumes at the next event, whatever the chunking; the
//! decoder never buffers more than the cap. [`Decoder::discard_partial`] drops the event being built the same way, for a
//! caller whose memory budget has no room for it.
//!
//! Memory is counted as allocated, not as used ([`Decoder::buffered`]): its buffers grow by half
//! (not doubling) and only up to the cap, a buffer with more than [`SPARE`] bytes of spare capacity is
//! handed out in an allocation of its own size (a completed big event never pins the buffer it
//! was read into), and a big buffer is let go, not cleared, once its event is dispatched or
//! dropped, so an idle decoder keeps at most [`SPARE`] bytes per buffer.
//!
//! With [`Decoder::keep_raw`], the decoder also keeps each dispatched event's own frame (its
//! `event`, `id` and `data` lines in their order, each ended by `\n`, then the blank line;
//! comments, `retry` and unknown fields left out) for verbatim replay: [`Decoder::take_raw`]
//! hands them out, one per [`Decoded::Event`], in order.

use bytes::{BufMut, Bytes, BytesMut};

pub use buffers::SPARE;
use buffers::{allocated, exact, release, reserve_within};

const BOM: &[u8] = b"\xEF\xBB\xBF";

/// One dispatched SSE event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event` field, or `None` for the default type (`message`).
    pub event: Option<Bytes>,
    /// The `data` lines joined with `\n`.
    pub data: Bytes,
    /// The last event id in force when the event was dispatched, if any was set.
    pub id: Option<Bytes>,
}

/// What one step of decoding produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decoded {
    /// A complete event.
    Event(SseEvent),
    /// An event that grew past the cap and was dropped; `bytes` is how much of it had been seen
    /// when it was dropped (at least the cap).
    Oversized {
        /// Bytes of the event seen before it was dropped.
        bytes: usize,
    },
}

/// The data buffer of the event being built: one zero-copy slice, or a joined copy.
#[derive(Debug, Default)]
enum Data {
    #[default]
    Empty,
    One(Bytes),
    Many(BytesMut),
}

impl Data {
    fn len(&self) -> usize {
        match self {
            Data::Empty => 0,
            Data::One(b) => b.len(),
            Data::Many(m) => m.len(),
        }
    }

    /// Bytes allocated for it: a slice of one upstream chunk (or of a line in an allocation of
    /// its own size) counts its length, a joined copy its capacity.
    fn allocated(&self) -> usize {
        match self {
            Data::Empty => 0,
            Data::One(b) => b.len(),
            Data::Many(m) => m.capacity(),
        }
    }
}

/// Incremental SSE decoder. See the module docs for the rules it follows.
#[derive(Debug)]
pub struct Decoder {
    max_event: usize,
    /// Bytes of a possible byte-order mark matched so far; `None` once the stream has started.
    bom_matched: Option<usize>,
    /// The unfinished line carried over from earlier chunks (unused while discarding).
    line: BytesMut,
    /// Whether the carried-over line has any byte (tracked even while discarding).
    line_nonempty: bool,
    /// The previous chunk ended with CR: a leading LF in the next chunk belongs to it.
    skip_lf: bool,
    data: Data,
    data_lines: usize,
    event_type: Option<Bytes>,
    last_id: Option<Bytes>,
    retry: Option<u64>,
    /// Dropping an oversized event: skip everything up to the next blank line.
    discarding: bool,
    dropped: u64,
    /// The frame being built, when raw frames are kept.
    raw: Option<BytesMut>,
    /// Whether the frame being built has an `event` line.
    raw_named: bool,
    /// Raw frames of the events dispatched since the last [`Decoder::take_raw`].
    raw_out: Vec<RawFrame>,
}

/// One event's own frame, as the upstream sent it (line endings normalized to `\n`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawFrame {
    /// The frame's `event`, `id` and `data` lines and the blank line that ends it.
    pub bytes: Bytes,
    /// Whether the frame has an `event` line.
    pub named: bool,
}

impl Decoder {
    /// A decoder that drops any event whose buffered size would exceed `max_event` bytes.
    pub fn new(max_event: usize) -> Self {
        Decoder {
            max_event: max_event.max(1),
            bom_matched: Some(0),
            line: BytesMut::new(),
            line_nonempty: false,
            skip_lf: false,
            data: Data::Empty,
            data_lines: 0,
            event_type: None,
            last_id: None,
            retry: None,
            discarding: false,
            dropped: 0,
            raw: None,
            raw_named: false,
            raw_out: Vec::new(),
        }
    }

    /// Also keeps each event's own frame (see the module docs).
    pub fn keep_raw(mut self) -> Self {
        self.raw = Some(BytesMut::new());
        self
    }

    /// The raw frames of the events dispatched since the last call, one per
    /// [`Decoded::Event`], in order (empty unless [`Self::keep_raw`]).
    pub fn take_raw(&mut self) -> std::vec::Drain<'_, RawFrame> {
        self.raw_out.drain(..)
    }

    /// The reconnection time last set by a valid `retry` field, in milliseconds.
    pub fn retry(&self) -> Option<u64> {
        self.retry
    }

    /// The last event id set by an `id` field (`None` when never set or set empty).
    pub fn last_event_id(&self) -> Option<&Bytes> {
        self.last_id.as_ref()
    }

    /// Bytes allocated for the event being decoded: the carried-over line, the data buffer and
    /// the raw frame being built, by capacity (what is allocated, not what is used).
    pub fn buffered(&self) -> usize {
        allocated(&self.line) + self.data.allocated() + self.raw.as_ref().map_or(0, allocated)
    }

    /// Bytes of the event being decoded (the carried-over line and the data so far), by length:
    /// never over the cap ([`Decoder::buffered`] counts what they allocate).
    pub fn held(&self) -> usize {
        self.line.len() + self.data.len()
    }

    /// How many oversized events have been dropped so far.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Drops the event being built (its carried-over line and data), as if it had grown past the
    /// cap: decoding resumes after its blank line. For a caller whose memory budget has no room
    /// for it. Returns the bytes given up, or `None` when nothing was held.
    pub fn discard_partial(&mut self) -> Option<usize> {
        let held = self.held();
        if held == 0 || self.discarding {
            return None;
        }
        self.discarding = true;
        release(&mut self.line);
        self.reset_event();
        self.dropped += 1;
        Some(held)
    }

    /// Decodes one chunk, appending what it completes to `out`.
    pub fn feed(&mut self, chunk: &Bytes, out: &mut Vec<Decoded>) {
        let mut pos = 0;
        if let Some(matched) = self.bom_matched {
            // Match the BOM byte by byte: it may itself be split across chunks.
            let mut m = matched;
            while m < BOM.len() && pos < chunk.len() && chunk[pos] == BOM[m] {
                m += 1;
                pos += 1;
            }
            if m == BOM.len() {
                self.bom_matched = None;
            } else if pos == chunk.len() {
                self.bom_matched = Some(m);
                return;
            } else {
                // Not a BOM after all: what was held back is ordinary line content.
                // Bytes held back from earlier chunks become line content; this chunk's own
                // bytes are scanned again from where the match began in it.
                self.bom_matched = None;
                reserve_within(&mut self.line, matched, self.max_event);
                self.line.extend_from_slice(&BOM[..matched]);
                self.line_nonempty = matched > 0;
                pos -= m - matched;
            }
        }
        if self.skip_lf && pos < chunk.len() {
            self.skip_lf = false;
            if chunk[pos] == b'\n' {
                pos += 1;
            }
        }
        while pos < chunk.len() {
            match memchr::memchr2(b'\n', b'\r', &chunk[pos..]) {
                None => {
                    self.carry(&chunk[pos..], out);
                    return;
                }
                Some(i) => {
                    let end = pos + i;
                    let cr = chunk[end] == b'\r';
                    self.end_line(chunk, pos, end, out);
                    pos = end + 1;
                    if cr {
                        if pos == chunk.len() {
                            self.skip_lf = true;
                        } else if chunk[pos] == b'\n' {
                            pos += 1;
                        }
                    }
                }
            }
        }
    }

    /// Whether the bytes decoded so far end between two events: no line, field or event is
    /// unfinished, so that a reader of those same bytes dispatches nothing more from them and
    /// bytes appended now start an event of their own.
    pub fn at_boundary(&self) -> bool {
        !self.line_nonempty
            && !self.discarding
            && self.data_lines == 0
            && self.event_type.is_none()
            && self.bom_matched.is_none_or(|m| m == 0)
            && self.raw.as_ref().is_none_or(|r| r.is_empty())
    }

    /// Ends the stream. An event without its blank line is discarded, never dispatched; returns
    /// whether one was pending.
    pub fn finish(&mut self) -> bool {
        // Bytes held back as a possible byte-order mark are an unterminated line too.
        let bom_part = self.bom_matched.is_some_and(|m| m > 0);
        let pending = self.data_lines > 0 || self.line_nonempty || self.discarding || bom_part;
        release(&mut self.line);
        self.line_nonempty = false;
        self.reset_event();
        self.discarding = false;
        pending
    }

    /// Keeps the unfinished tail of a chunk for the next one.
    fn carry(&mut self, part: &[u8], out: &mut Vec<Decoded>) {
        if part.is_empty() {
            return;
        }
        self.line_nonempty = true;
        if self.discarding {
            return;
        }
        if self.data.len() + self.line.len() + part.len() > self.max_event {
            self.start_discard(self.data.len() + self.line.len() + part.len(), out);
            return;
        }
        let limit = self.max_event - self.data.len();
        reserve_within(&mut self.line, part.len(), limit);
        self.line.extend_from_slice(part);
    }

    /// A line ending was found at `chunk[end]`; the line's bytes in this chunk are `start..end`.
    fn end_line(&mut self, chunk: &Bytes, start: usize, end: usize, out: &mut Vec<Decoded>) {
        let blank = !self.line_nonempty && start == end;
        if self.discarding {
            self.line_nonempty = false;
            if blank {
                self.discarding = false;
                self.reset_event();
            }
            return;
        }
        if blank {
            self.dispatch(out);
            return;
        }
        if self.line_nonempty {
            let size = self.data.len() + self.line.len() + (end - start);
            if size > self.max_event {
                self.start_discard(size, out);
                self.line_nonempty = false;
                return;
            }
            let limit = self.max_event - self.data.len();
            reserve_within(&mut self.line, end - start, limit);
            self.line.extend_from_slice(&chunk[start..end]);
            self.line_nonempty = false;
            // The line goes with its allocation: what it is stored as never shares the next
            // line's buffer, and a big one is in an allocation of its own size.
            let line = exact(std::mem::take(&mut self.line));
            let n = line.len();
            self.process_line(&line, 0, n, out);
        } else {
            // The same measure as for a line carried over from earlier chunks, so that where
            // the reads ended never decides whether an event is dropped.
            let size = self.data.len() + (end - start);
            if size > self.max_event {
                self.start_discard(size, out);
                return;
            }
            self.process_line(chunk, start, end, out);
        }
    }

    fn process_line(&mut self, src: &Bytes, start: usize, end: usize, out: &mut Vec<Decoded>) {
        let line = &src[start..end];
        if line.first() == Some(&b':') {
            return; // comment
        }
        let max = self.max_event;
        let keep = |raw: &mut Option<BytesMut>| {
            if let Some(r) = raw {
                reserve_within(r, line.len() + 1, max);
                r.extend_from_slice(line);
                r.put_u8(b'\n');
            }
        };
        let (name, value_start) = match memchr::memchr(b':', line) {
            Some(c) => {
                let mut v = start + c + 1;
                if v < end && src[v] == b' ' {
                    v += 1;
                }
                (&line[..c], v)
            }
            None => (line, end),
        };
        match name {
            b"data" => {
                let size = self.data.len() + 1 + (end - value_start);
                if size > self.max_event {
                    self.start_discard(size, out);
                    return;
                }
                self.data = match std::mem::take(&mut self.data) {
                    Data::Empty => Data::One(src.slice(value_start..end)),
                    Data::One(first) => {
                        let mut m = BytesMut::with_capacity(first.len() + 1 + end - value_start);
                        m.extend_from_slice(&first);
                        m.put_u8(b'\n');
                        m.extend_from_slice(&src[value_start..end]);
                        Data::Many(m)
                    }
                    Data::Many(mut m) => {
                        reserve_within(&mut m, 1 + end - value_start, self.max_event);
                        m.put_u8(b'\n');
                        m.extend_from_slice(&src[value_start..end]);
                        Data::Many(m)
                    }
                };
                self.data_lines += 1;
                keep(&mut self.raw);
            }
            b"event" => {
                self.event_type = Some(src.slice(value_start..end));
                self.raw_named = true;
                keep(&mut self.raw);
            }
            b"id" => {
                keep(&mut self.raw);
                let v = &src[value_start..end];
                if memchr::memchr(0, v).is_none() {
                    self.last_id = if v.is_empty() {
                        None
                    } else {
                        Some(src.slice(value_start..end))
                    };
                }
            }
            b"retry" => {
                let v = &src[value_start..end];
                if !v.is_empty() && v.iter().all(u8::is_ascii_digit) {
                    self.retry = std::str::from_utf8(v).ok().and_then(|s| s.parse().ok());
                }
            }
            _ => {}
        }
    }

    fn dispatch(&mut self, out: &mut Vec<Decoded>) {
        if self.data_lines == 0 {
            self.reset_event();
            return;
        }
        let data = match std::mem::take(&mut self.data) {
            Data::Empty => Bytes::new(),
            Data::One(b) => b,
            Data::Many(m) => exact(m),
        };
        let event = self.event_type.take().filter(|t| !t.is_empty());
        self.data_lines = 0;
        if let Some(r) = &mut self.raw {
            reserve_within(r, 1, self.max_event);
            r.put_u8(b'\n');
            // A big frame takes its buffer along, in an allocation of its own size; small ones
            // share the buffer's (at most [`SPARE`] spare bytes each).
            let bytes = match r.capacity() > SPARE {
                true => exact(std::mem::take(r)),
                false => r.split().freeze(),
            };
            self.raw_out.push(RawFrame {
                bytes,
                named: std::mem::take(&mut self.raw_named),
            });
        }
        out.push(Decoded::Event(SseEvent {
            event,
            data,
            id: self.last_id.clone(),
        }));
    }

    fn start_discard(&mut self, bytes: usize, out: &mut Vec<Decoded>) {
        self.discarding = true;
        release(&mut self.line);
        self.reset_event();
        self.dropped += 1;
        out.push(Decoded::Oversized { bytes });
    }

    fn reset_event(&mut self) {
        self.data = Data::Empty;
        self.data_lines = 0;
        self.event_type = None;
        self.raw_named = false;
        if let Some(r) = &mut self.raw {
            release(r);
        }
    }
}

/// An SSE comment line pair, used for heartbeats: `: keepalive\n\n`.
pub const KEEPALIVE: &[u8] = b": keepalive\n\n";

mod buffers;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_memory;
