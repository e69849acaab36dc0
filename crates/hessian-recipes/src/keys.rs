//! Signing and trust: `keygen`, the writers' `--signing-key FILE` (or `HR_SIGNING_KEY`) and the
//! readers' `--trust KEY` (or `HR_TRUST`). A key file holds 64 hex characters: the Ed25519 seed
//! in `signing.key` (owner-only permissions), the public key in `signing.pub`. With trust
//! configured, a reader refuses an unsigned seal and one signed by any other key.

use std::io::{Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;
use hr_seal::{KeyPair, Trust, VerifyingKey, key_id, parse_verifying_key};

use crate::Refused;
use crate::output::create_fresh;

/// A writer's signing key.
#[derive(Debug, Clone, Args)]
pub(crate) struct SigningArgs {
    /// Sign every seal with this Ed25519 key file (`signing.key` from `hessian-recipes keygen`;
    /// owner-only permissions). Without it seals are digest-only.
    #[arg(long, env = "HR_SIGNING_KEY", value_name = "FILE")]
    pub(crate) signing_key: Option<PathBuf>,
}

/// A reader's trusted keys.
#[derive(Debug, Clone, Args)]
pub(crate) struct TrustArgs {
    /// Accept only seals signed by this Ed25519 public key: 64 hex characters, or a file of them
    /// (one per line, `#` comments), e.g. `signing.pub`. Repeatable; `HR_TRUST` takes a
    /// comma-separated list. Without it a digest-only seal is accepted.
    #[arg(
        long = "trust",
        env = "HR_TRUST",
        value_delimiter = ',',
        value_name = "KEY"
    )]
    pub(crate) trust: Vec<String>,
}

impl SigningArgs {
    /// The key, if one is configured.
    pub(crate) fn load(&self) -> anyhow::Result<Option<KeyPair>> {
        let Some(path) = &self.signing_key else {
            return Ok(None);
        };
        let refuse = |why: String| Refused(format!("--signing-key {}: {why}", path.display()));
        let meta = std::fs::metadata(path).map_err(|e| refuse(e.to_string()))?;
        if meta.permissions().mode() & 0o077 != 0 {
            return Err(refuse(format!(
                "readable by others (mode {:o}); run `chmod 600 {}`",
                meta.permissions().mode() & 0o777,
                path.display()
            ))
            .into());
        }
        let text = std::fs::read_to_string(path).map_err(|e| refuse(e.to_string()))?;
        let seed = parse_hex32(text.trim()).ok_or_else(|| {
            refuse("not a signing key (64 hex characters from `hessian-recipes keygen`)".into())
        })?;
        Ok(Some(KeyPair::from_seed(seed)))
    }
}

impl TrustArgs {
    /// The trust policy: the keys given, or digest-only when none are.
    pub(crate) fn load(&self) -> anyhow::Result<Trust> {
        let mut keys = Vec::new();
        for arg in &self.trust {
            keys.extend(trusted_keys(arg)?);
        }
        Ok(if keys.is_empty() {
            Trust::DigestOnly
        } else {
            Trust::Keys(keys)
        })
    }
}

/// The public keys an argument names: 64 hex characters, or a file of them.
pub(crate) fn trusted_keys(arg: &str) -> anyhow::Result<Vec<VerifyingKey>> {
    let refuse = |why: String| Refused(format!("--trust {arg}: {why}"));
    if !Path::new(arg).is_file() {
        return Ok(vec![parse_verifying_key(arg).map_err(refuse)?]);
    }
    let text = std::fs::read_to_string(arg).map_err(|e| refuse(e.to_string()))?;
    let keys = text
        .lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .filter(|l| !l.is_empty())
        .map(|l| parse_verifying_key(l).map_err(refuse))
        .collect::<Result<Vec<_>, _>>()?;
    if keys.is_empty() {
        return Err(refuse("the file names no key".into()).into());
    }
    Ok(keys)
}

fn parse_hex32(text: &str) -> Option<[u8; 32]> {
    let mut out = [0u8; 32];
    hex::decode_to_slice(text, &mut out).ok()?;
    Some(out)
}

/// `hessian-recipes keygen --output DIR`: a fresh Ed25519 key pair.
pub(crate) fn keygen(output: &Path) -> anyhow::Result<ExitCode> {
    let mut seed = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut seed))
        .context("reading 32 random bytes from /dev/urandom")?;
    let pair = KeyPair::from_seed(seed);
    let public = pair.verifying_key();
    create_fresh(output)?;
    let secret = output.join("signing.key");
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&secret)
        .with_context(|| format!("creating {}", secret.display()))?;
    writeln!(file, "{}", hex::encode(seed))?;
    file.sync_all()?;
    std::fs::write(
        output.join("signing.pub"),
        format!("{}\n", hex::encode(public.as_bytes())),
    )?;
    println!(
        "wrote {} (secret, mode 600) and {} (key id {})",
        secret.display(),
        output.join("signing.pub").display(),
        key_id(&public)
    );
    println!(
        "sign with --signing-key {} (or HR_SIGNING_KEY); trust with --trust {} (or HR_TRUST)",
        secret.display(),
        output.join("signing.pub").display()
    );
    Ok(ExitCode::SUCCESS)
}
