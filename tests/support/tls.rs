//! Real TLS on loopback for the tests: a CA and certificates made by the test (rcgen; nothing
//! committed), their PEM files in a directory of the test's own, and a TLS front that terminates
//! TLS (optionally requiring a client certificate of the CA) and pipes the plain bytes to one of
//! the harness's plain backends, so any scripted backend can be served over HTTPS.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::{RootCertStore, ServerConfig};
use tokio_rustls::TlsAcceptor;

/// A certificate authority of the test's own.
pub struct TestCa {
    cert: rcgen::Certificate,
    key: KeyPair,
    /// The directory holding the PEM files the test hands to tether.
    pub dir: PathBuf,
    /// The CA certificate's PEM file.
    pub pem: PathBuf,
}

/// A certificate issued by a [`TestCa`], with its key.
pub struct Issued {
    /// The certificate, DER.
    pub der: CertificateDer<'static>,
    /// Its key, DER (PKCS#8).
    pub key_der: Vec<u8>,
    /// Its PEM file.
    pub cert_pem: PathBuf,
    /// Its key's PEM file.
    pub key_pem: PathBuf,
}

fn provider() {
    // Both ring and aws-lc may be compiled in through dependencies: pick one, once.
    let _ = tokio_rustls::rustls::crypto::ring::default_provider().install_default();
}

impl TestCa {
    /// A fresh CA named `name`; its certificate is written to `<dir>/<name>-ca.pem`.
    pub fn new(name: &str) -> TestCa {
        provider();
        let dir = std::env::temp_dir().join(format!(
            "tether-tls-{}-{name}-{}",
            std::process::id(),
            rand_suffix()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, format!("tether test CA {name}"));
        let key = KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        let pem = dir.join(format!("{name}-ca.pem"));
        std::fs::write(&pem, cert.pem()).unwrap();
        TestCa {
            cert,
            key,
            dir,
            pem,
        }
    }

    /// The CA certificate, DER.
    pub fn der(&self) -> CertificateDer<'static> {
        self.cert.der().clone()
    }

    /// A certificate for `names` (DNS names and IP addresses), written as `<file>.pem` and
    /// `<file>-key.pem`.
    pub fn issue(&self, file: &str, names: &[&str]) -> Issued {
        let params =
            CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .unwrap();
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.cert, &self.key).unwrap();
        let key_pair = key;
        let cert_pem = self.dir.join(format!("{file}.pem"));
        let key_pem = self.dir.join(format!("{file}-key.pem"));
        std::fs::write(&cert_pem, cert.pem()).unwrap();
        std::fs::write(&key_pem, key_pair.serialize_pem()).unwrap();
        Issued {
            der: cert.der().clone(),
            key_der: key_pair.serialize_der(),
            cert_pem,
            key_pem,
        }
    }
}

impl Drop for TestCa {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn rand_suffix() -> u64 {
    use std::time::{SystemTime, UNIX_EPOCH};
    static N: AtomicU64 = AtomicU64::new(0);
    let t = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .subsec_nanos() as u64;
    t ^ (N.fetch_add(1, Ordering::Relaxed) << 40)
}

/// A TLS front: accepts TLS with `server`'s certificate and pipes each connection's plain bytes
/// to `target`. Counts the handshakes it completed.
pub struct TlsFront {
    /// Where tether connects (`https://localhost:<port>`).
    pub addr: SocketAddr,
    handshakes: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl TlsFront {
    /// A front for `target` presenting `server`; with `client_ca`, a client must present a
    /// certificate of that CA.
    pub async fn start(target: SocketAddr, server: &Issued, client_ca: Option<&TestCa>) -> Self {
        provider();
        let builder = ServerConfig::builder();
        let builder = match client_ca {
            None => builder.with_no_client_auth(),
            Some(ca) => {
                let mut roots = RootCertStore::empty();
                roots.add(ca.der()).unwrap();
                builder.with_client_cert_verifier(
                    WebPkiClientVerifier::builder(Arc::new(roots))
                        .build()
                        .unwrap(),
                )
            }
        };
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(server.key_der.clone()));
        let config = builder
            .with_single_cert(vec![server.der.clone()], key)
            .unwrap();
        let acceptor = TlsAcceptor::from(Arc::new(config));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let handshakes = Arc::new(AtomicU64::new(0));
        let count = handshakes.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((sock, _)) = listener.accept().await else {
                    return;
                };
                let acceptor = acceptor.clone();
                let count = count.clone();
                tokio::spawn(async move {
                    let Ok(mut tls) = acceptor.accept(sock).await else {
                        return;
                    };
                    count.fetch_add(1, Ordering::Relaxed);
                    let Ok(mut plain) = TcpStream::connect(target).await else {
                        return;
                    };
                    let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
                });
            }
        });
        TlsFront {
            addr,
            handshakes,
            task,
        }
    }

    /// TLS handshakes completed so far.
    pub fn handshakes(&self) -> u64 {
        self.handshakes.load(Ordering::Relaxed)
    }

    /// `https://localhost:<port>`.
    pub fn url(&self) -> String {
        format!("https://localhost:{}", self.addr.port())
    }
}

