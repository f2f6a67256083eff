//! Hostile clients at the proxy (malformed HTTP, truncated bodies, slow-loris headers, abrupt
//! resets) while a turn is recorded: tether stays up, serves a normal turn, and loses no event.

mod support;

use serde_json::Value;
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

async fn raw(addr: std::net::SocketAddr, bytes: &[u8]) -> TcpStream {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(bytes).await.unwrap();
    s
}

/// Everything the server answers on `s` up to its close of the connection, which must come
/// within the harness's limit and be clean (FIN, not RST).
async fn answer(mut s: TcpStream) -> Vec<u8> {
    let mut out = Vec::new();
    within("the server closes the connection", s.read_to_end(&mut out))
        .await
        .unwrap_or_else(|e| panic!("not a clean close: {e}"));
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_clients_do_not_disturb_a_recorded_turn_or_the_next_one() {
    let gate = Gate::default();
    let events = turn(40);
    let be = turn_backend(events.clone(), Some((10, gate.clone()))).await;
    let tether = sidecar(be.addr, "").await;
    let mut victim = post(tether.addr, "/chat", &chat("v")).await;
    let mut frames = vec![victim.frame().await.unwrap()];
    while frames.last().unwrap().seq() < 10 {
        frames.push(victim.frame().await.unwrap());
    }

    // Malformed request lines and headers: a bare 400 that closes the connection.
    for junk in [
        &b"GARBAGE\r\n\r\n"[..],
        b"POST /chat HTTP/9.9\r\n\r\n",
        b"\x00\x01\x02\xff\xfe\r\n\r\n",
        b"POST /chat HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n",
    ] {
        let a = answer(raw(tether.addr, junk).await).await;
        let what = format!(
            "{:?} got {:?}",
            String::from_utf8_lossy(junk),
            String::from_utf8_lossy(&a)
        );
        let head = parse_head(&a).unwrap_or_else(|| panic!("{what}: no whole response head"));
        assert_eq!(head.status, 400, "{what}");
        assert_eq!(head.header("connection"), Some("close"), "{what}");
        assert_eq!(head.header("content-length"), Some("0"), "{what}");
        assert_eq!(a.len(), head.len, "{what}: bytes after the head");
    }
    // A chunked body whose chunk size is not hex: closed without an answer.
    let a = answer(
        raw(
            tether.addr,
            b"POST /chat HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nbad\r\n",
        )
        .await,
    )
    .await;
    assert_eq!(String::from_utf8_lossy(&a), "");
    // A query that is not UTF-8 once decoded: tether's own 400, then the close the client asked for.
    let a = answer(
        raw(
            tether.addr,
            b"GET /chat/live?chat_id=%ff HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        )
        .await,
    )
    .await;
    let head = parse_head(&a).expect("a whole response head");
    assert_eq!(head.status, 400);
    assert_eq!(head.header("connection"), Some("close"));
    let body: Value = serde_json::from_slice(&a[head.len..]).unwrap();
    assert_eq!(body["error"], "invalid_query");
    // A truncated body: the client promises 100 bytes, sends 10, and leaves; closed without an
    // answer.
    let mut s = raw(
        tether.addr,
        b"POST /chat HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"chat_id\"",
    )
    .await;
    s.shutdown().await.unwrap();
    assert_eq!(String::from_utf8_lossy(&answer(s).await), "");
    // Slow-loris: a header that never ends, held open for the rest of the test.
    let loris = raw(tether.addr, b"POST /chat HTTP/1.1\r\nHost: x\r\nX-Slow: a").await;
    // Abrupt resets: right after connecting, and in the middle of an attach stream.
    close_with_rst(TcpStream::connect(tether.addr).await.unwrap());
    let mut watcher = post(tether.addr, "/chat/live", &chat("v")).await;
    watcher.frame().await.unwrap();
    watcher.kill();
    // Nothing was forwarded for the hostile requests.
    assert_eq!(be.requests.lock().len(), 1);

    gate.open();
    frames.extend(victim.frames_to_end().await);
    let mut state = Reduced::default();
    state.apply_frames(&frames, 0);
    assert_eq!(
        state,
        Reduced::of(&events),
        "the recorded turn lost nothing"
    );
    assert_eq!(frames.last().unwrap().json["persisted"], true);
    assert_eq!(frames.last().unwrap().seq(), events.len() as u64);

    // And a normal turn still works.
    let next = post(tether.addr, "/chat", &chat("n"))
        .await
        .frames_to_end()
        .await;
    let mut state = Reduced::default();
    state.apply_frames(&next, 0);
    assert_eq!(state, Reduced::of(&events));
    drop(loris);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_sent_a_byte_at_a_time_is_closed_at_the_header_deadline() {
    let be = turn_backend(turn(3), None).await;
    let tether = sidecar(be.addr, "[server]\nheader_timeout = \"300ms\"\n").await;
    let (mut rd, mut wr) = TcpStream::connect(tether.addr).await.unwrap().into_split();
    // One byte every 50 ms, far inside any per-read timeout; the head never ends.
    let dribble = tokio::spawn(async move {
        let start = b"POST /chat HTTP/1.1\r\nHost: x\r\nX-Slow: ";
        for b in start.iter().chain(std::iter::repeat(&b'a')) {
            if wr.write_all(&[*b]).await.is_err() {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    });
    let mut got = Vec::new();
    // A close (FIN, or RST once a dribbled byte meets the closed socket) with nothing answered.
    let _ = within(
        "the header deadline closes the connection",
        rd.read_to_end(&mut got),
    )
    .await;
    assert_eq!(String::from_utf8_lossy(&got), "");
    dribble.abort();
    assert_eq!(
        tether
            .metric("tether_downstream_timeouts_total{kind=\"header\"}")
            .await,
        1.0
    );
    let t = &tether;
    eventually_async("the connection is no longer counted", || async move {
        t.metric("tether_downstream_connections").await == 0.0
    })
    .await;
    assert!(be.requests.lock().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_kept_alive_connection_is_closed_but_a_stream_outliving_both_limits_is_not() {
    let gate = Gate::default();
    let events = turn(5);
    let script = scripted_turn(&events, Some((2, &gate)));
    let be = backend(move |req| match req.path.as_str() {
        "/chat" => script.clone(),
        _ => fixed_answer(200, "text/plain", "plain"),
    })
    .await;
    let limits = "[server]\nheader_timeout = \"300ms\"\nkeepalive_timeout = \"300ms\"\nheartbeat = \"100ms\"\n";
    let tether = sidecar(be.addr, limits).await;
    let mut stream = post(tether.addr, "/chat", &chat("long")).await;
    let mut frames = vec![stream.frame().await.unwrap()];
    while frames.last().unwrap().seq() < 2 {
        frames.push(stream.frame().await.unwrap());
    }

    // A request answered in full, then nothing more on its connection: closed after 300 ms.
    let mut plain = request(tether.addr, "GET", "/plain", &[], b"").await;
    assert_eq!(
        (plain.status, &plain.body_to_end().await[..]),
        (200, &b"plain"[..])
    );
    assert_eq!(String::from_utf8_lossy(&plain.rest_until_close().await), "");
    assert_eq!(
        tether
            .metric("tether_downstream_timeouts_total{kind=\"keepalive\"}")
            .await,
        1.0
    );

    // Meanwhile the stream idles for 8 heartbeats (800 ms by tether's clock), then ends whole.
    assert!(stream.read_until(&b": keepalive\n\n".repeat(8)).await);
    gate.open();
    frames.extend(stream.frames_to_end().await);
    let end = frames.last().unwrap();
    assert_eq!(
        (end.ty(), end.json["persisted"].clone()),
        ("STREAM_END", Value::Bool(true))
    );
    let mut state = Reduced::default();
    state.apply_frames(&frames, 0);
    assert_eq!(state, Reduced::of(&events));
    assert_eq!(
        tether
            .metric("tether_downstream_timeouts_total{kind=\"header\"}")
            .await,
        0.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_over_max_connections_gets_503_and_the_count_comes_back_to_zero() {
    let be = backend(|_| fixed_answer(200, "text/plain", "plain")).await;
    let tether = sidecar(be.addr, "[server]\nmax_connections = 2\n").await;
    let held = [
        TcpStream::connect(tether.addr).await.unwrap(),
        TcpStream::connect(tether.addr).await.unwrap(),
    ];
    let t = &tether;
    eventually_async("two connections open", || async move {
        t.metric("tether_downstream_connections").await == 2.0
    })
    .await;

    let mut third = request(tether.addr, "GET", "/plain", &[], b"").await;
    assert_eq!(third.status, 503);
    assert_eq!(third.header("connection"), Some("close"));
    assert_eq!(third.header("content-type"), Some("application/json"));
    let body: Value = serde_json::from_slice(&third.body_to_end().await).unwrap();
    assert_eq!(body["error"], "too_many_connections");
    assert_eq!(String::from_utf8_lossy(&third.rest_until_close().await), "");
    assert_eq!(
        tether
            .metric("tether_downstream_connections_refused_total")
            .await,
        1.0
    );
    assert!(be.requests.lock().is_empty(), "nothing was forwarded");

    drop(held);
    eventually_async("the connections are no longer counted", || async move {
        t.metric("tether_downstream_connections").await == 0.0
    })
    .await;
    let mut next = request(tether.addr, "GET", "/plain", &[], b"").await;
    assert_eq!(
        (next.status, &next.body_to_end().await[..]),
        (200, &b"plain"[..])
    );
}
