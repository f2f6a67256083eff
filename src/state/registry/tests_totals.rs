//! Tests of the registry's totals (runs and recorded bytes, for local runs and mirrors alike)
//! and of `max_chats` at registration.

use super::*;
use crate::journal::memory::MemoryJournal;
use crate::journal::Journal;
use crate::record::format::{agui::Agui, Event, Format};
use crate::record::sse::SseEvent;
use crate::state::auth::Owner;

const ANY: Owner = Owner::NONE;

fn event(size: usize) -> Event {
    let json = format!(r#"{{"type":"CUSTOM","value":"{}"}}"#, "x".repeat(size));
    Agui.classify(&SseEvent {
        event: None,
        data: bytes::Bytes::from(json),
        id: None,
    })
}

/// Every distinct run the registry holds.
fn held(reg: &Registry) -> Vec<Arc<Run>> {
    let mut out: Vec<Arc<Run>> = Vec::new();
    for chat in reg.chats.iter() {
        for r in chat.runs() {
            if !out.iter().any(|o| Arc::ptr_eq(o, r)) {
                out.push(r.clone());
            }
        }
    }
    out
}

fn check(reg: &Registry, step: usize) {
    let runs = held(reg);
    let sum: usize = runs.iter().map(|r| r.bytes()).sum();
    assert_eq!(reg.recorded_bytes(), sum, "recorded bytes at step {step}");
    assert_eq!(reg.run_count(), runs.len(), "run count at step {step}");
}

/// A mirror of another replica's run, fed through its journal as a follower feeds it (the
/// registry is not told).
fn follow(reg: &Registry, chat: &str, id: &str) -> (Arc<Run>, Arc<MemoryJournal>) {
    let journal = Arc::new(MemoryJournal::new(&RunId::from(id), 8));
    let run = Arc::new(Run::with_journal(
        RunId::from(id),
        Box::new(journal.clone()),
    ));
    run.mark_mirror();
    run.bind_owner(ANY);
    reg.adopt(&Scope::from(chat), ANY, run.clone(), true);
    (run, journal)
}

#[test]
fn following_evicting_and_recording_keep_the_count_equal_to_the_held_runs_bytes() {
    let reg = Registry::new(Duration::from_millis(0), 6);
    let mut mirrors: Vec<(Arc<Run>, Arc<MemoryJournal>)> = Vec::new();
    for i in 0..300 {
        // Follow another replica's run and feed it as the follower and its doorbells do.
        let (run, j) = follow(&reg, &format!("m{}", i % 23), &format!("m{i}"));
        for k in 0..(1 + i % 5) {
            let first = j.head() + 1;
            j.append_at(first, &[event(100 * k + i)], Vec::new(), 0, 0)
                .unwrap();
        }
        if i % 7 == 0 {
            // A gap re-seeds the mirror from a checkpoint.
            let seeded = MemoryJournal::new(&RunId::from(format!("m{i}")), 8);
            seeded.append(&[event(3000)]);
            j.replace_with(seeded);
        }
        mirrors.push((run, j));
        check(&reg, i);
        // Record a local run (its window slides past 8 events).
        let p = reg
            .register(
                &Scope::from(format!("l{}", i % 11).as_str()),
                ANY,
                &RunId::from(format!("l{i}")),
                Admission::Always,
            )
            .unwrap();
        let local = Arc::new(Run::new(format!("l{i}"), 8));
        reg.go_live(&p, local.clone());
        drop(p);
        for k in 0..(i % 13) {
            local.append(&[event(k * 50)]);
        }
        check(&reg, i);
        // Older mirrors end; some turns end; evict now and then.
        if let Some((run, j)) = mirrors.get(i.saturating_sub(3)) {
            j.end(crate::vocab::end::End::finished(true, None));
            run.done();
        }
        local.finish(i % 2 == 0, None);
        match i % 4 {
            0 => {
                reg.sweep(Instant::now() + Duration::from_secs(1));
            }
            1 => {
                reg.make_room(10, usize::MAX);
            }
            2 => {
                reg.make_room(usize::MAX, 20_000);
            }
            _ => {}
        }
        // A mirror evicted then followed again is counted again, once.
        if let Some((run, _)) = mirrors.get(i / 2) {
            reg.adopt(
                &Scope::from(format!("m{}", (i / 2) % 23).as_str()),
                ANY,
                run.clone(),
                false,
            );
        }
        check(&reg, i);
    }
    // Everything goes: nothing is left counted.
    mirrors.iter().for_each(|(r, j)| {
        j.end(crate::vocab::end::End::finished(true, None));
        r.done();
    });
    reg.sweep(Instant::now() + Duration::from_secs(1));
    assert_eq!(reg.chats(), 0);
    assert_eq!((reg.recorded_bytes(), reg.run_count()), (0, 0));
}

#[test]
fn a_followers_mirrors_leave_the_local_runs_counted() {
    // The issue's shape: a follower that followed and evicted many runs still counts its own.
    let reg = Registry::new(Duration::from_secs(3600), 4);
    for i in 0..50 {
        let (run, j) = follow(&reg, &format!("m{i}"), &format!("m{i}"));
        j.append_at(1, &[event(10_000)], Vec::new(), 0, 0).unwrap();
        j.end(crate::vocab::end::End::finished(true, None));
        run.done();
    }
    let p = reg
        .register(
            &Scope::from("mine"),
            ANY,
            &RunId::from("r"),
            Admission::Always,
        )
        .unwrap();
    let run = Arc::new(Run::new("r", 8));
    reg.go_live(&p, run.clone());
    run.append(&[event(200_000)]);
    assert!(reg.recorded_bytes() >= 200_000);
    check(&reg, 0);
}

#[tokio::test(start_paused = true)]
async fn max_chats_holds_at_registration() {
    let reg = Registry::new(Duration::from_secs(3600), 16);
    for i in 0..200 {
        // Completions a millisecond apart (eviction goes by completion), no lazy sweep.
        tokio::time::advance(Duration::from_millis(1)).await;
        let p = reg
            .register(
                &Scope::from(format!("c{i}").as_str()),
                ANY,
                &RunId::from(format!("r{i}")),
                Admission::Always,
            )
            .unwrap();
        // The 16 completed chats and this one's turn.
        assert!(reg.chats() <= 17, "{} chats held at {i}", reg.chats());
        let run = Arc::new(Run::new(format!("r{i}"), 4));
        reg.go_live(&p, run.clone());
        drop(p);
        run.finish(true, None);
        reg.ended();
        assert!(reg.chats() <= 16, "{} chats held at {i}", reg.chats());
    }
    // The newest stay.
    assert!(reg.current(&Scope::from("c199"), &ANY).is_some());
    assert!(reg.current(&Scope::from("c183"), &ANY).is_none());
    // Chats with a run still going are never evicted: past the limit they are all held, and the
    // completed ones beyond it go as runs end or at the next registration.
    let busy: Vec<_> = (0..20)
        .map(|i| {
            let scope = Scope::from(format!("b{i}").as_str());
            let p = reg
                .register(
                    &scope,
                    ANY,
                    &RunId::from(format!("b{i}")),
                    Admission::Always,
                )
                .unwrap();
            let run = Arc::new(Run::new(format!("b{i}"), 4));
            reg.go_live(&p, run.clone());
            run
        })
        .collect();
    assert_eq!(
        reg.chats(),
        16 + 20,
        "16 completed chats and the 20 busy ones"
    );
    busy.iter().for_each(|r| {
        r.finish(true, None);
    });
    reg.ended();
    assert_eq!(reg.chats(), 16);
    let _p = reg
        .register(
            &Scope::from("next"),
            ANY,
            &RunId::from("n"),
            Admission::Always,
        )
        .unwrap();
    assert_eq!(reg.chats(), 17, "the limit and the new turn's chat");
}

#[tokio::test(start_paused = true)]
async fn a_followers_mirrors_count_against_max_chats_at_adoption() {
    let reg = Registry::new(Duration::from_secs(3600), 8);
    for i in 0..100 {
        let (run, j) = follow(&reg, &format!("m{i}"), &format!("m{i}"));
        // The limit, and the chat of the run just followed until it ends.
        assert!(reg.chats() <= 9, "{} chats held at {i}", reg.chats());
        j.end(crate::vocab::end::End::finished(true, None));
        run.done();
    }
    // A mirror seeded with its end is a completed chat as it is adopted.
    let journal = Arc::new(MemoryJournal::new(&RunId::from("last"), 8));
    journal.end(crate::vocab::end::End::finished(true, None));
    let run = Arc::new(Run::with_journal(RunId::from("last"), Box::new(journal)));
    run.mark_mirror();
    run.done();
    reg.adopt(&Scope::from("last"), ANY, run, true);
    assert_eq!(reg.chats(), 8);
    check(&reg, 0);
}
