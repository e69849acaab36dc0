//! Streaming sha256 (constant memory), in parallel across files.

use hr_files::IoResultExt;
use std::{
    fs::File,
    io::Read,
    path::{Path, PathBuf},
    sync::{
        Mutex,
        atomic::{AtomicUsize, Ordering},
    },
};

use sha2::{Digest, Sha256};

use crate::SealError;

const BUFFER: usize = 1 << 20;

/// Hex sha256 of bytes.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Streams a file through sha256; returns (size, hex digest).
pub fn hash_file(path: &Path) -> Result<(u64, String), SealError> {
    let mut file = File::open(path).at("open", path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; BUFFER];
    let mut size = 0u64;
    loop {
        let n = file.read(&mut buf).at("read", path)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        size += n as u64;
    }
    Ok((size, hex::encode(hasher.finalize())))
}

/// (size, hex sha256) of one file, or why it could not be read.
type Hashed = Result<(u64, String), SealError>;

/// Hashes many files on up to `available_parallelism` threads; results are in input order.
pub fn hash_files(paths: &[PathBuf]) -> Vec<Hashed> {
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(paths.len().max(1));
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<Hashed>>> = Mutex::new((0..paths.len()).map(|_| None).collect());
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(path) = paths.get(i) else { break };
                    let result = hash_file(path);
                    results.lock().expect("hash results lock")[i] = Some(result);
                }
            });
        }
    });
    results
        .into_inner()
        .expect("hash results lock")
        .into_iter()
        .map(|r| r.expect("every file hashed"))
        .collect()
}
