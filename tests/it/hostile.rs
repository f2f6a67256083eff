//! Hostile clients at the proxy (malformed HTTP, truncated bodies, slow-loris headers, abrupt
//! resets) while a turn is recorded: tether stays up, serves a normal turn, and loses no event.
//! Clients that name their caller twice are refused; a client's `X-Tether-Run-Id` never reaches
//! the backend. And backends that end their answers in doubt: tether never claims a save it
//! cannot see.

use crate::support::*;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

async fn raw(addr: std::net::SocketAddr, bytes: &[u8]) -> TcpStream {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(bytes).await.unwrap();
    s
}

/// Everything the server answers on `s` up to its close of the connection, which must come
/// within the harness's limit and be clean (FIN, not RST).
async fn answer(mut s: TcpStream) -> Vec<u8> {
    let mut out = Vec::new();
    within("the server closes the connection", s.read_to_end(&mut out))
        .await
        .unwrap_or_else(|e| panic!("not a clean close: {e}"));
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_clients_do_not_disturb_a_recorded_turn_or_the_next_one() {
    let gate = Gate::default();
    let events = turn(40);
    let be = turn_backend(events.clone(), Some((10, gate.clone()))).await;
    let tether = sidecar(be.addr, "").await;
    let mut victim = post(tether.addr, "/chat", &chat("v")).await;
    let mut frames = vec![victim.frame().await.unwrap()];
    while frames.last().unwrap().seq() < 10 {
        frames.push(victim.frame().await.unwrap());
    }

    // Malformed request lines and headers: a bare 400 that closes the connection.
    for junk in [
        &b"GARBAGE\r\n\r\n"[..],
        b"POST /chat HTTP/9.9\r\n\r\n",
        b"\x00\x01\x02\xff\xfe\r\n\r\n",
        b"POST /chat HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n",
    ] {
        let a = answer(raw(tether.addr, junk).await).await;
        let what = format!(
            "{:?} got {:?}",
            String::from_utf8_lossy(junk),
            String::from_utf8_lossy(&a)
        );
        let head = parse_head(&a).unwrap_or_else(|| panic!("{what}: no whole response head"));
        assert_eq!(head.status, 400, "{what}");
        assert_eq!(head.header("connection"), Some("close"), "{what}");
        assert_eq!(head.header("content-length"), Some("0"), "{what}");
        assert_eq!(a.len(), head.len, "{what}: bytes after the head");
    }
    // A chunked body whose chunk size is not hex: closed without an answer.
    let a = answer(
        raw(
            tether.addr,
            b"POST /chat HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nbad\r\n",
        )
        .await,
    )
    .await;
    assert_eq!(String::from_utf8_lossy(&a), "");
    // A query that is not UTF-8 once decoded: tether's own 400, then the close the client asked for.
    let a = answer(
        raw(
            tether.addr,
            b"GET /chat/live?chat_id=%ff HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        )
        .await,
    )
    .await;
    let head = parse_head(&a).expect("a whole response head");
    assert_eq!(head.status, 400);
    assert_eq!(head.header("connection"), Some("close"));
    let body: Value = serde_json::from_slice(&a[head.len..]).unwrap();
    assert_eq!(body["error"], "invalid_query");
    // A truncated body: the client promises 100 bytes, sends 10, and leaves; closed without an
    // answer.
    let mut s = raw(
        tether.addr,
        b"POST /chat HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"chat_id\"",
    )
    .await;
    s.shutdown().await.unwrap();
    assert_eq!(String::from_utf8_lossy(&answer(s).await), "");
    // Slow-loris: a header that never ends, held open for the rest of the test.
    let loris = raw(tether.addr, b"POST /chat HTTP/1.1\r\nHost: x\r\nX-Slow: a").await;
    // Abrupt resets: right after connecting, and in the middle of an attach stream.
    close_with_rst(TcpStream::connect(tether.addr).await.unwrap());
    let mut watcher = post(tether.addr, "/chat/live", &chat("v")).await;
    watcher.frame().await.unwrap();
    watcher.kill();
    // Nothing was forwarded for the hostile requests.
    assert_eq!(be.requests.lock().len(), 1);

    gate.open();
    frames.extend(victim.frames_to_end().await);
    let mut state = Reduced::default();
    state.apply_frames(&frames, 0);
    assert_eq!(
        state,
        Reduced::of(&events),
        "the recorded turn lost nothing"
    );
    assert_eq!(frames.last().unwrap().json["persisted"], true);
    assert_eq!(frames.last().unwrap().seq(), events.len() as u64);

    // And a normal turn still works.
    let next = post(tether.addr, "/chat", &chat("n"))
        .await
        .frames_to_end()
        .await;
    let mut state = Reduced::default();
    state.apply_frames(&next, 0);
    assert_eq!(state, Reduced::of(&events));
    drop(loris);
}

/// A subject named more than once (two header lines, two `Authorization` headers, the cookie
/// twice in one or two `Cookie` headers) is refused 401: a gateway that appends the verified
/// identity to what the client sent never lets the client pick the owner. The refused turn never
/// reaches the backend; one value of each still works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subject_given_twice_is_refused_as_unauthenticated() {
    let be = turn_backend(turn(2), None).await;
    let body = chat("c").to_string();
    for (subject, twice, once) in [
        (
            "header:X-User",
            vec![("X-User", "alice"), ("x-user", "mallory")],
            vec![("X-User", "alice")],
        ),
        (
            "authorization",
            vec![("authorization", "Bearer a"), ("Authorization", "Bearer m")],
            vec![("authorization", "Bearer a")],
        ),
        (
            "cookie:sid",
            vec![("cookie", "sid=alice; theme=dark; sid=mallory")],
            vec![("cookie", "theme=dark; sid=alice")],
        ),
        (
            "cookie:sid",
            vec![("cookie", "sid=alice"), ("cookie", "sid=mallory")],
            vec![("cookie", "sid=alice"), ("cookie", "theme=dark")],
        ),
    ] {
        let tether = sidecar(be.addr, &format!("[auth]\nsubject = \"{subject}\"\n")).await;
        let before = be.requests.lock().len();
        for (method, path, payload) in [
            ("POST", "/chat", body.as_bytes()),
            ("POST", "/chat/live", body.as_bytes()),
            ("GET", "/chat/run?chat_id=c", &b""[..]),
        ] {
            let mut r = request(tether.addr, method, path, &twice, payload).await;
            assert_eq!(r.status, 401, "{subject} {twice:?} {path}");
            let v: Value = serde_json::from_slice(&r.body_to_end().await).unwrap();
            assert_eq!(v["error"], "unauthenticated", "{subject} {twice:?} {path}");
        }
        assert_eq!(
            be.requests.lock().len(),
            before,
            "{subject}: nothing forwarded"
        );
        let mut r = request(tether.addr, "POST", "/chat", &once, body.as_bytes()).await;
        assert_eq!(r.status, 200, "{subject} {once:?}");
        r.frames_to_end().await;
    }
}

/// `X-Tether-Run-Id` is tether's to set: a client's value never reaches the backend, on any kind
/// of forwarded request; a record route's request carries tether's run id, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_sent_run_id_header_never_reaches_the_backend() {
    let gate = Gate::default();
    let g = gate.clone();
    let be = backend(move |r: &Req| match r.path.as_str() {
        "/chat" => scripted_turn(&turn(4), Some((2, &g))),
        _ => fixed_answer(200, "application/json", r#"{"ok":true}"#),
    })
    .await;
    let routes = r#"
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
forward = true

[[routes]]
methods = ["POST"]
path = "/chat/approve"
kind = "annotate"

[[routes]]
methods = ["POST"]
path = "/chat/other"
kind = "passthrough"
"#;
    let tether = sidecar(be.addr, routes).await;
    let forged = [
        ("X-Tether-Run-Id", "forged"),
        ("x-tether-run-id", "forged-too"),
    ];
    let mut turn_r = request(
        tether.addr,
        "POST",
        "/chat",
        &forged,
        chat("c").to_string().as_bytes(),
    )
    .await;
    assert_eq!(turn_r.status, 200);
    let run = turn_r.frame().await.unwrap().json["run_id"]
        .as_str()
        .unwrap()
        .to_string();
    let forwarded = [
        ("POST", "/chat/live", r#"{"chat_id":"c"}"#),
        (
            "POST",
            "/chat/approve",
            r#"{"chat_id":"c","tool_call_id":"t1","decision":"approve"}"#,
        ),
        ("POST", "/chat/other", r#"{"chat_id":"c"}"#),
        ("GET", "/elsewhere", ""),
        ("POST", "/chat/stop", r#"{"chat_id":"c"}"#),
    ];
    for (method, path, payload) in forwarded {
        let mut r = request(tether.addr, method, path, &forged, payload.as_bytes()).await;
        assert!(r.status < 300, "{path}: {}", r.status);
        r.body_to_end().await;
    }
    eventually("the forwarded stop reaches the backend", || {
        be.requests.lock().iter().any(|r| r.path == "/chat/stop")
    })
    .await;
    gate.open();
    turn_r.frames_to_end().await;
    let seen = be.requests.lock().clone();
    let ids = |path: &str| -> Vec<String> {
        let req = seen
            .iter()
            .find(|r| r.path == path)
            .unwrap_or_else(|| panic!("{path} was not forwarded"));
        req.headers
            .iter()
            .filter(|(k, _)| k == "x-tether-run-id")
            .map(|(_, v)| v.clone())
            .collect()
    };
    assert_eq!(ids("/chat"), [run]);
    for (_, path, _) in forwarded {
        assert_eq!(ids(path), Vec::<String>::new(), "{path}");
    }
}

/// A backend answering each request with a close-delimited SSE body (no length, no chunking)
/// of the events `events(chat_id)` gives, then closing the connection (FIN, as a crashed
/// process's kernel does).
async fn close_delimited_backend(
    events: impl Fn(&str) -> Vec<Value> + Send + Sync + 'static,
) -> std::net::SocketAddr {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let events = std::sync::Arc::new(events);
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let events = events.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let body = loop {
                    let mut more = [0; 4096];
                    match sock.read(&mut more).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&more[..n]),
                    }
                    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                        continue;
                    };
                    let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
                    let len: usize = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .map_or(0, |v| v.trim().parse().unwrap());
                    if buf.len() >= end + 4 + len {
                        break buf[end + 4..end + 4 + len].to_vec();
                    }
                };
                let chat_id = serde_json::from_slice::<Value>(&body).unwrap()["chat_id"]
                    .as_str()
                    .unwrap()
                    .to_string();
                let mut out =
                    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n".to_vec();
                for e in events(&chat_id) {
                    out.extend_from_slice(&sse(&e));
                }
                let _ = sock.write_all(&out).await;
                let _ = sock.shutdown().await;
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_close_delimited_answer_cut_before_its_terminal_event_is_not_saved_by_clean_end() {
    let events = turn(4);
    let ev = events.clone();
    let addr = close_delimited_backend(move |chat_id| match chat_id {
        "cut" => ev[..3].to_vec(),
        _ => ev.clone(),
    })
    .await;
    let routes =
        "[[routes]]\nmethods=[\"POST\"]\npath=\"/chat\"\nkind=\"record\"\ncommit=\"clean_end\"\n";
    let tether = sidecar(addr, routes).await;
    let f = post(tether.addr, "/chat", &chat("cut"))
        .await
        .frames_to_end()
        .await;
    let end = f.last().unwrap();
    assert_eq!(end.ty(), "STREAM_END");
    assert_eq!(
        (end.json["persisted"].clone(), end.json["reason"].clone()),
        (json!(false), json!("upstream_reset"))
    );
    assert_eq!(end.seq(), 3);
    let f = post(tether.addr, "/chat", &chat("whole"))
        .await
        .frames_to_end()
        .await;
    let end = f.last().unwrap();
    assert_eq!(end.json["persisted"], true, "its terminal event arrived");
    assert_eq!(end.seq(), events.len() as u64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_sent_a_byte_at_a_time_is_closed_at_the_header_deadline() {
    let be = turn_backend(turn(3), None).await;
    let tether = sidecar(be.addr, "[server]\nheader_timeout = \"300ms\"\n").await;
    let (mut rd, mut wr) = TcpStream::connect(tether.addr).await.unwrap().into_split();
    // One byte every 50 ms, far inside any per-read timeout; the head never ends.
    let dribble = tokio::spawn(async move {
        let start = b"POST /chat HTTP/1.1\r\nHost: x\r\nX-Slow: ";
        for b in start.iter().chain(std::iter::repeat(&b'a')) {
            if wr.write_all(&[*b]).await.is_err() {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    });
    let mut got = Vec::new();
    // A close (FIN, or RST once a dribbled byte meets the closed socket) with nothing answered.
    let _ = within(
        "the header deadline closes the connection",
        rd.read_to_end(&mut got),
    )
    .await;
    assert_eq!(String::from_utf8_lossy(&got), "");
    dribble.abort();
    assert_eq!(
        tether
            .metric("tether_downstream_timeouts_total{kind=\"header\"}")
            .await,
        1.0
    );
    let t = &tether;
    eventually_async("the connection is no longer counted", || async move {
        t.metric("tether_downstream_connections").await == 0.0
    })
    .await;
    assert!(be.requests.lock().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_kept_alive_connection_is_closed_but_a_stream_outliving_both_limits_is_not() {
    let gate = Gate::default();
    let events = turn(5);
    let script = scripted_turn(&events, Some((2, &gate)));
    let be = backend(move |req| match req.path.as_str() {
        "/chat" => script.clone(),
        _ => fixed_answer(200, "text/plain", "plain"),
    })
    .await;
    let limits = "[server]\nheader_timeout = \"300ms\"\nkeepalive_timeout = \"300ms\"\nheartbeat = \"100ms\"\n";
    let tether = sidecar(be.addr, limits).await;
    let mut stream = post(tether.addr, "/chat", &chat("long")).await;
    let mut frames = vec![stream.frame().await.unwrap()];
    while frames.last().unwrap().seq() < 2 {
        frames.push(stream.frame().await.unwrap());
    }

    // A request answered in full, then nothing more on its connection: closed after 300 ms.
    let mut plain = request(tether.addr, "GET", "/plain", &[], b"").await;
    assert_eq!(
        (plain.status, &plain.body_to_end().await[..]),
        (200, &b"plain"[..])
    );
    assert_eq!(String::from_utf8_lossy(&plain.rest_until_close().await), "");
    assert_eq!(
        tether
            .metric("tether_downstream_timeouts_total{kind=\"keepalive\"}")
            .await,
        1.0
    );

    // Meanwhile the stream idles for 8 heartbeats (800 ms by tether's clock), then ends whole.
    assert!(stream.read_until(&b": keepalive\n\n".repeat(8)).await);
    gate.open();
    frames.extend(stream.frames_to_end().await);
    let end = frames.last().unwrap();
    assert_eq!(
        (end.ty(), end.json["persisted"].clone()),
        ("STREAM_END", Value::Bool(true))
    );
    let mut state = Reduced::default();
    state.apply_frames(&frames, 0);
    assert_eq!(state, Reduced::of(&events));
    assert_eq!(
        tether
            .metric("tether_downstream_timeouts_total{kind=\"header\"}")
            .await,
        0.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_over_max_connections_gets_503_and_the_count_comes_back_to_zero() {
    let be = backend(|_| fixed_answer(200, "text/plain", "plain")).await;
    let tether = sidecar(be.addr, "[server]\nmax_connections = 2\n").await;
    let held = [
        TcpStream::connect(tether.addr).await.unwrap(),
        TcpStream::connect(tether.addr).await.unwrap(),
    ];
    let t = &tether;
    eventually_async("two connections open", || async move {
        t.metric("tether_downstream_connections").await == 2.0
    })
    .await;

    let mut third = request(tether.addr, "GET", "/plain", &[], b"").await;
    assert_eq!(third.status, 503);
    assert_eq!(third.header("connection"), Some("close"));
    assert_eq!(third.header("content-type"), Some("application/json"));
    let body: Value = serde_json::from_slice(&third.body_to_end().await).unwrap();
    assert_eq!(body["error"], "too_many_connections");
    assert_eq!(String::from_utf8_lossy(&third.rest_until_close().await), "");
    assert_eq!(
        tether
            .metric("tether_downstream_connections_refused_total")
            .await,
        1.0
    );
    assert!(be.requests.lock().is_empty(), "nothing was forwarded");

    drop(held);
    eventually_async("the connections are no longer counted", || async move {
        t.metric("tether_downstream_connections").await == 0.0
    })
    .await;
    let mut next = request(tether.addr, "GET", "/plain", &[], b"").await;
    assert_eq!(
        (next.status, &next.body_to_end().await[..]),
        (200, &b"plain"[..])
    );
}

/// tether's own routes, each kind once, for a chat `c`: record, attach, stop, status, annotate
/// and a `from_start` resume; and a pass-through route.
const OWN_ROUTES: &str = r#"
[auth]
subject = "header:X-User"

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
forward = true

[[routes]]
methods = ["GET"]
path = "/chat/run"
kind = "status"
chat_id = "query:chat_id"

[[routes]]
methods = ["POST"]
path = "/chat/approve"
kind = "annotate"

[[routes]]
methods = ["GET"]
path = "/api/chat/{id}/stream"
kind = "resume"
dialect = "from_start"
chat_id = "path:id"

[[routes]]
methods = ["POST"]
path = "/other"
kind = "passthrough"
"#;

/// With a subject configured, a record (protocol 1 or legacy), attach, stop (even one that
/// would be forwarded), status, annotate or resume request without the identity gets `401
/// unauthenticated`, while a run of chat `c` is live; the backend receives none of them, and
/// the live run is untouched. With the identity, each is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tethers_own_routes_refuse_a_request_without_the_identity_and_forward_nothing() {
    let gate = Gate::default();
    let g = gate.clone();
    let be = backend(move |r: &Req| match r.path.as_str() {
        "/chat" => scripted_turn(&turn(4), Some((2, &g))),
        _ => fixed_answer(200, "application/json", r#"{"ok":true}"#),
    })
    .await;
    let tether = sidecar(be.addr, OWN_ROUTES).await;
    let alice = [("x-user", "alice")];
    let mut turn_r = request(
        tether.addr,
        "POST",
        "/chat",
        &alice,
        chat("c").to_string().as_bytes(),
    )
    .await;
    assert_eq!(turn_r.status, 200);
    let run = turn_r.frame().await.unwrap().json["run_id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(be.requests.lock().len(), 1);

    let stop = json!({"chat_id":"c","run_id":run}).to_string();
    let approve = r#"{"chat_id":"c","tool_call_id":"t1","decision":"approve"}"#;
    let cursor_body = cursor("c", &run, 1).to_string();
    let p1 = chat("c").to_string();
    let refused: [(&str, &str, &[u8]); 8] = [
        ("POST", "/chat", p1.as_bytes()),
        ("POST", "/chat", br#"{"chat_id":"c"}"#),
        ("POST", "/chat/live", p1.as_bytes()),
        ("POST", "/chat/live", cursor_body.as_bytes()),
        ("POST", "/chat/stop", stop.as_bytes()),
        ("GET", "/chat/run?chat_id=c", b""),
        ("POST", "/chat/approve", approve.as_bytes()),
        ("GET", "/api/chat/c/stream", b""),
    ];
    for (method, path, body) in refused {
        // No identity at all, and an empty one.
        for headers in [&[][..], &[("x-user", "")][..]] {
            let mut r = request(tether.addr, method, path, headers, body).await;
            let what = format!("{method} {path} {headers:?}");
            assert_eq!(r.status, 401, "{what}");
            let v: Value = serde_json::from_slice(&r.body_to_end().await).unwrap();
            assert_eq!(v["error"], "unauthenticated", "{what}");
        }
    }
    assert_eq!(
        be.requests.lock().len(),
        1,
        "nothing but Alice's turn reached the backend: {:?}",
        be.requests.lock()
    );
    // Alice's run was not stopped, annotated or superseded.
    let mut r = request(tether.addr, "GET", "/chat/run?chat_id=c", &alice, b"").await;
    let v: Value = serde_json::from_slice(&r.body_to_end().await).unwrap();
    assert_eq!(
        (v["run_id"].as_str(), v["status"].as_str()),
        (Some(run.as_str()), Some("running"))
    );
    // With the identity, the same requests are served (the annotate and stop forwarded).
    let mut r = request(
        tether.addr,
        "POST",
        "/chat/approve",
        &alice,
        approve.as_bytes(),
    )
    .await;
    assert_eq!(r.status, 200);
    r.body_to_end().await;
    let mut resumed = request(tether.addr, "GET", "/api/chat/c/stream", &alice, b"").await;
    assert_eq!(resumed.status, 200);
    let mut r = request(tether.addr, "POST", "/chat/stop", &alice, stop.as_bytes()).await;
    assert_eq!(r.status, 200);
    r.body_to_end().await;
    eventually("the annotate and the stop are forwarded", || {
        let seen = be.requests.lock();
        ["/chat/approve", "/chat/stop"]
            .iter()
            .all(|p| seen.iter().any(|r| r.path == *p))
    })
    .await;
    gate.open();
    let end = turn_r.frames_to_end().await.pop().unwrap();
    assert_eq!(end.json["reason"], "cancelled");
    resumed.body_to_end().await;
}

/// With a subject configured, what tether does not answer itself still goes to the backend as
/// sent, identity or not: a pass-through route, a request that matches no route, and an attach
/// without `"protocol":1` (the backend's own checks apply to them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_identity_pass_through_and_legacy_attaches_are_still_forwarded() {
    let be = backend(|_| fixed_answer(200, "application/json", r#"{"ok":true}"#)).await;
    let tether = sidecar(be.addr, OWN_ROUTES).await;
    for (method, path, body) in [
        ("POST", "/other", &br#"{"chat_id":"c"}"#[..]),
        ("GET", "/elsewhere", b""),
        ("POST", "/chat/live", br#"{"chat_id":"c"}"#),
    ] {
        let mut r = request(tether.addr, method, path, &[], body).await;
        assert_eq!(
            (r.status, &r.body_to_end().await[..]),
            (200, &br#"{"ok":true}"#[..]),
            "{method} {path}"
        );
    }
    let paths: Vec<String> = be.requests.lock().iter().map(|r| r.path.clone()).collect();
    assert_eq!(paths, ["/other", "/elsewhere", "/chat/live"]);
}
