//! Annotate routes: forward the request, and on a 2xx answer append its body (which must be
//! JSON) to the chat's active run as a `CUSTOM` event named `tether.resolution`.

use bytes::Bytes;
use log::info;
use pingora_proxy::Session;

use super::request::read_turn;
use super::session::{forward_unrecorded, Handled};
use super::{Matched, Sidecar};
use crate::record::format::{agui::Agui, Format};
use crate::record::sse::SseEvent;
use crate::request;

impl Sidecar {
    /// `kind = "annotate"`: forward, and on a 2xx answer append the request body (which must be
    /// JSON) to the chat's active run as a `CUSTOM` event named `tether.resolution`.
    pub(crate) async fn annotate(&self, session: &mut Session, m: &Matched<'_>) -> Handled {
        let s = &self.shared;
        let req = match read_turn(s, session, m).await {
            Ok(t) => t,
            Err(h) => return h,
        };
        let event = request::resolution(&req.body)?;
        let (status, reply) = forward_unrecorded(s, session, req.body).await?;
        if !(200..300).contains(&status) {
            return Ok(reply);
        }
        let current = s.chats.chat(req.owner, &req.chat_id).current_here();
        let Some(run) = current.map(|f| f.run).filter(|r| r.end().is_none()) else {
            return Ok(reply);
        };
        let event = Agui.classify(&SseEvent {
            event: None,
            data: Bytes::from(event),
            id: None,
        });
        // The run's journal counts the event in the recorded bytes itself.
        run.append(&[event]);
        info!("run {}: resolution recorded", run.id());
        Ok(reply)
    }
}
