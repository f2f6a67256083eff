//! Tests of what the SSE decoder allocates: counted by capacity, bounded growth, big events
//! stored at their exact size.

use super::*;

/// What the decoder's buffers have allocated now, by capacity.
fn capacities(d: &Decoder) -> usize {
    let data = match &d.data {
        Data::Empty => 0,
        Data::One(b) => b.len(),
        Data::Many(m) => m.capacity(),
    };
    d.line.capacity() + data + d.raw.as_ref().map_or(0, BytesMut::capacity)
}

/// Whether `b` is the only user of an allocation of its own size (a line's `data: ` aside).
fn exact_and_alone(b: Bytes) -> bool {
    let len = b.len();
    b.is_unique() && Vec::from(b).capacity() <= len + 64
}

#[test]
fn a_big_event_in_pieces_is_counted_by_its_allocations_and_kept_at_its_exact_size() {
    const BIG: usize = 7 << 20;
    for lines in [1, 7] {
        let mut d = Decoder::new(8 << 20).keep_raw();
        let mut out = Vec::new();
        // One 7 MiB data line, or seven of 1 MiB (a joined copy), fed in 16 KiB reads.
        let mut body = Vec::with_capacity(BIG + 64);
        for _ in 0..lines {
            body.extend_from_slice(b"data: ");
            body.extend(std::iter::repeat_n(b'x', BIG / lines - 8));
            body.push(b'\n');
        }
        for piece in body.chunks(16 << 10) {
            d.feed(&Bytes::copy_from_slice(piece), &mut out);
            assert!(out.is_empty());
            let (counted, allocated) = (d.buffered(), capacities(&d));
            assert!(
                counted + 2 * SPARE >= allocated,
                "{counted} counted for {allocated} allocated"
            );
            let used = d.line.len() + d.data.len() + d.raw.as_ref().map_or(0, BytesMut::len);
            assert!(
                counted <= used + used / 2 + 2 * SPARE,
                "{counted} counted for {used} used: growth by half"
            );
        }
        d.feed(&Bytes::from_static(b"\n"), &mut out);
        let Some(Decoded::Event(e)) = out.pop() else {
            panic!("one event")
        };
        let frame = d.take_raw().next().unwrap();
        // Stored at their exact size, and the decoder keeps no big buffer.
        assert!(exact_and_alone(e.data), "the event's data, {lines} line(s)");
        assert!(
            exact_and_alone(frame.bytes),
            "its raw frame, {lines} line(s)"
        );
        assert_eq!(d.buffered(), 0);
        assert!(
            capacities(&d) <= 2 * SPARE,
            "{} left allocated",
            capacities(&d)
        );
    }
}

#[test]
fn a_dropped_big_event_lets_its_buffer_go() {
    let mut d = Decoder::new(8 << 20).keep_raw();
    let mut out = Vec::new();
    d.feed(&Bytes::from_static(b"data: "), &mut out);
    for _ in 0..200 {
        d.feed(&Bytes::from(vec![b'x'; 16 << 10]), &mut out);
    }
    assert!(d.buffered() >= 200 * (16 << 10));
    assert!(d.discard_partial().is_some());
    assert_eq!((d.buffered(), capacities(&d) <= SPARE), (0, true));
}
