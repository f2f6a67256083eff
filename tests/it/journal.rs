//! The shared journal end to end: two tether replicas on one redis-server of the test's own.
//! A run recorded on replica A is attached, resumed, looked up and stopped through replica B.
//! The scenarios that exercise the topology (attach, stop, a killed producer) run on a Redis
//! Replica too ([`cluster`]). The replicas themselves (in-process, or the binary for a crash) are
//! `support`'s.

mod cluster;
mod dialects;
mod doorbells;
mod fencing;
mod lost;
mod mirrors;
mod one_end;
mod one_end_lost;
mod owners;
mod rebase;
mod retries;
mod supersede;
mod tls;

use crate::support::*;
use serde_json::{json, Value};

/// Starts a run of `chat_id` on `a` and reads it up to seq `upto`; returns its id and client.
async fn start_run(a: &Sidecar, chat_id: &str, upto: u64) -> (String, Resp) {
    let mut r = post(a.addr, "/chat", &chat(chat_id)).await;
    let snap = r.frame().await.unwrap();
    let run = snap.json["run_id"].as_str().unwrap().to_string();
    while upto > 0 && r.frame().await.unwrap().seq() != upto {}
    (run, r)
}

/// Waits until `b` knows the chat's run: the go-live reaches Redis asynchronously.
pub(crate) async fn known(b: &Sidecar, chat_id: &str) {
    let path = format!("/chat/run?chat_id={chat_id}");
    eventually_async("the other replica sees the run", || async {
        request(b.addr, "GET", &path, &[], b"").await.status == 200
    })
    .await;
}

