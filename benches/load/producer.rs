//! A fast SSE producer for the load tool: one AG-UI text delta per write, each carrying its
//! index `i` and send time `t` (nanoseconds since the tool's epoch), at full speed or paced
//! (each paced stream at its own phase, spread over the gap between events).
//!
//! `POST|GET /stream?n=<events>&size=<delta bytes>&rate=<events/s, 0 = full speed>&hold=<0|1>`:
//! with `hold=1` the stream stays open after the last delta until [`Producer::release`], with
//! `wait=1` its first delta waits for it.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;

use crate::now_ns;

/// Paced streams served so far: each one's phase within its gap.
static PACED: AtomicU64 = AtomicU64::new(0);

/// The running producer.
pub struct Producer {
    pub addr: SocketAddr,
    release: watch::Sender<u64>,
    /// Events written, all streams.
    pub sent: Arc<AtomicU64>,
}

impl Producer {
    pub async fn start() -> Producer {
        // A deep accept queue: thousands of runs connect at once.
        let sock = tokio::net::TcpSocket::new_v4().unwrap();
        sock.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let listener = sock.listen(8192).unwrap();
        let addr = listener.local_addr().unwrap();
        let (release, _) = watch::channel(0);
        let sent = Arc::new(AtomicU64::new(0));
        let (rel, s) = (release.clone(), sent.clone());
        tokio::spawn(async move {
            loop {
                let Ok((sock, _)) = listener.accept().await else {
                    continue;
                };
                let _ = sock.set_nodelay(true);
                let (rel, s) = (rel.subscribe(), s.clone());
                tokio::spawn(async move {
                    let _ = serve(sock, rel, s).await;
                });
            }
        });
        Producer {
            addr,
            release,
            sent,
        }
    }

    /// Lets every held stream finish.
    pub fn release(&self) {
        self.release.send_modify(|v| *v += 1);
    }
}

fn param(query: &str, name: &str) -> Option<u64> {
    query
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == name)
        .and_then(|(_, v)| v.parse().ok())
}

async fn serve(
    mut sock: TcpStream,
    mut release: watch::Receiver<u64>,
    sent: Arc<AtomicU64>,
) -> std::io::Result<()> {
    let mut buf = BytesMut::with_capacity(4096);
    loop {
        // One request per loop: head, then a content-length body.
        let end = loop {
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i;
            }
            if sock.read_buf(&mut buf).await? == 0 {
                return Ok(());
            }
        };
        let head = String::from_utf8_lossy(&buf[..end]).to_string();
        buf.advance(end + 4);
        let len: usize = head
            .lines()
            .filter_map(|l| l.split_once(':'))
            .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
            .and_then(|(_, v)| v.trim().parse().ok())
            .unwrap_or(0);
        while buf.len() < len {
            if sock.read_buf(&mut buf).await? == 0 {
                return Ok(());
            }
        }
        buf.advance(len);
        let target = head.split(' ').nth(1).unwrap_or("/");
        let query = target.split_once('?').map_or("", |(_, q)| q);
        let n = param(query, "n").unwrap_or(100);
        let size = param(query, "size").unwrap_or(8) as usize;
        let rate = param(query, "rate").unwrap_or(0);
        let hold = param(query, "hold").unwrap_or(0) == 1;
        // `wait=1`: the first event waits for [`Producer::release`] (readers attach first).
        let wait = param(query, "wait").unwrap_or(0) == 1;
        // `close=1`: the answer says `connection: close` and the connection ends with it, so
        // the hop opens a new backend connection for its next request.
        let close = param(query, "close").unwrap_or(0) == 1;
        let held_at = *release.borrow_and_update();
        let head: &[u8] = if close {
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n"
        } else {
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
        };
        sock.write_all(head).await?;
        if wait {
            let _ = release.wait_for(|v| *v > held_at).await;
        }
        if rate == 0 && !hold {
            // Full speed: a blocking thread writes one event per write(2), with no runtime in
            // between, so the producer is not what limits a hop.
            let std_sock = sock.into_std()?;
            std_sock.set_nonblocking(false)?;
            let s2 = sent.clone();
            let std_sock =
                tokio::task::spawn_blocking(move || write_all_events(std_sock, n, size, &s2))
                    .await
                    .map_err(std::io::Error::other)??;
            std_sock.set_nonblocking(true)?;
            sock = TcpStream::from_std(std_sock)?;
        } else {
            let pad: String = (0..size).map(|k| (b'a' + (k % 26) as u8) as char).collect();
            // Each paced stream keeps its own phase within the gap (a golden-ratio sequence over
            // the streams served), so streams that connect together do not write in lockstep:
            // 200 streams at 20/s are about 4 events a millisecond, not 200 in a burst every
            // 50 ms, which would measure queueing behind the burst instead of the hop.
            let phase = PACED.fetch_add(1, Ordering::Relaxed) as f64 * 0.618_033_988_749_895;
            let gap = 1_000_000_000u64.checked_div(rate);
            let offset = gap.map_or(0, |gap| (phase.fract() * gap as f64) as u64);
            let start = tokio::time::Instant::now() + Duration::from_nanos(offset);
            for i in 1..=n {
                if let Some(gap) = gap {
                    let due = start + Duration::from_nanos(i * gap);
                    if due > tokio::time::Instant::now() {
                        tokio::time::sleep_until(due).await;
                    }
                }
                sock.write_all(&event(&pad, i)).await?;
                sent.fetch_add(1, Ordering::Relaxed);
            }
        }
        if hold {
            let _ = release.wait_for(|v| *v > held_at).await;
        }
        let fin = "data: {\"type\":\"RUN_FINISHED\"}\n\n";
        let tail = format!("{:x}\r\n{fin}\r\n0\r\n\r\n", fin.len());
        sock.write_all(tail.as_bytes()).await?;
        if close {
            return sock.shutdown().await;
        }
    }
}

