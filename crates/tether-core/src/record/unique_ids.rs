//! Event ids unique in a run (`ids = "unique"`): the id of a relayed frame that repeats one
//! already relayed in the run becomes `<upstream id>~<frame index>`, so that the id a client holds
//! names one frame. Pure: raw frames in, raw frames out.
//!
//! An upstream that stamps its events with a clock (LangGraph's in-memory runtime writes
//! `<milliseconds>-0`) gives every event of one millisecond the same id, and a client that rejoins
//! with `Last-Event-ID` set to it cannot say which of them it had. [`UniqueIds`] sees every raw
//! frame of the run in order and rewrites only what would be ambiguous:
//!
//! - a frame whose own `id:` line brings an id not relayed before is relayed byte for byte;
//! - a frame whose `id:` line repeats an id already relayed gets that line replaced, in place, by
//!   `id: <id>~<frame index>`;
//! - a frame without an `id:` line while an id is in force (a client would hold that id after it)
//!   gets `id: <id>~<frame index>` added as its last line (just `id: <id>` when that id came from
//!   an id-only block that carried no data and was never relayed);
//! - a frame with no id in force (none yet, or reset by an empty `id:`) is relayed unchanged.
//!
//! Every id relayed is unique in the run: a suffixed id that is already taken (an upstream that
//! itself sent `5-0~3` before) takes the suffix again, and an upstream id that equals an id
//! already relayed, suffixed or not, is itself a repeat. The ids relayed are remembered as 64-bit
//! hashes (one set entry each, while the run's upstream is read): a hash collision can only make
//! a frame's id rewritten that did not need it, never two frames share one.
//!
//! Memory is bounded: at most [`MAX_REMEMBERED`] ids are remembered (about 144 KiB, counted in
//! the run's recorded bytes by the producer, [`UniqueIds::held_bytes`]). Once that many are, no
//! upstream id is relayed byte for byte any more: every frame with an id in force gets
//! `<id>~<frame index>`. Ids stay unique: an id relayed unremembered is a suffixed one, and two
//! suffixed ids end in different frame indexes (the digits after the last `~`), so a suffix only
//! has to miss the ids remembered before.

use std::collections::HashSet;
use std::hash::{BuildHasher, RandomState};

use bytes::{BufMut, Bytes, BytesMut};

/// What separates an upstream id from the frame index of its repeat.
pub const SUFFIX: u8 = b'~';

/// Ids a run remembers at most: a set of 16,384 buckets, filled to its load factor (7/8) and
/// never grown past it.
pub const MAX_REMEMBERED: usize = 14_336;

/// Bytes of one bucket of the set: the 64-bit hash and its control byte.
const BUCKET_BYTES: usize = 9;

/// The ids relayed so far in one run, and the index of its next frame.
#[derive(Debug, Default)]
pub struct UniqueIds {
    relayed: HashSet<u64>,
    hasher: RandomState,
    next: u64,
}

impl UniqueIds {
    /// Nothing relayed yet; the next frame is frame 0.
    pub fn new() -> Self {
        UniqueIds::default()
    }

    /// The next raw frame of the run (its `event`/`id`/`data` lines, each ended by `\n`, then
    /// the blank line), dispatched with `id` in force: the bytes to relay and the id a client
    /// holds after them.
    pub fn relay(&mut self, frame: Bytes, id: Option<Bytes>) -> (Bytes, Option<Bytes>) {
        let index = self.next;
        self.next += 1;
        let Some(id) = id else {
            return (frame, None);
        };
        let line = last_id_line(&frame);
        // With no room left, nothing more is relayed byte for byte: an id not remembered could
        // repeat one relayed unremembered.
        let fresh = self.has_room() && !self.taken(&id);
        if fresh && line.is_some() {
            self.take(&id);
            return (frame, Some(id));
        }
        let relayed = if fresh { id } else { self.suffixed(&id, index) };
        self.take(&relayed);
        let mut out = BytesMut::with_capacity(frame.len() + relayed.len() + 6);
        let (before, after) = match line {
            Some((start, end)) => (&frame[..start], &frame[end..]),
            // The blank line ends the frame: the id goes last, before it.
            None => frame.split_at(frame.len().saturating_sub(1)),
        };
        out.put_slice(before);
        out.put_slice(b"id: ");
        out.put_slice(&relayed);
        out.put_u8(b'\n');
        out.put_slice(after);
        (out.freeze(), Some(relayed))
    }

