//! Routes with path patterns and key sources: a record route keyed by a path capture, served by
//! attach, status and stop routes that read the chat id from a cookie, a header and a nested
//! JSON pointer; routes matched in file order; a catch-all pass-through still proxied; one
//! client connection going back and forth between tether's routes and pass-through requests.

use crate::support::*;
use serde_json::{json, Value};

/// The routes under test, in file order: a pass-through listed before the record pattern that
/// would also match it, then the record pattern, the key sources, and a catch-all.
const ROUTES: &str = r#"
[[routes]]
methods = ["POST"]
path = "/api/chat/plain"
kind = "passthrough"

[[routes]]
methods = ["POST"]
path = "/api/chat/{id}"
kind = "record"
chat_id = "path:id"

[[routes]]
methods = ["GET"]
path = "/api/live"
kind = "attach"
chat_id = "cookie:chat"

[[routes]]
methods = ["GET"]
path = "/api/chats/{id}/status"
kind = "status"
chat_id = "header:X-Chat"

[[routes]]
methods = ["POST"]
path = "/api/stop"
kind = "stop"
chat_id = "json:/target/chat_id"

[[routes]]
methods = ["GET", "POST"]
path = "/files/{*rest}"
kind = "passthrough"
"#;

/// A backend streaming `turn(6)` on `/api/chat/{id}`, held after 2 events until `gate` opens;
/// any other path gets a JSON echo of its method and path.
async fn backend_for(gate: &Gate) -> Backend {
    let g = gate.clone();
    backend(move |r: &Req| {
        if r.path.starts_with("/api/chat/") && r.path != "/api/chat/plain" {
            return scripted_turn(&turn(6), Some((2, &g)));
        }
        let echo = json!({"method": r.method, "path": r.path}).to_string();
        fixed_answer(200, "application/json", echo)
    })
    .await
}

