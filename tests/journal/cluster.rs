//! The journal on a Redis Cluster of the test's own (three masters on free ports): the
//! scenarios that exercise the topology, through two replicas with `[journal] cluster = true`
//! and every node as a seed. A chat's keys and doorbells share one slot; doorbells and control
//! messages travel by sharded pub/sub.

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
