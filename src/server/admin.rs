//! The admin listener: `GET /metrics` (Prometheus text), `GET /healthz` (alive),
//! `GET /readyz` (serving; 503 while draining) and, with an admin token, the admin API
//! under `/admin/` ([`api`]).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use pingora_core::apps::{HttpServerApp, ReusedHttpStream};
use pingora_core::protocols::http::ServerSession;
use pingora_core::server::ShutdownWatch;

use super::small_app::{finish, respond};
use crate::proxy::Shared;

pub mod api;
pub mod rows;

/// The most request body the admin listener reads (and drops) before it answers.
const MAX_ADMIN_BODY: usize = 64 * 1024;

/// The admin HTTP app.
pub struct Admin {
    shared: Arc<Shared>,
}

impl Admin {
    /// An admin app over the sidecar's shared state.
    pub fn new(shared: Arc<Shared>) -> Self {
        Admin { shared }
    }

    /// The Prometheus exposition, with the gauges derived from the registry, the connect queue
    /// and the backend's request slots refreshed first.
    pub fn metrics_text(&self) -> String {
        let m = &self.shared.metrics;
        let registry = self.shared.chats.registry();
        m.recorded_bytes.set(registry.recorded_bytes() as i64);
        let held = registry.held_by_state();
        m.runs_held
            .with_label_values(&["active"])
            .set(held.active as i64);
        m.runs_held
            .with_label_values(&["completed"])
            .set(held.completed as i64);
        let connects = self.shared.upstream.connects();
        m.upstream_connects_waiting.set(connects.waiting() as i64);
        let seen = m.upstream_fd_waits.get();
        m.upstream_fd_waits
            .inc_by(connects.out_of_fds().saturating_sub(seen));
        let (d, slots) = (&self.shared.downstream, self.shared.upstream.slots());
        d.upstream_requests.set(slots.held() as i64);
        let seen = d.upstream_requests_refused.get();
        d.upstream_requests_refused
            .inc_by(slots.refused().saturating_sub(seen));
        m.render()
    }
}

/// Claims no request: each goes to `process_new_http`.
impl crate::server::conn::Shortcut for Admin {}

#[async_trait]
impl HttpServerApp for Admin {
    /// Runs once per request on the admin listener.
    async fn process_new_http(
        self: &Arc<Self>,
        mut s: ServerSession,
        _shutdown: &ShutdownWatch,
    ) -> Option<ReusedHttpStream> {
        if !s.read_request().await.ok()? {
            return None;
        }
        let path = s.req_header().uri.path().to_string();
        let get = s.req_header().method == http::Method::GET;
        if let (true, Some(token)) = (path.starts_with("/admin/"), &self.shared.cfg.admin_token) {
            if !drain_body(&mut s).await {
                return None;
            }
            let h = s.req_header();
            let auth = h.headers.get_all("authorization");
            let authorization = match auth.iter().count() {
                1 => auth.iter().next().map(|v| v.as_bytes()),
                _ => None,
            };
            let req = api::AdminRequest {
                method: &h.method,
                path: &path,
                query: h.uri.query(),
                authorization,
            };
            let a = api::serve(&self.shared.chats, token, &req).await;
            if !respond(&mut s, a.status, "application/json", a.body).await {
                return None;
            }
            return finish(s).await;
        }
        let ok = match (get, path.as_str()) {
            (true, "/metrics") => {
                let text = self.metrics_text();
                respond(&mut s, 200, "text/plain; version=0.0.4", Bytes::from(text)).await
            }
            (true, "/healthz") => {
                respond(&mut s, 200, "text/plain", Bytes::from_static(b"ok\n")).await
            }
            (true, "/readyz") => {
                if self.shared.draining.load(Ordering::Relaxed) {
                    respond(&mut s, 503, "text/plain", Bytes::from_static(b"draining\n")).await
                } else {
                    let body: &'static [u8] = match self.shared.chats.journal() {
                        Some(j) if j.is_degraded() => b"ready\njournal: degraded\n",
                        Some(_) => b"ready\njournal: ok\n",
                        None => b"ready\n",
                    };
                    respond(&mut s, 200, "text/plain", Bytes::from_static(body)).await
                }
            }
            _ => {
                let body = Bytes::from_static(br#"{"error":"not_found","message":"admin serves /metrics, /healthz and /readyz"}"#);
                respond(&mut s, 404, "application/json", body).await
            }
        };
        if !ok {
            return None;
        }
        finish(s).await
    }
}

/// Reads and drops an admin request's body; false when it is over [`MAX_ADMIN_BODY`] or
/// cannot be read (the connection is then closed).
async fn drain_body(s: &mut ServerSession) -> bool {
    let mut seen = 0;
    loop {
        match s.read_request_body().await {
            Ok(Some(chunk)) => {
                seen += chunk.len();
                if seen > MAX_ADMIN_BODY {
                    return false;
                }
            }
            Ok(None) => return true,
            Err(_) => return false,
        }
    }
}
