//! The state every request of one sidecar shares: configuration, chats (callers, runs and the
//! shared journal, [`crate::chats`]), backend client, metrics, and the drain's trackers.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::cors::Cors;
use crate::accounting::Ledger;
use crate::backend::Upstream;
use crate::budget::Budget;
use crate::chats::Chats;
use crate::config::Config;
use crate::metrics::downstream::DownstreamMetrics;
use crate::metrics::Metrics;

/// State shared by every request of one sidecar.
pub struct Shared {
    /// The validated configuration.
    pub cfg: Config,
    /// CORS headers on tether's own answers, and its preflights.
    pub cors: Cors,
    /// Callers, chats and runs: every lookup and registration, with the shared journal when
    /// one is configured.
    pub chats: Chats,
    /// The backend client.
    pub upstream: Arc<Upstream>,
    /// Metric families.
    pub metrics: Metrics,
    /// Where each ended run's record goes (log, counters, webhook) and the runs' tracer.
    pub ledger: Arc<Ledger>,
    /// The proxy listener's families (client connections, their limits, backend requests).
    pub downstream: DownstreamMetrics,
    /// Bytes buffered for clients and backends (`[limits] max_buffered_bytes`).
    pub budget: Budget,
    /// Set on SIGTERM: new record requests are refused with 503.
    pub draining: AtomicBool,
    /// Producer tasks: the drain waits for them.
    pub producers: TaskTracker,
    /// Observers writing to a client: the drain lets them finish their end.
    pub observers: TaskTracker,
    /// Cancelled when the drain ends: live observer streams stop.
    pub stop: CancellationToken,
}
