//! Tests of the per-owner limits on a clock of the tests' own: the active count and its release,
//! the token bucket's refusals, `Retry-After` and refill, owners apart, and the table's bound.

use super::*;

fn limits(max_active: u32, per_minute: u32) -> (Arc<OwnerLimits>, Metrics) {
    let m = Metrics::new();
    let settings = OwnerLimitSettings {
        max_active,
        per_minute,
    };
    (OwnerLimits::new(settings, &m), m)
}

fn owner(n: u32) -> Owner {
    Owner::of(&n.to_le_bytes())
}

#[test]
fn off_admits_everything_and_tracks_nobody() {
    let (l, _) = limits(0, 0);
    for _ in 0..100 {
        assert!(l.admit(owner(1)).unwrap().is_none());
    }
    assert_eq!(l.tracked(), 0);
}

#[test]
fn the_active_limit_refuses_the_next_run_until_one_ends_and_counts() {
    let (l, m) = limits(2, 0);
    let a = l.admit(owner(1)).unwrap();
    let b = l.admit(owner(1)).unwrap();
    assert!(a.is_some() && b.is_some());
    let refused = l.admit(owner(1)).unwrap_err();
    assert_eq!(refused.limit, OwnerLimit::ActiveRuns);
    assert_eq!(refused.retry_after_secs(), ACTIVE_RETRY_AFTER.as_secs());
    // Another owner is not affected.
    let other = l.admit(owner(2)).unwrap();
    assert!(other.is_some());
    drop(a);
    let c = l.admit(owner(1)).unwrap();
    assert!(c.is_some());
    assert_eq!(l.admit(owner(1)).unwrap_err().limit, OwnerLimit::ActiveRuns);
    assert!(m
        .render()
        .contains("tether_owner_limited_total{limit=\"active_runs\"} 2"));
    assert!(m
        .render()
        .contains("tether_owner_limited_total{limit=\"rate\"} 0"));
    drop((b, c, other));
    assert_eq!(l.tracked(), 0, "owners with no run going need no entry");
}

#[test]
fn the_bucket_refuses_the_next_run_within_a_minute_and_refills() {
    let (l, _) = limits(0, 3);
    let t0 = Instant::now();
    for _ in 0..3 {
        assert_eq!(l.admit_at(owner(1), t0, Checks::BOTH), Ok(false));
    }
    let refused = l.admit_at(owner(1), t0, Checks::BOTH).unwrap_err();
    assert_eq!(refused.limit, OwnerLimit::Rate);
    // One token of three a minute: 20 s.
    assert_eq!(refused.retry_after, Duration::from_secs(20));
    assert_eq!(refused.retry_after_secs(), 20);
    // Another owner has a bucket of its own.
    assert_eq!(l.admit_at(owner(2), t0, Checks::BOTH), Ok(false));
    // 15 s later a quarter of a token is still missing: 5 s.
    let t15 = t0 + Duration::from_secs(15);
    let refused = l.admit_at(owner(1), t15, Checks::BOTH).unwrap_err();
    assert_eq!(refused.retry_after_secs(), 5);
    // At 20 s one token is back, and only one.
    let t20 = t0 + Duration::from_secs(20);
    assert_eq!(l.admit_at(owner(1), t20, Checks::BOTH), Ok(false));
    assert_eq!(
        l.admit_at(owner(1), t20, Checks::BOTH).unwrap_err().limit,
        OwnerLimit::Rate
    );
    // A minute of quiet fills the bucket again, and no more than full.
    let later = t20 + Duration::from_secs(600);
    for _ in 0..3 {
        assert_eq!(l.admit_at(owner(1), later, Checks::BOTH), Ok(false));
    }
    assert!(l.admit_at(owner(1), later, Checks::BOTH).is_err());
}

#[test]
fn a_refused_rate_does_not_count_an_active_run_and_a_refused_active_spends_no_token() {
    let (l, _) = limits(1, 2);
    let t0 = Instant::now();
    assert_eq!(l.admit_at(owner(1), t0, Checks::BOTH), Ok(true));
    // Over the active limit: no token spent.
    assert_eq!(
        l.admit_at(owner(1), t0, Checks::BOTH).unwrap_err().limit,
        OwnerLimit::ActiveRuns
    );
    l.release(owner(1), t0);
    assert_eq!(l.admit_at(owner(1), t0, Checks::BOTH), Ok(true));
    l.release(owner(1), t0);
    // Both tokens spent: the rate refuses, and nothing stays counted as active.
    assert_eq!(
        l.admit_at(owner(1), t0, Checks::BOTH).unwrap_err().limit,
        OwnerLimit::Rate
    );
    let t30 = t0 + Duration::from_secs(30);
    assert_eq!(l.admit_at(owner(1), t30, Checks::BOTH), Ok(true));
}

#[test]
fn idle_owners_are_dropped_and_the_table_stays_bounded() {
    let (l, _) = limits(0, 60);
    let t0 = Instant::now();
    for n in 0..5_000 {
        assert_eq!(l.admit_at(owner(n), t0, Checks::BOTH), Ok(false));
    }
    // Each of them spent one token: entries are kept until their buckets are full.
    assert_eq!(l.tracked(), 5_000);
    // A second later every bucket is full again; the next sweep drops them all.
    let t1 = t0 + Duration::from_secs(1);
    for n in 5_000..15_000 {
        assert_eq!(l.admit_at(owner(n), t1, Checks::BOTH), Ok(false));
    }
    assert!(l.tracked() <= 10_000, "{} tracked", l.tracked());
    // Past MAX_OWNERS, owners with no run going are forgotten.
    for n in 0..(MAX_OWNERS as u32 + 10) {
        let _ = l.admit_at(owner(n + 20_000), t1, Checks::BOTH);
    }
    assert!(l.tracked() <= MAX_OWNERS, "{} tracked", l.tracked());
}

#[test]
fn checked_elsewhere_the_rate_is_not_taken_here_and_an_active_only_entry_goes_when_idle() {
    let (l, m) = limits(1, 1);
    let t0 = Instant::now();
    // The rate is the shared journal's: here only the active count.
    assert_eq!(l.admit_at(owner(1), t0, Checks::ACTIVE), Ok(true));
    l.release(owner(1), t0);
    assert_eq!(l.tracked(), 0, "a full bucket and no run: no entry");
    assert_eq!(l.admit_at(owner(1), t0, Checks::ACTIVE), Ok(true));
    l.release(owner(1), t0);
    // Redis could not be asked: this replica's bucket.
    assert!(l.admit_rate(owner(1)).is_ok());
    assert_eq!(l.admit_rate(owner(1)).unwrap_err().limit, OwnerLimit::Rate);
    let shared = Limited {
        limit: OwnerLimit::Rate,
        retry_after: Duration::from_millis(1500),
    };
    assert_eq!(l.refused(shared).retry_after_secs(), 2);
    assert!(m
        .render()
        .contains("tether_owner_limited_total{limit=\"rate\"} 2"));
}
