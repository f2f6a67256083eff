//! A `redis-server` of a test's own: a free port, no persistence (`--save '' --appendonly no`),
//! ready once it answers `PING`, stopped by its PID when dropped. It can be killed (SIGKILL)
//! and restarted empty on the same port mid-test.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A running redis-server.
pub struct RedisServer {
    pub port: u16,
    child: Option<Child>,
}

fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

fn pong(port: u16) -> bool {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
    let mut buf = [0u8; 7];
    s.write_all(b"PING\r\n").is_ok() && s.read_exact(&mut buf).is_ok() && &buf == b"+PONG\r\n"
}

impl RedisServer {
    /// Starts redis-server on a free port and waits until it answers.
    pub fn start() -> Self {
        let mut r = RedisServer {
            port: free_port(),
            child: None,
        };
        r.restart();
        r
    }

    /// `redis://127.0.0.1:<port>`
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Starts the server (again, empty) on its port and waits until it answers `PING`.
    pub fn restart(&mut self) {
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server is installed (scripts/test.sh installs it)");
        self.child = Some(child);
        // redis-server has no readiness signal but answering: poll PING, for 10 s at most.
        let mut tries = 0;
        while !pong(self.port) {
            tries += 1;
            assert!(tries < 1000, "redis-server did not start");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Runs one command through the `redis` crate's blocking client (a test's look inside).
    pub fn query<T: ::redis::FromRedisValue>(&self, args: &[&str]) -> T {
        let client = ::redis::Client::open(self.url()).unwrap();
        let mut conn = client.get_connection().unwrap();
        let mut cmd = ::redis::cmd(args[0]);
        for a in &args[1..] {
            cmd.arg(*a);
        }
        cmd.query(&mut conn).unwrap()
    }

    /// Kills the server (SIGKILL, by its PID) and waits for it to exit.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}
