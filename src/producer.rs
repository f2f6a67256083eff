//! The producer: the task that sends a recorded request upstream and reads the answer to its
//! end, whatever the observers do. A protocol-1 requester's task runs it ([`start`], `inline`)
//! and is handed the frames of each append while it waits (`handoff`); what remains when that
//! requester is done runs as a task of its own. Other requesters get it detached ([`spawn`]).
//!
//! The task owns its upstream exchange (see [`crate::backend::exchange`]), so a client leaving
//! never reaches the backend by itself. It reports the upstream's answer once as a [`Head`]: a
//! live run, a response to relay unchanged (non-2xx or not SSE: nothing is recorded), or a
//! failure to reach the backend. Only an explicit stop, the maximum run duration, an upstream
//! error or timeout, or the route's disconnect policy (`on_disconnect = "cancel"`, once the
//! last client has left) ends a live run early. What the bytes mean (events, the verdict, the
//! provider's usage) is [`Ingest`]'s; this file does I/O and metrics. The run goes live through
//! [`crate::chats`] (which chooses the in-memory or the shared journal); `aliases` says where
//! its names come from, `read` is the read loop, `tee` the legacy requester's copy, and
//! `account` the run's record, written once at its end.

mod account;
mod aliases;
mod handoff;
mod inline;
mod read;
mod tee;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use log::{info, warn};
use pingora_http::{RequestHeader, ResponseHeader};
use tokio::sync::oneshot;
use tokio_util::task::TaskTracker;

use crate::backend::slots::Slot;
use crate::backend::{is_recordable, Exchange, Upstream};
use crate::budget::Budget;
use crate::chats::{Chats, Live, Recording};
use crate::config::{Alias, Commit, OnDisconnect, RawRecord, Tokens};
use crate::error::{UpstreamError, UpstreamErrorKind};
use crate::ingest::{outcome, Ending, Ingest};
use crate::metrics::Metrics;
use crate::record::format::{detect_from_headers, FormatChoice, FormatKind};
use crate::state::owner_limits::ActiveRun;
use crate::state::registry::Pending;
use crate::state::run::{ObserverGuard, Run};
use crate::vocab::end::EndReason;
use crate::vocab::usage::UsagePointers;
use crate::vocab::RunId;
use account::Ended;
pub use account::RunAccount;
pub use handoff::{Handed, Handoff};
pub use inline::Producing;

/// How long a run's end waits for its owner's place in the shared count to be given back.
const GIVE_BACK_WAIT: Duration = Duration::from_secs(1);
use read::{read, ReadEnd, ReadLimits, Started};
use tee::tee;
pub use tee::{StreamCut, TeeReader};

/// The upstream's answer, reported once by the producer.
pub enum Head {
    /// The run is live and recording.
    Live {
        /// The run.
        run: Arc<Run>,
        /// The upstream response header.
        header: ResponseHeader,
        /// The upstream bytes, unchanged, when a legacy tee was asked for.
        legacy: Option<TeeReader>,
        /// Counts the requester as attached from the first event on.
        guard: ObserverGuard,
    },
    /// Not recorded (non-2xx or not SSE): the requester relays this answer unchanged and
    /// returns the connection to the pool once it is read to its end.
    Relay {
        /// The upstream response header.
        header: ResponseHeader,
        /// The upstream exchange, its body still unread.
        upstream: Box<Exchange>,
    },
    /// The backend could not be reached or answered garbage.
    Failed(UpstreamError),
}

/// Everything a producer needs.
pub struct Job {
    /// The backend client.
    pub upstream: Arc<Upstream>,
    /// Where the run goes live (in memory, or also in the shared journal when one is set).
    pub chats: Chats,
    /// Metric families.
    pub metrics: Metrics,
    /// The chat's pending registration, released once the upstream answered.
    pub pending: Pending,
    /// The run's place among its owner's active runs (`max_active_runs_per_owner`), given back
    /// when the run ends (or at once when nothing is recorded).
    pub active: Option<ActiveRun>,
    /// The transport run id, minted before forwarding.
    pub run_id: RunId,
    /// Route label for metrics.
    pub route: String,
    /// The client's request header.
    pub request: RequestHeader,
    /// The client's request body.
    pub body: Bytes,
    /// The request's hold on a backend connection (`[upstream] max_requests`), kept until
    /// the run's exchange with the backend ends.
    pub slot: Slot,
    /// How the route records the run.
    pub rules: Rules,
    /// The sidecar-wide budget of bytes buffered for clients and backends (unfinished events,
    /// the legacy queue).
    pub budget: Budget,
    /// Stop the run after this long, if set.
    pub max_duration: Option<Duration>,
    /// Tee the raw upstream bytes for a legacy requester, whose queue may hold this many bytes.
    pub legacy: Option<usize>,
    /// The run's accounting: its span, and where its record goes at its end.
    pub account: RunAccount,
    /// Where the producer hands its requester the frames of each append, when the requester's
    /// task runs it ([`start`]).
    pub handoff: Option<Arc<Handoff>>,
}

