//! TLS to an HTTPS backend: the private CA (`--upstream-ca`) and the client certificate
//! (`--upstream-cert` with `--upstream-key`, for mTLS), read from PEM files and checked at start,
//! so a bad file is a clear error at start and never a panic on a request path. Without a CA
//! file the system's roots verify the backend.

use std::path::Path;
use std::sync::Arc;

use pingora_core::protocols::tls::CaType;
use pingora_core::utils::tls::{CertKey, WrappedX509};

use crate::config;

/// What an HTTPS backend's connections carry beyond the defaults.
#[derive(Clone, Default)]
pub struct BackendTls {
    /// The CA certificates that verify the backend, instead of the system's roots.
    pub ca: Option<Arc<CaType>>,
    /// The client certificate chain and key presented to the backend.
    pub client: Option<Arc<CertKey>>,
}

impl std::fmt::Debug for BackendTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BackendTls")
            .field("ca", &self.ca.as_ref().map(|c| c.len()))
            .field("client", &self.client.is_some())
            .finish()
    }
}

impl BackendTls {
    /// Reads the files `opts` names (none: the defaults). The error names the file and says
    /// what is wrong with it.
    pub fn load(opts: &config::UpstreamConf) -> Result<Self, String> {
        let ca = match &opts.ca {
            None => None,
            Some(path) => {
                let certs = certificates(path)?;
                let wrapped: Vec<WrappedX509> = certs
                    .into_iter()
                    .map(|der| WrappedX509::new(der, pingora_core::utils::tls::parse_x509))
                    .collect();
                Some(Arc::from(wrapped.into_boxed_slice()))
            }
        };
        let client = match (&opts.cert, &opts.key) {
            (Some(cert), Some(key)) => {
                let chain = certificates(cert)?;
                let key = private_key(key)?;
                Some(Arc::new(CertKey::new(chain, key)))
            }
            _ => None,
        };
        Ok(BackendTls { ca, client })
    }
}

fn read(path: &Path) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
}

/// The certificates of a PEM file, in order, each checked to parse as X.509 DER.
pub fn certificates(path: &Path) -> Result<Vec<Vec<u8>>, String> {
    let pem = read(path)?;
    let mut out = Vec::new();
    for item in rustls_pemfile::certs(&mut pem.as_slice()) {
        let der = item.map_err(|e| format!("{}: not a PEM file: {e}", path.display()))?;
        x509_parser::parse_x509_certificate(der.as_ref())
            .map_err(|e| format!("{}: a certificate does not parse: {e}", path.display()))?;
        out.push(der.to_vec());
    }
    if out.is_empty() {
        return Err(format!("{}: no PEM certificate in it", path.display()));
    }
    Ok(out)
}

/// The first private key of a PEM file (PKCS#8, PKCS#1 or SEC1), as DER.
pub fn private_key(path: &Path) -> Result<Vec<u8>, String> {
    let pem = read(path)?;
    let key = rustls_pemfile::private_key(&mut pem.as_slice())
        .map_err(|e| format!("{}: not a PEM file: {e}", path.display()))?
        .ok_or_else(|| format!("{}: no PEM private key in it", path.display()))?;
    let der = key.secret_der().to_vec();
    // Pingora turns the DER back into a key on each handshake and panics if it cannot.
    rustls_pki_types::PrivateKeyDer::try_from(der.clone())
        .map_err(|e| format!("{}: the private key is not usable: {e}", path.display()))?;
    Ok(der)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(ca: Option<&Path>, cert: Option<&Path>, key: Option<&Path>) -> config::UpstreamConf {
        config::UpstreamConf {
            ca: ca.map(Path::to_path_buf),
            cert: cert.map(Path::to_path_buf),
            key: key.map(Path::to_path_buf),
            ..Default::default()
        }
    }

    #[test]
    fn a_missing_or_unusable_file_is_an_error_naming_it_never_a_panic() {
        let dir = std::env::temp_dir().join(format!("tether-tls-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let empty = dir.join("empty.pem");
        std::fs::write(&empty, "no pem here\n").unwrap();
        let garbage = dir.join("garbage.pem");
        std::fs::write(
            &garbage,
            "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
        let missing = dir.join("missing.pem");
        for (o, says) in [
            (opts(Some(&missing), None, None), "cannot read"),
            (opts(Some(&empty), None, None), "no PEM certificate"),
            (opts(Some(&garbage), None, None), "does not parse"),
            (opts(None, Some(&garbage), Some(&empty)), "does not parse"),
        ] {
            let e = BackendTls::load(&o).unwrap_err();
            assert!(e.contains(says) && e.contains("tether-tls-unit"), "{e}");
        }
        assert!(BackendTls::load(&opts(None, None, None))
            .unwrap()
            .ca
            .is_none());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
