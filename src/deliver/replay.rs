//! Verbatim readers: the write loop that serves a client in the upstream's own format from a
//! run's raw record (a `from_start` rendering or a raw cursor, then the live tail), with
//! heartbeats while idle, until the run ends. No end frame of tether's own: the response just
//! closes (a run tether stopped ends with the frames its format tells a stop with, which the
//! producer recorded: [`crate::record::format::Format::stop_frames`]).
//!
//! Like the protocol-1 observer, it reads by cursor and never consumes from a shared queue; any
//! number of readers may read one run and vanish at any time.

use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, BytesMut};
use log::debug;
use tokio_util::sync::CancellationToken;

use crate::accounting::Join;
use crate::deliver::observer::{Exit, Idle, Sink};
use crate::dialect::{from_start, Plan};
use crate::state::run::Run;
use crate::vocab::RunId;

/// Raw frames gathered into one write at most.
const MAX_FRAMES_PER_WRITE: usize = 512;

/// A verbatim reader's settings.
#[derive(Debug, Clone)]
pub struct Options {
    /// Interval of `: keepalive` comments while idle.
    pub heartbeat: Duration,
    /// Add `id: <run_id>:<index>` to every frame (`ids = "inject"`).
    pub inject_ids: bool,
}

/// Appends raw frame `index` of `run_id`, with an injected id line when asked.
fn put_frame(out: &mut BytesMut, run_id: &RunId, index: u64, frame: &[u8], inject: bool) {
    if !inject || frame.is_empty() {
        out.put_slice(frame);
        return;
    }
    // The frame ends with its blank line; the id goes last so it wins over any upstream id.
    out.put_slice(&frame[..frame.len() - 1]);
    out.put_slice(b"id: ");
    out.put_slice(run_id.as_bytes());
    out.put_u8(b':');
    out.put_slice(itoa::Buffer::new().format(index).as_bytes());
    out.put_slice(b"\n\n");
}

/// Serves `run` to one client from `plan` until the run ends, the client leaves or shutdown.
pub async fn serve<S: Sink>(
    sink: &mut S,
    run: &Arc<Run>,
    plan: Plan,
    how: Join,
    opts: &Options,
    shutdown: &CancellationToken,
) -> Exit {
    let _guard = run.observe(how);
    let outcome = write_loop(sink, run, plan, opts, shutdown).await;
    debug!("verbatim reader of run {} ended: {outcome:?}", run.id());
    outcome
}

async fn write_loop<S: Sink>(
    sink: &mut S,
    run: &Arc<Run>,
    plan: Plan,
    opts: &Options,
    shutdown: &CancellationToken,
) -> Exit {
    let rx = run.subscribe();
    // A reader resuming further behind than one write writes its first frame alone, then
    // yields: its response head goes out with that write, before any other reader's backlog
    // (docs/performance.md, "the head out before the backlog"). A backlog that fits in one
    // write goes whole, and so does a rendering.
    let mut first = matches!(plan, Plan::From(_));
    let mut next = match plan {
        Plan::Empty => return Exit::Ended,
        Plan::From(i) => i,
        Plan::Render => {
            let cap = run.capture();
            let history = from_start::render(&cap);
            if !history.is_empty() && sink.send(history).await.is_err() {
                return Exit::Gone;
            }
            cap.raw_end
        }
    };
    let mut idle = Idle::new(rx, opts.heartbeat, shutdown);
    loop {
        idle.seen();
        let Some(read) = run.read_raw(next, MAX_FRAMES_PER_WRITE) else {
            return Exit::Ended;
        };
        if read.expired {
            // A reader slower than the raw record's cap: its stream cannot continue in order.
            debug!(
                "verbatim reader of run {} fell out of the raw record at {next}",
                run.id()
            );
            return Exit::Gone;
        }
        let split = std::mem::take(&mut first) && read.more && !read.frames.is_empty();
        let frames = match split {
            true => &read.frames[..1],
            false => &read.frames[..],
        };
        if !frames.is_empty() {
            let out = match (frames, opts.inject_ids) {
                ([(_, one)], false) => one.clone(),
                (frames, inject) => {
                    let len = frames.iter().map(|(_, f)| f.len() + 40).sum::<usize>();
                    let mut out = BytesMut::with_capacity(len);
                    for (i, f) in frames {
                        put_frame(&mut out, run.id(), *i, f, inject);
                    }
                    out.freeze()
                }
            };
            if sink.send(out).await.is_err() {
                return Exit::Gone;
            }
            next = match split {
                true => frames[0].0 + 1,
                false => read.next,
            };
        }
        if split {
            tokio::task::yield_now().await;
            continue;
        }
        if read.end.is_some() {
            return Exit::Ended;
        }
        // Caught up with the record: nothing to read again until the run changes (a change
        // since `seen` above ends the wait at once).
        if read.more {
            continue;
        }
        if let Err(outcome) = idle.wait(sink).await {
            return outcome;
        }
    }
}

#[cfg(test)]
mod tests;
