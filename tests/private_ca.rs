//! A private certificate authority made at test time, as a cluster's own CA: it issues a
//! master's certificate for the names given and writes the PEM files a TLS master and its clients
//! are configured with.

use std::path::{Path, PathBuf};

use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair, KeyUsagePurpose};

/// A CA and the folder its files go into.
pub struct PrivateCa {
    issuer: Issuer<'static, KeyPair>,
    /// The CA's certificate (PEM): what clients trust (`DET_MASTER_CERT_FILE`).
    pub ca_pem: PathBuf,
    dir: PathBuf,
}

/// A master's certificate files.
pub struct ServerCert {
    /// The chain: the master's certificate, then the CA's (`--tls-cert`).
    pub chain: PathBuf,
    /// The master's private key (`--tls-key`).
    pub key: PathBuf,
}

impl PrivateCa {
    /// A fresh CA named `name`, writing its files into `dir` (`<name>-ca.pem`).
    pub fn new(dir: &Path, name: &str) -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, format!("{name} test CA"));
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let key = KeyPair::generate().expect("CA key");
        let cert = params.self_signed(&key).expect("CA certificate");
        let ca_pem = dir.join(format!("{name}-ca.pem"));
        std::fs::write(&ca_pem, cert.pem()).expect("write the CA certificate");
        Self {
            issuer: Issuer::new(params, key),
            ca_pem,
            dir: dir.to_owned(),
        }
    }

    /// Issues a server certificate for `names` (DNS names or IP addresses) and writes
    /// `<file>.pem` (chain) and `<file>.key`.
    pub fn issue(&self, file: &str, names: &[&str]) -> ServerCert {
        self.issue_with(file, names, |_| {})
    }

    /// [`PrivateCa::issue`] of a certificate that expired in 2001.
    pub fn issue_expired(&self, file: &str, names: &[&str]) -> ServerCert {
        self.issue_with(file, names, |p| {
            p.not_before = rcgen::date_time_ymd(2000, 1, 1);
            p.not_after = rcgen::date_time_ymd(2001, 1, 1);
        })
    }

    fn issue_with(
        &self,
        file: &str,
        names: &[&str],
        edit: impl FnOnce(&mut CertificateParams),
    ) -> ServerCert {
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        let mut params = CertificateParams::new(names).expect("server params");
        edit(&mut params);
        let key = KeyPair::generate().expect("server key");
        let cert = params
            .signed_by(&key, &self.issuer)
            .expect("server certificate");
        let ca = std::fs::read_to_string(&self.ca_pem).expect("read the CA certificate");
        let chain = self.dir.join(format!("{file}.pem"));
        std::fs::write(&chain, format!("{}{ca}", cert.pem())).expect("write the chain");
        let key_file = self.dir.join(format!("{file}.key"));
        std::fs::write(&key_file, key.serialize_pem()).expect("write the key");
        ServerCert {
            chain,
            key: key_file,
        }
    }
}
