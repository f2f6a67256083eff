//! The shared journal on Redis Streams: any replica serves any run. Opt-in (`[journal] url`);
//! without it no Redis code runs. The in-process [`MemoryJournal`](crate::journal::memory::MemoryJournal)
//! stays the hot path everywhere:
//!
//! - the producing replica records into it as always and hands each batch, encoded, to the
//!   run's append lane ([`pipe::lane`]), never waiting for Redis; the replica's write pipeline
//!   ([`pipe`]) sends every lane's pending batches and every writer's other script calls as one
//!   round trip for all the calls pending at once. A writer task per run ([`writer`]) handles
//!   the rest: go-live, re-base, checkpoints, the end, lease ticks;
//! - a replica that serves a run it does not produce keeps a local mirror run fed by one
//!   follower task per run ([`follower`]); the observer code serves the mirror unchanged.
//!
//! Redis is one server or a Redis Cluster (`[journal] cluster`): [`conn`] hides which, and
//! [`bus`] carries doorbells and control messages (sharded pub/sub in a cluster).
//!
//! Keys (one hash tag `{c}` per chat, `c` = 16 hex digits of the chat scope's BLAKE3):
//! `tj:{c}:chat` (hash: `run`), `tj:{c}:r:<run>:m` (meta hash), `:s` (stream, entry
//! `<last>-0` per batch, `<head>-1` for the end), `:k` (checkpoint), doorbell channel `:n`.
//! Per replica: `tj:{rep:<id>}:alive` (its lease token, `PX lease`), `tj:{rep:<id>}:runs:<lease>`
//! (`<run>\n<scope>` of the live runs that life produces, listed in `tj:leases` as
//! `<id>\n<lease>` for the reaper) and control channel `tj:{rep:<id>}:ctl`. Run ids and
//! aliases: `tj:{i:<h>}:id` → `<scope>\n<run>`. For the admin API ([`index`]): every run in
//! `tj:runs`, and per owner (`<owner hash>`: the keyed hash, in hex) its runs and id keys in
//! `tj:{own:<owner hash>}:runs` and `:ids`; erasures are announced on `tj:{adm}:erase`
//! ([`erase`]). Per owner, with `[limits] max_active_runs_per_owner`:
//! `tj:{own:<owner hash>}:active` ([`active`]); with `max_runs_per_owner_per_minute`:
//! `tj:{own:<owner hash>}:bucket` ([`owner_bucket`]).

mod active;
mod bell;
mod bus;
pub mod codec;
mod conn;
mod erase;
mod follower;
mod index;
mod liveness;
mod marks;
mod owner_bucket;
mod pipe;
mod recorder;
pub mod scripts;
mod writer;

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use dashmap::DashMap;
use log::{info, warn};
use prometheus::{Histogram, IntGauge};
use redis::PushInfo;

use crate::config;
use crate::metrics::{label_enum, Counters, Metrics};
use crate::state::auth::{Auth, Owner};
use crate::state::registry::Registry;
use crate::state::run::Run;
use crate::vocab::{RunId, Scope};
pub use active::SharedPlace;
pub(crate) use bell::Bell;
pub use conn::pipeline_answers;
pub(crate) use conn::Conn;
pub use erase::JournalErased;
pub use index::{JournalRun, MAX_INDEXED};
use liveness::liveness;
pub(crate) use liveness::owner_alive;
pub use marks::{header_text, mirror_head};
pub use recorder::{Recorder, WriterInbox};
pub use writer::{spawn as spawn_writer, Meta};

/// How long one Redis call may take before it counts as failed (the journal degrades).
const CALL_TIMEOUT: Duration = Duration::from_secs(2);

/// Runs one Redis call under [`CALL_TIMEOUT`]; a call that takes longer fails as an I/O error.
async fn timed<T>(
    f: impl std::future::Future<Output = redis::RedisResult<T>>,
) -> redis::RedisResult<T> {
    tokio::time::timeout(CALL_TIMEOUT, f)
        .await
        .unwrap_or_else(|_| Err((redis::ErrorKind::Io, "timed out").into()))
}

