//! Listeners and lifecycle: binds the proxy, admin and (without an upstream) demo listeners,
//! feeds accepted connections to Pingora's HTTP apps, sweeps the registry, and drains on
//! shutdown.
//!
//! tether drives Pingora's `HttpProxy` app from its own accept loops ([`conn`]) instead of
//! Pingora's `Server`, so that listeners can bind port 0 (tests learn the address), several
//! sidecars can run in one process, client connections get a header deadline, an idle timeout
//! and a cap (and each request a body deadline), and a drain ends as soon as the last run has
//! ended rather than after a fixed grace period. On the proxy listener, requests for tether's own routes skip `HttpProxy` and go
//! straight to their handlers ([`front`]), so a stream does not carry a pass-through's state.

pub mod admin;
pub mod conn;
pub mod demo;
pub mod front;
pub mod runtime;
mod small_app;
pub mod tls;

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use log::{info, warn};
use pingora_core::server::configuration::ServerConf;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::accounting::Ledger;
use crate::backend::slots::descriptor_share;
use crate::backend::Upstream;
use crate::budget::Budget;
use crate::chats::Chats;
use crate::config::{Config, RouteKind, UpstreamUrl};
use crate::metrics::{EvictReason, GaugeMeter, Metrics};
use crate::proxy::{Shared, Sidecar};
use crate::state::owner_limits::{OwnerLimitSettings, OwnerLimits};
use crate::state::registry::{Registry, Swept};
use crate::vocab::end::EndReason;
use admin::Admin;
pub use conn::DownstreamMetrics;
use conn::{accept_loop, Policy};
use demo::{Demo, DemoOptions};

/// A running sidecar.
pub struct Handle {
    /// Where the proxy listens.
    pub proxy_addr: SocketAddr,
    /// Where the admin listener listens.
    pub admin_addr: SocketAddr,
    /// Where the embedded demo backend listens, when no upstream was configured.
    pub demo: Option<(SocketAddr, Arc<Demo>)>,
    /// State shared with every request.
    pub shared: Arc<Shared>,
    /// Turns true when the drain starts: sessions stop keeping connections alive, the demo
    /// listener and the sweeper stop.
    accept_stop: watch::Sender<bool>,
    /// Closes the proxy listener.
    proxy_stop: watch::Sender<bool>,
    /// The proxy listener's TLS, when it serves HTTPS.
    tls: Option<Arc<tls::ListenerTls>>,
    tasks: Vec<JoinHandle<()>>,
}

/// Binds every listener and starts serving. Must run inside a multi-threaded tokio runtime.
pub async fn start(cfg: Config, demo_opts: DemoOptions) -> std::io::Result<Handle> {
    let (accept_stop, accept_rx) = watch::channel(false);
    let (proxy_stop, proxy_rx) = watch::channel(false);
    let mut tasks = Vec::new();
    // One TLS crypto provider (ring) for the process, before any TLS client is made: Pingora's
    // backend connector and redis-rs's `rediss://` connections both take the default.
    let _ = rustls::crypto::ring::default_provider().install_default();
    // The admin and demo listeners: the same deadlines, no cap, not counted.
    let small = Policy::new(&cfg);
    let demo = match &cfg.upstream {
        Some(_) => None,
        None => Some(start_demo(demo_opts, &small, &accept_rx, &mut tasks).await?),
    };
    let upstream_addr = match (&cfg.upstream, &demo) {
        (Some(u), _) => u.clone(),
        // Without an upstream the demo backend was started just above.
        (_, demo) => UpstreamUrl {
            tls: false,
            host: demo
                .as_ref()
                .map_or_else(String::new, |(a, _)| a.ip().to_string()),
            port: demo.as_ref().map_or(0, |(a, _)| a.port()),
        },
    };
    let (shared, downstream) = shared_state(cfg, &upstream_addr)?;
    let tls = match (&shared.cfg.server.tls_cert, &shared.cfg.server.tls_key) {
        (Some(cert), Some(key)) => Some(Arc::new(
            tls::ListenerTls::load(cert, key).map_err(std::io::Error::other)?,
        )),
        _ => None,
    };
    let policy = Policy {
        metrics: Some(downstream),
        tls: tls.clone(),
        ..small.clone()
    };
    let listeners = Listeners {
        accept: accept_rx.clone(),
        proxy: proxy_rx,
    };
    let proxy_addr = start_proxy(&shared, policy, &listeners, &mut tasks).await?;
    let admin_addr = start_admin(&shared, small, &mut tasks).await?;
    tasks.push(tokio::spawn(sweeper(
        shared.chats.registry().clone(),
        sweep_every(&shared.cfg),
        shared.cfg.limits.abandon_after.0,
        accept_rx,
    )));
    let scheme = match tls.is_some() {
        true => "https, h2 and http/1.1",
        false => "http/1.1",
    };
    info!("tether listening on {proxy_addr} ({scheme}; admin {admin_addr}) in front of {upstream_addr}");
    Ok(Handle {
        proxy_addr,
        admin_addr,
        demo,
        shared,
        accept_stop,
        proxy_stop,
        tls,
        tasks,
    })
}

