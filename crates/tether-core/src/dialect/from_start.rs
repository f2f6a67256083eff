//! `from_start` (the AI SDK's `useChat({resume: true})`): no cursor; the whole turn, its
//! compacted history rendered in the upstream's own SSE format (one frame per compacted event),
//! then the live tail as raw frames. A completed run is `204` unless `completed = "replay"`.

use bytes::{BufMut, Bytes, BytesMut};
use serde::Deserialize;
use serde_json::value::RawValue;

use super::{Plan, Refusal, Verbatim};
use crate::error::ApiError;
use crate::journal::Journal;
use crate::journal::SnapshotCapture;
use crate::settings::{Completed, DialectKind};
use crate::vocab::RunId;

/// The `from_start` dialect.
#[derive(Debug)]
pub struct FromStart {
    /// What a completed run gets.
    pub completed: Completed,
}

impl Verbatim for FromStart {
    fn kind(&self) -> DialectKind {
        DialectKind::FromStart
    }

    fn plan(
        &self,
        _run_id: &RunId,
        run: &dyn Journal,
        _cursor: Option<&str>,
    ) -> Result<Result<Plan, Refusal>, ApiError> {
        Ok(match (run.ended(), self.completed) {
            (Some(_), Completed::NoContent) => Err(Refusal::Nothing),
            _ => Ok(Plan::Render),
        })
    }
}

/// A wrapped non-JSON upstream event (`RAW`), as the format layer writes it.
#[derive(Deserialize)]
struct Wrapped<'a> {
    #[serde(rename = "type")]
    ty: Option<&'a str>,
    source: Option<&'a str>,
    #[serde(borrow)]
    event: Option<WrappedEvent<'a>>,
}

#[derive(Deserialize)]
struct WrappedEvent<'a> {
    event: Option<std::borrow::Cow<'a, str>>,
    data: Option<std::borrow::Cow<'a, str>>,
}

fn frame(out: &mut BytesMut, name: Option<&str>, data: &str) {
    if let Some(n) = name.filter(|n| !n.is_empty()) {
        out.put_slice(b"event: ");
        out.put_slice(n.as_bytes());
        out.put_u8(b'\n');
    }
    for line in data.split('\n') {
        out.put_slice(b"data: ");
        out.put_slice(line.as_bytes());
        out.put_u8(b'\n');
    }
    out.put_u8(b'\n');
}

/// The compacted history of `cap` as SSE frames in the upstream's own format: `data: <event
/// JSON>` per compacted event, after `event: <type>` when the upstream used `event:` lines. A
/// non-JSON upstream event (`[DONE]`) is written back as the data it was.
pub fn render(cap: &SnapshotCapture) -> Bytes {
    let mut array = BytesMut::with_capacity(cap.history.len() + 2);
    array.put_u8(b'[');
    cap.history.write_to(&mut array);
    array.put_u8(b']');
    let mut out = BytesMut::with_capacity(array.len() + cap.history.events * 24);
    let Ok(events) = serde_json::from_slice::<Vec<&RawValue>>(&array) else {
        return out.freeze();
    };
    for ev in events {
        let json = ev.get();
        let w: Option<Wrapped<'_>> = serde_json::from_str(json).ok();
        match w {
            Some(Wrapped {
                ty: Some("RAW"),
                source: Some("sse"),
                event:
                    Some(WrappedEvent {
                        event,
                        data: Some(data),
                    }),
            }) => {
                let name = event.as_deref().filter(|n| *n != "message");
                frame(&mut out, name, &data);
            }
            Some(Wrapped { ty, .. }) if cap.named => frame(&mut out, ty, json),
            _ => frame(&mut out, None, json),
        }
    }
    out.freeze()
}
