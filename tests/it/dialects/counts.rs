//! `tether_attach_total` counts attaches and resumes, never a turn's own requester, on every
//! shipped profile (`conf/profiles/`): a protocol-1 requester (native, durable-streams), a
//! requester relayed the upstream's bytes (ai-sdk, openai-responses, workflows, igraph-v2,
//! preview-agents), and one that reads them from the raw record with ids added (eventsource,
//! `ids = "inject"`) or made unique (langgraph, `ids = "unique"`). Each turn is held mid-answer;
//! after its requester has read the first frames nothing is counted, and one real resume of the
//! live run, in the profile's own dialect, counts once. A retry that joins its run (igraph-v2's
//! `start_request_id`) is counted as a join, not as an attach.

use bytes::Bytes;
use serde_json::{json, Value};

use crate::dialects::common::*;
use crate::support::*;

/// Frames the requester reads before the resume; the backend holds the rest until then.
const AT: usize = 3;

/// `data:` frames of these JSON events, with `event:` lines of their types when `named`.
fn frames_of(events: &[Value], named: bool) -> Vec<Bytes> {
    events
        .iter()
        .map(|e| {
            let name = named.then(|| e["type"].as_str().unwrap().to_string());
            frame(name.as_deref(), None, &e.to_string())
        })
        .collect()
}

/// A backend answering every request with `frames`, held after [`AT`] of them until `gate`
/// opens, and tether in front of it with the profile's routes.
async fn start(frames: Vec<Bytes>, gate: &Gate, profile: &str) -> (Backend, Sidecar) {
    let g = gate.clone();
    let be = backend(move |_| held(&frames, Some((AT, &g)))).await;
    let tether = sidecar(be.addr, profile).await;
    (be, tether)
}

/// Reads the requester's first [`AT`] blocks and checks that nothing was counted.
async fn requester_read(tether: &Sidecar, r: &mut Resp) {
    assert_eq!(r.status, 200);
    for _ in 0..AT {
        r.block().await.expect("a frame of the turn");
    }
    assert_eq!(attach_total(tether).await, 0.0, "a requester is no attach");
}

/// Reads the resume and the requester to their ends, then checks the one count.
async fn resumed_once(
    tether: &Sidecar,
    gate: &Gate,
    mut resume: Resp,
    mut requester: Resp,
    label: (&str, &str),
) {
    assert_eq!(resume.status, 200);
    gate.open();
    resume.body_to_end().await;
    requester.body_to_end().await;
    assert_eq!(attach_total(tether).await, 1.0, "one resume");
    assert_eq!(attach_metric(tether, label.0, label.1).await, 1.0);
}