fn ends(frames: &[Frame]) -> usize {
    frames.iter().filter(|f| f.ty() == "STREAM_END").count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attach_on_the_other_replica_mid_run_gets_snapshot_live_tail_and_one_end() {
    attach_mid_run(&RedisServer::start()).await;
}

/// Attach on B mid-run: a snapshot, the live tail, one end; B follows through its subscription
/// to the run's doorbell, both replicas listen on their control channels, and both report the
/// journal ready.
pub(crate) async fn attach_mid_run(redis: &impl JournalRedis) {
    let gate = Gate::default();
    let be = turn_backend(turn(10), Some((5, gate.clone()))).await;
    let a = replica(be.addr, redis, "a", "").await;
    let b = replica(be.addr, redis, "b", "").await;
    let (run, _origin) = start_run(&a, "c", 5).await;
    known(&b, "c").await;
    let mut r = post(b.addr, "/chat/live", &chat("c")).await;
    assert_eq!(r.status, 200);
    let snap = r.frame().await.unwrap();
    assert_eq!(snap.ty(), "STREAM_SNAPSHOT");
    assert_eq!(snap.json["run_id"], json!(run));
    eventually(
        "the doorbell and both control channels are subscribed",
        || {
            let channels = redis.channels("tj:*");
            let bell = format!("r:{run}:n");
            channels.iter().any(|c| c.ends_with(&bell))
                && ["a", "b"]
                    .iter()
                    .all(|id| channels.contains(&format!("tj:{{rep:{id}}}:ctl")))
        },
    )
    .await;
    gate.open();
    let rest = within("B's stream ends", r.frames_to_end()).await;
    let mut state = Reduced::default();
    let last = state.apply_frames(std::slice::from_ref(&snap), 0);
    let last = state.apply_frames(&rest, last);
    assert_eq!(state, Reduced::of(&turn(10)));
    assert_eq!(last, turn(10).len() as u64);
    assert_eq!(ends(&rest), 1);
    let end = rest.last().unwrap();
    assert_eq!(
        (end.ty(), end.json["persisted"].clone()),
        ("STREAM_END", json!(true))
    );
    // The follower stops once its mirror has ended (after the observer got the end).
    eventually_async("B's follower stops", || async {
        b.metric("tether_journal_followers").await == 0.0
    })
    .await;
    for replica in [&a, &b] {
        let mut r = request(replica.admin, "GET", "/readyz", &[], b"").await;
        assert_eq!(r.status, 200);
        assert_eq!(&r.body_to_end().await[..], b"ready\njournal: ok\n");
        assert_eq!(replica.metric("tether_journal_degraded").await, 0.0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cursor_resumes_on_the_other_replica_as_a_replay() {
    let redis = RedisServer::start();
    let gate = Gate::default();
    let events = turn(10);
    let be = turn_backend(events.clone(), Some((5, gate.clone()))).await;
    let a = replica(be.addr, &redis, "a", "").await;
    let b = replica(be.addr, &redis, "b", "").await;
    let (run, _origin) = start_run(&a, "c", 5).await;
    known(&b, "c").await;
    let mut r = post(b.addr, "/chat/live", &cursor("c", &run, 3)).await;
    let first = r.frame().await.unwrap();
    assert_eq!(
        (first.ty(), first.seq()),
        ("STREAM_EVENT", 4),
        "a replay, not a snapshot"
    );
    gate.open();
    let mut frames = vec![first];
    frames.extend(within("B's stream ends", r.frames_to_end()).await);
    let mut state = Reduced::of(&events[..3]);
    let last = state.apply_frames(&frames, 3);
    assert_eq!((state, last), (Reduced::of(&events), events.len() as u64));
    assert_eq!(ends(&frames), 1);
    assert_eq!(
        b.metric("tether_attach_total{dialect=\"protocol1\",result=\"replay\"}")
            .await,
        1.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completed_runs_answer_on_the_other_replica_as_on_their_own() {
    let redis = RedisServer::start();
    let be = backend(|r: &Req| {
        let v: Value = serde_json::from_slice(&r.body).unwrap();
        let mut events = vec![json!({"type":"RUN_STARTED"})];
        if v["chat_id"] == "saved" {
            events.push(json!({"type":"RUN_FINISHED"}));
        }
        scripted_turn(&events, None)
    })
    .await;
    let a = replica(be.addr, &redis, "a", "").await;
    let b = replica(be.addr, &redis, "b", "").await;
    post(a.addr, "/chat", &chat("saved"))
        .await
        .frames_to_end()
        .await;
    let lost = post(a.addr, "/chat", &chat("lost"))
        .await
        .frames_to_end()
        .await;
    let run = lost[0].json["run_id"].as_str().unwrap().to_string();
    // The writer is asynchronous: the end reaches Redis shortly after the local stream.
    let mut status = Value::Null;
    eventually_async("the end is journaled", || async {
        let mut r = request(b.addr, "GET", "/chat/run?chat_id=lost", &[], b"").await;
        if r.status != 200 {
            return false;
        }
        let v: Value = serde_json::from_slice(&r.body_to_end().await).unwrap();
        v["status"] == "completed"
    })
    .await;
    let mut r = request(b.addr, "GET", "/chat/run?chat_id=lost", &[], b"").await;
    status = serde_json::from_slice::<Value>(&r.body_to_end().await).unwrap_or(status);
    assert_eq!(status["run_id"], json!(run));
    assert_eq!(
        (status["persisted"].clone(), status["seq"].clone()),
        (json!(false), json!(1))
    );
    let f = post(b.addr, "/chat/live", &chat("lost"))
        .await
        .frames_to_end()
        .await;
    assert_eq!(
        f.iter().map(Frame::ty).collect::<Vec<_>>(),
        ["STREAM_SNAPSHOT", "STREAM_END"]
    );
    assert_eq!(f[0].json["events"], json!([{"type":"RUN_STARTED"}]));
    eventually_async("the saved run is journaled", || async {
        post(b.addr, "/chat/live", &chat("saved")).await.status == 204
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_through_the_other_replica_reaches_the_producer() {
    stop_through_the_other_replica(&RedisServer::start()).await;
}

/// A stop through B: the durable flag and a message on A's control channel stop A's run.
pub(crate) async fn stop_through_the_other_replica(redis: &impl JournalRedis) {
    let gate = Gate::default();
    let be = turn_backend(turn(10), Some((3, gate.clone()))).await;
    let a = replica(be.addr, redis, "a", "").await;
    let b = replica(be.addr, redis, "b", "").await;
    let (run, mut origin) = start_run(&a, "c", 3).await;
    known(&b, "c").await;
    let mut r = post(b.addr, "/chat/stop", &json!({"chat_id": "c"})).await;
    let v: Value = serde_json::from_slice(&r.body_to_end().await).unwrap();
    assert_eq!(r.status, 200, "{v}");
    assert_eq!(
        (v["run_id"].clone(), v["execution_stopped"].clone()),
        (json!(run), json!(true))
    );
    let rest = within("A's requester is ended", origin.frames_to_end()).await;
    let end = rest.last().unwrap();
    assert_eq!(end.ty(), "STREAM_END");
    assert_eq!(
        (end.json["persisted"].clone(), end.json["reason"].clone()),
        (json!(false), json!("cancelled"))
    );
    assert!(!a.current_run("c").unwrap().is_producing());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_owner_gets_the_unknown_chat_answer_on_every_replica() {
    let redis = RedisServer::start();
    let gate = Gate::default();
    let be = turn_backend(turn(4), Some((2, gate.clone()))).await;
    let auth = "[auth]\nsubject = \"header:x-user\"\nsecret = \"shared-secret\"\n";
    let a = replica(be.addr, &redis, "a", auth).await;
    let b = replica(be.addr, &redis, "b", auth).await;
    let alice = [("x-user", "alice")];
    let bob = [("x-user", "bob")];
    let body = serde_json::to_vec(&chat("c")).unwrap();
    let mut origin = request(a.addr, "POST", "/chat", &alice, &body).await;
    let run = origin.frame().await.unwrap().json["run_id"].clone();
    eventually_async("B sees alice's run", || async {
        request(b.addr, "GET", "/chat/run?chat_id=c", &alice, b"")
            .await
            .status
            == 200
    })
    .await;
    let mut mine = request(b.addr, "GET", "/chat/run?chat_id=c", &alice, b"").await;
    let v: Value = serde_json::from_slice(&mine.body_to_end().await).unwrap();
    assert_eq!(v["run_id"], run);
    let theirs = request(b.addr, "GET", "/chat/run?chat_id=c", &bob, b"").await;
    assert_eq!(theirs.status, 204);
    let attach = request(b.addr, "POST", "/chat/live", &bob, &body).await;
    assert_eq!(attach.status, 204);
    gate.open();
}

/// Reads `r` up to and including the frame at seq `upto`.
async fn frames_upto(r: &mut Resp, upto: u64) -> Vec<Frame> {
    let mut out = Vec::new();
    loop {
        let f = r.frame().await.unwrap();
        let seq = f.seq();
        out.push(f);
        if seq == upto {
            return out;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_down_mid_run_keeps_the_local_stream_whole_and_gives_every_reader_one_end() {
    let mut redis = RedisServer::start();
    let gate = Gate::default();
    let events = turn(10);
    let be = turn_backend(events.clone(), Some((5, gate.clone()))).await;
    let a = replica(be.addr, &redis, "a", "").await;
    let b = replica(be.addr, &redis, "b", "").await;
    let mut origin = post(a.addr, "/chat", &chat("c")).await;
    let mut mine = frames_upto(&mut origin, 5).await;
    known(&b, "c").await;
    let mut theirs = post(b.addr, "/chat/live", &chat("c")).await;
    let mut seen = vec![theirs.frame().await.unwrap()];
    assert_eq!(seen[0].ty(), "STREAM_SNAPSHOT");

    redis.kill();
    gate.open();
    // The producer never waits for Redis for its events: A's requester gets every event. Its
    // end is Redis's to decide (one end for every reader); with Redis down past A's lease, any
    // replica's reaper may end the run `owner_lost` once Redis is back, so that is A's end too,
    // within about a lease, and the end A writes when Redis returns.
    mine.extend(within("A's stream ends with Redis down", origin.frames_to_end()).await);
    let mut state = Reduced::default();
    let last = state.apply_frames(&mine, 0);
    assert_eq!((state, last), (Reduced::of(&events), events.len() as u64));
    assert_eq!(ends(&mine), 1);
    let end = mine.last().unwrap();
    assert_eq!(
        (end.json["persisted"].clone(), end.json["reason"].clone()),
        (json!(false), json!("owner_lost"))
    );
    eventually_async("A's end waits for Redis", || async {
        a.metric("tether_journal_pending_ends").await == 1.0
    })
    .await;
    assert_eq!(a.metric("tether_journal_degraded").await, 1.0);

    // Redis comes back empty: A re-bases the ended run and writes the end its readers got; B
    // re-seeds and gets the same end.
    redis.restart();
    seen.extend(
        within(
            "B's observer ends after Redis returns",
            theirs.frames_to_end(),
        )
        .await,
    );
    let mut state = Reduced::default();
    let last = state.apply_frames(&seen, 0);
    assert_eq!((state, last), (Reduced::of(&events), events.len() as u64));
    assert_eq!(ends(&seen), 1);
    let end = seen.last().unwrap();
    assert_eq!(
        (
            end.ty(),
            end.json["persisted"].clone(),
            end.json["reason"].clone(),
            end.json["seq"].clone()
        ),
        (
            "STREAM_END",
            json!(false),
            json!("owner_lost"),
            mine.last().unwrap().json["seq"].clone()
        )
    );
    assert_eq!(a.metric("tether_journal_pending_ends").await, 0.0);
    // A later attach on B gets the same end.
    let mut later = post(b.addr, "/chat/live", &chat("c")).await;
    let frames = within("a later attach on B", later.frames_to_end()).await;
    assert_eq!(frames.last().unwrap().json["reason"], json!("owner_lost"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_producer_replica_has_its_runs_ended_owner_lost_within_one_and_a_half_leases() {
    killed_producer(&RedisServer::start()).await;
}

/// How long after a kill a run may take to end `owner_lost` (see [`killed_producer`]).
pub(crate) const LEASE_BOUND: std::time::Duration = std::time::Duration::from_secs(8);

/// SIGKILL of the producing replica (the binary): B's follower ends the watched run and B's
/// reaper the unwatched one `owner_lost`, within 1.5x the lease.
pub(crate) async fn killed_producer(redis: &impl JournalRedis) {
    let gate = Gate::default();
    let be = turn_backend(turn(10), Some((3, gate.clone()))).await;
    let mut a = Binary::start(be.addr, redis, "a");
    let b = replica(be.addr, redis, "b", "").await;
    // Two runs on A: "c" is watched from B, "d" by nobody (the replica-wide reaper ends it).
    let mut watched = post(a.addr, "/chat", &chat("c")).await;
    frames_upto(&mut watched, 3).await;
    let mut unwatched = post(a.addr, "/chat", &chat("d")).await;
    frames_upto(&mut unwatched, 3).await;
    known(&b, "c").await;
    // "d" reaches Redis asynchronously too (looked at directly: a lookup through B follows it).
    eventually("both runs are journaled", || {
        redis.keys("tj:*:r:*:m").len() == 2
    })
    .await;
    let mut r = post(b.addr, "/chat/live", &chat("c")).await;
    assert_eq!(r.frame().await.unwrap().ty(), "STREAM_SNAPSHOT");

    a.kill();
    let killed = tokio::time::Instant::now();
    let rest = within("B's observer ends", r.frames_to_end()).await;
    let waited = killed.elapsed();
    let end = rest.last().unwrap();
    assert_eq!(
        (
            end.ty(),
            end.json["persisted"].clone(),
            end.json["reason"].clone()
        ),
        ("STREAM_END", json!(false), json!("owner_lost"))
    );
    assert_eq!(ends(&rest), 1);
    // The rule is 1.5x the one-second lease plus one follower poll (about 1.6 s). The bound is
    // generous so a loaded machine does not fail it, yet well short of the harness's limit,
    // which a run ended by anything but the lease would reach.
    assert!(waited < LEASE_BOUND, "owner_lost after {waited:?}");
    let lost = "tether_runs_finished_total{outcome=\"owner_lost\"}";
    eventually_async("both of A's runs are reaped", || async {
        b.metric(lost).await == 2.0
    })
    .await;
    assert!(killed.elapsed() < LEASE_BOUND);
    // A later attach on B gets the end the reaper wrote.
    let f = post(b.addr, "/chat/live", &chat("d"))
        .await
        .frames_to_end()
        .await;
    assert_eq!(
        f.iter().map(Frame::ty).collect::<Vec<_>>(),
        ["STREAM_SNAPSHOT", "STREAM_END"]
    );
    assert_eq!(f[1].json["reason"], json!("owner_lost"));
    assert_eq!(f[0].json["events"].as_array().map(Vec::len), Some(3));
    gate.open();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_flight_refuses_a_second_turn_on_the_other_replica_while_the_run_is_live() {
    let redis = RedisServer::start();
    let gate = Gate::default();
    let be = turn_backend(turn(6), Some((2, gate.clone()))).await;
    let routes =
        "[[routes]]\nmethods=[\"POST\"]\npath=\"/chat\"\nkind=\"record\"\nsingle_flight=true\n";
    let a = replica(be.addr, &redis, "a", routes).await;
    let b = replica(be.addr, &redis, "b", routes).await;
    let (run, mut origin) = start_run(&a, "c", 2).await;
    eventually("the run is journaled", || {
        redis.query::<Vec<String>>(&["KEYS", "tj:*:r:*:m"]).len() == 1
    })
    .await;
    let mut r = post(b.addr, "/chat", &chat("c")).await;
    let v: Value = serde_json::from_slice(&r.body_to_end().await).unwrap();
    assert_eq!(r.status, 409, "{v}");
    assert_eq!(
        (v["error"].clone(), v["run_id"].clone()),
        (json!("turn_already_running"), json!(run))
    );
    assert_eq!(
        be.requests.lock().len(),
        1,
        "the second turn is not forwarded"
    );
    gate.open();
    within("A's run ends", origin.frames_to_end()).await;
    // Once the run has ended (in Redis too), B takes the next turn.
    eventually_async("B admits the next turn", || async {
        let mut r = post(b.addr, "/chat", &chat("c")).await;
        let ok = r.status == 200;
        r.body_to_end().await;
        ok
    })
    .await;
}

/// The harness's own Redis survives a port taken between picking it and redis-server binding
/// it (another test's connection can get it): redis-server exits, and the next pick is used.
#[test]
fn a_test_redis_whose_port_was_taken_starts_on_the_next_one_picked() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken_port = taken.local_addr().unwrap().port();
    let mut first = Some(taken_port);
    let redis = RedisServer::start_on(|| (first.take().unwrap_or_else(free_port), Vec::new()));
    assert_ne!(redis.port, taken_port);
    assert_eq!(redis.query::<String>(&["PING"]), "PONG");
}
