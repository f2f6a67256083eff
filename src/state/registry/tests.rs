//! Tests of the registry.

use super::*;
use crate::state::auth::Owner;
use std::sync::atomic::{AtomicUsize, Ordering};

fn reg(retention: Duration, max_chats: usize) -> Arc<Registry> {
    Registry::new(retention, max_chats)
}

const ANY: Owner = Owner::NONE;

fn live(reg: &Arc<Registry>, chat: &str, id: &str) -> Arc<Run> {
    let p = reg
        .register(&Scope::from(chat), ANY, &RunId::from(id), Admission::Always)
        .unwrap();
    let run = Arc::new(Run::new(id, 16));
    reg.go_live(&p, run.clone());
    run
}

#[test]
fn a_new_run_supersedes_the_active_one_but_not_a_completed_one() {
    let reg = reg(Duration::from_secs(60), 8);
    let a = live(&reg, "c", "a");
    let b = live(&reg, "c", "b");
    let end = a.end().unwrap();
    assert!(end.superseded);
    assert_eq!(end.next_run_id.as_deref(), Some("b"));
    assert!(Arc::ptr_eq(
        &reg.current(&Scope::from("c"), &ANY).unwrap(),
        &b
    ));
    assert!(Arc::ptr_eq(
        &reg.find(&Scope::from("c"), &ANY, &RunId::from("a"))
            .unwrap(),
        &a
    ));
    b.finish(true, None);
    let _c = live(&reg, "c", "c2");
    assert!(!b.end().unwrap().superseded);
    assert!(reg
        .find(&Scope::from("other"), &ANY, &RunId::from("a"))
        .is_none());
    assert_eq!(reg.run_count(), 3);
}

#[test]
fn another_owner_sees_nothing() {
    let reg = reg(Duration::from_secs(60), 8);
    let auth = crate::state::auth::Auth::new(crate::config::Subject::Header("x-u".into()));
    let mut h = http::HeaderMap::new();
    h.insert("x-u", "alice".parse().unwrap());
    let alice = auth.owner(&h).unwrap();
    h.insert("x-u", "bob".parse().unwrap());
    let bob = auth.owner(&h).unwrap();
    let p = reg
        .register(
            &Scope::from("scope"),
            alice,
            &RunId::from("r"),
            Admission::Always,
        )
        .unwrap();
    reg.go_live(&p, Arc::new(Run::new("r", 4)));
    assert!(reg.current(&Scope::from("scope"), &alice).is_some());
    assert!(reg.current(&Scope::from("scope"), &bob).is_none());
    assert!(reg
        .find(&Scope::from("scope"), &bob, &RunId::from("r"))
        .is_none());
}

#[test]
fn a_run_recorded_for_one_owner_is_never_adopted_indexed_or_found_for_another() {
    let reg = reg(Duration::from_secs(60), 8);
    let (alice, mallory) = (Owner::of(b"alice"), Owner::of(b"mallory"));
    let p = reg
        .register(
            &Scope::from("a/c"),
            alice,
            &RunId::from("r"),
            Admission::Always,
        )
        .unwrap();
    let theirs = Arc::new(Run::new("r", 4));
    reg.go_live(&p, theirs.clone());
    let p = reg
        .register(
            &Scope::from("m/c"),
            mallory,
            &RunId::from("m"),
            Admission::Always,
        )
        .unwrap();
    let mine = Arc::new(Run::new("m", 4));
    reg.go_live(&p, mine.clone());
    // The way a shared journal's mirror of alice's run could reach mallory's chat.
    reg.adopt(&Scope::from("m/c"), mallory, theirs.clone(), true);
    reg.adopt(&Scope::from("m/c"), mallory, theirs.clone(), false);
    reg.index(
        &mallory,
        &RunId::from("alias"),
        &Scope::from("m/c"),
        &theirs,
    );
    assert!(mine.end().is_none(), "mallory's run is not superseded");
    assert!(Arc::ptr_eq(
        &reg.current(&Scope::from("m/c"), &mallory).unwrap(),
        &mine
    ));
    assert!(reg
        .find(&Scope::from("m/c"), &mallory, &RunId::from("r"))
        .is_none());
    assert!(reg.by_id(&mallory, &RunId::from("r")).is_none());
    assert!(reg.by_id(&mallory, &RunId::from("alias")).is_none());
    assert_eq!(reg.run_count(), 2);
    // Alice still finds it everywhere she recorded it.
    assert!(Arc::ptr_eq(
        &reg.find(&Scope::from("a/c"), &alice, &RunId::from("r"))
            .unwrap(),
        &theirs
    ));
    assert!(Arc::ptr_eq(
        &reg.by_id(&alice, &RunId::from("r")).unwrap().run,
        &theirs
    ));
}

