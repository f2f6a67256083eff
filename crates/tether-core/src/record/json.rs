//! JSON string literals written straight into byte buffers (frames, `RAW` wrappers).

use bytes::{BufMut, BytesMut};

/// Appends `s` as a JSON string literal.
pub fn write_str(out: &mut BytesMut, s: &str) {
    // serde_json writes into any io::Write; BytesMut's writer cannot fail.
    let mut w = std::mem::take(out).writer();
    let _ = serde_json::to_writer(&mut w, s);
    *out = w.into_inner();
}
