//! Connection reuse to the backend: a recorded answer read to its clean end gives its connection
//! back to the pool, and the next turn goes over it; an answer that says `Connection: close`, or
//! one followed by bytes past its end, does not.
//!
//! These tests run on one thread: Pingora 0.9's pool hands a pooled connection over through
//! `Arc::try_unwrap` right after the idle task's mutex guard releases its lock but before the
//! guard drops its `Arc`, so on several threads a reuse now and then loses that race ("failed to
//! acquire reusable stream") and the connection is closed. On one thread the idle task finishes
//! dropping the guard before the waiting task runs, so the counts below are exact.

use std::sync::atomic::Ordering;

use crate::support::*;
use bytes::Bytes;
use serde_json::Value;

/// Runs a turn on `chat_id` to its end and waits until its producer finished (the producer
/// returns the connection to the pool last). Returns the recorded state.
async fn turn_to_end(tether: &Sidecar, chat_id: &str) -> Reduced {
    let frames = post(tether.addr, "/chat", &chat(chat_id))
        .await
        .frames_to_end()
        .await;
    assert_eq!(frames.last().unwrap().json["persisted"], true, "{chat_id}");
    let shared = tether.handle().shared.clone();
    eventually("the producer ended", || shared.producers.is_empty()).await;
    let mut state = Reduced::default();
    state.apply_frames(&frames, 0);
    state
}

/// Three turns against a backend answering each request with `script`: how many connections
/// the backend accepted.
async fn connections_for_three_turns(events: &[Value], script: Vec<Step>) -> usize {
    let be = backend(move |_| script.clone()).await;
    let tether = sidecar(be.addr, "").await;
    for chat_id in ["a", "b", "c"] {
        assert_eq!(turn_to_end(&tether, chat_id).await, Reduced::of(events));
    }
    assert_eq!(be.requests.lock().len(), 3);
    be.accepted.load(Ordering::SeqCst)
}

#[tokio::test]
async fn a_clean_chunked_answer_leaves_its_connection_for_the_next_turn() {
    let events = turn(6);
    let script = scripted_turn(&events, None);
    assert_eq!(connections_for_three_turns(&events, script).await, 1);
}

#[tokio::test]
async fn an_answer_that_says_connection_close_is_not_reused() {
    let events = turn(6);
    let mut script = scripted_turn(&events, None);
    // The fake backend keeps the connection open anyway: only tether's rule keeps it unused.
    script[0] = Step::Head(
        200,
        vec![
            ("content-type", "text/event-stream".into()),
            ("connection", "close".into()),
        ],
    );
    assert_eq!(connections_for_three_turns(&events, script).await, 3);
}

/// A backend answer of `events` framed by Content-Length, with `after` sent past its end.
fn content_length_answer(events: &[Value], after: &[u8]) -> Vec<Step> {
    let body: Vec<u8> = events.iter().flat_map(|e| sse(e).to_vec()).collect();
    let len = body.len();
    let mut wire = body;
    wire.extend_from_slice(after);
    vec![
        Step::Head(
            200,
            vec![
                ("content-type", "text/event-stream".into()),
                ("content-length", len.to_string()),
            ],
        ),
        Step::Raw(Bytes::from(wire)),
    ]
}

#[tokio::test]
async fn bytes_past_a_content_length_answer_keep_its_connection_out_of_the_pool() {
    let events = turn(6);
    let script = content_length_answer(&events, b"HTTP/1.1 200 JUNK\r\n\r\n");
    assert_eq!(connections_for_three_turns(&events, script).await, 3);
}

#[tokio::test]
async fn a_content_length_answer_read_to_its_end_is_reused() {
    let events = turn(6);
    let script = content_length_answer(&events, b"");
    assert_eq!(connections_for_three_turns(&events, script).await, 1);
}
