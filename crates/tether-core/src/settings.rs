//! Route settings the pure layers interpret: where a request key comes from ([`KeySource`]),
//! when a run counts as persisted ([`Commit`]), and how a resume dialect answers ([`Resume`] and
//! its options). Parsing and checks only; the sidecar's `config` reads them from
//! `conf/tether.toml` and the flags.

mod resume;
mod source;

use std::str::FromStr;

pub use resume::{
    Alias, Answer, Completed, DialectKind, Expired, Ids, OnNothing, OneOrMany, OnlyIf, Resume,
    Tokens,
};
pub use source::{check_pointer, KeySource};

/// When a run counts as persisted: `eof`, `clean_end` or `event:<TYPE>[:<name>]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Commit {
    /// The upstream ended cleanly after a terminal event of its format.
    Eof,
    /// The upstream ended its body cleanly, whatever its last event (for streams whose format
    /// tether does not judge, such as LangGraph's or an SSE v2 envelope). A close-delimited
    /// body ends cleanly only after a terminal event (see `Ingest::at_close`).
    CleanEnd,
    /// An event of this type (and `name`, when given) arrived.
    Event {
        /// The event `type`.
        ty: String,
        /// The event `name` (for `CUSTOM`), if required.
        name: Option<String>,
    },
}

impl FromStr for Commit {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        if s == "eof" {
            return Ok(Commit::Eof);
        }
        if s == "clean_end" {
            return Ok(Commit::CleanEnd);
        }
        let bad = || format!("{s:?} must be eof, clean_end or event:<TYPE>[:<name>]");
        let rest = s.strip_prefix("event:").ok_or_else(bad)?;
        match rest.split_once(':') {
            Some((ty, name)) if !ty.is_empty() && !name.is_empty() => Ok(Commit::Event {
                ty: ty.into(),
                name: Some(name.into()),
            }),
            None if !rest.is_empty() => Ok(Commit::Event {
                ty: rest.into(),
                name: None,
            }),
            _ => Err(bad()),
        }
    }
}
