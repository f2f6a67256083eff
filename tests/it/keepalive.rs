//! Connection reuse to the backend: a recorded answer read to its clean end gives its connection
//! back to the pool, and the next turn goes over it; an answer that says `Connection: close`, or
//! one followed by bytes past its end, does not.
//!
//! These tests run on one thread: Pingora 0.9's pool hands a pooled connection over through
//! `Arc::try_unwrap` right after the idle task's mutex guard releases its lock but before the
//! guard drops its `Arc`, so on several threads a reuse now and then loses that race ("failed to
//! acquire reusable stream") and the connection is closed. On one thread the idle task finishes
//! dropping the guard before the waiting task runs, so the counts below are exact.

use std::sync::atomic::Ordering;

use crate::support::*;
use bytes::Bytes;
use serde_json::Value;

/// Runs a turn on `chat_id` to its end and waits until its producer finished (the producer
/// returns the connection to the pool last). Returns the recorded state.
async fn turn_to_end(tether: &Sidecar, chat_id: &str) -> Reduced {
    let frames = post(tether.addr, "/chat", &chat(chat_id))
        .await
        .frames_to_end()
        .await;
    assert_eq!(frames.last().unwrap().json["persisted"], true, "{chat_id}");
    let shared = tether.handle().shared.clone();
    eventually("the producer ended", || shared.producers.is_empty()).await;
    let mut state = Reduced::default();
    state.apply_frames(&frames, 0);
    state
}

/// Three turns against a backend answering each request with `script`: how many connections
/// the backend accepted.
async fn connections_for_three_turns(events: &[Value], script: Vec<Step>) -> usize {
    let be = backend(move |_| script.clone()).await;
    let tether = sidecar(be.addr, "").await;
    for chat_id in ["a", "b", "c"] {
        assert_eq!(turn_to_end(&tether, chat_id).await, Reduced::of(events));
    }
    assert_eq!(be.requests.lock().len(), 3);
    be.accepted.load(Ordering::SeqCst)
}

#[tokio::test]
async fn a_clean_chunked_answer_leaves_its_connection_for_the_next_turn() {
    let events = turn(6);
    let script = scripted_turn(&events, None);
    assert_eq!(connections_for_three_turns(&events, script).await, 1);
}

#[tokio::test]
async fn an_answer_that_says_connection_close_is_not_reused() {
    let events = turn(6);
    let mut script = scripted_turn(&events, None);
    // The fake backend keeps the connection open anyway: only tether's rule keeps it unused.
    script[0] = Step::Head(
        200,
        vec![
            ("content-type", "text/event-stream".into()),
            ("connection", "close".into()),
        ],
    );
    assert_eq!(connections_for_three_turns(&events, script).await, 3);
}

/// A backend answer of `events` framed by Content-Length, with `after` sent past its end.
fn content_length_answer(events: &[Value], after: &[u8]) -> Vec<Step> {
    let body: Vec<u8> = events.iter().flat_map(|e| sse(e).to_vec()).collect();
    let len = body.len();
    let mut wire = body;
    wire.extend_from_slice(after);
    vec![
        Step::Head(
            200,
            vec![
                ("content-type", "text/event-stream".into()),
                ("content-length", len.to_string()),
            ],
        ),
        Step::Raw(Bytes::from(wire)),
    ]
}

#[tokio::test]
async fn bytes_past_a_content_length_answer_keep_its_connection_out_of_the_pool() {
    let events = turn(6);
    let script = content_length_answer(&events, b"HTTP/1.1 200 JUNK\r\n\r\n");
    assert_eq!(connections_for_three_turns(&events, script).await, 3);
}

#[tokio::test]
async fn a_content_length_answer_read_to_its_end_is_reused() {
    let events = turn(6);
    let script = content_length_answer(&events, b"");
    assert_eq!(connections_for_three_turns(&events, script).await, 1);
}

/// A backend answering its first request with `first` and every later one with `later`.
async fn first_then(first: Vec<Step>, later: Vec<Step>) -> Backend {
    let n = std::sync::atomic::AtomicUsize::new(0);
    backend(move |_| match n.fetch_add(1, Ordering::SeqCst) {
        0 => first.clone(),
        _ => later.clone(),
    })
    .await
}