#[test]
fn pending_registration_wakes_waiters_when_it_ends() {
    let reg = reg(Duration::from_secs(60), 8);
    let rx = reg.subscribe();
    let p = reg
        .register(&Scope::from("c"), ANY, &RunId::from("r"), Admission::Always)
        .unwrap();
    drop(p);
    assert!(rx.has_changed().unwrap());
    assert_eq!(reg.chats(), 1);
    reg.sweep(Instant::now());
    assert_eq!(reg.chats(), 0, "an empty chat entry is swept");
}

#[test]
fn single_flight_refuses_while_a_run_is_pending_or_active() {
    let reg = reg(Duration::from_secs(60), 8);
    let p = reg
        .register(
            &Scope::from("c"),
            ANY,
            &RunId::from("r1"),
            Admission::SingleFlight,
        )
        .unwrap();
    assert_eq!(
        reg.register(
            &Scope::from("c"),
            ANY,
            &RunId::from("r2"),
            Admission::SingleFlight
        )
        .unwrap_err(),
        Busy::Running("r1".into())
    );
    let run = Arc::new(Run::new("r1", 4));
    reg.go_live(&p, run.clone());
    drop(p);
    assert_eq!(
        reg.register(
            &Scope::from("c"),
            ANY,
            &RunId::from("r3"),
            Admission::SingleFlight
        )
        .unwrap_err(),
        Busy::Running("r1".into())
    );
    run.finish(true, None);
    assert!(reg
        .register(
            &Scope::from("c"),
            ANY,
            &RunId::from("r4"),
            Admission::SingleFlight
        )
        .is_ok());
}

#[test]
fn attach_record_is_single_flight() {
    let reg = reg(Duration::from_secs(60), 8);
    let first = reg.register(
        &Scope::from("c"),
        ANY,
        &RunId::from("r1"),
        Admission::AttachRecord,
    );
    assert!(first.is_ok());
    assert!(reg
        .register(
            &Scope::from("c"),
            ANY,
            &RunId::from("r2"),
            Admission::AttachRecord
        )
        .is_err());
    drop(first);
    assert!(reg
        .register(
            &Scope::from("c"),
            ANY,
            &RunId::from("r3"),
            Admission::AttachRecord
        )
        .is_ok());
}

#[test]
fn cancel_ids_are_remembered_per_chat() {
    let reg = reg(Duration::from_secs(60), 8);
    live(&reg, "c", "r1");
    reg.remember_cancel(&Scope::from("c"), "k1", &RunId::from("r1"));
    assert_eq!(
        reg.cancelled_run(&Scope::from("c"), &ANY, "k1").as_deref(),
        Some("r1")
    );
    assert!(reg.cancelled_run(&Scope::from("c"), &ANY, "k2").is_none());
    for i in 0..(MAX_CANCELS + 1) {
        reg.remember_cancel(&Scope::from("c"), &format!("x{i}"), &RunId::from("r1"));
    }
    assert!(
        reg.cancelled_run(&Scope::from("c"), &ANY, "k1").is_none(),
        "bounded"
    );
}

#[test]
fn completed_runs_expire_after_retention_and_active_ones_never() {
    let reg = reg(Duration::from_millis(0), 8);
    let done = live(&reg, "done", "a");
    done.finish(true, None);
    let _active = live(&reg, "active", "b");
    let s = reg.sweep(Instant::now() + Duration::from_secs(1));
    assert_eq!(s.expired, 1);
    assert!(reg.current(&Scope::from("done"), &ANY).is_none());
    assert!(reg.current(&Scope::from("active"), &ANY).is_some());
    assert_eq!(reg.chats(), 1);
    assert_eq!(reg.run_count(), 1);
}

