//! Scenario 10: TLS against plain, in one run. Through a plain tether and an HTTPS one
//! (`--tls-cert`), both in front of the same producer: resume first byte of a completed run
//! (a new connection each time, so TLS pays its handshake; and HTTP/2 requests on one open
//! connection) and one stream's throughput (HTTP/1.1, HTTP/1.1 in TLS, HTTP/2). Then the cost
//! of the TLS handshake on a new backend connection: turns whose backend connection is never
//! reused (`close=1`), through a plain pipe and a TLS-terminating pipe in front of the producer.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use memchr::memmem;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio_rustls::rustls::{ClientConfig, RootCertStore, ServerConfig};
use tokio_rustls::{TlsAcceptor, TlsConnector};

use crate::producer::Producer;
use crate::scenarios::{percentile, KIB_PAD, TOKEN_PAD};
use crate::targets;
use crate::Row;

/// The scenario's number for `--only`.
pub const SCENARIO: u32 = 10;

/// A CA and a `localhost` certificate it signed, as PEM files in a directory of their own.
struct Certs {
    dir: PathBuf,
    ca: CertificateDer<'static>,
    cert: CertificateDer<'static>,
    key: Vec<u8>,
}

impl Certs {
    fn new() -> Certs {
        let dir = std::env::temp_dir().join(format!("tether-load-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("cert dir");
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("ca");
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca_key = rcgen::KeyPair::generate().expect("ca key");
        let ca = ca_params.self_signed(&ca_key).expect("ca cert");
        let params = rcgen::CertificateParams::new(vec!["localhost".to_string()]).expect("leaf");
        let key = rcgen::KeyPair::generate().expect("key");
        let cert = params.signed_by(&key, &ca, &ca_key).expect("cert");
        std::fs::write(dir.join("ca.pem"), ca.pem()).expect("write");
        std::fs::write(dir.join("tls.crt"), cert.pem()).expect("write");
        std::fs::write(dir.join("tls.key"), key.serialize_pem()).expect("write");
        Certs {
            dir,
            ca: ca.der().clone(),
            cert: cert.der().clone(),
            key: key.serialize_der(),
        }
    }

    fn path(&self, name: &str) -> String {
        self.dir.join(name).to_string_lossy().into_owned()
    }

    fn connector(&self, alpn: &[u8]) -> TlsConnector {
        let mut roots = RootCertStore::empty();
        roots.add(self.ca.clone()).expect("root");
        let mut c = ClientConfig::builder()
            .with_root_certificates(roots)
            .with_no_client_auth();
        c.alpn_protocols = vec![alpn.to_vec()];
        TlsConnector::from(Arc::new(c))
    }

    fn acceptor(&self) -> TlsAcceptor {
        let key = PrivateKeyDer::try_from(self.key.clone()).expect("key der");
        let c = ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(vec![self.cert.clone()], key)
            .expect("server config");
        TlsAcceptor::from(Arc::new(c))
    }
}

impl Drop for Certs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// A connection to `addr`: plain, or TLS (ALPN `http/1.1`) when `tls` is given.
async fn connect(addr: SocketAddr, tls: Option<&TlsConnector>) -> Box<dyn Io> {
    let tcp = TcpStream::connect(addr).await.expect("connect");
    tcp.set_nodelay(true).expect("nodelay");
    match tls {
        None => Box::new(tcp),
        Some(c) => Box::new(
            c.connect(ServerName::try_from("localhost").expect("name"), tcp)
                .await
                .expect("TLS handshake"),
        ),
    }
}

/// One HTTP/1.1 request (`connection: close`) on a new connection: the time to the first body
/// byte, the body bytes, and the whole answer's text when `keep` (else only counted).
async fn h1(
    addr: SocketAddr,
    tls: Option<&TlsConnector>,
    path: &str,
    body: &str,
    keep: bool,
) -> (Duration, u64, String) {
    let t = Instant::now();
    let mut s = connect(addr, tls).await;
    let req = format!(
        "POST {path} HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.expect("write");
    let mut buf = vec![0u8; 256 * 1024];
    let mut head = Vec::new();
    let mut first = None;
    let mut bytes = 0u64;
    let mut text = String::new();
    loop {
        let n = s.read(&mut buf).await.unwrap_or(0);
        if n == 0 {
            break;
        }
        if first.is_none() {
            head.extend_from_slice(&buf[..n]);
            if let Some(i) = memmem::find(&head, b"\r\n\r\n") {
                if head.len() > i + 4 {
                    first = Some(t.elapsed());
                }
                bytes += (head.len() - i - 4) as u64;
                if keep {
                    text.push_str(&String::from_utf8_lossy(&head));
                }
            }
            continue;
        }
        bytes += n as u64;
        if keep {
            text.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    }
    (first.unwrap_or_else(|| t.elapsed()), bytes, text)
}

/// An HTTP/2 connection to the HTTPS tether.
async fn h2_connect(addr: SocketAddr, certs: &Certs) -> h2::client::SendRequest<Bytes> {
    let tcp = TcpStream::connect(addr).await.expect("connect");
    tcp.set_nodelay(true).expect("nodelay");
    let tls = certs
        .connector(b"h2")
        .connect(ServerName::try_from("localhost").expect("name"), tcp)
        .await
        .expect("TLS handshake");
    let (send, conn) = h2::client::handshake(tls).await.expect("h2 handshake");
    tokio::spawn(async move {
        let _ = conn.await;
    });
    send
}

/// One HTTP/2 request on an open connection: the time to the first body byte and the bytes.
async fn h2(send: &h2::client::SendRequest<Bytes>, path: &str, body: &str) -> (Duration, u64) {
    let t = Instant::now();
    let req = http::Request::post(format!("https://localhost{path}"))
        .header("content-type", "application/json")
        .body(())
        .expect("request");
    let mut send = send.clone().ready().await.expect("a stream");
    let (resp, mut out) = send.send_request(req, false).expect("send");
    out.send_data(Bytes::copy_from_slice(body.as_bytes()), true)
        .expect("body");
    let mut recv = resp.await.expect("response").into_body();
    let mut first = None;
    let mut bytes = 0u64;
    while let Some(Ok(d)) = recv.data().await {
        first.get_or_insert_with(|| t.elapsed());
        bytes += d.len() as u64;
        let _ = recv.flow_control().release_capacity(d.len());
    }
    (first.unwrap_or_else(|| t.elapsed()), bytes)
}

/// The run id of a protocol-1 answer's first frame.
fn run_id(text: &str) -> String {
    text.split("\"run_id\":\"")
        .nth(1)
        .and_then(|s| s.split('"').next())
        .unwrap_or_default()
        .to_string()
}

fn p50_ms(mut v: Vec<u64>) -> f64 {
    v.sort_unstable();
    percentile(&v, 0.5) / 1000.0
}

fn row(scenario: &str, target: &'static str, figures: Vec<(&'static str, f64)>) -> Row {
    Row {
        scenario: scenario.into(),
        target,
        figures,
        notes: String::new(),
    }
}

/// A TCP pipe to `target` on loopback, terminating TLS first when `tls` is given.
async fn pipe(target: SocketAddr, tls: Option<TlsAcceptor>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let tls = tls.clone();
            tokio::spawn(async move {
                let _ = tcp.set_nodelay(true);
                let Ok(mut up) = TcpStream::connect(target).await else {
                    return;
                };
                let _ = up.set_nodelay(true);
                match tls {
                    None => {
                        let mut tcp = tcp;
                        let _ = tokio::io::copy_bidirectional(&mut tcp, &mut up).await;
                    }
                    Some(a) => {
                        if let Ok(mut s) = a.accept(tcp).await {
                            let _ = tokio::io::copy_bidirectional(&mut s, &mut up).await;
                        }
                    }
                }
            });
        }
    });
    addr
}

