//! The words every layer shares, importing nothing else of the crate: the label macro, how a run
//! ends, the kinds of formats and dialects, and the id types.

pub mod end;
pub mod id;
pub mod kinds;
pub mod label;

pub use id::{ChatId, RunId, Scope};
