//! TLS for client connections: the server's certificate and key from PEM
//! files, rustls with the ring provider, ALPN `postgresql` (which direct
//! TLS connections, PostgreSQL 17's `sslnegotiation=direct`, require).

use std::path::Path;
use std::sync::Arc;

use pgwire::tokio::TlsAcceptor;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use super::error::AuthError;

/// The acceptor, and the certificate chain's PEM (for SCRAM channel
/// binding, which hashes the server's certificate).
pub struct ServerTls {
    pub acceptor: TlsAcceptor,
    pub cert_pem: Vec<u8>,
}

pub fn load(cert: &Path, key: &Path) -> Result<ServerTls, AuthError> {
    let cert_pem = std::fs::read(cert).map_err(|e| {
        AuthError::Config(format!("cannot read --tls-cert {}: {e}", cert.display()))
    })?;
    let chain = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| AuthError::Config(format!("--tls-cert {}: {e}", cert.display())))?;
    if chain.is_empty() {
        return Err(AuthError::Config(format!(
            "--tls-cert {} holds no certificate",
            cert.display()
        )));
    }
    let key = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| AuthError::Config(format!("--tls-key {}: {e}", key.display())))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| AuthError::Config(format!("TLS: {e}")))?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| {
            AuthError::Config(format!("--tls-cert and --tls-key do not make a pair: {e}"))
        })?;
    config.alpn_protocols = vec![b"postgresql".to_vec()];
    Ok(ServerTls {
        acceptor: TlsAcceptor::from(Arc::new(config)),
        cert_pem,
    })
}