/// The embedded demo backend, on a loopback port of its own (no upstream configured).
async fn start_demo(
    opts: DemoOptions,
    small: &Policy,
    accept_rx: &watch::Receiver<bool>,
    tasks: &mut Vec<JoinHandle<()>>,
) -> std::io::Result<(SocketAddr, Arc<Demo>)> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let app = Arc::new(Demo::new(opts));
    tasks.push(tokio::spawn(accept_loop(
        listener,
        app.clone(),
        small.clone(),
        accept_rx.clone(),
        accept_rx.clone(),
    )));
    Ok((addr, app))
}

/// The state every request shares: metrics, the registry and its eviction counts, the shared
/// journal when one is configured, the chats room, the backend client and the buffer budget.
/// Also returns the proxy listener's metric families.
fn shared_state(
    cfg: Config,
    upstream_addr: &UpstreamUrl,
) -> std::io::Result<(Arc<Shared>, DownstreamMetrics)> {
    let metrics = Metrics::new();
    let downstream = DownstreamMetrics::new(&metrics);
    metrics.seed_routes(
        cfg.routes
            .iter()
            .filter(|r| r.kind == RouteKind::Record || r.kind == RouteKind::Attach)
            .map(|r| r.path.as_str()),
    );
    let registry = Registry::new(cfg.recorder.retention.0, cfg.recorder.max_chats);
    let evicted = metrics.runs_evicted.clone();
    registry.on_evict(move |swept: Swept| {
        evicted.inc_by(EvictReason::Expired, swept.expired as u64);
        evicted.inc_by(EvictReason::Capacity, swept.capacity as u64);
    });
    let journal = match &cfg.journal {
        None => None,
        Some(j) => Some(
            crate::replica::Replica::start(
                j.clone(),
                cfg.recorder.window,
                cfg.recorder.retention.0,
                cfg.raw.as_ref().map(|r| r.cap),
                registry.clone(),
                metrics.clone(),
            )
            .map_err(|e| std::io::Error::other(format!("journal: {e}")))?,
        ),
    };
    let owner_limits = OwnerLimits::new(
        OwnerLimitSettings {
            max_active: cfg.limits.max_active_runs_per_owner,
            per_minute: cfg.limits.max_runs_per_owner_per_minute,
        },
        &metrics,
    );
    let chats =
        Chats::new(registry, cfg.subject.clone(), &cfg.secret, journal).with_limits(owner_limits);
    let ledger = Ledger::start(&cfg.accounting, &metrics)
        .map_err(|e| std::io::Error::other(format!("accounting: {e}")))?;
    let shared = Arc::new(Shared {
        upstream: Arc::new(Upstream::new(upstream_addr, cfg.upstream_opts.clone())?),
        chats,
        budget: Budget::with_gauge(
            cfg.limits.max_buffered_bytes,
            Arc::new(GaugeMeter(metrics.buffered_bytes.clone())),
        ),
        metrics,
        ledger: Arc::new(ledger),
        downstream: downstream.clone(),
        draining: Default::default(),
        producers: TaskTracker::new(),
        observers: TaskTracker::new(),
        stop: CancellationToken::new(),
        cors: crate::proxy::Cors::new(&cfg),
        cfg,
    });
    Ok((shared, downstream))
}