async fn json_body(r: &mut Resp) -> Value {
    serde_json::from_slice(&r.body_to_end().await).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_keyed_by_a_path_capture_is_served_by_routes_reading_other_sources() {
    let gate = Gate::default();
    let be = backend_for(&gate).await;
    let tether = sidecar(be.addr, ROUTES).await;
    // The capture is percent-decoded: the chat is "c 1".
    let body = json!({"protocol": 1}).to_string();
    let mut client = request(
        tether.addr,
        "POST",
        "/api/chat/c%201",
        &[("content-type", "application/json")],
        body.as_bytes(),
    )
    .await;
    assert_eq!(client.status, 200);
    let run = client.frame().await.unwrap().json["run_id"]
        .as_str()
        .unwrap()
        .to_string();
    client.frame().await.unwrap();
    client.frame().await.unwrap();
    assert!(tether.current_run("c 1").is_some());
    assert_eq!(be.requests.lock()[0].path, "/api/chat/c%201");

    // Status: the chat id from a header (the path capture is not read by this route).
    let status = |chat: &'static str| {
        let addr = tether.addr;
        async move {
            let mut r = request(addr, "GET", "/api/chats/x/status", &[("X-Chat", chat)], b"").await;
            (
                r.status,
                if r.status == 200 {
                    json_body(&mut r).await
                } else {
                    Value::Null
                },
            )
        }
    };
    let (code, v) = status("c 1").await;
    assert_eq!(
        (code, v["run_id"].as_str(), v["status"].as_str()),
        (200, Some(run.as_str()), Some("running"))
    );
    assert_eq!(status("other").await.0, 204);
    let mut r = request(tether.addr, "GET", "/api/chats/x/status", &[], b"").await;
    assert_eq!(
        (r.status, json_body(&mut r).await["error"].clone()),
        (400, json!("missing_chat_id"))
    );

    // Attach: the chat id from a cookie, the cursor from the query as on any GET attach.
    let mut observer = request(
        tether.addr,
        "GET",
        &format!("/api/live?run_id={run}&after_seq=1"),
        &[("cookie", "theme=dark; chat=c 1")],
        b"",
    )
    .await;
    assert_eq!(observer.status, 200);
    let first = observer.frame().await.unwrap();
    assert_eq!((first.ty(), first.seq()), ("STREAM_EVENT", 2));

    // Stop: the chat id from a nested JSON pointer.
    let mut r = post(
        tether.addr,
        "/api/stop",
        &json!({"target": {"chat_id": "c 1"}}),
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(json_body(&mut r).await["run_id"], run.as_str());
    for stream in [&mut client, &mut observer] {
        let end = stream.frames_to_end().await.pop().unwrap();
        assert_eq!(
            (end.ty(), end.json["reason"].clone()),
            ("STREAM_END", json!("cancelled"))
        );
    }
    let mut r = post(tether.addr, "/api/stop", &json!({"target": {}})).await;
    assert_eq!(
        (r.status, json_body(&mut r).await["error"].clone()),
        (400, json!("missing_chat_id"))
    );
    gate.open();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routes_match_in_file_order_and_a_catch_all_pass_through_is_proxied() {
    let gate = Gate::default();
    let be = backend_for(&gate).await;
    let tether = sidecar(be.addr, ROUTES).await;
    // `/api/chat/plain` also matches the record pattern; the pass-through listed first wins.
    let mut r = post(tether.addr, "/api/chat/plain", &json!({"protocol": 1})).await;
    assert_eq!(
        (r.status, json_body(&mut r).await),
        (200, json!({"method": "POST", "path": "/api/chat/plain"}))
    );
    assert!(tether.current_run("plain").is_none());
    // The catch-all takes any depth, the query rides along.
    for (method, path) in [("GET", "/files/a/b%20c.txt?x=1"), ("POST", "/files/d")] {
        let mut r = request(tether.addr, method, path, &[], b"").await;
        assert_eq!(
            (r.status, json_body(&mut r).await),
            (200, json!({"method": method, "path": path}))
        );
    }
    // A method no route lists is passed through too (no route matches).
    let mut r = request(tether.addr, "DELETE", "/api/live", &[], b"").await;
    assert_eq!(json_body(&mut r).await["path"], "/api/live");
    gate.open();
}

/// tether answers its own routes itself and hands every other request to Pingora's proxy
/// (`server/front.rs`); a kept-alive client connection goes from one to the other and back,
/// each request answered whole on the same socket.
#[tokio::test]
async fn one_kept_alive_connection_carries_turns_and_pass_through_requests_in_turn() {
    let events = turn(4);
    let script = scripted_turn(&events, None);
    let be = backend(move |req| match req.path.as_str() {
        "/chat" => script.clone(),
        _ => fixed_answer(200, "text/plain", "plain"),
    })
    .await;
    let tether = sidecar(be.addr, "").await;
    let body = chat("k").to_string().into_bytes();
    let mut r = request(tether.addr, "POST", "/chat", &[], &body).await;
    let frames = r.frames_to_end().await;
    assert_eq!(frames.last().unwrap().json["persisted"], true);

    let mut r = r.then("GET", "/plain", b"").await;
    assert_eq!((r.status, &r.body_to_end().await[..]), (200, &b"plain"[..]));

    let mut r = r.then("GET", "/chat/run?chat_id=k", b"").await;
    assert_eq!(r.status, 200);
    let status: Value = serde_json::from_slice(&r.body_to_end().await).unwrap();
    assert_eq!(status["status"], "completed", "{status}");

    let mut r = r
        .then("POST", "/chat", &chat("k2").to_string().into_bytes())
        .await;
    let mut state = Reduced::default();
    state.apply_frames(&r.frames_to_end().await, 0);
    assert_eq!(state, Reduced::of(&events));
    let paths: Vec<String> = be.requests.lock().iter().map(|q| q.path.clone()).collect();
    assert_eq!(paths, ["/chat", "/plain", "/chat"]);
}
