//! Operability: admin endpoints, metric values as scenarios drive them, graceful drain, and the
//! binary's SIGTERM and SIGHUP handling (from the moment its banner is out).

use std::io::{BufRead, BufReader};
use std::time::Duration;

use crate::support::*;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_endpoints_answer_and_unknown_admin_paths_are_404() {
    let be = backend(|_| vec![sse_head(), Step::End]).await;
    let tether = sidecar(be.addr, "").await;
    let mut r = request(tether.admin, "GET", "/healthz", &[], b"").await;
    assert_eq!((r.status, &r.body_to_end().await[..]), (200, &b"ok\n"[..]));
    assert_eq!(
        request(tether.admin, "GET", "/readyz", &[], b"")
            .await
            .status,
        200
    );
    assert_eq!(
        request(tether.admin, "GET", "/nope", &[], b"").await.status,
        404
    );
    let r = request(tether.admin, "GET", "/metrics", &[], b"").await;
    assert!(r.header("content-type").unwrap().starts_with("text/plain"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scrape_before_the_first_turn_has_every_labelled_family_at_zero() {
    let be = backend(|_| vec![sse_head(), Step::End]).await;
    let routes = "[[routes]]\nmethods=[\"POST\"]\npath=\"/chat\"\nkind=\"record\"\n[[routes]]\nmethods=[\"POST\"]\npath=\"/v2/chat\"\nkind=\"record\"\n[[routes]]\nmethods=[\"GET\"]\npath=\"/chat/live\"\nkind=\"attach\"\non_miss=\"record\"\n[[routes]]\nmethods=[\"POST\"]\npath=\"/chat/stop\"\nkind=\"stop\"\n";
    let tether = sidecar(be.addr, routes).await;
    let text = tether.metrics().await;
    for sample in [
        "tether_runs_started_total{format=\"agui\",route=\"/chat\"} 0",
        "tether_runs_started_total{format=\"agui\",route=\"/v2/chat\"} 0",
        "tether_runs_started_total{format=\"agui\",route=\"/chat/live\"} 0",
        "tether_runs_started_total{format=\"anthropic\",route=\"/chat\"} 0",
        "tether_runs_started_total{format=\"ai_sdk\",route=\"/v2/chat\"} 0",
        "tether_runs_finished_total{outcome=\"persisted\"} 0",
        "tether_runs_finished_total{outcome=\"cancelled\"} 0",
        "tether_attach_total{dialect=\"protocol1\",result=\"snapshot\"} 0",
        "tether_attach_total{dialect=\"protocol1\",result=\"end_only\"} 0",
        "tether_snapshot_resets_total{dialect=\"protocol1\",reason=\"lagged\"} 0",
        "tether_snapshot_resets_total{dialect=\"protocol1\",reason=\"future_cursor\"} 0",
        "tether_upstream_errors_total{kind=\"connect\"} 0",
        "tether_upstream_errors_total{kind=\"protocol\"} 0",
        "tether_runs_evicted_total{reason=\"expired\"} 0",
        "tether_events_dropped_total{reason=\"after_end\"} 0",
    ] {
        assert!(
            text.lines().any(|l| l == sample),
            "missing {sample:?} in\n{text}"
        );
    }
    // A stop route starts no runs, so it is no route label.
    assert!(!text.contains("route=\"/chat/stop\""), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_move_as_runs_are_recorded_and_observed() {
    let gate = Gate::default();
    let be = turn_backend(turn(10), Some((3, gate.clone()))).await;
    let tether = sidecar(be.addr, "").await;
    let mut r = post(tether.addr, "/chat", &chat("c")).await;
    while r.frame().await.unwrap().seq() < 3 {}
    assert_eq!(tether.metric("tether_runs_active").await, 1.0);
    assert_eq!(tether.metric("tether_observers_active").await, 1.0);
    assert!(tether.metric("tether_recorded_bytes").await > 0.0);
    let held = |state: &str| format!("tether_runs_held{{state=\"{state}\"}}");
    assert_eq!(tether.metric(&held("active")).await, 1.0);
    assert_eq!(tether.metric(&held("completed")).await, 0.0);
    // The client leaves: what arrives next is recorded unobserved.
    r.kill();
    let run = tether.current_run("c").unwrap();
    eventually("observer gone", || run.observers() == 0).await;
    gate.open();
    be.wait_answers(1).await;
    eventually("run ended", || !run.is_producing()).await;
    let total = turn(10).len() as f64;
    assert_eq!(tether.metric("tether_upstream_events_total").await, total);
    assert_eq!(
        tether.metric("tether_unobserved_events_total").await,
        total - 3.0
    );
    assert!(tether.metric("tether_upstream_bytes_total").await > 0.0);
    assert_eq!(tether.metric("tether_runs_active").await, 0.0);
    assert_eq!(tether.metric("tether_observers_active").await, 0.0);
    // The ended run is held for resume.
    assert_eq!(tether.metric(&held("active")).await, 0.0);
    assert_eq!(tether.metric(&held("completed")).await, 1.0);
    assert_eq!(
        tether
            .metric("tether_runs_started_total{format=\"agui\",route=\"/chat\"}")
            .await,
        1.0
    );
    assert_eq!(
        tether
            .metric("tether_runs_finished_total{outcome=\"persisted\"}")
            .await,
        1.0
    );
    assert!(tether.metric("tether_observer_lag_events_count").await >= 1.0);
    assert!(tether.metric("tether_delivery_delay_seconds_count").await >= 1.0);
    // A recovery by snapshot records a serialization.
    post(tether.addr, "/chat/live", &cursor("c", "unknown", 1))
        .await
        .frames_to_end()
        .await;
    assert_eq!(
        tether
            .metric("tether_snapshot_serialize_seconds_count")
            .await,
        1.0
    );
}

/// The admin listener keeps the proxy's head deadline (a head that never ends is closed without
/// an answer) but not its connection cap: with `max_connections = 1`, three idle admin
/// connections are held and a fourth is still answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_listener_keeps_the_head_deadline_and_has_no_connection_cap() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let be = backend(|_| vec![sse_head(), Step::End]).await;
    let tether = sidecar(
        be.addr,
        "[server]\nheader_timeout = \"300ms\"\nmax_connections = 1\n",
    )
    .await;
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(tokio::net::TcpStream::connect(tether.admin).await.unwrap());
    }
    let mut r = request(tether.admin, "GET", "/healthz", &[], b"").await;
    assert_eq!((r.status, &r.body_to_end().await[..]), (200, &b"ok\n"[..]));

    let mut slow = tokio::net::TcpStream::connect(tether.admin).await.unwrap();
    slow.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: a")
        .await
        .unwrap();
    let mut got = Vec::new();
    let _ = within(
        "the header deadline closes the admin connection",
        slow.read_to_end(&mut got),
    )
    .await;
    assert_eq!(
        String::from_utf8_lossy(&got),
        "",
        "closed without an answer"
    );
    drop(held);
}

/// Metric labels name routes by their pattern and never carry a chat or run id: after a turn
/// of a distinctive chat id in a path, its attach, resume, status and stop, and an attach and a
/// stop naming a run id that does not exist, no scraped line contains any of those ids.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metric_labels_never_carry_a_chat_or_run_id() {
    let be = backend(|r: &Req| match r.path.as_str() {
        p if p.starts_with("/api/chat/") => scripted_turn(&turn(4), None),
        _ => fixed_answer(200, "application/json", r#"{"ok":true}"#),
    })
    .await;
    let routes = r#"
[[routes]]
methods = ["POST"]
path = "/api/chat/{id}/stop"
kind = "stop"
chat_id = "path:id"

[[routes]]
methods = ["POST"]
path = "/api/chat/{id}"
kind = "record"
chat_id = "path:id"

[[routes]]
methods = ["GET"]
path = "/api/chat/{id}/stream"
kind = "resume"
dialect = "from_start"
chat_id = "path:id"

[[routes]]
methods = ["POST"]
path = "/chat/live"
kind = "attach"

[[routes]]
methods = ["GET"]
path = "/chat/run"
kind = "status"
chat_id = "query:chat_id"
"#;
    let tether = sidecar(be.addr, routes).await;
    let chat_id = "chatzq7xv31";
    let ghost = "runkq9w2ghost";
    let f = post(
        tether.addr,
        &format!("/api/chat/{chat_id}"),
        &json!({"protocol":1}),
    )
    .await
    .frames_to_end()
    .await;
    assert_eq!(f.last().unwrap().json["persisted"], true);
    let run = f[0].json["run_id"].as_str().unwrap().to_string();
    for body in [
        cursor(chat_id, &run, 1),
        cursor(chat_id, ghost, 1),
        chat(chat_id),
    ] {
        post(tether.addr, "/chat/live", &body)
            .await
            .body_to_end()
            .await;
    }
    let r = request(
        tether.addr,
        "GET",
        &format!("/api/chat/{chat_id}/stream"),
        &[],
        b"",
    )
    .await;
    assert_eq!(r.status, 204, "a saved run is not resumed");
    let q = format!("/chat/run?chat_id={chat_id}");
    request(tether.addr, "GET", &q, &[], b"")
        .await
        .body_to_end()
        .await;
    let stop = format!("/api/chat/{chat_id}/stop");
    for run_id in [run.as_str(), ghost] {
        post(tether.addr, &stop, &json!({"run_id":run_id}))
            .await
            .body_to_end()
            .await;
    }

    let text = tether.metrics().await;
    assert_eq!(
        tether
            .metric("tether_runs_started_total{format=\"agui\",route=\"/api/chat/{id}\"}")
            .await,
        1.0,
        "the route is labelled by its pattern"
    );
    let attaches: f64 = text
        .lines()
        .filter(|l| l.starts_with("tether_attach_total{"))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
        .sum();
    assert!(attaches >= 4.0, "the attaches were counted: {attaches}");
    for id in [chat_id, run.as_str(), ghost] {
        let lines: Vec<&str> = text.lines().filter(|l| l.contains(id)).collect();
        assert!(lines.is_empty(), "{id} in the metrics: {lines:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completed_runs_are_evicted_after_retention_and_counted() {
    let be = turn_backend(vec![json!({"type":"RUN_FINISHED"})], None).await;
    let tether = sidecar(be.addr, "[recorder]\nretention = \"1ms\"\nmax_chats = 1\n").await;
    post(tether.addr, "/chat", &chat("a"))
        .await
        .frames_to_end()
        .await;
    eventually("evicted", || tether.current_run("a").is_none()).await;
    assert!(
        tether
            .metric("tether_runs_evicted_total{reason=\"expired\"}")
            .await
            >= 1.0
    );
    let r = post(tether.addr, "/chat/live", &chat("a")).await;
    assert_eq!(r.status, 204);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_refuses_readiness_lets_live_runs_finish_then_returns() {
    let gate = Gate::default();
    let events = vec![
        json!({"type":"RUN_STARTED"}),
        json!({"type":"RUN_FINISHED"}),
    ];
    let be = turn_backend(events, Some((1, gate.clone()))).await;
    let mut tether = sidecar(be.addr, "").await;
    let mut r = post(tether.addr, "/chat", &chat("c")).await;
    r.frame().await.unwrap();
    r.frame().await.unwrap();
    let handle = tether.handle.take().unwrap();
    let shared = handle.shared.clone();
    let drain = tokio::spawn(handle.drain(Duration::from_secs(30)));
    let admin = tether.admin;
    eventually_async("not ready while draining", || async move {
        request(admin, "GET", "/readyz", &[], b"").await.status == 503
    })
    .await;
    assert!(shared.draining.load(std::sync::atomic::Ordering::Relaxed));
    assert!(!drain.is_finished(), "the drain waits for the live run");
    gate.open();
    let rest = r.frames_to_end().await;
    assert_eq!(rest.last().unwrap().json["persisted"], true);
    assert!(
        within("drain", drain).await.unwrap(),
        "every run ended in time"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_timeout_stops_what_is_left_and_tells_its_observers() {
    let gate = Gate::default();
    let be = turn_backend(vec![json!({"type":"RUN_STARTED"})], Some((1, gate.clone()))).await;
    let mut tether = sidecar(be.addr, "").await;
    let mut r = post(tether.addr, "/chat", &chat("c")).await;
    r.frame().await.unwrap();
    r.frame().await.unwrap();
    let handle = tether.handle.take().unwrap();
    assert!(!within("drain", handle.drain(Duration::from_millis(50))).await);
    let rest = r.frames_to_end().await;
    let end = rest.last().unwrap();
    assert_eq!(end.json["persisted"], false);
    assert_eq!(end.json["reason"], "shutdown");
    gate.open();
}

#[test]
fn the_binary_drains_on_sigterm_and_exits_once_the_run_has_ended() {
    drains_on_sigterm(&[]);
}

#[test]
fn the_binary_on_one_thread_serves_a_turn_and_drains_on_sigterm() {
    // `[server] threads = 1` runs tokio's current-thread scheduler: everything on the main
    // thread, so this checks that nothing waits on another worker.
    let conf = std::env::temp_dir().join(format!("tether-one-thread-{}.toml", std::process::id()));
    std::fs::write(&conf, "[server]\nthreads = 1\n").unwrap();
    drains_on_sigterm(&["--config", conf.to_str().unwrap()]);
    let _ = std::fs::remove_file(&conf);
}

/// Starts the binary in demo mode with `extra` flags, takes a turn's first frames, sends
/// SIGTERM, and checks the turn still ends saved and the process exits cleanly.
fn drains_on_sigterm(extra: &[&str]) {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_tether"))
        .args([
            "--listen",
            "127.0.0.1:0",
            "--admin",
            "127.0.0.1:0",
            "--demo-tokens",
            "20",
            "--demo-pace",
            "30ms",
        ])
        .args(extra)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    let addr: std::net::SocketAddr = line
        .split("http://")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .unwrap()
        .parse()
        .unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut r = post(addr, "/chat", &chat("c")).await;
        r.frame().await.unwrap();
        r.frame().await.unwrap();
        let pid = libc::pid_t::try_from(child.id()).unwrap();
        // SAFETY: kill(2) takes plain integers; the pid is our own child, not yet waited for.
        let sent = unsafe { libc::kill(pid, libc::SIGTERM) };
        assert_eq!(sent, 0, "kill: {}", std::io::Error::last_os_error());
        let rest = r.frames_to_end().await;
        let end = rest.last().unwrap();
        assert_eq!(
            (end.ty(), end.json["persisted"].clone()),
            ("STREAM_END", json!(true))
        );
    });
    let status = within_blocking(move || child.wait().unwrap());
    assert!(status.success(), "{status:?}");
}

#[test]
fn the_binary_handles_a_sighup_and_a_sigterm_sent_as_soon_as_its_banner_is_out() {
    // The banner is the readiness signal: the handlers must be in place by then, or the signal
    // meets its default action and ends the process. Several rounds, as a missing handler loses
    // a race it does not always lose.
    for round in 0..5 {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_tether"))
            .args(["--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"])
            .env("RUST_LOG", "info")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        assert!(line.starts_with("tether on http://"), "{line:?}");
        std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
        let (tx, logs) = std::sync::mpsc::channel();
        let err = BufReader::new(child.stderr.take().unwrap());
        std::thread::spawn(move || {
            for l in err.lines().map_while(Result::ok) {
                let _ = tx.send(l);
            }
        });
        let pid = libc::pid_t::try_from(child.id()).unwrap();
        let send = |sig| {
            // SAFETY: kill(2) takes plain integers; the pid is our own child, not yet waited for.
            let sent = unsafe { libc::kill(pid, sig) };
            assert_eq!(sent, 0, "kill: {}", std::io::Error::last_os_error());
        };
        send(libc::SIGHUP);
        loop {
            match logs.recv_timeout(LIMIT) {
                Ok(l) if l.contains("SIGHUP: nothing to reload") => break,
                Ok(_) => {}
                Err(e) => panic!(
                    "round {round}: no SIGHUP log line ({e}): {:?}",
                    child.try_wait()
                ),
            }
        }
        send(libc::SIGTERM);
        let status = within_blocking(move || child.wait().unwrap());
        assert!(status.success(), "round {round}: {status:?}");
    }
}

#[test]
fn a_bad_upstream_exits_64_naming_the_flag() {
    for upstream in ["nosuchhost.invalid:80", "localhost:99999", "127.0.0.1:0"] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_tether"))
            .args(["--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"])
            .args(["--upstream", upstream])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let out = within_blocking(move || out.wait_with_output().unwrap());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{upstream}: {stderr}");
        assert!(stderr.contains("--upstream"), "{upstream}: {stderr}");
        assert!(stderr.contains(upstream), "{upstream}: {stderr}");
        assert!(!stderr.contains("panicked"), "{upstream}: {stderr}");
    }
}

#[test]
fn json_log_format_writes_one_json_object_per_line() {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_tether"))
        .args([
            "--listen",
            "127.0.0.1:0",
            "--admin",
            "127.0.0.1:0",
            "--log-format",
            "json",
        ])
        .env("RUST_LOG", "info")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Every line up to the listening line (the open-files line comes first) is one JSON object.
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut lines = Vec::new();
    loop {
        let mut line = String::new();
        if err.read_line(&mut line).unwrap() == 0 {
            break;
        }
        let listening = line.contains("tether listening on");
        lines.push(line);
        if listening {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    let last = lines.last().expect("log lines");
    for line in &lines {
        let v: serde_json::Value = serde_json::from_str(line).expect("a JSON log line");
        assert!(v["ts"].is_string() && v["target"].is_string(), "{line}");
        assert!(v["level"].is_string() && v["msg"].is_string(), "{line}");
    }
    let v: serde_json::Value = serde_json::from_str(last).unwrap();
    assert_eq!(v["level"], "INFO", "{last}");
    assert!(
        v["msg"].as_str().unwrap().contains("tether listening on"),
        "{last}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_browser_client_and_the_demo_page_are_served_in_demo_mode_by_default() {
    let demo = demo_sidecar(DemoOptions::default()).await;
    let mut js = request(demo.addr, "GET", "/_tether/client.js", &[], b"").await;
    assert_eq!(js.status, 200);
    assert_eq!(
        js.header("content-type"),
        Some("text/javascript; charset=utf-8")
    );
    let etag = js.header("etag").expect("an etag").to_string();
    let body = js.body_to_end().await;
    let code = std::str::from_utf8(&body).unwrap();
    assert!(code.contains("export class TetherClient"), "{code:.200}");
    let again = request(
        demo.addr,
        "GET",
        "/_tether/client.js",
        &[("if-none-match", &etag)],
        b"",
    )
    .await;
    assert_eq!(again.status, 304);

    let mut page = request(demo.addr, "GET", "/?chat=c1", &[], b"").await;
    assert_eq!(page.status, 200);
    assert_eq!(
        page.header("content-type"),
        Some("text/html; charset=utf-8")
    );
    let html = page.body_to_end().await;
    let html = std::str::from_utf8(&html).unwrap();
    assert!(html.contains(r#"from "/_tether/client.js""#));
    let head = request(demo.addr, "HEAD", "/", &[], b"").await;
    assert_eq!(head.status, 200);
    assert_eq!(
        head.header("content-length"),
        Some(html.len().to_string().as_str())
    );

    // In front of a backend: off unless asked; the demo page never (`/` is the backend's).
    let be = backend(|_| fixed_answer(404, "text/plain", "the backend's 404")).await;
    let plain = sidecar(be.addr, "").await;
    let r = request(plain.addr, "GET", "/_tether/client.js", &[], b"").await;
    assert_eq!(r.status, 404);
    let on = sidecar(be.addr, "[server]\nserve_client = true\n").await;
    let r = request(on.addr, "GET", "/_tether/client.js", &[], b"").await;
    assert_eq!(r.status, 200);
    let mut r = request(on.addr, "GET", "/", &[], b"").await;
    assert_eq!(r.status, 404);
    assert_eq!(&r.body_to_end().await[..], b"the backend's 404");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn during_a_drain_a_reloading_client_reattaches_while_new_turns_are_refused() {
    let gate = Gate::default();
    let events = turn(6);
    let be = turn_backend(events.clone(), Some((2, gate.clone()))).await;
    let mut tether = sidecar(be.addr, "").await;
    let mut first = post(tether.addr, "/chat", &chat("c")).await;
    while first.frame().await.unwrap().seq() < 2 {}
    // The tab reloads: its connection goes, the run goes on.
    first.kill();
    let handle = tether.handle.take().unwrap();
    let shared = handle.shared.clone();
    let drain = tokio::spawn(handle.drain(Duration::from_secs(30)));
    eventually("draining", || {
        shared.draining.load(std::sync::atomic::Ordering::Relaxed)
    })
    .await;

    // A new connection still reaches tether and attaches to the finishing run.
    let mut again = post(tether.addr, "/chat/live", &chat("c")).await;
    assert_eq!(again.status, 200);
    let snapshot = again.frame().await.unwrap();
    assert_eq!(snapshot.ty(), "STREAM_SNAPSHOT");
    // A new turn is refused with a stable code.
    let mut refused = post(tether.addr, "/chat", &chat("other")).await;
    assert_eq!(refused.status, 503);
    let body: serde_json::Value = serde_json::from_slice(&refused.body_to_end().await).unwrap();
    assert_eq!(body["error"], "draining");
    assert!(!drain.is_finished(), "the drain waits for the live run");

    gate.open();
    let mut frames = vec![snapshot];
    frames.extend(again.frames_to_end().await);
    let end = frames.last().unwrap();
    assert_eq!(
        (end.ty(), end.json["persisted"].clone()),
        ("STREAM_END", json!(true))
    );
    let mut state = Reduced::default();
    state.apply_frames(&frames, 0);
    assert_eq!(state, Reduced::of(&events));
    assert!(
        within("drain", drain).await.unwrap(),
        "every run ended in time"
    );
    assert_eq!(
        be.requests.lock().len(),
        1,
        "the refused turn was not forwarded"
    );
}
