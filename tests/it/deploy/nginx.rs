//! Debian's real nginx (`/usr/sbin/nginx`) run by a test with the shipped `deploy/nginx.conf`:
//! the file's two upstream servers replaced by the test's replicas and its listen port by a free
//! loopback port, plus only what running unprivileged in the foreground needs (no daemon, one
//! process, the pid file, error log and temp files in a directory of its own, no access log).
//! Everything else, the round-robin upstream without affinity first, is the file as shipped.
//! Ready once its pid file names it and its port accepts; stopped by its PID when dropped.

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::deploy::read;
use crate::support::LIMIT;

/// Debian's nginx binary (scripts/test.sh installs the `nginx` package).
const NGINX: &str = "/usr/sbin/nginx";

/// The shipped file's upstream servers (the compose replicas), replaced by the test's.
const SERVERS: [&str; 2] = ["server tether-a:8080;", "server tether-b:8080;"];

/// The shipped file's listen line, replaced by a free loopback port.
const LISTEN: &str = "listen 8080;";

/// Upstream directives that pin a client to a replica or pick other than round-robin.
const NOT_ROUND_ROBIN: [&str; 5] = ["ip_hash", "hash", "sticky", "least_conn", "random"];

/// The directive names of the `upstream tether { … }` block of `conf`.
pub(crate) fn upstream_directives(conf: &str) -> Vec<String> {
    conf.lines()
        .map(str::trim)
        .skip_while(|l| *l != "upstream tether {")
        .skip(1)
        .take_while(|l| *l != "}")
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| l.split_whitespace().next())
        .map(|d| d.trim_end_matches(';').to_string())
        .collect()
}

/// `shipped` (deploy/nginx.conf) balancing over `replicas`, listening on 127.0.0.1:`port`, its
/// files under `dir`. Panics when the file no longer has the lines the test replaces, or when
/// its upstream is not plain round-robin.
pub(crate) fn derive(shipped: &str, replicas: [SocketAddr; 2], port: u16, dir: &Path) -> String {
    let upstream = upstream_directives(shipped);
    assert!(
        upstream.iter().any(|d| d == "server"),
        "deploy/nginx.conf: no `upstream tether` block with servers"
    );
    for d in NOT_ROUND_ROBIN {
        assert!(
            !upstream.iter().any(|u| u == d),
            "deploy/nginx.conf: `{d}` in the upstream; the replicas need plain round-robin"
        );
    }
    let dir = dir.display();
    let mut out = format!(
        "daemon off;\nmaster_process off;\npid {dir}/nginx.pid;\nerror_log {dir}/error.log warn;\n"
    );
    let mut replaced = [0; 3];
    for line in shipped.lines() {
        let t = line.trim();
        let indent = &line[..line.len() - line.trim_start().len()];
        if let Some(i) = SERVERS.iter().position(|s| *s == t) {
            out.push_str(&format!("{indent}server {};\n", replicas[i]));
            replaced[i] += 1;
        } else if t == LISTEN {
            out.push_str(&format!("{indent}listen 127.0.0.1:{port};\n"));
            replaced[2] += 1;
        } else {
            out.push_str(line);
            out.push('\n');
        }
        if t == "http {" {
            out.push_str(&format!("{indent}    access_log off;\n"));
            for temp in ["client_body", "proxy", "fastcgi", "uwsgi", "scgi"] {
                out.push_str(&format!("{indent}    {temp}_temp_path {dir}/{temp};\n"));
            }
        }
    }
    assert_eq!(
        replaced,
        [1, 1, 1],
        "deploy/nginx.conf: `{}`, `{}` and `{LISTEN}` once each",
        SERVERS[0],
        SERVERS[1]
    );
    out
}

/// A running nginx, killed (by its PID) when dropped.
pub(crate) struct Nginx {
    /// Where it listens.
    pub(crate) addr: SocketAddr,
    child: Child,
    dir: PathBuf,
}

impl Nginx {
    /// Starts nginx with deploy/nginx.conf over `replicas` on a free port and waits until it
    /// accepts. The port is found by binding 127.0.0.1:0 and releasing it; when another process
    /// takes it first, nginx exits and the next free port is tried.
    pub(crate) async fn start(replicas: [SocketAddr; 2]) -> Nginx {
        let shipped = read("deploy/nginx.conf");
        let dir = std::env::temp_dir().join(format!(
            "tether-nginx-{}-{}",
            std::process::id(),
            replicas[0].port()
        ));
        for _ in 0..5 {
            // (Again after a failed try: dropping that nginx removed the directory.)
            std::fs::create_dir_all(&dir).expect("a temp dir for nginx");
            let port = TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .expect("a free port")
                .port();
            let conf = dir.join("nginx.conf");
            std::fs::write(&conf, derive(&shipped, replicas, port, &dir)).expect("nginx.conf");
            let _ = std::fs::remove_file(dir.join("nginx.pid"));
            let child = Command::new(NGINX)
                .arg("-p")
                .arg(&dir)
                .arg("-e")
                .arg(dir.join("error.log"))
                .arg("-c")
                .arg(&conf)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("nginx is installed at /usr/sbin/nginx (scripts/test.sh installs it)");
            let mut n = Nginx {
                addr: SocketAddr::from(([127, 0, 0, 1], port)),
                child,
                dir: dir.clone(),
            };
            if n.ready().await {
                return n;
            }
            let log = n.log();
            assert!(
                log.contains("Address already in use"),
                "nginx did not start:\n{log}"
            );
        }
        panic!("nginx found no free port in five tries");
    }

    /// Waits until nginx has written its pid file (after binding its port) and accepts a
    /// connection; false when it exits first.
    async fn ready(&mut self) -> bool {
        let pid_file = self.dir.join("nginx.pid");
        let started = tokio::time::Instant::now();
        loop {
            if self.child.try_wait().expect("nginx's status").is_some() {
                return false;
            }
            let written = std::fs::read_to_string(&pid_file)
                .is_ok_and(|p| p.trim() == self.child.id().to_string());
            if written && tokio::net::TcpStream::connect(self.addr).await.is_ok() {
                return true;
            }
            assert!(
                started.elapsed() < LIMIT,
                "nginx did not start:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Its error log so far.
    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("error.log")).unwrap_or_default()
    }

    /// Kills it by its PID and reaps it.
    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
