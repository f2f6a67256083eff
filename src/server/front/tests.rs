//! Which request heads the proxy listener answers itself: tether's routes, matched as the
//! handlers match them; everything else goes to Pingora's proxy unchanged.

use super::{claimed, request_line};
use crate::config::{parse_file, Route};

fn routes() -> Vec<Route> {
    let text = r#"
[[routes]]
methods = ["POST"]
path = "/chat"
kind = "record"

[[routes]]
methods = ["POST", "GET"]
path = "/chat/live"
kind = "attach"

[[routes]]
methods = ["GET", "POST"]
path = "/api/{*rest}"
kind = "passthrough"
"#;
    parse_file(text).unwrap().validate().unwrap().routes
}

#[test]
fn a_request_for_a_tether_route_is_claimed_with_or_without_a_query() {
    let r = routes();
    assert!(claimed(&r, b"POST /chat HTTP/1.1\r\nHost: x\r\n\r\n"));
    assert!(claimed(&r, b"POST /chat?pace=1 HTTP/1.1\r\n\r\n"));
    assert!(claimed(&r, b"GET /chat/live?chat_id=c HTTP/1.1\r\n\r\n"));
    // Empty lines before the request line are skipped, as Pingora's parser skips them.
    assert!(claimed(&r, b"\r\n\r\nPOST /chat HTTP/1.1\r\n\r\n"));
    // An absolute-form target names the same path.
    assert!(claimed(&r, b"POST http://h:1/chat HTTP/1.1\r\n\r\n"));
    assert!(claimed(&r, b"POST /chat HTTP/1.0\n\n"));
}

#[test]
fn pass_through_unmatched_and_unparsable_requests_go_to_pingora() {
    let r = routes();
    // A pass-through route, a method no route takes, a path no route matches, a preflight.
    assert!(!claimed(&r, b"POST /api/x HTTP/1.1\r\n\r\n"));
    assert!(!claimed(&r, b"GET /chat HTTP/1.1\r\n\r\n"));
    assert!(!claimed(&r, b"POST /chats HTTP/1.1\r\n\r\n"));
    assert!(!claimed(&r, b"OPTIONS /chat HTTP/1.1\r\n\r\n"));
    // Heads Pingora answers itself (400, or its HTTP/2 preface handling): not claimed.
    assert!(!claimed(&r, b"POST  /chat HTTP/1.1\r\n\r\n"));
    assert!(!claimed(&r, b"POST /chat\r\n\r\n"));
    assert!(!claimed(&r, b"POST /chat HTTP/2.0\r\n\r\n"));
    assert!(!claimed(&r, b"POST /ch\xffat HTTP/1.1\r\n\r\n"));
    assert!(!claimed(&r, b""));
}

#[test]
fn the_request_line_gives_the_method_and_the_target_as_a_uri() {
    let (m, uri) = request_line(b"PUT /a/b?c=d HTTP/1.1\r\nX: y\r\n\r\n").unwrap();
    assert_eq!(m, "PUT");
    assert_eq!(uri.path(), "/a/b");
    assert_eq!(uri.query(), Some("c=d"));
}
