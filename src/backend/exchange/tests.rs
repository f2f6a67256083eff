//! Tests of an exchange over an in-memory connection: what is written, how the answer is read,
//! when the connection is reusable, how failures are classified, and the read buffer's sizes.

use tokio::io::{duplex, DuplexStream};

use super::*;

const LIMITS: StartTimeouts = StartTimeouts {
    write: Duration::from_secs(5),
    head: Duration::from_secs(5),
};

const REQUEST: &[u8] = b"POST /chat HTTP/1.1\r\nContent-Length: 2\r\n\r\n";

/// Starts an exchange whose backend reads the request and then writes `answer`, and closes the
/// connection when `close`. Returns the exchange, the request as the backend read it, and the
/// backend's end of a connection it holds open (the exchange must not wait for a close it was
/// not promised).
async fn exchange(
    method: http::Method,
    answer: &'static [u8],
    close: bool,
) -> (
    Result<Exchange<DuplexStream>, Failed>,
    Vec<u8>,
    Option<DuplexStream>,
) {
    let (client, mut server) = duplex(1 << 20);
    let backend = tokio::spawn(async move {
        let mut got = vec![0; REQUEST.len() + 2];
        server.read_exact(&mut got).await.unwrap();
        server.write_all(answer).await.unwrap();
        (got, (!close).then_some(server))
    });
    let x = Exchange::start(client, REQUEST, b"{}", &method, LIMITS).await;
    let (got, held) = backend.await.unwrap();
    (x, got, held)
}

/// The whole body, or the first error.
async fn body<S: AsyncRead + AsyncWrite + Unpin>(
    x: &mut Exchange<S>,
) -> Result<Vec<u8>, UpstreamError> {
    let mut out = Vec::new();
    while let Some(b) = x.next().await? {
        out.extend_from_slice(&b);
    }
    Ok(out)
}

#[tokio::test]
async fn a_chunked_answer_is_read_to_its_end_and_its_connection_is_reusable() {
    let (x, req, _held) = exchange(
        http::Method::POST,
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n",
        false,
    )
    .await;
    assert_eq!(req, b"POST /chat HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}");
    let mut x = x.unwrap();
    assert_eq!(x.header().status, 200, "the 100 was skipped");
    assert_eq!(body(&mut x).await.unwrap(), b"abcde");
    assert!(x.into_reusable().is_some());
}

#[tokio::test]
async fn an_answer_that_says_close_or_ends_with_the_connection_is_not_reusable() {
    let (x, _, _held) = exchange(
        http::Method::POST,
        b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok",
        false,
    )
    .await;
    let mut x = x.unwrap();
    assert_eq!(body(&mut x).await.unwrap(), b"ok");
    assert!(x.into_reusable().is_none(), "Connection: close");

    let (x, _, _held) = exchange(
        http::Method::POST,
        b"HTTP/1.0 200 OK\r\n\r\nall until the close",
        true,
    )
    .await;
    let mut x = x.unwrap();
    assert_eq!(body(&mut x).await.unwrap(), b"all until the close");
    assert!(x.into_reusable().is_none(), "close-delimited");

    let (x, _, _held) = exchange(
        http::Method::POST,
        b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nok",
        false,
    )
    .await;
    let mut x = x.unwrap();
    assert_eq!(body(&mut x).await.unwrap(), b"ok");
    assert!(
        x.into_reusable().is_some(),
        "HTTP/1.0 asking for keep-alive"
    );
}

#[tokio::test]
async fn bytes_past_the_body_or_an_unread_body_keep_the_connection_out_of_the_pool() {
    let (x, _, _held) = exchange(
        http::Method::POST,
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokEXTRA",
        false,
    )
    .await;
    let mut x = x.unwrap();
    assert_eq!(body(&mut x).await.unwrap(), b"ok");
    assert!(x.into_reusable().is_none(), "over-read");

    let (x, _, _held) = exchange(
        http::Method::POST,
        b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nok",
        false,
    )
    .await;
    assert!(x.unwrap().into_reusable().is_none(), "unread body");
}

