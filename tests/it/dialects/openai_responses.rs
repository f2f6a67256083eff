//! openai-responses (background-mode resume): the turn is `POST /v1/responses`, known by the
//! backend's `resp_…` id (alias `event:/response/id`); `GET /v1/responses/{id}?stream=true&
//! starting_after=N` is a `json_cursor` resume on `/sequence_number`; without `stream=true` the
//! GET is the backend's; `POST /v1/responses/{id}/cancel` stops the run it names.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use serde_json::json;

use crate::dialects::common::*;
use crate::support::*;

const ROUTES: &str = r#"
[[routes]]
methods = ["POST"]
path = "/v1/responses"
kind = "record"
format = "openai_responses"
aliases = ["event:/response/id"]

[[routes]]
methods = ["GET"]
path = "/v1/responses/{response_id}"
kind = "resume"
dialect = "json_cursor"
run = "path:response_id"
cursor = "query:starting_after"
cursor_field = "/sequence_number"
only_if = "query:stream=true"
expired = "openai"

[[routes]]
methods = ["POST"]
path = "/v1/responses/{response_id}/cancel"
kind = "stop"
run = "path:response_id"
"#;

/// A Responses stream of response `id` with `deltas` text deltas, `event:` lines and
/// `sequence_number`s from 0.
fn frames(id: &str, deltas: usize) -> Vec<Bytes> {
    let mut events = vec![
        json!({"type":"response.created","response":{"id":id,"object":"response","status":"in_progress","output":[]}}),
        json!({"type":"response.in_progress","response":{"id":id,"object":"response","status":"in_progress","output":[]}}),
        json!({"type":"response.output_item.added","output_index":0,"item":{"id":"msg_1","type":"message","role":"assistant","status":"in_progress","content":[]}}),
        json!({"type":"response.content_part.added","item_id":"msg_1","output_index":0,"content_index":0,"part":{"type":"output_text","text":""}}),
    ];
    for i in 0..deltas {
        events.push(json!({"type":"response.output_text.delta","item_id":"msg_1","output_index":0,"content_index":0,"delta":format!("word {i} caf\u{e9} ")}));
    }
    events.push(json!({"type":"response.output_text.done","item_id":"msg_1","output_index":0,"content_index":0,"text":"…"}));
    events.push(json!({"type":"response.completed","response":{"id":id,"object":"response","status":"completed"}}));
    events
        .into_iter()
        .enumerate()
        .map(|(i, mut e)| {
            e["sequence_number"] = json!(i);
            let ty = e["type"].as_str().unwrap().to_string();
            frame(Some(&ty), None, &e.to_string())
        })
        .collect()
}

/// A backend answering the n-th `POST` with response `resp_<n>` (`deltas` deltas, held as
/// `pauses[n]` says) and any `GET` with the API's 404.
async fn openai_backend(deltas: usize, pauses: Vec<Option<(usize, Gate)>>) -> Backend {
    let n = Arc::new(AtomicUsize::new(0));
    backend(move |r: &Req| {
        if r.method == "GET" {
            return fixed_answer(
                404,
                "application/json",
                r#"{"error":{"message":"No response found","type":"invalid_request_error"}}"#,
            );
        }
        let i = n.fetch_add(1, Ordering::SeqCst);
        let pause = pauses.get(i).and_then(|p| p.as_ref());
        held(
            &frames(&format!("resp_{i}"), deltas),
            pause.map(|(at, g)| (*at, g)),
        )
    })
    .await
}

async fn create(tether: &Sidecar) -> Resp {
    let body = json!({"model": "gpt-test", "input": "hi", "stream": true, "background": true});
    let r = post(tether.addr, "/v1/responses", &body).await;
    assert_eq!(r.status, 200);
    r
}

