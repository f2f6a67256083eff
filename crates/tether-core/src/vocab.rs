//! The words every layer shares, importing nothing else of the crate: the label macro, how a run
//! ends, the kinds of formats and dialects, the id types, and where a stream's usage is.

pub mod end;
pub mod id;
pub mod kinds;
pub mod label;
pub mod usage;

pub use id::{ChatId, RunId, Scope};