/// One chunk of the chunked body: an SSE event carrying index `i` and the send time.
fn event(pad: &str, i: u64) -> Vec<u8> {
    let body = format!(
        "data: {{\"type\":\"TEXT_MESSAGE_CONTENT\",\"messageId\":\"m1\",\"delta\":\"{pad}\",\"i\":{i},\"t\":{}}}\n\n",
        now_ns()
    );
    let mut frame = Vec::with_capacity(body.len() + 16);
    frame.extend_from_slice(format!("{:x}\r\n", body.len()).as_bytes());
    frame.extend_from_slice(body.as_bytes());
    frame.extend_from_slice(b"\r\n");
    frame
}

fn write_all_events(
    mut sock: std::net::TcpStream,
    n: u64,
    size: usize,
    sent: &AtomicU64,
) -> std::io::Result<std::net::TcpStream> {
    use std::io::Write;
    let pad: String = (0..size).map(|k| (b'a' + (k % 26) as u8) as char).collect();
    let mut buf = Vec::with_capacity(size + 128);
    let mut num = itoa::Buffer::new();
    let mut ts = itoa::Buffer::new();
    for i in 1..=n {
        buf.clear();
        let i_s = num.format(i);
        let t_s = ts.format(now_ns());
        let len = 77 + pad.len() + i_s.len() + t_s.len();
        let _ = write!(buf, "{len:x}\r\n");
        buf.extend_from_slice(
            b"data: {\"type\":\"TEXT_MESSAGE_CONTENT\",\"messageId\":\"m1\",\"delta\":\"",
        );
        buf.extend_from_slice(pad.as_bytes());
        buf.extend_from_slice(b"\",\"i\":");
        buf.extend_from_slice(i_s.as_bytes());
        buf.extend_from_slice(b",\"t\":");
        buf.extend_from_slice(t_s.as_bytes());
        buf.extend_from_slice(b"}\n\n\r\n");
        sock.write_all(&buf)?;
        sent.fetch_add(1, Ordering::Relaxed);
    }
    Ok(sock)
}
