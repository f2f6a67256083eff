//! Resume routes: a client resuming in its own dialect (`docs/dialects.md`). Find the run (by
//! tether's run id, an alias, or the chat's current run), check the resume token, let the
//! dialect place the cursor, and serve the raw record in the upstream's own format, or answer
//! the dialect's status. A request the route's `only_if` does not match is passed through. (The
//! Durable Streams dialect has its own route file, `proxy/durable.rs`.)

use std::sync::Arc;

use bytes::Bytes;
use log::debug;
use pingora_proxy::Session;

use super::request::{name, one_key, with_parts};
use super::serve::{refused, serve_verbatim, Reader, Verbatim};
use super::session::{forward_unrecorded, read_body, Handled};
use super::{Matched, Sidecar};
use crate::chats::Name;
use crate::config::{DialectKind, Expired, Resume};
use crate::dialect::{verbatim, Plan, Refusal};
use crate::error::{ApiError, Code};
use crate::metrics::AttachResult;
use crate::request::{json_object, Query};
use crate::state::run::Run;
use crate::state::token;

impl Sidecar {
    /// `kind = "resume"`: serve a run in the client's own dialect.
    pub(crate) async fn resume(&self, session: &mut Session, m: &Matched<'_>) -> Handled {
        let (s, route) = (&self.shared, m.route);
        let Some(resume) = &route.resume else {
            return Err(ApiError::new(Code::InvalidBody, "route has no dialect"));
        };
        let body = match session.req_header().method == http::Method::GET {
            true => Bytes::new(),
            false => match read_body(session, s).await {
                Ok(b) => b,
                Err(e) => return e.into(),
            },
        };
        if let Some(cond) = &resume.only_if {
            let q = Query::parse(session.req_header().uri.query());
            if q.get(&cond.name)?.as_deref() != Some(cond.value.as_str()) {
                return Ok(forward_unrecorded(s, session, body).await?.1);
            }
        }
        let owner = s.chats.owner(&session.req_header().headers)?;
        let map = match body.is_empty() {
            true => None,
            false => Some(json_object(&body)?),
        };
        let (name, token, cursor) = with_parts(session, m, |parts| {
            let map = map.as_ref();
            let name = name(route, parts, map)?;
            let token = one_key(resume.token.as_ref(), parts, map);
            Ok::<_, ApiError>((name, token, one_key(resume.cursor.as_ref(), parts, map)))
        })?;
        let run = s.chats.lookup(owner, &name).await.map(|f| f.run);
        let named = match name {
            Name::Run(id) => Some(id),
            Name::Chat(_) => None,
        };
        // With a token source, only a run named by id, with a valid token for it, is served.
        let run = match (&resume.token, &named, run) {
            (Some(_), Some(name), Some(run)) => {
                let ok = token?
                    .is_some_and(|t| token::verify(&s.cfg.secret, name, &owner, &t, token::now()));
                ok.then_some(run)
            }
            (Some(_), _, _) => None,
            (None, _, run) => run,
        };
        let (run, read) = match self.plan(resume, run, named.is_some(), cursor?.as_deref()) {
            Ok(plan) => plan,
            Err(answer) => return answer,
        };
        serve_verbatim(s, session, &run, read, &owner).await
    }

    /// Where the dialect starts reading `run` at `cursor`; `Err` holds the answer of a refusal
    /// (counted) or of a bad cursor. A run named by id that tether does not know is 404 for every dialect but
    /// `from_start`; a chat without a run gets the dialect's nothing-to-resume answer.
    fn plan(
        &self,
        resume: &Resume,
        run: Option<Arc<Run>>,
        named: bool,
        cursor: Option<&str>,
    ) -> Result<(Arc<Run>, Verbatim), Handled> {
        let s = &self.shared;
        let dialect = verbatim(resume);
        let kind = dialect.kind();
        let refuse = |(result, answer): (AttachResult, Handled)| {
            s.metrics.attach.inc(kind, result);
            Err(answer)
        };
        let Some(run) = run else {
            debug!("resume ({}): no run", kind.as_str());
            return match (named, kind) {
                (true, DialectKind::LastEventId) => refuse((
                    AttachResult::NotFound,
                    Err(ApiError::new(Code::NoRun, "no such run to resume")),
                )),
                _ => refuse(refused(kind, Refusal::Nothing, resume.on_nothing)),
            };
        };
        let plan = match dialect.plan(run.id(), run.journal(), cursor).map_err(Err)? {
            Ok(plan) => plan,
            Err(Refusal::Unknown) => match resume.expired {
                Expired::FromStart => Plan::Render,
                e => return refuse(refused(kind, Refusal::Expired(e), resume.on_nothing)),
            },
            Err(refusal) => return refuse(refused(kind, refusal, resume.on_nothing)),
        };
        let read = Verbatim {
            plan,
            reader: Reader::Resume(kind),
            inject_ids: false,
        };
        Ok((run, read))
    }
}
