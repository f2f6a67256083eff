//! Fencing by the stream id, without a script on the append path: the end is the entry at the
//! highest id, so an append after it is refused by Redis itself, and the doorbell such an append
//! still rings shows no follower a byte past the end; and entries Redis lost under later appends
//! (a restore from older data) are found by the lease tick, which re-bases the run, so no reader
//! anywhere sees a hole.

use serde_json::json;

use crate::journal::one_end::{end_of, meta_key, owner_lost, reap, Via};
use crate::journal::{known, start_run};
use crate::support::*;

/// The stream's batch entries (`<last>-0`) by their last seq.
fn batch_ids(redis: &RedisServer, meta: &str) -> Vec<u64> {
    let s = format!("{}s", meta.strip_suffix('m').unwrap());
    let all: Vec<(String, Vec<Vec<u8>>)> = redis.query(&["XRANGE", &s, "-", "+"]);
    all.iter()
        .filter_map(|(id, _)| id.strip_suffix("-0")?.parse().ok())
        .filter(|&n: &u64| n != u64::MAX)
        .collect()
}

/// A backend that sends `events` one every `pace`.
async fn paced_backend(events: Vec<serde_json::Value>, pace: std::time::Duration) -> Backend {
    backend(move |_| {
        let mut steps = vec![sse_head()];
        for e in &events {
            steps.push(Step::Chunk(sse(e)));
            steps.push(Step::Sleep(pace));
        }
        steps.push(Step::End);
        steps
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_append_after_the_end_is_refused_by_its_id_and_no_follower_shows_its_bytes() {
    let redis = RedisServer::start();
    // B hears Redis 40 ms late: the doorbell of the producer's next append, refused after the
    // reaper's end, reaches B while its follower reads the stream for that end.
    let slow = FaultProxy::start(([127, 0, 0, 1], redis.port).into()).await;
    slow.set(Fault::Latency(std::time::Duration::from_millis(40)));
    let events = turn(80);
    let be = paced_backend(events.clone(), std::time::Duration::from_millis(10)).await;
    let a = replica(be.addr, &redis, "a", "").await;
    let b = replica(be.addr, &Via(slow.addr), "b", "").await;
    let (run, mut origin) = start_run(&a, "c", 3).await;
    known(&b, "c").await;
    let mut watcher = post(b.addr, "/chat/live", &chat("c")).await;
    assert_eq!(watcher.frame().await.unwrap().json["run_id"], json!(run));
    let meta = meta_key(&redis, &run);
    eventually("B follows the run by its doorbells", || {
        redis.stream_head(&meta).is_some_and(|h| h >= 20)
    })
    .await;

    // The reaper's end, at the stream's head; A's producer goes on, its next append refused.
    reap(&redis, &run);
    let end: u64 = redis.query(&["HGET", &meta, "end_seq"]);

    let rest = within("B's observer ends", watcher.frames_to_end()).await;
    assert_eq!(end_of(&rest), owner_lost());
    assert!(
        event_seqs(&rest).iter().all(|&s| s <= end),
        "B showed seqs past the end at {end}: {:?}",
        event_seqs(&rest)
    );
    let mine = within("A's requester ends", origin.frames_to_end()).await;
    assert_eq!(end_of(&mine), owner_lost(), "one end for every reader");
    assert!(
        a.metric("tether_journal_writes_total{result=\"ended\"}")
            .await
            >= 1.0,
        "A's writer heard its append was refused by the end"
    );
    assert!(
        batch_ids(&redis, &meta).iter().all(|&s| s <= end),
        "Redis took an append after the end at {end}: {:?}",
        batch_ids(&redis, &meta)
    );
}

/// A backend that sends `events`, waiting for each gate before the event at its index.
async fn gated_backend(events: Vec<serde_json::Value>, gates: Vec<(usize, Gate)>) -> Backend {
    backend(move |_| {
        let mut steps = vec![sse_head()];
        for (i, e) in events.iter().enumerate() {
            for (_, g) in gates.iter().filter(|(at, _)| *at == i) {
                steps.push(Step::Wait(g.clone()));
            }
            steps.push(Step::Chunk(sse(e)));
        }
        steps.push(Step::End);
        steps
    })
    .await
}

/// A's run of 12 events is in Redis up to seq 6 when Redis comes back with its stream as it was
/// at seq 3 (a restore from older data, `entries-added` lowered with it); A's next appends land
/// above the hole (4..6) until A finds it. Returns the run, A's requester and the gate that
/// holds the events from seq 8 on.
async fn lose_entries(redis: &RedisServer, a: &Sidecar, g1: Gate, g2: Gate) -> (String, Resp) {
    let (run, origin) = start_run(a, "c", 3).await;
    eventually("the run is in Redis", || {
        !redis.keys(&format!("tj:*:r:{run}:m")).is_empty()
    })
    .await;
    let meta = meta_key(redis, &run);
    let s = format!("{}s", meta.strip_suffix('m').unwrap());
    eventually("three events are in Redis", || {
        redis.stream_head(&meta) == Some(3)
    })
    .await;
    let older: Vec<u8> = redis.query(&["DUMP", &s]);
    g1.open();
    eventually("six events are in Redis", || {
        redis.stream_head(&meta) == Some(6)
    })
    .await;
    let client = ::redis::Client::open(redis.url()).unwrap();
    let mut conn = client.get_connection().unwrap();
    let _: () = ::redis::cmd("RESTORE")
        .arg(&s)
        .arg(0)
        .arg(older)
        .arg("REPLACE")
        .query(&mut conn)
        .unwrap();
    assert_eq!(redis.stream_head(&meta), Some(3));
    g2.open();
    (run, origin)
}

/// Reads the run on `b` (live from a snapshot, or, `ended`, replayed from cursor 0) and checks
/// its reader gets every event of `events` once and the same end as A's requester.
async fn whole_on(
    b: &Sidecar,
    run: &str,
    events: &[serde_json::Value],
    g: Gate,
    origin: &mut Resp,
) {
    known(b, "c").await;
    let mut body = chat("c");
    if g.is_open() {
        body["run_id"] = json!(run);
        body["after_seq"] = json!(0);
    }
    let mut r = post(b.addr, "/chat/live", &body).await;
    assert_eq!(r.status, 200);
    let first = r.frame().await.unwrap();
    assert!(first.json["run_id"] == json!(run) || first.ty() == "STREAM_EVENT");
    g.open();
    let mut all = vec![first];
    all.extend(within("B's observer ends", r.frames_to_end()).await);
    let mut state = Reduced::default();
    assert_eq!(state.apply_frames(&all, 0), events.len() as u64);
    assert_eq!(
        state,
        Reduced::of(events),
        "B's reader holds every event once"
    );
    let mine = within("A's requester ends", origin.frames_to_end()).await;
    assert_eq!(end_of(&mine), end_of(&all), "one end for every reader");
    assert_eq!(end_of(&all).1, json!(true));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entries_redis_lost_under_later_appends_are_re_based_at_the_lease_tick() {
    let redis = RedisServer::start();
    let (g1, g2, g3) = (Gate::default(), Gate::default(), Gate::default());
    let events = turn(12);
    let gates = vec![(3, g1.clone()), (6, g2.clone()), (7, g3.clone())];
    let be = gated_backend(events.clone(), gates).await;
    let a = replica(be.addr, &redis, "a", "").await;
    let (run, mut origin) = lose_entries(&redis, &a, g1, g2).await;
    let meta = meta_key(&redis, &run);
    eventually(
        "A's lease tick found the lost entries and re-based the run",
        || redis.query::<u64>(&["HGET", &meta, "gen"]) > 1,
    )
    .await;
    // A replica that reads the run now gets every event once: none of 4..6 is missing.
    let b = replica(be.addr, &redis, "b", "").await;
    whole_on(&b, &run, &events, g3, &mut origin).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_end_over_entries_redis_lost_is_refused_until_the_run_is_re_based() {
    let redis = RedisServer::start();
    let (g1, g2) = (Gate::default(), Gate::default());
    let events = turn(12);
    let gates = vec![(3, g1.clone()), (6, g2.clone())];
    let be = gated_backend(events.clone(), gates).await;
    let a = replica(be.addr, &redis, "a", "").await;
    // The rest of the run and its end follow at once, before A's next lease tick.
    let (run, mut origin) = lose_entries(&redis, &a, g1, g2).await;
    let meta = meta_key(&redis, &run);
    eventually("the run ended in Redis", || {
        redis
            .query::<Option<String>>(&["HGET", &meta, "state"])
            .as_deref()
            == Some("ended")
    })
    .await;
    let b = replica(be.addr, &redis, "b", "").await;
    let ended = Gate::default();
    ended.open();
    whole_on(&b, &run, &events, ended, &mut origin).await;
}
