//! Per-owner limits (`[limits] max_active_runs_per_owner`, `max_runs_per_owner_per_minute`): a
//! record request over either is answered `429 too_many_runs` or `429 rate_limited` with
//! `Retry-After`, is counted in `tether_owner_limited_total{limit}`, and never reaches the
//! backend; another owner is not affected; an owner whose run ended may start another; a retry
//! that joins its run is not a new run; with a shared journal both are counted for every replica
//! (the rate's bucket and the owner's places in Redis); and either limit with `[auth] subject = "none"`
//! is an invalid configuration naming its key. (The token bucket's refill is tested on a clock of its
//! own in `src/state/owner_limits/tests.rs`.)

use serde_json::{json, Value};

use crate::support::*;

const ALICE: (&str, &str) = ("x-user", "alice");
const BOB: (&str, &str) = ("x-user", "bob");

/// A protocol-1 record request for chat `chat_id` by `who`, with `extra` headers.
async fn record(
    tether: &Sidecar,
    who: (&str, &str),
    chat_id: &str,
    extra: &[(&str, &str)],
) -> Resp {
    let mut h = vec![("content-type", "application/json"), who];
    h.extend_from_slice(extra);
    let body = chat(chat_id).to_string();
    request(tether.addr, "POST", "/chat", &h, body.as_bytes()).await
}

/// Reads a refusal: its status, error code and `Retry-After` (seconds).
async fn refusal(mut r: Resp) -> (u16, String, u64) {
    let retry_after = r.header("retry-after").map(|v| v.parse::<u64>());
    let status = r.status;
    let body = r.body_to_end().await;
    let Some(Ok(retry_after)) = retry_after else {
        panic!("{status} without a Retry-After in seconds: {body:?}");
    };
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert!(v["message"].is_string(), "{v}");
    (
        r.status,
        v["error"].as_str().unwrap().to_string(),
        retry_after,
    )
}

/// Bob's turn `chat_id` on `tether` is answered whole, and the backend has had `forwarded`
/// requests in all (a refused turn is never forwarded).
async fn bobs_turn_goes_through(tether: &Sidecar, chat_id: &str, be: &Backend, forwarded: usize) {
    let mut bobs = record(tether, BOB, chat_id, &[]).await;
    assert_eq!(
        bobs.frames_to_end().await.pop().unwrap().json["persisted"],
        json!(true)
    );
    assert_eq!(
        be.requests.lock().len(),
        forwarded,
        "the refused turns were not forwarded"
    );
}

