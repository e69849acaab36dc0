//! The seal: a DSSE v1 envelope over an in-toto Statement v1 whose subject is `MANIFEST.json`'s
//! sha256 and whose predicate names the run and step, optionally signed with Ed25519
//! (`verify_strict`). Trust comes from verifying against the configured keys. A seal has one
//! encoding only: canonical JSON, standard padded base64, at most one signature whose `keyid`
//! names the key that made it, and a statement in the exact bytes we write; anything else is
//! refused, so no two byte strings are the same valid seal.

use base64::{Engine, engine::general_purpose::STANDARD};
use ed25519_dalek::{Signature, Signer, SigningKey, VerifyingKey};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::{MANIFEST_FILE, SealError, digest::sha256_hex};

/// The DSSE payload type of an in-toto statement.
pub const PAYLOAD_TYPE: &str = "application/vnd.in-toto+json";
/// in-toto Statement v1.
pub const STATEMENT_TYPE: &str = "https://in-toto.io/Statement/v1";
/// Our predicate type for snapshot seals.
pub const PREDICATE_TYPE: &str = "urn:hessian-recipes:predicate:snapshot:v1";

/// DSSE's pre-authentication encoding.
pub fn pae(payload_type: &str, body: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "DSSEv1 {} {} {} ",
        payload_type.len(),
        payload_type,
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body);
    out
}

/// A DSSE envelope.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Envelope {
    /// Base64 of the statement.
    pub payload: String,
    /// [`PAYLOAD_TYPE`].
    #[serde(rename = "payloadType")]
    pub payload_type: String,
    /// Signatures; empty for a digest-only seal.
    pub signatures: Vec<EnvelopeSignature>,
}

/// One DSSE signature.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnvelopeSignature {
    /// Key id hint.
    #[serde(default)]
    pub keyid: String,
    /// Base64 signature.
    pub sig: String,
}

/// An Ed25519 signing key.
#[derive(Debug, Clone)]
pub struct KeyPair {
    signing: SigningKey,
}

impl KeyPair {
    /// From a 32-byte secret seed.
    pub fn from_seed(seed: [u8; 32]) -> Self {
        Self {
            signing: SigningKey::from_bytes(&seed),
        }
    }

    /// The public key.
    pub fn verifying_key(&self) -> VerifyingKey {
        self.signing.verifying_key()
    }
}

/// The key id of a public key: hex sha256 of its 32 bytes.
pub fn key_id(key: &VerifyingKey) -> String {
    sha256_hex(key.as_bytes())
}

/// Parses a public key given as 64 hex characters.
pub fn parse_verifying_key(hex_text: &str) -> Result<VerifyingKey, String> {
    let text = hex_text.trim();
    let mut bytes = [0u8; 32];
    hex::decode_to_slice(text, &mut bytes)
        .map_err(|_| "a public key is 64 hex characters (32 bytes)".to_owned())?;
    VerifyingKey::from_bytes(&bytes).map_err(|e| format!("not an Ed25519 public key: {e}"))
}

/// Which seals a verifier accepts.
#[derive(Debug, Clone, Default)]
pub enum Trust {
    /// Digest-sealed is enough; signatures are not checked.
    #[default]
    DigestOnly,
    /// A valid signature by one of these keys is required.
    Keys(Vec<VerifyingKey>),
}

/// Standard padded base64, and only in its canonical form (what [`STANDARD`] encodes).
fn decode_b64(text: &str) -> Option<Vec<u8>> {
    STANDARD
        .decode(text)
        .ok()
        .filter(|bytes| STANDARD.encode(bytes) == text)
}

/// What a seal says: the manifest's digest, and the run and step it seals.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sealed {
    /// sha256 of `MANIFEST.json`.
    pub manifest_sha256: String,
    /// The predicate's run id.
    pub run_id: String,
    /// The predicate's step.
    pub step: u64,
}

