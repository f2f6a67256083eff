//! Issue 13's "done means" with real parts, no Docker: two tether replicas on a test-owned
//! redis-server, in front of a scripted backend streaming a slow turn, behind Debian's nginx
//! running the shipped `deploy/nginx.conf` (plain round-robin, no affinity; [`super::nginx`]).
//! A reload mid-turn recovers on whichever replica the balancer picks, every event once; a crash
//! of the producing replica ends its turn `owner_lost` on the survivor within the lease.

use serde_json::json;

use crate::deploy::nginx::{derive, upstream_directives, Nginx};
use crate::deploy::read;
use crate::support::*;

/// The attaches a replica answered from a cursor.
const REPLAY: &str = "tether_attach_total{dialect=\"protocol1\",result=\"replay\"}";

/// Reads `r` up to and including the frame at seq `upto`.
async fn frames_upto(r: &mut Resp, upto: u64) -> Vec<Frame> {
    let mut out = Vec::new();
    while out
        .last()
        .is_none_or(|f: &Frame| f.json["seq"] != json!(upto))
    {
        out.push(r.frame().await.expect("the turn goes on"));
    }
    out
}

/// Each replica's count of attaches answered from a cursor.
async fn replays(replicas: &[Sidecar]) -> Vec<f64> {
    let mut out = Vec::new();
    for r in replicas {
        out.push(r.metric(REPLAY).await);
    }
    out
}