    /// `<id>~<index>`, with the suffix repeated until it names no id relayed before.
    fn suffixed(&self, id: &[u8], index: u64) -> Bytes {
        let mut itoa = itoa::Buffer::new();
        let n = itoa.format(index).as_bytes();
        let mut out = BytesMut::with_capacity(id.len() + n.len() + 1);
        out.put_slice(id);
        loop {
            out.put_u8(SUFFIX);
            out.put_slice(n);
            if !self.taken(&out) {
                return out.freeze();
            }
        }
    }

    fn taken(&self, id: &[u8]) -> bool {
        self.relayed.contains(&self.hasher.hash_one(id))
    }

    fn has_room(&self) -> bool {
        self.relayed.len() < MAX_REMEMBERED
    }

    fn take(&mut self, id: &[u8]) {
        if self.has_room() {
            self.relayed.insert(self.hasher.hash_one(id));
        }
    }

    /// Bytes the remembered ids hold now (the set's buckets), at most about 144 KiB.
    pub fn held_bytes(&self) -> usize {
        match self.relayed.capacity() {
            0 => 0,
            cap => (cap * 8 / 7).next_power_of_two() * BUCKET_BYTES,
        }
    }
}

/// The byte range (its `\n` included) of the frame's last `id` line that sets an id: a value
/// without NUL, as the SSE rules read it (`id:<value>` or `id: <value>`). `None`: the frame sets
/// no id of its own.
fn last_id_line(frame: &[u8]) -> Option<(usize, usize)> {
    let mut found = None;
    let mut start = 0;
    for end in memchr::memchr_iter(b'\n', frame) {
        let line = &frame[start..end];
        if let Some(value) = line.strip_prefix(b"id:") {
            let value = value.strip_prefix(b" ").unwrap_or(value);
            if !value.is_empty() && !value.contains(&0) {
                found = Some((start, end + 1));
            }
        }
        start = end + 1;
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn relay_all(frames: &[(&str, Option<&str>)]) -> Vec<(String, Option<String>)> {
        let mut u = UniqueIds::new();
        frames
            .iter()
            .map(|(f, id)| {
                let id = id.map(|i| Bytes::copy_from_slice(i.as_bytes()));
                let (b, id) = u.relay(Bytes::copy_from_slice(f.as_bytes()), id);
                let s = |b: &[u8]| String::from_utf8(b.to_vec()).unwrap();
                (s(&b), id.as_deref().map(s))
            })
            .collect()
    }

    fn ids(out: &[(String, Option<String>)]) -> Vec<Option<&str>> {
        out.iter().map(|(_, id)| id.as_deref()).collect()
    }

    #[test]
    fn unique_upstream_ids_are_relayed_byte_for_byte() {
        let frames = [
            ("id: 1-0\nevent: metadata\ndata: {}\n\n", Some("1-0")),
            ("id:2-0\ndata: a\n\n", Some("2-0")),
            ("event: x\ndata: b\nid: 3-0\n\n", Some("3-0")),
        ];
        let out = relay_all(&frames);
        for ((got, id), (want, want_id)) in out.iter().zip(frames) {
            assert_eq!(got, want);
            assert_eq!(id.as_deref(), want_id);
        }
    }

    #[test]
    fn a_repeated_id_takes_its_frame_index_in_place_of_its_id_line() {
        let f = |d: &str| format!("id: 5-0\nevent: messages\ndata: {d}\n\n");
        let (a, b, c, d) = (f("a"), f("b"), f("c"), "id: 6-0\ndata: d\n\n".to_string());
        let out = relay_all(&[
            ("id: 4-0\ndata: z\n\n", Some("4-0")),
            (&a, Some("5-0")),
            (&b, Some("5-0")),
            (&c, Some("5-0")),
            (&d, Some("6-0")),
        ]);
        assert_eq!(
            ids(&out),
            [
                Some("4-0"),
                Some("5-0"),
                Some("5-0~2"),
                Some("5-0~3"),
                Some("6-0")
            ]
        );
        assert_eq!(out[1].0, a, "the burst's first frame is the upstream's");
        assert_eq!(out[2].0, "id: 5-0~2\nevent: messages\ndata: b\n\n");
        assert_eq!(out[3].0, "id: 5-0~3\nevent: messages\ndata: c\n\n");
        assert_eq!(out[4].0, d);
    }

    #[test]
    fn a_repeat_that_is_not_consecutive_is_a_repeat_too() {
        let out = relay_all(&[
            ("id: a\ndata: 0\n\n", Some("a")),
            ("id: b\ndata: 1\n\n", Some("b")),
            ("id: a\ndata: 2\n\n", Some("a")),
        ]);
        assert_eq!(ids(&out), [Some("a"), Some("b"), Some("a~2")]);
    }

    #[test]
    fn a_suffixed_id_never_names_another_frame_whatever_the_upstream_sends() {
        // The upstream sends the form tether writes, before and after tether writes it.
        let out = relay_all(&[
            ("id: x~1\ndata: 0\n\n", Some("x~1")),
            ("id: x\ndata: 1\n\n", Some("x")),
            ("id: x\ndata: 2\n\n", Some("x")),
            ("id: x~2\ndata: 3\n\n", Some("x~2")),
            ("id: x\ndata: 4\n\n", Some("x")),
            ("id: x~1\ndata: 5\n\n", Some("x~1")),
        ]);
        let got = ids(&out);
        assert_eq!(
            got,
            [
                Some("x~1"),
                Some("x"),
                Some("x~2"),
                Some("x~2~3"),
                Some("x~4"),
                Some("x~1~5")
            ]
        );
        let mut unique = got.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), got.len());
    }

    #[test]
    fn a_frame_without_an_id_line_gets_one_when_an_id_is_in_force() {
        let out = relay_all(&[
            ("data: 0\n\n", None),
            ("id: a\ndata: 1\n\n", Some("a")),
            ("event: e\ndata: 2\n\n", Some("a")),
            // The id came from an id-only block, which the raw record does not keep.
            ("data: 3\n\n", Some("b")),
            ("id\ndata: 4\n\n", None),
        ]);
        assert_eq!(out[0].0, "data: 0\n\n", "no id in force: unchanged");
        assert_eq!(out[2].0, "event: e\ndata: 2\nid: a~2\n\n");
        assert_eq!(out[3].0, "data: 3\nid: b\n\n");
        assert_eq!(out[4].0, "id\ndata: 4\n\n", "an id reset: unchanged");
        assert_eq!(ids(&out), [None, Some("a"), Some("a~2"), Some("b"), None]);
    }

    #[test]
    fn a_relayed_stream_decodes_as_the_upstreams_with_the_relayed_ids() {
        use crate::record::sse::{Decoded, Decoder};
        let upstream = "id: 1\nevent: a\ndata: x\n\nid: 1\ndata: y\ndata: z\n\n\
                        event: b\ndata: w\n\nid: 2\ndata: v\n\nid\ndata: u\n\nid: 2\ndata: t\n\n";
        let decode = |bytes: &[u8], raw: bool| {
            let mut d = Decoder::new(1 << 10);
            if raw {
                d = d.keep_raw();
            }
            let mut out = Vec::new();
            d.feed(&Bytes::copy_from_slice(bytes), &mut out);
            let raws: Vec<Bytes> = d.take_raw().map(|r| r.bytes).collect();
            let events: Vec<_> = out
                .into_iter()
                .map(|e| match e {
                    Decoded::Event(e) => e,
                    other => panic!("{other:?}"),
                })
                .collect();
            (events, raws)
        };
        let (events, raws) = decode(upstream.as_bytes(), true);
        let mut u = UniqueIds::new();
        let mut relayed = Vec::new();
        let mut ids = Vec::new();
        for (e, raw) in events.iter().zip(raws) {
            let (b, id) = u.relay(raw, e.id.clone());
            relayed.extend_from_slice(&b);
            ids.push(id);
        }
        let (again, _) = decode(&relayed, false);
        assert_eq!(again.len(), events.len());
        for ((a, e), id) in again.iter().zip(&events).zip(&ids) {
            assert_eq!((&a.event, &a.data), (&e.event, &e.data));
            assert_eq!(&a.id, id, "a client holds the id tether relayed");
        }
        let got: Vec<_> = ids.iter().map(|i| i.as_deref()).collect();
        let b = |s: &'static str| Some(s.as_bytes());
        assert_eq!(got, [b("1"), b("1~1"), b("1~2"), b("2"), None, b("2~5")]);
    }

    #[test]
    fn past_the_remembered_ids_every_id_is_suffixed_and_still_unique() {
        let mut u = UniqueIds::new();
        let mut relay = |id: &str| {
            let frame = Bytes::from(format!("id: {id}\ndata: x\n\n"));
            let (b, got) = u.relay(frame, Some(Bytes::copy_from_slice(id.as_bytes())));
            let got = String::from_utf8(got.unwrap().to_vec()).unwrap();
            assert_eq!(
                b,
                format!("id: {got}\ndata: x\n\n"),
                "the frame carries its id"
            );
            got
        };
        let mut all = Vec::new();
        for i in 0..MAX_REMEMBERED {
            let id = format!("{i}-0");
            assert_eq!(relay(&id), id, "room left: a fresh id byte for byte");
            all.push(id);
        }
        let full = MAX_REMEMBERED;
        // No room: fresh ids, repeats of remembered ones, and ids of the suffixed form that later
        // suffixes would take.
        let later = [
            format!("{}-0", full + 1),
            "0-0".to_string(),
            format!("x~{}", full + 3),
            "x".to_string(),
            format!("x~{}", full + 3),
        ];
        let got: Vec<String> = later.iter().map(|id| relay(id)).collect();
        let n = |k: usize| full + k;
        assert_eq!(
            got,
            [
                format!("{}-0~{}", n(1), n(0)),
                format!("0-0~{}", n(1)),
                format!("x~{}~{}", n(3), n(2)),
                format!("x~{}", n(3)),
                format!("x~{}~{}", n(3), n(4)),
            ]
        );
        all.extend(got);
        let mut unique = all.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), all.len(), "every id relayed names one frame");
        assert!(
            u.held_bytes() <= 16_384 * BUCKET_BYTES,
            "{} bytes held",
            u.held_bytes()
        );
        assert!(u.held_bytes() >= MAX_REMEMBERED * 8);
    }

    #[test]
    fn the_last_id_line_that_sets_an_id_is_the_one_replaced() {
        let nul = "id: a\nid: b\0\ndata: 1\n\n";
        let out = relay_all(&[("id: a\ndata: 0\n\n", Some("a")), (nul, Some("a"))]);
        assert_eq!(out[1].0, "id: a~1\nid: b\0\ndata: 1\n\n");
        assert_eq!(last_id_line(b"data: x\n\n"), None);
        assert_eq!(last_id_line(b"id: \ndata: x\n\n"), None);
        assert_eq!(last_id_line(b"idx: 1\ndata: x\n\n"), None);
        assert_eq!(last_id_line(b"id: 1\nid:2\ndata: x\n\n"), Some((6, 11)));
    }
}
