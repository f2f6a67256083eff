//! The admin API on two replicas sharing one Redis: runs one replica produces are listed, found
//! and stopped through the other (from the journal's indexes, with no mirror there), and erasing
//! an owner mid-turn through either one leaves no key of theirs in Redis and no copy on either
//! replica, while every other owner's runs stay.

use std::collections::HashSet;

use serde_json::{json, Value};

use super::{admin, completed, held_backend, ids, sorted, token_file, ALICE, BEARER, BOB};
use crate::support::*;

/// Two replicas, `a` and `b`, on `redis` with the admin API on and callers told apart by
/// `X-User`, in front of a [`held_backend`].
async fn pair(redis: &RedisServer, gate: &Gate) -> (Backend, Sidecar, Sidecar) {
    let be = held_backend(gate).await;
    // The `[server]` table leads (the harness joins its lines to its own).
    let conf = |id: &str| {
        format!(
            "[server]\nadmin_token = \"{}\"\n{}[auth]\nsubject = \"header:X-User\"\nsecret = \"shared by both\"\n",
            token_file(),
            journal_table(redis, id)
        )
    };
    let a = sidecar(be.addr, &conf("a")).await;
    let b = sidecar(be.addr, &conf("b")).await;
    (be, a, b)
}

async fn get(t: &Sidecar, path: &str) -> (u16, Value) {
    admin(t, "GET", path, Some(BEARER)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_one_replica_produces_are_listed_filtered_and_found_on_the_other() {
    let redis = RedisServer::start();
    let gate = Gate::default();
    let (_be, a, b) = pair(&redis, &gate).await;
    let done = completed(&a, "done", ALICE).await;
    let (held, _client) = started(&a, "held", ALICE).await;
    let bobs = completed(&a, "done", BOB).await;

    // B holds none of them: everything it lists comes from the journal (once A's writer has
    // indexed the last one).
    eventually_async("B lists A's three runs", || async {
        ids(&get(&b, "/admin/runs").await.1).len() == 3
    })
    .await;
    assert!(b.registry().held().is_empty());
    let (status, all) = get(&b, "/admin/runs").await;
    assert_eq!(status, 200);
    assert_eq!(
        ids(&all),
        sorted(vec![done.clone(), held.clone(), bobs.clone()])
    );
    let (_, alices) = get(&b, "/admin/runs?owner=alice").await;
    assert_eq!(ids(&alices), sorted(vec![done.clone(), held.clone()]));
    let (_, active) = get(&b, "/admin/runs?state=active").await;
    assert_eq!(ids(&active), vec![held.clone()]);
    let (_, completed_bobs) = get(&b, "/admin/runs?state=completed&owner=bob").await;
    assert_eq!(ids(&completed_bobs), vec![bobs.clone()]);
    let (_, by_route) = get(&b, "/admin/runs?route=/chat").await;
    assert_eq!(ids(&by_route).len(), 3);
    let (_, none) = get(&b, "/admin/runs?route=/elsewhere").await;
    assert_eq!(ids(&none), Vec::<String>::new());

    // Paged one at a time, each run once.
    let mut seen = Vec::new();
    let mut q = "?limit=1".to_string();
    loop {
        let (_, page) = get(&b, &format!("/admin/runs{q}")).await;
        seen.extend(ids(&page));
        match page["next_cursor"].as_str() {
            Some(c) => q = format!("?limit=1&cursor={c}"),
            None => break,
        }
        assert!(seen.len() <= 3, "{seen:?}");
    }
    assert_eq!(sorted(seen), sorted(vec![done.clone(), held.clone(), bobs]));

    // One run, as the journal has it; the producing replica's own view agrees where both know.
    let (status, there) = get(&b, &format!("/admin/runs/{held}")).await;
    assert_eq!(status, 200);
    let (_, here) = get(&a, &format!("/admin/runs/{held}")).await;
    for field in ["run_id", "chat_id", "owner", "route", "state"] {
        assert_eq!(there[field], here[field], "{field}");
    }
    assert_eq!(there["state"], "active");
    assert_eq!(
        (there["held"].clone(), here["held"].clone()),
        (json!(false), json!(true))
    );
    assert_eq!(there["observers"], Value::Null);
    assert_eq!(there["window"], 4096);
    let (_, ended) = get(&b, &format!("/admin/runs/{done}")).await;
    assert_eq!(
        (
            ended["state"].clone(),
            ended["outcome"].clone(),
            ended["persisted"].clone()
        ),
        (json!("completed"), json!("persisted"), json!(true))
    );
    let (status, _) = get(&b, "/admin/runs/run-nope").await;
    assert_eq!(status, 404);
    gate.open();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_through_one_replica_ends_the_run_the_other_produces_cancelled() {
    let redis = RedisServer::start();
    let gate = Gate::default();
    let (_be, a, b) = pair(&redis, &gate).await;
    let (run, mut client) = started(&a, "held", ALICE).await;
    eventually_async("the journal indexes the run", || async {
        get(&b, &format!("/admin/runs/{run}")).await.0 == 200
    })
    .await;
    assert!(b.registry().held().is_empty(), "B follows nothing");
    let path = format!("/admin/runs/{run}/stop");
    let (status, body) = admin(&b, "POST", &path, Some(BEARER)).await;
    assert_eq!((status, body["stop_requested"].clone()), (200, json!(true)));
    let end = within("A's reader gets the end", client.frames_to_end())
        .await
        .pop()
        .unwrap();
    assert_eq!(
        (end.json["persisted"].clone(), end.json["reason"].clone()),
        (json!(false), json!("cancelled"))
    );
    assert_eq!(
        a.metric("tether_runs_finished_total{outcome=\"cancelled\"}")
            .await,
        1.0
    );
    gate.open();
}

/// Every key in Redis (a full scan: the test's own Redis).
fn all_keys(redis: &RedisServer) -> Vec<String> {
    let mut keys = Vec::new();
    let mut cursor = "0".to_string();
    loop {
        let (next, batch): (String, Vec<String>) = redis.query(&["SCAN", &cursor, "COUNT", "1000"]);
        keys.extend(batch);
        if next == "0" {
            return keys;
        }
        cursor = next;
    }
}

/// The hash tag of the keys of a chat at `scope` (as the journal names them).
fn chat_tag(scope: &str) -> String {
    blake3::hash(scope.as_bytes()).to_hex()[..16].to_string()
}

/// What `who` gets for chat `chat_id` on `t`: its status and a protocol-1 attach, each as
/// status and body.
async fn answers(t: &Sidecar, chat_id: &str, who: &[(&str, &str)]) -> Vec<(u16, Vec<u8>)> {
    let mut out = Vec::new();
    let mut r = request(
        t.addr,
        "GET",
        &format!("/chat/run?chat_id={chat_id}"),
        who,
        b"",
    )
    .await;
    out.push((r.status, r.body_to_end().await.to_vec()));
    let body = json!({"chat_id": chat_id, "protocol": 1}).to_string();
    let mut r = request(t.addr, "POST", "/chat/live", who, body.as_bytes()).await;
    let status = r.status;
    let bytes = match status {
        200 => r.block().await.map(|b| b.to_vec()).unwrap_or_default(),
        _ => r.body_to_end().await.to_vec(),
    };
    out.push((status, bytes));
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn erasing_an_owner_mid_turn_clears_redis_and_both_replicas_and_no_one_else() {
    let redis = RedisServer::start();
    let gate = Gate::default();
    let (_be, a, b) = pair(&redis, &gate).await;
    let keyed = [ALICE[0], ("idempotency-key", "alice-key-1")];
    let done = completed(&a, "done", &keyed).await;
    let (active, mut client) = started(&a, "held", ALICE).await;
    let on_b = completed(&b, "b-done", ALICE).await;
    let bobs = completed(&a, "done", BOB).await;
    let (bobs_held, mut bobs_client) = started(&b, "held-bob", BOB).await;
    // B follows Alice's run of A (a mirror to drop), A holds a mirror of hers from B.
    assert_eq!(answers(&b, "done", ALICE).await[0].0, 200);
    assert_eq!(answers(&a, "b-done", ALICE).await[0].0, 200);
    let (_, one) = get(&a, &format!("/admin/runs/{done}")).await;
    let owner = one["owner"].as_str().unwrap().to_string();
    let unknown = answers(&a, "never", ALICE).await;
    eventually_async("the journal indexes her three runs", || async {
        ids(&get(&b, "/admin/runs?owner=alice").await.1).len() == 3
    })
    .await;

    // The name her idempotency key indexes its run by (as the chats room names it).
    let key_name = format!("~key:{}", &blake3::hash(b"alice-key-1").to_hex()[..32]);
    let named = format!("tj:{{i:{}}}:id", chat_tag(&format!("{owner}/{key_name}")));
    let exists: i64 = redis.query(&["EXISTS", &named]);
    assert_eq!(exists, 1, "her idempotency key's name is indexed in Redis");

    // Erased through B while her turn is still running on A.
    let (status, body) = admin(&b, "DELETE", "/admin/owners/alice", Some(BEARER)).await;
    assert_eq!(status, 200);
    assert_eq!(body["erased"]["runs"], 3, "{body}");
    assert_eq!(body["erased"]["chats"], 3, "{body}");
    assert!(
        body["erased"]["journal_keys"].as_u64().unwrap() >= 9,
        "{body}"
    );
    let end = within("A's reader gets the end", client.frames_to_end())
        .await
        .pop()
        .unwrap();
    assert_eq!(end.json["reason"], "cancelled");

    // No key of hers is left in Redis: by her owner hash, her runs and her chats.
    let tags: Vec<String> = ["done", "held", "b-done"]
        .iter()
        .map(|c| chat_tag(&format!("{owner}/{c}")))
        .collect();
    // Her id keys: each run id's and her idempotency key's name.
    let id_tags: Vec<String> = [done.as_str(), &active, &on_b, &key_name]
        .iter()
        .map(|r| format!("i:{}", chat_tag(&format!("{owner}/{r}"))))
        .collect();
    let hers = |k: &String| {
        k.contains(&owner)
            || [&done, &active, &on_b]
                .iter()
                .any(|r| k.contains(r.as_str()))
            || tags
                .iter()
                .chain(&id_tags)
                .any(|t| k.contains(&format!("{{{t}}}")))
    };
    let left: Vec<String> = all_keys(&redis).into_iter().filter(hers).collect();
    assert!(left.is_empty(), "{left:?}");
    let members: Vec<String> = redis.query(&["ZRANGE", "tj:runs", "0", "-1"]);
    assert!(members.iter().all(|m| !m.contains(&owner)), "{members:?}");
    // Bob's are all there.
    let keys = all_keys(&redis);
    for run in [&bobs, &bobs_held] {
        assert!(keys.iter().any(|k| k.contains(run.as_str())), "{run}");
    }

    // Her chats answer as unknown ones on both replicas (A hears of it from B).
    for chat_id in ["done", "held", "b-done"] {
        assert_eq!(answers(&b, chat_id, ALICE).await, unknown, "B: {chat_id}");
        eventually_async("A drops her copies", || async {
            answers(&a, chat_id, ALICE).await == unknown
        })
        .await;
    }
    for t in [&a, &b] {
        let (_, listed) = get(t, "/admin/runs?owner=alice").await;
        assert_eq!(ids(&listed), Vec::<String>::new());
    }

    // Bob's runs are untouched: found on both, his running turn ends persisted.
    for t in [&a, &b] {
        let mut r = request(t.addr, "GET", "/chat/run?chat_id=done", BOB, b"").await;
        let v: Value = serde_json::from_slice(&r.body_to_end().await).unwrap();
        assert_eq!(v["run_id"], json!(bobs));
    }
    gate.open();
    let end = bobs_client.frames_to_end().await.pop().unwrap();
    assert_eq!(end.json["persisted"], true);
    let (_, all) = get(&a, "/admin/runs").await;
    let listed: HashSet<String> = ids(&all).into_iter().collect();
    assert_eq!(listed, HashSet::from([bobs, bobs_held]));
    // A producer keeps an ended run's end in Redis for a lease, writing it again if Redis lost
    // it (a restart); an erased run is not lost but gone, and nothing of hers comes back. An
    // absence has no signal to await: look again after two leases (the keeping's whole span).
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    let back: Vec<String> = all_keys(&redis).into_iter().filter(hers).collect();
    assert!(back.is_empty(), "written again after the erasure: {back:?}");
}
