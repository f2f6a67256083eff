//! `last_event_id` (EventSource, fetch-event-source, the LangGraph SDK): the cursor is an SSE
//! event id the client saw (`Last-Event-ID`); the replay is the raw frames after the frame with
//! that id. `-1` or no id is the whole turn. Ids tether injected (`<run_id>:<index>`) name their
//! frame directly.

use super::{at_end, expired, Plan, Refusal, Verbatim};
use crate::config::{DialectKind, Expired};
use crate::error::ApiError;
use crate::journal::raw::Seek;
use crate::journal::Journal;
use crate::journal::SeekBy;
use crate::vocab::RunId;

/// The `last_event_id` dialect.
#[derive(Debug)]
pub struct LastEventId {
    /// The answer to an expired cursor.
    pub expired: Expired,
}

/// The frame index of an id tether injected into `run`'s frames (`<run_id>:<index>`).
pub fn injected(run_id: &RunId, id: &str) -> Option<u64> {
    let (named, index) = id.rsplit_once(':')?;
    (named == run_id).then(|| index.parse().ok())?
}

impl Verbatim for LastEventId {
    fn kind(&self) -> DialectKind {
        DialectKind::LastEventId
    }

    fn plan(
        &self,
        run_id: &RunId,
        run: &dyn Journal,
        cursor: Option<&str>,
    ) -> Result<Result<Plan, Refusal>, ApiError> {
        let seek = match cursor.map(str::trim) {
            None | Some("" | "-1") => run.seek(SeekBy::Index(0)),
            Some(id) => match injected(run_id, id) {
                Some(i) => run.seek(SeekBy::Index(i + 1)),
                None => run.seek(SeekBy::Id(id.as_bytes())),
            },
        };
        Ok(match seek {
            None => expired(self.expired),
            Some(Seek::Expired) => expired(self.expired),
            Some(Seek::Unknown) => Err(Refusal::Unknown),
            Some(Seek::From(i)) if at_end(run, i) => Err(Refusal::Nothing),
            Some(Seek::From(i)) => Ok(Plan::From(i)),
        })
    }
}