#[test]
fn beyond_max_chats_the_oldest_completion_goes_first() {
    let reg = reg(Duration::from_secs(3600), 2);
    for c in ["c1", "c2", "c3"] {
        // Completion instants are increasing; ties fall back to chat id order.
        live(&reg, c, c).finish(true, None);
    }
    let evicted = Arc::new(AtomicUsize::new(0));
    let e = evicted.clone();
    reg.on_evict(move |s| {
        e.fetch_add(s.capacity, Ordering::Relaxed);
    });
    // The next chat's registration evicts the one too many (no sweep needed).
    let _active = live(&reg, "c4", "c4");
    assert_eq!(evicted.load(Ordering::Relaxed), 1);
    assert_eq!(reg.sweep(Instant::now()).capacity, 0);
    assert!(reg.current(&Scope::from("c1"), &ANY).is_none());
    assert!(
        reg.current(&Scope::from("c2"), &ANY).is_some()
            && reg.current(&Scope::from("c3"), &ANY).is_some()
    );
    assert!(reg.current(&Scope::from("c4"), &ANY).is_some());
}

/// A run of `owner`'s chat `chat` that went live and completed.
fn completed(reg: &Arc<Registry>, owner: Owner, chat: &str) -> Arc<Run> {
    let p = reg
        .register(
            &Scope::from(chat),
            owner,
            &RunId::from(chat),
            Admission::Always,
        )
        .unwrap();
    let run = Arc::new(Run::new(chat, 4));
    reg.go_live(&p, run.clone());
    run.finish(true, None);
    run
}

#[test]
fn one_owner_creating_many_chats_evicts_its_own_oldest_and_no_one_elses() {
    let (a, b) = (Owner::of(b"alice"), Owner::of(b"bob"));
    let reg = reg(Duration::from_secs(3600), 8);
    // Alice's chats completed first: the oldest of all.
    for c in ["a1", "a2", "a3"] {
        completed(&reg, a, c);
    }
    for i in 0..20 {
        completed(&reg, b, &format!("b{i:02}"));
    }
    reg.sweep(Instant::now());
    assert_eq!(reg.chats(), 8);
    for c in ["a1", "a2", "a3"] {
        assert!(reg.current(&Scope::from(c), &a).is_some(), "{c} survives");
    }
    let kept: Vec<String> = (0..20)
        .map(|i| format!("b{i:02}"))
        .filter(|c| reg.current(&Scope::from(c.as_str()), &b).is_some())
        .collect();
    assert_eq!(
        kept,
        ["b15", "b16", "b17", "b18", "b19"],
        "bob's newest stay"
    );
    // The run limit is shared out the same way: bob is still the larger owner.
    assert!(reg.make_room(7, usize::MAX));
    assert_eq!(reg.run_count(), 6);
    assert!(["a1", "a2", "a3"]
        .iter()
        .all(|c| reg.current(&Scope::from(*c), &a).is_some()));
    assert!(
        reg.current(&Scope::from("b16"), &b).is_none()
            && reg.current(&Scope::from("b17"), &b).is_some()
    );
    // Once both hold as many, the older completion goes: alice's.
    assert!(reg.make_room(6, usize::MAX));
    assert!(reg.current(&Scope::from("a1"), &a).is_none());
    assert!(
        reg.current(&Scope::from("a2"), &a).is_some()
            && reg.current(&Scope::from("b17"), &b).is_some()
    );
}

#[test]
fn make_room_evicts_completed_runs_first_and_never_active_ones() {
    let reg = reg(Duration::from_secs(3600), 100);
    live(&reg, "done1", "d1").finish(true, None);
    live(&reg, "done2", "d2").finish(true, None);
    let _active = live(&reg, "active", "a");
    assert!(reg.make_room(3, usize::MAX));
    assert_eq!(reg.run_count(), 2);
    assert!(reg.current(&Scope::from("done1"), &ANY).is_none());
    assert!(reg.make_room(2, usize::MAX));
    assert!(!reg.make_room(1, usize::MAX), "the active run stays");
    assert!(reg.current(&Scope::from("active"), &ANY).is_some());
}

