//! A tether binary replica of the journal tests: `target/debug/tether` started with a
//! configuration file of its own, ready once it prints its address, killed (SIGKILL, by its PID)
//! when dropped, as a crashed replica is.

use crate::journal_table;
use crate::support::*;

/// A tether binary replica, killed (SIGKILL, by its PID) when dropped.
pub(crate) struct Binary {
    child: std::process::Child,
    pub(crate) addr: std::net::SocketAddr,
    conf: std::path::PathBuf,
}

impl Binary {
    /// Starts `target/debug/tether` in front of `upstream` as replica `id`, journaling to `redis`
    /// with a one-second lease; ready once it prints its address.
    pub(crate) fn start(
        upstream: std::net::SocketAddr,
        redis: &impl JournalRedis,
        id: &str,
    ) -> Binary {
        use std::io::BufRead;
        let conf = std::env::temp_dir().join(format!(
            "tether-journal-{}-{}-{id}.toml",
            std::process::id(),
            redis.first_port()
        ));
        let toml = format!(
            "[server]\nlisten = \"127.0.0.1:0\"\nadmin = \"127.0.0.1:0\"\nupstream = \"{upstream}\"\n{}",
            journal_table(redis, id)
        );
        std::fs::write(&conf, toml).unwrap();
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_tether"))
            .arg("--config")
            .arg(&conf)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
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

    /// SIGKILL by PID, and reaps the process.
    pub(crate) fn kill(&mut self) {
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
