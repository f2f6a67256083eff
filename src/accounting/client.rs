//! The HTTP clients of the webhook and the trace exporter (reqwest): HTTP/1.1, and HTTPS
//! through rustls with the ring provider, the server verified against the system's roots.

use std::sync::Arc;
use std::time::Duration;

/// Why a client could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The TLS configuration (the system's roots, the protocol versions).
    #[error("TLS setup: {0}")]
    Tls(#[from] rustls::Error),
    /// reqwest refused the configuration.
    #[error("HTTP client: {0}")]
    Http(#[from] reqwest::Error),
    /// The thread that builds a blocking client failed.
    #[error("HTTP client thread: {0}")]
    Thread(String),
}

/// rustls with ring (tether's one crypto provider), verifying servers against the system's
/// roots, speaking HTTP/1.1.
fn tls() -> Result<rustls::ClientConfig, rustls::Error> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = rustls_platform_verifier::Verifier::new(provider.clone())?;
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier))
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// An async client whose requests time out after `timeout` (the webhook's).
pub fn client(timeout: Duration) -> Result<reqwest::Client, ClientError> {
    Ok(reqwest::Client::builder()
        .tls_backend_preconfigured(tls()?)
        .timeout(timeout)
        .connect_timeout(timeout)
        .build()?)
}

/// A blocking client whose requests time out after `timeout` (the trace exporter's, called
/// from the batch span processor's own thread). Built on a thread of its own: a blocking
/// client may not be built inside an async runtime.
pub fn blocking_client(timeout: Duration) -> Result<reqwest::blocking::Client, ClientError> {
    let tls = tls()?;
    std::thread::Builder::new()
        .name("tether-otlp-client".into())
        .spawn(move || {
            reqwest::blocking::Client::builder()
                .tls_backend_preconfigured(tls)
                .timeout(timeout)
                .connect_timeout(timeout)
                .build()
        })
        .map_err(|e| ClientError::Thread(e.to_string()))?
        .join()
        .map_err(|_| ClientError::Thread("panicked".into()))?
        .map_err(ClientError::from)
}
