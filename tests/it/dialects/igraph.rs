//! igraph-v2: the turn is `POST /api/sessions/{session_id}/chat`, known by the backend's `run_id`
//! and the request's `start_request_id`; `GET …/runs/{run_id}/resume?last_event_index=k` is a
//! `json_cursor` resume on `/event_index` (null indexes replayed in place); cancel and control
//! answer in igraph's own shapes.

use bytes::Bytes;
use serde_json::{json, Value};

use crate::dialects::common::*;
use crate::support::*;

const ROUTES: &str = r#"
[[routes]]
methods = ["POST"]
path = "/api/sessions/{session_id}/chat"
kind = "record"
chat_id = "path:session_id"
aliases = ["event:/run_id", "request:json:/start_request_id"]

[[routes]]
methods = ["GET"]
path = "/api/sessions/{session_id}/runs/{run_id}/resume"
kind = "resume"
dialect = "json_cursor"
run = "path:run_id"
cursor = "query:last_event_index"
cursor_field = "/event_index"
expired = "replay_unavailable"

[[routes]]
methods = ["POST"]
path = "/api/sessions/{session_id}/runs/cancel"
kind = "stop"
chat_id = "path:session_id"
run = ["json:/target/run_id", "json:/target/start_request_id"]
cancel_request_id = "json:/cancel_request_id"
answer = "igraph"

[[routes]]
methods = ["GET"]
path = "/api/sessions/{session_id}/runs/control"
kind = "status"
chat_id = "path:session_id"
run = "query:run_id"
answer = "igraph"
"#;

/// The events of a turn of `tokens` tokens: indexed frames, and a null-index status frame after
/// every third one.
fn frames(tokens: usize) -> Vec<Bytes> {
    let mut events = vec![json!({"type":"run_started","run_id":"run-A"})];
    for i in 0..tokens {
        events.push(json!({"type":"token","text":format!("t{i} ")}));
    }
    events.push(json!({"type":"run_completed"}));
    let mut out = Vec::new();
    for (i, mut e) in events.into_iter().enumerate() {
        e["event_index"] = json!(i);
        out.push(frame(None, None, &e.to_string()));
        if i % 3 == 2 {
            let s = json!({"type":"status","event_index":null,"state":"thinking"});
            out.push(frame(None, None, &s.to_string()));
        }
    }
    out
}

async fn start(tokens: usize, pause: Option<(usize, Gate)>, extra: &str) -> (Backend, Sidecar) {
    let all = frames(tokens);
    let be = backend(move |_| held(&all, pause.as_ref().map(|(at, g)| (*at, g)))).await;
    let tether = sidecar(be.addr, &format!("{extra}{ROUTES}")).await;
    (be, tether)
}

async fn turn(tether: &Sidecar) -> Resp {
    let body = json!({"message": "hi", "start_request_id": "sr-1"});
    let r = post(tether.addr, "/api/sessions/s1/chat", &body).await;
    assert_eq!(r.status, 200);
    r
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_after_index_k_gets_the_frames_after_it_with_null_indexes_in_place() {
    let all = frames(8);
    let at = random_cut("igraph", 1, all.len() - 1);
    let gate = Gate::default();
    let (be, tether) = start(8, Some((at, gate.clone())), "").await;
    let got = cut(turn(&tether).await, at).await;
    assert_eq!(concat(&got), concat(&all[..at]));
    // The client's cursor: the last index it saw (null ones do not count).
    let (pos, k) = got
        .iter()
        .enumerate()
        .rev()
        .find_map(|(i, b)| data_json(b)["event_index"].as_i64().map(|k| (i, k)))
        .unwrap();
    let path = format!("/api/sessions/s1/runs/run-A/resume?last_event_index={k}");
    let mut r = get(tether.addr, &path, &[]).await;
    assert_eq!(r.status, 200);
    gate.open();
    let body = r.body_to_end().await;
    assert_eq!(std::str::from_utf8(&body).unwrap(), concat(&all[pos + 1..]));
    assert_eq!(attach_metric(&tether, "json_cursor", "replay").await, 1.0);
    assert_eq!(requests(&be), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cursor_older_than_the_raw_record_is_409_replay_unavailable() {
    let (_be, tether) = start(60, None, "[recorder]\nmax_raw_bytes_per_run = 1024\n").await;
    turn(&tether).await.body_to_end().await;
    let path = "/api/sessions/s1/runs/run-A/resume?last_event_index=1";
    let mut r = get(tether.addr, path, &[]).await;
    assert_eq!(r.status, 409);
    assert_eq!(json_body(&mut r).await["code"], "REPLAY_UNAVAILABLE");
    assert_eq!(attach_metric(&tether, "json_cursor", "expired").await, 1.0);
    let r = get(
        tether.addr,
        "/api/sessions/s1/runs/run-X/resume?last_event_index=1",
        &[],
    )
    .await;
    assert_eq!(r.status, 404);
}

async fn control(tether: &Sidecar, run: &str) -> (u16, Value) {
    let path = format!("/api/sessions/s1/runs/control?run_id={run}");
    let mut r = get(tether.addr, &path, &[]).await;
    let v = json_body(&mut r).await;
    (r.status, v)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_by_start_request_id_answers_with_that_id_and_control_in_igraphs_shape() {
    let gate = Gate::default();
    let (_be, tether) = start(8, Some((3, gate.clone())), "").await;
    let mut live = turn(&tether).await;
    for _ in 0..3 {
        live.block().await.unwrap();
    }
    assert_eq!(
        control(&tether, "sr-1").await,
        (
            200,
            json!({"run_id":"sr-1","status":"running","execution_stopped":false,
                   "terminal_persisted":false,"can_send":false})
        )
    );
    let cancel = json!({"target": {"start_request_id": "sr-1"}, "cancel_request_id": "c-1"});
    let mut r = post(tether.addr, "/api/sessions/s1/runs/cancel", &cancel).await;
    assert_eq!(r.status, 200);
    assert_eq!(
        json_body(&mut r).await,
        json!({"run_id":"sr-1","execution_stopped":true,"terminal_persisted":false})
    );
    live.body_to_end().await;
    assert_eq!(
        control(&tether, "run-A").await,
        (
            200,
            json!({"run_id":"run-A","status":"cancelled","execution_stopped":true,
                   "terminal_persisted":false,"can_send":true})
        )
    );
    // The same cancel again names the run it stopped.
    let mut r = post(tether.addr, "/api/sessions/s1/runs/cancel", &cancel).await;
    assert_eq!(r.status, 200);
    assert_eq!(json_body(&mut r).await["execution_stopped"], true);
    assert_eq!(control(&tether, "run-404").await.0, 404);
}
