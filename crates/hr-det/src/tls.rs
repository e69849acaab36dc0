//! Which certificates a client trusts for its master, decided as `det` decides it
//! (`determined.common.api.certs.default_load`): the web PKI roots, plus the PEM bundle named by
//! `DET_MASTER_CERT_FILE` (or, without it, the one `det` stored for this master in `certs.json`);
//! `DET_MASTER_CERT_FILE=noverify` turns verification off; `DET_MASTER_CERT_NAME` is the name the
//! master's certificate is checked against when it differs from the URL's host (a master reached
//! by IP address, a certificate issued to an internal name). Inside a trial the same two values
//! come from the info file (`master_cert_file`, `master_cert_name`) or the `DET_*` environment.

use std::{collections::BTreeMap, path::Path, sync::Arc};

use reqwest::dns::{Addrs, Name, Resolve, Resolving};

use crate::DetError;

/// `DET_MASTER_CERT_FILE`: a PEM bundle, or `noverify`.
pub const CERT_FILE_VAR: &str = "DET_MASTER_CERT_FILE";
/// `DET_MASTER_CERT_NAME`: the name to verify the master's certificate against.
pub const CERT_NAME_VAR: &str = "DET_MASTER_CERT_NAME";

/// The trust a client places in its master's TLS certificate.
#[derive(Clone, Default)]
pub struct MasterTrust {
    /// Certificates trusted beside the web PKI roots, and where they came from.
    extra: Option<(String, Vec<reqwest::Certificate>)>,
    noverify: bool,
    name: Option<String>,
}

impl std::fmt::Debug for MasterTrust {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MasterTrust")
            .field(
                "extra",
                &self.extra.as_ref().map(|(from, c)| (from, c.len())),
            )
            .field("noverify", &self.noverify)
            .field("name", &self.name)
            .finish()
    }
}

impl MasterTrust {
    /// Trusts the PEM certificates in `path` beside the web PKI roots.
    pub fn from_pem_file(path: &Path) -> Result<Self, DetError> {
        let from = path.display().to_string();
        let pem = std::fs::read(path).map_err(|e| {
            DetError::Config(format!(
                "{CERT_FILE_VAR}={from}: cannot read it ({e}); name the cluster's CA bundle (PEM) \
                 or `noverify`"
            ))
        })?;
        Self::from_pem(&from, &pem)
    }

    fn from_pem(from: &str, pem: &[u8]) -> Result<Self, DetError> {
        let certs = reqwest::Certificate::from_pem_bundle(pem)
            .ok()
            .filter(|c| !c.is_empty())
            .ok_or_else(|| {
                DetError::Config(format!(
                    "{CERT_FILE_VAR}={from}: holds no PEM certificate (-----BEGIN CERTIFICATE-----)"
                ))
            })?;
        Ok(Self {
            extra: Some((from.to_owned(), certs)),
            ..Self::default()
        })
    }

    /// Trusts any certificate the master shows (`DET_MASTER_CERT_FILE=noverify`).
    pub fn noverify() -> Self {
        Self {
            noverify: true,
            ..Self::default()
        }
    }

    /// Verifies the master's certificate against `name` instead of the URL's host.
    pub fn with_name(mut self, name: Option<&str>) -> Self {
        self.name = name.filter(|n| !n.is_empty()).map(str::to_owned);
        self
    }

    /// A trial's trust: `cert_file` (a path, or `noverify`) and `cert_name`, as the master hands
    /// them in the info file or `DET_MASTER_CERT_FILE`/`DET_MASTER_CERT_NAME`.
    pub fn for_trial(cert_file: Option<&str>, cert_name: Option<&str>) -> Result<Self, DetError> {
        let trust = match cert_file.filter(|f| !f.is_empty()) {
            None => Self::default(),
            Some(f) if f.eq_ignore_ascii_case("noverify") => Self::noverify(),
            Some(f) => Self::from_pem_file(Path::new(f))?,
        };
        Ok(trust.with_name(cert_name))
    }

