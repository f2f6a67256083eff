//! With a shared journal, a run's record is written once, by the replica that produced it: a
//! follower that served the run from the journal writes none.

use std::time::Duration;

use serde_json::Value;

use crate::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_producing_replica_writes_the_runs_record() {
    let redis = RedisServer::start();
    let gate = Gate::default();
    let be = turn_backend(turn(6), Some((3, gate.clone()))).await;
    let hook = backend(|_| fixed_answer(200, "text/plain", "")).await;
    let webhook = format!(
        "[accounting]\nwebhook_url = \"http://{}/runs\"\n",
        hook.addr
    );
    let mut a = replica(be.addr, &redis, "a", &webhook).await;
    let mut b = replica(be.addr, &redis, "b", &webhook).await;
    let mut origin = post(a.addr, "/chat", &chat("c")).await;
    while origin.frame().await.unwrap().seq() != 3 {}
    eventually("the run is journaled", || {
        !redis.keys("tj:*:r:*:m").is_empty()
    })
    .await;
    // B follows the run from the journal, then reads it to its end.
    let mut follower = post(b.addr, "/chat/live", &chat("c")).await;
    assert_eq!(follower.frame().await.unwrap().ty(), "STREAM_SNAPSHOT");
    gate.open();
    let rest = within("B's stream ends", follower.frames_to_end()).await;
    assert_eq!(rest.last().unwrap().ty(), "STREAM_END");
    origin.frames_to_end().await;
    // The status route: the producing replica has the run's usage and watch, a follower not.
    for (s, produced) in [(&a, true), (&b, false)] {
        let mut r = request(s.addr, "GET", "/chat/run?chat_id=c", &[], b"").await;
        let v: Value = serde_json::from_slice(&r.body_to_end().await).unwrap();
        assert_eq!(v["status"], "completed");
        assert_eq!(v["watch"].is_object(), produced, "{v}");
        assert_eq!(
            v["usage"],
            Value::Null,
            "AG-UI without a usage table reports none"
        );
    }
    // Each drain delivers its webhook's queue before it returns.
    for s in [&mut b, &mut a] {
        let drained = s.handle.take().unwrap().drain(Duration::from_secs(5));
        assert!(within("the drain", drained).await);
    }
    let records: Vec<Value> = hook
        .requests
        .lock()
        .iter()
        .map(|r| serde_json::from_slice(&r.body).unwrap())
        .collect();
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0]["outcome"], "persisted");
    assert_eq!(
        records[0]["watch"]["observers_max"], 1,
        "A's requester only"
    );
}
