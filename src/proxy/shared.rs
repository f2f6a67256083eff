//! The state every request of one sidecar shares: configuration, registry, backend client,
//! metrics, callers' identities, and the drain's trackers.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::cors::Cors;
use crate::backend::Upstream;
use crate::budget::Budget;
use crate::config::Config;
use crate::metrics::downstream::DownstreamMetrics;
use crate::metrics::Metrics;
use crate::state::auth::Auth;
use crate::state::registry::Registry;

/// State shared by every request of one sidecar.
pub struct Shared {
    /// The validated configuration.
    pub cfg: Config,
    /// CORS headers on tether's own answers, and its preflights.
    pub cors: Cors,
    /// Chats and runs.
    pub registry: Arc<Registry>,
    /// The backend client.
    pub upstream: Arc<Upstream>,
    /// Metric families.
    pub metrics: Metrics,
    /// The proxy listener's families (client connections, their limits, backend requests).
    pub downstream: DownstreamMetrics,
    /// Bytes buffered for clients and backends (`[limits] max_buffered_bytes`).
    pub budget: Budget,
    /// Caller identities.
    pub auth: Auth,
    /// Set on SIGTERM: new record requests are refused with 503.
    pub draining: AtomicBool,
    /// Producer tasks: the drain waits for them.
    pub producers: TaskTracker,
    /// Observers writing to a client: the drain lets them finish their end.
    pub observers: TaskTracker,
    /// Cancelled when the drain ends: live observer streams stop.
    pub stop: CancellationToken,
    /// The shared journal, when one is configured.
    pub journal: Option<Arc<crate::replica::Replica>>,
}
