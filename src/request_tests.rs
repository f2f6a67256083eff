//! Tests of request parsing and validation.

use super::*;

const MAX: Duration = Duration::from_secs(30);

fn body_field() -> ChatIdFrom {
    ChatIdFrom::Body("chat_id".into())
}

fn code<T: std::fmt::Debug>(r: Result<T, ApiError>) -> &'static str {
    r.unwrap_err().code
}

#[test]
fn record_reads_chat_id_and_protocol() {
    let r = record(
        &body_field(),
        br#"{"chat_id":"c1","protocol":1,"x":[1]}"#,
        None,
        |_| None,
    )
    .unwrap();
    assert_eq!(
        r,
        RecordRequest {
            chat_id: "c1".into(),
            protocol1: true
        }
    );
    let r = record(&body_field(), br#"{"chat_id":"c1"}"#, None, |_| None).unwrap();
    assert!(!r.protocol1);
}

#[test]
fn record_rejects_bad_json_missing_and_mistyped_fields() {
    assert_eq!(
        code(record(&body_field(), b"{nope", None, |_| None)),
        "invalid_json"
    );
    assert_eq!(
        code(record(&body_field(), b"[1]", None, |_| None)),
        "invalid_body"
    );
    assert_eq!(
        code(record(&body_field(), b"{}", None, |_| None)),
        "missing_chat_id"
    );
    assert_eq!(
        code(record(&body_field(), br#"{"chat_id":5}"#, None, |_| None)),
        "invalid_chat_id"
    );
    assert_eq!(
        code(record(
            &body_field(),
            br#"{"chat_id":"c","protocol":"1"}"#,
            None,
            |_| None
        )),
        "invalid_protocol"
    );
    let err = record(&body_field(), b"{nope", None, |_| None).unwrap_err();
    assert_eq!(err.status, 400);
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
    let r = record(
        &ChatIdFrom::Query("c".into()),
        b"",
        Some("a=1&c=x%20y"),
        |_| None,
    )
    .unwrap();
    assert_eq!(r.chat_id, "x y");
    let r = record(&ChatIdFrom::Header("x-chat".into()), b"", None, |h| {
        (h == "x-chat").then(|| "h1".to_string())
    })
    .unwrap();
    assert_eq!(r.chat_id, "h1");
}

#[test]
fn attach_post_fields_and_types() {
    let a = attach_post(
        &body_field(),
        br#"{"chat_id":"c","protocol":1,"run_id":"r1","after_seq":5,"wait_ms":99999999}"#,
        MAX,
    )
    .unwrap();
    assert_eq!(a.run_id.as_deref(), Some("r1"));
    assert_eq!(a.after_seq, Some(5));
    assert_eq!(a.wait, MAX);
    assert!(a.protocol1);
    for (body, c) in [
        (r#"{"chat_id":"c","after_seq":-1}"#, "invalid_cursor"),
        (r#"{"chat_id":"c","after_seq":1.5}"#, "invalid_cursor"),
        (r#"{"chat_id":"c","after_seq":"3"}"#, "invalid_cursor"),
        (
            r#"{"chat_id":"c","after_seq":18446744073709551616}"#,
            "invalid_cursor",
        ),
        (r#"{"chat_id":"c","run_id":"a b"}"#, "invalid_run_id"),
        (r#"{"chat_id":"c","run_id":7}"#, "invalid_run_id"),
        (r#"{"chat_id":"c","wait_ms":-5}"#, "invalid_wait_ms"),
        (r#"{"chat":"c"}"#, "missing_chat_id"),
    ] {
        assert_eq!(
            code(attach_post(&body_field(), body.as_bytes(), MAX)),
            c,
            "{body}"
        );
    }
}

#[test]
fn attach_get_reads_query_and_last_event_id() {
    let a = attach_get(Some("chat_id=c&run_id=r&after_seq=3&wait_ms=10"), None, MAX).unwrap();
    assert_eq!((a.run_id.as_deref(), a.after_seq), (Some("r"), Some(3)));
    assert_eq!(a.wait, Duration::from_millis(10));
    let a = attach_get(Some("chat_id=c"), Some("r2:42"), MAX).unwrap();
    assert_eq!((a.run_id.as_deref(), a.after_seq), (Some("r2"), Some(42)));
    assert_eq!(
        code(attach_get(Some("chat_id=c"), Some("r2"), MAX)),
        "invalid_last_event_id"
    );
    assert_eq!(
        code(attach_get(Some("chat_id=c"), Some("r2:-1"), MAX)),
        "invalid_cursor"
    );
    assert_eq!(
        code(attach_get(
            Some("chat_id=c&after_seq=99999999999999999999"),
            None,
            MAX
        )),
        "invalid_cursor"
    );
    assert_eq!(code(attach_get(None, None, MAX)), "missing_chat_id");
    assert_eq!(
        code(attach_get(Some("chat_id=%ff"), None, MAX)),
        "invalid_query"
    );
}
