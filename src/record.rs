//! Recording, pure: the incremental SSE decoder ([`sse`]), the stream formats that classify each
//! event ([`format`](mod@format)), the compacted history ([`compact`]) and JSON string writing ([`json`]).

pub mod compact;
pub mod format;
pub mod json;
pub mod sse;
