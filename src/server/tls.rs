//! HTTPS on the proxy listener: the certificate chain and key (`--tls-cert`, `--tls-key`) read
//! from PEM files and checked at start, ALPN `h2` then `http/1.1`, and a reload on SIGHUP that
//! the next handshake sees while open connections (and their streams) go on.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use log::{info, warn};
use parking_lot::RwLock;
use pingora_core::listeners::tls::Acceptor;
use pingora_core::protocols::l4::stream::Stream as L4Stream;
use pingora_core::protocols::Stream;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use crate::backend::tls::{certificates, private_key};

/// The listener's TLS: the acceptor and the certificate it serves now.
pub struct ListenerTls {
    cert: PathBuf,
    key: PathBuf,
    current: Arc<RwLock<Arc<CertifiedKey>>>,
    acceptor: Acceptor,
}

impl std::fmt::Debug for ListenerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ListenerTls")
            .field("cert", &self.cert)
            .field("key", &self.key)
            .finish()
    }
}

/// Hands every handshake the certificate loaded last.
#[derive(Debug)]
struct Current(Arc<RwLock<Arc<CertifiedKey>>>);

impl ResolvesServerCert for Current {
    /// Runs in each handshake, once the client's hello is read: the current certificate,
    /// whatever name the client asked for.
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.read().clone())
    }
}

impl ListenerTls {
    /// Reads and checks the certificate chain and key (the key must match the chain's first
    /// certificate). The error names the file and what is wrong with it.
    pub fn load(cert: &Path, key: &Path) -> Result<Self, String> {
        let current = Arc::new(RwLock::new(Arc::new(certified(cert, key)?)));
        let mut config = rustls::ServerConfig::builder_with_protocol_versions(&[
            &rustls::version::TLS12,
            &rustls::version::TLS13,
        ])
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(Current(current.clone())));
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(ListenerTls {
            cert: cert.to_path_buf(),
            key: key.to_path_buf(),
            current,
            acceptor: Acceptor::from_server_config(Arc::new(config)),
        })
    }

    /// Reads both files again (on SIGHUP). New handshakes get the new certificate; on an error
    /// the one in use is kept and the error returned (and logged).
    pub fn reload(&self) -> Result<(), String> {
        match certified(&self.cert, &self.key) {
            Ok(k) => {
                *self.current.write() = Arc::new(k);
                info!("listener certificate reloaded from {}", self.cert.display());
                Ok(())
            }
            Err(e) => {
                warn!("listener certificate not reloaded, the one in use is kept: {e}");
                Err(e)
            }
        }
    }

    /// The server side of a TLS handshake on an accepted connection.
    pub async fn handshake(&self, tcp: tokio::net::TcpStream) -> pingora_core::Result<Stream> {
        let tls = self.acceptor.tls_handshake(L4Stream::from(tcp)).await?;
        Ok(Box::new(tls))
    }
}

/// The certificate chain and key of two PEM files, checked to belong together.
fn certified(cert: &Path, key: &Path) -> Result<CertifiedKey, String> {
    let chain: Vec<CertificateDer<'static>> = certificates(cert)?
        .into_iter()
        .map(CertificateDer::from)
        .collect();
    let der = PrivateKeyDer::try_from(private_key(key)?)
        .map_err(|e| format!("{}: the private key is not usable: {e}", key.display()))?;
    let provider = rustls::crypto::ring::default_provider();
    CertifiedKey::from_der(chain, der, &provider).map_err(|e| {
        format!(
            "{} and {}: the key does not fit the certificate: {e}",
            cert.display(),
            key.display()
        )
    })
}

#[cfg(test)]
mod tests;
