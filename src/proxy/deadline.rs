//! The body deadline of a request Pingora's proxy reads (a pass-through, over HTTP/1.1 or
//! HTTP/2): [`under`] runs the request and ends it when its body has not arrived whole by the
//! deadline. Pingora has no such limit: it times each HTTP/1.1 body read alone (a byte now and
//! then holds the connection for ever) and an HTTP/2 body read not at all (a stream that
//! announces a body and sends none waits for ever, and keeps its connection from being idle).
//! Ending the request drops Pingora's future: an HTTP/1.1 connection is closed, an HTTP/2
//! stream is reset (`RST_STREAM CANCEL`), and the backend connection goes with either.
//!
//! The clock is armed only for a pass-through: the adapter arms it ([`BodyWatch::arm`]) once it
//! knows the request goes to the backend through Pingora, and stops it when the body's last
//! byte has been read ([`BodyWatch::done`]). The adapter finds the request's watch on its task
//! ([`BodyWatch::current`], a task-local: Pingora makes the per-request context itself, so it
//! cannot be handed in). Requests tether answers itself read their body under their own
//! deadline (`session::read_body`) and never arm it.

use std::future::{pending, Future};
use std::sync::Arc;

use tokio::sync::watch;
use tokio::time::Instant;

tokio::task_local! {
    static WATCH: BodyWatch;
}

/// Where a request's body deadline stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Not armed: the request is not (yet) a pass-through.
    Idle,
    /// A pass-through whose body is still arriving.
    Armed,
    /// The body has been read whole.
    Done,
}

/// One request's body deadline, shared by [`under`] and the adapter's hooks.
#[derive(Debug, Clone)]
pub struct BodyWatch(Arc<watch::Sender<State>>);

impl BodyWatch {
    /// The watch of the request running on this task; `None` outside [`under`] (tether's own
    /// HTTP/1.1 routes, which never pass through).
    pub fn current() -> Option<Self> {
        WATCH.try_with(Clone::clone).ok()
    }

    /// Starts the clock (from the deadline [`under`] was given, not from now), unless the body
    /// is already done.
    pub fn arm(&self) {
        self.0.send_if_modified(|s| {
            let idle = *s == State::Idle;
            if idle {
                *s = State::Armed;
            }
            idle
        });
    }

    /// The body has been read whole: the clock stops for good.
    pub fn done(&self) {
        self.0.send_replace(State::Done);
    }
}

/// Runs `request` with a [`BodyWatch`] on its task: its output, or `None` when the watch was
/// armed and `deadline` passed before the body was done (`request` is then dropped).
pub async fn under<F: Future>(deadline: Instant, request: F) -> Option<F::Output> {
    let (tx, mut rx) = watch::channel(State::Idle);
    let request = WATCH.scope(BodyWatch(Arc::new(tx)), request);
    tokio::select! {
        biased;
        out = request => Some(out),
        () = expired(&mut rx, deadline) => None,
    }
}

/// Resolves once the watch is armed and `deadline` has passed with the body not done.
async fn expired(rx: &mut watch::Receiver<State>, deadline: Instant) {
    let armed = match rx.wait_for(|s| *s != State::Idle).await {
        Ok(s) => *s == State::Armed,
        // Not reached: `under` keeps a sender for as long as it waits here.
        Err(_) => false,
    };
    if !armed {
        return pending().await;
    }
    // Boxed: most requests never get here, and their futures need not keep room for a timer.
    let late = Box::pin(tokio::time::sleep_until(deadline));
    let done = async {
        let _ = rx.wait_for(|s| *s == State::Done).await;
    };
    tokio::select! {
        () = late => {}
        () = done => pending().await,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn watch_here() -> BodyWatch {
        BodyWatch::current().expect("inside under()")
    }

    #[tokio::test(start_paused = true)]
    async fn an_armed_request_whose_body_is_not_done_by_the_deadline_is_ended() {
        let deadline = Instant::now() + Duration::from_secs(5);
        let ended = under(deadline, async {
            watch_here().arm();
            pending::<()>().await
        })
        .await;
        assert!(ended.is_none());
        assert_eq!(Instant::now(), deadline);
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_never_armed_or_done_in_time_runs_past_the_deadline() {
        let deadline = Instant::now() + Duration::from_secs(5);
        let later = Duration::from_secs(60);
        let never_armed = under(deadline, async {
            tokio::time::sleep(later).await;
            1
        });
        assert_eq!(never_armed.await, Some(1));
        let deadline = Instant::now() + Duration::from_secs(5);
        let done_in_time = under(deadline, async {
            let w = watch_here();
            w.arm();
            tokio::time::sleep(Duration::from_secs(1)).await;
            w.done();
            // Arming again after the body is done does not restart the clock.
            w.arm();
            tokio::time::sleep(later).await;
            2
        });
        assert_eq!(done_in_time.await, Some(2));
        assert!(BodyWatch::current().is_none());
    }
}