impl Drop for TlsFront {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A path as TOML string text.
pub fn toml_path(p: &Path) -> String {
    p.display().to_string().replace('\\', "\\\\")
}

/// A redis-server speaking TLS on `tls_port` (with the CA's certificate for `localhost`) beside
/// its plain port, which only the test's own look inside uses ([`JournalRedis::keys`], …); the
/// replicas journal to `rediss://localhost:<tls_port>` trusting `trusted`.
pub struct TlsRedis {
    /// The server (its plain port).
    pub server: super::RedisServer,
    /// The TLS port.
    pub tls_port: u16,
    toml: String,
}

impl TlsRedis {
    /// Starts the server with `cert` issued by `ca`; the replicas trust `trusted` (`ca`, or
    /// another CA to see them refuse). With `client`, Redis requires a client certificate of
    /// `ca` and the replicas present `client`.
    pub fn start(ca: &TestCa, cert: &Issued, trusted: &TestCa, client: Option<&Issued>) -> Self {
        let server = super::RedisServer::start_on(|| {
            let args = [
                "--tls-port",
                &super::redis::free_port().to_string(),
                "--tls-cert-file",
                &toml_path(&cert.cert_pem),
                "--tls-key-file",
                &toml_path(&cert.key_pem),
                "--tls-ca-cert-file",
                &toml_path(&ca.pem),
                "--tls-auth-clients",
                if client.is_some() { "yes" } else { "no" },
            ]
            .map(str::to_string)
            .to_vec();
            (super::redis::free_port(), args)
        });
        let kv: Vec<String> = server.query(&["CONFIG", "GET", "tls-port"]);
        let tls_port: u16 = kv[1].parse().unwrap();
        let mut toml = format!(
            "url = \"rediss://localhost:{tls_port}\"\nca = \"{}\"\n",
            toml_path(&trusted.pem)
        );
        if let Some(c) = client {
            toml.push_str(&format!(
                "cert = \"{}\"\nkey = \"{}\"\n",
                toml_path(&c.cert_pem),
                toml_path(&c.key_pem)
            ));
        }
        TlsRedis {
            server,
            tls_port,
            toml,
        }
    }
}

impl super::JournalRedis for TlsRedis {
    fn journal_toml(&self) -> String {
        self.toml.clone()
    }

    fn keys(&self, pattern: &str) -> Vec<String> {
        self.server.keys(pattern)
    }

    fn channels(&self, pattern: &str) -> Vec<String> {
        self.server.channels(pattern)
    }

    fn first_port(&self) -> u16 {
        self.server.first_port()
    }
}

/// A Redis Cluster of three masters serving TLS (`--tls-port`, the cluster bus over TLS too,
/// `--tls-cluster yes`), each node with `cert` issued by `ca`; the replicas journal to the
/// `rediss://` seeds trusting `ca`. The plain ports stay for the test's own look inside.
pub struct TlsRedisCluster {
    /// The cluster (its nodes' plain ports).
    pub cluster: super::RedisCluster,
    toml: String,
}

impl TlsRedisCluster {
    /// Starts the three nodes; `cert` must name `127.0.0.1`, the address the nodes announce.
    pub fn start(ca: &TestCa, cert: &Issued) -> Self {
        let cluster = super::RedisCluster::start_with(|| {
            let tls_port = super::redis::free_port();
            [
                "--tls-port",
                &tls_port.to_string(),
                "--tls-cluster",
                "yes",
                "--tls-cert-file",
                &toml_path(&cert.cert_pem),
                "--tls-key-file",
                &toml_path(&cert.key_pem),
                "--tls-ca-cert-file",
                &toml_path(&ca.pem),
                "--tls-auth-clients",
                "no",
            ]
            .map(str::to_string)
            .to_vec()
        });
        let seeds: Vec<String> = cluster
            .nodes
            .iter()
            .map(|n| {
                let kv: Vec<String> = n.query(&["CONFIG", "GET", "tls-port"]);
                format!("rediss://127.0.0.1:{}", kv[1])
            })
            .collect();
        let toml = format!(
            "cluster = true\nurl = \"{}\"\nca = \"{}\"\n",
            seeds.join(","),
            toml_path(&ca.pem)
        );
        TlsRedisCluster { cluster, toml }
    }
}

impl super::JournalRedis for TlsRedisCluster {
    fn journal_toml(&self) -> String {
        self.toml.clone()
    }

    fn keys(&self, pattern: &str) -> Vec<String> {
        self.cluster.keys(pattern)
    }

    fn channels(&self, pattern: &str) -> Vec<String> {
        self.cluster.channels(pattern)
    }

    fn first_port(&self) -> u16 {
        self.cluster.first_port()
    }
}
