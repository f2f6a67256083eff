//! Retried turns (`Idempotency-Key`, the record route's `idempotency_key`): a retry with the key
//! and body of a request that started a run is answered from that run and never reaches the
//! backend: after losing the first answer mid-turn, concurrently with the first request, and
//! after the run ended (replayed, not regenerated). The same key with another body is `422
//! idempotency_key_reused`; another owner's key is theirs alone.

use serde_json::json;

use crate::support::*;

const KEY: (&str, &str) = ("idempotency-key", "turn-7f3a");

/// A protocol-1 record request with `headers` (an idempotency key, an identity).
async fn keyed(
    addr: std::net::SocketAddr,
    headers: &[(&str, &str)],
    body: &serde_json::Value,
) -> Resp {
    let mut h = vec![("content-type", "application/json")];
    h.extend_from_slice(headers);
    request(
        addr,
        "POST",
        "/chat",
        &h,
        &serde_json::to_vec(body).unwrap(),
    )
    .await
}

fn reduced(frames: &[Frame]) -> Reduced {
    let mut state = Reduced::default();
    state.apply_frames(frames, 0);
    state
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_lost_the_answer_mid_turn_retries_and_joins_the_same_run() {
    let events = turn(5);
    let gate = Gate::default();
    let be = turn_backend(events.clone(), Some((3, gate.clone()))).await;
    let tether = sidecar(be.addr, "").await;
    let mut first = keyed(tether.addr, &[KEY], &chat("c")).await;
    let run = first.frame().await.unwrap().json["run_id"].clone();
    first.kill();
    let mut retry = keyed(tether.addr, &[KEY], &chat("c")).await;
    assert_eq!(retry.status, 200);
    assert_eq!(retry.header("x-tether-run-id"), run.as_str());
    gate.open();
    let frames = retry.frames_to_end().await;
    assert_eq!(frames[0].ty(), "STREAM_SNAPSHOT");
    assert_eq!(reduced(&frames), Reduced::of(&events));
    assert_eq!(frames.last().unwrap().json["persisted"], json!(true));
    assert_eq!(
        be.requests.lock().len(),
        1,
        "the backend generated the turn once"
    );
    assert_eq!(tether.metric("tether_idempotent_joins_total").await, 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_concurrent_requests_with_one_key_share_one_backend_request() {
    let events = turn(4);
    let gate = Gate::default();
    let g = gate.clone();
    let ev = events.clone();
    // The backend holds its answer's head until the second request has arrived.
    let be = backend(move |_| {
        let mut steps = vec![Step::Wait(g.clone())];
        steps.extend(scripted_turn(&ev, None));
        steps
    })
    .await;
    let tether = sidecar(be.addr, "").await;
    let addr = tether.addr;
    let one =
        tokio::spawn(async move { keyed(addr, &[KEY], &chat("c")).await.frames_to_end().await });
    eventually("the first request reached the backend", || {
        be.requests.lock().len() == 1
    })
    .await;
    let registry = tether.handle().shared.chats.registry().clone();
    let waiting = registry.subscribers();
    let two =
        tokio::spawn(async move { keyed(addr, &[KEY], &chat("c")).await.frames_to_end().await });
    // The second waits for the first's run (nothing more reaches the backend), then both read it.
    eventually("the second request waits for the first's run", || {
        registry.subscribers() > waiting
    })
    .await;
    gate.open();
    let (one, two) = (
        within("one", one).await.unwrap(),
        within("two", two).await.unwrap(),
    );
    assert_eq!(one[0].json["run_id"], two[0].json["run_id"]);
    for frames in [&one, &two] {
        assert_eq!(reduced(frames), Reduced::of(&events));
        assert_eq!(frames.last().unwrap().json["persisted"], json!(true));
    }
    assert_eq!(be.requests.lock().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_the_run_ended_is_replayed_not_regenerated() {
    let events = turn(3);
    let be = turn_backend(events.clone(), None).await;
    let tether = sidecar(be.addr, "").await;
    let first = keyed(tether.addr, &[KEY], &chat("c"))
        .await
        .frames_to_end()
        .await;
    assert_eq!(first.last().unwrap().json["persisted"], json!(true));
    let again = keyed(tether.addr, &[KEY], &chat("c"))
        .await
        .frames_to_end()
        .await;
    assert_eq!(again[0].json["run_id"], first[0].json["run_id"]);
    assert_eq!(again[0].ty(), "STREAM_SNAPSHOT");
    assert_eq!(reduced(&again), Reduced::of(&events));
    assert_eq!(again.last().unwrap().json["persisted"], json!(true));
    assert_eq!(be.requests.lock().len(), 1);
    // Without the key, the same body is a new turn.
    let fresh = post(tether.addr, "/chat", &chat("c"))
        .await
        .frames_to_end()
        .await;
    assert_ne!(fresh[0].json["run_id"], first[0].json["run_id"]);
    assert_eq!(be.requests.lock().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_key_with_another_body_is_refused_with_422() {
    let be = turn_backend(turn(2), None).await;
    let tether = sidecar(be.addr, "").await;
    let first = keyed(tether.addr, &[KEY], &chat("c"))
        .await
        .frames_to_end()
        .await;
    let other = json!({"chat_id": "c", "protocol": 1, "message": "something else"});
    let mut refused = keyed(tether.addr, &[KEY], &other).await;
    let e: serde_json::Value = serde_json::from_slice(&refused.body_to_end().await).unwrap();
    assert_eq!(
        (refused.status, e["error"].clone(), e["run_id"].clone()),
        (
            422,
            json!("idempotency_key_reused"),
            first[0].json["run_id"].clone()
        )
    );
    assert_eq!(be.requests.lock().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_owners_key_is_theirs_alone() {
    let be = turn_backend(turn(2), None).await;
    let tether = sidecar(be.addr, "[auth]\nsubject = \"header:x-user\"\n").await;
    let alice = keyed(tether.addr, &[KEY, ("x-user", "alice")], &chat("c"))
        .await
        .frames_to_end()
        .await;
    let bob = keyed(tether.addr, &[KEY, ("x-user", "bob")], &chat("c"))
        .await
        .frames_to_end()
        .await;
    assert_ne!(alice[0].json["run_id"], bob[0].json["run_id"]);
    assert_eq!(be.requests.lock().len(), 2);
    assert_eq!(tether.metric("tether_idempotent_joins_total").await, 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_profile_reads_the_key_from_the_body() {
    // As the igraph-v2 profile does: `json:/start_request_id`.
    let be = turn_backend(turn(2), None).await;
    let tether = sidecar(
        be.addr,
        "[[routes]]\nmethods = [\"POST\"]\npath = \"/chat\"\nkind = \"record\"\n\
         idempotency_key = \"json:/start_request_id\"\n",
    )
    .await;
    let body = json!({"chat_id": "c", "protocol": 1, "start_request_id": "s-1"});
    let first = post(tether.addr, "/chat", &body)
        .await
        .frames_to_end()
        .await;
    let again = post(tether.addr, "/chat", &body)
        .await
        .frames_to_end()
        .await;
    assert_eq!(again[0].json["run_id"], first[0].json["run_id"]);
    assert_eq!(be.requests.lock().len(), 1);
}
