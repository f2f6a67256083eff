//! The backend's address, kept fresh: a backend named by DNS is looked up again for new
//! connections at most every [`RESOLVE_EVERY`], and on the next connect after one failed, so a
//! backend that moves (a new pod, a failed-over endpoint) is followed. A backend named by an IP
//! address is never looked up. A lookup that fails keeps the last address.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use log::info;
use parking_lot::{Mutex, RwLock};
use pingora_core::upstreams::peer::HttpPeer;
use tokio::time::Instant;

/// Longest time a looked-up address is used for new connections before it is looked up again.
pub const RESOLVE_EVERY: Duration = Duration::from_secs(5);

/// The peer new connections go to, and when its name is due to be looked up again.
#[derive(Debug)]
pub struct Resolved {
    peer: RwLock<Arc<HttpPeer>>,
    /// `host:port` when the host is a DNS name (`None`: an IP address).
    name: Option<String>,
    /// When the name is due to be looked up again.
    due: Mutex<Instant>,
    /// How long one lookup may take.
    timeout: Duration,
}

impl Resolved {
    /// `peer`, already at the address `hostport` resolved to at start.
    pub fn new(peer: HttpPeer, hostport: &str, timeout: Duration) -> Self {
        let host = hostport.rsplit_once(':').map_or(hostport, |(h, _)| h);
        let is_ip = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<std::net::IpAddr>()
            .is_ok();
        Resolved {
            peer: RwLock::new(Arc::new(peer)),
            name: (!is_ip).then(|| hostport.to_string()),
            due: Mutex::new(Instant::now() + RESOLVE_EVERY),
            timeout,
        }
    }

    /// The peer as it is now (no lookup).
    pub fn current(&self) -> Arc<HttpPeer> {
        self.peer.read().clone()
    }

    /// The peer for a new connection: looked up again first when the name is due (one caller
    /// looks up; the others use the current address meanwhile).
    pub async fn for_connect(&self) -> Arc<HttpPeer> {
        let Some(name) = &self.name else {
            return self.current();
        };
        let now = Instant::now();
        {
            let mut due = self.due.lock();
            if now < *due {
                return self.current();
            }
            *due = now + RESOLVE_EVERY;
        }
        let looked_up = tokio::time::timeout(self.timeout, tokio::net::lookup_host(name.as_str()))
            .await
            .ok()
            .and_then(Result::ok)
            .and_then(|mut addrs| addrs.next());
        if let Some(addr) = looked_up {
            self.move_to(addr);
        }
        self.current()
    }

    /// Makes the next connect look the name up again (a connect failed).
    pub fn failed(&self) {
        *self.due.lock() = Instant::now();
    }

    /// Points new connections at `addr`, when it is new.
    fn move_to(&self, addr: SocketAddr) {
        let mut peer = self.peer.write();
        if peer._address == addr.into() {
            return;
        }
        info!(
            "backend {}: now at {addr} (was {})",
            self.name.as_deref().unwrap_or("-"),
            peer._address
        );
        let mut moved = HttpPeer::clone(&peer);
        moved._address = addr.into();
        *peer = Arc::new(moved);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pingora_core::upstreams::peer::Peer;

    fn peer(addr: &str) -> HttpPeer {
        HttpPeer::new(addr.parse::<SocketAddr>().unwrap(), false, String::new())
    }

    #[tokio::test]
    async fn a_name_is_looked_up_again_once_due_or_after_a_failure_and_an_ip_never() {
        // "localhost" resolves to a loopback address; the peer starts somewhere else.
        let r = Resolved::new(peer("127.0.0.9:1"), "localhost:1", Duration::from_secs(1));
        assert_eq!(r.for_connect().await.address().to_string(), "127.0.0.9:1");
        r.failed();
        let moved = r.for_connect().await;
        assert_ne!(
            moved.address().to_string(),
            "127.0.0.9:1",
            "looked up after a failure"
        );
        assert!(moved.address().as_inet().unwrap().ip().is_loopback());
        // Not due again for RESOLVE_EVERY: a manual move would stay.
        r.move_to("127.0.0.9:1".parse().unwrap());
        assert_eq!(r.for_connect().await.address().to_string(), "127.0.0.9:1");
        assert!(
            *r.due.lock() > Instant::now() + RESOLVE_EVERY / 2,
            "due in RESOLVE_EVERY"
        );
        *r.due.lock() = Instant::now();
        assert_ne!(
            r.for_connect().await.address().to_string(),
            "127.0.0.9:1",
            "due again"
        );

        let ip = Resolved::new(peer("127.0.0.9:1"), "127.0.0.9:1", Duration::from_secs(1));
        ip.failed();
        assert_eq!(ip.for_connect().await.address().to_string(), "127.0.0.9:1");
    }
}
