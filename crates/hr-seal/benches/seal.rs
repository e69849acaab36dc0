//! Seal and verify throughput next to coreutils `sha256sum` on the same files. Run with
//! `cargo xtask bench seal` (or `cargo bench -p hr-seal --bench seal -- --size-mib N`). Files are
//! written once and read warm from the page cache by every contender, so the figures compare
//! hashing and bookkeeping, not the disk.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::{
    io::Write,
    path::{Path, PathBuf},
    process::Command,
    time::Instant,
};

use hr_seal::{
    Expectations, KeyPair, RunIdentity, SnapshotWriter, SourceBinding, Trust, hash_files, verify,
};

const FILES: usize = 8;

fn write_inputs(dir: &Path, total: u64) -> Vec<PathBuf> {
    let per_file = total / FILES as u64;
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut chunk = vec![0u8; 1 << 20];
    (0..FILES)
        .map(|i| {
            let path = dir.join(format!("part-{i}.bin"));
            let mut file =
                std::io::BufWriter::new(std::fs::File::create(&path).expect("create input"));
            let mut left = per_file;
            while left > 0 {
                for b in chunk.iter_mut() {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    *b = state as u8;
                }
                let n = left.min(chunk.len() as u64) as usize;
                file.write_all(&chunk[..n]).expect("write input");
                left -= n as u64;
            }
            file.flush().expect("flush");
            path
        })
        .collect()
}

fn best_of<T>(runs: usize, mut f: impl FnMut() -> T) -> f64 {
    (0..runs)
        .map(|_| {
            let t = Instant::now();
            std::hint::black_box(f());
            t.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let size_mib: u64 = args
        .iter()
        .position(|a| a == "--size-mib")
        .and_then(|i| args.get(i + 1))
        .and_then(|s| s.parse().ok())
        .unwrap_or(1024);
    let total = size_mib << 20;
    let tmp = tempfile::tempdir().expect("tempdir");
    eprintln!(
        "writing {FILES} input files, {size_mib} MiB in total, under {}",
        tmp.path().display()
    );
    let inputs = write_inputs(tmp.path(), total);
    let mib = total as f64 / (1 << 20) as f64;

    let sha256sum = best_of(3, || {
        let out = Command::new("sha256sum")
            .args(&inputs)
            .output()
            .expect("run sha256sum");
        assert!(out.status.success(), "sha256sum failed");
    });
    let hashed = best_of(3, || hash_files(&inputs));
    let key = KeyPair::from_seed([1; 32]);
    let store = tmp.path().join("store");
    let mut n = 0;
    let mut last = PathBuf::new();
    let seal = best_of(3, || {
        n += 1;
        let run = RunIdentity {
            run_id: "bench".into(),
            writer: "bench".into(),
        };
        let source = SourceBinding {
            commit: "bench".into(),
            tree_sha256: None,
            cargo_lock_sha256: None,
            binary_sha256: None,
        };
        last = store.join(format!("snap-{n}"));
        let mut w = SnapshotWriter::in_place(&last, run, n, source, "cfg".into());
        for (i, input) in inputs.iter().enumerate() {
            w.add_file(&format!("payload/part-{i}.bin"), "data", input)
                .expect("add");
        }
        w.seal(Some(&key)).expect("seal").commit().expect("commit");
    });
    let expect = Expectations {
        trust: Trust::Keys(vec![key.verifying_key()]),
        ..Expectations::default()
    };
    let verified = best_of(3, || verify(&last, &expect).expect("verify"));

    println!();
    println!(
        "| operation ({size_mib} MiB, {FILES} files, warm cache, best of 3) | seconds | MiB/s | throughput vs sha256sum |"
    );
    println!("|---|---:|---:|---:|");
    for (name, secs) in [
        ("sha256sum (coreutils, one process)", sha256sum),
        ("hr-seal hash_files (parallel streaming sha256)", hashed),
        (
            "hr-seal seal (copy + hash + fsync + manifest + signed seal + commit)",
            seal,
        ),
        (
            "hr-seal verify (seal, identity, file set, sizes, parallel sha256)",
            verified,
        ),
    ] {
        println!(
            "| {name} | {secs:.3} | {:.0} | {:.2}x |",
            mib / secs,
            sha256sum / secs
        );
    }
}