/// The proxy listener's stop signals: the drain's (`accept`: stop keeping connections alive)
/// and the listener's own (`proxy`: stop accepting).
struct Listeners {
    accept: watch::Receiver<bool>,
    proxy: watch::Receiver<bool>,
}

/// Binds the proxy listener and serves it: Pingora's proxy app (HTTP/2 options included) behind
/// tether's front for its own routes, under the connection cap. Returns its address.
async fn start_proxy(
    shared: &Arc<Shared>,
    policy: Policy,
    stops: &Listeners,
    tasks: &mut Vec<JoinHandle<()>>,
) -> std::io::Result<SocketAddr> {
    let listener = listen(shared.cfg.listen).await?;
    let proxy_addr = listener.local_addr()?;
    let pingora_conf = Arc::new(ServerConf::default());
    let mut proxy = pingora_proxy::http_proxy(&pingora_conf, Sidecar::new(shared.clone()));
    // An HTTP/2 connection with no stream open is closed after the keep-alive timeout, as an
    // idle HTTP/1.1 one is.
    let mut options = pingora_core::apps::HttpServerOptions::default();
    options.h2_idle_timeout = Some(shared.cfg.server.keepalive_timeout.0);
    proxy.server_options = Some(options);
    // Pingora's bounds on a received header list, and tether's on the streams one connection
    // may have open.
    let mut h2 = pingora_core::protocols::http::v2::server::default_h2_options();
    h2.max_concurrent_streams(shared.cfg.server.max_streams_per_connection);
    proxy.h2_options = Some(h2);
    let proxy = Arc::new(front::Front::new(
        Arc::new(proxy),
        Sidecar::new(shared.clone()),
    ));
    let max_connections = shared
        .cfg
        .server
        .max_connections
        .unwrap_or_else(descriptor_share);
    info!(
        "client connections: at most {max_connections} open at once, {} streams each over \
         HTTP/2; requests to the backend: at most {} at once",
        shared.cfg.server.max_streams_per_connection,
        shared.upstream.slots().max()
    );
    let policy = Policy {
        max_connections,
        ..policy
    };
    tasks.push(tokio::spawn(accept_loop(
        listener,
        proxy,
        policy,
        stops.proxy.clone(),
        stops.accept.clone(),
    )));
    Ok(proxy_addr)
}

/// Binds the admin listener and serves it; it stays up through a drain so `/readyz` can say so.
async fn start_admin(
    shared: &Arc<Shared>,
    small: Policy,
    tasks: &mut Vec<JoinHandle<()>>,
) -> std::io::Result<SocketAddr> {
    let listener = listen(shared.cfg.admin).await?;
    let admin_addr = listener.local_addr()?;
    let admin = Arc::new(Admin::new(shared.clone()));
    let (admin_stop_tx, admin_rx) = watch::channel(false);
    tasks.push(tokio::spawn(async move {
        let _keep = admin_stop_tx;
        accept_loop(listener, admin, small, admin_rx.clone(), admin_rx).await
    }));
    Ok(admin_addr)
}

/// How often the sweeper runs: a quarter of the retention (100 ms to 5 s), and a quarter of
/// `abandon_after` when that is set.
fn sweep_every(cfg: &Config) -> Duration {
    let abandon = cfg.limits.abandon_after.0;
    let every =
        (cfg.recorder.retention.0 / 4).clamp(Duration::from_millis(100), Duration::from_secs(5));
    match abandon.is_zero() {
        true => every,
        false => every.min((abandon / 4).max(Duration::from_millis(10))),
    }
}

