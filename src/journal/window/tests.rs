//! Unit tests of the replay window: bytes back as written, the cap, copies and seals, memory.

use bytes::{BufMut, Bytes, BytesMut};
use proptest::prelude::*;
use tokio::time::Instant;

use super::{Window, MAX_BLOCK};

fn frame(seq: u64, len: usize) -> Vec<u8> {
    let mut f = format!("id: {seq}\n").into_bytes();
    f.resize(len.max(f.len()), b'a' + (seq % 26) as u8);
    f
}

fn push(w: &mut Window, seq: u64, len: usize) {
    let f = frame(seq, len);
    w.push(f.len(), Instant::now(), |b: &mut BytesMut| b.put_slice(&f));
}

fn read(w: &mut Window, from: u64, max: usize) -> Vec<Bytes> {
    let mut out = Vec::new();
    w.read(from, max, &mut out);
    out
}

#[test]
fn frames_read_back_byte_for_byte_across_blocks_and_a_frame_larger_than_a_block() {
    let mut w = Window::new(1_000, 1);
    let lens = [10, 300, 2_000, MAX_BLOCK + 5, 40, 900, 17];
    for (i, len) in lens.iter().enumerate() {
        push(&mut w, i as u64 + 1, *len);
    }
    let got = read(&mut w, 1, usize::MAX);
    assert_eq!(got.len(), lens.len());
    for (i, f) in got.iter().enumerate() {
        assert_eq!(&f[..], &frame(i as u64 + 1, lens[i])[..], "frame {}", i + 1);
    }
    assert_eq!(w.frame_bytes(), got.iter().map(Bytes::len).sum::<usize>());
}

#[test]
fn the_cap_drops_the_oldest_frames_and_reads_start_at_the_first_kept() {
    let mut w = Window::new(3, 1);
    for seq in 1..=5 {
        push(&mut w, seq, 50);
    }
    assert_eq!((w.first(), w.len()), (3, 3));
    let got = read(&mut w, 1, 10);
    assert_eq!(got.len(), 3);
    assert_eq!(&got[0][..], &frame(3, 50)[..]);
    assert_eq!(read(&mut w, 4, 1).len(), 1);
    assert!(read(&mut w, 6, 10).is_empty());
}

#[test]
fn one_reader_of_new_frames_copies_them_and_a_second_reader_seals_them_for_sharing() {
    let mut w = Window::new(100, 1);
    push(&mut w, 1, 100);
    let a = read(&mut w, 1, 10);
    push(&mut w, 2, 100);
    let a2 = read(&mut w, 2, 10);
    assert_eq!(w.pieces.len(), 0, "a single follower never seals");
    assert_eq!(
        (&a[0][..], &a2[0][..]),
        (&frame(1, 100)[..], &frame(2, 100)[..])
    );
    // A second reader of frames already taken seals them; later readers share the piece.
    let b = read(&mut w, 1, 10);
    assert_eq!(w.pieces.len(), 1);
    let c = read(&mut w, 1, 10);
    assert_eq!(b, c);
    assert_eq!(b[1].as_ptr(), c[1].as_ptr(), "the same bytes, not a copy");
    push(&mut w, 3, 100);
    assert_eq!(&read(&mut w, 2, 10)[1][..], &frame(3, 100)[..]);
}

#[test]
fn blocks_are_freed_once_the_window_slides_past_them() {
    let mut w = Window::new(10, 1);
    for seq in 1..=10_000 {
        push(&mut w, seq, 200);
        if seq % 3 == 0 {
            // Two readers of every frame: every read seals a small piece.
            read(&mut w, seq - 2, 3);
            read(&mut w, seq - 2, 3);
        }
    }
    assert_eq!(w.len(), 10);
    assert!(w.pieces.len() <= 6, "{} pieces kept", w.pieces.len());
    assert!(
        w.allocated() < 2 * MAX_BLOCK + 10 * 16 + 4_000,
        "{}",
        w.allocated()
    );
}

#[test]
fn a_read_returns_the_arrival_of_its_last_frame() {
    let mut w = Window::new(10, 1);
    let t1 = Instant::now();
    w.push(4, t1, |b| b.put_slice(b"abcd"));
    let t2 = t1 + std::time::Duration::from_millis(7);
    w.push(4, t2, |b| b.put_slice(b"efgh"));
    let mut out = Vec::new();
    let at = w.read(1, 10, &mut out).expect("two frames");
    assert_eq!(at.duration_since(t1).as_millis(), 7);
    assert_eq!(w.read(3, 10, &mut out), None);
}

#[derive(Debug, Clone)]
enum Op {
    Push(usize),
    /// Read by reader `r` (of 3) up to `max` frames from its cursor.
    Read(usize, usize),
    /// Reader `r` rewinds by `back` frames (a resume from an older cursor).
    Rewind(usize, u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (1usize..3_000).prop_map(Op::Push),
        4 => (0usize..3, 1usize..8).prop_map(|(r, m)| Op::Read(r, m)),
        1 => (0usize..3, 0u64..20).prop_map(|(r, b)| Op::Rewind(r, b)),
    ]
}

proptest! {
    /// Whatever the interleaving of writes, readers and rewinds, every frame read is the frame
    /// written at that seq, and the window holds exactly the last `cap` frames.
    #[test]
    fn any_interleaving_reads_the_frames_written(cap in 1usize..40, ops in prop::collection::vec(op(), 1..200)) {
        let mut w = Window::new(cap, 1);
        let mut written: Vec<Vec<u8>> = Vec::new();
        let mut cursors = [1u64; 3];
        for op in ops {
            match op {
                Op::Push(len) => {
                    let seq = written.len() as u64 + 1;
                    push(&mut w, seq, len);
                    written.push(frame(seq, len));
                }
                Op::Read(r, max) => {
                    let from = cursors[r].max(w.first());
                    let got = read(&mut w, cursors[r], max);
                    for (i, f) in got.iter().enumerate() {
                        prop_assert_eq!(&f[..], &written[(from as usize) + i - 1][..]);
                    }
                    cursors[r] = from + got.len() as u64;
                }
                Op::Rewind(r, back) => cursors[r] = cursors[r].saturating_sub(back).max(1),
            }
            let kept = written.len().min(cap);
            prop_assert_eq!(w.len(), kept);
            prop_assert_eq!(w.frame_bytes(), written[written.len() - kept..].iter().map(Vec::len).sum::<usize>());
        }
    }
}
