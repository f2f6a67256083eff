//! Hostile clients at the proxy (malformed HTTP, truncated bodies, slow-loris headers, abrupt
//! resets) while a turn is recorded: tether stays up, serves a normal turn, and loses no event.

mod support;

use std::time::Duration;

use serde_json::json;
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

async fn raw(addr: std::net::SocketAddr, bytes: &[u8]) -> TcpStream {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(bytes).await.unwrap();
    s
}

/// Reads whatever the server answers until it closes or `limit` passes.
async fn answer(mut s: TcpStream, limit: Duration) -> Vec<u8> {
    let mut out = Vec::new();
    let _ = tokio::time::timeout(limit, s.read_to_end(&mut out)).await;
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_clients_do_not_disturb_a_recorded_turn_or_the_next_one() {
    let gate = Gate::default();
    let g = gate.clone();
    let events = turn(40);
    let ev = events.clone();
    let be = backend(move |_| {
        let mut s = vec![sse_head()];
        for (i, e) in ev.iter().enumerate() {
            if i == 10 {
                s.push(Step::Wait(g.clone()));
            }
            s.push(Step::Chunk(sse(e)));
        }
        s.push(Step::End);
        s
    })
    .await;
    let tether = sidecar(be.addr, "").await;
    let mut victim = post(tether.addr, "/chat", &json!({"chat_id":"v","protocol":1})).await;
    let mut frames = vec![victim.frame().await.unwrap()];
    while frames.last().unwrap().seq() < 10 {
        frames.push(victim.frame().await.unwrap());
    }

    // Malformed request lines and headers: answered with an error or closed, never a crash.
    for junk in [
        &b"GARBAGE\r\n\r\n"[..],
        b"POST /chat HTTP/9.9\r\n\r\n",
        b"\x00\x01\x02\xff\xfe\r\n\r\n",
        b"POST /chat HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n",
        b"POST /chat HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nbad\r\n",
        b"GET /chat/live?chat_id=%ZZ HTTP/1.1\r\nHost: x\r\n\r\n",
    ] {
        let s = raw(tether.addr, junk).await;
        let a = answer(s, Duration::from_secs(2)).await;
        assert!(
            a.is_empty() || a.starts_with(b"HTTP/1.1 4"),
            "{:?}",
            String::from_utf8_lossy(&a)
        );
    }
    // A truncated body: the client promises 100 bytes, sends 10, and leaves.
    let mut s = raw(
        tether.addr,
        b"POST /chat HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"chat_id\"",
    )
    .await;
    s.shutdown().await.unwrap();
    drop(answer(s, Duration::from_secs(2)).await);
    // Slow-loris: a header that never ends, held open for the rest of the test.
    let loris = raw(tether.addr, b"POST /chat HTTP/1.1\r\nHost: x\r\nX-Slow: a").await;
    // Abrupt resets: right after connecting, and in the middle of an attach stream.
    close_with_rst(TcpStream::connect(tether.addr).await.unwrap());
    let mut watcher = post(
        tether.addr,
        "/chat/live",
        &json!({"chat_id":"v","protocol":1}),
    )
    .await;
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
    let next = post(tether.addr, "/chat", &json!({"chat_id":"n","protocol":1}))
        .await
        .frames_to_end()
        .await;
    let mut state = Reduced::default();
    state.apply_frames(&next, 0);
    assert_eq!(state, Reduced::of(&events));
    drop(loris);
}