/// How a route records its runs: format, commit rule, window, event cap, raw record, aliases
/// and resume tokens.
#[derive(Debug, Clone)]
pub struct Rules {
    /// The format the run's events are classified by, or `auto`.
    pub format: FormatChoice,
    /// When the run counts as persisted.
    pub commit: Commit,
    /// Replay window size.
    pub window: usize,
    /// Largest event recorded.
    pub max_event: usize,
    /// Keep the raw record, with these settings.
    pub raw: Option<RawRecord>,
    /// Make the raw frames' ids unique in the run (`ids = "unique"`).
    pub unique_ids: bool,
    /// The record route's aliases.
    pub aliases: Vec<Alias>,
    /// Values of the route's `request:` aliases, read from the request.
    pub request_aliases: Vec<String>,
    /// Names the run is indexed by for its owner, here and in the shared journal, but never
    /// shown as its alias: the request's idempotency key's
    /// ([`IdempotencyKey::names`](crate::chats::IdempotencyKey::names)).
    pub keys: Vec<String>,
    /// The resume-token headers of the run's responses.
    pub tokens: Tokens,
    /// Where an AG-UI or AI SDK stream reports its token usage (the route's `usage`).
    pub usage: Option<Arc<UsagePointers>>,
    /// What happens to the run once its last client has left.
    pub on_disconnect: OnDisconnect,
}

/// Starts the producer as its own task, detached from the requester: whatever the requester
/// does, the producer reads the upstream to its end. The receiver gets the upstream's answer.
/// `tracker` counts the task until it ends (the drain waits on it).
pub fn spawn(tracker: &TaskTracker, job: Job) -> oneshot::Receiver<Head> {
    let (tx, rx) = oneshot::channel();
    // The job is boxed and the connect future below too: a task's future keeps room for its
    // arguments and for its largest await for the whole run (5,184 bytes unboxed, 2,880 boxed).
    tracker.spawn(produce(Box::new(job), tx));
    rx
}

/// Starts the producer inside the calling task, its requester's: the returned [`Producing`]
/// must be polled by that task (beside its reader), and spawns what remains as a task of its own
/// when dropped, so the producer still reads the upstream to its end whatever the requester
/// does. `tracker` counts it until it ends, wherever it runs (the drain waits on it).
pub fn start(
    tracker: &TaskTracker,
    job: Job,
) -> (
    Producing<impl Future<Output = ()> + Send + 'static>,
    oneshot::Receiver<Head>,
) {
    let (tx, rx) = oneshot::channel();
    let handoff = Handoff::new();
    let job = Box::new(Job {
        handoff: Some(handoff.clone()),
        ..job
    });
    let fut = tracker.track_future(produce(job, tx));
    (Producing::with_handoff(fut, handoff), rx)
}

fn failed(m: &Metrics, run_id: &RunId, e: UpstreamError) -> Head {
    warn!("upstream failed for run {run_id}: {e}");
    m.upstream_errors.inc(e.kind);
    Head::Failed(e)
}

