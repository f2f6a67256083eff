//! The load tool's client: raw HTTP/1.1 over TCP, an incremental chunked decoder, and a cheap
//! SSE scan that reads each event's `i` and `t` without parsing JSON.

use std::net::SocketAddr;
use std::time::Instant;

use bytes::{Buf, BytesMut};
use memchr::memmem;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::now_ns;

/// What one stream delivered.
#[derive(Debug, Default, Clone)]
pub struct Seen {
    pub events: u64,
    pub last_i: u64,
    /// An index arrived twice or out of order.
    pub broken: bool,
    /// `STREAM_END` or `RUN_FINISHED` arrived.
    pub ended: bool,
    pub bytes: u64,
    pub first_byte: Option<Instant>,
    /// Delivery delays in nanoseconds (when asked for).
    pub delays: Vec<u64>,
    /// Only events with an index above this count in `delays` (a reader that attached while
    /// others were still attaching skips the events of that burst).
    pub delays_after: u64,
    /// `run_id` of protocol-1 frames.
    pub run_id: Option<String>,
    /// Replacement snapshots received after the first frame (slow-reader resets).
    pub resets: u64,
    /// Why the stream failed, when it did before its body.
    pub failure: Option<String>,
    /// When the request was sent ([`Conn::sent`]).
    pub sent: Option<Instant>,
}

enum Chunk {
    /// A content-length body with this many bytes left (tether answers some attaches, e.g. a
    /// cursor at the head of a completed run, with a short body of known length).
    Length(usize),
    Size,
    Data(usize),
    Crlf,
    Done,
}

/// One response being read.
pub struct Conn {
    sock: TcpStream,
    raw: BytesMut,
    body: BytesMut,
    state: Chunk,
    pub status: u16,
    content_length: Option<usize>,
    /// Body bytes that came with the response head, not yet counted in a `Seen`.
    uncounted: usize,
    /// When the request was written (the connection established and the request sent): the
    /// wait from here to the head is the server's, the wait before it the tool's and the
    /// kernel's accept queue.
    pub sent: Instant,
}

/// Sends a request on a fresh connection and reads the response head.
pub async fn open(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: &[u8],
) -> std::io::Result<Conn> {
    let mut sock = TcpStream::connect(addr).await?;
    sock.set_nodelay(true)?;
    let head = format!(
        "{method} {path} HTTP/1.1\r\nhost: load\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    let mut req = head.into_bytes();
    req.extend_from_slice(body);
    sock.write_all(&req).await?;
    let sent = Instant::now();
    let mut raw = BytesMut::with_capacity(64 * 1024);
    let end = loop {
        if let Some(i) = memmem::find(&raw, b"\r\n\r\n") {
            break i;
        }
        if sock.read_buf(&mut raw).await? == 0 {
            return Err(std::io::Error::other("closed before the response head"));
        }
    };
    let status = std::str::from_utf8(&raw[9..12])
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let head = String::from_utf8_lossy(&raw[..end]).to_ascii_lowercase();
    let content_length = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok());
    raw.advance(end + 4);
    let uncounted = raw.len();
    Ok(Conn {
        uncounted,
        sock,
        raw,
        body: BytesMut::with_capacity(64 * 1024),
        state: match content_length {
            Some(0) => Chunk::Done,
            Some(n) => Chunk::Length(n),
            None => Chunk::Size,
        },
        status,
        content_length,
        sent,
    })
}

fn number_after(event: &[u8], key: &memmem::Finder) -> Option<u64> {
    let at = key.find(event)? + key.needle().len();
    let digits = event[at..]
        .iter()
        .take_while(|b| b.is_ascii_digit())
        .count();
    std::str::from_utf8(&event[at..at + digits])
        .ok()?
        .parse()
        .ok()
}

