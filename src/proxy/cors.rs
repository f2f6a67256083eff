//! CORS (`[server.cors]`): the headers that let a page on another origin read tether's own
//! answers, and the preflights tether answers for the routes it owns.
//!
//! Three kinds of answer:
//! - tether's own (errors, `204`s, control answers, protocol-1 streams, resume dialects, a
//!   legacy client's recorded stream, its files) get tether's CORS headers, in place of any a
//!   recorded backend head carried ([`Cors::own`]);
//! - a backend's answer relayed on one of tether's routes (a refused or non-SSE turn, an
//!   unrecorded forward) keeps the backend's CORS headers when it has any, else gets tether's
//!   ([`Cors::relayed`]): tether answered the preflight that let the browser send it;
//! - pass-through answers, and preflights for paths tether does not own, are the backend's,
//!   untouched.
//!
//! With no origin configured, nothing here adds or removes a header.

use pingora_http::{RequestHeader, ResponseHeader};

use crate::config::{match_route, Config, KeySource, Origins, Route, RouteKind, Subject};
use crate::config::{Alias, CorsSettings as Conf, DialectKind};
use crate::dialect::durable_streams;

/// The header naming the run on tether's protocol-1 streams, always exposed.
const RUN_ID: &str = "x-tether-run-id";

/// CORS for one sidecar: off, or what it allows.
pub struct Cors {
    on: Option<On>,
}

/// CORS that is on.
struct On {
    conf: Conf,
    /// `access-control-expose-headers`.
    expose: String,
    /// `access-control-max-age`.
    max_age: String,
    /// Request headers allowed on every route of tether's: `content-type`, the caller
    /// identity's header, the configured extras.
    base_headers: Vec<String>,
}

impl Cors {
    /// CORS as configured (off without `[server.cors] allow_origins`).
    pub fn new(cfg: &Config) -> Cors {
        let Some(conf) = cfg.cors.clone() else {
            return Cors { on: None };
        };
        let mut expose = vec![RUN_ID.to_string()];
        for r in &cfg.routes {
            let t = &r.tokens;
            expose.extend(t.run_id_header.iter().chain(&t.token_header).cloned());
            if r.resume.as_ref().map(|x| x.dialect) == Some(DialectKind::DurableStreams) {
                expose.extend(
                    durable_streams::header::EXPOSED
                        .iter()
                        .map(|h| h.to_string()),
                );
            }
        }
        expose.extend(conf.expose_headers.iter().cloned());
        let mut base_headers = vec!["content-type".to_string()];
        match &cfg.subject {
            Subject::Header(h) => base_headers.push(h.clone()),
            Subject::Authorization => base_headers.push("authorization".into()),
            Subject::None | Subject::Cookie(_) => {}
        }
        base_headers.extend(conf.allow_headers.iter().cloned());
        Cors {
            on: Some(On {
                expose: dedup(expose.iter().map(|h| h.to_ascii_lowercase())).join(", "),
                max_age: conf.max_age.as_secs().to_string(),
                base_headers: dedup(base_headers),
                conf,
            }),
        }
    }

    /// Adds tether's CORS headers to one of its own answers to `req`, after removing any a
    /// recorded backend head brought along (they were for another request). `Vary: Origin`
    /// always; the rest when `req` comes from an allowed origin.
    pub(crate) fn own(&self, req: &RequestHeader, h: &mut ResponseHeader) {
        let Some(on) = &self.on else { return };
        let stale: Vec<String> = h
            .headers
            .keys()
            .map(|k| k.as_str())
            .filter(|k| k.starts_with("access-control-"))
            .map(str::to_string)
            .collect();
        for k in stale {
            h.remove_header(&k);
        }
        vary_origin(h);
        let Some(origin) = on.allowed(req) else {
            return;
        };
        let _ = h.insert_header("access-control-allow-origin", origin);
        if on.conf.credentials {
            let _ = h.insert_header("access-control-allow-credentials", "true");
        }
        let _ = h.insert_header("access-control-expose-headers", on.expose.as_str());
    }

    /// Adds tether's CORS headers to a backend's answer relayed on one of tether's routes,
    /// unless the backend answered CORS itself (`access-control-allow-origin`).
    pub(crate) fn relayed(&self, req: &RequestHeader, h: &mut ResponseHeader) {
        if self.on.is_some() && !h.headers.contains_key("access-control-allow-origin") {
            self.own(req, h);
        }
    }

