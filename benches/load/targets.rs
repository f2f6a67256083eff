//! The hops under test, as child processes: tether (the release binary) and nginx (Debian's
//! package, `proxy_buffering off`), with their CPU seconds and peak RSS read from /proc.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

/// A hop between the clients and the producer.
pub struct Hop {
    pub addr: SocketAddr,
    pub admin: Option<SocketAddr>,
    child: Child,
    dir: Option<PathBuf>,
    /// The child has exited and was reaped (its pid may belong to another process now).
    reaped: bool,
}

impl Drop for Hop {
    fn drop(&mut self) {
        if self.reaped {
            if let Some(d) = &self.dir {
                let _ = std::fs::remove_dir_all(d);
            }
            return;
        }
        // SIGTERM, not SIGKILL: nginx's master then stops its workers instead of orphaning them.
        // SAFETY: signalling our own child process.
        unsafe {
            libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM);
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while std::time::Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(d) = &self.dir {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

/// The pids of a process and its direct children (nginx's workers).
fn family(pid: u32) -> Vec<u32> {
    let mut out = vec![pid];
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for e in dir.flatten() {
            let Ok(p) = e.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else {
                continue;
            };
            let fields: Vec<&str> = stat
                .rsplit_once(')')
                .map_or("", |(_, r)| r)
                .split_whitespace()
                .collect();
            if fields.get(1).and_then(|f| f.parse::<u32>().ok()) == Some(pid) {
                out.push(p);
            }
        }
    }
    out
}

impl Hop {
    /// Stops the hop with SIGTERM and waits up to `within` for it to exit (a hop under a
    /// profiler writes its figures then); killed after that.
    pub fn stop(mut self, within: std::time::Duration) {
        // SAFETY: signalling our own child process, not reaped yet.
        unsafe {
            libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM);
        }
        let deadline = std::time::Instant::now() + within;
        while std::time::Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                self.reaped = true;
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// The hop's (main) process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Scheduler totals of the hop's processes (all threads) so far.
    pub fn sched(&self) -> crate::sched::Sample {
        crate::sched::of(&family(self.child.id()))
    }

    /// User plus system CPU seconds of the hop's processes so far.
    pub fn cpu_seconds(&self) -> f64 {
        let tick = 100.0; // USER_HZ on Linux
        family(self.child.id())
            .iter()
            .filter_map(|p| std::fs::read_to_string(format!("/proc/{p}/stat")).ok())
            .map(|stat| {
                let f: Vec<&str> = stat
                    .rsplit_once(')')
                    .map_or("", |(_, r)| r)
                    .split_whitespace()
                    .collect();
                let ut: f64 = f.get(11).and_then(|v| v.parse().ok()).unwrap_or(0.0);
                let st: f64 = f.get(12).and_then(|v| v.parse().ok()).unwrap_or(0.0);
                (ut + st) / tick
            })
            .sum()
    }

    /// Peak resident memory of the hop's processes, in MiB (VmHWM, summed over processes).
    pub fn peak_rss_mib(&self) -> f64 {
        family(self.child.id())
            .iter()
            .filter_map(|p| std::fs::read_to_string(format!("/proc/{p}/status")).ok())
            .filter_map(|s| {
                s.lines()
                    .find(|l| l.starts_with("VmHWM:"))
                    .and_then(|l| l.split_whitespace().nth(1))
                    .and_then(|v| v.parse::<f64>().ok())
            })
            .sum::<f64>()
            / 1024.0
    }
}

/// Starts the tether binary in front of `upstream`.
pub fn tether(bin: &str, upstream: SocketAddr, extra: &[&str]) -> Hop {
    tether_url(bin, &upstream.to_string(), extra)
}

/// Starts the tether binary in front of the backend `upstream` names (`host:port`, or a URL
/// such as `https://localhost:8443`).
pub fn tether_url(bin: &str, upstream: &str, extra: &[&str]) -> Hop {
    tether_wrapped(&[], bin, upstream, extra)
}

/// `bin` run under the command line `prefix` (a profiler; empty: `bin` itself).
fn command(prefix: &[String], bin: &str) -> Command {
    match prefix.split_first() {
        Some((program, args)) => {
            let mut c = Command::new(program);
            c.args(args).arg(bin);
            c
        }
        None => Command::new(bin),
    }
}

/// Starts the tether binary under the command line `prefix` (a profiler such as
/// `valgrind --tool=callgrind`; empty: the binary itself) in front of `upstream`.
pub fn tether_wrapped(prefix: &[String], bin: &str, upstream: &str, extra: &[&str]) -> Hop {
    let mut cmd = command(prefix, bin);
    let mut child = cmd
        .args([
            "--listen",
            "127.0.0.1:0",
            "--admin",
            "127.0.0.1:0",
            "--upstream",
            upstream,
            // The default caps (half the open-files limit less 64, each) refuse streams past
            // them with 503: under a hard limit of 20,000 descriptors that is 9,968 client
            // connections and 9,968 backend requests, 32 short of the 10,000-run phase. The
            // bench measures the wait for a free descriptor instead, as before the caps existed.
            "--max-connections",
            "1000000",
            "--upstream-max-requests",
            "1000000",
        ])
        .args(extra)
        .args(
            std::env::var("LOAD_TETHER_ARGS")
                .unwrap_or_default()
                .split_whitespace(),
        )
        .env("RUST_LOG", "warn")
        // `LOAD_TETHER_ENV="K=V K2=V2"`: environment for tether only (allocator experiments such
        // as MALLOC_ARENA_MAX=2), so the tool and cargo do not get it too.
        .envs(
            std::env::var("LOAD_TETHER_ENV")
                .unwrap_or_default()
                .split_whitespace()
                .filter_map(|kv| kv.split_once('=')),
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start tether");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("banner");
    // `tether on http://A  (admin http://B/metrics)`, or `https://A` with --tls-cert.
    let mut urls = line.split("://").skip(1).map(|s| {
        s.split(|c: char| c.is_whitespace() || c == '/' || c == ')')
            .next()
            .and_then(|a| a.parse::<SocketAddr>().ok())
            .expect("address in the banner")
    });
    let addr = urls.next().expect("proxy address");
    let admin = urls.next();
    Hop {
        addr,
        admin,
        child,
        dir: None,
        reaped: false,
    }
}

/// Starts nginx in front of `upstream` with a worker per core (`worker_processes auto`), or
/// `None` when it is not installed.
pub fn nginx(upstream: SocketAddr) -> Option<Hop> {
    nginx_with(upstream, "auto", &[])
}

/// Starts nginx in front of `upstream` with one worker process (`worker_processes 1`: one
/// event loop, as the CPU target compares against), or `None` when it is not installed.
pub fn nginx_one_worker(upstream: SocketAddr) -> Option<Hop> {
    nginx_with(upstream, "1", &[])
}

/// Starts nginx as one process (`master_process off`: the master is the worker) under the
/// command line `prefix` (a profiler), or `None` when it is not installed.
pub fn nginx_wrapped(upstream: SocketAddr, prefix: &[String]) -> Option<Hop> {
    nginx_with(upstream, "1", prefix)
}

fn nginx_with(upstream: SocketAddr, workers: &str, prefix: &[String]) -> Option<Hop> {
    let bin = ["/usr/sbin/nginx", "/usr/bin/nginx"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .ok()?
        .local_addr()
        .ok()?
        .port();
    let dir = std::env::temp_dir().join(format!("tether-load-nginx-{}-{port}", std::process::id()));
    std::fs::create_dir_all(&dir).ok()?;
    let d = dir.display();
    let master = if prefix.is_empty() {
        ""
    } else {
        "master_process off;\n"
    };
    let conf = format!(
        "{master}worker_processes {workers};\ndaemon off;\nerror_log {d}/error.log warn;\npid {d}/nginx.pid;\nworker_rlimit_nofile 65536;\n\
         events {{ worker_connections 32768; }}\n\
         http {{\n  access_log off;\n  client_body_temp_path {d}/body;\n  proxy_temp_path {d}/proxy;\n  fastcgi_temp_path {d}/fcgi;\n  uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n\
           upstream producer {{ server {upstream}; keepalive 1024; }}\n\
           server {{\n    listen 127.0.0.1:{port} backlog=16384;\n    location / {{\n      proxy_pass http://producer;\n      proxy_http_version 1.1;\n      proxy_set_header Connection \"\";\n      proxy_buffering off;\n      proxy_request_buffering off;\n      proxy_read_timeout 1h;\n    }}\n  }}\n}}\n"
    );
    std::fs::write(dir.join("nginx.conf"), conf).ok()?;
    let mut cmd = command(prefix, bin);
    let child = cmd
        .args([
            "-c",
            &dir.join("nginx.conf").display().to_string(),
            "-p",
            &d.to_string(),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .ok()?;
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().ok()?;
    // Ready once it accepts (a profiled nginx starts slowly).
    let tries = if prefix.is_empty() { 200 } else { 3000 };
    for _ in 0..tries {
        if std::net::TcpStream::connect(addr).is_ok() {
            return Some(Hop {
                addr,
                admin: None,
                child,
                dir: Some(dir),
                reaped: false,
            });
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    None
}
