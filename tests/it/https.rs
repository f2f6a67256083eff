//! HTTPS on the proxy listener (`[server] tls_cert`/`tls_key`): a CA and a certificate made by the
//! test, and real TLS clients on loopback. Every kind of route answers over HTTP/2 (ALPN `h2`)
//! and over HTTP/1.1 inside TLS; eight streams on one connection follow eight chats at once; a
//! stream reset is a disconnect (the producer carries on, the turn is whole for the next
//! reader); a client that does not trust the certificate, or speaks plain HTTP to the port, is
//! refused and counted; a reload takes a new certificate for new connections while a stream on
//! an old one goes on (the SIGHUP wiring is in `ops`). The system's `curl --http2` (skipped when
//! absent or built without HTTP/2) records a turn, and killed mid-stream leaves the producer going.

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::*;

/// tether serving HTTPS with `server`'s certificate in front of `upstream`, plus `extra` TOML
/// (routes and the like).
pub(crate) async fn https_tether(
    upstream: std::net::SocketAddr,
    server: &Issued,
    extra: &str,
) -> Sidecar {
    sidecar_from(&format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nadmin = \"127.0.0.1:0\"\nupstream = \"{upstream}\"\n\
         tls_cert = \"{}\"\ntls_key = \"{}\"\nserve_client = true\n{extra}",
        toml_path(&server.cert_pem),
        toml_path(&server.key_pem)
    ))
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_of_route_answers_over_http2() {
    let events = turn(5);
    let ev = events.clone();
    let be = backend(move |r: &Req| match r.path.as_str() {
        "/other" => fixed_answer(200, "text/plain", "passed through"),
        _ => scripted_turn(&ev, None),
    })
    .await;
    let ca = TestCa::new("h2-routes");
    let server = ca.issue("listener", &["localhost"]);
    let tether = https_tether(be.addr, &server, "").await;
    let mut c = H2::connect(tether.addr, &ca).await;

    // Record.
    let mut rec = c.post("/chat", &chat("c")).await;
    assert_eq!(rec.status, 200);
    let frames = rec.frames_to_end().await;
    let mut state = Reduced::default();
    state.apply_frames(&frames, 0);
    assert_eq!(state, Reduced::of(&events));
    assert_eq!(frames.last().unwrap().json["persisted"], json!(true));
    let run = frames[0].json["run_id"].clone();
    // The backend got an HTTP/1.1 request with the client's authority as its Host.
    eventually("the backend logged the request", || {
        be.requests.lock().len() == 1
    })
    .await;
    assert_eq!(
        be.requests.lock()[0].header("host").map(str::to_string),
        Some("localhost".to_string())
    );

    // Attach with a cursor: the events after it and the end.
    let mut live = c
        .post("/chat/live", &cursor("c", run.as_str().unwrap(), 2))
        .await;
    let again = live.frames_to_end().await;
    let head = frames.last().unwrap().seq();
    assert_eq!(again.len() as u64, head - 2 + 1, "{again:?}");
    assert_eq!(
        (again[0].seq(), again[0].json["run_id"].clone()),
        (3, run.clone())
    );
    assert_eq!(again.last().unwrap().ty(), "STREAM_END");

    // Status and stop (the run has ended: stop says so).
    let mut status = c.request("GET", "/chat/run?chat_id=c", &[], b"").await;
    let v: serde_json::Value = serde_json::from_slice(&status.body_to_end().await).unwrap();
    assert_eq!(
        (status.status, v["run_id"].clone(), v["status"].clone()),
        (200, run.clone(), json!("completed"))
    );
    let mut stop = c.post("/chat/stop", &chat("c")).await;
    let body = stop.body_to_end().await;
    assert!(stop.status < 500, "{} {body:?}", stop.status);

    // Pass-through and the browser client.
    let mut other = c.request("GET", "/other", &[], b"").await;
    assert_eq!(
        (other.status, other.body_to_end().await),
        (200, bytes::Bytes::from_static(b"passed through"))
    );
    let mut js = c.request("GET", "/_tether/client.js", &[], b"").await;
    let js_body = js.body_to_end().await;
    assert_eq!(js.status, 200);
    assert!(String::from_utf8_lossy(&js_body).contains("TetherClient"));

    // A bad request gets its JSON error over HTTP/2 too.
    let mut bad = c.post("/chat", &json!({"protocol": 1})).await;
    let e: serde_json::Value = serde_json::from_slice(&bad.body_to_end().await).unwrap();
    assert_eq!(
        (bad.status, e["error"].clone()),
        (400, json!("missing_chat_id"))
    );
    assert_eq!(tether.metric("tether_downstream_connections").await, 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http1_inside_tls_answers_too() {
    let be = turn_backend(turn(3), None).await;
    let ca = TestCa::new("h1-tls");
    let server = ca.issue("listener", &["localhost"]);
    let tether = https_tether(be.addr, &server, "").await;
    let body = serde_json::to_vec(&chat("c")).unwrap();
    let head = format!(
        "POST /chat HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    let (alpn, answer) = https1(tether.addr, &ca, &head, &body).await;
    assert_eq!(alpn, b"http/1.1");
    let text = String::from_utf8_lossy(&answer);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(text.contains("\"persisted\":true"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_streams_on_one_connection_follow_eight_chats_at_once() {
    let gate = Gate::default();
    let g = gate.clone();
    let be = backend(move |r: &Req| {
        let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
        let n = v["n"].as_u64().unwrap() as usize;
        // Each chat its own answer (its length), all held mid-turn until every stream is open.
        scripted_turn(&turn(3 + n), Some((2, &g)))
    })
    .await;
    let ca = TestCa::new("h2-eight");
    let server = ca.issue("listener", &["localhost"]);
    let tether = https_tether(be.addr, &server, "").await;
    let mut c = H2::connect(tether.addr, &ca).await;
    let mut streams = Vec::new();
    for n in 0..8 {
        let mut r = c
            .post(
                "/chat",
                &json!({"chat_id": format!("c{n}"), "protocol": 1, "n": n}),
            )
            .await;
        assert_eq!(r.status, 200);
        assert_eq!(r.frame().await.unwrap().ty(), "STREAM_SNAPSHOT");
        streams.push(r);
    }
    // Eight observers at once, on one client connection.
    assert_eq!(tether.metric("tether_observers_active").await, 8.0);
    assert_eq!(tether.metric("tether_downstream_connections").await, 1.0);
    gate.open();
    let all = futures_util::future::join_all(streams.iter_mut().map(|r| r.frames_to_end())).await;
    for (n, rest) in all.iter().enumerate() {
        let mut state = Reduced::default();
        state.apply_frames(rest, 0);
        assert_eq!(state, Reduced::of(&turn(3 + n)), "chat c{n}");
        assert_eq!(rest.last().unwrap().json["persisted"], json!(true), "c{n}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_reset_is_a_disconnect_and_the_producer_carries_on() {
    let events = turn(6);
    let gate = Gate::default();
    let be = turn_backend(events.clone(), Some((2, gate.clone()))).await;
    let ca = TestCa::new("h2-reset");
    let server = ca.issue("listener", &["localhost"]);
    let tether = https_tether(be.addr, &server, "").await;
    let mut c = H2::connect(tether.addr, &ca).await;
    let mut first = c.post("/chat", &chat("c")).await;
    let snapshot = first.frame().await.unwrap();
    assert_eq!(snapshot.ty(), "STREAM_SNAPSHOT");
    let run = snapshot.json["run_id"].as_str().unwrap().to_string();
    assert_eq!(tether.metric("tether_observers_active").await, 1.0);
    first.reset();
    // The reset is noticed while nothing is written (the upstream is held at the gate).
    eventually_async("the reset stream's observer is gone", || async {
        tether.metric("tether_observers_active").await == 0.0
    })
    .await;
    assert_eq!(tether.metric("tether_runs_active").await, 1.0);
    gate.open();
    // The same connection carries the reader who comes back: the whole turn, saved.
    let mut back = c.post("/chat/live", &cursor("c", &run, 0)).await;
    let frames = back.frames_to_end().await;
    let mut state = Reduced::default();
    state.apply_frames(&frames, 0);
    assert_eq!(state, Reduced::of(&events));
    assert_eq!(frames.last().unwrap().json["persisted"], json!(true));
    assert_eq!(be.requests.lock().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_does_not_trust_the_certificate_or_speaks_plain_http_is_refused_and_counted()
{
    let be = turn_backend(turn(2), None).await;
    let ca = TestCa::new("h2-trusted");
    let other = TestCa::new("h2-other");
    let server = ca.issue("listener", &["localhost"]);
    let tether = https_tether(be.addr, &server, "").await;
    assert!(tls_connect(tether.addr, &other, &[b"h2"]).await.is_err());
    // Plain HTTP to the HTTPS port: a TLS alert, then the close; nothing reaches the backend.
    let mut plain = tokio::net::TcpStream::connect(tether.addr).await.unwrap();
    plain
        .write_all(b"POST /chat HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n{}")
        .await
        .unwrap();
    let mut answer = Vec::new();
    within("the close", plain.read_to_end(&mut answer))
        .await
        .ok();
    assert_eq!(
        answer.first(),
        Some(&0x15),
        "a TLS alert record: {answer:?}"
    );
    eventually_async("two failed handshakes counted", || async {
        tether.metric("tether_downstream_tls_errors_total").await == 2.0
    })
    .await;
    assert!(be.requests.lock().is_empty());
    // The trusted client still gets through.
    let mut c = H2::connect(tether.addr, &ca).await;
    let mut ok = c.post("/chat", &chat("c")).await;
    assert_eq!(
        ok.frames_to_end().await.last().unwrap().json["persisted"],
        json!(true)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_serves_the_new_certificate_to_new_connections_while_a_stream_goes_on() {
    let events = turn(5);
    let gate = Gate::default();
    let be = turn_backend(events.clone(), Some((2, gate.clone()))).await;
    let old_ca = TestCa::new("h2-reload-old");
    let new_ca = TestCa::new("h2-reload-new");
    let server = old_ca.issue("listener", &["localhost"]);
    let tether = https_tether(be.addr, &server, "").await;
    let mut c = H2::connect(tether.addr, &old_ca).await;
    let mut turn1 = c.post("/chat", &chat("c")).await;
    assert_eq!(turn1.frame().await.unwrap().ty(), "STREAM_SNAPSHOT");

    // The files are replaced in place (as a mounted secret is) and reloaded mid-turn.
    let renewed = new_ca.issue("renewed", &["localhost"]);
    std::fs::copy(&renewed.cert_pem, &server.cert_pem).unwrap();
    std::fs::copy(&renewed.key_pem, &server.key_pem).unwrap();
    tether.handle().reload_tls().unwrap();
    assert!(tls_connect(tether.addr, &old_ca, &[b"h2"]).await.is_err());
    let mut fresh = H2::connect(tether.addr, &new_ca).await;
    let mut status = fresh.request("GET", "/chat/run?chat_id=c", &[], b"").await;
    assert_eq!(status.status, 200);
    let _ = status.body_to_end().await;

    // The stream on the old connection goes on to its end.
    gate.open();
    let rest = turn1.frames_to_end().await;
    let mut state = Reduced::default();
    state.apply_frames(&rest, 0);
    assert_eq!(state, Reduced::of(&events));
    assert_eq!(rest.last().unwrap().json["persisted"], json!(true));
    assert_eq!(be.requests.lock().len(), 1);
}

/// The binary in demo mode serving HTTPS with `cert`/`key`; its address, and its stderr lines.
fn https_binary(
    cert: &std::path::Path,
    key: &std::path::Path,
) -> (
    std::process::Child,
    std::net::SocketAddr,
    std::sync::mpsc::Receiver<String>,
) {
    use std::io::{BufRead, BufReader};
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_tether"))
        .args(["--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"])
        .args(["--demo-tokens", "30", "--demo-pace", "30ms"])
        .arg("--tls-cert")
        .arg(cert)
        .arg("--tls-key")
        .arg(key)
        .env("RUST_LOG", "info")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    let addr = line
        .split("https://")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .unwrap_or_else(|| panic!("no https address in {line:?}"))
        .parse()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let err = BufReader::new(child.stderr.take().unwrap());
    std::thread::spawn(move || {
        for l in err.lines().map_while(Result::ok) {
            let _ = tx.send(l);
        }
    });
    std::thread::spawn(move || {
        // Drain stdout so the child never blocks on it.
        let _ = std::io::copy(&mut out, &mut std::io::sink());
    });
    (child, addr, rx)
}

fn signal(child: &std::process::Child, sig: libc::c_int) {
    let pid = libc::pid_t::try_from(child.id()).unwrap();
    // SAFETY: kill(2) takes plain integers; the pid is our own child, not yet waited for.
    let sent = unsafe { libc::kill(pid, sig) };
    assert_eq!(sent, 0, "kill: {}", std::io::Error::last_os_error());
}

/// The first stderr line containing `needle`, within the harness's limit.
fn log_line(rx: &std::sync::mpsc::Receiver<String>, needle: &str) -> String {
    let deadline = tokio::time::Instant::now() + LIMIT;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        match rx.recv_timeout(left) {
            Ok(l) if l.contains(needle) => return l,
            Ok(_) => {}
            Err(e) => panic!("no log line with {needle:?}: {e}"),
        }
    }
}

#[test]
fn the_binary_reloads_its_certificate_on_sighup_mid_turn_and_the_stream_goes_on() {
    let old_ca = TestCa::new("sighup-old");
    let new_ca = TestCa::new("sighup-new");
    let server = old_ca.issue("listener", &["localhost"]);
    let (mut child, addr, logs) = https_binary(&server.cert_pem, &server.key_pem);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut c = H2::connect(addr, &old_ca).await;
        let mut r = c.post("/chat", &chat("c")).await;
        assert_eq!(r.frame().await.unwrap().ty(), "STREAM_SNAPSHOT");
        r.frame().await.unwrap();

        // A bad pair first: refused, logged, the certificate in use kept.
        std::fs::write(&server.key_pem, "not a key\n").unwrap();
        signal(&child, libc::SIGHUP);
        log_line(&logs, "not reloaded");
        drop(H2::connect(addr, &old_ca).await);

        let renewed = new_ca.issue("renewed", &["localhost"]);
        std::fs::copy(&renewed.cert_pem, &server.cert_pem).unwrap();
        std::fs::copy(&renewed.key_pem, &server.key_pem).unwrap();
        signal(&child, libc::SIGHUP);
        log_line(&logs, "listener certificate reloaded");
        assert!(tls_connect(addr, &old_ca, &[b"h2"]).await.is_err());
        let mut fresh = H2::connect(addr, &new_ca).await;
        let mut status = fresh.request("GET", "/chat/run?chat_id=c", &[], b"").await;
        assert_eq!(status.status, 200);
        let _ = status.body_to_end().await;

        let rest = r.frames_to_end().await;
        assert_eq!(
            (
                rest.last().unwrap().ty(),
                rest.last().unwrap().json["persisted"].clone()
            ),
            ("STREAM_END", json!(true))
        );
    });
    signal(&child, libc::SIGTERM);
    assert!(within_blocking(move || child.wait().unwrap()).success());
}

#[test]
fn a_missing_or_half_listener_pair_exits_64_naming_it() {
    let dir = std::env::temp_dir().join(format!("tether-https-exit-{}", std::process::id()));
    let missing = dir.join("missing.crt");
    for (args, says) in [
        (
            vec![
                "--tls-cert",
                missing.to_str().unwrap(),
                "--tls-key",
                missing.to_str().unwrap(),
            ],
            "missing.crt",
        ),
        (vec!["--tls-cert", missing.to_str().unwrap()], "tls_key"),
    ] {
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_tether"))
            .args(["--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"])
            .args(&args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let out = within_blocking(move || child.wait_with_output().unwrap());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_client_that_sends_no_preface_is_closed_at_the_header_deadline() {
    let be = turn_backend(turn(2), None).await;
    let ca = TestCa::new("h2-preface");
    let server = ca.issue("listener", &["localhost"]);
    let tether = https_tether(be.addr, &server, "header_timeout = \"300ms\"\n").await;
    // The handshake picks h2, then the client sends nothing.
    let mut idle = tls_connect(tether.addr, &ca, &[b"h2"]).await.unwrap();
    assert_eq!(idle.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let mut sink = Vec::new();
    within("the server closes the silent connection", async {
        // The server's SETTINGS may come first; then the close.
        let _ = idle.read_to_end(&mut sink).await;
    })
    .await;
    eventually_async("the connection is gone", || async {
        tether.metric("tether_downstream_connections").await == 0.0
    })
    .await;
    // One that speaks in time is served as ever.
    let mut c = H2::connect(tether.addr, &ca).await;
    let mut ok = c.post("/chat", &chat("c")).await;
    assert_eq!(
        ok.frames_to_end().await.last().unwrap().json["persisted"],
        json!(true)
    );
}

/// Whether `curl` is installed with HTTP/2 (`HTTP2` among `curl -V`'s features); when not, says
/// which test it skips.
fn curl_has_http2(test: &str) -> bool {
    let features = std::process::Command::new("curl")
        .arg("-V")
        .output()
        .ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .find_map(|l| l.strip_prefix("Features:").map(str::to_string))
        });
    let ok = features.is_some_and(|f| f.split_whitespace().any(|x| x == "HTTP2"));
    if !ok {
        eprintln!("skipping {test}: no curl with HTTP2 among its features (curl -V)");
    }
    ok
}

/// `curl --http2` POSTing `body` to `path` on tether's HTTPS listener, trusting `ca` and
/// resolving `localhost` to tether's address; curl itself gives up after the harness's limit.
fn curl(
    addr: std::net::SocketAddr,
    ca: &TestCa,
    path: &str,
    body: &serde_json::Value,
) -> std::process::Command {
    let mut c = std::process::Command::new("curl");
    c.args(["--http2", "--silent", "--show-error", "--no-buffer"])
        .args(["--max-time", &LIMIT.as_secs().to_string()])
        .arg("--cacert")
        .arg(&ca.pem)
        .arg("--resolve")
        .arg(format!("localhost:{}:127.0.0.1", addr.port()))
        .args(["-H", "content-type: application/json", "--data-binary"])
        .arg(body.to_string())
        .arg(format!("https://localhost:{}{path}", addr.port()))
        .stdin(std::process::Stdio::null());
    c
}

/// Runs `cmd` to its end (off the runtime's workers, within the harness's limit).
async fn run_to_end(mut cmd: std::process::Command) -> std::process::Output {
    let out = within(
        "curl exits",
        tokio::task::spawn_blocking(move || cmd.output().unwrap()),
    )
    .await
    .unwrap();
    assert!(out.status.success(), "curl: {out:?}");
    out
}

/// The next line a child wrote (`None` once its output ended), within the harness's limit.
async fn next_line(lines: &mut tokio::sync::mpsc::UnboundedReceiver<String>) -> Option<String> {
    within("a line from curl", lines.recv()).await
}

/// The protocol-1 frames of an SSE body (comments skipped).
fn sse_frames(body: &str) -> Vec<Frame> {
    body.split("\n\n").filter_map(parse_frame).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_over_http2_records_a_turn() {
    if !curl_has_http2("curl_over_http2_records_a_turn") {
        return;
    }
    let events = turn(5);
    let be = turn_backend(events.clone(), None).await;
    let ca = TestCa::new("curl-record");
    let server = ca.issue("listener", &["localhost"]);
    let tether = https_tether(be.addr, &server, "").await;
    let body = ca.dir.join("record.sse");
    let mut cmd = curl(tether.addr, &ca, "/chat", &chat("c"));
    cmd.arg("--output")
        .arg(&body)
        .args(["--write-out", "%{http_version} %{response_code}"]);
    let out = run_to_end(cmd).await;
    assert_eq!(String::from_utf8_lossy(&out.stdout), "2 200");
    let frames = sse_frames(&std::fs::read_to_string(&body).unwrap());
    let mut state = Reduced::default();
    state.apply_frames(&frames, 0);
    assert_eq!(state, Reduced::of(&events));
    let end = frames.last().unwrap();
    assert_eq!(
        (end.ty(), end.json["persisted"].clone()),
        ("STREAM_END", json!(true))
    );
    assert_eq!(be.requests.lock().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_curl_killed_mid_stream_over_http2_leaves_the_producer_going() {
    use std::io::BufRead;
    if !curl_has_http2("a_curl_killed_mid_stream_over_http2_leaves_the_producer_going") {
        return;
    }
    let events = turn(6);
    let gate = Gate::default();
    let be = turn_backend(events.clone(), Some((2, gate.clone()))).await;
    let ca = TestCa::new("curl-kill");
    let server = ca.issue("listener", &["localhost"]);
    let tether = https_tether(be.addr, &server, "").await;

    // The response head (--include) and the stream, line by line as curl writes them.
    let mut cmd = curl(tether.addr, &ca, "/chat", &chat("c"));
    cmd.arg("--include").stdout(std::process::Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, mut lines) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for l in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(l);
        }
    });
    let status = next_line(&mut lines).await.expect("a status line");
    assert!(status.starts_with("HTTP/2 200"), "{status:?}");
    while next_line(&mut lines)
        .await
        .is_some_and(|l| !l.trim().is_empty())
    {}
    // The first frame (the snapshot), then curl dies with the upstream held at the gate.
    let mut block = String::new();
    let snapshot = loop {
        let l = next_line(&mut lines).await.expect("the snapshot");
        if !l.is_empty() {
            block += &l;
            block.push('\n');
        } else if let Some(f) = parse_frame(&std::mem::take(&mut block)) {
            break f;
        }
    };
    assert_eq!(snapshot.ty(), "STREAM_SNAPSHOT");
    let run = snapshot.json["run_id"].as_str().unwrap().to_string();
    assert_eq!(tether.metric("tether_observers_active").await, 1.0);
    child.kill().unwrap();
    let killed = within(
        "the killed curl is reaped",
        tokio::task::spawn_blocking(move || child.wait().unwrap()),
    )
    .await
    .unwrap();
    assert!(!killed.success());
    eventually_async(
        "the killed client's stream and connection are gone",
        || async {
            tether.metric("tether_observers_active").await == 0.0
                && tether.metric("tether_downstream_connections").await == 0.0
        },
    )
    .await;
    assert_eq!(tether.metric("tether_runs_active").await, 1.0);

    // The producer carries on; a cursor attach from the start gets the whole turn, saved.
    gate.open();
    let mut again = curl(tether.addr, &ca, "/chat/live", &cursor("c", &run, 0));
    again.args(["--write-out", "%{stderr}%{http_version}"]);
    let out = run_to_end(again).await;
    assert_eq!(String::from_utf8_lossy(&out.stderr), "2");
    let frames = sse_frames(&String::from_utf8(out.stdout).unwrap());
    let mut state = Reduced::default();
    state.apply_frames(&frames, 0);
    assert_eq!(state, Reduced::of(&events));
    let end = frames.last().unwrap();
    assert_eq!(
        (
            end.ty(),
            end.json["persisted"].clone(),
            end.json["run_id"].clone()
        ),
        ("STREAM_END", json!(true), json!(run))
    );
    assert_eq!(be.requests.lock().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_dialect_answers_over_http2() {
    let events = turn(4);
    let be = turn_backend(events.clone(), None).await;
    let ca = TestCa::new("h2-resume");
    let server = ca.issue("listener", &["localhost"]);
    let routes = "[[routes]]\nmethods = [\"POST\"]\npath = \"/chat\"\nkind = \"record\"\n\
                  [[routes]]\nmethods = [\"GET\"]\npath = \"/chat/{id}/stream\"\nkind = \"resume\"\n\
                  dialect = \"from_start\"\nchat_id = \"path:id\"\ncompleted = \"replay\"\n";
    let tether = https_tether(be.addr, &server, routes).await;
    let mut c = H2::connect(tether.addr, &ca).await;
    let mut rec = c.post("/chat", &chat("c")).await;
    assert_eq!(
        rec.frames_to_end().await.last().unwrap().json["persisted"],
        json!(true)
    );
    // The AG-UI client's reconnect: the turn replayed in its own frames.
    let mut again = c.request("GET", "/chat/c/stream", &[], b"").await;
    assert_eq!(again.status, 200);
    let body = again.body_to_end().await;
    let replayed: Vec<serde_json::Value> = String::from_utf8_lossy(&body)
        .split("\n\n")
        .filter_map(|b| b.lines().find_map(|l| l.strip_prefix("data: ")))
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    assert_eq!(Reduced::of(&replayed), Reduced::of(&events));
}

/// A browser's HTTP/2 cookie crumbs: one `cookie` field per cookie.
const CRUMBS: [(&str, &str); 3] = [
    ("cookie", "theme=dark"),
    ("cookie", "sid=u1"),
    ("cookie", "chat=c7"),
];

/// Routes that read the chat id and the caller from cookies, with one route of each kind that
/// forwards the request to the backend.
const COOKIE_ROUTES: &str = r#"
[auth]
subject = "cookie:sid"

[[routes]]
methods = ["POST"]
path = "/chat"
kind = "record"
chat_id = "cookie:chat"

[[routes]]
methods = ["POST", "GET"]
path = "/chat/live"
kind = "attach"
chat_id = "cookie:chat"

[[routes]]
methods = ["POST"]
path = "/chat/approve"
kind = "annotate"
chat_id = "cookie:chat"

[[routes]]
methods = ["POST"]
path = "/chat/stop"
kind = "stop"
chat_id = "cookie:chat"
forward = true
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_cookie_crumbs_reach_the_backend_as_one_line_on_every_path() {
    let events = turn(3);
    let ev = events.clone();
    let be = backend(move |r: &Req| match r.path.as_str() {
        "/chat" => scripted_turn(&ev, None),
        _ => fixed_answer(200, "application/json", "{}"),
    })
    .await;
    let ca = TestCa::new("h2-cookies");
    let server = ca.issue("listener", &["localhost"]);
    let tether = https_tether(be.addr, &server, COOKIE_ROUTES).await;
    let mut c = H2::connect(tether.addr, &ca).await;
    let json = ("content-type", "application/json");
    let with = |extra: (&'static str, &'static str)| {
        let mut h = CRUMBS.to_vec();
        h.push(extra);
        h
    };

    // A recorded turn: the chat id and the caller come from the second and third crumbs.
    let mut rec = c
        .request("POST", "/chat", &with(json), br#"{"protocol":1}"#)
        .await;
    assert_eq!(rec.status, 200);
    let frames = rec.frames_to_end().await;
    assert_eq!(frames.last().unwrap().json["persisted"], json!(true));
    let run = frames[0].json["run_id"].as_str().unwrap().to_string();
    // The same caller, its crumbs in another order, attaches to that run; another caller
    // (another `sid`) has no such chat.
    let order = [CRUMBS[2], CRUMBS[1], json];
    let attach =
        serde_json::to_vec(&json!({"protocol": 1, "run_id": run, "after_seq": 0})).unwrap();
    let mut live = c.request("POST", "/chat/live", &order, &attach).await;
    assert_eq!(live.status, 200);
    let again = live.frames_to_end().await;
    assert_eq!(again[0].json["run_id"], json!(run));
    assert_eq!(again.last().unwrap().ty(), "STREAM_END");
    let other = [CRUMBS[2], ("cookie", "sid=u2"), json];
    let none = c.request("POST", "/chat/live", &other, &attach).await;
    assert_eq!(none.status, 204);

    // Pass-through, a legacy attach and an annotate (tether's own forward), and a stop that
    // the route forwards too (detached).
    let mut pass = c.request("GET", "/other", &CRUMBS, b"").await;
    assert_eq!(pass.status, 200);
    pass.body_to_end().await;
    let mut legacy = c.request("POST", "/chat/live", &with(json), b"{}").await;
    assert_eq!(legacy.status, 200);
    legacy.body_to_end().await;
    let mut annotate = c.request("POST", "/chat/approve", &with(json), b"{}").await;
    assert_eq!(annotate.status, 200);
    annotate.body_to_end().await;
    let mut stop = c.request("POST", "/chat/stop", &with(json), b"{}").await;
    assert_eq!(stop.status, 200);
    stop.body_to_end().await;

    eventually("the backend logged five requests", || {
        be.requests.lock().len() == 5
    })
    .await;
    let requests = be.requests.lock().clone();
    let paths: Vec<&str> = requests.iter().map(|r| r.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "/chat",
            "/other",
            "/chat/live",
            "/chat/approve",
            "/chat/stop"
        ]
    );
    for r in &requests {
        let lines: Vec<&str> = r
            .headers
            .iter()
            .filter(|(k, _)| k == "cookie")
            .map(|(_, v)| v.as_str())
            .collect();
        assert_eq!(
            lines,
            ["theme=dark; sid=u1; chat=c7"],
            "{} {}",
            r.method,
            r.path
        );
    }
}
