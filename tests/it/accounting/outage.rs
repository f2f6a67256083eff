//! The accounting outlets of a running sidecar when their receivers misbehave: a webhook
//! receiver down, then up, gets every run's record once; a collector that hangs for whole turns
//! holds up no turn and no record. Also: the record names its owner by the configured subject.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{json, Value};
use tether::accounting::webhook::IDEMPOTENCY_KEY;

use crate::support::*;

/// A loopback address nothing listens on (yet).
fn free_addr() -> std::net::SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

/// Records a protocol-1 turn of chat `c` to its end; returns its run id.
async fn turn_of(tether: &Sidecar, c: &str, headers: &[(&str, &str)]) -> String {
    let mut h = vec![("content-type", "application/json")];
    h.extend_from_slice(headers);
    let body = chat(c).to_string();
    let mut r = request(tether.addr, "POST", "/chat", &h, body.as_bytes()).await;
    assert_eq!(r.status, 200);
    let frames = r.frames_to_end().await;
    let end = frames.last().unwrap();
    assert_eq!(end.ty(), "STREAM_END");
    end.json["run_id"].as_str().unwrap().to_string()
}

/// The bodies the receiver accepted, by idempotency key.
fn by_key(hook: &Backend) -> BTreeMap<String, Vec<Value>> {
    let mut keys: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for r in hook.requests.lock().iter() {
        let key = r.header(IDEMPOTENCY_KEY).unwrap().to_string();
        keys.entry(key)
            .or_default()
            .push(serde_json::from_slice(&r.body).unwrap());
    }
    keys
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_receiver_down_then_up_gets_every_runs_record_once() {
    let be = turn_backend(turn(4), None).await;
    let addr = free_addr();
    let conf = format!("[accounting]\nwebhook_url = \"http://{addr}/runs\"\n");
    let tether = sidecar(be.addr, &conf).await;
    let mut runs = Vec::new();
    for i in 0..5 {
        runs.push(turn_of(&tether, &format!("c{i}"), &[]).await);
    }
    // The turns were answered while the receiver refused connections; it comes up now.
    eventually("a refused attempt", || {
        tether.handle().shared.metrics.webhook_retries.get() >= 1
    })
    .await;
    let hook = backend_at(addr, |_| fixed_answer(200, "text/plain", "")).await;
    eventually("every record delivered", || {
        tether.handle().shared.metrics.webhook_sent.get() == 5
    })
    .await;
    let keys = by_key(&hook);
    assert_eq!(keys.len(), 5);
    for run in &runs {
        let bodies = &keys[run];
        assert_eq!(bodies.len(), 1, "{run}: once");
        assert_eq!(bodies[0]["run_id"], run.as_str());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_that_hangs_holds_up_no_turn_and_no_record() {
    let be = turn_backend(turn(4), None).await;
    let gate = Gate::default();
    let collector = otlp_collector(Some(gate.clone())).await;
    let hook = backend(|_| fixed_answer(200, "text/plain", "")).await;
    let conf = format!(
        "[accounting]\nwebhook_url = \"http://{}/runs\"\notlp_endpoint = \"http://{}\"\n",
        hook.addr, collector.addr
    );
    let tether = sidecar(be.addr, &conf).await;
    // Twenty turns while the collector holds every export request open.
    let t = tokio::time::Instant::now();
    for i in 0..20 {
        within("a turn", turn_of(&tether, &format!("h{i}"), &[])).await;
    }
    let elapsed = t.elapsed();
    eventually("every record delivered", || {
        hook.requests.lock().len() == 20
    })
    .await;
    assert!(
        collector.requests.lock().len() <= 1,
        "the exporter waits on its one hung request"
    );
    // The export timeout is 10 s: a turn that waited on it would take that long.
    assert!(elapsed < Duration::from_secs(10), "{elapsed:?}");
    gate.open();
    eventually("the spans arrive once the collector answers", || {
        received_spans(&collector).len() >= 20
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_record_names_its_owner_by_the_configured_subject_and_never_a_credential() {
    let be = turn_backend(turn(2), None).await;
    let hook = backend(|_| fixed_answer(200, "text/plain", "")).await;
    let webhook = format!(
        "[accounting]\nwebhook_url = \"http://{}/runs\"\n",
        hook.addr
    );
    let by_header = sidecar(
        be.addr,
        &format!("[auth]\nsubject = \"header:X-User\"\n{webhook}"),
    )
    .await;
    let run = turn_of(&by_header, "o", &[("x-user", "alice")]).await;
    eventually("the record", || hook.requests.lock().len() == 1).await;
    assert_eq!(by_key(&hook)[&run][0]["owner"], "alice");
    let by_auth = sidecar(
        be.addr,
        &format!("[auth]\nsubject = \"authorization\"\n{webhook}"),
    )
    .await;
    let run = turn_of(&by_auth, "o", &[("authorization", "Bearer sk-secret")]).await;
    eventually("the record", || hook.requests.lock().len() == 2).await;
    assert_eq!(by_key(&hook)[&run][0]["owner"], json!(null));
}
