//! Bad input, limits, pass-through and the binary's configuration errors.

use crate::support::*;
use bytes::Bytes;
use serde_json::{json, Value};

async fn error_code(r: &mut Resp) -> String {
    let v: Value = serde_json::from_slice(&r.body_to_end().await).unwrap();
    assert!(v["message"].as_str().is_some_and(|m| !m.is_empty()));
    v["error"].as_str().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_requests_get_400_with_a_code_and_nothing_is_forwarded() {
    let be = backend(|_| vec![sse_head(), Step::End]).await;
    let tether = sidecar(be.addr, "").await;
    let cases: [(&str, &[u8], &str); 9] = [
        ("/chat", b"{not json", "invalid_json"),
        ("/chat", b"[1,2]", "invalid_body"),
        ("/chat", b"{}", "missing_chat_id"),
        ("/chat", br#"{"chat_id":12}"#, "invalid_chat_id"),
        ("/chat", br#"{"chat_id":"a\u0001b"}"#, "invalid_chat_id"),
        (
            "/chat/live",
            br#"{"chat_id":"c","protocol":1,"after_seq":-1}"#,
            "invalid_cursor",
        ),
        (
            "/chat/live",
            br#"{"chat_id":"c","protocol":1,"after_seq":"7"}"#,
            "invalid_cursor",
        ),
        (
            "/chat/live",
            br#"{"chat_id":"c","protocol":1,"run_id":"../x"}"#,
            "invalid_run_id",
        ),
        (
            "/chat/live",
            br#"{"chat_id":"c","protocol":"one"}"#,
            "invalid_protocol",
        ),
    ];
    for (path, body, code) in cases {
        let mut r = request(
            tether.addr,
            "POST",
            path,
            &[("content-type", "application/json")],
            body,
        )
        .await;
        assert_eq!(r.status, 400, "{path} {}", String::from_utf8_lossy(body));
        assert_eq!(r.header("content-type"), Some("application/json"));
        assert_eq!(
            error_code(&mut r).await,
            code,
            "{}",
            String::from_utf8_lossy(body)
        );
    }
    let long = json!({"chat_id": "x".repeat(257), "protocol": 1});
    assert_eq!(
        error_code(&mut post(tether.addr, "/chat", &long).await).await,
        "invalid_chat_id"
    );
    let mut r = request(
        tether.addr,
        "GET",
        "/chat/live?chat_id=c",
        &[("last-event-id", "nocolon")],
        b"",
    )
    .await;
    assert_eq!(
        (r.status, error_code(&mut r).await.as_str()),
        (400, "invalid_last_event_id")
    );
    assert!(
        be.requests.lock().is_empty(),
        "a rejected request reached the backend"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_over_the_cap_gets_413() {
    let be = backend(|_| vec![sse_head(), Step::End]).await;
    let tether = sidecar(be.addr, "[recorder]\nmax_body_bytes = 1024\n").await;
    let big = json!({"chat_id":"c","protocol":1,"pad":"p".repeat(2000)});
    for path in ["/chat", "/chat/live"] {
        let mut r = post(tether.addr, path, &big).await;
        assert_eq!(r.status, 413, "{path}");
        assert_eq!(error_code(&mut r).await, "body_too_large");
    }
    assert!(be.requests.lock().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pass_through_body_larger_than_64_kib_arrives_intact_both_ways() {
    let be = backend(|r: &Req| {
        vec![
            Step::Head(
                201,
                vec![
                    ("content-type", "application/octet-stream".into()),
                    ("content-length", r.body.len().to_string()),
                    ("x-path", r.path.clone()),
                ],
            ),
            Step::Raw(r.body.clone()),
        ]
    })
    .await;
    let tether = sidecar(be.addr, "").await;
    let body: Vec<u8> = (0..300 * 1024).map(|i| (i * 7 % 251) as u8).collect();
    let mut r = request(tether.addr, "POST", "/chat/send?x=1", &[], &body).await;
    assert_eq!(r.status, 201);
    assert_eq!(r.header("x-path"), Some("/chat/send?x=1"));
    assert_eq!(r.body_to_end().await, Bytes::from(body.clone()));
    assert_eq!(be.requests.lock()[0].body, Bytes::from(body));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pass_through_stream_is_not_buffered() {
    let gate = Gate::default();
    let g = gate.clone();
    let be = backend(move |_| {
        vec![
            sse_head(),
            Step::Chunk(Bytes::from_static(b"data: first\n\n")),
            Step::Wait(g.clone()),
            Step::Chunk(Bytes::from_static(b"data: second\n\n")),
            Step::End,
        ]
    })
    .await;
    let tether = sidecar(be.addr, "").await;
    let mut r = request(tether.addr, "GET", "/events", &[], b"").await;
    // The first event arrives while the backend is still holding the second.
    assert!(r.read_until(b"data: first\n\n").await);
    gate.open();
    assert!(r.read_until(b"data: second\n\n").await);
}

#[test]
fn an_invalid_configuration_exits_64_naming_the_key() {
    let bin = env!("CARGO_BIN_EXE_tether");
    let out = std::process::Command::new(bin)
        .args(["--window", "0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("recorder.window"), "{err}");
    let dir = std::env::temp_dir().join(format!("tether-conf-{}", std::process::id()));
    std::fs::write(&dir, "[recorder]\nwindw = 3\n").unwrap();
    let out = std::process::Command::new(bin)
        .arg("--config")
        .arg(&dir)
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&dir);
    assert_eq!(out.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&out.stderr).contains("windw"));
    let out = std::process::Command::new(bin)
        .env("TETHER_RETENTION", "soon")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--retention") && err.contains("soon"), "{err}");
}

#[test]
fn the_binary_raises_its_open_files_soft_limit_to_the_hard_limit() {
    use std::io::BufRead;
    let (_, hard) = rlimit::getrlimit(rlimit::Resource::NOFILE).unwrap();
    let low = 256.min(hard);
    let mut child = std::process::Command::new("sh")
        .arg("-c")
        .arg(r#"ulimit -S -n "$1" && exec "$0" --listen 127.0.0.1:0 --admin 127.0.0.1:0"#)
        .arg(env!("CARGO_BIN_EXE_tether"))
        .arg(low.to_string())
        .env("RUST_LOG", "info")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            if line.contains("open files") {
                let _ = tx.send(line);
                return;
            }
        }
    });
    let line = rx.recv_timeout(LIMIT);
    let _ = child.kill();
    let _ = child.wait();
    let line = line.expect("an open-files line in the log");
    assert!(
        line.contains(&format!("to {hard} (hard {hard})"))
            || (low == hard && line.contains(&format!("soft limit {hard}"))),
        "{line}"
    );
}

/// One AG-UI `CUSTOM` event of about `size` bytes on the wire.
fn pad_event(size: usize) -> Bytes {
    sse(&json!({"type":"CUSTOM","name":"pad","value":"x".repeat(size.saturating_sub(48))}))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_legacy_client_that_never_reads_is_cut_and_the_run_still_records_to_its_end() {
    // 400 events of 16 KiB: about 400 upstream reads, 6.4 MiB, far past the 1 MiB a legacy
    // client's queue may hold by default.
    const EVENTS: usize = 400;
    let gate = Gate::default();
    let g = gate.clone();
    let be = backend(move |_| {
        let mut s = vec![sse_head(), Step::Chunk(sse(&json!({"type":"RUN_STARTED"})))];
        s.extend((0..EVENTS).map(|_| Step::Chunk(pad_event(16 << 10))));
        s.push(Step::Wait(g.clone()));
        s.push(Step::Chunk(sse(&json!({"type":"RUN_FINISHED"}))));
        s.push(Step::End);
        s
    })
    .await;
    let tether = sidecar(be.addr, "").await;
    // A client with a tiny receive window that reads nothing past the response head.
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    sock.set_recv_buffer_size(4096).unwrap();
    let sock = sock.connect(tether.addr).await.unwrap();
    let body = json!({"chat_id":"slow"}).to_string();
    let mut r = request_on(
        sock,
        "POST",
        "/chat",
        &[("content-type", "application/json")],
        body.as_bytes(),
    )
    .await;
    assert_eq!(r.status, 200);
    let cut = "tether_legacy_clients_cut_total{reason=\"queue_full\"}";
    eventually_async("the slow client is cut", || async {
        tether.metric(cut).await == 1.0
    })
    .await;
    // The backend is still holding the end of the answer: the connection was closed on the
    // client, mid-stream, and what was queued for it is given back.
    let got = r.body_to_end().await;
    assert!(!r.ended, "a cut is not a clean end");
    assert!(
        got.len() < EVENTS * (16 << 10),
        "it got {} bytes",
        got.len()
    );
    eventually_async("the queue is given back", || async {
        tether.metric("tether_buffered_bytes").await == 0.0
    })
    .await;
    // The producer was not disturbed: the whole answer is recorded and persisted.
    gate.open();
    let persisted = "tether_runs_finished_total{outcome=\"persisted\"}";
    eventually_async("the run ends persisted", || async {
        tether.metric(persisted).await == 1.0
    })
    .await;
    assert_eq!(
        tether.metric("tether_upstream_events_total").await,
        (EVENTS + 2) as f64
    );
    assert_eq!(tether.metric("tether_buffered_bytes").await, 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_still_arriving_when_the_buffer_budget_is_spent_is_dropped_and_not_persisted() {
    // Two runs each send 80 KiB of one event and hold it; together they are over the 128 KiB
    // budget, so the second run's event is dropped.
    let partial = Bytes::from(format!(
        "data: {{\"type\":\"CUSTOM\",\"name\":\"big\",\"value\":\"{}",
        "x".repeat(80 << 10)
    ));
    let rest = Bytes::from_static(b"\"}\n\ndata: {\"type\":\"RUN_FINISHED\"}\n\n");
    let gates = [Gate::default(), Gate::default()];
    let g = gates.clone();
    let (p, r) = (partial.clone(), rest.clone());
    let be = backend(move |req| {
        let body: Value = serde_json::from_slice(&req.body).unwrap();
        let gate = &g[usize::from(body["chat_id"] == "second")];
        vec![
            sse_head(),
            Step::Chunk(sse(&json!({"type":"RUN_STARTED"}))),
            Step::Chunk(p.clone()),
            Step::Wait(gate.clone()),
            Step::Chunk(r.clone()),
            Step::End,
        ]
    })
    .await;
    let tether = sidecar(
        be.addr,
        "[recorder]\nmax_event_bytes = 102400\n[limits]\nmax_buffered_bytes = 131072\nmax_client_buffer_bytes = 131072\n",
    )
    .await;
    let held = partial.len() as f64;
    let mut first = post(tether.addr, "/chat", &chat("first")).await;
    // Counted as allocated: at least the event's bytes, at most half again (buffers grow by half).
    eventually_async("the first event is held", || async {
        let b = tether.metric("tether_buffered_bytes").await;
        b >= held && b <= held * 1.5
    })
    .await;
    let held = tether.metric("tether_buffered_bytes").await;
    let mut second = post(tether.addr, "/chat", &chat("second")).await;
    let dropped = "tether_events_dropped_total{reason=\"over_budget\"}";
    eventually_async("the second event is dropped", || async {
        tether.metric(dropped).await == 1.0
    })
    .await;
    assert_eq!(tether.metric("tether_buffered_bytes").await, held);
    for g in &gates {
        g.open();
    }
    let end = |f: &[Frame]| {
        let end = f.last().unwrap();
        assert_eq!(end.ty(), "STREAM_END");
        (end.json["persisted"].clone(), end.json["reason"].clone())
    };
    let f = first.frames_to_end().await;
    assert_eq!(end(&f), (json!(true), Value::Null));
    assert_eq!(f.iter().filter(|f| f.ty() == "STREAM_EVENT").count(), 3);
    let f = second.frames_to_end().await;
    assert_eq!(end(&f), (json!(false), json!("event_too_large")));
    let types: Vec<Value> = f
        .iter()
        .filter(|f| f.ty() == "STREAM_EVENT")
        .map(|f| f.json["event"]["type"].clone())
        .collect();
    assert_eq!(types, [json!("RUN_STARTED"), json!("RUN_FINISHED")]);
    assert_eq!(tether.metric("tether_buffered_bytes").await, 0.0);
}

/// `[upstream] max_run_duration` stops a run whose backend never ends: its client gets the
/// events so far, then `STREAM_END` `persisted: false`, `reason: "max_duration"`, and the
/// backend's connection is closed (what it writes after the deadline fails).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_longer_than_max_run_duration_is_stopped_as_max_duration() {
    let gate = Gate::default();
    let events = turn(4);
    let be = turn_backend(events.clone(), Some((2, gate.clone()))).await;
    let tether = sidecar(be.addr, "[upstream]\nmax_run_duration = \"300ms\"\n").await;
    let frames = post(tether.addr, "/chat", &chat("long"))
        .await
        .frames_to_end()
        .await;
    let end = frames.last().unwrap();
    assert_eq!(end.ty(), "STREAM_END");
    assert_eq!(
        (
            end.json["persisted"].clone(),
            end.json["reason"].clone(),
            end.seq()
        ),
        (json!(false), json!("max_duration"), 2)
    );
    let mut state = Reduced::default();
    state.apply_frames(&frames, 0);
    assert_eq!(state, Reduced::of(&events[..2]));
    assert_eq!(
        tether
            .metric("tether_runs_finished_total{outcome=\"not_persisted\"}")
            .await,
        1.0
    );
    gate.open();
    be.wait_answers(1).await;
    assert!(be.served.lock()[0].write_failed, "the backend was cut off");
}

/// A backend that takes the request and never sends its response head fails the turn after
/// `[upstream] idle_timeout`: `502 upstream_unreachable`, counted as an upstream timeout, and
/// the turn is not sent again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_that_never_sends_its_head_fails_the_turn_at_the_idle_timeout() {
    let never = Gate::default();
    let g = never.clone();
    let be = backend(move |_| vec![Step::Wait(g.clone())]).await;
    let tether = sidecar(be.addr, "[upstream]\nidle_timeout = \"300ms\"\n").await;
    let started = tokio::time::Instant::now();
    let mut r = post(tether.addr, "/chat", &chat("c")).await;
    assert_eq!(
        (r.status, error_code(&mut r).await),
        (502, "upstream_unreachable".to_string())
    );
    assert!(started.elapsed() >= std::time::Duration::from_millis(300));
    assert_eq!(
        tether
            .metric("tether_upstream_errors_total{kind=\"timeout\"}")
            .await,
        1.0
    );
    assert_eq!(be.requests.lock().len(), 1, "not retried");
    drop(never);
}

/// A listener that completes no more handshakes: its accept queue (backlog 0) is filled by one
/// connection it never accepts, so the kernel drops every later SYN and a connect to it hangs.
fn a_listener_that_takes_no_connects() -> (socket2::Socket, std::net::TcpStream) {
    use socket2::{Domain, Socket, Type};
    let s = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
    s.bind(
        &"127.0.0.1:0"
            .parse::<std::net::SocketAddr>()
            .unwrap()
            .into(),
    )
    .unwrap();
    s.listen(0).unwrap();
    let addr = s.local_addr().unwrap().as_socket().unwrap();
    let filler = std::net::TcpStream::connect(addr).unwrap();
    // The queue is full once a further connect no longer completes.
    let probe = std::net::TcpStream::connect_timeout(&addr, std::time::Duration::from_millis(200));
    assert!(probe.is_err(), "the accept queue is not full: {probe:?}");
    (s, filler)
}

/// `[upstream] connect_timeout` bounds a connect the backend never completes: `502
/// upstream_unreachable` after the timeout, counted as a connect error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connect_the_backend_never_completes_fails_at_the_connect_timeout() {
    let (listener, _filler) = a_listener_that_takes_no_connects();
    let addr = listener.local_addr().unwrap().as_socket().unwrap();
    let tether = sidecar(addr, "[upstream]\nconnect_timeout = \"300ms\"\n").await;
    let started = tokio::time::Instant::now();
    let mut r = post(tether.addr, "/chat", &chat("c")).await;
    assert_eq!(
        (r.status, error_code(&mut r).await),
        (502, "upstream_unreachable".to_string())
    );
    let took = started.elapsed();
    assert!(took >= std::time::Duration::from_millis(300), "{took:?}");
    assert_eq!(
        tether
            .metric("tether_upstream_errors_total{kind=\"connect\"}")
            .await,
        1.0
    );
}