/// A backend holding each chat's turn mid-answer until its gate (by chat id) opens.
async fn gated_backend(gates: &[(&'static str, Gate)]) -> Backend {
    let gates = gates.to_vec();
    backend(move |r: &Req| {
        let v: Value = serde_json::from_slice(&r.body).unwrap();
        let id = v["chat_id"].as_str().unwrap_or_default().to_string();
        match gates.iter().find(|(chat, _)| *chat == id) {
            Some((_, g)) => scripted_turn(&turn(3), Some((1, g))),
            None => scripted_turn(&turn(3), None),
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_the_active_limit_a_turn_gets_429_too_many_runs_and_nothing_is_forwarded() {
    let [a1, a2, a4, b1] = [(); 4].map(|_| Gate::default());
    let be = gated_backend(&[
        ("a1", a1.clone()),
        ("a2", a2.clone()),
        ("a4", a4.clone()),
        ("b1", b1.clone()),
    ])
    .await;
    let tether = sidecar(
        be.addr,
        "[auth]\nsubject = \"header:X-User\"\n[limits]\nmax_active_runs_per_owner = 2\n",
    )
    .await;
    let mut first = record(&tether, ALICE, "a1", &[]).await;
    assert_eq!(first.frame().await.unwrap().ty(), "STREAM_SNAPSHOT");
    let key = ("idempotency-key", "alice-a2");
    let mut second = record(&tether, ALICE, "a2", &[key]).await;
    assert_eq!(second.frame().await.unwrap().ty(), "STREAM_SNAPSHOT");

    // A third run of Alice's, in another chat: refused before the backend sees it.
    let third = record(&tether, ALICE, "a3", &[]).await;
    assert_eq!(refusal(third).await, (429, "too_many_runs".to_string(), 5));
    assert_eq!(
        be.requests.lock().len(),
        2,
        "the refused turn was not forwarded"
    );
    assert_eq!(
        tether
            .metric("tether_owner_limited_total{limit=\"active_runs\"}")
            .await,
        1.0
    );

    // A retry of her second turn (same key and body) joins its run: not a new run.
    let mut retry = record(&tether, ALICE, "a2", &[key]).await;
    assert_eq!(retry.status, 200);
    assert_eq!(retry.frame().await.unwrap().ty(), "STREAM_SNAPSHOT");

    // Bob is another owner: his turn goes through.
    let mut bobs = record(&tether, BOB, "b1", &[]).await;
    assert_eq!(bobs.status, 200);
    assert_eq!(bobs.frame().await.unwrap().ty(), "STREAM_SNAPSHOT");
    assert_eq!(be.requests.lock().len(), 3);

    // Once one of Alice's runs ends, she may start another, and only one.
    a1.open();
    let end = first.frames_to_end().await.pop().unwrap();
    assert_eq!(
        (end.ty(), &end.json["persisted"]),
        ("STREAM_END", &json!(true))
    );
    let mut fourth = record(&tether, ALICE, "a4", &[]).await;
    assert_eq!(fourth.frame().await.unwrap().ty(), "STREAM_SNAPSHOT");
    let refused = record(&tether, ALICE, "a5", &[]).await;
    assert_eq!(refusal(refused).await.1, "too_many_runs");
    assert_eq!(be.requests.lock().len(), 4);
    assert_eq!(
        tether
            .metric("tether_owner_limited_total{limit=\"active_runs\"}")
            .await,
        2.0
    );
    assert_eq!(
        tether
            .metric("tether_owner_limited_total{limit=\"rate\"}")
            .await,
        0.0
    );
    for g in [&a2, &a4, &b1] {
        g.open();
    }
    for r in [&mut second, &mut retry, &mut bobs, &mut fourth] {
        let end = r.frames_to_end().await.pop().unwrap();
        assert_eq!(end.json["persisted"], json!(true));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_the_rate_limit_a_turn_gets_429_rate_limited_with_retry_after() {
    let be = turn_backend(turn(2), None).await;
    let tether = sidecar(
        be.addr,
        "[auth]\nsubject = \"header:X-User\"\n[limits]\nmax_runs_per_owner_per_minute = 2\n",
    )
    .await;
    for id in ["a1", "a2"] {
        let mut r = record(&tether, ALICE, id, &[]).await;
        let end = r.frames_to_end().await.pop().unwrap();
        assert_eq!(end.json["persisted"], json!(true));
    }
    // The third within the minute: refused, with how long until a token is back (30 s for
    // two a minute, less the little time the first two took).
    let (status, code, retry_after) = refusal(record(&tether, ALICE, "a3", &[]).await).await;
    assert_eq!((status, code.as_str()), (429, "rate_limited"));
    assert!(
        (1..=30).contains(&retry_after),
        "Retry-After: {retry_after}"
    );
    assert_eq!(
        be.requests.lock().len(),
        2,
        "the refused turn was not forwarded"
    );
    // Bob has a bucket of his own.
    bobs_turn_goes_through(&tether, "b1", &be, 3).await;
    assert_eq!(
        tether
            .metric("tether_owner_limited_total{limit=\"rate\"}")
            .await,
        1.0
    );
    assert_eq!(
        tether
            .metric("tether_owner_limited_total{limit=\"active_runs\"}")
            .await,
        0.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_shared_journal_the_rate_limit_holds_across_replicas() {
    let redis = RedisServer::start();
    let be = turn_backend(turn(2), None).await;
    let extra = "[auth]\nsubject = \"header:X-User\"\nsecret = \"shared-secret\"\n\
                 [limits]\nmax_runs_per_owner_per_minute = 2\n";
    let a = replica(be.addr, &redis, "a", extra).await;
    let b = replica(be.addr, &redis, "b", extra).await;
    // One of Alice's two runs a minute on each replica.
    for (tether, id) in [(&a, "a1"), (&b, "b1")] {
        let mut r = record(tether, ALICE, id, &[]).await;
        assert_eq!(
            r.frames_to_end().await.pop().unwrap().json["persisted"],
            json!(true)
        );
    }
    // Her third is refused on either.
    for (tether, id) in [(&a, "a2"), (&b, "b2")] {
        let (status, code, retry_after) = refusal(record(tether, ALICE, id, &[]).await).await;
        assert_eq!((status, code.as_str()), (429, "rate_limited"));
        assert!(
            (1..=30).contains(&retry_after),
            "Retry-After: {retry_after}"
        );
        assert_eq!(
            tether
                .metric("tether_owner_limited_total{limit=\"rate\"}")
                .await,
            1.0
        );
    }
    // Bob's bucket is his own.
    bobs_turn_goes_through(&b, "c1", &be, 3).await;
    // One bucket per owner, under the owner's hash (never the subject), expiring within a minute.
    let keys: Vec<String> = redis.query(&["KEYS", "tj:{own:*}:bucket"]);
    assert_eq!(keys.len(), 2, "{keys:?}");
    for k in &keys {
        assert!(!k.contains("alice") && !k.contains("bob"), "{k}");
        let ttl: i64 = redis.query(&["PTTL", k]);
        assert!((1..=60_000).contains(&ttl), "{k}: {ttl}");
    }
}

#[test]
fn a_per_owner_limit_without_a_subject_exits_64_naming_the_key() {
    let bin = env!("CARGO_BIN_EXE_tether");
    let out = std::process::Command::new(bin)
        .args(["--max-active-runs-per-owner", "2"])
        .env_remove("TETHER_AUTH_SUBJECT")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("limits.max_active_runs_per_owner"), "{err}");
    let out = std::process::Command::new(bin)
        .env("TETHER_MAX_RUNS_PER_OWNER_PER_MINUTE", "10")
        .env("TETHER_AUTH_SUBJECT", "none")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("limits.max_runs_per_owner_per_minute"),
        "{err}"
    );
    // With a subject both are valid; without either limit, `none` is too.
    let with_subject = "[auth]\nsubject = \"header:X-User\"\n[limits]\n\
                        max_active_runs_per_owner = 2\nmax_runs_per_owner_per_minute = 10\n";
    let cfg = Config::from_parts(parse_file(with_subject).unwrap(), &Flags::default()).unwrap();
    assert_eq!(cfg.limits.max_active_runs_per_owner, 2);
    assert_eq!(cfg.limits.max_runs_per_owner_per_minute, 10);
    assert!(Config::from_parts(parse_file("").unwrap(), &Flags::default()).is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_shared_journal_the_active_runs_limit_holds_across_replicas() {
    let redis = RedisServer::start();
    let [a1, b1] = [(); 2].map(|_| Gate::default());
    let be = gated_backend(&[("a1", a1.clone()), ("b1", b1.clone())]).await;
    let extra = "[auth]\nsubject = \"header:X-User\"\nsecret = \"shared-secret\"\n\
                 [limits]\nmax_active_runs_per_owner = 2\n";
    let a = replica(be.addr, &redis, "a", extra).await;
    let b = replica(be.addr, &redis, "b", extra).await;
    // Alice has one run going on each replica: her limit, counted across both.
    let mut on_a = record(&a, ALICE, "a1", &[]).await;
    assert_eq!(on_a.frame().await.unwrap().ty(), "STREAM_SNAPSHOT");
    let mut on_b = record(&b, ALICE, "b1", &[]).await;
    assert_eq!(on_b.frame().await.unwrap().ty(), "STREAM_SNAPSHOT");
    for (tether, id) in [(&a, "a2"), (&b, "b2")] {
        let (status, code, retry_after) = refusal(record(tether, ALICE, id, &[]).await).await;
        assert_eq!(
            (status, code.as_str(), retry_after),
            (429, "too_many_runs", 5)
        );
        assert_eq!(
            tether
                .metric("tether_owner_limited_total{limit=\"active_runs\"}")
                .await,
            1.0
        );
    }
    // Bob, under his limit, is not affected.
    bobs_turn_goes_through(&b, "c1", &be, 3).await;
    // Her run on A ends: her next one, on B, is admitted at once.
    a1.open();
    assert_eq!(
        on_a.frames_to_end().await.pop().unwrap().json["persisted"],
        json!(true)
    );
    let mut next = record(&b, ALICE, "b3", &[]).await;
    assert_eq!(
        next.frames_to_end().await.pop().unwrap().json["persisted"],
        json!(true)
    );
    b1.open();
    on_b.frames_to_end().await;
    // Her places are under her owner hash, none held once her runs ended.
    let keys: Vec<String> = redis.query(&["KEYS", "tj:{own:*}:active"]);
    assert!(keys.iter().all(|k| !k.contains("alice")), "{keys:?}");
    for k in &keys {
        let held: i64 = redis.query(&["ZCARD", k]);
        assert_eq!(held, 0, "{k}");
    }
}
