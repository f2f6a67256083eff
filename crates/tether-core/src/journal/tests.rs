//! Tests of the journal contract on the in-memory journal.

use bytes::Bytes;

use super::memory::MemoryJournal;
use super::*;
use crate::record::format::{agui::Agui, Format};
use crate::record::sse::SseEvent;
use crate::vocab::end::EndReason;
use crate::vocab::RunId;

fn ev(json: &'static str) -> Event {
    Agui.classify(&SseEvent {
        event: None,
        data: Bytes::from_static(json.as_bytes()),
        id: None,
    })
}

#[test]
fn the_first_end_wins_and_takes_the_head_as_its_seq() {
    let j = MemoryJournal::new(&RunId::from("r"), 8);
    j.append(&[
        ev(r#"{"type":"RUN_STARTED"}"#),
        ev(r#"{"type":"RUN_FINISHED"}"#),
    ]);
    let (end, set) = j.end(End::superseded(&RunId::from("r2")));
    assert!(set);
    assert_eq!((end.seq, end.superseded), (2, true));
    let (end, set) = j.end(End::finished(true, None));
    assert!(!set);
    assert_eq!(end.next_run_id.as_deref(), Some("r2"));
    assert_eq!(j.ended(), Some(end));
}

#[test]
fn nothing_is_appended_after_the_end() {
    let j = MemoryJournal::new(&RunId::from("r"), 8);
    j.end(End::finished(false, Some(EndReason::Cancelled)));
    assert_eq!(j.append(&[ev(r#"{"type":"X"}"#)]).events, 0);
    assert_eq!(j.head(), 0);
}

#[tokio::test]
async fn readers_are_woken_by_a_batch_an_end_and_a_wake() {
    let j = MemoryJournal::new(&RunId::from("r"), 8);
    let mut rx = j.subscribe();
    j.append(&[ev(r#"{"type":"X"}"#)]);
    assert!(rx.has_changed().unwrap());
    rx.borrow_and_update();
    j.wake();
    assert!(rx.has_changed().unwrap());
    rx.borrow_and_update();
    j.end(End::finished(true, None));
    assert!(rx.has_changed().unwrap());
}

#[test]
fn end_reasons_read_as_their_wire_names() {
    let names: Vec<&str> = EndReason::ALL.iter().map(|r| r.as_str()).collect();
    assert_eq!(
        names,
        [
            "superseded",
            "cancelled",
            "max_duration",
            "abandoned",
            "shutdown",
            "upstream_reset",
            "upstream_timeout",
            "no_terminal_event",
            "not_committed",
            "response_failed",
            "response_incomplete",
            "error_event",
            "owner_lost",
            "event_too_large"
        ]
    );
}

#[test]
fn every_end_reason_has_a_row_in_the_protocol_docs() {
    let doc = include_str!("../../../../docs/protocol.md");
    for r in EndReason::ALL {
        let row = format!("| `{}` |", r.as_str());
        assert!(doc.contains(&row), "docs/protocol.md has no row for {row}");
    }
}

/// The newest event's frame as every reader of it gets it, read one frame at a time.
fn newest(j: &MemoryJournal) -> Bytes {
    let r = j.read_after(j.head() - 1, 64).unwrap();
    assert_eq!((r.frames.len(), r.last), (1, j.head()));
    r.frames[0].clone()
}

#[test]
fn readers_of_the_newest_event_share_one_frame_counted_in_the_held_bytes() {
    let j = MemoryJournal::new(&RunId::from("r"), 8);
    j.append(&[ev(r#"{"type":"A","delta":"one"}"#)]);
    let before = j.held_bytes();
    // One reader: nothing kept.
    let one = newest(&j);
    assert_eq!(j.held_bytes(), before);
    // A second reader keeps its frame for the third.
    let (a, b) = (newest(&j), newest(&j));
    assert_eq!((&one, &a), (&b, &b));
    assert_eq!(
        a.as_ptr(),
        b.as_ptr(),
        "the third reader got the second's frame"
    );
    assert_eq!(j.held_bytes(), before + a.len());
    // A newer event: its own frame, not the kept one.
    j.append(&[ev(r#"{"type":"B","delta":"two"}"#)]);
    let c = (newest(&j), newest(&j)).1;
    assert_eq!(c.as_ptr(), newest(&j).as_ptr());
    // The same bytes a read of several frames encodes from the window.
    assert_eq!(j.read_after(0, 64).unwrap().frames, vec![a, c]);
}

#[test]
fn a_big_newest_event_is_encoded_for_each_reader_not_kept() {
    let j = MemoryJournal::new(&RunId::from("r"), 8);
    let big: &'static str =
        Box::leak(format!(r#"{{"type":"A","delta":"{}"}}"#, "x".repeat(8192)).into_boxed_str());
    j.append(&[ev(big)]);
    let before = j.held_bytes();
    let (a, b, c) = (newest(&j), newest(&j), newest(&j));
    assert_eq!((&a, &b), (&c, &c));
    assert_ne!(b.as_ptr(), c.as_ptr());
    assert_eq!(j.held_bytes(), before);
}
