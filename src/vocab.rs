//! The words every layer shares, importing nothing else of the crate: the label macro, how a run
//! ends, and the kinds of formats and dialects.

pub mod end;
pub mod kinds;
pub mod label;
