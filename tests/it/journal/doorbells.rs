//! Doorbells: every append rings its run's doorbell (a pipelined `PUBLISH`, followed or not:
//! one with no subscriber costs Redis about 0.1 µs), and a replica that starts following a run
//! mid-run gets every event exactly once, from the stream and the doorbells from then on.

use serde_json::json;

use crate::journal::{ends, start_run};
use crate::support::*;

/// `PUBLISH` calls Redis has run so far (inside scripts too).
fn publishes(redis: &RedisServer) -> u64 {
    let info: String = redis.query(&["INFO", "commandstats"]);
    info.lines()
        .find_map(|l| {
            l.strip_prefix("cmdstat_publish:calls=")?
                .split(',')
                .next()?
                .parse()
                .ok()
        })
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_append_rings_its_doorbell_and_a_late_follower_gets_every_event_once() {
    let redis = RedisServer::start();
    let gate = Gate::default();
    let events = turn(10);
    let last = events.len() as u64;
    let be = turn_backend(events.clone(), Some((5, gate.clone()))).await;
    let a = replica(be.addr, &redis, "a", "").await;
    let b = replica(be.addr, &redis, "b", "").await;
    let (run, _origin) = start_run(&a, "c", 5).await;
    // Watched in Redis, not through B: a lookup on B would follow the run.
    eventually("A's writer has the first five events in Redis", || {
        let metas: Vec<String> = redis.query(&["KEYS", "tj:*:r:*:m"]);
        metas.len() == 1 && redis.stream_head(&metas[0]) == Some(5)
    })
    .await;
    let rung = publishes(&redis);
    assert!(
        rung > 0,
        "nobody follows the run, and its appends ring anyway"
    );

    let mut r = post(b.addr, "/chat/live", &chat("c")).await;
    assert_eq!(r.status, 200);
    let snap = r.frame().await.unwrap();
    assert_eq!(
        (snap.ty(), snap.json["run_id"].clone()),
        ("STREAM_SNAPSHOT", json!(run))
    );
    gate.open();
    let rest = within("B's stream ends", r.frames_to_end()).await;
    assert_eq!(
        event_seqs(&rest),
        (snap.seq() + 1..=last).collect::<Vec<_>>(),
        "every event after the snapshot, once"
    );
    let mut state = Reduced::default();
    let at = state.apply_frames(std::slice::from_ref(&snap), 0);
    assert_eq!(state.apply_frames(&rest, at), last);
    assert_eq!(state, Reduced::of(&events));
    assert_eq!(ends(&rest), 1);
    assert!(
        publishes(&redis) > rung,
        "a followed run rings its doorbell"
    );
}
