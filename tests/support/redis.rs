//! A `redis-server` of a test's own: a free port, no persistence (`--save '' --appendonly no`),
//! ready once it answers `PING`, stopped by its PID when dropped. It can be killed (SIGKILL)
//! and restarted empty on the same port mid-test. A Redis Cluster of a test's own: three such
//! servers as masters with the slots split evenly, ready once every node reports
//! `cluster_state:ok`. [`JournalRedis`] lets a test run on either.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A running redis-server.
pub struct RedisServer {
    pub port: u16,
    child: Option<Child>,
    /// Arguments besides the port, the address and no persistence.
    args: Vec<String>,
}

/// A port free now on 127.0.0.1.
pub fn free_port() -> u16 {
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
        Self::start_on(|| (free_port(), Vec::new()))
    }

    /// Starts redis-server on the port and with the extra arguments `pick` gives, and waits
    /// until it answers. A port is free when it is picked, but another process can take it
    /// before redis-server binds it (redis-server then exits): `pick` is asked again, up to five
    /// times.
    pub fn start_on(mut pick: impl FnMut() -> (u16, Vec<String>)) -> Self {
        let mut why = String::new();
        for _ in 0..5 {
            let (port, args) = pick();
            let mut r = RedisServer {
                port,
                child: None,
                args,
            };
            match r.launch() {
                Ok(()) => return r,
                Err(e) => why = e,
            }
        }
        panic!("redis-server did not start: {why}");
    }

    /// `redis://127.0.0.1:<port>`
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Starts the server (again, empty) on its port and waits until it answers `PING`.
    pub fn restart(&mut self) {
        if let Err(why) = self.launch() {
            panic!("redis-server did not start: {why}");
        }
    }

    /// Starts the server on its port and waits until it answers `PING`; `Err` when it exited
    /// first (its port taken) or did not answer within 10 s.
    fn launch(&mut self) -> Result<(), String> {
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .args(&self.args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server is installed (scripts/test.sh installs it)");
        let child = self.child.insert(child);
        // redis-server has no readiness signal but answering: poll PING, for 10 s at most.
        let mut tries = 0;
        while !pong(self.port) {
            if let Ok(Some(status)) = child.try_wait() {
                self.child = None;
                return Err(format!("it exited ({status}) on port {}", self.port));
            }
            tries += 1;
            if tries >= 1000 {
                return Err(format!("no answer on port {} within 10 s", self.port));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(())
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

    /// The head of the run whose meta hash is `meta`: its stream's top entry's seq (a batch's
    /// last seq, or a re-base's), as the journal reads it; `None` while the stream has none
    /// (or only its end).
    pub fn stream_head(&self, meta: &str) -> Option<u64> {
        let s = format!("{}s", meta.strip_suffix('m')?);
        let top: Vec<(String, Vec<Vec<u8>>)> =
            self.query(&["XREVRANGE", &s, "+", "-", "COUNT", "1"]);
        let (id, _) = top.into_iter().next()?;
        id.split_once('-')?
            .0
            .parse()
            .ok()
            .filter(|&n: &u64| n != u64::MAX)
    }

    /// The server's PID while it runs (to pause it with SIGSTOP).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
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

/// The Redis a test's replicas journal to: one server or a cluster.
pub trait JournalRedis {
    /// The `[journal]` lines that name it (`url`, and `cluster` for a cluster).
    fn journal_toml(&self) -> String;
    /// The keys matching `pattern`, on every node.
    fn keys(&self, pattern: &str) -> Vec<String>;
    /// The pub/sub channels matching `pattern` someone listens on (sharded ones in a cluster).
    fn channels(&self, pattern: &str) -> Vec<String>;
    /// Its (first) port, unique among the running tests.
    fn first_port(&self) -> u16;
}

impl JournalRedis for RedisServer {
    fn journal_toml(&self) -> String {
        format!("url = \"{}\"\n", self.url())
    }

    fn keys(&self, pattern: &str) -> Vec<String> {
        self.query(&["KEYS", pattern])
    }

    fn channels(&self, pattern: &str) -> Vec<String> {
        self.query(&["PUBSUB", "CHANNELS", pattern])
    }

    fn first_port(&self) -> u16 {
        self.port
    }
}

/// A Redis Cluster of three masters (no replicas), each on a free port with a free cluster bus
/// port (`--cluster-port`, as port + 10000 may be taken or out of range); its node files live
/// in a directory of its own, removed when it is dropped (after its servers are stopped).
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
    dir: PathBuf,
}

impl RedisCluster {
    /// Starts three nodes, gives each a third of the slots, introduces them (`CLUSTER MEET`) and
    /// waits until every node reports `cluster_state:ok` (a master reports it about two seconds
    /// after its start, once it knows every slot is served).
    pub fn start() -> Self {
        Self::start_with(Vec::new)
    }

    /// As [`Self::start`], each node also given `extra()`'s arguments (TLS ports and files).
    pub fn start_with(extra: impl Fn() -> Vec<String>) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "tether-cluster-{}-{}",
            std::process::id(),
            free_port()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let nodes: Vec<RedisServer> = (0..3)
            .map(|_| {
                RedisServer::start_on(|| {
                    let port = free_port();
                    let conf = dir.join(format!("nodes-{port}.conf"));
                    let args = [
                        "--cluster-enabled",
                        "yes",
                        "--cluster-config-file",
                        conf.to_str().unwrap(),
                        "--cluster-port",
                        &free_port().to_string(),
                    ];
                    let mut args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
                    args.extend(extra());
                    (port, args)
                })
            })
            .collect();
        let ranges = [(0, 5460), (5461, 10922), (10923, 16383)];
        for (node, (from, to)) in nodes.iter().zip(ranges) {
            node.query::<()>(&[
                "CLUSTER",
                "ADDSLOTSRANGE",
                &from.to_string(),
                &to.to_string(),
            ]);
        }
        for node in &nodes[1..] {
            let port = node.port.to_string();
            nodes[0].query::<()>(&["CLUSTER", "MEET", "127.0.0.1", &port, &bus_port(node)]);
        }
        let c = RedisCluster { nodes, dir };
        let mut tries = 0;
        while !c.nodes.iter().all(|n| {
            n.query::<String>(&["CLUSTER", "INFO"])
                .contains("cluster_state:ok")
        }) {
            tries += 1;
            assert!(tries < 1000, "the cluster did not become ready");
            std::thread::sleep(Duration::from_millis(10));
        }
        c
    }
}

/// A node's cluster bus port, as it reports it.
fn bus_port(node: &RedisServer) -> String {
    let kv: Vec<String> = node.query(&["CONFIG", "GET", "cluster-port"]);
    kv[1].clone()
}

impl JournalRedis for RedisCluster {
    fn journal_toml(&self) -> String {
        let seeds: Vec<String> = self.nodes.iter().map(RedisServer::url).collect();
        format!("cluster = true\nurl = \"{}\"\n", seeds.join(","))
    }

    fn keys(&self, pattern: &str) -> Vec<String> {
        self.nodes.iter().flat_map(|n| n.keys(pattern)).collect()
    }

    fn channels(&self, pattern: &str) -> Vec<String> {
        let on = |n: &RedisServer| n.query::<Vec<String>>(&["PUBSUB", "SHARDCHANNELS", pattern]);
        self.nodes.iter().flat_map(on).collect()
    }

    fn first_port(&self) -> u16 {
        self.nodes[0].port
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        self.nodes.iter_mut().for_each(RedisServer::kill);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
