//! The webhook: a receiver down, then up, gets every record exactly once per key; the queue is
//! bounded and never blocks the caller; a refusal is not retried.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tether::accounting::webhook::IDEMPOTENCY_KEY;
use tether::accounting::{RunRecord, Webhook, WebhookOptions};
use tether::metrics::WebhookDrop;
use tether::vocab::RunId;

use crate::support::*;

fn options(addr: SocketAddr, queue: usize) -> WebhookOptions {
    WebhookOptions {
        url: format!("http://{addr}/runs"),
        queue,
        timeout: Duration::from_secs(5),
        backoff_min: Duration::from_millis(5),
        backoff_max: Duration::from_millis(50),
    }
}

fn record(i: usize) -> RunRecord {
    let mut r = RunRecord::new(RunId::from(format!("run-{i}")), "/chat");
    r.duration_ms = i as u64;
    r
}

/// A loopback address nothing listens on (yet).
fn free_addr() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

/// Waits until `f` holds, polling the metrics the sender keeps (bounded by `LIMIT`).
async fn until(what: &str, f: impl Fn() -> bool) {
    within(what, async {
        while !f() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
}

/// The requests of `b` answered 2xx, by idempotency key: each key's bodies.
fn by_key(b: &Backend) -> BTreeMap<String, Vec<String>> {
    let mut keys: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for r in b.requests.lock().iter() {
        assert_eq!((r.method.as_str(), r.path.as_str()), ("POST", "/runs"));
        assert_eq!(r.header("content-type"), Some("application/json"));
        let key = r.header(IDEMPOTENCY_KEY).unwrap().to_string();
        keys.entry(key)
            .or_default()
            .push(String::from_utf8(r.body.to_vec()).unwrap());
    }
    keys
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_that_refuses_connections_then_comes_up_gets_every_record_once() {
    let addr = free_addr();
    let m = Metrics::new();
    let hook = Webhook::start(options(addr, 64), &m).unwrap();
    for i in 0..20 {
        assert!(hook.send(&record(i)));
    }
    // The receiver is down (connection refused) while the first record is tried, twice;
    // then up.
    until("two refused attempts", || m.webhook_retries.get() >= 2).await;
    assert_eq!(m.webhook_sent.get(), 0);
    let receiver = backend_at(addr, |_| fixed_answer(200, "text/plain", "")).await;
    until("every record sent", || m.webhook_sent.get() == 20).await;
    let keys = by_key(&receiver);
    let expect: BTreeSet<String> = (0..20).map(|i| format!("run-{i}")).collect();
    assert_eq!(keys.keys().cloned().collect::<BTreeSet<_>>(), expect);
    for (key, bodies) in &keys {
        assert_eq!(bodies.len(), 1, "{key} sent once the receiver was up");
        let v: serde_json::Value = serde_json::from_str(&bodies[0]).unwrap();
        assert_eq!(
            (v["event"].as_str(), v["run_id"].as_str()),
            (Some("run_ended"), Some(key.as_str()))
        );
    }
    assert_eq!(hook.shutdown(LIMIT).await, 0);
    for reason in WebhookDrop::ALL {
        assert_eq!(m.webhook_dropped.get(*reason).get(), 0, "{reason:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_whose_answer_was_lost_are_sent_again_under_the_same_key() {
    // Down: each request is read whole, then the connection is reset before any answer (the
    // receiver may have kept the record: the retry races it). Then up.
    let up = Arc::new(AtomicBool::new(false));
    let up2 = up.clone();
    let receiver = backend(move |_| match up2.load(Ordering::SeqCst) {
        false => vec![Step::Reset],
        true => fixed_answer(204, "text/plain", ""),
    })
    .await;
    let m = Metrics::new();
    let hook = Webhook::start(options(receiver.addr, 64), &m).unwrap();
    for i in 0..10 {
        assert!(hook.send(&record(i)));
    }
    // The first record has been tried (and lost) three times: the receiver is down.
    until("three lost attempts", || {
        receiver.requests.lock().len() >= 3
    })
    .await;
    up.store(true, Ordering::SeqCst);
    until("every record sent", || m.webhook_sent.get() == 10).await;
    let keys = by_key(&receiver);
    // Every record arrived; de-duplicated by key, each is one record (every copy the same).
    assert_eq!(keys.len(), 10);
    for (key, bodies) in &keys {
        assert!(
            bodies.iter().all(|b| b == &bodies[0]),
            "{key}: copies differ"
        );
    }
    assert!(
        keys["run-0"].len() >= 3,
        "run-0 was retried while the receiver was down"
    );
    let served = receiver
        .served
        .lock()
        .iter()
        .filter(|s| s.completed)
        .count();
    assert_eq!(served, 10, "one accepted answer per record");
    assert_eq!(hook.shutdown(LIMIT).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_queue_drops_and_counts_records_without_waiting() {
    let addr = free_addr();
    let m = Metrics::new();
    let hook = Webhook::start(options(addr, 4), &m).unwrap();
    // The receiver never comes up: at most the queue (and the one being tried) is kept.
    let accepted = (0..50).filter(|i| hook.send(&record(*i))).count();
    assert!((4..=5).contains(&accepted), "{accepted} accepted");
    let full = m.webhook_dropped.get(WebhookDrop::QueueFull).get();
    assert_eq!(full as usize, 50 - accepted);
    assert_eq!(hook.pending(), accepted);
    // At shutdown, what could not be sent is counted.
    let left = hook.shutdown(Duration::from_millis(50)).await;
    assert_eq!(left, accepted);
    assert_eq!(
        m.webhook_dropped.get(WebhookDrop::Shutdown).get() as usize,
        accepted
    );
    assert_eq!(m.webhook_sent.get(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_the_receiver_refuses_is_dropped_not_retried() {
    let receiver = backend(|r| match r.header(IDEMPOTENCY_KEY) {
        Some("run-0") => fixed_answer(422, "text/plain", "bad"),
        _ => fixed_answer(200, "text/plain", ""),
    })
    .await;
    let m = Metrics::new();
    let hook = Webhook::start(options(receiver.addr, 8), &m).unwrap();
    hook.send(&record(0));
    hook.send(&record(1));
    until("both settled", || hook.pending() == 0).await;
    assert_eq!(m.webhook_dropped.get(WebhookDrop::Rejected).get(), 1);
    assert_eq!(m.webhook_sent.get(), 1);
    assert_eq!(by_key(&receiver)["run-0"].len(), 1, "not retried");
    hook.shutdown(LIMIT).await;
}
