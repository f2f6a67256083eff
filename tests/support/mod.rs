//! Test harness: the real sidecar in-process, scripted fake backends, and a raw HTTP/1.1 client
//! that can read a stream frame by frame and drop the connection mid-stream. Every listener binds
//! 127.0.0.1:0.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use parking_lot::Mutex;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use tether::config::{parse_file, Flags};
use tether::demo::DemoOptions;
use tether::server::Handle;

/// Upper bound on any single wait in a test, so a bug fails instead of hanging.
pub const LIMIT: Duration = Duration::from_secs(20);

/// Awaits `f` or panics after [`LIMIT`].
pub async fn within<T>(what: &str, f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(LIMIT, f)
        .await
        .unwrap_or_else(|_| panic!("timed out: {what}"))
}

/// Polls `cond` until it holds, or panics after [`LIMIT`]. For states that have no readiness
/// signal a test can await (a counter inside the sidecar, a request at the backend).
pub async fn eventually(what: &str, cond: impl Fn() -> bool) {
    within(what, async {
        while !cond() {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await
}

// ---- the sidecar -------------------------------------------------------------------------

/// A running sidecar.
pub struct Sidecar {
    pub addr: SocketAddr,
    pub admin: SocketAddr,
    pub handle: Option<Handle>,
}

impl Drop for Sidecar {
    fn drop(&mut self) {
        if let Some(h) = self.handle.take() {
            h.abort();
        }
    }
}

impl Sidecar {
    /// The Prometheus text of this sidecar.
    pub async fn metrics(&self) -> String {
        let mut r = request(self.admin, "GET", "/metrics", &[], b"").await;
        String::from_utf8(r.body_to_end().await.to_vec()).unwrap()
    }

    /// The value of one sample line (`name{labels}`), 0 when absent.
    pub async fn metric(&self, sample: &str) -> f64 {
        let text = self.metrics().await;
        text.lines()
            .find_map(|l| l.strip_prefix(sample).and_then(|v| v.strip_prefix(' ')))
            .map(|v| v.trim().parse().unwrap())
            .unwrap_or(0.0)
    }
}

/// Starts tether in front of `upstream` with extra TOML (`[recorder]` etc.; lines of a leading
/// `[server]` table join the harness's own).
pub async fn sidecar(upstream: SocketAddr, extra_toml: &str) -> Sidecar {
    let (server, rest) = match extra_toml.strip_prefix("[server]\n") {
        Some(r) => r.split_at(r.find("\n[").map_or(r.len(), |i| i + 1)),
        None => ("", extra_toml),
    };
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nadmin = \"127.0.0.1:0\"\nupstream = \"{upstream}\"\n{server}\n{rest}"
    );
    let file = parse_file(&text).unwrap();
    let cfg = tether::config::Config::from_parts(file, &Flags::default()).unwrap();
    let handle = tether::server::start(cfg, DemoOptions::default())
        .await
        .unwrap();
    Sidecar {
        addr: handle.proxy_addr,
        admin: handle.admin_addr,
        handle: Some(handle),
    }
}

// ---- fake backend ------------------------------------------------------------------------

/// A gate a backend script waits on until the test opens it.
#[derive(Clone)]
pub struct Gate(Arc<watch::Sender<bool>>);

impl Default for Gate {
    fn default() -> Self {
        Gate(Arc::new(watch::channel(false).0))
    }
}

impl Gate {
    pub fn open(&self) {
        self.0.send_replace(true);
    }
    async fn wait(&self) {
        let mut rx = self.0.subscribe();
        let _ = rx.wait_for(|o| *o).await;
    }
}

/// One step of a backend's answer.
#[derive(Clone)]
pub enum Step {
    /// Status line and headers (`transfer-encoding: chunked` is added unless `Raw` is used).
    Head(u16, Vec<(&'static str, String)>),
    /// One chunk of a chunked body.
    Chunk(Bytes),
    /// Bytes written as they are (for a content-length body).
    Raw(Bytes),
    /// Wait until the gate opens.
    Wait(Gate),
    /// The terminating chunk.
    End,
    /// Reset the connection (RST).
    Reset,
}

/// A request as the backend saw it.
#[derive(Debug, Clone)]
pub struct Req {
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Bytes,
}

impl Req {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// What happened to one answer.
#[derive(Debug, Clone, Default)]
pub struct Served {
    pub steps_written: usize,
    pub write_failed: bool,
    pub completed: bool,
}

/// A scripted backend.
pub struct Backend {
    pub addr: SocketAddr,
    pub served: Arc<Mutex<Vec<Served>>>,
    pub requests: Arc<Mutex<Vec<Req>>>,
    done: Arc<watch::Sender<usize>>,
}

impl Backend {
    /// Waits until `n` answers have ended (completed, failed or reset).
    pub async fn wait_answers(&self, n: usize) {
        let mut rx = self.done.subscribe();
        within("backend answers", rx.wait_for(|d| *d >= n))
            .await
            .unwrap();
    }
}

/// Starts a backend answering each request with `script(req)`.
pub async fn backend(script: impl Fn(&Req) -> Vec<Step> + Send + Sync + 'static) -> Backend {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let served = Arc::new(Mutex::new(Vec::new()));
    let requests = Arc::new(Mutex::new(Vec::new()));
    let (done, _) = watch::channel(0usize);
    let done = Arc::new(done);
    let script = Arc::new(script);
    let (s2, r2, d2) = (served.clone(), requests.clone(), done.clone());
    tokio::spawn(async move {
        loop {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            let (script, served, requests, done) =
                (script.clone(), s2.clone(), r2.clone(), d2.clone());
            tokio::spawn(async move {
                let mut buf = BytesMut::new();
                // Keep-alive: answer requests on this connection until it closes.
                while let Some(req) = read_request(&mut sock, &mut buf).await {
                    requests.lock().push(req.clone());
                    let mut log = Served::default();
                    let mut reset = false;
                    for step in script(&req) {
                        let bytes = match step {
                            Step::Head(status, headers) => {
                                let mut h = format!("HTTP/1.1 {status} X\r\n");
                                let raw = headers
                                    .iter()
                                    .any(|(k, _)| k.eq_ignore_ascii_case("content-length"));
                                for (k, v) in &headers {
                                    h.push_str(&format!("{k}: {v}\r\n"));
                                }
                                if !raw {
                                    h.push_str("transfer-encoding: chunked\r\n");
                                }
                                h.push_str("\r\n");
                                Bytes::from(h)
                            }
                            Step::Chunk(c) => {
                                let mut b = BytesMut::new();
                                b.extend_from_slice(format!("{:x}\r\n", c.len()).as_bytes());
                                b.extend_from_slice(&c);
                                b.extend_from_slice(b"\r\n");
                                b.freeze()
                            }
                            Step::Raw(b) => b,
                            Step::Wait(g) => {
                                g.wait().await;
                                continue;
                            }
                            Step::End => Bytes::from_static(b"0\r\n\r\n"),
                            Step::Reset => {
                                // Zero linger: close sends RST at once and never blocks.
                                #[allow(deprecated)]
                                let _ = sock.set_linger(Some(Duration::ZERO));
                                reset = true;
                                break;
                            }
                        };
                        if sock.write_all(&bytes).await.is_err() || sock.flush().await.is_err() {
                            log.write_failed = true;
                            break;
                        }
                        log.steps_written += 1;
                    }
                    log.completed = !log.write_failed && !reset;
                    served.lock().push(log);
                    done.send_modify(|d| *d += 1);
                    if reset {
                        return; // dropping the socket with linger 0 sends RST
                    }
                }
            });
        }
    });
    Backend {
        addr,
        served,
        requests,
        done,
    }
}

async fn read_request(sock: &mut TcpStream, buf: &mut BytesMut) -> Option<Req> {
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        if sock.read_buf(buf).await.ok()? == 0 {
            return None;
        }
    };
    let head = String::from_utf8(buf[..head_end].to_vec()).ok()?;
    buf.advance(head_end + 4);
    let mut lines = head.split("\r\n");
    let mut first = lines.next()?.split(' ');
    let (method, path) = (first.next()?.to_string(), first.next()?.to_string());
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let len: usize = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    while buf.len() < len {
        if sock.read_buf(buf).await.ok()? == 0 {
            return None;
        }
    }
    let body = buf.split_to(len).freeze();
    Some(Req {
        method,
        path,
        headers,
        body,
    })
}

/// `data: <json>\n\n` for an AG-UI event.
pub fn sse(v: &Value) -> Bytes {
    Bytes::from(format!("data: {v}\n\n"))
}

/// The head of an SSE answer.
pub fn sse_head() -> Step {
    Step::Head(200, vec![("content-type", "text/event-stream".into())])
}

/// A deterministic AG-UI turn of `n` text deltas (escapes and multi-byte text included).
pub fn turn(n: usize) -> Vec<Value> {
    let words = [
        "hel",
        "lo ",
        "caf\u{e9} ",
        "\u{1F600}",
        "\"q\"",
        "\n",
        "end",
    ];
    let mut v = vec![
        json!({"type":"RUN_STARTED","threadId":"t","runId":"x"}),
        json!({"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant"}),
    ];
    for i in 0..n {
        if i == n / 2 {
            v.push(json!({"type":"TOOL_CALL_START","toolCallId":"t1","toolCallName":"f"}));
            v.push(json!({"type":"TOOL_CALL_ARGS","toolCallId":"t1","delta":"{\"a\":"}));
            v.push(json!({"type":"TOOL_CALL_ARGS","toolCallId":"t1","delta":"1}"}));
            v.push(json!({"type":"TOOL_CALL_END","toolCallId":"t1"}));
        }
        v.push(
            json!({"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":words[i % words.len()]}),
        );
    }
    v.push(json!({"type":"TEXT_MESSAGE_END","messageId":"m1"}));
    v.push(json!({"type":"RUN_FINISHED","threadId":"t","runId":"x"}));
    v
}

// ---- client ------------------------------------------------------------------------------

/// A response being read.
pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    sock: TcpStream,
    raw: BytesMut,
    body: BytesMut,
    chunked: bool,
    remaining: Option<usize>,
    pub ended: bool,
}

/// Sends one request on a fresh connection and reads the response head.
pub async fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Resp {
    let mut sock = TcpStream::connect(addr).await.unwrap();
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nhost: test\r\ncontent-length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    sock.write_all(req.as_bytes()).await.unwrap();
    sock.write_all(body).await.unwrap();
    read_head(sock).await
}

/// POSTs JSON.
pub async fn post(addr: SocketAddr, path: &str, body: &Value) -> Resp {
    request(
        addr,
        "POST",
        path,
        &[("content-type", "application/json")],
        body.to_string().as_bytes(),
    )
    .await
}

async fn read_head(mut sock: TcpStream) -> Resp {
    let mut raw = BytesMut::new();
    let end = within("response head", async {
        loop {
            if let Some(i) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
                return i;
            }
            assert!(
                sock.read_buf(&mut raw).await.unwrap() > 0,
                "closed before a response head"
            );
        }
    })
    .await;
    let head = String::from_utf8(raw[..end].to_vec()).unwrap();
    raw.advance(end + 4);
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let get = |n: &str| headers.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
    let chunked = get("transfer-encoding").is_some_and(|v| v.contains("chunked"));
    let remaining = get("content-length").map(|v| v.parse().unwrap());
    let ended = !chunked && remaining == Some(0) || status == 204;
    Resp {
        status,
        headers,
        sock,
        raw,
        body: BytesMut::new(),
        chunked,
        remaining,
        ended,
    }
}

impl Resp {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// Reads more body into the decoded buffer. Returns false at the end of the body (a clean
    /// end sets `ended`; a connection closed before it does not).
    async fn fill(&mut self) -> bool {
        if self.ended {
            return false;
        }
        loop {
            if self.chunked {
                if let Some(i) = self.raw.windows(2).position(|w| w == b"\r\n") {
                    let size = usize::from_str_radix(
                        std::str::from_utf8(&self.raw[..i]).unwrap().trim(),
                        16,
                    )
                    .unwrap();
                    if self.raw.len() >= i + 2 + size + 2 {
                        self.raw.advance(i + 2);
                        let data = self.raw.split_to(size);
                        self.raw.advance(2);
                        if size == 0 {
                            self.ended = true;
                            return false;
                        }
                        self.body.extend_from_slice(&data);
                        return true;
                    }
                }
            } else if !self.raw.is_empty() {
                let n = self
                    .remaining
                    .map_or(self.raw.len(), |r| r.min(self.raw.len()));
                self.body.extend_from_slice(&self.raw.split_to(n));
                if let Some(r) = self.remaining.as_mut() {
                    *r -= n;
                    if *r == 0 {
                        self.ended = true;
                    }
                }
                return true;
            }
            match self.sock.read_buf(&mut self.raw).await {
                Ok(0) | Err(_) => {
                    if !self.chunked && self.remaining.is_none() {
                        self.ended = true;
                    }
                    return false;
                }
                Ok(_) => {}
            }
        }
    }

    /// The whole remaining body.
    pub async fn body_to_end(&mut self) -> Bytes {
        within("body", async { while self.fill().await {} }).await;
        self.body.split().freeze()
    }

    /// The next SSE frame's JSON (comments skipped); `None` when the body ends.
    pub async fn frame(&mut self) -> Option<Frame> {
        within("frame", async {
            loop {
                if let Some(i) = self.body.windows(2).position(|w| w == b"\n\n") {
                    let text = String::from_utf8(self.body.split_to(i + 2).to_vec()).unwrap();
                    let mut id = None;
                    let mut data = None;
                    for line in text.lines() {
                        if let Some(v) = line.strip_prefix("id: ") {
                            id = Some(v.to_string());
                        } else if let Some(v) = line.strip_prefix("data: ") {
                            data = Some(v.to_string());
                        }
                    }
                    if let Some(d) = data {
                        return Some(Frame {
                            id,
                            json: serde_json::from_str(&d).unwrap(),
                        });
                    }
                    continue; // a comment
                }
                if !self.fill().await {
                    return None;
                }
            }
        })
        .await
    }

    /// Reads until the raw body contains `needle` (comments included); false if it ended first.
    pub async fn read_until(&mut self, needle: &[u8]) -> bool {
        within("body text", async {
            loop {
                if self.body.windows(needle.len()).any(|w| w == needle) {
                    return true;
                }
                if !self.fill().await {
                    return false;
                }
            }
        })
        .await
    }

    /// Every frame up to the end of the body.
    pub async fn frames_to_end(&mut self) -> Vec<Frame> {
        let mut v = Vec::new();
        while let Some(f) = self.frame().await {
            v.push(f);
        }
        v
    }

    /// Closes the connection abruptly (RST), as a killed browser tab does.
    pub fn kill(self) {
        // Zero linger: close sends RST at once and never blocks.
        #[allow(deprecated)]
        let _ = self.sock.set_linger(Some(Duration::ZERO));
    }
}

/// One protocol-1 frame.
#[derive(Debug, Clone)]
pub struct Frame {
    pub id: Option<String>,
    pub json: Value,
}

impl Frame {
    pub fn ty(&self) -> &str {
        self.json["type"].as_str().unwrap()
    }
    pub fn seq(&self) -> u64 {
        self.json["seq"].as_u64().unwrap()
    }
}

// ---- reducer -----------------------------------------------------------------------------

/// Text, arguments and reasoning per id, and the ordered list of every other event.
#[derive(Debug, Default, PartialEq)]
pub struct Reduced {
    pub text: BTreeMap<String, String>,
    pub args: BTreeMap<String, String>,
    pub reasoning: BTreeMap<String, String>,
    pub others: Vec<Value>,
}

impl Reduced {
    pub fn apply(&mut self, e: &Value) {
        let id = |k: &str| e[k].as_str().unwrap_or_default().to_string();
        match (e["type"].as_str().unwrap_or_default(), e["delta"].as_str()) {
            ("TEXT_MESSAGE_CONTENT", Some(d)) => {
                *self.text.entry(id("messageId")).or_default() += d
            }
            ("REASONING_MESSAGE_CONTENT", Some(d)) => {
                *self.reasoning.entry(id("messageId")).or_default() += d
            }
            ("TOOL_CALL_ARGS", Some(d)) => *self.args.entry(id("toolCallId")).or_default() += d,
            _ => self.others.push(e.clone()),
        }
    }

    pub fn of(events: &[Value]) -> Self {
        let mut r = Reduced::default();
        events.iter().for_each(|e| r.apply(e));
        r
    }

    /// Applies protocol-1 frames as a client does: a snapshot replaces the state, events apply
    /// once (a seq already applied is ignored). Returns the last applied seq.
    pub fn apply_frames(&mut self, frames: &[Frame], mut last: u64) -> u64 {
        for f in frames {
            match f.ty() {
                "STREAM_SNAPSHOT" => {
                    *self = Reduced::of(f.json["events"].as_array().unwrap());
                    last = f.seq();
                }
                "STREAM_EVENT" if f.seq() > last => {
                    assert_eq!(f.seq(), last + 1, "a gap in seq");
                    self.apply(&f.json["event"]);
                    last = f.seq();
                }
                _ => {}
            }
        }
        last
    }
}