/// The keys of one run.
#[derive(Debug, Clone)]
pub struct RunKeys {
    /// The chat's pointer hash.
    pub chat: String,
    /// The run's meta hash.
    pub m: String,
    /// The run's stream.
    pub s: String,
    /// The run's checkpoint.
    pub k: String,
    /// The run's doorbell channel.
    pub bell: String,
}

/// The hash tag of a chat scope (or an owner's id-index key).
fn tag(key: &str) -> String {
    blake3::hash(key.as_bytes()).to_hex()[..16].to_string()
}

impl RunKeys {
    /// The keys of run `run` of the chat at `scope`.
    pub fn new(scope: &Scope, run: &RunId) -> Self {
        let c = tag(scope);
        RunKeys {
            chat: format!("tj:{{{c}}}:chat"),
            m: format!("tj:{{{c}}}:r:{run}:m"),
            s: format!("tj:{{{c}}}:r:{run}:s"),
            k: format!("tj:{{{c}}}:r:{run}:k"),
            bell: format!("tj:{{{c}}}:r:{run}:n"),
        }
    }
}

/// The chat pointer key of a scope.
fn chat_key(scope: &Scope) -> String {
    format!("tj:{{{}}}:chat", tag(scope))
}

/// The id-index key of a run id or alias for `owner`.
fn id_key(owner: &Owner, id: &RunId) -> String {
    format!("tj:{{i:{}}}:id", tag(Auth::id_key(owner, id).as_str()))
}

label_enum! {
    /// `tether_journal_writes_total{result}`: how a shared-journal script call ended.
    pub enum WriteResult {
        /// Redis took it.
        Ok => "ok",
        /// Redis could not be reached (the journal degrades).
        Error => "error",
        /// Redis answered but refuses writes (`-OOM` at `maxmemory` under `noeviction`): the
        /// journal degrades as when Redis is down.
        Refused => "refused",
        /// A newer lease owns the run: this producer's writes are refused.
        Fenced => "fenced",
        /// The run had already ended in the journal (the first end wins).
        Ended => "ended",
    }
}

/// The shared journal's metric families.
#[derive(Clone)]
pub struct JournalMetrics {
    /// `tether_journal_writes_total{result}`: script calls by result.
    pub writes: Counters<WriteResult>,
    /// `tether_journal_write_seconds`.
    pub write_seconds: Histogram,
    /// `tether_journal_degraded`: 1 while Redis cannot be written.
    pub degraded: IntGauge,
    /// `tether_journal_followers`: follower tasks running here.
    pub followers: IntGauge,
    /// `tether_journal_pending_ends`: ended runs whose end waits for Redis to come back.
    pub pending_ends: IntGauge,
    /// `tether_journal_flush_calls`: script calls per pipelined round trip.
    pub flush_calls: Histogram,
}

impl JournalMetrics {
    /// Registers the families on `m` (done by [`Replica::start`]; public for the dashboard's
    /// coverage test).
    pub fn new(m: &Metrics) -> Self {
        JournalMetrics {
            writes: m.new_counters(
                "tether_journal_writes_total",
                "Shared-journal script calls by result",
                "result",
            ),
            write_seconds: m.new_histogram(
                "tether_journal_write_seconds",
                "Duration of shared-journal writes",
                prometheus::DEFAULT_BUCKETS.to_vec(),
            ),
            degraded: m.new_gauge(
                "tether_journal_degraded",
                "1 while the shared journal cannot be written",
            ),
            followers: m.new_gauge(
                "tether_journal_followers",
                "Runs of other replicas followed here",
            ),
            pending_ends: m.new_gauge(
                "tether_journal_pending_ends",
                "Ended runs whose end waits for the shared journal to come back",
            ),
            flush_calls: m.new_histogram(
                "tether_journal_flush_calls",
                "Script calls per pipelined shared-journal round trip",
                vec![1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0],
            ),
        }
    }
}

