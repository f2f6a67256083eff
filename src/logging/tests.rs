//! Unit tests of the record rewriting: sample Pingora 0.9 messages as they are logged.

use parking_lot::Mutex;

use log::{Level, Log, Metadata, Record};
use pingora_http::RequestHeader;

use super::*;

const PROXY: &str = "pingora_proxy";
const CONNECTORS: &str = "pingora_core::connectors";

fn rewritten(level: Level, message: Option<&str>) -> Verdict {
    Verdict::Rewrite {
        level,
        message: message.map(str::to_string),
    }
}

#[test]
fn the_pool_race_is_debug() {
    assert_eq!(
        verdict(
            CONNECTORS,
            Level::Error,
            "failed to acquire reusable stream"
        ),
        rewritten(Level::Debug, None)
    );
    // Only from the connector, and only that message.
    assert_eq!(
        verdict(PROXY, Level::Error, "failed to acquire reusable stream"),
        Verdict::Keep
    );
    assert_eq!(
        verdict(CONNECTORS, Level::Error, "failed to connect"),
        Verdict::Keep
    );
}

#[test]
fn a_failed_h2_handshake_is_a_warning() {
    let apps = "pingora_core::apps";
    assert_eq!(
        verdict(
            apps,
            Level::Error,
            "H2 handshake error connection error detected: frame with invalid size"
        ),
        rewritten(Level::Warn, None)
    );
    // Only that message, only from there.
    assert_eq!(verdict(apps, Level::Error, "other failure"), Verdict::Keep);
    assert_eq!(
        verdict(PROXY, Level::Error, "H2 handshake error x"),
        Verdict::Keep
    );
}

#[test]
fn an_invalid_chunked_body_is_a_warning() {
    let m = "Fail to proxy: Downstream InvalidChunk context: Peer: addr: 127.0.0.1:35101, \
             scheme: HTTP cause:  context: Invalid chunked encoding: InvalidChunkSize, \
             status: 400, tries: 1, retry: false, POST /p, Host: x";
    assert_eq!(
        verdict(PROXY, Level::Error, m),
        rewritten(Level::Warn, None)
    );
}

#[test]
fn a_client_leaving_mid_body_or_mid_head_is_info() {
    for m in [
        "Fail to proxy: Downstream ConnectionClosed context: Peer: addr: 127.0.0.1:35101, \
         scheme: HTTP cause:  context: Peer prematurely closed connection with 97 bytes of body \
         remaining to read, status: 0, tries: 1, retry: false, POST /p, Host: x",
        "Fail to proxy: Downstream ConnectionClosed context: while reading request headers, \
         bytes already read: 5027, downstream session type: h1",
        "Fail to proxy: Downstream ReadError context: while reading request headers cause: \
         Connection reset by peer (os error 104), downstream session type: h1",
        "Fail to proxy: Downstream ReadTimedout context: timeout: 60s, downstream session type: h1",
        "Fail to filter request: Downstream PrematureBodyEnd, status: 0, GET /, Host: x",
    ] {
        assert_eq!(
            verdict(PROXY, Level::Error, m),
            rewritten(Level::Info, None),
            "{m}"
        );
    }
}

#[test]
fn writing_to_a_client_that_left_is_info() {
    for m in [
        "failed to send error response to downstream:  WriteError context: writing response \
         header cause: Broken pipe (os error 32)",
        "Error finish sending body to downstream: Downstream WriteError context: flushing body",
    ] {
        assert_eq!(
            verdict(PROXY, Level::Error, m),
            rewritten(Level::Info, None),
            "{m}"
        );
    }
}

#[test]
fn backend_and_internal_failures_stay_errors() {
    for m in [
        "Fail to proxy: Upstream ConnectRefused context: Fail to connect to addr: \
         127.0.0.1:41909, scheme: HTTP cause:  context: Fail to connect to 127.0.0.1:41909 \
         cause: Connection refused (os error 111), status: 502, tries: 1, retry: false, \
         GET /p, Host: x",
        "Fail to proxy: Upstream ReadError context: Peer: addr: 127.0.0.1:1, status: 502, \
         tries: 1, retry: false, GET /p, Host: x",
        "Fail to proxy: Internal HTTPStatus context: peer, status: 500, tries: 1, retry: false, \
         GET /p, Host: x",
        // A path that mentions `Downstream` does not make an upstream failure the client's.
        "Fail to proxy: Upstream ConnectRefused, status: 502, tries: 1, retry: false, \
         GET /a: Downstream ReadError, Host: x",
    ] {
        assert_eq!(verdict(PROXY, Level::Error, m), Verdict::Keep, "{m}");
    }
    // A retry warning about the backend is left as it is.
    let retry = "Fail to proxy: Upstream ConnectRefused, tries: 1, retry: true, GET /, Host: x";
    assert_eq!(verdict(PROXY, Level::Warn, retry), Verdict::Keep);
}

#[test]
fn levels_are_only_lowered() {
    // Pingora's own DEBUG line for a malformed head stays DEBUG.
    let m = "Fail to proxy: Downstream InvalidHTTPHeader context: buf: GARBAGE, downstream \
             session type: h1";
    assert_eq!(verdict(PROXY, Level::Debug, m), Verdict::Keep);
    assert_eq!(
        verdict(
            CONNECTORS,
            Level::Trace,
            "failed to acquire reusable stream"
        ),
        Verdict::Keep
    );
}

