//! Durable Streams readers: a run's messages after an offset, as one catch-up chunk, a long-poll
//! that waits for the next message, or an SSE response of `data` and `control` events until the
//! stream closes ([`crate::dialect::durable_streams`] encodes them).
//!
//! Like every reader, it reads by cursor and never consumes from a shared queue. A reader from
//! the start of a run whose window no longer holds its first events gets the compacted history
//! (the same answer, fewer messages) in their place.

use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use log::debug;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::deliver::observer::{Exit, Idle, Sink};
use crate::dialect::durable_streams as ds;
use crate::journal::CursorMiss;
use crate::state::run::Run;

/// Messages in one response (or one SSE `data` event) at most.
pub const MAX_MESSAGES: usize = 1000;

/// The messages after a cursor, as one JSON array.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    /// The JSON array (`[]` when there is nothing new).
    pub body: Bytes,
    /// The seq the reader asked to read after.
    pub after: u64,
    /// The seq read up to: the next offset's seq (the end message is `end.seq + 1`).
    pub next: u64,
    /// Whether the chunk holds everything the run had when it was read.
    pub up_to_date: bool,
    /// Whether the reader has reached the end of the ended run (the end message included).
    pub closed: bool,
}

impl Chunk {
    /// Whether the chunk carries no message.
    pub fn is_empty(&self) -> bool {
        self.next == self.after
    }
}

/// Why a cursor cannot be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Miss {
    /// Its messages are no longer kept (`410`).
    Gone,
    /// It is past the end of the ended run: tether never gave it (`400`).
    Ahead,
}

/// The chunk with no message after `after`: up to date, and closed at the end of an ended run.
pub fn empty(after: u64, closed: bool) -> Chunk {
    Chunk {
        body: Bytes::from_static(b"[]"),
        after,
        next: after,
        up_to_date: true,
        closed,
    }
}

/// The messages of `run` after seq `after` (0: from the start), up to [`MAX_MESSAGES`].
pub fn chunk(run: &Run, after: u64) -> Result<Chunk, Miss> {
    let end = run.end();
    if let Some(e) = &end {
        if after == e.seq + 1 {
            return Ok(empty(after, true));
        }
        if after > e.seq + 1 {
            return Err(Miss::Ahead);
        }
    }
    let mut out = BytesMut::with_capacity(256);
    ds::open(&mut out);
    match run.journal().read_json_after(after, MAX_MESSAGES, &mut out) {
        Ok(read) => {
            let (next, closed) = match &read.end {
                Some(e) => {
                    ds::put_end(&mut out, run.id(), e);
                    (e.seq + 1, true)
                }
                None => (read.last, false),
            };
            ds::close(&mut out);
            Ok(Chunk {
                body: out.freeze(),
                after,
                next,
                up_to_date: closed || read.last >= read.head,
                closed,
            })
        }
        // A mirror behind the replica that gave the offset: nothing yet, as at the tail.
        Err(CursorMiss::Ahead) => Ok(empty(after, false)),
        Err(CursorMiss::Expired) if after == 0 => Ok(from_history(run)),
        Err(CursorMiss::Expired) => Err(Miss::Gone),
    }
}

/// The whole run so far from its compacted history (the window no longer holds its start).
fn from_history(run: &Run) -> Chunk {
    let cap = run.capture();
    let mut out = BytesMut::with_capacity(cap.history.len() + 256);
    ds::open(&mut out);
    cap.history.write_to(&mut out);
    let (next, closed) = match &cap.end {
        Some(e) => {
            ds::put_end(&mut out, run.id(), e);
            (e.seq + 1, true)
        }
        None => (cap.seq, false),
    };
    ds::close(&mut out);
    Chunk {
        body: out.freeze(),
        after: 0,
        next,
        up_to_date: true,
        closed,
    }
}

/// The seq an `offset=now` read starts after: the run's tail.
pub fn now(run: &Run) -> u64 {
    match run.end() {
        Some(e) => e.seq + 1,
        None => run.head(),
    }
}

/// A long-poll: the messages after `after` as soon as there are any (or the reader is at the
/// end of the ended run); `Ok(None)` when `timeout` passes first, the client leaves or the
/// process shuts down.
pub async fn long_poll<S: Sink>(
    sink: &mut S,
    run: &Arc<Run>,
    after: u64,
    timeout: Duration,
    shutdown: &CancellationToken,
) -> Result<Option<Chunk>, Miss> {
    let deadline = Instant::now() + timeout;
    let mut rx = run.subscribe();
    loop {
        rx.borrow_and_update();
        let c = chunk(run, after)?;
        if !c.is_empty() || c.closed {
            return Ok(Some(c));
        }
        tokio::select! {
            r = rx.changed() => if r.is_err() { return Ok(None) },
            _ = tokio::time::sleep_until(deadline) => return Ok(None),
            _ = sink.closed() => return Ok(None),
            _ = shutdown.cancelled() => return Ok(None),
        }
    }
}

/// An SSE reader's settings.
#[derive(Debug, Clone, Copy)]
pub struct SseOptions {
    /// Interval of `: keepalive` comments while idle.
    pub heartbeat: Duration,
    /// The collapsing cursor of this response's `control` events.
    pub cursor: u64,
}

/// Serves `run` after seq `after` as SSE `data` + `control` events until the reader has the
/// end message (then a `control` with `streamClosed`), the client leaves or shutdown. A reader
/// whose next messages left the window is cut off (it resumes from its last offset, `410`).
pub async fn sse<S: Sink>(
    sink: &mut S,
    run: &Arc<Run>,
    mut after: u64,
    opts: SseOptions,
    shutdown: &CancellationToken,
) -> Exit {
    let _guard = run.observe(crate::accounting::Join::Resume);
    let mut idle = Idle::new(run.subscribe(), opts.heartbeat, shutdown);
    let mut first = true;
    loop {
        idle.seen();
        let c = match chunk(run, after) {
            Ok(c) => c,
            Err(miss) => {
                debug!(
                    "durable streams reader of run {} cut at {after}: {miss:?}",
                    run.id()
                );
                return Exit::Gone;
            }
        };
        if !c.is_empty() || c.closed || first {
            let mut out = BytesMut::with_capacity(c.body.len() + 160);
            if !c.is_empty() {
                ds::sse_data(&mut out, &c.body);
            }
            let next = ds::offset(run.id(), c.next);
            ds::sse_control(&mut out, &next, opts.cursor, c.up_to_date, c.closed);
            if sink.send(out.freeze()).await.is_err() {
                return Exit::Gone;
            }
            first = false;
            after = c.next;
            if c.closed {
                return Exit::Ended;
            }
            if !c.up_to_date {
                continue;
            }
        }
        if let Err(outcome) = idle.wait(sink).await {
            return outcome;
        }
    }
}

#[cfg(test)]
mod tests;