    /// As `det` loads it for the canonical `master`: `DET_MASTER_CERT_FILE`, else the certificate
    /// `det` stored for this master in `certs.json` in its config folder; `DET_MASTER_CERT_NAME`.
    pub fn from_env(master: &str) -> Result<Self, DetError> {
        Self::from_env_with(|k| std::env::var(k).ok(), master)
    }

    pub(crate) fn from_env_with(
        var: impl Fn(&str) -> Option<String>,
        master: &str,
    ) -> Result<Self, DetError> {
        let name = var(CERT_NAME_VAR);
        if let Some(file) = var(CERT_FILE_VAR).filter(|f| !f.is_empty()) {
            return Self::for_trial(Some(&file), name.as_deref());
        }
        let stored = crate::sign_in::det_config_dir(&var)
            .map(|d| d.join("certs.json"))
            .and_then(|p| {
                let text = std::fs::read_to_string(&p).ok()?;
                let store: BTreeMap<String, String> = serde_json::from_str(&text).ok()?;
                Some((p, store.get(master)?.clone()))
            });
        let trust = match stored {
            Some((path, pem)) => Self::from_pem(&path.display().to_string(), pem.as_bytes())?,
            None => Self::default(),
        };
        Ok(trust.with_name(name.as_deref()))
    }

    /// Whether verification is off.
    pub fn is_noverify(&self) -> bool {
        self.noverify
    }

    /// Configures `builder` for `master` (canonical); returns it and the base URL requests go to
    /// (the master's, with the host replaced by the certificate name when one is set, which a
    /// resolver maps back to the master's host).
    pub(crate) fn apply(
        &self,
        mut builder: reqwest::ClientBuilder,
        master: &str,
    ) -> Result<(reqwest::ClientBuilder, String), DetError> {
        if let Some((_, certs)) = &self.extra {
            for cert in certs {
                builder = builder.add_root_certificate(cert.clone());
            }
        }
        if self.noverify {
            builder = builder.danger_accept_invalid_certs(true);
        }
        let Some(name) = &self.name else {
            return Ok((builder, master.to_owned()));
        };
        let mut url = reqwest::Url::parse(master)
            .map_err(|e| DetError::Config(format!("master URL {master:?}: {e}")))?;
        let host = url.host_str().unwrap_or_default().to_owned();
        // The request still names the master as the URL does (`Host`); only the TLS name and the
        // certificate check use `name`, as `det`'s requests session does.
        let authority = match url.port() {
            Some(port) => format!("{host}:{port}"),
            None => host.clone(),
        };
        let host_header = reqwest::header::HeaderValue::from_str(&authority)
            .map_err(|e| DetError::Config(format!("master URL {master:?}: {e}")))?;
        builder =
            builder.default_headers([(reqwest::header::HOST, host_header)].into_iter().collect());
        url.set_host(Some(name)).map_err(|e| {
            DetError::Config(format!("{CERT_NAME_VAR}={name:?} is not a host name: {e}"))
        })?;
        let resolver = NameToHost {
            name: url.host_str().unwrap_or_default().to_owned(),
            host: host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_owned(),
        };
        let base = url.as_str().trim_end_matches('/').to_owned();
        Ok((builder.dns_resolver(Arc::new(resolver)), base))
    }

    /// What to tell the user when the master's certificate was refused.
    pub(crate) fn advice(&self, problem: &rustls::Error) -> String {
        let name_problem = matches!(
            problem,
            rustls::Error::InvalidCertificate(rustls::CertificateError::NotValidForName)
                | rustls::Error::InvalidCertificate(
                    rustls::CertificateError::NotValidForNameContext { .. }
                )
        );
        let trusted = match &self.extra {
            Some((from, certs)) => format!(
                "the web PKI roots and the {} certificate(s) in {from}",
                certs.len()
            ),
            None => "the web PKI roots only".to_owned(),
        };
        if name_problem {
            format!(
                "the master's certificate was refused ({problem}); it is not issued to the host \
                 name used{}: set {CERT_NAME_VAR} to the name it was issued to",
                self.name
                    .as_ref()
                    .map(|n| format!(" ({n})"))
                    .unwrap_or_default()
            )
        } else {
            format!(
                "the master's certificate was refused ({problem}); trusted were {trusted}: set \
                 {CERT_FILE_VAR} to the cluster's CA bundle (PEM), or {CERT_FILE_VAR}=noverify \
                 to skip verification"
            )
        }
    }
}

