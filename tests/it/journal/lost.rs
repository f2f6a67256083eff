//! A run Redis lost: restarted empty after the producer wrote the run's end, before a follower
//! read it, and after the producer stopped keeping that end (a lease after it settled; within
//! that lease the producer writes it again, `one_end_lost`). The follower was cut off for
//! longer than that: its mirror learns nothing more from the journal, so it ends `owner_lost`
//! once the run has been missing for its checks, instead of leaving its observers waiting for
//! ever, and writes that end into Redis first-wins, so every later reader gets it too (here a
//! third replica whose mirror came back later). The
//! producer's readers got `persisted`: two faults at once (a follower cut off for over a lease
//! and Redis losing its data) split the end, as docs/protocol.md says.

use std::time::Duration;

use serde_json::json;

use crate::journal::{known, start_run};
use crate::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_whose_ended_run_redis_lost_ends_it_owner_lost() {
    // Found by tests/it/chaos.rs (the long profile, SEED=20261).
    let mut redis = RedisServer::start();
    let redis_addr = ([127, 0, 0, 1], redis.port).into();
    let link = FaultProxy::start(redis_addr).await;
    let link_c = FaultProxy::start(redis_addr).await;
    let gate = Gate::default();
    let events = turn(6);
    let be = turn_backend(events.clone(), Some((4, gate.clone()))).await;
    let toml = |id: &str, url: String| {
        format!(
            "[journal]\nurl = \"{url}\"\nreplica_id = \"{id}\"\nlease = \"1s\"\npoll = \"100ms\"\n"
        )
    };
    let a = sidecar(be.addr, &toml("a", redis.url())).await;
    let b = sidecar(be.addr, &toml("b", format!("redis://{}", link.addr))).await;
    let c = sidecar(be.addr, &toml("c", format!("redis://{}", link_c.addr))).await;
    let (run, mut origin) = start_run(&a, "c", 4).await;
    known(&b, "c").await;
    let mut watcher = post(b.addr, "/chat/live", &chat("c")).await;
    let snap = watcher.frame().await.unwrap();
    assert_eq!(snap.json["run_id"], json!(run));
    known(&c, "c").await;
    let mut third = post(c.addr, "/chat/live", &chat("c")).await;
    assert_eq!(third.frame().await.unwrap().json["run_id"], json!(run));

    // B is cut off from Redis (what Redis sends it is dropped, the end's doorbell too) while
    // the run ends on A and A's end is journaled; then Redis loses everything (its connections
    // with it), and B's link comes back.
    link.set(Fault::Blackhole);
    link_c.set(Fault::Blackhole);
    gate.open();
    let rest = within("A's stream ends", origin.frames_to_end()).await;
    assert_eq!(rest.last().unwrap().json["persisted"], json!(true));
    // A's writer is done with the run once it takes it off its reaper list, a lease after its
    // end (it would write the end again into the empty Redis otherwise, and B would get it).
    eventually("A's writer is done with the run", || {
        let keys: Vec<String> = redis.query(&["KEYS", &format!("tj:*:r:{run}:m")]);
        let ended = keys.first().is_some_and(|m| {
            redis
                .query::<Option<String>>(&["HGET", m, "state"])
                .as_deref()
                == Some("ended")
        });
        let lives: Vec<String> = redis.query(&["KEYS", "tj:{rep:a}:runs:*"]);
        let listed = lives.iter().any(|k| {
            let runs: Vec<String> = redis.query(&["SMEMBERS", k]);
            runs.iter().any(|r| r.starts_with(run.as_str()))
        });
        ended && !listed
    })
    .await;
    redis.kill();
    redis.restart();
    link.heal();
    let healed = tokio::time::Instant::now();

    let rest = within("B's observer ends", watcher.frames_to_end()).await;
    let end = rest.last().unwrap();
    assert_eq!(
        (
            end.ty(),
            end.json["persisted"].clone(),
            end.json["reason"].clone()
        ),
        ("STREAM_END", json!(false), json!("owner_lost"))
    );
    // Two checks of the missing run, a lease and a half apart at most, plus a poll; generous
    // for a loaded machine, well short of the harness's limit.
    assert!(
        healed.elapsed() < Duration::from_secs(8),
        "{:?}",
        healed.elapsed()
    );
    let mut state = Reduced::default();
    let last = state.apply_frames(std::slice::from_ref(&snap), 0);
    state.apply_frames(&rest, last);
    assert_eq!(state, Reduced::of(&events[..end.seq() as usize]));
    // B's end is the run's end in Redis now, for every replica that reads the run later.
    let keys: Vec<String> = redis.query(&["KEYS", &format!("tj:*:r:{run}:m")]);
    let end: String = redis.query(&["HGET", &keys[0], "end"]);
    assert!(end.contains("owner_lost"), "{end}");
    // C comes back after that: its mirror is past the events Redis lost, and gets B's end.
    link_c.heal();
    let rest = within("C's observer ends", third.frames_to_end()).await;
    assert_eq!(rest.last().unwrap().json["reason"], json!("owner_lost"));
}
