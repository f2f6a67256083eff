//! The per-owner rate limit's bucket in the shared journal: one key per owner
//! (`tj:{own:<owner hash>}:bucket`, its own hash tag), taken from by every replica through
//! [`scripts::TAKE_RUN`], so `[limits] max_runs_per_owner_per_minute` holds across replicas.

use std::time::Duration;

use super::{scripts, timed, Replica};
use crate::state::auth::Owner;

impl Replica {
    /// The key of `owner`'s shared bucket (a per-owner limit needs a subject, so the owner has
    /// a hash; without one every caller would share the key `tj:{own:}:bucket`).
    fn bucket_key(owner: &Owner) -> String {
        format!("tj:{{own:{}}}:bucket", owner.hex().unwrap_or_default())
    }

    /// Takes one run from `owner`'s shared bucket of `per_minute` runs: `None` when taken, else
    /// how long until one is back. An error when Redis could not be asked (the caller counts on
    /// this replica instead).
    pub async fn take_run(
        &self,
        owner: &Owner,
        per_minute: u32,
    ) -> redis::RedisResult<Option<Duration>> {
        let mut conn = self.conn();
        let wait_ms: u64 = timed(
            scripts::TAKE_RUN
                .key(Self::bucket_key(owner))
                .arg(per_minute)
                .invoke_async(&mut conn),
        )
        .await?;
        Ok((wait_ms > 0).then(|| Duration::from_millis(wait_ms)))
    }
}
