//! workflows: the turn is `POST /api/claude/chat` (Anthropic frames); its response names the run
//! (`X-Workflow-Run-Id`) and carries a resume token (`X-Resume-Token`); `GET /api/claude/stream?
//! runId=…&startIndex=N` with the token is a `frame_index` resume. A token that is missing, wrong,
//! another run's or another user's gets the unknown-run answer.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use serde_json::json;

use crate::dialects::common::*;
use crate::support::*;

const ROUTES: &str = r#"
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

/// An Anthropic Messages stream with `deltas` text deltas.
fn frames(deltas: usize) -> Vec<Bytes> {
    let mut events = vec![
        json!({"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"claude-test","usage":{"input_tokens":3,"output_tokens":1}}}),
        json!({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}),
    ];
    for i in 0..deltas {
        events.push(json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":format!("w{i} \u{e9} ")}}));
    }
    events.push(json!({"type":"content_block_stop","index":0}));
    events.push(json!({"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":9}}));
    events.push(json!({"type":"message_stop"}));
    events
        .iter()
        .map(|e| frame(Some(e["type"].as_str().unwrap()), None, &e.to_string()))
        .collect()
}

/// A backend answering the n-th turn with `frames(6)`, held as `pauses[n]` says.
async fn claude_backend(pauses: Vec<Option<(usize, Gate)>>) -> Backend {
    let n = Arc::new(AtomicUsize::new(0));
    backend(move |_| {
        let i = n.fetch_add(1, Ordering::SeqCst);
        let pause = pauses.get(i).and_then(|p| p.as_ref());
        held(&frames(6), pause.map(|(at, g)| (*at, g)))
    })
    .await
}

/// Starts a turn of `session`; returns the response, its run id and token.
async fn turn(tether: &Sidecar, session: &str, user: Option<&str>) -> (Resp, String, String) {
    let body = json!({"sessionId": session, "messages": [{"role":"user","content":"hi"}]});
    let mut headers = vec![("content-type", "application/json")];
    headers.extend(user.map(|u| ("x-user", u)));
    let r = request(
        tether.addr,
        "POST",
        "/api/claude/chat",
        &headers,
        body.to_string().as_bytes(),
    )
    .await;
    assert_eq!(r.status, 200);
    let run = r
        .header("x-workflow-run-id")
        .expect("the run id header")
        .to_string();
    let token = r
        .header("x-resume-token")
        .expect("the token header")
        .to_string();
    (r, run, token)
}

async fn resume(tether: &Sidecar, run: &str, start: usize, token: Option<&str>) -> Resp {
    let path = format!("/api/claude/stream?runId={run}&startIndex={start}");
    let headers: Vec<(&str, &str)> = token.map(|t| ("X-Resume-Token", t)).into_iter().collect();
    get(tether.addr, &path, &headers).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_from_index_n_with_the_token_gets_the_raw_frames_and_a_fresh_token() {
    let all = frames(6);
    let at = random_cut("workflows", 1, all.len() - 1);
    let gate = Gate::default();
    let be = claude_backend(vec![Some((at, gate.clone())), None]).await;
    let tether = sidecar(be.addr, ROUTES).await;
    let (r, run, token) = turn(&tether, "s1", None).await;
    let got = cut(r, at).await;
    assert_eq!(concat(&got), concat(&all[..at]));

    let mut rest = resume(&tether, &run, at, Some(&token)).await;
    assert_eq!(rest.status, 200);
    assert_eq!(rest.header("x-workflow-run-id"), Some(run.as_str()));
    let fresh = rest
        .header("x-resume-token")
        .expect("a fresh token")
        .to_string();
    gate.open();
    let body = rest.body_to_end().await;
    assert_eq!(std::str::from_utf8(&body).unwrap(), concat(&all[at..]));
    assert_eq!(attach_metric(&tether, "frame_index", "replay").await, 1.0);
    assert_eq!(requests(&be), 1);
    // The fresh token works; at or past the end of the ended run the stream is empty.
    eventually("the run ended", || {
        tether.current_run("s1").is_some_and(|r| r.end().is_some())
    })
    .await;
    let mut r = resume(&tether, &run, all.len(), Some(&fresh)).await;
    assert_eq!(r.status, 200);
    assert!(r.body_to_end().await.is_empty());
    let mut r = resume(&tether, &run, all.len() + 5, Some(&fresh)).await;
    assert_eq!(r.status, 200);
    assert!(r.body_to_end().await.is_empty());
    assert_eq!(attach_metric(&tether, "frame_index", "end_only").await, 2.0);

    // A missing, wrong, or other run's token: the unknown-run answer.
    let (mut other, other_run, other_token) = turn(&tether, "s2", None).await;
    other.body_to_end().await;
    assert_ne!(other_run, run);
    let forged = format!("{}x", &token[..token.len() - 1]);
    for t in [None, Some(forged.as_str()), Some(other_token.as_str())] {
        let r = resume(&tether, &run, 0, t).await;
        assert_eq!(r.status, 404, "token {t:?}");
    }
    assert_eq!(
        attach_metric(&tether, "frame_index", "not_found").await,
        3.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_used_by_another_user_is_404() {
    let be = claude_backend(vec![]).await;
    let extra = format!("[auth]\nsubject = \"header:x-user\"\n{ROUTES}");
    let tether = sidecar(be.addr, &extra).await;
    let (mut r, run, token) = turn(&tether, "s1", Some("alice")).await;
    r.body_to_end().await;
    let path = format!("/api/claude/stream?runId={run}&startIndex=0");
    let as_user = |u: &'static str| {
        let (addr, path, token) = (tether.addr, path.clone(), token.clone());
        async move { get(addr, &path, &[("x-user", u), ("X-Resume-Token", &token)]).await }
    };
    assert_eq!(as_user("bob").await.status, 404);
    let mut r = as_user("alice").await;
    assert_eq!(r.status, 200);
    assert_eq!(
        std::str::from_utf8(&r.body_to_end().await).unwrap(),
        concat(&frames(6))
    );
}
