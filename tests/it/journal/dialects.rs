//! Verbatim dialects through the other replica: a run recorded on A, resumed on B by the
//! client's own cursor (injected `Last-Event-ID`, `frame_index` with a resume token minted on
//! A, a run found by its upstream alias, an id tether made unique inside a burst of one upstream
//! id), byte for byte what A would send; an AI SDK run stopped through B ends with the SDK's
//! `abort` and a clean end for its requester on A and a resume on B.

use bytes::Bytes;
use serde_json::json;

use crate::support::*;

/// One SSE frame with optional `event:` and `id:` lines.
fn frame(event: Option<&str>, id: Option<&str>, data: &str) -> Bytes {
    let mut s = String::new();
    if let Some(e) = event {
        s.push_str(&format!("event: {e}\n"));
    }
    if let Some(i) = id {
        s.push_str(&format!("id: {i}\n"));
    }
    s.push_str(&format!("data: {data}\n\n"));
    Bytes::from(s)
}

/// An SSE answer of `frames` held before frame `at` until `gate` opens.
fn held(frames: &[Bytes], at: usize, gate: &Gate) -> Vec<Step> {
    let mut steps = vec![sse_head()];
    for (i, f) in frames.iter().enumerate() {
        if i == at {
            steps.push(Step::Wait(gate.clone()));
        }
        steps.push(Step::Chunk(f.clone()));
    }
    steps.push(Step::End);
    steps
}

/// Reads `n` blocks and drops the connection, as a closed tab does.
async fn cut(mut r: Resp, n: usize) -> Vec<Bytes> {
    let mut got = Vec::new();
    for _ in 0..n {
        got.push(r.block().await.expect("a frame before the cut"));
    }
    r.kill();
    got
}

fn concat(frames: &[Bytes]) -> String {
    frames
        .iter()
        .map(|b| std::str::from_utf8(b).unwrap())
        .collect()
}

/// Waits until Redis holds `n` run metas and `ids` id-index keys (run ids and aliases): the
/// writer is asynchronous, and a lookup through B would itself follow the run.
async fn journaled(redis: &RedisServer, n: usize, ids: usize) {
    eventually("the runs are journaled", || {
        redis.query::<Vec<String>>(&["KEYS", "tj:*:r:*:m"]).len() == n
            && redis.query::<Vec<String>>(&["KEYS", "tj:{i:*}:id"]).len() == ids
    })
    .await;
}

const EVENTSOURCE: &str = r#"
[[routes]]
methods = ["GET"]
path = "/events"
kind = "record"
chat_id = "query:chat_id"
ids = "inject"
resume_on = "header:Last-Event-ID"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_injected_last_event_id_resumes_on_the_other_replica_from_the_first_frame() {
    let redis = RedisServer::start();
    let all: Vec<Bytes> = (0..8)
        .map(|i| frame(None, None, &json!({"n": i, "t": "caf\u{e9}"}).to_string()))
        .collect();
    let gate = Gate::default();
    let (f, g) = (all.clone(), gate.clone());
    let be = backend(move |_| held(&f, 3, &g)).await;
    let a = replica(be.addr, &redis, "a", EVENTSOURCE).await;
    let b = replica(be.addr, &redis, "b", EVENTSOURCE).await;
    let got = cut(
        request(a.addr, "GET", "/events?chat_id=c1", &[], b"").await,
        3,
    )
    .await;
    let first = std::str::from_utf8(&got[0]).unwrap();
    let id0 = first
        .lines()
        .find_map(|l| l.strip_prefix("id: "))
        .unwrap()
        .to_string();
    let run = id0.rsplit_once(':').unwrap().0.to_string();
    journaled(&redis, 1, 1).await;

    // Resumed on B after frame 0: B's raw record starts at frame 0, not where B started.
    let mut again = request(
        b.addr,
        "GET",
        "/events?chat_id=c1",
        &[("Last-Event-ID", &id0)],
        b"",
    )
    .await;
    assert_eq!(again.status, 200);
    gate.open();
    let body = again.body_to_end().await;
    let with_id = |i: usize| {
        let s = std::str::from_utf8(&all[i]).unwrap();
        format!("{}id: {run}:{i}\n\n", &s[..s.len() - 1])
    };
    let rest: String = (1..all.len()).map(with_id).collect();
    assert_eq!(std::str::from_utf8(&body).unwrap(), rest);
    assert_eq!(
        be.requests.lock().len(),
        1,
        "the reconnect is not a new turn"
    );
    assert_eq!(
        b.metric("tether_attach_total{dialect=\"last_event_id\",result=\"replay\"}")
            .await,
        1.0
    );
}

