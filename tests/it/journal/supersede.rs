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
