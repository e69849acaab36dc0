//! Sealed snapshots: the on-disk format and its commit protocol. A snapshot is a folder of
//! payload files (`payload/...`, roles declared by the caller), a `MANIFEST.json` listing every
//! file with size, sha256 and role together with the run identity, step, parent, source binding,
//! config digest and evidence prefixes, and `SEAL.dsse.json`, written last: a DSSE envelope over an
//! in-toto Statement v1 whose subject is the manifest's sha256, signed with Ed25519 when a key is
//! configured. [`verify`] runs the checks in a fixed order, cheap to expensive, and fails closed
//! with one typed [`SealError`] per failure; [`SnapshotWriter`] writes a snapshot in its folder,
//! seals it and commits by linking the seal create-only, so two writers of one folder cannot
//! both win.
//!
//! This crate is synchronous and local: it knows nothing about Determined, the network, or
//! tensors. Where a snapshot lives and who publishes it is `hr-snapshot`'s business.

mod commit;
mod digest;
mod dsse;
mod error;
mod manifest;
mod safetensors;
mod verify;
mod writer;

pub use commit::{CommitOutcome, fsync_dir};
pub use digest::{hash_file, hash_files, sha256_hex};
pub use dsse::{
    Envelope, KeyPair, PAYLOAD_TYPE, PREDICATE_TYPE, STATEMENT_TYPE, Sealed, Trust, key_id, pae,
    parse_verifying_key,
};
pub use ed25519_dalek::VerifyingKey;
pub use error::SealError;
pub use manifest::{
    EvidencePrefix, FileEntry, MANIFEST_FILE, Manifest, ParentRef, ROOT_FILES, RunIdentity,
    SCHEMA_VERSION, SEAL_FILE, SourceBinding, validate_payload_path,
};
pub use verify::{Expectations, Verified, verify};
pub use writer::{SealedSnapshot, SnapshotWriter, Stage};
