//! Unit tests of the Durable Streams dialect: query parsing, offsets, the encoders, the cursor.

use bytes::BytesMut;
use serde_json::{json, Value};

use super::*;
use crate::vocab::end::EndReason;

fn run() -> RunId {
    RunId::from("Ab_3-x")
}

fn code<T: std::fmt::Debug>(r: Result<T, ApiError>) -> &'static str {
    r.unwrap_err().code.as_str()
}

#[test]
fn a_read_parses_offset_live_and_cursor() {
    let at = offset(&run(), 42);
    assert_eq!(at, "00000000000000000042_Ab_3-x");
    let q = format!("offset={at}&live=sse&cursor=123");
    assert_eq!(
        parse(Some(&q)).unwrap(),
        ReadRequest {
            from: From::At {
                run: run(),
                seq: 42
            },
            live: Live::Sse,
            cursor: Some(123),
        }
    );
    let start = ReadRequest {
        from: From::Start,
        live: Live::No,
        cursor: None,
    };
    assert_eq!(parse(None).unwrap(), start);
    assert_eq!(parse(Some("offset=-1")).unwrap(), start);
    // A cursor that is not a number is ignored, as the client only echoes it.
    assert_eq!(parse(Some("offset=-1&cursor=x")).unwrap(), start);
    let now = parse(Some("offset=now&live=long-poll")).unwrap();
    assert_eq!((now.from, now.live), (From::Now, Live::LongPoll));
}

#[test]
fn a_malformed_read_is_refused_with_a_stable_code() {
    for q in [
        "offset=42",
        "offset=00000000000000000042",
        "offset=00000000000000000042-Ab",
        "offset=0000000000000000004x_Ab",
        "offset=99999999999999999999_Ab",
        "offset=00000000000000000042_bad%20id",
        "offset=-2",
        "offset=",
    ] {
        assert_eq!(code(parse(Some(q))), "invalid_offset", "{q}");
    }
    assert_eq!(code(parse(Some("offset=-1&live=true"))), "invalid_query");
    // A live read must say where it starts.
    assert_eq!(code(parse(Some("live=sse"))), "invalid_offset");
    assert_eq!(code(parse(Some("live=long-poll"))), "invalid_offset");
}

#[test]
fn offsets_of_one_run_sort_as_their_positions() {
    let seqs = [0u64, 1, 9, 10, 99, 100, 12_345, u64::MAX - 1];
    let offs: Vec<String> = seqs.iter().map(|&s| offset(&run(), s)).collect();
    let mut sorted = offs.clone();
    sorted.sort();
    assert_eq!(offs, sorted);
    for (o, &s) in offs.iter().zip(&seqs) {
        assert_eq!(parse_offset(o).unwrap(), From::At { run: run(), seq: s });
        // The protocol's reserved characters never appear.
        assert!(!o.contains([',', '&', '=', '?', '/']), "{o}");
    }
}

#[test]
fn the_tail_is_past_the_end_message_once_the_run_ended() {
    assert_eq!(tail(&run(), 7, None), offset(&run(), 7));
    let end = End {
        seq: 7,
        ..End::finished(true, None)
    };
    assert_eq!(tail(&run(), 7, Some(&end)), offset(&run(), 8));
}

#[test]
fn the_end_message_is_the_stream_end_object() {
    let mut out = BytesMut::new();
    open(&mut out);
    out.extend_from_slice(br#"{"type":"x"}"#);
    let end = End {
        seq: 3,
        ..End::finished(false, Some(EndReason::UpstreamReset))
    };
    put_end(&mut out, &run(), &end);
    close(&mut out);
    let v: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(
        v,
        json!([{"type": "x"}, {"type": "STREAM_END", "run_id": "Ab_3-x", "seq": 3,
            "persisted": false, "superseded": false, "reason": "upstream_reset"}])
    );
    // Alone in an array: no leading comma.
    let mut alone = BytesMut::new();
    open(&mut alone);
    put_end(&mut alone, &run(), &end);
    close(&mut alone);
    assert!(serde_json::from_slice::<Value>(&alone).unwrap()[0]["persisted"] == json!(false));
}

#[test]
fn sse_events_are_data_then_control() {
    let mut out = BytesMut::new();
    sse_data(&mut out, br#"[{"a":1},{"b":2}]"#);
    sse_control(&mut out, "00000000000000000002_r", 77, true, false);
    assert_eq!(
        std::str::from_utf8(&out).unwrap(),
        "event: data\ndata: [{\"a\":1},{\"b\":2}]\n\n\
         event: control\ndata: {\"streamNextOffset\":\"00000000000000000002_r\",\"streamCursor\":\"77\",\"upToDate\":true}\n\n"
    );
    let mut closed = BytesMut::new();
    sse_control(&mut closed, "00000000000000000003_r", 77, true, true);
    assert_eq!(
        std::str::from_utf8(&closed).unwrap(),
        "event: control\ndata: {\"streamNextOffset\":\"00000000000000000003_r\",\"streamClosed\":true,\"upToDate\":true}\n\n"
    );
    // Not caught up yet: no upToDate.
    let mut partial = BytesMut::new();
    sse_control(&mut partial, "o", 1, false, false);
    assert!(!std::str::from_utf8(&partial).unwrap().contains("upToDate"));
}

#[test]
fn a_multi_line_array_becomes_several_data_lines() {
    let mut out = BytesMut::new();
    sse_data(&mut out, b"[{\"a\":\n1}]");
    assert_eq!(&out[..], b"event: data\ndata: [{\"a\":\ndata: 1}]\n\n");
}

#[test]
fn the_cursor_counts_intervals_and_never_goes_back() {
    let now = CURSOR_EPOCH + 20 * 1000 + 5;
    assert_eq!(stream_cursor(now, None, 1), 1000);
    assert_eq!(stream_cursor(now, Some(3), 1), 1000);
    // An echoed cursor at or past the current interval is advanced by the jitter.
    assert_eq!(stream_cursor(now, Some(1000), 1), 1001);
    assert_eq!(stream_cursor(now, Some(1000), 3600), 1181);
    assert_eq!(stream_cursor(now, Some(5000), 40), 5003);
    assert_eq!(stream_cursor(0, None, 1), 0);
}

#[test]
fn the_etag_varies_with_range_and_closure() {
    let a = etag(&run(), 0, 5, false);
    assert_eq!(a, "\"Ab_3-x:0:5\"");
    assert_ne!(a, etag(&run(), 0, 5, true));
    assert_ne!(a, etag(&run(), 0, 6, false));
}
