//! Pingora's records about client-caused failures reach the log below ERROR and with the request
//! path bounded; a backend failure is still an ERROR. Runs the real sidecar in-process with
//! `tether::logging::Rewrite` over a capturing logger (self-contained: no shared test harness).

use std::net::SocketAddr;
use std::sync::OnceLock;

use parking_lot::Mutex;
use std::time::Duration;

use log::{Level, LevelFilter, Log, Metadata, Record};
use tether::logging::{Rewrite, MAX_REQUEST_TEXT};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Upper bound on any wait, so a bug fails instead of hanging.
const LIMIT: Duration = Duration::from_secs(20);

/// One record as the logger received it.
#[derive(Debug, Clone)]
struct Line {
    level: Level,
    target: String,
    text: String,
}

/// Keeps every record at INFO and above (the binary's default filter).
#[derive(Default)]
struct Capture(Mutex<Vec<Line>>);

impl Capture {
    fn lines(&self) -> Vec<Line> {
        self.0.lock().clone()
    }
}

impl Log for Capture {
    fn enabled(&self, m: &Metadata<'_>) -> bool {
        m.level() <= Level::Info
    }
    fn log(&self, r: &Record<'_>) {
        if self.enabled(r.metadata()) {
            let line = Line {
                level: r.level(),
                target: r.target().to_string(),
                text: r.args().to_string(),
            };
            self.0.lock().push(line);
        }
    }
    fn flush(&self) {}
}

/// The process's logger: tether's rewriting over the capture, installed once.
fn logs() -> &'static Capture {
    static LOGGER: OnceLock<&'static Rewrite<Capture>> = OnceLock::new();
    LOGGER.get_or_init(|| {
        let logger: &'static Rewrite<Capture> =
            Box::leak(Box::new(Rewrite::new(Capture::default())));
        log::set_logger(logger).unwrap();
        log::set_max_level(LevelFilter::Info);
        logger
    });
    LOGGER.get().unwrap().inner()
}

/// Waits until a captured record satisfies `cond`, and returns it.
async fn record(what: &str, cond: impl Fn(&Line) -> bool) -> Line {
    let found = tokio::time::timeout(LIMIT, async {
        loop {
            if let Some(l) = logs().lines().into_iter().find(|l| cond(l)) {
                return l;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    found.unwrap_or_else(|_| panic!("no record: {what}; got {:#?}", logs().lines()))
}

/// A backend that accepts connections and reads them, never answering.
async fn silent_backend() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                while matches!(sock.read(&mut buf).await, Ok(n) if n > 0) {}
            });
        }
    });
    addr
}

/// The real sidecar in front of `upstream`.
async fn sidecar(upstream: SocketAddr) -> tether::server::Handle {
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nadmin = \"127.0.0.1:0\"\nupstream = \"{upstream}\"\n"
    );
    let file = tether::config::parse_file(&text).unwrap();
    let cfg = tether::config::Config::from_parts(file, &tether::config::Flags::default()).unwrap();
    tether::server::start(cfg, tether::server::demo::DemoOptions::default())
        .await
        .unwrap()
}

/// Sends `bytes` on a new connection; reads the answer until the server closes (or `LIMIT`).
async fn exchange(addr: SocketAddr, bytes: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(bytes).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(LIMIT, s.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

/// Sends `bytes` on a new connection, then closes it without waiting for an answer.
async fn send_and_leave(addr: SocketAddr, bytes: &[u8]) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(bytes).await.unwrap();
    // Let the proxy read what was sent before the connection goes.
    tokio::time::sleep(Duration::from_millis(100)).await;
    drop(s);
}

/// A ~5,000-byte pass-through path naming the case; mostly `a`s so any longer run shows.
fn hostile_path(case: &str) -> String {
    format!("/{case}/{}", "a".repeat(5000))
}

/// No record carries more of a hostile path than the bound.
fn assert_paths_bounded(lines: &[Line]) {
    let run = "a".repeat(MAX_REQUEST_TEXT + 1);
    for l in lines {
        assert!(
            !l.text.contains(&run),
            "a record carries more than {MAX_REQUEST_TEXT} bytes of the path: {} {} ({} bytes)",
            l.level,
            l.target,
            l.text.len()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_caused_failures_log_below_error_with_the_path_bounded() {
    logs();
    let tether = sidecar(silent_backend().await).await;
    let addr = tether.proxy_addr;

    // Invalid chunked encoding under a 5,000-byte path: answered 400, logged as a warning.
    let path = hostile_path("chunk");
    let req = format!(
        "POST {path} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nbad\r\n"
    );
    let answer = exchange(addr, req.as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    let chunk = record("the invalid chunk", |l| l.text.contains("/chunk/")).await;
    assert_eq!(chunk.level, Level::Warn, "{chunk:?}");
    assert_eq!(chunk.target, "pingora_proxy");
    assert!(chunk.text.contains("InvalidChunk"), "{chunk:?}");
    assert!(
        chunk
            .text
            .contains(&format!("…({} bytes), Host: x", path.len())),
        "{chunk:?}"
    );

    // A client closing mid-body: logged as information.
    let path = hostile_path("body");
    let req = format!("POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nabc");
    send_and_leave(addr, req.as_bytes()).await;
    let body = record("the body cut short", |l| l.text.contains("/body/")).await;
    assert_eq!(body.level, Level::Info, "{body:?}");
    assert!(
        body.text.contains("Downstream ConnectionClosed"),
        "{body:?}"
    );

    // A client closing mid-head: tether reads request heads itself (under its header
    // deadline), so this never reaches Pingora and is closed quietly (no record above DEBUG).
    let path = hostile_path("head");
    send_and_leave(
        addr,
        format!("GET {path} HTTP/1.1\r\nHost: x\r\n").as_bytes(),
    )
    .await;

    let lines = logs().lines();
    let errors: Vec<&Line> = lines.iter().filter(|l| l.level == Level::Error).collect();
    assert!(
        errors.is_empty(),
        "client-caused ERROR records: {errors:#?}"
    );
    assert_paths_bounded(&lines);
    tether.abort();

    // The backend's failure is still an ERROR, with the path bounded all the same.
    let dead = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let dead_addr = dead.local_addr().unwrap();
    drop(dead);
    let tether = sidecar(dead_addr).await;
    let path = hostile_path("down");
    let answer = exchange(
        tether.proxy_addr,
        format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes(),
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 502"), "{answer}");
    let down = record("the backend refusing", |l| {
        l.text.contains("/down/") && l.level == Level::Error
    })
    .await;
    assert_eq!(down.target, "pingora_proxy");
    assert!(down.text.contains("Upstream ConnectRefused"), "{down:?}");
    assert_paths_bounded(&logs().lines());
    tether.abort();
}