/// Whether Redis can be written: logged once when the journal degrades (saying whether Redis
/// cannot be reached or refuses writes, e.g. `-OOM` at `maxmemory` under `noeviction`: both are
/// a Redis that is down) and once when it recovers, and shown as `tether_journal_degraded`.
pub(crate) struct Health {
    /// 0: healthy, 1: Redis cannot be reached, 2: Redis refuses writes.
    degraded: AtomicU8,
    gauge: IntGauge,
}

/// Whether `e` is Redis refusing a write while it answers (`-OOM` at `maxmemory` under
/// `noeviction`, `-READONLY` from a replica), as opposed to a Redis that cannot be reached.
pub(crate) fn refuses_writes(e: &redis::RedisError) -> bool {
    matches!(e.code(), Some("OOM" | "READONLY"))
        || e.to_string().contains("OOM command not allowed")
}

impl Health {
    /// Records the outcome of a Redis call.
    pub(crate) fn record<T>(&self, r: &redis::RedisResult<T>) {
        let now = match r {
            Ok(_) => 0,
            Err(e) if refuses_writes(e) => 2,
            Err(_) => 1,
        };
        let was = self.degraded.swap(now, Ordering::Relaxed);
        if was == now {
            return;
        }
        match r {
            Err(e) if now == 2 => warn!(
                "shared journal degraded: Redis refuses writes: {e}; runs keep streaming locally"
            ),
            Err(e) => warn!(
                "shared journal degraded: Redis cannot be reached ({e}); runs keep streaming locally"
            ),
            Ok(_) => info!("shared journal recovered: live runs are re-based"),
        }
        self.gauge.set(i64::from(now != 0));
    }
}

/// One replica's connection to the shared journal.
pub struct Replica {
    /// Validated settings.
    pub cfg: config::JournalSettings,
    /// Replay window (events) of every run.
    pub window: usize,
    /// How long ended runs stay in Redis.
    pub retention: Duration,
    /// The raw record's cap, when runs keep one.
    pub raw_cap: Option<usize>,
    /// This process's lease token: fences every run it produces.
    pub lease: String,
    cmd: Conn,
    bus: Conn,
    pipe: pipe::Pipe,
    bells: DashMap<String, Arc<Bell>>,
    producers: DashMap<RunId, Weak<Run>>,
    /// Mirrors followed here, by their run's meta key (which names the chat too).
    mirrors: DashMap<String, Weak<Run>>,
    /// The owners' places under `max_active_runs_per_owner` held here: token → its set's key.
    places: DashMap<String, String>,
    creating: tokio::sync::Mutex<()>,
    health: Arc<Health>,
    /// When Redis last answered a write of this replica's liveness (see [`Replica::lapsed`]).
    alive_at: parking_lot::Mutex<Option<tokio::time::Instant>>,
    registry: Arc<Registry>,
    metrics: Metrics,
    /// The journal's own metric families.
    pub jm: JournalMetrics,
}

impl std::fmt::Debug for Replica {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Replica({})", self.cfg.replica_id)
    }
}

impl Replica {
    /// Connects lazily (start never waits for Redis) and starts the liveness and message tasks.
    pub fn start(
        cfg: config::JournalSettings,
        window: usize,
        retention: Duration,
        raw_cap: Option<usize>,
        registry: Arc<Registry>,
        metrics: Metrics,
    ) -> redis::RedisResult<Arc<Replica>> {
        let cmd = Conn::commands(&cfg)?;
        // The push connection routes doorbells and control messages to this cluster once it
        // exists (nothing is subscribed before).
        let routes: Arc<OnceLock<Weak<Replica>>> = Arc::new(OnceLock::new());
        let to = routes.clone();
        let push = move |p: PushInfo| -> Result<(), redis::aio::SendError> {
            if let Some(c) = to.get().and_then(Weak::upgrade) {
                bus::route(&c, p);
            }
            Ok(())
        };
        let bus = Conn::pushes(&cfg, push)?;
        let jm = JournalMetrics::new(&metrics);
        let health = Arc::new(Health {
            degraded: AtomicU8::new(0),
            gauge: jm.degraded.clone(),
        });
        let pipe = pipe::Pipe::start(cmd.clone(), cfg.flush_delay, jm.clone(), health.clone());
        let cluster = Arc::new(Replica {
            cfg,
            window,
            retention,
            raw_cap,
            lease: format!("{:016x}", rand::random::<u64>()),
            cmd,
            bus,
            pipe,
            bells: DashMap::new(),
            producers: DashMap::new(),
            mirrors: DashMap::new(),
            places: DashMap::new(),
            creating: tokio::sync::Mutex::new(()),
            health,
            alive_at: parking_lot::Mutex::new(None),
            registry,
            metrics,
            jm,
        });
        let _ = routes.set(Arc::downgrade(&cluster));
        tokio::spawn(liveness(Arc::downgrade(&cluster)));
        info!(
            "shared journal on {}{} as replica {:?}",
            if cluster.cfg.cluster {
                "the Redis Cluster "
            } else {
                ""
            },
            redact(&cluster.cfg.url),
            cluster.cfg.replica_id
        );
        Ok(cluster)
    }