impl Conn {
    /// Reads once from the socket and scans every complete event. Returns false at the end of
    /// the body or the connection.
    pub async fn read_some(&mut self, seen: &mut Seen, delays: bool) -> bool {
        seen.bytes += std::mem::take(&mut self.uncounted) as u64;
        if matches!(self.state, Chunk::Done) {
            return false;
        }
        // Bytes that came with the response head (a replay of a completed run can be all of
        // it): decode those first, or this would wait for bytes that never come.
        if !self.raw.is_empty() {
            let held = self.raw.len();
            self.dechunk();
            if self.raw.len() != held {
                seen.first_byte.get_or_insert_with(Instant::now);
                self.scan(seen, delays);
                return !matches!(self.state, Chunk::Done);
            }
        }
        match self.sock.read_buf(&mut self.raw).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => {
                seen.first_byte.get_or_insert_with(Instant::now);
                seen.bytes += n as u64;
            }
        }
        self.dechunk();
        self.scan(seen, delays);
        !matches!(self.state, Chunk::Done)
    }

    /// The undecoded and unscanned bytes held and the decoder's state, for a stall report.
    pub fn pending(&self) -> String {
        let state = match self.state {
            Chunk::Length(n) => format!("length {n} left"),
            Chunk::Size => "chunk size".into(),
            Chunk::Data(n) => format!("chunk data {n} left"),
            Chunk::Crlf => "chunk crlf".into(),
            Chunk::Done => "done".into(),
        };
        let head = |b: &[u8]| String::from_utf8_lossy(&b[..b.len().min(200)]).into_owned();
        let tail =
            |b: &[u8]| String::from_utf8_lossy(&b[b.len().saturating_sub(200)..]).into_owned();
        format!(
            "{state}; raw {} bytes {:?} … {:?}; body {} bytes {:?}",
            self.raw.len(),
            head(&self.raw),
            tail(&self.raw),
            self.body.len(),
            head(&self.body)
        )
    }

    /// A content-length body, whole.
    pub async fn read_raw_to_end(&mut self) -> Vec<u8> {
        let want = self.content_length.unwrap_or(0);
        while self.raw.len() < want {
            match self.sock.read_buf(&mut self.raw).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
        self.raw.to_vec()
    }

    /// Reads until the first SSE frame is complete; returns its length in bytes.
    pub async fn read_first_frame(&mut self) -> usize {
        loop {
            self.dechunk();
            if let Some(i) = memmem::find(&self.body, b"\n\n") {
                return i + 2;
            }
            match self.sock.read_buf(&mut self.raw).await {
                Ok(0) | Err(_) => return 0,
                Ok(_) => {}
            }
        }
    }

    /// Reads until at least `want` body bytes arrived (not scanned); returns how many did.
    pub async fn read_bytes(&mut self, want: usize) -> usize {
        let mut got = 0;
        loop {
            self.dechunk();
            got += self.body.len();
            self.body.clear();
            if got >= want {
                return got;
            }
            match self.sock.read_buf(&mut self.raw).await {
                Ok(0) | Err(_) => return got,
                Ok(_) => {}
            }
        }
    }

    /// Reads until `done(seen)` or the end.
    pub async fn read_until(
        &mut self,
        seen: &mut Seen,
        delays: bool,
        done: impl Fn(&Seen) -> bool,
    ) {
        while !done(seen) && self.read_some(seen, delays).await {}
    }

    fn dechunk(&mut self) {
        loop {
            match self.state {
                Chunk::Length(left) => {
                    let n = left.min(self.raw.len());
                    self.body.extend_from_slice(&self.raw[..n]);
                    self.raw.advance(n);
                    self.state = if n == left {
                        Chunk::Done
                    } else {
                        Chunk::Length(left - n)
                    };
                    return;
                }
                Chunk::Size => {
                    let Some(i) = memmem::find(&self.raw, b"\r\n") else {
                        return;
                    };
                    let size = std::str::from_utf8(&self.raw[..i])
                        .ok()
                        .and_then(|s| usize::from_str_radix(s.trim(), 16).ok())
                        .unwrap_or(0);
                    self.raw.advance(i + 2);
                    self.state = if size == 0 {
                        Chunk::Done
                    } else {
                        Chunk::Data(size)
                    };
                }
                Chunk::Data(left) => {
                    if self.raw.is_empty() {
                        return;
                    }
                    let n = left.min(self.raw.len());
                    self.body.extend_from_slice(&self.raw[..n]);
                    self.raw.advance(n);
                    self.state = if n == left {
                        Chunk::Crlf
                    } else {
                        Chunk::Data(left - n)
                    };
                }
                Chunk::Crlf => {
                    if self.raw.len() < 2 {
                        return;
                    }
                    self.raw.advance(2);
                    self.state = Chunk::Size;
                }
                Chunk::Done => return,
            }
        }
    }

    fn scan(&mut self, seen: &mut Seen, delays: bool) {
        thread_local! {
            static FINDERS: [memmem::Finder<'static>; 5] = [
                memmem::Finder::new(b"\"i\":"),
                memmem::Finder::new(b"\"t\":"),
                memmem::Finder::new(b"\n\n"),
                memmem::Finder::new(b"{\"type\":\"STREAM_SNAPSHOT\""),
                memmem::Finder::new(b"\"seq\":"),
            ];
        }
        FINDERS.with(|[fi, ft, sep, snap, fseq]| {
            let mut at = 0;
            while let Some(end) = sep.find(&self.body[at..]) {
                let event = &self.body[at..at + end];
                at += end + 2;
                if snap.find(&event[..event.len().min(160)]).is_some() {
                    // A snapshot replaces the client's state up to its seq (seq = the producer's
                    // index here: one upstream event per seq).
                    let seq = number_after(event, fseq).unwrap_or(0);
                    if seq > 0 {
                        seen.resets += 1;
                        seen.events += seq.saturating_sub(seen.last_i);
                        seen.last_i = seq;
                    }
                } else if let Some(i) = number_after(event, fi) {
                    if i != seen.last_i + 1 {
                        seen.broken = true;
                    }
                    seen.last_i = i;
                    seen.events += 1;
                    if delays && i > seen.delays_after {
                        if let Some(t) = number_after(event, ft) {
                            seen.delays.push(now_ns().saturating_sub(t));
                        }
                    }
                } else if memmem::find(event, b"STREAM_END").is_some()
                    || memmem::find(event, b"RUN_FINISHED").is_some()
                {
                    seen.ended = true;
                }
                if seen.run_id.is_none() {
                    if let Some(p) = memmem::find(event, b"\"run_id\":\"") {
                        let s = &event[p + 10..];
                        let n = s.iter().take_while(|b| **b != b'"').count();
                        seen.run_id = Some(String::from_utf8_lossy(&s[..n]).into_owned());
                    }
                }
            }
            self.body.advance(at);
        });
    }
}