#[test]
fn tethers_own_records_pass_unchanged() {
    let long = "x".repeat(10 * MAX_MESSAGE);
    assert_eq!(verdict("tether::proxy", Level::Error, &long), Verdict::Keep);
    assert_eq!(
        verdict(
            "tether::server",
            Level::Error,
            "Fail to proxy: Downstream ReadError"
        ),
        Verdict::Keep
    );
}

#[test]
fn an_overlong_pingora_message_is_cut() {
    let m = format!(
        "Fail to proxy: Upstream ReadError, GET /{}",
        "a".repeat(5000)
    );
    let Verdict::Rewrite {
        level: Level::Error,
        message: Some(cut),
    } = verdict(PROXY, Level::Error, &m)
    else {
        panic!("not cut: {m}");
    };
    assert!(cut.len() < MAX_MESSAGE + 32, "{}", cut.len());
    assert!(cut.ends_with(&format!("…({} bytes)", m.len())), "{cut}");
}

#[test]
fn bounded_cuts_at_a_character_boundary_and_says_how_long() {
    assert_eq!(bounded("short", 8), "short");
    assert_eq!(bounded("exactly8", 8), "exactly8");
    assert_eq!(bounded("abcdefghij", 4), "abcd…(10 bytes)");
    // "é" is two bytes: cutting at 2 would split it, so the cut falls before it.
    assert_eq!(bounded("aé-bc", 2), "a…(6 bytes)");
}

#[test]
fn the_request_summary_bounds_path_and_host() {
    let path = format!("/{}?q=1", "a".repeat(5000));
    let mut req = RequestHeader::build("POST", path.as_bytes(), None).expect("a request head");
    let host = "h".repeat(600);
    req.insert_header("host", &host).expect("a host header");
    let s = request_summary(&req);
    assert!(s.starts_with("POST /aaa"), "{s}");
    assert!(
        s.contains(&format!("…({} bytes), Host: hhh", path.len())),
        "{s}"
    );
    assert!(s.ends_with(&format!("…({} bytes)", host.len())), "{s}");
    assert!(!s.contains(&"a".repeat(MAX_REQUEST_TEXT)), "{s}");
    assert!(s.len() < 3 * MAX_REQUEST_TEXT + 64, "{}", s.len());

    let short = RequestHeader::build("GET", b"/chat", None).expect("a request head");
    assert_eq!(request_summary(&short), "GET /chat, Host: ");
}

/// A logger that keeps what it is given, at INFO and above.
#[derive(Default)]
struct Capture(Mutex<Vec<(Level, String, String)>>);

impl Log for Capture {
    fn enabled(&self, m: &Metadata<'_>) -> bool {
        m.level() <= Level::Info
    }
    fn log(&self, r: &Record<'_>) {
        if self.enabled(r.metadata()) {
            let mut v = self.0.lock();
            v.push((r.level(), r.target().to_string(), r.args().to_string()));
        }
    }
    fn flush(&self) {}
}

fn send(log: &Rewrite<Capture>, target: &str, level: Level, args: std::fmt::Arguments<'_>) {
    log.log(
        &Record::builder()
            .target(target)
            .level(level)
            .args(args)
            .line(Some(7))
            .build(),
    );
}

#[test]
fn the_wrapper_applies_the_verdict_and_the_inner_filter() {
    let log = Rewrite::new(Capture::default());
    let path = "b".repeat(40);
    send(
        &log,
        CONNECTORS,
        Level::Error,
        format_args!("failed to acquire reusable stream"),
    );
    send(
        &log,
        PROXY,
        Level::Error,
        format_args!("Fail to proxy: Downstream InvalidChunk, status: 400, POST /{path}"),
    );
    send(
        &log,
        PROXY,
        Level::Error,
        format_args!("Fail to proxy: Upstream ConnectRefused, status: 502"),
    );
    send(
        &log,
        "tether::server",
        Level::Info,
        format_args!("listening"),
    );
    send(
        &log,
        PROXY,
        Level::Debug,
        format_args!("Successfully get a new request"),
    );
    send(
        &log,
        PROXY,
        Level::Error,
        format_args!("{}", "c".repeat(3 * MAX_MESSAGE)),
    );

    let got = log.inner().0.lock().clone();
    assert_eq!(got.len(), 4, "{got:?}");
    assert_eq!(got[0].0, Level::Warn);
    assert_eq!(
        got[0].2,
        format!("Fail to proxy: Downstream InvalidChunk, status: 400, POST /{path}")
    );
    assert_eq!(
        (got[1].0, got[1].1.as_str()),
        (Level::Error, PROXY),
        "{got:?}"
    );
    assert_eq!((got[2].0, got[2].2.as_str()), (Level::Info, "listening"));
    assert_eq!(got[3].0, Level::Error);
    assert!(got[3].2.ends_with(&format!("…({} bytes)", 3 * MAX_MESSAGE)));
    assert!(got[3].2.len() < MAX_MESSAGE + 32);
}
