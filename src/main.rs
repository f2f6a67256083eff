//! The `tether` binary: flags → configuration → sidecar; drains on SIGTERM.

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use tether::config::{Config, Flags, LogFormat};
use tether::server::demo::DemoOptions;

/// Exit status for an invalid configuration (EX_USAGE).
const EXIT_CONFIG: u8 = 64;

fn init_logging(format: LogFormat) {
    let env = env_logger::Env::default().default_filter_or("info");
    let mut b = env_logger::Builder::from_env(env);
    if format == LogFormat::Json {
        b.format(|buf, rec| {
            // A run record (target `tether::run`) is its own JSON object on the line.
            let line = tether::accounting::record::json_log_line(
                &humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string(),
                rec.level().as_str(),
                rec.target(),
                &rec.args().to_string(),
            );
            writeln!(buf, "{line}")
        });
    }
    // Pingora's records at the level their cause deserves (src/logging.rs).
    if let Err(e) = tether::logging::install(b.build()) {
        eprintln!("tether: cannot set up logging: {e}");
    }
}

/// Raises the open-files soft limit to the hard limit: every stream holds two sockets (the
/// client's and the backend's), and a default soft limit of 1,024 would refuse turns past about
/// 500 streams (the upstream connect fails with "failed to create socket": a 502).
fn raise_open_files_limit() {
    use rlimit::Resource;
    let Ok((soft, hard)) = rlimit::getrlimit(Resource::NOFILE) else {
        return;
    };
    match rlimit::increase_nofile_limit(hard) {
        Ok(now) if now > soft => log::info!(
            "open files: soft limit raised from {soft} to {now} (hard {hard}); each stream holds two"
        ),
        Ok(now) => log::info!("open files: soft limit {now} (hard {hard}); each stream holds two"),
        Err(e) => log::warn!("open files: soft limit {soft} (hard {hard}), not raised: {e}"),
    }
}

/// Gives the memory of evicted runs, ended runs and dropped events back to the system.
///
/// glibc's malloc keeps what the process freed in its arenas for reuse and returns only the top
/// of each heap, so after a burst of runs is dropped RSS stays near the peak: in the load tool's
/// soak (4 rounds of 500 concurrent runs), 86 to 101 MiB after each round's retention with
/// nothing recorded, 7.5 MiB before the load. `malloc_trim(0)` walks the arenas and returns their
/// free pages (0.1 to 1 ms a call there); with it the same soak ends rounds at 34 to 54 MiB, at
/// no measurable CPU. It runs once a second at most, and only after a registry sweep or a
/// capacity eviction dropped runs, a run ended (its decoder's buffers went) or an event was
/// dropped over `max_event_bytes` or the buffer budget, on a blocking thread: an event dropped
/// over the budget frees a buffer that malloc would otherwise keep resident (30 runs each holding
/// an unfinished 7 MiB event under a 64 MiB budget: +98 MiB of RSS before, +68 MiB with it).
mod heap {
    use std::time::Duration;

    use tether::metrics::{DropReason, EvictReason, Metrics, RunOutcome};

    /// How often the eviction counters are looked at.
    const EVERY: Duration = Duration::from_secs(1);

    /// Returns whether glibc gave memory back.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    fn trim() -> bool {
        // SAFETY: malloc_trim takes no pointers and has no preconditions; glibc locks each arena
        // while it releases that arena's free pages (MT-Safe in malloc_trim(3)). The lib forbids
        // unsafe code and no maintained crate wraps this one call, so it lives in the binary.
        unsafe { libc::malloc_trim(0) == 1 }
    }

    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    fn trim() -> bool {
        false
    }

    /// Trims after every look that finds runs evicted or ended, or big events dropped, since
    /// the last.
    pub async fn trim_after_evictions(metrics: Metrics) {
        let evicted = || {
            let ended: u64 = RunOutcome::ALL
                .iter()
                .map(|o| metrics.runs_finished.get(*o).get())
                .sum();
            metrics.runs_evicted.get(EvictReason::Expired).get()
                + metrics.runs_evicted.get(EvictReason::Capacity).get()
                + metrics.events_dropped.get(DropReason::OverBudget).get()
                + metrics.events_dropped.get(DropReason::Oversized).get()
                + ended
        };
        let mut seen = evicted();
        let mut tick = tokio::time::interval(EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            tick.tick().await;
            let now = evicted();
            if now == seen {
                continue;
            }
            seen = now;
            let t = tokio::time::Instant::now();
            let released = tokio::task::spawn_blocking(trim).await.unwrap_or(false);
            log::debug!(
                "malloc_trim after evictions: released {released} in {:?}",
                t.elapsed()
            );
        }
    }
}

