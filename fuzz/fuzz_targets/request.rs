//! Fuzzes the client request parsers: record, stop, status and attach (`POST` and `GET`)
//! requests read through every kind of route key source (`tether_core::settings::KeySource`: path,
//! json, body, query, header, cookie), `Last-Event-ID` and the resume cursors of the verbatim
//! dialects, query decoding and annotate bodies. No input panics, and every accepted value
//! keeps the documented limits: a chat id is 1 to 256 bytes without control characters, a run
//! id 1 to 64 of `[A-Za-z0-9_-]`, a `cancel_request_id` 1 to 128 bytes without control
//! characters, a wait at most the route's cap.

#![no_main]

use std::time::Duration;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use tether_core::dialect::{self, protocol1, Verbatim};
use tether_core::journal::memory::MemoryJournal;
use tether_core::request::{self, Parts, Query};
use tether_core::settings::{Completed, Expired, KeySource};

#[derive(Debug, Arbitrary)]
struct Input {
    /// A key source as configured (`path:id`, `json:/a/b`, …); a fixed one when it does not
    /// parse, chosen by `fallback`.
    source: String,
    fallback: u8,
    body: Vec<u8>,
    query: Option<String>,
    captures: Vec<(String, String)>,
    headers: Vec<(String, String)>,
    last_event_id: Option<String>,
    cursor: Option<String>,
    run_id: String,
    max_wait_ms: u16,
}

const FALLBACKS: [&str; 7] = [
    "body:chat_id",
    "json:/thread/id",
    "path:chat",
    "query:chat_id",
    "header:x-chat-id",
    "cookie:chat",
    "json:/a~1b/~0c/0",
];

fn check_chat(id: &str) {
    assert!(
        !id.is_empty() && id.len() <= request::MAX_CHAT_ID,
        "chat id length {}",
        id.len()
    );
    assert!(
        !id.chars().any(char::is_control),
        "control character in chat id {id:?}"
    );
}

fn check_run(id: &str) {
    assert!(
        !id.is_empty() && id.len() <= request::MAX_RUN_ID,
        "run id length"
    );
    assert!(
        id.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'),
        "run id charset {id:?}"
    );
}

fn check_attach(a: &dialect::AttachRequest, max_wait: Duration) {
    check_chat(&a.chat_id);
    if let Some(r) = &a.run_id {
        check_run(r);
    }
    assert!(a.wait <= max_wait);
}

fuzz_target!(|input: Input| {
    let source = input.source.parse::<KeySource>().unwrap_or_else(|_| {
        FALLBACKS[usize::from(input.fallback) % FALLBACKS.len()]
            .parse()
            .unwrap()
    });
    let _ = source.label();
    let headers = &input.headers;
    let header = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.clone())
    };
    let parts = Parts {
        captures: &input.captures,
        query: input.query.as_deref(),
        header: &header,
    };
    let max_wait = Duration::from_millis(u64::from(input.max_wait_ms));

    if let Ok(r) = request::record(&source, &input.body, &parts) {
        check_chat(&r.chat_id);
        let asked = r
            .body
            .as_ref()
            .and_then(|b| b.get("protocol"))
            .is_some_and(|p| p.as_u64() == Some(1));
        assert_eq!(r.protocol1, asked);
    }
    if let Ok(s) = request::stop(&source, &input.body, &parts) {
        check_chat(&s.chat_id);
        if let Some(r) = &s.run_id {
            check_run(r);
        }
        if let Some(c) = &s.cancel_request_id {
            assert!(!c.is_empty() && c.len() <= request::MAX_CANCEL_ID);
            assert!(!c.chars().any(char::is_control));
        }
    }
    if let Ok(id) = request::status(&source, &parts) {
        check_chat(&id);
    }
    if let Ok(a) = protocol1::attach_post(&source, &input.body, &parts, max_wait) {
        check_attach(&a, max_wait);
    }
    if let Ok(a) = protocol1::attach_get(&source, &parts, input.last_event_id.as_deref(), max_wait)
    {
        check_attach(&a, max_wait);
        assert!(a.protocol1);
    }
    if let Some(v) = &input.last_event_id {
        if let Ok((run, seq)) = protocol1::last_event_id(v) {
            check_run(&run);
            // What tether sends back as an id parses to the same cursor.
            let again = protocol1::last_event_id(&format!("{run}:{seq}")).expect("round trip");
            assert_eq!(again, (run, seq));
        }
        let _ = dialect::last_event_id::injected(&input.run_id.as_str().into(), v);
    }
    if let Some(q) = input.query.as_deref() {
        let q = Query::parse(Some(q));
        for name in ["run_id", "after_seq", "wait_ms", "chat_id", ""] {
            let _ = q.get(name);
        }
    }
    if let Ok(json) = request::resolution(&input.body) {
        // (A number past f64 is valid JSON that `Value` cannot hold: compared only when it can.)
        if let Ok(body) = serde_json::from_slice::<serde_json::Value>(&input.body) {
            let v: serde_json::Value = serde_json::from_slice(&json).expect("a resolution is JSON");
            assert_eq!(v["type"], "CUSTOM");
            assert_eq!(v["value"], body);
        }
    }
    if let Ok(m) = request::control_body(&source, &input.body) {
        let _ = request::key(
            &source,
            &parts,
            Some(&m),
            tether_core::error::Code::InvalidChatId,
        );
    }

    // The verbatim dialects' cursors, against an empty run with a raw record.
    let run = MemoryJournal::with_raw(&"r".into(), 4, Some(1024));
    let dialects: [&dyn Verbatim; 4] = [
        &dialect::from_start::FromStart {
            completed: Completed::default(),
        },
        &dialect::last_event_id::LastEventId {
            expired: Expired::NotFound,
        },
        &dialect::frame_index::FrameIndex,
        &dialect::json_cursor::JsonCursor {
            expired: Expired::ReplayUnavailable,
        },
    ];
    for d in dialects {
        let _ = d.plan(&"r".into(), &run, input.cursor.as_deref());
    }
});