#[tokio::test]
async fn bodiless_answers_have_no_body_and_their_connection_is_not_reused() {
    let (x, _, _held) = exchange(
        http::Method::HEAD,
        b"HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n",
        false,
    )
    .await;
    let mut x = x.unwrap();
    assert_eq!(x.next().await.unwrap(), None);
    assert!(
        x.into_reusable().is_none(),
        "a HEAD answer's body might follow"
    );
    for answer in [
        &b"HTTP/1.1 204 No Content\r\n\r\n"[..],
        b"HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\n",
    ] {
        let (x, _, _held) = exchange(http::Method::POST, answer, false).await;
        let mut x = x.unwrap();
        assert_eq!(x.next().await.unwrap(), None);
        assert!(x.into_reusable().is_none(), "{answer:?}");
    }
}

#[tokio::test]
async fn an_answer_whose_framing_is_in_doubt_is_read_but_its_connection_not_reused() {
    for answer in [
        &b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 2\r\n\r\n2\r\nok\r\n0\r\n\r\n"[..],
        b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
        b"HTTP/1.1 204 No Content\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nno",
    ] {
        let (x, _, _held) = exchange(http::Method::POST, answer, false).await;
        let mut x = x.unwrap();
        let body = body(&mut x).await.unwrap();
        assert!(body == b"ok" || body.is_empty(), "{answer:?}");
        assert!(
            x.header().headers.get("content-length").is_none(),
            "chunking overrides the length"
        );
        assert!(x.into_reusable().is_none(), "{answer:?}");
    }
}

#[tokio::test]
async fn a_short_body_is_a_reset_and_a_malformed_one_a_protocol_error() {
    let (x, _, _held) = exchange(
        http::Method::POST,
        b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort",
        true,
    )
    .await;
    let e = body(&mut x.unwrap()).await.unwrap_err();
    assert_eq!(e.kind, UpstreamErrorKind::Reset, "{}", e.message);
    assert!(e.message.contains("content-length"), "{}", e.message);

    let (x, _, _held) = exchange(
        http::Method::POST,
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\nzz\r\n",
        false,
    )
    .await;
    let mut x = x.unwrap();
    assert_eq!(x.next().await.unwrap(), Some(Bytes::from_static(b"abc")));
    let e = x.next().await.unwrap_err();
    assert_eq!(e.kind, UpstreamErrorKind::Protocol, "{}", e.message);
    assert!(x.into_reusable().is_none());
}

#[tokio::test]
async fn only_a_request_that_never_left_may_be_retried() {
    // The backend read the whole request, then closed without a word: it may be running the
    // turn, so the request is never sent again.
    let (x, got, _held) = exchange(http::Method::POST, b"", true).await;
    assert_eq!(got, [REQUEST, b"{}"].concat());
    let f = x.err().unwrap();
    assert_eq!(f.error.kind, UpstreamErrorKind::Reset);
    assert!(!f.retry, "the request was written");

    // The connection was gone before the first byte was written.
    let (client, server) = duplex(1024);
    drop(server);
    let x = Exchange::start(client, REQUEST, b"{}", &http::Method::POST, LIMITS).await;
    let f = x.err().unwrap();
    assert_eq!(
        f.error.kind,
        UpstreamErrorKind::Reset,
        "{}",
        f.error.message
    );
    assert!(f.retry, "nothing was written");

    // Part of the request was taken before the connection went.
    let (client, mut server) = duplex(16);
    let reader = tokio::spawn(async move {
        let mut some = [0; 16];
        server.read_exact(&mut some).await.unwrap();
    });
    let x = Exchange::start(client, REQUEST, b"{}", &http::Method::POST, LIMITS).await;
    reader.await.unwrap();
    let f = x.err().unwrap();
    assert!(!f.retry, "16 bytes were written");
}

#[tokio::test]
async fn a_garbled_answer_is_not_retried() {
    let (x, _, _held) = exchange(http::Method::POST, b"HTTP/1.1 200 OK\r\nX: 1\r\n", true).await;
    let f = x.err().unwrap();
    assert_eq!(f.error.kind, UpstreamErrorKind::Reset);
    assert!(!f.retry, "part of an answer arrived");

    let (x, _, _held) = exchange(http::Method::POST, b"SMTP ready\r\n\r\n", false).await;
    let f = x.err().unwrap();
    assert_eq!(
        f.error.kind,
        UpstreamErrorKind::Protocol,
        "{}",
        f.error.message
    );
    assert!(!f.retry);

    let (x, _, _held) = exchange(
        http::Method::POST,
        b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
        false,
    )
    .await;
    assert_eq!(x.err().unwrap().error.kind, UpstreamErrorKind::Protocol);
}

