//! `json_cursor` (seed 001's `last_event_index`, OpenAI's `starting_after`): the cursor is
//! compared with an integer field of each raw frame's JSON; the replay is the frames after the
//! frame that carries it. Frames without the field do not advance the cursor.

use super::{at_end, expired, Plan, Refusal, Verbatim};
use crate::error::{ApiError, Code};
use crate::journal::raw::Seek;
use crate::journal::Journal;
use crate::journal::SeekBy;
use crate::settings::{DialectKind, Expired};
use crate::vocab::RunId;

/// The `json_cursor` dialect.
#[derive(Debug)]
pub struct JsonCursor {
    /// The answer to an expired cursor.
    pub expired: Expired,
}

impl Verbatim for JsonCursor {
    fn kind(&self) -> DialectKind {
        DialectKind::JsonCursor
    }

    fn plan(
        &self,
        _run_id: &RunId,
        run: &dyn Journal,
        cursor: Option<&str>,
    ) -> Result<Result<Plan, Refusal>, ApiError> {
        let c = match cursor {
            None | Some("") => -1,
            Some(c) => c.parse::<i64>().map_err(|_| {
                ApiError::new(
                    Code::InvalidCursor,
                    format!("{c:?} is not an integer cursor"),
                )
            })?,
        };
        if c < -1 {
            return Ok(expired(self.expired));
        }
        Ok(match run.seek(SeekBy::Cursor(c)) {
            None | Some(Seek::Expired | Seek::Unknown) => expired(self.expired),
            Some(Seek::From(i)) if at_end(run, i) => Ok(Plan::Empty),
            Some(Seek::From(i)) => Ok(Plan::From(i)),
        })
    }
}
