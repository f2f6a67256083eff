//! A retried turn across replicas: the retry of a request that started a run on A, sent to B
//! with the same idempotency key and body, joins A's run through the journal (the backend sees one
//! request); with another body it is `422 idempotency_key_reused`.

use serde_json::json;

use crate::journal::known;
use crate::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_on_the_other_replica_joins_the_run_and_another_body_is_refused() {
    let redis = RedisServer::start();
    let events = turn(6);
    let gate = Gate::default();
    let be = turn_backend(events.clone(), Some((3, gate.clone()))).await;
    let a = replica(be.addr, &redis, "a", "").await;
    let b = replica(be.addr, &redis, "b", "").await;
    let key = [
        ("content-type", "application/json"),
        ("idempotency-key", "k-1"),
    ];
    let body = serde_json::to_vec(&chat("c")).unwrap();
    let mut first = request(a.addr, "POST", "/chat", &key, &body).await;
    let run = first.frame().await.unwrap().json["run_id"].clone();
    first.kill();
    known(&b, "c").await;

    let other = serde_json::to_vec(&json!({"chat_id": "c", "protocol": 1, "x": 1})).unwrap();
    let mut refused = request(b.addr, "POST", "/chat", &key, &other).await;
    let e: serde_json::Value = serde_json::from_slice(&refused.body_to_end().await).unwrap();
    assert_eq!(
        (refused.status, e["error"].clone(), e["run_id"].clone()),
        (422, json!("idempotency_key_reused"), run.clone())
    );

    let mut retry = request(b.addr, "POST", "/chat", &key, &body).await;
    assert_eq!(retry.status, 200);
    gate.open();
    let frames = retry.frames_to_end().await;
    assert_eq!(frames[0].json["run_id"], run);
    let mut state = Reduced::default();
    state.apply_frames(&frames, 0);
    assert_eq!(state, Reduced::of(&events));
    assert_eq!(frames.last().unwrap().json["persisted"], json!(true));
    assert_eq!(
        be.requests.lock().len(),
        1,
        "the backend generated the turn once"
    );
    assert_eq!(b.metric("tether_idempotent_joins_total").await, 1.0);
}
