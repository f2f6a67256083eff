//! The small HTTP apps' shared pieces (admin and demo): write a whole response, end a request.

use bytes::Bytes;
use pingora_core::protocols::http::ServerSession;
use pingora_http::ResponseHeader;

/// Writes a whole response with a body.
pub async fn respond(s: &mut ServerSession, status: u16, content_type: &str, body: Bytes) -> bool {
    let Ok(mut h) = ResponseHeader::build(status, Some(2)) else {
        return false;
    };
    if h.insert_header("content-type", content_type).is_err()
        || h.insert_header("content-length", body.len().to_string())
            .is_err()
    {
        return false;
    }
    s.write_response_header(Box::new(h)).await.is_ok()
        && s.write_response_body(body, true).await.is_ok()
}

/// Ends a request of a small app, keeping the connection for the next one when it can.
pub async fn finish(mut s: ServerSession) -> Option<pingora_core::apps::ReusedHttpStream> {
    s.set_keepalive(Some(60));
    let settings = pingora_core::apps::HttpPersistentSettings::for_session(&s);
    s.finish()
        .await
        .ok()
        .flatten()
        .map(|r| pingora_core::apps::ReusedHttpStream::from_reusable_stream(r, settings))
}
