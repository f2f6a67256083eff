//! Durable Streams routes (resume routes with `dialect = "durable_streams"`): a run, or the
//! chat's current run, as a read-only Durable Stream. Finds the run (an offset names its own), then answers `HEAD`, a
//! catch-up read, a long-poll or an SSE read; writes are `405`.

use std::sync::Arc;

use bytes::Bytes;
use log::debug;
use pingora_http::ResponseHeader;
use pingora_proxy::Session;
use rand::Rng;

use super::request::{name, with_parts};
use super::serve::{room_for_reader, sse_header};
use super::session::{header_value, Handled, Reply, SessionSink};
use super::{Matched, Sidecar};
use crate::chats::{Name, Owner};
use crate::deliver::durable::{self, Chunk, Miss, SseOptions};
use crate::dialect::durable_streams::{self as ds, header, From, Live, ReadRequest};
use crate::error::{ApiError, Code};
use crate::metrics::AttachResult;
use crate::state::run::Run;
use crate::vocab::kinds::DialectKind;

const KIND: DialectKind = DialectKind::DurableStreams;

/// Builds a response head; a header tether cannot build is a bug, answered as a `400` body.
fn head(status: u16) -> Result<ResponseHeader, ApiError> {
    ResponseHeader::build(status, Some(8))
        .map_err(|e| ApiError::new(Code::InvalidBody, e.to_string()))
}

fn set(h: &mut ResponseHeader, name: &'static str, value: impl ToString) {
    let _ = h.insert_header(name, value.to_string());
}

impl Sidecar {
    /// A `durable_streams` resume route.
    pub(crate) async fn durable(&self, session: &mut Session, m: &Matched<'_>) -> Handled {
        let method = session.req_header().method.clone();
        if method != http::Method::GET && method != http::Method::HEAD {
            return self.read_only(session).await;
        }
        let req = ds::parse(session.req_header().uri.query())?;
        let owner = self.shared.chats.owner(&session.req_header().headers)?;
        let run = self.stream_run(session, m, &req, owner).await?;
        let s = &self.shared;
        let Some(run) = run else {
            s.metrics.attach.inc(KIND, AttachResult::NotFound);
            return Err(ApiError::new(Code::NoRun, "no such stream"));
        };
        if method == http::Method::HEAD {
            let mut h = head(200)?;
            set(&mut h, "content-type", ds::CONTENT_TYPE);
            let end = run.end();
            set(
                &mut h,
                header::NEXT_OFFSET,
                ds::tail(run.id(), run.head(), end.as_ref()),
            );
            if end.is_some() {
                set(&mut h, header::CLOSED, "true");
            }
            set(&mut h, "cache-control", "no-store");
            return self.write_head(session, h, None).await;
        }
        let after = match &req.from {
            From::Start => 0,
            From::Now => durable::now(&run),
            From::At { seq, .. } => *seq,
        };
        match req.live {
            Live::No => self.catch_up(session, &run, &req, after).await,
            Live::LongPoll => self.long_poll(session, &run, &req, after).await,
            Live::Sse => self.sse(session, &run, &req, after).await,
        }
    }

    /// `405` with `Allow`: tether serves the read path only.
    async fn read_only(&self, session: &mut Session) -> Handled {
        let e = ApiError::new(
            Code::MethodNotAllowed,
            "this stream is read-only: tether records it from the backend",
        );
        // Its body is not read: the connection closes after the answer.
        session.set_keepalive(None);
        let mut h = head(405)?;
        set(&mut h, "allow", "GET, HEAD");
        set(&mut h, "content-type", "application/json");
        self.write_head(session, h, Some(e.body())).await
    }