async fn produce(job: Box<Job>, head: oneshot::Sender<Head>) {
    let Job {
        upstream,
        chats,
        metrics: m,
        pending,
        active,
        run_id,
        route,
        request,
        body,
        slot,
        rules,
        budget,
        max_duration,
        legacy,
        account,
        handoff,
    } = *job;
    let mut s = match Box::pin(upstream.open(&request, &body, Some(&run_id), slot)).await {
        Ok(s) => s,
        Err(e) => {
            // Given back before the answer: the requester may start another at once.
            drop(active);
            let _ = head.send(failed(&m, &run_id, e));
            return;
        }
    };
    let header = s.header().clone();
    if !is_recordable(&header) {
        if !header.status.is_success() {
            m.upstream_errors.inc(UpstreamErrorKind::Status);
        }
        drop(active);
        let _ = head.send(Head::Relay {
            header,
            upstream: Box::new(s),
        });
        return;
    }
    let recording = Recording {
        route: &route,
        window: rules.window,
        raw_cap: rules.raw.as_ref().map(|r| r.cap),
        tokens: &rules.tokens,
    };
    let Live { run, guard, naming } = chats.go_live(pending, run_id, &recording, &header);
    let scope = naming.scope().clone();
    let Rules {
        format,
        commit,
        max_event,
        raw,
        unique_ids,
        aliases,
        request_aliases,
        keys,
        usage,
        on_disconnect,
        ..
    } = rules;
    for alias in aliases::known_aliases(&aliases, request_aliases, &header) {
        naming.name(&run, &alias);
    }
    // The name with the body first: the journal writes a run's names in order, so a replica
    // that finds the key's own name finds this one too (else a retry of the same body there
    // would be refused as another body's until the second write landed).
    for key in keys.iter().rev() {
        naming.index_only(&run, key);
    }
    m.runs_active.inc();
    let (tee, legacy) = match legacy {
        Some(queue) => {
            let (t, r) = tee(queue, &budget);
            (Some(t), Some(r))
        }
        None => (None, None),
    };
    let known = match format {
        FormatChoice::Fixed(kind) => Some(kind),
        FormatChoice::Auto => detect_from_headers(|name| {
            header
                .headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        }),
    };
    let mut started = Started {
        metrics: &m,
        route: &route,
        scope: &scope,
        run_id: run.id(),
        labels: run.labels(),
        counted: false,
    };
    if let Some(kind) = known {
        started.count(kind);
    }
    let _ = head.send(Head::Live {
        run: run.clone(),
        header,
        legacy,
        guard,
    });
    let mut ingest = Ingest::new(known.map(FormatKind::format), commit, max_event)
        .find_aliases(aliases::event_aliases(&aliases))
        .with_budget(&budget)
        .meter_usage(usage);
    if let Some(r) = &raw {
        ingest = ingest.keep_raw(r.cursor_field.clone());
        if unique_ids {
            ingest = ingest.unique_ids();
        }
    }
    // The idle limit is a per-stream tokio timer (see `stall`).
    let limits = ReadLimits {
        deadline: max_duration.map(|d| tokio::time::Instant::now() + d),
        idle: upstream.idle_timeout(),
        on_disconnect,
        handoff,
    };
    let end = read(
        &mut s,
        &run,
        limits,
        &mut ingest,
        tee,
        &mut started,
        &naming,
    )
    .await;
    // The upstream is read to its end: the owner's place is given back before the run's end is
    // recorded, so whoever sees the end may start another run (on any replica: the shared
    // count's call is waited for, up to a second).
    if let Some(a) = active {
        a.give_back(GIVE_BACK_WAIT).await;
    }
    let ending = end_run(&run, &ingest, end, &mut started, account, &chats);
    if ending == Ending::Clean {
        upstream.release(s);
    }
}

/// A run's end once its upstream read ended: the verdict settled and counted, the provider's
/// final usage published, the end published, the run's record written (once, here, by the
/// replica that produced it), the legacy copy ended cleanly or cut, the end logged. Returns how
/// the read ended.
fn end_run(
    run: &Run,
    ingest: &Ingest,
    read: ReadEnd,
    started: &mut Started<'_>,
    account: RunAccount,
    chats: &Chats,
) -> Ending {
    let ReadEnd {
        ending,
        tee,
        clean,
        first_byte,
    } = read;
    let m = started.metrics;
    // A run that ended before its first event never showed its format: AG-UI, the fallback.
    started.count(ingest.format().unwrap_or(FormatKind::Agui));
    let verdict = ingest.verdict(ending);
    let end = run.settle(verdict.persisted, verdict.reason);
    let outcome = outcome(&end, ending);
    m.runs_finished.inc(outcome);
    m.runs_active.dec();
    // The provider's final numbers (or those that were final when the run was cut).
    run.set_usage(ingest.usage().and_then(|u| u.finish().usage));
    let ended = Ended {
        route: started.route,
        format: ingest.format(),
        outcome,
        end: &end,
        first_byte,
    };
    account.close(run, ingest, ended);
    // Only now publish the end: whoever sees it also sees it counted and its record written.
    run.done();
    chats.registry().ended();
    // Any other end drops the tee: the requester's stream is cut.
    if let (true, Some(tee)) = (clean, tee) {
        tee.end_clean();
    }
    info!(
        "run {} ended: chat {:?} outcome {} reason {} duration {:.3}s events {} bytes {} peak_observers {}",
        run.id(),
        started.scope,
        outcome.as_str(),
        end.reason.map_or("-", EndReason::as_str),
        run.started().elapsed().as_secs_f64(),
        ingest.events(),
        ingest.bytes(),
        run.peak_observers(),
    );
    ending
}
