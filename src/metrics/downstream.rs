//! The proxy listener's families: its client connections, the limits that close them or refuse
//! their requests, and the requests it holds backend connections for.

use prometheus::{IntCounter, IntGauge};

use super::{label_enum, Counters, Metrics};

label_enum! {
    /// `tether_downstream_timeouts_total{kind}`: which limit closed a client's connection (or,
    /// over HTTP/2, reset its stream).
    pub enum TimeoutKind {
        /// The request head (over TLS, the handshake too) did not arrive whole within
        /// `[server] header_timeout`.
        Header => "header",
        /// The connection sat idle between requests for `[server] keepalive_timeout`.
        Keepalive => "keepalive",
        /// The request body did not arrive whole within `[server] body_timeout`.
        Body => "body",
    }
}

/// The proxy listener's connection and request families.
#[derive(Debug, Clone)]
pub struct DownstreamMetrics {
    /// `tether_downstream_connections`: client connections open on the proxy listener.
    pub open: IntGauge,
    /// `tether_downstream_connections_refused_total`: connections refused over the cap.
    pub refused: IntCounter,
    /// `tether_downstream_timeouts_total{kind}`: connections (streams) closed by a client-side
    /// limit.
    pub timeouts: Counters<TimeoutKind>,
    /// `tether_accept_errors_total`: failed accepts on the proxy listener.
    pub accept_errors: IntCounter,
    /// `tether_downstream_tls_errors_total`: TLS handshakes with clients that failed.
    pub tls_errors: IntCounter,
    /// `tether_upstream_requests`: requests holding a backend connection (set at scrape).
    pub upstream_requests: IntGauge,
    /// `tether_upstream_requests_refused_total`: requests refused with `503 at_capacity`
    /// (brought up to date at scrape).
    pub upstream_requests_refused: IntCounter,
}

impl DownstreamMetrics {
    /// Registers the families in the sidecar's registry. Runs once at start.
    pub fn new(m: &Metrics) -> Self {
        DownstreamMetrics {
            open: m.new_gauge(
                "tether_downstream_connections",
                "Client connections open on the proxy listener",
            ),
            refused: m.new_counter(
                "tether_downstream_connections_refused_total",
                "Client connections refused because max_connections were open",
            ),
            timeouts: m.new_counters(
                "tether_downstream_timeouts_total",
                "Client connections (HTTP/2: streams) closed by the header deadline, the \
                 keep-alive timeout or the body deadline",
                "kind",
            ),
            accept_errors: m.new_counter(
                "tether_accept_errors_total",
                "Failed accepts on the proxy listener (out of file descriptors and the like)",
            ),
            tls_errors: m.new_counter(
                "tether_downstream_tls_errors_total",
                "TLS handshakes with clients that failed (a client that does not trust the \
                 certificate, speaks no TLS or offers nothing in common)",
            ),
            upstream_requests: m.new_gauge(
                "tether_upstream_requests",
                "Requests holding a backend connection: recorded turns still running, \
                 pass-through and forwarded requests",
            ),
            upstream_requests_refused: m.new_counter(
                "tether_upstream_requests_refused_total",
                "Requests refused with 503 at_capacity because [upstream] max_requests \
                 requests held backend connections",
            ),
        }
    }
}