/// Every `every`: drops expired runs and stops abandoned ones (when `abandon` is set).
async fn sweeper(
    registry: Arc<Registry>,
    every: Duration,
    abandon: Duration,
    mut stop: watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(every);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.changed() => return,
        }
        registry.sweep(Instant::now());
        if !abandon.is_zero() {
            stop_abandoned(&registry, abandon);
        }
    }
}

/// Stops every producing run that no client has watched for `after`.
fn stop_abandoned(registry: &Registry, after: Duration) {
    for run in registry.abandoned(after) {
        info!(
            "run {}: no observer for {after:?}; stopping it as abandoned",
            run.id()
        );
        run.request_stop(EndReason::Abandoned);
    }
}

/// Binds a listener with a deep accept queue (4,096, capped by `net.core.somaxconn`): std's
/// default of 128 drops the SYNs of a reconnect storm into seconds-long retries.
async fn listen(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let sock = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    sock.set_reuseaddr(true)?;
    sock.bind(addr)?;
    sock.listen(4096)
}

impl Handle {
    /// Reads the listener's certificate and key again (main calls it on SIGHUP): new
    /// handshakes get the new pair, open connections and their streams go on. Without HTTPS,
    /// or when a file is bad (the pair in use is kept), says why.
    pub fn reload_tls(&self) -> Result<(), String> {
        match &self.tls {
            Some(t) => t.reload(),
            None => Err("the listener serves plain HTTP (no --tls-cert)".into()),
        }
    }

    /// The listener's TLS, when it serves HTTPS (for a task that reloads it).
    pub fn tls(&self) -> Option<Arc<tls::ListenerTls>> {
        self.tls.clone()
    }

    /// Drains: refuses new record requests, lets producers and observers run until every run
    /// has ended or `timeout` passes, then stops what is left and closes the listeners. Returns
    /// whether every run ended in time.
    ///
    /// Without a shared journal the proxy listener stays open until then, so a client that
    /// reconnects mid-turn can still attach to a run that is finishing here; with one it closes
    /// at once, since every replica serves every run and a closed port sends a balancer to
    /// another replica.
    pub async fn drain(self, timeout: Duration) -> bool {
        let shared = self.shared.clone();
        shared.draining.store(true, Ordering::Relaxed);
        self.accept_stop.send_replace(true);
        if shared.chats.journal().is_some() {
            self.proxy_stop.send_replace(true);
        }
        info!(
            "draining: {} runs still producing",
            shared.chats.registry().producing().len()
        );
        // No producer starts after this: record requests are refused while draining.
        shared.producers.close();
        let all_ended = tokio::time::timeout(timeout, shared.producers.wait())
            .await
            .is_ok();
        if !all_ended {
            let left = shared.chats.registry().producing();
            warn!("drain timeout: stopping {} runs", left.len());
            for r in &left {
                r.request_stop(EndReason::Shutdown);
            }
            // Stopped producers end their runs within a read; wait briefly for that.
            let _ = tokio::time::timeout(Duration::from_secs(2), shared.producers.wait()).await;
        }
        // Observers of ended runs are writing their STREAM_END; give them a moment to finish
        // before the hard stop closes what is left.
        shared.observers.close();
        let _ = tokio::time::timeout(Duration::from_secs(1), shared.observers.wait()).await;
        // Every run has ended and written its record: the webhook and the trace exporter get
        // a moment to send theirs.
        shared.ledger.shutdown(Duration::from_secs(5)).await;
        self.proxy_stop.send_replace(true);
        self.shared.stop.cancel();
        for t in self.tasks {
            t.abort();
        }
        info!("drained");
        all_ended
    }

    /// Stops everything at once (tests).
    pub fn abort(self) {
        self.accept_stop.send_replace(true);
        self.proxy_stop.send_replace(true);
        self.shared.stop.cancel();
        for t in self.tasks {
            t.abort();
        }
    }
}
