//! Hostile clients at the proxy (malformed HTTP, truncated bodies, slow-loris headers, abrupt
//! resets) while a turn is recorded: tether stays up, serves a normal turn, and loses no event.
//! And backends that end their answers in doubt: tether never claims a save it cannot see.

mod support;

use serde_json::{json, Value};
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

/// A backend answering each request with a close-delimited SSE body (no length, no chunking)
/// of the events `events(chat_id)` gives, then closing the connection (FIN, as a crashed
/// process's kernel does).
async fn close_delimited_backend(
    events: impl Fn(&str) -> Vec<Value> + Send + Sync + 'static,
) -> std::net::SocketAddr {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let events = std::sync::Arc::new(events);
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let events = events.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let body = loop {
                    let mut more = [0; 4096];
                    match sock.read(&mut more).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&more[..n]),
                    }
                    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                        continue;
                    };
                    let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
                    let len: usize = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .map_or(0, |v| v.trim().parse().unwrap());
                    if buf.len() >= end + 4 + len {
                        break buf[end + 4..end + 4 + len].to_vec();
                    }
                };
                let chat_id = serde_json::from_slice::<Value>(&body).unwrap()["chat_id"]
                    .as_str()
                    .unwrap()
                    .to_string();
                let mut out =
                    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n".to_vec();
                for e in events(&chat_id) {
                    out.extend_from_slice(&sse(&e));
                }
                let _ = sock.write_all(&out).await;
                let _ = sock.shutdown().await;
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_close_delimited_answer_cut_before_its_terminal_event_is_not_saved_by_clean_end() {
    let events = turn(4);
    let ev = events.clone();
    let addr = close_delimited_backend(move |chat_id| match chat_id {
        "cut" => ev[..3].to_vec(),
        _ => ev.clone(),
    })
    .await;
    let routes =
        "[[routes]]\nmethods=[\"POST\"]\npath=\"/chat\"\nkind=\"record\"\ncommit=\"clean_end\"\n";
    let tether = sidecar(addr, routes).await;
    let f = post(tether.addr, "/chat", &chat("cut"))
        .await
        .frames_to_end()
        .await;
    let end = f.last().unwrap();
    assert_eq!(end.ty(), "STREAM_END");
    assert_eq!(
        (end.json["persisted"].clone(), end.json["reason"].clone()),
        (json!(false), json!("upstream_reset"))
    );
    assert_eq!(end.seq(), 3);
    let f = post(tether.addr, "/chat", &chat("whole"))
        .await
        .frames_to_end()
        .await;
    let end = f.last().unwrap();
    assert_eq!(end.json["persisted"], true, "its terminal event arrived");
    assert_eq!(end.seq(), events.len() as u64);
}
