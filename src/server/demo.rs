//! The demo backend: a deterministic AG-UI producer that tether runs behind itself when started
//! without an upstream, and that the tests use as a real backend.
//!
//! `POST /chat` answers one turn as `text/event-stream`: `RUN_STARTED`, a reasoning message, a
//! text message of `tokens` deltas with a tool call inside, then `RUN_FINISHED`, one event per
//! write, `pace` apart. Query parameters `tokens` and `pace_ms` override the defaults per request.
//! `POST /echo` answers the request body back; `GET /healthz` answers `ok`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use pingora_core::apps::{HttpServerApp, ReusedHttpStream};
use pingora_core::protocols::http::ServerSession;
use pingora_core::server::ShutdownWatch;
use pingora_http::ResponseHeader;
use serde_json::{json, Value};

use super::small_app::{finish, respond};

/// Words the demo's text deltas cycle through (multi-byte and astral characters included).
const WORDS: [&str; 12] = [
    "Recovering ",
    "a ",
    "stream ",
    "means ",
    "nothing ",
    "is ",
    "lost: ",
    "caf\u{e9} ",
    "\u{1F642} ",
    "\"quoted\" ",
    "line\n",
    "done. ",
];

/// Demo settings.
#[derive(Debug, Clone)]
pub struct DemoOptions {
    /// Text deltas per turn.
    pub tokens: usize,
    /// Pause between events.
    pub pace: Duration,
}

impl Default for DemoOptions {
    fn default() -> Self {
        DemoOptions {
            tokens: 40,
            pace: Duration::from_millis(50),
        }
    }
}

/// What the demo backend has done, for tests and the banner.
#[derive(Debug, Default)]
pub struct DemoStats {
    /// Turns whose stream began.
    pub started: AtomicU64,
    /// Turns written to the end, terminal chunk included.
    pub completed: AtomicU64,
    /// Turns cut short because a write failed (the reader went away).
    pub aborted: AtomicU64,
}

/// The demo backend app.
pub struct Demo {
    opts: DemoOptions,
    /// Counters of turns.
    pub stats: DemoStats,
}

/// The AG-UI events of one turn, in order.
pub fn turn(thread_id: &str, run_no: u64, tokens: usize) -> Vec<Value> {
    let (m, r, t) = ("msg-1", "reasoning-1", "tool-1");
    let mut ev = vec![
        json!({"type":"RUN_STARTED","threadId":thread_id,"runId":format!("demo-{run_no}")}),
        json!({"type":"REASONING_START","messageId":r}),
        json!({"type":"REASONING_MESSAGE_START","messageId":r,"role":"reasoning"}),
    ];
    for d in ["Thinking ", "about ", "it."] {
        ev.push(json!({"type":"REASONING_MESSAGE_CONTENT","messageId":r,"delta":d}));
    }
    ev.push(json!({"type":"REASONING_MESSAGE_END","messageId":r}));
    ev.push(json!({"type":"REASONING_END","messageId":r}));
    ev.push(json!({"type":"TEXT_MESSAGE_START","messageId":m,"role":"assistant"}));
    let half = tokens / 2;
    for i in 0..half {
        ev.push(
            json!({"type":"TEXT_MESSAGE_CONTENT","messageId":m,"delta":WORDS[i % WORDS.len()]}),
        );
    }
    ev.push(json!({"type":"TOOL_CALL_START","toolCallId":t,"toolCallName":"search","parentMessageId":m}));
    for d in ["{\"q\":", "\"tether\",", "\"n\":3}"] {
        ev.push(json!({"type":"TOOL_CALL_ARGS","toolCallId":t,"delta":d}));
    }
    ev.push(json!({"type":"TOOL_CALL_END","toolCallId":t}));
    ev.push(json!({"type":"TOOL_CALL_RESULT","messageId":"result-1","toolCallId":t,"content":"3 results","role":"tool"}));
    for i in half..tokens {
        ev.push(
            json!({"type":"TEXT_MESSAGE_CONTENT","messageId":m,"delta":WORDS[i % WORDS.len()]}),
        );
    }
    ev.push(json!({"type":"TEXT_MESSAGE_END","messageId":m}));
    ev.push(json!({"type":"RUN_FINISHED","threadId":thread_id,"runId":format!("demo-{run_no}")}));
    ev
}

