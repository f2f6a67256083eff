//! Compaction: the run's whole history as the `events` array of a snapshot, adjacent deltas merged.
//!
//! Rules (AG-UI; docs/protocol.md, "Compaction"): adjacent deltas of one [`MergeClass`] with the same key
//! merge into one event at the first delta's position; nothing is reordered, dropped or merged
//! across any other event. The merged event is the first delta's JSON with `delta` holding the
//! whole concatenation: joining the *escaped* contents of JSON string literals yields the escaped
//! form of the joined string, so no fragment is ever unescaped.
//!
//! The history is kept already serialized, in an append-only [`ByteLog`]: each event's JSON is
//! written once, and each later delta of an open merge group appends only its escaped text. The
//! open group's closing bytes (the first delta's JSON after its `delta` text) are held aside and
//! written when the group closes. A [`Capture`] shares the log's blocks (no text is copied), so
//! capturing costs a few reference-count increments whatever the run's size.

use bytes::{Bytes, BytesMut};

use crate::record::format::{Event, MergeClass};

/// Smallest block of the log; blocks double with the log so their number stays logarithmic
/// while a short run holds little memory.
const MIN_BLOCK: usize = 512;
/// Largest block allocated for growth (a single larger write gets its own block).
const MAX_BLOCK: usize = 8 * 1024 * 1024;

/// Append-only bytes, readable by sharing sealed blocks.
#[derive(Debug, Default)]
pub struct ByteLog {
    sealed: Vec<Bytes>,
    active: BytesMut,
    len: usize,
}

impl ByteLog {
    /// Appends bytes.
    pub fn push(&mut self, b: &[u8]) {
        if self.active.capacity() - self.active.len() < b.len() {
            self.seal();
            let want = self.len.clamp(MIN_BLOCK, MAX_BLOCK).max(b.len());
            self.active = BytesMut::with_capacity(want);
        }
        self.active.extend_from_slice(b);
        self.len += b.len();
    }

    /// Total bytes written.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing was written.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes allocated for the log (written plus spare capacity of the active block).
    pub fn allocated(&self) -> usize {
        self.len + (self.active.capacity() - self.active.len())
    }

    /// Shares everything written so far as blocks, without copying.
    pub fn share(&mut self) -> Vec<Bytes> {
        self.seal();
        self.sealed.clone()
    }

    fn seal(&mut self) {
        if !self.active.is_empty() {
            // `split` hands out the written part and keeps the spare capacity for later pushes.
            self.sealed.push(self.active.split().freeze());
        }
    }
}

/// `b` in an allocation of its own size: the history never keeps a slice of an event's bytes,
/// which would keep the whole upstream read (or a big event's buffer) alive.
fn own(b: &[u8]) -> Bytes {
    Bytes::copy_from_slice(b)
}

/// The open merge group: the last event of the history, still able to take deltas.
#[derive(Debug)]
struct Open {
    class: MergeClass,
    key: Bytes,
    sub: u64,
    /// The first delta's JSON after its delta text (closing quote onwards).
    tail: Bytes,
    /// A last-wins member moved to the end: its label (`"sequence_number":`) and the latest
    /// delta's value. `tail` then lacks the member and the object's closing brace.
    last: Option<(Bytes, Bytes)>,
}

impl Open {
    /// The group's closing bytes as they stand.
    fn closing(&self) -> Bytes {
        match &self.last {
            None => self.tail.clone(),
            Some((label, value)) => {
                let mut out =
                    BytesMut::with_capacity(self.tail.len() + label.len() + value.len() + 2);
                out.extend_from_slice(&self.tail);
                out.extend_from_slice(b",");
                out.extend_from_slice(label);
                out.extend_from_slice(value);
                out.extend_from_slice(b"}");
                out.freeze()
            }
        }
    }

    fn len(&self) -> usize {
        self.key.len()
            + self.tail.len()
            + self.last.as_ref().map_or(0, |(l, v)| l.len() + v.len() + 2)
    }
}

/// A shared, copy-free view of a compacted history, ready to serialize outside any lock.
#[derive(Debug, Clone, Default)]
pub struct Capture {
    /// The serialized events, comma-separated, in order.
    pub blocks: Vec<Bytes>,
    /// Closing bytes of the open merge group, if any.
    pub tail: Option<Bytes>,
    /// Number of events in the compacted history.
    pub events: usize,
}