    /// The answer to a CORS preflight for a route tether owns: `204`, with the route's
    /// methods and request headers when the origin is allowed, and no CORS header when it is
    /// not. `None` when CORS is off, `req` is not a preflight, or the request it announces
    /// goes to the backend (no route, or a pass-through one): the backend answers its own.
    pub(crate) fn preflight(
        &self,
        routes: &[Route],
        req: &RequestHeader,
    ) -> Option<ResponseHeader> {
        let on = self.on.as_ref()?;
        if req.method != http::Method::OPTIONS || !req.headers.contains_key("origin") {
            return None;
        }
        let method = req
            .headers
            .get("access-control-request-method")?
            .to_str()
            .ok()?;
        let path = req.uri.path();
        let (route, _) = match_route(routes, method, path)?;
        if route.kind == RouteKind::Passthrough {
            return None;
        }
        let mut h = ResponseHeader::build(204, Some(7)).ok()?;
        vary_origin(&mut h);
        let Some(origin) = on.allowed(req) else {
            return Some(h);
        };
        // Every method some route of tether's takes on this path, and what those routes read.
        let owners: Vec<(&str, &Route)> = routes
            .iter()
            .flat_map(|r| r.methods.iter())
            .filter_map(|m| match match_route(routes, m, path) {
                Some((r, _)) if r.kind != RouteKind::Passthrough => Some((m.as_str(), r)),
                _ => None,
            })
            .collect();
        let methods = dedup(owners.iter().map(|(m, _)| m.to_string()));
        let headers = on.base_headers.iter().cloned();
        let headers = dedup(headers.chain(owners.iter().flat_map(|(_, r)| route_headers(r))));
        let _ = h.insert_header("access-control-allow-origin", origin);
        if on.conf.credentials {
            let _ = h.insert_header("access-control-allow-credentials", "true");
        }
        let _ = h.insert_header("access-control-allow-methods", methods.join(", "));
        let _ = h.insert_header("access-control-allow-headers", headers.join(", "));
        let _ = h.insert_header("access-control-max-age", on.max_age.as_str());
        Some(h)
    }
}

impl On {
    /// The `access-control-allow-origin` value for `req`: its one `Origin` when listed, `*`
    /// for any origin; `None` for a request without an allowed origin.
    fn allowed<'r>(&self, req: &'r RequestHeader) -> Option<&'r str> {
        let mut all = req.headers.get_all("origin").iter();
        let origin = all.next()?.to_str().ok()?;
        if all.next().is_some() {
            return None;
        }
        match &self.conf.origins {
            Origins::Any => Some("*"),
            Origins::Listed(list) => list.iter().any(|o| o == origin).then_some(origin),
        }
    }
}

/// The request headers `route` reads: each header source of its keys, and `Last-Event-ID` on an
/// attach route (a protocol-1 `GET` resumes from it).
fn route_headers(route: &Route) -> Vec<String> {
    let resume = route.resume.as_ref();
    let sources = std::iter::once(&route.chat_id)
        .chain(&route.run)
        .chain(&route.idempotency_key)
        .chain(&route.resume_on)
        .chain(&route.cancel_request_id)
        .chain(resume.and_then(|r| r.cursor.as_ref()))
        .chain(resume.and_then(|r| r.token.as_ref()))
        .chain(route.aliases.iter().filter_map(|a| match a {
            Alias::Request(src) => Some(src),
            _ => None,
        }));
    let mut out: Vec<String> = sources
        .filter_map(|s| match s {
            KeySource::Header(h) => Some(h.clone()),
            _ => None,
        })
        .collect();
    if route.kind == RouteKind::Attach {
        out.push("last-event-id".into());
    }
    out
}

/// Adds `Vary: Origin` unless the head already varies by it (or by everything).
fn vary_origin(h: &mut ResponseHeader) {
    let varies = h
        .headers
        .get_all("vary")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| matches!(t.trim().to_ascii_lowercase().as_str(), "origin" | "*"));
    if !varies {
        let _ = h.append_header("vary", "Origin");
    }
}

/// `items` in order, each once.
fn dedup(items: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for i in items {
        if !out.contains(&i) {
            out.push(i);
        }
    }
    out
}
