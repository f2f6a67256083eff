//! The sidecar under test: tether started in-process on 127.0.0.1:0, its metrics, and its run
//! registry for states that have no readiness signal.

use std::net::SocketAddr;
use std::sync::Arc;

use tether::state::auth::Auth;
use tether::state::registry::Registry;
use tether::state::run::Run;
use tether::vocab::{ChatId, RunId};

use super::{parse_file, request, Config, DemoOptions, Flags, Handle, Owner};

/// A running sidecar.
pub struct Sidecar {
    pub addr: SocketAddr,
    pub admin: SocketAddr,
    pub handle: Option<Handle>,
}

impl Drop for Sidecar {
    fn drop(&mut self) {
        if let Some(h) = self.handle.take() {
            h.abort();
        }
    }
}

impl Sidecar {
    /// The Prometheus text of this sidecar.
    pub async fn metrics(&self) -> String {
        let mut r = request(self.admin, "GET", "/metrics", &[], b"").await;
        String::from_utf8(r.body_to_end().await.to_vec()).unwrap()
    }

    /// The value of one sample line (`name{labels}`), 0 when absent.
    pub async fn metric(&self, sample: &str) -> f64 {
        let text = self.metrics().await;
        text.lines()
            .find_map(|l| l.strip_prefix(sample).and_then(|v| v.strip_prefix(' ')))
            .map(|v| v.trim().parse().unwrap())
            .unwrap_or(0.0)
    }

    /// The running sidecar's handle (absent once a test has taken it to drain).
    pub fn handle(&self) -> &Handle {
        self.handle.as_ref().expect("the sidecar is running")
    }

    /// The registry of chats and runs.
    pub fn registry(&self) -> Arc<Registry> {
        self.handle().shared.chats.registry().clone()
    }

    /// The current run of an anonymous chat.
    pub fn current_run(&self, chat_id: &str) -> Option<Arc<Run>> {
        let scope = Auth::scope(&Owner::NONE, &ChatId::from(chat_id));
        self.registry().current(&scope, &Owner::NONE)
    }

    /// A run of an anonymous chat by id.
    pub fn find_run(&self, chat_id: &str, run_id: &str) -> Option<Arc<Run>> {
        let scope = Auth::scope(&Owner::NONE, &ChatId::from(chat_id));
        self.registry()
            .find(&scope, &Owner::NONE, &RunId::from(run_id))
    }
}

/// Starts tether from a whole configuration file and `demo` options.
async fn start(toml: &str, demo: DemoOptions) -> Sidecar {
    let file = parse_file(toml).unwrap();
    let cfg = Config::from_parts(file, &Flags::default()).unwrap();
    let handle = tether::server::start(cfg, demo).await.unwrap();
    Sidecar {
        addr: handle.proxy_addr,
        admin: handle.admin_addr,
        handle: Some(handle),
    }
}

/// Starts tether in front of `upstream` with extra TOML (`[recorder]` etc.; lines of a leading
/// `[server]` table join the harness's own).
pub async fn sidecar(upstream: SocketAddr, extra_toml: &str) -> Sidecar {
    let (server, rest) = split_server(extra_toml);
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nadmin = \"127.0.0.1:0\"\nupstream = \"{upstream}\"\n{server}\n{rest}"
    );
    start(&text, DemoOptions::default()).await
}

/// Starts tether from a whole configuration file (its own `[server]` table included).
pub async fn sidecar_from(toml: &str) -> Sidecar {
    start(toml, DemoOptions::default()).await
}

/// Starts tether without an upstream, so it runs its own demo backend with `demo` options.
pub async fn demo_sidecar(demo: DemoOptions) -> Sidecar {
    start(
        "[server]\nlisten=\"127.0.0.1:0\"\nadmin=\"127.0.0.1:0\"\n",
        demo,
    )
    .await
}

/// Splits extra TOML into the lines of a leading `[server]` table (which join the harness's
/// own) and the rest.
pub(super) fn split_server(extra_toml: &str) -> (&str, &str) {
    match extra_toml.strip_prefix("[server]\n") {
        Some(r) => r.split_at(r.find("\n[").map_or(r.len(), |i| i + 1)),
        None => ("", extra_toml),
    }
}
