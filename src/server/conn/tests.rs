//! The request-head scan, the rate-limited log line, the refusal answer, and the size of a
//! connection's futures.

use std::time::Duration;

use tokio::time::Instant;

use super::{error_answer, head_end, LogLimiter};
use crate::error::{ApiError, Code};

#[test]
fn a_head_ends_at_its_first_blank_line_with_or_without_carriage_returns() {
    let crlf = b"GET / HTTP/1.1\r\nHost: x\r\n\r\nbody";
    assert_eq!(head_end(crlf, 0), Some(crlf.len() - 4));
    let lf = b"GET / HTTP/1.1\nHost: x\n\nrest";
    assert_eq!(head_end(lf, 0), Some(lf.len() - 4));
    let mixed = b"GET / HTTP/1.1\r\nHost: x\n\r\n";
    assert_eq!(head_end(mixed, 0), Some(mixed.len()));
    for partial in [
        &b""[..],
        b"GET / HTTP/1.1\r\n",
        b"GET / HTTP/1.1\r\nHost: x\r\n",
        b"GET / HTTP/1.1\r\nHost: x\r\n\r",
        b"GET / HTTP/1.1\r\nX-Slow: a",
    ] {
        assert_eq!(
            head_end(partial, 0),
            None,
            "{:?}",
            String::from_utf8_lossy(partial)
        );
    }
}

#[test]
fn blank_lines_before_the_request_line_do_not_end_the_head() {
    assert_eq!(head_end(b"\r\n\r\n\r\n", 0), None);
    assert_eq!(head_end(b"\n\n\r\nGET / HTTP/1.1\r\n", 0), None);
    let after = b"\r\n\r\nGET / HTTP/1.1\r\n\r\n";
    assert_eq!(head_end(after, 0), Some(after.len()));
}

#[test]
fn a_scan_resumed_where_the_last_one_stopped_finds_an_end_split_across_reads() {
    let head = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    for cut in 0..head.len() {
        assert_eq!(head_end(&head[..cut], 0), None, "cut at {cut}");
        assert_eq!(head_end(head, cut), Some(head.len()), "resumed at {cut}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_repeated_line_is_logged_once_per_interval_with_the_count_left_out() {
    let every = Duration::from_secs(10);
    let mut log = LogLimiter::new(every);
    assert_eq!(
        log.hit(Instant::now()),
        Some(0),
        "the first failure is logged"
    );
    // Twenty failures a second for the rest of the interval: none logged.
    for _ in 0..199 {
        tokio::time::advance(Duration::from_millis(50)).await;
        assert_eq!(log.hit(Instant::now()), None);
    }
    tokio::time::advance(Duration::from_millis(50)).await;
    assert_eq!(
        log.hit(Instant::now()),
        Some(199),
        "one line when the interval has passed, with what it left out"
    );
    assert_eq!(log.hit(Instant::now()), None);
    // A failure long after the last: logged at once, one left out before it.
    tokio::time::advance(every * 3).await;
    assert_eq!(log.hit(Instant::now()), Some(1));
}

#[test]
fn a_refusal_is_a_whole_json_answer_that_closes_the_connection() {
    let e = ApiError::new(Code::TooManyConnections, "full");
    let text = String::from_utf8(error_answer(&e)).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    assert!(
        head.starts_with("HTTP/1.1 503 Service Unavailable\r\n"),
        "{head}"
    );
    assert!(head.contains("\r\nconnection: close"), "{head}");
    assert!(
        head.contains(&format!("\r\ncontent-length: {}", body.len())),
        "{head}"
    );
    let v: serde_json::Value = serde_json::from_str(body).unwrap();
    assert_eq!(v["error"], "too_many_connections");
}

/// A connection's task lives as long as its stream (minutes, for a chat turn) and holds these
/// futures inline; at 10,000 streams each kilobyte here is 10 MB. Kept small by boxing the TLS
/// handshake and keeping the refusal's read buffer on the heap.
#[tokio::test]
async fn a_connections_futures_hold_no_handshake_or_buffer_inline() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let client = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (tcp, _) = listener.accept().await.unwrap();
    let policy = super::Policy {
        header_timeout: Duration::from_secs(5),
        keepalive_timeout: Duration::from_secs(5),
        max_head_bytes: 8192,
        max_connections: usize::MAX,
        metrics: None,
        tls: None,
    };
    let handshake = super::secure(tcp, &policy);
    assert!(
        std::mem::size_of_val(&handshake) <= 512,
        "secure(): {} bytes",
        std::mem::size_of_val(&handshake)
    );
    let stream = handshake.await.unwrap();
    let app = std::sync::Arc::new(crate::server::demo::Demo::new(Default::default()));
    let (_tx, rx) = tokio::sync::watch::channel(false);
    let serving = super::serve(app, stream, &policy, rx);
    assert!(
        std::mem::size_of_val(&serving) <= 2048,
        "serve(): {} bytes",
        std::mem::size_of_val(&serving)
    );
    drop((serving, client));
}
