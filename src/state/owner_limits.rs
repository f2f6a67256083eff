//! Per-owner limits (`[limits] max_active_runs_per_owner`, `max_runs_per_owner_per_minute`): how
//! many runs one owner may have going at once, and a token bucket of the runs it may start per
//! minute. A record request is admitted here before anything is forwarded; an admitted run holds
//! an [`ActiveRun`] until it ends.
//!
//! The table is bounded: an owner has an entry only while it has a run going or a bucket not yet
//! full again; entries that are neither are dropped when a run ends and by a sweep as the table
//! grows, and past [`MAX_OWNERS`] the idle owners' partly spent buckets are forgotten (in their
//! favour). This is one replica's count; with a shared journal the rate's bucket and the count of
//! runs going are the journal's too (the chats room asks it; a run going is then counted here
//! and there, and its place here carries the release of its place there).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use parking_lot::Mutex;
use tokio::time::Instant;

use crate::metrics::{label_enum, Counters, Metrics};
use crate::state::auth::Owner;

/// Owners tracked at most; past it, owners with no run going are forgotten.
pub const MAX_OWNERS: usize = 100_000;

/// The table is swept of idle entries once it holds this many (then twice what the last sweep
/// left).
const FIRST_SWEEP: usize = 1024;

/// The `Retry-After` of `429 too_many_runs`: when one of the owner's runs ends is not known.
pub const ACTIVE_RETRY_AFTER: Duration = Duration::from_secs(5);

label_enum! {
    /// `tether_owner_limited_total{limit}`: which per-owner limit refused a record request.
    pub enum OwnerLimit {
        /// `max_active_runs_per_owner`: `429 too_many_runs`.
        ActiveRuns => "active_runs",
        /// `max_runs_per_owner_per_minute`: `429 rate_limited`.
        Rate => "rate",
    }
}

/// The per-owner limits' settings; `0` turns a limit off.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OwnerLimitSettings {
    /// Runs one owner may have going at once.
    pub max_active: u32,
    /// Runs one owner may start per minute (the bucket's size; it refills evenly over a minute).
    pub per_minute: u32,
}

/// A refused record request: the limit, and how long the client should wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limited {
    /// The limit that refused it.
    pub limit: OwnerLimit,
    /// Until a retry may be admitted (the rate limit), or a guess (the active limit).
    pub retry_after: Duration,
}

impl Limited {
    /// `retry_after` in whole seconds, at least one (a `Retry-After` value).
    pub fn retry_after_secs(&self) -> u64 {
        let secs = self.retry_after.as_secs();
        match self.retry_after.subsec_nanos() {
            0 => secs.max(1),
            _ => secs + 1,
        }
    }
}

/// One owner's entry: its runs going and its bucket.
#[derive(Debug, Clone, Copy)]
struct Entry {
    active: u32,
    tokens: f64,
    at: Instant,
}

/// The per-owner limits of one replica, with the metric of refusals.
#[derive(Debug)]
pub struct OwnerLimits {
    settings: OwnerLimitSettings,
    table: Mutex<Table>,
    limited: Counters<OwnerLimit>,
}

/// Which limits one admission checks here.
#[derive(Debug, Clone, Copy)]
struct Checks {
    active: bool,
    rate: bool,
}

impl Checks {
    const BOTH: Checks = Checks {
        active: true,
        rate: true,
    };
    const ACTIVE: Checks = Checks {
        active: true,
        rate: false,
    };
    const RATE: Checks = Checks {
        active: false,
        rate: true,
    };
}

#[derive(Debug, Default)]
struct Table {
    owners: HashMap<Owner, Entry>,
    next_sweep: usize,
}

/// An admitted run's place under `max_active_runs_per_owner`, given back when dropped (when
/// the run ends, or the request is answered without one).
#[derive(Debug)]
pub struct ActiveRun {
    limits: Arc<OwnerLimits>,
    owner: Owner,
    also: Option<AlsoRelease>,
}

