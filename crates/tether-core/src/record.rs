//! Recording, pure: the incremental SSE decoder ([`sse`]), the stream formats that classify each
//! event ([`format`](mod@format)), the compacted history ([`compact`]), JSON string writing
//! ([`json`]), event ids made unique in a run ([`unique_ids`]) and the token usage the
//! provider's own frames report ([`usage`]).

pub mod compact;
pub mod format;
pub mod json;
pub mod sse;
pub mod unique_ids;
pub mod usage;
