//! TLS for the HTTP and gRPC endpoints, through rustls (ring): the server
//! certificate, its key and, for mutual TLS, the roots that must sign a
//! client's certificate, read from PEM files and checked before a port is
//! bound; then [`TlsListener`] does each connection's handshake.
//!
//! Every error names the flag and the file it is about, so that a bad
//! setting stops the server with a sentence the operator can act on.

use std::fmt;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;

use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::crypto::{CryptoProvider, ring};
use tokio_rustls::rustls::pki_types::pem::{self, PemObject};
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::server::{VerifierBuilderError, WebPkiClientVerifier};
use tokio_rustls::rustls::{self, RootCertStore};

/// A PEM file and the flag that named it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PemFile {
    pub flag: &'static str,
    pub path: PathBuf,
}

impl fmt::Display for PemFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.flag, self.path.display())
    }
}

/// What an endpoint serves TLS with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// The server's certificate, then any intermediates.
    pub cert: PemFile,
    pub key: PemFile,
    /// Mutual TLS: a client must present a certificate one of these signs.
    pub client_roots: Option<PemFile>,
}

/// A TLS setting that cannot serve.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// Not a setting's fault: ring lacks TLS 1.2 or 1.3.
    #[error("the TLS library cannot serve TLS 1.2 and 1.3: {0}")]
    Provider(rustls::Error),
    #[error("{file}: cannot read it: {source}")]
    Read { file: PemFile, source: io::Error },
    #[error("{file}: not valid PEM: {source}")]
    Pem { file: PemFile, source: pem::Error },
    #[error("{file}: holds no PEM {wanted}")]
    Missing { file: PemFile, wanted: &'static str },
    #[error("{key} cannot serve with {cert}: {source}")]
    Identity {
        cert: PemFile,
        key: PemFile,
        // Boxed: two files and a rustls error make a large Err.
        source: Box<rustls::Error>,
    },
    #[error("{file}: not a usable root certificate: {source}")]
    Root {
        file: PemFile,
        source: rustls::Error,
    },
    #[error("{file}: cannot check client certificates with it: {source}")]
    Verifier {
        file: PemFile,
        source: VerifierBuilderError,
    },
}

/// TLS per endpoint; `None` serves plain text.
#[derive(Debug, Clone, Default)]
pub struct EndpointTls {
    pub http: Option<ServerTls>,
    pub grpc: Option<ServerTls>,
}

/// A checked TLS server setting, ready for an endpoint.
#[derive(Debug, Clone)]
pub struct ServerTls {
    config: Arc<rustls::ServerConfig>,
    mutual: bool,
}

impl ServerTls {
    /// Reads and checks the files: the key must fit the certificate, and
    /// the client roots must be certificates.
    pub fn load(files: &TlsFiles) -> Result<ServerTls, TlsError> {
        let provider = Arc::new(ring::default_provider());
        let builder = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .map_err(TlsError::Provider)?;
        let builder = match &files.client_roots {
            Some(roots) => builder.with_client_cert_verifier(client_verifier(roots, provider)?),
            None => builder.with_no_client_auth(),
        };
        let config = builder
            .with_single_cert(certificates(&files.cert)?, private_key(&files.key)?)
            .map_err(|source| TlsError::Identity {
                cert: files.cert.clone(),
                key: files.key.clone(),
                source: Box::new(source),
            })?;
        Ok(ServerTls {
            config: Arc::new(config),
            mutual: files.client_roots.is_some(),
        })
    }

    /// Whether clients must present a certificate.
    pub fn is_mutual(&self) -> bool {
        self.mutual
    }

    /// An acceptor that offers `protocols` in ALPN (gRPC clients insist
    /// on `h2`).
    pub fn acceptor(&self, protocols: &[&[u8]]) -> TlsAcceptor {
        let mut config = rustls::ServerConfig::clone(&self.config);
        config.alpn_protocols = protocols.iter().map(|p| p.to_vec()).collect();
        TlsAcceptor::from(Arc::new(config))
    }
}

fn read(file: &PemFile) -> Result<Vec<u8>, TlsError> {
    std::fs::read(&file.path).map_err(|source| TlsError::Read {
        file: file.clone(),
        source,
    })
}

fn certificates(file: &PemFile) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_slice_iter(&read(file)?)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| TlsError::Pem {
            file: file.clone(),
            source,
        })?;
    if certs.is_empty() {
        return Err(TlsError::Missing {
            file: file.clone(),
            wanted: "certificate",
        });
    }
    Ok(certs)
}

fn private_key(file: &PemFile) -> Result<PrivateKeyDer<'static>, TlsError> {
    match PrivateKeyDer::from_pem_slice(&read(file)?) {
        Ok(key) => Ok(key),
        Err(pem::Error::NoItemsFound) => Err(TlsError::Missing {
            file: file.clone(),
            wanted: "private key (PKCS#8, PKCS#1 or SEC1)",
        }),
        Err(source) => Err(TlsError::Pem {
            file: file.clone(),
            source,
        }),
    }
}

fn client_verifier(
    file: &PemFile,
    provider: Arc<CryptoProvider>,
) -> Result<Arc<dyn rustls::server::danger::ClientCertVerifier>, TlsError> {
    let mut roots = RootCertStore::empty();
    for cert in certificates(file)? {
        roots.add(cert).map_err(|source| TlsError::Root {
            file: file.clone(),
            source,
        })?;
    }
    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
        .build()
        .map_err(|source| TlsError::Verifier {
            file: file.clone(),
            source,
        })
}

#[cfg(test)]
pub(crate) mod tests;
