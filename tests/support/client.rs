//! A raw HTTP/1.1 client on a plain socket: one request per connection, the response head parsed
//! with `httparse`, the body read as it arrives (chunked or not) and split into SSE frames, and
//! an abrupt close (RST) as a killed browser tab does it.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::{parse_frame, within, Frame};

/// Closes `sock` abruptly: zero linger, so the close sends RST at once and never blocks.
pub fn close_with_rst(sock: TcpStream) {
    let _ = socket2::SockRef::from(&sock).set_linger(Some(Duration::ZERO));
    drop(sock);
}

/// A parsed response head.
#[derive(Debug, Clone, PartialEq)]
pub struct Head {
    pub status: u16,
    /// Names in lower case, values trimmed.
    pub headers: Vec<(String, String)>,
    /// The length of the head in bytes, the blank line included.
    pub len: usize,
}

impl Head {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// The response head at the start of `buf`; `None` while it is incomplete. Panics on bytes that
/// are not an HTTP/1.x response head.
pub fn parse_head(buf: &[u8]) -> Option<Head> {
    let mut slots = [httparse::EMPTY_HEADER; 64];
    let mut parsed = httparse::Response::new(&mut slots);
    let status = parsed.parse(buf).unwrap_or_else(|e| {
        panic!(
            "not an HTTP response head ({e}): {:?}",
            String::from_utf8_lossy(buf)
        )
    });
    let len = match status {
        httparse::Status::Complete(len) => len,
        httparse::Status::Partial => return None,
    };
    let headers = parsed
        .headers
        .iter()
        .map(|h| {
            let value = std::str::from_utf8(h.value).expect("a UTF-8 header value");
            (h.name.to_ascii_lowercase(), value.trim().to_string())
        })
        .collect();
    Some(Head {
        status: parsed.code.expect("a complete head has a status"),
        headers,
        len,
    })
}

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
    last_read: tokio::time::Instant,
}

/// Sends one request on a fresh connection and reads the response head.
pub async fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Resp {
    request_on(
        TcpStream::connect(addr).await.unwrap(),
        method,
        path,
        headers,
        body,
    )
    .await
}

