//! Scripted fake backends: each request is answered by a list of steps (head, chunks, raw bytes,
//! waits on a gate, a reset), and what was asked and served is logged for the test to check.
//! Also the AG-UI turns and SSE framing the scripts send.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use super::{close_with_rst, within};

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
    pub fn is_open(&self) -> bool {
        *self.0.borrow()
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
    /// Wait this long (a backend's pace between events).
    Sleep(std::time::Duration),
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
    /// Connections accepted so far (keep-alive: several requests may share one).
    pub accepted: Arc<AtomicUsize>,
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
    backend_at("127.0.0.1:0".parse().unwrap(), script).await
}

/// [`backend`] listening on `addr` (a port a test kept free, to come up after a client
/// already tried it).
pub async fn backend_at(
    addr: SocketAddr,
    script: impl Fn(&Req) -> Vec<Step> + Send + Sync + 'static,
) -> Backend {
    let listener = TcpListener::bind(addr).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let served = Arc::new(Mutex::new(Vec::new()));
    let requests = Arc::new(Mutex::new(Vec::new()));
    let (done, _) = watch::channel(0usize);
    let done = Arc::new(done);
    let script = Arc::new(script);
    let accepted = Arc::new(AtomicUsize::new(0));
    let (s2, r2, d2, a2) = (
        served.clone(),
        requests.clone(),
        done.clone(),
        accepted.clone(),
    );
    tokio::spawn(async move {
        loop {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            a2.fetch_add(1, Ordering::SeqCst);
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
                            Step::Head(status, headers) => head_bytes(status, &headers),
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
                            Step::Sleep(d) => {
                                tokio::time::sleep(d).await;
                                continue;
                            }
                            Step::End => Bytes::from_static(b"0\r\n\r\n"),
                            Step::Reset => {
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
                        close_with_rst(sock);
                        return;
                    }
                }
            });
        }
    });
    Backend {
        addr,
        accepted,
        served,
        requests,
        done,
    }
}

/// A response head; `transfer-encoding: chunked` unless the headers give a content-length.
fn head_bytes(status: u16, headers: &[(&'static str, String)]) -> Bytes {
    let mut h = format!("HTTP/1.1 {status} X\r\n");
    let raw = headers
        .iter()
        .any(|(k, _)| k.eq_ignore_ascii_case("content-length"));
    for (k, v) in headers {
        h.push_str(&format!("{k}: {v}\r\n"));
    }
    if !raw {
        h.push_str("transfer-encoding: chunked\r\n");
    }
    h.push_str("\r\n");
    Bytes::from(h)
}

/// Reads one request (head and content-length body); `None` when the connection closes or the
/// head is not HTTP.
async fn read_request(sock: &mut TcpStream, buf: &mut BytesMut) -> Option<Req> {
    loop {
        let mut slots = [httparse::EMPTY_HEADER; 64];
        let mut parsed = httparse::Request::new(&mut slots);
        if let httparse::Status::Complete(head_len) = parsed.parse(buf).ok()? {
            let method = parsed.method?.to_string();
            let path = parsed.path?.to_string();
            let headers: Vec<(String, String)> = parsed
                .headers
                .iter()
                .map(|h| {
                    let value = String::from_utf8_lossy(h.value).trim().to_string();
                    (h.name.to_ascii_lowercase(), value)
                })
                .collect();
            let len: usize = headers
                .iter()
                .find(|(k, _)| k == "content-length")
                .and_then(|(_, v)| v.parse().ok())
                .unwrap_or(0);
            while buf.len() < head_len + len {
                if sock.read_buf(buf).await.ok()? == 0 {
                    return None;
                }
            }
            let _head = buf.split_to(head_len);
            let body = buf.split_to(len).freeze();
            return Some(Req {
                method,
                path,
                headers,
                body,
            });
        }
        if sock.read_buf(buf).await.ok()? == 0 {
            return None;
        }
    }
}

/// `data: <json>\n\n` for an AG-UI event.
pub fn sse(v: &Value) -> Bytes {
    Bytes::from(format!("data: {v}\n\n"))
}

/// The head of an SSE answer.
pub fn sse_head() -> Step {
    Step::Head(200, vec![("content-type", "text/event-stream".into())])
}

/// An SSE answer of `events`, one chunk each. With a gate, the backend waits for it after the
/// first `at` events (`at == events.len()` holds the end of the stream).
pub fn scripted_turn(events: &[Value], pause: Option<(usize, &Gate)>) -> Vec<Step> {
    let mut steps = vec![sse_head()];
    for (i, e) in events.iter().enumerate() {
        if let Some((at, g)) = pause {
            if i == at {
                steps.push(Step::Wait(g.clone()));
            }
        }
        steps.push(Step::Chunk(sse(e)));
    }
    if let Some((at, g)) = pause {
        if at == events.len() {
            steps.push(Step::Wait(g.clone()));
        }
    }
    steps.push(Step::End);
    steps
}

/// A backend answering every request with [`scripted_turn`]`(events, pause)`.
pub async fn turn_backend(events: Vec<Value>, pause: Option<(usize, Gate)>) -> Backend {
    backend(move |_| scripted_turn(&events, pause.as_ref().map(|(at, g)| (*at, g)))).await
}

/// A whole `content-length` answer: `status`, a content type and `body`.
pub fn fixed_answer(status: u16, content_type: &str, body: impl Into<Bytes>) -> Vec<Step> {
    let body = body.into();
    vec![
        Step::Head(
            status,
            vec![
                ("content-type", content_type.to_string()),
                ("content-length", body.len().to_string()),
            ],
        ),
        Step::Raw(body),
    ]
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
