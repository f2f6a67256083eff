//! Tests of the request as forwarded and the response as relayed.

use super::*;

#[test]
fn hop_by_hop_headers_and_those_connection_names_are_not_forwarded() {
    let mut req = RequestHeader::build("POST", b"/chat", None).unwrap();
    req.insert_header("connection", "keep-alive, X-Secret-Hop")
        .unwrap();
    req.insert_header("x-secret-hop", "1").unwrap();
    req.insert_header("te", "trailers").unwrap();
    req.insert_header("x-kept", "1").unwrap();
    let out = outgoing(&req, 3, Some(&RunId::from("r1")), None).unwrap();
    for gone in ["connection", "x-secret-hop", "te"] {
        assert!(out.headers.get(gone).is_none(), "{gone}");
    }
    assert_eq!(out.headers["x-kept"], "1");
    assert_eq!(out.headers["content-length"], "3");
    assert_eq!(out.headers["accept-encoding"], "identity");
    assert_eq!(out.headers["x-tether-run-id"], "r1");
}

#[test]
fn a_client_sent_run_id_header_is_never_forwarded() {
    let mut req = RequestHeader::build("POST", b"/chat", None).unwrap();
    req.append_header("X-Tether-Run-Id", "forged").unwrap();
    req.append_header("x-tether-run-id", "forged-too").unwrap();
    let out = outgoing(&req, 0, None, None).unwrap();
    assert_eq!(out.headers.get_all("x-tether-run-id").iter().count(), 0);
    let out = outgoing(&req, 0, Some(&RunId::from("r1")), None).unwrap();
    let ids: Vec<_> = out.headers.get_all("x-tether-run-id").iter().collect();
    assert_eq!(ids, ["r1"]);
}

#[test]
fn cookie_lines_go_out_as_one_line_joined_with_a_semicolon() {
    // An HTTP/1.1 request (with Pingora's header-name case map) and an HTTP/2 one (without).
    for mut req in [
        RequestHeader::build("POST", b"/chat", None).unwrap(),
        RequestHeader::build_no_case("POST", b"/chat", None).unwrap(),
    ] {
        req.append_header("cookie", "a=1").unwrap();
        req.append_header("x-kept", "1").unwrap();
        req.append_header("cookie", "sid=abc").unwrap();
        req.append_header("cookie", "chat=c7").unwrap();
        let out = outgoing(&req, 0, None, None).unwrap();
        let lines: Vec<_> = out.headers.get_all("cookie").iter().collect();
        assert_eq!(lines, ["a=1; sid=abc; chat=c7"]);
        let mut wire = Vec::new();
        out.header_to_h1_wire(&mut wire);
        let wire = String::from_utf8(wire).unwrap().to_ascii_lowercase();
        assert_eq!(wire.matches("cookie:").count(), 1, "{wire}");
        assert!(wire.contains("x-kept: 1"), "{wire}");
    }
    // One line is left as it came; crumbs that are all empty go.
    let mut req = RequestHeader::build("GET", b"/", None).unwrap();
    req.append_header("Cookie", "a=1;b=2").unwrap();
    join_cookies(&mut req);
    assert_eq!(req.headers["cookie"], "a=1;b=2");
    req.remove_header("cookie");
    req.append_header("cookie", "").unwrap();
    req.append_header("cookie", " ").unwrap();
    join_cookies(&mut req);
    assert!(req.headers.get("cookie").is_none());
}

#[test]
fn a_relayed_response_loses_its_hop_by_hop_headers_and_is_rechunked() {
    let mut h = ResponseHeader::build(200, None).unwrap();
    h.insert_header("connection", "close, x-hop").unwrap();
    h.insert_header("x-hop", "1").unwrap();
    h.insert_header("content-length", "5").unwrap();
    h.insert_header("content-type", "text/plain").unwrap();
    let r = relayed(h.clone(), true);
    assert!(r.headers.get("x-hop").is_none());
    assert!(r.headers.get("content-length").is_none());
    assert_eq!(r.headers["transfer-encoding"], "chunked");
    assert_eq!(relayed(h, false).headers["content-length"], "5");
}

#[test]
fn a_relayed_204_or_304_gets_no_framing_headers() {
    let mut h = ResponseHeader::build(204, None).unwrap();
    h.insert_header("content-length", "5").unwrap();
    h.insert_header("transfer-encoding", "chunked").unwrap();
    let r = relayed(h, true);
    assert!(r.headers.get("content-length").is_none());
    assert!(r.headers.get("transfer-encoding").is_none());
    let mut h = ResponseHeader::build(304, None).unwrap();
    h.insert_header("content-length", "5").unwrap();
    let r = relayed(h, true);
    assert!(r.headers.get("transfer-encoding").is_none());
    assert_eq!(
        r.headers["content-length"], "5",
        "a 304 may say the length it would have had"
    );
}
