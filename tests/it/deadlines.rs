//! Limits on the time a client takes, on every path: the whole request body within `[server]
//! body_timeout` (tether's own routes answer `408 body_timeout`; a pass-through is closed, over
//! HTTP/2 its stream reset, and a body tether refused is drained no longer), and an answer to a
//! client that stops reading ended after `[server] write_timeout` on pass-through and forwarded
//! answers too, over HTTP/1.1 and HTTP/2, with its backend connection.

use std::time::Duration;

use bytes::Bytes;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::https::https_tether;
use crate::support::*;

/// One second for a body, a second for a stalled write.
const QUICK: &str = "[server]\nbody_timeout = \"1s\"\nwrite_timeout = \"1s\"\n";

/// The pause between two bytes of a trickled body: 40 of them take 12 s, far past the deadline.
const DRIP: Duration = Duration::from_millis(300);

/// Sends `head`, then a body a byte every [`DRIP`] (at most `len` bytes, stopping at the first
/// failed write) while reading what tether answers until it closes. Returns the answer and how
/// many body bytes were sent.
async fn trickle(addr: std::net::SocketAddr, head: &str, len: usize) -> (Vec<u8>, usize) {
    let sock = TcpStream::connect(addr).await.unwrap();
    let (mut rd, mut wr) = sock.into_split();
    wr.write_all(head.as_bytes()).await.unwrap();
    let writer = tokio::spawn(async move {
        let mut sent = 0;
        while sent < len {
            tokio::time::sleep(DRIP).await;
            if wr.write_all(b"x").await.is_err() {
                break;
            }
            sent += 1;
        }
        (sent, wr)
    });
    let mut answer = Vec::new();
    // A reset after the answer is a close too.
    let _ = within("tether closes the connection", rd.read_to_end(&mut answer)).await;
    writer.abort();
    let sent = match writer.await {
        Ok((sent, _)) => sent,
        Err(_) => 0,
    };
    (answer, sent)
}

