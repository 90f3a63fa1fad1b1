//! TLS to the server (rustls with the ring provider): libpq's `sslmode`
//! values, with libpq's meaning of each (`docs/team.md`, "TLS").
//!
//! * `disable`: no TLS; `prefer` (the default): TLS when the server offers
//!   it; `require`: TLS or no connection. As with libpq none of these
//!   checks the server's certificate (the link is encrypted, the server
//!   not authenticated).
//! * `verify-ca`: the certificate must chain to a root of `sslrootcert`
//!   (default `~/.postgresql/root.crt`); `verify-full`: and name the host.
//!
//! Unix-socket connections never use TLS (as libpq). The LISTEN
//! connection uses the same settings.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use tokio_postgres::tls::MakeTlsConnect;
use tokio_postgres_rustls::MakeRustlsConnect;

use super::socket::Stream;

/// A TLS stream over our socket.
pub(super) type TlsStream = <MakeRustlsConnect as MakeTlsConnect<Stream>>::Stream;
type Connector = <MakeRustlsConnect as MakeTlsConnect<Stream>>::TlsConnect;

/// What is checked of the server's certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verify {
    /// Nothing (`sslmode` `disable`, `prefer`, `require`).
    Nothing,
    /// The chain to a trusted root (`verify-ca`).
    Chain,
    /// The chain and the host name (`verify-full`).
    Full,
}

/// Makes the TLS connector of each connection.
pub(super) struct Tls {
    make: MakeRustlsConnect,
}

impl Tls {
    /// The TLS settings for `verify`, with the roots of `root_cert` (a PEM
    /// file; default `~/.postgresql/root.crt`) when verifying.
    pub(super) fn new(verify: Verify, root_cert: Option<&Path>) -> io::Result<Tls> {
        // ring (no C toolchain beyond what ring builds, no aws-lc): its
        // provider is marked deprecated only for lacking post-quantum key
        // exchange, which PostgreSQL servers do not offer yet.
        #[allow(deprecated)]
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier: Arc<dyn ServerCertVerifier> = match verify {
            Verify::Nothing => Arc::new(Lenient {
                provider: provider.clone(),
                chain: None,
            }),
            Verify::Chain | Verify::Full => {
                let file = match root_cert {
                    Some(f) => f.to_path_buf(),
                    None => PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
                        .join(".postgresql/root.crt"),
                };
                let mut roots = RootCertStore::empty();
                for cert in
                    CertificateDer::pem_file_iter(&file).map_err(|e| bad_root_cert(&file, e))?
                {
                    let cert = cert.map_err(|e| bad_root_cert(&file, e))?;
                    roots.add(cert).map_err(|e| bad_root_cert(&file, e))?;
                }
                let webpki =
                    WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                        .build()
                        .map_err(|e| bad_root_cert(&file, e))?;
                if verify == Verify::Full {
                    webpki
                } else {
                    Arc::new(Lenient {
                        provider: provider.clone(),
                        chain: Some(webpki),
                    })
                }
            }
        };
        let config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(io::Error::other)?
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_no_client_auth();
        Ok(Tls {
            make: MakeRustlsConnect::new(config),
        })
    }

    /// The maker of connectors (for the blocking client of LISTEN).
    pub(super) fn maker(&self) -> MakeRustlsConnect {
        self.make.clone()
    }

    /// The connector for one connection to `host` (a name or address).
    pub(super) fn connector(&self, host: &str) -> io::Result<Connector> {
        let mut make = self.make.clone();
        let name = if host.is_empty() { "localhost" } else { host };
        MakeTlsConnect::<Stream>::make_tls_connect(&mut make, name)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("TLS: {e}")))
    }
}

/// The error for a root-certificate `file` that cannot be read or used.
fn bad_root_cert(file: &Path, e: impl std::fmt::Display) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("sslrootcert {}: {e}", file.display()),
    )
}

/// Checks the handshake's signatures, and of the certificate either
/// nothing (`chain` none: libpq's `require`) or the chain to a trusted
/// root of `chain`, whatever host it names (libpq's `verify-ca`). The
/// signatures are checked with the provider's algorithms, as the webpki
/// verifier of `chain` (built with the same provider) checks them.
#[derive(Debug)]
struct Lenient {
    provider: Arc<CryptoProvider>,
    chain: Option<Arc<WebPkiServerVerifier>>,
}

impl ServerCertVerifier for Lenient {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let Some(chain) = &self.chain else {
            return Ok(ServerCertVerified::assertion());
        };
        match chain.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}
