//! One end for every reader when the producer's readers got their end before another replica
//! could read it from Redis (found by the long chaos profile, seeds 3901 and 3902): a run that
//! ended before it was first written (its replica cut off from Redis, or Redis paused) goes
//! into Redis already ended, so no reaper can end it `owner_lost` between its go-live and its
//! end; and an end Redis lost (restarted empty) before a follower read it is written again by
//! the producer.

use std::time::Duration;

use serde_json::json;

use super::one_end::{end_of, meta_key, reap, Via};
use crate::journal::{known, start_run};
use crate::support::*;

fn persisted() -> (String, serde_json::Value, serde_json::Value) {
    ("STREAM_END".into(), json!(true), serde_json::Value::Null)
}

/// The run's meta `state` in Redis, once it is there.
fn state(redis: &RedisServer, run: &str) -> Option<String> {
    let keys: Vec<String> = redis.query(&["KEYS", &format!("tj:*:r:{run}:m")]);
    let m = keys.into_iter().next()?;
    redis.query(&["HGET", &m, "state"])
}

/// How A is kept from Redis while its run starts and ends.
#[derive(Clone, Copy)]
enum Cut {
    /// A's link holds what A sends (a partition of A's Redis connection).
    Stalled,
    /// Redis is stopped (SIGSTOP), every replica's calls queued in its socket.
    Paused,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_ended_while_its_replica_was_cut_off_goes_into_redis_ended() {
    ended_before_go_live(Cut::Stalled).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_ended_while_redis_was_paused_goes_into_redis_ended() {
    ended_before_go_live(Cut::Paused).await;
}

fn signal(redis: &RedisServer, sig: libc::c_int) {
    let pid = libc::pid_t::try_from(redis.pid().expect("redis runs")).unwrap();
    assert_eq!(unsafe { libc::kill(pid, sig) }, 0);
}

/// A run starts and ends while A cannot reach Redis: its go-live cannot be sent, so A's reader
/// gets the end A decided (no other replica knows the run). When A reaches Redis again, the
/// run must go there already ended: had it gone live first, a reaper (A's lease lapsed while
/// it was cut off) could end it `owner_lost` before A's end, and B's readers would get that.
async fn ended_before_go_live(cut: Cut) {
    let redis = RedisServer::start();
    let link = FaultProxy::start(([127, 0, 0, 1], redis.port).into()).await;
    let be = turn_backend(turn(6), None).await;
    let a = replica(be.addr, &Via(link.addr), "a", "").await;
    let b = replica(be.addr, &redis, "b", "").await;
    // A warm-up turn: A's connection to Redis is up.
    let (_, mut warm) = start_run(&a, "warm", 0).await;
    within("the warm-up turn", warm.frames_to_end()).await;

    match cut {
        Cut::Stalled => link.set(Fault::Stall),
        Cut::Paused => signal(&redis, libc::SIGSTOP),
    }
    let mut origin = post(a.addr, "/chat", &chat("c")).await;
    let frames = within("A's stream", origin.frames_to_end()).await;
    let run = frames[0].json["run_id"].as_str().unwrap().to_string();
    assert_eq!(end_of(&frames), persisted(), "A's reader");

    // A comes back slowly: its calls go one round trip after another. The test is the reaper
    // that finds the run live in Redis and ends it `owner_lost` at once.
    link.set(Fault::Latency(Duration::from_millis(300)));
    if let Cut::Paused = cut {
        signal(&redis, libc::SIGCONT);
    }
    let mut reaped = false;
    let seen = within("the run is in Redis", async {
        loop {
            if let Some(s) = state(&redis, &run) {
                break s;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await;
    if seen == "live" {
        reap(&redis, &run);
        reaped = true;
    }
    eventually("the run is ended in Redis", || {
        state(&redis, &run).as_deref() == Some("ended")
    })
    .await;
    let mut late = post(b.addr, "/chat/live", &cursor("c", &run, 0)).await;
    let frames = within("B's reader", late.frames_to_end()).await;
    assert_eq!(end_of(&frames), persisted(), "a reader on B");
    assert!(
        !reaped,
        "the run was live in Redis after A's reader got its end"
    );
    let end: String = redis.query(&["HGET", &meta_key(&redis, &run), "end"]);
    assert!(end.contains("\"persisted\":true"), "{end}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_end_redis_lost_before_a_follower_read_it_is_written_again() {
    let mut redis = RedisServer::start();
    let link = FaultProxy::start(([127, 0, 0, 1], redis.port).into()).await;
    let gate = Gate::default();
    let events = turn(6);
    let be = turn_backend(events.clone(), Some((4, gate.clone()))).await;
    let a = replica(be.addr, &redis, "a", "").await;
    let b = replica(be.addr, &Via(link.addr), "b", "").await;
    let (run, mut origin) = start_run(&a, "c", 4).await;
    known(&b, "c").await;
    let mut watcher = post(b.addr, "/chat/live", &chat("c")).await;
    let snap = watcher.frame().await.unwrap();
    assert_eq!(snap.json["run_id"], json!(run));

    // B hears nothing more from Redis (the end's doorbell neither) while the run ends on A and
    // A's readers get the end Redis took; then Redis loses everything, and B's link is back.
    link.set(Fault::Blackhole);
    gate.open();
    let rest = within("A's stream ends", origin.frames_to_end()).await;
    assert_eq!(end_of(&rest), persisted(), "A's reader");
    redis.kill();
    redis.restart();
    link.heal();

    // A writes the run again, ended as its readers were told: B's readers get that end.
    let rest = within("B's observer ends", watcher.frames_to_end()).await;
    let end = rest.last().unwrap();
    assert_eq!(end_of(&rest), persisted(), "B's reader");
    let mut state = Reduced::default();
    let last = state.apply_frames(std::slice::from_ref(&snap), 0);
    state.apply_frames(&rest, last);
    assert_eq!(state, Reduced::of(&events[..end.seq() as usize]));
    assert_eq!(end.seq(), events.len() as u64);
    for (name, s) in [("A", &a), ("B", &b)] {
        let mut late = post(s.addr, "/chat/live", &cursor("c", &run, 0)).await;
        let frames = within("a late reader's stream", late.frames_to_end()).await;
        assert_eq!(end_of(&frames), persisted(), "a late reader on {name}");
    }
}
