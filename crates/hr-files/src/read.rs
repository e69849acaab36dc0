//! Reading an input file whose size the reader bounds: a FIFO or a device named where a file
//! belongs is refused at once instead of blocking, and a file above the bound is refused before
//! its bytes are read.

use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// The most a JSON file that configures something (a plan, a model's `config.json` or
/// `tokenizer_config.json`, an adapter's config) may hold.
pub const MAX_CONFIG_BYTES: u64 = 64 << 20;

/// The regular file at `path`, opened for reading; `InvalidInput` when it is not one (a FIFO, a
/// device, a folder), found without blocking on a FIFO that has no writer.
pub fn open_regular(path: &Path) -> std::io::Result<std::fs::File> {
    // Non-blocking, so that opening a FIFO returns at once; a regular file ignores the flag.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NONBLOCK.bits().cast_signed())
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a regular file (a FIFO, device or folder cannot be read as one)",
        ));
    }
    Ok(file)
}

/// The bytes of the regular file at `path` ([`open_regular`]), refused with `FileTooLarge` when
/// it holds more than `limit`.
pub fn read_bounded(path: &Path, limit: u64) -> std::io::Result<Vec<u8>> {
    let file = open_regular(path)?;
    let meta = file.metadata()?;
    let too_large = |size: u64| {
        std::io::Error::new(
            std::io::ErrorKind::FileTooLarge,
            format!("{size} bytes, above the {limit} bytes read from such a file"),
        )
    };
    if meta.len() > limit {
        return Err(too_large(meta.len()));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    // The file may grow after the size was read: never more than the bound.
    file.take(limit.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(too_large(bytes.len() as u64));
    }
    Ok(bytes)
}

/// [`read_bounded`] as UTF-8 text (`InvalidData` when it is not).
pub fn read_to_string_bounded(path: &Path, limit: u64) -> std::io::Result<String> {
    String::from_utf8(read_bounded(path, limit)?)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fifo_is_refused_at_once_and_a_large_file_before_it_is_read() {
        let dir = tempfile::tempdir().expect("tmp");
        let fifo = dir.path().join("plan.json");
        rustix::fs::mkfifoat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::Mode::RUSR | rustix::fs::Mode::WUSR,
        )
        .expect("mkfifo");
        let err = read_bounded(&fifo, 10).expect_err("a FIFO");
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput, "{err}");
        let err = read_bounded(dir.path(), 10).expect_err("a folder");
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput, "{err}");
        let file = dir.path().join("data.jsonl");
        std::fs::write(&file, "0123456789").expect("write");
        assert_eq!(
            read_to_string_bounded(&file, 10).expect("at the bound"),
            "0123456789"
        );
        let err = read_bounded(&file, 9).expect_err("above the bound");
        assert_eq!(err.kind(), std::io::ErrorKind::FileTooLarge, "{err}");
    }
}
