//! HTTPS clients for the tests, trusting a [`TestCa`]: an HTTP/2 client (the `h2` crate, one
//! connection and as many concurrent streams as the test opens, each of which it can reset on
//! purpose) and a one-request HTTP/1.1-over-TLS client.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use h2::client::SendRequest;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::rustls::pki_types::ServerName;
use tokio_rustls::rustls::{ClientConfig, RootCertStore};
use tokio_rustls::TlsConnector;

use super::{parse_frame, within, Frame, TestCa};

/// A TLS connection to `addr` for `localhost`, trusting `ca`, offering `alpn`. The error is the
/// handshake's.
pub async fn tls_connect(
    addr: SocketAddr,
    ca: &TestCa,
    alpn: &[&[u8]],
) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
    let _ = tokio_rustls::rustls::crypto::ring::default_provider().install_default();
    let mut roots = RootCertStore::empty();
    roots.add(ca.der()).unwrap();
    let mut config = ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    let tcp = TcpStream::connect(addr).await?;
    TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
}

/// One HTTP/2 connection (a clone opens streams on the same one).
#[derive(Clone)]
pub struct H2 {
    send: SendRequest<Bytes>,
}

/// One HTTP/2 response being read.
pub struct H2Resp {
    pub status: u16,
    pub headers: http::HeaderMap,
    body: h2::RecvStream,
    /// The request side of the stream, kept to reset it.
    req: h2::SendStream<Bytes>,
    buf: BytesMut,
}

impl H2 {
    /// Connects over TLS (ALPN `h2` only; the server must pick it) and starts HTTP/2.
    pub async fn connect(addr: SocketAddr, ca: &TestCa) -> H2 {
        let tls = tls_connect(addr, ca, &[b"h2"]).await.unwrap();
        assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
        let (send, conn) = h2::client::handshake(tls).await.unwrap();
        tokio::spawn(async move {
            let _ = conn.await;
        });
        H2 { send }
    }

    /// Sends a request on a new stream of the connection and reads the response head.
    pub async fn request(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> H2Resp {
        let mut b = http::Request::builder()
            .method(method)
            .uri(format!("https://localhost{path}"));
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        let send = self.send.clone();
        let mut send = within("a stream slot", send.ready()).await.unwrap();
        // Without a body the HEADERS frame ends the stream: a server that answers at once (and
        // resets the half the client left open) could otherwise beat an empty DATA frame to it.
        let (resp, mut req) = send
            .send_request(b.body(()).unwrap(), body.is_empty())
            .unwrap();
        if !body.is_empty() {
            req.send_data(Bytes::copy_from_slice(body), true).unwrap();
        }
        let resp = within("the response head", resp).await.unwrap();
        let (parts, body) = resp.into_parts();
        H2Resp {
            status: parts.status.as_u16(),
            headers: parts.headers,
            body,
            req,
            buf: BytesMut::new(),
        }
    }

    /// Starts a request and leaves its body to the test (which may never send it): the
    /// response to come, and the request side of the stream.
    pub async fn start(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
    ) -> (h2::client::ResponseFuture, h2::SendStream<Bytes>) {
        let mut b = http::Request::builder()
            .method(method)
            .uri(format!("https://localhost{path}"));
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        let send = self.send.clone();
        let mut send = within("a stream slot", send.ready()).await.unwrap();
        send.send_request(b.body(()).unwrap(), false).unwrap()
    }

    /// The streams the server lets this connection have open at once (its
    /// `SETTINGS_MAX_CONCURRENT_STREAMS`, once its SETTINGS have arrived).
    pub fn max_streams(&self) -> usize {
        self.send.current_max_send_streams()
    }

    /// POSTs JSON.
    pub async fn post(&mut self, path: &str, body: &Value) -> H2Resp {
        let bytes = serde_json::to_vec(body).unwrap();
        self.request(
            "POST",
            path,
            &[("content-type", "application/json")],
            &bytes,
        )
        .await
    }
}

impl H2Resp {
    /// The response a started stream gets ([`H2::start`]), its head read.
    pub async fn of(resp: h2::client::ResponseFuture, req: h2::SendStream<Bytes>) -> H2Resp {
        let resp = within("the response head", resp).await.unwrap();
        let (parts, body) = resp.into_parts();
        H2Resp {
            status: parts.status.as_u16(),
            headers: parts.headers,
            body,
            req,
            buf: BytesMut::new(),
        }
    }

    /// More body into the buffer (flow-control capacity given back); false at its end.
    async fn fill(&mut self) -> bool {
        match self.body.data().await {
            Some(Ok(d)) => {
                let _ = self.body.flow_control().release_capacity(d.len());
                self.buf.extend_from_slice(&d);
                true
            }
            _ => false,
        }
    }

    /// The next SSE frame's JSON (comments skipped); `None` when the body ends.
    pub async fn frame(&mut self) -> Option<Frame> {
        within("frame", async {
            loop {
                if let Some(i) = self.buf.windows(2).position(|w| w == b"\n\n") {
                    let text = self.buf.split_to(i + 2);
                    match parse_frame(std::str::from_utf8(&text).unwrap()) {
                        Some(f) => return Some(f),
                        None => continue,
                    }
                }
                if !self.fill().await {
                    return None;
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

    /// The whole remaining body.
    pub async fn body_to_end(&mut self) -> Bytes {
        within("body", async { while self.fill().await {} }).await;
        self.buf.split().freeze()
    }

    /// Resets the stream (`RST_STREAM` with `CANCEL`), as a browser does for a closed tab's
    /// request on a connection it keeps.
    pub fn reset(mut self) {
        self.req.send_reset(h2::Reason::CANCEL);
    }
}

/// One HTTP/1.1 request over TLS (ALPN `http/1.1`), `connection: close`: the ALPN the server
/// picked and the whole response as sent.
pub async fn https1(addr: SocketAddr, ca: &TestCa, head: &str, body: &[u8]) -> (Vec<u8>, Bytes) {
    let mut tls = tls_connect(addr, ca, &[b"http/1.1"]).await.unwrap();
    let alpn = tls.get_ref().1.alpn_protocol().unwrap_or_default().to_vec();
    tls.write_all(head.as_bytes()).await.unwrap();
    tls.write_all(body).await.unwrap();
    let mut out = Vec::new();
    within("the HTTPS answer", async {
        let _ = tls.read_to_end(&mut out).await;
    })
    .await;
    (alpn, Bytes::from(out))
}