    /// A command connection (multiplexed; never used for a blocking command).
    pub(crate) fn conn(&self) -> Conn {
        self.cmd.clone()
    }

    /// Whether writes to Redis are failing now.
    pub fn is_degraded(&self) -> bool {
        self.health.degraded.load(Ordering::Relaxed) != 0
    }

    /// Records the outcome of a Redis call: logs once when the journal degrades (or degrades
    /// for another cause) and once when it recovers.
    pub(crate) fn health<T>(&self, r: &redis::RedisResult<T>) {
        self.health.record(r);
    }

    /// Whether this replica's liveness has lapsed: Redis has not taken a write of it for a
    /// whole lease (it cannot be reached, or it refuses writes), so its key has expired and any
    /// replica's reaper may end this replica's live runs `owner_lost`. Measured from the
    /// answer, after Redis set the key's expiry: when this says lapsed, the key has expired.
    pub(crate) fn lapsed(&self) -> bool {
        self.alive_at
            .lock()
            .is_some_and(|t| t.elapsed() >= self.cfg.lease)
    }

    /// The key of this replica's liveness.
    fn alive_key(id: &str) -> String {
        format!("tj:{{rep:{id}}}:alive")
    }

    /// The set of the live runs a replica's life (`lease`) produces, for the reaper.
    fn runs_key(id: &str, lease: &str) -> String {
        format!("tj:{{rep:{id}}}:runs:{lease}")
    }

    /// Makes the registry show what the journal knows of the chat at `scope`: its current run,
    /// and run `run_id` when given (mirrors built as needed). Quiet when Redis is down.
    pub async fn sync_chat(self: &Arc<Self>, scope: &Scope, owner: Owner, run_id: Option<&RunId>) {
        follower::sync_chat(self, scope, owner, run_id).await
    }

    /// The run of the chat at `scope` the journal indexes under `name` for `owner` (an
    /// idempotency key's name), mirrored here; `None` when it names none of this chat's runs.
    pub async fn find_named(
        self: &Arc<Self>,
        scope: &Scope,
        owner: Owner,
        name: &RunId,
    ) -> Option<Arc<Run>> {
        follower::find_named(self, scope, owner, name).await
    }

    /// Like [`Self::sync_chat`] for a run named by tether's run id or an alias.
    pub async fn sync_id(self: &Arc<Self>, owner: Owner, id: &RunId) {
        follower::sync_id(self, owner, id).await
    }

    /// Registers a run produced here for control messages.
    pub(crate) fn producing(&self, run: &Arc<Run>) {
        self.producers.insert(run.id().clone(), Arc::downgrade(run));
    }

    /// Forgets a run produced here.
    pub(crate) fn produced(&self, run_id: &RunId) {
        self.producers.remove(run_id);
    }
}

/// The URL (or the comma-separated seed URLs) without passwords, for logs.
fn redact(urls: &str) -> String {
    let one = |url: &str| match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => format!("{}***{}", &url[..s + 3], &url[at..]),
        _ => url.to_string(),
    };
    urls.split(',').map(one).collect::<Vec<_>>().join(",")
}