#[test]
fn recorded_bytes_follow_appends_and_evictions() {
    let reg = reg(Duration::from_millis(0), 100);
    let run = live(&reg, "c", "r");
    let ev = crate::record::format::Format::classify(
        &crate::record::format::agui::Agui,
        &crate::record::sse::SseEvent {
            event: None,
            data: bytes::Bytes::from_static(br#"{"type":"CUSTOM","value":1}"#),
            id: None,
        },
    );
    run.append(&[ev]);
    assert_eq!(reg.recorded_bytes(), run.bytes());
    run.finish(true, None);
    reg.sweep(Instant::now() + Duration::from_secs(1));
    assert_eq!(reg.recorded_bytes(), 0);
}

#[test]
fn run_ids_are_fresh_and_valid() {
    let a = crate::state::run::mint_run_id();
    assert_eq!(a.len(), 22);
    assert!(crate::request::check_run_id(&a).is_ok());
    assert_ne!(a, crate::state::run::mint_run_id());
}

#[tokio::test(start_paused = true)]
async fn a_completed_run_is_kept_for_exactly_its_retention() {
    let reg = reg(Duration::from_secs(300), 8);
    let run = live(&reg, "c", "r1");
    run.finish(true, None);
    tokio::time::advance(Duration::from_secs(299)).await;
    assert_eq!(reg.sweep(Instant::now()), Swept::default());
    assert!(reg.current(&Scope::from("c"), &ANY).is_some());
    tokio::time::advance(Duration::from_secs(1)).await;
    assert_eq!(reg.sweep(Instant::now()).expired, 1);
    assert!(reg.current(&Scope::from("c"), &ANY).is_none());
}

#[tokio::test(start_paused = true)]
async fn a_lookup_sweeps_lazily_at_most_once_a_second() {
    let reg = reg(Duration::from_millis(10), 8);
    let evicted = Arc::new(AtomicUsize::new(0));
    let e = evicted.clone();
    reg.on_evict(move |s| {
        e.fetch_add(s.expired, Ordering::Relaxed);
    });
    live(&reg, "c", "r1").finish(true, None);
    tokio::time::advance(Duration::from_millis(500)).await;
    // Within a second of the registry's start no lookup sweeps.
    assert!(reg.current(&Scope::from("c"), &ANY).is_some());
    tokio::time::advance(Duration::from_millis(500)).await;
    assert!(reg.current(&Scope::from("c"), &ANY).is_none());
    assert_eq!(evicted.load(Ordering::Relaxed), 1);
}

#[tokio::test(start_paused = true)]
async fn a_run_unobserved_for_the_abandon_time_is_abandoned_and_a_watched_one_is_not() {
    let reg = reg(Duration::from_secs(60), 8);
    let lonely = live(&reg, "a", "r1");
    let watched = live(&reg, "b", "r2");
    let _guard = watched.observe(crate::accounting::Join::Attach);
    tokio::time::advance(Duration::from_secs(9)).await;
    assert!(reg.abandoned(Duration::from_secs(10)).is_empty());
    tokio::time::advance(Duration::from_secs(1)).await;
    let gone: Vec<String> = reg
        .abandoned(Duration::from_secs(10))
        .iter()
        .map(|r| r.id().to_string())
        .collect();
    assert_eq!(gone, ["r1"]);
    // An observer that came and left restarts the clock.
    drop(lonely.observe(crate::accounting::Join::Attach));
    assert!(reg.abandoned(Duration::from_secs(10)).is_empty());
}

#[test]
fn a_mirror_never_displaces_a_run_produced_here_until_that_run_has_ended() {
    // After Redis restarted empty, an earlier turn's producer may write its run again first and
    // take the chat's pointer: a follower then reads that older run as the chat's current one.
    let reg = reg(Duration::from_secs(60), 8);
    let scope = Scope::from("c");
    let mine = live(&reg, "c", "mine");
    let older = Arc::new(Run::new("older", 4));
    older.mark_mirror();
    reg.adopt(&scope, ANY, older.clone(), true);
    assert!(mine.end().is_none(), "the local run goes on");
    assert!(Arc::ptr_eq(&reg.current(&scope, &ANY).unwrap(), &mine));
    assert!(Arc::ptr_eq(
        &reg.find(&scope, &ANY, &RunId::from("older")).unwrap(),
        &older
    ));
    // Once the local run has ended (its writer settled it from the journal), the mirror the
    // journal names is made current.
    mine.supersede(&RunId::from("older"));
    reg.adopt(&scope, ANY, older.clone(), true);
    assert!(Arc::ptr_eq(&reg.current(&scope, &ANY).unwrap(), &older));
}