/// Sends a request on a socket the test connected itself, and reads the response head.
pub async fn request_on(
    mut sock: TcpStream,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Resp {
    let req = request_head(method, path, headers, body.len());
    sock.write_all(req.as_bytes()).await.unwrap();
    sock.write_all(body).await.unwrap();
    let mut r = read_head(sock).await;
    // A `HEAD` answer has no body, whatever its head says.
    r.ended |= method == "HEAD";
    r
}

/// The head of a request with a `content-length` body.
fn request_head(method: &str, path: &str, headers: &[(&str, &str)], len: usize) -> String {
    let mut req = format!("{method} {path} HTTP/1.1\r\nhost: test\r\ncontent-length: {len}\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req
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

/// [`request`] for a test that expects failures (a stopped or cut-off server): connect, write
/// or read errors, and a close before the head, are returned instead of panicking, and nothing
/// here has a time limit (the caller bounds the wait).
pub async fn try_request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> std::io::Result<Resp> {
    let mut sock = TcpStream::connect(addr).await?;
    let req = request_head(method, path, headers, body.len());
    sock.write_all(req.as_bytes()).await?;
    sock.write_all(body).await?;
    let mut raw = BytesMut::new();
    let head = loop {
        if let Some(head) = parse_head(&raw) {
            break head;
        }
        if sock.read_buf(&mut raw).await? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
    };
    Ok(Resp::with_head(sock, raw, head))
}

async fn read_head(mut sock: TcpStream) -> Resp {
    let mut raw = BytesMut::new();
    let head = within("response head", async {
        loop {
            if let Some(head) = parse_head(&raw) {
                return head;
            }
            assert!(
                sock.read_buf(&mut raw).await.unwrap() > 0,
                "closed before a response head"
            );
        }
    })
    .await;
    Resp::with_head(sock, raw, head)
}

impl Resp {
    /// A response whose head (at the start of `raw`) has been read from `sock`.
    fn with_head(sock: TcpStream, mut raw: BytesMut, head: Head) -> Resp {
        raw.advance(head.len);
        let chunked = head
            .header("transfer-encoding")
            .is_some_and(|v| v.contains("chunked"));
        let remaining = head.header("content-length").map(|v| v.parse().unwrap());
        let ended = !chunked && remaining == Some(0) || matches!(head.status, 204 | 304);
        Resp {
            status: head.status,
            headers: head.headers,
            sock,
            raw,
            body: BytesMut::new(),
            chunked,
            remaining,
            ended,
            last_read: tokio::time::Instant::now(),
        }
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// Moves the next whole chunk of a chunked body from `raw` to `body`. `None` until a whole
    /// chunk has arrived; `Some(false)` for the last chunk.
    fn next_chunk(&mut self) -> Option<bool> {
        let (size_len, size) = match httparse::parse_chunk_size(&self.raw) {
            Ok(httparse::Status::Complete(c)) => c,
            Ok(httparse::Status::Partial) => return None,
            Err(e) => panic!("bad chunk size: {e:?}"),
        };
        let size = usize::try_from(size).unwrap();
        // The data and its CRLF; the last chunk has no trailers here.
        if self.raw.len() < size_len + size + 2 {
            return None;
        }
        self.raw.advance(size_len);
        let data = self.raw.split_to(size);
        assert_eq!(&self.raw[..2], b"\r\n", "a chunk not ended by CRLF");
        self.raw.advance(2);
        self.body.extend_from_slice(&data);
        Some(size > 0)
    }

    /// Reads more body into the decoded buffer. Returns false at the end of the body (a clean
    /// end sets `ended`; a connection closed before it does not).
    async fn fill(&mut self) -> bool {
        if self.ended {
            return false;
        }
        loop {
            if self.chunked {
                match self.next_chunk() {
                    Some(true) => return true,
                    Some(false) => {
                        self.ended = true;
                        return false;
                    }
                    None => {}
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
                Ok(_) => self.last_read = tokio::time::Instant::now(),
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
        within("frame", self.next_frame()).await
    }

    /// The next SSE block as sent (its lines and the blank line), comment-only blocks skipped;
    /// `None` when the body ends. For upstream formats whose data is not always JSON.
    pub async fn block(&mut self) -> Option<Bytes> {
        within("block", async {
            loop {
                if let Some(i) = self.body.windows(2).position(|w| w == b"\n\n") {
                    let block = self.body.split_to(i + 2).freeze();
                    if block
                        .split(|b| *b == b'\n')
                        .all(|l| l.is_empty() || l[0] == b':')
                    {
                        continue;
                    }
                    return Some(block);
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

    /// The next SSE frame's JSON (comments skipped), `None` when the body ends (cleanly or
    /// not: see `ended`). No time limit: the caller bounds the wait, and may drop the future
    /// and call again (nothing read is lost), watching [`Resp::last_read`] meanwhile.
    pub async fn next_frame(&mut self) -> Option<Frame> {
        loop {
            if let Some(i) = self.body.windows(2).position(|w| w == b"\n\n") {
                let text = self.body.split_to(i + 2);
                match parse_frame(std::str::from_utf8(&text).unwrap()) {
                    Some(frame) => return Some(frame),
                    None => continue, // a comment
                }
            }
            if !self.fill().await {
                return None;
            }
        }
    }

    /// When the last bytes (a frame, a comment, framing) arrived on the connection.
    pub fn last_read(&self) -> tokio::time::Instant {
        self.last_read
    }

    /// Every frame up to the end of the body.
    pub async fn frames_to_end(&mut self) -> Vec<Frame> {
        let mut v = Vec::new();
        while let Some(f) = self.frame().await {
            v.push(f);
        }
        v
    }

    /// Sends the next request on this response's connection, once its body was read to its
    /// end, and reads that request's response head.
    pub async fn then(self, method: &str, path: &str, body: &[u8]) -> Resp {
        assert!(
            self.ended && self.raw.is_empty(),
            "the previous answer is not read to its end"
        );
        request_on(self.sock, method, path, &[], body).await
    }

    /// Writes more bytes on the response's connection (a pipelined request).
    pub async fn send(&mut self, bytes: &[u8]) {
        self.sock.write_all(bytes).await.unwrap();
    }

    /// Every byte the server sends after what was read so far, up to its close of the
    /// connection (FIN or RST), which must come within the harness's limit.
    pub async fn rest_until_close(&mut self) -> Bytes {
        within("the server closes the connection", async {
            loop {
                match self.sock.read_buf(&mut self.raw).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
            }
        })
        .await;
        self.raw.split().freeze()
    }

    /// Closes the connection abruptly (RST), as a killed browser tab does.
    pub fn kill(self) {
        close_with_rst(self.sock);
    }
}
