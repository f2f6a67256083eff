//! A stop told as a stop (`conf/profiles/ai-sdk.toml`): a run tether stops on purpose (the stop
//! route, `max_run_duration`, the abandon timer) ends every reader of the AI SDK's UI message
//! stream as the SDK's own server ends a stopped stream: an `abort` chunk, `[DONE]`, then a clean
//! chunked end, where `useChat` would show a cut body as a network error. The requester relayed
//! the upstream's bytes gets them only when the upstream stopped between two events (an event
//! it has begun cannot be ended: it is cut, and resumes, which read whole frames, still get the
//! abort). An upstream failure still cuts the requester, and a format without such an event
//! (AG-UI) keeps the cut.

use bytes::Bytes;
use serde_json::json;

use crate::dialects::common::*;
use crate::support::turn as agui_turn;
use crate::support::*;

const PROFILE: &str = include_str!("../../../conf/profiles/ai-sdk.toml");

/// What the SDK's server writes after a stopped stream's last chunk.
const ABORT: &str = "data: {\"type\":\"abort\"}\n\n";
const DONE: &str = "data: [DONE]\n\n";

/// Frames the requester reads before the run is stopped (or fails): `start`, `start-step`,
/// `text-start` and two deltas.
const AT: usize = 5;

/// An AI SDK UI message stream: start, one text part of six deltas, finish, `[DONE]`.
fn frames() -> Vec<Bytes> {
    let mut v = vec![
        json!({"type":"start","messageId":"msg_1"}),
        json!({"type":"start-step"}),
        json!({"type":"text-start","id":"t1"}),
    ];
    v.extend((0..6).map(|i| json!({"type":"text-delta","id":"t1","delta":format!("w{i} ")})));
    v.push(json!({"type":"text-end","id":"t1"}));
    v.push(json!({"type":"finish-step"}));
    v.push(json!({"type":"finish"}));
    let mut frames: Vec<Bytes> = v
        .iter()
        .map(|e| frame(None, None, &e.to_string()))
        .collect();
    frames.push(frame(None, None, "[DONE]"));
    frames
}

/// The backend's answer: the head, then `steps`.
async fn start(steps: Vec<Step>, extra: &str) -> (Backend, Sidecar) {
    let be = backend(move |_| steps.clone()).await;
    let tether = sidecar(be.addr, &format!("{extra}\n{PROFILE}")).await;
    (be, tether)
}

/// The first [`AT`] frames, then a wait on `gate`, then the rest.
fn held_at(gate: &Gate) -> Vec<Step> {
    held(&frames(), Some((AT, gate)))
}

/// Starts the turn of chat `c` and reads its first [`AT`] frames.
async fn turn(tether: &Sidecar) -> Resp {
    let mut r = post(
        tether.addr,
        "/api/chat",
        &json!({"id": "c", "messages": []}),
    )
    .await;
    assert_eq!(r.status, 200);
    let mut got = Vec::new();
    for _ in 0..AT {
        got.push(r.block().await.expect("a frame of the turn"));
    }
    assert_eq!(concat(&got), concat(&frames()[..AT]));
    r
}

/// `useChat`'s reconnect, while the turn runs: the history so far, then the live tail.
async fn resume(tether: &Sidecar) -> Resp {
    let r = get(tether.addr, "/api/chat/c/stream", &[]).await;
    assert_eq!(r.status, 200);
    r
}

/// The run's end reason, once it has one.
async fn ended_as(tether: &Sidecar) -> String {
    eventually("the run ended", || {
        tether.current_run("c").is_some_and(|r| r.end().is_some())
    })
    .await;
    let end = tether.current_run("c").unwrap().end().unwrap();
    assert!(!end.persisted);
    end.reason.unwrap().as_str().to_string()
}