impl Demo {
    /// A demo backend with these defaults.
    pub fn new(opts: DemoOptions) -> Self {
        Demo {
            opts,
            stats: DemoStats::default(),
        }
    }

    async fn chat(&self, s: &mut ServerSession, body: &[u8]) -> bool {
        let q = s.req_header().uri.query().unwrap_or("").to_string();
        let param = |name: &str| {
            q.split('&')
                .filter_map(|kv| kv.split_once('='))
                .find(|(k, _)| *k == name)
                .and_then(|(_, v)| v.parse::<u64>().ok())
        };
        let tokens = param("tokens").map_or(self.opts.tokens, |t| t.min(1_000_000) as usize);
        let pace = param("pace_ms").map_or(self.opts.pace, Duration::from_millis);
        let chat: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
        let thread = chat["chat_id"].as_str().unwrap_or("demo").to_string();
        let run_no = self.stats.started.fetch_add(1, Ordering::Relaxed) + 1;
        let Ok(mut h) = ResponseHeader::build(200, Some(3)) else {
            return false;
        };
        let _ = h.insert_header("content-type", "text/event-stream");
        let _ = h.insert_header("cache-control", "no-cache");
        let _ = h.insert_header("transfer-encoding", "chunked");
        if s.write_response_header(Box::new(h)).await.is_err() {
            self.stats.aborted.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        for (i, e) in turn(&thread, run_no, tokens).iter().enumerate() {
            if i > 0 && !pace.is_zero() {
                tokio::time::sleep(pace).await;
            }
            let mut frame = BytesMut::new();
            frame.extend_from_slice(b"data: ");
            frame.extend_from_slice(e.to_string().as_bytes());
            frame.extend_from_slice(b"\n\n");
            if s.write_response_body(frame.freeze(), false).await.is_err() {
                self.stats.aborted.fetch_add(1, Ordering::Relaxed);
                return false;
            }
        }
        if s.write_response_body(Bytes::new(), true).await.is_err() {
            self.stats.aborted.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        self.stats.completed.fetch_add(1, Ordering::Relaxed);
        true
    }
}

/// Claims no request: each goes to `process_new_http`.
impl crate::server::conn::Shortcut for Demo {}

#[async_trait]
impl HttpServerApp for Demo {
    /// Runs once per request on the demo listener.
    async fn process_new_http(
        self: &Arc<Self>,
        mut s: ServerSession,
        _shutdown: &ShutdownWatch,
    ) -> Option<ReusedHttpStream> {
        if !s.read_request().await.ok()? {
            return None;
        }
        let mut body = BytesMut::new();
        while let Ok(Some(chunk)) = s.read_request_body().await {
            body.extend_from_slice(&chunk);
        }
        let method = s.req_header().method.clone();
        let path = s.req_header().uri.path().to_string();
        let ok = match (method.as_str(), path.as_str()) {
            ("POST", "/chat") => self.chat(&mut s, &body).await,
            ("POST", "/echo") => {
                respond(&mut s, 200, "application/octet-stream", body.freeze()).await
            }
            ("GET", "/healthz") => {
                respond(&mut s, 200, "text/plain", Bytes::from_static(b"ok\n")).await
            }
            _ => {
                let b = Bytes::from_static(br#"{"error":"not_found","message":"the demo serves POST /chat and POST /echo"}"#);
                respond(&mut s, 404, "application/json", b).await
            }
        };
        if !ok {
            return None;
        }
        finish(s).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_turn_is_deterministic_and_ends_with_run_finished() {
        let a = turn("c", 1, 10);
        assert_eq!(a, turn("c", 1, 10));
        assert_eq!(a.first().unwrap()["type"], "RUN_STARTED");
        assert_eq!(a.last().unwrap()["type"], "RUN_FINISHED");
        let deltas = a
            .iter()
            .filter(|e| e["type"] == "TEXT_MESSAGE_CONTENT")
            .count();
        assert_eq!(deltas, 10);
    }
}
