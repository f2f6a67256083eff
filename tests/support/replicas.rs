//! Journal replicas of a test: the `[journal]` table naming a test-owned Redis, a replica started
//! in-process, and a replica as the `target/debug/tether` binary with a configuration file of its
//! own, ready once it prints its address, killed (SIGKILL, by its PID) when dropped, as a crashed
//! replica is. Shared by every test crate that runs replicas on the journal.

use super::sidecar::split_server;
use super::{sidecar, JournalRedis, Sidecar};

/// The `[journal]` table of replica `id` on `redis`: a one-second lease, 100 ms polls.
pub fn journal_table(redis: &impl JournalRedis, id: &str) -> String {
    format!(
        "[journal]\n{}replica_id = \"{id}\"\nlease = \"1s\"\npoll = \"100ms\"\n",
        redis.journal_toml()
    )
}

/// A replica named `id` in front of `upstream`, journaling to `redis`, in-process.
pub async fn replica(
    upstream: std::net::SocketAddr,
    redis: &impl JournalRedis,
    id: &str,
    extra: &str,
) -> Sidecar {
    let toml = format!("{}{extra}", journal_table(redis, id));
    sidecar(upstream, &toml).await
}

/// A tether binary replica, killed (SIGKILL, by its PID) when dropped.
pub struct Binary {
    child: std::process::Child,
    pub addr: std::net::SocketAddr,
    conf: std::path::PathBuf,
}

impl Binary {
    /// Starts `target/debug/tether` in front of `upstream` as replica `id`, journaling to `redis`
    /// with a one-second lease; ready once it prints its address.
    pub fn start(upstream: std::net::SocketAddr, redis: &impl JournalRedis, id: &str) -> Binary {
        Binary::start_with(upstream, redis, id, "")
    }

    /// [`Binary::start`] with extra TOML after the journal table (`[auth]` etc.; lines of a
    /// leading `[server]` table join the harness's own, as for [`sidecar`]).
    pub fn start_with(
        upstream: std::net::SocketAddr,
        redis: &impl JournalRedis,
        id: &str,
        extra: &str,
    ) -> Binary {
        use std::io::BufRead;
        let conf = std::env::temp_dir().join(format!(
            "tether-journal-{}-{}-{id}.toml",
            std::process::id(),
            redis.first_port()
        ));
        let (server, rest) = split_server(extra);
        let toml = format!(
            "[server]\nlisten = \"127.0.0.1:0\"\nadmin = \"127.0.0.1:0\"\nupstream = \"{upstream}\"\n{server}\n{}{rest}",
            journal_table(redis, id)
        );
        std::fs::write(&conf, toml).unwrap();
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_tether"))
            .arg("--config")
            .arg(&conf)
            .stdout(std::process::Stdio::piped())
            .stderr(match std::env::var_os("TETHER_TEST_BINARY_LOG") {
                // A debugging aid: the replica's log (RUST_LOG applies) appended to that file.
                Some(path) => std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .unwrap()
                    .into(),
                None => std::process::Stdio::null(),
            })
            .spawn()
            .unwrap();
        let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        let addr = line
            .split("http://")
            .nth(1)
            .and_then(|s| s.split_whitespace().next())
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("no address in {line:?}"));
        Binary { child, addr, conf }
    }

    /// The process's PID (to pause it with SIGSTOP and resume it with SIGCONT).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILL by PID, and reaps the process.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Binary {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_file(&self.conf);
    }
}
