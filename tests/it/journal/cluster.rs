//! The journal on a Redis Cluster of the test's own (three masters on free ports): the
//! scenarios that exercise the topology, through two replicas with `[journal] cluster = true`
//! and every node as a seed. A chat's keys and doorbells share one slot; doorbells and control
//! messages travel by sharded pub/sub. Every replica's liveness refresh is a pipeline over two
//! slots (its own tag and `tj:leases`), so each test also goes through the split by slot; one
//! test sends a pipeline over every shard to the split itself and checks the answers' order.

use redis::Value;

use crate::journal::{attach_mid_run, killed_producer, stop_through_the_other_replica};
use crate::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_attach_mid_run_gets_snapshot_live_tail_and_one_end() {
    attach_mid_run(&RedisCluster::start()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_a_stop_through_the_other_replica_reaches_the_producer() {
    stop_through_the_other_replica(&RedisCluster::start()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_a_killed_producer_has_its_runs_ended_owner_lost_within_the_lease() {
    killed_producer(&RedisCluster::start()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_the_runs_of_many_chats_land_on_every_shard_and_each_is_followed() {
    let redis = RedisCluster::start();
    let gate = Gate::default();
    let be = turn_backend(turn(6), Some((3, gate.clone()))).await;
    let a = replica(be.addr, &redis, "a", "").await;
    let b = replica(be.addr, &redis, "b", "").await;
    // Twelve live runs of twelve chats: their tags spread them over the three shards.
    let chats: Vec<String> = (0..12).map(|i| format!("chat-{i}")).collect();
    let mut origins = Vec::new();
    for c in &chats {
        let mut r = post(a.addr, "/chat", &chat(c)).await;
        while r.frame().await.unwrap().seq() != 3 {}
        origins.push(r);
    }
    eventually("every run is journaled", || {
        redis.keys("tj:*:r:*:m").len() == chats.len()
    })
    .await;
    for node in &redis.nodes {
        assert!(
            !node.keys("tj:*:r:*:m").is_empty(),
            "every shard holds runs (node {})",
            node.port
        );
    }
    let mut followers = Vec::new();
    for c in &chats {
        let mut r = post(b.addr, "/chat/live", &chat(c)).await;
        assert_eq!(r.frame().await.unwrap().ty(), "STREAM_SNAPSHOT", "{c}");
        followers.push(r);
    }
    gate.open();
    for (c, mut r) in chats.iter().zip(followers) {
        let rest = within("B's stream ends", r.frames_to_end()).await;
        let end = rest.last().unwrap();
        assert_eq!(
            (end.ty(), end.json["persisted"].clone()),
            ("STREAM_END", serde_json::json!(true)),
            "{c}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_a_pipeline_over_several_slots_answers_in_order_with_each_error_in_place() {
    let redis = RedisCluster::start();
    let file = parse_file(&journal_table(&redis, "t")).expect("a journal table");
    let cfg = Config::from_parts(file, &Flags::default())
        .expect("a configuration")
        .journal
        .expect("the journal");
    // Tags {b}, {c} and {a}/{d} live on the first, second and third shard: parts of several
    // commands and of one, an error inside a part and one alone, a keyless command.
    let mut p = redis::pipe();
    p.cmd("SET").arg("tp:{a}").arg("1");
    p.cmd("INCR").arg("tp:{b}");
    p.cmd("HSET").arg("tp:{a}").arg("f").arg("v"); // WRONGTYPE: a string
    p.cmd("RPUSH").arg("tp:{c}").arg("x");
    p.cmd("GET").arg("tp:{a}");
    p.cmd("INCRBY").arg("tp:{d}").arg("x"); // not an integer, alone on its slot
    p.cmd("PING");
    p.cmd("INCR").arg("tp:{b}");
    let answers = tether::replica::pipeline_answers(&cfg, &p)
        .await
        .expect("the pipeline is answered");
    let shown: Vec<String> = answers
        .iter()
        .map(|a| match a {
            Ok(Value::Okay) => "OK".to_string(),
            Ok(Value::Int(i)) => i.to_string(),
            Ok(Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
            Ok(Value::SimpleString(s)) => s.clone(),
            Ok(v) => format!("{v:?}"),
            Err(e) => format!("error {}", e.code().unwrap_or("?")),
        })
        .collect();
    assert_eq!(
        shown,
        [
            "OK",
            "1",
            "error WRONGTYPE",
            "1",
            "1",
            "error ERR",
            "PONG",
            "2"
        ]
    );
    for node in &redis.nodes {
        assert!(
            !node.keys("tp:*").is_empty(),
            "the pipeline wrote to every shard (node {})",
            node.port
        );
    }
}