const WORKFLOWS: &str = r#"
[auth]
secret = "shared by every replica"

[[routes]]
methods = ["POST"]
path = "/api/claude/chat"
kind = "record"
chat_id = "json:/sessionId"
format = "anthropic"
run_id_header = "X-Workflow-Run-Id"
token_header = "X-Resume-Token"

[[routes]]
methods = ["GET"]
path = "/api/claude/stream"
kind = "resume"
dialect = "frame_index"
run = "query:runId"
cursor = "query:startIndex"
token = "header:X-Resume-Token"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frame_index_resume_with_a_token_minted_on_one_replica_is_served_by_the_other() {
    let redis = RedisServer::start();
    let mut events = vec![
        json!({"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"m","usage":{"input_tokens":3,"output_tokens":1}}}),
        json!({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}),
    ];
    for i in 0..5 {
        events.push(json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":format!("w{i} ")}}));
    }
    events.push(json!({"type":"content_block_stop","index":0}));
    events.push(json!({"type":"message_stop"}));
    let all: Vec<Bytes> = events
        .iter()
        .map(|e| frame(Some(e["type"].as_str().unwrap()), None, &e.to_string()))
        .collect();
    let gate = Gate::default();
    let (f, g) = (all.clone(), gate.clone());
    let be = backend(move |_| held(&f, 4, &g)).await;
    let a = replica(be.addr, &redis, "a", WORKFLOWS).await;
    let b = replica(be.addr, &redis, "b", WORKFLOWS).await;
    let body = json!({"sessionId": "s1"}).to_string();
    let r = request(
        a.addr,
        "POST",
        "/api/claude/chat",
        &[("content-type", "application/json")],
        body.as_bytes(),
    )
    .await;
    let run = r.header("x-workflow-run-id").unwrap().to_string();
    let token = r.header("x-resume-token").unwrap().to_string();
    let got = cut(r, 2).await;
    assert_eq!(concat(&got), concat(&all[..2]));
    journaled(&redis, 1, 1).await;

    let path = |start: usize| format!("/api/claude/stream?runId={run}&startIndex={start}");
    let forged = format!("{}x", &token[..token.len() - 1]);
    let mut refused = request(b.addr, "GET", &path(1), &[("X-Resume-Token", &forged)], b"").await;
    assert_eq!(
        refused.status, 404,
        "a wrong token is the unknown-run answer"
    );
    refused.body_to_end().await;
    let mut rest = request(b.addr, "GET", &path(1), &[("X-Resume-Token", &token)], b"").await;
    assert_eq!(rest.status, 200);
    gate.open();
    let body = rest.body_to_end().await;
    assert_eq!(std::str::from_utf8(&body).unwrap(), concat(&all[1..]));
}

const ALIASES: &str = r#"
[auth]
subject = "header:x-user"
secret = "shared by every replica"

[[routes]]
methods = ["POST"]
path = "/turn"
kind = "record"
chat_id = "json:/chat"
aliases = ["header:X-Run-Id"]

[[routes]]
methods = ["GET"]
path = "/runs/{id}/stream"
kind = "resume"
dialect = "last_event_id"
run = "path:id"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_is_found_by_its_upstream_alias_on_the_other_replica_for_its_owner_only() {
    let redis = RedisServer::start();
    let all: Vec<Bytes> = (0..4)
        .map(|i| frame(None, Some(&i.to_string()), &json!({"i": i}).to_string()))
        .collect();
    let gate = Gate::default();
    let (f, g) = (all.clone(), gate.clone());
    let be = backend(move |_: &Req| {
        let mut steps = held(&f, 2, &g);
        steps[0] = Step::Head(
            200,
            vec![
                ("content-type", "text/event-stream".into()),
                ("x-run-id", "up-7".into()),
            ],
        );
        steps
    })
    .await;
    let a = replica(be.addr, &redis, "a", ALIASES).await;
    let b = replica(be.addr, &redis, "b", ALIASES).await;
    let body = json!({"chat": "c1"}).to_string();
    let live = request(
        a.addr,
        "POST",
        "/turn",
        &[("x-user", "alice"), ("content-type", "application/json")],
        body.as_bytes(),
    )
    .await;
    assert_eq!(live.status, 200);
    assert_eq!(concat(&cut(live, 2).await), concat(&all[..2]));
    // The run id and the alias are indexed.
    journaled(&redis, 1, 2).await;

    let stream = |user: &'static str, id: &'static str| {
        let addr = b.addr;
        async move {
            let path = format!("/runs/{id}/stream");
            request(
                addr,
                "GET",
                &path,
                &[("x-user", user), ("Last-Event-ID", "1")],
                b"",
            )
            .await
        }
    };
    let mut foreign = stream("mallory", "up-7").await;
    let mut unknown = stream("alice", "nope").await;
    assert_eq!((foreign.status, unknown.status), (404, 404));
    assert_eq!(foreign.body_to_end().await, unknown.body_to_end().await);
    let mut mine = stream("alice", "up-7").await;
    assert_eq!(mine.status, 200);
    assert_eq!(
        mine.header("x-run-id"),
        Some("up-7"),
        "the upstream's headers"
    );
    gate.open();
    let rest = mine.body_to_end().await;
    assert_eq!(std::str::from_utf8(&rest).unwrap(), concat(&all[2..]));
}

/// The LangGraph profile as shipped: `ids = "unique"`.
const LANGGRAPH: &str = include_str!("../../../conf/profiles/langgraph.toml");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_id_made_unique_inside_a_burst_resumes_on_the_other_replica_right_after_its_frame() {
    let redis = RedisServer::start();
    // `<ms>-0` as the in-memory runtime stamps it: frames 1 to 5 share one id.
    let event = |n: usize| match n {
        0 => "metadata",
        6 => "values",
        _ => "messages",
    };
    let upstream_id = |n: usize| match n {
        0 => "1760-0",
        6 => "1762-0",
        _ => "1761-0",
    };
    let data = |n: usize| match n {
        0 => json!({"run_id": "lg-run-1"}).to_string(),
        _ => json!([{"content": format!("w{n} ")}]).to_string(),
    };
    let sent: Vec<Bytes> = (0..7)
        .map(|n| frame(Some(event(n)), Some(upstream_id(n)), &data(n)))
        .collect();
    let relayed: Vec<Bytes> = (0..7)
        .map(|n| match n {
            2..=5 => frame(Some(event(n)), Some(&format!("1761-0~{n}")), &data(n)),
            _ => sent[n].clone(),
        })
        .collect();
    let gate = Gate::default();
    let (f, g) = (sent.clone(), gate.clone());
    let be = backend(move |_| held(&f, 4, &g)).await;
    let a = replica(be.addr, &redis, "a", LANGGRAPH).await;
    let b = replica(be.addr, &redis, "b", LANGGRAPH).await;
    let body = json!({"assistant_id": "agent", "input": {}}).to_string();
    let live = request(
        a.addr,
        "POST",
        "/threads/th-1/runs/stream",
        &[("content-type", "application/json")],
        body.as_bytes(),
    )
    .await;
    assert_eq!(live.status, 200);
    let got = cut(live, 4).await;
    assert_eq!(concat(&got), concat(&relayed[..4]));
    // The run id and its LangGraph run id are indexed.
    journaled(&redis, 1, 2).await;

    let last = "1761-0~3";
    assert!(concat(&got[3..]).contains(&format!("id: {last}\n")));
    let mut rest = request(
        b.addr,
        "GET",
        "/threads/th-1/runs/lg-run-1/stream",
        &[("Last-Event-ID", last)],
        b"",
    )
    .await;
    assert_eq!(rest.status, 200);
    gate.open();
    let body = rest.body_to_end().await;
    assert_eq!(std::str::from_utf8(&body).unwrap(), concat(&relayed[4..]));
    assert_eq!(be.requests.lock().len(), 1, "the rejoin is not a new turn");
}

const DURABLE: &str = include_str!("../../../conf/profiles/durable-streams.toml");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_durable_stream_of_a_turn_on_one_replica_is_read_live_on_the_other() {
    let redis = RedisServer::start();
    let events = turn(6);
    let gate = Gate::default();
    let be = turn_backend(events.clone(), Some((3, gate.clone()))).await;
    let a = replica(be.addr, &redis, "a", DURABLE).await;
    let b = replica(be.addr, &redis, "b", DURABLE).await;
    let body = json!({"chat_id": "c1", "protocol": 1}).to_string();
    let h = [("content-type", "application/json")];
    let r = request(a.addr, "POST", "/chat", &h, body.as_bytes()).await;
    let run = r.header("x-tether-run-id").unwrap().to_string();
    journaled(&redis, 1, 1).await;
    // B serves the chat's turn from the start (a catch-up), then an SSE read from its offset.
    let mut first = request(b.addr, "GET", "/v1/stream/chats/c1?offset=-1", &[], b"").await;
    assert_eq!(first.status, 200);
    let next = first.header("stream-next-offset").unwrap().to_string();
    assert!(next.ends_with(&run), "{next}");
    let got: Vec<serde_json::Value> = serde_json::from_slice(&first.body_to_end().await).unwrap();
    let path = format!("/v1/stream/runs/{run}?offset={next}&live=sse");
    let mut sse = request(b.addr, "GET", &path, &[], b"").await;
    assert_eq!(sse.status, 200);
    gate.open();
    let text = String::from_utf8(sse.body_to_end().await.to_vec()).unwrap();
    let mut all = got;
    let mut closed = false;
    for block in text
        .split("\n\n")
        .filter(|b| !b.is_empty() && !b.starts_with(':'))
    {
        let (ev, data) = block.split_once('\n').unwrap();
        let v: serde_json::Value = serde_json::from_str(&data[6..]).unwrap();
        match ev {
            "event: data" => all.extend(v.as_array().unwrap().iter().cloned()),
            _ => closed |= v["streamClosed"] == true,
        }
    }
    assert!(closed);
    let end = all.pop().unwrap();
    assert_eq!(
        all, events,
        "every event once, in order, through the other replica"
    );
    assert_eq!(end["type"], "STREAM_END");
    assert_eq!(end["persisted"], true);
    drop(r);
}

/// The frames a stopped AI SDK run ends with, as the SDK's own server writes them.
const ABORT_DONE: &str = "data: {\"type\":\"abort\"}\n\ndata: [DONE]\n\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_on_the_other_replica_is_told_as_an_abort_to_the_requester_and_to_a_resume_there() {
    let redis = RedisServer::start();
    let mut events = vec![
        json!({"type":"start","messageId":"m1"}),
        json!({"type":"text-start","id":"t1"}),
    ];
    events.extend((0..6).map(|i| json!({"type":"text-delta","id":"t1","delta":format!("w{i} ")})));
    let mut all: Vec<Bytes> = events
        .iter()
        .map(|e| frame(None, None, &e.to_string()))
        .collect();
    all.push(frame(None, None, "[DONE]"));
    let gate = Gate::default();
    let (f, g) = (all.clone(), gate.clone());
    let be = backend(move |_| held(&f, 4, &g)).await;
    let profile = include_str!("../../../conf/profiles/ai-sdk.toml");
    let a = replica(be.addr, &redis, "a", profile).await;
    let b = replica(be.addr, &redis, "b", profile).await;
    let mut r = post(a.addr, "/api/chat", &json!({"id": "c", "messages": []})).await;
    assert_eq!(r.status, 200);
    let mut got = Vec::new();
    for _ in 0..4 {
        got.push(r.block().await.expect("a frame of the turn"));
    }
    assert_eq!(concat(&got), concat(&all[..4]));
    journaled(&redis, 1, 1).await;

    // Another tab, on B: the chat's turn from its start, then live through the journal.
    let mut again = request(b.addr, "GET", "/api/chat/c/stream", &[], b"").await;
    assert_eq!(again.status, 200);
    again.block().await.expect("the history");
    let mut stop = request(b.addr, "POST", "/api/chat/c/stop", &[], b"").await;
    assert_eq!(stop.status, 200);
    stop.body_to_end().await;

    let rest = r.body_to_end().await;
    assert!(r.ended, "the requester's stream ended cleanly");
    assert_eq!(std::str::from_utf8(&rest).unwrap(), ABORT_DONE);
    let tail = again.body_to_end().await;
    assert!(again.ended, "the resume on B ended cleanly");
    assert!(
        std::str::from_utf8(&tail).unwrap().ends_with(ABORT_DONE),
        "{tail:?}"
    );
    gate.open();
}
