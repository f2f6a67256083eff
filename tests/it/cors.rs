//! CORS (`[server.cors]`): preflights for tether's routes answered by tether with the route's
//! methods and request headers (and nothing for an origin not allowed), tether's own answers
//! (protocol-1 streams, `204`s, JSON errors and control answers, resume dialects, a legacy
//! client's recorded stream, its files) with exact CORS headers, a backend's answer relayed on a
//! tether route with the backend's CORS headers or else tether's, and pass-through answers and
//! preflights left to the backend. With no origin configured nothing changes.

use bytes::Bytes;
use serde_json::json;

use crate::support::*;

/// The page's origin the tests allow.
const PAGE: &str = "http://127.0.0.2:8000";

/// `[server.cors]` allowing [`PAGE`].
const CORS: &str = "[server.cors]\nallow_origins = [\"http://127.0.0.2:8000\"]\n";

/// A backend's own CORS header, to tell its headers from tether's.
const BACKEND_ORIGIN: (&str, &str) = ("access-control-allow-origin", "https://backend.example");

/// The response's `access-control-*` and `vary` headers, sorted (their order means nothing).
fn cors_of(headers: &[(String, String)]) -> Vec<(String, String)> {
    let mut v: Vec<_> = headers
        .iter()
        .filter(|(k, _)| k.starts_with("access-control-") || k == "vary")
        .cloned()
        .collect();
    v.sort();
    v
}

/// `(name, value)` pairs as owned strings, sorted as [`cors_of`] sorts.
fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut v: Vec<_> = p
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    v.sort();
    v
}

/// The headers tether adds to its own answer for [`PAGE`] with the default routes.
fn own(expose: &str) -> Vec<(String, String)> {
    pairs(&[
        ("vary", "Origin"),
        ("access-control-allow-origin", PAGE),
        ("access-control-expose-headers", expose),
    ])
}

/// A preflight from `origin` for `method` on `path`.
async fn preflight(tether: &Sidecar, path: &str, origin: &str, method: &str) -> Resp {
    let headers = [
        ("origin", origin),
        ("access-control-request-method", method),
        ("access-control-request-headers", "content-type"),
    ];
    request(tether.addr, "OPTIONS", path, &headers, b"").await
}

/// POSTs JSON from [`PAGE`].
async fn post_from_page(tether: &Sidecar, path: &str, body: &serde_json::Value) -> Resp {
    let headers = [("content-type", "application/json"), ("origin", PAGE)];
    let body = body.to_string();
    request(tether.addr, "POST", path, &headers, body.as_bytes()).await
}