#[tokio::test]
async fn a_turn_the_backend_took_on_a_reused_connection_is_never_sent_again() {
    let events = turn(4);
    // The first turn leaves its connection in the pool; the backend reads the second turn's
    // whole request on it, then resets the connection without an answer.
    let be = first_then(scripted_turn(&events, None), vec![Step::Reset]).await;
    let tether = sidecar(be.addr, "").await;
    assert_eq!(turn_to_end(&tether, "a").await, Reduced::of(&events));
    let mut r = post(tether.addr, "/chat", &chat("b")).await;
    assert_eq!(r.status, 502);
    let v: Value = serde_json::from_slice(&r.body_to_end().await).unwrap();
    assert_eq!(v["error"], "upstream_unreachable");
    let reqs = be.requests.lock().clone();
    assert_eq!(reqs.len(), 2, "the second turn reached the backend once");
    assert_eq!(be.accepted.load(Ordering::SeqCst), 1, "it was not retried");
    assert_ne!(
        reqs[0].header("x-tether-run-id"),
        reqs[1].header("x-tether-run-id")
    );
}

/// Reads one request (head and content-length body) from `sock`; false once it closed.
async fn read_one(sock: &mut tokio::net::TcpStream, buf: &mut Vec<u8>) -> bool {
    use tokio::io::AsyncReadExt;
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map_or(0, |v| v.trim().parse().unwrap());
            if buf.len() >= end + 4 + len {
                buf.drain(..end + 4 + len);
                return true;
            }
        }
        let mut more = [0; 4096];
        match sock.read(&mut more).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => buf.extend_from_slice(&more[..n]),
        }
    }
}

/// A backend whose first answer is `204 No Content` with a body it sends late: the body goes
/// out once another request arrived on that connection. Every other answer is `200 real`.
/// Returns its address and the connections it accepted.
async fn late_body_backend() -> (
    std::net::SocketAddr,
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
) {
    use tokio::io::AsyncWriteExt;
    const REAL: &[u8] =
        b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 4\r\n\r\nreal";
    const STRAY: &[u8] =
        b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 5\r\n\r\nSTRAY";
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let first = count.fetch_add(1, Ordering::SeqCst) == 0;
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut late = first;
                while read_one(&mut sock, &mut buf).await {
                    let answer: &[u8] = match std::mem::take(&mut late) {
                        true => b"HTTP/1.1 204 No Content\r\n\r\n",
                        false if first => STRAY,
                        false => REAL,
                    };
                    if sock.write_all(answer).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, accepted)
}

#[tokio::test]
async fn a_bodiless_answer_is_relayed_without_framing_and_its_connection_is_not_reused() {
    let (addr, accepted) = late_body_backend().await;
    let tether = sidecar(addr, "").await;
    let mut r = post(tether.addr, "/chat", &chat("a")).await;
    assert_eq!(r.status, 204);
    assert_eq!(r.header("transfer-encoding"), None, "a 204 has no framing");
    assert_eq!(r.header("content-length"), None);
    assert_eq!(&r.body_to_end().await[..], b"");
    let mut r = post(tether.addr, "/chat", &chat("b")).await;
    assert_eq!(r.status, 200);
    assert_eq!(
        &r.body_to_end().await[..],
        b"real",
        "the backend's answer to this request"
    );
    assert_eq!(accepted.load(Ordering::SeqCst), 2, "a fresh connection");
}

#[tokio::test]
async fn stray_bytes_after_a_bodiless_answer_do_not_answer_the_next_request() {
    let together = [
        &b"HTTP/1.1 204 No Content\r\n\r\n"[..],
        b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nSTRAY",
    ]
    .concat();
    let be = first_then(
        vec![Step::Raw(Bytes::from(together))],
        fixed_answer(200, "text/plain", "real"),
    )
    .await;
    let tether = sidecar(be.addr, "").await;
    assert_eq!(post(tether.addr, "/chat", &chat("a")).await.status, 204);
    let mut r = post(tether.addr, "/chat", &chat("b")).await;
    assert_eq!(r.status, 200);
    assert_eq!(&r.body_to_end().await[..], b"real");
    assert_eq!(be.requests.lock().len(), 2);
    assert_eq!(be.accepted.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn answers_whose_framing_is_in_doubt_are_not_reused() {
    let events = turn(3);
    let body: Vec<u8> = events.iter().flat_map(|e| sse(e).to_vec()).collect();
    let chunked = format!(
        "{:x}\r\n{}\r\n0\r\n\r\n",
        body.len(),
        String::from_utf8_lossy(&body)
    );
    for head in [
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\ncontent-length: 3\r\n\r\n",
        "HTTP/1.0 200 OK\r\ncontent-type: text/event-stream\r\nconnection: keep-alive\r\ntransfer-encoding: chunked\r\n\r\n",
    ] {
        let script = vec![Step::Raw(Bytes::from(format!("{head}{chunked}")))];
        assert_eq!(connections_for_three_turns(&events, script).await, 3, "{head:?}");
    }
}