/// Resolves the certificate name to the master's real host; any other name as usual.
struct NameToHost {
    name: String,
    host: String,
}

impl Resolve for NameToHost {
    fn resolve(&self, name: Name) -> Resolving {
        let target = if name.as_str().eq_ignore_ascii_case(&self.name) {
            self.host.clone()
        } else {
            name.as_str().to_owned()
        };
        Box::pin(async move {
            let addrs: Vec<_> = tokio::net::lookup_host((target.as_str(), 0))
                .await?
                .collect();
            Ok(Box::new(addrs.into_iter()) as Addrs)
        })
    }
}

/// The TLS problem behind a failed request, if that is what failed it.
pub(crate) fn certificate_problem(e: &reqwest::Error) -> Option<&rustls::Error> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = source {
        if let Some(problem) = s.downcast_ref::<rustls::Error>() {
            return Some(problem);
        }
        // An io::Error's `source` skips the error it wraps (which may be another io::Error):
        // step into the wrapped error itself.
        source = match s
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
        {
            Some(inner) => Some(inner as &(dyn std::error::Error + 'static)),
            None => s.source(),
        };
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_environment_decides_as_det_does() {
        let dir = tempfile::tempdir().expect("tmp");
        let master = "https://m.example:8443";
        let env = |pairs: Vec<(&'static str, String)>| {
            move |k: &str| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone())
        };
        let none = MasterTrust::from_env_with(env(vec![]), master).expect("trust");
        assert!(none.extra.is_none() && !none.noverify && none.name.is_none());
        let off = MasterTrust::from_env_with(
            env(vec![
                (CERT_FILE_VAR, "NoVerify".into()),
                (CERT_NAME_VAR, "m".into()),
            ]),
            master,
        )
        .expect("trust");
        assert!(off.is_noverify());
        assert_eq!(off.name.as_deref(), Some("m"));
        let missing = dir.path().join("absent.pem");
        let err = MasterTrust::from_env_with(
            env(vec![(CERT_FILE_VAR, missing.display().to_string())]),
            master,
        )
        .expect_err("a missing bundle is an error");
        assert!(err.to_string().contains(CERT_FILE_VAR), "{err}");
        let junk = dir.path().join("junk.pem");
        std::fs::write(&junk, "not a certificate").expect("write");
        let err = MasterTrust::from_env_with(
            env(vec![(CERT_FILE_VAR, junk.display().to_string())]),
            master,
        )
        .expect_err("a file without certificates is an error");
        assert!(err.to_string().contains("no PEM certificate"), "{err}");
        // det's own store of accepted certificates, keyed by canonical URL, in its config folder.
        let pem = rcgen::generate_simple_self_signed(vec!["m.example".to_owned()])
            .expect("cert")
            .cert
            .pem();
        std::fs::write(
            dir.path().join("certs.json"),
            serde_json::json!({ master: pem }).to_string(),
        )
        .expect("write");
        let config = dir.path().display().to_string();
        let stored = MasterTrust::from_env_with(
            env(vec![("DET_DEBUG_CONFIG_PATH", config.clone())]),
            master,
        )
        .expect("trust");
        assert!(stored.extra.is_some());
        let other = MasterTrust::from_env_with(
            env(vec![("DET_DEBUG_CONFIG_PATH", config)]),
            "https://other:8443",
        )
        .expect("trust");
        assert!(other.extra.is_none());
    }
}
