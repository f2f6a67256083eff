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