impl Envelope {
    /// Seals the manifest digest: builds the statement and signs it when a key is given.
    pub fn seal(manifest_sha256: &str, run_id: &str, step: u64, key: Option<&KeyPair>) -> Self {
        let statement = json!({
            "_type": STATEMENT_TYPE,
            "subject": [{"name": MANIFEST_FILE, "digest": {"sha256": manifest_sha256}}],
            "predicateType": PREDICATE_TYPE,
            "predicate": {"run_id": run_id, "step": step},
        });
        let body = serde_json::to_vec(&statement).expect("statement serialises");
        let signatures = key
            .map(|k| {
                let sig = k.signing.sign(&pae(PAYLOAD_TYPE, &body));
                vec![EnvelopeSignature {
                    keyid: key_id(&k.verifying_key()),
                    sig: STANDARD.encode(sig.to_bytes()),
                }]
            })
            .unwrap_or_default();
        Self {
            payload: STANDARD.encode(&body),
            payload_type: PAYLOAD_TYPE.to_owned(),
            signatures,
        }
    }

    /// The envelope's bytes on disk.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut bytes = serde_json::to_vec_pretty(self).expect("envelope serialises");
        bytes.push(b'\n');
        bytes
    }

    /// Parses the envelope, checks its encoding, the payload type, the signatures against
    /// `trust`, and the statement; returns what it seals.
    pub fn open(bytes: &[u8], trust: &Trust) -> Result<Sealed, SealError> {
        let env: Envelope =
            serde_json::from_slice(bytes).map_err(|e| SealError::MalformedSeal(e.to_string()))?;
        // The seal is written in one canonical layout; any other bytes are not ours, even when
        // they parse to the same envelope (so no byte of a snapshot can change unnoticed).
        if env.to_bytes() != bytes {
            return Err(SealError::MalformedSeal(
                "the seal is not in canonical form".into(),
            ));
        }
        if env.payload_type != PAYLOAD_TYPE {
            return Err(SealError::UnsupportedSchema(format!(
                "payloadType {:?}",
                env.payload_type
            )));
        }
        let body = decode_b64(&env.payload).ok_or_else(|| {
            SealError::MalformedSeal("payload is not canonical padded base64".into())
        })?;
        if env.signatures.len() > 1 {
            return Err(SealError::MalformedSeal(format!(
                "{} signatures: a seal carries at most one",
                env.signatures.len()
            )));
        }
        if let Some(s) = env.signatures.first() {
            if s.keyid.len() != 64 || !s.keyid.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(SealError::MalformedSeal(format!(
                    "keyid {:?} is not the signing key's id (64 hex characters)",
                    s.keyid
                )));
            }
            // Checked whatever the trust: a seal that carries a signature carries a well-formed
            // one (an Ed25519 signature is 64 bytes), even where no key is asked to verify it.
            if decode_b64(&s.sig).is_none_or(|sig| sig.len() != 64) {
                return Err(SealError::MalformedSeal(
                    "the signature is not 64 bytes of canonical padded base64".into(),
                ));
            }
        }
        if let Trust::Keys(keys) = trust {
            env.check_signatures(&body, keys)?;
        }
        let statement: Value =
            serde_json::from_slice(&body).map_err(|e| SealError::MalformedSeal(e.to_string()))?;
        if serde_json::to_vec(&statement).ok().as_deref() != Some(body.as_slice()) {
            return Err(SealError::MalformedSeal(
                "the statement is not in canonical form".into(),
            ));
        }
        if statement["_type"] != STATEMENT_TYPE {
            return Err(SealError::UnsupportedSchema(format!(
                "statement _type {}",
                statement["_type"]
            )));
        }
        if statement["predicateType"] != PREDICATE_TYPE {
            return Err(SealError::UnsupportedSchema(format!(
                "predicateType {}",
                statement["predicateType"]
            )));
        }
        let subjects = statement["subject"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        let manifest_sha256 = match subjects {
            [subject] if subject["name"] == MANIFEST_FILE => subject["digest"]["sha256"]
                .as_str()
                .map(str::to_owned)
                .ok_or_else(|| SealError::MalformedSeal("subject has no sha256 digest".into()))?,
            _ => {
                return Err(SealError::MalformedSeal(
                    "the statement must have one MANIFEST.json subject".into(),
                ));
            }
        };
        let predicate = &statement["predicate"];
        match (predicate["run_id"].as_str(), predicate["step"].as_u64()) {
            (Some(run_id), Some(step)) if predicate.as_object().is_some_and(|p| p.len() == 2) => {
                Ok(Sealed {
                    manifest_sha256,
                    run_id: run_id.to_owned(),
                    step,
                })
            }
            _ => Err(SealError::MalformedSeal(
                "the predicate must be exactly {\"run_id\", \"step\"}".into(),
            )),
        }
    }

    fn check_signatures(&self, body: &[u8], keys: &[VerifyingKey]) -> Result<(), SealError> {
        let message = pae(&self.payload_type, body);
        let mut bad_trusted = None;
        for s in &self.signatures {
            let Some(sig) = decode_b64(&s.sig).and_then(|b| Signature::from_slice(&b).ok()) else {
                bad_trusted.get_or_insert_with(|| s.keyid.clone());
                continue;
            };
            for key in keys {
                if key.verify_strict(&message, &sig).is_ok() {
                    if s.keyid == key_id(key) {
                        return Ok(());
                    }
                    return Err(SealError::MalformedSeal(format!(
                        "keyid {:?} does not name the key that signed",
                        s.keyid
                    )));
                }
                if key_id(key) == s.keyid {
                    bad_trusted = Some(s.keyid.clone());
                }
            }
        }
        match bad_trusted {
            Some(keyid) => Err(SealError::BadSignature { keyid }),
            None => Err(SealError::UntrustedSigner {
                keyids: self.signatures.iter().map(|s| s.keyid.clone()).collect(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pae_matches_the_dsse_spec_vector() {
        assert_eq!(
            pae("http://example.com/HelloWorld", b"hello world"),
            b"DSSEv1 29 http://example.com/HelloWorld 11 hello world".to_vec()
        );
    }

    #[test]
    fn only_canonical_padded_base64_is_read() {
        assert_eq!(decode_b64("+/8="), Some(vec![0xfb, 0xff]));
        for other in ["-_8=", "-_8", "+/8", "+/9=", " +/8="] {
            assert_eq!(decode_b64(other), None, "{other}");
        }
    }

    fn key() -> KeyPair {
        KeyPair::from_seed([3; 32])
    }

    /// `edit` applied to a signed seal of run `r-1` step 4, then opened with the key trusted.
    fn open_edited(edit: impl FnOnce(&mut Envelope)) -> Result<Sealed, SealError> {
        let mut env = Envelope::seal(&"a".repeat(64), "r-1", 4, Some(&key()));
        edit(&mut env);
        Envelope::open(&env.to_bytes(), &Trust::Keys(vec![key().verifying_key()]))
    }

    #[test]
    fn a_signature_that_is_not_base64_is_refused_even_without_a_key() {
        for sig in ["not base64!", "", "AAAA"] {
            let mut env = Envelope::seal(&"a".repeat(64), "r-1", 4, Some(&key()));
            env.signatures[0].sig = sig.to_owned();
            let err = Envelope::open(&env.to_bytes(), &Trust::DigestOnly).expect_err(sig);
            assert!(matches!(err, SealError::MalformedSeal(_)), "{sig:?}: {err}");
        }
        let env = Envelope::seal(&"a".repeat(64), "r-1", 4, Some(&key()));
        assert!(Envelope::open(&env.to_bytes(), &Trust::DigestOnly).is_ok());
    }

    #[test]
    fn one_seal_has_one_encoding() {
        let sealed = open_edited(|_| {}).expect("the seal as written");
        assert_eq!((sealed.run_id.as_str(), sealed.step), ("r-1", 4));
        let refused = |what: &str, edit: fn(&mut Envelope)| {
            let err = open_edited(edit).expect_err(what);
            assert!(
                matches!(
                    err,
                    SealError::MalformedSeal(_) | SealError::BadSignature { .. }
                ),
                "{what}: {err}"
            );
        };
        refused("unpadded payload", |e| {
            e.payload = e.payload.trim_end_matches('=').to_owned();
            assert!(
                e.payload.len() % 4 != 0,
                "the test payload must need padding"
            );
        });
        refused("URL-safe signature", |e| {
            let sig = &mut e.signatures[0].sig;
            *sig = sig.replace('+', "-").replace('/', "_");
            assert!(sig.contains(['-', '_']), "the test signature must differ");
        });
        refused("blank keyid", |e| e.signatures[0].keyid.clear());
        refused("a junk second signature", |e| {
            let mut junk = e.signatures[0].clone();
            junk.sig = STANDARD.encode([0u8; 64]);
            e.signatures.push(junk);
        });
        refused("a re-encoded statement", |e| {
            let body = STANDARD.decode(&e.payload).expect("b64");
            let value: Value = serde_json::from_slice(&body).expect("json");
            e.payload = STANDARD.encode(serde_json::to_vec_pretty(&value).expect("json"));
        });
    }
}
