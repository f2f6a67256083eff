//! What one connection and all of them together may hold: requests to the backend (recorded
//! turns, pass-through and forwarded requests) at most `[upstream] max_requests` at once, the
//! rest refused with `503 at_capacity` and counted; an HTTP/2 connection told how many streams
//! it may open (`[server] max_streams_per_connection`). The default of both caps, under a low
//! open-files limit, is `tests/fd_limit.rs`'s.

use serde_json::{json, Value};

use crate::https::https_tether;
use crate::support::*;

async fn error_code(r: &mut Resp) -> String {
    let v: Value = serde_json::from_slice(&r.body_to_end().await).unwrap();
    v["error"].as_str().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_max_requests_turns_pass_throughs_and_forwards_get_503_at_capacity_and_are_counted() {
    let gate = Gate::default();
    let g = gate.clone();
    let be = backend(move |r: &Req| match r.path.as_str() {
        "/other" => fixed_answer(200, "text/plain", "passed"),
        _ => scripted_turn(&turn(2), Some((1, &g))),
    })
    .await;
    let tether = sidecar(be.addr, "[upstream]\nmax_requests = 2\n").await;

    // Two turns held mid-answer hold both backend connections.
    let mut held = Vec::new();
    for id in ["a", "b"] {
        let mut r = post(tether.addr, "/chat", &chat(id)).await;
        assert_eq!(r.status, 200);
        assert_eq!(r.frame().await.unwrap().ty(), "STREAM_SNAPSHOT");
        held.push(r);
    }
    assert_eq!(tether.metric("tether_upstream_requests").await, 2.0);

    // A third turn, a pass-through and a legacy (forwarded) attach are refused at once.
    let mut turn3 = post(tether.addr, "/chat", &chat("c")).await;
    assert_eq!(
        (turn3.status, error_code(&mut turn3).await),
        (503, "at_capacity".into())
    );
    let mut passing = request(tether.addr, "GET", "/other", &[], b"").await;
    assert_eq!(
        (passing.status, error_code(&mut passing).await),
        (503, "at_capacity".into())
    );
    let mut legacy = post(tether.addr, "/chat/live", &json!({"chat_id": "a"})).await;
    assert_eq!(
        (legacy.status, error_code(&mut legacy).await),
        (503, "at_capacity".into())
    );
    // Reading what is recorded needs no backend connection.
    let mut live = post(tether.addr, "/chat/live", &chat("a")).await;
    assert_eq!(live.status, 200);
    assert_eq!(live.frame().await.unwrap().ty(), "STREAM_SNAPSHOT");
    assert_eq!(
        tether
            .metric("tether_upstream_requests_refused_total")
            .await,
        3.0
    );
    assert_eq!(
        be.requests.lock().len(),
        2,
        "nothing refused reached the backend"
    );

    // Once the turns end their slots are free again.
    gate.open();
    for mut r in held {
        assert_eq!(
            r.frames_to_end().await.last().unwrap().json["persisted"],
            true
        );
    }
    eventually_async("the slots are given back", || async {
        tether.metric("tether_upstream_requests").await == 0.0
    })
    .await;
    let mut passing = request(tether.addr, "GET", "/other", &[], b"").await;
    assert_eq!(passing.status, 200);
    assert_eq!(&passing.body_to_end().await[..], b"passed");
    let mut turn4 = post(tether.addr, "/chat", &chat("d")).await;
    assert_eq!(
        turn4.frames_to_end().await.last().unwrap().json["persisted"],
        true
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_client_is_told_max_streams_per_connection() {
    let be = turn_backend(turn(2), None).await;
    let ca = TestCa::new("h2-max-streams");
    let server = ca.issue("listener", &["localhost"]);
    let tether = https_tether(be.addr, &server, "max_streams_per_connection = 3\n").await;
    let mut c = H2::connect(tether.addr, &ca).await;
    // The server's SETTINGS have come by the time a stream is answered.
    let mut r = c.post("/chat", &chat("c")).await;
    assert_eq!(
        r.frames_to_end().await.last().unwrap().json["persisted"],
        true
    );
    assert_eq!(c.max_streams(), 3);
}
