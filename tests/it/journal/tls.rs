//! A journal over TLS: Debian's redis-server with `--tls-port` and certificates the test made,
//! the replicas on `rediss://localhost:<port>` trusting the test CA. The attach-mid-run
//! scenario runs unchanged over it (with and without a client certificate Redis requires, and
//! on a three-node Redis Cluster whose replicas and bus speak TLS), and
//! a replica trusting another CA never gets the journal ready.

use super::attach_mid_run;
use crate::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attach_on_the_other_replica_mid_run_works_over_a_tls_journal() {
    let ca = TestCa::new("redis");
    let cert = ca.issue("redis", &["localhost"]);
    attach_mid_run(&TlsRedis::start(&ca, &cert, &ca, None)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attach_on_the_other_replica_mid_run_works_over_a_tls_redis_cluster() {
    let ca = TestCa::new("redis-cluster");
    let cert = ca.issue("redis-node", &["127.0.0.1", "localhost"]);
    attach_mid_run(&TlsRedisCluster::start(&ca, &cert)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_that_requires_a_client_certificate_gets_the_configured_one() {
    let ca = TestCa::new("redis-mtls");
    let cert = ca.issue("redis", &["localhost"]);
    let client = ca.issue("replica", &["tether.test"]);
    attach_mid_run(&TlsRedis::start(&ca, &cert, &ca, Some(&client))).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_that_trusts_another_ca_never_reports_the_journal_ready() {
    let ca = TestCa::new("redis-real");
    let other = TestCa::new("redis-other");
    let cert = ca.issue("redis", &["localhost"]);
    let redis = TlsRedis::start(&ca, &cert, &other, None);
    let be = turn_backend(turn(3), None).await;
    let a = replica(be.addr, &redis, "a", "").await;
    eventually_async("the journal reports degraded", || async {
        a.metric("tether_journal_degraded").await == 1.0
    })
    .await;
    let mut r = request(a.admin, "GET", "/readyz", &[], b"").await;
    let body = r.body_to_end().await;
    assert!(
        !String::from_utf8_lossy(&body).contains("journal: ok"),
        "{}",
        String::from_utf8_lossy(&body)
    );
    assert!(redis.server.keys("tj:*").is_empty(), "nothing was written");
}

#[test]
fn a_journal_tls_file_that_cannot_be_used_exits_64_naming_it() {
    let dir = std::env::temp_dir().join(format!("tether-journal-tls-exit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let garbage = dir.join("garbage-ca.pem");
    std::fs::write(&garbage, "not a certificate\n").unwrap();
    let missing = dir.join("missing-ca.pem");
    for (ca, says) in [
        (&missing, "missing-ca.pem"),
        (&garbage, "no PEM certificate"),
    ] {
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_tether"))
            .args(["--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"])
            .args(["--journal", "rediss://127.0.0.1:1", "--journal-ca"])
            .arg(ca)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let out = within_blocking(move || child.wait_with_output().unwrap());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{stderr}");
        assert!(
            stderr.contains("[journal]") && stderr.contains(says),
            "{stderr}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
