//! durable_streams (`conf/profiles/durable-streams.toml`): a turn recorded on `POST /chat` read
//! as a read-only Durable Stream, on the chat's URL and on the run's: catch-up with its entity
//! tag, long-poll, SSE, `HEAD`, `offset=now`, the end message, writes refused, and every offset
//! that cannot be served answered as the protocol says. The official client library's view is
//! `scripts/compat/durable-streams.test.mjs`.

use serde_json::{json, Value};

use crate::dialects::common::*;
use crate::support::*;

const PROFILE: &str = include_str!("../../../conf/profiles/durable-streams.toml");

/// The profile, with `extra` tables after it.
async fn tether(be: &Backend, extra: &str) -> Sidecar {
    sidecar(be.addr, &format!("{extra}\n{PROFILE}")).await
}

/// Starts a turn of chat `chat` as a protocol-1 requester; returns the response and tether's run
/// id (its `x-tether-run-id`).
async fn start(tether: &Sidecar, chat: &str, user: Option<&str>) -> (Resp, String) {
    let body = json!({"chat_id": chat, "messages": [], "protocol": 1}).to_string();
    let mut h = vec![("content-type", "application/json")];
    h.extend(user.map(|u| ("x-user", u)));
    let r = request(tether.addr, "POST", "/chat", &h, body.as_bytes()).await;
    assert_eq!(r.status, 200);
    let run = r.header("x-tether-run-id").expect("the run id").to_string();
    (r, run)
}

/// The messages of a whole JSON answer.
async fn messages(r: &mut Resp) -> Vec<Value> {
    match json_body(r).await {
        Value::Array(v) => v,
        other => panic!("not an array: {other}"),
    }
}