/// A whole turn, read to its end and ended in the registry.
async fn completed(tether: &Sidecar, id: &str) {
    let mut r = create(tether).await;
    r.body_to_end().await;
    eventually("the run ended", || {
        tether
            .registry()
            .by_id(&Owner::NONE, &id.into())
            .is_some_and(|f| f.run.end().is_some())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_cut_at_a_random_event_resumes_after_its_sequence_number_byte_for_byte() {
    let all = frames("resp_0", 8);
    let at = random_cut("openai-responses", 1, all.len() - 1);
    let gate = Gate::default();
    let be = openai_backend(8, vec![Some((at, gate.clone()))]).await;
    let tether = sidecar(be.addr, ROUTES).await;
    let got = cut(create(&tether).await, at).await;
    assert_eq!(concat(&got), concat(&all[..at]));
    let last = data_json(got.last().unwrap())["sequence_number"].clone();

    let path = format!("/v1/responses/resp_0?stream=true&starting_after={last}");
    let mut resume = get(tether.addr, &path, &[]).await;
    assert_eq!(resume.status, 200);
    assert_eq!(resume.header("content-type"), Some("text/event-stream"));
    gate.open();
    let body = resume.body_to_end().await;
    assert_eq!(
        std::str::from_utf8(&body).unwrap(),
        concat(&all[at..]),
        "the frames after sequence_number {last}, as the backend sent them, once"
    );
    assert_eq!(attach_metric(&tether, "json_cursor", "replay").await, 1.0);
    assert_eq!(requests(&be), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starting_after_minus_one_replays_the_whole_stream() {
    let be = openai_backend(3, vec![]).await;
    let tether = sidecar(be.addr, ROUTES).await;
    completed(&tether, "resp_0").await;
    let path = "/v1/responses/resp_0?stream=true&starting_after=-1";
    let mut r = get(tether.addr, path, &[]).await;
    assert_eq!(r.status, 200);
    let body = r.body_to_end().await;
    assert_eq!(
        std::str::from_utf8(&body).unwrap(),
        concat(&frames("resp_0", 3))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_id_is_404_and_a_get_without_stream_true_is_the_backends() {
    let be = openai_backend(3, vec![]).await;
    let tether = sidecar(be.addr, ROUTES).await;
    completed(&tether, "resp_0").await;
    let r = get(tether.addr, "/v1/responses/resp_nope?stream=true", &[]).await;
    assert_eq!(r.status, 404);
    assert_eq!(
        attach_metric(&tether, "json_cursor", "not_found").await,
        1.0
    );
    // The retrieve call (no stream=true) is passed through, even for a run tether knows.
    let mut r = get(tether.addr, "/v1/responses/resp_0", &[]).await;
    assert_eq!(r.status, 404);
    assert_eq!(
        json_body(&mut r).await["error"]["message"],
        "No response found"
    );
    let seen = be.requests.lock().last().cloned().unwrap();
    assert_eq!(
        (seen.method.as_str(), seen.path.as_str()),
        ("GET", "/v1/responses/resp_0")
    );
    assert_eq!(requests(&be), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cursor_below_every_sequence_number_is_400_cursor_expired() {
    let be = openai_backend(3, vec![]).await;
    let tether = sidecar(be.addr, ROUTES).await;
    completed(&tether, "resp_0").await;
    let path = "/v1/responses/resp_0?stream=true&starting_after=-5";
    let mut r = get(tether.addr, path, &[]).await;
    assert_eq!(r.status, 400);
    let v = json_body(&mut r).await;
    assert_eq!(
        (v["error"]["code"].as_str(), v["error"]["type"].as_str()),
        (Some("cursor_expired"), Some("invalid_request_error"))
    );
    assert_eq!(attach_metric(&tether, "json_cursor", "expired").await, 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cursor_older_than_the_raw_record_is_400_cursor_expired() {
    let be = openai_backend(60, vec![]).await;
    let extra = format!("[recorder]\nmax_raw_bytes_per_run = 1024\n{ROUTES}");
    let tether = sidecar(be.addr, &extra).await;
    completed(&tether, "resp_0").await;
    let mut r = get(
        tether.addr,
        "/v1/responses/resp_0?stream=true&starting_after=2",
        &[],
    )
    .await;
    assert_eq!(r.status, 400);
    assert_eq!(json_body(&mut r).await["error"]["code"], "cursor_expired");
    // A recent cursor is still served.
    let all = frames("resp_0", 60);
    let last = all.len() - 1;
    let path = format!(
        "/v1/responses/resp_0?stream=true&starting_after={}",
        last - 2
    );
    let mut r = get(tether.addr, &path, &[]).await;
    assert_eq!(r.status, 200);
    let body = r.body_to_end().await;
    assert_eq!(
        std::str::from_utf8(&body).unwrap(),
        concat(&all[last - 1..])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_by_response_id_stops_that_run_and_never_a_later_one() {
    let gate = Gate::default();
    let be = openai_backend(4, vec![None, Some((3, gate.clone()))]).await;
    let tether = sidecar(be.addr, ROUTES).await;
    completed(&tether, "resp_0").await;
    let mut live = create(&tether).await;
    for _ in 0..3 {
        live.block().await.unwrap();
    }
    // Cancelling the finished response answers for it and leaves the running one alone.
    let r = request(tether.addr, "POST", "/v1/responses/resp_0/cancel", &[], b"").await;
    assert_eq!(r.status, 200);
    let running = tether
        .registry()
        .by_id(&Owner::NONE, &"resp_1".into())
        .unwrap()
        .run;
    assert!(running.is_producing() && running.end().is_none());
    let cancelled = "tether_runs_finished_total{outcome=\"cancelled\"}";
    assert_eq!(tether.metric(cancelled).await, 0.0);
    // Cancelling the running one by its id stops it.
    let mut r = request(tether.addr, "POST", "/v1/responses/resp_1/cancel", &[], b"").await;
    assert_eq!(r.status, 200);
    assert_eq!(json_body(&mut r).await["execution_stopped"], true);
    live.body_to_end().await;
    assert_eq!(tether.metric(cancelled).await, 1.0);
}
