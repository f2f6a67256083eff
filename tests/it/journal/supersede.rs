//! Supersession across replicas: a new turn on B for a chat whose run A produces ends that run
//! `superseded` everywhere, pointing at the new run; B's observer of the old run gets that end.

use serde_json::json;

use crate::journal::{ends, known, start_run};
use crate::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_turn_on_the_other_replica_supersedes_the_run_for_every_observer() {
    let redis = RedisServer::start();
    let gate = Gate::default();
    let be = turn_backend(turn(10), Some((3, gate.clone()))).await;
    let a = replica(be.addr, &redis, "a", "").await;
    let b = replica(be.addr, &redis, "b", "").await;
    let (old, mut origin) = start_run(&a, "c", 3).await;
    known(&b, "c").await;
    let mut watcher = post(b.addr, "/chat/live", &chat("c")).await;
    assert_eq!(watcher.frame().await.unwrap().json["run_id"], json!(old));

    let mut next = post(b.addr, "/chat", &chat("c")).await;
    assert_eq!(next.status, 200);
    let new = next.frame().await.unwrap().json["run_id"].clone();
    assert_ne!(new, json!(old));
    for (who, r) in [
        ("B's observer", &mut watcher),
        ("A's requester", &mut origin),
    ] {
        let rest = within(who, r.frames_to_end()).await;
        assert_eq!(ends(&rest), 1, "{who}");
        let end = rest.last().unwrap();
        assert_eq!(
            (
                end.ty(),
                end.json["superseded"].clone(),
                end.json["next_run_id"].clone()
            ),
            ("STREAM_END", json!(true), new.clone()),
            "{who}"
        );
    }
    gate.open();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_go_live_of_an_earlier_turn_does_not_supersede_the_chats_newer_run() {
    // Found by tests/it/chaos.rs (the long profile, SEED=20261, Redis latency on A). A's
    // go-live of turn 1 is held on its Redis link while the turn completes locally (its client
    // got persisted:true); the chat's next turn goes live on B meanwhile. When A's link
    // delivers, the go-live (mode `live`, expecting whatever run the chat's pointer names by
    // then) supersedes turn 2's live run: B's requester gets `superseded` pointing at turn 1.
    let Stalled {
        redis,
        link,
        gate,
        be: _be,
        a,
        b,
    } = Stalled::start(2).await;
    let first = post(
        a.addr,
        "/chat",
        &json!({"chat_id": "c", "protocol": 1, "turn": 1}),
    )
    .await
    .frames_to_end()
    .await;
    assert_eq!(first.last().unwrap().json["persisted"], json!(true));
    let run1 = first[0].json["run_id"].clone();
    let mut second = post(
        b.addr,
        "/chat",
        &json!({"chat_id": "c", "protocol": 1, "turn": 2}),
    )
    .await;
    let run2 = second.frame().await.unwrap().json["run_id"].clone();
    eventually("turn 2 is live in the journal", || {
        let keys: Vec<String> = redis.query(&["KEYS", "tj:*:chat"]);
        keys.first().is_some_and(|k| {
            redis
                .query::<Option<String>>(&["HGET", k, "run"])
                .map(serde_json::Value::from)
                == Some(run2.clone())
        })
    })
    .await;
    link.heal();
    // A's go-live lands now; turn 2's run must go on (its upstream is held at the gate).
    let early = tokio::time::timeout(std::time::Duration::from_secs(3), async {
        loop {
            match second.frame().await {
                Some(f) if f.ty() == "STREAM_END" => return f,
                Some(_) => {}
                None => panic!("turn 2's stream broke off"),
            }
        }
    })
    .await;
    gate.open();
    if let Ok(end) = early {
        panic!(
            "turn 2's run ended while its upstream goes on (turn 1's run is {run1}): {}",
            end.json
        );
    }
    let rest = within("turn 2", second.frames_to_end()).await;
    let end = rest.last().unwrap();
    assert_eq!(
        (
            end.ty(),
            end.json["persisted"].clone(),
            end.json["superseded"].clone()
        ),
        ("STREAM_END", json!(true), json!(false))
    );
    // The chat stays on turn 2 for every replica: turn 1's late go-live did not take it.
    let mut status = request(b.addr, "GET", "/chat/run?chat_id=c", &[], b"").await;
    let v: serde_json::Value = serde_json::from_slice(&status.body_to_end().await).unwrap();
    assert_eq!(
        (v["run_id"].clone(), v["persisted"].clone()),
        (run2, json!(true))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_still_producing_run_whose_go_live_lands_late_ends_superseded_by_the_chats_newer_run() {
    // As above, but turn 1 is still producing (its upstream held at a gate) when its go-live
    // reaches Redis: it ends superseded by turn 2, as it would had its go-live landed in time.
    let Stalled {
        redis: _redis,
        link,
        gate,
        be: _be,
        a,
        b,
    } = Stalled::start(1).await;
    let mut first = post(
        a.addr,
        "/chat",
        &json!({"chat_id": "c", "protocol": 1, "turn": 1}),
    )
    .await;
    let run1 = first.frame().await.unwrap().json["run_id"].clone();
    let second = post(
        b.addr,
        "/chat",
        &json!({"chat_id": "c", "protocol": 1, "turn": 2}),
    )
    .await
    .frames_to_end()
    .await;
    let run2 = second[0].json["run_id"].clone();
    assert_ne!(run1, run2);
    assert_eq!(second.last().unwrap().json["persisted"], json!(true));
    link.heal();
    let rest = within("turn 1", first.frames_to_end()).await;
    gate.open();
    let end = rest.last().unwrap();
    assert_eq!(
        (
            end.ty(),
            end.json["superseded"].clone(),
            end.json["next_run_id"].clone()
        ),
        ("STREAM_END", json!(true), run2.clone())
    );
    assert_eq!(ends(&rest), 1);
    let mut status = request(b.addr, "GET", "/chat/run?chat_id=c", &[], b"").await;
    let v: serde_json::Value = serde_json::from_slice(&status.body_to_end().await).unwrap();
    assert_eq!(v["run_id"], run2);
}

/// Two replicas on one Redis, A's link to it stalled: a backend whose turn `held` waits at a
/// gate after two events (every other turn runs through).
struct Stalled {
    redis: RedisServer,
    link: FaultProxy,
    gate: Gate,
    be: Backend,
    a: Sidecar,
    b: Sidecar,
}

impl Stalled {
    async fn start(held: u64) -> Stalled {
        let redis = RedisServer::start();
        let link = FaultProxy::start(([127, 0, 0, 1], redis.port).into()).await;
        let gate = Gate::default();
        let g = gate.clone();
        let be = backend(move |r: &Req| {
            let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
            match v["turn"].as_u64() {
                Some(n) if n == held => scripted_turn(&turn(4), Some((2, &g))),
                _ => scripted_turn(&turn(4), None),
            }
        })
        .await;
        let toml = |id: &str, url: String| {
            format!(
                "[journal]\nurl = \"{url}\"\nreplica_id = \"{id}\"\nlease = \"1s\"\npoll = \"100ms\"\n"
            )
        };
        let a = sidecar(be.addr, &toml("a", format!("redis://{}", link.addr))).await;
        let b = sidecar(be.addr, &toml("b", redis.url())).await;
        link.set(Fault::Stall);
        Stalled {
            redis,
            link,
            gate,
            be,
            a,
            b,
        }
    }
}
