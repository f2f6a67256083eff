//! The decoder's buffers, counted by what they allocate: grown by half up to a limit, handed out
//! in allocations of their own size when they have much to spare, and let go when big.

use bytes::{Bytes, BytesMut};

/// Spare capacity a buffer may keep (uncounted while it holds nothing) or hand out with what it
/// holds; beyond it a buffer is let go, or its bytes moved to an allocation of their own size.
pub const SPARE: usize = 4096;

/// `b`'s bytes in an allocation of their own size when `b` has more than [`SPARE`] bytes to
/// spare (moved, not copied, when `b` owns its whole allocation).
pub(super) fn exact(b: BytesMut) -> Bytes {
    if b.capacity() - b.len() <= SPARE {
        return b.freeze();
    }
    let mut v = Vec::from(b);
    v.shrink_to_fit();
    Bytes::from(v)
}

/// Empties `b`, letting its allocation go when it is bigger than [`SPARE`].
pub(super) fn release(b: &mut BytesMut) {
    if b.capacity() > SPARE {
        *b = BytesMut::new();
    } else {
        b.clear();
    }
}

/// Makes room for `more` bytes in `b`, growing by half (so at most a third of what it has
/// allocated is spare), but never past `limit` unless more is needed.
pub(super) fn reserve_within(b: &mut BytesMut, more: usize, limit: usize) {
    let need = b.len() + more;
    if need <= b.capacity() {
        return;
    }
    let grown = b.capacity() + b.capacity() / 2;
    let target = grown.max(need).max(64).min(limit.max(need));
    let mut grown = BytesMut::with_capacity(target);
    grown.extend_from_slice(b);
    *b = grown;
}

/// What `b` has allocated, when it holds anything (an empty buffer keeps at most [`SPARE`]).
pub(super) fn allocated(b: &BytesMut) -> usize {
    match b.is_empty() {
        true => 0,
        false => b.capacity(),
    }
}
