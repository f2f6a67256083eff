//! `last_event_id` (EventSource, fetch-event-source, the LangGraph SDK): the cursor is an SSE
//! event id the client saw (`Last-Event-ID`); the replay is the raw frames after the frame with
//! that id. `-1` or no id is the whole turn. Ids tether injected (`<run_id>:<index>`) name their
//! frame directly; ids it made unique (`<id>~<index>`, `ids = "unique"`) are found as relayed,
//! like any other.

use super::{at_end, expired, Plan, Refusal, Verbatim};
use crate::error::ApiError;
use crate::journal::raw::Seek;
use crate::journal::Journal;
use crate::journal::SeekBy;
use crate::settings::{DialectKind, Expired};
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

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::ingest::Ingest;
    use crate::journal::memory::MemoryJournal;
    use crate::record::format::agui::Agui;
    use crate::settings::Commit;
    use crate::vocab::end::End;

    /// A run whose upstream wrote `ids`, one frame each, recorded with its ids made unique.
    fn recorded(ids: &[&str]) -> (RunId, MemoryJournal) {
        let run_id = RunId::from("r1");
        let j = MemoryJournal::with_raw(&run_id, 64, Some(1 << 20));
        let mut ingest = Ingest::new(Some(&Agui), Commit::CleanEnd, 1 << 16)
            .keep_raw(None)
            .unique_ids();
        let body: String = ids
            .iter()
            .enumerate()
            .map(|(n, id)| format!("id: {id}\ndata: {{\"type\":\"X\",\"n\":{n}}}\n\n"))
            .collect();
        let mut batch = Vec::new();
        ingest.feed(&Bytes::from(body), &mut batch);
        j.append_raw(&batch, ingest.take_raw());
        (run_id, j)
    }

    fn plan(run_id: &RunId, j: &MemoryJournal, cursor: &str) -> Result<Plan, Refusal> {
        let d = LastEventId {
            expired: Expired::FromStart,
        };
        d.plan(run_id, j, Some(cursor)).unwrap()
    }

    #[test]
    fn either_form_of_an_id_in_a_burst_resumes_right_after_its_frame() {
        let (run_id, j) = recorded(&["7-0", "8-0", "8-0", "8-0", "9-0"]);
        assert_eq!(plan(&run_id, &j, "-1"), Ok(Plan::From(0)));
        assert_eq!(plan(&run_id, &j, "7-0"), Ok(Plan::From(1)));
        // The plain id is the burst's first frame's alone.
        assert_eq!(plan(&run_id, &j, "8-0"), Ok(Plan::From(2)));
        assert_eq!(plan(&run_id, &j, "8-0~2"), Ok(Plan::From(3)));
        assert_eq!(plan(&run_id, &j, "8-0~3"), Ok(Plan::From(4)));
        assert_eq!(plan(&run_id, &j, "8-0~9"), Err(Refusal::Unknown));
        j.end(End::finished(true, None));
        assert_eq!(plan(&run_id, &j, "9-0"), Err(Refusal::Nothing));
    }
}
