//! ai-sdk (`useChat({resume: true})`): the turn is `POST /api/chat` keyed by the body's `id`; a
//! reconnect is `GET /api/chat/{id}/stream`, answered `from_start` with the compacted history in
//! the AI SDK's own `data: <json>` frames, then the live tail.

use bytes::Bytes;
use serde_json::json;

use crate::dialects::common::*;
use crate::support::*;

const ROUTES: &str = r#"
[[routes]]
methods = ["POST"]
path = "/api/chat"
kind = "record"
chat_id = "json:/id"
format = "ai_sdk"

[[routes]]
methods = ["GET"]
path = "/api/chat/{id}/stream"
kind = "resume"
dialect = "from_start"
chat_id = "path:id"
"#;

/// The text deltas of the turn, escapes and multi-byte text included.
const DELTAS: [&str; 9] = [
    "Hel",
    "lo, ",
    "caf\u{e9} ",
    "\u{1F600} ",
    "\\\"q\\\" ",
    "\\n",
    "and ",
    "so ",
    "on.",
];

/// The text the deltas make (JSON escapes resolved).
fn full_text() -> String {
    DELTAS
        .iter()
        .map(|d| serde_json::from_str::<String>(&format!("\"{d}\"")).unwrap())
        .collect()
}

/// An AI SDK UI message stream: start, one text part, finish, `[DONE]`.
fn frames() -> Vec<Bytes> {
    let mut v = vec![
        r#"{"type":"start","messageId":"msg_1"}"#.to_string(),
        r#"{"type":"start-step"}"#.to_string(),
        r#"{"type":"text-start","id":"t1"}"#.to_string(),
    ];
    for d in DELTAS {
        v.push(format!(
            r#"{{"type":"text-delta","id":"t1","delta":"{d}"}}"#
        ));
    }
    v.push(r#"{"type":"text-end","id":"t1"}"#.to_string());
    v.push(r#"{"type":"finish-step"}"#.to_string());
    v.push(r#"{"type":"finish"}"#.to_string());
    v.push("[DONE]".to_string());
    v.iter().map(|d| frame(None, None, d)).collect()
}

/// The text of AI SDK frames, as `useChat` accumulates it.
fn text_of(blocks: &[Bytes]) -> String {
    blocks
        .iter()
        .filter(|b| data(b) != "[DONE]")
        .map(|b| data_json(b))
        .filter(|e| e["type"] == "text-delta")
        .map(|e| e["delta"].as_str().unwrap().to_string())
        .collect()
}

fn is_delta(b: &Bytes) -> bool {
    data(b) != "[DONE]" && data_json(b)["type"] == "text-delta"
}

/// Cuts a client after `at` frames while the backend is held there, resumes, and checks the
/// resumed stream: compacted history in `data:` frames, then the raw tail, the text once.
async fn cut_and_resume(at: usize) {
    let all = frames();
    let gate = Gate::default();
    let (f, g) = (all.clone(), gate.clone());
    let be = backend(move |_| held(&f, Some((at, &g)))).await;
    let tether = sidecar(be.addr, ROUTES).await;
    let r = post(
        tether.addr,
        "/api/chat",
        &json!({"id": "chat-1", "messages": []}),
    )
    .await;
    assert_eq!(r.status, 200);
    let got = cut(r, at).await;
    assert_eq!(
        concat(&got),
        concat(&all[..at]),
        "the turn is relayed unchanged"
    );

    let mut resume = get(tether.addr, "/api/chat/chat-1/stream", &[]).await;
    assert_eq!(resume.status, 200);
    assert_eq!(resume.header("content-type"), Some("text/event-stream"));
    // The history is one write: once its first frame is here, the rest is the live tail.
    let first = resume.block().await.expect("the history");
    gate.open();
    let mut blocks = vec![first];
    blocks.extend(blocks_to_end(&mut resume).await);

    for b in &blocks {
        let text = std::str::from_utf8(b).unwrap();
        assert!(
            text.starts_with("data: ") && text.matches('\n').count() == 2,
            "one data line per frame: {text:?}"
        );
    }
    assert_eq!(text_of(&blocks), full_text(), "the whole text exactly once");
    let done: Vec<_> = blocks.iter().filter(|b| data(b) == "[DONE]").collect();
    assert_eq!(done.len(), 1);
    assert_eq!(&done[0][..], b"data: [DONE]\n\n");
    assert_eq!(
        blocks.last().map(|b| &b[..]),
        Some(&b"data: [DONE]\n\n"[..])
    );
    // The history merged the deltas the client had seen into one; the tail is the raw frames.
    let seen = all[..at].iter().filter(|b| is_delta(b)).count();
    let tail = &all[at..];
    let deltas = blocks.iter().filter(|b| is_delta(b)).count();
    assert_eq!(
        deltas,
        seen.min(1) + tail.iter().filter(|b| is_delta(b)).count()
    );
    assert_eq!(
        concat(&blocks[blocks.len() - tail.len()..]),
        concat(tail),
        "the live tail is the upstream's bytes"
    );
    let starts = blocks
        .iter()
        .filter(|b| data(b) != "[DONE]" && data_json(b)["type"] == "start")
        .count();
    assert_eq!(starts, 1);
    assert_eq!(attach_metric(&tether, "from_start", "snapshot").await, 1.0);
    assert_eq!(requests(&be), 1, "the resume never reaches the backend");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_cut_at_a_random_point_resumes_with_the_whole_text_exactly_once() {
    let at = random_cut("ai-sdk", 1, frames().len() - 1);
    cut_and_resume(at).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_cut_mid_text_gets_the_seen_deltas_merged_into_one_frame() {
    cut_and_resume(6).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_cut_after_done_gets_done_written_back_as_a_data_frame() {
    cut_and_resume(frames().len()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completed_run_and_an_unknown_chat_are_204() {
    let all = frames();
    let be = backend(move |_| held(&all, None)).await;
    let tether = sidecar(be.addr, ROUTES).await;
    let mut r = post(
        tether.addr,
        "/api/chat",
        &json!({"id": "done", "messages": []}),
    )
    .await;
    r.body_to_end().await;
    eventually("the run ended", || {
        tether
            .current_run("done")
            .is_some_and(|r| r.end().is_some())
    })
    .await;
    let r = get(tether.addr, "/api/chat/done/stream", &[]).await;
    assert_eq!(r.status, 204);
    let r = get(tether.addr, "/api/chat/nobody/stream", &[]).await;
    assert_eq!(r.status, 204);
    assert_eq!(
        attach_metric(&tether, "from_start", "no_content").await,
        2.0
    );
    assert_eq!(requests(&be), 1);
}
