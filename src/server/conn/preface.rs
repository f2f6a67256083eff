//! The first-byte deadline of an HTTP/2 connection: Pingora's HTTP/2 server waits for the
//! client's connection preface without a limit, so a client that finishes the TLS handshake and
//! then sends nothing would hold its connection for ever. [`Preface`] wraps the connection and
//! fails its reads once the deadline passes before the preface's 24 bytes have arrived (the
//! header deadline, as an HTTP/1.1 request head has); after them it is the connection as it was.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use async_trait::async_trait;
use pingora_core::protocols::raw_connect::ProxyDigest;
use pingora_core::protocols::tls::{SslDigest, TlsRef};
use pingora_core::protocols::{
    GetProxyDigest, GetSocketDigest, GetTimingDigest, Peek, Shutdown, SocketDigest, Ssl, Stream,
    TimingDigest, UniqueID, UniqueIDType, ALPN,
};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

/// A connection whose first byte must arrive by a deadline.
#[derive(Debug)]
pub struct Preface {
    inner: Stream,
    /// Until the preface has been read.
    deadline: Option<Pin<Box<Sleep>>>,
    /// Bytes read so far, up to the preface's length.
    read: usize,
}

/// The length of the HTTP/2 client connection preface (`PRI * HTTP/2.0…`).
const PREFACE_LEN: usize = 24;

impl Preface {
    /// Wraps `inner`: a read still waiting for the preface at `deadline` fails with `TimedOut`.
    pub fn new(inner: Stream, deadline: Instant) -> Self {
        Preface {
            inner,
            deadline: Some(Box::pin(tokio::time::sleep_until(deadline))),
            read: 0,
        }
    }
}

impl AsyncRead for Preface {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(r) => {
                this.read += buf.filled().len() - before;
                if this.read >= PREFACE_LEN {
                    this.deadline = None;
                }
                Poll::Ready(r)
            }
            Poll::Pending => {
                let late = match this.deadline.as_mut() {
                    Some(d) => d.as_mut().poll(cx).is_ready(),
                    None => false,
                };
                if late {
                    let e = std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "no HTTP/2 preface within the header deadline",
                    );
                    return Poll::Ready(Err(e));
                }
                Poll::Pending
            }
        }
    }
}

impl AsyncWrite for Preface {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

#[async_trait]
impl Shutdown for Preface {
    /// Runs when Pingora closes the connection: the wrapped connection's shutdown.
    async fn shutdown(&mut self) {
        self.inner.shutdown().await
    }
}

impl UniqueID for Preface {
    /// The wrapped connection's id.
    fn id(&self) -> UniqueIDType {
        self.inner.id()
    }
}

impl Ssl for Preface {
    /// The wrapped connection's TLS, for Pingora's digest.
    fn get_ssl(&self) -> Option<&TlsRef> {
        self.inner.get_ssl()
    }
    /// The wrapped connection's TLS digest.
    fn get_ssl_digest(&self) -> Option<Arc<SslDigest>> {
        self.inner.get_ssl_digest()
    }
    /// The protocol the handshake chose.
    fn selected_alpn_proto(&self) -> Option<ALPN> {
        self.inner.selected_alpn_proto()
    }
}

impl GetTimingDigest for Preface {
    /// The wrapped connection's timings.
    fn get_timing_digest(&self) -> Vec<Option<TimingDigest>> {
        self.inner.get_timing_digest()
    }
}

impl GetProxyDigest for Preface {
    /// The wrapped connection's proxy digest.
    fn get_proxy_digest(&self) -> Option<Arc<ProxyDigest>> {
        self.inner.get_proxy_digest()
    }
}

impl GetSocketDigest for Preface {
    /// The wrapped connection's socket digest.
    fn get_socket_digest(&self) -> Option<Arc<SocketDigest>> {
        self.inner.get_socket_digest()
    }
}

#[async_trait]
impl Peek for Preface {
    /// The wrapped connection's peek (TLS connections cannot).
    async fn try_peek(&mut self, buf: &mut [u8]) -> std::io::Result<bool> {
        self.inner.try_peek(buf).await
    }
}
