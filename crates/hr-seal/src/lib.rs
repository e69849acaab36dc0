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
//!
//! # In detail
//!
//! The sealed snapshot format and its commit protocol (`checkpoints.md` §4). A snapshot folder
//! holds `payload/...` (roles declared by the caller), at most PEFT's two adapter files beside it
//! (`ROOT_FILES`, listed and hashed like the payload, so a downloaded checkpoint loads in PEFT as
//! it is), `MANIFEST.json` (schema version, `hash_alg`, run id and writer, step, parent digest,
//! source binding, config digest, files sorted with size, sha256 and role, evidence prefixes, tool
//! versions) and `SEAL.dsse.json`, written last: a DSSE envelope over an in-toto Statement v1 whose
//! one subject is the manifest's sha256, Ed25519-signed when a key is given. `SnapshotWriter`
//! hashes while writing (constant memory), fsyncs files and folders, and commits create-only: the
//! snapshot is written in its final folder (a Determined UUID folder, or a local Core context's)
//! and the seal is linked to its name last, refused when one is there.
//!
//! `verify` runs the checks in a fixed order and returns one typed `SealError` per failure (the
//! file set holds regular files with UTF-8 names only: a link, FIFO or device, even as
//! `MANIFEST.json`, is refused before it is opened, and so is an empty folder);
//! `Verified::read_file` re-checks a file's size and sha256 as it reads it, and restore and
//! `evaluate` load payloads only through it (a file swapped after verification is refused, not
//! loaded). Which snapshot a run adopts, and in what order snapshots are chained, is
//! `hr-snapshot`'s and `hr-core`'s business (the Core context's checkpoint list), not this crate's.
//!
//! `Stage` hooks are the fault points: the fault tests stop a writer at each and check that nothing
//! verifies before its seal is linked and that the last good snapshot is untouched.

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