/// What else gives an [`ActiveRun`]'s place back: its place in a count shared by the
/// replicas (the shared journal's), a call to make.
pub struct AlsoRelease(Box<dyn FnOnce() -> BoxFuture<'static, ()> + Send + Sync>);

impl std::fmt::Debug for AlsoRelease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AlsoRelease")
    }
}

impl ActiveRun {
    /// Makes `release` too when the place is given back.
    pub fn also_release(
        &mut self,
        release: impl FnOnce() -> BoxFuture<'static, ()> + Send + Sync + 'static,
    ) {
        self.also = Some(AlsoRelease(Box::new(release)));
    }

    /// Gives the place back, waiting up to `wait` for the shared count to have it back (the
    /// call goes on past that), so whoever sees the run end may start another at once.
    pub async fn give_back(mut self, wait: Duration) {
        if let Some(AlsoRelease(release)) = self.also.take() {
            let call = tokio::spawn(release());
            let _ = tokio::time::timeout(wait, call).await;
        }
    }
}

impl Drop for ActiveRun {
    fn drop(&mut self) {
        self.limits.release(self.owner, Instant::now());
        if let Some(AlsoRelease(release)) = self.also.take() {
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                rt.spawn(release());
            }
        }
    }
}

impl OwnerLimits {
    /// The limits `settings`, counting refusals in `tether_owner_limited_total` on `m` (the
    /// family is registered here, whether the limits are on or not).
    pub fn new(settings: OwnerLimitSettings, m: &Metrics) -> Arc<Self> {
        Arc::new(OwnerLimits {
            settings,
            table: Mutex::new(Table {
                owners: HashMap::new(),
                next_sweep: FIRST_SWEEP,
            }),
            limited: Self::metric(m),
        })
    }

    /// Registers `tether_owner_limited_total` on `m` (public for the dashboard's coverage test).
    pub fn metric(m: &Metrics) -> Counters<OwnerLimit> {
        m.new_counters(
            "tether_owner_limited_total",
            "Record requests refused by a per-owner limit, by limit",
            "limit",
        )
    }

    /// Whether either limit is on.
    pub fn is_on(&self) -> bool {
        self.settings.max_active > 0 || self.settings.per_minute > 0
    }

    /// Runs one owner may have going at once (`0`: off).
    pub fn max_active(&self) -> u32 {
        self.settings.max_active
    }

    /// Runs one owner may start per minute (`0`: off).
    pub fn per_minute(&self) -> u32 {
        self.settings.per_minute
    }

    /// Admits one more run of `owner` now under both limits, on this replica's count, or says
    /// which limit refuses it (counted). The [`ActiveRun`] is there when
    /// `max_active_runs_per_owner` is on; hold it until the run ends.
    pub fn admit(self: &Arc<Self>, owner: Owner) -> Result<Option<ActiveRun>, Limited> {
        self.admit_checking(owner, Checks::BOTH)
    }

    /// [`Self::admit`] under `max_active_runs_per_owner` only (the rate is counted elsewhere:
    /// the shared journal's bucket).
    pub fn admit_active(self: &Arc<Self>, owner: Owner) -> Result<Option<ActiveRun>, Limited> {
        self.admit_checking(owner, Checks::ACTIVE)
    }

    /// Takes one run from `owner`'s bucket on this replica (when the shared journal's could not
    /// be asked), or the refusal (counted).
    pub fn admit_rate(&self, owner: Owner) -> Result<(), Limited> {
        self.admit_at(owner, Instant::now(), Checks::RATE)
            .map(|_| ())
            .map_err(|l| self.refused(l))
    }

    /// Counts refusal `l` (made here or by the shared journal's bucket) and returns it.
    pub fn refused(&self, l: Limited) -> Limited {
        self.limited.inc(l.limit);
        l
    }

