//! preview-agents: one turn at a time per thread (`single_flight`), known by the backend's
//! `executionId` (alias `event:/executionId`); `DELETE …/executions/{execution_id}` stops it and
//! answers `{"cancelRequested":true}`.

use bytes::Bytes;
use serde_json::json;

use crate::dialects::common::*;
use crate::support::*;

const ROUTES: &str = r#"
[[routes]]
methods = ["POST"]
path = "/api/projects/{project_id}/agents/{agent_id}/chat/{thread_id}"
kind = "record"
chat_id = "path:thread_id"
single_flight = true
aliases = ["event:/executionId"]

[[routes]]
methods = ["DELETE"]
path = "/api/projects/{project_id}/agents/{agent_id}/executions/{execution_id}"
kind = "stop"
run = "path:execution_id"
answer = "cancel_requested"
"#;

const CHAT: &str = "/api/projects/p1/agents/a1/chat/th-1";

fn frames() -> Vec<Bytes> {
    let mut v = vec![frame(
        None,
        None,
        &json!({"type":"execution-start","executionId":"ex-1"}).to_string(),
    )];
    for i in 0..5 {
        let e = json!({"type":"text-delta","executionId":"ex-1","delta":format!("w{i} ")});
        v.push(frame(None, None, &e.to_string()));
    }
    v.push(frame(
        None,
        None,
        &json!({"type":"execution-end"}).to_string(),
    ));
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_of_the_execution_cancels_it_and_a_second_turn_meanwhile_is_409() {
    let gate = Gate::default();
    let g = gate.clone();
    let be = backend(move |_| held(&frames(), Some((2, &g)))).await;
    let tether = sidecar(be.addr, ROUTES).await;
    let body = json!({"message": "hi"});
    let mut live = post(tether.addr, CHAT, &body).await;
    assert_eq!(live.status, 200);
    live.block().await.unwrap();
    live.block().await.unwrap();

    let mut second = post(tether.addr, CHAT, &body).await;
    assert_eq!(second.status, 409);
    assert_eq!(
        json_body(&mut second).await["error"],
        "turn_already_running"
    );
    assert_eq!(requests(&be), 1);

    let path = "/api/projects/p1/agents/a1/executions/ex-1";
    let mut r = request(tether.addr, "DELETE", path, &[], b"").await;
    assert_eq!(r.status, 200);
    assert_eq!(json_body(&mut r).await, json!({"cancelRequested": true}));
    live.body_to_end().await;
    let run = tether.current_run("th-1").unwrap();
    let end = run.end().expect("the run ended");
    assert_eq!(
        (end.persisted, format!("{:?}", end.reason)),
        (false, "Some(Cancelled)".to_string())
    );
    let cancelled = "tether_runs_finished_total{outcome=\"cancelled\"}";
    assert_eq!(tether.metric(cancelled).await, 1.0);

    let unknown = "/api/projects/p1/agents/a1/executions/ex-404";
    let r = request(tether.addr, "DELETE", unknown, &[], b"").await;
    assert_eq!(r.status, 404);
}
