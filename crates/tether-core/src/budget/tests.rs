//! Tests of the byte budget: charges never take it over its maximum and always give back.

use std::sync::atomic::AtomicI64;

use super::*;

/// A meter that keeps the sum it was told.
#[derive(Default)]
struct Sum(AtomicI64);

impl Meter for Sum {
    fn add(&self, delta: i64) {
        self.0.fetch_add(delta, Ordering::Relaxed);
    }
}

impl Sum {
    fn get(&self) -> i64 {
        self.0.load(Ordering::Relaxed)
    }
}

#[test]
fn charges_stop_at_the_maximum_and_give_back_when_dropped() {
    let gauge = Arc::new(Sum::default());
    let b = Budget::with_gauge(100, gauge.clone());
    let a = b.try_charge(60).unwrap();
    assert!(b.try_charge(41).is_none(), "over the maximum");
    let c = b.try_charge(40).unwrap();
    assert_eq!((b.used(), gauge.get()), (100, 100));
    drop(a);
    assert_eq!((b.used(), gauge.get()), (40, 40));
    drop(c);
    assert_eq!((b.used(), gauge.get()), (0, 0));
}

#[test]
fn a_charge_grows_only_into_room_and_shrinks_always() {
    let b = Budget::new(10);
    let other = b.try_charge(4).unwrap();
    let mut c = b.empty();
    assert!(c.resize(6));
    assert!(!c.resize(7), "no room for one more byte");
    assert_eq!((c.bytes(), b.used()), (6, 10));
    assert!(c.resize(1));
    assert_eq!(b.used(), 5);
    drop(other);
    drop(c);
    assert_eq!(b.used(), 0);
}
