//! The fault-injecting proxy itself (`support::FaultProxy`), in front of an echo server: each
//! fault does what the fault tests rely on, and healing restores the connection.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::support::*;

/// An echo server on a free port: every connection gets back what it sends.
async fn echo() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 1024];
                while let Ok(n) = s.read(&mut buf).await {
                    if n == 0 || s.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    addr
}

async fn read_exact(s: &mut TcpStream, n: usize) -> Vec<u8> {
    let mut buf = vec![0u8; n];
    within("the echo", s.read_exact(&mut buf)).await.unwrap();
    buf
}

/// Nothing arrives on `s` within a short while. A negative has no readiness signal; the wait is
/// short because a positive would come back within microseconds on loopback.
async fn silent(s: &mut TcpStream) {
    let mut buf = [0u8; 16];
    let r = tokio::time::timeout(Duration::from_millis(100), s.read(&mut buf)).await;
    assert!(r.is_err(), "bytes arrived: {r:?}");
}

#[tokio::test]
async fn bytes_pass_and_latency_delays_them_in_order() {
    let proxy = FaultProxy::start(echo().await).await;
    let mut s = TcpStream::connect(proxy.addr).await.unwrap();
    s.write_all(b"one").await.unwrap();
    assert_eq!(read_exact(&mut s, 3).await, b"one");

    let d = Duration::from_millis(150);
    proxy.set(Fault::Latency(d));
    let sent = tokio::time::Instant::now();
    s.write_all(b"two").await.unwrap();
    s.write_all(b"three").await.unwrap();
    assert_eq!(read_exact(&mut s, 8).await, b"twothree");
    // Both directions are delayed: at least twice the latency for the round trip.
    assert!(sent.elapsed() >= 2 * d, "{:?}", sent.elapsed());
    assert_eq!(proxy.accepted(), 1);
}

#[tokio::test]
async fn a_stall_holds_the_bytes_until_it_heals() {
    let proxy = FaultProxy::start(echo().await).await;
    let mut s = TcpStream::connect(proxy.addr).await.unwrap();
    proxy.set(Fault::Stall);
    s.write_all(b"held").await.unwrap();
    silent(&mut s).await;
    proxy.heal();
    assert_eq!(read_exact(&mut s, 4).await, b"held");
}

#[tokio::test]
async fn a_blackhole_drops_the_bytes_and_the_connection_lives_on() {
    let proxy = FaultProxy::start(echo().await).await;
    let mut s = TcpStream::connect(proxy.addr).await.unwrap();
    proxy.set(Fault::Blackhole);
    s.write_all(b"lost").await.unwrap();
    eventually("the blackhole drops the bytes", || proxy.dropped() == 4).await;
    proxy.heal();
    s.write_all(b"kept").await.unwrap();
    assert_eq!(read_exact(&mut s, 4).await, b"kept");
}

#[tokio::test]
async fn a_reset_cuts_open_connections_and_refuse_cuts_new_ones() {
    let proxy = FaultProxy::start(echo().await).await;
    let mut s = TcpStream::connect(proxy.addr).await.unwrap();
    s.write_all(b"x").await.unwrap();
    assert_eq!(read_exact(&mut s, 1).await, b"x");
    proxy.reset();
    let mut buf = [0u8; 1];
    let r = within("the reset", s.read(&mut buf)).await;
    assert_eq!(
        r.map_err(|e| e.kind()).err(),
        Some(std::io::ErrorKind::ConnectionReset)
    );

    proxy.set(Fault::Refuse);
    let mut s = TcpStream::connect(proxy.addr).await.unwrap();
    let r = within("the refusal", s.read(&mut buf)).await;
    assert!(matches!(r, Ok(0) | Err(_)), "{r:?}");
    proxy.heal();
    let mut s = TcpStream::connect(proxy.addr).await.unwrap();
    s.write_all(b"y").await.unwrap();
    assert_eq!(read_exact(&mut s, 1).await, b"y");
    assert_eq!(proxy.accepted(), 3);
}
