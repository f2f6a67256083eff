//! The journal on a Redis Cluster of the test's own (three masters on free ports): the
//! scenarios that exercise the topology, through two replicas with `[journal] cluster = true`
//! and every node as a seed. A chat's keys and doorbells share one slot; doorbells and control
//! messages travel by sharded pub/sub. Every replica's liveness refresh is a pipeline over two
//! slots (its own tag and `tj:leases`), so each test also goes through the split by slot.

use crate::support::*;
use crate::{attach_mid_run, killed_producer, stop_through_the_other_replica};

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
