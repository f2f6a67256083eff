//! The shared journal end to end: two tether replicas on one redis-server of the test's own.
//! A run recorded on replica A is attached, resumed, looked up and stopped through replica B.

mod support;

use serde_json::{json, Value};
use support::*;

/// A replica named `id` in front of `upstream`, journaling to `redis`.
async fn replica(
    upstream: std::net::SocketAddr,
    redis: &RedisServer,
    id: &str,
    extra: &str,
) -> Sidecar {
    let toml = format!(
        "[journal]\nurl = \"{}\"\nreplica_id = \"{id}\"\nlease = \"1s\"\npoll = \"100ms\"\n{extra}",
        redis.url()
    );
    sidecar(upstream, &toml).await
}

/// Starts a run of `chat_id` on `a` and reads it up to seq `upto`; returns its id and client.
async fn start_run(a: &Sidecar, chat_id: &str, upto: u64) -> (String, Resp) {
    let mut r = post(a.addr, "/chat", &chat(chat_id)).await;
    let snap = r.frame().await.unwrap();
    let run = snap.json["run_id"].as_str().unwrap().to_string();
    while upto > 0 && r.frame().await.unwrap().seq() != upto {}
    (run, r)
}

/// Waits until `b` knows the chat's run: the go-live reaches Redis asynchronously.
async fn known(b: &Sidecar, chat_id: &str) {
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
    let redis = RedisServer::start();
    let gate = Gate::default();
    let be = turn_backend(turn(10), Some((5, gate.clone()))).await;
    let a = replica(be.addr, &redis, "a", "").await;
    let b = replica(be.addr, &redis, "b", "").await;
    let (run, _origin) = start_run(&a, "c", 5).await;
    known(&b, "c").await;
    let mut r = post(b.addr, "/chat/live", &chat("c")).await;
    assert_eq!(r.status, 200);
    let snap = r.frame().await.unwrap();
    assert_eq!(snap.ty(), "STREAM_SNAPSHOT");
    assert_eq!(snap.json["run_id"], json!(run));
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
    assert_eq!(b.metric("tether_journal_followers").await, 0.0);
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
    let redis = RedisServer::start();
    let gate = Gate::default();
    let be = turn_backend(turn(10), Some((3, gate.clone()))).await;
    let a = replica(be.addr, &redis, "a", "").await;
    let b = replica(be.addr, &redis, "b", "").await;
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
