//! `frame_index` (an index-polling client): the cursor is the number of frames the client
//! already has (`startIndex`); the replay is the raw frames from that index on.

use super::{at_end, Plan, Refusal, Verbatim};
use crate::error::{ApiError, Code};
use crate::journal::raw::Seek;
use crate::journal::Journal;
use crate::journal::SeekBy;
use crate::settings::{DialectKind, Expired};
use crate::vocab::RunId;

/// The `frame_index` dialect: expired and unknown are `404`.
#[derive(Debug)]
pub struct FrameIndex;

impl Verbatim for FrameIndex {
    fn kind(&self) -> DialectKind {
        DialectKind::FrameIndex
    }

    fn plan(
        &self,
        _run_id: &RunId,
        run: &dyn Journal,
        cursor: Option<&str>,
    ) -> Result<Result<Plan, Refusal>, ApiError> {
        let n = match cursor {
            None | Some("") => 0,
            Some(c) => c.parse::<u64>().map_err(|_| {
                ApiError::new(Code::InvalidCursor, format!("{c:?} is not a frame index"))
            })?,
        };
        Ok(match run.seek(SeekBy::Index(n)) {
            None | Some(Seek::Expired | Seek::Unknown) => Err(Refusal::Expired(Expired::NotFound)),
            Some(Seek::From(i)) if at_end(run, i) => Ok(Plan::Empty),
            Some(Seek::From(i)) => Ok(Plan::From(i)),
        })
    }
}