    /// The run a read names: the one its offset belongs to, else the route's run or the chat's
    /// current run. An offset of another run is `400` on a run's stream, and `410` on a chat's
    /// stream once tether no longer holds that run.
    async fn stream_run(
        &self,
        session: &Session,
        m: &Matched<'_>,
        req: &ReadRequest,
        owner: Owner,
    ) -> Result<Option<Arc<Run>>, ApiError> {
        let chats = &self.shared.chats;
        let name = with_parts(session, m, |parts| name(m.route, parts, None))?;
        let named = match &req.from {
            From::At { run, .. } => Some(run.clone()),
            _ => None,
        };
        match (name, named) {
            (Name::Chat(chat), Some(named)) => match chats.chat(owner, &chat).find(&named).await {
                Some(found) => Ok(Some(found.run)),
                None => {
                    self.shared.metrics.attach.inc(KIND, AttachResult::Expired);
                    Err(ApiError::new(
                        Code::OffsetGone,
                        "the turn this offset belongs to is no longer kept",
                    ))
                }
            },
            (name, named) => {
                let run = chats.lookup(owner, &name).await.map(|f| f.run);
                match (run, named) {
                    (Some(run), Some(named)) if *run.id() != named => Err(ApiError::new(
                        Code::InvalidOffset,
                        "the offset belongs to another stream",
                    )),
                    (run, _) => Ok(run),
                }
            }
        }
    }

    /// A catch-up read: what there is now, as one JSON array (`304` for the copy the client has).
    async fn catch_up(
        &self,
        session: &mut Session,
        run: &Arc<Run>,
        req: &ReadRequest,
        after: u64,
    ) -> Handled {
        let c = self.chunk(run, after)?;
        let mut h = self.chunk_head(200, run, req, &c, None)?;
        if req.from != From::Now {
            let tag = ds::etag(run.id(), c.after, c.next, c.closed);
            let matches = header_value(session, "if-none-match").is_some_and(|t| t == tag);
            set(&mut h, "etag", &tag);
            if matches {
                h.set_status(304).ok();
                h.remove_header("content-type");
                return self.write_head(session, h, None).await;
            }
        }
        self.write_head(session, h, Some(c.body)).await
    }

    /// A long-poll: the next messages as soon as there are any, else `204` after
    /// `[recorder] max_wait`.
    async fn long_poll(
        &self,
        session: &mut Session,
        run: &Arc<Run>,
        req: &ReadRequest,
        after: u64,
    ) -> Handled {
        let s = &self.shared;
        let cursor = self.cursor(req);
        let waited = {
            let _tracked = s.observers.token();
            let _guard = run.observe(crate::accounting::Join::Resume);
            let mut sink = SessionSink::new(session, s.cfg.server.write_timeout.0);
            durable::long_poll(&mut sink, run, after, s.cfg.recorder.max_wait.0, &s.stop).await
        };
        let c = match waited {
            Ok(Some(c)) if !c.is_empty() => {
                s.metrics.attach.inc(KIND, AttachResult::Replay);
                let h = self.chunk_head(200, run, req, &c, Some(cursor))?;
                return self.write_head(session, h, Some(c.body)).await;
            }
            Ok(Some(c)) => c,
            Ok(None) => durable::empty(after, false),
            Err(miss) => return Err(self.missed(miss)),
        };
        s.metrics.attach.inc(
            KIND,
            match c.closed {
                true => AttachResult::EndOnly,
                false => AttachResult::NoContent,
            },
        );
        let h = self.chunk_head(204, run, req, &c, Some(cursor))?;
        self.write_head(session, h, None).await
    }

    /// An SSE read until the stream closes.
    async fn sse(
        &self,
        session: &mut Session,
        run: &Arc<Run>,
        req: &ReadRequest,
        after: u64,
    ) -> Handled {
        let s = &self.shared;
        room_for_reader(s, run)?;
        // Check the offset before the `200` goes out.
        self.chunk(run, after)?;
        let mut h = sse_header()?;
        s.cors.own(session.req_header(), &mut h);
        if session
            .write_response_header(Box::new(h), false)
            .await
            .is_err()
        {
            return Ok(Reply::Abort);
        }
        let _tracked = s.observers.token();
        let opts = SseOptions {
            heartbeat: s.cfg.server.heartbeat.0,
            cursor: self.cursor(req),
        };
        let mut sink = SessionSink::new(session, s.cfg.server.write_timeout.0);
        match durable::sse(&mut sink, run, after, opts, &s.stop).await {
            crate::deliver::observer::Exit::Ended if sink.finish().await => Ok(Reply::Done),
            _ => Ok(Reply::Abort),
        }
    }