/// A reader's blocks end with the abort chunk and `[DONE]`, once each, and a clean end.
async fn told_stopped(r: &mut Resp) -> Vec<Bytes> {
    let blocks = blocks_to_end(r).await;
    let n = blocks.len();
    assert!(n >= 2, "{blocks:?}");
    assert_eq!(concat(&blocks[n - 2..]), format!("{ABORT}{DONE}"));
    let aborts = blocks.iter().filter(|b| &b[..] == ABORT.as_bytes()).count();
    assert_eq!(aborts, 1);
    blocks
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stop_route_ends_the_requester_and_a_resume_with_abort_then_a_clean_end() {
    let gate = Gate::default();
    let (be, tether) = start(held_at(&gate), "").await;
    let mut r = turn(&tether).await;
    let mut again = resume(&tether).await;
    let mut stop = post(tether.addr, "/api/chat/c/stop", &json!({})).await;
    assert_eq!(stop.status, 200);
    assert_eq!(json_body(&mut stop).await["execution_stopped"], true);
    // The requester: nothing of the held frames, the abort chunk and [DONE], a clean end.
    assert_eq!(
        concat(&blocks_to_end(&mut r).await),
        format!("{ABORT}{DONE}")
    );
    // The other tab's resume: the history, then the same end.
    let blocks = told_stopped(&mut again).await;
    assert_eq!(
        blocks.iter().filter(|b| &b[..] == DONE.as_bytes()).count(),
        1
    );
    assert_eq!(ended_as(&tether).await, "cancelled");
    gate.open();
    be.wait_answers(1).await;
    assert!(
        be.served.lock()[0].write_failed,
        "the backend's request was aborted"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_run_duration_ends_the_requester_with_abort_then_a_clean_end() {
    let gate = Gate::default();
    let (_be, tether) = start(held_at(&gate), "[upstream]\nmax_run_duration = \"300ms\"\n").await;
    let mut r = turn(&tether).await;
    assert_eq!(
        concat(&blocks_to_end(&mut r).await),
        format!("{ABORT}{DONE}")
    );
    assert_eq!(ended_as(&tether).await, "max_duration");
    gate.open();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abandoned_run_is_recorded_with_abort_then_done_for_later_readers() {
    let gate = Gate::default();
    // The profile's resume route, with `completed = "replay"`: an ended run is replayed.
    let profile = PROFILE.replace(
        "dialect = \"from_start\"",
        "dialect = \"from_start\"\ncompleted = \"replay\"",
    );
    let g = gate.clone();
    let be = backend(move |_| held(&frames(), Some((AT, &g)))).await;
    let tether = sidecar(
        be.addr,
        &format!("[limits]\nabandon_after = \"50ms\"\n{profile}"),
    )
    .await;
    turn(&tether).await.kill();
    assert_eq!(ended_as(&tether).await, "abandoned");
    let mut later = resume(&tether).await;
    let blocks = told_stopped(&mut later).await;
    let deltas = blocks
        .iter()
        .filter(|b| data(b) != "[DONE]" && data_json(b)["type"] == "text-delta")
        .count();
    assert_eq!(deltas, 1, "the two deltas seen, merged: {blocks:?}");
    gate.open();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_failure_still_cuts_the_requester() {
    let gate = Gate::default();
    let mut steps = held_at(&gate);
    // In place of the frames after the gate: a reset.
    let wait = steps
        .iter()
        .position(|s| matches!(s, Step::Wait(_)))
        .unwrap();
    steps.truncate(wait + 1);
    steps.push(Step::Reset);
    let (_be, tether) = start(steps, "").await;
    let mut r = turn(&tether).await;
    let mut again = resume(&tether).await;
    again.block().await.expect("the history");
    gate.open();
    let rest = r.body_to_end().await;
    assert!(!r.ended, "cut, not ended");
    assert!(rest.is_empty(), "{rest:?}");
    let tail = again.body_to_end().await;
    assert!(
        !String::from_utf8_lossy(&tail).contains("abort"),
        "{tail:?}"
    );
    assert_eq!(ended_as(&tether).await, "upstream_reset");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_inside_an_event_cuts_the_requester_and_still_tells_a_resume() {
    let gate = Gate::default();
    let all = frames();
    let half = all[AT].slice(..all[AT].len() / 2);
    let mut steps = vec![sse_head()];
    steps.extend(all[..AT].iter().cloned().map(Step::Chunk));
    steps.push(Step::Chunk(half.clone()));
    steps.push(Step::Wait(gate.clone()));
    steps.push(Step::Chunk(all[AT].slice(half.len()..)));
    steps.push(Step::End);
    let (_be, tether) = start(steps, "").await;
    let mut r = turn(&tether).await;
    assert!(r.read_until(&half).await, "the requester has half an event");
    let mut again = resume(&tether).await;
    let mut stop = post(tether.addr, "/api/chat/c/stop", &json!({})).await;
    assert_eq!(stop.status, 200);
    stop.body_to_end().await;
    let rest = r.body_to_end().await;
    assert!(!r.ended, "an event begun cannot be ended: cut");
    assert_eq!(rest, half, "nothing after the half event");
    let blocks = told_stopped(&mut again).await;
    assert!(
        !blocks.iter().any(|b| b.starts_with(&half)),
        "the unfinished event is not replayed"
    );
    assert_eq!(ended_as(&tether).await, "cancelled");
    gate.open();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_format_without_a_stop_event_keeps_the_cut() {
    // AG-UI through the same routes: a stopped requester is cut, as the upstream's stream was.
    let gate = Gate::default();
    let events: Vec<Bytes> = agui_turn(6).iter().map(sse).collect();
    let steps = held(&events, Some((AT, &gate)));
    let profile = PROFILE.replace("format = \"ai_sdk\"", "format = \"agui\"");
    let be = backend(move |_| steps.clone()).await;
    let tether = sidecar(be.addr, &profile).await;
    let mut r = post(
        tether.addr,
        "/api/chat",
        &json!({"id": "c", "messages": []}),
    )
    .await;
    for _ in 0..AT {
        r.block().await.expect("a frame of the turn");
    }
    let mut stop = post(tether.addr, "/api/chat/c/stop", &json!({})).await;
    assert_eq!(stop.status, 200);
    stop.body_to_end().await;
    let rest = r.body_to_end().await;
    assert!(!r.ended && rest.is_empty(), "cut: {rest:?}");
    assert_eq!(ended_as(&tether).await, "cancelled");
    gate.open();
}