/// Scenario 10, `tries` measurements per figure.
pub(crate) async fn run(bin: &str, p: &Producer, quick: bool) -> Vec<Row> {
    let _ = tokio_rustls::rustls::crypto::ring::default_provider().install_default();
    let tries = if quick { 20 } else { 100 };
    let certs = Certs::new();
    let (cert, key) = (certs.path("tls.crt"), certs.path("tls.key"));
    let plain = targets::tether(bin, p.addr, &[]);
    let https = targets::tether(bin, p.addr, &["--tls-cert", &cert, "--tls-key", &key]);
    let tls = certs.connector(b"http/1.1");
    let mut rows = Vec::new();

    // Resume first byte: a completed run of 1,000 token events, read again from cursor 0.
    let mut first = [Vec::new(), Vec::new(), Vec::new()];
    let record = |c: &str| format!("{{\"chat_id\":\"{c}\",\"protocol\":1}}");
    let (_, _, a) = h1(plain.addr, None, "/chat?n=1000&size=4", &record("rf"), true).await;
    let (_, _, b) = h1(
        https.addr,
        Some(&tls),
        "/chat?n=1000&size=4",
        &record("rf"),
        true,
    )
    .await;
    let attach = |run: &str| {
        format!("{{\"chat_id\":\"rf\",\"protocol\":1,\"run_id\":\"{run}\",\"after_seq\":0}}")
    };
    let (plain_run, https_run) = (run_id(&a), run_id(&b));
    let conn = h2_connect(https.addr, &certs).await;
    for _ in 0..tries {
        let (t, ..) = h1(plain.addr, None, "/chat/live", &attach(&plain_run), false).await;
        first[0].push(t.as_nanos() as u64);
        let (t, ..) = h1(
            https.addr,
            Some(&tls),
            "/chat/live",
            &attach(&https_run),
            false,
        )
        .await;
        first[1].push(t.as_nanos() as u64);
        let (t, _) = h2(&conn, "/chat/live", &attach(&https_run)).await;
        first[2].push(t.as_nanos() as u64);
    }
    let [f0, f1, f2] = first;
    let s = "10 TLS resume first byte 1000";
    rows.push(row(s, "plain", vec![("p50_ms", p50_ms(f0))]));
    rows.push(row(s, "https1", vec![("p50_ms", p50_ms(f1))]));
    rows.push(row(s, "h2", vec![("p50_ms", p50_ms(f2))]));

    // One stream's throughput: a turn of 1 KiB events at the producer's full speed.
    let n = if quick { 5_000 } else { 20_000 };
    let q = format!("/chat?n={n}&size={KIB_PAD}");
    let mbps = |bytes: u64, t: Duration| bytes as f64 / t.as_secs_f64() / 1e6;
    let t = Instant::now();
    let (_, bytes, _) = h1(plain.addr, None, &q, &record("tp1"), false).await;
    let plain_mbps = mbps(bytes, t.elapsed());
    let t = Instant::now();
    let (_, bytes, _) = h1(https.addr, Some(&tls), &q, &record("tp2"), false).await;
    let https_mbps = mbps(bytes, t.elapsed());
    let t = Instant::now();
    let (_, bytes) = h2(&conn, &q, &record("tp3")).await;
    let h2_mbps = mbps(bytes, t.elapsed());
    let s = "10 TLS one-stream throughput";
    rows.push(row(s, "plain", vec![("MB_per_s", plain_mbps)]));
    rows.push(row(s, "https1", vec![("MB_per_s", https_mbps)]));
    rows.push(row(s, "h2", vec![("MB_per_s", h2_mbps)]));
    drop((plain, https));

    // The TLS handshake on a new backend connection: every turn's connection is closed after it.
    let plain_pipe = pipe(p.addr, None).await;
    let tls_pipe = pipe(p.addr, Some(certs.acceptor())).await;
    let to_plain = targets::tether(bin, plain_pipe, &[]);
    let to_tls = targets::tether_url(
        bin,
        &format!("https://localhost:{}", tls_pipe.port()),
        &["--upstream-ca", &certs.path("ca.pem")],
    );
    let q = format!("/chat?n=1&size={TOKEN_PAD}&close=1");
    for (name, hop) in [("plain", &to_plain), ("https", &to_tls)] {
        let mut v = Vec::with_capacity(tries);
        let cpu = hop.cpu_seconds();
        for i in 0..tries {
            let (t, ..) = h1(hop.addr, None, &q, &record(&format!("hs{i}")), false).await;
            v.push(t.as_nanos() as u64);
        }
        let cpu_ms = (hop.cpu_seconds() - cpu) * 1000.0 / tries as f64;
        rows.push(row(
            "10 TLS new backend connection",
            if name == "plain" { "plain" } else { "https" },
            vec![
                ("turn_first_byte_p50_ms", p50_ms(v)),
                ("cpu_ms_per_turn", cpu_ms),
            ],
        ));
    }
    rows
}