#[tokio::test]
async fn a_head_over_64_kib_is_a_protocol_error() {
    let mut big = b"HTTP/1.1 200 OK\r\n".to_vec();
    let filler = format!("X-Filler: {}\r\n", "v".repeat(1000));
    while big.len() <= wire::MAX_HEAD {
        big.extend_from_slice(filler.as_bytes());
    }
    let big: &'static [u8] = Box::leak(big.into_boxed_slice());
    let (x, _, _held) = exchange(http::Method::POST, big, false).await;
    let f = x.err().unwrap();
    assert_eq!(f.error.kind, UpstreamErrorKind::Protocol);
    assert!(f.error.message.contains("over"), "{}", f.error.message);
}

#[tokio::test(start_paused = true)]
async fn a_backend_silent_before_its_head_times_out() {
    let (client, mut server) = duplex(1024);
    let limits = StartTimeouts {
        write: Duration::from_secs(1),
        head: Duration::from_secs(30),
    };
    let x = Exchange::start(client, REQUEST, b"{}", &http::Method::POST, limits).await;
    let f = x.err().unwrap();
    assert_eq!(f.error.kind, UpstreamErrorKind::Timeout);
    assert!(!f.retry);
    let mut got = vec![0; REQUEST.len() + 2];
    server.read_exact(&mut got).await.unwrap();

    // A backend that does not take the request: the write limit.
    let (client, _server) = duplex(8);
    let x = Exchange::start(client, REQUEST, b"{}", &http::Method::POST, limits).await;
    assert_eq!(x.err().unwrap().error.kind, UpstreamErrorKind::Timeout);
}

#[tokio::test]
async fn the_read_buffer_starts_small_grows_to_64_kib_on_full_reads_and_is_reclaimed() {
    let (client, mut server) = duplex(1 << 20);
    let mut r = Reader::new(client);
    server.write_all(b"small").await.unwrap();
    assert_eq!(r.fill().await.unwrap(), 5);
    assert_eq!(r.buf.capacity(), FIRST_READ);
    let base = r.buf.as_ptr();
    drop(r.buf.split().freeze());
    // Most of the room, not all of it.
    let most = FIRST_READ - 96;
    server.write_all(&vec![7; most]).await.unwrap();
    assert_eq!(r.fill().await.unwrap(), most);
    assert_eq!(
        r.size, FIRST_READ,
        "a read that did not fill its room does not grow"
    );
    drop(r.buf.split().freeze());
    // Slices dropped and little room left: the same allocation is used again, from its start.
    server.write_all(b"again").await.unwrap();
    assert_eq!(r.fill().await.unwrap(), 5);
    assert_eq!(r.buf.as_ptr(), base);
    drop(r.buf.split());
    // A backend faster than the reads: full reads, each one doubling the next buffer.
    tokio::spawn(async move { server.write_all(&vec![1; 1 << 20]).await.unwrap() });
    let mut kept = Vec::new();
    let mut total = 0;
    while total < (1 << 20) {
        total += r.fill().await.unwrap();
        assert!(r.buf.capacity() <= MAX_READ, "{}", r.buf.capacity());
        // Slices held (as a run's window holds events) force fresh buffers.
        kept.push(r.buf.split().freeze());
    }
    assert_eq!(r.size, MAX_READ);
}

#[tokio::test]
async fn a_fast_backend_grows_the_read_buffer_to_64_kib_even_when_every_slice_is_dropped() {
    let (client, mut server) = duplex(1 << 20);
    let mut r = Reader::new(client);
    tokio::spawn(async move { server.write_all(&vec![1; 4 << 20]).await.unwrap() });
    let (mut total, mut reads) = (0, 0);
    while r.size < MAX_READ && total < (4 << 20) {
        total += r.fill().await.unwrap();
        reads += 1;
        // The producer copies what it records: each read's slice is gone before the next.
        drop(r.buf.split().freeze());
    }
    assert_eq!(r.size, MAX_READ, "after {reads} reads of {total} bytes");
    assert!(reads < 16, "{reads} reads to grow");
}

#[test]
fn an_io_failure_keeps_its_cause() {
    let reset = io::Error::new(io::ErrorKind::ConnectionReset, "peer reset");
    let e = io_error(&reset, "reading the response head");
    assert_eq!(e.kind, UpstreamErrorKind::Reset);
    let cause = std::error::Error::source(&e).expect("the I/O error is its source");
    assert_eq!(cause.to_string(), "peer reset");
}
