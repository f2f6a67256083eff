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
