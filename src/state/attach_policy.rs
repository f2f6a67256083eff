//! The attach policy: what an attach request gets (the attach table), and waiting for a run
//! when the chat has none yet. The edge (`proxy/attach.rs`) serves the decision.

use std::sync::Arc;
use std::time::Duration;

use crate::journal::CursorMiss;
use crate::metrics::ResetReason;
use crate::state::auth::Owner;
use crate::state::registry::Registry;
use crate::state::run::Run;
use crate::vocab::{RunId, Scope};

/// How an observer starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// With a snapshot of the run as it is now.
    Snapshot,
    /// With an empty snapshot at seq 0 (the original requester of a new run).
    Fresh,
    /// With the events after this cursor, from the window.
    After(u64),
}

/// What an attach request gets.
#[derive(Debug, Clone)]
pub enum Decision {
    /// 204: nothing to show.
    NoContent,
    /// The chat has no run yet: wait for one (up to `wait_ms`), or record one (`on_miss`).
    Missing,
    /// Serve `run` from `start`; `reset` names why a replacement snapshot was sent.
    Serve {
        /// The run to serve.
        run: Arc<Run>,
        /// Where to start.
        start: Start,
        /// The `tether_snapshot_resets_total` reason, when the cursor could not be honoured.
        reset: Option<ResetReason>,
    },
}

/// Decides an attach (the attach table of docs/protocol.md) for the chat at `scope` as seen by `owner`. A
/// `run_id` without `after_seq` counts as cursor 0.
pub fn decide(
    registry: &Registry,
    scope: &Scope,
    owner: &Owner,
    run_id: Option<&RunId>,
    after: Option<u64>,
) -> Decision {
    let current = registry.current(scope, owner);
    let replacement = |reason| match &current {
        Some(c) => Decision::Serve {
            run: c.clone(),
            start: Start::Snapshot,
            reset: Some(reason),
        },
        None => Decision::NoContent,
    };
    if let Some(run_id) = run_id {
        let after = after.unwrap_or(0);
        return match registry.find(scope, owner, run_id) {
            None => replacement(ResetReason::UnknownRun),
            Some(r) => match r.read_after(after, 0) {
                Ok(_) => Decision::Serve {
                    run: r,
                    start: Start::After(after),
                    reset: None,
                },
                Err(CursorMiss::Ahead) => replacement(ResetReason::FutureCursor),
                Err(CursorMiss::Expired) => replacement(ResetReason::ExpiredCursor),
            },
        };
    }
    match current {
        None => Decision::Missing,
        Some(c) => match c.end() {
            Some(end) if end.persisted => Decision::NoContent,
            _ => Decision::Serve {
                run: c,
                start: Start::Snapshot,
                reset: None,
            },
        },
    }
}

/// Waits up to `wait` for the chat to get a run. The run that appears is served from a snapshot
/// even if it completed before this waiter got to it: the client asked for that turn.
pub async fn wait_for_run(
    registry: &Registry,
    scope: &Scope,
    owner: &Owner,
    wait: Duration,
) -> Decision {
    let deadline = tokio::time::Instant::now() + wait;
    let mut rx = registry.subscribe();
    loop {
        rx.borrow_and_update();
        if let Some(run) = registry.current(scope, owner) {
            return Decision::Serve {
                run,
                start: Start::Snapshot,
                reset: None,
            };
        }
        if tokio::time::timeout_at(deadline, rx.changed())
            .await
            .is_err()
        {
            return Decision::NoContent;
        }
    }
}

#[cfg(test)]
mod tests;
