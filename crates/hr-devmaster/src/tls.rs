//! HTTPS: the certificate chain and key given with `--tls-cert`/`--tls-key` (PEM), served through
//! rustls. As Determined's master does, the devmaster hands each trial its certificate file
//! (`master.crt` beside the info files, named by `DET_MASTER_CERT_FILE` and the cluster file's
//! `master_cert_file`), so a trial trusts a master whose certificate a private CA issued when
//! that CA's certificate is in the chain file.

use std::{io, path::PathBuf, sync::Arc};

use rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};
use tokio_rustls::TlsAcceptor;

/// The PEM files a devmaster serves HTTPS with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// The certificate chain: the master's certificate first, then any CA certificates.
    pub cert: PathBuf,
    /// The private key of the first certificate.
    pub key: PathBuf,
}

/// A loaded certificate: the acceptor, the chain's PEM (handed to trials) and, when the
/// certificate has expired or expires soon, what to say at start.
pub(crate) struct Tls {
    pub(crate) acceptor: TlsAcceptor,
    pub(crate) cert_pem: Vec<u8>,
    pub(crate) expiry: Option<String>,
}

/// How close to its end a certificate is said to be expiring.
const EXPIRY_NOTICE_SECS: i64 = 14 * 24 * 3600;

/// Whether the served certificate `cert` (of the file `path`) has expired or expires within
/// [`EXPIRY_NOTICE_SECS`]: clients refuse an expired one, so the devmaster says so at start.
fn expiry(cert: &CertificateDer<'_>, path: &std::path::Path) -> Option<String> {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert.as_ref()).ok()?;
    let end = &parsed.validity().not_after;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
    let left = end.timestamp() - now;
    if left <= 0 {
        Some(format!(
            "--tls-cert {}: the certificate expired on {end}: clients refuse it; renew it",
            path.display()
        ))
    } else if left < EXPIRY_NOTICE_SECS {
        Some(format!(
            "--tls-cert {}: the certificate expires on {end} (in {} days); renew it",
            path.display(),
            left / 86_400
        ))
    } else {
        None
    }
}

fn invalid(flag: &str, path: &std::path::Path, why: impl std::fmt::Display) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("{flag} {}: {why}", path.display()),
    )
}

impl TlsFiles {
    /// Reads and checks both files.
    pub(crate) fn load(&self) -> io::Result<Tls> {
        let cert_pem =
            std::fs::read(&self.cert).map_err(|e| invalid("--tls-cert", &self.cert, e))?;
        let chain = CertificateDer::pem_slice_iter(&cert_pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| invalid("--tls-cert", &self.cert, e))?;
        if chain.is_empty() {
            return Err(invalid(
                "--tls-cert",
                &self.cert,
                "holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
            ));
        }
        let expiry = expiry(&chain[0], &self.cert);
        let key_pem = std::fs::read(&self.key).map_err(|e| invalid("--tls-key", &self.key, e))?;
        let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| {
            invalid(
                "--tls-key",
                &self.key,
                format!("{e} (a PEM private key: PKCS#8, PKCS#1 or SEC1)"),
            )
        })?;
        let mut config = rustls::ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .map_err(|e| {
                invalid(
                    "--tls-key",
                    &self.key,
                    format!("does not fit --tls-cert: {e}"),
                )
            })?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Tls {
            acceptor: TlsAcceptor::from(Arc::new(config)),
            cert_pem,
            expiry,
        })
    }
}
