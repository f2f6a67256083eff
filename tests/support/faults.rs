//! A fault-injecting TCP proxy for the tests: placed between two parties (replicas and Redis,
//! tether and the backend), it passes bytes through until the test tells it to add latency,
//! stall, blackhole, reset or refuse, and heals on command.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{ReadHalf, WriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{broadcast, mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// What the proxy does to the bytes it reads, from the moment it is set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Bytes pass through as they arrive.
    Pass,
    /// Each chunk is delivered this long after it was read, in order (one-way latency).
    Latency(Duration),
    /// Bytes are read and held, never delivered, until the fault changes (then they go on):
    /// a peer that accepts and reads but never answers.
    Stall,
    /// Bytes are read and dropped silently; connections stay open.
    Blackhole,
    /// New connections are reset as soon as they are accepted; open ones carry on.
    Refuse,
}

/// The proxy: listens on `addr` (127.0.0.1, a free port) and forwards every connection to its
/// target. Dropped, it stops accepting and resets what is open.
pub struct FaultProxy {
    /// Where the party that should go through the proxy connects.
    pub addr: SocketAddr,
    fault: watch::Sender<Fault>,
    resets: broadcast::Sender<()>,
    accepted: Arc<AtomicU64>,
    dropped: Arc<AtomicU64>,
    task: JoinHandle<()>,
}

impl FaultProxy {
    /// A proxy in front of `target`, passing bytes through.
    pub async fn start(target: SocketAddr) -> FaultProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local addr");
        let (fault, _) = watch::channel(Fault::Pass);
        let (resets, _) = broadcast::channel(4);
        let accepted = Arc::new(AtomicU64::new(0));
        let dropped = Arc::new(AtomicU64::new(0));
        let task = tokio::spawn(accept(
            listener,
            target,
            fault.clone(),
            resets.clone(),
            accepted.clone(),
            dropped.clone(),
        ));
        FaultProxy {
            addr,
            fault,
            resets,
            accepted,
            dropped,
            task,
        }
    }

    /// Sets the fault for every connection, open or new.
    pub fn set(&self, fault: Fault) {
        self.fault.send_replace(fault);
    }

    /// Back to passing bytes through (held bytes of a stall are delivered).
    pub fn heal(&self) {
        self.set(Fault::Pass);
    }

    /// Resets (RST) every connection open now, both sides; the fault stays as it is.
    pub fn reset(&self) {
        let _ = self.resets.send(());
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> u64 {
        self.accepted.load(Ordering::SeqCst)
    }

    /// Bytes a blackhole has dropped so far, both directions.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::SeqCst)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.reset();
        self.task.abort();
    }
}

async fn accept(
    listener: TcpListener,
    target: SocketAddr,
    fault: watch::Sender<Fault>,
    resets: broadcast::Sender<()>,
    accepted: Arc<AtomicU64>,
    dropped: Arc<AtomicU64>,
) {
    while let Ok((client, _)) = listener.accept().await {
        accepted.fetch_add(1, Ordering::SeqCst);
        if *fault.borrow() == Fault::Refuse {
            rst(&client);
            continue;
        }
        let (fault, reset, dropped) = (fault.subscribe(), resets.subscribe(), dropped.clone());
        tokio::spawn(async move {
            if let Ok(server) = TcpStream::connect(target).await {
                connection(client, server, fault, reset, dropped).await;
            } else {
                rst(&client);
            }
        });
    }
}

/// Zero linger, so dropping the socket sends RST.
fn rst(sock: &TcpStream) {
    let _ = socket2::SockRef::from(sock).set_linger(Some(Duration::ZERO));
}

async fn connection(
    mut client: TcpStream,
    mut server: TcpStream,
    fault: watch::Receiver<Fault>,
    mut reset: broadcast::Receiver<()>,
    dropped: Arc<AtomicU64>,
) {
    let was_reset = {
        let (cr, cw) = client.split();
        let (sr, sw) = server.split();
        let both = async {
            tokio::join!(
                pump(cr, sw, fault.clone(), &dropped),
                pump(sr, cw, fault.clone(), &dropped)
            );
        };
        tokio::select! {
            _ = both => false,
            _ = reset.recv() => true,
        }
    };
    if was_reset {
        rst(&client);
        rst(&server);
    }
}

/// One direction of a connection: a reader that stamps each chunk with the time it may be
/// delivered (or drops it), and a writer that delivers in order once no stall holds it.
async fn pump(
    mut from: ReadHalf<'_>,
    mut to: WriteHalf<'_>,
    fault: watch::Receiver<Fault>,
    dropped: &AtomicU64,
) {
    let (tx, mut rx) = mpsc::unbounded_channel::<Option<(Instant, Bytes)>>();
    let read = {
        let fault = fault.clone();
        async move {
            let mut buf = vec![0u8; 16 * 1024];
            loop {
                match from.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        let at = match *fault.borrow() {
                            Fault::Blackhole => {
                                dropped.fetch_add(n as u64, Ordering::SeqCst);
                                continue;
                            }
                            Fault::Latency(d) => Instant::now() + d,
                            _ => Instant::now(),
                        };
                        if tx
                            .send(Some((at, Bytes::copy_from_slice(&buf[..n]))))
                            .is_err()
                        {
                            break;
                        }
                    }
                }
            }
            let _ = tx.send(None);
        }
    };
    let write = async move {
        let mut fault = fault;
        while let Some(Some((at, chunk))) = rx.recv().await {
            // A stall holds everything read since; it goes on when the stall ends.
            while *fault.borrow_and_update() == Fault::Stall {
                if fault.changed().await.is_err() {
                    return;
                }
            }
            tokio::time::sleep_until(at).await;
            if to.write_all(&chunk).await.is_err() {
                return;
            }
        }
        let _ = to.shutdown().await;
    };
    tokio::join!(read, write);
}