/// The replica that has counted a replay since `before` (there is no readiness signal for a
/// counter: polled).
async fn replayed_by(replicas: &[Sidecar], before: &[f64]) -> usize {
    within("a replica counts the resume", async {
        loop {
            let now = replays(replicas).await;
            if let Some(i) = (0..now.len()).find(|i| now[*i] > before[*i]) {
                return i;
            }
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
    })
    .await
}

#[test]
fn the_shipped_nginx_conf_balances_round_robin_and_only_its_servers_and_port_are_replaced() {
    let shipped = read("deploy/nginx.conf");
    let upstream = upstream_directives(&shipped);
    assert_eq!(
        upstream.iter().filter(|d| *d == "server").count(),
        2,
        "{upstream:?}"
    );
    let replicas = [
        "127.0.0.1:1001".parse().unwrap(),
        "127.0.0.1:1002".parse().unwrap(),
    ];
    let dir = std::path::Path::new("/tmp/x");
    let derived = derive(&shipped, replicas, 4321, dir);
    assert_eq!(upstream_directives(&derived), upstream, "the same upstream");
    assert!(derived.contains("server 127.0.0.1:1001;\n"));
    assert!(derived.contains("server 127.0.0.1:1002;\n"));
    assert!(derived.contains("listen 127.0.0.1:4321;\n"));
    assert!(!derived.contains("tether-a") && !derived.contains("8080"));
    // Every line of the shipped file is still there, but the three replaced.
    for line in shipped.lines().filter(|l| !l.contains("8080")) {
        assert!(derived.lines().any(|d| d == line), "{line:?} kept");
    }
    for affinity in ["ip_hash;", "hash $remote_addr;", "sticky cookie srv;"] {
        let pinned = shipped.replace("keepalive 64;", &format!("keepalive 64;\n{affinity}"));
        let refused = std::panic::catch_unwind(|| derive(&pinned, replicas, 4321, dir));
        assert!(refused.is_err(), "{affinity} must fail the test");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_nginx_round_robin_a_reload_mid_turn_resumes_on_the_other_replica_every_event_once()
{
    let redis = RedisServer::start();
    let gate = Gate::default();
    let events = turn(10);
    let be = turn_backend(events.clone(), Some((5, gate.clone()))).await;
    let replicas = [
        replica(be.addr, &redis, "a", "").await,
        replica(be.addr, &redis, "b", "").await,
    ];
    let nginx = Nginx::start([replicas[0].addr, replicas[1].addr]).await;

    // The turn, through nginx; the tab reloads after seq 3 (its connection reset mid-turn).
    let mut origin = post(nginx.addr, "/chat", &chat("c")).await;
    assert_eq!(origin.status, 200, "{}", nginx.log());
    let mine = frames_upto(&mut origin, 3).await;
    let run = mine[0].json["run_id"]
        .as_str()
        .expect("a run id")
        .to_string();
    let producer = replicas
        .iter()
        .position(|r| r.current_run("c").is_some_and(|run| run.is_producing()))
        .expect("one replica produces the turn");
    origin.kill();
    eventually("the run is journaled", || {
        redis.keys("tj:*:r:*:m").len() == 1
    })
    .await;

    // The resume, on a fresh connection through nginx: round-robin sends it to the other
    // replica. Should it land on the producer after all, it is dropped and sent again.
    let mut tries = 0;
    let (mut resumed, first, served_by) = loop {
        tries += 1;
        assert!(tries <= 4, "nginx sent every resume to the producer");
        let before = replays(&replicas).await;
        let mut r = post(nginx.addr, "/chat/live", &cursor("c", &run, 3)).await;
        assert_eq!(r.status, 200);
        let first = r.frame().await.expect("a replayed frame");
        let by = replayed_by(&replicas, &before).await;
        if by != producer {
            break (r, first, by);
        }
        r.kill();
    };
    assert_ne!(
        served_by, producer,
        "the two requests met different replicas"
    );

    gate.open();
    let mut theirs = vec![first];
    theirs.extend(within("the resumed stream ends", resumed.frames_to_end()).await);
    // Every event exactly once, across the cut: seqs 1-3 before it, 4-10 after.
    let mut seqs = event_seqs(&mine);
    seqs.extend(event_seqs(&theirs));
    assert_eq!(seqs, (1..=events.len() as u64).collect::<Vec<_>>());
    let mut state = Reduced::default();
    let last = state.apply_frames(&mine, 0);
    let last = state.apply_frames(&theirs, last);
    assert_eq!((state, last), (Reduced::of(&events), events.len() as u64));
    let ends: Vec<&Frame> = theirs.iter().filter(|f| f.ty() == "STREAM_END").collect();
    assert_eq!(ends.len(), 1);
    assert_eq!(ends[0].json["persisted"], json!(true));
    assert_eq!(theirs.last().map(Frame::ty), Some("STREAM_END"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_nginx_a_crashed_producer_replica_ends_the_turn_owner_lost_on_the_survivor() {
    let redis = RedisServer::start();
    let gate = Gate::default();
    let be = turn_backend(turn(10), Some((3, gate.clone()))).await;
    // Binaries, so the producer can crash (SIGKILL) as a real replica does.
    let ids = ["a", "b"];
    let mut replicas = ids.map(|id| Binary::start(be.addr, &redis, id));
    let nginx = Nginx::start([replicas[0].addr, replicas[1].addr]).await;

    let mut origin = post(nginx.addr, "/chat", &chat("c")).await;
    assert_eq!(origin.status, 200, "{}", nginx.log());
    let mine = frames_upto(&mut origin, 3).await;
    assert_eq!(event_seqs(&mine), [1, 2, 3]);
    eventually("the run is journaled", || {
        redis.keys("tj:*:r:*:m").len() == 1
    })
    .await;
    let meta = redis.keys("tj:*:r:*:m").remove(0);
    // The producer never waits for Redis: what it streamed reaches the journal just after. A
    // crash before that loses it; this test crashes it once the three events are journaled.
    eventually("the three events are journaled", || {
        redis.stream_head(&meta) == Some(3)
    })
    .await;
    let producer: String = redis.query(&["HGET", &meta, "producer"]);
    let p = ids
        .iter()
        .position(|id| *id == producer)
        .unwrap_or_else(|| panic!("the producer {producer:?} is a replica"));

    replicas[p].kill();
    let killed = tokio::time::Instant::now();
    // The tab's stream breaks with the replica (nginx ends it early, without an end frame).
    let cut = within("the cut stream closes", origin.frames_to_end()).await;
    assert!(cut.iter().all(|f| f.ty() != "STREAM_END"), "{cut:?}");

    // The reload, through nginx: whichever replica nginx tries first, only the survivor can
    // answer (the dead one refuses connections, and nginx passes the attach on); it ends the
    // turn once the producer's lease has lapsed.
    let mut r = post(nginx.addr, "/chat/live", &chat("c")).await;
    assert_eq!(r.status, 200, "{}", nginx.log());
    let frames = within("the survivor's stream ends", r.frames_to_end()).await;
    let waited = killed.elapsed();
    assert_eq!(frames[0].ty(), "STREAM_SNAPSHOT");
    assert_eq!(frames[0].json["events"].as_array().map(Vec::len), Some(3));
    let ends: Vec<&Frame> = frames.iter().filter(|f| f.ty() == "STREAM_END").collect();
    assert_eq!(ends.len(), 1, "{frames:?}");
    assert_eq!(
        (
            ends[0].json["persisted"].clone(),
            ends[0].json["reason"].clone()
        ),
        (json!(false), json!("owner_lost"))
    );
    // The rule is 1.5x the one-second lease plus one follower poll (about 1.6 s). The bound is
    // generous so a loaded machine does not fail it, yet well short of the harness's limit,
    // which a run ended by anything but the lease would reach.
    assert!(
        waited < std::time::Duration::from_secs(8),
        "owner_lost after {waited:?}"
    );
    gate.open();
}