impl Capture {
    /// Length of the serialized `events` array contents.
    pub fn len(&self) -> usize {
        self.blocks.iter().map(Bytes::len).sum::<usize>() + self.tail.as_ref().map_or(0, Bytes::len)
    }

    /// Whether the history is empty.
    pub fn is_empty(&self) -> bool {
        self.events == 0
    }

    /// Writes the `events` array contents (without brackets).
    pub fn write_to(&self, out: &mut BytesMut) {
        for b in &self.blocks {
            out.extend_from_slice(b);
        }
        if let Some(t) = &self.tail {
            out.extend_from_slice(t);
        }
    }
}

/// The compacted history of one run.
#[derive(Debug, Default)]
pub struct Compactor {
    log: ByteLog,
    open: Option<Open>,
    events: usize,
}

impl Compactor {
    /// An empty history.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends one event, merging it into the open group when it continues it. A transient
    /// event (one a snapshot may leave out) is not recorded and leaves the group open.
    pub fn push(&mut self, ev: &Event) {
        if ev.transient {
            return;
        }
        if let (Some(open), Some(m)) = (&mut self.open, &ev.merge) {
            let key = &ev.json[m.key.clone()];
            let same_key = key == &open.key[..] || (m.class.key_optional && key.is_empty());
            if open.class == m.class && same_key && open.sub == m.sub {
                self.log.push(&ev.json[m.delta.clone()]);
                if let (Some((_, value)), Some(l)) = (&mut open.last, &m.last) {
                    *value = own(&ev.json[l.value.clone()]);
                }
                return;
            }
        }
        self.close();
        if self.events > 0 {
            self.log.push(b",");
        }
        self.events += 1;
        let Some(m) = &ev.merge else {
            self.log.push(&ev.json);
            return;
        };
        let json = &ev.json;
        let (tail, last) = match &m.last {
            None => {
                self.log.push(&json[..m.delta.end]);
                (own(&json[m.delta.end..]), None)
            }
            Some(l) => {
                // The member leaves its place; the merged event carries it last, before the
                // object's closing brace.
                let close = json.trim_ascii_end().len() - 1;
                let tail = if l.member.end <= m.delta.start {
                    self.log.push(&json[..l.member.start]);
                    self.log.push(&json[l.member.end..m.delta.end]);
                    own(&json[m.delta.end..close])
                } else {
                    self.log.push(&json[..m.delta.end]);
                    let mut t = BytesMut::with_capacity(close - m.delta.end);
                    t.extend_from_slice(&json[m.delta.end..l.member.start]);
                    t.extend_from_slice(&json[l.member.end..close]);
                    t.freeze()
                };
                let last = (own(&json[l.label.clone()]), own(&json[l.value.clone()]));
                (tail, Some(last))
            }
        };
        self.open = Some(Open {
            class: m.class,
            key: own(&json[m.key.clone()]),
            sub: m.sub,
            tail,
            last,
        });
    }

    /// A history that starts as `body`, the `events` array contents (comma-separated, as
    /// [`Capture::write_to`] writes them) of `events` already compacted events: a checkpoint
    /// read back from a shared journal. Later events never merge into it.
    pub fn seeded(body: &[u8], events: usize) -> Self {
        let mut c = Compactor::new();
        if events > 0 {
            c.log.push(body);
            c.events = events;
        }
        c
    }

    /// Shares the history as it is now. Copies no text.
    pub fn capture(&mut self) -> Capture {
        Capture {
            blocks: self.log.share(),
            tail: self.open.as_ref().map(Open::closing),
            events: self.events,
        }
    }

    /// Number of events in the compacted history.
    pub fn events(&self) -> usize {
        self.events
    }

    /// Bytes held by the history.
    pub fn allocated(&self) -> usize {
        self.log.allocated() + self.open.as_ref().map_or(0, Open::len)
    }

    fn close(&mut self) {
        if let Some(open) = self.open.take() {
            self.log.push(&open.closing());
        }
    }
}

#[cfg(test)]
mod tests;