fn offset(run: &str, seq: u64) -> String {
    format!("{seq:020}_{run}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_turn_reads_as_a_closed_stream_of_its_events_then_the_end_message() {
    let events = turn(6);
    let be = turn_backend(events.clone(), None).await;
    let tether = tether(&be, "").await;
    let (mut r, run) = start(&tether, "c1", None).await;
    r.body_to_end().await;
    eventually("the run ended", || {
        tether.current_run("c1").is_some_and(|r| r.end().is_some())
    })
    .await;
    let n = events.len() as u64;
    for path in ["/v1/stream/chats/c1", &format!("/v1/stream/runs/{run}")] {
        let mut r = get(tether.addr, &format!("{path}?offset=-1"), &[]).await;
        assert_eq!(r.status, 200, "{path}");
        assert_eq!(r.header("content-type"), Some("application/json"));
        assert_eq!(
            r.header("stream-next-offset"),
            Some(offset(&run, n + 1).as_str())
        );
        assert_eq!(r.header("stream-up-to-date"), Some("true"));
        assert_eq!(r.header("stream-closed"), Some("true"));
        // `-1` names no fixed position: never stored by a cache.
        assert_eq!(r.header("cache-control"), Some("no-store"));
        let tag = r.header("etag").expect("an entity tag").to_string();
        let m = messages(&mut r).await;
        assert_eq!(&m[..events.len()], &events[..]);
        assert_eq!(
            m[events.len()],
            json!({"type":"STREAM_END","run_id":run,"seq":n,"persisted":true,"superseded":false})
        );
        // The copy the client has: 304, no body.
        let mut r = get(
            tether.addr,
            &format!("{path}?offset=-1"),
            &[("if-none-match", &tag)],
        )
        .await;
        assert_eq!(r.status, 304);
        assert!(r.body_to_end().await.is_empty());
    }
    // From a saved offset: the rest, cacheable; at the end: `[]`, closed (EOF).
    let mid = offset(&run, 4);
    let mut r = get(
        tether.addr,
        &format!("/v1/stream/chats/c1?offset={mid}"),
        &[],
    )
    .await;
    assert_eq!(
        r.header("cache-control"),
        Some("private, max-age=60, stale-while-revalidate=300")
    );
    let m = messages(&mut r).await;
    assert_eq!(&m[..m.len() - 1], &events[4..]);
    let end = offset(&run, n + 1);
    let mut r = get(
        tether.addr,
        &format!("/v1/stream/chats/c1?offset={end}"),
        &[],
    )
    .await;
    assert_eq!(r.header("stream-closed"), Some("true"));
    assert_eq!(r.header("stream-next-offset"), Some(end.as_str()));
    assert!(messages(&mut r).await.is_empty());
    // `now` on a closed stream: `[]`, closed, the tail.
    let mut r = get(tether.addr, "/v1/stream/chats/c1?offset=now", &[]).await;
    assert_eq!(r.header("stream-closed"), Some("true"));
    assert_eq!(r.header("stream-next-offset"), Some(end.as_str()));
    assert!(messages(&mut r).await.is_empty());
    // HEAD: the tail and the closure, no body.
    let mut r = request(tether.addr, "HEAD", "/v1/stream/chats/c1", &[], b"").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("stream-next-offset"), Some(end.as_str()));
    assert_eq!(r.header("stream-closed"), Some("true"));
    assert!(r.body_to_end().await.is_empty());
    assert_eq!(requests(&be), 1, "every read was answered by tether");
    assert!(attach_metric(&tether, "durable_streams", "snapshot").await >= 2.0);
    assert_eq!(
        attach_metric(&tether, "durable_streams", "end_only").await,
        2.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_turn_is_read_by_catch_up_then_long_poll_then_sse() {
    let events = turn(6);
    let gate = Gate::default();
    let be = turn_backend(events.clone(), Some((4, gate.clone()))).await;
    let tether = tether(&be, "[recorder]\nmax_wait = \"300ms\"\n").await;
    let (_r, run) = start(&tether, "c1", None).await;
    eventually("four events recorded", || {
        tether.current_run("c1").is_some_and(|r| r.head() == 4)
    })
    .await;
    let mut r = get(tether.addr, "/v1/stream/chats/c1", &[]).await;
    assert_eq!(
        r.header("stream-next-offset"),
        Some(offset(&run, 4).as_str())
    );
    assert_eq!(r.header("stream-up-to-date"), Some("true"));
    assert_eq!(r.header("stream-closed"), None);
    assert_eq!(messages(&mut r).await, events[..4]);
    // HEAD of the open stream: its tail, not closed.
    let r = request(
        tether.addr,
        "HEAD",
        &format!("/v1/stream/runs/{run}"),
        &[],
        b"",
    )
    .await;
    assert_eq!(
        r.header("stream-next-offset"),
        Some(offset(&run, 4).as_str())
    );
    assert_eq!(r.header("stream-closed"), None);
    // A long-poll at the tail that nothing reaches: 204 after max_wait, up to date, a cursor.
    let at4 = format!(
        "/v1/stream/chats/c1?offset={}&live=long-poll",
        offset(&run, 4)
    );
    let mut r = get(tether.addr, &at4, &[]).await;
    assert_eq!(r.status, 204);
    assert_eq!(r.header("stream-up-to-date"), Some("true"));
    assert_eq!(
        r.header("stream-next-offset"),
        Some(offset(&run, 4).as_str())
    );
    let cursor: u64 = r
        .header("stream-cursor")
        .expect("a cursor")
        .parse()
        .unwrap();
    assert!(r.body_to_end().await.is_empty());
    // An SSE reader from the same offset, and a long-poll echoing the cursor, both waiting.
    let sse = get(
        tether.addr,
        &format!("/v1/stream/chats/c1?offset={}&live=sse", offset(&run, 4)),
        &[],
    )
    .await;
    assert_eq!(sse.header("content-type"), Some("text/event-stream"));
    let poll = {
        let (addr, path) = (tether.addr, format!("{at4}&cursor={cursor}"));
        tokio::spawn(async move { get(addr, &path, &[]).await })
    };
    gate.open();
    let mut r = poll.await.unwrap();
    assert_eq!(r.status, 200);
    let echoed: u64 = r
        .header("stream-cursor")
        .map_or(cursor + 1, |c| c.parse().unwrap());
    assert!(
        echoed > cursor,
        "a cursor echoed in its interval is advanced"
    );
    let polled = messages(&mut r).await;
    assert!(!polled.is_empty());
    assert_eq!(polled[0], events[4]);
    // The SSE reader gets the rest, the end message, and a closing control event.
    let mut sse = sse;
    let body = String::from_utf8(sse.body_to_end().await.to_vec()).unwrap();
    let (mut got, mut last) = (Vec::new(), Value::Null);
    for block in body
        .split("\n\n")
        .filter(|b| !b.is_empty() && !b.starts_with(':'))
    {
        let (ev, data) = block.split_once('\n').unwrap();
        let v: Value = serde_json::from_str(data.strip_prefix("data: ").unwrap()).unwrap();
        match ev {
            "event: data" => got.extend(v.as_array().unwrap().iter().cloned()),
            "event: control" => last = v,
            other => panic!("unexpected {other}"),
        }
    }
    let n = events.len() as u64;
    assert_eq!(&got[..got.len() - 1], &events[4..]);
    assert_eq!(got.last().unwrap()["type"], "STREAM_END");
    assert_eq!(last["streamClosed"], true);
    assert_eq!(last["streamNextOffset"], offset(&run, n + 1));
    // A long-poll at the closed tail: 204 closed at once.
    let end = format!(
        "/v1/stream/chats/c1?offset={}&live=long-poll",
        offset(&run, n + 1)
    );
    let r = get(tether.addr, &end, &[]).await;
    assert_eq!(r.status, 204);
    assert_eq!(r.header("stream-closed"), Some("true"));
    assert_eq!(requests(&be), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_offset_keeps_its_reader_in_its_own_turn_after_a_newer_one_starts() {
    let be = turn_backend(turn(4), None).await;
    let tether = tether(&be, "").await;
    let (mut r, first) = start(&tether, "c1", None).await;
    r.body_to_end().await;
    let (mut r, second) = start(&tether, "c1", None).await;
    r.body_to_end().await;
    assert_ne!(first, second);
    // The chat's URL from the start is the newer turn; an offset of the first stays in it.
    let r = get(tether.addr, "/v1/stream/chats/c1?offset=-1", &[]).await;
    let tail = r.header("stream-next-offset").unwrap().to_string();
    assert!(tail.ends_with(&second), "{tail}");
    let mut r = get(
        tether.addr,
        &format!("/v1/stream/chats/c1?offset={}", offset(&first, 2)),
        &[],
    )
    .await;
    assert_eq!(r.status, 200);
    let m = messages(&mut r).await;
    assert_eq!(m.last().unwrap()["run_id"], first.as_str());
    assert_eq!(m[..m.len() - 1], turn(4)[2..]);
    // On a run's URL an offset of another run is not of this stream.
    let r = get(
        tether.addr,
        &format!("/v1/stream/runs/{second}?offset={}", offset(&first, 2)),
        &[],
    )
    .await;
    assert_eq!(r.status, 400);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offsets_tether_cannot_serve_get_the_protocols_answers() {
    let be = turn_backend(turn(12), None).await;
    let tether = tether(&be, "[recorder]\nwindow = 4\n").await;
    let (mut r, run) = start(&tether, "c1", None).await;
    r.body_to_end().await;
    eventually("the run ended", || {
        tether.current_run("c1").is_some_and(|r| r.end().is_some())
    })
    .await;
    let code = |mut r: Resp| async move { (r.status, json_body(&mut r).await["error"].clone()) };
    let addr = tether.addr;
    let read = |q: String| async move { get(addr, &format!("/v1/stream/chats/c1?{q}"), &[]).await };
    assert_eq!(
        code(read("offset=12".into()).await).await,
        (400, json!("invalid_offset"))
    );
    assert_eq!(
        code(read("offset=-1&live=now".into()).await).await,
        (400, json!("invalid_query"))
    );
    // The window keeps 4 events: an older cursor is gone; `-1` is the compacted history.
    assert_eq!(
        code(read(format!("offset={}", offset(&run, 2))).await).await,
        (410, json!("offset_gone"))
    );
    let mut r = read("offset=-1".into()).await;
    let m = messages(&mut r).await;
    assert_eq!(m.last().unwrap()["persisted"], true);
    assert!(m.len() < turn(12).len() + 1, "compacted");
    // Past the end of the ended run: an offset tether never gave.
    let past = offset(&run, 100);
    assert_eq!(
        code(read(format!("offset={past}")).await).await,
        (400, json!("invalid_offset"))
    );
    // A run this chat does not hold (or no longer): gone; unknown streams: 404.
    let other = offset("nosuchrun", 1);
    assert_eq!(
        code(read(format!("offset={other}")).await).await,
        (410, json!("offset_gone"))
    );
    let r = get(tether.addr, "/v1/stream/chats/none", &[]).await;
    assert_eq!(r.status, 404);
    let r = get(tether.addr, "/v1/stream/runs/nosuchrun", &[]).await;
    assert_eq!(r.status, 404);
    assert_eq!(
        attach_metric(&tether, "durable_streams", "expired").await,
        2.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_are_405_and_never_reach_the_backend() {
    let be = turn_backend(turn(2), None).await;
    let tether = tether(&be, "").await;
    let (mut r, run) = start(&tether, "c1", None).await;
    r.body_to_end().await;
    for (method, path) in [
        ("POST", "/v1/stream/chats/c1".to_string()),
        ("PUT", "/v1/stream/chats/c1".to_string()),
        ("DELETE", format!("/v1/stream/runs/{run}")),
        ("PATCH", format!("/v1/stream/runs/{run}")),
    ] {
        let mut r = request(
            tether.addr,
            method,
            &path,
            &[("content-type", "application/json")],
            b"[{\"x\":1}]",
        )
        .await;
        assert_eq!(r.status, 405, "{method} {path}");
        assert_eq!(r.header("allow"), Some("GET, HEAD"));
        assert_eq!(json_body(&mut r).await["error"], "method_not_allowed");
    }
    assert_eq!(requests(&be), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_user_reads_nothing_of_a_stream() {
    let be = turn_backend(turn(2), None).await;
    let tether = tether(&be, "[auth]\nsubject = \"header:x-user\"\n").await;
    let (mut r, run) = start(&tether, "c1", Some("alice")).await;
    r.body_to_end().await;
    let as_user = |u: &'static str, path: String| {
        let addr = tether.addr;
        async move { get(addr, &path, &[("x-user", u)]).await.status }
    };
    let paths = [
        "/v1/stream/chats/c1?offset=-1".to_string(),
        format!("/v1/stream/runs/{run}?offset=-1"),
    ];
    for p in &paths {
        assert_eq!(as_user("alice", p.clone()).await, 200, "{p}");
        assert_eq!(as_user("bob", p.clone()).await, 404, "{p}");
    }
    // Bob's own chat of the same name holds nothing, even with alice's offset.
    let p = format!("/v1/stream/chats/c1?offset={}", offset(&run, 1));
    assert_eq!(as_user("bob", p).await, 410);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_on_another_origin_can_read_the_protocols_headers() {
    let be = turn_backend(turn(2), None).await;
    let cors = "[server]\n[server.cors]\nallow_origins = [\"http://page.test\"]\n";
    let tether = tether(&be, cors).await;
    let (mut r, _run) = start(&tether, "c1", None).await;
    r.body_to_end().await;
    let mut r = get(
        tether.addr,
        "/v1/stream/chats/c1?offset=-1",
        &[("origin", "http://page.test")],
    )
    .await;
    assert_eq!(
        r.header("access-control-allow-origin"),
        Some("http://page.test")
    );
    let exposed = r
        .header("access-control-expose-headers")
        .unwrap()
        .to_string();
    for h in [
        "stream-next-offset",
        "stream-cursor",
        "stream-up-to-date",
        "stream-closed",
        "etag",
    ] {
        assert!(exposed.split(", ").any(|e| e == h), "{h} in {exposed}");
    }
    r.body_to_end().await;
}