/// The `error` code of a whole JSON answer.
fn code(answer: &[u8]) -> String {
    let head = parse_head(answer).expect("a whole response head");
    let v: Value = serde_json::from_slice(&answer[head.len..]).unwrap();
    v["error"].as_str().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_sent_a_byte_at_a_time_is_cut_at_the_body_deadline_on_own_and_pass_through_routes() {
    let be = backend(|_| fixed_answer(200, "text/plain", "passed")).await;
    let tether = sidecar(be.addr, QUICK).await;

    // A pass-through: closed without an answer, long before the body is whole.
    let (answer, sent) = trickle(
        tether.addr,
        "POST /upload HTTP/1.1\r\nhost: x\r\ncontent-length: 40\r\n\r\n",
        40,
    )
    .await;
    assert!(answer.is_empty(), "{:?}", String::from_utf8_lossy(&answer));
    assert!(sent < 10, "{sent} bytes were taken");
    assert_eq!(
        tether
            .metric("tether_downstream_timeouts_total{kind=\"body\"}")
            .await,
        1.0
    );

    // A record route reads the body itself: 408 body_timeout, then the connection closes.
    let (answer, sent) = trickle(
        tether.addr,
        "POST /chat HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
         content-length: 40\r\n\r\n",
        40,
    )
    .await;
    assert_eq!(parse_head(&answer).expect("an answer").status, 408);
    assert_eq!(code(&answer), "body_timeout");
    assert!(sent < 10, "{sent} bytes were taken");
    assert_eq!(
        tether
            .metric("tether_downstream_timeouts_total{kind=\"body\"}")
            .await,
        2.0
    );

    // A body over the cap is refused at once; what follows is drained for no longer.
    let (answer, sent) = trickle(
        tether.addr,
        "POST /chat HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
         content-length: 2000000\r\n\r\n",
        40,
    )
    .await;
    assert_eq!(code(&answer), "body_too_large");
    assert!(sent < 10, "{sent} bytes were drained");

    assert!(be.requests.lock().is_empty(), "nothing reached the backend");
    eventually_async("the backend slot is given back", || async {
        tether.metric("tether_upstream_requests").await == 0.0
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_stream_that_never_sends_its_announced_body_is_answered_or_reset_at_the_body_deadline(
) {
    let be = backend(|_| fixed_answer(200, "text/plain", "passed")).await;
    let ca = TestCa::new("h2-body-deadline");
    let server = ca.issue("listener", &["localhost"]);
    let tether = https_tether(be.addr, &server, "body_timeout = \"1s\"\n").await;
    let mut c = H2::connect(tether.addr, &ca).await;
    let announced = [
        ("content-type", "application/json"),
        ("content-length", "40"),
    ];

    // A pass-through stream: reset, the connection goes on.
    let (passing, _req) = c.start("POST", "/upload", &announced).await;
    // A record route: 408 body_timeout.
    let (recording, req) = c.start("POST", "/chat", &announced).await;

    let reset = within("the pass-through stream ends", passing).await;
    let e = reset.expect_err("a reset, not an answer");
    assert_eq!(e.reason(), Some(h2::Reason::CANCEL), "{e}");
    let mut answer = H2Resp::of(recording, req).await;
    assert_eq!(answer.status, 408);
    let v: Value = serde_json::from_slice(&answer.body_to_end().await).unwrap();
    assert_eq!(v["error"], "body_timeout");
    assert_eq!(
        tether
            .metric("tether_downstream_timeouts_total{kind=\"body\"}")
            .await,
        2.0
    );

    let mut next = c.request("GET", "/other", &[], b"").await;
    assert_eq!(
        (next.status, next.body_to_end().await),
        (200, Bytes::from("passed"))
    );
    assert_eq!(
        be.requests.lock().len(),
        1,
        "only the whole request went on"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pass_through_whose_body_arrived_in_time_streams_its_answer_past_the_body_deadline() {
    // Half the answer, then a pause longer than the body deadline, then the rest.
    let be = backend(|_| {
        vec![
            sse_head(),
            Step::Chunk(Bytes::from_static(b"data: a\n\n")),
            Step::Sleep(Duration::from_millis(1500)),
            Step::Chunk(Bytes::from_static(b"data: b\n\n")),
            Step::End,
        ]
    })
    .await;
    let ca = TestCa::new("h2-body-in-time");
    let server = ca.issue("listener", &["localhost"]);
    let tether = https_tether(be.addr, &server, "body_timeout = \"1s\"\n").await;
    let plain = sidecar(be.addr, QUICK).await;
    let whole = Bytes::from_static(b"data: a\n\ndata: b\n\n");

    let mut c = H2::connect(tether.addr, &ca).await;
    // With its length: the fake backend reads no chunked body.
    let mut r = c
        .request("POST", "/upload", &[("content-length", "5")], b"hello")
        .await;
    assert_eq!((r.status, r.body_to_end().await), (200, whole.clone()));
    let mut r = c.request("GET", "/download", &[], b"").await;
    assert_eq!((r.status, r.body_to_end().await), (200, whole.clone()));
    let mut r = request(plain.addr, "POST", "/upload", &[], b"hello").await;
    assert_eq!((r.status, r.body_to_end().await), (200, whole.clone()));
    let mut r = request(plain.addr, "GET", "/download", &[], b"").await;
    assert_eq!((r.status, r.body_to_end().await), (200, whole));

    let bodies: Vec<Bytes> = be.requests.lock().iter().map(|r| r.body.clone()).collect();
    assert_eq!(bodies, ["hello", "", "hello", ""].map(Bytes::from));
    for t in [&tether, &plain] {
        assert_eq!(
            t.metric("tether_downstream_timeouts_total{kind=\"body\"}")
                .await,
            0.0
        );
    }
}

/// A backend answering `GET /big` with far more than any socket buffers hold (125 MiB in 64 KiB
/// chunks), `POST /chat` with a JSON answer as large (not an event stream: relayed unrecorded).
async fn endless_backend() -> Backend {
    let chunk = Bytes::from(vec![b'x'; 64 << 10]);
    backend(move |r: &Req| {
        let content_type = match r.path.as_str() {
            "/big" => "application/octet-stream",
            _ => "application/json",
        };
        let mut steps = vec![Step::Head(200, vec![("content-type", content_type.into())])];
        steps.extend(std::iter::repeat_n(Step::Chunk(chunk.clone()), 2000));
        steps.push(Step::End);
        steps
    })
    .await
}

/// Waits for the backend's one answer to end, and checks that it was cut (tether closed the
/// backend connection) and that tether holds no backend connection for it any more.
async fn backend_answer_was_cut(be: &Backend, tether: &Sidecar) {
    be.wait_answers(1).await;
    let served = be.served.lock()[0].clone();
    assert!(served.write_failed, "{served:?}");
    eventually_async("the backend slot is given back", || async {
        tether.metric("tether_upstream_requests").await == 0.0
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pass_through_answer_to_an_http1_client_that_stops_reading_ends_at_the_write_timeout() {
    let be = endless_backend().await;
    let tether = sidecar(be.addr, QUICK).await;
    let mut sock = TcpStream::connect(tether.addr).await.unwrap();
    sock.write_all(b"GET /big HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    backend_answer_was_cut(&be, &tether).await;
    drop(sock);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forwarded_answer_to_a_client_that_stops_reading_ends_at_the_write_timeout() {
    let be = endless_backend().await;
    let tether = sidecar(be.addr, QUICK).await;
    let mut sock = TcpStream::connect(tether.addr).await.unwrap();
    let body = chat("c").to_string();
    let head = format!(
        "POST /chat HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
         content-length: {}\r\n\r\n{body}",
        body.len()
    );
    sock.write_all(head.as_bytes()).await.unwrap();
    backend_answer_was_cut(&be, &tether).await;
    drop(sock);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pass_through_answer_to_an_http2_client_that_stops_reading_ends_at_the_write_timeout() {
    let be = endless_backend().await;
    let ca = TestCa::new("h2-write-timeout");
    let server = ca.issue("listener", &["localhost"]);
    let tether = https_tether(be.addr, &server, "write_timeout = \"1s\"\n").await;
    let mut c = H2::connect(tether.addr, &ca).await;
    // The head arrives; the body is never read, so no flow-control window is given back.
    let big = c.request("GET", "/big", &[], b"").await;
    assert_eq!(big.status, 200);
    backend_answer_was_cut(&be, &tether).await;
    // The connection goes on.
    let next = c.request("GET", "/status", &[], b"").await;
    assert_eq!(next.status, 200);
    next.reset();
    drop(big);
}