fn banner(h: &tether::server::Handle) {
    let p = h.proxy_addr;
    let web = if h.tls().is_some() { "https" } else { "http" };
    println!(
        "tether on {web}://{p}  (admin http://{}/metrics)",
        h.admin_addr
    );
    let serve_client = h.shared.cfg.serve_client;
    if let Some((demo, _)) = &h.demo {
        println!("no --upstream given: serving the embedded demo backend on http://{demo}\n");
        if serve_client {
            println!("# the demo chat in a browser (reload it mid-turn, or open a second tab: the turn resumes):");
            println!("{web}://{p}/\n");
        }
        println!("# a turn, recorded as it streams (protocol 1):");
        println!("curl -N {web}://{p}/chat -d '{{\"chat_id\":\"c1\",\"protocol\":1}}'\n");
        println!("# kill the client mid-turn (the backend keeps going):");
        println!("timeout 1 curl -N '{web}://{p}/chat?pace_ms=200' -d '{{\"chat_id\":\"c2\",\"protocol\":1}}'\n");
        println!("# recover: snapshot of what was missed, the live tail, then STREAM_END:");
        println!("curl -N {web}://{p}/chat/live -d '{{\"chat_id\":\"c2\",\"protocol\":1}}'\n");
    }
    if serve_client {
        println!(
            "browser client: import {{ TetherClient }} from \"{web}://{p}{}\"",
            tether::proxy::CLIENT_PATH
        );
    }
}

/// On each SIGHUP, reads the listener's certificate and key again (the reload logs how it went).
/// The handler is registered when this is called, not when the future is first polled.
fn reload_on_hangup(
    tls: Option<std::sync::Arc<tether::server::tls::ListenerTls>>,
) -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    let hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup());
    async move {
        #[cfg(unix)]
        {
            let Ok(mut hup) = hup else {
                return;
            };
            while hup.recv().await.is_some() {
                match &tls {
                    Some(t) => {
                        let _ = t.reload();
                    }
                    None => {
                        log::info!("SIGHUP: nothing to reload (the listener serves plain HTTP)")
                    }
                }
            }
        }
        #[cfg(not(unix))]
        let _ = tls;
    }
}

/// Resolves on SIGTERM or SIGINT; the handlers are registered when this is called.
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    let signals = {
        use tokio::signal::unix::{signal, SignalKind};
        (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        )
    };
    async move {
        #[cfg(unix)]
        {
            let (Ok(mut term), Ok(mut int)) = signals else {
                return std::future::pending().await;
            };
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

fn main() -> ExitCode {
    let flags = match Flags::try_parse() {
        Ok(f) => f,
        // --help and --version print and succeed; a bad flag is a configuration error.
        Err(e) if !e.use_stderr() => {
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!(
                "tether: invalid configuration: {}",
                e.render().to_string().trim_end()
            );
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    let cfg = match checked_config(&flags) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("tether: {e}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    init_logging(flags.log_format);
    raise_open_files_limit();
    let rt = match tether::server::runtime::builder(cfg.server.threads)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("tether: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let demo = DemoOptions {
        tokens: flags.demo_tokens,
        pace: flags.demo_pace,
    };
    let code = rt.block_on(serve(cfg, demo));
    // Connection tasks were told to stop; do not wait long for stragglers.
    rt.shutdown_timeout(Duration::from_secs(1));
    code
}

/// The configuration, with everything that can be checked before serving checked: the flags
/// and file, the backend's name (looked up now and again later, see `backend::dns`), and the
/// certificate and key files of an HTTPS backend, a TLS journal and the listener. The error says
/// which key or file is wrong.
fn checked_config(flags: &Flags) -> Result<Config, String> {
    let cfg = Config::load(flags).map_err(|e| e.to_string())?;
    cfg.resolve_upstream(flags).map_err(|e| e.to_string())?;
    tether::backend::tls::BackendTls::load(&cfg.upstream_opts)
        .map_err(|e| format!("[upstream]: {e}"))?;
    if let Some(tls) = cfg.journal.as_ref().and_then(|j| j.tls.as_ref()) {
        use tether::backend::tls::{certificates, private_key};
        let checked = tls
            .ca
            .as_deref()
            .map_or(Ok(()), |ca| certificates(ca).map(drop));
        checked
            .and_then(|()| match &tls.client {
                Some((cert, key)) => certificates(cert).and_then(|_| private_key(key)).map(drop),
                None => Ok(()),
            })
            .map_err(|e| format!("[journal]: {e}"))?;
    }
    if let (Some(cert), Some(key)) = (&cfg.server.tls_cert, &cfg.server.tls_key) {
        tether::server::tls::ListenerTls::load(cert, key)
            .map_err(|e| format!("[server] tls_cert/tls_key: {e}"))?;
    }
    Ok(cfg)
}

/// Serves until SIGTERM or SIGINT, then drains for up to `[server] drain_timeout`.
async fn serve(cfg: Config, demo: DemoOptions) -> ExitCode {
    let drain = cfg.server.drain_timeout.0;
    let handle = match tether::server::start(cfg, demo).await {
        Ok(h) => h,
        Err(e) => {
            eprintln!("tether: cannot listen: {e}");
            return ExitCode::FAILURE;
        }
    };
    // The signal handlers are in place before the banner tells the world tether is up: a
    // SIGHUP or SIGTERM sent as soon as it is read must not meet the default action (exit).
    let hangup = reload_on_hangup(handle.tls());
    let shutdown = shutdown_signal();
    banner(&handle);
    tokio::spawn(heap::trim_after_evictions(handle.shared.metrics.clone()));
    tokio::spawn(hangup);
    shutdown.await;
    log::info!("signal received: draining for up to {:?}", drain);
    handle.drain(drain).await;
    ExitCode::SUCCESS
}