/// An AG-UI turn: tether's native protocol.
fn agui() -> Vec<Bytes> {
    turn(4).iter().map(sse).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn native_a_protocol1_requester_is_no_attach_and_one_attach_is_one() {
    let gate = Gate::default();
    let profile = include_str!("../../../conf/profiles/native.toml");
    let (_be, tether) = start(agui(), &gate, profile).await;
    let mut r = post(tether.addr, "/chat", &chat("c")).await;
    requester_read(&tether, &mut r).await;
    let run = tether.current_run("c").unwrap().id().to_string();
    let resume = post(tether.addr, "/chat/live", &cursor("c", &run, 1)).await;
    resumed_once(&tether, &gate, resume, r, ("protocol1", "replay")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn durable_streams_a_protocol1_requester_is_no_attach_and_one_read_is_one() {
    let gate = Gate::default();
    let profile = include_str!("../../../conf/profiles/durable-streams.toml");
    let (_be, tether) = start(agui(), &gate, profile).await;
    let mut r = post(tether.addr, "/chat", &chat("c")).await;
    requester_read(&tether, &mut r).await;
    let resume = get(tether.addr, "/v1/stream/chats/c?offset=-1&live=sse", &[]).await;
    resumed_once(&tether, &gate, resume, r, ("durable_streams", "snapshot")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ai_sdk_a_relayed_requester_is_no_attach_and_one_resume_is_one() {
    let events = [
        json!({"type":"start","messageId":"m1"}),
        json!({"type":"text-start","id":"t1"}),
        json!({"type":"text-delta","id":"t1","delta":"a"}),
        json!({"type":"text-delta","id":"t1","delta":"b"}),
        json!({"type":"text-end","id":"t1"}),
        json!({"type":"finish"}),
    ];
    let mut frames = frames_of(&events, false);
    frames.push(frame(None, None, "[DONE]"));
    let gate = Gate::default();
    let profile = include_str!("../../../conf/profiles/ai-sdk.toml");
    let (_be, tether) = start(frames, &gate, profile).await;
    let mut r = post(
        tether.addr,
        "/api/chat",
        &json!({"id": "c", "messages": []}),
    )
    .await;
    requester_read(&tether, &mut r).await;
    let resume = get(tether.addr, "/api/chat/c/stream", &[]).await;
    resumed_once(&tether, &gate, resume, r, ("from_start", "snapshot")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_responses_a_relayed_requester_is_no_attach_and_one_resume_is_one() {
    let response = json!({"id": "resp_1", "object": "response", "status": "in_progress"});
    let mut events = vec![
        json!({"type":"response.created","response":response}),
        json!({"type":"response.in_progress","response":response}),
    ];
    for i in 0..3 {
        events.push(json!({"type":"response.output_text.delta","item_id":"m","output_index":0,"content_index":0,"delta":format!("w{i} ")}));
    }
    events
        .push(json!({"type":"response.completed","response":{"id":"resp_1","status":"completed"}}));
    for (i, e) in events.iter_mut().enumerate() {
        e["sequence_number"] = json!(i);
    }
    let gate = Gate::default();
    let profile = include_str!("../../../conf/profiles/openai-responses.toml");
    let (_be, tether) = start(frames_of(&events, true), &gate, profile).await;
    let body = json!({"model": "m", "input": "hi", "stream": true, "metadata": {"chat_id": "c"}});
    let mut r = post(tether.addr, "/v1/responses", &body).await;
    requester_read(&tether, &mut r).await;
    let path = "/v1/responses/resp_1?stream=true&starting_after=1";
    let resume = get(tether.addr, path, &[]).await;
    resumed_once(&tether, &gate, resume, r, ("json_cursor", "replay")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workflows_a_relayed_requester_is_no_attach_and_one_resume_is_one() {
    let mut events = vec![
        json!({"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[]}}),
        json!({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}),
    ];
    for i in 0..3 {
        events.push(json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":format!("w{i} ")}}));
    }
    events.push(json!({"type":"content_block_stop","index":0}));
    events.push(json!({"type":"message_stop"}));
    let gate = Gate::default();
    let profile = include_str!("../../../conf/profiles/workflows.toml");
    let (_be, tether) = start(frames_of(&events, true), &gate, profile).await;
    let body = json!({"sessionId": "c", "messages": []});
    let mut r = post(tether.addr, "/api/claude/chat", &body).await;
    let run = r.header("x-workflow-run-id").unwrap().to_string();
    let token = r.header("x-resume-token").unwrap().to_string();
    requester_read(&tether, &mut r).await;
    let path = format!("/api/claude/stream?runId={run}&startIndex=2");
    let resume = get(tether.addr, &path, &[("X-Resume-Token", &token)]).await;
    resumed_once(&tether, &gate, resume, r, ("frame_index", "replay")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn igraph_v2_a_relayed_requester_is_no_attach_and_one_resume_is_one() {
    let events: Vec<Value> = (0..6)
        .map(|i| json!({"type": "token", "run_id": "ig-1", "event_index": i, "text": i}))
        .collect();
    let gate = Gate::default();
    let profile = include_str!("../../../conf/profiles/igraph-v2.toml");
    let (_be, tether) = start(frames_of(&events, false), &gate, profile).await;
    let body = json!({"start_request_id": "sr-1", "message": "hi"});
    let mut r = post(tether.addr, "/api/sessions/s1/chat", &body).await;
    requester_read(&tether, &mut r).await;
    // A retry (the same `start_request_id`) joins the run as its requester: a join, no attach.
    let mut retry = post(tether.addr, "/api/sessions/s1/chat", &body).await;
    requester_read(&tether, &mut retry).await;
    assert_eq!(tether.metric("tether_idempotent_joins_total").await, 1.0);
    let path = "/api/sessions/s1/runs/ig-1/resume?last_event_index=1";
    let resume = get(tether.addr, path, &[]).await;
    resumed_once(&tether, &gate, resume, r, ("json_cursor", "replay")).await;
    retry.body_to_end().await;
    assert_eq!(attach_total(&tether).await, 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preview_agents_a_relayed_requester_is_no_attach_and_one_attach_is_one() {
    let events: Vec<Value> = (0..6)
        .map(|i| json!({"type": "TEXT_MESSAGE_CONTENT", "executionId": "ex-1", "messageId": "m", "delta": format!("w{i} ")}))
        .collect();
    let gate = Gate::default();
    let profile = include_str!("../../../conf/profiles/preview-agents.toml");
    let (_be, tether) = start(frames_of(&events, false), &gate, profile).await;
    let base = "/projects/p/agents/v2/a/chat/th-1";
    let mut r = post(tether.addr, base, &json!({"message": "hi"})).await;
    requester_read(&tether, &mut r).await;
    let resume = post(
        tether.addr,
        &format!("{base}/live"),
        &json!({"protocol": 1}),
    )
    .await;
    resumed_once(&tether, &gate, resume, r, ("protocol1", "snapshot")).await;
}

/// The last `id:` line of a block.
fn id_of(block: &[u8]) -> String {
    std::str::from_utf8(block)
        .unwrap()
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("id: "))
        .expect("an id line")
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eventsource_a_requester_of_injected_ids_is_no_attach_and_one_reconnect_is_one() {
    let events: Vec<Value> = (0..6).map(|i| json!({"n": i})).collect();
    let gate = Gate::default();
    let profile = include_str!("../../../conf/profiles/eventsource.toml");
    let (_be, tether) = start(frames_of(&events, false), &gate, profile).await;
    let mut r = get(tether.addr, "/events?chat_id=c", &[]).await;
    assert_eq!(r.status, 200);
    let mut last = String::new();
    for _ in 0..AT {
        last = id_of(&r.block().await.expect("a frame of the turn"));
    }
    assert_eq!(attach_total(&tether).await, 0.0, "a requester is no attach");
    let headers = [("Last-Event-ID", last.as_str())];
    let resume = get(tether.addr, "/events?chat_id=c", &headers).await;
    resumed_once(&tether, &gate, resume, r, ("last_event_id", "replay")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn langgraph_a_requester_of_unique_ids_is_no_attach_and_one_rejoin_is_one() {
    let frames: Vec<Bytes> = (0..6)
        .map(|i| {
            let data = json!({"run_id": "lg-1", "n": i}).to_string();
            // One id for a burst of events, as LangGraph's in-memory runtime stamps them.
            frame(Some("values"), Some("1760-0"), &data)
        })
        .collect();
    let gate = Gate::default();
    let profile = include_str!("../../../conf/profiles/langgraph.toml");
    let (_be, tether) = start(frames, &gate, profile).await;
    let body = json!({"assistant_id": "agent", "input": {}});
    let mut r = post(tether.addr, "/threads/th-1/runs/stream", &body).await;
    assert_eq!(r.status, 200);
    let mut last = String::new();
    for _ in 0..AT {
        last = id_of(&r.block().await.expect("a frame of the turn"));
    }
    assert_eq!(attach_total(&tether).await, 0.0, "a requester is no attach");
    let headers = [("Last-Event-ID", last.as_str())];
    let resume = get(tether.addr, "/threads/th-1/runs/lg-1/stream", &headers).await;
    resumed_once(&tether, &gate, resume, r, ("last_event_id", "replay")).await;
}
