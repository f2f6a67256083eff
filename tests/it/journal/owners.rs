//! Ownership across replicas: a run recorded for one owner on replica A answers another owner on
//! replica B exactly as an unknown chat and run do, even once B follows the run for its owner,
//! on every lookup that can reach a mirror (cursor, attach, stop, status, resume by run id).

use serde_json::json;

use crate::support::*;

const OWNERS: &str = r#"
[auth]
subject = "header:x-user"
secret = "shared by every replica"

[[routes]]
methods = ["POST"]
path = "/chat"
kind = "record"

[[routes]]
methods = ["POST"]
path = "/chat/live"
kind = "attach"

[[routes]]
methods = ["POST"]
path = "/chat/stop"
kind = "stop"

[[routes]]
methods = ["GET"]
path = "/chat/run"
kind = "status"
chat_id = "query:chat_id"

[[routes]]
methods = ["GET"]
path = "/runs/{id}"
kind = "status"
run = "path:id"

[[routes]]
methods = ["POST"]
path = "/runs/{id}/cancel"
kind = "stop"
run = "path:id"

[[routes]]
methods = ["GET"]
path = "/runs/{id}/stream"
kind = "resume"
dialect = "last_event_id"
run = "path:id"
"#;

/// Everything a caller can observe of a response, but the `date` header (of a stream, which
/// would not end while the run is held, its first block).
async fn seen(mut r: Resp) -> (u16, Vec<(String, String)>, bytes::Bytes) {
    let headers = r
        .headers
        .iter()
        .filter(|(k, _)| k != "date")
        .cloned()
        .collect();
    let stream = r
        .header("content-type")
        .is_some_and(|t| t.starts_with("text/event-stream"));
    let body = match stream {
        true => within("a first block", r.block()).await.unwrap_or_default(),
        false => r.body_to_end().await,
    };
    (r.status, headers, body)
}

/// What `who` gets on `addr` for each lookup of chat `chat_id` and run `run`.
async fn probes(
    addr: std::net::SocketAddr,
    who: &[(&str, &str)],
    chat_id: &str,
    run: &str,
) -> Vec<(u16, Vec<(String, String)>, bytes::Bytes)> {
    let body = |v: serde_json::Value| v.to_string().into_bytes();
    let mut out = Vec::new();
    let with_id = [who, &[("Last-Event-ID", "1")]].concat();
    for (method, path, headers, payload) in [
        (
            "POST",
            "/chat/live".to_string(),
            who,
            body(cursor(chat_id, run, 1)),
        ),
        ("POST", "/chat/live".to_string(), who, body(chat(chat_id))),
        (
            "POST",
            "/chat/stop".to_string(),
            who,
            body(json!({"chat_id": chat_id, "run_id": run})),
        ),
        (
            "POST",
            "/chat/stop".to_string(),
            who,
            body(json!({"chat_id": chat_id})),
        ),
        (
            "GET",
            format!("/chat/run?chat_id={chat_id}"),
            who,
            Vec::new(),
        ),
        ("GET", format!("/runs/{run}"), who, Vec::new()),
        (
            "GET",
            format!("/runs/{run}/stream"),
            &with_id[..],
            Vec::new(),
        ),
        ("POST", format!("/runs/{run}/cancel"), who, Vec::new()),
    ] {
        out.push(seen(request(addr, method, &path, headers, &payload).await).await);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_owner_on_the_replica_following_a_run_gets_the_unknown_run_answer() {
    let redis = RedisServer::start();
    let gate = Gate::default();
    let be = turn_backend(turn(4), Some((2, gate.clone()))).await;
    let a = replica(be.addr, &redis, "a", OWNERS).await;
    let b = replica(be.addr, &redis, "b", OWNERS).await;
    let alice = [("x-user", "alice")];
    let mallory = [("x-user", "mallory")];
    let body = chat("c").to_string();
    let mut origin = request(a.addr, "POST", "/chat", &alice, body.as_bytes()).await;
    let run = origin.frame().await.unwrap().json["run_id"]
        .as_str()
        .unwrap()
        .to_string();
    // Alice's own look at B makes B follow her run (a local mirror).
    eventually_async("B follows alice's run", || async {
        request(b.addr, "GET", "/chat/run?chat_id=c", &alice, b"")
            .await
            .status
            == 200
    })
    .await;
    assert_eq!(b.metric("tether_journal_followers").await, 1.0);

    let hidden = probes(b.addr, &mallory, "c", &run).await;
    let unknown = probes(b.addr, &mallory, "never-used", "no-such-run-id").await;
    assert_eq!(hidden, unknown);
    assert_eq!(
        hidden.iter().map(|s| s.0).collect::<Vec<_>>(),
        [204, 204, 404, 404, 204, 204, 404, 404]
    );
    // The same on A, which produces the run.
    assert_eq!(probes(a.addr, &mallory, "c", &run).await, unknown);

    // Mallory's stops did not touch alice's run, and alice still reads it on B.
    let mut mine = request(b.addr, "GET", &format!("/runs/{run}"), &alice, b"").await;
    let v: serde_json::Value = serde_json::from_slice(&mine.body_to_end().await).unwrap();
    assert_eq!((mine.status, v["status"].clone()), (200, json!("running")));
    let mut tail = request(
        b.addr,
        "POST",
        "/chat/live",
        &alice,
        cursor("c", &run, 1).to_string().as_bytes(),
    )
    .await;
    assert_eq!(tail.status, 200);
    gate.open();
    let end = within("alice's run ends", origin.frames_to_end()).await;
    assert_eq!(end.last().unwrap().json["persisted"], json!(true));
    let end = within("alice's tail on B ends", tail.frames_to_end()).await;
    assert_eq!(end.last().unwrap().json["persisted"], json!(true));
}
