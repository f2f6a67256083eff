//! Files tether serves itself: the browser client at `GET /_tether/client.js` and, in demo mode,
//! the demo chat page at `GET /`. Both are embedded at build time from `clients/js/` (the client's
//! built `dist/` is committed), so building tether needs no npm.

use std::sync::LazyLock;

use bytes::Bytes;
use pingora_http::RequestHeader;

use super::session::{FileReply, Reply};
use crate::config::Config;

/// Where the browser client is served.
pub const CLIENT_PATH: &str = "/_tether/client.js";

/// The browser client, as `npm run build` writes it in `clients/js/dist/`.
const CLIENT_JS: &str = include_str!("../../clients/js/dist/tether-client.js");

/// The demo chat page, which loads the client from [`CLIENT_PATH`].
const DEMO_PAGE: &str = include_str!("../../clients/js/demo/index.html");

/// An embedded file with its content type and entity tag.
struct Asset {
    body: &'static str,
    content_type: &'static str,
    etag: &'static LazyLock<String>,
}

/// A strong entity tag: the first 64 bits of the body's BLAKE3 hash, quoted.
fn etag_of(body: &str) -> String {
    format!("\"{}\"", &blake3::hash(body.as_bytes()).to_hex()[..16])
}

static CLIENT_ETAG: LazyLock<String> = LazyLock::new(|| etag_of(CLIENT_JS));
static DEMO_ETAG: LazyLock<String> = LazyLock::new(|| etag_of(DEMO_PAGE));

/// Whether an `If-None-Match` header names `etag` (or `*`).
fn matches(req: &RequestHeader, etag: &str) -> bool {
    req.headers
        .get_all("if-none-match")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|t| t.trim().trim_start_matches("W/"))
        .any(|t| t == etag || t == "*")
}

/// The answer for a `GET` or `HEAD` of an embedded file this configuration serves: the client
/// when `serve_client` is on, and the demo page as well in demo mode (no upstream). `None` for
/// anything else, which goes on to the routes.
pub(crate) fn answer(cfg: &Config, req: &RequestHeader) -> Option<Reply> {
    if !cfg.serve_client {
        return None;
    }
    let head = match req.method.as_str() {
        "GET" => false,
        "HEAD" => true,
        _ => return None,
    };
    let asset = match req.uri.path() {
        CLIENT_PATH => Asset {
            body: CLIENT_JS,
            content_type: "text/javascript; charset=utf-8",
            etag: &CLIENT_ETAG,
        },
        "/" if cfg.upstream.is_none() => Asset {
            body: DEMO_PAGE,
            content_type: "text/html; charset=utf-8",
            etag: &DEMO_ETAG,
        },
        _ => return None,
    };
    let etag: &'static str = asset.etag.as_str();
    let fresh = matches(req, etag);
    Some(Reply::File(FileReply {
        status: if fresh { 304 } else { 200 },
        content_type: asset.content_type,
        etag,
        body: Bytes::from_static(asset.body.as_bytes()),
        head,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_embedded_client_is_the_built_module_and_the_page_loads_it() {
        assert!(CLIENT_JS.contains("export class TetherClient"));
        assert!(DEMO_PAGE.contains(&format!("from \"{CLIENT_PATH}\"")));
        for id in ["prompt", "send", "stop", "state", "assistant", "end"] {
            assert!(
                DEMO_PAGE.contains(&format!("data-testid=\"{id}\"")),
                "the demo page has no data-testid {id:?}"
            );
        }
    }

    #[test]
    fn etags_are_quoted_and_differ_per_file() {
        assert_eq!(CLIENT_ETAG.len(), 18);
        assert!(CLIENT_ETAG.starts_with('"') && CLIENT_ETAG.ends_with('"'));
        assert_ne!(*CLIENT_ETAG, *DEMO_ETAG);
    }
}