    /// The chunk after `after`, counted; a miss is its status.
    fn chunk(&self, run: &Run, after: u64) -> Result<Chunk, ApiError> {
        let c = durable::chunk(run, after).map_err(|m| self.missed(m))?;
        let result = match (c.is_empty(), c.closed, after) {
            (true, true, _) => AttachResult::EndOnly,
            (_, _, 0) => AttachResult::Snapshot,
            _ => AttachResult::Replay,
        };
        self.shared.metrics.attach.inc(KIND, result);
        Ok(c)
    }

    /// The status of a cursor that cannot be read, counted.
    fn missed(&self, miss: Miss) -> ApiError {
        debug!("durable streams read refused: {miss:?}");
        match miss {
            Miss::Gone => {
                self.shared.metrics.attach.inc(KIND, AttachResult::Expired);
                ApiError::new(
                    Code::OffsetGone,
                    "the messages after this offset are no longer kept",
                )
            }
            Miss::Ahead => {
                ApiError::new(Code::InvalidOffset, "the offset is past the stream's end")
            }
        }
    }

    /// This response's collapsing cursor.
    fn cursor(&self, req: &ReadRequest) -> u64 {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        ds::stream_cursor(now, req.cursor, rand::thread_rng().gen_range(1..=3600))
    }

    /// The head of a read's answer: the offset to read next, `Stream-Up-To-Date`,
    /// `Stream-Closed`, the cursor of a live read while the stream is open, and caching (a read
    /// from `-1` or `now` names no fixed position, so it is never stored).
    fn chunk_head(
        &self,
        status: u16,
        run: &Run,
        req: &ReadRequest,
        c: &Chunk,
        cursor: Option<u64>,
    ) -> Result<ResponseHeader, ApiError> {
        let mut h = head(status)?;
        if status == 200 {
            set(&mut h, "content-type", ds::CONTENT_TYPE);
        }
        set(&mut h, header::NEXT_OFFSET, ds::offset(run.id(), c.next));
        if c.up_to_date {
            set(&mut h, header::UP_TO_DATE, "true");
        }
        if c.closed {
            set(&mut h, header::CLOSED, "true");
        } else if let Some(cursor) = cursor {
            set(&mut h, header::CURSOR, cursor);
        }
        let fixed = matches!(req.from, From::At { .. }) && status == 200;
        set(
            &mut h,
            "cache-control",
            match fixed {
                true => "private, max-age=60, stale-while-revalidate=300",
                false => "no-store",
            },
        );
        Ok(h)
    }

    /// Writes a whole answer: `h` (with CORS and `content-length`) and `body`.
    async fn write_head(
        &self,
        session: &mut Session,
        mut h: ResponseHeader,
        body: Option<Bytes>,
    ) -> Handled {
        let head_only = session.req_header().method == http::Method::HEAD;
        let len = body.as_ref().map_or(0, Bytes::len);
        if h.status.as_u16() != 204 && h.status.as_u16() != 304 && !head_only {
            set(&mut h, "content-length", len);
        }
        self.shared.cors.own(session.req_header(), &mut h);
        let body = body.filter(|b| !b.is_empty() && !head_only);
        if session
            .write_response_header(Box::new(h), body.is_none())
            .await
            .is_err()
        {
            return Ok(Reply::Abort);
        }
        if let Some(b) = body {
            if session.write_response_body(Some(b), true).await.is_err() {
                return Ok(Reply::Abort);
            }
        }
        Ok(Reply::Done)
    }
}