/// A backend answering every request with a short AG-UI turn, and `OPTIONS` with its own CORS.
async fn turns_and_own_preflights() -> Backend {
    backend(|req| match req.method.as_str() {
        "OPTIONS" => vec![
            Step::Head(
                204,
                vec![
                    (BACKEND_ORIGIN.0, BACKEND_ORIGIN.1.into()),
                    ("access-control-allow-methods", "PUT".into()),
                    ("content-length", "0".into()),
                ],
            ),
            Step::Raw(Bytes::new()),
        ],
        _ => scripted_turn(&turn(3), None),
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preflight_for_a_tether_route_gets_its_methods_and_headers_from_tether() {
    let be = turns_and_own_preflights().await;
    let extra = format!("{CORS}[auth]\nsubject = \"header:X-User\"\n");
    let tether = sidecar(be.addr, &extra).await;
    let r = preflight(&tether, "/chat", PAGE, "POST").await;
    assert_eq!(r.status, 204);
    assert_eq!(
        cors_of(&r.headers),
        pairs(&[
            ("vary", "Origin"),
            ("access-control-allow-origin", PAGE),
            ("access-control-allow-methods", "POST"),
            (
                "access-control-allow-headers",
                "content-type, x-user, idempotency-key"
            ),
            ("access-control-max-age", "600"),
        ])
    );
    // The attach route takes POST and GET, and a GET resumes from Last-Event-ID.
    let r = preflight(&tether, "/chat/live", PAGE, "GET").await;
    assert_eq!(r.status, 204);
    assert_eq!(
        cors_of(&r.headers),
        pairs(&[
            ("vary", "Origin"),
            ("access-control-allow-origin", PAGE),
            ("access-control-allow-methods", "POST, GET"),
            (
                "access-control-allow-headers",
                "content-type, x-user, last-event-id"
            ),
            ("access-control-max-age", "600"),
        ])
    );
    // No identity is asked of a preflight, and the backend never sees one.
    assert!(be.requests.lock().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preflight_from_an_origin_not_allowed_gets_a_204_without_cors_headers() {
    let be = turns_and_own_preflights().await;
    let tether = sidecar(be.addr, CORS).await;
    // Exact match: another port, another scheme, a path, are other origins.
    for origin in [
        "http://127.0.0.2:8001",
        "https://127.0.0.2:8000",
        "http://127.0.0.3:8000",
        "http://127.0.0.2:8000/",
        "null",
    ] {
        let r = preflight(&tether, "/chat", origin, "POST").await;
        assert_eq!(r.status, 204, "{origin}");
        assert_eq!(
            cors_of(&r.headers),
            pairs(&[("vary", "Origin")]),
            "{origin}"
        );
    }
    // Two Origin headers are no origin.
    let headers = [
        ("origin", PAGE),
        ("origin", PAGE),
        ("access-control-request-method", "POST"),
    ];
    let r = request(tether.addr, "OPTIONS", "/chat", &headers, b"").await;
    assert_eq!(cors_of(&r.headers), pairs(&[("vary", "Origin")]));
    assert!(be.requests.lock().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preflight_for_what_goes_to_the_backend_is_the_backends() {
    let be = turns_and_own_preflights().await;
    let tether = sidecar(be.addr, CORS).await;
    let backends = pairs(&[BACKEND_ORIGIN, ("access-control-allow-methods", "PUT")]);
    // A path no route owns; a method the route does not take (the request would pass through
    // too); an OPTIONS request that is not a preflight.
    let r = preflight(&tether, "/api/other", PAGE, "PUT").await;
    assert_eq!(cors_of(&r.headers), backends);
    let r = preflight(&tether, "/chat", PAGE, "DELETE").await;
    assert_eq!(cors_of(&r.headers), backends);
    let r = request(tether.addr, "OPTIONS", "/chat", &[("origin", PAGE)], b"").await;
    assert_eq!(cors_of(&r.headers), backends);
    let asked: Vec<String> = be.requests.lock().iter().map(|q| q.path.clone()).collect();
    assert_eq!(asked, ["/api/other", "/chat", "/chat"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pass_through_routes_method_is_preflighted_by_the_backend_not_tether() {
    let be = turns_and_own_preflights().await;
    let routes = "[[routes]]\nmethods = [\"GET\"]\npath = \"/chat/live\"\nkind = \"passthrough\"\n\
                  [[routes]]\nmethods = [\"POST\", \"GET\"]\npath = \"/chat/live\"\nkind = \"attach\"\n";
    let tether = sidecar(be.addr, &format!("{CORS}{routes}")).await;
    // GET /chat/live passes through (the first route wins): its preflight is the backend's.
    let r = preflight(&tether, "/chat/live", PAGE, "GET").await;
    assert_eq!(
        r.header("access-control-allow-origin"),
        Some(BACKEND_ORIGIN.1)
    );
    // POST is tether's, and tether allows only the method it owns there.
    let r = preflight(&tether, "/chat/live", PAGE, "POST").await;
    assert_eq!(r.header("access-control-allow-origin"), Some(PAGE));
    assert_eq!(r.header("access-control-allow-methods"), Some("POST"));
    assert_eq!(be.requests.lock().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_an_origin_configured_nothing_changes() {
    let be = turns_and_own_preflights().await;
    let tether = sidecar(be.addr, "").await;
    let r = preflight(&tether, "/chat", PAGE, "POST").await;
    assert_eq!(r.header("access-control-allow-methods"), Some("PUT"));
    assert_eq!(
        be.requests.lock().len(),
        1,
        "the backend answered the preflight"
    );
    let r = post_from_page(&tether, "/chat", &chat("off")).await;
    assert_eq!(r.status, 200);
    assert!(r.header("x-tether-run-id").is_some());
    assert_eq!(cors_of(&r.headers), []);
    let r = post_from_page(&tether, "/chat/stop", &json!({"chat_id": "nobody"})).await;
    assert_eq!(r.status, 404);
    assert_eq!(cors_of(&r.headers), []);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protocol1_streams_204s_errors_and_control_answers_carry_tethers_cors_headers() {
    let be = turn_backend(turn(3), None).await;
    let extra = format!("[server]\nserve_client = true\n{CORS}");
    let tether = sidecar(be.addr, &extra).await;
    let want = own("x-tether-run-id");
    // The turn: tether's stream, not the backend's head.
    let mut r = post_from_page(&tether, "/chat", &chat("c1")).await;
    assert_eq!(r.status, 200);
    assert_eq!(cors_of(&r.headers), want);
    let run = r.header("x-tether-run-id").unwrap().to_string();
    r.frames_to_end().await;
    // An attach by cursor (a GET with Last-Event-ID): a stream of tether's.
    let last = format!("{run}:0");
    let headers = [("origin", PAGE), ("last-event-id", last.as_str())];
    let mut r = request(tether.addr, "GET", "/chat/live?chat_id=c1", &headers, b"").await;
    assert_eq!(r.status, 200);
    assert_eq!(cors_of(&r.headers), want);
    r.frames_to_end().await;
    // An attach with nothing to show: 204.
    let r = post_from_page(&tether, "/chat/live", &chat("none")).await;
    assert_eq!(r.status, 204);
    assert_eq!(cors_of(&r.headers), want);
    // Control answers: a status, a stop of nothing (JSON error), a malformed body.
    let headers = [("origin", PAGE)];
    let r = request(tether.addr, "GET", "/chat/run?chat_id=c1", &headers, b"").await;
    assert_eq!(r.status, 200);
    assert_eq!(cors_of(&r.headers), want);
    let r = post_from_page(&tether, "/chat/stop", &json!({"chat_id": "none"})).await;
    assert_eq!(r.status, 404);
    assert_eq!(cors_of(&r.headers), want);
    let headers = [("origin", PAGE), ("content-type", "application/json")];
    let r = request(tether.addr, "POST", "/chat", &headers, b"{not json").await;
    assert_eq!(r.status, 400);
    assert_eq!(cors_of(&r.headers), want);
    // The browser client, so that a page elsewhere may import it.
    let r = request(
        tether.addr,
        "GET",
        "/_tether/client.js",
        &[("origin", PAGE)],
        b"",
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(cors_of(&r.headers), want);
    // A request without an Origin (not a browser's cross-origin one): only Vary.
    let mut r = post(tether.addr, "/chat", &chat("c2")).await;
    assert_eq!(cors_of(&r.headers), pairs(&[("vary", "Origin")]));
    r.frames_to_end().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_identity_and_extra_headers_are_as_configured() {
    let be = turn_backend(turn(3), None).await;
    let extra = "[server.cors]\nallow_origins = [\"http://127.0.0.2:8000\"]\n\
                 allow_credentials = true\nexpose_headers = [\"X-Backend-Trace\"]\n\
                 allow_headers = [\"X-Api-Key\"]\nmax_age = \"1m\"\n\
                 [auth]\nsubject = \"authorization\"\n";
    let tether = sidecar(be.addr, extra).await;
    let r = preflight(&tether, "/chat", PAGE, "POST").await;
    assert_eq!(
        cors_of(&r.headers),
        pairs(&[
            ("vary", "Origin"),
            ("access-control-allow-origin", PAGE),
            ("access-control-allow-credentials", "true"),
            ("access-control-allow-methods", "POST"),
            (
                "access-control-allow-headers",
                "content-type, authorization, x-api-key, idempotency-key"
            ),
            ("access-control-max-age", "60"),
        ])
    );
    // Without its identity the turn is refused, readably.
    let r = post_from_page(&tether, "/chat", &chat("c1")).await;
    assert_eq!(r.status, 401);
    assert_eq!(
        cors_of(&r.headers),
        pairs(&[
            ("vary", "Origin"),
            ("access-control-allow-origin", PAGE),
            ("access-control-allow-credentials", "true"),
            (
                "access-control-expose-headers",
                "x-tether-run-id, x-backend-trace"
            ),
        ])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn any_origin_is_answered_with_a_star() {
    let be = turn_backend(turn(3), None).await;
    let tether = sidecar(be.addr, "[server.cors]\nallow_origins = [\"*\"]\n").await;
    let r = preflight(&tether, "/chat", "https://anywhere.example", "POST").await;
    assert_eq!(r.header("access-control-allow-origin"), Some("*"));
    let mut r = post_from_page(&tether, "/chat", &chat("c1")).await;
    assert_eq!(
        cors_of(&r.headers),
        pairs(&[
            ("vary", "Origin"),
            ("access-control-allow-origin", "*"),
            ("access-control-expose-headers", "x-tether-run-id"),
        ])
    );
    r.frames_to_end().await;
}

/// The workflows profile's turn and re-attach: tether sets both headers.
const WORKFLOWS: &str = r#"
[[routes]]
methods = ["POST"]
path = "/api/claude/chat"
kind = "record"
chat_id = "json:/sessionId"
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
async fn a_recorded_stream_and_its_resume_get_tethers_cors_headers_not_the_backends() {
    // The backend answers CORS itself, for the page that sent the turn.
    let be = backend(|_| {
        let mut steps = vec![Step::Head(
            200,
            vec![
                ("content-type", "text/event-stream".into()),
                ("vary", "Accept-Encoding".into()),
                (BACKEND_ORIGIN.0, BACKEND_ORIGIN.1.into()),
                ("access-control-allow-credentials", "true".into()),
                ("access-control-expose-headers", "x-other".into()),
            ],
        )];
        steps.extend(turn(3).iter().map(|e| Step::Chunk(sse(e))));
        steps.push(Step::End);
        steps
    })
    .await;
    let tether = sidecar(be.addr, &format!("{CORS}{WORKFLOWS}")).await;
    let want = pairs(&[
        ("vary", "Accept-Encoding"),
        ("vary", "Origin"),
        ("access-control-allow-origin", PAGE),
        (
            "access-control-expose-headers",
            "x-tether-run-id, x-workflow-run-id, x-resume-token",
        ),
    ]);
    let mut r = post_from_page(&tether, "/api/claude/chat", &json!({"sessionId": "s1"})).await;
    assert_eq!(r.status, 200);
    assert_eq!(cors_of(&r.headers), want);
    let run = r.header("x-workflow-run-id").unwrap().to_string();
    let token = r.header("x-resume-token").unwrap().to_string();
    r.body_to_end().await;
    // The resume preflight allows the token header; the resume answers with tether's headers.
    let r = preflight(&tether, "/api/claude/stream", PAGE, "GET").await;
    assert_eq!(
        r.header("access-control-allow-headers"),
        Some("content-type, x-resume-token")
    );
    let path = format!("/api/claude/stream?runId={run}&startIndex=1");
    let headers = [("origin", PAGE), ("x-resume-token", token.as_str())];
    let mut r = request(tether.addr, "GET", &path, &headers, b"").await;
    assert_eq!(r.status, 200);
    assert_eq!(cors_of(&r.headers), want);
    assert!(!r.body_to_end().await.is_empty());
    // From an origin not allowed: none of the backend's recorded CORS headers either.
    let other = [
        ("origin", "http://127.0.0.9"),
        ("x-resume-token", token.as_str()),
    ];
    let mut r = request(tether.addr, "GET", &path, &other, b"").await;
    assert_eq!(r.status, 200);
    assert_eq!(
        cors_of(&r.headers),
        pairs(&[("vary", "Accept-Encoding"), ("vary", "Origin")])
    );
    r.body_to_end().await;
    // An unknown run: the dialect's 404, with tether's headers.
    let r = request(
        tether.addr,
        "GET",
        "/api/claude/stream?runId=x&startIndex=0",
        &headers,
        b"",
    )
    .await;
    assert_eq!(r.status, 404);
    assert_eq!(
        cors_of(&r.headers),
        own("x-tether-run-id, x-workflow-run-id, x-resume-token")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_answer_relayed_on_a_tether_route_keeps_its_cors_headers_or_gets_tethers() {
    let be = backend(|req| {
        let body = String::from_utf8_lossy(&req.body).to_string();
        if body.contains("own") {
            let mut a = fixed_answer(400, "application/json", "{\"error\":\"no\"}");
            if let Step::Head(_, h) = &mut a[0] {
                h.push((BACKEND_ORIGIN.0, BACKEND_ORIGIN.1.into()));
            }
            a
        } else {
            let mut a = fixed_answer(429, "application/json", "{\"error\":\"slow down\"}");
            if let (true, Step::Head(_, h)) = (body.contains("vary"), &mut a[0]) {
                h.push(("vary", "origin".into()));
            }
            a
        }
    })
    .await;
    let tether = sidecar(be.addr, CORS).await;
    // A refused turn without CORS of its own: tether answered the preflight, so it adds its own.
    let mut r = post_from_page(&tether, "/chat", &chat("c1")).await;
    assert_eq!(r.status, 429);
    assert_eq!(cors_of(&r.headers), own("x-tether-run-id"));
    assert_eq!(&r.body_to_end().await[..], b"{\"error\":\"slow down\"}");
    // A legacy attach, forwarded unrecorded: the same (and a Vary that names Origin is kept).
    let r = post_from_page(&tether, "/chat/live", &json!({"chat_id": "vary"})).await;
    assert_eq!(r.status, 429);
    assert_eq!(
        cors_of(&r.headers),
        pairs(&[
            ("vary", "origin"),
            ("access-control-allow-origin", PAGE),
            ("access-control-expose-headers", "x-tether-run-id"),
        ])
    );
    // A backend that answers CORS itself: its headers, unchanged.
    let r = post_from_page(&tether, "/chat", &json!({"chat_id": "own", "protocol": 1})).await;
    assert_eq!(r.status, 400);
    assert_eq!(cors_of(&r.headers), pairs(&[BACKEND_ORIGIN]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pass_through_answers_are_the_backends_unchanged() {
    let be = backend(|req| {
        let mut a = fixed_answer(200, "application/json", "{}");
        if req.path == "/api/own" {
            if let Step::Head(_, h) = &mut a[0] {
                h.push((BACKEND_ORIGIN.0, BACKEND_ORIGIN.1.into()));
                h.push(("vary", "Accept".into()));
            }
        }
        a
    })
    .await;
    let tether = sidecar(be.addr, CORS).await;
    let r = request(tether.addr, "GET", "/api/own", &[("origin", PAGE)], b"").await;
    assert_eq!(
        cors_of(&r.headers),
        pairs(&[BACKEND_ORIGIN, ("vary", "Accept")])
    );
    let r = request(tether.addr, "GET", "/api/plain", &[("origin", PAGE)], b"").await;
    assert_eq!(r.status, 200);
    assert_eq!(cors_of(&r.headers), []);
}

#[test]
fn a_bad_origin_from_the_environment_exits_64_naming_the_flag() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tether"))
        .env(
            "TETHER_CORS_ORIGINS",
            "http://127.0.0.2:8000,app.example.com",
        )
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--cors-origin") && err.contains("app.example.com"),
        "{err}"
    );
}
