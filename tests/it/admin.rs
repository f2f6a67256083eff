//! The admin API on the admin listener: off without a token, one 401 for every route without
//! the right one, runs listed (filtered, paged), one run, an operator's stop, and erasing one
//! owner's data while every other owner's stays; across two replicas in [`replicas`].

use crate::support::*;
use serde_json::{json, Value};

mod replicas;

const TOKEN: &str = "admin-token-0123456789";
const BEARER: &str = "Bearer admin-token-0123456789";
const ALICE: &[(&str, &str)] = &[("x-user", "alice")];
const BOB: &[(&str, &str)] = &[("x-user", "bob")];

/// A file holding the admin token, for `[server] admin_token`.
fn token_file() -> String {
    let dir = std::env::temp_dir().join(format!("tether-admin-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("token");
    // Written aside and renamed: tests running at once never read a half-written file.
    let aside = dir.join(format!("token.{:016x}", rand::random::<u64>()));
    std::fs::write(&aside, format!("{TOKEN}\n")).unwrap();
    std::fs::rename(&aside, &path).unwrap();
    path.display().to_string()
}

/// A backend whose turns on chats named `held*` hold after 2 events until `gate` opens.
async fn held_backend(gate: &Gate) -> Backend {
    let g = gate.clone();
    backend(move |r: &Req| {
        let body = String::from_utf8_lossy(&r.body).to_string();
        let pause = body.contains("\"held").then_some((2, &g));
        scripted_turn(&turn(6), pause)
    })
    .await
}

/// tether with the admin API on and callers told apart by `X-User`, in front of a
/// [`held_backend`].
async fn admin_sidecar(gate: &Gate) -> (Backend, Sidecar) {
    let be = held_backend(gate).await;
    let extra = format!(
        "[server]\nadmin_token = \"{}\"\n[auth]\nsubject = \"header:X-User\"\n",
        token_file()
    );
    let tether = sidecar(be.addr, &extra).await;
    (be, tether)
}

async fn admin(t: &Sidecar, method: &str, path: &str, auth: Option<&str>) -> (u16, Value) {
    let headers: Vec<(&str, &str)> = auth.map(|a| ("authorization", a)).into_iter().collect();
    let mut r = request(t.admin, method, path, &headers, b"").await;
    let body = r.body_to_end().await;
    (
        r.status,
        serde_json::from_slice(&body).unwrap_or(Value::Null),
    )
}

/// Runs a whole turn of `chat_id` for `who`; returns its run id.
/// Runs a whole turn of `chat_id` for `who` on `t`; returns its run id.
async fn completed(t: &Sidecar, chat_id: &str, who: &[(&str, &str)]) -> String {
    let (run, mut r) = started(t, chat_id, who).await;
    let end = r.frames_to_end().await.pop().unwrap();
    assert_eq!(end.json["persisted"], true);
    run
}

fn ids(list: &Value) -> Vec<String> {
    let mut v: Vec<String> = list["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["run_id"].as_str().unwrap().to_string())
        .collect();
    v.sort();
    v
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_token_the_admin_api_is_off() {
    let be = turn_backend(turn(2), None).await;
    let tether = sidecar(be.addr, "").await;
    let (status, body) = admin(&tether, "GET", "/admin/runs", Some(BEARER)).await;
    assert_eq!((status, body["error"].clone()), (404, json!("not_found")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_admin_route_gives_the_same_401_without_the_right_token() {
    let gate = Gate::default();
    let (_be, tether) = admin_sidecar(&gate).await;
    let run = completed(&tether, "c", ALICE).await;
    let routes = [
        ("GET", "/admin/runs".to_string()),
        ("GET", format!("/admin/runs/{run}")),
        ("POST", format!("/admin/runs/{run}/stop")),
        ("DELETE", "/admin/owners/alice".to_string()),
        ("GET", "/admin/nothing".to_string()),
    ];
    let wrong = [
        None,
        Some("Bearer admin-token-0123456788"),
        Some("bearer admin-token-0123456789"),
        Some(TOKEN),
        Some("Bearer "),
    ];
    let mut answers = Vec::new();
    for (method, path) in &routes {
        for auth in wrong {
            answers.push(admin(&tether, method, path, auth).await);
        }
    }
    let first = answers[0].clone();
    assert_eq!(
        (first.0, first.1["error"].clone()),
        (401, json!("unauthenticated"))
    );
    assert!(answers.iter().all(|a| *a == first), "{answers:?}");
    // Nothing was stopped or erased.
    let (status, one) = admin(&tether, "GET", &format!("/admin/runs/{run}"), Some(BEARER)).await;
    assert_eq!((status, one["state"].clone()), (200, json!("completed")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_are_listed_by_state_owner_and_route_a_page_at_a_time() {
    let gate = Gate::default();
    let (_be, tether) = admin_sidecar(&gate).await;
    let (a1, _c1) = started(&tether, "held-1", ALICE).await;
    let (a2, _c2) = started(&tether, "held-2", ALICE).await;
    let b1 = completed(&tether, "done", BOB).await;
    let list = |q: &str| {
        let path = format!("/admin/runs{q}");
        let t = &tether;
        async move { admin(t, "GET", &path, Some(BEARER)).await }
    };

    let (status, all) = list("").await;
    assert_eq!(status, 200);
    assert_eq!(ids(&all), sorted(vec![a1.clone(), a2.clone(), b1.clone()]));
    assert_eq!(all["next_cursor"], Value::Null);
    assert_eq!(
        ids(&list("?state=active").await.1),
        sorted(vec![a1.clone(), a2.clone()])
    );
    assert_eq!(ids(&list("?state=completed").await.1), vec![b1.clone()]);
    assert_eq!(
        ids(&list("?owner=alice").await.1),
        sorted(vec![a1.clone(), a2.clone()])
    );
    assert_eq!(ids(&list("?owner=carol").await.1), Vec::<String>::new());
    assert_eq!(
        ids(&list("?route=/chat&owner=bob").await.1),
        vec![b1.clone()]
    );
    assert_eq!(ids(&list("?route=/other").await.1), Vec::<String>::new());

    let bob = &list("?owner=bob").await.1["runs"][0];
    assert_eq!(bob["chat_id"], "done");
    assert_eq!(bob["route"], "/chat");
    assert_eq!(bob["format"], "agui");
    assert_eq!(bob["outcome"], "persisted");
    assert_eq!(bob["persisted"], true);
    assert_eq!(bob["head_seq"], json!(turn(6).len()));
    assert!(bob["owner"]
        .as_str()
        .is_some_and(|o| o.len() == 64 && !o.contains("bob")));
    assert!(bob["ended_at_ms"].as_u64() >= bob["started_at_ms"].as_u64());
    assert_eq!(
        bob["usage"],
        Value::Null,
        "AG-UI without a usage table reports none"
    );
    assert_eq!(bob["watch"]["observers_max"], 1, "{bob}");
    let alice = &list("?state=active&limit=1").await.1["runs"][0];
    assert_eq!(
        (alice["state"].clone(), alice["outcome"].clone()),
        (json!("active"), Value::Null)
    );
    assert_eq!(alice["observers"], 1);

    // Pages of one: each run once, then no cursor.
    let mut seen = Vec::new();
    let mut q = "?limit=1".to_string();
    loop {
        let (_, page) = list(&q).await;
        seen.extend(ids(&page));
        match page["next_cursor"].as_str() {
            Some(c) => q = format!("?limit=1&cursor={c}"),
            None => break,
        }
        assert!(seen.len() <= 3, "{seen:?}");
    }
    assert_eq!(sorted(seen), sorted(vec![a1, a2, b1]));
    for bad in [
        "?limit=0",
        "?limit=1001",
        "?state=done",
        "?cursor=%%%",
        "?colour=red",
    ] {
        let (status, e) = list(bad).await;
        assert_eq!(
            (status, e["error"].clone()),
            (400, json!("invalid_query")),
            "{bad}"
        );
    }
    gate.open();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_stop_ends_the_run_cancelled_once() {
    let gate = Gate::default();
    let (be, tether) = admin_sidecar(&gate).await;
    let (run, mut client) = started(&tether, "held", ALICE).await;
    let path = format!("/admin/runs/{run}/stop");
    let (status, body) = admin(&tether, "POST", &path, Some(BEARER)).await;
    assert_eq!((status, body["stop_requested"].clone()), (200, json!(true)));
    let end = client.frames_to_end().await.pop().unwrap();
    assert_eq!(
        (end.json["persisted"].clone(), end.json["reason"].clone()),
        (json!(false), json!("cancelled"))
    );
    // The backend's connection was closed: what it writes after the stop fails.
    gate.open();
    be.wait_answers(1).await;
    assert!(be.served.lock()[0].write_failed, "the backend was cut off");
    let (status, again) = admin(&tether, "POST", &path, Some(BEARER)).await;
    assert_eq!(status, 200);
    assert_eq!(again["stop_requested"], false);
    assert_eq!(
        (again["outcome"].clone(), again["reason"].clone()),
        (json!("cancelled"), json!("cancelled"))
    );
    let (status, one) = admin(&tether, "GET", &format!("/admin/runs/{run}"), Some(BEARER)).await;
    assert_eq!((status, one["state"].clone()), (200, json!("completed")));
    assert!(one["recorded_bytes"].as_u64().is_some_and(|b| b > 0));
    assert_eq!(one["window"], 4096, "the default replay window");
    let (status, e) = admin(&tether, "POST", "/admin/runs/nope/stop", Some(BEARER)).await;
    assert_eq!((status, e["error"].clone()), (404, json!("no_run")));
    assert_eq!(
        tether
            .metric("tether_runs_finished_total{outcome=\"cancelled\"}")
            .await,
        1.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn erasing_an_owner_stops_and_drops_their_runs_and_no_one_elses() {
    let gate = Gate::default();
    let (_be, tether) = admin_sidecar(&gate).await;
    let done = completed(&tether, "done", ALICE).await;
    let (active, mut client) = started(&tether, "held", ALICE).await;
    let bobs = completed(&tether, "done", BOB).await;
    let before = tether.metric("tether_recorded_bytes").await;

    let (status, body) = admin(&tether, "DELETE", "/admin/owners/alice", Some(BEARER)).await;
    assert_eq!(status, 200);
    assert_eq!(body["erased"]["runs"], 2);
    assert_eq!(body["erased"]["chats"], 2);
    assert!(body["erased"]["bytes"].as_u64().is_some_and(|b| b > 0));
    let end = client.frames_to_end().await.pop().unwrap();
    assert_eq!(end.json["reason"], "cancelled");

    // Alice's chats are unknown now; Bob's chat of the same id is untouched.
    for chat_id in ["done", "held"] {
        let path = format!("/chat/run?chat_id={chat_id}");
        let r = request(tether.addr, "GET", &path, ALICE, b"").await;
        assert_eq!(r.status, 204, "{chat_id}");
    }
    let mut r = request(tether.addr, "GET", "/chat/run?chat_id=done", BOB, b"").await;
    let v: Value = serde_json::from_slice(&r.body_to_end().await).unwrap();
    assert_eq!(v["run_id"], json!(bobs));
    for run in [&done, &active] {
        let (status, _) = admin(&tether, "GET", &format!("/admin/runs/{run}"), Some(BEARER)).await;
        assert_eq!(status, 404);
    }
    let (_, all) = admin(&tether, "GET", "/admin/runs", Some(BEARER)).await;
    assert_eq!(ids(&all), vec![bobs]);
    assert!(tether.metric("tether_recorded_bytes").await < before);
    // Again: nothing left to erase.
    let (_, again) = admin(&tether, "DELETE", "/admin/owners/alice", Some(BEARER)).await;
    assert_eq!(again["erased"]["runs"], 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_owners_erasing_one_is_refused() {
    let be = turn_backend(turn(2), None).await;
    let extra = format!("[server]\nadmin_token = \"{}\"\n", token_file());
    let tether = sidecar(be.addr, &extra).await;
    let (status, e) = admin(&tether, "DELETE", "/admin/owners/alice", Some(BEARER)).await;
    assert_eq!((status, e["error"].clone()), (404, json!("not_found")));
    let (status, e) = admin(&tether, "GET", "/admin/runs?owner=alice", Some(BEARER)).await;
    assert_eq!((status, e["error"].clone()), (400, json!("invalid_query")));
}

#[test]
fn a_short_or_unreadable_admin_token_exits_64_naming_it() {
    let bin = env!("CARGO_BIN_EXE_tether");
    let run = |args: &[&str], env: Option<&str>| {
        let mut c = std::process::Command::new(bin);
        c.args(args).env_remove("TETHER_ADMIN_TOKEN");
        if let Some(v) = env {
            c.env("TETHER_ADMIN_TOKEN", v);
        }
        let out = c.output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    let (code, err) = run(&["--admin-token", "/nonexistent/tether-token"], None);
    assert_eq!(code, Some(64));
    assert!(err.contains("server.admin_token"), "{err}");
    let (code, err) = run(&[], Some("short"));
    assert_eq!(code, Some(64));
    assert!(
        err.contains("TETHER_ADMIN_TOKEN") && err.contains("16 bytes"),
        "{err}"
    );
    let (code, err) = run(&["--admin-token", &token_file()], Some(TOKEN));
    assert_eq!(code, Some(64));
    assert!(err.contains("given twice"), "{err}");
}