    fn admit_checking(
        self: &Arc<Self>,
        owner: Owner,
        checks: Checks,
    ) -> Result<Option<ActiveRun>, Limited> {
        if !self.is_on() {
            return Ok(None);
        }
        let counted = self
            .admit_at(owner, Instant::now(), checks)
            .map_err(|l| self.refused(l))?;
        Ok(counted.then(|| ActiveRun {
            limits: self.clone(),
            owner,
            also: None,
        }))
    }

    /// Admits a run of `owner` at `now` under the limits `checks` names, without the metric:
    /// `Ok(true)` when the run was counted as active (its [`ActiveRun`] must give it back).
    fn admit_at(&self, owner: Owner, now: Instant, checks: Checks) -> Result<bool, Limited> {
        let max_active = if checks.active {
            self.settings.max_active
        } else {
            0
        };
        // The bucket's size: what a full bucket holds, whether the rate is checked here or not.
        let per_minute = self.settings.per_minute;
        let mut table = self.table.lock();
        table.make_room(now, per_minute);
        let full = f64::from(per_minute);
        let entry = table.owners.entry(owner).or_insert(Entry {
            active: 0,
            tokens: full,
            at: now,
        });
        if max_active > 0 && entry.active >= max_active {
            return Err(Limited {
                limit: OwnerLimit::ActiveRuns,
                retry_after: ACTIVE_RETRY_AFTER,
            });
        }
        if checks.rate && per_minute > 0 {
            refill(entry, now, per_minute);
            if entry.tokens < 1.0 {
                // The time the bucket takes to refill the rest of one token.
                let missing = 1.0 - entry.tokens;
                return Err(Limited {
                    limit: OwnerLimit::Rate,
                    retry_after: Duration::from_secs_f64(missing * 60.0 / full),
                });
            }
            entry.tokens -= 1.0;
        }
        let counted = max_active > 0;
        if counted {
            entry.active += 1;
        }
        if is_idle(entry, now, per_minute) {
            table.owners.remove(&owner);
        }
        Ok(counted)
    }

    /// Gives back one of `owner`'s active runs at `now`, dropping its entry when it is idle.
    fn release(&self, owner: Owner, now: Instant) {
        let per_minute = self.settings.per_minute;
        let mut table = self.table.lock();
        let Some(entry) = table.owners.get_mut(&owner) else {
            return;
        };
        entry.active = entry.active.saturating_sub(1);
        if is_idle(entry, now, per_minute) {
            table.owners.remove(&owner);
        }
    }

    /// Owners with an entry now (for the tests of the table's bound).
    pub fn tracked(&self) -> usize {
        self.table.lock().owners.len()
    }
}

impl Table {
    /// Sweeps idle entries once the table has grown to the next sweep's size, and past
    /// [`MAX_OWNERS`] forgets every owner with no run going.
    fn make_room(&mut self, now: Instant, per_minute: u32) {
        if self.owners.len() < self.next_sweep {
            return;
        }
        self.owners.retain(|_, e| !is_idle(e, now, per_minute));
        if self.owners.len() >= MAX_OWNERS {
            self.owners.retain(|_, e| e.active > 0);
        }
        self.next_sweep = (self.owners.len() * 2).clamp(FIRST_SWEEP, MAX_OWNERS);
    }
}

/// Refills `e`'s bucket for the time since it was last touched, up to `per_minute`.
fn refill(e: &mut Entry, now: Instant, per_minute: u32) {
    let full = f64::from(per_minute);
    let elapsed = now.saturating_duration_since(e.at).as_secs_f64();
    e.tokens = (e.tokens + elapsed * full / 60.0).min(full);
    e.at = now;
}

/// An entry that says nothing a fresh one would not: no run going and a full bucket (refilled
/// to `now`).
fn is_idle(e: &mut Entry, now: Instant, per_minute: u32) -> bool {
    if e.active > 0 {
        return false;
    }
    refill(e, now, per_minute);
    e.tokens >= f64::from(per_minute)
}

#[cfg(test)]
mod tests;
