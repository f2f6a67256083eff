//! Tests of request parsing and validation.

use super::*;

fn body_field() -> KeySource {
    KeySource::body("chat_id")
}

const NONE: Parts<'static> = Parts::EMPTY;

fn query(q: &str) -> Parts<'_> {
    Parts {
        query: Some(q),
        ..Parts::EMPTY
    }
}

fn code<T: std::fmt::Debug>(r: Result<T, ApiError>) -> &'static str {
    r.unwrap_err().code.as_str()
}

#[test]
fn record_reads_chat_id_and_protocol() {
    let r = record(
        &body_field(),
        br#"{"chat_id":"c1","protocol":1,"x":[1]}"#,
        &NONE,
    )
    .unwrap();
    assert_eq!(
        r,
        RecordRequest {
            chat_id: "c1".into(),
            protocol1: true,
            body: r.body.clone(),
        }
    );
    let r = record(&body_field(), br#"{"chat_id":"c1"}"#, &NONE).unwrap();
    assert!(!r.protocol1);
}

#[test]
fn record_rejects_bad_json_missing_and_mistyped_fields() {
    assert_eq!(code(record(&body_field(), b"{nope", &NONE)), "invalid_json");
    assert_eq!(code(record(&body_field(), b"[1]", &NONE)), "invalid_body");
    assert_eq!(code(record(&body_field(), b"{}", &NONE)), "missing_chat_id");
    assert_eq!(
        code(record(&body_field(), br#"{"chat_id":5}"#, &NONE)),
        "invalid_chat_id"
    );
    assert_eq!(
        code(record(
            &body_field(),
            br#"{"chat_id":"c","protocol":"1"}"#,
            &NONE
        )),
        "invalid_protocol"
    );
    let err = record(&body_field(), b"{nope", &NONE).unwrap_err();
    assert_eq!(err.status(), 400);
    let v: serde_json::Value = serde_json::from_slice(&err.body()).unwrap();
    assert_eq!(v["error"], "invalid_json");
}

#[test]
fn chat_id_limits() {
    let long = "x".repeat(MAX_CHAT_ID + 1);
    assert_eq!(code(check_chat_id(&long)), "invalid_chat_id");
    assert!(check_chat_id(&"x".repeat(MAX_CHAT_ID)).is_ok());
    assert_eq!(code(check_chat_id("a\u{7}b")), "invalid_chat_id");
    assert_eq!(code(check_chat_id("")), "invalid_chat_id");
    assert!(check_chat_id("chat \u{e9}\u{1F600}").is_ok());
}

#[test]
fn record_reads_chat_id_from_query_or_header() {
    let r = record(&KeySource::Query("c".into()), b"", &query("a=1&c=x%20y")).unwrap();
    assert_eq!(r.chat_id, "x y");
    let header = |h: &str| (h == "x-chat").then(|| "h1".to_string());
    let parts = Parts {
        header: &header,
        ..Parts::EMPTY
    };
    let r = record(&KeySource::Header("x-chat".into()), b"", &parts).unwrap();
    assert_eq!(r.chat_id, "h1");
}

#[test]
fn query_values_are_form_decoded_and_a_sign_is_not_hex() {
    let q = Query::parse(Some("a=%2Bx+y&b=%+f&c%5B%5D=1&a=2"));
    assert_eq!(q.get("a").unwrap().as_deref(), Some("+x y"));
    // `%+f` is not an escape: it stays as written (a hand decoder once read it as 0x0f).
    assert_eq!(q.get("b").unwrap().as_deref(), Some("% f"));
    assert_eq!(q.get("c[]").unwrap().as_deref(), Some("1"));
    assert_eq!(q.get("d").unwrap(), None);
    assert_eq!(code(Query::parse(Some("x=%ff")).get("x")), "invalid_query");
}

#[test]
fn stop_reads_its_fields_and_refuses_a_bad_cancel_id() {
    let s = stop(
        &body_field(),
        br#"{"chat_id":"c","run_id":"r1","cancel_request_id":"k"}"#,
        &NONE,
    )
    .unwrap();
    assert_eq!(s.run_id.as_deref(), Some("r1"));
    assert_eq!(s.cancel_request_id.as_deref(), Some("k"));
    let long = format!(
        r#"{{"chat_id":"c","cancel_request_id":"{}"}}"#,
        "k".repeat(200)
    );
    assert_eq!(
        code(stop(&body_field(), long.as_bytes(), &NONE)),
        "invalid_cancel_request_id"
    );
    assert_eq!(
        code(stop(
            &body_field(),
            br#"{"chat_id":"c","run_id":"a b"}"#,
            &NONE
        )),
        "invalid_run_id"
    );
}

#[test]
fn status_reads_the_query_or_a_header() {
    assert_eq!(
        status(&KeySource::Query("chat_id".into()), &query("chat_id=c%201")).unwrap(),
        "c 1"
    );
    assert_eq!(
        code(status(&KeySource::Query("chat_id".into()), &NONE)),
        "missing_chat_id"
    );
    let header = |n: &str| (n == "x-chat").then(|| "h".to_string());
    let parts = Parts {
        header: &header,
        ..Parts::EMPTY
    };
    let h = status(&KeySource::Header("x-chat".into()), &parts);
    assert_eq!(h.unwrap(), "h");
}

#[test]
fn a_resolution_wraps_the_json_body_verbatim_and_refuses_anything_else() {
    let e = resolution(br#"{"b":1, "a":[2]}"#).unwrap();
    assert_eq!(
        e,
        br#"{"type":"CUSTOM","name":"tether.resolution","value":{"b":1, "a":[2]}}"#
    );
    assert_eq!(
        resolution(b"\"yes\"").unwrap(),
        br#"{"type":"CUSTOM","name":"tether.resolution","value":"yes"}"#
    );
    // An empty body once made `"value":}`, recorded as RAW instead of CUSTOM.
    assert_eq!(code(resolution(b"")), "invalid_json");
    assert_eq!(code(resolution(b"{nope")), "invalid_json");
}

fn src(s: &str) -> KeySource {
    s.parse().unwrap()
}

#[test]
fn path_captures_are_percent_decoded() {
    let captures = [("id".to_string(), "a%20b%2Fc+d".to_string())];
    let parts = Parts {
        captures: &captures,
        ..Parts::EMPTY
    };
    // Percent-decoded as a path: `+` stays a plus.
    assert_eq!(status(&src("path:id"), &parts).unwrap(), "a b/c+d");
    let bad = [("id".to_string(), "%ff".to_string())];
    let parts = Parts {
        captures: &bad,
        ..Parts::EMPTY
    };
    assert_eq!(code(status(&src("path:id"), &parts)), "invalid_chat_id");
    assert_eq!(code(status(&src("path:id"), &NONE)), "missing_chat_id");
}

#[test]
fn json_pointers_reach_nested_fields_and_unescape() {
    let body = br#"{"target":{"run_id":"r1"},"a/b":{"c~d":"x"},"items":[{"id":"i0"}],"n":5}"#;
    let chat = |s: &str| record(&src(s), body, &NONE).map(|r| r.chat_id);
    assert_eq!(chat("json:/target/run_id").unwrap(), "r1");
    assert_eq!(chat("json:/a~1b/c~0d").unwrap(), "x");
    assert_eq!(chat("json:/items/0/id").unwrap(), "i0");
    assert_eq!(code(chat("json:/target/none")), "missing_chat_id");
    assert_eq!(code(chat("json:/target")), "invalid_chat_id");
    assert_eq!(code(chat("json:/n")), "invalid_chat_id");
    // `body:<field>` is the top-level field, slashes and all.
    assert_eq!(
        record(&src("body:a/b"), br#"{"a/b":"top"}"#, &NONE)
            .unwrap()
            .chat_id,
        "top"
    );
    // A json: source needs a JSON object body.
    assert_eq!(code(chat_of(&src("json:/id"), b"")), "invalid_json");
}

fn chat_of(s: &KeySource, body: &[u8]) -> Result<String, ApiError> {
    record(s, body, &NONE).map(|r| r.chat_id.to_string())
}

#[test]
fn cookies_and_headers_are_key_sources() {
    let header = |h: &str| match h {
        "cookie" => Some("theme=dark; sid=s%201; chat=c7".to_string()),
        "x-chat" => Some("h9".to_string()),
        _ => None,
    };
    let parts = Parts {
        header: &header,
        ..Parts::EMPTY
    };
    assert_eq!(status(&src("cookie:chat"), &parts).unwrap(), "c7");
    // A cookie's value is taken as sent.
    assert_eq!(status(&src("cookie:sid"), &parts).unwrap(), "s%201");
    assert_eq!(code(status(&src("cookie:none"), &parts)), "missing_chat_id");
    assert_eq!(code(status(&src("cookie:chat"), &NONE)), "missing_chat_id");
    assert_eq!(status(&src("header:X-Chat"), &parts).unwrap(), "h9");
}

#[test]
fn cookie_lines_join_with_a_semicolon_and_a_space() {
    let headers = |lines: &[&str]| {
        let mut h = http::HeaderMap::new();
        for l in lines {
            h.append(
                http::header::COOKIE,
                http::HeaderValue::from_str(l).unwrap(),
            );
        }
        h
    };
    // One line or none: nothing to change.
    assert_eq!(joined_cookies(&headers(&[])), None);
    assert_eq!(joined_cookies(&headers(&["a=1; b=2"])), None);
    // HTTP/2 crumbs, in order; empty ones dropped, padding trimmed.
    assert_eq!(
        joined_cookies(&headers(&["a=1", "sid=s%201", " ", "chat=c7; x=y "])).unwrap(),
        "a=1; sid=s%201; chat=c7; x=y"
    );
    assert_eq!(joined_cookies(&headers(&["", ""])).unwrap(), "");
    // Bytes that are not UTF-8 pass through as they came.
    let mut h = headers(&["a=1"]);
    h.append(
        http::header::COOKIE,
        http::HeaderValue::from_bytes(b"b=\xff").unwrap(),
    );
    assert_eq!(joined_cookies(&h).unwrap().as_bytes(), b"a=1; b=\xff");
}

#[test]
fn a_body_field_on_a_request_without_body_reads_the_query() {
    assert_eq!(
        status(&src("body:conversation"), &query("conversation=c%2B1")).unwrap(),
        "c+1"
    );
    assert_eq!(
        code(status(&src("body:chat_id"), &query("chat_id=%ff"))),
        "invalid_query"
    );
}

#[test]
fn stop_reads_the_chat_id_from_any_source_and_its_fields_from_the_body() {
    let captures = [("id".to_string(), "c1".to_string())];
    let parts = Parts {
        captures: &captures,
        ..Parts::EMPTY
    };
    // A chat id outside the body: the body may be empty.
    let s = stop(&src("path:id"), b"", &parts).unwrap();
    assert_eq!((s.chat_id.as_str(), s.run_id), ("c1", None));
    let s = stop(&src("path:id"), br#"{"run_id":"r1"}"#, &parts).unwrap();
    assert_eq!(s.run_id.as_deref(), Some("r1"));
    assert_eq!(code(stop(&src("path:id"), b"nope", &parts)), "invalid_json");
    // The default reads the body, which must be there.
    assert_eq!(code(stop(&body_field(), b"", &parts)), "invalid_json");
    let s = stop(
        &src("json:/target/chat"),
        br#"{"target":{"chat":"t"}}"#,
        &NONE,
    )
    .unwrap();
    assert_eq!(s.chat_id, "t");
}
