//! `[limits] max_active_runs_per_owner` across replicas: each owner's runs going, on every
//! replica, are members of one sorted set `tj:{own:<owner hash>}:active` (a random token per
//! admitted run, scored by when it lapses). [`scripts::ADMIT_ACTIVE`] checks and takes a place
//! in one step, so the count is exact under concurrency; the admitting replica refreshes its
//! places every quarter lease ([`Replica::refresh_places`]) and gives each back when its run
//! ends ([`SharedPlace`]), so a crashed replica's places lapse within [`PLACE_LEASES`] leases.

use std::collections::HashMap;
use std::sync::{Arc, Weak};

use super::index::owner_key;
use super::{scripts, timed, Replica};
use crate::state::auth::Owner;

/// Leases a place outlives its replica's last refresh.
pub const PLACE_LEASES: u32 = 3;

/// One run's place among its owner's runs going, in the shared journal; given back with
/// [`SharedPlace::release`].
#[derive(Debug)]
pub struct SharedPlace {
    replica: Weak<Replica>,
    key: String,
    token: String,
}

impl SharedPlace {
    /// Gives the place back (a place whose call fails lapses).
    pub async fn release(self) {
        let Some(c) = self.replica.upgrade() else {
            return;
        };
        c.places.remove(&self.token);
        let mut conn = c.conn();
        let r: redis::RedisResult<()> = timed(
            redis::cmd("ZREM")
                .arg(&self.key)
                .arg(&self.token)
                .query_async(&mut conn),
        )
        .await;
        if let Err(e) = r {
            log::debug!("an owner's place could not be given back ({e}); it lapses");
        }
    }
}

impl Replica {
    fn place_ttl_ms(&self) -> u64 {
        (self.cfg.lease * PLACE_LEASES).as_millis() as u64
    }

    /// Takes one of `owner`'s `max` places shared by every replica: the place, `None` when all
    /// are held, an error when Redis could not be asked (the caller counts here instead).
    pub async fn admit_active(
        self: &Arc<Self>,
        owner: &Owner,
        max: u32,
    ) -> redis::RedisResult<Option<SharedPlace>> {
        let Some(key) = owner_key(owner, "active") else {
            return Err((redis::ErrorKind::Client, "no owner to count for").into());
        };
        let token = format!("{:016x}", rand::random::<u64>());
        let mut conn = self.conn();
        let taken: i64 = timed(
            scripts::ADMIT_ACTIVE
                .key(&key)
                .arg(max)
                .arg(&token)
                .arg(self.place_ttl_ms())
                .invoke_async(&mut conn),
        )
        .await?;
        if taken == 0 {
            return Ok(None);
        }
        self.places.insert(token.clone(), key.clone());
        Ok(Some(SharedPlace {
            replica: Arc::downgrade(self),
            key,
            token,
        }))
    }

    /// Refreshes every place held here (the liveness task's call, every quarter lease).
    pub(super) async fn refresh_places(&self) {
        let mut by_key: HashMap<String, Vec<String>> = HashMap::new();
        for p in self.places.iter() {
            by_key
                .entry(p.value().clone())
                .or_default()
                .push(p.key().clone());
        }
        let mut conn = self.conn();
        for (key, tokens) in by_key {
            let r: redis::RedisResult<i64> = timed(
                scripts::REFRESH_ACTIVE
                    .key(&key)
                    .arg(self.place_ttl_ms())
                    .arg(tokens)
                    .invoke_async(&mut conn),
            )
            .await;
            if let Err(e) = r {
                log::debug!("an owner's places could not be refreshed ({e})");
                return;
            }
        }
    }
}
